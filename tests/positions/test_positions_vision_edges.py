"""Exact positions of the vision position schemes, written out by hand from each scheme's definition (the knobs'
checks are the configuration's: test_scheme_knobs.py)."""

from __future__ import annotations

import math
import re

import pytest
import torch

from roformer_ext.configuration_roformer_ext import BUILTIN_SCHEMES
from roformer_ext.position_schemes import Segment, _in_text_plane, get_position_scheme, patch_indices


def T(n: int) -> Segment:
    return Segment("text", n)


def I(h: int, w: int) -> Segment:  # noqa: E743
    return Segment("image", h * w, (1, h, w))


def V(t: int, h: int, w: int, seconds: float | None = None, scale: float | None = None) -> Segment:
    return Segment("video", t * h * w, (t, h, w), seconds, scale)


def place(scheme: str, segments: list[Segment], axes: int, **knobs) -> tuple[list[list[float]], float]:
    block, next_pos = get_position_scheme(scheme)(segments, axes, **knobs)
    assert block.dtype == torch.float32 and block.shape == (axes, sum(s.length for s in segments))
    assert isinstance(next_pos, float)
    return block.tolist(), next_pos


def refused(phrase: str):
    return pytest.raises(ValueError, match=re.escape(phrase))


def test_patch_indices_are_frame_row_col_in_token_order() -> None:
    frames, rows, cols = patch_indices((2, 2, 3))
    assert frames.tolist() == [0] * 6 + [1] * 6
    assert rows.tolist() == [0, 0, 0, 1, 1, 1] * 2
    assert cols.tolist() == [0, 1, 2] * 4


