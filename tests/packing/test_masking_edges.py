"""masking_roformer_ext.py's edges, unit by unit (found by the mutation check, docs/testing.md): which keys each query
may see for the encoder, the decoder, UniLM, packed sequences, a caller's 4D mask and cross-attention, and the
checks on the masks a caller gives.

The expected patterns are written out by hand or by a plain loop over (query, key) pairs; masks are read back as
"may attend" booleans whatever the backend's form (additive float or boolean).
"""

import re

import pytest
import torch
from conftest import tiny_config
from transformers.cache_utils import DynamicCache, EncoderDecoderCache, StaticCache

from roformer_ext.attention_plan import BatchLayout, check_backend_takes, eager_attention_forward, make_attention_plan
from roformer_ext.encoding_knobs import SCORE_TERM_CAPABILITIES, Capabilities
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
from roformer_ext.packing import PackedBatch, describe_packed_batch, per_sequence_sdpa
from roformer_ext.position_encodings import AttentionTerms

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


class NoTerms:
    """A position encoding with nothing for the attention, and a score term or not."""

    def __init__(self, has_score_term: bool) -> None:
        self.has_relative_scores = has_score_term
        self.capabilities = SCORE_TERM_CAPABILITIES if has_score_term else Capabilities()

    def attention_terms(self, *args) -> AttentionTerms:
        return AttentionTerms()


def plan_choice(config, attention_mask, batch, seq, packed=None, token_type_ids=None, has_score_term=False):
    """(mask, attention function) as the attention plan decides them (function None: linear attention)."""
    layout = BatchLayout(None, None, 0, packed)
    positions = torch.zeros(1, batch, seq, dtype=torch.long)
    plan = make_attention_plan(
        config, NoTerms(has_score_term), layout, embeddings(batch, seq), positions, attention_mask, token_type_ids
    )
    return plan.mask, plan.attention


def test_self_attention_cache_reads_the_decoder_part():
    own, cross = DynamicCache(), DynamicCache()
    assert self_attention_cache(EncoderDecoderCache(own, cross)) is own
    assert self_attention_cache(own) is own
    assert self_attention_cache(None) is None


def test_is_first_call():
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


def test_unilm_attention_mask_checks():
    with pytest.raises(ValueError, match=r"token_type_ids must be \(batch, seq\), got shape \(4,\)"):
        unilm_attention_mask(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attention_mask shape \(1, 3\) differs from token_type_ids shape \(1, 4\)"):
        unilm_attention_mask(torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 3))


@pytest.mark.parametrize(
    ("length", "seq", "target"), [(5, 3, 128), (200, 3, 200), (3, 130, 256), (128, 128, 128), (129, 1, 129)]
)
def test_padded_for_mask_indices_reaches_every_index_a_backend_asks(length, seq, target):
    per_token = torch.arange(2 * seq).view(2, seq)
    padded = padded_for_mask_indices(per_token, length, -7)
    assert padded.shape == (2, target)
    assert torch.equal(padded[:, :seq], per_token)
    assert bool((padded[:, seq:] == -7).all())


def test_within_each_sequence_compares_the_sequence_ids():
    packed = PackedBatch(torch.tensor([[0, 0, 1, 1, 1], [2, 3, 3, 3, 4]]), None, None, None)
    same = within_each_sequence(packed, 5)
    ids = packed.sequence_ids.tolist()
    batch_idx = torch.arange(2)[:, None, None]
    q_idx = torch.arange(5)[None, :, None]
    kv_idx = torch.arange(5)[None, None, :]
    result = same(batch_idx, None, q_idx, kv_idx)
    assert result.tolist() == pattern(lambda b, i, j: ids[b][i] == ids[b][j], 2, 5, 5)
    # beyond the real tokens (a flex block's padding) the padded indices form one group of their own
    assert bool(same(torch.tensor(0), None, torch.tensor(100), torch.tensor(120)))
    assert not bool(same(torch.tensor(0), None, torch.tensor(0), torch.tensor(120)))


