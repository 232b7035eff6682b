"""The performance paths compute what the plain code does: the rotation for scores, bf16 autocast."""

import pytest
import torch
from conftest import random_inputs, tiny_config

from roformer_ext import RoFormerExtForMaskedLM
from roformer_ext.rope import RotaryEmbedding, apply_rotary, rotate_for_scores, rotate_half, rotate_interleaved


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rotation_for_scores_is_the_formula_with_each_pair_side_by_side(layout, dtype):
    """x·cos + rotate(x)·sin bit for bit (scores: half pairs moved side by side), on a transposed view, large angles."""
    x = torch.randn(2, 9, 3 * 64, generator=torch.Generator().manual_seed(0), dtype=dtype).view(2, 9, 3, 64)
    x = x.transpose(1, 2)
    config = tiny_config(hidden_size=3 * 64, num_attention_heads=3, rope_parameters={"pair_layout": layout})
    cos, sin = RotaryEmbedding(config)(x, torch.arange(9).expand(2, 9) * 37)
    formula = x * cos[:, None] + (rotate_half if layout == "half" else rotate_interleaved)(x) * sin[:, None]
    order = torch.arange(64).view(2, 32).T.flatten() if layout == "half" else torch.arange(64)  # 0, 32, 1, 33, ...
    assert torch.equal(apply_rotary(x, cos, sin, layout), formula)
    assert torch.equal(rotate_for_scores(x, cos, sin, layout), formula[..., order])


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t[..., 3:11],  # odd storage offset
        lambda t: t.flatten()[: 2 * 3 * 4 * 9].view(2, 3, 4, 9)[..., :8],  # an odd stride before the last dim
        lambda t: t[..., ::2][..., :8],  # last-dim stride 2
        lambda t: t[..., :8].transpose(0, 1).contiguous().transpose(0, 1),  # strides reordered, pairs adjacent
        lambda t: t[..., :8].transpose(-1, -2).contiguous().transpose(-1, -2),  # last-dim stride != 1
    ],
    ids=["offset", "odd-stride", "stride-2", "reordered", "column-major"],
)
def test_interleaved_complex_path_takes_any_memory_layout_with_the_formulas_gradients(make):
    """Adjacent pairs are viewed as complex numbers in place: views that cannot be are copied first."""
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(2, 3, 4, 20, generator=generator, dtype=torch.float64, requires_grad=True)
    angles = torch.randn(2, 4, 4, generator=generator, dtype=torch.float64).repeat_interleave(2, -1)
    cos, sin = angles.cos(), angles.sin()
    out = apply_rotary(make(base), cos, sin, "interleaved")
    (grad,) = torch.autograd.grad(out.square().sum(), base)
    x = make(base)
    expected = x * cos[:, None] + rotate_interleaved(x) * sin[:, None]
    (expected_grad,) = torch.autograd.grad(expected.square().sum(), base)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("attention_type, is_decoder", [("softmax", False), ("linear", False), ("linear", True)])
def test_bf16_autocast_on_cpu(attention_type, is_decoder):
    """Linear attention keeps float32 sums (bidirectional and causal chunks)."""
    torch.manual_seed(0)
    model = RoFormerExtForMaskedLM(tiny_config(attention_type=attention_type, is_decoder=is_decoder)).eval()
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
