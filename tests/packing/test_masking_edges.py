"""masking_roformer_ext.py: which keys each query may see (patterns written out by hand) and the mask checks."""

import re

import pytest
import torch
from conftest import tiny_config
from transformers.cache_utils import DynamicCache, EncoderDecoderCache, StaticCache

from roformer_ext.masking_roformer_ext import (
    check_padding_mask,
    cross_attention_mask,
    is_first_call,
    padded_for_mask_indices,
    prepared_4d_mask,
    self_attention_cache,
    self_attention_mask,
    unilm_attention_mask,
    unilm_source_overlay,
    within_each_sequence,
)
from roformer_ext.packing import PackedBatch, describe_packed_batch

MIN = torch.finfo(torch.float32).min


def config_for(backend: str = "eager", **overrides):
    config = tiny_config(**overrides)
    config._attn_implementation = backend
    return config


def allowed(mask: torch.Tensor) -> list:
    """(batch, 1, q, kv) -> nested lists of bools: True where the query may attend to the key."""
    assert mask.dim() == 4 and mask.shape[1] == 1
    if mask.dtype == torch.bool:
        return mask[:, 0].tolist()
    assert bool(((mask == 0) | (mask == torch.finfo(mask.dtype).min)).all())
    return (mask[:, 0] == 0).tolist()


def pattern(rule, batch: int, q: int, kv: int) -> list:
    return [[[bool(rule(b, i, j)) for j in range(kv)] for i in range(q)] for b in range(batch)]


def embeddings(batch: int, seq: int) -> torch.Tensor:
    return torch.zeros(batch, seq, 32)


def mask_of(config, attention_mask, batch, seq, cache=None, past=0, token_type_ids=None, packed=None, term=False):
    return self_attention_mask(
        config, attention_mask, embeddings(batch, seq), cache, past, token_type_ids, packed, term
    )


def filled_cache(config, tokens: int) -> DynamicCache:
    cache = DynamicCache(config=config)
    for layer in range(config.num_hidden_layers):
        cache.update(torch.zeros(1, 4, tokens, 8), torch.zeros(1, 4, tokens, 8), layer)
    return cache


def test_caches_and_first_calls():
    own, cross = DynamicCache(), DynamicCache()
    assert self_attention_cache(EncoderDecoderCache(own, cross)) is own
    assert self_attention_cache(own) is own and self_attention_cache(None) is None
    assert is_first_call(0) is True and is_first_call(torch.tensor(0)) is True
    assert is_first_call(3) is False and is_first_call(torch.tensor(1)) is False


def test_unilm_attention_mask_against_the_cumsum_rule():
    token_type_ids = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    order = token_type_ids.cumsum(1).tolist()
    mask = unilm_attention_mask(token_type_ids)
    assert mask.shape == (2, 1, 5, 5) and mask.dtype == torch.bool
    assert mask[:, 0].tolist() == pattern(lambda b, i, j: order[b][j] <= order[b][i], 2, 5, 5)
    masked = unilm_attention_mask(token_type_ids, attention_mask)
    rule = lambda b, i, j: order[b][j] <= order[b][i] and attention_mask[b, j] == 1  # noqa: E731
    assert masked[:, 0].tolist() == pattern(rule, 2, 5, 5)
    # the source sees itself both ways; a target token sees the source and the target up to itself
    assert mask[0, 0, 0].tolist() == [True, True, True, False, False]
    assert mask[0, 0, 3].tolist() == [True, True, True, True, False]
    with pytest.raises(ValueError, match=r"token_type_ids must be \(batch, seq\), got shape \(4,\)"):
        unilm_attention_mask(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attention_mask shape \(1, 3\) differs from token_type_ids shape \(1, 4\)"):
        unilm_attention_mask(torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 3))


LENGTHS = [(5, 3, 128), (200, 3, 200), (3, 130, 256), (128, 128, 128), (129, 1, 129)]  # (length, seq, target)


