"""The benchmark scripts' `main(argv)` at a tiny size write JSON + Markdown; same-weights checks, no timings."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def bench(name: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def run_script(name: str, flags: str, out: Path | None = None):
    """`name.main(flags...)`, writing into `out`; the script's module."""
    module = bench(name)
    module.main(flags.split() + ([] if out is None else ["--out", str(out)]))
    return module


def results(out: Path, name: str) -> tuple[dict, str]:
    return json.loads((out / f"{name}.json").read_text()), (out / f"{name}.md").read_text()


def test_bench_rope_writes_results(tmp_path):
    flags = "--batch 2 --seq 16 --heads 2 --head-dim 8 --repeats 2 --model-size tiny --model-repeats 1"
    run_script("bench_rope", flags, tmp_path)
    result, markdown = results(tmp_path, "bench_rope")
    names = {row["implementation"] for row in result["results"]}
    assert {"copy (lower bound)", "transformers RoFormer", "ours, interleaved"} <= names
    assert {"ours, half", "plain formula, half"} <= names
    for row in result["results"]:
        assert row["ms"] > 0 and row["speedup_vs_transformers"] > 0 and row["time_vs_copy"] > 0
    assert result["max_abs_diff_ours_vs_transformers"] < 1e-4
    assert result["max_abs_score_diff_fast_vs_plain_half"] < 1e-4
    projection = {row["implementation"] for row in result["projection"]["results"]}
    assert {"projection alone (lower bound)", "transformers RoFormer", "ours, half"} <= projection
    assert result["projection"]["max_abs_score_diff_half_vs_plain_formula"] < 1e-5
    assert [row["layout"] for row in result["encoder"]["results"]] == ["interleaved", "half"]
    assert result["encoder"]["max_abs_diff_half_vs_interleaved"] < 1e-5  # the same function in both layouts
    assert result["machine"]["torch"] and result["load_average_before"] is not None
    assert "| transformers RoFormer |" in markdown and "### Whole encoder forward" in markdown


def test_bench_model_writes_results(tmp_path):
    run_script("bench_model", "--size tiny --seqs 16 --tokens 32 --repeats 1 --gemm-size 128", tmp_path)
    result, markdown = results(tmp_path, "bench_model")
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
    assert "#### Inference" in markdown and "#### Training" in markdown and "Command:" in markdown


def test_bench_model_linear_attention(tmp_path):
    flags = "--size tiny --attention linear --seqs 16 64 --tokens 64 --repeats 1 --gemm-size 128 --no-memory"
    run_script("bench_model", flags, tmp_path)
    result, markdown = results(tmp_path, "bench_model_linear")
    assert [r["seq"] for r in result["results"]] == [16, 64]
    for row in result["results"]:
        for name in ("linear", "linear_causal", "softmax"):
            assert row[f"{name}_ms"] > 0 and row[f"{name}_us_per_token"] > 0
    assert "| causal ms |" in markdown


def test_bench_model_memory_only(tmp_path):
    flags = "--size tiny --seqs 16 --tokens 32 --modes training --memory-only --gemm-size 128"
    run_script("bench_model", flags, tmp_path)
    result, markdown = results(tmp_path, "bench_model")
    (row,) = result["results"]
    assert row["mode"] == "training" and "theirs_ms" not in row  # nothing timed
    for impl in ("theirs", "ours", "ours_sparse"):
        assert row[f"{impl}_memory"]["peak_rss_mb"] > 0
    assert row["memory_ratio"] > 0 and "#### Peak memory only" in markdown


def test_profile_ops_lists_both_models_and_linear_attention(capsys):
    run_script("profile_ops", "--size tiny --seq 16 --batch 2 --rows 3")
    printed = capsys.readouterr().out
    assert "transformers: inference, seq 16" in printed and "ours: inference, seq 16" in printed
    assert "aten::" in printed  # the operator tables
    run_script("profile_ops", "--size tiny --attention linear --seq 16 --batch 1 --rows 3")
    assert "ours (linear): inference, seq 16" in capsys.readouterr().out


def test_bench_packed_attention_writes_results(tmp_path):
    flags = "--size tiny --corpora blocks --parts attention --repeats 1 --batch 4 --block-length 16"
    run_script("bench_packed_attention", flags, tmp_path)
    result, text = results(tmp_path, "bench_packed_attention")
    assert "per_sequence_sdpa: one split, 4D pieces (now)" in text and "previous / now" in text
    assert "Load average" in text and result


def test_bench_packed_compile_writes_results(tmp_path):
    run_script("bench_packed_compile", "--size tiny --batch 4 --batches 1 --repeats 1", tmp_path)
    result, text = results(tmp_path, "bench_packed_compile")
    assert "| torch.compile |" in text and "Compile warm-up" in text
    assert result["median_step_ms"]["eager"] > 0 and result["median_step_ms"]["compiled"] > 0
    assert result["graph_breaks"] >= 1 and result["graphs"] >= 1  # per-sequence SDPA runs eagerly between graphs