def test_unilm_source_overlay_only_on_a_first_unilm_call():
    token_type_ids = torch.tensor([[0, 0, 1, 1]])
    unilm = config_for(is_decoder=True, decoder_attention="unilm")
    causal = config_for(is_decoder=True)
    assert unilm_source_overlay(causal, token_type_ids, 0, None) is None
    assert unilm_source_overlay(unilm, None, 0, None) is None
    assert unilm_source_overlay(unilm, token_type_ids, 2, None) is None
    assert unilm_source_overlay(unilm, token_type_ids, torch.tensor(1), None) is None
    overlay = unilm_source_overlay(unilm, token_type_ids, torch.tensor(0), None)
    q_idx, kv_idx = torch.arange(4)[:, None], torch.arange(4)[None, :]
    source = [True, True, False, False]
    assert overlay(torch.tensor(0), None, q_idx, kv_idx).tolist() == [
        [source[i] and source[j] for j in range(4)] for i in range(4)
    ]


def test_unilm_source_overlay_covers_a_static_caches_full_length():
    unilm = config_for(is_decoder=True, decoder_attention="unilm")
    cache = StaticCache(config=unilm, max_cache_len=200)
    overlay = unilm_source_overlay(unilm, torch.tensor([[0, 0, 1]]), 0, cache)
    assert not bool(overlay(torch.tensor(0), None, torch.tensor(0), torch.tensor(199)))  # indexable, not source
    assert bool(overlay(torch.tensor(0), None, torch.tensor(1), torch.tensor(0)))


def test_prepared_4d_mask_from_booleans_integers_and_floats():
    keep = torch.tensor([[[[True, False, True], [False, True, True]]]])
    for mask in (keep, keep.long()):
        result = prepared_4d_mask(mask, 2, 3, torch.float32)
        assert result.dtype == torch.float32
        assert result.tolist() == [[[[0.0, MIN, 0.0], [MIN, 0.0, 0.0]]]]
    additive = torch.tensor([[[[0.0, -float("inf"), -3.0]]]])
    assert prepared_4d_mask(additive, 1, 3, torch.float32).tolist() == [[[[0.0, MIN, -3.0]]]]
    half = prepared_4d_mask(keep, 2, 3, torch.float16)
    assert half.dtype == torch.float16 and half[0, 0, 0, 1].item() == torch.finfo(torch.float16).min


def test_prepared_4d_mask_takes_the_last_query_rows_and_hides_unwritten_slots():
    mask = torch.tensor([[[[1, 0, 0], [1, 1, 0], [1, 1, 1]]]])
    result = prepared_4d_mask(mask, 1, 5, torch.float32)
    assert result.tolist() == [[[[0.0, 0.0, 0.0, MIN, MIN]]]]
    assert prepared_4d_mask(mask, 3, 3, torch.float32).shape == (1, 1, 3, 3)


@pytest.mark.parametrize(("shape", "q", "kv"), [((1, 2, 2, 3), 2, 3), ((1, 1, 1, 3), 2, 3), ((1, 1, 2, 4), 2, 3)])
def test_prepared_4d_mask_refuses_other_shapes(shape, q, kv):
    expected = re.escape(f"(batch, 1, {q}, {kv}) here (key_length counts cached tokens too); got {shape}.")
    with pytest.raises(ValueError, match=expected):
        prepared_4d_mask(torch.ones(shape, dtype=torch.bool), q, kv, torch.float32)


def test_a_4d_mask_on_flash_is_refused_by_the_plan():
    with pytest.raises(ValueError, match=r"attn_implementation='flash_attention_2'"):
        check_backend_takes(config_for("flash_attention_2"), torch.ones(1, 1, 2, 2, dtype=torch.bool), None, False)


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


def test_encoder_mask_hides_padding_only():
    config = config_for()
    attention_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    mask = self_attention_mask(config, attention_mask, embeddings(2, 4), None, 0, None, None, False)
    assert allowed(mask) == pattern(lambda b, i, j: attention_mask[b, j] == 1, 2, 4, 4)


def test_decoder_mask_is_causal_and_hides_padding():
    config = config_for(is_decoder=True)
    attention_mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    mask = self_attention_mask(config, attention_mask, embeddings(2, 4), None, 0, None, None, True)
    assert allowed(mask) == pattern(lambda b, i, j: j <= i and attention_mask[b, j] == 1, 2, 4, 4)


