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
from .scheme_knobs import (
    GRAPE_KNOBS,
    Knob,
    allocation_knobs_class,
    rotates_per_head,
    scheme_knob_names,
    scheme_knobs_class,
)

logger = logging.get_logger(__name__)

#: Every built-in encoding, scheme and allocation (registered by the imports above) and each scheme's knob checks: a
#: knob of another built-in scheme in rope_parameters is checked too, so a typo'd value fails at once.
BUILTIN_ENCODINGS = POSITION_ENCODINGS.registered()
BUILTIN_SCHEMES, BUILTIN_ALLOCATIONS = registered_position_schemes(), registered_axis_allocations()
BUILTIN_SCHEME_KNOB_CHECKS = {
    knob: check for scheme in BUILTIN_SCHEMES for knob, check in scheme_knobs_class(scheme).checks.items()
}
#: Every built-in encoding's knob names (refused as fields of their own).
ENCODING_KNOB_NAMES = frozenset(knob for name in BUILTIN_ENCODINGS for knob in knobs_class(name).names())

#: The keys we add to transformers' rope_parameters (the built-in schemes' knobs and GRAPE-M's included); its
#: validators must not warn about them.
ROPE_LAYOUT_KEYS = {
    "pair_layout", "axes", "axis_allocation", "mrope_section", "position_scheme", *BUILTIN_SCHEME_KNOB_CHECKS,
    *GRAPE_KNOBS,
}  # fmt: skip

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

NORM_TYPES = ("layer_norm", "rms_scale_free")
ATTENTION_TYPES = ("softmax", "linear")
POOLER_ACTIVATIONS = ("tanh", "linear", None)
MULTIPLE_CHOICE_POOLINGS = ("first", "last")
CLASSIFIER_POOLINGS = ("cls", "mean")
DECODER_ATTENTIONS = ("causal", "unilm")
#: Sizes that become tensor shapes: positive ints (JSON's 128.0 or True would fail inside torch).
SIZE_FIELDS = (
    "vocab_size", "hidden_size", "embedding_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "type_vocab_size", "max_position_embeddings",
)  # fmt: skip


