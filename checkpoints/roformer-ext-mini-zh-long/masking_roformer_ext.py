"""Every attention mask of the model family, in one place, built with transformers' masking utilities.

The patterns: bidirectional (encoder), causal (decoder), UniLM (RoFormer-Sim: the source bidirectional, the target
causal, also under `generate()` with a KV cache), packed documents (attention within each sequence), cross-attention
(a decoder over an encoder's states), and a caller's own 4D mask. The attention plan
(`attention_plan.make_attention_plan`) asks `self_attention_mask` once per forward.

Sequence boundaries come only from the padding mask and from the packed-batch description (`packing.PackedBatch`,
read from explicit inputs): position ids are never passed to transformers' utilities, so a jump in positions (an
image block, a caller's own positions) is never read as the start of a new sequence.
"""

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
    if isinstance(cache, EncoderDecoderCache):
        return cache.self_attention_cache
    return cache


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
    """The self-attention mask of softmax attention, as the configured backend takes it.

    Bidirectional for the encoder, causal (or UniLM) for the decoder, within each packed sequence; a caller's 4D mask
    prepared. `cache` is the self-attention cache. `has_score_term`: the position encoding adds a term to the scores,
    which joins the mask (so sdpa may not skip a causal mask for `is_causal`). Which attention runs, and whether a
    packed batch needs a mask at all, is the attention plan's decision (`attention_plan.make_attention_plan`).
    """
    seq = embeddings.shape[1]
    unilm = unilm_source_overlay(config, token_type_ids, past_length, cache) if config.is_decoder else None
    same_sequence = within_each_sequence(packed, seq) if packed is not None else None
    if attention_mask is not None and attention_mask.dim() == 4:
        kv_length = cache.get_mask_sizes(seq, 0)[0] if cache is not None else seq
        return prepared_4d_mask(attention_mask, seq, kv_length, embeddings.dtype)
    if config.is_decoder:
        return create_causal_mask(
            config=config,
            inputs_embeds=embeddings,
            attention_mask=attention_mask,
            **mask_cache(cache),
            or_mask_function=unilm,
            and_mask_function=same_sequence,
            # sdpa may skip a causal mask and pass is_causal instead, but then a score term has no mask to join
            allow_is_causal_skip=not has_score_term,
        )
    return create_bidirectional_mask(
        config=config, inputs_embeds=embeddings, attention_mask=attention_mask, and_mask_function=same_sequence
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
    config: RoFormerExtConfig, token_type_ids: torch.Tensor | None, past_length: int, cache: Cache | None
) -> Callable | None:
    """UniLM: source tokens (segment 0) also see later source tokens."""
    if not has_unilm_overlay(config, token_type_ids, past_length):
        return None
    seq = token_type_ids.shape[1]
    kv_length = cache.get_mask_sizes(seq, 0)[0] if cache is not None else seq  # a static cache's full length
    source = padded_for_mask_indices(token_type_ids == 0, kv_length, False)

    def source_sees_source(batch_idx, head_idx, q_idx, kv_idx):
        return source[batch_idx, q_idx] & source[batch_idx, kv_idx]

    return source_sees_source


def has_unilm_overlay(
    config: RoFormerExtConfig, token_type_ids: torch.Tensor | None, past_length: int | torch.Tensor
) -> bool:
    """Whether a UniLM decoder's source overlay applies: only a first call holds source tokens; after it every query
    is a target token, for which causal attention is already the UniLM rule."""
    return config.decoder_attention == "unilm" and token_type_ids is not None and is_first_call(past_length)


def unilm_attention_mask(token_type_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.BoolTensor:
    """RoFormer-Sim's UniLM sequence-to-sequence mask as a (batch, 1, seq, seq) boolean mask, True where query i may
    attend to key j, for models given a 4D mask (the MLM head, or any other backend's own loop).

    UniLM (bert4keras `application='unilm'`) lets key j be seen from query i iff cumsum(segment)[j] <=
    cumsum(segment)[i]: the source (segment 0) attends bidirectionally to itself, each target token (segment 1) sees
    the whole source and the target tokens up to and including itself. Keys where `attention_mask` is 0 (padding) are
    hidden from every query; padded queries keep their rows (they are computed and ignored, as in the original). The
    causal LM builds the same pattern itself from `token_type_ids` (`unilm_source_overlay`).
    """
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
    """A caller's 4D mask as transformers' attention functions take an already prepared one.

    transformers' masking utilities return a 4D mask untouched, so it must already match the keys the layer sees:
    (batch, 1, q, kv_length) with kv_length = cached + new tokens, or a static cache's full length. The caller's
    mask may be boolean / integer (nonzero = may attend) or additive float (0 keeps, a large negative hides); it may
    cover only this call's queries or the whole sequence (its last q rows are used). Key columns a static cache
    reserves beyond the mask are hidden. The result is additive in `dtype`: eager, sdpa and flex all take that, and a
    fully hidden row (a padded query) stays finite instead of turning into NaN. Flash attention takes no such mask
    (refused by the attention plan).
    """
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
    """A 2D mask covers every key: the cached tokens and this call's, one column each. Checked in eager calls: traced
    with dynamic shapes the two lengths are separate symbols that the comparison cannot prove equal."""
    if torch.compiler.is_compiling():
        return
    if attention_mask is None or attention_mask.dim() != 2:
        if attention_mask is not None and attention_mask.dim() != 4:
            raise ValueError(
                f"attention_mask must be 2D (batch, seq) or 4D (batch, 1, query, key); got {tuple(attention_mask.shape)}."
            )
        return
    if attention_mask.shape[1] != key_length or attention_mask.shape[0] not in (1, batch):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but the keys are (batch, cached + new tokens) = "
            f"({batch}, {key_length}); give one column per token, including those already in the cache."
        )


__all__ = [
    "check_padding_mask",
    "cross_attention_mask",
    "has_unilm_overlay",
    "prepared_4d_mask",
    "self_attention_cache",
    "self_attention_mask",
    "unilm_attention_mask",
]