_VROPE = [[0, 1, 1, 2], [1, 0, 2, 1], [1, 2, 0, 1], [2, 1, 1, 0]]  # (i, j) = (0,0), (0,1), (1,0), (1,1): the diagonals
#: (scheme, segments, axes, knobs, positions per axis, next text position), written out from each definition.
LAYOUTS = [
    ("rope_1d", [T(2), I(1, 2)], 2, {}, [[0, 1, 2, 3]] * 2, 4),
    # text row 0 (cols 0, 1); image 2x2 on rows 1, 2; text row 3; video (2, 1, 2) on row 4, frames 0 and 1; the
    # next text continues a new row after a trailing vision segment (column 0)
    ("rope_2d_rows", [T(2), I(2, 2), T(1), V(2, 1, 2)], 3, {},
     [[0, 0, 1, 1, 2, 2, 3, 4, 4, 4, 4], [0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1], [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]], 0),
    ("rope_2d_rows", [T(3)], 2, {}, [[0, 0, 0], [0, 1, 2]], 3),  # the last text row continues (column 3)
    ("rope_2d_rows", [T(3), I(1, 2)], 2, {}, [[0, 0, 0, 1, 1], [0, 1, 2, 0, 1]], 0),
    # L = 1, h = 2, w = 3: span (h+1)(w+1) = 12, row step w+1 = 4, col step h+1 = 3, patches 1-based
    ("rope_tie", [T(2), I(2, 3), T(1)], 2, {}, [[0, 1, 5, 5, 5, 9, 9, 9, 13], [0, 1, 4, 7, 10, 4, 7, 10, 13]], 14),
    # L = 0, (h, w, T) = (1, 2, 2): S = 2·3·3 = 18, steps 9, 6, 6
    ("rope_tie", [T(1), V(2, 1, 2)], 3, {}, [[0, 9, 9, 9, 9], [0, 6, 12, 6, 12], [0, 6, 6, 12, 12]], 18),
    # L = 1, image 2x3: P = 6, β1 = 1 + (6-2)/2 = 3, β2 = 1 + (6-3)/2 = 2.5, next L + P + 1 = 8
    ("rope_tie_v2", [T(2), I(2, 3)], 2, {}, [[0, 1, 4, 4, 4, 5, 5, 5], [0, 1, 3.5, 4.5, 5.5, 3.5, 4.5, 5.5]], 8),
    # L = -1 (no text before), video (T, h, w) = (2, 1, 3): P = 6, β = -1 + (6 - (1, 3, 2)) / 2 = (1.5, 0.5, 1)
    ("rope_tie_v2", [V(2, 1, 3)], 3, {}, [[2.5] * 6, [1.5, 2.5, 3.5] * 2, [2, 2, 2, 3, 3, 3]], 6),
    # st = 2, video (T, h, w) = (4, 1, 2): next st + max(4, 1, 2) = 6
    ("mrope", [T(2), V(4, 1, 2), T(1)], 3, {},
     [[0, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6], [0, 1] + [2] * 8 + [6], [0, 1] + [2, 3] * 4 + [6]], 7),
    # interval = seconds_per_grid · tokens_per_second: 1.5 · 1 -> frames floor(0, 1.5, 3) = 0, 1, 3
    ("qwen2_5_vl", [T(1), V(3, 1, 1, seconds=1.5)], 3, {"tokens_per_second": 1}, [[0, 1, 2, 4], [0, 1, 1, 1], [0, 1, 1, 1]], 5),
    # no seconds: 1.0 per grid, default 2 tokens per second -> frames 0, 2; an image stays at frame 0
    ("qwen2_5_vl", [V(2, 1, 2), I(2, 1)], 3, {}, [[0, 0, 2, 2, 3, 3], [0, 0, 0, 0, 3, 4], [0, 1, 0, 1, 3, 3]], 5),
    # st = 1, (T, h, w) = (2, 2, 3): frame 0 at st 1, frame 1 at st 1 + max(2, 3) = 4; text at 7
    ("qwen3_vl", [T(1), V(2, 2, 3), T(1)], 3, {}, [[0] + [1] * 6 + [4] * 6 + [7],
     [0, 1, 1, 1, 2, 2, 2, 4, 4, 4, 5, 5, 5, 7], [0, 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6, 7]], 8),
    # st = 1, (T, h, w) = (3, 1, 2), stride 2: t = 1, 3, 5; next st + max(4, 0, 1) + 1 = 6; with and without reset
    ("mrope_interleave", [T(1), V(3, 1, 2)], 3, {"temporal_stride": 2},
     [[0, 1, 1, 3, 3, 5, 5], [0] * 7, [0, 0, 1, 0, 1, 0, 1]], 6),
    ("mhrope", [T(1), V(3, 1, 2)], 3, {"temporal_stride": 2, "spatial_reset": False},
     [[0, 1, 1, 3, 3, 5, 5], [0] + [1] * 6, [0, 1, 2, 1, 2, 1, 2]], 6),
    # the spatial extent wins when it is the larger: st = 0, (1, 3, 2): next 0 + max(0, 2, 1) + 1 = 3
    ("ilrope", [I(3, 2)], 3, {}, [[0] * 6, [0, 0, 1, 1, 2, 2], [0, 1] * 3], 3),
    ("omnirope", [I(2, 4)], 3, {"temporal_stride": 5}, [[0] * 8, [0] * 4 + [1] * 4, [0, 1, 2, 3] * 2], 4),
    # st = 1, (T, h, w) = (2, 3, 4), stride 2: t = 1, 3; h = t + i - 1; w = t + j - 1; next 1 + 2 + 1 = 4
    ("videorope", [T(1), V(2, 3, 4)], 3, {}, [[0] + [1] * 12 + [3] * 12,
     [0] + [r + f for f in (0, 2) for r in (0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2)],
     [0] + [c + f for f in (0, 2) for c in (0, 1, 2, 3) * 3]], 4),
    # hope: the segment's drawn scale wins over temporal_stride
    ("hope", [V(3, 1, 1, scale=0.5)], 3, {"temporal_stride": 3}, [[0, 0.5, 1]] * 3, 2),
    ("hope", [V(3, 1, 1)], 3, {"temporal_stride": 3}, [[0, 3, 6]] * 3, 7),
    # 3 visual tokens after text at 0, 1 spanning stride 6: step 2 -> 3, 5, 7; next ceil(7) + 1 = 8
    ("v2pe", [T(2), I(1, 3), T(1)], 1, {"visual_stride": 6}, [[0, 1, 3, 5, 7, 8]], 9),
    # no text before: p = -1; a step per visual_stride_tokens, 1 / 4 -> -0.75, -0.5; next ceil(-0.5) + 1 = 1
    ("v2pe", [I(1, 2)], 2, {"visual_stride": 1, "visual_stride_tokens": 4}, [[-0.75, -0.5]] * 2, 1),
    ("v2pe", [I(1, 1)], 1, {"visual_stride_tokens": 1}, [[15.0]], 16),
    # st = 1, (T, h, w) = (2, 2, 2): span h + w - 1 = 3; frame k adds 3k; next 1 + 2·3 = 7
    ("vrope", [T(1), V(2, 2, 2), T(1)], 4, {}, [[0] + [1 + v for v in d] + [4 + v for v in d] + [7] for d in _VROPE], 8),
    # origin o = 2 (the first vision token's index), frames counted over the sample's vision segments
    ("mmrope", [T(2), I(1, 2), T(1), V(2, 1, 1)], 3, {"temporal_stride": 2, "position_scale": [1.0, 3.0, 5.0]},
     [[0, 1, 2, 2, 4, 4, 6], [0, 1, 2, 2, 4, 2, 2], [0, 1, 2, 7, 4, 2, 2]], 7),
]  # fmt: skip


