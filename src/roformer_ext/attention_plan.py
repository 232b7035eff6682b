"""One attention plan per forward (`make_attention_plan` -> `AttentionPlan`): the mask, the attention function, the
position terms, the cross-attention mask and the packed lengths, decided once from the batch (`BatchLayout`) and read
by the layers; what a backend cannot take is refused here too (`check_backend_takes`)."""

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F
from transformers.cache_utils import Cache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .compat import attn_implementation, is_flash_attention
from .configuration_roformer_ext import RoFormerExtConfig
from .masking_roformer_ext import cross_attention_mask, has_unilm_overlay, is_first_call, self_attention_mask
from .packing import PackedBatch, per_sequence_sdpa, varlen_attention, varlen_kernel_takes
from .position_encodings import PositionEncoding, RelativeScores, add_scores_to_mask


@dataclass(frozen=True)
class BatchLayout:
    """What the batch is, decided before positions: made once per forward by the base model (or the vision-text base
    model, which lays out its positions from it)."""

    cache: Cache | None  # the cache this call writes (an `EncoderDecoderCache` with cross-attention)
    self_cache: Cache | None  # its self-attention part: the layers append to it, its length numbers the queries
    past_length: int | torch.Tensor  # tokens already cached (a static cache reports a tensor)
    packed: PackedBatch | None  # packed (padding-free) rows; None for a padded or single-sequence batch

    @property
    def decoding(self) -> bool:
        return not is_first_call(self.past_length)


@dataclass(frozen=True)
class AttentionPlan:
    """Everything one forward's attention layers need, made once by `make_attention_plan`."""

    layout: BatchLayout
    position_ids: torch.Tensor  # (axes, batch, seq): where every query sits
    #: The self-attention mask (a shared score term joined), or None; a tensor argument of the layers' own: gradient
    #: checkpointing replays only those, and a shared term may need gradients (T5's buckets, TUPE).
    mask: torch.Tensor | None
    #: `(module, query, key, value, mask, **kwargs) -> (output, weights)`; None for linear attention.
    attention: Callable | None
    linear: bool = False  # RoFormer's linear attention: the layers take the raw padding mask and `layout.packed`
    #: RoPE's (cos, sin), (batch, seq, head_dim) (a heads axis for head-wise allocations); None otherwise.
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None
    relative_scores: RelativeScores | None = None  # a relative term each layer computes
    per_score: bool = False  # that term goes to flex attention as its `score_mod`, else it joins the mask
    cross_mask: torch.Tensor | None = None  # a decoder's cross-attention (`add_cross_attention`)
    cross_attention: Callable | None = None
    attention_kwargs: dict = field(default_factory=dict)  # packed rows' cu_seq_lens_q/k, max_length_q/k

    def scores_for(
        self, module: nn.Module, query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, Callable]:
        """One layer's mask and function: its relative term joins `mask`, or goes to flex attention as `score_mod`."""
        if self.relative_scores is None:
            return mask, self.attention
        if self.per_score:
            score_mod = self.relative_scores.layer_term(module, query, key, per_score=True)
            return mask, functools.partial(flex_attention_with_score_mod, score_mod=score_mod)
        term = self.relative_scores.layer_term(module, query, key, per_score=False)
        return add_scores_to_mask(mask, term), self.attention


def make_attention_plan(
    config: RoFormerExtConfig,
    position_encoding: PositionEncoding,
    layout: BatchLayout,
    embeddings: torch.Tensor,
    position_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    keys_numbered_by: torch.Tensor | None = None,
    encoder_hidden_states: torch.Tensor | None = None,
    encoder_attention_mask: torch.Tensor | None = None,
    training: bool = True,
) -> AttentionPlan:
    """How attention runs in this forward. `keys_numbered_by`: the caller's mask where the caller gave the positions
    (it numbers the cached keys, see `key_positions`). `training`: the model's flag, whether attention dropout applies
    (True unless told: the varlen kernel has none)."""
    implementation = attn_implementation(config)
    has_score_term, capabilities = position_encoding.has_relative_scores, position_encoding.capabilities
    check_backend_takes(config, attention_mask, encoder_attention_mask, not capabilities.flash_attention)
    packed, cache, past_length = layout.packed, layout.self_cache, layout.past_length
    if cache is not None and not capabilities.cache:
        raise ValueError(
            f"position_encoding={config.position_encoding!r} does not support a KV cache (its capabilities say so): "
            "call the model / generate with use_cache=False."
        )
    if packed is not None and not capabilities.packing:
        raise ValueError(
            f"position_encoding={config.position_encoding!r} does not support packed (padding-free) rows (its "
            "capabilities say so): pad the batch instead (DataCollatorWithPadding), without cu_seq_lens / seq_idx."
        )
    linear = config.attention_type == "linear"
    if linear:  # the raw 2D padding mask (and `layout.packed`)
        mask, attention = attention_mask, None
    elif (
        implementation == "sdpa"
        and packed is not None
        and packed.cu_seq_lens is not None
        and attention_mask is None
        and not has_score_term
        and not has_unilm_overlay(config, token_type_ids, past_length)
    ):
        # Nothing but the packing to mask: each sequence alone, no mask. One varlen flash call where the kernel
        # takes the row and no attention dropout applies (it has none); else one SDPA call per sequence.
        dropout = training and config.attention_probs_dropout_prob > 0
        varlen = not dropout and varlen_kernel_takes(embeddings, config.head_dim, packed)
        mask, attention = None, varlen_attention if varlen else per_sequence_sdpa
    else:
        mask = self_attention_mask(
            config, attention_mask, embeddings, cache, past_length, token_type_ids, packed, has_score_term
        )
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
    per_score = implementation == "flex_attention"
    keys = functools.partial(key_positions, position_ids[0], cache, past_length, keys_numbered_by)
    terms = position_encoding.attention_terms(embeddings, position_ids, keys, per_score)
    if terms.shared_bias is not None:  # the same for every layer: joins the mask once
        mask = add_scores_to_mask(mask, terms.shared_bias.to(embeddings.dtype))
    cross_mask = cross_attention = None
    if encoder_hidden_states is not None:
        cross_mask = cross_attention_mask(config, encoder_attention_mask, embeddings, encoder_hidden_states)
        cross_attention = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
    return AttentionPlan(
        layout,
        position_ids,
        mask,
        attention,
        linear=linear,
        position_embeddings=terms.position_embeddings,
        relative_scores=terms.relative_scores,
        per_score=per_score,
        cross_mask=cross_mask,
        cross_attention=cross_attention,
        attention_kwargs=packed.attention_kwargs() if packed is not None else {},
    )


