"""`assert_position_sensitive` refuses the tiny config; its perturbation reaches every kind of position encoding (the
vision-text layout: test_multimodal_schemes_model and test_vision_models call it on every vision model)."""

import pytest
import torch
from conftest import (
    SENSITIVITY_FACTOR,
    assert_position_sensitive,
    perturbed_positions,
    position_sensitive_config,
    scaled_positions,
    shifted_positions,
    tiny_config,
)
from transformers import DynamicCache, StaticCache

from roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtModel,
)

TOLERANCE = 1e-5


def input_ids(seq: int = 12) -> torch.Tensor:
    return torch.randint(5, 99, (2, seq), generator=torch.Generator().manual_seed(0))


def test_tiny_config_is_blind_and_the_helper_says_so():
    torch.manual_seed(0)
    model = RoFormerExtModel(tiny_config()).eval()
    ids = input_ids()
    with pytest.raises(AssertionError, match="barely depends on positions"):
        assert_position_sensitive(model, lambda m: m(ids), TOLERANCE)


def test_sensitive_config_moves_outputs_far_beyond_the_tolerance():
    torch.manual_seed(0)
    model = RoFormerExtModel(position_sensitive_config()).eval()
    ids = input_ids()
    margins = assert_position_sensitive(model, lambda m: m(ids), TOLERANCE)
    assert min(margins.values()) >= SENSITIVITY_FACTOR
    # the perturbations keep restarts (packed rows) and order; only relative distances change
    positions = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2, 3])
    assert shifted_positions(positions).tolist() == [0, 1, 2, 4, 5, 0, 1, 2, 4]
    assert scaled_positions(positions).tolist() == [0, 2, 4, 6, 8, 0, 2, 4, 6]
    rope = {"rope_type": "default"}  # the caller's overrides are not changed
    config = position_sensitive_config(rope_parameters=rope, initializer_range=0.3)
    assert rope == {"rope_type": "default"}
    assert config.initializer_range == 0.3 and config.rope_parameters["rope_theta"] == 100.0


@pytest.mark.parametrize("position_encoding", ["rope", "alibi", "t5_bias", "learned", "sinusoidal"])
def test_perturbation_reaches_every_kind_of_position_encoding(position_encoding):
    """Each perturbation moves the output (alibi's bias is shift-invariant but not scale-invariant)."""
    torch.manual_seed(0)
    model = RoFormerExtModel(position_sensitive_config(position_encoding=position_encoding)).eval()
    ids = input_ids()
    with torch.no_grad():
        reference = model(ids).last_hidden_state
        for perturb in (scaled_positions, shifted_positions):
            with perturbed_positions(model, perturb):
                moved = model(ids).last_hidden_state
            assert (moved - reference).abs().max() > 1e-2, perturb.__name__
        assert torch.equal(model(ids).last_hidden_state, reference)  # the block's patch is undone


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
@pytest.mark.parametrize("position_encoding", ["rope", "alibi", "t5_bias", "shaw"])
def test_perturbation_of_a_cached_step_equals_the_perturbed_positions_given(position_encoding, cache_implementation):
    """A perturbed cached step = one uncached forward on the perturbed positions: the cached keys move too."""
    torch.manual_seed(0)
    config = position_sensitive_config(is_decoder=True, position_encoding=position_encoding)
    model = RoFormerExtForCausalLM(config).eval()
    ids = input_ids(9)
    with torch.no_grad():
        with perturbed_positions(model, shifted_positions):
            cache = DynamicCache(config=config) if cache_implementation == "dynamic" else StaticCache(config, 16)
            model(ids[:, :6], cache=cache, use_cache=True)
            step = model(ids[:, 6:], cache=cache, use_cache=True).logits
        moved = shifted_positions(torch.arange(9)).expand(2, -1)
        expected = model(ids, position_ids=moved, use_cache=False).logits[:, 6:]
        unperturbed = model(ids, use_cache=False).logits[:, 6:]
    torch.testing.assert_close(step, expected, atol=TOLERANCE, rtol=0)
    assert (step - unperturbed).abs().max() > 100 * TOLERANCE
