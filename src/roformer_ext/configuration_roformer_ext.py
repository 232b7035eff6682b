"""RoFormerExt configuration: BERT sizes, RoFormer-V2 switches and a pluggable rope_parameters dict."""

from __future__ import annotations

import difflib
import math
from typing import Any

from transformers.activations import ACT2FN
from transformers.configuration_utils import PreTrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, RopeParameters
from transformers.utils import logging

from .axis_allocations import registered_axis_allocations
from .compat import CACHE, parent_validate_longrope_rope_parameters
from .encoding_knobs import EncodingKnobs, knobs_class
from .position_schemes import registered_position_schemes
from .registries import (
    AXIS_ALLOCATIONS,
    PAIR_LAYOUTS,
    POSITION_ENCODINGS,
    POSITION_SCHEMES,
    ROTARY_KINDS,
    check_positive_number,
    is_int,
)
from .relative_position_encodings import RELATIVE_ENCODINGS  # noqa: F401  (registers the built-in encodings)
from .scheme_knobs import GRAPE_KNOBS, Knob, allocation_knobs_class, rotates_per_head, scheme_knobs_class

logger = logging.get_logger(__name__)

#: The built-ins (registered by the imports above) and every built-in scheme's knob checks (any given is checked).
BUILTIN_ENCODINGS = POSITION_ENCODINGS.registered()
BUILTIN_SCHEMES, BUILTIN_ALLOCATIONS = registered_position_schemes(), registered_axis_allocations()
BUILTIN_SCHEME_KNOB_CHECKS = {
    knob: check for scheme in BUILTIN_SCHEMES for knob, check in scheme_knobs_class(scheme).checks.items()
}
#: Every built-in encoding's knob names (refused as fields of their own).
ENCODING_KNOB_NAMES = frozenset(knob for name in BUILTIN_ENCODINGS for knob in knobs_class(name).names())

#: The keys we add to transformers' rope_parameters (its validators must not warn about them).
ROPE_LAYOUT_KEYS = {
    "pair_layout",
    "axes",
    "axis_allocation",
    "mrope_section",
    "position_scheme",
    *BUILTIN_SCHEME_KNOB_CHECKS,
    *GRAPE_KNOBS,
}

#: The keys transformers reads from rope_parameters (rope_type, rope_theta, its scaling keys: factor, ...).
TRANSFORMERS_ROPE_KEYS = frozenset(RopeParameters.__annotations__)

DEFAULT_ROPE_PARAMETERS: dict[str, Any] = {
    "rope_type": "default",
    "rope_theta": 10000.0,
    "pair_layout": "interleaved",
    "axes": 1,
    "axis_allocation": "interleaved",
    "position_scheme": "rope_1d",
}

CHOICES = {
    "norm_type": ("layer_norm", "rms_scale_free"),
    "attention_type": ("softmax", "linear"),
    "pooler_activation": ("tanh", "linear", None),
    "multiple_choice_pooling": ("first", "last"),
    "classifier_pooling": ("cls", "mean"),
    "decoder_attention": ("causal", "unilm"),
}
#: Sizes that become tensor shapes: positive ints (JSON's 128.0 or True would fail inside torch).
SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "embedding_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "type_vocab_size",
    "max_position_embeddings",
)


