"""RoFormerExt: RoFormer (BERT/WoBERT with rotary position embedding in every self-attention) on transformers 5.

Read top to bottom: norms, embeddings, attention (rotary + transformers' attention backends, or RoPE linear
attention), feed-forward, layer, pre-trained base, model, heads. RoFormer-V2 is the same code with
`use_bias=False` and `norm_type="rms_scale_free"`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, auto_docstring, can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_roformer_ext import RoFormerExtConfig
from .linear_attention import linear_attention_forward
from .rope import RotaryEmbedding, apply_rotary, rotary_embedding_class


class ScaleFreeRMSNorm(nn.Module):
    """RoFormer-V2's norm: x / sqrt(mean(x²) + eps), with no gain, no bias and no mean subtraction."""

    def __init__(self, eps: float = 1e-12) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        dtype = hidden_states.dtype
        hidden_states = hidden_states.float()
        hidden_states = hidden_states * torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True) + self.eps)
        return hidden_states.to(dtype)

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


def make_norm(config: RoFormerExtConfig, dim: int) -> nn.Module:
    if config.norm_type == "rms_scale_free":
        return ScaleFreeRMSNorm(config.layer_norm_eps)
    return nn.LayerNorm(dim, eps=config.layer_norm_eps)


class RoFormerExtEmbeddings(nn.Module):
    """Word + token-type embeddings, norm, and a projection when embedding_size != hidden_size (no position table)."""

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.embedding_size, padding_idx=config.pad_token_id)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.embedding_size)
        self.norm = make_norm(config, config.embedding_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # RoFormer-V2 (bert4keras) drops out before its norm; v1 after it. Identical at inference.
        self.dropout_before_norm = config.norm_type == "rms_scale_free"
        self.projection = None
        if config.embedding_size != config.hidden_size:
            self.projection = nn.Linear(config.embedding_size, config.hidden_size, bias=config.use_bias)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros(inputs_embeds.shape[:-1], dtype=torch.long, device=inputs_embeds.device)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        if self.dropout_before_norm:
            embeddings = self.norm(self.dropout(embeddings))
        else:
            embeddings = self.dropout(self.norm(embeddings))
        if self.projection is not None:
            embeddings = self.projection(embeddings)
        return embeddings


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference softmax attention; (batch, heads, seq, head_dim) in, (batch, seq, heads, head_dim) out."""
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()
    return attn_output, attn_weights


class RoFormerExtAttention(nn.Module):
    """Self-attention with RoPE on q and k (and v when `rotary_value`), through transformers' attention backends."""

    def __init__(self, config: RoFormerExtConfig, layer_idx: int) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.is_causal = bool(config.is_decoder)  # an encoder must say so, or SDPA turns causal
        self.pair_layout = config.rope_parameters["pair_layout"]
        self.rotary_value = config.rotary_value
        self.attention_dropout = config.attention_probs_dropout_prob
        hidden, bias = config.hidden_size, config.use_bias
        self.query = nn.Linear(hidden, hidden, bias=bias)
        self.key = nn.Linear(hidden, hidden, bias=bias)
        self.value = nn.Linear(hidden, hidden, bias=bias)
        self.output = nn.Linear(hidden, hidden, bias=bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        # (batch, heads, seq, head_dim)
        query = self.query(hidden_states).view(hidden_shape).transpose(1, 2)
        key = self.key(hidden_states).view(hidden_shape).transpose(1, 2)
        value = self.value(hidden_states).view(hidden_shape).transpose(1, 2)

        if self.config.attention_type == "linear":
            attn_output = linear_attention_forward(
                self, query, key, value, position_embeddings, attention_mask, past_key_values
            )
            attn_weights = None
        else:
            cos, sin = position_embeddings
            fused = None
            if query.is_cuda:  # liger-kernel's fused q/k rotation when installed (half layout only)
                from .fused_rotary import fused_rotate_query_key

                fused = fused_rotate_query_key(query, key, cos, sin, self.pair_layout)
            if fused is not None:
                query, key = fused
            else:
                query = apply_rotary(query, cos, sin, self.pair_layout)
                key = apply_rotary(key, cos, sin, self.pair_layout)
            if self.rotary_value:
                value = apply_rotary(value, cos, sin, self.pair_layout)
            if past_key_values is not None:
                key, value = past_key_values.update(key, value, self.layer_idx)
            attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
                self.config._attn_implementation, eager_attention_forward
            )
            attn_output, attn_weights = attention_interface(
                self,
                query,
                key,
                value,
                attention_mask,
                dropout=self.attention_dropout if self.training else 0.0,
                scaling=self.scaling,
                is_causal=self.is_causal,
                **kwargs,
            )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.output(attn_output), attn_weights


class RoFormerExtFeedForward(nn.Module):
    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__()
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.use_bias)
        self.act_fn = ACT2FN[config.hidden_act]
        self.output = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.use_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.output(self.act_fn(self.intermediate(hidden_states)))