@pytest.mark.parametrize(("length", "seq", "target"), LENGTHS)
def test_padded_for_mask_indices_reaches_every_index_a_backend_asks(length, seq, target):
    per_token = torch.arange(2 * seq).view(2, seq)
    padded = padded_for_mask_indices(per_token, length, -7)
    assert padded.shape == (2, target)
    assert torch.equal(padded[:, :seq], per_token)
    assert bool((padded[:, seq:] == -7).all())


def test_within_each_sequence_compares_the_sequence_ids():
    packed = PackedBatch(torch.tensor([[0, 0, 1, 1, 1], [2, 3, 3, 3, 4]]), None, None)
    same = within_each_sequence(packed, 5)
    ids = packed.sequence_ids.tolist()
    result = same(torch.arange(2)[:, None, None], None, torch.arange(5)[None, :, None], torch.arange(5)[None, None])
    assert result.tolist() == pattern(lambda b, i, j: ids[b][i] == ids[b][j], 2, 5, 5)
    # beyond the real tokens (a flex block's padding) the padded indices form one group no real query joins
    assert bool(same(torch.tensor(0), None, torch.tensor(100), torch.tensor(120)))
    for query in range(5):
        assert not bool(same(torch.tensor(0), None, torch.tensor(query), torch.tensor(127)))


def test_unilm_source_overlay_only_on_a_first_unilm_decoder_call():
    token_type_ids = torch.tensor([[0, 0, 1, 1]])
    unilm = config_for(is_decoder=True, decoder_attention="unilm")
    assert unilm_source_overlay(config_for(is_decoder=True), token_type_ids, 0, 4) is None
    assert unilm_source_overlay(config_for(decoder_attention="unilm"), token_type_ids, 0, 4) is None  # an encoder
    assert unilm_source_overlay(unilm, None, 0, 4) is None
    assert unilm_source_overlay(unilm, token_type_ids, 2, 4) is None
    assert unilm_source_overlay(unilm, token_type_ids, torch.tensor(1), 4) is None
    overlay = unilm_source_overlay(unilm, token_type_ids, torch.tensor(0), 4)
    source = [True, True, False, False]
    seen = overlay(torch.tensor(0), None, torch.arange(4)[:, None], torch.arange(4)[None]).tolist()
    assert seen == [[source[i] and source[j] for j in range(4)] for i in range(4)]
    overlay = unilm_source_overlay(unilm, torch.tensor([[0, 0, 1]]), 0, 200)  # a static cache's full length
    assert not bool(overlay(torch.tensor(0), None, torch.tensor(1), torch.tensor(199)))
    assert bool(overlay(torch.tensor(0), None, torch.tensor(1), torch.tensor(0)))


def test_prepared_4d_mask():
    """Boolean, integer or additive masks: last query rows, keys beyond the mask hidden, given dtype and device."""
    keep = torch.tensor([[[[True, False, True], [False, True, True]]]])
    for mask in (keep, keep.long()):
        result = prepared_4d_mask(mask, 2, 3, torch.float32)
        assert result.dtype == torch.float32 and result.tolist() == [[[[0.0, MIN, 0.0], [MIN, 0.0, 0.0]]]]
    additive = torch.tensor([[[[0.0, -float("inf"), -3.0]]]])
    assert prepared_4d_mask(additive, 1, 3, torch.float32).tolist() == [[[[0.0, MIN, -3.0]]]]
    half_min = torch.finfo(torch.float16).min
    boolean_half = prepared_4d_mask(keep, 2, 3, torch.float16)
    assert boolean_half.dtype == torch.float16 and boolean_half[0, 0, 0, 1].item() == half_min
    half = prepared_4d_mask(torch.tensor([[[[0.0, -1e9, -2.0]]]]), 1, 3, torch.float16)
    assert half.dtype == torch.float16 and half.tolist() == [[[[0.0, half_min, -2.0]]]]
    causal = torch.tensor([[[[1, 0, 0], [1, 1, 0], [1, 1, 1]]]])
    assert prepared_4d_mask(causal, 1, 5, torch.float32).tolist() == [[[[0.0, 0.0, 0.0, MIN, MIN]]]]
    assert prepared_4d_mask(causal, 3, 3, torch.float32).shape == (1, 1, 3, 3)
    narrow = torch.tensor([[[[1, 0], [1, 1], [0, 1]]]])
    expected = [[[[0.0, MIN, MIN], [0.0, 0.0, MIN], [MIN, 0.0, MIN]]]]
    assert prepared_4d_mask(narrow, 3, 3, torch.float32).tolist() == expected
    meta = prepared_4d_mask(torch.ones(1, 1, 2, 3, dtype=torch.bool).to("meta"), 2, 3, torch.float32)
    assert meta.device.type == "meta" and meta.shape == (1, 1, 2, 3)
    for shape in ((1, 2, 2, 3), (1, 1, 1, 3), (1, 1, 2, 4)):
        expected = re.escape(f"(batch, 1, 2, 3) here (key_length counts cached tokens too); got {shape}")
        with pytest.raises(ValueError, match=expected):
            prepared_4d_mask(torch.ones(shape, dtype=torch.bool), 2, 3, torch.float32)