def test_unilm_decoder_mask_lets_the_source_see_itself():
    config = config_for(is_decoder=True, decoder_attention="unilm")
    token_type_ids = torch.tensor([[0, 0, 0, 1, 1]])
    mask = self_attention_mask(config, None, embeddings(1, 5), None, 0, token_type_ids, None, False)
    assert allowed(mask) == unilm_attention_mask(token_type_ids)[:, 0].tolist()
    # the same call as a plain causal decoder differs: the source's first token sees the later source tokens
    assert allowed(mask)[0][0] == [True, True, True, False, False]


def test_a_causal_decoder_ignores_token_types():
    config = config_for(is_decoder=True)
    token_type_ids = torch.tensor([[0, 0, 0, 1, 1]])
    mask = self_attention_mask(config, None, embeddings(1, 5), None, 0, token_type_ids, None, True)
    assert allowed(mask) == pattern(lambda b, i, j: j <= i, 1, 5, 5)


@pytest.mark.parametrize("is_decoder", [False, True])
def test_packed_rows_attend_within_each_sequence(is_decoder):
    config = config_for(is_decoder=is_decoder)
    packed = describe_packed_batch(2, 4, None, None, 0, cu_seq_lens_q=torch.tensor([0, 1, 4, 6, 8]))
    ids = packed.sequence_ids.tolist()
    mask = self_attention_mask(config, None, embeddings(2, 4), None, 0, None, packed, False)

    def rule(b, i, j):
        return ids[b][i] == ids[b][j] and (j <= i or not is_decoder)

    assert allowed(mask) == pattern(rule, 2, 4, 4)


def test_packed_rows_on_sdpa_run_each_sequence_alone_unless_something_else_is_masked():
    """The attention plan's choice: per-sequence SDPA, no mask, only where nothing else must be masked."""
    packed = describe_packed_batch(1, 4, None, None, 0, cu_seq_lens_q=torch.tensor([0, 1, 4]))
    sdpa = config_for("sdpa")
    assert plan_choice(sdpa, None, 1, 4, packed) == (None, per_sequence_sdpa)
    # a score term joins the mask, so the mask is built (and it keeps the sequences apart)
    mask, function = plan_choice(sdpa, None, 1, 4, packed, has_score_term=True)
    assert function is not per_sequence_sdpa
    assert allowed(mask) == pattern(lambda b, i, j: (i == 0) == (j == 0), 1, 4, 4)
    # the eager backend, or a packed description without cu_seq_lens (traced), build the mask as well
    eager = config_for("eager")
    mask, function = plan_choice(eager, None, 1, 4, packed)
    assert function is eager_attention_forward and allowed(mask) == pattern(
        lambda b, i, j: (i == 0) == (j == 0), 1, 4, 4
    )
    traced = PackedBatch(packed.sequence_ids, None, None, None)
    mask, function = plan_choice(sdpa, None, 1, 4, traced)
    assert function is not per_sequence_sdpa and allowed(mask) == pattern(lambda b, i, j: (i == 0) == (j == 0), 1, 4, 4)
    # a UniLM decoder or a padding mask next to the packing keep the mask too
    unilm = config_for("sdpa", is_decoder=True, decoder_attention="unilm")
    token_type_ids = torch.tensor([[0, 0, 1, 1]])
    mask, function = plan_choice(unilm, None, 1, 4, packed, token_type_ids=token_type_ids)
    assert function is not per_sequence_sdpa and mask is not None
    mask, function = plan_choice(sdpa, torch.ones(1, 4), 1, 4, packed)
    assert function is not per_sequence_sdpa and allowed(mask) == pattern(lambda b, i, j: (i == 0) == (j == 0), 1, 4, 4)


def test_linear_attention_takes_the_raw_padding_mask():
    config = config_for(attention_type="linear")
    attention_mask = torch.tensor([[1, 1, 0]])
    assert plan_choice(config, attention_mask, 1, 3) == (attention_mask, None)


