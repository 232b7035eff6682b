"""What a position scheme and a frequency allocation can be set to, and what they can do: the knob dataclass each
registration carries, the one place its knobs' defaults and checks live (`SchemeKnobs`, `AxisAllocationKnobs`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from typing import Any, ClassVar

from .registries import AXIS_ALLOCATIONS, POSITION_SCHEMES, is_int, is_positive_number


@dataclass(frozen=True)
class Knob:
    """One knob's check, and what it must be (for the message)."""

    description: str
    check: Callable[[Any], bool]


POSITIVE = Knob("a positive number", is_positive_number)
BOOL = Knob("True or False", lambda value: isinstance(value, bool))


@dataclass(frozen=True)
class SchemeCapabilities:
    """What a position scheme works with; each flag is read where that decision is made."""

    video: bool = True  # video segments (positions.build_position_ids)
    cache: bool = True  # text continuing after a cached prompt (positions.decoding_position_ids; not rope_2d_rows)
    packing: bool = True  # padding-free packed rows (modeling_roformer_ext_vision)


@dataclass(frozen=True)
class SchemeKnobs:
    """No knobs. A subclass lists a scheme's knobs as fields (its function's keyword-only arguments and defaults) and
    their checks in `checks`; the class variables are what naming the scheme fills in and what it can do."""

    scheme: ClassVar[str] = "this scheme"  # for messages
    default_axes: ClassVar[int | None] = None  # rope_parameters['axes'] when not given (None: the config's default)
    default_allocation: ClassVar[str | None] = None  # rope_parameters['axis_allocation'] likewise
    allowed_axes: ClassVar[tuple[int, ...]] = (1, 2, 3)
    #: The paper's (t, h, w) split of what its allocation's `mrope_section` counts (`section_counts`), scaled to the
    #: model (`default_mrope_section`); None: no published split.
    mrope_section_ratio: ClassVar[tuple[int, ...] | None] = None
    capabilities: ClassVar[SchemeCapabilities] = SchemeCapabilities()
    checks: ClassVar[dict[str, Knob]] = {}  # knob name -> its check

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
        """The knobs `rope_parameters` sets (the rest at their defaults), checked."""
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
        """What `mrope_section_ratio` counts: "heads" for a head-wise paper allocation, else "pairs"."""
        return allocation_knobs_class(cls.default_allocation).section or "pairs"

    @classmethod
    def default_mrope_section(cls, count: Any) -> list[int] | None:
        """The paper's split scaled to `count` pairs or heads, summing to it (largest remainders round up, every axis
        keeps one), or None: Qwen2-VL's [16, 24, 24] is [4, 6, 6] at head_dim 32."""
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


#: GRAPE-M's keys (the "grape_m" rotary kind's settings, in rope_parameters).
GRAPE_KNOBS: dict[str, Knob] = dict(
    grape_log_freq_scale=POSITIVE, grape_learnable_freq=BOOL, grape_share_across_heads=BOOL
)


def knobs_from_signature(name: str, scheme: Callable, **class_vars: Any) -> type[SchemeKnobs]:
    """A scheme's knob class: its keyword-only arguments (without a default: required) and `class_vars`;
    `allowed_axes` defaults to `default_axes` where given."""
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
    """The knob class registered with `scheme`; `SchemeKnobs` (no knobs) for an unknown name."""
    return POSITION_SCHEMES.knobs_of(scheme) or SchemeKnobs


@dataclass(frozen=True)
class AxisAllocationKnobs:
    """An allocation's knob, `mrope_section`: `section` says what it counts (None, "pairs" or "heads"), `headwise`
    cos / sin per head (not with linear attention), `axis_ladders` each axis its own frequency ladder (OmniGen2)."""

    allocation: ClassVar[str] = "this allocation"  # for messages
    section: ClassVar[str | None] = None
    headwise: ClassVar[bool] = False
    axis_ladders: ClassVar[bool] = False

    mrope_section: Any = None

    @classmethod
    def from_rope_parameters(cls, rope_parameters: dict) -> AxisAllocationKnobs:
        return cls(mrope_section=rope_parameters.get("mrope_section"))

    def check(self, axes: int, num_pairs: int, num_heads: int) -> None:
        """ValueError naming the fix when the section or the head cannot carry it on `axes` axes."""
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
    """A knob class for allocation `name` with these class variables (`register_axis_allocation`'s flags)."""
    if section not in (None, "pairs", "heads"):
        raise ValueError(f"An allocation's section counts None, 'pairs' or 'heads'; got {section!r}.")
    namespace = dict(
        allocation=name,
        section=section,
        headwise=bool(headwise),
        axis_ladders=bool(axis_ladders),
        __doc__=f"The knobs of axis allocation {name!r}.",
        __module__=__name__,
    )
    class_name = "".join(part.capitalize() for part in name.split("_")) + "AllocationKnobs"
    return make_dataclass(class_name, [], bases=(AxisAllocationKnobs,), frozen=True, namespace=namespace)


def allocation_knobs_class(allocation: Any) -> type[AxisAllocationKnobs]:
    """The knob class registered with `allocation`; `AxisAllocationKnobs` for an unknown name."""
    return AXIS_ALLOCATIONS.knobs_of(allocation) or AxisAllocationKnobs


def rotates_per_head(rope_parameters: dict) -> bool:
    """Whether cos / sin differ per head: a head-wise allocation (MHRoPE), or GRAPE not sharing across heads."""
    if allocation_knobs_class(rope_parameters.get("axis_allocation")).headwise:
        return True
    return rope_parameters.get("rope_type") == "grape_m" and rope_parameters.get("grape_share_across_heads") is False


def check_knob_class(knobs: Any, base: type, what: str) -> None:
    if not (isinstance(knobs, type) and issubclass(knobs, base)):
        raise TypeError(f"{what} knobs must be a {base.__name__} subclass (a frozen dataclass); got {knobs!r}.")
