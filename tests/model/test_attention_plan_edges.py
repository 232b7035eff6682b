"""`attention_plan.py`'s edges (`visible_keys`, `key_positions`, the plan's choices) against values written by hand."""

from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_config
from torch import nn
from transformers.cache_utils import DynamicCache, StaticCache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from roformer_ext.attention_plan import (
    AttentionPlan,
    BatchLayout,
    eager_attention_forward,
    flex_attention_with_score_mod,
    key_positions,
    make_attention_plan,
    visible_keys,
)
from roformer_ext.encoding_knobs import SCORE_TERM_CAPABILITIES, Capabilities
from roformer_ext.packing import PackedBatch, describe_packed_batch, per_sequence_sdpa
from roformer_ext.position_encodings import AttentionTerms

MIN = torch.finfo(torch.float32).min
PACKED = describe_packed_batch(1, 4, None, None, 0, cu_seq_lens_q=torch.tensor([0, 1, 4]))
APART = [[(i == 0) == (j == 0) for j in range(4)] for i in range(4)]  # sequences (0) and (1, 2, 3) apart


def test_visible_keys_are_the_real_keys_of_a_2d_mask_or_of_a_4d_masks_last_query():
    for not_a_mask in (None, [[1, 1, 1]], torch.ones(1, 3, 3), torch.ones(1, 1, 1, 3, 3)):
        assert visible_keys(not_a_mask, 3) is None
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    assert visible_keys(mask, 3).tolist() == [[0, 1, 1], [1, 1, 0]] and visible_keys(mask, 3).dtype == torch.long
    assert visible_keys(mask.bool(), 5).tolist() == [[0, 1, 1, 1, 1], [1, 1, 0, 1, 1]]  # later slots count as real
    assert visible_keys(torch.tensor([[2, 0, 3]]), 3).tolist() == [[1, 0, 1]]  # any nonzero value
    assert visible_keys(mask, 2).tolist() == [[0, 1], [1, 1]]  # cut to the keys
    boolean = torch.tensor([[[[True, False, False], [False, True, True]]]])  # (1, 1, 2 queries, 3 keys)
    assert visible_keys(boolean, 3).tolist() == [[0, 1, 1]] and visible_keys(boolean, 4).tolist() == [[0, 1, 1, 1]]
    assert visible_keys(torch.tensor([[[[0, 2, 0], [2, 0, 3]]]]), 3).tolist() == [[1, 0, 1]]
    # additive: 0 or any penalty above min / 2 keeps a key, min / 2 and below hide it
    additive = torch.tensor([[[[0.0, 0.0, 0.0, 0.0, 0.0], [0.0, -1e4, -1.5e38, MIN / 2, MIN]]]])
    assert visible_keys(additive, 5).tolist() == [[1, 1, 1, 0, 0]]
    assert visible_keys(additive.double(), 5).tolist() == [[1, 1, 1, 1, 1]]  # float64: its own min / 2, far lower


def cache_holding(batch: int, tokens: int) -> DynamicCache:
    cache = DynamicCache()
    cache.update(torch.zeros(batch, 1, tokens, 2), torch.zeros(batch, 1, tokens, 2), 0)
    return cache


