"""The registries of what a configuration may name, and the small checks they share.

Four things are pluggable by name: position encodings (`config.position_encoding`), rotary kinds
(`rope_parameters["rope_type"]`), position schemes (`rope_parameters["position_scheme"]`) and frequency allocations
(`rope_parameters["axis_allocation"]`). Each has one `Registry` here, filled by one registration per plugin
(`@register_position_encoding`, `@register_rotary_embedding`, `@register_position_scheme`,
`@register_axis_allocation`), which carries its implementation and its knob dataclass. The built-ins register when
their modules are imported (the configuration imports them). Rotary kinds also accept transformers' own rope types.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

PAIR_LAYOUTS = ("interleaved", "half")


class Registry:
    """Name -> implementation, filled by decorators in the model modules; names are known before they are filled."""

    def __init__(self, field: str, register_hint: str, builtin: tuple[str, ...] = ()) -> None:
        self.field, self.register_hint, self.builtin = field, register_hint, builtin
        self._entries: dict[str, Any] = {}
        self._knobs: dict[str, type] = {}

    def register(self, name: str, entry: Any, *, overwrite: bool = True, knobs: type | None = None) -> None:
        """`knobs`: the knob dataclass the registration carries (schemes and allocations; an encoding's class carries
        its own)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"{self.field} names are non-empty strings; got {name!r}.")
        if name in self._entries and not overwrite:
            raise ValueError(f"{self.field} {name!r} is already registered; pass overwrite=True to replace it.")
        self._entries[name] = entry
        if knobs is None:
            self._knobs.pop(name, None)
        else:
            self._knobs[name] = knobs

    def unregister(self, name: str) -> None:
        """Remove a name a user registered (built-ins stay known to the configuration)."""
        self._entries.pop(name, None)
        self._knobs.pop(name, None)

    def knobs_of(self, name: Any) -> type | None:
        """The knob dataclass registered with `name`, None if none is (yet)."""
        return self._knobs.get(name) if isinstance(name, str) else None

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
)
ROTARY_KINDS = Registry(
    "rope_parameters['rope_type']",
    "Register a new one with roformer_ext.register_rotary_embedding(name).",
    ("default", "grape_m", *ROPE_INIT_FUNCTIONS),
)
POSITION_SCHEMES = Registry(
    "rope_parameters['position_scheme']",
    "Register a new one with roformer_ext.register_position_scheme(name).",
)
#: Which rotary frequency pair reads which position axis (rope.py registers the functions).
AXIS_ALLOCATIONS = Registry(
    "rope_parameters['axis_allocation']",
    "Register a new one with roformer_ext.register_axis_allocation(name).",
)


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
    "PAIR_LAYOUTS",
    "POSITION_ENCODINGS",
    "POSITION_SCHEMES",
    "ROTARY_KINDS",
    "Registry",
    "check_positive_number",
    "deberta_terms",
    "is_int",
    "is_positive_number",
]
