"""Every attention mask of the model family, built with transformers' masking utilities. Boundaries come from the
padding mask and `packing.PackedBatch` only: position ids never reach transformers' utilities, which would read a jump
in them as the start of a new sequence."""

from collections.abc import Callable

import torch
from torch.nn import functional as F
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask

from .compat import mask_cache
from .configuration_roformer_ext import RoFormerExtConfig
from .packing import PackedBatch

#: flex attention builds block masks on a grid padded to 128-token blocks, so mask functions see indices up to there.
_FLEX_BLOCK = 128


def self_attention_cache(cache: Cache | None) -> Cache | None:
    """The cache of the decoder's own keys and values (an encoder-decoder cache also holds the cross-attention's)."""
    return cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache


def is_first_call(past_length: int | torch.Tensor) -> bool:
    """Whether nothing is cached yet (a static cache reports its length as a tensor)."""
    return int(past_length) == 0


def self_attention_mask(
    config: RoFormerExtConfig,
    attention_mask: torch.Tensor | None,
    embeddings: torch.Tensor,
    cache: Cache | None,
    past_length: int,
    token_type_ids: torch.Tensor | None,
    packed: PackedBatch | None,
    has_score_term: bool,
) -> torch.Tensor | None:
    """Softmax self-attention's mask as the configured backend takes it (`cache`: the self-attention cache).
    `has_score_term`: a term joins the scores, so sdpa may not skip a causal mask for `is_causal`."""
    seq = embeddings.shape[1]
    kv_length = cache.get_mask_sizes(seq, 0)[0] if cache is not None else seq  # a static cache's full length
    if attention_mask is not None and attention_mask.dim() == 4:
        return prepared_4d_mask(attention_mask, seq, kv_length, embeddings.dtype)
    same_sequence = within_each_sequence(packed, seq) if packed is not None else None
    if not config.is_decoder:
        return create_bidirectional_mask(
            config=config, inputs_embeds=embeddings, attention_mask=attention_mask, and_mask_function=same_sequence
        )
    return create_causal_mask(
        config=config,
        inputs_embeds=embeddings,
        attention_mask=attention_mask,
        **mask_cache(cache),
        or_mask_function=unilm_source_overlay(config, token_type_ids, past_length, kv_length),
        and_mask_function=same_sequence,
        allow_is_causal_skip=not has_score_term,
    )


def within_each_sequence(packed: PackedBatch, seq: int) -> Callable:
    """Packed documents: a query sees only keys of its own sequence."""
    sequence_ids = padded_for_mask_indices(packed.sequence_ids, seq, -1)

    def same_sequence(batch_idx, head_idx, q_idx, kv_idx):
        return sequence_ids[batch_idx, q_idx] == sequence_ids[batch_idx, kv_idx]

    return same_sequence


def cross_attention_mask(
    config: RoFormerExtConfig,
    encoder_attention_mask: torch.Tensor | None,
    embeddings: torch.Tensor,
    encoder_hidden_states: torch.Tensor,
) -> torch.Tensor | None:
    """A decoder's mask over the encoder's states: the encoder's padding (or the caller's 4D mask)."""
    if encoder_attention_mask is not None and encoder_attention_mask.dim() == 4:
        return prepared_4d_mask(
            encoder_attention_mask, embeddings.shape[1], encoder_hidden_states.shape[1], embeddings.dtype
        )
    return create_bidirectional_mask(
        config=config,
        inputs_embeds=embeddings,
        attention_mask=encoder_attention_mask,
        encoder_hidden_states=encoder_hidden_states,
    )


def unilm_source_overlay(
    config: RoFormerExtConfig, token_type_ids: torch.Tensor | None, past_length: int, kv_length: int
) -> Callable | None:
    """UniLM: source tokens (segment 0) also see later source tokens (over `kv_length` keys)."""
    if not has_unilm_overlay(config, token_type_ids, past_length):
        return None
    source = padded_for_mask_indices(token_type_ids == 0, kv_length, False)

    def source_sees_source(batch_idx, head_idx, q_idx, kv_idx):
        return source[batch_idx, q_idx] & source[batch_idx, kv_idx]

    return source_sees_source