def check_backend_takes(
    config: RoFormerExtConfig,
    attention_mask: torch.Tensor | None,
    encoder_attention_mask: torch.Tensor | None,
    refuses_flash: bool,
) -> None:
    """Flash attention takes neither a dense 4D mask nor a term on the scores (`refuses_flash`: the encoding's
    capabilities exclude it): refused here, once, with the fix."""
    implementation = attn_implementation(config)
    if not is_flash_attention(implementation):
        return
    if refuses_flash:
        raise ValueError(
            f"position_encoding={config.position_encoding!r} does not run on {implementation!r}: its capabilities "
            "exclude flash attention (which takes no term on the attention scores). Load the model with "
            "attn_implementation='sdpa', 'eager' or 'flex_attention'."
        )
    for mask in (attention_mask, encoder_attention_mask):
        if mask is not None and mask.dim() == 4:
            raise ValueError(
                f"A custom 4D attention_mask cannot be used with attn_implementation={implementation!r} (flash "
                "attention takes no dense mask); load the model with attn_implementation='sdpa', 'eager' or "
                "'flex_attention'."
            )


def key_positions(
    query_positions: torch.Tensor,
    cache: Cache | None,
    past_length: int | torch.Tensor,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """(batch | 1, keys): the keys' positions, numbered as the queries are (their own without a cache). Cached keys
    count back from the last query over the real tokens the mask lets it see (every slot without one), as `generate`
    numbers a left-padded prompt; a static cache's unwritten slots continue the numbering."""
    if cache is None or (is_first_call(past_length) and not cache.is_compileable):
        return query_positions
    seq = query_positions.shape[1]
    kv_length = cache.get_mask_sizes(seq, 0)[0]
    real = visible_keys(attention_mask, kv_length)  # (batch | 1, kv_length) 1: a real token
    if real is None:
        real = torch.ones(1, kv_length, dtype=torch.long, device=query_positions.device)
    before = F.pad(real.cumsum(-1), (1, 0))[:, :-1]  # real tokens before each slot
    last = torch.as_tensor(past_length + seq - 1, device=before.device).reshape(1, 1)
    before_last = before.gather(1, last.expand(before.shape[0], 1))
    return query_positions[:, -1:].to(before.dtype) - before_last + before


def visible_keys(attention_mask: torch.Tensor | None, kv_length: int) -> torch.Tensor | None:
    """(batch, kv_length) long, 1 for a real key: a 2D mask's nonzero columns (later slots count as real), or what a
    4D mask's last query may see (nonzero, or additive above min / 2). None without a 2D / 4D tensor mask."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() not in (2, 4):
        return None
    if attention_mask.dim() == 4:
        row = attention_mask[:, 0, -1, :kv_length]
        real = row > torch.finfo(row.dtype).min / 2 if row.is_floating_point() else row != 0
    else:
        real = attention_mask[:, :kv_length] != 0
    return F.pad(real.long(), (0, kv_length - real.shape[-1]), value=1)


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
    # At least float32 (bf16 / fp16 scores), never less than the scores' own: float64 scores cast to float32 turn a
    # masked score (float64's min) into -inf, and a fully masked row (left padding) into NaN that spreads.
    softmax_dtype = torch.promote_types(attn_weights.dtype, torch.float32)
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=softmax_dtype).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()
    return attn_output, attn_weights


def flex_attention_with_score_mod(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask,
    scaling: float | None = None,
    dropout: float = 0.0,
    score_mod: Callable | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' flex attention call with our own `score_mod` (a relative position term computed per score)."""
    from transformers.integrations.flex_attention import compile_friendly_flex_attention

    if dropout > 0:
        raise ValueError("flex attention does not support attention dropout; call model.eval() or set it to 0.")
    if query.device.type == "cpu" and not torch.compiler.is_compiling():
        output = _cpu_flex_attention()(query, key, value, score_mod=score_mod, block_mask=attention_mask, scale=scaling)
    else:
        output = compile_friendly_flex_attention(
            query, key, value, score_mod=score_mod, block_mask=attention_mask, scale=scaling, training=module.training
        )
    return output.transpose(1, 2).contiguous(), None


@functools.cache
def _cpu_flex_attention() -> Callable:
    """flex attention compiled for fixed shapes: with dynamic ones (transformers' wrapper) torch 2.13's CPU inductor
    fails ("cur_kvSplitSize not declared") to recompile a score_mod that reads tensors."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)