@pytest.mark.parametrize(("scheme", "segments", "axes", "knobs", "positions", "next_pos"), LAYOUTS)
def test_each_scheme_places_tokens_as_written_out(scheme, segments, axes, knobs, positions, next_pos) -> None:
    assert place(scheme, segments, axes, **knobs) == (positions, float(next_pos))


@pytest.mark.parametrize(
    ("scheme", "segments", "axes", "phrase"),
    [("rope_2d_rows", [T(1)], 1, "'rope_2d_rows' needs 2 or 3 axes"), ("rope_2d_rows", [T(1)], 4, "needs 2 or 3 axes"),
     ("rope_2d_rows", [V(2, 1, 1)], 2, "needs 3 axes for a grid with t > 1 ((2, 1, 1))"),
     ("rope_tie", [I(1, 1)], 4, "'rope_tie' places vision on 2 or 3 axes"),
     ("rope_tie_v2", [I(1, 1)], 4, "'rope_tie_v2' places vision on 2 or 3 axes"),
     ("rope_tie", [V(2, 1, 1)], 2, "needs 3 axes for a video or a grid with t > 1"),
     ("rope_tie_v2", [V(2, 1, 1)], 2, "needs 3 axes for a video or a grid with t > 1"),
     ("rope_tie", [I(1, 1)], 1, "needs 2 axes (row, col) for an image"),
     ("rope_tie_v2", [I(1, 1)], 1, "needs 2 axes (row, col) for an image"),
     ("mrope", [T(1)], 2, "'mrope' needs 3 axes (t, h, w)"),
     ("circle_rope", [V(2, 1, 1)], 3, "'circle_rope' places images (grid t = 1); got a video grid")],
)  # fmt: skip
def test_a_layout_a_scheme_cannot_place_is_refused(scheme, segments, axes, phrase) -> None:
    with refused(phrase):
        place(scheme, segments, axes)


def test_su_schemes_place_text_alone_on_one_axis() -> None:
    for scheme in ("rope_tie", "rope_tie_v2"):
        assert place(scheme, [T(2)], 1) == ([[0, 1]], 2.0)


# Circle-RoPE: u = (-1, 1, 0)/√2 and v = (1, 1, 1)/√3 × u = (-1, -1, 2)/√6, in (w, h, t) order; a block is flipped to
# (t, h, w). The offsets are written out from those two vectors.
S2, S6 = math.sqrt(2), math.sqrt(6)


def circle(segments: list[Segment], **knobs) -> tuple[torch.Tensor, float]:
    block, next_pos = get_position_scheme("circle_rope")(segments, 3, **knobs)
    return block.double(), next_pos


def u_th_w(a: float) -> list[float]:  # a·u as (t, h, w)
    return [0.0, a / S2, -a / S2]


def v_th_w(a: float) -> list[float]:  # a·v as (t, h, w)
    return [2 * a / S6, -a / S6, -a / S6]


def columns(*points: list[float]) -> torch.Tensor:
    return torch.tensor(points, dtype=torch.float64).T


def test_circle_rope_one_patch_sits_at_radius_along_u() -> None:
    # a 1x1 image: centred at 0, angle 0 -> (R, 0) in the plane -> R·u; text since the start (2) is added
    block, next_pos = circle([T(2), I(1, 1), T(1)], circle_radius=3)
    first = [2 + c for c in u_th_w(3)]
    expected = columns([0] * 3, [1] * 3, first, [max(first) + 1] * 3)
    torch.testing.assert_close(block, expected, atol=1e-5, rtol=0)
    assert next_pos == pytest.approx(max(first) + 2, abs=1e-5)


RING = columns(u_th_w(-2), v_th_w(2))  # a centred 1x2 image at R = 2, α = 0.5


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [  # 1x2 centred: x = -0.5, 0.5, y = 0: grid angles π, 0 stretched over [0, 2π] -> 2π, 0; by index 0, π;
        # α = 0.5 -> π, π/2: the points -R·u and R·v
        ({"circle_radius": 2}, RING),
        # uncentred: x = 0, 1 -> both grid angles 0 (no spread, not stretched); α = 0.5 -> 0, π/2: R·u and R·v
        ({"circle_radius": 2, "circle_move_to_origin": False}, columns(u_th_w(2), v_th_w(2))),
        # α = 1: the grid angles alone (2π, 0): R·u twice; α = 0: by index (0, π): R·u and -R·u
        ({"circle_radius": 2, "circle_alpha": 1}, columns(u_th_w(2), u_th_w(2))),
        ({"circle_radius": 2, "circle_alpha": 0}, columns(u_th_w(2), u_th_w(-2))),
        # "auto-4": R = the largest centred coordinate (0.5) times 4 = 2; "auto": times 1; "auto-2e-1": times 0.2
        ({"circle_radius": "auto-4"}, RING),
        ({"circle_radius": "auto"}, columns(u_th_w(-0.5), v_th_w(0.5))),
        ({"circle_radius": "auto-2e-1"}, columns(u_th_w(-0.1), v_th_w(0.1))),
        # dff_rate d: (1 - d)·ring + d·(x·u + y·v), x = -0.5, 0.5
        ({"circle_radius": 2, "circle_dff_rate": 0.25}, 0.75 * RING + 0.25 * columns(u_th_w(-0.5), u_th_w(0.5))),
        ({"circle_radius": 2, "circle_alpha": 0, "circle_dff_rate": 1}, columns(u_th_w(-0.5), u_th_w(0.5))),
        # move_to_positive: + |min| + offset (the minimum is -2/√2)
        ({"circle_radius": 2, "circle_move_to_positive": 0.5}, RING + 2 / S2 + 0.5),
        ({"circle_radius": 2, "circle_move_to_positive": 0}, RING + 2 / S2),
    ],
)
def test_circle_rope_places_two_patches_as_written_out(knobs, expected) -> None:
    torch.testing.assert_close(circle([I(1, 2)], **knobs)[0], expected, atol=1e-6, rtol=0)


