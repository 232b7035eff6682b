"""The names a configuration may use, in one torch-free module the configuration can import.

Three things are pluggable by name: position encodings (`config.position_encoding`), rotary kinds
(`rope_parameters["rope_type"]`) and position schemes (`rope_parameters["position_scheme"]`). Each has one
`Registry` here. The model modules fill them (`@register_position_encoding`, `@register_rotary_embedding`,
`@register_position_scheme`); the configuration only checks names, so it must not import those modules (a
configuration loaded on its own, e.g. `AutoConfig` with remote code, then needs no model code). The built-in names
are therefore declared here as data; `tests/positions/test_registries.py` checks they are exactly what the model
modules register.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

PAIR_LAYOUTS = ("interleaved", "half")


class Registry:
    """Name -> implementation, filled by decorators in the model modules; names are known before they are filled."""

    def __init__(self, field: str, register_hint: str, builtin: tuple[str, ...]) -> None:
        self.field, self.register_hint, self.builtin = field, register_hint, builtin
        self._entries: dict[str, Any] = {}

    def register(self, name: str, entry: Any, *, overwrite: bool = True) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"{self.field} names are non-empty strings; got {name!r}.")
        if name in self._entries and not overwrite:
            raise ValueError(f"{self.field} {name!r} is already registered; pass overwrite=True to replace it.")
        self._entries[name] = entry

    def unregister(self, name: str) -> None:
        """Remove a name a user registered (built-ins stay known to the configuration)."""
        self._entries.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """Every accepted name: the built-ins (registered or not yet imported) and the user's."""
        return tuple(sorted(set(self.builtin) | set(self._entries)))

    def registered(self) -> tuple[str, ...]:
        """The names with an implementation now."""
        return tuple(sorted(self._entries))

    def check(self, name: Any) -> None:
        """ValueError naming the accepted names (and how to add one) unless `name` is one of them."""
        if not isinstance(name, str) or name not in self.names():
            raise ValueError(
                f"Unknown {self.field} {name!r}. Registered choices: {', '.join(map(repr, self.names()))}. "
                f"{self.register_hint}"
            )

    def get(self, name: str) -> Any:
        self.check(name)
        return self._entries[name]

    def entry(self, name: Any) -> Any | None:
        """The implementation registered under `name`, None if there is none (yet): no check."""
        return self._entries.get(name) if isinstance(name, str) else None


POSITION_ENCODINGS = Registry(
    "position_encoding",
    "Register a new one with roformer_ext.register_position_encoding(name).",
    ("alibi", "deberta", "learned", "none", "rope", "shaw", "sinusoidal", "t5_bias", "transformer_xl", "tupe"),
)
ROTARY_KINDS = Registry(
    "rope_parameters['rope_type']",
    "Register a new one with roformer_ext.register_rotary_embedding(name).",
    ("default", "grape_m", *ROPE_INIT_FUNCTIONS),
)
POSITION_SCHEMES = Registry(
    "rope_parameters['position_scheme']",
    "Register a new one with roformer_ext.register_position_scheme(name).",
    (
        "circle_rope", "hope", "ilrope", "mhrope", "mmrope", "mrope", "mrope_interleave", "omnirope", "qwen2_5_vl",
        "qwen3_vl", "rope_1d", "rope_2d_rows", "rope_tie", "rope_tie_v2", "v2pe", "videorope", "vrope",
    ),
)  # fmt: skip
#: Which rotary frequency pair reads which position axis (rope.py registers the functions).
AXIS_ALLOCATIONS = Registry(
    "rope_parameters['axis_allocation']",
    "Register a new one with roformer_ext.rope.register_axis_allocation(name).",
    ("headwise", "hope", "interleaved", "mmrope", "mrope_interleaved", "omnirope", "sections", "split", "videorope"),
)
#: Allocations that read rope_parameters['mrope_section'] (frequency pairs per axis, summing to head_dim // 2).
SECTIONED_ALLOCATIONS = ("hope", "mrope_interleaved", "omnirope", "sections", "videorope")
#: Allocations whose rope_parameters['mrope_section'] counts attention heads per axis (at most num_attention_heads).
HEADWISE_ALLOCATIONS = ("headwise",)


