"""Qwen2.5-VL (time-aligned M-RoPE) and Qwen3-VL (interleaved M-RoPE) against transformers' own code."""

from __future__ import annotations

import functools
import math
import random
import types

import pytest
import torch

from roformer_ext import RoFormerExtVisionTextConfig
from roformer_ext.positions import build_position_ids
from roformer_ext.rope import RotaryEmbedding

IMAGE, VIDEO, PAD = 90, 91, 0
LAYOUTS = 150


def config(scheme: str, **knobs) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        rope_parameters={"position_scheme": scheme, "axes": 3, **knobs}, image_token_id=IMAGE, video_token_id=VIDEO
    )


def random_layout(rng: random.Random, frames_apart: bool = False) -> list[tuple[str, object]]:
    """("text", n) / ("image", (1, h, w)) / ("video", (t, h, w)) items, text between two vision items."""
    layout = [("text", rng.randint(1, 4))] if rng.random() < 0.7 else []
    for _ in range(rng.randint(0, 3)):
        kind = rng.choice(["image", "video"])
        grid = (1 if kind == "image" else rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 4))
        if layout and layout[-1][0] != "text":
            layout.append(("text", rng.randint(1, 3)))
        layout.append(("frames" if kind == "video" and frames_apart else kind, grid))
        if rng.random() < 0.5:
            layout.append(("text", rng.randint(1, 4)))
    return layout or [("text", rng.randint(1, 4))]


def encode(layout) -> tuple[list[int], list[tuple], list[tuple], list[tuple]]:
    """Ids, image grids, video grids (transformers') and video groups as in the tokens (ours: one per frame)."""
    ids, images, videos, groups = [], [], [], []
    for kind, value in layout:
        if kind == "text":
            ids += [1 + (len(ids) + k) % 50 for k in range(value)]
        elif kind == "image":
            ids += [IMAGE] * math.prod(value)
            images.append(value)
        else:
            t, h, w = value
            videos.append(value)
            if kind == "video":
                ids += [VIDEO] * (t * h * w)
                groups.append(value)
            for _ in range(t if kind == "frames" else 0):
                ids += [60] + [VIDEO] * (h * w)  # a timestamp token, then the frame
                groups.append((1, h, w))
    return ids, images, videos, groups


def batch(layouts: list[list], left_pads: list[int], right_pads: list[int]):
    """input_ids, attention_mask, image grids, video grids and video groups of padded samples of one width."""
    encoded = [encode(layout) for layout in layouts]
    width = max(left + len(ids) + right for (ids, *_), left, right in zip(encoded, left_pads, right_pads))
    rows, masks, grids = [], [], ([], [], [])
    for (ids, *sample_grids), left in zip(encoded, left_pads):
        right = width - left - len(ids)
        rows.append([PAD] * left + ids + [PAD] * right)
        masks.append([0] * left + [1] * len(ids) + [0] * right)
        for into, extra in zip(grids, sample_grids):
            into += extra
    return torch.tensor(rows), torch.tensor(masks), *(torch.tensor(g, dtype=torch.long) if g else None for g in grids)


def padded_batch(rng: random.Random, frames_apart: bool = False):
    samples = [random_layout(rng, frames_apart) for _ in range(rng.randint(1, 3))]
    pads = [(rng.randint(0, 3), rng.randint(0, 3)) for _ in samples]
    return samples, *batch(samples, *zip(*pads))


def transformers_rope_index(model_class, input_ids, mask, images, videos, **extra):
    """transformers' `get_rope_index`, unbound, on a stand-in model with spatial_merge_size 1."""
    vision_config = types.SimpleNamespace(spatial_merge_size=1, tokens_per_second=extra.pop("tokens_per_second", 2))
    model = types.SimpleNamespace(
        config=types.SimpleNamespace(vision_config=vision_config),
        get_vision_position_ids=functools.partial(model_class.get_vision_position_ids, None),
    )
    token_types = (input_ids == IMAGE).long() + 2 * (input_ids == VIDEO).long()
    return model_class.get_rope_index(model, input_ids, token_types, images, videos, attention_mask=mask, **extra)