def test_circle_rope_text_after_two_images_counts_from_each_blocks_max() -> None:
    # image 1 at start 0: max R/√2 = √2 (R = 2); text after at √2 + 1; image 2 after 1 text token: + text_since 1
    block, next_pos = circle([I(1, 1), T(1), I(1, 1), T(2)], circle_radius=2)
    start = 2 / S2 + 1
    second = [start + 1 + c for c in u_th_w(2)]
    after = max(second) + 1
    expected = columns([c for c in u_th_w(2)], [start] * 3, second, [after] * 3, [after + 1] * 3)
    torch.testing.assert_close(block, expected, atol=1e-5, rtol=0)
    assert next_pos == pytest.approx(after + 2, abs=1e-5)
    assert circle([], circle_radius=2)[1] == 0.0


def test_default_temporal_strides_and_empty_samples() -> None:
    # mrope_interleave / mhrope / ilrope step frames by 1 unless told; videorope by 2; hope by 1
    video = [V(2, 1, 1)]
    for scheme in ("mrope_interleave", "mhrope", "ilrope", "omnirope"):
        assert place(scheme, video, 3) == ([[0, 1], [0, 0], [0, 0]], 2.0), scheme
    assert place("videorope", video, 3) == ([[0, 2], [0, 2], [0, 2]], 3.0)  # the diagonal layout: h, w follow t
    assert place("hope", video, 3) == ([[0, 1], [0, 1], [0, 1]], 2.0)
    assert place("mmrope", video, 3) == ([[0, 1], [0, 0], [0, 0]], 2.0)
    assert place("qwen2_5_vl", [Segment("video", 2, (2, 1, 1), 1.0)], 3) == ([[0, 2], [0, 0], [0, 0]], 3.0)
    # no segments: (axes, 0) positions, the next text at 0 (v2pe: last -1 + 1)
    for scheme in BUILTIN_SCHEMES:
        axes = 4 if scheme == "vrope" else 3
        assert place(scheme, [], axes) == ([[]] * axes, 0.0), scheme


@pytest.mark.parametrize(
    ("scheme", "axes"),  # every scheme but rope_2d_rows (text on rows), on its axes; three also on 2 axes
    [(s, 4 if s == "vrope" else 3) for s in sorted(BUILTIN_SCHEMES) if s != "rope_2d_rows"]
    + [("rope_1d", 2), ("rope_tie", 2), ("v2pe", 2)],
)
def test_text_segments_in_a_row_count_on_as_one(scheme, axes) -> None:
    assert place(scheme, [T(2)], axes) == ([[0, 1]] * axes, 2.0)  # text alone: 0, 1 on every axis
    # a scheme may be handed two text segments in a row (a plug-in's own splitting): they continue like one run
    for before in ([], [I(1, 2)], [T(1), I(2, 1)]):
        assert place(scheme, [*before, T(2), T(3)], axes) == place(scheme, [*before, T(5)], axes)


def test_circle_plane_basis_is_the_correctly_rounded_unit_vectors() -> None:
    # u = (-1, 1, 0)/√2 and v = (-1, -1, 2)/√6, each normalised in float32 as the official code does: the float32
    # nearest the exact values, bit for bit
    u = _in_text_plane(torch.tensor(1.0), torch.tensor(0.0))
    v = _in_text_plane(torch.tensor(0.0), torch.tensor(1.0))
    assert torch.equal(u, (torch.tensor([-1.0, 1.0, 0.0], dtype=torch.float64) / S2).float())
    assert torch.equal(v, (torch.tensor([-1.0, -1.0, 2.0], dtype=torch.float64) / S6).float())