class RoFormerExtConfig(PreTrainedConfig):
    r"""Configuration of the RoFormerExt model family.

    BERT-style sizes as transformers' `RoFormerConfig`, plus RoFormer-V2 (`use_bias=False`,
    `norm_type="rms_scale_free"`), RoFormer-Sim (`pooler_activation="linear"`), linear attention and multi-axis RoPE.
    The built-in names below are written from their registrations; names registered later are accepted too.

    `rope_parameters` keys: `rope_type` (<<ROTARY_KINDS>>), `rope_theta`, `pair_layout` (<<PAIR_LAYOUTS>>), `axes`
    (1 text, 2 image, 3 video, 4 for VRoPE), `axis_allocation` (which rotary pair reads which axis:
    <<AXIS_ALLOCATIONS>>), `mrope_section` (pairs per axis for <<SECTIONED>>; heads per axis for "headwise"; filled in
    from a scheme's paper split), `position_scheme` (where each token sits: <<POSITION_SCHEMES>>) and the selected
    scheme's knobs (docs/position-schemes.md): <<SCHEME_KNOBS>>.

    `decoder_attention` ("causal" | "unilm"): how a decoder attends; "unilm" is RoFormer-Sim's seq2seq pattern (the
    source, token_type_ids == 0, attends bidirectionally within itself, every other token causally).

    `position_encoding` (default "rope"; <<POSITION_ENCODINGS>>): how attention knows where tokens are; the
    vision-text models need "rope". `position_encoding_parameters`: the selected encoding's knobs in one dict (missing
    ones written out with their defaults, unknown ones refused), e.g. `{"max_relative_position": 8}` for "shaw";
    `config.position_encoding_knobs` is that dict as the encoding's dataclass: <<ENCODING_KNOBS>>. From scratch,
    train "sinusoidal" with `sinusoidal_scale = initializer_range * 2 ** 0.5` (its rows and the word embeddings then
    start at one norm).

    `classifier_pooling` (as ModernBERT): "cls" (the first real token) or "mean" (of the real tokens).
    `sparse_prediction` (as ModernBERT): with `labels`, the masked-LM head projects only the positions whose label is
    not `sparse_pred_ignore_index`, and `logits` holds just those rows, `(num_predicted, vocab_size)`.

    Example:
    ```python
    >>> from roformer_ext import RoFormerExtConfig, RoFormerExtModel
    >>> config = RoFormerExtConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    >>> model = RoFormerExtModel(config)
    ```
    """

    model_type = "roformer_ext"
    keys_to_ignore_at_inference = [CACHE]
    # transformers' distributed engine (docs/distributed.md): each tensor-parallel rank holds whole heads.
    base_model_tp_plan = {
        "embeddings.word_embeddings": "embedding_rowwise",
        "layers.*.attention.query": "colwise",
        "layers.*.attention.key": "colwise",
        "layers.*.attention.value": "colwise",
        "layers.*.attention.output": "rowwise",
        "layers.*.feed_forward.intermediate": "colwise",
        "layers.*.feed_forward.output": "rowwise",
    }
    # FSDP2: one fully_shard per layer and one for the word embeddings.
    base_model_fsdp_plan = {"embeddings.word_embeddings": "free_full_weight", "layers.*": "free_full_weight"}
    # No pipeline plan: its stages feed hidden states back as `inputs_embeds`, which our embeddings would re-embed.
    base_model_pp_plan = None

    vocab_size: int = 50000
    hidden_size: int = 768
    embedding_size: int | None = None
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 1536
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    use_bias: bool = True
    norm_type: str = "layer_norm"
    mlm_head_transform: bool | None = None
    rotary_value: bool = False
    attention_type: str = "softmax"
    pooler_activation: str | None = None
    multiple_choice_pooling: str = "first"
    classifier_pooling: str = "cls"
    classifier_dropout: float | None = None
    sparse_prediction: bool = False
    sparse_pred_ignore_index: int = -100
    rope_parameters: dict | None = None
    position_encoding: str = "rope"
    position_encoding_parameters: dict | None = None
    is_decoder: bool = False
    add_cross_attention: bool = False
    decoder_attention: str = "causal"
    use_cache: bool = True
    tie_word_embeddings: bool = True
    image_token_id: int | None = None
    video_token_id: int | None = None
    patch_size: int = 16
    temporal_patch_size: int = 2
    num_channels: int = 3

    default_rope_parameters = DEFAULT_ROPE_PARAMETERS

    def __post_init__(self, **kwargs):
        if self.embedding_size is None:
            self.embedding_size = self.hidden_size
        if self.mlm_head_transform is None:
            self.mlm_head_transform = self.norm_type == "layer_norm"
        # copies: transformers fills rope_parameters in place, and the caller's dicts are never changed
        self.rope_parameters = dict(_check_dict("rope_parameters", self.rope_parameters) or {})
        flat = sorted(set(kwargs) & ENCODING_KNOB_NAMES)
        if flat:  # a knob as a field of its own would be ignored
            raise ValueError(
                f"Position-encoding knobs go in position_encoding_parameters, one dict as rope_parameters; got "
                f"{', '.join(flat)} as fields of their own. Give e.g. position_encoding_parameters={{{flat[0]!r}: ...}}."
            )
        super().__post_init__(**kwargs)
        self.validate_fields()

    def complete_rope_parameters(self) -> dict[str, Any]:
        """`rope_parameters` with every default written out (a saved config says what the model ran with)."""
        rope = dict(_check_dict("rope_parameters", self.rope_parameters) or {})
        if "type" in rope:  # a legacy `rope_scaling` dict, whose `type` transformers 5 reads as `rope_type`
            rope.setdefault("rope_type", rope.pop("type"))
        # a named scheme brings its allocation and axes unless given
        scheme = scheme_knobs_class(rope.get("position_scheme"))
        variant = {"axes": scheme.default_axes, "axis_allocation": scheme.default_allocation}
        rope = {**self.default_rope_parameters, **{k: v for k, v in variant.items() if v is not None}, **rope}
        # the paper's split scaled to this model, where the allocation counts what the paper's does (pairs or heads)
        scheme = scheme_knobs_class(rope["position_scheme"])
        counts = allocation_knobs_class(rope["axis_allocation"]).section
        if rope.get("mrope_section") is None and counts == scheme.section_counts():
            section = scheme.default_mrope_section(
                self.head_dim // 2 if counts == "pairs" else self.num_attention_heads
            )
            if section is not None:
                rope["mrope_section"] = section
        return rope

    @property
    def position_encoding_knobs(self) -> EncodingKnobs:
        """The selected encoding's knobs as its dataclass (for plugins; the built-ins read the validated dict)."""
        return knobs_class(self.position_encoding).from_dict(
            self.position_encoding_parameters or {}, self.position_encoding
        )

    @property
    def ignore_keys_at_rope_validation(self) -> set[str]:
        """The rope_parameters keys transformers' rope validation must not check: all but its own scaling keys."""
        rope = self.__dict__.get("rope_parameters") or {}
        added = self.__dict__.get("ignore_keys_at_rope_validation") or set()
        return {key for key in rope if key in ROPE_LAYOUT_KEYS or key not in TRANSFORMERS_ROPE_KEYS} | added

    @ignore_keys_at_rope_validation.setter
    def ignore_keys_at_rope_validation(self, value: Any) -> None:
        self.__dict__["ignore_keys_at_rope_validation"] = set(value or ())

    def validate_rope(self) -> None:
        """transformers' checks of the scaling keys, with a ValueError that says what to add instead of a KeyError."""
        try:
            super().validate_rope()
        except KeyError as err:
            raise ValueError(
                f"{err.args[0]}. Add them to rope_parameters, e.g. rope_parameters={{'rope_type': 'linear', "
                "'factor': 2.0}."
            ) from None

    def _validate_longrope_rope_parameters(self, rope_parameters: dict, ignore_keys: Any = None) -> None:
        """transformers' longrope checks, factors counted per frequency ladder (a wrong count is no shape error)."""
        groups = rope_parameters.get("axes", 1) if rope_parameters.get("axis_allocation") == "split" else 1
        ladder = int(self.head_dim // groups * rope_parameters.get("partial_rotary_factor", 1.0))
        for key in ("short_factor", "long_factor"):
            factors = rope_parameters.get(key)
            if isinstance(factors, (list, tuple)) and len(factors) != ladder // 2:
                where = (
                    f"axis_allocation 'split' repeats one ladder of head_dim / axes = {ladder} dims on each of the "
                    f"{groups} axes"
                    if groups > 1
                    else f"head_dim {ladder} gives {ladder // 2} rotary frequencies"
                )
                raise ValueError(
                    f"rope_parameters[{key!r}] has {len(factors)} factors; longrope scales each frequency of the "
                    f"rotary's ladder, and {where}: give {ladder // 2} factors."
                )
        parent_validate_longrope_rope_parameters(self, rope_parameters, ignore_keys, ladder)

    def _validate_grape_m_rope_parameters(self, rope_parameters: dict, ignore_keys: Any = None) -> None:
        """GRAPE-M's keys, through transformers' per-rope_type hook; `validate_rope_layout` calls it too."""
        for key, knob in GRAPE_KNOBS.items():
            if key in rope_parameters:
                _check_scheme_knob(key, rope_parameters[key], knob)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate_fields(self) -> None:
        """Fail at construction (and again when a model is built), with the fix in the message, not in a forward."""
        for name in SIZE_FIELDS:  # a float or bool here fails later inside torch with an unrelated message
            value = getattr(self, name)
            if not is_int(value):
                raise TypeError(f"{name} must be a positive int; got {value!r} ({type(value).__name__}).")
            if value < 1:
                raise ValueError(f"{name} must be a positive int; got {value}.")
        if not isinstance(self.hidden_act, str) or self.hidden_act not in ACT2FN:
            raise ValueError(
                f"Unknown hidden_act {self.hidden_act!r}; use one of transformers' activations (ACT2FN), e.g. 'gelu' "
                "(RoFormer v1, exact erf), 'relu' (RoFormer-V2), 'gelu_new', 'silu'."
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                f"({self.num_attention_heads}); change one of them."
            )
        if self.head_dim % 2:
            raise ValueError(
                f"RoPE rotates pairs of dimensions, so the head dim must be even; got hidden_size "
                f"{self.hidden_size} / {self.num_attention_heads} heads = {self.head_dim}. Pick sizes with an even quotient."
            )
        for name, allowed in CHOICES.items():
            _check_choice(name, getattr(self, name), allowed)
        self.validate_position_encoding()
        self.validate_rope_layout()

    def validate_rope_layout(self) -> None:
        """Every rope_parameters field has the right type and range (else an unrelated error or NaN in a forward)."""
        rope = self.rope_parameters = self.complete_rope_parameters()
        ROTARY_KINDS.check(rope["rope_type"])
        POSITION_SCHEMES.check(rope["position_scheme"])
        _check_choice("rope_parameters['pair_layout']", rope["pair_layout"], PAIR_LAYOUTS)
        AXIS_ALLOCATIONS.check(rope["axis_allocation"])
        for key, knob in BUILTIN_SCHEME_KNOB_CHECKS.items():  # any built-in scheme's knob given, selected or not
            if key in rope:
                _check_scheme_knob(key, rope[key], knob)
        scheme = scheme_knobs_class(rope["position_scheme"])
        scheme.from_rope_parameters(rope)  # the selected scheme's knobs pass its own checks (a plugin's too)
        self._validate_grape_m_rope_parameters(rope)  # grape_* keys, also where another rope_type was chosen
        check_positive_number("rope_parameters['rope_theta']", rope.get("rope_theta"), "RoFormer uses 10000.0")
        known = {*ROPE_LAYOUT_KEYS, *scheme.names(), *TRANSFORMERS_ROPE_KEYS}
        for key, value in rope.items():
            if key not in known:  # a typo would otherwise leave its setting at the default in silence
                nearest = difflib.get_close_matches(str(key), sorted(known), n=1)
                logger.warning_once(  # once per process: validation runs again when a model is built
                    f"rope_parameters has an unknown key, {key!r}: transformers, roformer-ext and position scheme "
                    f"{rope['position_scheme']!r} do not read it"
                    + (f" (did you mean {nearest[0]!r}?)" if nearest else "")
                    + ". Unless a rotary kind of your own reads it, it is ignored."
                )
            elif key in TRANSFORMERS_ROPE_KEYS and key not in ROPE_LAYOUT_KEYS:  # factor, long_factor, ...
                values = value if isinstance(value, (list, tuple)) else [value]
                if any(isinstance(item, float) and not math.isfinite(item) for item in values):
                    name = f"rope_parameters[{key!r}]"
                    raise ValueError(
                        f"{name} must be finite; got {value!r}. Give an ordinary number (e.g. factor 2.0)."
                    )
        if rope["rope_type"] in ROPE_INIT_FUNCTIONS:  # transformers' own checks of its scaling keys (factor, ...)
            self.validate_rope()
        axes, pairs = rope["axes"], self.head_dim // 2
        if not is_int(axes):
            raise TypeError(
                f"rope_parameters['axes'] must be an int (1, 2 or 3); got {axes!r} ({type(axes).__name__}). "
                "Use 1 for text, 2 for images (row, col), 3 for video (row, col, frame)."
            )
        scheme.check_axes(axes)
        allocation, section = rope["axis_allocation"], rope.get("mrope_section")
        if section is not None:  # a list of positive ints (its length and sum are checked by the allocation)
            name, what = "rope_parameters['mrope_section']", "(frequency pairs per axis, e.g. [2, 3, 3])"
            if not isinstance(section, (list, tuple)):
                raise TypeError(f"{name} must be a list of ints {what}; got {section!r} ({type(section).__name__}).")
            if not all(is_int(size) for size in section):
                raise TypeError(f"{name} entries must be ints {what}; got {list(section)!r}.")
            if not all(size > 0 for size in section):
                raise ValueError(
                    f"{name} entries must be positive (every axis needs a frequency pair); got {list(section)!r}."
                )
        if rotates_per_head(rope) and self.attention_type == "linear":
            raise ValueError(
                f"axis_allocation {allocation!r} with rope_type {rope['rope_type']!r} rotates each head its own way "
                "(head-wise axes, or GRAPE's per-head frequencies), which linear attention does not support; use "
                "attention_type='softmax', or another allocation / grape_share_across_heads=True."
            )
        allocation_knobs_class(allocation).from_rope_parameters(rope).check(axes, pairs, self.num_attention_heads)

    def validate_position_encoding(self) -> None:
        """The encoding is registered and its knobs, built once here, pass its checks; the completed dict is stored."""
        POSITION_ENCODINGS.check(self.position_encoding)
        params = _check_dict("position_encoding_parameters", self.position_encoding_parameters) or {}
        knobs = knobs_class(self.position_encoding).from_dict(params, self.position_encoding)
        knobs.check(self)
        self.position_encoding_parameters = knobs.to_dict()  # defaults written out, a copy of the caller's dict


VISION_DEFAULT_ROPE_PARAMETERS = {**DEFAULT_ROPE_PARAMETERS, "axes": 3, "position_scheme": "rope_tie_v2"}


class RoFormerExtVisionTextConfig(RoFormerExtConfig):
    r"""Vision-text config; RoPE-Tie-v2 on 3 axes by default: text-only input equals 1D RoPE, so text checkpoints load."""

    model_type = "roformer_ext_vision"
    default_rope_parameters = VISION_DEFAULT_ROPE_PARAMETERS

    def validate_position_encoding(self) -> None:
        super().validate_position_encoding()
        if self.position_encoding != "rope":
            raise ValueError(
                f"The vision-text models place images with multi-axis RoPE; position_encoding must be 'rope', got "
                f"{self.position_encoding!r}. Pick the image layout with rope_parameters['position_scheme']."
            )


def _check_dict(name: str, value: Any) -> dict | None:
    if value is not None and not isinstance(value, dict):
        example = "{'rope_theta': 10000.0}" if name == "rope_parameters" else "{'max_relative_position': 8}"
        raise TypeError(f"{name} must be a dict such as {example}; got {value!r} ({type(value).__name__}).")
    return value


def _check_choice(name: str, value: Any, allowed) -> None:
    if not isinstance(value, (str, type(None))) or value not in allowed:
        names = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"Unknown {name} {value!r}. Registered choices: {names}.")