def original_qwen2_5_vl(layout, seconds: list[float], tokens_per_second: int) -> tuple[list[list[int]], int]:
    """Qwen2.5-VL's original rule (vLLM's `get_input_positions`), token by token: segment at st = max(previous) + 1,
    frame k at st + int(k · tokens_per_second · seconds); (t, h, w) per token and the next text position."""
    positions, start, seconds = [], 0, iter(seconds)
    for kind, value in layout:
        if kind == "text":
            positions += [[start + n] * 3 for n in range(value)]
            start += value
            continue
        t, h, w = value
        interval = torch.tensor(next(seconds), dtype=torch.float32) * tokens_per_second if kind == "video" else 1
        frame = [int(k * interval) for k in range(t)]
        positions += [[start + frame[k], start + i, start + j] for k in range(t) for i in range(h) for j in range(w)]
        start = max(max(p) for p in positions) + 1
    return positions, start


def reaches_past(grid, seconds: float, tokens_per_second: int) -> bool:
    t, h, w = grid
    return int((t - 1) * float(torch.tensor(seconds, dtype=torch.float32) * tokens_per_second)) >= max(h, w)


def test_qwen2_5_vl_matches_transformers_get_rope_index():
    """Where no video's temporal extent reaches past max(h, w), ours = transformers'; elsewhere ours = the original
    rule, and transformers' up to the end of the first such video (it continues the text at st + max(h, w))."""
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    rng, agreed, diverged = random.Random(25), 0, 0
    for case in range(200):
        samples, input_ids, mask, images, videos, _ = padded_batch(rng)
        tokens_per_second = rng.choice([1, 2, 2, 4])
        seconds = [rng.choice([0.25, 0.5, 0.5, 1.0, 1.5]) for _ in range(0 if videos is None else len(videos))]
        second_per_grid_ts = torch.tensor(seconds) if seconds else None
        ours, our_deltas = build_position_ids(
            input_ids,
            config("qwen2_5_vl", tokens_per_second=tokens_per_second),
            images,
            videos,
            mask,
            second_per_grid_ts,
        )
        theirs, their_deltas = transformers_rope_index(
            Qwen2_5_VLModel,
            input_ids,
            mask,
            images,
            videos,
            second_per_grid_ts=second_per_grid_ts,
            tokens_per_second=tokens_per_second,
        )
        grids = [] if videos is None else videos.tolist()
        fits = not any(reaches_past(grid, s, tokens_per_second) for grid, s in zip(grids, seconds))
        message = f"case {case}: {samples}, seconds {seconds}, tokens_per_second {tokens_per_second}"
        if fits:
            agreed += 1
            assert torch.equal(ours, theirs.float()), message
            assert torch.equal(our_deltas, their_deltas.float()), message
            continue
        diverged += 1
        video_seconds = iter(seconds)
        for b, layout in enumerate(samples):
            sample_seconds = [next(video_seconds) for kind, _ in layout if kind == "video"]
            expected, next_text = original_qwen2_5_vl(layout, sample_seconds, tokens_per_second)
            real = mask[b].bool()
            assert ours[:, b, real].T.tolist() == expected, message
            assert our_deltas[b].item() == next_text - len(expected), message
            assert torch.equal(ours[:, b, ~real], torch.zeros_like(ours[:, b, ~real])), message
        first = 0
        for kind, value in samples[0]:
            first += value if kind == "text" else math.prod(value)
            if kind == "video":
                if reaches_past(value, seconds[0], tokens_per_second):
                    break
                seconds = seconds[1:]
        real = mask[0].bool()
        assert torch.equal(ours[:, 0, real][:, :first], theirs[:, 0, real][:, :first].float()), message
    assert agreed >= 100 and diverged >= 10, (agreed, diverged)


def test_qwen2_5_vl_text_after_a_long_video():
    """4 frames at 1 s per grid, 2 tokens per second: temporal indices 0, 2, 4, 6 after 2 text tokens (st = 2)."""
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    ids, _, videos, _ = encode([("text", 2), ("video", (4, 2, 3)), ("text", 2)])
    input_ids, videos, seconds = torch.tensor([ids]), torch.tensor(videos), torch.tensor([1.0])
    ours, our_delta = build_position_ids(input_ids, config("qwen2_5_vl"), None, videos, None, seconds)
    theirs, _ = transformers_rope_index(Qwen2_5_VLModel, input_ids, None, None, videos, second_per_grid_ts=seconds)
    assert ours[0, 0, 2:26].unique().tolist() == [2, 4, 6, 8]
    assert torch.equal(ours[:, :, :26], theirs[:, :, :26].float())
    assert ours[:, 0, 26:].T.tolist() == [[9, 9, 9], [10, 10, 10]]
    assert theirs[:, 0, 26:].T.tolist() == [[5, 5, 5], [6, 6, 6]]
    assert our_delta.item() == 11 - 28


