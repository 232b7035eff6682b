"""Position schemes (*position designs*) and their registry: where every token of a text / image / video sample
sits, one float position per axis.

positions.py cuts a sample into `Segment`s (runs of text, image or video tokens; a vision segment's t·h·w patches in
row-major order). A scheme turns them into positions (axes, tokens) plus the position the next text token would get.
`n` is that next text position (0 at the start), `L = n - 1`; patch indices are 1-based in the Su formulas
((i, j, k) = (row, col, frame)) and 0-based in mrope. Text is the same on every axis, except in `rope_2d_rows`.

- ``rope_1d``: every token, placeholders included, gets its sequence index on every axis.
- ``rope_2d_rows``: axes (row, col[, frame]); text segment r is row r, its k-th token (r, k); an image's patch
  (i, j) is (r + i, j), a video's frames share those rows, told apart by the frame axis. Generated text continues
  the last text row, or opens a new row after a trailing image.
- ``rope_tie`` (Su's RoPE-Tie v1): text is (n, n). Image h×w: patch (i, j) → (L + i·(w+1), L + j·(h+1)), next text
  at L + (w+1)(h+1). Video (3 axes): span S = (h+1)(w+1)(T+1), patch (i, j, k) → (L + i·S/(h+1), L + j·S/(w+1),
  L + k·S/(T+1)), next text at L + S: the gaps before the first patch and after the last are equal on every axis.
- ``rope_tie_v2`` (Su's RoPE-Tie-v2 / RoPE-TV, γ = 1): patch (i, j) → (β1 + i, β2 + j), β1 = L + (wh−h)/2,
  β2 = L + (wh−w)/2, next text at L + wh + 1. Video: P = whT, β_a = L + (P − extent_a)/2 per axis,
  patch (i, j, k) → (β1 + i, β2 + j, β3 + k), next text at L + P + 1.
- ``mrope`` (Qwen2-VL, 3 axes (t, h, w)): text is (n, n, n); patch (k, i, j), 0-based, is (n + k, n + i, n + j); the
  next text token at n + max(T, h, w), as the original code (transformers' `get_rope_index`: n + max(h, w)).

The literature's variants below: formula in the docstring, knobs as keyword-only arguments, a default allocation
(axis_allocations.py). In the Su schemes a 3-axis config treats an image as a one-frame video.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any

import torch

from .registries import POSITION_SCHEMES, is_int, is_positive_number
from .scheme_knobs import (
    BOOL,
    POSITIVE,
    Knob,
    SchemeCapabilities,
    SchemeKnobs,
    check_knob_class,
    knobs_from_signature,
    scheme_knobs_class,
)


@dataclass(frozen=True)
class Segment:
    """A maximal run of real tokens of one kind: "text", "image" or "video"; `grid` is (t, h, w) for vision.
    `seconds_per_grid`: Qwen2.5-VL's `second_per_grid_ts`; `temporal_scale`: HoPE's scale drawn while training."""

    kind: str
    length: int
    grid: tuple[int, int, int] | None = None
    seconds_per_grid: float | None = None
    temporal_scale: float | None = None


#: A scheme maps a sample's segments and the number of axes to (positions (axes, tokens), next text position).
PositionScheme = Callable[[Sequence[Segment], int], tuple[torch.Tensor, float]]


def register_position_scheme(
    name: str, *, knobs: type[SchemeKnobs] | None = None, overwrite: bool = False
) -> Callable[[PositionScheme], PositionScheme]:
    """Register `scheme(segments, axes) -> (positions (axes, tokens), next text position)` as `name`; its keyword-only
    arguments are its knobs (`knobs`: a `SchemeKnobs` with the same fields and checks; default: from the signature)."""

    def decorator(scheme: PositionScheme) -> PositionScheme:
        from_signature = knobs_from_signature(name, scheme)
        knob_class = from_signature if knobs is None else knobs
        check_knob_class(knob_class, SchemeKnobs, f"Position scheme {name!r}'s")
        arguments = set(from_signature.names())
        if set(knob_class.names()) != arguments:
            raise TypeError(
                f"Position scheme {name!r}: its knob class {knob_class.__name__} has the fields "
                f"{sorted(knob_class.names())} but the function's keyword-only arguments are {sorted(arguments)}; "
                "give both the same names."
            )
        POSITION_SCHEMES.register(name, scheme, overwrite=overwrite, knobs=knob_class)
        return scheme

    return decorator


def _builtin(name: str, checks=None, *, axes=3, allocation=None, ratio=None, cache=True) -> Callable:
    """A built-in's registration: its knob class from the signature, `checks` and its class variables."""

    def decorator(scheme: PositionScheme) -> PositionScheme:
        knobs = knobs_from_signature(
            name,
            scheme,
            checks=checks or {},
            default_axes=axes,
            default_allocation=allocation,
            mrope_section_ratio=ratio,
            capabilities=SchemeCapabilities(cache=cache),
        )
        POSITION_SCHEMES.register(name, scheme, knobs=knobs)
        return scheme

    return decorator


