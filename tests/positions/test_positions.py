"""Position schemes: Su's equations, agreement with Qwen2-VL, shift invariance and layout properties."""

from __future__ import annotations

import functools
import math
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_qwen_vl_positions import batch as padded  # ("text", n) / ("image" | "video", grid) items, padded

from roformer_ext.position_schemes import (
    Segment,
    get_position_scheme,
    register_position_scheme,
    registered_position_schemes,
)
from roformer_ext.positions import build_position_ids

IMAGE, VIDEO = 90, 91
SCHEME_AXES = {"rope_1d": 2, "rope_2d_rows": 2, "rope_tie": 2, "rope_tie_v2": 2, "mrope": 3}
DIAGONAL = ("rope_1d", "rope_tie", "rope_tie_v2", "mrope")  # text is (n, n[, n]) in these


def make_config(scheme: str, axes: int) -> types.SimpleNamespace:
    rope = {"position_scheme": scheme, "axes": axes}
    return types.SimpleNamespace(rope_parameters=rope, image_token_id=IMAGE, video_token_id=VIDEO)


def batch(layouts: list[list], left_pads: list[int], right_pads: list[int]):
    """input_ids, attention_mask and grids of padded samples; every row has the same length."""
    return padded(layouts, left_pads, right_pads)[:4]


def positions_of(layout: list, scheme: str, axes: int) -> tuple[torch.Tensor, float]:
    """Positions (axes, tokens) and delta of one unpadded sample."""
    input_ids, _, images, videos = batch([layout], [0], [0])
    position_ids, deltas = build_position_ids(input_ids, make_config(scheme, axes), images, videos)
    return position_ids[:, 0], deltas[0, 0].item()


# --- Registry ---------------------------------------------------------------------------------------------------------


def test_unknown_scheme_lists_registered_names():
    assert set(SCHEME_AXES) <= set(registered_position_schemes())
    with pytest.raises(ValueError, match="rope_tie_v2") as error:
        build_position_ids(torch.ones(1, 3, dtype=torch.long), make_config("nope", 1))
    assert "nope" in str(error.value) and "mrope" in str(error.value)


def test_register_custom_scheme():
    seen = []

    @register_position_scheme("test_reversed")
    def reversed_positions(segments, axes):
        seen.extend(segments)
        total = sum(segment.length for segment in segments)
        return torch.arange(total, 0, -1, dtype=torch.float32).expand(axes, -1), -1.0

    input_ids, mask, images, videos = batch([[("text", 1), ("image", (1, 1, 2)), ("video", (2, 1, 1))]], [2], [0])
    position_ids, deltas = build_position_ids(input_ids, make_config("test_reversed", 1), images, videos, mask)
    assert position_ids.tolist() == [[[0, 0, 5, 4, 3, 2, 1]]] and deltas.tolist() == [[-6.0]]
    assert seen == [Segment("text", 1), Segment("image", 2, (1, 1, 2)), Segment("video", 2, (2, 1, 1))]
    assert get_position_scheme("test_reversed") is reversed_positions
    with pytest.raises(ValueError, match="already registered"):
        register_position_scheme("test_reversed")(reversed_positions)
    register_position_scheme("test_reversed", overwrite=True)(reversed_positions)


# --- (a) Su's equations -----------------------------------------------------------------------------------------------


def test_default_layout_values():
    """The README's example: 5 text tokens, a 3x4 image, 4 text tokens."""
    layout = [("text", 5), ("image", (1, 3, 4)), ("text", 4)]
    tie, _ = positions_of(layout, "rope_tie", 2)
    assert tie.T[[5, 16, 17]].tolist() == [[9, 8], [19, 20], [24, 24]]
    tie_v2, _ = positions_of(layout, "rope_tie_v2", 2)
    assert tie_v2.T[[5, 16, 17]].tolist() == [[9.5, 9], [11.5, 12], [17, 17]]
    rows, _ = positions_of(layout, "rope_2d_rows", 2)
    assert rows.T[[0, 4, 5, 16, 17, 20]].tolist() == [[0, 0], [0, 4], [1, 0], [3, 3], [4, 0], [4, 3]]
    assert torch.equal(positions_of(layout, "rope_tie_v2", 3)[0][:2], tie_v2)  # an image in a video config: 2D form


#: (text before, t, h, w): t = 0 is an image (1, h, w) on 2 axes, else a video on 3 axes
tie_layouts = st.one_of(
    st.tuples(st.integers(1, 6), st.just(0), st.integers(1, 6), st.integers(1, 6)),
    st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
)


