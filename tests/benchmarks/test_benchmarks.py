"""Smoke tests: both benchmark scripts run at a tiny size and write JSON + Markdown with the expected fields.

The scripts' `main(argv)` runs in this process (a fresh interpreter per script would pay the imports again);
bench_model's peak-memory cases still run in their own processes. No timing is asserted.
"""

import importlib
import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_script(name: str, *args: str) -> dict:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name.removesuffix(".py")).main(list(args))


def test_bench_rope_writes_results(tmp_path):
    run_script(
        "bench_rope.py",
        "--batch",
        "2",
        "--seq",
        "16",
        "--heads",
        "2",
        "--head-dim",
        "8",
        "--repeats",
        "2",
        "--model-size",
        "tiny",
        "--model-repeats",
        "1",
        "--out",
        str(tmp_path),
    )
    result = json.loads((tmp_path / "bench_rope.json").read_text())
    names = {row["implementation"] for row in result["results"]}
    assert {
        "copy (lower bound)",
        "transformers RoFormer",
        "ours, interleaved",
        "ours, half",
        "plain formula, half",
    } <= names
    for row in result["results"]:
        assert row["ms"] > 0 and row["speedup_vs_transformers"] > 0 and row["time_vs_copy"] > 0
    assert result["max_abs_diff_ours_vs_transformers"] < 1e-4
    assert result["max_abs_score_diff_fast_vs_plain_half"] < 1e-4
    projection = {row["implementation"]: row for row in result["projection"]["results"]}
    assert {
        "projection alone (lower bound)",
        "transformers RoFormer",
        "ours, half",
    } <= projection.keys()
    assert result["projection"]["max_abs_score_diff_half_vs_plain_formula"] < 1e-5
    assert [row["layout"] for row in result["encoder"]["results"]] == ["interleaved", "half"]
    assert result["encoder"]["max_abs_diff_half_vs_interleaved"] < 1e-5  # the same function in both layouts
    assert result["machine"]["torch"] and result["load_average_before"] is not None
    markdown = (tmp_path / "bench_rope.md").read_text()
    assert "| transformers RoFormer |" in markdown and "### Whole encoder forward" in markdown


def test_bench_model_writes_results(tmp_path):
    run_script(
        "bench_model.py",
        "--size",
        "tiny",
        "--seqs",
        "16",
        "--tokens",
        "32",
        "--repeats",
        "1",
        "--gemm-size",
        "128",
        "--out",
        str(tmp_path),
    )
    result = json.loads((tmp_path / "bench_model.json").read_text())
    assert result["size"] == "tiny" and set(result["gemm_gflops"]) == {"fp32", "bf16"}
    assert result["max_abs_diff_encoder"] < 1e-4  # same weights through the converter
    assert [(r["mode"], r["seq"], r["batch"]) for r in result["results"]] == [("inference", 16, 2), ("training", 16, 2)]
    for row in result["results"]:
        for field in ("theirs_ms", "ours_ms", "speedup", "ours_gflops", "flops", "memory_ratio"):
            assert row[field] > 0, field
        for impl in ("theirs", "ours"):
            memory = row[f"{impl}_memory"]
            assert memory["peak_rss_mb"] > 0 and memory["step_peak_mb"] >= 0, memory
    training = result["results"][1]
    assert training["ours_sparse_ms"] > 0 and training["sparse_speedup"] > 0
    assert training["ours_sparse_memory"]["peak_rss_mb"] > 0
    markdown = (tmp_path / "bench_model.md").read_text()
    assert "#### Inference" in markdown and "#### Training" in markdown and "Command:" in markdown


def test_bench_model_linear_attention(tmp_path):
    run_script(
        "bench_model.py",
        "--size",
        "tiny",
        "--attention",
        "linear",
        "--seqs",
        "16",
        "64",
        "--tokens",
        "64",
        "--repeats",
        "1",
        "--gemm-size",
        "128",
        "--no-memory",
        "--out",
        str(tmp_path),
    )
    result = json.loads((tmp_path / "bench_model_linear.json").read_text())
    assert [r["seq"] for r in result["results"]] == [16, 64]
    for row in result["results"]:
        for name in ("linear", "linear_causal", "softmax"):
            assert row[f"{name}_ms"] > 0 and row[f"{name}_us_per_token"] > 0
    assert "| causal ms |" in (tmp_path / "bench_model_linear.md").read_text()


