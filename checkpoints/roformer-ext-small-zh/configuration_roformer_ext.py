"""RoFormerExt configuration: BERT sizes, RoFormer-V2 switches and a pluggable rope_parameters dict."""

from __future__ import annotations

import math
import numbers
from typing import Any

from transformers.activations import ACT2FN
from transformers.configuration_utils import PreTrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .compat import CACHE
from .registries import (
    AXIS_ALLOCATIONS,
    DEBERTA_TERMS,
    FOUR_AXIS_SCHEMES,
    HEADWISE_ALLOCATIONS,
    MROPE_SECTION_RATIOS,
    PAIR_LAYOUTS,
    POSITION_ENCODINGS,
    POSITION_SCHEME_DEFAULTS,
    POSITION_SCHEME_KEYS,
    POSITION_SCHEMES,
    ROTARY_KINDS,
    SECTIONED_ALLOCATIONS,
    Knob,
    deberta_terms,
    default_mrope_section,
    is_int,
    rotates_per_head,
    scheme_knob_names,
)

#: GRAPE-M's knobs, checked by its rope_type hook (`_validate_grape_m_rope_parameters`).
GRAPE_KEYS = tuple(key for key in POSITION_SCHEME_KEYS if key.startswith("grape_"))

#: The keys we add to transformers' rope_parameters; its validators must not warn about them.
ROPE_LAYOUT_KEYS = {"pair_layout", "axes", "axis_allocation", "mrope_section", "position_scheme", *POSITION_SCHEME_KEYS}

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
    (docs/position-schemes.md). The lists here are the built-in names of `roformer_ext.registries`, written into
    this docstring from them; a name registered later (`register_position_scheme`, ...) is accepted too.

    `decoder_attention` ("causal" | "unilm"): how a decoder (`is_decoder=True`, e.g. `RoFormerExtForCausalLM`)
    attends. "unilm" is RoFormer-Sim's sequence-to-sequence pattern: the source (token_type_ids == 0, given in the
    first call) attends bidirectionally within itself, every other token causally; tokens after a cache default to
    segment 1, and `generate` extends token_type_ids with 1s.

    `position_encoding` (default "rope"; registered: <<POSITION_ENCODINGS>>): how attention knows where tokens are.
    "rope" is
    RoFormer's rotary embedding (`rope_parameters`); the alternatives the RoFormer paper compares it with are
    "sinusoidal" and "learned" (absolute, added to the embeddings; "learned" has `max_position_embeddings` rows),
    "shaw" (relative key embeddings clipped at `max_relative_position`), "t5_bias" (T5's bucketed bias,
    `relative_attention_num_buckets`, `relative_attention_max_distance`), "alibi" (linear biases) and "none" (NoPE).
    E.g. `RoFormerExtConfig(position_encoding="alibi")`. The vision-text models need "rope".
    The RoFormer paper's other alternatives, each with the fields its paper / transformers names:
    "transformer_xl" (Transformer-XL / XLNet relative attention; `clamp_len` clamps distances when > 0, XLNet's -1:
    never), "tupe" (untied positional encoding: `tupe_rel_pos` adds T5's bucketed bias with
    `relative_attention_num_buckets` / `relative_attention_max_distance`, `tupe_cls_reset` unties the first token;
    `max_position_embeddings` rows) and "deberta" (DeBERTa-v2 disentangled attention: `pos_att_type` a list or
    "c2p|p2c" string of the terms, `position_buckets` log buckets (<= 0: none), `max_relative_positions` (<= 0:
    max_position_embeddings), `share_att_key`, `norm_rel_ebd` "layer_norm" | "none"; defaults as DeBERTa-v3's
    checkpoints).
    `sinusoidal_scale` multiplies the "sinusoidal" table (1.0: Vaswani's and DistilBERT's). Its rows have norm
    sqrt(d/2), word embeddings at initialisation initializer_range·sqrt(d): from scratch the table drowns the tokens
    after the embedding norm, so train from scratch with `initializer_range * 2 ** 0.5` (both start at one norm).

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
    max_relative_position: int = 16
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    sinusoidal_scale: float = 1.0
    clamp_len: int = -1
    tupe_rel_pos: bool = True
    tupe_cls_reset: bool = True
    position_buckets: int = 256
    max_relative_positions: int = -1
    pos_att_type: str | list[str] = "c2p|p2c"
    share_att_key: bool = True
    norm_rel_ebd: str = "layer_norm"
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
        self.rope_parameters = self.rope_parameters or {}
        self.pos_att_type = deberta_terms(self.pos_att_type)  # as DebertaV2Config: "c2p|p2c" -> ["c2p", "p2c"]
        super().__post_init__(**kwargs)
        self.validate_fields()

    def __setattr__(self, key: str, value: Any) -> None:
        # Also when from_pretrained(..., rope_parameters={...}) assigns a partial dict after construction, and for a
        # legacy `rope_scaling` dict, whose `type` key transformers 5 reads as `rope_type`.
        if key == "rope_parameters" and value is not None and not isinstance(value, dict):
            raise TypeError(
                f"rope_parameters must be a dict such as {{'rope_type': 'default', 'rope_theta': 10000.0}}; got "
                f"{value!r} ({type(value).__name__})."
            )
        if key == "rope_parameters" and isinstance(value, dict):
            value = dict(value)
            if "type" in value:
                value.setdefault("rope_type", value.pop("type"))
            # A multimodal variant named here brings its frequency allocation (and axes) unless they are given.
            scheme = value.get("position_scheme")
            variant = POSITION_SCHEME_DEFAULTS.get(scheme, {}) if isinstance(scheme, str) else {}
            value = {**self.default_rope_parameters, **variant, **value}
            if value.get("mrope_section") is None and value["axis_allocation"] in SECTIONED_ALLOCATIONS:
                # the paper's split for this head size (registries.MROPE_SECTION_RATIOS), where there is one
                section = default_mrope_section(value["position_scheme"], self._num_pairs())
                if section is not None:
                    value["mrope_section"] = section
        super().__setattr__(key, value)

    @property
    def ignore_keys_at_rope_validation(self) -> set[str]:
        """The rope_parameters keys transformers' rope validation must not call unknown: ours, the selected position
        scheme's knobs (a registered scheme's keyword-only arguments: a plugin needs no list of its keys elsewhere),
        and any transformers adds (it assigns this attribute; the value is kept beside ours)."""
        rope = self.__dict__.get("rope_parameters") or {}
        added = self.__dict__.get("ignore_keys_at_rope_validation") or set()
        return {*ROPE_LAYOUT_KEYS, *scheme_knob_names(rope.get("position_scheme")), *added}

    @ignore_keys_at_rope_validation.setter
    def ignore_keys_at_rope_validation(self, value: Any) -> None:
        self.__dict__["ignore_keys_at_rope_validation"] = set(value or ())

    def _num_pairs(self) -> int | None:
        """head_dim // 2 when the sizes are set and valid (None while the dataclass is still being filled in)."""
        hidden, heads = getattr(self, "hidden_size", None), getattr(self, "num_attention_heads", None)
        if not (is_int(hidden) and is_int(heads)) or heads <= 0 or hidden % heads:
            return None
        return hidden // heads // 2

    def validate_rope(self) -> None:
        """transformers' checks of the scaling keys, with a ValueError that says what to add instead of a KeyError."""
        try:
            super().validate_rope()
        except KeyError as err:
            raise ValueError(
                f"{err.args[0]}. Add them to rope_parameters, e.g. rope_parameters={{'rope_type': 'linear', "
                "'factor': 2.0}."
            ) from None

    def _validate_grape_m_rope_parameters(self, rope_parameters: dict, ignore_keys: Any = None) -> None:
        """GRAPE-M's own keys (`grape_*`), through transformers' per-rope_type hook (it warns for a type without one);
        `validate_rope_layout` calls it too."""
        for key in GRAPE_KEYS:
            if key in rope_parameters:
                _check_scheme_knob(key, rope_parameters[key], POSITION_SCHEME_KEYS[key])

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
        rope = self.rope_parameters
        ROTARY_KINDS.check(rope["rope_type"])
        POSITION_SCHEMES.check(rope["position_scheme"])
        _check_choice("rope_parameters['pair_layout']", rope["pair_layout"], PAIR_LAYOUTS)
        AXIS_ALLOCATIONS.check(rope["axis_allocation"])
        for key, kind in POSITION_SCHEME_KEYS.items():
            if key in rope and key not in GRAPE_KEYS:
                _check_scheme_knob(key, rope[key], kind)
        self._validate_grape_m_rope_parameters(rope)  # grape_* keys, also where another rope_type was chosen
        _check_positive_number("rope_parameters['rope_theta']", rope.get("rope_theta"), "RoFormer uses 10000.0")
        plugin_keys = scheme_knob_names(rope["position_scheme"])  # a registered scheme checks its own knobs
        for key, value in rope.items():  # transformers' scaling keys (factor, attention_factor, long_factor, ...)
            if key not in ROPE_LAYOUT_KEYS and key not in plugin_keys and key != "rope_theta":
                _check_finite(f"rope_parameters[{key!r}]", value)
        if rope["rope_type"] in ROPE_INIT_FUNCTIONS:  # transformers' own checks of its scaling keys (factor, ...)
            self.validate_rope()
        axes, pairs = rope["axes"], self.head_dim // 2
        if not is_int(axes):
            raise TypeError(
                f"rope_parameters['axes'] must be an int (1, 2 or 3); got {axes!r} ({type(axes).__name__}). "
                "Use 1 for text, 2 for images (row, col), 3 for video (row, col, frame)."
            )
        if axes == 4 and rope["position_scheme"] in FOUR_AXIS_SCHEMES:
            pass  # VRoPE: four diagonal directions
        elif axes not in (1, 2, 3):
            raise ValueError(f"rope_parameters['axes'] must be 1, 2 or 3 (text, image, video); got {axes}.")
        allocation, section = rope["axis_allocation"], rope.get("mrope_section")
        if section is not None:
            _check_mrope_section(section)
        if rotates_per_head(rope) and self.attention_type == "linear":
            raise ValueError(
                f"axis_allocation {allocation!r} with rope_type {rope['rope_type']!r} rotates each head its own way "
                "(head-wise axes, or GRAPE's per-head frequencies), which linear attention does not support; use "
                "attention_type='softmax', or another allocation / grape_share_across_heads=True."
            )
        if allocation in HEADWISE_ALLOCATIONS:
            heads = self.num_attention_heads
            if section is None or len(section) != axes or sum(section) > heads:
                raise ValueError(
                    f"axis_allocation {allocation!r} needs rope_parameters['mrope_section'] with {axes} entries, the "
                    f"attention heads per axis, summing to at most num_attention_heads = {heads} (MHRoPE's [2, 3, 3] "
                    f"for 8 heads); got {section}."
                )
        elif allocation in SECTIONED_ALLOCATIONS:
            if section is None:
                raise ValueError(
                    f"axis_allocation {allocation!r} needs rope_parameters['mrope_section'] with {axes} entries "
                    f"summing to head_dim // 2 = {pairs} (frequency pairs per axis (t, h, w), e.g. Qwen2-VL's "
                    f"[16, 24, 24] for head_dim 128); got {section}. Naming a scheme with a published split "
                    f"({', '.join(MROPE_SECTION_RATIOS)}) fills it in for the head size."
                )
            if len(section) != axes:
                raise ValueError(
                    f"rope_parameters['mrope_section'] needs {axes} entries (one per axis) summing to head_dim // 2 = "
                    f"{pairs}; got {list(section)}."
                )
            if sum(section) != pairs:
                raise ValueError(
                    f"rope_parameters['mrope_section'] entries must sum to head_dim // 2 = {pairs} (the frequency "
                    f"pairs of a head); got {list(section)}, which sums to {sum(section)}."
                )
        elif allocation == "split" and pairs % axes:
            raise ValueError(
                f"axis_allocation 'split' gives each of the {axes} axes an equal share of the {pairs} frequency "
                f"pairs; {pairs} is not divisible by {axes}. Change the head dim or use 'interleaved'."
            )
        elif pairs < axes:
            raise ValueError(f"head_dim // 2 = {pairs} frequency pairs cannot cover {axes} axes.")

    def validate_position_encoding(self) -> None:
        """The encoding is registered and its sizes make sense (whether it fits linear attention, the encoding
        itself checks when the model is built: the configuration imports no model code)."""
        POSITION_ENCODINGS.check(self.position_encoding)
        for name in ("max_relative_position", "relative_attention_num_buckets", "relative_attention_max_distance"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}.")
        _check_positive_number("sinusoidal_scale", self.sinusoidal_scale, "1.0 is Vaswani's table")
        self.validate_seed_encodings()
        if self.position_encoding == "t5_bias" and not (
            4 <= self.relative_attention_num_buckets
            and self.relative_attention_max_distance > self.relative_attention_num_buckets // 2
        ):
            raise ValueError(
                "t5_bias needs relative_attention_num_buckets >= 4 and relative_attention_max_distance larger than "
                f"half the buckets (T5: 32 and 128); got {self.relative_attention_num_buckets} and "
                f"{self.relative_attention_max_distance}."
            )

    def validate_seed_encodings(self) -> None:
        """The fields of "transformer_xl", "tupe" and "deberta" (checked whichever encoding is selected, so a saved
        config is valid for all of them)."""
        for name in ("clamp_len", "position_buckets", "max_relative_positions"):
            if not is_int(getattr(self, name)):
                raise TypeError(
                    f"{name} must be an int (<= 0 turns it off); got {getattr(self, name)!r} "
                    f"({type(getattr(self, name)).__name__})."
                )
        for name in ("tupe_rel_pos", "tupe_cls_reset", "share_att_key"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False; got {getattr(self, name)!r}.")
        _check_choice("norm_rel_ebd", self.norm_rel_ebd, ("layer_norm", "none"))
        terms = deberta_terms(self.pos_att_type)
        if (
            not isinstance(terms, list)
            or not terms
            or not set(terms) <= set(DEBERTA_TERMS)
            or len(set(terms)) != len(terms)
        ):
            raise ValueError(
                f"pos_att_type lists DeBERTa's position terms, 'c2p' and / or 'p2c' (e.g. ['c2p', 'p2c'] or "
                f"'c2p|p2c'); got {self.pos_att_type!r}."
            )
        max_relative = self.max_relative_positions if self.max_relative_positions > 0 else self.max_position_embeddings
        if (
            self.position_encoding == "deberta"
            and self.position_buckets > 0
            and not (self.position_buckets >= 2 and max_relative - 1 > self.position_buckets // 2)
        ):
            raise ValueError(
                f"deberta's log buckets need position_buckets >= 2 and max_relative_positions - 1 larger than half "
                f"of them (DeBERTa-v3: 256 and 512); got position_buckets={self.position_buckets}, "
                f"max_relative_positions={max_relative}. Raise max_relative_positions or set position_buckets=-1."
            )
        if (
            self.position_encoding == "tupe"
            and self.tupe_rel_pos
            and not (
                4 <= self.relative_attention_num_buckets
                and self.relative_attention_num_buckets % 2 == 0
                and self.relative_attention_max_distance > self.relative_attention_num_buckets // 2
            )
        ):
            raise ValueError(
                "tupe's relative bias (tupe_rel_pos=True) needs an even relative_attention_num_buckets >= 4 and "
                "relative_attention_max_distance larger than half the buckets (TUPE: 32 and 128); got "
                f"{self.relative_attention_num_buckets} and {self.relative_attention_max_distance}."
            )


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


def _check_positive_number(name: str, value: Any, hint: str) -> None:
    """A real number, finite and > 0: TypeError for another type (bools included), ValueError for the range."""
    message = f"{name} must be a positive number (finite, > 0; {hint}); got {value!r}."
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(message)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(message)


def _check_finite(name: str, value: Any) -> None:
    """No float inside `value` (a number or a list of them, as longrope's factors) is inf or nan."""
    values = value if isinstance(value, (list, tuple)) else [value]
    for item in values:
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{name} must be finite; got {value!r}. Give an ordinary number (e.g. factor 2.0).")


def _check_scheme_knob(key: str, value: Any, knob: Knob) -> None:
    """A position design's knob (registries.POSITION_SCHEME_KEYS) passes its own check."""
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
    .replace("<<AXIS_ALLOCATIONS>>", _names(AXIS_ALLOCATIONS.builtin))
    .replace("<<SECTIONED>>", _names(SECTIONED_ALLOCATIONS))
    .replace("<<POSITION_SCHEMES>>", _names(POSITION_SCHEMES.builtin))
    .replace("<<POSITION_ENCODINGS>>", _names(POSITION_ENCODINGS.builtin))
)

__all__ = ["RoFormerExtConfig", "RoFormerExtVisionTextConfig"]
