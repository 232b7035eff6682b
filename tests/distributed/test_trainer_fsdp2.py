"""transformers' `Trainer` with a model sharded at load by `DistributedConfig(fsdp_size=2)` (FSDP2, the model's plan)
on 2 CPU processes under torchrun: the losses of one process on the whole batch, half the parameters per process."""

import json
from pathlib import Path

import pytest
import torch
from test_distributed_runs import torchrun
from trainer_fsdp2_common import train

from roformer_ext import RoFormerExtConfig, RoFormerExtForMaskedLM

WORKER = Path(__file__).resolve().parent / "trainer_fsdp2_worker.py"
pytestmark = [
    pytest.mark.xdist_group("two_processes"),
    pytest.mark.skipif(torch.accelerator.is_available(), reason="the runs compare CPU processes (gloo)"),
]


def test_trainer_trains_a_model_sharded_at_load_as_one_process(tmp_path):
    torch.manual_seed(0)
    config = RoFormerExtConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=36
    )  # fmt: skip  (a vocabulary the 2 processes divide)
    model = RoFormerExtForMaskedLM(config)
    model.save_pretrained(tmp_path / "model")
    torchrun(WORKER, tmp_path / "model", tmp_path / "results.json")
    results = json.loads((tmp_path / "results.json").read_text())
    expected, _ = train(str(tmp_path / "model"), per_device_batch=8)
    assert len(results["losses"]) == len(expected) == 2
    assert results["losses"] == pytest.approx(expected, abs=1e-5), (results["losses"], expected)
    total = sum(p.numel() for p in model.parameters())
    assert all(abs(n / total - 0.5) <= 0.01 for n in results["local_parameters"]), results["local_parameters"]