def rotates_per_head(rope_parameters: dict) -> bool:
    """Whether cos / sin differ per attention head (they then carry a heads axis): a head-wise allocation (MHRoPE), or
    GRAPE with a frequency set per head (`grape_share_across_heads` False, the official code's per-head option)."""
    allocation = rope_parameters.get("axis_allocation")
    if allocation in HEADWISE_ALLOCATIONS or getattr(AXIS_ALLOCATIONS.entry(allocation), "headwise", False):
        return True
    return rope_parameters.get("rope_type") == "grape_m" and rope_parameters.get("grape_share_across_heads") is False


#: A multimodal variant is a position design (the function registered under its name in position_schemes.py) plus a
#: frequency allocation: naming the variant in rope_parameters fills in what it needs, unless the user gave it.
POSITION_SCHEME_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_5_vl": {"axes": 3, "axis_allocation": "sections"},
    "qwen3_vl": {"axes": 3, "axis_allocation": "mrope_interleaved"},
    "mrope_interleave": {"axes": 3, "axis_allocation": "mrope_interleaved"},
    "mhrope": {"axes": 3, "axis_allocation": "headwise"},
    "ilrope": {"axes": 3, "axis_allocation": "mrope_interleaved"},
    "omnirope": {"axes": 3, "axis_allocation": "omnirope"},
    "videorope": {"axes": 3, "axis_allocation": "videorope"},
    "hope": {"axes": 3, "axis_allocation": "hope"},
    "mmrope": {"axes": 3, "axis_allocation": "mmrope"},
    "vrope": {"axes": 4, "axis_allocation": "interleaved"},
    "circle_rope": {"axes": 3, "axis_allocation": "sections"},
}


def keyword_only_names(function: Any) -> frozenset[str]:
    """A callable's keyword-only argument names (a scheme's knobs); empty for one without a signature."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)


def scheme_knob_names(scheme: Any) -> frozenset[str]:
    """The knobs of the registered position scheme `scheme`: its keyword-only arguments, read from rope_parameters
    under their own names (empty for an unknown name)."""
    entry = POSITION_SCHEMES.entry(scheme)
    return keyword_only_names(entry) if entry is not None else frozenset()


#: The papers' frequency split (t, h, w) of a head's rotary pairs, at their head_dim 128 (64 pairs): used, scaled to
#: the model's head_dim, when rope_parameters names the scheme with a sectioned allocation and no `mrope_section`.
#: Qwen2-VL's [16, 24, 24] (Qwen2-VL / Qwen2.5-VL configs; VideoRoPE, HoPE and Circle-RoPE build on them; OmniGen2's
#: split as the Multimodal-RoPEs reference runs it); Qwen3-VL's [24, 20, 20] (its config; MRoPE-I and ILRoPE in the
#: Multimodal-RoPEs reference). MHRoPE's head-wise split has no published default: it stays required.
MROPE_SECTION_RATIOS: dict[str, tuple[int, int, int]] = {
    "mrope": (16, 24, 24),
    "qwen2_5_vl": (16, 24, 24),
    "circle_rope": (16, 24, 24),
    "videorope": (16, 24, 24),
    "hope": (16, 24, 24),
    "omnirope": (16, 24, 24),
    "qwen3_vl": (24, 20, 20),
    "mrope_interleave": (24, 20, 20),
    "ilrope": (24, 20, 20),
}


def default_mrope_section(scheme: Any, num_pairs: int) -> list[int] | None:
    """`scheme`'s paper split scaled to `num_pairs` (head_dim // 2) rotary pairs, summing to exactly `num_pairs`
    (largest remainders round up; every axis keeps at least one pair), or None without a paper default. E.g.
    Qwen2-VL's [16, 24, 24] gives [4, 6, 6] for head_dim 32."""
    ratio = MROPE_SECTION_RATIOS.get(scheme) if isinstance(scheme, str) else None
    if ratio is None or not isinstance(num_pairs, int) or num_pairs < len(ratio):
        return None
    total = sum(ratio)
    exact = [num_pairs * part / total for part in ratio]
    section = [max(1, int(share)) for share in exact]
    order = sorted(range(len(ratio)), key=lambda axis: exact[axis] - int(exact[axis]), reverse=True)
    for axis in order[: num_pairs - sum(section)]:
        section[axis] += 1
    while sum(section) > num_pairs:  # an axis raised to one pair: take it back from the largest
        section[section.index(max(section))] -= 1
    return section


#: Schemes that place tokens on more than the usual 1-3 axes: VRoPE's four diagonal directions.
FOUR_AXIS_SCHEMES = ("vrope",)