def test_cached_keys_count_back_from_the_last_query_over_the_real_tokens():
    positions = torch.tensor([[3, 4, 5]])
    assert key_positions(positions, None, 0) is positions  # no cache, or nothing cached: the queries' own
    assert key_positions(positions, DynamicCache(), 0, torch.ones(1, 3)) is positions
    cache = cache_holding(2, 4)  # 4 cached slots + 1 new token: 5 keys
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])  # row 0 left-padded by 2
    queries = torch.tensor([[2], [4]])  # numbered by real tokens, as generate does
    assert key_positions(queries, cache, 4, mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    # without a mask every slot is a real token: the keys keep their slot numbers relative to the last query
    unmasked = key_positions(queries, cache, 4)
    assert unmasked.tolist() == [[-2, -1, 0, 1, 2], [0, 1, 2, 3, 4]] and unmasked.dtype == torch.long
    # two new tokens: the last query (slot 5 of 6) anchors the count
    assert key_positions(torch.tensor([[7, 8]]), cache_holding(1, 4), 4).tolist() == [[3, 4, 5, 6, 7, 8]]
    # a 4D mask: its last query's row says which keys are real (additive here)
    row = torch.tensor([0.0, torch.finfo(torch.float32).min, 0.0, 0.0, 0.0])
    mask_4d = torch.stack([torch.zeros(5), row])[None, None]  # (1, 1, 2 queries, 5 keys): the last row is read
    assert key_positions(torch.tensor([[9]]), cache_holding(1, 4), 4, mask_4d).tolist() == [[6, 7, 7, 8, 9]]
    # float positions (a caller's own): the keys are counted in whole tokens, as integers
    keys = key_positions(torch.tensor([[4.0]]), cache_holding(1, 4), 4)
    assert keys.dtype == torch.long and keys.tolist() == [[0, 1, 2, 3, 4]]


def test_static_cache_keys_continue_after_the_last_query_and_keys_stay_on_the_queries_device():
    cache = StaticCache(config=tiny_config(), max_cache_len=6)  # compileable: numbered from the first call on
    queries = torch.tensor([[0, 1]])
    assert key_positions(queries, cache, 0, torch.tensor([[1, 1]])).tolist() == [[0, 1, 2, 3, 4, 5]]
    assert key_positions(queries, cache, torch.tensor(0)).tolist() == [[0, 1, 2, 3, 4, 5]]
    cache = DynamicCache()
    cache.update(torch.zeros(1, 1, 4, 2, device="meta"), torch.zeros(1, 1, 4, 2, device="meta"), 0)
    keys = key_positions(torch.tensor([[4]], device="meta"), cache, 4)  # no mask: every slot real, made there too
    assert keys.device.type == "meta" and keys.shape == (1, 5) and keys.dtype == torch.long


def reference_attention(query, key, value, mask, scaling):
    """Softmax attention by a plain loop over batch, heads and queries, in float64: (batch, seq, heads, dim)."""
    batch, heads, seq, dim = query.shape
    output = torch.zeros(batch, seq, heads, dim, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(seq):
                scores = (key[b, h].double() @ query[b, h, i].double()) * scaling + mask[b, 0, i].double()
                output[b, i, h] = torch.softmax(scores, dim=0) @ value[b, h].double()
    return output


def test_eager_attention_is_softmax_attention_and_a_fully_masked_float64_row_stays_finite():
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 3, 4, 5, dtype=torch.float64) for _ in range(3))
    low = torch.finfo(torch.float64).min
    mask = torch.zeros(2, 1, 4, 4, dtype=torch.float64)
    mask[0, 0, 0] = low  # a padded query: every key hidden
    mask[1, 0, 2, :2] = low
    module = nn.Module().train()  # training, but no dropout asked: nothing is dropped
    output, weights = eager_attention_forward(module, query, key, value, mask, scaling=0.5, dropout=0.0)
    assert output.shape == (2, 4, 3, 5) and output.is_contiguous() and weights.dtype == torch.float64
    assert torch.isfinite(output).all()
    torch.testing.assert_close(output, reference_attention(query, key, value, mask, 0.5), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4, dtype=torch.float64))


def test_eager_attention_in_bfloat16_and_its_dropout_only_while_training():
    torch.manual_seed(0)
    query, key, value = (torch.randn(1, 2, 3, 8).bfloat16() for _ in range(3))
    output, weights = eager_attention_forward(nn.Module().train(), query, key, value, None, scaling=0.25)
    assert output.dtype == weights.dtype == torch.bfloat16  # no dropout by default, even while training
    scores = (query @ key.transpose(2, 3)) * 0.25  # bfloat16 scores; the softmax rounds once to bfloat16
    assert torch.equal(weights, torch.softmax(scores.float(), dim=-1).bfloat16())
    reference = reference_attention(query, key, value, torch.zeros(1, 1, 3, 3), 0.25).float()
    torch.testing.assert_close(output.float(), reference, rtol=2e-2, atol=2e-2)
    evaluated, _ = eager_attention_forward(nn.Module().eval(), query, key, value, None, scaling=0.25, dropout=0.9)
    assert torch.equal(evaluated, output)
    torch.manual_seed(1)
    _, weights = eager_attention_forward(nn.Module().train(), query, key, value, None, scaling=0.25, dropout=0.9)
    assert (weights == 0).any()


