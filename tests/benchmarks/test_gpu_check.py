"""`benchmarks/gpu/check.sh --dry-run` on CPU: every stage, CUDA-only parts skipped with a reason, failing exits."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STAGES = ["environment", "gpu_tests", "packed_varlen", "packed_speed", "modernbert", "bf16", "benchmark", "run_mlm"]


def run_check(out: Path, *args: str, pythonpath: str = "") -> tuple[int, dict, str]:
    """check.sh as a user runs it; (exit code, check.json, check.md)."""
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath}
    command = ["bash", "benchmarks/gpu/check.sh", "--dry-run", "--out", str(out), *args]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert (out / "check.json").exists(), result.stdout[-2000:] + result.stderr[-4000:]
    return result.returncode, json.loads((out / "check.json").read_text()), (out / "check.md").read_text()


def stages_by_name(report: dict) -> dict[str, dict]:
    assert [stage["name"] for stage in report["stages"]] == STAGES
    for stage in report["stages"]:
        assert stage["status"] in {"passed", "failed", "skipped"}, stage
        assert stage["status"] == "passed" or stage["reason"], stage
        assert stage["seconds"] >= 0 and stage["budget_s"] > 0
    return {stage["name"]: stage for stage in report["stages"]}


def test_dry_run_runs_every_stage_on_cpu(tmp_path):
    code, report, markdown = run_check(tmp_path)
    assert code == 0, report
    stages = stages_by_name(report)
    assert (report["mode"], report["device"], report["ok"]) == ("dry-run", "cpu", True)
    assert report["counts"] == {"passed": 8, "failed": 0, "skipped": 0}
    tests = stages["gpu_tests"]["details"]
    assert tests["passed"] == [] and tests["skipped"] and set(tests["skipped"].values()) == {"needs CUDA"}
    packed = stages["packed_varlen"]["details"]
    assert set(packed["cases"]) == {"sdpa, encoder", "sdpa, decoder"}
    assert packed["skipped"] == {"flash_attention_2": "needs CUDA"}
    assert max(case["max_abs_diff"] for case in packed["cases"].values()) <= 1e-5
    assert max(case["grad_rel"] for case in packed["cases"].values()) <= 1e-4  # gradients compared too
    assert all(case["varlen_calls"] == 0 for case in packed["cases"].values())  # the CPU path: per sequence
    speed = stages["packed_speed"]["details"]
    assert set(speed["cases"]) == {"sdpa, row", "sdpa, reviews"} and "CUDA only" in speed["skipped"]["flex_attention"]
    assert len(speed["lengths"]["reviews"]) == 6 and speed["lengths"]["row"] == [5, 9, 3, 8]
    for case in speed["cases"].values():
        assert case["loss_rel"] <= 1e-5 and case["packed_training_ms"] > 0 and case["inference_packed_over_padded"] > 0
    modernbert = stages["modernbert"]["details"]
    assert abs(modernbert["sizes"]["base_ratio"] - 1) <= 0.02
    assert modernbert["modernbert_time_over_ours_packed"]["reviews training"]["modernbert_local"] > 0
    bf16 = stages["bf16"]["details"]
    assert bf16["training"]["loss_rel"] <= 2e-2 and bf16["generate"]["logits_rel"] <= 3e-2
    rows = stages["benchmark"]["details"]["rows"]
    assert [(row["mode"], row["seq"]) for row in rows] == [("inference", 16), ("training", 16)]
    assert rows[0]["speedup"] > 0 and rows[1]["speedup"] > 0
    metrics = stages["run_mlm"]["details"]["metrics"]
    assert metrics["train_loss"] > 0 and metrics["eval_loss"] > 0
    assert set(report["tolerances"]) >= {"packed_vs_padded_bf16", "bf16_loss_rel", "bf16_logits_rel"}
    files = {path.name for path in tmp_path.iterdir()}
    benches = {f"bench_{name}.{ext}" for name in ("model", "modernbert") for ext in ("json", "md")}
    assert files == {"check.json", "check.md", "gpu_tests.log", "run_mlm.log", "run_mlm_results.json", *benches}
    assert markdown.startswith("# GPU check: dry-run, cpu") and "**PASSED**: 8 passed, 0 failed, 0 skipped" in markdown
    for name in STAGES:
        assert f"| {name} | {stages[name]['status']} |" in markdown
    assert "### transformers RoFormer vs ours: tiny" in markdown and "### Ours vs ModernBERT" in markdown  # tables


def test_a_missed_tolerance_fails_the_run(tmp_path):
    code, report, markdown = run_check(tmp_path, "--tolerance-scale", "0", "--stages", "bf16")
    assert code == 1
    stages = stages_by_name(report)
    assert stages["bf16"]["status"] == "failed" and "loss_rel" in stages["bf16"]["reason"]
    assert stages["environment"]["status"] == "passed"  # always runs
    not_selected = [name for name in STAGES if name not in ("environment", "bf16")]
    assert {stages[name]["reason"] for name in not_selected} == {"not selected (--stages)"}
    assert report["ok"] is False and "**FAILED**" in markdown and "| bf16 | failed |" in markdown


@pytest.fixture(scope="module")
def broken_environment(tmp_path_factory) -> tuple[int, dict, str]:
    """A transformers that roformer_ext cannot import from (a GPU image's older release, reduced to its version)."""
    stub = tmp_path_factory.mktemp("stub")
    (stub / "transformers").mkdir()
    (stub / "transformers" / "__init__.py").write_text('__version__ = "5.17.0"\n')
    return run_check(tmp_path_factory.mktemp("out"), pythonpath=str(stub))


def test_an_environment_without_roformer_ext_stops_the_other_stages(broken_environment):
    code, report, _ = broken_environment
    assert code == 1
    stages = stages_by_name(report)
    assert stages["environment"]["status"] == "failed"
    reason = stages["environment"]["reason"]
    assert "roformer_ext does not import" in reason and "fetch_wheels.sh" in reason  # the fix is named
    assert stages["environment"]["details"]["transformers"] == "5.17.0"
    assert {stages[name]["reason"] for name in STAGES[1:]} == {"the environment stage failed"}


def test_validate_report_rejects_a_broken_schema(broken_environment):
    sys.path.insert(0, str(REPO / "benchmarks" / "gpu"))
    check = importlib.import_module("check")
    report = broken_environment[1]
    check.validate_report(report)
    for breakage, message in [
        (lambda r: r["stages"][1].pop("reason"), "without a reason"),
        (lambda r: r["stages"][2].update(status="ok"), "status 'ok'"),
        (lambda r: r["stages"].pop(), "stages"),
        (lambda r: r.update(ok=True), "ok disagrees"),
        (lambda r: r.pop("tolerances"), "missing key 'tolerances'"),
    ]:
        broken = json.loads(json.dumps(report))
        breakage(broken)
        with pytest.raises(ValueError, match=message):
            check.validate_report(broken)
