"""Smoke test: benchmarks/bench_modernbert.py --quick runs ours and transformers' ModernBERT at matched size on the
bundled corpora's length distributions and writes JSON + Markdown. No timing is asserted."""

import importlib
import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_modernbert_quick_writes_results(tmp_path):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    bench = importlib.import_module("bench_modernbert")
    bench.main(["--quick", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench_modernbert.json").read_text())
    sizes = result["sizes"]
    assert abs(sizes["modernbert"]["base"] / sizes["ours"]["base"] - 1) <= 0.02  # matched within 2 %
    assert sizes["modernbert"]["attn_implementation"] == "sdpa"
    layer_types = sizes["modernbert"]["layer_types"]
    assert set(layer_types["modernbert_global"]) == {"full_attention"}
    assert set(layer_types["modernbert_local"]) == {"full_attention", "sliding_attention"}
    batches = {batch["batch"]: batch for batch in result["batches"]}
    assert list(batches) == ["reviews", "statutes_64", "statutes_128"]
    assert batches["reviews"]["sequences"] == 6
    for limit in (64, 128):
        statutes = batches[f"statutes_{limit}"]
        assert statutes["longest"] == limit and statutes["real_tokens"] <= 256
    for batch in batches.values():
        for mode in ("inference", "training"):
            cases = batch["modes"][mode]
            assert set(cases) == set(bench.MODELS)
            assert all(case["ms"] > 0 and case["tokens_per_s"] > 0 for case in cases.values())
            assert cases["modernbert_local"]["time_vs_ours_packed"] > 0
    markdown = (tmp_path / "bench_modernbert.md").read_text()
    assert "ModernBERT / ours = " in markdown and "| statutes_128 | training |" in markdown and "Command:" in markdown
