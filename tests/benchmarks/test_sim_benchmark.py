"""Smoke test: benchmarks/bench_sim_generation.py runs at a tiny size and writes JSON + Markdown (no timing asserted)."""

import importlib
import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_sim_generation_writes_results(tmp_path):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    bench = importlib.import_module("bench_sim_generation")
    bench.main(["--size", "tiny", "--candidates", "6", "--new-tokens", "5", "--hand-loop-candidates", "2",
                "--out", str(tmp_path)])  # fmt: skip
    result = json.loads((tmp_path / "bench_sim_generation.json").read_text())
    assert (result["candidates"], result["new_tokens"], result["hand_loop_candidates_run"]) == (6, 5, 2)
    rows = {row["implementation"].split(":")[0]: row for row in result["results"]}
    assert set(rows) == {"ours", "hand loop", "transformers RoFormerForCausalLM"} and len(result["results"]) == 4
    assert all(row["seconds"] > 0 for row in result["results"]) and result["results"][0]["vs_ours"] == 1.0
    markdown = (tmp_path / "bench_sim_generation.md").read_text()
    assert "| ours: generate(), batched, KV cache, UniLM |" in markdown and "Command:" in markdown


def test_the_three_share_one_set_of_weights():
    """The hand loop's MLM model is our generator under the UniLM mask; transformers' model is ours when no token
    is source (all segment 1: plain causal attention for both)."""
    import torch

    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    bench = importlib.import_module("bench_sim_generation")
    theirs, ours, mlm = bench.build_models("tiny", seed=0)
    ids = torch.tensor([[2, 10, 11, 12, 3, 20, 21]])
    types = torch.tensor([[0, 0, 0, 0, 0, 1, 1]])
    ones = torch.ones_like(ids)
    with torch.no_grad():
        expected = mlm(ids, attention_mask=bench.unilm_attention_mask(types), token_type_ids=types).logits
        torch.testing.assert_close(ours(ids, token_type_ids=types).logits, expected, rtol=0, atol=1e-5)
        causal = theirs(ids, token_type_ids=ones).logits
        torch.testing.assert_close(ours(ids, token_type_ids=ones).logits, causal, rtol=0, atol=1e-5)