@pytest.mark.parametrize("scheme", ["rope_tie", "rope_tie_v2"])
@settings(max_examples=400, deadline=None)
@given(tie_layouts)
def test_tie_equations(scheme, sizes):
    """Su's equations over axes (h, w[, t]) of sizes d_a, P patches, last text L: v1 puts index n of axis a at
    L + n·Π_{b≠a}(d_b + 1), next text L + Π(d + 1); v2 at L + (P − d_a)/2 + n, next text L + P + 1."""
    before, t, h, w = sizes
    item, dims, cube = (("video", (t, h, w)), (h, w, t), (t, h, w)) if t else (("image", (1, h, w)), (h, w), (h, w))
    positions, _ = positions_of([("text", before), item, ("text", 1)], scheme, len(dims))
    count = math.prod(dims)
    p = positions.T
    last_text, first, last, next_text = p[before - 1], p[before], p[before + count - 1], p[before + count]
    L = last_text[0].item()
    grid = p[before : before + count].reshape(*cube, len(dims))
    indices = torch.meshgrid(*(torch.arange(1, d + 1) for d in cube), indexing="ij")
    by_axis = (indices[1], indices[2], indices[0]) if t else indices  # (t, h, w) order -> the axes' (h, w, t)
    if scheme == "rope_tie":
        span = math.prod(d + 1 for d in dims)
        steps = [span // (d + 1) for d in dims]
        for axis, index in enumerate(by_axis):
            assert torch.equal(grid[..., axis], L + index * steps[axis])
        assert next_text.tolist() == [L + span] * len(dims)
        assert (first - last_text).tolist() == steps == (next_text - last).tolist()
    else:
        for axis, index in enumerate(by_axis):
            assert torch.equal(grid[..., axis], L + (count - dims[axis]) / 2 + index)
        assert next_text.tolist() == [L + count + 1] * len(dims)
        assert torch.equal(first - last_text, next_text - last)


# --- (b) mrope against transformers' Qwen2-VL -------------------------------------------------------------------------


def transformers_rope_index(input_ids, attention_mask, images, videos):
    """transformers' `Qwen2VLModel.get_rope_index`, unbound, with spatial_merge_size 1 (our grids are merged)."""
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    config = types.SimpleNamespace(vision_config=types.SimpleNamespace(spatial_merge_size=1))
    vision_positions = functools.partial(Qwen2VLModel.get_vision_position_ids, None)
    model = types.SimpleNamespace(config=config, get_vision_position_ids=vision_positions)
    token_types = (input_ids == IMAGE).long() + 2 * (input_ids == VIDEO).long()
    return Qwen2VLModel.get_rope_index(model, input_ids, token_types, images, videos, attention_mask)


def original_qwen2vl_positions(layout: list) -> tuple[list[list[int]], int]:
    """The original Qwen2-VL rule, token by token: (t, h, w) per token and the next text position."""
    positions, start = [], 0
    for kind, value in layout:
        if kind == "text":
            positions += [[start + n] * 3 for n in range(value)]
            start += value
        else:
            t, h, w = value
            positions += [[start + k, start + i, start + j] for k in range(t) for i in range(h) for j in range(w)]
            start = max(max(p) for p in positions) + 1
    return positions, start


text_len = st.integers(1, 4)
image = st.builds(lambda h, w: ("image", (1, h, w)), st.integers(1, 4), st.integers(1, 4))
video = st.builds(lambda t, h, w: ("video", (t, h, w)), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3))
any_vision = st.one_of(image, video)


@st.composite
def layouts(draw, vision=any_vision, max_vision: int = 3) -> list:
    """Text and vision segments; two vision items of one kind get text between them (one run is one item)."""
    layout = [("text", draw(text_len))] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(0, max_vision))):
        item = draw(vision)
        if layout and layout[-1][0] == item[0]:
            layout.append(("text", draw(text_len)))
        layout.append(item)
        if draw(st.booleans()):
            layout.append(("text", draw(text_len)))
    return layout or [("text", draw(text_len))]


@st.composite
def padded_batches(draw, vision=any_vision):
    samples = draw(st.lists(layouts(vision), min_size=1, max_size=2))
    left = draw(st.lists(st.integers(0, 3), min_size=len(samples), max_size=len(samples)))
    right = draw(st.lists(st.integers(0, 3), min_size=len(samples), max_size=len(samples)))
    return samples, left, right


def video_fits(layout) -> bool:
    return all(kind != "video" or value[0] <= max(value[1:]) for kind, value in layout)


