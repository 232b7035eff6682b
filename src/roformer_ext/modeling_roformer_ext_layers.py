"""RoFormerExt's layers and the heads' modules; they read the forward's `AttentionPlan`, never re-derive it."""

from collections.abc import Callable

import torch
from torch import nn
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .attention_plan import AttentionPlan
from .configuration_roformer_ext import RoFormerExtConfig
from .linear_attention import linear_attention_forward, per_sequence_linear_attention
from .packing import PackedBatch, end_to_end
from .position_encodings import PositionEncoding, RelativeScores, position_encoding_class
from .rope import query_key_rotation


class ScaleFreeRMSNorm(nn.Module):
    """RoFormer-V2's norm: x / sqrt(mean(x²) + eps), with no gain, no bias and no mean subtraction."""

    def __init__(self, eps: float = 1e-12) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = hidden_states.float()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(hidden_states.dtype)

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
        # RoFormer-V2 (bert4keras) drops out before its norm, v1 after it
        self.dropout_before_norm = config.norm_type == "rms_scale_free"
        project = config.embedding_size != config.hidden_size
        self.projection = nn.Linear(config.embedding_size, config.hidden_size, config.use_bias) if project else None

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_encoding: PositionEncoding | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros(inputs_embeds.shape[:-1], dtype=torch.long, device=inputs_embeds.device)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        if position_encoding is not None:
            embeddings = position_encoding.embed(embeddings, position_ids)
        if self.dropout_before_norm:
            embeddings = self.norm(self.dropout(embeddings))
        else:
            embeddings = self.dropout(self.norm(embeddings))
        if self.projection is not None:
            embeddings = self.projection(embeddings)
        return embeddings