def test_bench_before_after_equal_code_gives_equal_outputs(tmp_path):
    """This checkout against a copy of itself: the same weights give bit-equal outputs in every case."""
    src = BENCHMARKS.parent / "src"
    args = f"--old-src {src} --size tiny --seqs 16 --tokens 32 --reviews 3 --repeats 1 --layouts half --out {tmp_path}"
    # in its own process: here the older copy's classes would stay registered with the Auto classes
    subprocess.run([sys.executable, "bench_before_after.py", *args.split()], check=True, cwd=BENCHMARKS)
    result, markdown = results(tmp_path, "bench_before_after")
    cases = [(case, mode) for case in ("16", "packed") for mode in ("inference", "training")]
    assert [(row["case"].split()[0], row["mode"]) for row in result["rows"]] == cases
    assert all(row["max_diff"] == 0 and row["old_ms"] > 0 and row["new_ms"] > 0 for row in result["rows"])
    assert "| half | 16 x 2 | inference |" in markdown


def test_bench_modernbert_quick_writes_results(tmp_path):
    """Ours and transformers' ModernBERT at matched size on the bundled corpora's length distributions."""
    module = run_script("bench_modernbert", "--quick", tmp_path)
    result, markdown = results(tmp_path, "bench_modernbert")
    sizes = result["sizes"]
    assert abs(sizes["modernbert"]["base"] / sizes["ours"]["base"] - 1) <= 0.02  # matched within 2 %
    assert sizes["modernbert"]["attn_implementation"] == "sdpa"
    layer_types = sizes["modernbert"]["layer_types"]
    assert set(layer_types["modernbert_global"]) == {"full_attention"}
    assert set(layer_types["modernbert_local"]) == {"full_attention", "sliding_attention"}
    batches = {batch["batch"]: batch for batch in result["batches"]}
    assert list(batches) == ["reviews", "statutes_64", "statutes_128"] and batches["reviews"]["sequences"] == 6
    for limit in (64, 128):
        assert batches[f"statutes_{limit}"]["longest"] == limit and batches[f"statutes_{limit}"]["real_tokens"] <= 256
    for batch in batches.values():
        for mode in ("inference", "training"):
            cases = batch["modes"][mode]
            assert set(cases) == set(module.MODELS)
            assert all(case["ms"] > 0 and case["tokens_per_s"] > 0 for case in cases.values())
            assert cases["modernbert_local"]["time_vs_ours_packed"] > 0
    assert "ModernBERT / ours = " in markdown and "| statutes_128 | training |" in markdown and "Command:" in markdown


def test_bench_padding_free_writes_results(tmp_path):
    """Padding-free against transformers' padded RoFormer with the same weights, on real corpora."""
    # max length 256: Rotten Tomatoes stays below it (padded-to-max timed), the reviews reuse it, the statutes reach it
    flags = (
        "--size tiny --corpora rotten_tomatoes chinese_sentiment statutes --max-length 256 --batch 4 "
        "--train-batch 2 --repeats 1 --finetune-corpus rotten_tomatoes --finetune-steps 2 --finetune-samples 40"
    )
    module = run_script("bench_padding_free", flags, tmp_path)
    result, markdown = results(tmp_path, "bench_padding_free")
    corpora = {c["corpus"]: c for c in result["corpora"]}
    assert list(corpora) == ["rotten_tomatoes", "chinese_sentiment", "statutes"]
    for corpus in corpora.values():
        assert corpus["max_abs_diff_encoder"] < 1e-4
        assert abs(corpus["mlm_loss_theirs_padded"] - corpus["mlm_loss_ours_packed"]) < 1e-4
        assert corpus["lengths"]["rows"] > 1000 and 0 < corpus["lengths"]["median"] <= 256
        for mode, sequences in (("inference", 4), ("training", 2)):
            measured = corpus["modes"][mode]
            assert measured["sequences"] == sequences and set(measured["cases"]) == set(module.CASES)
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
    assert "| ours, padding-free |" in markdown and "#### Speed targets" in markdown and "Command:" in markdown


def test_bench_sim_generation_writes_results(tmp_path):
    run_script("bench_sim_generation", "--size tiny --candidates 6 --new-tokens 5 --hand-loop-candidates 2", tmp_path)
    result, markdown = results(tmp_path, "bench_sim_generation")
    assert (result["candidates"], result["new_tokens"], result["hand_loop_candidates_run"]) == (6, 5, 2)
    rows = {row["implementation"].split(":")[0]: row for row in result["results"]}
    assert set(rows) == {"ours", "hand loop", "transformers RoFormerForCausalLM"} and len(result["results"]) == 4
    assert all(row["seconds"] > 0 for row in result["results"]) and result["results"][0]["vs_ours"] == 1.0
    assert "| ours: generate(), batched, KV cache, UniLM |" in markdown and "Command:" in markdown


def test_bench_sim_generation_models_share_one_set_of_weights():
    """The hand loop's MLM model is our generator; transformers' model is ours when no token is source."""
    module = bench("bench_sim_generation")
    theirs, ours, mlm = module.build_models("tiny", seed=0)
    ids = torch.tensor([[2, 10, 11, 12, 3, 20, 21]])
    types = torch.tensor([[0, 0, 0, 0, 0, 1, 1]])
    ones = torch.ones_like(ids)
    with torch.no_grad():
        expected = mlm(ids, attention_mask=module.unilm_attention_mask(types), token_type_ids=types).logits
        torch.testing.assert_close(ours(ids, token_type_ids=types).logits, expected, rtol=0, atol=1e-5)
        causal = theirs(ids, token_type_ids=ones).logits
        torch.testing.assert_close(ours(ids, token_type_ids=ones).logits, causal, rtol=0, atol=1e-5)
