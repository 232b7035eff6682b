"""rope.py's edges that the model-level tests cannot see (found by the mutation check, docs/testing.md): the
allocation registry's defaults, the pair-layout choice and its error, the reordered q/k rows (their error, gradients,
cache key) and when a half-layout attention may project with them."""

from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_config
from torch import nn
from vision_sizes import SIZES

from roformer_ext import RoFormerExtVisionTextConfig, RoFormerExtVisionTextModel, rope
from roformer_ext.fused_rotary import fused_rotary_installed
from roformer_ext.rope import (
    AXIS_ALLOCATIONS,
    FusedHalfPairRotation,
    HalfPairRotation,
    HeadwiseRotation,
    InterleavedPairRotation,
    PairAdjacentRows,
    projects_pair_adjacent,
    query_key_rotation,
    register_axis_allocation,
    reorder_rows,
)


def test_registering_an_allocation_keeps_its_flags_and_refuses_a_second_time():
    def every_pair_on_axis_0(num_pairs, axes, mrope_section):
        return [0] * num_pairs

    try:
        assert register_axis_allocation("test_axis0")(every_pair_on_axis_0) is every_pair_on_axis_0
        assert every_pair_on_axis_0.headwise is False and every_pair_on_axis_0.axis_ladders is False
        assert AXIS_ALLOCATIONS.get("test_axis0") is every_pair_on_axis_0
        with pytest.raises(ValueError):
            register_axis_allocation("test_axis0")(every_pair_on_axis_0)
        register_axis_allocation("test_axis0", overwrite=True, headwise=True, axis_ladders=True)(every_pair_on_axis_0)
        assert every_pair_on_axis_0.headwise is True and every_pair_on_axis_0.axis_ladders is True
    finally:
        AXIS_ALLOCATIONS.unregister("test_axis0")


def test_pair_layout_defaults_to_interleaved():
    """An object with rope_parameters but no pair_layout (not a validated config) gets RoFormer's layout."""
    assert isinstance(query_key_rotation(SimpleNamespace(rope_parameters={})), InterleavedPairRotation)


def mhrope_config() -> RoFormerExtVisionTextConfig:
    """MHRoPE: each of 4 heads reads one axis, the 4th none (its pairs unrotated); head_dim 12."""
    return RoFormerExtVisionTextConfig(
        **{**SIZES, "num_attention_heads": 4},
        rope_parameters={"position_scheme": "mhrope", "mrope_section": [1, 1, 1]},
    )


def test_each_layout_gets_its_rotation():
    headwise = query_key_rotation(mhrope_config())
    assert type(headwise) is HeadwiseRotation and headwise.pair_layout == "interleaved"
    half = query_key_rotation(tiny_config(rope_parameters={"pair_layout": "half"}))
    assert type(half) is (FusedHalfPairRotation if fused_rotary_installed() else HalfPairRotation)


@pytest.mark.parametrize("headwise", [False, True], ids=["text", "headwise"])
def test_unknown_pair_layout_is_named_with_the_choices(headwise):
    """The config validates pair_layout when it is set; a dict changed in place afterwards reaches the layer."""
    rope_parameters = dict(mhrope_config().rope_parameters) if headwise else {}
    config = SimpleNamespace(rope_parameters={**rope_parameters, "pair_layout": "bogus"})
    with pytest.raises(ValueError, match=r"^Unknown pair_layout 'bogus'; choose one of interleaved, half\.$"):
        query_key_rotation(config)


def test_reorder_rows_refuses_partial_heads_and_passes_no_bias_through():
    weight = torch.arange(8 * 3, dtype=torch.float32).view(8, 3)
    rows, bias = reorder_rows(weight, None, head_dim=4)
    assert bias is None and rows[:, 0].tolist() == [0.0, 6.0, 3.0, 9.0, 12.0, 18.0, 15.0, 21.0]
    message = (
        r"got a Tensor of 6 rows \(head_dim 4\), a shard of a distributed weight\. Run the projection's own forward "
        r"for it \(projects_pair_adjacent does\), or shard whole heads\.$"
    )
    with pytest.raises(ValueError, match=message):
        reorder_rows(weight[:6], None, head_dim=4)


def linear(bias: bool = True, weight_grad: bool = True, bias_grad: bool = True) -> nn.Linear:
    torch.manual_seed(0)
    projection = nn.Linear(3, 8, bias=bias)
    projection.weight.requires_grad_(weight_grad)
    if bias:
        projection.bias.requires_grad_(bias_grad)
    return projection


def test_rows_follow_autograd_when_only_the_weight_or_only_the_bias_trains():
    weight_rows, bias_rows = PairAdjacentRows()(linear(bias_grad=False), 4)
    assert weight_rows.requires_grad and not bias_rows.requires_grad
    weight_rows, bias_rows = PairAdjacentRows()(linear(weight_grad=False), 4)
    assert bias_rows.requires_grad and not weight_rows.requires_grad