class RoFormerExtLayer(GradientCheckpointingLayer):
    """Post-norm BERT layer: x = norm(x + attn(x)); x = norm(x + ffn(x))."""

    def __init__(self, config: RoFormerExtConfig, layer_idx: int) -> None:
        super().__init__()
        self.attention = RoFormerExtAttention(config, layer_idx)
        self.attention_norm = make_norm(config, config.hidden_size)
        self.feed_forward = RoFormerExtFeedForward(config)
        self.output_norm = make_norm(config, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        attn_output, _ = self.attention(
            hidden_states, position_embeddings, attention_mask, past_key_values=past_key_values, **kwargs
        )
        hidden_states = self.attention_norm(hidden_states + self.dropout(attn_output))
        ffn_output = self.feed_forward(hidden_states)
        return self.output_norm(hidden_states + self.dropout(ffn_output))


class RoFormerExtPooler(nn.Module):
    """Dense on [CLS]; RoFormer-Sim uses it without activation ("linear"), BERT with tanh."""

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.use_bias)
        self.activation = torch.tanh if config.pooler_activation == "tanh" else nn.Identity()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


@auto_docstring
class RoFormerExtPreTrainedModel(PreTrainedModel):
    config: RoFormerExtConfig
    config_class = RoFormerExtConfig
    base_model_prefix = "roformer"
    supports_gradient_checkpointing = True
    _no_split_modules = ["RoFormerExtLayer"]
    _skip_keys_device_placement = ["past_key_values"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    _can_record_outputs = {"hidden_states": RoFormerExtLayer, "attentions": RoFormerExtAttention}
    #: Every head of the family, written to `auto_map` on save: one saved folder then serves all the Auto classes
    #: with trust_remote_code (transformers itself writes only the saved class).
    auto_map_family = {
        "AutoModel": "modeling_roformer_ext.RoFormerExtModel",
        "AutoModelForMaskedLM": "modeling_roformer_ext.RoFormerExtForMaskedLM",
        "AutoModelForCausalLM": "modeling_roformer_ext.RoFormerExtForCausalLM",
        "AutoModelForSequenceClassification": "modeling_roformer_ext.RoFormerExtForSequenceClassification",
        "AutoModelForTokenClassification": "modeling_roformer_ext.RoFormerExtForTokenClassification",
        "AutoModelForQuestionAnswering": "modeling_roformer_ext.RoFormerExtForQuestionAnswering",
        "AutoModelForMultipleChoice": "modeling_roformer_ext.RoFormerExtForMultipleChoice",
    }

    def save_pretrained(self, *args, **kwargs):
        if self._auto_class is not None:  # registered for remote code (importing roformer_ext does that)
            self.config.auto_map = {**self.auto_map_family, **(getattr(self.config, "auto_map", None) or {})}
        return super().save_pretrained(*args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, RotaryEmbedding):
            # Ours, not the base class's: that one looks up transformers' registry, which lacks our kinds.
            module.reset_frequencies()
            return
        super()._init_weights(module)
        if isinstance(module, RoFormerExtLMHead) and module.bias is not None:
            init.zeros_(module.bias)


def _dense_mask_function(mask: torch.Tensor) -> Callable:
    """A user's 4D (batch, 1, q, k) mask as a transformers mask function, so every attention backend accepts it."""
    allowed = mask.bool() if mask.dtype != torch.bool else mask
    if mask.is_floating_point():
        allowed = mask > torch.finfo(mask.dtype).min / 2  # additive masks: 0 keeps, large negative hides

    def mask_function(batch_idx, head_idx, q_idx, kv_idx):
        return allowed[batch_idx, 0, q_idx, kv_idx]

    return mask_function


@auto_docstring
class RoFormerExtModel(RoFormerExtPreTrainedModel):
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\.", r"^classifier\.", r"^qa_outputs\."]  # a head's folder
    def __init__(self, config: RoFormerExtConfig, add_pooling_layer: bool = True) -> None:
        r"""
        add_pooling_layer (`bool`, *optional*, defaults to `True`):
            Build the pooler when `config.pooler_activation` is set.
        """
        super().__init__(config)
        self.embeddings = RoFormerExtEmbeddings(config)
        self.layers = nn.ModuleList([RoFormerExtLayer(config, i) for i in range(config.num_hidden_layers)])
        self.rotary_emb = rotary_embedding_class(config.rope_parameters["rope_type"])(config)
        use_pooler = add_pooling_layer and config.pooler_activation is not None
        self.pooler = RoFormerExtPooler(config) if use_pooler else None
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def default_position_ids(self, input_shape: torch.Size, past_length: int, device: torch.device) -> torch.Tensor:
        """0, 1, 2, ... after any cached tokens, as transformers' RoFormer (padding included)."""
        return torch.arange(past_length, past_length + input_shape[1], device=device).expand(input_shape[0], -1)

    def check_position_ids(self, position_ids: torch.Tensor, batch: int, seq: int) -> None:
        axes = self.config.rope_parameters["axes"]
        ok = position_ids.shape in ((batch, seq), (axes, batch, seq), (1, seq)) or (
            position_ids.dim() == 3 and position_ids.shape[1:] == (batch, seq) and position_ids.shape[0] == 1
        )
        if not ok:
            raise ValueError(
                f"position_ids has shape {tuple(position_ids.shape)}; expected (batch, seq) = ({batch}, {seq}) "
                f"or (axes, batch, seq) = ({axes}, {batch}, {seq}). For mixed text/image input build them with "
                "roformer_ext.positions.build_position_ids."
            )

    def build_attention_mask(
        self,
        attention_mask: torch.Tensor | None,
        embeddings: torch.Tensor,
        past_key_values: Cache | None,
        position_ids: torch.Tensor,
    ) -> torch.Tensor | None:
        """transformers' mask utilities: bidirectional for the encoder, causal for the decoder."""
        and_mask_function = None
        if attention_mask is not None and attention_mask.dim() == 4:
            and_mask_function, attention_mask = _dense_mask_function(attention_mask), None
        if self.config.is_decoder:
            return create_causal_mask(
                config=self.config,
                inputs_embeds=embeddings,
                attention_mask=attention_mask,
                past_key_values=past_key_values,
                position_ids=position_ids if position_ids.dim() == 2 else position_ids[0],
                and_mask_function=and_mask_function,
            )
        return create_bidirectional_mask(
            config=self.config,
            inputs_embeds=embeddings,
            attention_mask=attention_mask,
            and_mask_function=and_mask_function,
        )

    @merge_with_config_defaults
    @capture_outputs
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPoolingAndCrossAttentions:
        r"""
        position_ids (`torch.Tensor` of shape `(batch_size, sequence_length)` or `(axes, batch_size, sequence_length)`, *optional*):
            Positions fed to the rotary embedding; integer or float. Defaults to 0, 1, 2, ... (after the cached
            tokens). Multi-axis positions (images, video) come from `roformer_ext.positions.build_position_ids`.
        """
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        use_cache = use_cache if self.config.is_decoder else False
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        embeddings = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds)
        batch, seq = embeddings.shape[:2]
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None:
            position_ids = self.default_position_ids(embeddings.shape[:2], past_length, embeddings.device)
        self.check_position_ids(position_ids, batch, seq)
        if position_ids.dim() == 2 and position_ids.shape[0] != batch:
            position_ids = position_ids.expand(batch, -1)
        mask = self.build_attention_mask(attention_mask, embeddings, past_key_values, position_ids)
        if self.config.attention_type == "linear":
            mask = attention_mask  # linear attention takes the raw 2D padding mask
        position_embeddings = self.rotary_emb(embeddings, position_ids)

        hidden_states = embeddings
        for layer in self.layers:
            hidden_states = layer(
                hidden_states, position_embeddings, mask, past_key_values=past_key_values, **kwargs
            )
        pooled = self.pooler(hidden_states) if self.pooler is not None else None
        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=hidden_states,
            pooler_output=pooled,
            past_key_values=past_key_values if use_cache else None,
        )