#: The papers' (t, h, w) splits: Qwen2-VL's pairs at head_dim 128, Qwen3-VL's, MHRoPE's heads of 8.
QWEN2_VL_SPLIT, QWEN3_VL_SPLIT, MHROPE_HEADS = (16, 24, 24), (24, 20, 20), (2, 3, 3)
STRIDE = {"temporal_stride": POSITIVE}


def _is_auto_scale(value: Any) -> bool:
    """'auto-<positive number>' (Circle-RoPE's radius: the largest coordinate times that scale)."""
    if not isinstance(value, str) or not value.startswith("auto-"):
        return False
    try:
        return is_positive_number(float(value[5:]))
    except ValueError:
        return False


SCALES = Knob(  # HoPE's temporal scales drawn from while training
    "None or a non-empty list of positive numbers",
    lambda v: v is None or (isinstance(v, (list, tuple)) and len(v) > 0 and all(map(is_positive_number, v))),
)
STRIDE_TOKENS = Knob(  # V2PE's tokens per visual stride
    "None or a positive integer (tokens per visual_stride; 256 in V2PE)", lambda v: v is None or (is_int(v) and v > 0)
)
THREE_SCALES = Knob(
    "three positive numbers",
    lambda v: isinstance(v, (list, tuple)) and len(v) == 3 and all(map(is_positive_number, v)),
)
UNIT_INTERVAL = Knob(
    "a number in [0, 1]", lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 <= v <= 1
)
CIRCLE_KNOBS = {
    "circle_radius": Knob(
        "a positive number, 'auto' or 'auto-<positive scale>'",
        lambda v: is_positive_number(v) or v == "auto" or _is_auto_scale(v),
    ),
    "circle_alpha": UNIT_INTERVAL,
    "circle_move_to_origin": BOOL,
    "circle_dff_rate": UNIT_INTERVAL,
    "circle_move_to_positive": Knob(
        "None (off) or an offset >= 0",
        lambda v: v is None or is_positive_number(v) or (v == 0 and not isinstance(v, bool)),
    ),
}


def registered_position_schemes() -> tuple[str, ...]:
    """Names accepted as `rope_parameters["position_scheme"]`."""
    return POSITION_SCHEMES.registered()


def get_position_scheme(name: str) -> PositionScheme:
    return POSITION_SCHEMES.get(name)


def scheme_knobs(name: str, rope_parameters: dict) -> dict[str, Any]:
    """The keyword arguments scheme `name` gets: its knobs as `rope_parameters` sets them, else their defaults (read,
    not checked again: the configuration checked them)."""
    given = rope_parameters
    return {
        f.name: given.get(f.name, f.default)
        for f in fields(scheme_knobs_class(name))
        if f.name in given or f.default is not MISSING
    }


