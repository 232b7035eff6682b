"""The performance paths compute what the plain code computes: rotation fast paths, bf16 autocast, torch.compile."""

import pytest
import torch
from conftest import random_inputs, tiny_config

from roformer_ext import RoFormerExtForMaskedLM, RoFormerExtModel
from roformer_ext.rope import (
    RotaryEmbedding,
    apply_rotary,
    rotate_half,
    rotate_interleaved,
)


def plain_rotation(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (batch, seq, head_dim) -> broadcast over heads
    return x * cos + (rotate_half(x) if layout == "half" else rotate_interleaved(x)) * sin


def projection_view(batch: int, seq: int, heads: int, head_dim: int, dtype: torch.dtype) -> torch.Tensor:
    """(batch, heads, seq, head_dim) as a transposed view of a projection output, as the attention layers see it."""
    generator = torch.Generator().manual_seed(0)
    return (
        torch.randn(batch, seq, heads * head_dim, generator=generator, dtype=dtype)
        .view(batch, seq, heads, head_dim)
        .transpose(1, 2)
    )


def rotary_for(layout: str, heads: int, head_dim: int, batch: int, seq: int, like: torch.Tensor):
    config = tiny_config(
        hidden_size=heads * head_dim, num_attention_heads=heads, rope_parameters={"pair_layout": layout}
    )
    return RotaryEmbedding(config)(like, torch.arange(seq).expand(batch, seq) * 37)  # large angles too


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rotation_fast_path_equals_plain_formula(layout, dtype):
    """Bit-identical at a real head size (the vectorised complex multiply does not fuse multiply and add)."""
    x = projection_view(2, 9, 3, 64, dtype)
    cos, sin = rotary_for(layout, 3, 64, 2, 9, x)
    assert torch.equal(apply_rotary(x, cos, sin, layout), plain_rotation(x, cos, sin, layout))


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rotation_fast_path_small_heads_odd_offsets_and_gradients(layout):
    """Tiny heads fall to scalar code (one-ulp differences allowed); misaligned views still work; gradients agree."""
    base = torch.randn(2, 5, 3 * 8 + 1, dtype=torch.float64)
    x = base[..., 1:].reshape(2, 5, 3, 8).transpose(1, 2)  # odd storage offset after the slice? copied if needed
    x = x.clone().requires_grad_()
    reference = x.detach().clone().requires_grad_()
    cos, sin = rotary_for(layout, 3, 8, 2, 5, x.detach())
    out, expected = apply_rotary(x, cos, sin, layout), plain_rotation(reference, cos, sin, layout)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    torch.testing.assert_close(x.grad, reference.grad, atol=1e-12, rtol=1e-12)
    odd = torch.randn(1, 2, 3, 9)[..., 1:]  # storage offset 1: no complex view, a contiguous copy is rotated
    cos, sin = rotary_for(layout, 2, 8, 1, 3, odd)
    torch.testing.assert_close(apply_rotary(odd, cos, sin, layout), plain_rotation(odd, cos, sin, layout))


@pytest.mark.parametrize("attention_type", ["softmax", "linear"])
def test_bf16_autocast_on_cpu(attention_type):
    torch.manual_seed(0)
    model = RoFormerExtForMaskedLM(tiny_config(attention_type=attention_type)).eval()
    input_ids, attention_mask, token_type_ids = random_inputs()
    with torch.no_grad():
        reference = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
    assert torch.isfinite(low).all() and not torch.equal(low.float(), reference)  # bf16 matmuls did run
    torch.testing.assert_close(low.float(), reference, atol=0.1, rtol=0.05)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model.train()(input_ids, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_torch_compile_matches_eager():
    torch.manual_seed(0)
    model = RoFormerExtModel(tiny_config()).eval()
    input_ids, attention_mask, _ = random_inputs()
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        eager = model(input_ids, attention_mask=attention_mask).last_hidden_state
        fast = compiled(input_ids, attention_mask=attention_mask).last_hidden_state
    torch.testing.assert_close(fast, eager, atol=1e-5, rtol=1e-5)