def test_a_callers_4d_mask_is_prepared_for_the_keys_the_layer_sees():
    config = config_for()
    keep = torch.tensor([[[[1, 0, 1], [0, 1, 1], [1, 1, 0]]]], dtype=torch.bool)
    mask = self_attention_mask(config, keep, embeddings(1, 3), None, 0, None, None, False)
    assert mask.dtype == torch.float32
    assert allowed(mask) == keep[:, 0].tolist()
    # with a static cache the keys are its full length: the slots not written yet are hidden
    cache = StaticCache(config=config, max_cache_len=6)
    mask = self_attention_mask(config, keep, embeddings(1, 3), cache, 0, None, None, False)
    assert allowed(mask) == [[row + [False] * 3 for row in keep[0, 0].tolist()]]


def test_cross_attention_mask_hides_the_encoders_padding():
    config = config_for(is_decoder=True, add_cross_attention=True)
    encoder_mask = torch.tensor([[1, 1, 0, 0, 1], [1, 1, 1, 1, 1]])
    mask = cross_attention_mask(config, encoder_mask, embeddings(2, 3), embeddings(2, 5))
    assert allowed(mask) == pattern(lambda b, i, j: encoder_mask[b, j] == 1, 2, 3, 5)
    keep = torch.tensor([[[[1, 0, 1, 1, 1], [0, 1, 1, 1, 1], [1, 1, 1, 1, 0]]]], dtype=torch.bool)
    mask = cross_attention_mask(config, keep, embeddings(1, 3), embeddings(1, 5))
    assert mask.dtype == torch.float32 and allowed(mask) == keep[:, 0].tolist()
    flash = config_for("flash_attention_2", is_decoder=True, add_cross_attention=True)
    with pytest.raises(ValueError, match="cannot be used with attn_implementation='flash_attention_2'"):
        check_backend_takes(flash, None, keep, False)  # the plan refuses it before any mask is made


def test_a_score_term_keeps_the_causal_mask_on_sdpa():
    """sdpa may skip a causal mask (is_causal) only where no score term must join it."""
    config = config_for("sdpa", is_decoder=True)
    skipped = self_attention_mask(config, None, embeddings(1, 4), None, 0, None, None, False)
    kept = self_attention_mask(config, None, embeddings(1, 4), None, 0, None, None, True)
    assert skipped is None
    assert allowed(kept) == pattern(lambda b, i, j: j <= i, 1, 4, 4)


def test_prepared_4d_mask_casts_a_float_mask_and_stays_on_its_device():
    additive = torch.tensor([[[[0.0, -1e9, -2.0]]]])
    half = prepared_4d_mask(additive, 1, 3, torch.float16)
    assert half.dtype == torch.float16 and half.tolist() == [[[[0.0, torch.finfo(torch.float16).min, -2.0]]]]
    meta = prepared_4d_mask(torch.ones(1, 1, 2, 3, dtype=torch.bool).to("meta"), 2, 3, torch.float32)
    assert meta.device.type == "meta" and meta.shape == (1, 1, 2, 3)


