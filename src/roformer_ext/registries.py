"""What a configuration may name: position encodings, rotary kinds, position schemes, frequency allocations."""

import math
import numbers
from typing import Any

from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

PAIR_LAYOUTS = ("interleaved", "half")


class Registry:
    """Name -> implementation (and knob class), filled by the `register_*` decorators."""

    def __init__(self, field: str, register: str, builtin: tuple[str, ...] = ()) -> None:
        self.field, self.builtin = field, builtin
        self.register_hint = f"Register a new one with roformer_ext.{register}(name)."
        self._entries: dict[str, Any] = {}
        self._knobs: dict[str, type] = {}

    def register(self, name: str, entry: Any, *, overwrite: bool = True, knobs: type | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"{self.field} names are non-empty strings; got {name!r}.")
        if name in self._entries and not overwrite:
            raise ValueError(f"{self.field} {name!r} is already registered; pass overwrite=True to replace it.")
        self._entries[name] = entry
        self._knobs.pop(name, None)
        if knobs is not None:
            self._knobs[name] = knobs

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)
        self._knobs.pop(name, None)

    def knobs_of(self, name: Any) -> type | None:
        return self._knobs.get(name) if isinstance(name, str) else None

    def names(self) -> tuple[str, ...]:
        """Every accepted name: the built-ins (imported or not) and the user's."""
        return tuple(sorted(set(self.builtin) | set(self._entries)))

    def registered(self) -> tuple[str, ...]:
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
        return self._entries.get(name) if isinstance(name, str) else None


POSITION_ENCODINGS = Registry("position_encoding", "register_position_encoding")
ROTARY_KINDS = Registry(
    "rope_parameters['rope_type']", "register_rotary_embedding", ("default", "grape_m", *ROPE_INIT_FUNCTIONS)
)
POSITION_SCHEMES = Registry("rope_parameters['position_scheme']", "register_position_scheme")
AXIS_ALLOCATIONS = Registry("rope_parameters['axis_allocation']", "register_axis_allocation")


def is_int(value: Any) -> bool:
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
    """`pos_att_type` as DebertaV2Config takes it (a list, or "p2c|c2p") as a list; anything else as given."""
    if isinstance(pos_att_type, str):
        return [term.strip() for term in pos_att_type.lower().split("|")]
    return list(pos_att_type) if isinstance(pos_att_type, tuple) else pos_att_type
