"""Edge cases: `RoFormerExtModel.batch_layout`, what `__init__` builds, per-head terms under tensor parallelism, packed
linear attention without a rotation."""

from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_config
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from roformer_ext import RoFormerExtModel
from roformer_ext.modeling_roformer_ext_layers import RoFormerExtPooler, check_terms_fit_local_heads


def cache_holding(tokens: int) -> DynamicCache:
    cache = DynamicCache()
    cache.update(torch.zeros(1, 4, tokens, 8), torch.zeros(1, 4, tokens, 8), 0)
    return cache


def decoder(**overrides) -> RoFormerExtModel:
    torch.manual_seed(0)
    return RoFormerExtModel(tiny_config(is_decoder=True, **overrides)).eval()


def test_a_layout_handed_down_is_returned_as_given_and_taken_out_of_kwargs():
    model = decoder()
    given, lengths = object(), torch.tensor([0, 3])
    kwargs = {"batch_layout": given, "cu_seq_lens_q": lengths}
    assert model.batch_layout(torch.zeros(1, 3, dtype=torch.long), None, None, None, None, None, kwargs) is given
    assert kwargs == {"cu_seq_lens_q": lengths}  # the rest stays for the caller's description


def test_a_decoders_layout_holds_the_cache_it_writes_and_caches_only_when_asked():
    model = decoder(add_cross_attention=True)
    ids, encoder_states = torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 2, 32)
    layout = model.batch_layout(ids, None, None, None, None, encoder_states, {})  # use_cache None: the config's True
    assert type(layout.cache) is EncoderDecoderCache
    assert layout.self_cache is layout.cache.self_attention_cache
    assert (layout.past_length, layout.packed) == (0, None)
    layout = model.batch_layout(ids, None, None, None, None, None, {})
    assert type(layout.cache) is DynamicCache and layout.self_cache is layout.cache
    layout = model.batch_layout(ids, None, None, None, False, encoder_states, {})
    assert (layout.cache, layout.self_cache, layout.past_length, layout.packed) == (None, None, 0, None)


def test_a_layout_after_a_cache_counts_the_cached_tokens_in_the_mask_and_refuses_packing():
    model = decoder()
    ids = torch.zeros(1, 3, dtype=torch.long)
    cache = cache_holding(2)
    layout = model.batch_layout(ids, torch.ones(1, 5, dtype=torch.long), None, cache, True, None, {})
    assert (layout.cache, layout.self_cache, layout.past_length, layout.packed) == (cache, cache, 2, None)
    with pytest.raises(ValueError, match=r"\(batch, cached \+ new tokens\) = \(1, 5\)"):
        model.batch_layout(ids, torch.ones(1, 3, dtype=torch.long), None, cache, True, None, {})
    kwargs = {"cu_seq_lens_q": torch.tensor([0, 3])}
    with pytest.raises(ValueError, match="cannot continue a KV cache"):
        model.batch_layout(ids, None, None, cache, True, None, kwargs)
    assert kwargs == {}  # read once, here


def test_the_pooler_is_built_when_asked_for_and_configured():
    pooled = RoFormerExtModel(tiny_config(pooler_activation="linear"))
    assert type(pooled.pooler) is RoFormerExtPooler
    assert pooled.pooler.dense.in_features == pooled.pooler.dense.out_features == 32
    assert RoFormerExtModel(tiny_config(pooler_activation="linear"), add_pooling_layer=False).pooler is None
    assert RoFormerExtModel(tiny_config()).pooler is None  # no pooler_activation: no pooler


def test_per_head_terms_are_refused_on_a_rank_holding_some_of_the_heads():
    config = tiny_config(position_encoding="alibi")
    fits, per_head = SimpleNamespace(fits_local_heads=True), SimpleNamespace(fits_local_heads=False)
    for mask in (None, torch.ones(1, 3), torch.zeros(1, 1, 3, 3), torch.zeros(1, 1, 1, 3)):
        for scores in (None, fits):
            assert check_terms_fit_local_heads(config, 2, mask, scores) is None  # shared by every head: fits
    refused = [(torch.zeros(1, 4, 3, 3), None), (torch.zeros(1, 2, 3, 3), fits), (torch.zeros(1, 4, 1, 3), None)]
    refused += [(None, per_head), (torch.ones(1, 3), per_head)]
    for mask, scores in refused:
        with pytest.raises(ValueError, match=r"adds one term per attention head, but this process holds 2 of the 4"):
            check_terms_fit_local_heads(config, 2, mask, scores)


def test_packed_linear_attention_without_a_rotation_keeps_each_sequence_alone():
    torch.manual_seed(0)
    model = RoFormerExtModel(tiny_config(attention_type="linear", position_encoding="none", initializer_range=0.2))
    model.eval()
    ids = torch.tensor([[5, 17, 42, 9, 61]])
    with torch.no_grad():
        packed = model(input_ids=ids, cu_seq_lens_q=torch.tensor([0, 3, 5])).last_hidden_state
        first, second = (model(input_ids=part).last_hidden_state for part in (ids[:, :3], ids[:, 3:]))
        whole = model(input_ids=ids).last_hidden_state
    torch.testing.assert_close(packed, torch.cat([first, second], dim=1), rtol=0, atol=1e-5)
    assert (whole - packed).abs().max() > 1e-2  # one sequence of 5 is not the two of 3 and 2
