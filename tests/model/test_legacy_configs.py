"""Folders saved before `position_encoding_parameters` (flat knob fields) load with the same knobs and outputs.

The folders in tests/fixtures/legacy_configs were written by the code of commit 5880e7d (PROVENANCE.md): each built-in
encoding with its knobs away from the defaults, large position weights and the `last_hidden_state` that code gave.
A knob lost on loading (the default used instead) moves those outputs far past the tolerance, which the test shows.
"""

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from roformer_ext import RoFormerExtConfig, RoFormerExtModel, RoFormerExtVisionTextConfig
from roformer_ext.encoding_knobs import LEGACY_KNOB_DEFAULTS

FOLDERS = Path(__file__).parents[1] / "fixtures" / "legacy_configs"
ATOL = 1e-5
#: The knobs each folder was saved with away from their defaults (generate.py's CASES).
SAVED = {
    "shaw": {"max_relative_position": 3},
    "t5_bias": {"relative_attention_num_buckets": 8, "relative_attention_max_distance": 12},
    "transformer_xl": {"clamp_len": 5},
    "tupe": {"tupe_cls_reset": False, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 12},
    "deberta": {
        "position_buckets": 8,
        "max_relative_positions": 16,
        "pos_att_type": ["p2c"],
        "share_att_key": False,
        "norm_rel_ebd": "none",
    },
    "sinusoidal": {"sinusoidal_scale": 0.5},
    "alibi": {},
    "learned": {},
    "rope": {},
}


def reference(name: str) -> dict[str, torch.Tensor]:
    return load_file(FOLDERS / name / "reference.safetensors")


@pytest.mark.parametrize("name", sorted(SAVED))
def test_a_folder_with_flat_knobs_loads_its_knobs_and_outputs(name, tmp_path):
    saved = json.loads((FOLDERS / name / "config.json").read_text())
    assert set(LEGACY_KNOB_DEFAULTS) <= set(saved)  # the old format: every flat field
    model = RoFormerExtModel.from_pretrained(FOLDERS / name).eval()
    config = model.config
    expected = {**config.position_encoding_knobs.__class__().to_dict(), **SAVED[name]}
    assert config.position_encoding_parameters == expected
    for knob, value in SAVED[name].items():  # the flat names still read
        assert getattr(config, knob) == value
    ref = reference(name)
    with torch.no_grad():
        out = model(ref["input_ids"]).last_hidden_state
    torch.testing.assert_close(out, ref["last_hidden_state"], atol=ATOL, rtol=0)
    # saved again: one nested dict, no flat fields, the same outputs
    model.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert not set(LEGACY_KNOB_DEFAULTS) & set(written)
    again = RoFormerExtModel.from_pretrained(tmp_path).eval()
    assert again.config.position_encoding_parameters == expected
    with torch.no_grad():
        torch.testing.assert_close(again(ref["input_ids"]).last_hidden_state, out, atol=0, rtol=0)


@pytest.mark.parametrize("name, knob", [(name, knob) for name, knobs in SAVED.items() for knob in knobs])
def test_a_lost_knob_would_show(name, knob):
    """Each saved knob back at its default, the same weights: the folder no longer loads (a table of another size) or
    its outputs move far past the tolerance. The test above can therefore see a knob lost on loading."""
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


def test_flat_overrides_at_load_and_on_a_built_config():
    config = RoFormerExtConfig.from_pretrained(FOLDERS / "transformer_xl", clamp_len=9)
    assert config.position_encoding_parameters == {"clamp_len": 9}
    config.clamp_len = 2  # a flat knob set later replaces the dict's
    assert config.position_encoding_parameters == {"clamp_len": 2} and config.clamp_len == 2
    # switching the encoding keeps the knobs the new one shares and drops the rest
    t5 = RoFormerExtConfig.from_pretrained(FOLDERS / "t5_bias")
    t5.position_encoding = "tupe"
    assert t5.position_encoding_knobs.relative_attention_num_buckets == 8
    t5.position_encoding = "shaw"
    assert t5.position_encoding_parameters == {} and t5.max_relative_position == 16


def test_flat_knobs_of_another_encoding_are_named_and_ignored(caplog):
    with caplog.at_level(logging.WARNING, logger="roformer_ext.configuration_roformer_ext"):
        config = RoFormerExtVisionTextConfig.from_pretrained(FOLDERS / "vision_config")
    assert config.position_encoding == "rope" and config.position_encoding_parameters == {}
    message = " ".join(record.getMessage() for record in caplog.records)
    assert "clamp_len=7 (a knob of transformer_xl)" in message and "max_relative_position=5 (a knob of shaw)" in message
    assert config.clamp_len == LEGACY_KNOB_DEFAULTS["clamp_len"]  # not the selected encoding's: its default
    with caplog.at_level(logging.WARNING, logger="roformer_ext.configuration_roformer_ext"):
        caplog.clear()
        RoFormerExtConfig(position_encoding="rope", clamp_len=-1, pos_att_type="c2p|p2c", sinusoidal_scale=1)
    assert not caplog.records  # defaults, as every old config.json holds them: nothing to say


def test_a_knob_given_twice_must_agree():
    with pytest.raises(ValueError, match="clamp_len is given twice, 3 as a keyword and 4 in position_encoding_param"):
        RoFormerExtConfig(
            position_encoding="transformer_xl", clamp_len=3, position_encoding_parameters={"clamp_len": 4}
        )
    same = RoFormerExtConfig(
        position_encoding="transformer_xl", clamp_len=4, position_encoding_parameters={"clamp_len": 4}
    )
    assert same.position_encoding_parameters == {"clamp_len": 4}
