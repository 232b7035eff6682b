"""rope.py's edges that the model-level tests cannot see (found by the mutation check, docs/testing.md): the
allocation registry's defaults, the pair-layout choice and its error, the reordered q/k rows (their error, gradients,
cache key) and when a half-layout attention may project with them."""

import math
import re
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_config
from torch import nn
from vision_sizes import SIZES

from roformer_ext import RoFormerExtModel, RoFormerExtVisionTextConfig, RoFormerExtVisionTextModel, fused_rotary, rope
from roformer_ext.axis_allocations import axis_of_pair, is_headwise, register_axis_allocation
from roformer_ext.fused_rotary import fused_rotary_installed
from roformer_ext.rope import (
    AXIS_ALLOCATIONS,
    FusedHalfPairRotation,
    GrapeRotaryEmbedding,
    HalfPairRotation,
    HeadwiseRotation,
    InterleavedPairRotation,
    RotaryEmbedding,
    apply_rotary,
    query_key_rotation,
)
from roformer_ext.scheme_knobs import allocation_knobs_class


def test_registering_an_allocation_keeps_its_flags_and_refuses_a_second_time():
    def every_pair_on_axis_0(num_pairs, axes, mrope_section):
        return [0] * num_pairs

    try:
        assert register_axis_allocation("test_axis0")(every_pair_on_axis_0) is every_pair_on_axis_0
        assert not is_headwise("test_axis0") and not allocation_knobs_class("test_axis0").axis_ladders
        assert AXIS_ALLOCATIONS.get("test_axis0") is every_pair_on_axis_0
        with pytest.raises(ValueError):
            register_axis_allocation("test_axis0")(every_pair_on_axis_0)
        register_axis_allocation("test_axis0", overwrite=True, headwise=True, axis_ladders=True)(every_pair_on_axis_0)
        assert is_headwise("test_axis0") and allocation_knobs_class("test_axis0").axis_ladders
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
    half = query_key_rotation(tiny_config(rope_parameters={"pair_layout": "half"}))
    assert type(half) is (FusedHalfPairRotation if fused_rotary_installed() else HalfPairRotation)


@pytest.mark.parametrize("headwise", [False, True], ids=["text", "headwise"])
def test_unknown_pair_layout_is_named_with_the_choices(headwise):
    """A dict changed in place after construction is checked when the model is built."""
    config = mhrope_config() if headwise else tiny_config()
    config.rope_parameters["pair_layout"] = "bogus"
    with pytest.raises(ValueError, match=r"pair_layout'\] 'bogus'. Registered choices: 'interleaved', 'half'"):
        (RoFormerExtVisionTextModel if headwise else RoFormerExtModel)(config)


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


# The survivors of the 2026-11-27 mutation run of rope.py (docs/testing.md, "rope.py: the survivors triaged"):
# allocation flags, user allocations (head-wise, with axis ladders), the split allocation, dynamic frequencies, the
# position-ids shapes, GRAPE-M's scale and unrotated pairs, the head-wise rotation, the fused choice, DTensor weights.


def bare_config(**rope) -> SimpleNamespace:
    """What `RotaryEmbedding` reads from a config, and no more: no `axes` unless given (head_dim 8, θ = 100)."""
    rope_parameters = {"rope_type": "default", "rope_theta": 100.0, "axis_allocation": "interleaved", **rope}
    return SimpleNamespace(
        rope_parameters=rope_parameters, hidden_size=16, num_attention_heads=2, head_dim=8, max_position_embeddings=32
    )


def test_is_headwise_reads_the_allocation_flag():
    """Nothing in the model asks it (the config asks `rotates_per_head`): a direct test, for the public function."""
    assert is_headwise("headwise") is True
    assert is_headwise("interleaved") is False and is_headwise("omnirope") is False
    with pytest.raises(ValueError, match="Unknown rope_parameters\\['axis_allocation'\\] 'bogus'"):
        is_headwise("bogus")


def test_an_allocation_registered_without_the_decorator_is_plain():
    """An allocation put straight into the registry has no `headwise` / `axis_ladders` flags: read as neither."""

    def alternate(num_pairs, axes, mrope_section):
        return [pair % axes for pair in range(num_pairs)]

    AXIS_ALLOCATIONS.register("test_flagless", alternate)
    try:
        assert is_headwise("test_flagless") is False
        pairs = axis_of_pair(4, 2, "test_flagless", None, num_heads=2)
        assert pairs.dtype == torch.long and pairs.tolist() == [0, 1, 0, 1]
        rotary = RotaryEmbedding(bare_config(axes=2, axis_allocation="test_flagless"))
        assert rotary.axis_ladders is False
        torch.testing.assert_close(rotary.inv_freq, torch.tensor([1.0, 100**-0.25, 0.1, 100**-0.75]))
    finally:
        AXIS_ALLOCATIONS.unregister("test_flagless")


