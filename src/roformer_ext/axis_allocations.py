"""Frequency allocations: which rotary frequency pair reads which position axis (`rope_parameters["axis_allocation"]`).

A multimodal RoPE is a *position design* (position_schemes.py: where each token sits, one position per axis) plus a
*frequency allocation* (here: which of a head's rotary pairs turns with which axis). An allocation is a function of
(number of pairs, number of axes, `mrope_section`) registered with `register_axis_allocation`, and its registration
carries a knob class (scheme_knobs.py: what `mrope_section` counts and how it is checked, whether each head has its
own axes, whether each axis has its own frequency ladder). `axis_of_pair` is what the rotary embedding reads
(rope.py), once when it is built.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .registries import AXIS_ALLOCATIONS
from .scheme_knobs import (
    AxisAllocationKnobs,
    SplitAllocationKnobs,
    allocation_knobs,
    allocation_knobs_class,
    check_knob_class,
)

#: An allocation maps (number of frequency pairs, number of axes, mrope_section) to the axis that drives each pair,
#: as a list of ints; -1 leaves a pair unrotated (NoPE). Pair i has frequency θ_i = base^(−2i/d): low i is high frequency.
AxisAllocation = Callable[[int, int, "list[int] | None"], list[int]]


def register_axis_allocation(
    name: str,
    *,
    knobs: type[AxisAllocationKnobs] | None = None,
    section: str | None = None,
    headwise: bool = False,
    axis_ladders: bool = False,
    overwrite: bool = False,
) -> Callable[[AxisAllocation], AxisAllocation]:
    """Register a frequency allocation under `name`, so `rope_parameters={"axis_allocation": name}` selects it.

    The function gets `(num_pairs, axes, mrope_section)` and returns, for each pair, the index of the position axis
    that rotates it, or -1 for a pair left unrotated. A `headwise` allocation also gets `num_heads` and returns one
    such list per attention head (cos / sin then carry a heads axis: (batch, heads, seq, head_dim)). With
    `axis_ladders` every axis gets its own frequency ladder: the k-th of the n_a pairs axis a reads (in pair order)
    turns at θ^(−2k/(2·n_a)), as if the axis were a head of its own (OmniGen2); otherwise pair i turns at θ^(−2i/d),
    whichever axis reads it. `section` says what `rope_parameters['mrope_section']` counts, and the configuration
    checks it: None (not read), "pairs" (frequency pairs per axis, summing to head_dim // 2) or "heads" (attention
    heads per axis). These three flags make the allocation's knob class (`scheme_knobs.AxisAllocationKnobs`); pass
    `knobs`, a subclass, instead to add checks of your own (then not the flags). Re-registering a name needs
    `overwrite=True`.
    """
    if knobs is None:
        knobs = allocation_knobs(name, section=section, headwise=headwise, axis_ladders=axis_ladders)
    elif section is not None or headwise or axis_ladders:
        raise TypeError(
            f"register_axis_allocation({name!r}): pass either knobs= or the flags section= / headwise= / "
            "axis_ladders=, not both (the knob class sets them)."
        )
    check_knob_class(knobs, AxisAllocationKnobs, f"Axis allocation {name!r}'s")

    def decorator(allocation: AxisAllocation) -> AxisAllocation:
        AXIS_ALLOCATIONS.register(name, allocation, overwrite=overwrite, knobs=knobs)
        return allocation

    return decorator


def registered_axis_allocations() -> tuple[str, ...]:
    """Names accepted as `rope_parameters["axis_allocation"]`."""
    return AXIS_ALLOCATIONS.registered()


def is_headwise(allocation: str) -> bool:
    """Whether the allocation gives each attention head its own axes (cos / sin (batch, heads, seq, head_dim))."""
    AXIS_ALLOCATIONS.check(allocation)
    return allocation_knobs_class(allocation).headwise


def axis_of_pair(
    num_pairs: int, axes: int, allocation: str, mrope_section: list[int] | None = None, num_heads: int | None = None
) -> torch.Tensor:
    """For each frequency pair (and each head, for a head-wise allocation), the position axis that drives it (-1: not
    rotated): (num_pairs,) or (num_heads, num_pairs)."""
    entry = AXIS_ALLOCATIONS.get(allocation)
    # Plain Python lists: this also runs under the meta device, where repeat_interleave cannot.
    if allocation_knobs_class(allocation).headwise:
        return torch.tensor(entry(num_pairs, axes, mrope_section, num_heads), dtype=torch.long)
    return torch.tensor(entry(num_pairs, axes, mrope_section), dtype=torch.long)


@register_axis_allocation("interleaved")
def interleaved_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """θ0→axis 0, θ1→axis 1, ... (RoPE-Tie)."""
    return [pair % axes for pair in range(num_pairs)]


@register_axis_allocation("sections", section="pairs")
def sections_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """Contiguous bands of `mrope_section` pairs per axis (Qwen2-VL / Qwen2.5-VL M-RoPE)."""
    return [axis for axis, size in enumerate(mrope_section) for _ in range(size)]


@register_axis_allocation("omnirope", section="pairs", axis_ladders=True)
def omnirope_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """OmniRoPE (OmniGen2), as its official code allocates it (`OmniGen2RotaryPosEmbed`: diffusers'
    `get_1d_rotary_pos_embed(axes_dim[a])` per axis, concatenated, interleaved pairs): contiguous bands of
    `mrope_section` pairs per axis (t, h, w), as "sections", each band with its own ladder θ^(−2k/axes_dim[a]),
    axes_dim[a] = 2·mrope_section[a] (OmniGen2's axes_dim_rope (32, 32, 32) is mrope_section [16, 16, 16])."""
    return sections_allocation(num_pairs, axes, mrope_section)


@register_axis_allocation("split", knobs=SplitAllocationKnobs)
def split_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """Equal contiguous halves / thirds, each with its own full θ set (RoPE-2D for ViT)."""
    return [pair // (num_pairs // axes) for pair in range(num_pairs)]


def _strided(num_pairs: int, mrope_section: list[int], period: int, offsets: tuple[int, int]) -> list[int]:
    """Axis 0 everywhere, then axis a on pairs offsets[a−1], +period, ... below period · mrope_section[a]."""
    axis = [0] * num_pairs
    for a, offset in enumerate(offsets, start=1):
        for pair in range(offset, min(period * mrope_section[a], num_pairs), period):
            axis[pair] = a
    return axis


@register_axis_allocation("mrope_interleaved", section="pairs")
def mrope_interleaved_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """Qwen3-VL's interleaved M-RoPE (MRoPE-Interleave): T,H,W,T,H,W,...: pair 3m+1 reads h while m < section[1],
    pair 3m+2 reads w while m < section[2], every other pair reads t."""
    return _strided(num_pairs, mrope_section, 3, (1, 2))


@register_axis_allocation("videorope", section="pairs")
def videorope_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """VideoRoPE (official code, `apply_m_modify_multimodal_rotary_pos_emb`): the first section[1] + section[2] pairs
    (high frequencies) alternate h, w, h, w, ...; the temporal axis takes the last section[0] pairs, the lowest
    frequencies."""
    spatial = num_pairs - mrope_section[0]
    return [(1 if pair % 2 == 0 else 2) if pair < spatial else 0 for pair in range(num_pairs)]


@register_axis_allocation("hope", section="pairs")
def hope_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """HoPE's hybrid frequency allocation (official hrlics/HoPE code, `apply_hybrid_multimodal_rotary_pos_emb`):
    VideoRoPE's (the first section[1] + section[2] pairs alternate h, w, h, w, ...) with the last section[0] pairs,
    the lowest frequencies, left unrotated (NoPE) instead of reading t. (The ICLR 2026 reference, Multimodal-RoPEs,
    lays h and w on pairs 1, 2, 3, ... and NoPE on pair 0 too; its fixture test registers that variant itself.)"""
    return [-1 if axis == 0 else axis for axis in videorope_allocation(num_pairs, axes, mrope_section)]


@register_axis_allocation("headwise", section="heads", headwise=True)
def headwise_allocation(num_pairs: int, axes: int, mrope_section: list[int], num_heads: int) -> list[list[int]]:
    """MHRoPE (Huang et al., ICLR 2026): `mrope_section` counts heads per axis: the first section[0] heads rotate every
    pair with t, the next section[1] with h, the next section[2] with w; heads left over are not rotated (NoPE)."""
    per_head = [axis for axis, count in enumerate(mrope_section) for _ in range(count)]
    per_head += [-1] * (num_heads - len(per_head))
    return [[axis] * num_pairs for axis in per_head]


@register_axis_allocation("mmrope")
def mmrope_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """MM-RoPE (Lumos-1), as its official code (alibaba-damo-academy/Lumos, `ChameleonRotaryEmbedding`'s
    indices_frame / indices_h / indices_w, half layout) allocates it: meta components of 16 pairs
    T,T,T,T,H,H,W,W,H,H,W,W,H,H,W,W (4:6:6), repeated from the highest frequency. (The ICLR 2026 reference,
    Multimodal-RoPEs, takes 8-pair components T,T,H,W,H,W,H,W; its fixture test registers that variant itself.)"""
    return [(0, 0, 0, 0, 1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2)[pair % 16] for pair in range(num_pairs)]


__all__ = [
    "AxisAllocation",
    "axis_of_pair",
    "headwise_allocation",
    "hope_allocation",
    "interleaved_allocation",
    "is_headwise",
    "mmrope_allocation",
    "mrope_interleaved_allocation",
    "omnirope_allocation",
    "register_axis_allocation",
    "registered_axis_allocations",
    "sections_allocation",
    "split_allocation",
    "videorope_allocation",
]
