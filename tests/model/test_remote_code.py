"""A saved folder loads through the Auto classes with trust_remote_code where roformer_ext is NOT importable."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import position_sensitive_config, random_inputs, tiny_config

from roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtForMultipleChoice,
    RoFormerExtForQuestionAnswering,
    RoFormerExtForSequenceClassification,
    RoFormerExtForTokenClassification,
    RoFormerExtModel,
)

AUTO_CLASS = {
    RoFormerExtModel: "AutoModel",
    RoFormerExtForMaskedLM: "AutoModelForMaskedLM",
    RoFormerExtForCausalLM: "AutoModelForCausalLM",
    RoFormerExtForSequenceClassification: "AutoModelForSequenceClassification",
    RoFormerExtForTokenClassification: "AutoModelForTokenClassification",
    RoFormerExtForQuestionAnswering: "AutoModelForQuestionAnswering",
    RoFormerExtForMultipleChoice: "AutoModelForMultipleChoice",
}

LOADER = textwrap.dedent(
    """
    import sys
    sys.modules["roformer_ext"] = None  # the package must not be importable here
    import torch, transformers
    folder, auto_name = sys.argv[1], sys.argv[2]
    model = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True).eval()
    assert not type(model).__module__.startswith("roformer_ext"), type(model).__module__
    inputs = torch.load(folder + "/inputs.pt")
    with torch.no_grad():
        out = model(**inputs)
    torch.save(out[0], folder + "/remote_output.pt")
    print(type(model).__module__, type(model).__name__)
    """
)


def run_isolated(folder, auto_name: str, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    return subprocess.run(
        [sys.executable, "-c", LOADER, str(folder), auto_name], capture_output=True, text=True, env=env
    )


@pytest.mark.parametrize("model_class", [RoFormerExtForMaskedLM, RoFormerExtForSequenceClassification])
def test_trust_remote_code_in_fresh_process(model_class, tmp_path):
    torch.manual_seed(0)
    model = model_class(tiny_config(rope_parameters={"pair_layout": "half"})).eval()
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    input_ids, attention_mask, token_type_ids = random_inputs()
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    torch.save(inputs, folder / "inputs.pt")
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"][AUTO_CLASS[model_class]].startswith("modeling_roformer_ext.")
    for code_file in ("modeling_roformer_ext.py", "configuration_roformer_ext.py", "rope.py", "positions.py"):
        assert (folder / code_file).exists(), code_file
    result = run_isolated(folder, AUTO_CLASS[model_class], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "transformers_modules" in result.stdout
    with torch.no_grad():
        expected = model(**inputs)[0]
    torch.testing.assert_close(torch.load(folder / "remote_output.pt"), expected, atol=1e-6, rtol=0)


def test_every_head_registers_its_auto_class(tmp_path):
    for model_class, auto_name in AUTO_CLASS.items():
        folder = tmp_path / model_class.__name__
        model_class(tiny_config()).save_pretrained(folder)
        auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
        assert auto_map[auto_name] == f"modeling_roformer_ext.{model_class.__name__}"
        assert set(auto_map) == {"AutoConfig", *AUTO_CLASS.values()}  # one folder serves every Auto class
        assert auto_map["AutoConfig"] == "configuration_roformer_ext.RoFormerExtConfig"


def test_package_sources_import_siblings_relatively():
    """Remote code follows only `from .sibling import x`; absolute package imports would become pip requirements."""
    import pathlib

    import roformer_ext

    folder = pathlib.Path(roformer_ext.__file__).parent
    patterns = (
        "configuration_*.py",
        "modeling_*.py",
        "tokenization_*.py",
        "*processing_*.py",
        "rope.py",
        "positions.py",
        "position_schemes.py",
        "linear_attention.py",
    )
    remote_files = sorted({p for pattern in patterns for p in folder.glob(pattern)})
    assert len(remote_files) >= 5
    for path in remote_files:
        import_lines = [line.strip() for line in path.read_text().splitlines()]
        import_lines = [line for line in import_lines if line.startswith(("from ", "import "))]
        absolute = ("from roformer_ext", "import roformer_ext", "from . import")
        assert not [line for line in import_lines if line.startswith(absolute)], path.name


@pytest.mark.parametrize(
    "encoding, knobs",
    [("shaw", {"max_relative_position": 3}), ("deberta", {"position_buckets": 8, "pos_att_type": ["p2c"]})],
)
def test_trust_remote_code_with_a_relative_encoding_and_its_knobs(encoding, knobs, tmp_path):
    """The relative encodings (imported by the registry lookup, not at the top) and the knob dataclasses travel with
    the folder; the knobs come back from position_encoding_parameters, and the outputs are the same."""
    torch.manual_seed(0)
    config = position_sensitive_config(position_encoding=encoding, position_encoding_parameters=knobs)
    model = RoFormerExtForMaskedLM(config).eval()
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    for code_file in ("relative_position_encodings.py", "encoding_knobs.py", "position_encodings.py"):
        assert (folder / code_file).exists(), code_file
    saved = json.loads((folder / "config.json").read_text())["position_encoding_parameters"]
    assert saved == {**config.position_encoding_knobs.to_dict(), **knobs}
    input_ids, attention_mask, token_type_ids = random_inputs()
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    torch.save(inputs, folder / "inputs.pt")
    result = run_isolated(folder, "AutoModelForMaskedLM", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    with torch.no_grad():
        expected = model(**inputs)[0]
    torch.testing.assert_close(torch.load(folder / "remote_output.pt"), expected, atol=1e-5, rtol=0)
