"""RoPE invariants (hypothesis), the rotary registry, and layout conversion."""

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config, random_inputs, tiny_config
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file
from torch import nn

from roformer_ext import (
    RoFormerExtConfig,
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtModel,
    RotaryEmbedding,
)
from roformer_ext.compat import output_cache
from roformer_ext.conversion.pair_layout import convert_pair_layout
from roformer_ext.rope import apply_rotary, register_rotary_embedding, registered_rotary_kinds, rotate_for_scores

LAYOUTS = ["interleaved", "half"]


def rotary_for(layout: str, head_dim: int = 16) -> RotaryEmbedding:
    return RotaryEmbedding(
        RoFormerExtConfig(hidden_size=head_dim * 2, num_attention_heads=2, rope_parameters={"pair_layout": layout})
    )


def rotate_at(rotary: RotaryEmbedding, x: torch.Tensor, position: float) -> torch.Tensor:
    """Rotate one vector (head_dim,) as if it sat at `position`."""
    positions = torch.tensor([[position]], dtype=torch.float64)
    cos, sin = rotary(x.view(1, 1, 1, -1), positions)
    return apply_rotary(x.view(1, 1, 1, -1), cos, sin, rotary.pair_layout).view(-1)


@settings(max_examples=200, deadline=None)
@given(
    layout=st.sampled_from(LAYOUTS),
    m=st.floats(-2000, 2000, allow_nan=False),
    n=st.floats(-2000, 2000, allow_nan=False),
    shift=st.floats(-1000, 1000, allow_nan=False),
    seed=st.integers(0, 2**16),
)
def test_score_depends_only_on_relative_position(layout, m, n, shift, seed):
    """<R_m q, R_n k> = <R_{m+s} q, R_{n+s} k> for integer and fractional positions, both layouts (fp64, 1e-9)."""
    rotary = rotary_for(layout).double()
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 16, generator=generator, dtype=torch.float64)
    score = rotate_at(rotary, q, m) @ rotate_at(rotary, k, n)
    shifted = rotate_at(rotary, q, m + shift) @ rotate_at(rotary, k, n + shift)
    assert abs(float(score - shifted)) < 1e-9 * (1 + abs(float(score)))


