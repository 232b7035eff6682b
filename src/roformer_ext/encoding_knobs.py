"""What a position encoding can be set to, and what it can do: torch-free, so the configuration can check it.

A position encoding is one registration (`@register_position_encoding("name")` on a `PositionEncoding` subclass in
`position_encodings.py`, or in a user's own file), and the class carries:

- `knobs`: a frozen dataclass of its settings with their defaults and its own checks (`EncodingKnobs` subclass). The
  configuration stores the selected encoding's knobs in one nested dict, `position_encoding_parameters`, as it stores
  the rotary settings in `rope_parameters`; `config.position_encoding_knobs` is that dict as the dataclass.
- `capabilities`: what it works with (`Capabilities`): linear attention, flash attention, a KV cache, packed rows,
  ONNX export. The one place that decides each of these reads the flag.
- `init_position_weights(config)`: its weight-init hook (position_encodings.py).

The built-in encodings' knob classes are defined here and named by their encoding's class (`knobs = ShawKnobs`), the
one registration.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from .registries import DEBERTA_TERMS, POSITION_ENCODINGS, check_positive_number, deberta_terms, is_int


@dataclass(frozen=True)
class Capabilities:
    """What an encoding works with; each flag is read where that decision is made (named per flag)."""

    #: Linear attention never forms the (q × k) scores: an encoding that adds a term to them cannot run there
    #: (checked when the encoding is built).
    linear_attention: bool = True
    #: Flash attention takes no term on the scores (`attention_plan.check_backend_takes`).
    flash_attention: bool = True
    #: Decoding with a KV cache (`attention_plan.make_attention_plan`).
    cache: bool = True
    #: Padding-free packed rows (`cu_seq_lens_*`; `attention_plan.make_attention_plan`).
    packing: bool = True
    #: ONNX export through `torch.onnx.export(dynamo=True)` (`export.export_onnx`).
    onnx: bool = True


#: The capabilities of an encoding that adds a term to the attention scores.
SCORE_TERM_CAPABILITIES = Capabilities(linear_attention=False, flash_attention=False)


@dataclass(frozen=True)
class EncodingKnobs:
    """No knobs (RoPE, whose settings are `rope_parameters`; ALiBi, NoPE, the learned table). A subclass lists an
    encoding's knobs as fields with defaults, checks each one in `__post_init__` (a TypeError or ValueError naming the
    knob and the fix), and what needs the model's sizes in `check(config)`."""

    #: The encoding the knobs belong to, for messages (set by each subclass).
    encoding: ClassVar[str] = "this encoding"

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in fields(cls))

    @classmethod
    def from_dict(cls, values: dict[str, Any], encoding: str | None = None) -> EncodingKnobs:
        """The knobs from `position_encoding_parameters` (missing ones take their defaults; unknown ones are refused)."""
        unknown = sorted(set(values) - set(cls.names()), key=str)
        if unknown:
            name = encoding or cls.encoding
            takes = ", ".join(map(repr, cls.names())) or "no knobs"
            raise ValueError(
                f"position_encoding_parameters has {', '.join(map(repr, unknown))}, which position_encoding="
                f"{name!r} does not take; it takes {takes}. Remove them, or choose the encoding they belong to."
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The knobs as the configuration stores them (JSON: tuples become lists)."""
        values = {field.name: getattr(self, field.name) for field in fields(self)}
        return {name: list(value) if isinstance(value, tuple) else value for name, value in values.items()}

    def check(self, config: Any) -> None:
        """Checks that need the model's other settings (sizes, `is_decoder`)."""


def _positive_number(knobs: EncodingKnobs, name: str, hint: str) -> None:
    value = getattr(knobs, name)
    check_positive_number(f"{knobs.encoding}'s {name}", value, hint)
    object.__setattr__(knobs, name, float(value))  # numpy's floats and ints too: stored as JSON takes them


def _positive_int(knobs: EncodingKnobs, name: str, hint: str = "") -> None:
    value = getattr(knobs, name)
    if not is_int(value) or value < 1:
        raise ValueError(f"{knobs.encoding}'s {name} must be a positive integer{hint}; got {value!r}.")
    object.__setattr__(knobs, name, int(value))  # numpy's ints too: stored as JSON takes them


def _int(knobs: EncodingKnobs, name: str) -> None:
    value = getattr(knobs, name)
    if not is_int(value):
        raise TypeError(f"{knobs.encoding}'s {name} must be an int (<= 0 turns it off); got {value!r}.")
    object.__setattr__(knobs, name, int(value))


def _bool(knobs: EncodingKnobs, name: str) -> None:
    value = getattr(knobs, name)
    if not isinstance(value, bool):
        raise TypeError(f"{knobs.encoding}'s {name} must be True or False; got {value!r}.")
    object.__setattr__(knobs, name, bool(value))


@dataclass(frozen=True)
class SinusoidalKnobs(EncodingKnobs):
    """`sinusoidal_scale` multiplies the table (1.0: Vaswani's and DistilBERT's)."""

    encoding: ClassVar[str] = "sinusoidal"
    sinusoidal_scale: float = 1.0

    def __post_init__(self) -> None:
        _positive_number(self, "sinusoidal_scale", "1.0 is Vaswani's table")


@dataclass(frozen=True)
class ShawKnobs(EncodingKnobs):
    """Shaw et al.'s clipping distance: key embeddings for distances -k..k."""

    encoding: ClassVar[str] = "shaw"
    max_relative_position: int = 16

    def __post_init__(self) -> None:
        _positive_int(self, "max_relative_position", " (Shaw et al.: 16)")


@dataclass(frozen=True)
class T5BiasKnobs(EncodingKnobs):
    """T5's bucketed bias: `relative_attention_num_buckets` buckets, exact up to half of them, logarithmic up to
    `relative_attention_max_distance`."""

    encoding: ClassVar[str] = "t5_bias"
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128

    def __post_init__(self) -> None:
        _positive_int(self, "relative_attention_num_buckets", " (T5: 32)")
        _positive_int(self, "relative_attention_max_distance", " (T5: 128)")
        if not (
            self.relative_attention_num_buckets >= 4
            and self.relative_attention_max_distance > self.relative_attention_num_buckets // 2
        ):
            raise ValueError(
                "t5_bias needs relative_attention_num_buckets >= 4 and relative_attention_max_distance larger than "
                f"half the buckets (T5: 32 and 128); got {self.relative_attention_num_buckets} and "
                f"{self.relative_attention_max_distance}."
            )


@dataclass(frozen=True)
class TransformerXLKnobs(EncodingKnobs):
    """`clamp_len` clamps distances when > 0 (XLNet's -1: never)."""

    encoding: ClassVar[str] = "transformer_xl"
    clamp_len: int = -1

    def __post_init__(self) -> None:
        _int(self, "clamp_len")


@dataclass(frozen=True)
class TupeKnobs(EncodingKnobs):
    """TUPE: `tupe_rel_pos` adds T5's bucketed bias (TUPE-R; buckets and distance as T5's), `tupe_cls_reset` unties
    the first token."""

    encoding: ClassVar[str] = "tupe"
    tupe_rel_pos: bool = True
    tupe_cls_reset: bool = True
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128

    def __post_init__(self) -> None:
        _bool(self, "tupe_rel_pos")
        _bool(self, "tupe_cls_reset")
        _positive_int(self, "relative_attention_num_buckets", " (TUPE: 32)")
        _positive_int(self, "relative_attention_max_distance", " (TUPE: 128)")
        if self.tupe_rel_pos and not (
            4 <= self.relative_attention_num_buckets
            and self.relative_attention_num_buckets % 2 == 0
            and self.relative_attention_max_distance > self.relative_attention_num_buckets // 2
        ):
            raise ValueError(
                "tupe's relative bias (tupe_rel_pos=True) needs an even relative_attention_num_buckets >= 4 and "
                "relative_attention_max_distance larger than half the buckets (TUPE: 32 and 128); got "
                f"{self.relative_attention_num_buckets} and {self.relative_attention_max_distance}."
            )


@dataclass(frozen=True)
class DebertaKnobs(EncodingKnobs):
    """DeBERTa-v2's disentangled attention, defaults as DeBERTa-v3's checkpoints: `pos_att_type` the position terms
    (a list, or a "c2p|p2c" string as DebertaV2Config takes it), `position_buckets` log buckets (<= 0: none),
    `max_relative_positions` (<= 0: max_position_embeddings), `share_att_key`, `norm_rel_ebd` "layer_norm" | "none"."""

    encoding: ClassVar[str] = "deberta"
    position_buckets: int = 256
    max_relative_positions: int = -1
    pos_att_type: tuple[str, ...] = DEBERTA_TERMS
    share_att_key: bool = True
    norm_rel_ebd: str = "layer_norm"

    def __post_init__(self) -> None:
        _int(self, "position_buckets")
        _int(self, "max_relative_positions")
        _bool(self, "share_att_key")
        terms = deberta_terms(self.pos_att_type)
        if (
            not isinstance(terms, list)
            or not terms
            or not set(terms) <= set(DEBERTA_TERMS)
            or len(set(terms)) != len(terms)
        ):
            raise ValueError(
                f"deberta's pos_att_type lists DeBERTa's position terms, 'c2p' and / or 'p2c' (e.g. ['c2p', 'p2c'] "
                f"or 'c2p|p2c'); got {self.pos_att_type!r}."
            )
        object.__setattr__(self, "pos_att_type", tuple(terms))
        if not isinstance(self.norm_rel_ebd, str) or self.norm_rel_ebd not in ("layer_norm", "none"):
            raise ValueError(
                f"Unknown norm_rel_ebd {self.norm_rel_ebd!r} (deberta's). Registered choices: 'layer_norm', 'none'."
            )

    def relative_span(self, config: Any) -> int:
        """The distance reach: `max_relative_positions`, or `max_position_embeddings` when it is <= 0."""
        return self.max_relative_positions if self.max_relative_positions > 0 else config.max_position_embeddings

    def check(self, config: Any) -> None:
        reach = self.relative_span(config)
        if self.position_buckets > 0 and not (self.position_buckets >= 2 and reach - 1 > self.position_buckets // 2):
            raise ValueError(
                f"deberta's log buckets need position_buckets >= 2 and max_relative_positions - 1 larger than half "
                f"of them (DeBERTa-v3: 256 and 512); got position_buckets={self.position_buckets}, "
                f"max_relative_positions={reach}. Raise max_relative_positions or set position_buckets=-1."
            )


def knobs_class(encoding: Any) -> type[EncodingKnobs]:
    """The knob dataclass of the encoding registered as `encoding` (its class's `knobs`, checked by
    `register_position_encoding`), `EncodingKnobs` (no knobs) for an encoding without any or an unknown name."""
    return getattr(POSITION_ENCODINGS.entry(encoding), "knobs", EncodingKnobs)


__all__ = [
    "Capabilities",
    "DebertaKnobs",
    "EncodingKnobs",
    "SCORE_TERM_CAPABILITIES",
    "ShawKnobs",
    "SinusoidalKnobs",
    "T5BiasKnobs",
    "TransformerXLKnobs",
    "TupeKnobs",
    "knobs_class",
]