def _check_scheme_knob(key: str, value: Any, knob: Knob) -> None:
    if not knob.check(value):
        raise ValueError(f"rope_parameters[{key!r}] must be {knob.description}; got {value!r}.")


def _names(names) -> str:
    return ", ".join(f'"{name}"' for name in sorted(names))


def _knobs(classes: dict) -> str:
    listed = ((name, ", ".join(f"`{knob}`" for knob in knobs.names())) for name, knobs in classes.items())
    return "; ".join(f'"{name}" {knobs}' for name, knobs in listed if knobs)


for _key, _text in {
    "ROTARY_KINDS": _names(ROTARY_KINDS.builtin),
    "PAIR_LAYOUTS": _names(PAIR_LAYOUTS),
    "AXIS_ALLOCATIONS": _names(BUILTIN_ALLOCATIONS),
    "SECTIONED": _names(name for name in BUILTIN_ALLOCATIONS if allocation_knobs_class(name).section == "pairs"),
    "POSITION_SCHEMES": _names(BUILTIN_SCHEMES),
    "POSITION_ENCODINGS": _names(BUILTIN_ENCODINGS),
    "SCHEME_KNOBS": _knobs({name: scheme_knobs_class(name) for name in BUILTIN_SCHEMES}),
    "ENCODING_KNOBS": _knobs({name: knobs_class(name) for name in BUILTIN_ENCODINGS}),
}.items():
    RoFormerExtConfig.__doc__ = RoFormerExtConfig.__doc__.replace(f"<<{_key}>>", _text)