def patch_indices(grid: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """0-based (frame, row, col) index of every patch, in token order (t, then h, then w)."""
    t, h, w = grid
    frames, rows, cols = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
    return frames.reshape(-1), rows.reshape(-1), cols.reshape(-1)


def _text(start: float, length: int, axes: int) -> torch.Tensor:
    return (start + torch.arange(length, dtype=torch.float32)).expand(axes, -1)


def _su_extents(scheme: str, grid: tuple[int, int, int], axes: int) -> tuple[int, ...]:
    """(h, w) or (h, w, t): the extents Su's schemes place on the (row, col[, frame]) axes."""
    t, h, w = grid
    if axes == 2 and t == 1:
        return h, w
    if axes == 3:
        return h, w, t
    if axes > 3:
        raise ValueError(
            f"Position scheme {scheme!r} places vision on 2 or 3 axes; config.rope_parameters['axes'] = {axes}."
        )
    need = "3 axes for a video or a grid with t > 1" if t > 1 else "2 axes (row, col) for an image"
    raise ValueError(
        f"Position scheme {scheme!r} needs {need}, but config.rope_parameters['axes'] = {axes} "
        f"(grid (t, h, w) = {grid})."
    )


def _su_coordinates(grid: tuple[int, int, int], axes: int) -> torch.Tensor:
    """1-based (row, col[, frame]) of every patch in token order, shape (axes, t·h·w)."""
    frames, rows, cols = patch_indices(grid)
    return torch.stack((rows, cols, frames)[:axes]).float() + 1


def _concat(blocks: list[torch.Tensor], axes: int) -> torch.Tensor:
    return torch.cat(blocks, dim=1) if blocks else torch.zeros(axes, 0)


# Built-in schemes (formulas in the module docstring), registered by a call after each: mutmut (docs/testing.md)
# mutates no decorated function.


def rope_1d(segments: Sequence[Segment], axes: int) -> tuple[torch.Tensor, float]:
    total = sum(segment.length for segment in segments)
    return _text(0.0, total, axes), float(total)


_builtin("rope_1d", axes=None)(rope_1d)


def rope_2d_rows(segments: Sequence[Segment], axes: int) -> tuple[torch.Tensor, float]:
    if axes not in (2, 3):
        raise ValueError(
            f"Position scheme 'rope_2d_rows' needs 2 or 3 axes, but config.rope_parameters['axes'] = {axes}."
        )
    blocks, row, next_col = [], 0, 0
    for segment in segments:
        if segment.grid is None:
            cols = torch.arange(segment.length, dtype=torch.float32)
            block = torch.zeros(axes, segment.length)
            block[0], block[1] = row, cols
            row, next_col = row + 1, segment.length
        else:
            t, h, _ = segment.grid
            if t > 1 and axes < 3:
                raise ValueError(
                    f"Position scheme 'rope_2d_rows' needs 3 axes for a grid with t > 1 ({segment.grid}), "
                    f"but config.rope_parameters['axes'] = {axes}."
                )
            frames, rows, cols = patch_indices(segment.grid)
            block = torch.stack((rows + row, cols, frames)[:axes]).float()
            row, next_col = row + h, 0
        blocks.append(block)
    # Generated text continues the last text row, or opens a new row after a trailing image.
    return _concat(blocks, axes), float(next_col)


_builtin("rope_2d_rows", axes=None, cache=False)(rope_2d_rows)


def _tie_v1_block(next_pos: float, grid: tuple[int, int, int], axes: int) -> tuple[torch.Tensor, float]:
    extents = _su_extents("rope_tie", grid, axes)
    span = math.prod(extent + 1 for extent in extents)
    steps = torch.tensor([span // (extent + 1) for extent in extents], dtype=torch.float32)
    last_text = next_pos - 1
    return last_text + steps[:, None] * _su_coordinates(grid, axes), last_text + span


def _tie_v2_block(next_pos: float, grid: tuple[int, int, int], axes: int) -> tuple[torch.Tensor, float]:
    extents = _su_extents("rope_tie_v2", grid, axes)
    patches = grid[0] * grid[1] * grid[2]
    last_text = next_pos - 1
    betas = torch.tensor([last_text + (patches - extent) / 2 for extent in extents], dtype=torch.float32)
    return betas[:, None] + _su_coordinates(grid, axes), last_text + patches + 1


def rope_tie(segments: Sequence[Segment], axes: int) -> tuple[torch.Tensor, float]:
    return _place(segments, axes, lambda start, segment: _tie_v1_block(start, segment.grid, axes))


_builtin("rope_tie", axes=None)(rope_tie)


def rope_tie_v2(segments: Sequence[Segment], axes: int) -> tuple[torch.Tensor, float]:
    return _place(segments, axes, lambda start, segment: _tie_v2_block(start, segment.grid, axes))


_builtin("rope_tie_v2", axes=None)(rope_tie_v2)


def mrope(segments: Sequence[Segment], axes: int) -> tuple[torch.Tensor, float]:
    if axes != 3:  # also for text-only input: the config promises (t, h, w) axes
        raise ValueError(
            f"Position scheme 'mrope' needs 3 axes (t, h, w), but config.rope_parameters['axes'] = {axes}."
        )
    return _place(
        segments,
        axes,
        lambda st, segment: (st + torch.stack(patch_indices(segment.grid)).float(), st + max(segment.grid)),
    )


_builtin("mrope", allocation="sections", ratio=QWEN2_VL_SPLIT)(mrope)


# The variants of the literature: 3-axis (t, h, w) unless said; text is (n, n, n) and a vision segment starts at
# st = the position the next text token would have had.

VisionBlock = Callable[[float, Segment], tuple[torch.Tensor, float]]


def _place(segments: Sequence[Segment], axes: int, vision: VisionBlock) -> tuple[torch.Tensor, float]:
    """Text 1D on every axis; each vision segment is `vision(st, segment)` -> (block (3, t·h·w), next text position)."""
    blocks, next_pos = [], 0.0
    for segment in segments:
        if segment.grid is None:
            blocks.append(_text(next_pos, segment.length, axes))
            next_pos += segment.length
        else:
            block, next_pos = vision(next_pos, segment)
            blocks.append(block)
    return _concat(blocks, axes), float(next_pos)


def _grid_indices(grid: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    frames, rows, cols = patch_indices(grid)
    return frames.float(), rows.float(), cols.float()


def qwen2_5_vl(segments: Sequence[Segment], axes: int, *, tokens_per_second: float = 2.0) -> tuple[torch.Tensor, float]:
    """Qwen2.5-VL's time-aligned M-RoPE: patch (k, i, j) is (st + floor(k·tokens_per_second·second_per_grid_t),
    st + i, st + j) (second_per_grid_t 1.0 when not given; images: k = 0); text after continues at max(segment) + 1,
    as the original `get_rope_index` (transformers' advances by max(h, w) only)."""
    tokens_per_second = float(tokens_per_second)

    def vision(st: float, segment: Segment) -> tuple[torch.Tensor, float]:
        frames, rows, cols = patch_indices(segment.grid)
        if segment.kind == "video":
            # float32 product, truncated as the reference's `.long()` does (positions here are never negative)
            interval = torch.tensor(segment.seconds_per_grid or 1.0, dtype=torch.float32) * tokens_per_second
            frames = (frames * interval).long()
        block = st + torch.stack((frames, rows, cols)).float()
        return block, float(block.max()) + 1

    return _place(segments, axes, vision)


_builtin("qwen2_5_vl", {"tokens_per_second": POSITIVE}, allocation="sections", ratio=QWEN2_VL_SPLIT)(qwen2_5_vl)


def qwen3_vl(segments: Sequence[Segment], axes: int) -> tuple[torch.Tensor, float]:
    """Qwen3-VL: every frame placed as an image, one after another: frame k at st_k, patch (i, j) at (st_k, st_k + i,
    st_k + j), st_{k+1} = st_k + max(h, w); text continues at the last st."""

    def vision(st: float, segment: Segment) -> tuple[torch.Tensor, float]:
        t, h, w = segment.grid
        _, rows, cols = _grid_indices((1, h, w))
        frames = []
        for _ in range(t):
            frames.append(torch.stack((torch.full_like(rows, st), st + rows, st + cols)))
            st += max(h, w)
        return torch.cat(frames, dim=1), st

    return _place(segments, axes, vision)


_builtin("qwen3_vl", allocation="mrope_interleaved", ratio=QWEN3_VL_SPLIT)(qwen3_vl)


def _reset_block(st: float, grid: tuple[int, int, int], temporal_stride: float, spatial_reset: bool):
    """(st + k·stride, [st +] i, [st +] j), next text at st + max((T−1)·stride, h−1, w−1) + 1."""
    frames, rows, cols = _grid_indices(grid)
    offset = 0.0 if spatial_reset else st
    block = torch.stack((st + frames * temporal_stride, offset + rows, offset + cols))
    t, h, w = grid
    return block, st + max((t - 1) * temporal_stride, h - 1, w - 1) + 1


def mrope_interleave(
    segments: Sequence[Segment], axes: int, *, spatial_reset: bool = True, temporal_stride: float = 1.0
) -> tuple[torch.Tensor, float]:
    """MRoPE-Interleave (Huang et al., ICLR 2026): patch (k, i, j), 0-based, is (st + k·temporal_stride, i, j) with
    spatial reset (the h and w axes restart at 0 in every image), (st + k·s, st + i, st + j) without; the next text
    token is at st + max((T−1)·s, h−1, w−1) + 1 either way."""
    stride = float(temporal_stride)
    return _place(segments, axes, lambda st, segment: _reset_block(st, segment.grid, stride, spatial_reset))


_builtin("mrope_interleave", {"spatial_reset": BOOL, **STRIDE}, allocation="mrope_interleaved", ratio=QWEN3_VL_SPLIT)(
    mrope_interleave
)


# MHRoPE (the same paper) places tokens as MRoPE-Interleave does; its allocation is head-wise ("headwise").
_builtin("mhrope", {"spatial_reset": BOOL, **STRIDE}, allocation="headwise", ratio=MHROPE_HEADS)(mrope_interleave)


def spatial_reset_layout(segments: Sequence[Segment], axes: int, *, temporal_stride: float = 1.0):
    """ILRoPE / OmniRoPE's reset visual layout: (st + k·temporal_stride, i, j), 0-based; next text at
    st + max((T−1)·s + 1, h, w)."""
    stride = float(temporal_stride)
    return _place(segments, axes, lambda st, segment: _reset_block(st, segment.grid, stride, True))


_builtin("ilrope", STRIDE, allocation="mrope_interleaved", ratio=QWEN3_VL_SPLIT)(spatial_reset_layout)
_builtin("omnirope", STRIDE, allocation="omnirope", ratio=QWEN2_VL_SPLIT)(spatial_reset_layout)


def _diagonal_video_block(st: float, grid: tuple[int, int, int], temporal_stride: float):
    """VideoRoPE's diagonal layout: t = st + k·s, h = t + i − ⌊(h−1)/2⌋, w = t + j − ⌊(w−1)/2⌋; next at max(t) + 1."""
    frames, rows, cols = _grid_indices(grid)
    t, h, w = grid
    temporal = st + frames * temporal_stride
    block = torch.stack((temporal, temporal + rows - (h - 1) // 2, temporal + cols - (w - 1) // 2))
    return block, st + (t - 1) * temporal_stride + 1


def videorope(segments: Sequence[Segment], axes: int, *, temporal_stride: float = 2.0) -> tuple[torch.Tensor, float]:
    """VideoRoPE (Wei et al., 2025): the diagonal layout (`_diagonal_video_block`) with temporal stride δ (default 2);
    allocation "videorope" (temporal axis on the lowest frequencies, h and w interleaved on the rest)."""
    stride = float(temporal_stride)
    return _place(segments, axes, lambda st, segment: _diagonal_video_block(st, segment.grid, stride))


_builtin("videorope", STRIDE, allocation="videorope", ratio=QWEN2_VL_SPLIT)(videorope)


def _temporal_scales(scheme: str, scales: Any) -> tuple[float, ...] | None:
    """HoPE's scales to draw from, as floats (checked here too: positions may be built without a configuration)."""
    if not SCALES.check(scales):
        raise ValueError(
            f"Position scheme {scheme!r}: rope_parameters['temporal_scales'] must be {SCALES.description} (e.g. "
            f"[0.5, 0.75, 1.0, 1.25, 1.5]); got {scales!r}."
        )
    return None if scales is None else tuple(map(float, scales))


def hope(
    segments: Sequence[Segment],
    axes: int,
    *,
    temporal_stride: float = 1.0,
    temporal_scales: Sequence[float] | None = None,
) -> tuple[torch.Tensor, float]:
    """HoPE (Li et al., 2025): VideoRoPE's diagonal layout with temporal scale δ = the segment's scale drawn from
    `temporal_scales` while training (`build_position_ids(training=True)`), else `temporal_stride`."""
    stride = float(temporal_stride)

    def vision(st: float, segment: Segment) -> tuple[torch.Tensor, float]:
        scale = stride if segment.temporal_scale is None else segment.temporal_scale
        return _diagonal_video_block(st, segment.grid, scale)

    return _place(segments, axes, vision)


_builtin("hope", {**STRIDE, "temporal_scales": SCALES}, allocation="hope", ratio=QWEN2_VL_SPLIT)(hope)


def v2pe(
    segments: Sequence[Segment], axes: int, *, visual_stride: float = 16.0, visual_stride_tokens: int | None = None
) -> tuple[torch.Tensor, float]:
    """V2PE (Ge et al., 2024), one position on every axis: V visual tokens after position p get p + δ·(n + 1),
    n = 0…V−1, the next text ⌈last⌉ + 1. δ = visual_stride / visual_stride_tokens as the official code (256 there),
    or visual_stride / V (every segment spans visual_stride) when None, as the Multimodal-RoPEs reference."""
    stride = float(visual_stride)
    blocks, last = [], -1.0
    for segment in segments:
        if segment.grid is None:
            blocks.append(_text(last + 1, segment.length, axes))
            last += segment.length
        else:
            step = stride / (segment.length if visual_stride_tokens is None else visual_stride_tokens)
            # first + n·step in float64, rounded to float32 once (as a float arange from last + step computes them)
            values = ((last + step) + torch.arange(segment.length, dtype=torch.float64) * step).float()
            blocks.append(values.expand(axes, -1))
            last = float(math.ceil(values[-1].item()))
    return _concat(blocks, axes), last + 1


_builtin("v2pe", {"visual_stride": POSITIVE, "visual_stride_tokens": STRIDE_TOKENS}, axes=None)(v2pe)


def vrope(segments: Sequence[Segment], axes: int) -> tuple[torch.Tensor, float]:
    """VRoPE (Liu et al., EMNLP 2025), 4 axes: patch (k, i, j), 0-based, of a T×h×w video (an image: T = 1) is at
    st + k·(h + w − 1) + (i + j, i + (w−1−j), (h−1−i) + j, (h−1−i) + (w−1−j)), the four diagonal directions; the
    next text token is at st + T·(h + w − 1)."""

    def vision(st: float, segment: Segment) -> tuple[torch.Tensor, float]:
        frames, rows, cols = _grid_indices(segment.grid)
        t, h, w = segment.grid
        span = h + w - 1
        flipped_rows, flipped_cols = h - 1 - rows, w - 1 - cols
        block = torch.stack((rows + cols, rows + flipped_cols, flipped_rows + cols, flipped_rows + flipped_cols))
        return st + frames * span + block, st + t * span

    return _place(segments, axes, vision)


_builtin("vrope", axes=4, allocation="interleaved")(vrope)


def mmrope(
    segments: Sequence[Segment],
    axes: int,
    *,
    temporal_stride: float = 1.0,
    position_scale: Sequence[float] = (1.0, 1.0, 1.0),
) -> tuple[torch.Tensor, float]:
    """MM-RoPE (Lumos-1, ICLR 2026), as its official code: text at its token index; patch (k, i, j) at
    o + ((f + k)·s·σ_t, i·σ_h, j·σ_w), o the index of the first vision token, f the earlier frames (an image one)."""
    stride = float(temporal_stride)
    scale = torch.tensor([float(v) for v in position_scale], dtype=torch.float32)
    blocks, index, origin, frames = [], 0, None, 0
    for segment in segments:
        if segment.grid is None:
            blocks.append(_text(index, segment.length, axes))
        else:
            origin = index if origin is None else origin
            k, rows, cols = _grid_indices(segment.grid)
            blocks.append(origin + torch.stack(((frames + k) * stride, rows, cols)) * scale[:, None])
            frames += segment.grid[0]
        index += segment.length
    return _concat(blocks, axes), float(index)


_builtin("mmrope", {**STRIDE, "position_scale": THREE_SCALES}, allocation="mmrope")(mmrope)


def _in_text_plane(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x·u + y·v on the (w, h, t) axes, u = (−1, 1, 0)/√2, v = (1, 1, 1)/√3 × u, in float32 as the official code."""
    text = torch.ones(3) / torch.norm(torch.ones(3))
    u = torch.stack([-text[1], text[0], torch.tensor(0.0)])
    u = u / torch.norm(u)
    v = torch.linalg.cross(text, u, dim=0)
    v = v / torch.norm(v)
    return torch.stack([x * u[a] + y * v[a] for a in range(3)])


def _circle_coordinates(
    grid: tuple[int, int, int], radius: Any, alpha: float, move_to_origin: bool, dff_rate: float, move_to_positive: Any
) -> torch.Tensor:
    """Circle-RoPE's (t, h, w) offsets of an h×w image's patches, (3, h·w), before adding the start position."""
    _, h, w = grid
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    coords = torch.stack((cols, rows, torch.zeros_like(rows)))  # (x, y, z) = (w, h, t) index, int64
    if move_to_origin:  # the box's centre to 0, per axis
        coords = coords - ((coords.amax(dim=(1, 2)) + coords.amin(dim=(1, 2))) / 2.0).view(3, 1, 1)
    if isinstance(radius, tuple):  # "auto": the largest coordinate (after centring) times the scale
        radius = coords.max().abs() * radius[1]
    x, y = coords[0], coords[1]
    angle = torch.atan2(y, x)
    spread = angle.max() - angle.min()
    if spread > 0:  # the patches' own angles, stretched over the full turn
        angle = (angle - angle.min()) / spread * (2 * math.pi)
    by_index = torch.arange(h * w, dtype=torch.float32).reshape(h, w) / (h * w) * (2 * math.pi)
    angle = alpha * angle + (1 - alpha) * by_index
    ring = _in_text_plane(radius * torch.cos(angle), radius * torch.sin(angle))
    if dff_rate:  # towards the unbent grid, turned into the same plane
        ring = (1 - dff_rate) * ring + dff_rate * _in_text_plane(x, y)
    if move_to_positive is not None:  # as the official code: + |min| (also when the minimum is positive) + offset
        ring = ring + torch.abs(torch.min(ring)) + float(move_to_positive)
    return ring.flip(0).reshape(3, -1)  # (w, h, t) -> (t, h, w)


def circle_rope(
    segments: Sequence[Segment],
    axes: int,
    *,
    circle_radius: float | str = 10.0,
    circle_alpha: float = 0.5,
    circle_move_to_origin: bool = True,
    circle_dff_rate: float = 0.0,
    circle_move_to_positive: float | None = None,
) -> tuple[torch.Tensor, float]:
    """Circle-RoPE (Wang et al., 2025), images only: patch p = i·w + j at (n − m) + m + o, o = (1 − d)·(R cos θ·u +
    R sin θ·v) + d·(x·u + y·v) in the plane ⟂ (1, 1, 1), θ = α·θ_grid + (1 − α)·2π·p/(h·w) (`_circle_coordinates`);
    m the text since the last vision segment; text after at max(block) + 1."""
    radius = circle_radius  # "auto[-scale]": the largest centred coordinate times the scale
    if isinstance(radius, str):
        radius = ("auto", 1.0 if radius == "auto" else float(radius[5:]))
    alpha, dff_rate, offset = float(circle_alpha), float(circle_dff_rate), circle_move_to_positive
    blocks, start, text_since = [], 0.0, 0  # start: the reference's `st_idx` (float32 value), text since it
    for segment in segments:
        if segment.grid is None:
            blocks.append(_text(start + text_since, segment.length, axes))
            text_since += segment.length
            continue
        if segment.grid[0] != 1:
            raise ValueError(
                f"Position scheme 'circle_rope' places images (grid t = 1); got a {segment.kind} grid (t, h, w) = "
                f"{segment.grid}. The official Circle-RoPE code has no placement for several frames: give each frame "
                "its own group (t = 1) or choose a video scheme (videorope, hope, mrope_interleave)."
            )
        offsets = _circle_coordinates(segment.grid, radius, alpha, circle_move_to_origin, dff_rate, offset)
        block = (offsets + text_since) + torch.tensor(start, dtype=torch.float32)
        blocks.append(block)
        start, text_since = float(block.max()) + 1, 0
    return _concat(blocks, axes), start + text_since


_builtin("circle_rope", CIRCLE_KNOBS, allocation="sections", ratio=QWEN2_VL_SPLIT)(circle_rope)