def has_unilm_overlay(
    config: RoFormerExtConfig, token_type_ids: torch.Tensor | None, past_length: int | torch.Tensor
) -> bool:
    """Whether a UniLM decoder's source overlay applies: only a first call holds source tokens (after it every query
    is a target token, for which causal attention is the UniLM rule)."""
    unilm = config.is_decoder and config.decoder_attention == "unilm"
    return unilm and token_type_ids is not None and is_first_call(past_length)


def unilm_attention_mask(token_type_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.BoolTensor:
    """RoFormer-Sim's UniLM mask (bert4keras `application='unilm'`), (batch, 1, seq, seq) bool, True where query i may
    see key j: cumsum(segment)[j] <= cumsum(segment)[i], so the source (segment 0) sees itself both ways and a target
    token the source and the target up to itself. Padded keys (`attention_mask` 0) are hidden from every query."""
    if token_type_ids.dim() != 2:
        raise ValueError(f"token_type_ids must be (batch, seq), got shape {tuple(token_type_ids.shape)}.")
    order = torch.cumsum(token_type_ids.long(), dim=1)  # (batch, seq)
    allowed = order[:, None, :] <= order[:, :, None]  # (batch, query, key)
    if attention_mask is not None:
        if attention_mask.shape != token_type_ids.shape:
            raise ValueError(
                f"attention_mask shape {tuple(attention_mask.shape)} differs from token_type_ids "
                f"shape {tuple(token_type_ids.shape)}; both must be (batch, seq)."
            )
        allowed = allowed & attention_mask.bool()[:, None, :]
    return allowed[:, None]  # (batch, 1, query, key)


def prepared_4d_mask(mask: torch.Tensor, q_length: int, kv_length: int, dtype: torch.dtype) -> torch.Tensor:
    """A caller's 4D mask (bool / integer nonzero = may attend, or additive float), its last `q_length` rows, as an
    additive mask in `dtype` over the `kv_length` keys the layer sees (cached + new, or a static cache's full length:
    unwritten slots hidden). A fully hidden row stays finite instead of turning into NaN."""
    if mask.shape[1] != 1 or mask.shape[-2] < q_length or mask.shape[-1] > kv_length:
        raise ValueError(
            f"A 4D attention_mask must have shape (batch, 1, query_length, key_length) = (batch, 1, {q_length}, "
            f"{kv_length}) here (key_length counts cached tokens too); got {tuple(mask.shape)}."
        )
    mask = mask[:, :, -q_length:]
    min_value = torch.finfo(dtype).min
    if mask.is_floating_point():
        additive = mask.to(dtype).clamp(min=min_value)
    else:
        additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask.bool(), min_value)
    if additive.shape[-1] < kv_length:  # a static cache's slots not written yet
        additive = F.pad(additive, (0, kv_length - additive.shape[-1]), value=min_value)
    return additive


def padded_for_mask_indices(per_token: torch.Tensor, length: int, value: int | bool) -> torch.Tensor:
    """A (batch, seq) tensor read by a mask function, padded with `value` to every index a backend may ask for."""
    target = max(length, -(-per_token.shape[1] // _FLEX_BLOCK) * _FLEX_BLOCK)
    return F.pad(per_token, (0, target - per_token.shape[1]), value=value)


def check_padding_mask(attention_mask: torch.Tensor | None, batch: int, key_length: int) -> None:
    """A 2D mask has one column per key, cached ones included (eager calls: traced with dynamic shapes the two lengths
    are symbols the comparison cannot prove equal)."""
    if torch.compiler.is_compiling() or attention_mask is None or attention_mask.dim() == 4:
        return
    if attention_mask.dim() != 2:
        raise ValueError(
            f"attention_mask must be 2D (batch, seq) or 4D (batch, 1, query, key); got {tuple(attention_mask.shape)}."
        )
    if attention_mask.shape[1] != key_length or attention_mask.shape[0] not in (1, batch):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but the keys are (batch, cached + new tokens) = "
            f"({batch}, {key_length}); give one column per token, including those already in the cache."
        )