def test_frozen_rows_are_kept_ordinary_tensors_with_their_bias():
    projection = linear(weight_grad=False, bias_grad=False)
    rows = PairAdjacentRows()
    weight_rows, bias_rows = rows(projection, 4)
    assert rows(projection, 4)[0] is weight_rows  # kept
    assert not torch.is_inference(weight_rows)  # usable in a graph later
    expected_weight, expected_bias = reorder_rows(projection.weight, projection.bias, 4)
    assert torch.equal(weight_rows, expected_weight) and torch.equal(bias_rows, expected_bias)
    no_bias = linear(bias=False, weight_grad=False)
    assert PairAdjacentRows()(no_bias, 4)[1] is None


def test_same_source_compares_a_missing_bias_as_missing():
    weight = torch.zeros(4)
    ident = rope._identity(weight)
    assert rope._same_source((ident, None), (ident, None))
    assert not rope._same_source((ident, None), (ident, ident))
    assert not rope._same_source((ident, ident), (ident, None))


def projections(out_features: int = 16) -> tuple[nn.Linear, nn.Linear]:
    return nn.Linear(32, out_features), nn.Linear(32, out_features)


def test_pair_adjacent_projection_is_for_plain_eager_float_layers_with_many_rows():
    q, k = projections()
    states = torch.zeros(1, 20, 32)  # 20 rows > 16 outputs (not > 32 inputs)
    assert projects_pair_adjacent(states, q, k)
    assert not projects_pair_adjacent(states[:, :10], q, k)
    assert not projects_pair_adjacent(states.bfloat16(), q, k)
    q.forward = nn.Linear.forward.__get__(q)  # an instance forward (an adapter's patch) must run
    assert not projects_pair_adjacent(states, q, k)


@pytest.mark.parametrize("register", [nn.modules.module.register_module_forward_hook,
                                      nn.modules.module.register_module_forward_pre_hook])  # fmt: skip
def test_global_hooks_see_their_projections(register):
    q, k = projections()
    handle = register(lambda *args: None)
    try:
        assert not projects_pair_adjacent(torch.zeros(1, 20, 32), q, k)
    finally:
        handle.remove()
    assert projects_pair_adjacent(torch.zeros(1, 20, 32), q, k)


def test_model_config_reaches_the_interleaved_rotation():
    assert isinstance(query_key_rotation(tiny_config()), InterleavedPairRotation)


def test_unrotated_pairs_turn_at_zero_frequency():
    """MHRoPE's 4th head reads no axis (axis -1): its pairs keep frequency 0, so cos 1, sin 0: no inf / nan."""
    rotary = RoFormerExtVisionTextModel(mhrope_config()).rotary_emb
    frequencies = rotary.pair_frequencies()
    unrotated = rotary.axis_of_pair < 0
    assert unrotated.any() and torch.isfinite(frequencies).all()
    assert (frequencies[unrotated.expand_as(frequencies)] == 0).all()


def test_angles_are_fp32_unless_positions_are_fp64():
    """fp64 only when asked: fp32 positions give fp32 angles (the cos / sin tables of every layer), fp64 give fp64."""
    rotary = rope.ROTARY_KINDS.get("default")(tiny_config())
    positions = torch.tensor([[[5.0, 3001.0]]])
    assert rotary.angles(positions).dtype == torch.float32
    assert rotary.angles(positions.double()).dtype == torch.float64


def reference_rotation(x: torch.Tensor, cos_pairs: torch.Tensor, sin_pairs: torch.Tensor) -> torch.Tensor:
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos_pairs - odd * sin_pairs, even * sin_pairs + odd * cos_pairs], dim=-1).flatten(-2)


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t[..., 3:11],  # odd storage offset
        lambda t: t.flatten()[:72].view(2, 4, 9)[..., :8],  # an odd stride (9) before the last dim, not the first
        lambda t: t[..., ::2][..., :8],  # last-dim stride 2
        lambda t: t[..., :8].transpose(0, 1).contiguous().transpose(0, 1),  # strides reordered, pairs adjacent
        lambda t: t[..., :8].transpose(-1, -2).contiguous().transpose(-1, -2),  # last-dim stride != 1
    ],
    ids=["offset", "odd-stride", "stride-2", "reordered", "column-major"],
)
def test_adjacent_pair_rotation_takes_any_layout(make):
    generator = torch.Generator().manual_seed(0)
    x = make(torch.randn(2, 4, 20, generator=generator))
    cos_pairs, sin_pairs = torch.randn(2, 4, 4, generator=generator).cos(), torch.randn(2, 4, 4).sin()
    expected = reference_rotation(x.contiguous(), cos_pairs, sin_pairs)
    torch.testing.assert_close(rope._rotate_adjacent_pairs(x, cos_pairs, sin_pairs), expected)