class RoFormerExtConfig(PreTrainedConfig):
    r"""Configuration of the RoFormerExt model family.

    The BERT-style sizes follow transformers' `RoFormerConfig`; the extra fields cover RoFormer-V2
    (`use_bias=False`, `norm_type="rms_scale_free"`), RoFormer-Sim (`pooler_activation="linear"`), linear
    attention and the multi-axis RoPE of the vision-text models. With RoPE nothing position-related is stored in
    the weights and there is no length cap; the encodings that learn positions keep them in the weights: the
    "learned" and "tupe" tables (`max_position_embeddings` rows), the relative tables and projections of "shaw", "t5_bias",
    "tupe", "deberta" and "transformer_xl", and GRAPE-M's log-frequencies (`rope_type` "grape_m").

    `rope_parameters` keys: `rope_type` (a registered rotary kind: <<ROTARY_KINDS>>), `rope_theta`, `pair_layout`
    (<<PAIR_LAYOUTS>>: "interleaved" as the original RoFormer), `axes` (1 text, 2 image, 3 video, 4 for VRoPE),
    `axis_allocation` (which rotary pair reads which axis: <<AXIS_ALLOCATIONS>>), `mrope_section` (pairs per axis
    for <<SECTIONED>>; heads per axis for "headwise"; a scheme's paper default fills it in where there is one),
    `position_scheme` (where each token sits: <<POSITION_SCHEMES>>) and the selected scheme's knobs
    (`roformer_ext.scheme_knobs` gives each one's default and check; docs/position-schemes.md): <<SCHEME_KNOBS>>. The lists here are the built-ins, written into this docstring from their
    registrations; a name registered later (`register_position_scheme`, ...) is accepted too.

    `decoder_attention` ("causal" | "unilm"): how a decoder (`is_decoder=True`, e.g. `RoFormerExtForCausalLM`)
    attends. "unilm" is RoFormer-Sim's sequence-to-sequence pattern: the source (token_type_ids == 0, given in the
    first call) attends bidirectionally within itself, every other token causally; tokens after a cache default to
    segment 1, and `generate` extends token_type_ids with 1s.

    `position_encoding` (default "rope"; registered: <<POSITION_ENCODINGS>>): how attention knows where tokens are.
    "rope" is RoFormer's rotary embedding (`rope_parameters`); the alternatives the RoFormer paper compares it with
    are "sinusoidal" and "learned" (absolute, added to the embeddings; "learned" has `max_position_embeddings` rows),
    "shaw" (relative key embeddings), "t5_bias" (T5's bucketed bias), "alibi" (linear biases), "none" (NoPE),
    "transformer_xl" (Transformer-XL / XLNet relative attention), "tupe" (untied positional encoding;
    `max_position_embeddings` rows) and "deberta" (DeBERTa-v2 disentangled attention). The vision-text models need
    "rope". E.g. `RoFormerExtConfig(position_encoding="alibi")`.

    `position_encoding_parameters`: the selected encoding's knobs in one dict, as `rope_parameters` holds the rotary
    ones; missing knobs take their defaults (written out when the config is built), unknown ones are refused. E.g.
    `RoFormerExtConfig(position_encoding="shaw", position_encoding_parameters={"max_relative_position": 8})`.
    `config.position_encoding_knobs` is the dict as the encoding's dataclass (`roformer_ext.encoding_knobs` gives each
    knob's meaning, default and check): <<ENCODING_KNOBS>>.
    "sinusoidal"'s rows have norm sqrt(d/2), word embeddings at initialisation initializer_range·sqrt(d): from
    scratch the table drowns the tokens after the embedding norm, so train from scratch with
    `sinusoidal_scale` = `initializer_range * 2 ** 0.5` (both start at one norm).

    `classifier_pooling` (as in transformers' ModernBERT): what the sequence classifier reads, "cls" (the first
    real token, BERT's and RoFormer's [CLS]: after the pads of a left-padded row) or "mean" (the mean of the real tokens: attention_mask 1, or each packed
    sequence's own tokens).

    `sparse_prediction` (as in transformers' ModernBERT): when the masked-LM model gets `labels`, the vocabulary
    projection runs only on the positions whose label is not `sparse_pred_ignore_index` (~15% in MLM pre-training)
    and `logits` holds just those rows, `(num_predicted, vocab_size)`. Same loss, fewer FLOPs and less memory.

    Example:
    ```python
    >>> from roformer_ext import RoFormerExtConfig, RoFormerExtModel
    >>> config = RoFormerExtConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    >>> model = RoFormerExtModel(config)
    ```
    """

    model_type = "roformer_ext"
    keys_to_ignore_at_inference = [CACHE]
    # transformers' distributed engine (`from_pretrained(..., tp_plan="auto")` / `DistributedConfig`), docs/distributed.md.
    # Tensor parallel: q/k/v and the intermediate column-wise, each rank holding whole heads (RoPE rotates local heads),
    # the output projections row-wise (a decoder's cross-attention stays whole); the word embeddings on the vocabulary
    # (a tied LM decoder is sharded alike).
    base_model_tp_plan = {
        "embeddings.word_embeddings": "embedding_rowwise",
        "layers.*.attention.query": "colwise",
        "layers.*.attention.key": "colwise",
        "layers.*.attention.value": "colwise",
        "layers.*.attention.output": "rowwise",
        "layers.*.feed_forward.intermediate": "colwise",
        "layers.*.feed_forward.output": "rowwise",
    }
    # FSDP2: one fully_shard per layer and one for the word embeddings (kept whole after forward by an LM head that
    # ties its decoder to them); norms, token types and heads go with the root's.
    base_model_fsdp_plan = {"embeddings.word_embeddings": "free_full_weight", "layers.*": "free_full_weight"}
    # No pipeline plan: transformers' pipeline stages replace `embed_tokens` / `norm` and feed hidden states back as
    # `inputs_embeds`, which our embeddings would add token types to and normalise a second time.
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
        """`rope_parameters` with every default written out (a saved config says what the model ran with): the one
        place it is completed, when the config is built and again when a model is built from it, so a dict assigned
        afterwards (`config.rope_parameters = {...}`, `from_pretrained(path, rope_parameters=...)`) is completed and
        checked too."""
        rope = dict(_check_dict("rope_parameters", self.rope_parameters) or {})
        if "type" in rope:  # a legacy `rope_scaling` dict, whose `type` transformers 5 reads as `rope_type`
            rope.setdefault("rope_type", rope.pop("type"))
        # A multimodal variant named here brings its frequency allocation (and axes) unless they are given: its knob
        # class says which (scheme_knobs.py).
        scheme = scheme_knobs_class(rope.get("position_scheme"))
        variant = {"axes": scheme.default_axes, "axis_allocation": scheme.default_allocation}
        rope = {**self.default_rope_parameters, **{k: v for k, v in variant.items() if v is not None}, **rope}
        # the paper's split scaled to this model (SchemeKnobs.mrope_section_ratio), where the allocation counts what
        # the paper's does: frequency pairs, or heads for a head-wise one (MHRoPE)
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
        """The selected encoding's knobs as its dataclass (defaults filled in, each checked)."""
        return knobs_class(self.position_encoding).from_dict(
            self.position_encoding_parameters or {}, self.position_encoding
        )

    @property
    def ignore_keys_at_rope_validation(self) -> set[str]:
        """The rope_parameters keys transformers' rope validation must not check: all but its own scaling keys (ours,
        the scheme's knobs, and unknown keys, which `validate_rope_layout` names once with the nearest known key), and
        any transformers adds (it assigns this attribute; the value is kept beside ours)."""
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
        """transformers' longrope checks, with the factors counted per frequency ladder, and a wrong count refused
        here (a shape error in the first forward otherwise): axis_allocation 'split' repeats one ladder of
        head_dim / axes dims on each axis, so it takes head_dim / (2 * axes) factors, not head_dim / 2."""
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
        """GRAPE-M's own keys (`grape_*`), through transformers' per-rope_type hook (it warns for a type without one);
        `validate_rope_layout` calls it too."""
        for key, knob in GRAPE_KNOBS.items():
            if key in rope_parameters:
                _check_scheme_knob(key, rope_parameters[key], knob)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate_fields(self) -> None:
        """Fail at construction, with the fix in the message, rather than deep inside a forward pass.

        Runs when the config is built and again when a model is built from it, so fields changed afterwards
        (`from_pretrained(path, attention_type=...)`, `config.x = ...`) are checked too.
        """
        for name in SIZE_FIELDS:  # a float or bool here fails later inside torch with an unrelated message
            _check_positive_int(name, getattr(self, name))
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
        _check_choice("norm_type", self.norm_type, NORM_TYPES)
        _check_choice("attention_type", self.attention_type, ATTENTION_TYPES)
        _check_choice("pooler_activation", self.pooler_activation, POOLER_ACTIVATIONS)
        _check_choice("multiple_choice_pooling", self.multiple_choice_pooling, MULTIPLE_CHOICE_POOLINGS)
        _check_choice("classifier_pooling", self.classifier_pooling, CLASSIFIER_POOLINGS)
        _check_choice("decoder_attention", self.decoder_attention, DECODER_ATTENTIONS)
        self.validate_position_encoding()
        self.validate_rope_layout()

    def validate_rope_layout(self) -> None:
        """Every rope_parameters field has the right type and range: a wrong one otherwise surfaces as an unrelated
        error (or NaN) in the first forward pass. Integer fields refuse bools and floats, numbers refuse inf / nan."""
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
        known = {*ROPE_LAYOUT_KEYS, *scheme_knob_names(rope["position_scheme"]), *TRANSFORMERS_ROPE_KEYS}
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
                _check_finite(f"rope_parameters[{key!r}]", value)
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
        if section is not None:
            _check_mrope_section(section)
        if rotates_per_head(rope) and self.attention_type == "linear":
            raise ValueError(
                f"axis_allocation {allocation!r} with rope_type {rope['rope_type']!r} rotates each head its own way "
                "(head-wise axes, or GRAPE's per-head frequencies), which linear attention does not support; use "
                "attention_type='softmax', or another allocation / grape_share_across_heads=True."
            )
        allocation_knobs_class(allocation).from_rope_parameters(rope).check(axes, pairs, self.num_attention_heads)

    def validate_position_encoding(self) -> None:
        """The encoding is registered and its knobs pass its own checks (`encoding_knobs`; whether it fits linear
        attention, the encoding checks when the model is built: the configuration imports no model code)."""
        POSITION_ENCODINGS.check(self.position_encoding)
        params = _check_dict("position_encoding_parameters", self.position_encoding_parameters) or {}
        knobs = knobs_class(self.position_encoding).from_dict(params, self.position_encoding)
        knobs.check(self)
        self.position_encoding_parameters = knobs.to_dict()  # defaults written out, a copy of the caller's dict


