"""What a multimodal position scheme and a frequency allocation can be set to, and what they can do: torch-free, so
the configuration can check them without importing model code.

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

The built-ins' knob classes are declared here (`BUILTIN_SCHEME_KNOBS`, `BUILTIN_ALLOCATION_KNOBS`); a test checks the
model modules register exactly these. A plugin passes its own class to the decorator; one registered without a
class gets one made from its keyword-only arguments (names and defaults, no checks).
"""

from __future__ import annotations

import inspect
import numbers
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


def _is_unit_interval(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 <= value <= 1


def _is_auto_scale(value: Any) -> bool:
    """'auto-<positive number>' (Circle-RoPE's radius: the largest coordinate times that scale)."""
    if not isinstance(value, str) or not value.startswith("auto-"):
        return False
    try:
        return is_positive_number(float(value[5:]))
    except ValueError:
        return False


POSITIVE = Knob("a positive number", is_positive_number)
BOOL = Knob("True or False", _is_bool)


@dataclass(frozen=True)
class SchemeCapabilities:
    """What a position scheme works with; each flag is read where that decision is made (named per flag)."""

    #: Video segments (`video_grid_thw`): `positions.build_position_ids`.
    video: bool = True
    #: Decoding with a KV cache, text continuing after the prompt's layout (the vision base model's
    #: `compute_position_ids`, where the scheme's positions are built).
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


def _scheme_knobs(
    name: str,
    knobs: tuple[tuple[str, Any, Knob], ...] = (),
    *,
    axes: int | None = 3,
    allocation: str | None = None,
    ratio: tuple[int, ...] | None = None,
    allowed_axes: tuple[int, ...] | None = None,
) -> type[SchemeKnobs]:
    """A built-in scheme's knob class: (name, default, check) per knob, and its class variables."""
    spec = [(knob, Any, field(default=default)) for knob, default, _ in knobs]
    namespace = {
        "scheme": name,
        "default_axes": axes,
        "default_allocation": allocation,
        # a scheme that brings its axes places tokens on those only (its function refuses others too)
        "allowed_axes": allowed_axes or ((axes,) if axes else (1, 2, 3)),
        "mrope_section_ratio": ratio,
        "checks": {knob: check for knob, _, check in knobs},
        "__doc__": f"The knobs of position scheme {name!r}.",
        "__module__": __name__,
    }
    class_name = "".join(part.capitalize() for part in name.split("_")) + "Knobs"
    return make_dataclass(class_name, spec, bases=(SchemeKnobs,), frozen=True, namespace=namespace)


QWEN2_VL_SPLIT, QWEN3_VL_SPLIT, MHROPE_HEADS = (16, 24, 24), (24, 20, 20), (2, 3, 3)
TEMPORAL_STRIDE = ("temporal_stride", 1.0, POSITIVE)

#: Every built-in position design's knob class, each with its paper's axes, allocation and split. Sources of the
#: splits: Qwen2-VL's [16, 24, 24] (Qwen2-VL / Qwen2.5-VL configs, contiguous sections; VideoRoPE, HoPE and Circle-RoPE
#: build on them; OmniGen2's split as the Multimodal-RoPEs reference runs it); Qwen3-VL's [24, 20, 20] (its config;
#: MRoPE-I and ILRoPE in the Multimodal-RoPEs reference); MHRoPE's [2, 3, 3] heads of 8 (that reference's default).
BUILTIN_SCHEME_KNOBS: dict[str, type[SchemeKnobs]] = {
    "rope_1d": _scheme_knobs("rope_1d", axes=None),
    "rope_2d_rows": _scheme_knobs("rope_2d_rows", axes=None),
    "rope_tie": _scheme_knobs("rope_tie", axes=None),
    "rope_tie_v2": _scheme_knobs("rope_tie_v2", axes=None),
    "mrope": _scheme_knobs("mrope", allocation="sections", ratio=QWEN2_VL_SPLIT),
    "qwen2_5_vl": _scheme_knobs(
        "qwen2_5_vl", (("tokens_per_second", 2.0, POSITIVE),), allocation="sections", ratio=QWEN2_VL_SPLIT
    ),
    "qwen3_vl": _scheme_knobs("qwen3_vl", allocation="mrope_interleaved", ratio=QWEN3_VL_SPLIT),
    "mrope_interleave": _scheme_knobs(
        "mrope_interleave",
        (("spatial_reset", True, BOOL), TEMPORAL_STRIDE),
        allocation="mrope_interleaved",
        ratio=QWEN3_VL_SPLIT,
    ),
    "mhrope": _scheme_knobs(
        "mhrope", (("spatial_reset", True, BOOL), TEMPORAL_STRIDE), allocation="headwise", ratio=MHROPE_HEADS
    ),
    "ilrope": _scheme_knobs("ilrope", (TEMPORAL_STRIDE,), allocation="mrope_interleaved", ratio=QWEN3_VL_SPLIT),
    "omnirope": _scheme_knobs("omnirope", (TEMPORAL_STRIDE,), allocation="omnirope", ratio=QWEN2_VL_SPLIT),
    "videorope": _scheme_knobs(
        "videorope", (("temporal_stride", 2.0, POSITIVE),), allocation="videorope", ratio=QWEN2_VL_SPLIT
    ),
    "hope": _scheme_knobs(
        "hope",
        (
            TEMPORAL_STRIDE,
            (
                "temporal_scales",  # HoPE's temporal scales drawn from while training
                None,
                Knob(
                    "None or a non-empty list of positive numbers",
                    lambda v: (
                        v is None or (isinstance(v, (list, tuple)) and len(v) > 0 and all(map(is_positive_number, v)))
                    ),
                ),
            ),
        ),
        allocation="hope",
        ratio=QWEN2_VL_SPLIT,
    ),
    "v2pe": _scheme_knobs(
        "v2pe",
        (
            ("visual_stride", 16.0, POSITIVE),
            (
                "visual_stride_tokens",  # V2PE's tokens per visual stride
                None,
                Knob(
                    "None or a positive integer (tokens per visual_stride; 256 in V2PE)",
                    lambda v: v is None or (is_int(v) and v > 0),
                ),
            ),
        ),
        axes=None,
    ),
    "mmrope": _scheme_knobs(
        "mmrope",
        (
            TEMPORAL_STRIDE,
            (
                "position_scale",
                (1.0, 1.0, 1.0),
                Knob(
                    "three positive numbers",
                    lambda v: isinstance(v, (list, tuple)) and len(v) == 3 and all(map(is_positive_number, v)),
                ),
            ),
        ),
        allocation="mmrope",
    ),
    "vrope": _scheme_knobs("vrope", axes=4, allocation="interleaved"),
    "circle_rope": _scheme_knobs(
        "circle_rope",
        (
            (
                "circle_radius",
                10.0,
                Knob(
                    "a positive number, 'auto' or 'auto-<positive scale>'",
                    lambda v: is_positive_number(v) or v == "auto" or _is_auto_scale(v),
                ),
            ),
            ("circle_alpha", 0.5, Knob("a number in [0, 1]", _is_unit_interval)),
            ("circle_move_to_origin", True, BOOL),
            ("circle_dff_rate", 0.0, Knob("a number in [0, 1]", _is_unit_interval)),
            (
                "circle_move_to_positive",
                None,
                Knob(
                    "None (off) or an offset >= 0",
                    lambda v: v is None or is_positive_number(v) or (v == 0 and not isinstance(v, bool)),
                ),
            ),
        ),
        allocation="sections",
        ratio=QWEN2_VL_SPLIT,
    ),
}

#: The built-in schemes' knobs by name, each with its check (the same name has the same check in every scheme): a
#: knob of another built-in scheme in rope_parameters is checked too, so a typo'd value fails at once.
BUILTIN_SCHEME_KNOB_CHECKS: dict[str, Knob] = {
    name: knob for knobs in BUILTIN_SCHEME_KNOBS.values() for name, knob in knobs.checks.items()
}

#: GRAPE-M's keys (the "grape_m" rotary kind's settings, beside the scheme's in rope_parameters).
GRAPE_KNOBS: dict[str, Knob] = {
    "grape_log_freq_scale": POSITIVE,
    "grape_learnable_freq": BOOL,
    "grape_share_across_heads": BOOL,
}


def knobs_from_signature(name: str, scheme: Callable) -> type[SchemeKnobs]:
    """A knob class for a scheme registered without one: its keyword-only arguments, with their defaults (those
    without a default are required), unchecked."""
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
    namespace = {"scheme": name, "__doc__": f"The knobs of position scheme {name!r}, from its signature."}
    return make_dataclass(f"{name}Knobs", spec, bases=(SchemeKnobs,), frozen=True, namespace=namespace)


def scheme_knobs_class(scheme: Any) -> type[SchemeKnobs]:
    """The knob class of the position scheme registered as `scheme`, the built-in one before position_schemes.py is
    imported, `SchemeKnobs` (no knobs) for an unknown name."""
    registered = POSITION_SCHEMES.knobs_of(scheme)
    if registered is not None:
        return registered
    return BUILTIN_SCHEME_KNOBS.get(scheme, SchemeKnobs) if isinstance(scheme, str) else SchemeKnobs


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
                    for k, v in BUILTIN_SCHEME_KNOBS.items()
                    if v.mrope_section_ratio and v.section_counts() == "pairs"
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


#: Every built-in frequency allocation's knob class.
BUILTIN_ALLOCATION_KNOBS: dict[str, type[AxisAllocationKnobs]] = {
    "interleaved": allocation_knobs("interleaved"),
    "split": SplitAllocationKnobs,
    "sections": allocation_knobs("sections", section="pairs"),
    "omnirope": allocation_knobs("omnirope", section="pairs", axis_ladders=True),
    "mrope_interleaved": allocation_knobs("mrope_interleaved", section="pairs"),
    "videorope": allocation_knobs("videorope", section="pairs"),
    "hope": allocation_knobs("hope", section="pairs"),
    "headwise": allocation_knobs("headwise", section="heads", headwise=True),
    "mmrope": allocation_knobs("mmrope"),
}


def allocation_knobs_class(allocation: Any) -> type[AxisAllocationKnobs]:
    """The knob class of the allocation registered as `allocation`, the built-in one before axis_allocations.py is imported,
    `AxisAllocationKnobs` (no section) for an unknown name."""
    registered = AXIS_ALLOCATIONS.knobs_of(allocation)
    if registered is not None:
        return registered
    return (
        BUILTIN_ALLOCATION_KNOBS.get(allocation, AxisAllocationKnobs)
        if isinstance(allocation, str)
        else (AxisAllocationKnobs)
    )


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
    "BUILTIN_ALLOCATION_KNOBS",
    "BUILTIN_SCHEME_KNOBS",
    "BUILTIN_SCHEME_KNOB_CHECKS",
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
