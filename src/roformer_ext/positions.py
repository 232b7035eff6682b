"""Position ids for mixed text / image / video sequences (`build_position_ids`), text and decoding positions.

A sample is cut into *segments*: maximal runs of real tokens that are text, image placeholders (`image_token_id`) or
video placeholders (`video_token_id`); the i-th run of a kind takes the i-th (t, h, w) row of its grid, counting over
the batch. A *position scheme* (`rope_parameters["position_scheme"]`, position_schemes.py) turns the segments into one
float position per axis per token and the next text position. Padding never moves real tokens (pads sit at 0).
`deltas[b]` = next text position − real tokens: decoding continues at index among real tokens + delta on every axis
(Qwen2-VL's `rope_deltas`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch

from .position_schemes import (
    Segment,
    _temporal_scales,
    get_position_scheme,
    scheme_knobs,
)
from .scheme_knobs import scheme_knobs_class

_KINDS = ("text", "image", "video")


def _grid_rows(grid_thw: Any, name: str) -> list[tuple[int, int, int]] | None:
    if grid_thw is None:
        return None
    grid = torch.as_tensor(grid_thw)
    if grid.dim() != 2 or grid.shape[1] != 3 or (grid.numel() and int(grid.min()) < 1):
        raise ValueError(f"{name} must have shape (num, 3) with positive (t, h, w) rows; got {grid.tolist()}.")
    return [tuple(row) for row in grid.tolist()]


def _runs_per_row(kinds: torch.Tensor, real: torch.Tensor) -> list[tuple[list[int], list[int]]]:
    """Kind and length of each maximal run of equal kinds among every row's real tokens, for all rows at once."""
    batch = kinds.shape[0]
    rows = torch.arange(batch).unsqueeze(1).expand_as(kinds)[real]  # the row of each real token, in order
    kinds = kinds[real]
    if kinds.numel() == 0:
        return [([], []) for _ in range(batch)]
    new_run = torch.ones_like(kinds, dtype=torch.bool)
    new_run[1:] = (kinds[1:] != kinds[:-1]) | (rows[1:] != rows[:-1])  # a run never crosses rows
    starts = torch.nonzero(new_run).flatten()
    lengths = torch.diff(starts, append=torch.tensor([kinds.numel()]))
    runs: list[tuple[list[int], list[int]]] = [([], []) for _ in range(batch)]
    for row, kind, length in zip(rows[starts].tolist(), kinds[starts].tolist(), lengths.tolist()):
        runs[row][0].append(kind)
        runs[row][1].append(length)
    return runs


def _split_segments(
    input_ids: torch.Tensor,
    real: torch.Tensor,
    token_ids: tuple[int | None, int | None],
    grids: tuple[list | None, list | None],
    video_seconds: list[float] | None = None,
) -> list[list[Segment]]:
    """Segments of every sample, grids assigned and counts checked; placeholders of a kind without a grid are text
    (as Qwen2-VL's `get_rope_index`)."""
    kinds = torch.zeros_like(input_ids)
    for kind, (token_id, grid) in enumerate(zip(token_ids, grids), start=1):
        if token_id is not None and grid is not None:
            kinds[input_ids == token_id] = kind
    runs = _runs_per_row(kinds, real)

    for kind, (token_id, grid) in enumerate(zip(token_ids, grids), start=1):
        name, attr = _KINDS[kind], f"config.{_KINDS[kind]}_token_id"
        groups = sum(run_kinds.count(kind) for run_kinds, _ in runs)
        if grid is None and groups:
            raise ValueError(
                f"input_ids contain {groups} {name} placeholder group(s) ({attr}={token_id}) but {name}_grid_thw is None."
            )
        if grid is not None and token_id is None:
            raise ValueError(f"{name}_grid_thw was given but {attr} is None, so no {name} placeholders can be found.")
        if grid is not None and not groups:
            raise ValueError(
                f"{name}_grid_thw has {len(grid)} row(s) but input_ids contain no {name} placeholders ({attr}={token_id})."
            )
        if grid is not None and len(grid) != groups:
            raise ValueError(
                f"{name}_grid_thw has {len(grid)} row(s) ({name}s) but input_ids contain {groups} groups of consecutive "
                f"{name} placeholders ({attr}={token_id}); each {name} must be one group, separated from the next "
                "by another token."
            )

    if video_seconds is not None and len(video_seconds) != len(grids[1] or []):
        raise ValueError(
            f"second_per_grid_ts has {len(video_seconds)} entries but video_grid_thw has {len(grids[1] or [])} rows; "
            "give one time per video (seconds between two temporal patches)."
        )
    iterators: list[Iterator | None] = [None] + [iter(grid) if grid is not None else None for grid in grids]
    seconds = iter(video_seconds or [])
    samples = []
    for b, (run_kinds, lengths) in enumerate(runs):
        segments = []
        for kind, length in zip(run_kinds, lengths):
            grid = next(iterators[kind]) if kind else None
            if grid is not None and grid[0] * grid[1] * grid[2] != length:
                raise ValueError(
                    f"Sample {b}: a {_KINDS[kind]} group has {length} placeholder tokens but its grid (t, h, w) = "
                    f"{grid} needs t*h*w = {grid[0] * grid[1] * grid[2]}."
                )
            time = next(seconds, None) if kind == 2 else None
            segments.append(Segment(_KINDS[kind], length, grid, time))
        samples.append(segments)
    return samples


