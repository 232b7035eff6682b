"""2 CPU processes under torchrun: run_distributed.py's DDP / FSDP2 / TP against one process; TP per encoding."""

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_config
from test_vision_models import mixed_batch, vision_config  # tests/vision, on the path through conftest

from roformer_ext import (
    RoFormerExtConfig,
    RoFormerExtForMaskedLM,
    RoFormerExtForSequenceClassification,
    RoFormerExtVisionTextForMaskedLM,
)
from roformer_ext.conversion.cli import main as convert
from roformer_ext.conversion.pair_layout import convert_pair_layout

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "distributed" / "run_distributed.py"
WORKER = Path(__file__).resolve().parent / "tp_encodings_worker.py"
FIXTURE = ROOT / "tests" / "fixtures" / "original_tf" / "roformer_v1"
#: Sharded training losses against one process (measured up to 1.9e-6 on 4 steps); tensor-parallel logits (partial
#: sums in another order: measured up to 1.3e-5 on logits of magnitude ~10).
LOSS_ATOL, LOGITS_ATOL = 1e-5, 1e-4

pytestmark = [
    pytest.mark.xdist_group("two_processes"),  # never beside another two-process run: 2 cores, gloo rendezvous
    pytest.mark.skipif(torch.accelerator.is_available(), reason="the runs compare CPU processes (gloo)"),
]


def torchrun(*args: str | Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = subprocess.run([*command, *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    """The bert4keras RoFormer v1 fixture converted (hidden 64, 4 heads, 2 layers, vocab 128)."""
    out = tmp_path_factory.mktemp("converted") / "roformer_v1"
    assert convert(["original", str(FIXTURE), str(out)]) == 0
    return out


def run_example(converted_folder: Path, out: Path, task: str, modes: str) -> dict:
    flags = f"--task {task} --modes {modes} --no_dropout".split()
    result = torchrun(SCRIPT, "--model_name_or_path", converted_folder, "--output_dir", out, *flags)
    report = json.loads((out / "results.json").read_text())
    assert report["world_size"] == 2 and list(report["modes"]) == modes.split(",")
    for mode in report["modes"]:
        assert f"[{mode}] parameters held per process:" in result.stdout
    return report


def check_training(result: dict, share: float) -> None:
    assert len(result["losses"]) == 4 and result["losses"] != result["losses"][:1] * 4  # it trained
    assert result["max_abs_diff_to_single_process"] <= LOSS_ATOL, result
    assert all(abs(s - share) <= 0.01 for s in result["local_share"]), result["local_share"]


@pytest.mark.parametrize("task, modes", [("mlm", "ddp,fsdp2,tp"), ("classification", "fsdp2,tp")])
def test_example_matches_one_process(converted, tmp_path, task, modes):
    """The masked LM in the half pair layout (q/k rows reordered per head, not per shard) and a classifier."""
    torch.manual_seed(0)
    folder = tmp_path / task
    if task == "mlm":
        convert_pair_layout(RoFormerExtForMaskedLM.from_pretrained(converted), "half").save_pretrained(folder)
    else:
        RoFormerExtForSequenceClassification.from_pretrained(converted, num_labels=3).save_pretrained(folder)
    report = run_example(folder, tmp_path / "out", task, modes)
    if "ddp" in modes:
        check_training(report["modes"]["ddp"], share=1.0)
    check_training(report["modes"]["fsdp2"], share=0.5)
    assert report["modes"]["fsdp2"]["reload_max_abs_diff"] == 0.0
    tp = report["modes"]["tp"]
    assert tp["max_abs_diff_to_single_process"] <= LOGITS_ATOL, tp
    assert tp["reload_max_abs_diff"] <= LOGITS_ATOL and tp["saved_weights_max_abs_diff"] == 0.0, tp
    # heads, intermediate and vocabulary split in two; norms, token types and the MLM transform stay whole
    assert all(0.5 <= s <= 0.6 for s in tp["local_share"]), tp["local_share"]


ENCODINGS = {
    "rope_half": dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "pair_layout": "half"}),
    "linear_attention": dict(attention_type="linear"),
    "shaw": dict(position_encoding="shaw"),
    "alibi": dict(position_encoding="alibi"),
    "t5_bias": dict(position_encoding="t5_bias"),
}


def test_tensor_parallel_per_position_encoding(tmp_path):
    """Each encoding and the vision-text model work on each process's heads; ALiBi and T5 biases are refused."""
    folders = {}
    for name, overrides in ENCODINGS.items():
        torch.manual_seed(0)
        config = tiny_config(attn_implementation="sdpa", **overrides)
        folders[name] = tmp_path / name
        RoFormerExtForMaskedLM(config).save_pretrained(folders[name])
    for scheme in ("mrope", "rope_tie"):  # the vision-text family: its configuration inherits the plans
        torch.manual_seed(0)
        folders[f"vision_{scheme}"] = tmp_path / f"vision_{scheme}"
        RoFormerExtVisionTextForMaskedLM(vision_config(scheme)).save_pretrained(folders[f"vision_{scheme}"])
        torch.save(mixed_batch(), folders[f"vision_{scheme}"] / "inputs.pt")  # text, an image, text, a video, text
    torchrun(WORKER, tmp_path / "results.json", *folders.values())
    results = {name: json.loads((tmp_path / "results.json").read_text())[str(folders[name])] for name in folders}
    for name in ("rope_half", "linear_attention", "shaw", "vision_mrope", "vision_rope_tie"):
        assert results[name].get("max_abs_diff", 1.0) <= 1e-5, (name, results[name])
    for name in ("alibi", "t5_bias"):
        assert "adds one term per attention head" in results[name].get("error", ""), (name, results[name])
        assert "holds 2 of the 4 heads (tensor parallel)" in results[name]["error"]


def test_fsdp2_refuses_tied_embeddings_that_do_not_divide(monkeypatch):
    """torch 2.13's FSDP2 trains tied embeddings wrongly when the processes do not divide the vocabulary."""
    monkeypatch.syspath_prepend(str(SCRIPT.parents[1]))  # examples/: run_distributed.py imports common.distributed
    check = runpy.run_path(str(SCRIPT))["check_fsdp_vocabulary"]  # not run as __main__
    with pytest.raises(ValueError, match=r"resize_token_embeddings\(pad_to_multiple_of=2\)"):
        check(RoFormerExtConfig(vocab_size=99, tie_word_embeddings=True), 2)
    check(RoFormerExtConfig(vocab_size=100, tie_word_embeddings=True), 2)
    check(RoFormerExtConfig(vocab_size=99, tie_word_embeddings=False), 2)
