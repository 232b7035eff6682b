"""Smoke test: benchmarks/bench_cpu_inference.py runs at a tiny size and writes JSON + Markdown (no timing asserted);
the models it times share one set of weights."""

import importlib
import json
import sys
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def bench_module():
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module("bench_cpu_inference")


def test_bench_cpu_inference_writes_results(tmp_path):
    bench = bench_module()
    bench.main(["--size", "tiny", "--repeats", "1", "--embedding-batches", "2", "--classification-lengths", "24",
                "--classification-batch", "2", "--out", str(tmp_path)])  # fmt: skip
    result = json.loads((tmp_path / "bench_cpu_inference.json").read_text())
    paths = [row["path"] for row in result["results"]]
    assert paths == [name for name in bench.PATHS.values() if "compile" not in name] * 2
    assert all(row["ms"] > 0 for row in result["results"]) and result["fidelity"] == []
    ours = [row for row in result["results"] if row["path"] == "ours, eager"]
    assert [row["speedup_vs_ours_eager"] for row in ours] == [1.0, 1.0]
    markdown = (tmp_path / "bench_cpu_inference.md").read_text()
    assert "| embedding, batch 2 x 16 tokens | ONNX Runtime int8 |" in markdown and "Command:" in markdown


def test_ours_and_theirs_share_the_weights(tmp_path):
    bench = bench_module()
    models = bench.build_models("tiny", 0, tmp_path)
    inputs = bench.random_batch(2, 12, 99, seed=1)
    with torch.no_grad():
        theirs = models["theirs_encoder"](**inputs).last_hidden_state
        torch.testing.assert_close(models["ours_encoder"](**inputs).last_hidden_state, theirs, rtol=0, atol=1e-5)
        theirs = models["theirs_classifier"](**inputs).logits
        torch.testing.assert_close(models["ours_classifier"](**inputs).logits, theirs, rtol=0, atol=1e-5)
