"""RoFormer-Sim's UniLM seq2seq mask: its definition, padding, and what it does inside the model."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config, tiny_config
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_generation import WITH_LOGITS, assert_same
from transformers import DynamicCache

import roformer_ext
from roformer_ext import RoFormerExtModel, unilm_attention_mask  # the public name, as users import it
from roformer_ext.compat import CACHE, output_cache


def brute_force(segments: list[list[int]], padding: list[list[int]]) -> torch.Tensor:
    """allowed[b, 0, i, j] = cumsum(seg)[j] <= cumsum(seg)[i] and key j is not padding, by loops."""
    batch, seq = len(segments), len(segments[0])
    out = torch.zeros(batch, 1, seq, seq, dtype=torch.bool)
    for b in range(batch):
        order = [sum(segments[b][: k + 1]) for k in range(seq)]
        for i in range(seq):
            for j in range(seq):
                out[b, 0, i, j] = order[j] <= order[i] and padding[b][j] == 1
    return out


def rows(batch: int, seq: int):
    return st.lists(st.lists(st.integers(0, 1), min_size=seq, max_size=seq), min_size=batch, max_size=batch)


@settings(max_examples=60, deadline=None)
@given(st.tuples(st.integers(1, 3), st.integers(1, 9)).flatmap(lambda shape: st.tuples(rows(*shape), rows(*shape))))
@example(([[0, 0, 1, 1, 0, 0]], [[1, 1, 1, 1, 0, 0]]))  # padding carries segment 0, as bert4keras pads
def test_matches_definition(case):
    segments, padding = case
    mask = unilm_attention_mask(torch.tensor(segments), torch.tensor(padding))
    assert mask.dtype == torch.bool and torch.equal(mask, brute_force(segments, padding))
    no_padding = unilm_attention_mask(torch.tensor(segments))
    assert torch.equal(no_padding, brute_force(segments, [[1] * len(row) for row in segments]))


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"\(batch, seq\)"):
        unilm_attention_mask(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="differs from token_type_ids"):
        unilm_attention_mask(torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 4, dtype=torch.long))


def test_in_the_model_targets_do_not_see_later_targets_and_sources_see_no_targets():
    torch.manual_seed(0)
    model = RoFormerExtModel(tiny_config()).eval()
    segments = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    ids = torch.randint(5, 99, segments.shape)
    changed = ids.clone()
    changed[0, 6:] = torch.randint(5, 99, (2,))  # change the last two target tokens
    with torch.no_grad():
        first, second = (
            model(x, token_type_ids=segments, attention_mask=unilm_attention_mask(segments)).last_hidden_state
            for x in (ids, changed)
        )
        plain = model(changed, token_type_ids=segments).last_hidden_state
    torch.testing.assert_close(first[0, :6], second[0, :6], rtol=0, atol=1e-6)
    assert (first[0, 6:] - second[0, 6:]).abs().max() > 1e-3
    assert (plain[0, :6] - second[0, :6]).abs().max() > 1e-3  # without the mask everything mixes


def left_padded_prompt(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    input_ids = torch.randint(5, 99, (2, 6), generator=torch.Generator().manual_seed(seed))
    return input_ids.masked_fill(attention_mask == 0, 0), attention_mask


def unilm_decoder() -> roformer_ext.RoFormerExtForCausalLM:
    torch.manual_seed(0)
    return roformer_ext.RoFormerExtForCausalLM(position_sensitive_config(decoder_attention="unilm")).eval()


def unilm_recomputation(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, steps: int):
    """The reference: every step recomputed under the explicit UniLM mask. (tokens, (steps, batch, vocab) logits)."""
    source, steps_logits = input_ids.shape[1], []
    for _ in range(steps):
        token_type_ids = target_after(input_ids, source)
        mask = torch.cat([attention_mask, attention_mask.new_ones(input_ids.shape[0], input_ids.shape[1] - source)], 1)
        four_d = unilm_attention_mask(token_type_ids, mask)
        with torch.no_grad():
            logits = model(input_ids, attention_mask=four_d, token_type_ids=token_type_ids, use_cache=False).logits
        steps_logits.append(logits[:, -1])
        input_ids = torch.cat([input_ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return input_ids, torch.stack(steps_logits)


@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_unilm_generate_with_cache_equals_recomputation(cache_implementation):
    model = unilm_decoder()
    input_ids, attention_mask = left_padded_prompt(seed=1)
    options = dict(attention_mask=attention_mask, max_new_tokens=5, cache_implementation=cache_implementation)
    generate = lambda m: greedy(m, input_ids, token_type_ids=torch.zeros_like(input_ids), **options)  # noqa: E731
    assert_same(generate(model), *unilm_recomputation(model, input_ids, attention_mask, 5))
    assert_position_sensitive(model, lambda m: torch.stack(generate(m).logits), 1e-5)


def test_unilm_generate_without_token_type_ids_treats_the_prompt_as_source():
    model = unilm_decoder()
    input_ids = torch.randint(5, 99, (1, 6), generator=torch.Generator().manual_seed(2))
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    reference = model.generate(input_ids, token_type_ids=torch.zeros_like(input_ids), **kwargs)
    assert torch.equal(model.generate(input_ids, **kwargs), reference)
    assert torch.equal(model.generate(input_ids, **{CACHE: DynamicCache(config=model.config)}, **kwargs), reference)


def test_unilm_prompt_is_bidirectional_unlike_causal():
    """The first source token sees the last one under UniLM, not under plain causal attention."""
    model = unilm_decoder()
    input_ids = torch.randint(5, 99, (1, 5), generator=torch.Generator().manual_seed(3))
    changed = input_ids.clone()
    changed[0, -1] = 7
    with torch.no_grad():
        first = model(input_ids, token_type_ids=torch.zeros_like(input_ids)).logits[0, 0]
        after = model(changed, token_type_ids=torch.zeros_like(changed)).logits[0, 0]
    assert not torch.allclose(first, after)
    causal = roformer_ext.RoFormerExtForCausalLM(tiny_config()).eval()
    causal.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(causal(input_ids).logits[0, 0], causal(changed).logits[0, 0])


def greedy(model, input_ids, **kwargs):
    return model.generate(input_ids, **{**WITH_LOGITS, **kwargs})


def target_after(input_ids: torch.Tensor, source_length: int) -> torch.Tensor:
    """Token types of a UniLM sequence: the first `source_length` tokens are the source, the rest the target."""
    return (torch.arange(input_ids.shape[1]) >= source_length).long().repeat(input_ids.shape[0], 1)


def keep(record: logging.LogRecord) -> bool:
    """transformers' assisted decoding logs its own call to the assistant as deprecated (a GPT-2 one's too)."""
    return "together with generation-related arguments" not in record.getMessage()


@pytest.mark.parametrize("drafts", ["prompt_lookup", "same_assistant", "other_assistant"])
def test_unilm_assisted_decoding_gives_the_greedy_tokens(drafts):
    """Draft tokens are the target: verified with the prompt in one first forward, they must not join the source."""
    model = unilm_decoder()
    source = torch.randint(5, 99, (1, 8), generator=torch.Generator().manual_seed(4))
    input_ids = torch.cat([source, source[:, :4]], dim=1)  # a repeat: prompt lookup drafts from the first step
    if drafts == "prompt_lookup":
        options = {"prompt_lookup_num_tokens": 3}
    elif drafts == "same_assistant":  # every draft accepted: several target tokens verified per forward
        options = {"assistant_model": copy.deepcopy(model)}
    else:
        torch.manual_seed(5)
        options = {"assistant_model": roformer_ext.RoFormerExtForCausalLM(model.config).eval()}
    reference = greedy(model, input_ids, max_new_tokens=10)
    logger = logging.getLogger("transformers.generation.utils")
    logger.addFilter(keep)
    try:
        assisted = greedy(model, input_ids, max_new_tokens=10, **options)
    finally:
        logger.removeFilter(keep)
    assert_same(assisted, reference)


@pytest.mark.parametrize("appended", [0, 2], ids=["continued", "tokens_appended"])
def test_unilm_second_turn_with_the_returned_cache_equals_recomputation(appended):
    """Turn 2 continues turn 1's cache: the prompt stays the source, turn 1's answer and any new tokens are target."""
    model = unilm_decoder()
    input_ids, attention_mask = left_padded_prompt(seed=6)
    first = greedy(model, input_ids, attention_mask=attention_mask, max_new_tokens=4)
    extra = torch.tensor([[11, 12], [13, 14]])[:, :appended]  # tokens the caller appends to the answer
    second_ids = torch.cat([first.sequences, extra], dim=1)
    second_mask = torch.cat([attention_mask, attention_mask.new_ones(2, 4 + appended)], dim=1)
    turn = dict(attention_mask=second_mask, max_new_tokens=3)
    recomputed = greedy(model, second_ids, token_type_ids=target_after(second_ids, input_ids.shape[1]), **turn)
    for token_type_ids in (None, target_after(second_ids, input_ids.shape[1])):
        cache = output_cache(greedy(model, input_ids, attention_mask=attention_mask, max_new_tokens=4))
        cached = greedy(model, second_ids, token_type_ids=token_type_ids, **turn, **{CACHE: cache})
        assert_same(cached, recomputed)


def test_unilm_source_tokens_after_a_cache_are_recomputed_by_generate_and_refused_by_forward():
    """A source token after cached tokens would need the cached source to see it."""
    model = unilm_decoder()
    input_ids = torch.randint(5, 99, (1, 6), generator=torch.Generator().manual_seed(8))
    first = greedy(model, input_ids, max_new_tokens=3)
    all_source = torch.zeros_like(first.sequences)  # turn 1's answer made the source of turn 2
    cached = greedy(model, first.sequences, token_type_ids=all_source, max_new_tokens=3, **{CACHE: output_cache(first)})
    assert_same(cached, greedy(model, first.sequences, token_type_ids=all_source, max_new_tokens=3))
    with torch.no_grad():
        cache = output_cache(model(input_ids, token_type_ids=torch.zeros_like(input_ids), use_cache=True))
        with pytest.raises(ValueError, match="after a cache"):
            model(input_ids[:, :2], token_type_ids=torch.zeros(1, 2, dtype=torch.long), **{CACHE: cache})