def test_check_padding_mask():
    check_padding_mask(None, 2, 5)
    check_padding_mask(torch.ones(2, 5), 2, 5)
    check_padding_mask(torch.ones(1, 5), 2, 5)
    check_padding_mask(torch.ones(2, 1, 3, 5), 2, 5)  # 4D: prepared_4d_mask checks it
    with pytest.raises(ValueError, match=r"must be 2D \(batch, seq\) or 4D .*; got \(2, 3, 5\)"):
        check_padding_mask(torch.ones(2, 3, 5), 2, 5)
    with pytest.raises(ValueError, match=r"has shape \(2, 4\) but the keys are .* = \(2, 5\)"):
        check_padding_mask(torch.ones(2, 4), 2, 5)
    with pytest.raises(ValueError, match=r"has shape \(3, 5\)"):
        check_padding_mask(torch.ones(3, 5), 2, 5)


@pytest.mark.parametrize(("overrides", "attention_mask", "term", "rule"), [
    ({}, [[1, 1, 1, 0], [1, 1, 1, 1]], False, lambda m, b, i, j: m[b][j]),  # the encoder: padding only
    ({"is_decoder": True}, [[0, 1, 1, 1], [1, 1, 1, 1]], True, lambda m, b, i, j: j <= i and m[b][j]),
])  # fmt: skip
def test_encoder_and_decoder_masks(overrides, attention_mask, term, rule):
    mask = mask_of(config_for(**overrides), torch.tensor(attention_mask), 2, 4, term=term)
    assert allowed(mask) == pattern(lambda b, i, j: rule(attention_mask, b, i, j), 2, 4, 4)


def test_unilm_decoder_mask_lets_the_source_see_itself_and_a_causal_decoder_ignores_token_types():
    token_type_ids = torch.tensor([[0, 0, 0, 1, 1]])
    unilm = config_for(is_decoder=True, decoder_attention="unilm")
    mask = mask_of(unilm, None, 1, 5, token_type_ids=token_type_ids)
    assert allowed(mask) == unilm_attention_mask(token_type_ids)[:, 0].tolist()
    assert allowed(mask)[0][0] == [True, True, True, False, False]
    causal = mask_of(config_for(is_decoder=True), None, 1, 5, token_type_ids=token_type_ids, term=True)
    assert allowed(causal) == pattern(lambda b, i, j: j <= i, 1, 5, 5)
    # into a long static cache: the overlay is indexed over its full length (beyond a flex block's 128)
    cache = StaticCache(config=unilm, max_cache_len=200)
    mask = mask_of(unilm, None, 1, 3, cache=cache, token_type_ids=torch.tensor([[0, 0, 1]]))
    expected = unilm_attention_mask(torch.tensor([[0, 0, 1]]))[0, 0].tolist()
    assert allowed(mask) == [[row + [False] * 197 for row in expected]]