def test_scores_for_adds_the_layers_term_to_the_mask_or_hands_it_to_flex_per_score():
    def attention(*args):
        return args

    layout = BatchLayout(None, None, 0, None)
    positions = torch.zeros(1, 1, 2, dtype=torch.long)
    module, query, key = nn.Module(), torch.zeros(1, 1, 2, 4), torch.ones(1, 1, 2, 4)
    mask = torch.tensor([[[[True, False], [True, True]]]])
    plain = AttentionPlan(layout, positions, mask, attention)
    assert plain.scores_for(module, query, key, mask) == (mask, attention)
    bias, calls = torch.tensor([[[[0.5, 1.0], [2.0, 3.0]]]]), []
    record = lambda module, query, key, per_score: calls.append((module, query, key, per_score)) or bias  # noqa: E731
    term = SimpleNamespace(layer_term=record)  # a relative term: records what it is asked for, returns the bias
    plan = AttentionPlan(layout, positions, mask, attention, relative_scores=term)
    joined, function = plan.scores_for(module, query, key, mask)
    low = torch.finfo(torch.float32).min
    assert function is attention and joined.tolist() == [[[[0.5, low], [2.0, 3.0]]]]
    assert calls == [(module, query, key, False)]
    per_score = AttentionPlan(layout, positions, mask, attention, relative_scores=term, per_score=True)
    kept, function = per_score.scores_for(module, query, key, mask)
    assert kept is mask and function.func is flex_attention_with_score_mod and function.keywords == {"score_mod": bias}
    assert function.args == () and calls[-1] == (module, query, key, True)


class RecordingEncoding:
    """A position encoding that records what the plan hands it and returns the given terms."""

    def __init__(self, terms: AttentionTerms, has_relative_scores: bool = False) -> None:
        self.terms, self.has_relative_scores, self.calls = terms, has_relative_scores, []
        self.capabilities = SCORE_TERM_CAPABILITIES if has_relative_scores else Capabilities()

    def attention_terms(self, embeddings, position_ids, keys, per_score):
        self.calls.append((embeddings, position_ids, keys(), per_score))
        return self.terms


def plan_for(config, encoding, seq, attention_mask=None, token_type_ids=None, layout=None, backend="eager", **kwargs):
    """The plan of `seq` float32 embeddings at positions 0 .. seq - 1 on `backend`."""
    config._attn_implementation = backend
    layout = layout or BatchLayout(None, None, 0, None)
    embeddings, positions = torch.zeros(1, seq, 32), torch.arange(seq)[None, None]
    return make_attention_plan(
        config, encoding, layout, embeddings, positions, attention_mask, token_type_ids, **kwargs
    )


def test_the_plan_carries_the_layout_positions_and_terms_and_numbers_cached_keys_by_the_callers_mask():
    cache = cache_holding(1, 2)  # 2 cached slots + 2 new tokens
    layout = BatchLayout(cache, cache, 2, None)
    embeddings = torch.zeros(1, 2, 32, dtype=torch.float64)
    positions = torch.tensor([[[1, 2]]])  # numbered by real tokens: slot 0 is padding
    mask = torch.tensor([[0, 1, 1, 1]])
    rotary = (torch.ones(1, 2, 8), torch.zeros(1, 2, 8))
    encoding = RecordingEncoding(AttentionTerms(position_embeddings=rotary))
    config = tiny_config(is_decoder=True, attn_implementation="eager")
    plan = make_attention_plan(config, encoding, layout, embeddings, positions, mask, None, keys_numbered_by=mask)
    assert plan.layout is layout and plan.position_ids is positions and plan.position_embeddings is rotary
    assert plan.attention is eager_attention_forward and not plan.linear and not plan.per_score
    assert plan.relative_scores is None and plan.cross_mask is None and plan.cross_attention is None
    assert plan.attention_kwargs == {}
    ((seen_embeddings, seen_positions, keys, per_score),) = encoding.calls
    assert seen_embeddings is embeddings and seen_positions is positions and per_score is False
    assert keys.tolist() == [[0, 0, 1, 2]]  # the padding slot shares the first real token's number
    encoding = RecordingEncoding(AttentionTerms(position_embeddings=rotary))
    make_attention_plan(config, encoding, layout, embeddings, positions, mask, None)  # default positions: by slot
    assert encoding.calls[0][2].tolist() == [[-1, 0, 1, 2]]
    low = torch.finfo(torch.float64).min
    allowed = (plan.mask[0, 0] == 0).tolist()  # causal over the 4 keys, the padding slot hidden
    assert plan.mask.dtype == torch.float64 and allowed == [[False, True, True, False], [False, True, True, True]]
    assert bool(((plan.mask == 0) | (plan.mask == low)).all())


