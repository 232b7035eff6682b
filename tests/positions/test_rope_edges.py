"""rope.py's and axis_allocations.py's edges that the model-level tests cannot see."""

import math
import re
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_config
from vision_sizes import SIZES

from roformer_ext import RoFormerExtModel, RoFormerExtVisionTextConfig, RoFormerExtVisionTextModel
from roformer_ext.axis_allocations import axis_of_pair, register_axis_allocation
from roformer_ext.registries import AXIS_ALLOCATIONS
from roformer_ext.rope import (
    GrapeRotaryEmbedding,
    HeadwiseRotation,
    QueryKeyRotation,
    RotaryEmbedding,
    query_key_rotation,
)
from roformer_ext.scheme_knobs import allocation_knobs_class


def test_registering_an_allocation_keeps_its_flags_and_refuses_a_second_time():

    def by_head(num_pairs, axes, mrope_section, num_heads=None):
        return [0] * num_pairs if num_heads is None else [[head % axes] * num_pairs for head in range(num_heads)]

    try:
        assert register_axis_allocation("test_axis0")(by_head) is by_head
        knobs = allocation_knobs_class("test_axis0")
        assert (knobs.headwise, knobs.axis_ladders) == (False, False) and AXIS_ALLOCATIONS.get("test_axis0") is by_head
        assert axis_of_pair(3, 2, "test_axis0", None, 4).tolist() == [0, 0, 0]
        with pytest.raises(ValueError):
            register_axis_allocation("test_axis0")(by_head)
        register_axis_allocation("test_axis0", overwrite=True, headwise=True, axis_ladders=True)(by_head)
        knobs = allocation_knobs_class("test_axis0")
        assert (knobs.headwise, knobs.axis_ladders) == (True, True)
        assert axis_of_pair(3, 2, "test_axis0", None, 4).tolist() == [[0] * 3, [1] * 3, [0] * 3, [1] * 3]
    finally:
        AXIS_ALLOCATIONS.unregister("test_axis0")


def mhrope_config() -> RoFormerExtVisionTextConfig:
    """MHRoPE: each of 4 heads reads one axis, the 4th none (its pairs unrotated); head_dim 12."""
    return RoFormerExtVisionTextConfig(
        **{**SIZES, "num_attention_heads": 4},
        rope_parameters={"position_scheme": "mhrope", "mrope_section": [1, 1, 1]},
    )


def test_each_layout_gets_its_rotation():
    headwise = query_key_rotation(mhrope_config())
    assert type(headwise) is HeadwiseRotation and headwise.pair_layout == "interleaved"
    for layout in ("interleaved", "half"):
        rotation = query_key_rotation(tiny_config(rope_parameters={"pair_layout": layout}))
        assert type(rotation) is QueryKeyRotation and rotation.pair_layout == layout


@pytest.mark.parametrize("headwise", [False, True], ids=["text", "headwise"])
def test_unknown_pair_layout_is_named_with_the_choices(headwise):
    config = mhrope_config() if headwise else tiny_config()
    config.rope_parameters["pair_layout"] = "bogus"
    with pytest.raises(ValueError, match=r"'bogus'. Registered choices: 'interleaved', 'half'"):
        (RoFormerExtVisionTextModel if headwise else RoFormerExtModel)(config)


def test_unrotated_pairs_turn_at_zero_frequency():
    """MHRoPE's 4th head reads no axis (-1): its pairs keep frequency 0, no inf / nan."""
    rotary = RoFormerExtVisionTextModel(mhrope_config()).rotary_emb
    frequencies = rotary.pair_frequencies()
    unrotated = rotary.axis_of_pair < 0
    assert unrotated.any() and torch.isfinite(frequencies).all()
    assert (frequencies[unrotated.expand_as(frequencies)] == 0).all()


def bare_config(**rope) -> SimpleNamespace:
    """What `RotaryEmbedding` reads from a config, and no more: no `axes` unless given (head_dim 8, θ = 100)."""
    rope_parameters = {"rope_type": "default", "rope_theta": 100.0, "axis_allocation": "interleaved", **rope}
    return SimpleNamespace(
        rope_parameters=rope_parameters, hidden_size=16, num_attention_heads=2, head_dim=8, max_position_embeddings=32
    )


