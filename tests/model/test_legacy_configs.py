"""Folders saved by older code (tests/fixtures/legacy_configs) load with their knobs and outputs."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from roformer_ext import RoFormerExtConfig, RoFormerExtModel
from tests.conftest import tiny_config

FOLDERS = Path(__file__).parents[1] / "fixtures" / "legacy_configs"
ATOL = 1e-5
#: The knobs each folder was saved with away from their defaults (generate.py's CASES).
SAVED = {
    "shaw": {"max_relative_position": 3},
    "t5_bias": {"relative_attention_num_buckets": 8, "relative_attention_max_distance": 12},
    "transformer_xl": {"clamp_len": 5},
    "tupe": {"tupe_cls_reset": False, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 12},
    "deberta": {"position_buckets": 8, "max_relative_positions": 16, "pos_att_type": ["p2c"], "share_att_key": False,
                "norm_rel_ebd": "none"},
    "sinusoidal": {"sinusoidal_scale": 0.5},
    "alibi": {},
    "learned": {},
    "rope": {},
}  # fmt: skip


def reference(name: str) -> dict[str, torch.Tensor]:
    return load_file(FOLDERS / name / "reference.safetensors")


@pytest.mark.parametrize("name", sorted(SAVED))
def test_a_saved_folder_loads_its_knobs_and_outputs(name, tmp_path):
    model = RoFormerExtModel.from_pretrained(FOLDERS / name).eval()
    config = model.config
    expected = {**config.position_encoding_knobs.__class__().to_dict(), **SAVED[name]}
    assert config.position_encoding_parameters == expected
    ref = reference(name)
    with torch.no_grad():
        out = model(ref["input_ids"]).last_hidden_state
    torch.testing.assert_close(out, ref["last_hidden_state"], atol=ATOL, rtol=0)
    model.save_pretrained(tmp_path)  # saved again: the same dict and outputs
    assert json.loads((tmp_path / "config.json").read_text())["position_encoding_parameters"] == expected
    again = RoFormerExtModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(ref["input_ids"]).last_hidden_state, out, atol=0, rtol=0)


@pytest.mark.parametrize("name, knob", [(name, knob) for name, knobs in SAVED.items() for knob in knobs])
def test_a_lost_knob_would_show(name, knob):
    """A knob back at its default fails to load or moves the outputs far past ATOL: the test above would see it."""
    config = RoFormerExtConfig.from_pretrained(FOLDERS / name)
    params = dict(config.position_encoding_parameters)
    params[knob] = type(config.position_encoding_knobs)().to_dict()[knob]
    ref = reference(name)
    try:
        lost = RoFormerExtConfig(**{**config.to_dict(), "position_encoding_parameters": params})
        model = RoFormerExtModel.from_pretrained(FOLDERS / name, config=lost).eval()
    except (RuntimeError, ValueError):  # a table of another size, or sizes that no longer fit: seen
        return
    with torch.no_grad():
        out = model(ref["input_ids"]).last_hidden_state
    assert (out - ref["last_hidden_state"]).abs().max() > 100 * ATOL


def test_dicts_assigned_after_construction_are_completed_when_the_model_is_built():
    """`from_pretrained(path, rope_parameters=...)` assigns after construction: completed, checked, not mutated."""
    rope = {"rope_type": "linear", "factor": 2.0}
    config = tiny_config()
    config.rope_parameters = rope
    torch.manual_seed(0)
    model = RoFormerExtModel(config).eval()
    torch.manual_seed(0)
    built = RoFormerExtModel(tiny_config(rope_parameters=rope)).eval()
    assert rope == {"rope_type": "linear", "factor": 2.0}
    assert model.config.rope_parameters == built.config.rope_parameters
    ids = torch.arange(1, 17)[None]
    with torch.no_grad():
        torch.testing.assert_close(model(ids).last_hidden_state, built(ids).last_hidden_state, atol=0, rtol=0)
    knobs = RoFormerExtConfig.from_pretrained(FOLDERS / "t5_bias", position_encoding_parameters={})
    assert RoFormerExtModel(knobs).config.position_encoding_parameters["relative_attention_num_buckets"] == 32
    knobs.position_encoding = "shaw"  # another encoding's knobs are named, with the fix
    with pytest.raises(ValueError, match="which position_encoding='shaw' does not take"):
        RoFormerExtModel(knobs)


def test_a_knob_given_as_a_field_of_its_own_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"knobs go in position_encoding_parameters.*got clamp_len"):
        tiny_config(position_encoding="transformer_xl", clamp_len=3)