class RoFormerExtPredictionTransform(nn.Module):
    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_size, bias=config.use_bias)
        self.act_fn = ACT2FN[config.hidden_act]
        self.norm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act_fn(self.dense(hidden_states)))


class RoFormerExtLMHead(nn.Module):
    """Tied-embedding decoder; v1 adds dense + act + LayerNorm and an output bias, RoFormer-V2 has neither."""

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__()
        self.transform = RoFormerExtPredictionTransform(config) if config.mlm_head_transform else None
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.use_bias else None
        if config.embedding_size != config.hidden_size and self.transform is None:
            raise ValueError(
                "An MLM head without the dense transform needs embedding_size == hidden_size "
                f"(got {config.embedding_size} vs {config.hidden_size}); set mlm_head_transform=True."
            )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.transform is not None:
            hidden_states = self.transform(hidden_states)
        logits = self.decoder(hidden_states)
        return logits + self.bias if self.bias is not None else logits


_LM_TIED_WEIGHTS = {"lm_head.decoder.weight": "roformer.embeddings.word_embeddings.weight"}


@auto_docstring
class RoFormerExtForMaskedLM(RoFormerExtPreTrainedModel):
    _tied_weights_keys = _LM_TIED_WEIGHTS

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__(config)
        self.roformer = RoFormerExtModel(config)  # keeps RoFormer-Sim's pooler when pooler_activation is set
        self.lm_head = RoFormerExtLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head.decoder = new_embeddings

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MaskedLMOutput:
        r"""
        position_ids (`torch.Tensor` of shape `(batch_size, sequence_length)` or `(axes, batch_size, sequence_length)`, *optional*):
            Positions fed to the rotary embedding (integer or float).
        """
        outputs = self.roformer(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if self.config.sparse_prediction and labels is not None:  # project only the predicted positions
            predicted = labels != self.config.sparse_pred_ignore_index
            hidden_states, labels = hidden_states[predicted], labels[predicted]
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:  # transformers' loss: normalised by num_items_in_batch under gradient accumulation
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring
class RoFormerExtForCausalLM(RoFormerExtPreTrainedModel, GenerationMixin):
    """Decoder-only RoFormer (the roformer-gpt release): causal attention, KV cache, `generate`."""

    _tied_weights_keys = _LM_TIED_WEIGHTS

    def __init__(self, config: RoFormerExtConfig) -> None:
        config.is_decoder = True
        super().__init__(config)
        self.roformer = RoFormerExtModel(config, add_pooling_layer=False)
        self.lm_head = RoFormerExtLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head.decoder = new_embeddings

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithCrossAttentions:
        r"""
        position_ids (`torch.Tensor` of shape `(batch_size, sequence_length)` or `(axes, batch_size, sequence_length)`, *optional*):
            Positions fed to the rotary embedding (integer or float).
        """
        outputs = self.roformer(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            past_key_values=past_key_values,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            hidden_states = hidden_states[:, -logits_to_keep:]
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithCrossAttentions(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class RoFormerExtClassificationHead(nn.Module):
    """[CLS] -> dropout -> dense -> act -> dropout -> out_proj, as transformers' RoFormer (and ELECTRA)."""

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__()
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act_fn = ACT2FN[config.hidden_act]
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = self.dropout(hidden_states[:, 0])
        x = self.dropout(self.act_fn(self.dense(x)))
        return self.out_proj(x)


@auto_docstring
class RoFormerExtForSequenceClassification(RoFormerExtPreTrainedModel):
    # Per-example mean loss: Trainer must divide it under gradient accumulation itself.
    accepts_loss_kwargs = False

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roformer = RoFormerExtModel(config, add_pooling_layer=False)
        self.classifier = RoFormerExtClassificationHead(config)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput:
        r"""
        position_ids (`torch.Tensor` of shape `(batch_size, sequence_length)` or `(axes, batch_size, sequence_length)`, *optional*):
            Positions fed to the rotary embedding (integer or float).
        """
        outputs = self.roformer(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        logits = self.classifier(outputs.last_hidden_state)
        loss = self.loss_function(labels, logits, self.config) if labels is not None else None
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring
class RoFormerExtForMultipleChoice(RoFormerExtPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__(config)
        self.roformer = RoFormerExtModel(config, add_pooling_layer=False)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MultipleChoiceModelOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`):
            One row of tokens per choice.
        position_ids (`torch.Tensor` of shape `(batch_size, num_choices, sequence_length)`, *optional*):
            Positions fed to the rotary embedding (integer or float).
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Index of the correct choice.
        """
        source = input_ids if input_ids is not None else inputs_embeds
        num_choices = source.shape[1]

        def flat(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x.reshape(-1, *x.shape[2:])

        outputs = self.roformer(
            flat(input_ids),
            attention_mask=flat(attention_mask),
            token_type_ids=flat(token_type_ids),
            position_ids=flat(position_ids),
            inputs_embeds=flat(inputs_embeds),
            **kwargs,
        )
        hidden = outputs.last_hidden_state
        # transformers' RoFormerForMultipleChoice summarises with the LAST token; converted checkpoints keep that.
        pooled = hidden[:, -1] if self.config.multiple_choice_pooling == "last" else hidden[:, 0]
        logits = self.classifier(self.dropout(pooled)).view(-1, num_choices)
        loss = F.cross_entropy(logits.float(), labels) if labels is not None else None
        return MultipleChoiceModelOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring
class RoFormerExtForTokenClassification(RoFormerExtPreTrainedModel):
    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roformer = RoFormerExtModel(config, add_pooling_layer=False)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> TokenClassifierOutput:
        r"""
        position_ids (`torch.Tensor` of shape `(batch_size, sequence_length)` or `(axes, batch_size, sequence_length)`, *optional*):
            Positions fed to the rotary embedding (integer or float).
        """
        outputs = self.roformer(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = self.loss_function(logits, labels, self.config, **kwargs) if labels is not None else None
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring
class RoFormerExtForQuestionAnswering(RoFormerExtPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roformer = RoFormerExtModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> QuestionAnsweringModelOutput:
        r"""
        position_ids (`torch.Tensor` of shape `(batch_size, sequence_length)` or `(axes, batch_size, sequence_length)`, *optional*):
            Positions fed to the rotary embedding (integer or float).
        """
        outputs = self.roformer(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        logits = self.qa_outputs(outputs.last_hidden_state)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions)
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


__all__ = [
    "RoFormerExtForCausalLM",
    "RoFormerExtForMaskedLM",
    "RoFormerExtForMultipleChoice",
    "RoFormerExtForQuestionAnswering",
    "RoFormerExtForSequenceClassification",
    "RoFormerExtForTokenClassification",
    "RoFormerExtModel",
    "RoFormerExtPreTrainedModel",
    "ScaleFreeRMSNorm",
]
