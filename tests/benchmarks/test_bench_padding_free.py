"""Smoke test: benchmarks/bench_padding_free.py runs at a tiny size on real corpora and writes JSON + Markdown.

No timing is asserted; the same-weights check (padding-free against transformers' padded RoFormer) is.
"""

import importlib
import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_padding_free_writes_results(tmp_path):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    bench = importlib.import_module("bench_padding_free")
    # max length 256: the Rotten Tomatoes batch stays below it (its padded-to-max cases are timed), the Chinese
    # reviews reuse them, and the statute batch reaches it (padded to max = padded to the longest).
    bench.main(["--size", "tiny", "--corpora", "rotten_tomatoes", "chinese_sentiment", "statutes",
                "--max-length", "256", "--batch", "4", "--train-batch", "2", "--repeats", "1",
                "--finetune-corpus", "rotten_tomatoes", "--finetune-steps", "2", "--finetune-samples", "40",
                "--out", str(tmp_path)])  # fmt: skip
    result = json.loads((tmp_path / "bench_padding_free.json").read_text())
    corpora = {c["corpus"]: c for c in result["corpora"]}
    assert list(corpora) == ["rotten_tomatoes", "chinese_sentiment", "statutes"]
    for corpus in corpora.values():
        assert corpus["max_abs_diff_encoder"] < 1e-4
        assert abs(corpus["mlm_loss_theirs_padded"] - corpus["mlm_loss_ours_packed"]) < 1e-4
        assert corpus["lengths"]["rows"] > 1000 and 0 < corpus["lengths"]["median"] <= 256
        for mode, sequences in (("inference", 4), ("training", 2)):
            measured = corpus["modes"][mode]
            assert measured["sequences"] == sequences and set(measured["cases"]) == set(bench.CASES)
            for case in measured["cases"].values():
                assert case["ms"] > 0 and case["tokens_per_s"] > 0 and case["time_vs_padding_free"] > 0
            assert measured["cases"]["ours_packed"]["tokens_computed"] == measured["real_tokens"]
    reviews = corpora["chinese_sentiment"]["modes"]["inference"]["cases"]
    assert "timed on rotten_tomatoes" in reviews["ours_max"]["label"]
    statutes = corpora["statutes"]["modes"]["training"]
    assert statutes["longest"] == 256 and "same as padded to the longest" in statutes["cases"]["theirs_max"]["label"]
    assert {row["corpus"] for row in result["targets"]} == {"rotten_tomatoes", "chinese_sentiment"}
    runs = result["finetune"]["runs"]
    assert set(runs) == {"padded to the longest", "padding-free"}
    assert all(0 <= run["test_accuracy"] <= 1 and run["train_seconds"] > 0 for run in runs.values())
    markdown = (tmp_path / "bench_padding_free.md").read_text()
    assert "| ours, padding-free |" in markdown and "#### Speed targets" in markdown and "Command:" in markdown
