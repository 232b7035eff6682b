"""A saved folder loads through the Auto classes with trust_remote_code where roformer_ext is NOT importable."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import position_sensitive_config, random_inputs, tiny_config

import roformer_ext
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
    """Load `folder` (holding inputs.pt) in a fresh process without roformer_ext; it writes remote_output.pt."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    command = [sys.executable, "-c", LOADER, str(folder), auto_name]
    return subprocess.run(command, capture_output=True, text=True, env=env)


HALF = {"rope_parameters": {"pair_layout": "half"}}
SHAW = {"position_encoding": "shaw", "position_encoding_parameters": {"max_relative_position": 3}}
DEBERTA = {
    "position_encoding": "deberta",
    "position_encoding_parameters": {"position_buckets": 8, "pos_att_type": ["p2c"]},
}
#: Every folder carries these (relative encodings and knob dataclasses are imported inside functions: followed too).
CODE_FILES = (
    "modeling_roformer_ext.py",
    "configuration_roformer_ext.py",
    "rope.py",
    "positions.py",
    "relative_position_encodings.py",
    "encoding_knobs.py",
    "position_encodings.py",
)


@pytest.mark.parametrize(
    "model_class, config",
    [
        (RoFormerExtForMaskedLM, HALF),
        (RoFormerExtForSequenceClassification, HALF),
        (RoFormerExtForMaskedLM, SHAW),
        (RoFormerExtForMaskedLM, DEBERTA),
    ],  # fmt: skip
)
def test_trust_remote_code_in_fresh_process(model_class, config, tmp_path):
    torch.manual_seed(0)
    relative, knobs = "position_encoding" in config, config.get("position_encoding_parameters")
    config = position_sensitive_config(**config) if relative else tiny_config(**config)
    model = model_class(config).eval()
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    for code_file in CODE_FILES:
        assert (folder / code_file).exists(), code_file
    saved = json.loads((folder / "config.json").read_text())
    if relative:  # the knobs come back from position_encoding_parameters, defaults written out
        assert saved["position_encoding_parameters"] == {**config.position_encoding_knobs.to_dict(), **knobs}
    inputs = dict(zip(["input_ids", "attention_mask", "token_type_ids"], random_inputs(), strict=True))
    torch.save(inputs, folder / "inputs.pt")
    result = run_isolated(folder, AUTO_CLASS[model_class], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "transformers_modules" in result.stdout
    with torch.no_grad():
        expected = model(**inputs)[0]
    atol = 1e-5 if relative else 1e-6
    torch.testing.assert_close(torch.load(folder / "remote_output.pt"), expected, atol=atol, rtol=0)


def test_every_head_registers_its_auto_class(tmp_path):
    expected = {auto_name: f"modeling_roformer_ext.{cls.__name__}" for cls, auto_name in AUTO_CLASS.items()}
    expected["AutoConfig"] = "configuration_roformer_ext.RoFormerExtConfig"
    for model_class in AUTO_CLASS:  # whichever head saved it, one folder serves every Auto class
        model_class(tiny_config()).save_pretrained(tmp_path / model_class.__name__)
        assert json.loads((tmp_path / model_class.__name__ / "config.json").read_text())["auto_map"] == expected


def test_package_sources_import_siblings_relatively():
    """Remote code follows only `from .sibling import x`; absolute package imports would become pip requirements."""
    folder = Path(roformer_ext.__file__).parent
    remote_files = [path for path in folder.glob("*.py") if path.name not in ("cli.py", "export.py")]  # never copied
    assert len(remote_files) >= 5
    for path in remote_files:
        absolute = ("from roformer_ext", "import roformer_ext", "from . import")
        assert not [line for line in path.read_text().splitlines() if line.strip().startswith(absolute)], path.name
