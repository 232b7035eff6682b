"""What a multimodal position scheme and a frequency allocation can be set to, and what they can do.

A multimodal RoPE is a *position design* (`@register_position_scheme` in position_schemes.py) plus a *frequency
allocation* (`@register_axis_allocation` in axis_allocations.py). Each is one registration, and the registration carries a knob
dataclass:

- `SchemeKnobs`: the scheme's settings as fields with their defaults and checks (read from `rope_parameters` under
  their own names, as transformers keeps rotary settings flat there), the rope_parameters it fills in when the
  scheme is named (its `axes` and `axis_allocation`), the paper's `mrope_section` split scaled to the model's head
  (`default_mrope_section`), the axes it places tokens on, and its `capabilities` (`SchemeCapabilities`: video
  segments, a KV cache, packed rows). Positions hold no weights, so a scheme has no weight-init hook; a learnable
  rotary kind (GRAPE-M) initialises its own module.
- `AxisAllocationKnobs`: the allocation's `mrope_section` (what it counts: frequency pairs or attention heads per
  axis, or nothing) with its check against the head, whether it rotates each head its own way (`headwise`, which
  linear attention cannot run), and whether each axis gets its own frequency ladder (`axis_ladders`).

Each built-in is declared once, where its function is registered (position_schemes.py, axis_allocations.py): a
scheme's knob class is made from its function's keyword-only arguments (names and defaults) and the checks and class
variables its registration gives. A plugin passes its own class to the decorator, or gets one made the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from typing import Any, ClassVar

from .registries import AXIS_ALLOCATIONS, POSITION_SCHEMES, is_int, is_positive_number


@dataclass(frozen=True)
class Knob:
    """One knob's check, and what it must be (the error message says so)."""

    description: str
    check: Callable[[Any], bool]


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


POSITIVE = Knob("a positive number", is_positive_number)
BOOL = Knob("True or False", _is_bool)


@dataclass(frozen=True)
class SchemeCapabilities:
    """What a position scheme works with; each flag is read where that decision is made (named per flag)."""

    #: Video segments (`video_grid_thw`): `positions.build_position_ids`.
    video: bool = True
    #: Decoding with a KV cache, text continuing after the prompt's layout (`positions.decoding_position_ids`;
    #: rope_2d_rows has none: its rows do not advance with each token).
    cache: bool = True
    #: Padding-free packed rows, every sequence laid out alone (the same `compute_position_ids`).
    packing: bool = True