def test_an_allocation_registered_without_the_decorator_is_plain():

    def alternate(num_pairs, axes, mrope_section):
        return [pair % axes for pair in range(num_pairs)]

    AXIS_ALLOCATIONS.register("test_flagless", alternate)
    try:
        assert allocation_knobs_class("test_flagless").headwise is False
        pairs = axis_of_pair(4, 2, "test_flagless", None, num_heads=2)
        assert pairs.dtype == torch.long and pairs.tolist() == [0, 1, 0, 1]
        rotary = RotaryEmbedding(bare_config(axes=2, axis_allocation="test_flagless"))
        assert rotary.axis_ladders is False
        torch.testing.assert_close(rotary.inv_freq, torch.tensor([1.0, 100**-0.25, 0.1, 100**-0.75]))
    finally:
        AXIS_ALLOCATIONS.unregister("test_flagless")


def test_axis_ladders_follow_a_registered_allocation_with_an_unrotated_pair():
    """The k-th of the n_a pairs of axis a turns at θ^(−2k/(2·n_a)); an unrotated pair at 0. 6 pairs, θ = 100."""

    @register_axis_allocation("test_ladders", axis_ladders=True)
    def alternate_then_nope(num_pairs, axes, mrope_section):
        return [-1 if pair == num_pairs - 1 else pair % axes for pair in range(num_pairs)]

    try:
        config = SimpleNamespace(**{**vars(bare_config(axes=2, axis_allocation="test_ladders")), "head_dim": 12})
        config.hidden_size = 24
        rotary = RotaryEmbedding(config)
        expected = torch.tensor([1.0, 1.0, 100 ** (-1 / 3), 0.1, 100 ** (-2 / 3), 0.0])
        torch.testing.assert_close(rotary.pair_frequencies(), expected)
        assert rotary.axis_of_pair.tolist() == [0, 1, 0, 1, 0, -1] and rotary.attention_scaling == 1.0
    finally:
        AXIS_ALLOCATIONS.unregister("test_ladders")


def test_split_allocation_gives_each_axis_the_ladder_of_its_share():
    """RoPE-2D for ViT: each axis reads a contiguous half of the pairs, with the ladder of a 4-dim head."""
    rotary = RotaryEmbedding(bare_config(axes=2, axis_allocation="split"))
    assert rotary.split_axes == 2 and rotary.axis_of_pair.tolist() == [0, 0, 1, 1]
    torch.testing.assert_close(rotary.pair_frequencies(), torch.tensor([1.0, 0.1, 1.0, 0.1]))
    positions = torch.tensor([[[0.0, 1.0, 2.0]], [[5.0, 7.0, 9.0]]])  # (axes, batch, seq)
    expected = torch.tensor([[[0.0, 0.0, 5.0, 0.5], [1.0, 0.1, 7.0, 0.7], [2.0, 0.2, 9.0, 0.9]]])
    torch.testing.assert_close(rotary.angles(positions), expected)


def test_reset_frequencies_of_a_config_with_no_axes():
    """No `axes`: 1D RoPE, also once the buffers are recomputed (meta-device init)."""
    rotary = RotaryEmbedding(bare_config())
    for buffer in (rotary.inv_freq, rotary.original_inv_freq, rotary.axis_of_pair):
        buffer.fill_(7)
    rotary.reset_frequencies()
    expected = torch.tensor([1.0, 100**-0.25, 0.1, 100**-0.75])
    torch.testing.assert_close(rotary.inv_freq, expected)
    torch.testing.assert_close(rotary.original_inv_freq, expected)
    assert rotary.axes == 1 and rotary.axis_of_pair.tolist() == [0, 0, 0, 0]


def test_dynamic_frequencies_grow_past_the_trained_length_and_come_back():
    """Past max_position_embeddings (16) the base grows to θ·(factor·len/16 − (factor − 1))^(d/(d−2))."""
    config = tiny_config(
        hidden_size=16,
        num_attention_heads=2,
        max_position_embeddings=16,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 100.0},
    )
    rotary = RotaryEmbedding(config)
    original = torch.tensor([1.0, 100**-0.25, 0.1, 100**-0.75])
    torch.testing.assert_close(rotary.inv_freq, original)
    x = torch.zeros(1)
    rotary(x, torch.arange(32.0)[None])  # 32 positions: base 100 · 3^(4/3)
    base = 100.0 * 3.0 ** (4 / 3)
    torch.testing.assert_close(rotary.inv_freq, torch.tensor([base ** (-i / 4) for i in range(4)]))
    rotary(x, torch.arange(8.0)[None])
    torch.testing.assert_close(rotary.inv_freq, original)