def build_position_ids(
    input_ids: torch.Tensor,
    config: Any,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    second_per_grid_ts: torch.Tensor | None = None,
    cu_seq_lens: torch.Tensor | None = None,
    training: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Position ids (axes, batch, seq) float32 and deltas (batch, 1) float32 for `input_ids` (batch, seq).

    `config` needs `rope_parameters` and, for vision input, `image_token_id` / `video_token_id`.
    `second_per_grid_ts` (num_videos,): seconds between two temporal patches of each video (qwen2_5_vl).
    `cu_seq_lens` (packed rows, as `cu_seq_lens_q`): each packed sequence laid out alone; a row's delta is its last
    sequence's. `training`: a scheme's `temporal_scales` (HoPE) are drawn here, once per forward, one per vision
    segment with `torch.randint` on the default generator. Raises ValueError when placeholders and grids disagree.
    """
    rope = getattr(config, "rope_parameters", None) or {}
    name = rope.get("position_scheme", "rope_1d")
    scheme = get_position_scheme(name)
    if video_grid_thw is not None and len(video_grid_thw) and not scheme_knobs_class(name).capabilities.video:
        raise ValueError(
            f"Position scheme {name!r} does not place videos (its capabilities say so); pass the frames as images, "
            "or choose a scheme that places videos (rope_parameters['position_scheme'])."
        )
    if cu_seq_lens is not None:
        return _packed_position_ids(
            input_ids, config, image_grid_thw, video_grid_thw, attention_mask, second_per_grid_ts, cu_seq_lens, training
        )
    knobs = scheme_knobs(name, rope)
    axes = int(rope.get("axes", 1))
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (batch, seq); got {tuple(input_ids.shape)}.")
    if attention_mask is None:
        real = torch.ones_like(input_ids, dtype=torch.bool)
    elif attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask must be 2D with the shape of input_ids {tuple(input_ids.shape)}; got {tuple(attention_mask.shape)}."
        )
    else:
        real = attention_mask.bool()
    device = input_ids.device
    token_ids = (getattr(config, "image_token_id", None), getattr(config, "video_token_id", None))
    grids = (_grid_rows(image_grid_thw, "image_grid_thw"), _grid_rows(video_grid_thw, "video_grid_thw"))
    seconds = None if second_per_grid_ts is None else torch.as_tensor(second_per_grid_ts).flatten().tolist()
    input_ids, real = input_ids.cpu(), real.cpu()

    batch, seq = input_ids.shape
    samples = _split_segments(input_ids, real, token_ids, grids, seconds)
    if training and knobs.get("temporal_scales") is not None:
        samples = _draw_temporal_scales(samples, _temporal_scales(rope["position_scheme"], knobs["temporal_scales"]))
    placed: dict[tuple[Segment, ...], tuple[torch.Tensor, float]] = {}  # rows of one layout share their positions
    per_row, deltas = [], torch.zeros(batch, 1)
    for b, segments in enumerate(samples):
        layout = tuple(segments)
        if layout not in placed:
            placed[layout] = scheme(segments, axes, **knobs)
        positions, next_pos = placed[layout]
        per_row.append(positions)
        deltas[b, 0] = next_pos - positions.shape[1]
    position_ids = torch.zeros(batch, seq, axes)
    position_ids[real] = torch.cat(per_row, dim=1).to(position_ids.dtype).T  # real tokens in row-major order
    return position_ids.permute(2, 0, 1).contiguous().to(device), deltas.to(device)


def _draw_temporal_scales(samples: list[list[Segment]], scales: Sequence[float]) -> list[list[Segment]]:
    """Every vision segment with a scale drawn uniformly from `scales` (one `torch.randint` for the batch)."""
    count = sum(segment.grid is not None for segments in samples for segment in segments)
    drawn = iter(torch.randint(len(scales), (count,)).tolist())
    return [
        [segment if segment.grid is None else replace(segment, temporal_scale=scales[next(drawn)]) for segment in row]
        for row in samples
    ]


def _packed_position_ids(
    input_ids, config, image_grid_thw, video_grid_thw, attention_mask, seconds, cu_seq_lens, training=False
):
    """Each packed sequence laid out alone, as the rows of one right-padded batch; positions put back in place."""
    batch, seq = input_ids.shape
    bounds = torch.as_tensor(cu_seq_lens).cpu().long().flatten().tolist()
    if bounds[0] != 0 or bounds[-1] != batch * seq or any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(
            f"cu_seq_lens must rise from 0 to batch * seq = {batch * seq} (the packed sequences' cumulative lengths over "
            f"the rows end to end); got {bounds}."
        )
    flat_ids = input_ids.reshape(-1)
    flat_mask = torch.ones_like(flat_ids) if attention_mask is None else attention_mask.reshape(-1).to(flat_ids.dtype)
    lengths = [b - a for a, b in zip(bounds, bounds[1:])]
    longest = max(lengths)
    rows = torch.zeros(len(lengths), longest, dtype=flat_ids.dtype, device=flat_ids.device)
    masks = torch.zeros_like(rows)
    for i, (start, length) in enumerate(zip(bounds, lengths)):
        rows[i, :length], masks[i, :length] = flat_ids[start : start + length], flat_mask[start : start + length]
    positions, deltas = build_position_ids(
        rows, config, image_grid_thw, video_grid_thw, masks, seconds, training=training
    )
    flat = torch.cat([positions[:, i, :length] for i, length in enumerate(lengths)], dim=1)
    # the sequence holding each row's last token: the first whose end reaches it
    last = torch.searchsorted(torch.tensor(bounds[1:]), torch.arange(1, batch + 1) * seq)
    return flat.reshape(positions.shape[0], batch, seq), deltas[last.to(deltas.device)]


def text_position_ids(
    batch: int, seq: int, past_length: int | torch.Tensor, axes: int, device: torch.device
) -> torch.Tensor:
    """0, 1, 2, ... after `past_length` cached tokens, on every axis: (axes, batch, seq), as transformers' RoFormer."""
    positions = torch.arange(seq, device=device) + past_length
    return positions.expand(axes, batch, seq)


def as_axes_batch_seq(position_ids: torch.Tensor, axes: int, batch: int, seq: int) -> torch.Tensor:
    """Any accepted `position_ids` as (axes, batch, seq): text (batch | 1, seq) goes on every axis."""
    given = tuple(position_ids.shape)
    if position_ids.dim() == 2:
        position_ids = position_ids.unsqueeze(0)
    ok = (
        position_ids.dim() == 3
        and position_ids.shape[0] in (1, axes)
        and position_ids.shape[1] in (1, batch)
        and position_ids.shape[2] == seq
    )
    if not ok:
        raise ValueError(
            f"position_ids has shape {given}; expected (batch, seq) = ({batch}, {seq}) or "
            f"(axes, batch, seq) = ({axes}, {batch}, {seq}). For mixed text/image input build them with "
            "roformer_ext.positions.build_position_ids."
        )
    return position_ids.expand(axes, batch, seq)


def decoding_position_ids(text_positions: torch.Tensor, deltas: torch.Tensor | None, config: Any) -> torch.Tensor:
    """Positions of tokens after a prompt: (index among real tokens) + the prompt's delta, on every axis.

    `text_positions` (batch, seq) as `generate` passes `position_ids`; `deltas` (batch or a divisor of it, 1) from
    `build_position_ids` (repeated for the beams / samples of each prompt); None: a text-only model, delta 0.
    """
    rope = config.rope_parameters
    if not scheme_knobs_class(rope["position_scheme"]).capabilities.cache:  # rope_2d_rows: rows do not advance
        raise ValueError(
            f"Cached generation is not defined for position_scheme {rope['position_scheme']!r} (its capabilities say "
            "so); use rope_tie, rope_tie_v2, mrope or rope_1d, or generate with use_cache=False."
        )
    positions = text_positions.float()
    if deltas is not None:
        if deltas.shape[0] != positions.shape[0]:  # expanded for beams / several samples per prompt
            deltas = deltas.repeat_interleave(positions.shape[0] // deltas.shape[0], dim=0)
        positions = positions + deltas.to(positions.device)
    return positions.unsqueeze(0).expand(int(rope["axes"]), -1, -1)