@settings(max_examples=300, deadline=None)
@given(padded_batches())
def test_mrope_matches_transformers_get_rope_index(drawn):
    samples, left, right = drawn
    # transformers agrees with the original Qwen2-VL only when every video has t <= max(h, w); see below
    samples = [layout for layout in samples if video_fits(layout)] or [[("text", 2)]]
    input_ids, mask, images, videos = batch(samples, left[: len(samples)], right[: len(samples)])
    ours, our_deltas = build_position_ids(input_ids, make_config("mrope", 3), images, videos, mask)
    theirs, their_deltas = transformers_rope_index(input_ids, mask, images, videos)
    assert torch.equal(ours, theirs.float())
    assert torch.equal(our_deltas, their_deltas.float())


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_mrope_matches_original_qwen2vl(layout):
    positions, delta = positions_of(layout, "mrope", 3)
    expected, next_text = original_qwen2vl_positions(layout)
    assert positions.T.tolist() == expected and delta == next_text - len(expected)


def test_transformers_advances_by_max_h_w_after_a_video():
    """transformers moves text after a video by max(h, w), not max(t, h, w); we follow the original Qwen2-VL."""
    layout = [("text", 2), ("video", (4, 2, 3)), ("text", 2)]
    input_ids, mask, _, videos = batch([layout], [0], [0])
    ours, our_delta = build_position_ids(input_ids, make_config("mrope", 3), None, videos, mask)
    theirs, their_delta = transformers_rope_index(input_ids, mask, None, videos)
    assert torch.equal(ours[:, :, :26], theirs[:, :, :26].float())  # text and video agree
    assert ours[:, 0, 26:].T.tolist() == [[6, 6, 6], [7, 7, 7]]  # 2 + max(4, 2, 3)
    assert theirs[:, 0, 26:].T.tolist() == [[5, 5, 5], [6, 6, 6]]  # 2 + max(2, 3): t-axis 5 is the last frame's
    assert theirs[0, 0, :26].max() == 5
    assert our_delta.item() == 8 - 28 and their_delta.item() == 7 - 28  # theirs: max + 1 - tokens


# --- (d) A common shift of all positions leaves attention scores unchanged --------------------------------------------


@pytest.mark.parametrize("scheme", sorted(SCHEME_AXES))
@pytest.mark.parametrize("pair_layout", ["interleaved", "half"])
def test_shift_leaves_attention_scores_unchanged(scheme, pair_layout):
    from roformer_ext.rope import RotaryEmbedding, apply_rotary

    axes = SCHEME_AXES[scheme]
    allocation = dict(axis_allocation="sections", mrope_section=[4, 6, 6]) if scheme == "mrope" else {}
    rope = dict(rope_type="default", rope_theta=10000.0, pair_layout=pair_layout, axes=axes, **allocation)
    config = types.SimpleNamespace(
        rope_parameters={"axis_allocation": "interleaved", **rope},
        hidden_size=64,
        num_attention_heads=2,
        head_dim=32,
        max_position_embeddings=512,
    )
    rotary = RotaryEmbedding(config)
    layout = [("text", 4), ("image", (1, 3, 4)), ("text", 3), ("image", (1, 2, 2)), ("text", 2)]
    position_ids = positions_of(layout, scheme, axes)[0][:, None]  # (axes, batch 1, seq)
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 2, position_ids.shape[-1], 32, generator=generator)  # (batch, heads, seq, head_dim)

    def scores(positions):
        cos, sin = rotary(q, positions)
        return apply_rotary(q, cos, sin, pair_layout) @ apply_rotary(k, cos, sin, pair_layout).transpose(-1, -2)

    reference = scores(position_ids)
    for shift in (1.0, 37.5, 300.0):  # the rotary works in float32: keep angles where it is exact to ~1e-4
        torch.testing.assert_close(scores(position_ids + shift), reference, rtol=1e-4, atol=1e-4)
    moved = position_ids.clone()
    moved[..., 4:16] += 3.0  # moving only the first image is not a common shift: scores change
    assert not torch.allclose(scores(moved), reference, rtol=1e-4, atol=1e-4)


# --- (e) Properties of every scheme on random padded batches ----------------------------------------------------------


def check_vision_grid(block: np.ndarray, grid: tuple, scheme: str) -> None:
    """Patches are distinct and lie on a regular grid: each axis depends on one index only, with a fixed step."""
    t, h, w = grid
    axes = block.shape[0]
    assert len(np.unique(block, axis=1).T) == t * h * w
    if scheme == "rope_1d":
        assert (block == block[:1]).all() and (np.diff(block[0]) == 1).all()
        return
    cube = block.reshape(axes, t, h, w)
    order = (0, 1, 2) if scheme == "mrope" else (1, 2, 0)  # which of the (t, h, w) indices drives each axis
    for axis in range(axes):
        values = np.moveaxis(cube[axis], order[axis], 0).reshape(cube.shape[1 + order[axis]], -1)
        assert (values == values[:, :1]).all()  # depends on its own index only
        steps = np.diff(values[:, 0])
        assert (steps > 0).all() and (steps == steps[:1]).all()