def test_a_headwise_allocation_gets_the_axes_and_the_heads():
    """A user's head-wise allocation is called with (pairs, axes, mrope_section, heads), as the docstring promises."""

    @register_axis_allocation("test_head_axes", headwise=True)
    def head_by_axis(num_pairs, axes, mrope_section, num_heads):
        return [[head % axes] * num_pairs for head in range(num_heads)]

    try:
        assert axis_of_pair(3, 2, "test_head_axes", None, 4).tolist() == [[0] * 3, [1] * 3, [0] * 3, [1] * 3]
    finally:
        AXIS_ALLOCATIONS.unregister("test_head_axes")


def test_axis_ladders_follow_a_registered_allocation_with_an_unrotated_pair():
    """With `axis_ladders` the k-th of the n_a pairs axis a reads turns at θ^(−2k/(2·n_a)), whatever the allocation;
    a pair it leaves unrotated (-1) keeps frequency 0. head_dim 12: 6 pairs on axes 0, 1, 0, 1, 0, none; θ = 100."""

    @register_axis_allocation("test_ladders", axis_ladders=True)
    def alternate_then_nope(num_pairs, axes, mrope_section):
        return [-1 if pair == num_pairs - 1 else pair % axes for pair in range(num_pairs)]

    try:
        config = SimpleNamespace(**{**vars(bare_config(axes=2, axis_allocation="test_ladders")), "head_dim": 12})
        config.hidden_size = 24
        rotary = RotaryEmbedding(config)
        # axis 0 reads 3 pairs (a ladder of 6 dims: 1, θ^-1/3, θ^-2/3), axis 1 reads 2 (4 dims: 1, θ^-1/2)
        expected = torch.tensor([1.0, 1.0, 100 ** (-1 / 3), 0.1, 100 ** (-2 / 3), 0.0])
        torch.testing.assert_close(rotary.pair_frequencies(), expected)
        assert rotary.axis_of_pair.tolist() == [0, 1, 0, 1, 0, -1] and rotary.attention_scaling == 1.0
    finally:
        AXIS_ALLOCATIONS.unregister("test_ladders")


def test_split_allocation_gives_each_axis_the_ladder_of_its_share():
    """RoPE-2D for ViT: each of 2 axes reads a contiguous half of the 4 pairs, each half with the ladder of a 4-dim
    head (1, θ^-1/2 = 0.1); every pair turns by its own axis' position (2 axes: not the 1-axis shortcut)."""
    rotary = RotaryEmbedding(bare_config(axes=2, axis_allocation="split"))
    assert rotary.split_axes == 2 and rotary.axis_of_pair.tolist() == [0, 0, 1, 1]
    torch.testing.assert_close(rotary.pair_frequencies(), torch.tensor([1.0, 0.1, 1.0, 0.1]))
    positions = torch.tensor([[[0.0, 1.0, 2.0]], [[5.0, 7.0, 9.0]]])  # (axes, batch, seq)
    expected = torch.tensor([[[0.0, 0.0, 5.0, 0.5], [1.0, 0.1, 7.0, 0.7], [2.0, 0.2, 9.0, 0.9]]])
    torch.testing.assert_close(rotary.angles(positions), expected)


def test_reset_frequencies_of_a_config_with_no_axes():
    """A config without `axes` is 1D interleaved RoPE, also once the buffers are recomputed (meta-device init, from_pretrained); a 1-axis rotary refuses 2-axis positions."""
    rotary = RotaryEmbedding(bare_config())
    assert rotary.axes == 1
    for buffer in (rotary.inv_freq, rotary.original_inv_freq, rotary.axis_of_pair):
        buffer.fill_(7)
    rotary.reset_frequencies()
    expected = torch.tensor([1.0, 100**-0.25, 0.1, 100**-0.75])
    torch.testing.assert_close(rotary.inv_freq, expected)
    torch.testing.assert_close(rotary.original_inv_freq, expected)
    assert rotary.axis_of_pair.tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match=r"got \(2, 1, 3\)\.$"):
        rotary.normalize_position_ids(torch.zeros(2, 1, 3))