def test_the_flash_4d_mask_error_in_full():
    message = (
        "A custom 4D attention_mask cannot be used with attn_implementation='flash_attention_2' (flash attention takes "
        "no dense mask); load the model with attn_implementation='sdpa', 'eager' or 'flex_attention'."
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        check_backend_takes(config_for("flash_attention_2"), torch.ones(1, 1, 2, 2, dtype=torch.bool), None, False)


def test_cross_attention_mask_is_made_for_the_encoder_states():
    """transformers' helper reads the keys' dtype (eager's additive mask) from the encoder states it is given."""
    config = config_for(is_decoder=True, add_cross_attention=True)
    encoder_mask = torch.tensor([[1, 1, 0, 0, 1]])
    mask = cross_attention_mask(config, encoder_mask, embeddings(1, 3), embeddings(1, 5).double())
    assert mask.dtype == torch.float64 and mask.shape == (1, 1, 3, 5)
    assert (mask[0, 0] == 0).tolist() == [[True, True, False, False, True]] * 3


def test_prepared_4d_mask_hides_key_columns_beyond_a_narrower_mask():
    """Every query of the call, as many as the keys: the key columns the caller's mask does not cover are hidden."""
    mask = torch.tensor([[[[1, 0], [1, 1], [0, 1]]]])
    result = prepared_4d_mask(mask, 3, 3, torch.float32)
    assert result.tolist() == [[[[0.0, MIN, MIN], [0.0, 0.0, MIN], [MIN, 0.0, MIN]]]]


def filled_cache(config, tokens: int) -> DynamicCache:
    cache = DynamicCache(config=config)
    for layer in range(config.num_hidden_layers):
        cache.update(torch.zeros(1, 4, tokens, 8), torch.zeros(1, 4, tokens, 8), layer)
    return cache


@pytest.mark.parametrize("layers", [1, 2])
def test_a_callers_4d_mask_with_a_cache_covers_the_cached_keys(layers):
    """A one-layer model too: the mask's keys are read from the cache's first (here only) layer."""
    config = config_for(is_decoder=True, num_hidden_layers=layers)
    keep = torch.tensor([[[[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [0, 1, 1, 1, 1]]]], dtype=torch.bool)
    mask = self_attention_mask(config, keep, embeddings(1, 3), filled_cache(config, 2), 2, None, None, False)
    assert allowed(mask) == keep[:, 0].tolist()


def test_a_callers_4d_mask_on_flash_is_refused_with_the_backend_named():
    config = config_for("flash_attention_2")
    with pytest.raises(ValueError, match="attn_implementation='flash_attention_2'"):
        plan_choice(config, torch.ones(1, 1, 2, 2), 1, 2)


@pytest.mark.parametrize("layers", [1, 2])
def test_unilm_source_overlay_reads_the_caches_first_layer(layers):
    """An empty dynamic cache holds this call's keys; a static cache its full length, in a one-layer model too."""
    unilm = config_for(is_decoder=True, decoder_attention="unilm", num_hidden_layers=layers)
    token_type_ids = torch.tensor([[0, 0, 1]])
    overlay = unilm_source_overlay(unilm, token_type_ids, 0, DynamicCache(config=unilm))
    assert overlay(torch.tensor(0), None, torch.arange(3)[:, None], torch.arange(3)[None]).tolist() == [
        [True, True, False],
        [True, True, False],
        [False, False, False],
    ]
    overlay = unilm_source_overlay(unilm, token_type_ids, 0, StaticCache(config=unilm, max_cache_len=200))
    assert not bool(overlay(torch.tensor(0), None, torch.tensor(1), torch.tensor(199)))


def test_a_unilm_encoder_config_still_runs_packed_sequences_alone():
    """decoder_attention is a decoder's setting: an encoder with token types keeps per-sequence SDPA."""
    config = config_for("sdpa", decoder_attention="unilm")
    packed = describe_packed_batch(1, 4, None, None, 0, cu_seq_lens_q=torch.tensor([0, 1, 4]))
    token_type_ids = torch.tensor([[0, 0, 1, 1]])
    assert plan_choice(config, None, 1, 4, packed, token_type_ids=token_type_ids) == (None, per_sequence_sdpa)


def test_within_each_sequence_padding_matches_no_real_sequence():
    packed = PackedBatch(torch.tensor([[0, 0, 1, 1, 1]]), None, None, None)
    same = within_each_sequence(packed, 5)
    for query in range(5):
        assert not bool(same(torch.tensor(0), None, torch.tensor(query), torch.tensor(127)))


def test_a_cached_decoder_step_masks_over_the_cached_keys_too():
    config = config_for(is_decoder=True)
    attention_mask = torch.tensor([[0, 1, 1, 1, 1]])  # one left pad among the 2 cached tokens, 3 new ones
    cache = filled_cache(config, 2)
    mask = self_attention_mask(config, attention_mask, embeddings(1, 3), cache, 2, None, None, False)
    assert allowed(mask) == pattern(lambda b, i, j: j <= i + 2 and attention_mask[b, j] == 1, 1, 3, 5)


def test_a_unilm_first_call_into_a_long_static_cache():
    """The source overlay is indexed over the static cache's full length (beyond the 128 a flex block pads to)."""
    config = config_for(is_decoder=True, decoder_attention="unilm")
    token_type_ids = torch.tensor([[0, 0, 1]])
    cache = StaticCache(config=config, max_cache_len=200)
    mask = self_attention_mask(config, None, embeddings(1, 3), cache, 0, token_type_ids, None, False)
    expected = unilm_attention_mask(token_type_ids)[0, 0].tolist()
    assert allowed(mask) == [[row + [False] * 197 for row in expected]]