def test_qwen3_vl_matches_transformers_get_rope_index():
    """Qwen3-VL separates frames by timestamp text; its `get_rope_index` splits each video's grid into t frames."""
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    rng, with_video = random.Random(3), 0
    for case in range(LAYOUTS):
        samples, input_ids, mask, images, videos, groups = padded_batch(rng, frames_apart=True)
        ours, our_deltas = build_position_ids(input_ids, config("qwen3_vl"), images, groups, mask)
        split = None if videos is None else videos.clone()  # transformers splits it in place
        theirs, their_deltas = transformers_rope_index(Qwen3VLModel, input_ids, mask, images, split)
        message = f"case {case}: {samples}"
        assert torch.equal(ours, theirs.float()), message
        assert torch.equal(our_deltas, their_deltas.float()), message
        with_video += videos is not None and int(videos[:, 0].max()) > 1
    assert with_video >= 30, with_video


def test_qwen3_vl_places_consecutive_frames_one_after_another():
    """Frames with nothing between: frame k starts at st + k·max(h, w), as Qwen3-VL places text-separated frames."""
    ids, _, videos, _ = encode([("text", 2), ("video", (3, 2, 3)), ("text", 1)])
    ours, delta = build_position_ids(torch.tensor([ids]), config("qwen3_vl"), None, torch.tensor(videos))
    for k in range(3):
        st = 2 + 3 * k
        frame = ours[:, 0, 2 + 6 * k : 8 + 6 * k]
        assert frame[0].tolist() == [st] * 6
        assert frame[1].tolist() == [st, st, st, st + 1, st + 1, st + 1]
        assert frame[2].tolist() == [st, st + 1, st + 2] * 2
    assert ours[:, 0, -1].tolist() == [11, 11, 11] and delta.item() == 12 - 21


@pytest.mark.parametrize("scheme", ["qwen2_5_vl", "qwen3_vl"])
def test_cos_sin_match_transformers(scheme):
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as qwen2_5
    from transformers.models.qwen3_vl import modeling_qwen3_vl as qwen3

    qwen3_vl = scheme == "qwen3_vl"
    section = [24, 20, 20] if qwen3_vl else [16, 24, 24]  # the models' own, head_dim 128
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section}
    sizes = dict(hidden_size=256, num_attention_heads=2, num_key_value_heads=2, head_dim=128)
    if qwen3_vl:
        their_rotary = qwen3.Qwen3VLTextRotaryEmbedding(
            qwen3.Qwen3VLTextConfig(**sizes, rope_parameters={**rope, "mrope_interleaved": True})
        )
        model_class = qwen3.Qwen3VLModel
    else:
        their_rotary = qwen2_5.Qwen2_5_VLRotaryEmbedding(qwen2_5.Qwen2_5_VLTextConfig(**sizes, rope_parameters=rope))
        model_class = qwen2_5.Qwen2_5_VLModel
    ours = {"position_scheme": scheme, "pair_layout": "half", "mrope_section": section}
    our_rotary = RotaryEmbedding(
        RoFormerExtVisionTextConfig(hidden_size=256, num_attention_heads=2, rope_parameters=ours)
    )
    rng = random.Random(6 if qwen3_vl else 5)
    for _ in range(10):
        _, input_ids, mask, images, videos, _ = padded_batch(rng, frames_apart=qwen3_vl)
        extra = {} if qwen3_vl or videos is None else {"second_per_grid_ts": torch.rand(len(videos)) * 2 + 0.1}
        position_ids, _ = transformers_rope_index(model_class, input_ids, mask, images, videos, **extra)
        cos, sin = our_rotary(torch.zeros(1), position_ids.float())
        their_cos, their_sin = their_rotary(torch.zeros(1), position_ids)
        torch.testing.assert_close(cos, their_cos, atol=1e-6, rtol=0)
        torch.testing.assert_close(sin, their_sin, atol=1e-6, rtol=0)
        assert cos.shape == (*input_ids.shape, 128)
