"""Position encodings' knobs (checked, documented) and capabilities (a plugin's flags refuse, naming the fix)."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import tiny_config

import roformer_ext.position_encodings as encodings
from roformer_ext import RoFormerExtConfig, RoFormerExtForCausalLM, RoFormerExtModel, register_position_encoding
from roformer_ext.configuration_roformer_ext import BUILTIN_ENCODINGS
from roformer_ext.encoding_knobs import (
    Capabilities,
    DebertaKnobs,
    EncodingKnobs,
    ShawKnobs,
    SinusoidalKnobs,
    T5BiasKnobs,
    TupeKnobs,
    knobs_class,
)
from roformer_ext.registries import POSITION_ENCODINGS

DOCS = (Path(__file__).parents[2] / "docs" / "position-encodings.md").read_text(encoding="utf-8")
BUILTIN_KNOBS = {name: knobs_class(name) for name in BUILTIN_ENCODINGS if knobs_class(name).names()}


def test_defaults_are_written_out_and_the_caller_dict_is_not_changed():
    given = {"relative_attention_num_buckets": 8}
    config = tiny_config(position_encoding="tupe", position_encoding_parameters=given)
    assert given == {"relative_attention_num_buckets": 8}
    assert config.position_encoding_parameters == {**TupeKnobs().to_dict(), "relative_attention_num_buckets": 8}
    assert tiny_config(position_encoding="deberta").position_encoding_parameters == DebertaKnobs().to_dict()
    assert tiny_config().position_encoding_parameters == {}  # rope: its knobs are rope_parameters
    assert DebertaKnobs(pos_att_type="P2C | c2p").pos_att_type == ("p2c", "c2p")
    assert DebertaKnobs(pos_att_type=["c2p"]).to_dict()["pos_att_type"] == ["c2p"]


@pytest.mark.parametrize(
    "encoding, knobs, error, message",
    [
        ("shaw", {"max_relative_position": 2.0}, ValueError, "must be a positive integer .*got 2.0"),
        ("t5_bias", {"relative_attention_max_distance": 16}, ValueError, "larger than half the buckets"),
        ("sinusoidal", {"sinusoidal_scale": True}, TypeError, "sinusoidal_scale must be a positive number"),
        ("sinusoidal", {"sinusoidal_scale": float("nan")}, ValueError, "sinusoidal_scale must be a positive number"),
        ("transformer_xl", {"clamp_len": 1.5}, TypeError, "clamp_len must be an int"),
        ("tupe", {"tupe_rel_pos": 1}, TypeError, "tupe_rel_pos must be True or False"),
        ("deberta", {"pos_att_type": "c2p|c2p"}, ValueError, "pos_att_type lists DeBERTa's position terms"),
        ("deberta", {"pos_att_type": []}, ValueError, "pos_att_type lists DeBERTa's position terms"),
        ("deberta", {"norm_rel_ebd": "rms"}, ValueError, "Unknown norm_rel_ebd 'rms'"),
        ("deberta", {"share_att_key": "yes"}, TypeError, "share_att_key must be True or False"),
        ("deberta", {"position_buckets": 200, "max_relative_positions": 64}, ValueError, "log buckets need"),
        ("alibi", {"max_relative_position": 4}, ValueError, r"'max_relative_position'.*alibi.*takes no knobs"),
        ("shaw", {"clamp_len": 4}, ValueError, r"'clamp_len'.*'shaw' does not take; it takes 'max_relative_position'"),
    ],
)
def test_each_knob_is_checked_with_the_fix(encoding, knobs, error, message):
    with pytest.raises(error, match=message):
        tiny_config(position_encoding=encoding, position_encoding_parameters=knobs)


def test_tupe_without_the_relative_bias_does_not_check_its_buckets_and_the_parameters_are_a_dict():
    knobs = {"tupe_rel_pos": False, "relative_attention_num_buckets": 9}
    config = tiny_config(position_encoding="tupe", position_encoding_parameters=knobs)
    assert config.position_encoding_knobs == TupeKnobs(**knobs)
    with pytest.raises(TypeError, match="position_encoding_parameters must be a dict"):
        tiny_config(position_encoding="shaw", position_encoding_parameters=[("max_relative_position", 4)])


def test_the_config_docstring_lists_each_encodings_knobs():
    for name, knobs in BUILTIN_KNOBS.items():
        listed = f'"{name}" ' + ", ".join(f"`{knob}`" for knob in knobs.names())
        assert listed in RoFormerExtConfig.__doc__


def limited_encoding(**flags) -> str:
    """An absolute encoding (NoPE) registered with some capabilities switched off."""

    class LimitedNoPE(encodings.NoPositionEncoding):
        capabilities = Capabilities(**flags)

    name = "test_limited_" + "_".join(sorted(flags))
    register_position_encoding(name)(LimitedNoPE)
    return name


@pytest.fixture
def unregister():
    names = []
    yield names
    for name in names:
        POSITION_ENCODINGS.unregister(name)


def test_no_cache_capability_refuses_cached_generation(unregister):
    unregister.append(name := limited_encoding(cache=False))
    model = RoFormerExtForCausalLM(tiny_config(position_encoding=name, is_decoder=True)).eval()
    ids = torch.randint(4, 90, (1, 5))
    with pytest.raises(ValueError, match=f"{name}' does not support a KV cache .*with use_cache=False"):
        model.generate(ids, max_new_tokens=2, do_sample=False)
    out = model.generate(ids, max_new_tokens=2, do_sample=False, use_cache=False)
    assert out.shape == (1, 7)


def test_no_packing_capability_refuses_packed_rows(unregister):
    unregister.append(name := limited_encoding(packing=False))
    model = RoFormerExtModel(tiny_config(position_encoding=name)).eval()
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    with pytest.raises(ValueError, match=f"{name}' does not support packed .*: pad the batch instead"):
        model(torch.randint(4, 90, (1, 7)), cu_seq_lens_q=cu, cu_seq_lens_k=cu)
    assert model(torch.randint(4, 90, (2, 4))).last_hidden_state.shape == (2, 4, 32)


def test_no_flash_or_linear_capability_refuses_those_attentions(unregister):
    unregister.append(name := limited_encoding(flash_attention=False))
    model = RoFormerExtModel(tiny_config(position_encoding=name)).eval()
    model.config._attn_implementation = "flash_attention_2"  # what set_attn_implementation would do with a GPU
    with pytest.raises(ValueError, match="capabilities exclude flash attention"):
        model(torch.randint(4, 90, (1, 5)))
    unregister.append(name := limited_encoding(linear_attention=False))
    with pytest.raises(ValueError, match="linear attention never forms"):
        RoFormerExtModel(tiny_config(position_encoding=name, attention_type="linear"))


def test_no_onnx_capability_refuses_the_export_before_tracing(unregister, tmp_path):
    from roformer_ext.export import export_onnx

    unregister.append(name := limited_encoding(onnx=False))
    model = RoFormerExtModel(tiny_config(position_encoding=name)).eval()
    with pytest.raises(ValueError, match="does not export to ONNX .*quantize_dynamic_int8"):
        export_onnx(model, tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


def test_registration_refuses_a_class_without_a_knob_dataclass_or_capabilities():
    class NoKnobs(encodings.NoPositionEncoding):
        knobs = dict

    class NoFlags(encodings.NoPositionEncoding):
        capabilities = {"cache": True}

    with pytest.raises(TypeError, match="NoKnobs.knobs must be an EncodingKnobs dataclass"):
        register_position_encoding("test_bad_knobs")(NoKnobs)
    with pytest.raises(TypeError, match="NoFlags.capabilities must be a Capabilities"):
        register_position_encoding("test_bad_flags")(NoFlags)
    assert "test_bad_knobs" not in POSITION_ENCODINGS.registered()


def test_the_documented_encoding_with_a_knob_runs(unregister):
    """docs/position-encodings.md's example, executed as written: its knob reaches the table and is checked."""
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", DOCS, re.S) if "offset_sinusoidal" in block]
    namespace: dict = {}
    exec(compile(code, "docs/position-encodings.md", "exec"), namespace)
    unregister.append("offset_sinusoidal")
    assert namespace["config"].position_encoding_parameters == {"offset": 3}
    model = RoFormerExtModel(
        tiny_config(position_encoding="offset_sinusoidal", position_encoding_parameters={"offset": 3})
    )
    shifted = model.position_encoding.embed(torch.zeros(1, 4, 32), torch.arange(4)[None])
    torch.testing.assert_close(shifted, encodings.sinusoidal_table(torch.arange(3, 7)[None], 32))
    with pytest.raises(ValueError, match="offset must be an int >= 0; got -1"):
        tiny_config(position_encoding="offset_sinusoidal", position_encoding_parameters={"offset": -1})