@dataclass(frozen=True)
class SchemeKnobs:
    """No knobs (rope_1d, rope_2d_rows, rope_tie, rope_tie_v2, mrope, qwen3_vl, vrope). A subclass lists a scheme's
    knobs as fields with defaults (the scheme function's keyword-only arguments, same names and defaults: a test
    checks) and each knob's check in `checks`; the class variables describe the scheme."""

    #: The scheme, for messages.
    scheme: ClassVar[str] = "this scheme"
    #: rope_parameters['axes'] filled in when the scheme is named and axes are not given (None: the config's default).
    default_axes: ClassVar[int | None] = None
    #: rope_parameters['axis_allocation'] filled in likewise: the frequency allocation the paper pairs it with.
    default_allocation: ClassVar[str | None] = None
    #: The axes it can place tokens on.
    allowed_axes: ClassVar[tuple[int, ...]] = (1, 2, 3)
    #: The paper's (t, h, w) split of what its allocation's `mrope_section` counts (`section_counts`): a head's
    #: rotary pairs at head_dim 128, or MHRoPE's heads (of 8), scaled to the model when an allocation counting the same
    #: gets no `mrope_section` (`default_mrope_section`); None: no published split.
    mrope_section_ratio: ClassVar[tuple[int, ...] | None] = None
    capabilities: ClassVar[SchemeCapabilities] = SchemeCapabilities()
    #: knob name -> its check; a value that fails it is a ValueError naming rope_parameters[knob].
    checks: ClassVar[dict[str, Knob]] = {}

    def __post_init__(self) -> None:
        for name, knob in self.checks.items():
            value = getattr(self, name)
            if not knob.check(value):
                raise ValueError(
                    f"Position scheme {self.scheme!r}: rope_parameters[{name!r}] must be {knob.description}; got "
                    f"{value!r}."
                )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_rope_parameters(cls, rope_parameters: dict) -> SchemeKnobs:
        """The knobs `rope_parameters` sets (the rest take their defaults), checked."""
        values = {name: rope_parameters[name] for name in cls.names() if name in rope_parameters}
        missing = [f.name for f in fields(cls) if f.name not in values and f.default is MISSING]
        if missing:
            raise ValueError(
                f"Position scheme {cls.scheme!r} needs rope_parameters[{missing[0]!r}] (a knob without a default); "
                "add it to rope_parameters."
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def section_counts(cls) -> str:
        """What `mrope_section_ratio` counts: "heads" where the paper's allocation is head-wise, "pairs" otherwise."""
        return allocation_knobs_class(cls.default_allocation).section or "pairs"

    @classmethod
    def default_mrope_section(cls, count: Any) -> list[int] | None:
        """The paper's split scaled to `count` (head_dim // 2 rotary pairs, or the attention heads where the split
        counts heads), summing to exactly `count` (largest remainders round up; every axis keeps at least one),
        or None without a paper split. E.g. Qwen2-VL's [16, 24, 24] gives [4, 6, 6] for head_dim 32; MHRoPE's
        [2, 3, 3] gives [1, 2, 1] for 4 heads."""
        ratio = cls.mrope_section_ratio
        if ratio is None or not is_int(count) or count < len(ratio):
            return None
        total = sum(ratio)
        exact = [count * part / total for part in ratio]
        section = [max(1, int(share)) for share in exact]
        order = sorted(range(len(ratio)), key=lambda axis: exact[axis] - int(exact[axis]), reverse=True)
        for axis in order[: max(0, count - sum(section))]:  # none to give when the minimum already overshoots
            section[axis] += 1
        while sum(section) > count:  # an axis raised to one pair: take it back from the largest
            section[section.index(max(section))] -= 1
        return section

    @classmethod
    def check_axes(cls, axes: int) -> None:
        if axes in cls.allowed_axes:
            return
        if cls.allowed_axes == (1, 2, 3):
            raise ValueError(f"rope_parameters['axes'] must be 1, 2 or 3 (text, image, video); got {axes}.")
        *most, last = map(str, cls.allowed_axes)
        allowed = f"{', '.join(most)} or {last}" if most else last
        raise ValueError(
            f"Position scheme {cls.scheme!r} places tokens on {allowed} axes; rope_parameters['axes'] = {axes}. Set "
            f"rope_parameters['axes'] = {last}, or leave it out: naming the scheme fills it in."
        )


#: GRAPE-M's keys (the "grape_m" rotary kind's settings, beside the scheme's in rope_parameters).
GRAPE_KNOBS: dict[str, Knob] = {
    "grape_log_freq_scale": POSITIVE,
    "grape_learnable_freq": BOOL,
    "grape_share_across_heads": BOOL,
}


def knobs_from_signature(name: str, scheme: Callable, **class_vars: Any) -> type[SchemeKnobs]:
    """The knob class of a scheme: its keyword-only arguments, with their defaults (those without a default are
    required), and `class_vars` (`checks`, `default_axes`, `default_allocation`, `mrope_section_ratio`,
    `capabilities`; `allowed_axes` defaults to the scheme's own axes where it brings them)."""
    try:
        parameters = inspect.signature(scheme).parameters.values()
    except (TypeError, ValueError):
        parameters = ()
    spec = [
        (p.name, Any) if p.default is inspect.Parameter.empty else (p.name, Any, field(default=p.default))
        for p in parameters
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    spec.sort(key=len)  # required knobs first, as a dataclass needs
    axes = class_vars.get("default_axes")
    class_vars.setdefault("allowed_axes", (axes,) if axes else (1, 2, 3))
    namespace = {"scheme": name, "__doc__": f"The knobs of position scheme {name!r}.", **class_vars}
    class_name = "".join(part.capitalize() for part in name.split("_")) + "Knobs"
    return make_dataclass(class_name, spec, bases=(SchemeKnobs,), frozen=True, namespace=namespace)


def scheme_knobs_class(scheme: Any) -> type[SchemeKnobs]:
    """The knob class of the position scheme registered as `scheme`, `SchemeKnobs` (no knobs) for an unknown name."""
    return POSITION_SCHEMES.knobs_of(scheme) or SchemeKnobs


def scheme_knob_names(scheme: Any) -> frozenset[str]:
    """The rope_parameters keys that are knobs of the position scheme `scheme`."""
    return frozenset(scheme_knobs_class(scheme).names())


@dataclass(frozen=True)
class AxisAllocationKnobs:
    """A frequency allocation's one knob, `mrope_section`, and what the allocation is. A subclass sets `section`
    (what `mrope_section` counts), `headwise`, `axis_ladders`, and may extend `check`."""

    #: The allocation, for messages.
    allocation: ClassVar[str] = "this allocation"
    #: What rope_parameters['mrope_section'] counts: None (not read), "pairs" (frequency pairs per axis, summing to
    #: head_dim // 2) or "heads" (attention heads per axis, at most num_attention_heads).
    section: ClassVar[str | None] = None
    #: Each attention head gets its own axes: cos / sin carry a heads axis, which linear attention cannot use (the
    #: configuration refuses that pair).
    headwise: ClassVar[bool] = False
    #: Each axis gets its own frequency ladder θ^(−2k/(2·n_a)) over its n_a pairs (OmniGen2).
    axis_ladders: ClassVar[bool] = False

    mrope_section: Any = None

    @classmethod
    def from_rope_parameters(cls, rope_parameters: dict) -> AxisAllocationKnobs:
        return cls(mrope_section=rope_parameters.get("mrope_section"))

    def check(self, axes: int, num_pairs: int, num_heads: int) -> None:
        """ValueError naming the fix when the section or the head cannot carry this allocation on `axes` axes."""
        section, name = self.mrope_section, self.allocation
        if self.section == "heads":
            if section is None or len(section) != axes or sum(section) > num_heads:
                raise ValueError(
                    f"axis_allocation {name!r} needs rope_parameters['mrope_section'] with {axes} entries, the "
                    f"attention heads per axis, summing to at most num_attention_heads = {num_heads} (MHRoPE's "
                    f"[2, 3, 3] for 8 heads); got {section}."
                )
        elif self.section == "pairs":
            if section is None:
                with_split = ", ".join(
                    k
                    for k in POSITION_SCHEMES.registered()
                    if scheme_knobs_class(k).mrope_section_ratio and scheme_knobs_class(k).section_counts() == "pairs"
                )
                raise ValueError(
                    f"axis_allocation {name!r} needs rope_parameters['mrope_section'] with {axes} entries summing to "
                    f"head_dim // 2 = {num_pairs} (frequency pairs per axis (t, h, w), e.g. Qwen2-VL's [16, 24, 24] "
                    f"for head_dim 128); got {section}. Naming a scheme with a published split ({with_split}) fills "
                    "it in for the head size."
                )
            if len(section) != axes:
                raise ValueError(
                    f"rope_parameters['mrope_section'] needs {axes} entries (one per axis) summing to head_dim // 2 = "
                    f"{num_pairs}; got {list(section)}."
                )
            if sum(section) != num_pairs:
                raise ValueError(
                    f"rope_parameters['mrope_section'] entries must sum to head_dim // 2 = {num_pairs} (the frequency "
                    f"pairs of a head); got {list(section)}, which sums to {sum(section)}."
                )
        elif num_pairs < axes:
            raise ValueError(f"head_dim // 2 = {num_pairs} frequency pairs cannot cover {axes} axes.")


@dataclass(frozen=True)
class SplitAllocationKnobs(AxisAllocationKnobs):
    """'split': equal contiguous shares of the pairs, one per axis."""

    allocation: ClassVar[str] = "split"

    def check(self, axes: int, num_pairs: int, num_heads: int) -> None:
        if num_pairs % axes:
            raise ValueError(
                f"axis_allocation 'split' gives each of the {axes} axes an equal share of the {num_pairs} frequency "
                f"pairs; {num_pairs} is not divisible by {axes}. Change the head dim or use 'interleaved'."
            )
        super().check(axes, num_pairs, num_heads)


def allocation_knobs(name: str, *, section: str | None = None, headwise: bool = False, axis_ladders: bool = False):
    """A knob class for allocation `name` with these class variables (what `register_axis_allocation`'s flags make)."""
    if section not in (None, "pairs", "heads"):
        raise ValueError(f"An allocation's section counts None, 'pairs' or 'heads'; got {section!r}.")
    namespace = {
        "allocation": name,
        "section": section,
        "headwise": bool(headwise),
        "axis_ladders": bool(axis_ladders),
        "__doc__": f"The knobs of axis allocation {name!r}.",
        "__module__": __name__,
    }
    class_name = "".join(part.capitalize() for part in name.split("_")) + "AllocationKnobs"
    return make_dataclass(class_name, [], bases=(AxisAllocationKnobs,), frozen=True, namespace=namespace)


def allocation_knobs_class(allocation: Any) -> type[AxisAllocationKnobs]:
    """The knob class of the allocation registered as `allocation`, `AxisAllocationKnobs` (no section) for an unknown
    name."""
    return AXIS_ALLOCATIONS.knobs_of(allocation) or AxisAllocationKnobs


def rotates_per_head(rope_parameters: dict) -> bool:
    """Whether cos / sin differ per attention head (they then carry a heads axis): a head-wise allocation (MHRoPE), or
    GRAPE with a frequency set per head (`grape_share_across_heads` False, the official code's per-head option)."""
    if allocation_knobs_class(rope_parameters.get("axis_allocation")).headwise:
        return True
    return rope_parameters.get("rope_type") == "grape_m" and rope_parameters.get("grape_share_across_heads") is False


def check_knob_class(knobs: Any, base: type, what: str) -> None:
    if not (isinstance(knobs, type) and issubclass(knobs, base)):
        raise TypeError(f"{what} knobs must be a {base.__name__} subclass (a frozen dataclass); got {knobs!r}.")


__all__ = [
    "GRAPE_KNOBS",
    "AxisAllocationKnobs",
    "Knob",
    "SchemeCapabilities",
    "SchemeKnobs",
    "SplitAllocationKnobs",
    "allocation_knobs",
    "allocation_knobs_class",
    "check_knob_class",
    "knobs_from_signature",
    "rotates_per_head",
    "scheme_knob_names",
    "scheme_knobs_class",
]
