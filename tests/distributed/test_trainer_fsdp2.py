"""`Trainer` on a model sharded at load (`DistributedConfig(fsdp_size=2)`) trains as one process on the batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_config
from test_distributed_runs import pytestmark, torchrun  # noqa: F401  (its marks: one two-process run at a time, CPU)
from test_remote_code import LOADER
from trainer_fsdp2_worker import train

from roformer_ext import RoFormerExtForMaskedLM

WORKER = Path(__file__).resolve().parent / "trainer_fsdp2_worker.py"


def test_trainer_trains_a_model_sharded_at_load_as_one_process(tmp_path):
    torch.manual_seed(0)
    model = RoFormerExtForMaskedLM(tiny_config(vocab_size=100, intermediate_size=36))  # 100: the 2 processes divide it
    model.save_pretrained(tmp_path / "model")
    torchrun(WORKER, tmp_path / "model", tmp_path / "results.json", tmp_path / "saved")
    results = json.loads((tmp_path / "results.json").read_text())
    expected, trained = train(str(tmp_path / "model"), per_device_batch=8)
    assert len(results["losses"]) == len(expected) == 2
    assert results["losses"] == pytest.approx(expected, abs=1e-5), (results["losses"], expected)
    total = sum(p.numel() for p in model.parameters())
    assert all(abs(n / total - 0.5) <= 0.01 for n in results["local_parameters"]), results["local_parameters"]

    # The sharded save writes one process's files and remote code (not torch's FSDP<name> class), loadable without us
    saved, whole = tmp_path / "saved", tmp_path / "whole"
    trained.save_pretrained(whole)
    assert sorted(p.name for p in saved.iterdir()) == sorted(p.name for p in whole.iterdir())
    auto_maps = [json.loads((folder / "config.json").read_text())["auto_map"] for folder in (saved, whole)]
    assert auto_maps[0] == auto_maps[1] and auto_maps[0]["AutoModelForMaskedLM"].startswith("modeling_roformer_ext.")
    inputs = {"input_ids": torch.randint(5, 100, (2, 16), generator=torch.Generator().manual_seed(1))}
    torch.save(inputs, saved / "inputs.pt")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    command = [sys.executable, "-c", LOADER, str(saved), "AutoModelForMaskedLM"]
    loaded = subprocess.run(command, capture_output=True, text=True, env=env)  # a fresh process without roformer_ext
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    with torch.no_grad():
        reference = trained.eval()(**inputs).logits
    torch.testing.assert_close(torch.load(saved / "remote_output.pt"), reference, atol=1e-4, rtol=0)
