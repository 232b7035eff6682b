"""One attention plan per forward: everything the layers need, decided here once and carried as data.

The base model describes the batch first (`BatchLayout`: the cache it writes, the cached length, the packed-batch
description), chooses positions from it, embeds, and then asks `make_attention_plan` once for the rest
(`AttentionPlan`): the mask, the attention function (transformers' configured backend; for packed rows torch's varlen
flash kernel on CUDA or per-sequence SDPA; or RoFormer's linear attention), the position terms of the position
encoding (RoPE's cos / sin, a relative term joined into the mask or given per score to flex attention), the
cross-attention mask and the lengths every backend reads for packed rows. Layers and heads read the plan; nothing
below the base model decides any of it again.

Which backend can take which input is decided here too (`check_backend_takes`): flash attention takes no dense mask
and no score term. A new backend or layout changes this module.
"""

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
    """What the batch is, decided before anything reads positions: made once per forward by the base model (or by
    the vision-text base model, which lays out its positions from it, and hands it down)."""

    #: The cache this call writes (an `EncoderDecoderCache` with cross-attention), or None.
    cache: Cache | None
    #: Its self-attention part: the one the layers append keys and values to, and whose length numbers the queries.
    self_cache: Cache | None
    #: Tokens already in the cache (a static cache reports a tensor).
    past_length: int | torch.Tensor
    #: Packed (padding-free) rows: where each sequence lies; None for a padded or single-sequence batch.
    packed: PackedBatch | None

    @property
    def decoding(self) -> bool:
        """Whether tokens are already cached (the call continues a sequence)."""
        return not is_first_call(self.past_length)


@dataclass(frozen=True)
class AttentionPlan:
    """Everything one forward's attention layers need. Made once by `make_attention_plan`."""

    layout: BatchLayout
    #: (axes, batch, seq): where every query sits (what the position terms were computed from).
    position_ids: torch.Tensor
    #: The self-attention mask as the backend takes it (a shared score term already joined), or None. The base model
    #: hands it to each layer as a tensor argument of its own: a shared term may need gradients (T5's buckets,
    #: TUPE), and gradient checkpointing only replays what a layer takes as tensor arguments.
    mask: torch.Tensor | None
    #: The self-attention function: `(module, query, key, value, mask, **kwargs) -> (output, weights)`; None for
    #: linear attention (`linear`).
    attention: Callable | None
    #: RoFormer's linear attention with RoPE: the layers take the raw padding mask and the packed description.
    linear: bool = False
    #: RoPE's (cos, sin), (batch, seq, head_dim) (or with a heads axis for head-wise allocations); None otherwise.
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None
    #: A relative term each layer computes (Shaw, Transformer-XL, TUPE, DeBERTa; any on flex attention).
    relative_scores: RelativeScores | None = None
    #: The relative term goes to flex attention per score (`score_mod`); otherwise it is added to the mask.
    per_score: bool = False
    #: The cross-attention mask and function (decoders with `add_cross_attention`).
    cross_mask: torch.Tensor | None = None
    cross_attention: Callable | None = None
    #: What every backend reads for packed rows (`cu_seq_lens_q/k`, `max_length_q/k`: flash varlen's convention).
    attention_kwargs: dict = field(default_factory=dict)

    def scores_for(
        self, module: nn.Module, query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, Callable]:
        """The mask and function of one layer: `mask` (the plan's, as the layer received it) with the layer's
        relative term added where it has one, or flex attention with the term as its `score_mod`."""
        if self.relative_scores is None:
            return mask, self.attention
        if self.per_score:
            score_mod = self.relative_scores.layer_term(module, query, key, per_score=True)
            return mask, functools.partial(flex_attention_with_score_mod, score_mod=score_mod)
        return add_scores_to_mask(mask, self.relative_scores.layer_term(module, query, key, per_score=False)), (
            self.attention
        )


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
) -> AttentionPlan:
    """The one decision per forward of how attention runs. `keys_numbered_by`: the caller's mask where the caller
    gave the positions (it numbers the cached keys, see `key_positions`); None where the positions are the default
    ones, one per slot."""
    implementation = attn_implementation(config)
    has_score_term = position_encoding.has_relative_scores
    capabilities = position_encoding.capabilities
    check_backend_takes(config, attention_mask, encoder_attention_mask, not capabilities.flash_attention)
    linear = config.attention_type == "linear"
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
    if linear:  # the raw 2D padding mask; packed rows: the description
        mask, attention = attention_mask, None
    elif (
        implementation == "sdpa"
        and packed is not None
        and packed.cu_seq_lens is not None
        and attention_mask is None
        and not has_score_term
        and not (config.is_decoder and has_unilm_overlay(config, token_type_ids, past_length))
    ):
        # Packed rows with nothing else to mask: each sequence alone (Σ len², not total², no mask built). On CUDA
        # one varlen flash call for the whole row where the kernel takes it; otherwise one SDPA call per sequence
        # (run eagerly under torch.compile: a masked SDPA over the whole row would cost total²).
        mask = None
        attention = varlen_attention if varlen_kernel_takes(embeddings, config.head_dim, packed) else per_sequence_sdpa
    else:
        mask = self_attention_mask(
            config, attention_mask, embeddings, cache, past_length, token_type_ids, packed, has_score_term
        )
        attention = configured_attention(config)
    per_score = implementation == "flex_attention"
    keys = functools.partial(key_positions, position_ids[0], cache, past_length, keys_numbered_by)
    terms = position_encoding.attention_terms(embeddings, position_ids, keys, per_score)
    if terms.shared_bias is not None:  # the same for every layer: joins the mask once
        mask = add_scores_to_mask(mask, terms.shared_bias.to(embeddings.dtype))
    cross_mask = cross_attention = None
    if encoder_hidden_states is not None:
        cross_mask = cross_attention_mask(config, encoder_attention_mask, embeddings, encoder_hidden_states)
        cross_attention = configured_attention(config)
    return AttentionPlan(
        layout=layout,
        position_ids=position_ids,
        mask=mask,
        attention=attention,
        linear=linear,
        position_embeddings=terms.position_embeddings,
        relative_scores=terms.relative_scores,
        per_score=per_score,
        cross_mask=cross_mask,
        cross_attention=cross_attention,
        attention_kwargs=packed.attention_kwargs() if packed is not None else {},
    )


