"""Edge cases of the text model's position helpers found by the mutation run of modeling_roformer_ext.py
(docs/testing.md, "The models' position paths"): the batch layout (`RoFormerExtModel.batch_layout`), the hand-over to
the attention plan (`RoFormerExtModel.attention_plan`) and what `__init__` builds, each asserted exactly."""

import pytest
import torch
from conftest import tiny_config
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

import roformer_ext.modeling_roformer_ext as modeling
from roformer_ext import RoFormerExtModel
from roformer_ext.modeling_roformer_ext_layers import RoFormerExtPooler


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
    message = (
        "attention_mask has shape (1, 3) but the keys are (batch, cached + new tokens) = (1, 5); give one column per "
        "token, including those already in the cache."
    )
    with pytest.raises(ValueError) as refused:
        model.batch_layout(ids, torch.ones(1, 3, dtype=torch.long), None, cache, True, None, {})
    assert str(refused.value) == message
    kwargs = {"cu_seq_lens_q": torch.tensor([0, 3])}
    with pytest.raises(ValueError) as refused:
        model.batch_layout(ids, None, None, cache, True, None, kwargs)
    assert str(refused.value) == (
        "Packed sequences (cu_seq_lens_q / seq_idx) cannot continue a KV cache: a cached step extends one sequence "
        "per row. Decode each sequence in its own row, with an attention mask for the padding."
    )
    assert kwargs == {}  # read once, here


def test_the_attention_plan_gets_every_input_unchanged(monkeypatch):
    model = decoder()
    made = []
    monkeypatch.setattr(modeling, "make_attention_plan", lambda *args: made.append(args) or "plan")
    inputs = [object() for _ in range(8)]  # layout, embeddings, positions, mask, segments, key numbering, encoder
    assert model.attention_plan(*inputs) == "plan"
    assert len(made) == 1 and len(made[0]) == 10
    assert made[0][0] is model.config and made[0][1] is model.position_encoding
    assert all(got is want for got, want in zip(made[0][2:], inputs, strict=True))
    made.clear()
    model.attention_plan(*inputs[:6])  # without an encoder: None for both encoder inputs
    assert all(got is want for got, want in zip(made[0][2:], [*inputs[:6], None, None], strict=True))


def test_the_pooler_is_built_when_asked_for_and_configured():
    pooled = RoFormerExtModel(tiny_config(pooler_activation="linear"))
    assert type(pooled.pooler) is RoFormerExtPooler
    assert pooled.pooler.dense.in_features == pooled.pooler.dense.out_features == 32
    assert RoFormerExtModel(tiny_config(pooler_activation="linear"), add_pooling_layer=False).pooler is None
    assert RoFormerExtModel(tiny_config()).pooler is None  # no pooler_activation: no pooler
    assert pooled.gradient_checkpointing is False