def check_sample(positions: np.ndarray, layout: list, scheme: str) -> None:
    """Layout properties of one sample's real tokens (axes, tokens)."""
    assert np.isfinite(positions).all()
    start, previous_text, last_row = 0, -np.inf, -1
    for index, (kind, value) in enumerate(layout):
        length = value if kind == "text" else math.prod(value)
        block = positions[:, start : start + length]
        if kind != "text":
            check_vision_grid(block, value, scheme)
        if scheme == "rope_2d_rows":
            # Every segment starts a new row below the previous ones; text is (row, 0..n-1), patches (r+i, j).
            assert block[0].min() == last_row + 1 and block[1].min() == 0
            if kind == "text":
                assert (block[0] == block[0, 0]).all() and (block[1] == np.arange(length)).all()
            last_row = block[0].max()
        else:
            if kind == "text":
                assert (block == block[:1]).all() and (np.diff(block, axis=1) > 0).all()  # (n, n[, n]), increasing
            assert (block > previous_text).all()  # all of it comes after the last text token, on every axis
            if kind == "text":
                previous_text = block[:, -1:]
            elif index + 1 < len(layout) and layout[index + 1][0] == "text":
                assert (block < positions[:, start + length, None]).all()  # and before the next text token
        start += length


PROPERTY_AXES = {"rope_1d": (1, 3), "rope_2d_rows": (2, 3), "rope_tie": (2, 3), "rope_tie_v2": (2, 3), "mrope": (3,)}


@pytest.mark.parametrize("scheme", sorted(PROPERTY_AXES))
@settings(max_examples=1000, deadline=None)
@given(data=st.data())
def test_scheme_properties(scheme, data):
    axes = data.draw(st.sampled_from(PROPERTY_AXES[scheme]))
    samples, left, right = data.draw(padded_batches(any_vision if axes != 2 else image))
    config = make_config(scheme, axes)
    input_ids, mask, images, videos = batch(samples, left, right)
    position_ids, deltas = build_position_ids(input_ids, config, images, videos, mask)
    assert position_ids.shape == (axes, *input_ids.shape) and position_ids.dtype == torch.float32
    assert deltas.shape == (len(samples), 1)
    assert (position_ids[:, mask == 0] == 0).all()
    # The same samples with one more text token each and other padding (none left, right up to the longest).
    extended = [[*layout, ("text", 1)] for layout in samples]
    input_ids, extended_mask, images, videos = batch(extended, [0] * len(samples), [0] * len(samples))
    extended_ids, _ = build_position_ids(input_ids, config, images, videos, extended_mask)
    position_ids, deltas, mask = position_ids.numpy(), deltas.numpy(), mask.numpy().astype(bool)
    for b, layout in enumerate(samples):
        real = position_ids[:, b, mask[b]]
        check_sample(real, layout, scheme)
        more = extended_ids[:, b, extended_mask[b].bool()].numpy()
        assert (more[:, :-1] == real).all()  # padding and the next token moved no real token
        # generation continues at cache_position + delta (on the column axis for rows)
        axis = 1 if scheme == "rope_2d_rows" else slice(None)
        assert (more[axis, -1] == real.shape[1] + deltas[b, 0]).all()


def test_rope_1d_and_text_only_are_1d():
    """rope_1d gives every token one position on every axis; text alone is 1D in the diagonal schemes."""
    positions, delta = positions_of([("text", 2), ("image", (1, 2, 3)), ("text", 2)], "rope_1d", 3)
    assert torch.equal(positions, torch.arange(10.0).expand(3, -1)) and delta == 0
    for scheme in DIAGONAL:
        positions, delta = positions_of([("text", 6)], scheme, SCHEME_AXES[scheme])
        assert torch.equal(positions, torch.arange(6.0).expand(SCHEME_AXES[scheme], -1)) and delta == 0


def test_placeholders_without_a_grid_are_text():
    """As Qwen2-VL's get_rope_index: with no image_grid_thw, placeholder ids are laid out as text."""
    input_ids, _, _, _ = batch([[("text", 2), ("image", (1, 2, 2)), ("text", 1)]], [0], [0])
    config = make_config("rope_tie", 2)
    positions, deltas = build_position_ids(input_ids, config)
    assert positions[:, 0].tolist() == [list(map(float, range(7)))] * 2
    assert deltas.tolist() == [[0.0]]
