"""Linear attention (RoFormer §3.4.3) against a naive O(N²) evaluation, and its cache, on position-sensitive models."""

from types import SimpleNamespace

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config, tiny_config

from roformer_ext import RoFormerExtForCausalLM
from roformer_ext.compat import output_cache
from roformer_ext.linear_attention import (
    causal_linear_attention,
    feature_map,
    linear_attention_forward,
)
from roformer_ext.rope import RotaryEmbedding, apply_rotary

TOLERANCE = 1e-5


def naive_linear_attention(query, key, value, cos, sin, layout, rotary_value, causal, mask=None):
    """out_i = Σ_j (R_i φ(q_i))ᵀ(R_j φ(k_j)) v_j / Σ_j φ(q_i)ᵀφ(k_j) over the allowed j, in float64."""
    q, k, v = feature_map(query.double()), feature_map(key.double()), value.double()
    cos, sin = cos.double(), sin.double()
    if rotary_value:
        v = apply_rotary(v, cos, sin, layout)
    numerator_weights = apply_rotary(q, cos, sin, layout) @ apply_rotary(k, cos, sin, layout).transpose(-1, -2)
    denominator_weights = q @ k.transpose(-1, -2)
    seq = q.shape[2]
    allowed = torch.ones(seq, seq, dtype=torch.bool).tril(0 if causal else seq).expand(q.shape[0], 1, seq, seq)
    if mask is not None:
        allowed = allowed & mask.bool()[:, None, None, :]
    numerator = numerator_weights.masked_fill(~allowed, 0) @ v
    denominator = denominator_weights.masked_fill(~allowed, 0).sum(-1, keepdim=True)
    return (numerator / denominator).transpose(1, 2)


def make_case(layout: str, batch: int = 3, heads: int = 2, seq: int = 37, dim: int = 8, seed: int = 0):
    """Random q/k/v (batch, heads, seq, dim) and the rotary (cos, sin) for positions 0..seq-1."""
    generator = torch.Generator().manual_seed(seed)
    query, key, value = (torch.randn(batch, heads, seq, dim, generator=generator) for _ in range(3))
    config = tiny_config(hidden_size=heads * dim, num_attention_heads=heads, rope_parameters={"pair_layout": layout})
    positions = torch.arange(seq).expand(batch, seq)
    cos, sin = RotaryEmbedding(config)(query, positions)
    return query, key, value, (cos, sin)


def module_for(layout: str, rotary_value: bool, causal: bool) -> SimpleNamespace:
    config = SimpleNamespace(rope_parameters={"pair_layout": layout})  # where the model keeps the layout
    return SimpleNamespace(config=config, rotary_value=rotary_value, is_causal=causal, layer_idx=0)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("rotary_value", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_matches_naive_formula(layout, rotary_value, causal, padded):
    query, key, value, (cos, sin) = make_case(layout)
    mask = None
    if padded:
        mask = torch.ones(query.shape[0], query.shape[2], dtype=torch.long)
        mask[1, -5:] = 0
        mask[2, :4] = 0  # left padding too, as batched generation uses
    module = module_for(layout, rotary_value, causal)
    out = linear_attention_forward(module, query, key, value, (cos, sin), mask)
    expected = naive_linear_attention(query, key, value, cos, sin, layout, rotary_value, causal, mask)
    if mask is not None:  # rows padded on the left see no key before their first real one: compare real tokens
        out, expected = out[mask.bool()], expected[mask.bool()]
    torch.testing.assert_close(out.double(), expected, atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize(("chunk", "layout"), [(1, "half"), (5, "interleaved"), (8, "half"), (16, "interleaved"),
                                               (64, "half"), (100, "interleaved")])  # fmt: skip
def test_causal_chunk_size_does_not_change_the_result_and_the_state_continues_a_prefix(chunk, layout):
    """Any chunk size gives one result; two calls with the carried state equal one call (what the cache relies on)."""
    query, key, value, (cos, sin) = make_case(layout, seq=45)
    q, k = feature_map(query), feature_map(key)  # φ(q), R φ(q), φ(k), R φ(k), v
    inputs = [q, apply_rotary(q, cos, sin, layout), k, apply_rotary(k, cos, sin, layout), value]
    reference, (s_ref, z_ref) = causal_linear_attention(*inputs, chunk=45)
    out, (s, z) = causal_linear_attention(*inputs, chunk=chunk)
    torch.testing.assert_close(out, reference, atol=TOLERANCE, rtol=TOLERANCE)
    torch.testing.assert_close(s, s_ref, atol=1e-4, rtol=TOLERANCE)
    torch.testing.assert_close(z, z_ref, atol=1e-4, rtol=TOLERANCE)
    first, state = causal_linear_attention(*(t[:, :, :19] for t in inputs), chunk=chunk)
    second, _ = causal_linear_attention(*(t[:, :, 19:] for t in inputs), state, chunk=chunk)
    torch.testing.assert_close(torch.cat((first, second), dim=2), reference, atol=TOLERANCE, rtol=TOLERANCE)


def test_gradients_flow_through_causal_chunks():
    query, key, value, (cos, sin) = make_case("interleaved", seq=70)
    leaves = [t.clone().requires_grad_() for t in (query, key, value)]
    module = module_for("interleaved", rotary_value=False, causal=True)
    linear_attention_forward(module, *leaves, (cos, sin), None).square().sum().backward()
    expected = [t.clone().requires_grad_() for t in (query, key, value)]
    naive_linear_attention(*expected, cos, sin, "interleaved", False, True).square().sum().backward()
    for leaf, reference in zip(leaves, expected):
        torch.testing.assert_close(leaf.grad, reference.grad.float(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("layout", "search"),
    [("interleaved", {}), ("half", {}), ("interleaved", {"num_beams": 3, "num_return_sequences": 2}),
     ("half", {"num_beams": 2, "num_return_sequences": 2})],
)  # fmt: skip
def test_generation_with_state_equals_without_cache(layout, search):
    """Greedy and beam search (beams expand and reorder the running state): cached equals uncached; tokens counted."""
    torch.manual_seed(0)
    config = position_sensitive_config(
        attention_type="linear", rope_parameters={"pair_layout": layout}, rotary_value=True
    )
    model = RoFormerExtForCausalLM(config).eval()
    prompt = torch.randint(5, 99, (2, 6))

    def generated(m, use_cache: bool):  # a random model soon repeats one token: compare the logits too
        kwargs = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": 0, "output_logits": True, **search}
        return m.generate(prompt, use_cache=use_cache, return_dict_in_generate=True, **kwargs)

    with torch.no_grad():
        cached, uncached = generated(model, True), generated(model, False)
    torch.testing.assert_close(cached.sequences, uncached.sequences, rtol=0, atol=0)
    torch.testing.assert_close(torch.stack(cached.logits), torch.stack(uncached.logits), atol=TOLERANCE, rtol=TOLERANCE)
    state = output_cache(cached)
    assert state.get_seq_length() == cached.sequences.shape[1] - 1  # the last token is never fed back
    assert state.layers[0].values.shape[0] == 2 * search.get("num_beams", 1)  # 2 prompts x beams
    assert_position_sensitive(model, lambda m: torch.stack(generated(m, True).logits), TOLERANCE)


def test_four_dimensional_mask_is_rejected():
    query, key, value, rotary = make_case("half", seq=5)
    with pytest.raises(ValueError, match="2D"):
        linear_attention_forward(module_for("half", False, False), query, key, value, rotary, torch.ones(3, 1, 5, 5))