def test_profile_ops_lists_both_models(capsys):
    run_script("profile_ops.py", "--size", "tiny", "--seq", "16", "--batch", "2", "--rows", "3")
    printed = capsys.readouterr().out
    assert "transformers: inference, seq 16" in printed and "ours: inference, seq 16" in printed
    assert "aten::" in printed  # the operator tables


def test_bench_model_memory_only(tmp_path):
    run_script(
        "bench_model.py",
        "--size",
        "tiny",
        "--seqs",
        "16",
        "--tokens",
        "32",
        "--modes",
        "training",
        "--memory-only",
        "--gemm-size",
        "128",
        "--out",
        str(tmp_path),
    )
    result = json.loads((tmp_path / "bench_model.json").read_text())
    (row,) = result["results"]
    assert row["mode"] == "training" and "theirs_ms" not in row  # nothing timed
    for impl in ("theirs", "ours", "ours_sparse"):
        assert row[f"{impl}_memory"]["peak_rss_mb"] > 0
    assert row["memory_ratio"] > 0
    assert "#### Peak memory only" in (tmp_path / "bench_model.md").read_text()


def test_profile_ops_linear_attention(capsys):
    run_script(
        "profile_ops.py", "--size", "tiny", "--attention", "linear", "--seq", "16", "--batch", "1", "--rows", "3"
    )
    assert "ours (linear): inference, seq 16" in capsys.readouterr().out


def test_bench_packed_attention_writes_results(tmp_path):
    run_script(
        "bench_packed_attention.py",
        "--size",
        "tiny",
        "--corpora",
        "blocks",
        "--parts",
        "attention",
        "--repeats",
        "1",
        "--batch",
        "4",
        "--block-length",
        "16",
        "--out",
        str(tmp_path),
    )
    text = (tmp_path / "bench_packed_attention.md").read_text()
    assert (
        "per_sequence_sdpa: one split, 4D pieces (now)" in text and "previous / now" in text and "Load average" in text
    )
    assert json.loads((tmp_path / "bench_packed_attention.json").read_text())


def test_bench_packed_compile_writes_results(tmp_path):
    run_script(
        "bench_packed_compile.py",
        "--size",
        "tiny",
        "--batch",
        "4",
        "--batches",
        "1",
        "--repeats",
        "1",
        "--out",
        str(tmp_path),
    )
    text = (tmp_path / "bench_packed_compile.md").read_text()
    assert "| torch.compile |" in text and "Compile warm-up" in text
    result = json.loads((tmp_path / "bench_packed_compile.json").read_text())
    assert result["median_step_ms"]["eager"] > 0 and result["median_step_ms"]["compiled"] > 0
    assert result["graph_breaks"] >= 1 and result["graphs"] >= 1  # per-sequence SDPA runs eagerly between graphs


def test_bench_before_after_equal_code_gives_equal_outputs(tmp_path):
    """This checkout against a copy of itself: the same weights give bit-equal outputs in every case."""
    # In its own process: importing the older copy registers its classes with the Auto classes (exist_ok), which
    # would leave this worker's AutoModel / AutoTokenizer returning that copy's classes.
    src = Path(__file__).resolve().parents[2] / "src"
    args = ["--old-src", str(src), "--size", "tiny", "--seqs", "16", "--tokens", "32", "--reviews", "3"]
    args += ["--repeats", "1", "--layouts", "half", "--out", str(tmp_path)]
    subprocess.run([sys.executable, str(BENCHMARKS / "bench_before_after.py"), *args], check=True, cwd=BENCHMARKS)
    result = json.loads((tmp_path / "bench_before_after.json").read_text())
    assert [(row["case"].split()[0], row["mode"]) for row in result["rows"]] == [
        ("16", "inference"),
        ("16", "training"),
        ("packed", "inference"),
        ("packed", "training"),
    ]
    assert all(row["max_diff"] == 0 and row["old_ms"] > 0 and row["new_ms"] > 0 for row in result["rows"])
    assert "| half | 16 x 2 | inference |" in (tmp_path / "bench_before_after.md").read_text()
