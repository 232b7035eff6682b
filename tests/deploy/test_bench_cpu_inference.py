"""benchmarks/bench_cpu_inference.py at a tiny size writes its results; the models it times share their weights."""

import torch
from test_benchmarks import bench, results, run_script  # tests/benchmarks, on the path through conftest


def test_bench_cpu_inference_writes_results(tmp_path):
    flags = "--size tiny --repeats 1 --embedding-batches 2 --classification-lengths 24 --classification-batch 2"
    module = run_script("bench_cpu_inference", flags, tmp_path)
    result, markdown = results(tmp_path, "bench_cpu_inference")
    paths = [row["path"] for row in result["results"]]
    assert paths == [name for name in module.PATHS.values() if "compile" not in name] * 2
    assert all(row["ms"] > 0 for row in result["results"]) and result["fidelity"] == []
    ours = [row for row in result["results"] if row["path"] == "ours, eager"]
    assert [row["speedup_vs_ours_eager"] for row in ours] == [1.0, 1.0]
    assert "| embedding, batch 2 x 16 tokens | ONNX Runtime int8 |" in markdown and "Command:" in markdown


def test_ours_and_theirs_share_the_weights(tmp_path):
    module = bench("bench_cpu_inference")
    models = module.build_models("tiny", 0, tmp_path)
    inputs = module.random_batch(2, 12, 99, seed=1)
    with torch.no_grad():
        for kind, output in (("encoder", "last_hidden_state"), ("classifier", "logits")):
            theirs = getattr(models[f"theirs_{kind}"](**inputs), output)
            torch.testing.assert_close(getattr(models[f"ours_{kind}"](**inputs), output), theirs, rtol=0, atol=1e-5)
