"""A position encoding's knobs (`position_encoding_parameters`) and capabilities, torch-free for the configuration."""

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from .registries import DEBERTA_TERMS, POSITION_ENCODINGS, check_positive_number, deberta_terms, is_int


@dataclass(frozen=True)
class Capabilities:
    """What an encoding works with; each flag is read where that decision is made."""

    linear_attention: bool = True  # linear attention forms no scores to add a term to (PositionEncoding.__init__)
    flash_attention: bool = True  # flash takes no term on the scores (attention_plan.check_backend_takes)
    cache: bool = True  # KV-cache decoding (attention_plan.make_attention_plan)
    packing: bool = True  # padding-free packed rows (attention_plan.make_attention_plan)
    onnx: bool = True  # torch.onnx.export (export.export_onnx)


#: The capabilities of an encoding that adds a term to the attention scores.
SCORE_TERM_CAPABILITIES = Capabilities(linear_attention=False, flash_attention=False)


@dataclass(frozen=True)
class EncodingKnobs:
    """No knobs; a subclass lists them as fields, checked in `__post_init__` and (with the model's sizes) `check`."""

    encoding: ClassVar[str] = "this encoding"  # for messages

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in fields(cls))

    @classmethod
    def from_dict(cls, values: dict[str, Any], encoding: str | None = None) -> "EncodingKnobs":
        """Missing knobs take their defaults; unknown ones are refused."""
        unknown = sorted(set(values) - set(cls.names()), key=str)
        if unknown:
            takes = ", ".join(map(repr, cls.names())) or "no knobs"
            raise ValueError(
                f"position_encoding_parameters has {', '.join(map(repr, unknown))}, which position_encoding="
                f"{encoding or cls.encoding!r} does not take; it takes {takes}. Remove them, or choose the encoding "
                "they belong to."
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """As the configuration stores them (JSON: tuples become lists)."""
        values = {field.name: getattr(self, field.name) for field in fields(self)}
        return {name: list(value) if isinstance(value, tuple) else value for name, value in values.items()}

    def check(self, config: Any) -> None:
        """Checks that need the model's other settings."""


def _positive_number(knobs: EncodingKnobs, name: str, hint: str) -> None:
    value = getattr(knobs, name)
    check_positive_number(f"{knobs.encoding}'s {name}", value, hint)
    object.__setattr__(knobs, name, float(value))  # numpy's numbers too, stored as JSON takes them


def _positive_int(knobs: EncodingKnobs, name: str, hint: str) -> None:
    value = getattr(knobs, name)
    if not is_int(value) or value < 1:
        raise ValueError(f"{knobs.encoding}'s {name} must be a positive integer ({hint}); got {value!r}.")
    object.__setattr__(knobs, name, int(value))


def _int(knobs: EncodingKnobs, name: str) -> None:
    value = getattr(knobs, name)
    if not is_int(value):
        raise TypeError(f"{knobs.encoding}'s {name} must be an int (<= 0 turns it off); got {value!r}.")
    object.__setattr__(knobs, name, int(value))


def _bool(knobs: EncodingKnobs, name: str) -> None:
    if not isinstance(getattr(knobs, name), bool):
        raise TypeError(f"{knobs.encoding}'s {name} must be True or False; got {getattr(knobs, name)!r}.")


def _buckets(knobs: EncodingKnobs, paper: str, even: bool = False, used: bool = True) -> None:
    """T5's bucket count and distance (TUPE's relative bias, when `used`, takes an even count)."""
    _positive_int(knobs, "relative_attention_num_buckets", f"{paper}: 32")
    _positive_int(knobs, "relative_attention_max_distance", f"{paper}: 128")
    buckets, distance = knobs.relative_attention_num_buckets, knobs.relative_attention_max_distance
    if used and (buckets < 4 or (even and buckets % 2) or distance <= buckets // 2):
        what = "tupe's relative bias (tupe_rel_pos=True) needs an even" if even else "t5_bias needs"
        raise ValueError(
            f"{what} relative_attention_num_buckets >= 4 and relative_attention_max_distance larger than half the "
            f"buckets ({paper}: 32 and 128); got {buckets} and {distance}."
        )


@dataclass(frozen=True)
class SinusoidalKnobs(EncodingKnobs):
    """`sinusoidal_scale` multiplies the table (1.0: Vaswani's)."""

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
        _positive_int(self, "max_relative_position", "Shaw et al.: 16")


@dataclass(frozen=True)
class T5BiasKnobs(EncodingKnobs):
    """T5's buckets: exact up to half of them, logarithmic up to `relative_attention_max_distance`."""

    encoding: ClassVar[str] = "t5_bias"
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128

    def __post_init__(self) -> None:
        _buckets(self, "T5")


@dataclass(frozen=True)
class TransformerXLKnobs(EncodingKnobs):
    """`clamp_len` clamps distances when > 0 (XLNet's -1: never)."""

    encoding: ClassVar[str] = "transformer_xl"
    clamp_len: int = -1

    def __post_init__(self) -> None:
        _int(self, "clamp_len")


@dataclass(frozen=True)
class TupeKnobs(EncodingKnobs):
    """`tupe_rel_pos` adds T5's bucketed bias (TUPE-R), `tupe_cls_reset` unties the first token."""

    encoding: ClassVar[str] = "tupe"
    tupe_rel_pos: bool = True
    tupe_cls_reset: bool = True
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128

    def __post_init__(self) -> None:
        _bool(self, "tupe_rel_pos")
        _bool(self, "tupe_cls_reset")
        _buckets(self, "TUPE", even=True, used=self.tupe_rel_pos)


def deberta_reach(max_relative_positions: int, config: Any) -> int:
    return max_relative_positions if max_relative_positions > 0 else config.max_position_embeddings


@dataclass(frozen=True)
class DebertaKnobs(EncodingKnobs):
    """DeBERTa-v3's defaults; `position_buckets` <= 0: none, `max_relative_positions` <= 0: max_position_embeddings."""

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
        if not (isinstance(terms, list) and terms and set(terms) <= set(DEBERTA_TERMS)) or len(set(terms)) < len(terms):
            raise ValueError(
                f"deberta's pos_att_type lists DeBERTa's position terms, 'c2p' and / or 'p2c' (e.g. ['c2p', 'p2c'] "
                f"or 'c2p|p2c'); got {self.pos_att_type!r}."
            )
        object.__setattr__(self, "pos_att_type", tuple(terms))
        if not isinstance(self.norm_rel_ebd, str) or self.norm_rel_ebd not in ("layer_norm", "none"):
            raise ValueError(
                f"Unknown norm_rel_ebd {self.norm_rel_ebd!r} (deberta's). Registered choices: 'layer_norm', 'none'."
            )

    def check(self, config: Any) -> None:
        reach = deberta_reach(self.max_relative_positions, config)
        if self.position_buckets > 0 and not (self.position_buckets >= 2 and reach - 1 > self.position_buckets // 2):
            raise ValueError(
                f"deberta's log buckets need position_buckets >= 2 and max_relative_positions - 1 larger than half "
                f"of them (DeBERTa-v3: 256 and 512); got position_buckets={self.position_buckets}, "
                f"max_relative_positions={reach}. Raise max_relative_positions or set position_buckets=-1."
            )


def knobs_class(encoding: Any) -> type[EncodingKnobs]:
    """The knob dataclass of the encoding registered as `encoding`; `EncodingKnobs` for none or an unknown name."""
    return getattr(POSITION_ENCODINGS.entry(encoding), "knobs", EncodingKnobs)