def test_dynamic_frequencies_grow_past_the_trained_length_and_come_back():
    """transformers' dynamic NTK scaling reads the module's cached lengths: past max_position_embeddings (16) the
    base grows to θ·(factor·len/16 − (factor − 1))^(d/(d−2)), below it the original frequencies return."""
    config = tiny_config(
        hidden_size=16, num_attention_heads=2, max_position_embeddings=16,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 100.0},
    )  # fmt: skip
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
    message = (
        f"axis_allocation 'omnirope' gives each axis its own frequency ladder, which rope_type '{rope_type}' "
        "(frequencies recomputed for the whole head while running) does not support; use another rope_type "
        "(default, linear, yarn, ...) or allocation 'sections'."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        RotaryEmbedding(config)


def test_position_ids_of_one_axis_are_repeated_and_others_refused_with_the_shape():
    rotary = RotaryEmbedding(bare_config(axes=3))
    one_axis = torch.tensor([[[4.0, 5.0]]])  # (1, batch, seq): the same positions on every axis
    assert rotary.normalize_position_ids(one_axis).tolist() == [[[4.0, 5.0]]] * 3
    message = "position_ids must have shape (batch, seq) or (3, batch, seq) for a rotary with 3 axes; got (1, 1, 1, 2)."
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        rotary.normalize_position_ids(one_axis[None])


def test_angles_stay_fp32_when_the_buffers_are_fp64():
    """`.double()` casts the frequency buffers; the angles still follow the positions' dtype (fp64 only if asked)."""
    rotary = RotaryEmbedding(bare_config())
    expected = rotary.angles(torch.tensor([[[3001.0]]]))
    rotary.double()
    angles = rotary.angles(torch.tensor([[[3001]]]))  # integer positions
    assert rotary.inv_freq.dtype == torch.float64 and angles.dtype == torch.float32
    assert torch.equal(angles, expected)


def test_grape_log_frequencies_use_the_configured_scale():
    """log_freq = s·log θ_i with the configured s (a learning-rate scaling: the frequencies themselves stay θ_i)."""
    config = tiny_config(hidden_size=16, num_attention_heads=2, rope_parameters={
        "rope_type": "grape_m", "rope_theta": 100.0, "grape_log_freq_scale": 4.0})  # fmt: skip
    grape = GrapeRotaryEmbedding(config)
    assert grape.log_freq_scale == 4.0
    torch.testing.assert_close(grape.log_freq.detach(), 4.0 * torch.tensor([0.0, -0.25, -0.5, -0.75]) * math.log(100))


def test_grape_unrotated_pairs_turn_at_zero_frequency():
    """HoPE's allocation leaves the last section[0] pairs unrotated: under GRAPE-M they keep frequency 0 too."""
    config = tiny_config(hidden_size=16, num_attention_heads=2, rope_parameters={
        "rope_type": "grape_m", "axes": 3, "axis_allocation": "hope", "mrope_section": [2, 1, 1]})  # fmt: skip
    grape = GrapeRotaryEmbedding(config)
    assert grape.axis_of_pair.tolist() == [1, 2, -1, -1]
    frequencies = grape.pair_frequencies().detach()
    assert torch.isfinite(frequencies).all() and frequencies[2:].tolist() == [0.0, 0.0]
    cos, sin = grape(torch.zeros(1), torch.tensor([[3.0]]))
    assert cos[0, 0, 4:].tolist() == [1.0] * 4 and sin[0, 0, 4:].tolist() == [0.0] * 4


@pytest.mark.parametrize("pair_layout", ["interleaved", "half"])
def test_headwise_rotation_turns_the_layouts_own_pairs(pair_layout):
    """Per-head cos / sin in the layout's order; pairs (2i, 2i+1) or (i, i + d/2), by the plain formula."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 3, 8, generator=generator)
    angles = torch.randn(1, 2, 3, 4, generator=generator)  # one per head, position and pair
    if pair_layout == "half":
        table = torch.cat((angles, angles), dim=-1)
        order = [0, 4, 1, 5, 2, 6, 3, 7]  # each pair's two dims side by side
    else:
        table = torch.repeat_interleave(angles, 2, dim=-1)
        order = list(range(8))
    rotated = HeadwiseRotation(pair_layout).for_scores(x, table.cos(), table.sin())
    expected = reference_rotation(x[..., order], angles.cos(), angles.sin())
    torch.testing.assert_close(rotated[..., order], expected)


def test_installed_fused_kernel_is_chosen_for_the_half_layout(monkeypatch):
    """Where liger-kernel and CUDA are there, the half layout gets the fused rotation (asked here by patching the
    check: the CPU machine has neither)."""
    monkeypatch.setattr(fused_rotary, "fused_rotary_installed", lambda: True)
    assert type(query_key_rotation(tiny_config(rope_parameters={"pair_layout": "half"}))) is FusedHalfPairRotation


def half_rotary_case():
    """q, k (2, 4, 7, 8) and the half layout's cos / sin of positions 0..6 from a tiny model."""
    model = RoFormerExtModel(tiny_config(rope_parameters={"pair_layout": "half"}))
    generator = torch.Generator().manual_seed(0)
    query, key = (torch.randn(2, 7, 4, 8, generator=generator).transpose(1, 2) for _ in range(2))
    cos, sin = model.rotary_emb(query, torch.arange(7).expand(2, 7))
    return query, key, cos, sin


class _ClaimsCuda(torch.Tensor):
    """A CPU tensor that says it is on CUDA: the fused rotation's device branch, reached on a CPU machine."""

    @property
    def is_cuda(self) -> bool:
        return True


def test_fused_rotation_without_liger_kernel_takes_the_half_path_on_cuda(monkeypatch):
    """Made by hand where liger-kernel is missing (the GPU check of 2026-11-27 found a bare "'NoneType' object is not
    callable" here), the fused rotation rotates CUDA tensors as the half layout; the kernel call alone says what to
    install."""
    monkeypatch.setattr(fused_rotary, "_liger_rotary", lambda: None)
    query, key, cos, sin = half_rotary_case()
    plain = HalfPairRotation().query_key(query, key, cos, sin)
    claimed = [t.as_subclass(_ClaimsCuda) for t in (query, key, cos, sin)]
    assert claimed[0].is_cuda and not FusedHalfPairRotation.fuses(claimed[0])
    for got, want in zip(FusedHalfPairRotation().query_key(*claimed), plain):
        torch.testing.assert_close(got.as_subclass(torch.Tensor), want, atol=0, rtol=0)
    with pytest.raises(ImportError, match="pip install liger-kernel"):
        fused_rotary.fused_half_rotate_query_key(query, key, cos, sin)


def test_the_fused_branch_with_a_stand_in_kernel(monkeypatch):
    """The CUDA branch of the fused rotation, run on a CPU: liger-kernel replaced by a recording stand-in, tensors
    that say they are on CUDA. It projects q and k into heads, hands them to the kernel with
    cos / sin in their dtype, and returns the kernel's result, for `project_query_key` and `query_key` alike."""
    calls = []

    def kernel(query, key, cos, sin):
        calls.append((query, key, cos, sin))
        return apply_rotary(query, cos, sin, "half") + 1, apply_rotary(key, cos, sin, "half") - 1

    monkeypatch.setattr(fused_rotary, "_liger_rotary", lambda: kernel)
    monkeypatch.setattr(fused_rotary, "fused_rotary_installed", lambda: True)
    model = RoFormerExtModel(tiny_config(rope_parameters={"pair_layout": "half"}))
    generator = torch.Generator().manual_seed(1)
    states = torch.randn(2, 40, 32, generator=generator, dtype=torch.float64)
    cos, sin = model.rotary_emb(states, torch.arange(40).expand(2, 40))  # (2, 40, 8), float32
    query_projection, key_projection = nn.Linear(32, 32).double(), nn.Linear(32, 32).double()
    query = query_projection(states).view(2, 40, 4, 8).transpose(1, 2)
    key = key_projection(states).view(2, 40, 4, 8).transpose(1, 2)
    rotation = FusedHalfPairRotation()
    got = rotation.project_query_key(states.as_subclass(_ClaimsCuda), query_projection, key_projection, 8, cos, sin)
    ((seen_query, seen_key, seen_cos, seen_sin),) = calls
    torch.testing.assert_close(seen_query.as_subclass(torch.Tensor), query, atol=0, rtol=0)
    torch.testing.assert_close(seen_key.as_subclass(torch.Tensor), key, atol=0, rtol=0)
    assert seen_cos.dtype == seen_sin.dtype == torch.float64  # cast to the queries' dtype for the kernel
    torch.testing.assert_close(seen_sin, sin.double(), atol=0, rtol=0)
    expected = apply_rotary(query, cos, sin, "half") + 1, apply_rotary(key, cos, sin, "half") - 1
    for out, want in zip(got, expected):
        torch.testing.assert_close(out.as_subclass(torch.Tensor), want, atol=0, rtol=0)
    calls.clear()
    got = rotation.query_key(query.as_subclass(_ClaimsCuda), key.as_subclass(_ClaimsCuda), cos, sin)
    assert len(calls) == 1
    for out, want in zip(got, expected):
        torch.testing.assert_close(out.as_subclass(torch.Tensor), want, atol=0, rtol=0)
    # plain CPU tensors do not reach the kernel, even with it installed: the half layout's own paths
    calls.clear()
    plain = HalfPairRotation()
    for got, want in (
        (rotation.project_query_key(states, query_projection, key_projection, 8, cos, sin),
         plain.project_query_key(states, query_projection, key_projection, 8, cos, sin)),
        (rotation.query_key(query, key, cos, sin), plain.query_key(query, key, cos, sin)),
    ):  # fmt: skip
        for out, want_one in zip(got, want):
            torch.testing.assert_close(out, want_one, atol=0, rtol=0)
    assert not calls