def is_int(value: Any) -> bool:
    """An integer that is not a bool (True is an int in Python, and never means 1 here)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_positive_number(name: str, value: Any, hint: str) -> None:
    """A real number, finite and > 0: TypeError for another type (bools included), ValueError for the range."""
    message = f"{name} must be a positive number (finite, > 0; {hint}); got {value!r}."
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(message)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(message)


def is_positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _is_unit_interval(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def _is_auto_scale(value: Any) -> bool:
    """'auto-<positive number>' (Circle-RoPE's radius: the largest coordinate times that scale)."""
    if not isinstance(value, str) or not value.startswith("auto-"):
        return False
    try:
        return is_positive_number(float(value[5:]))
    except ValueError:
        return False


@dataclass(frozen=True)
class Knob:
    """A built-in scheme's knob in rope_parameters: its check, and what it must be (the error says so)."""

    description: str
    check: Callable[[Any], bool]


#: The knobs of the built-in position designs, read from rope_parameters by the design's keyword-only arguments.
POSITION_SCHEME_KEYS: dict[str, Knob] = {
    "temporal_stride": Knob("a positive number", is_positive_number),
    "spatial_reset": Knob("True or False", lambda v: isinstance(v, bool)),
    "tokens_per_second": Knob("a positive number", is_positive_number),
    "visual_stride": Knob("a positive number", is_positive_number),
    "visual_stride_tokens": Knob(  # V2PE's tokens per visual stride
        "None or a positive integer (tokens per visual_stride; 256 in V2PE)",
        lambda v: v is None or (is_int(v) and v > 0),
    ),
    "position_scale": Knob(
        "three positive numbers",
        lambda v: isinstance(v, (list, tuple)) and len(v) == 3 and all(map(is_positive_number, v)),
    ),
    "temporal_scales": Knob(  # HoPE's temporal scales drawn from while training
        "None or a non-empty list of positive numbers",
        lambda v: v is None or (isinstance(v, (list, tuple)) and len(v) > 0 and all(map(is_positive_number, v))),
    ),
    "grape_log_freq_scale": Knob("a positive number", is_positive_number),
    "grape_learnable_freq": Knob("True or False", lambda v: isinstance(v, bool)),
    "grape_share_across_heads": Knob("True or False", lambda v: isinstance(v, bool)),
    "circle_radius": Knob(  # Circle-RoPE's radius
        "a positive number, 'auto' or 'auto-<positive scale>'",
        lambda v: is_positive_number(v) or v == "auto" or _is_auto_scale(v),
    ),
    "circle_alpha": Knob("a number in [0, 1]", _is_unit_interval),
    "circle_move_to_origin": Knob("True or False", lambda v: isinstance(v, bool)),
    "circle_dff_rate": Knob("a number in [0, 1]", _is_unit_interval),
    "circle_move_to_positive": Knob(
        "None (off) or an offset >= 0",
        lambda v: v is None or is_positive_number(v) or (v == 0 and not isinstance(v, bool)),
    ),
}

#: DeBERTa's position terms (`pos_att_type`).
DEBERTA_TERMS = ("c2p", "p2c")


def deberta_terms(pos_att_type: Any) -> Any:
    """`pos_att_type` as DeBERTa's config takes it, a list or a string such as "p2c|c2p", as a list: the one parser
    (the configuration stores the list; anything else is returned as given, for the check to name)."""
    if isinstance(pos_att_type, str):
        return [term.strip() for term in pos_att_type.lower().split("|")]
    return list(pos_att_type) if isinstance(pos_att_type, tuple) else pos_att_type


__all__ = [
    "AXIS_ALLOCATIONS",
    "DEBERTA_TERMS",
    "FOUR_AXIS_SCHEMES",
    "HEADWISE_ALLOCATIONS",
    "MROPE_SECTION_RATIOS",
    "PAIR_LAYOUTS",
    "POSITION_ENCODINGS",
    "POSITION_SCHEMES",
    "POSITION_SCHEME_DEFAULTS",
    "POSITION_SCHEME_KEYS",
    "SECTIONED_ALLOCATIONS",
    "ROTARY_KINDS",
    "Knob",
    "Registry",
    "check_positive_number",
    "deberta_terms",
    "is_int",
    "is_positive_number",
    "default_mrope_section",
    "scheme_knob_names",
    "rotates_per_head",
]