@pytest.mark.parametrize("rope_type", ["dynamic", "longrope"])
def test_axis_ladders_refuse_frequencies_recomputed_while_running(rope_type):
    config = bare_config(rope_type=rope_type, axes=3, axis_allocation="omnirope", mrope_section=[2, 1, 1])
    with pytest.raises(ValueError, match=f"own frequency ladder, which rope_type '{rope_type}'.*use another rope_type"):
        RotaryEmbedding(config)


@pytest.mark.parametrize("axes, refused", [(3, (1, 1, 1, 2)), (1, (2, 1, 3))])
def test_position_ids_of_one_axis_are_repeated_and_others_refused_with_the_shape(axes, refused):
    rotary = RotaryEmbedding(bare_config(axes=axes))
    one_axis = torch.tensor([[[4.0, 5.0]]])  # (1, batch, seq): the same positions on every axis
    assert rotary.normalize_position_ids(one_axis).tolist() == [[[4.0, 5.0]]] * axes
    with pytest.raises(ValueError, match=rf"\(batch, seq\) or \({axes}, batch, seq\).*got {re.escape(str(refused))}"):
        rotary.normalize_position_ids(torch.zeros(refused))


def test_angles_follow_the_positions_dtype_not_the_buffers():
    rotary = RotaryEmbedding(bare_config())
    expected = rotary.angles(torch.tensor([[[3001.0]]]))
    assert expected.dtype == torch.float32 and rotary.angles(torch.tensor([[[5.0]]]).double()).dtype == torch.float64
    rotary.double()
    angles = rotary.angles(torch.tensor([[[3001]]]))  # integer positions
    assert rotary.inv_freq.dtype == torch.float64 and angles.dtype == torch.float32
    assert torch.equal(angles, expected)


def test_grape_log_frequencies_scale_and_unrotated_pairs():
    """log_freq = s·log θ_i; pairs HoPE's allocation leaves unrotated keep frequency 0."""
    config = tiny_config(
        hidden_size=16,
        num_attention_heads=2,
        rope_parameters={"rope_type": "grape_m", "rope_theta": 100.0, "grape_log_freq_scale": 4.0},
    )
    grape = GrapeRotaryEmbedding(config)
    torch.testing.assert_close(grape.log_freq.detach(), 4.0 * torch.tensor([0.0, -0.25, -0.5, -0.75]) * math.log(100))
    config = tiny_config(
        hidden_size=16,
        num_attention_heads=2,
        rope_parameters={"rope_type": "grape_m", "axes": 3, "axis_allocation": "hope", "mrope_section": [2, 1, 1]},
    )
    grape = GrapeRotaryEmbedding(config)
    assert grape.axis_of_pair.tolist() == [1, 2, -1, -1]
    frequencies = grape.pair_frequencies().detach()
    assert torch.isfinite(frequencies).all() and frequencies[2:].tolist() == [0.0, 0.0]
    cos, sin = grape(torch.zeros(1), torch.tensor([[3.0]]))
    assert cos[0, 0, 4:].tolist() == [1.0] * 4 and sin[0, 0, 4:].tolist() == [0.0] * 4


@pytest.mark.parametrize("pair_layout", ["interleaved", "half"])
def test_headwise_rotation_turns_the_layouts_own_pairs(pair_layout):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 3, 8, generator=generator)
    angles = torch.randn(1, 2, 3, 4, generator=generator)  # one per head, position and pair
    half = pair_layout == "half"
    table = torch.cat((angles, angles), dim=-1) if half else angles.repeat_interleave(2, -1)
    order = [0, 4, 1, 5, 2, 6, 3, 7] if half else list(range(8))  # each pair's two dims side by side
    rotated = HeadwiseRotation(pair_layout).for_scores(x, table.cos(), table.sin())
    even, odd, cos, sin = x[..., order][..., 0::2], x[..., order][..., 1::2], angles.cos(), angles.sin()
    expected = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    torch.testing.assert_close(rotated[..., order], expected)
