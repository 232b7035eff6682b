"""run_extrapolation.py: a tiny end-to-end study, eval blocks, shared masks, argument errors, the decay figure."""

import functools
import importlib
import json
import sys
from pathlib import Path

import pytest
import torch
from test_examples import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "position-lab" / "run_extrapolation.py"
STUDY = ["--encodings", "rope", "t5_bias", "--seeds", "0", "1", "--rope_scalings", "yarn"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TINY = [
    "--hidden_size", "32", "--num_hidden_layers", "1", "--num_attention_heads", "2", "--intermediate_size", "64",
    "--train_length", "16", "--eval_factors", "1", "2", "4", "--eval_blocks", "2", "--max_steps", "3",
    "--batch_size", "4", "--max_train_tokens", "4000", "--vocab_size", "300",
]  # fmt: skip


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def study(script, tmp_path_factory):
    out = tmp_path_factory.mktemp("lab")
    argv = ["--output_dir", str(out), *STUDY, *TINY]
    return script.parse_args(argv), script.main(argv), out


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    yield importlib.import_module("bench_extrapolation")
    sys.path.remove(str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def streams(script, study):
    args, _, out = study
    return script.load_token_streams(args, out / "tokenizer")


def test_results_have_every_encoding_seed_and_length_and_the_same_masks(study):
    args, results, out = study
    on_disk = json.loads(args.results_path.read_text())
    assert on_disk == results
    cells = {(r["encoding"], r["seed"]): r for r in results["runs"]}
    assert set(cells) == {(e, s) for e in ("rope", "t5_bias", "rope+yarn") for s in (0, 1)}
    for run in results["runs"]:
        assert list(run["eval"]) == ["16", "32", "64"]
        for length, cell in run["eval"].items():
            assert cell["block_length"] == int(length) == 16 * cell["factor"]
            assert cell["blocks"] * cell["block_length"] == 2 * 64  # the same eval tokens at every length
            assert torch.isfinite(torch.tensor(cell["loss"])) and cell["scored_tokens"] > 0
            assert (cell["loss_beyond_train_length"] is None) == (cell["factor"] == 1)
    assert cells["rope+yarn", 0]["eval_overrides"]["rope_parameters"]["rope_type"] == "yarn"
    assert results["setup"]["unigram_entropy"] > 0 and "--encodings rope t5_bias" in results["setup"]["command"]
    assert (out / "models" / "mlm" / "t5_bias" / "seed1" / "config.json").is_file()
    assert len({cell["mask_checksum"] for run in results["runs"] for cell in run["eval"].values()}) == 1


def test_eval_blocks_are_k_times_the_training_length(script, study, streams):
    args, _, _ = study
    tokenizer, train_stream, test_stream = streams
    assert len(train_stream) == 4000 and len(test_stream) == 128  # --max_train_tokens; eval blocks x longest
    flat_inputs = None
    for factor in args.eval_factors:
        inputs, labels = script.eval_batches(test_stream, args, tokenizer, factor * args.train_length)
        assert inputs.shape == labels.shape == (2 * 64 // (16 * factor), 16 * factor)
        scored = labels != -100
        assert torch.equal(labels[scored], test_stream[:128].view_as(labels)[scored])  # labels are the text
        assert (inputs[scored] == tokenizer.mask_token_id).float().mean() > 0.5  # BERT's 80 % [MASK]
        assert torch.equal(inputs[~scored], test_stream[:128].view_as(inputs)[~scored])
        # The same corrupted stream at every length, only cut differently.
        flat_inputs = inputs.flatten() if flat_inputs is None else flat_inputs
        assert torch.equal(inputs.flatten(), flat_inputs)
    with pytest.raises(ValueError, match="lower --eval_blocks"):
        script.eval_batches(test_stream[:100], args, tokenizer, 16)


def test_eval_masks_depend_only_on_the_seed(script):
    masks = functools.partial(script.eval_masks, 1000, probability=0.15, vocab_size=50, first_regular_id=5)
    first, again, other = masks(seed=7), masks(seed=7), masks(seed=8)
    assert all(torch.equal(a, b) for a, b in zip(first, again)) and not torch.equal(first[0], other[0])
    selected, to_mask, to_random, random_tokens = first
    assert 0.1 < selected.float().mean() < 0.2 and not (to_mask & to_random).any()
    assert ((to_mask | to_random) <= selected).all() and random_tokens.min() >= 5


def test_causal_eval_scores_next_tokens_and_refuses_a_future_seeing_model(script, study, streams, monkeypatch):
    args, _, _ = study
    tokenizer, _, test_stream = streams
    monkeypatch.setattr(args, "objective", "causal")
    inputs, labels = script.eval_batches(test_stream, args, tokenizer, 32)
    assert inputs.shape == (4, 32) and torch.equal(inputs, labels) and torch.equal(inputs.flatten(), test_stream[:128])
    for encoding in ("rope", "alibi", "t5_bias"):
        script.check_causal(script.model_class("causal")(script.model_config(args, encoding, tokenizer)), 300)
    model = script.model_class("causal")(script.model_config(args, "alibi", tokenizer))
    model.config.is_decoder = False  # now bidirectional: every position sees the last token
    with pytest.raises(RuntimeError, match="lets a causal model see later tokens"):
        script.check_causal(model, 300)


def test_a_second_run_trains_nothing(script, study, monkeypatch):
    _, results, out = study
    monkeypatch.delattr(script, "train_model")  # training again would be a NameError
    assert script.main(["--output_dir", str(out), *STUDY, *TINY])["runs"] == results["runs"]


def test_decay_figure_reads_the_trained_models(script, study, tmp_path):
    args, _, _ = study
    panels = script.decay_panels(args, max_distance=40)
    t5 = next(panel for name, panel in panels.items() if name.startswith("t5_bias (trained"))
    assert len(t5["curves"]) == args.num_attention_heads
    assert all(len(curve) == 41 for panel in panels.values() for curve in panel["curves"].values())
    path = script.plot_trained_decay(args, tmp_path / "decay.png")
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_benchmark_tabulates_the_study(bench, study, tmp_path, capsys):
    args, results, out = study
    res, img = tmp_path / "res", tmp_path / "img"
    bench.main(["--report-only", "--out", str(res), "--images", str(img), "--output_dir", str(out), *TINY])
    printed = capsys.readouterr().out
    assert "| rope+yarn | 2 |" in printed and "± " in printed and "4× (64)" in printed
    assert (img / "extrapolation_mlm.png").read_bytes()[:8] == PNG_SIGNATURE
    assert json.loads((res / "extrapolation_mlm.json").read_text())["runs"] == results["runs"]
    losses = [r["eval"]["64"]["loss"] for r in results["runs"] if r["encoding"] == "t5_bias"]
    mean, spread = sum(losses) / 2, abs(losses[0] - losses[1]) / 2**0.5
    assert f"{mean:.3f} ± {spread:.3f}" in printed.split("| t5_bias |")[1].splitlines()[0]


def test_benchmark_merges_seeds_run_in_another_process(bench, study):
    _, results, _ = study
    seed0 = {"setup": {**results["setup"], "seeds": [0]}, "runs": [r for r in results["runs"] if r["seed"] == 0]}
    seed1 = {"setup": {**results["setup"], "seeds": [1]}, "runs": [r for r in results["runs"] if r["seed"] == 1]}
    bench.merge_runs(seed0, seed1)
    assert sorted(map(json.dumps, seed0["runs"])) == sorted(map(json.dumps, results["runs"]))
    bench.merge_runs(seed0, seed1)  # nothing twice
    assert len(seed0["runs"]) == len(results["runs"])
    other = {"setup": {**results["setup"], "train_length": 32}, "runs": []}
    with pytest.raises(ValueError, match=r"different study: \['train_length'\]"):
        bench.merge_runs(seed0, other)


@pytest.mark.parametrize("argv, message", [
    (["--encodings", "rope", "bogus"], "Unknown encodings"), (["--encodings", "alibi"], "add rope to --encodings"),
    (["--encodings", "alibi", "--rope_scalings", "none", "--objective", "x"], "--objective"),
    (["--objective", "mlm2"], "--objective"), (["--eval_factors", "0"], "--eval_factors"),
    (["--rope_scalings", "longrope"], "--rope_scalings"),
])  # fmt: skip
def test_bad_arguments_say_what_to_change(script, argv, message):
    with pytest.raises(ValueError, match=message):
        script.parse_args(argv)