class AttentionProjections(nn.Module):
    """What self- and cross-attention share: q/k/v/output projections and the call into transformers' backends."""

    def __init__(self, config: RoFormerExtConfig, layer_idx: int, is_causal: bool) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.is_causal = is_causal  # an encoder must say so, or SDPA turns causal
        self.attention_dropout = config.attention_probs_dropout_prob
        hidden, bias = config.hidden_size, config.use_bias
        self.query = nn.Linear(hidden, hidden, bias=bias)
        self.key = nn.Linear(hidden, hidden, bias=bias)
        self.value = nn.Linear(hidden, hidden, bias=bias)
        self.output = nn.Linear(hidden, hidden, bias=bias)

    def heads(self, projection: nn.Linear, states: torch.Tensor) -> torch.Tensor:
        """(batch, seq, hidden) -> (batch, heads, seq, head_dim)."""
        return projection(states).view(*states.shape[:-1], -1, self.head_dim).transpose(1, 2)

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_function: Callable,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attn_output, attn_weights = attention_function(
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
        return self.output(attn_output.flatten(2)), attn_weights


class RoFormerExtAttention(AttentionProjections):
    """Self-attention with RoPE on q and k (and v when `rotary_value`), through transformers' attention backends."""

    def __init__(self, config: RoFormerExtConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx, is_causal=bool(config.is_decoder))
        self.rotary_value = config.rotary_value
        self.rotation = query_key_rotation(config)  # chosen once for the pair layout
        # the encoding's own score-term module (Shaw's table, Transformer-XL's W_r, u, v) and factor on q·k/√d (TUPE)
        encoding = position_encoding_class(config.position_encoding)
        self.relative_table = encoding.layer_table(config)
        self.scaling *= encoding.content_scale(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        plan: AttentionPlan,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Self-attention as the forward's `plan` says; `attention_mask` is `plan.mask`, a tensor argument of its own."""
        cache = plan.layout.self_cache
        value = self.heads(self.value, hidden_states)  # (batch, heads, seq, head_dim)
        if plan.linear:
            query, key = self.heads(self.query, hidden_states), self.heads(self.key, hidden_states)
            attn_output = packed_linear_attention(
                self, query, key, value, plan.position_embeddings, attention_mask, cache, plan.layout.packed
            )
            return self.output(attn_output.flatten(2)), None
        if plan.position_embeddings is not None:
            cos, sin = plan.position_embeddings
            query, key = self.rotation.project_query_key(hidden_states, self.query, self.key, self.head_dim, cos, sin)
            if self.rotary_value:  # values keep their dim order: the output projection reads it
                value = self.rotation.values(value, cos, sin)
        else:
            query, key = self.heads(self.query, hidden_states), self.heads(self.key, hidden_states)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        if query.shape[1] != self.config.num_attention_heads:  # tensor parallel: this rank holds some of the heads
            check_terms_fit_local_heads(self.config, query.shape[1], attention_mask, plan.relative_scores)
        attention_mask, attention_function = plan.scores_for(self, query, key, attention_mask)
        return self.attend(query, key, value, attention_mask, attention_function, **plan.attention_kwargs, **kwargs)


def check_terms_fit_local_heads(
    config: RoFormerExtConfig,
    local_heads: int,
    attention_mask: torch.Tensor | None,
    relative_scores: RelativeScores | None,
) -> None:
    """Under tensor parallel, a per-head term (T5's buckets, ALiBi's slopes, Transformer-XL) would be misread: refused."""
    per_head_bias = attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[1] != 1
    per_head_scores = relative_scores is not None and not relative_scores.fits_local_heads
    if per_head_bias or per_head_scores:
        raise ValueError(
            f"position_encoding={config.position_encoding!r} adds one term per attention head, but this process holds "
            f"{local_heads} of the {config.num_attention_heads} heads (tensor parallel). Load it without tensor "
            "parallelism (FSDP2 / DDP shard or replicate whole heads), or use position_encoding 'rope', 'shaw', "
            "'sinusoidal', 'learned' or 'none' under tp_plan."
        )


def packed_linear_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None,
    attention_mask: torch.Tensor | None,
    cache: Cache | None,
    packed: PackedBatch | None,
) -> torch.Tensor:
    """Linear attention, each packed sequence with its own running sums (its state must not leak into the next)."""
    if packed is None:
        return linear_attention_forward(module, query, key, value, position_embeddings, attention_mask, cache)
    batch, heads, seq, head_dim = query.shape
    rotations = None
    if position_embeddings is not None:  # (batch or 1, seq, dim) -> (1, total, dim), as the rows
        rotations = tuple(end_to_end(t.expand(batch, -1, -1), 1) for t in position_embeddings)
    output = per_sequence_linear_attention(module, *(end_to_end(t, 2) for t in (query, key, value)), rotations, packed)
    return output.view(batch, seq, heads, head_dim)  # (batch, seq, heads, head_dim)


class RoFormerExtCrossAttention(AttentionProjections):
    """A decoder's unrotated attention over encoder states (as transformers' RoFormer), cached once."""

    def __init__(self, config: RoFormerExtConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx, is_causal=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        plan: AttentionPlan,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        query = self.heads(self.query, hidden_states)
        cache = plan.layout.cache
        cache = cache if isinstance(cache, EncoderDecoderCache) else None
        if cache is not None and cache.is_updated.get(self.layer_idx):
            key = cache.cross_attention_cache.layers[self.layer_idx].keys
            value = cache.cross_attention_cache.layers[self.layer_idx].values
        else:
            key, value = self.heads(self.key, encoder_hidden_states), self.heads(self.value, encoder_hidden_states)
            if cache is not None:
                key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
                cache.is_updated[self.layer_idx] = True
        return self.attend(query, key, value, plan.cross_mask, plan.cross_attention, **kwargs)


class RoFormerExtFeedForward(nn.Module):
    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__()
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.use_bias)
        self.act_fn = ACT2FN[config.hidden_act]
        self.output = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.use_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.output(self.act_fn(self.intermediate(hidden_states)))


class RoFormerExtLayer(GradientCheckpointingLayer):
    """Post-norm BERT layer: x = norm(x + attn(x)); [x = norm(x + cross_attn(x, enc))]; x = norm(x + ffn(x))."""

    def __init__(self, config: RoFormerExtConfig, layer_idx: int) -> None:
        super().__init__()
        self.attention = RoFormerExtAttention(config, layer_idx)
        self.attention_norm = make_norm(config, config.hidden_size)
        if config.add_cross_attention:
            if not config.is_decoder:
                raise ValueError(
                    "add_cross_attention=True needs a decoder (is_decoder=True): cross-attention reads an encoder's "
                    "states while generating. Use RoFormerExtForCausalLM or set is_decoder=True."
                )
            self.crossattention = RoFormerExtCrossAttention(config, layer_idx)
            self.crossattention_norm = make_norm(config, config.hidden_size)
        self.feed_forward = RoFormerExtFeedForward(config)
        self.output_norm = make_norm(config, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        plan: AttentionPlan,
        encoder_hidden_states: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        """`attention_mask` is `plan.mask`, an argument of its own: gradient checkpointing replays the layer with it."""
        attn_output, _ = self.attention(hidden_states, attention_mask, plan, **kwargs)
        hidden_states = self.attention_norm(hidden_states + self.dropout(attn_output))
        if encoder_hidden_states is not None:
            cross_output, _ = self.crossattention(hidden_states, encoder_hidden_states, plan, **kwargs)
            hidden_states = self.crossattention_norm(hidden_states + self.dropout(cross_output))
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

    @torch.no_grad()
    def resize_bias(self, vocab_size: int) -> None:
        """Follow a resized vocabulary: old tokens keep their biases, new ones get zeros."""
        if self.bias is None or self.bias.shape[0] == vocab_size:
            return
        keep = min(vocab_size, self.bias.shape[0])
        bias = torch.cat([self.bias[:keep], self.bias.new_zeros(vocab_size - keep)])
        self.bias = nn.Parameter(bias, requires_grad=self.bias.requires_grad)


class RoFormerExtClassificationHead(nn.Module):
    """[CLS] -> dropout -> dense -> act -> dropout -> out_proj, as transformers' RoFormer (and ELECTRA)."""

    def __init__(self, config: RoFormerExtConfig) -> None:
        super().__init__()
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act_fn = ACT2FN[config.hidden_act]
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(self.act_fn(self.dense(self.dropout(pooled)))))