VISION_DEFAULT_ROPE_PARAMETERS: dict[str, Any] = {
    **DEFAULT_ROPE_PARAMETERS,
    "axes": 3,
    "axis_allocation": "interleaved",
    "position_scheme": "rope_tie_v2",
}


class RoFormerExtVisionTextConfig(RoFormerExtConfig):
    r"""Configuration of the vision-text models: the text fields plus patch sizes and placeholder ids.

    A separate `model_type` ("roformer_ext_vision") lets the Auto classes pick the vision-text heads. Defaults to
    3 axes (row, col, time), interleaved frequencies and RoPE-Tie-v2; text-only input then equals 1D RoPE exactly,
    so a text checkpoint carries over: `RoFormerExtVisionTextForMaskedLM.from_pretrained(text_folder, ...)`.
    """

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
        example = (
            "{'rope_type': 'default', 'rope_theta': 10000.0}"
            if name == "rope_parameters"
            else "{'max_relative_position': 8}"
        )
        raise TypeError(f"{name} must be a dict such as {example}; got {value!r} ({type(value).__name__}).")
    return value


def _check_choice(name: str, value: Any, allowed) -> None:
    if not isinstance(value, (str, type(None))) or value not in allowed:
        names = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"Unknown {name} {value!r}. Registered choices: {names}.")


