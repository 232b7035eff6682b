"""Edge cases: caching, the pooler, per-head terms under tensor parallelism, packed linear attention, no rotation."""

from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_config
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from roformer_ext import RoFormerExtModel
from roformer_ext.compat import output_cache
from roformer_ext.modeling_roformer_ext_layers import check_terms_fit_local_heads


def test_a_decoder_caches_when_asked_and_counts_the_cache_in_the_mask():
    """No cache unless asked (the config's use_cache when not given); cached tokens count in the mask; no packing."""
    torch.manual_seed(0)
    model = RoFormerExtModel(tiny_config(is_decoder=True, add_cross_attention=True)).eval()
    ids, states = torch.randint(5, 99, (1, 3)), torch.zeros(1, 2, 32)
    with torch.no_grad():
        assert type(output_cache(model(ids, encoder_hidden_states=states))) is EncoderDecoderCache
        assert output_cache(model(ids, encoder_hidden_states=states, use_cache=False)) is None
        cache = output_cache(model(ids[:, :2]))
        assert type(cache) is DynamicCache
        with pytest.raises(ValueError, match=r"\(batch, cached \+ new tokens\) = \(1, 3\)"):
            model(ids[:, 2:], attention_mask=torch.ones(1, 1, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="cannot continue a KV cache"):
            model(ids[:, 2:], cache=cache, cu_seq_lens_q=torch.tensor([0, 1]))
        step = model(ids[:, 2:], attention_mask=torch.ones(1, 3, dtype=torch.long), cache=cache)
        full = model(ids, use_cache=False).last_hidden_state
    assert output_cache(step).get_seq_length() == 3
    assert output_cache(RoFormerExtModel(tiny_config())(ids)) is None  # an encoder keeps no cache
    torch.testing.assert_close(step.last_hidden_state, full[:, 2:], rtol=0, atol=1e-5)


def test_the_pooler_is_built_when_asked_for_and_configured():
    ids = torch.randint(5, 99, (2, 4))
    assert RoFormerExtModel(tiny_config(pooler_activation="linear"))(ids).pooler_output.shape == (2, 32)
    assert RoFormerExtModel(tiny_config(pooler_activation="linear"), add_pooling_layer=False)(ids).pooler_output is None
    assert RoFormerExtModel(tiny_config())(ids).pooler_output is None  # no pooler_activation: no pooler


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