def configured_attention(config: RoFormerExtConfig) -> Callable:
    """transformers' attention function for the configured backend (eager, sdpa, flex, flash, or registered)."""
    return ALL_ATTENTION_FUNCTIONS.get_interface(attn_implementation(config), eager_attention_forward)


def check_backend_takes(
    config: RoFormerExtConfig,
    attention_mask: torch.Tensor | None,
    encoder_attention_mask: torch.Tensor | None,
    refuses_flash: bool,
) -> None:
    """Flash attention takes neither a dense 4D mask nor a term on the scores: refused here, once, with the fix.
    `refuses_flash`: the encoding's capabilities exclude flash attention (a term on the scores)."""
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
    """Positions of the keys a layer sees, numbered as the queries are: the queries' own without a cache.

    With one, the keys count back from the last query over the real tokens before it: those the caller's mask lets
    the last query see (2D padding mask, or the last row of a 4D mask; without one, every slot). `generate` numbers a
    left-padded prompt by real tokens (its `position_ids`), and its keys are numbered so too; with the default
    positions (one per slot) every key keeps its slot number. Slots after the last query (a static cache's unwritten
    ones, hidden by the mask) continue the numbering. (batch | 1, keys)."""
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
    """(batch, kv_length) long, 1 where a key is a real token: a 2D padding mask (cached + new tokens; slots beyond it
    count as real), or the keys a 4D mask's last query may see (bool / integer nonzero, or additive 0). None without
    a tensor mask."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() not in (2, 4):
        return None
    if attention_mask.dim() == 4:
        row = attention_mask[:, 0, -1, :kv_length]
        real = row > torch.finfo(row.dtype).min / 2 if row.is_floating_point() else row != 0
    else:
        real = attention_mask[:, :kv_length] != 0
    return F.pad(real.long(), (0, kv_length - real.shape[-1]), value=1)


# --- the attention functions the plan chooses besides transformers' own ---------------------------------------------


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
    """flex attention compiled for fixed shapes. torch 2.13's CPU inductor fails to build the kernel (a C++ error,
    "cur_kvSplitSize not declared") once a score_mod that reads tensors is recompiled for a new shape with dynamic
    shapes, as transformers' compiled wrapper does; one kernel per shape avoids it."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


__all__ = ["AttentionPlan", "BatchLayout", "key_positions", "make_attention_plan"]