def test_a_shared_bias_joins_the_mask_in_the_embeddings_dtype_and_packed_rows_give_their_lengths():
    bias = torch.arange(16, dtype=torch.float64).reshape(1, 1, 4, 4)
    encoding = RecordingEncoding(AttentionTerms(shared_bias=bias), has_relative_scores=True)
    plan = plan_for(tiny_config(), encoding, 4, layout=BatchLayout(None, None, 0, PACKED))
    expected = [[4.0 * i + j if APART[i][j] else MIN for j in range(4)] for i in range(4)]
    assert plan.mask.dtype == torch.float32 and plan.mask[0, 0].tolist() == expected
    cu = PACKED.cu_seq_lens
    assert plan.attention_kwargs == dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=3, max_length_k=3)
    assert torch.equal(encoding.calls[0][2], torch.arange(4)[None])  # no cache: the keys are the queries


def test_a_decoder_over_an_encoder_gets_the_cross_attention_mask_and_function():
    config = tiny_config(is_decoder=True, add_cross_attention=True)
    encoder = dict(encoder_hidden_states=torch.zeros(1, 3, 32), encoder_attention_mask=torch.tensor([[1, 1, 0]]))
    plan = plan_for(config, RecordingEncoding(AttentionTerms()), 2, **encoder)
    assert plan.cross_attention is eager_attention_forward
    assert (plan.cross_mask[0, 0] == 0).tolist() == [[True, True, False], [True, True, False]]
    plain = plan_for(config, RecordingEncoding(AttentionTerms()), 2)
    assert plain.cross_mask is None and plain.cross_attention is None
    sdpa = plan_for(config, RecordingEncoding(AttentionTerms()), 2, backend="sdpa", **encoder)
    assert sdpa.cross_attention is ALL_ATTENTION_FUNCTIONS["sdpa"]  # the backend's own function


@pytest.mark.parametrize("which", ["attention_mask", "encoder_attention_mask"])
def test_the_plan_refuses_a_4d_mask_of_either_attention_on_flash(which):
    config = tiny_config(is_decoder=True, add_cross_attention=True)
    masks = {"attention_mask": None, "encoder_attention_mask": None, which: torch.ones(1, 1, 2, 2, dtype=torch.bool)}
    with pytest.raises(ValueError, match="custom 4D attention_mask cannot be used with .*'flash_attention_2'"):
        plan_for(
            config,
            RecordingEncoding(AttentionTerms()),
            2,
            masks["attention_mask"],
            backend="flash_attention_2",
            encoder_hidden_states=torch.zeros(1, 2, 32),
            encoder_attention_mask=masks["encoder_attention_mask"],
        )


def test_on_flex_attention_the_plan_asks_for_terms_per_score():
    """Named for the mutation run's deselection: building flex attention's block mask compiles (about 10 s)."""
    encoding = RecordingEncoding(AttentionTerms())
    assert plan_for(tiny_config(), encoding, 4, backend="flex_attention").per_score and encoding.calls[-1][3] is True


@pytest.mark.parametrize(
    ("backend", "overrides", "given"),
    [
        ("sdpa", {}, dict(score_term=True)),  # a score term joins the mask, which keeps them apart
        ("eager", {}, {}),
        ("sdpa", {}, dict(packed=PackedBatch(PACKED.sequence_ids, None, None))),  # traced: no cu_seq_lens
        ("sdpa", {}, dict(attention_mask=torch.ones(1, 4))),  # a padding mask next to the packing
        ("sdpa", dict(is_decoder=True, decoder_attention="unilm"), dict(token_type_ids=torch.tensor([[0, 0, 1, 1]]))),
    ],
    ids=["score-term", "eager", "traced", "padding-mask", "unilm"],
)
def test_packed_rows_keep_the_mask_where_something_else_is_masked(backend, overrides, given):
    """Per-sequence SDPA only when nothing but the packing is masked; otherwise a mask keeps sequences apart."""
    encoding = RecordingEncoding(AttentionTerms(), has_relative_scores=given.pop("score_term", False))
    layout = BatchLayout(None, None, 0, given.pop("packed", PACKED))
    plan = plan_for(tiny_config(**overrides), encoding, 4, layout=layout, backend=backend, **given)
    assert plan.attention is not per_sequence_sdpa and plan.mask is not None
    assert plan.attention is eager_attention_forward or backend == "sdpa"
    if "token_type_ids" not in given:  # sdpa's mask is boolean (True: may attend), eager's additive
        assert (plan.mask[0, 0] if plan.mask.dtype == torch.bool else plan.mask[0, 0] == 0).tolist() == APART