def _check_positive_int(name: str, value: Any) -> None:
    """An int >= 1: TypeError for another type (bools and integral floats included), ValueError for the range."""
    if not is_int(value):
        raise TypeError(f"{name} must be a positive int; got {value!r} ({type(value).__name__}).")
    if value < 1:
        raise ValueError(f"{name} must be a positive int; got {value}.")


def _check_finite(name: str, value: Any) -> None:
    """No float inside `value` (a number or a list of them, as longrope's factors) is inf or nan."""
    values = value if isinstance(value, (list, tuple)) else [value]
    for item in values:
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{name} must be finite; got {value!r}. Give an ordinary number (e.g. factor 2.0).")


def _check_scheme_knob(key: str, value: Any, knob: Knob) -> None:
    """A position design's knob (scheme_knobs.py) passes its own check."""
    if not knob.check(value):
        raise ValueError(f"rope_parameters[{key!r}] must be {knob.description}; got {value!r}.")


def _check_mrope_section(section: Any) -> None:
    """A list of positive ints, frequency pairs per axis (its length and sum are checked against the config)."""
    if not isinstance(section, (list, tuple)):
        raise TypeError(
            f"rope_parameters['mrope_section'] must be a list of ints (frequency pairs per axis, e.g. [2, 3, 3]); "
            f"got {section!r} ({type(section).__name__})."
        )
    if not all(is_int(size) for size in section):
        raise TypeError(
            f"rope_parameters['mrope_section'] entries must be ints (frequency pairs per axis, e.g. [2, 3, 3]); got "
            f"{list(section)!r}."
        )
    if not all(size > 0 for size in section):
        raise ValueError(
            f"rope_parameters['mrope_section'] entries must be positive (every axis needs at least one frequency "
            f"pair); got {list(section)!r}."
        )


def _names(registry_names: tuple[str, ...]) -> str:
    return ", ".join(f'"{name}"' for name in sorted(registry_names))


RoFormerExtConfig.__doc__ = (
    RoFormerExtConfig.__doc__.replace("<<ROTARY_KINDS>>", _names(ROTARY_KINDS.builtin))
    .replace("<<PAIR_LAYOUTS>>", _names(PAIR_LAYOUTS))
    .replace("<<AXIS_ALLOCATIONS>>", _names(BUILTIN_ALLOCATIONS))
    .replace(
        "<<SECTIONED>>", _names(name for name in BUILTIN_ALLOCATIONS if allocation_knobs_class(name).section == "pairs")
    )
    .replace("<<POSITION_SCHEMES>>", _names(BUILTIN_SCHEMES))
    .replace("<<POSITION_ENCODINGS>>", _names(BUILTIN_ENCODINGS))
    .replace(
        "<<SCHEME_KNOBS>>",
        "; ".join(
            f'"{name}" {", ".join(f"`{knob}`" for knob in knobs.names())}'
            for name, knobs in ((name, scheme_knobs_class(name)) for name in BUILTIN_SCHEMES)
            if knobs.names()
        ),
    )
    .replace(
        "<<ENCODING_KNOBS>>",
        "; ".join(
            f'"{name}" {", ".join(f"`{knob}`" for knob in knobs_class(name).names())}'
            for name in BUILTIN_ENCODINGS
            if knobs_class(name).names()
        ),
    )
)

__all__ = ["RoFormerExtConfig", "RoFormerExtVisionTextConfig"]
