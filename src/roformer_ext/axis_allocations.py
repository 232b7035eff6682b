"""Frequency allocations (`rope_parameters["axis_allocation"]`): which position axis turns each rotary pair.

A multimodal RoPE is a position design (position_schemes.py) plus a frequency allocation (here): a function of
(pairs, axes, `mrope_section`) registered with its knob class (scheme_knobs.py).
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

#: (pairs, axes, mrope_section) -> each pair's axis, -1: unrotated (NoPE). Pair i turns at θ^(−2i/d) (low i: fast).
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
    """Register an allocation as `rope_parameters={"axis_allocation": name}`.

    The function gets `(num_pairs, axes, mrope_section)` and returns each pair's position axis (-1: unrotated); a
    `headwise` one also gets `num_heads` and returns one list per head. `axis_ladders`: axis a's k-th of n_a pairs turns
    at θ^(−2k/(2·n_a)) (OmniGen2), else pair i at θ^(−2i/d). `section`: what `mrope_section` counts (None, "pairs",
    "heads"). Or pass `knobs`, an `AxisAllocationKnobs` subclass, instead of the flags.
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


def axis_of_pair(
    num_pairs: int, axes: int, allocation: str, mrope_section: list[int] | None = None, num_heads: int | None = None
) -> torch.Tensor:
    """Each pair's position axis (-1: not rotated): (num_pairs,), or (num_heads, num_pairs) for a head-wise allocation.
    Built from Python lists: this also runs under the meta device."""
    heads = (num_heads,) if allocation_knobs_class(allocation).headwise else ()
    return torch.tensor(AXIS_ALLOCATIONS.get(allocation)(num_pairs, axes, mrope_section, *heads), dtype=torch.long)


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
    """OmniRoPE (OmniGen2's `OmniGen2RotaryPosEmbed`): bands of `mrope_section` pairs per axis, as "sections", each
    with its own ladder θ^(−2k/axes_dim[a]), axes_dim[a] = 2·mrope_section[a] (OmniGen2's (32, 32, 32): [16] * 3)."""
    return sections_allocation(num_pairs, axes, mrope_section)


@register_axis_allocation("split", knobs=SplitAllocationKnobs)
def split_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """Equal contiguous halves / thirds, each with its own full θ set (RoPE-2D for ViT)."""
    return [pair // (num_pairs // axes) for pair in range(num_pairs)]


@register_axis_allocation("mrope_interleaved", section="pairs")
def mrope_interleaved_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """Qwen3-VL's MRoPE-Interleave: T,H,W,T,H,W,...; pair 3m+1 reads h while m < section[1], 3m+2 w while
    m < section[2], the rest t."""
    axis = [0] * num_pairs
    for a in (1, 2):
        for pair in range(a, min(3 * mrope_section[a], num_pairs), 3):
            axis[pair] = a
    return axis


@register_axis_allocation("videorope", section="pairs")
def videorope_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """VideoRoPE (official `apply_m_modify_multimodal_rotary_pos_emb`): the first section[1] + section[2] pairs
    alternate h, w, ...; t takes the last section[0], the lowest frequencies."""
    spatial = num_pairs - mrope_section[0]
    return [(1 if pair % 2 == 0 else 2) if pair < spatial else 0 for pair in range(num_pairs)]


@register_axis_allocation("hope", section="pairs")
def hope_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """HoPE (official `apply_hybrid_multimodal_rotary_pos_emb`): VideoRoPE's, with the last section[0] pairs left
    unrotated (NoPE) instead of reading t. (Multimodal-RoPEs' variant is registered by its fixture test.)"""
    return [-1 if axis == 0 else axis for axis in videorope_allocation(num_pairs, axes, mrope_section)]


@register_axis_allocation("headwise", section="heads", headwise=True)
def headwise_allocation(num_pairs: int, axes: int, mrope_section: list[int], num_heads: int) -> list[list[int]]:
    """MHRoPE (Huang et al., ICLR 2026): `mrope_section` counts heads per axis (t, h, w); heads left over: NoPE."""
    per_head = [axis for axis, count in enumerate(mrope_section) for _ in range(count)]
    per_head += [-1] * (num_heads - len(per_head))
    return [[axis] * num_pairs for axis in per_head]


@register_axis_allocation("mmrope")
def mmrope_allocation(num_pairs: int, axes: int, mrope_section: list[int] | None) -> list[int]:
    """MM-RoPE (Lumos-1's `ChameleonRotaryEmbedding`): 16-pair components T,T,T,T,H,H,W,W,H,H,W,W,H,H,W,W (4:6:6)
    from the highest frequency. (Multimodal-RoPEs' 8-pair variant is registered by its fixture test.)"""
    return [(0, 0, 0, 0, 1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2)[pair % 16] for pair in range(num_pairs)]