def test_packed_rows_on_sdpa_run_each_sequence_alone_and_linear_attention_takes_the_raw_mask():
    encoding, layout = RecordingEncoding(AttentionTerms()), BatchLayout(None, None, 0, PACKED)
    plan = plan_for(tiny_config(), encoding, 4, layout=layout, backend="sdpa")
    assert plan.attention is per_sequence_sdpa and plan.mask is None
    # decoder_attention is a decoder's setting: an encoder with token types keeps per-sequence SDPA
    types = torch.tensor([[0, 0, 1, 1]])
    plan = plan_for(tiny_config(decoder_attention="unilm"), encoding, 4, None, types, layout, backend="sdpa")
    assert plan.attention is per_sequence_sdpa and plan.mask is None
    attention_mask = torch.tensor([[1, 1, 0]])
    plan = plan_for(tiny_config(attention_type="linear"), encoding, 3, attention_mask)
    assert plan.linear and plan.attention is None and plan.mask is attention_mask


class FlexCall:
    """Stands in for flex attention: records its arguments, returns all-distinct entries (a wrong transpose shows)."""

    def __init__(self):
        self.calls = []
        self.output = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).reshape(2, 3, 5, 4)

    def eager(self, query, key, value, *, score_mod, block_mask, scale):
        self.calls.append(("eager", query, key, value, score_mod, block_mask, scale))
        return self.output

    def compiled(self, query, key, value, *, score_mod, block_mask, scale, training):
        self.calls.append(("compiled", query, key, value, score_mod, block_mask, scale, training))
        return self.output


def test_the_score_mod_call_hands_its_inputs_to_flex_unchanged(monkeypatch):
    """CPU eager: the compiled flex call; elsewhere or compiling: transformers' wrapper. Dropout is refused."""
    import transformers.integrations.flex_attention as transformers_flex

    import roformer_ext.attention_plan as attention_plan

    flex = FlexCall()
    monkeypatch.setattr(attention_plan, "_cpu_flex_attention", lambda: flex.eager)
    monkeypatch.setattr(transformers_flex, "compile_friendly_flex_attention", flex.compiled)
    module, block_mask, expected = nn.Linear(1, 1).train(), object(), flex.output.transpose(1, 2)

    def score_mod(score, batch, head, q_idx, kv_idx):
        return score

    cpu = (torch.zeros(2, 3, 5, 4), torch.ones(2, 3, 7, 4), torch.full((2, 3, 7, 4), 2.0))
    output, weights = flex_attention_with_score_mod(module, *cpu, block_mask, scaling=0.25, score_mod=score_mod)
    assert weights is None and output.is_contiguous() and torch.equal(output, expected)
    assert flex.calls == [("eager", *cpu, score_mod, block_mask, 0.25)]
    meta = tuple(t.to("meta") for t in cpu)  # not a CPU tensor: the wrapper
    flex_attention_with_score_mod(module, *meta, block_mask, scaling=0.5, score_mod=score_mod)
    assert flex.calls[1] == ("compiled", *meta, score_mod, block_mask, 0.5, True)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # a CPU tensor while compiling: the wrapper
    flex_attention_with_score_mod(module.eval(), *cpu, block_mask, scaling=0.5, score_mod=score_mod)
    assert flex.calls[2] == ("compiled", *cpu, score_mod, block_mask, 0.5, False)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    with pytest.raises(ValueError, match="flex attention does not support attention dropout; call model.eval()"):
        flex_attention_with_score_mod(module, *cpu, None, dropout=0.5)
    assert len(flex.calls) == 3
    output, _ = flex_attention_with_score_mod(module, *cpu, None)
    assert flex.calls[3] == ("eager", *cpu, None, None, None) and torch.equal(output, expected)