@pytest.mark.parametrize("is_decoder", [False, True])
def test_packed_rows_attend_within_each_sequence(is_decoder):
    packed = describe_packed_batch(2, 4, None, None, 0, cu_seq_lens_q=torch.tensor([0, 1, 4, 6, 8]))
    ids = packed.sequence_ids.tolist()
    mask = mask_of(config_for(is_decoder=is_decoder), None, 2, 4, packed=packed)
    expected = pattern(lambda b, i, j: ids[b][i] == ids[b][j] and (j <= i or not is_decoder), 2, 4, 4)
    assert allowed(mask) == expected


def test_a_score_term_keeps_the_causal_mask_on_sdpa():
    """sdpa may skip a causal mask (is_causal) only where no score term must join it."""
    config = config_for("sdpa", is_decoder=True)
    assert mask_of(config, None, 1, 4) is None
    assert allowed(mask_of(config, None, 1, 4, term=True)) == pattern(lambda b, i, j: j <= i, 1, 4, 4)


@pytest.mark.parametrize("layers", [1, 2])
def test_a_callers_4d_mask_is_prepared_for_the_keys_the_layer_sees(layers):
    """The keys: this call's, a static cache's full length, or the cached + new ones."""
    config = config_for(num_hidden_layers=layers)
    keep = torch.tensor([[[[1, 0, 1], [0, 1, 1], [1, 1, 0]]]], dtype=torch.bool)
    mask = mask_of(config, keep, 1, 3)
    assert mask.dtype == torch.float32 and allowed(mask) == keep[:, 0].tolist()
    mask = mask_of(config, keep, 1, 3, cache=StaticCache(config=config, max_cache_len=6))
    assert allowed(mask) == [[row + [False] * 3 for row in keep[0, 0].tolist()]]
    decoder = config_for(is_decoder=True, num_hidden_layers=layers)
    keep = torch.tensor([[[[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [0, 1, 1, 1, 1]]]], dtype=torch.bool)
    assert allowed(mask_of(decoder, keep, 1, 3, cache=filled_cache(decoder, 2), past=2)) == keep[:, 0].tolist()


def test_a_cached_decoder_step_masks_over_the_cached_keys_too():
    config = config_for(is_decoder=True)
    attention_mask = torch.tensor([[0, 1, 1, 1, 1]])  # one left pad among the 2 cached tokens, 3 new ones
    mask = mask_of(config, attention_mask, 1, 3, cache=filled_cache(config, 2), past=2)
    assert allowed(mask) == pattern(lambda b, i, j: j <= i + 2 and attention_mask[b, j] == 1, 1, 3, 5)


def test_cross_attention_mask_hides_the_encoders_padding():
    config = config_for(is_decoder=True, add_cross_attention=True)
    encoder_mask = torch.tensor([[1, 1, 0, 0, 1], [1, 1, 1, 1, 1]])
    mask = cross_attention_mask(config, encoder_mask, embeddings(2, 3), embeddings(2, 5))
    assert allowed(mask) == pattern(lambda b, i, j: encoder_mask[b, j] == 1, 2, 3, 5)
    keep = torch.tensor([[[[1, 0, 1, 1, 1], [0, 1, 1, 1, 1], [1, 1, 1, 1, 0]]]], dtype=torch.bool)
    mask = cross_attention_mask(config, keep, embeddings(1, 3), embeddings(1, 5))
    assert mask.dtype == torch.float32 and allowed(mask) == keep[:, 0].tolist()
    # transformers' helper reads the keys' dtype (eager's additive mask) from the encoder states it is given
    mask = cross_attention_mask(config, encoder_mask[:1], embeddings(1, 3), embeddings(1, 5).double())
    assert mask.dtype == torch.float64 and mask.shape == (1, 1, 3, 5)
    assert (mask[0, 0] == 0).tolist() == [[True, True, False, False, True]] * 3