def test_numpy_numbers_are_stored_as_json_takes_them():
    config = tiny_config(
        position_encoding="tupe",
        position_encoding_parameters={"relative_attention_num_buckets": np.int64(8), "tupe_rel_pos": True},
    )
    assert type(config.position_encoding_parameters["relative_attention_num_buckets"]) is int
    assert json.loads(config.to_json_string())["position_encoding_parameters"]["relative_attention_num_buckets"] == 8
    sinusoidal = tiny_config(
        position_encoding="sinusoidal", position_encoding_parameters={"sinusoidal_scale": np.int32(2)}
    )
    assert sinusoidal.position_encoding_parameters == {"sinusoidal_scale": 2.0}
    with pytest.raises(ValueError, match=r"has 1, 'a', which"):
        tiny_config(position_encoding="alibi", position_encoding_parameters={1: 2, "a": 3})


def test_the_docs_knob_table_lists_each_encodings_knobs_and_defaults():
    table = DOCS.split("| encoding | knobs (default) |")[1].split("\n\n")[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", table, re.M))
    assert set(rows) == set(BUILTIN_KNOBS)
    for name, knobs in BUILTIN_KNOBS.items():
        listed = re.findall(r"`(\w+)` \(([^)]*)\)", rows[name])
        assert [knob for knob, _ in listed] == list(knobs.names()), name
        for (knob, default), value in zip(listed, knobs().to_dict().values()):
            shown = default.split(":")[0].strip("`").replace('"', "'")
            assert shown == repr(value).replace('"', "'"), (name, knob)


def buckets(knobs, num_buckets, max_distance):
    return knobs, {"relative_attention_num_buckets": num_buckets, "relative_attention_max_distance": max_distance}


def deberta(num_buckets, max_relative):  # <= 0: max_position_embeddings (64)
    return DebertaKnobs, {"position_buckets": num_buckets, "max_relative_positions": max_relative}


@pytest.mark.parametrize(
    "knobs, values",
    [
        (ShawKnobs, {"max_relative_position": 1}),
        (TupeKnobs, {"tupe_rel_pos": False, "relative_attention_num_buckets": 2}),
        *[buckets(T5BiasKnobs, b, 3) for b in (4, 5)],  # an odd count too: only TUPE needs an even one
        buckets(TupeKnobs, 4, 3),
        *[deberta(b, r) for b, r in [(0, 1), (-1, 1), (2, 3), (4, 4), (6, 5), (100, 0)]],
    ],
)
def test_each_knob_at_its_edges_is_taken(knobs, values):
    made = knobs(**values)
    assert {k: getattr(made, k) for k in values} == values
    made.check(SimpleNamespace(max_position_embeddings=64))


T5_PAIR = r"^t5_bias needs .*\(T5: 32 and 128\); got {} and {}"
TUPE_PAIR = r"needs an even .*\(TUPE: 32 and 128\); got {} and {}"


@pytest.mark.parametrize(
    "knobs, values, refused",
    [
        (ShawKnobs, {"max_relative_position": 0}, r"max_relative_position .*\(Shaw et al.: 16\); got 0"),
        (SinusoidalKnobs, {"sinusoidal_scale": 0}, r"sinusoidal_scale must be a positive .*1.0 is Vaswani's"),
        (T5BiasKnobs, {"relative_attention_num_buckets": 0}, r"relative_attention_num_buckets .*\(T5: 32\)"),
        (T5BiasKnobs, {"relative_attention_max_distance": 0}, r"relative_attention_max_distance .*\(T5: 128\)"),
        (TupeKnobs, {"relative_attention_num_buckets": 0}, r"relative_attention_num_buckets .*\(TUPE: 32\)"),
        (TupeKnobs, {"relative_attention_max_distance": 0}, r"relative_attention_max_distance .*\(TUPE: 128\)"),
        *[(*buckets(T5BiasKnobs, b, d), T5_PAIR.format(b, d)) for b, d in [(4, 2), (3, 100), (6, 3)]],
        *[(*buckets(TupeKnobs, b, d), TUPE_PAIR.format(b, d)) for b, d in [(4, 2), (2, 100), (5, 100), (6, 3)]],
        *[
            (*deberta(b, r), rf"position_buckets={b}, max_relative_positions={r}\. Raise max_relative_positions")
            for b, r in [(1, 100), (2, 2), (4, 3), (6, 4)]
        ],
    ],
)
def test_each_knob_past_its_edges_is_refused_with_the_papers_value(knobs, values, refused):
    with pytest.raises(ValueError, match=refused):
        knobs(**values).check(SimpleNamespace(max_position_embeddings=64))


@pytest.mark.parametrize(
    "knobs, encoding, takes",
    [
        (TupeKnobs, None, "'tupe'.*it takes 'tupe_rel_pos', 'tupe_cls_reset'"),
        (EncodingKnobs, "rope", "it takes no knobs"),
    ],
)
def test_unknown_encoding_knobs_are_refused_naming_the_ones_it_takes(knobs, encoding, takes):
    with pytest.raises(ValueError, match=f"has 'also', 'nope', which position_encoding=.*{takes}"):
        knobs.from_dict({"nope": 1, "also": 2}, encoding)