@settings(max_examples=100, deadline=None)
@given(layout=st.sampled_from(LAYOUTS), position=st.floats(-1000, 1000, allow_nan=False), seed=st.integers(0, 999))
def test_rotation_preserves_norm(layout, position, seed):
    rotary = rotary_for(layout).double()
    x = torch.randn(16, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    assert torch.allclose(rotate_at(rotary, x, position).norm(), x.norm())


def test_interleaved_layout_rotates_adjacent_pairs():
    """Pair i = dims (2i, 2i+1) rotated by p·θ_i, θ_i = 10000^(-2i/d), as the original RoFormer."""
    rotary = rotary_for("interleaved", head_dim=8).double()
    x = torch.arange(1.0, 9.0, dtype=torch.float64)
    angle = 3.0 * 10000 ** (-torch.arange(4, dtype=torch.float64) / 4)
    a, b = x[0::2], x[1::2]
    expected = torch.stack((a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()), dim=-1).flatten()
    torch.testing.assert_close(rotate_at(rotary, x, 3.0), expected)


@pytest.mark.parametrize("rotary_value", [False, True])
def test_interleaved_to_half_conversion_keeps_outputs(rotary_value):
    torch.manual_seed(0)
    model = RoFormerExtForMaskedLM(position_sensitive_config(rotary_value=rotary_value)).eval()
    input_ids, attention_mask, _ = random_inputs()
    assert_position_sensitive(model, lambda m: m(input_ids, attention_mask=attention_mask).logits, 1e-5)
    # the layout is kept in the config only; each attention chose its rotation when built, the conversion chooses again
    assert not any(hasattr(module, "pair_layout") for module in model.roformer.layers.modules())
    with torch.no_grad():
        before = model(input_ids, attention_mask=attention_mask).logits
        convert_pair_layout(model, "half")
        rotary = model.roformer.position_encoding.rotary_emb
        assert rotary.pair_layout == "half" == model.config.rope_parameters["pair_layout"]
        assert {layer.attention.rotation.pair_layout for layer in model.roformer.layers} == {"half"}
        half = model(input_ids, attention_mask=attention_mask).logits
        convert_pair_layout(model, "interleaved")
        back = model(input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(half, before, atol=1e-5, rtol=0)
    torch.testing.assert_close(back, before, atol=1e-6, rtol=0)


def test_transformers_scaling_types_are_registered_and_used():
    assert {"default", "linear", "dynamic", "yarn", "llama3", "longrope"} <= set(registered_rotary_kinds())
    plain = RoFormerExtModel(tiny_config()).position_encoding.rotary_emb
    config = tiny_config(rope_parameters={"rope_type": "linear", "factor": 4.0})
    linear = RoFormerExtModel(config).position_encoding.rotary_emb
    torch.testing.assert_close(linear.inv_freq, plain.inv_freq / 4)


def test_registering_a_learned_frequency_kind(tmp_path):
    @register_rotary_embedding("test_learned")
    class LearnedFrequencies(RotaryEmbedding):
        def __init__(self, config):
            super().__init__(config)
            self.log_inv_freq = nn.Parameter(self.inv_freq.log())

        def pair_frequencies(self):
            return self.log_inv_freq.exp().repeat(self.split_axes)

    config = tiny_config(rope_parameters={"rope_type": "test_learned"})
    model = RoFormerExtForMaskedLM(config)
    assert isinstance(model.roformer.position_encoding.rotary_emb, LearnedFrequencies)
    input_ids, attention_mask, _ = random_inputs()
    model(input_ids, attention_mask=attention_mask, labels=input_ids).loss.backward()
    assert model.roformer.position_encoding.rotary_emb.log_inv_freq.grad.abs().sum() > 0
    model.save_pretrained(tmp_path)
    reloaded = RoFormerExtForMaskedLM.from_pretrained(tmp_path)
    learned = reloaded.roformer.position_encoding.rotary_emb.log_inv_freq
    torch.testing.assert_close(learned, model.roformer.position_encoding.rotary_emb.log_inv_freq)

    # a folder saved with the old keys (roformer.rotary_emb.*) loads with transformers' key_mapping
    old_folder = tmp_path / "old_keys"
    model.save_pretrained(old_folder)
    weights = load_file(old_folder / "model.safetensors")
    renamed = {k.replace(".position_encoding.rotary_emb.", ".rotary_emb."): v for k, v in weights.items()}
    assert "roformer.rotary_emb.log_inv_freq" in renamed
    save_file(renamed, old_folder / "model.safetensors", metadata={"format": "pt"})
    mapping = {r"^roformer\.rotary_emb\.": "roformer.position_encoding.rotary_emb."}
    remapped = RoFormerExtForMaskedLM.from_pretrained(old_folder, key_mapping=mapping)
    torch.testing.assert_close(remapped.roformer.position_encoding.rotary_emb.log_inv_freq, learned, rtol=0, atol=0)
    with pytest.raises(TypeError, match="RotaryEmbedding subclass"):
        register_rotary_embedding("nope")(object)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(hidden_size=36, num_attention_heads=4), "head dim must be even"),
        (dict(hidden_size=30, num_attention_heads=4), "multiple of num_attention_heads"),
        (dict(rope_parameters={"rope_type": "spiral"}), "Registered choices: .*'default'"),
        (dict(rope_parameters={"position_scheme": "zigzag"}), "Registered choices: .*'rope_tie'"),
        (dict(norm_type="batch_norm"), "norm_type"),
        (dict(rope_parameters={"axes": 3, "axis_allocation": "sections", "mrope_section": [1, 1]}), "mrope_section"),
        (dict(rope_parameters={"axes": 3, "axis_allocation": "split"}), "not divisible by 3"),
    ],
)
def test_bad_config_raises_value_error_naming_the_fix(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


def test_wrong_position_ids_shape_raises():
    model = RoFormerExtModel(tiny_config())
    input_ids, _, _ = random_inputs(batch=2, seq=5)
    with pytest.raises(ValueError, match=r"position_ids has shape \(2, 4\)"):
        model(input_ids, position_ids=torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize("allocation, section", [("interleaved", None), ("sections", [1, 1, 2])])
def test_multi_axis_rotary_with_equal_axes_is_exactly_1d(allocation, section):
    """RoPE-Tie / M-RoPE degeneracy: text (n, n, n) gives exactly the 1D rotation."""
    rope = {"axes": 3, "axis_allocation": allocation, **({"mrope_section": section} if section else {})}
    one_d = RoFormerExtModel(tiny_config()).eval()
    multi = RoFormerExtModel(tiny_config(rope_parameters=rope)).eval()
    multi.load_state_dict(one_d.state_dict())
    input_ids, attention_mask, _ = random_inputs()
    positions = torch.arange(input_ids.shape[1]).expand(3, input_ids.shape[0], -1)
    with torch.no_grad():
        expected = one_d(input_ids, attention_mask=attention_mask).last_hidden_state
        actual = multi(input_ids, attention_mask=attention_mask, position_ids=positions).last_hidden_state
    assert torch.equal(actual, expected)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rotation_for_scores_under_torch_compile_equals_eager(layout):
    q = torch.randn(2, 5, 3 * 16).view(2, 5, 3, 16).transpose(1, 2)  # a transposed view, as attention has it
    cos, sin = rotary_for(layout)(q, torch.arange(5).expand(2, 5) * 7.5)
    compiled = torch.compile(rotate_for_scores, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(q, cos, sin, layout), rotate_for_scores(q, cos, sin, layout), rtol=0, atol=1e-6)


def test_half_layout_projection_runs_the_modules_own_forward():
    """An adapter on the queries (LoRA-like; here a hook doubling them) gives the logits of doubled query weights."""
    input_ids, attention_mask, _ = random_inputs(batch=4, seq=12)
    adapted, doubled = (RoFormerExtForMaskedLM(tiny_config(rope_parameters={"pair_layout": "half"})) for _ in "ab")
    doubled.load_state_dict(adapted.state_dict())
    with torch.no_grad():
        for adapted_layer, doubled_layer in zip(adapted.roformer.layers, doubled.roformer.layers):
            adapted_layer.attention.query.register_forward_hook(lambda module, args, out: out * 2)
            doubled_layer.attention.query.weight.mul_(2)
            doubled_layer.attention.query.bias.mul_(2)
        got, expected = (m.eval()(input_ids, attention_mask=attention_mask).logits for m in (adapted, doubled))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_half_layout_cached_decoding_equals_the_full_forward():
    """A long prefill and single-token steps put the rotated keys in one order in the cache."""
    torch.manual_seed(0)
    config = position_sensitive_config(rope_parameters={"pair_layout": "half"}, is_decoder=True)
    model = RoFormerExtForCausalLM(config).eval()
    input_ids = torch.randint(5, 99, (2, 24))

    def decoded(m) -> torch.Tensor:
        out = m(input_ids[:, :20], use_cache=True)
        logits, cache = [out.logits], output_cache(out)
        for position in range(20, 24):
            out = m(input_ids[:, position : position + 1], cache=cache, use_cache=True)
            logits.append(out.logits)
            cache = output_cache(out)
        return torch.cat(logits, dim=1)

    with torch.no_grad():
        torch.testing.assert_close(decoded(model), model(input_ids).logits, rtol=0, atol=1e-5)
    assert_position_sensitive(model, decoded, 1e-5)
