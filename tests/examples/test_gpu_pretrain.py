"""The GPU pretraining path on the CPU: corpus export, `--pre_segmented`, time budget, dry run, table and figure."""

import json
import lzma
import sys
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict
from test_examples import MLM, TRAINER, check_saved_folder, load_script, run, run_in_process

ROOT = Path(__file__).resolve().parents[2]
LM = ROOT / "examples" / "language-modeling"
TOKENIZER = ROOT / "checkpoints" / "roformer-ext-mini-zh"
SIZES = ["--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "4", "--intermediate_size", "64"]
LINES = ["北京是中华人民共和国的首都。", "春天来了，花儿都开了。", "这本书写得非常好，值得一读。", "人民日报社论：坚持改革开放。"]  # fmt: skip


def test_export_writes_jieba_spaced_lines_and_the_task_splits(tmp_path, monkeypatch):
    """The corpus files hold run_mlm.py's own jieba preprocessing, one text a line; the task rows are the loader's."""
    pytest.importorskip("jieba")
    pytest.importorskip("snownlp")
    export = load_script(LM / "export_corpus.py")
    splits = {"train": LINES + ["两行\n文本"], "validation": LINES[:2]}
    corpus = DatasetDict({split: Dataset.from_dict({"text": texts}) for split, texts in splits.items()})
    monkeypatch.setattr(export, "load_mlm_corpus", lambda **_: corpus)
    export.main(["--out", str(tmp_path / "data"), "--segment", "--classification", "chinese_sentiment"])
    with lzma.open(tmp_path / "data" / "mlm" / "train.txt.xz", "rt", encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    assert lines == load_script(LM / "run_mlm.py").jieba_spaced({"text": LINES + ["两行 文本"]})["text"]
    assert " " in lines[0] and len(lines) == 5  # words split, the two-line text kept as one line
    from common.corpora import load_example_dataset

    rows = [json.loads(line) for line in (tmp_path / "data" / "chinese_sentiment" / "test.jsonl").open()]
    expected = load_example_dataset("chinese_sentiment")["test"]
    assert [r["text"] for r in rows] == expected["text"] and [r["label"] for r in rows] == expected["label"]
    with pytest.raises(ValueError, match="exists"):
        export.main(["--out", str(tmp_path / "data"), "--no_mlm", "--classification", "statutes"])
    with pytest.raises(ValueError, match="Nothing to write"):
        export.main(["--out", str(tmp_path / "other"), "--no_mlm"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".data-")]  # no temporary folder left


def test_pre_segmented_text_trains_like_jieba_on_the_raw_text(tmp_path, monkeypatch):
    """`--pre_segmented` jieba-spaced text gives run_mlm.py's jieba losses, step for step."""
    pytest.importorskip("jieba")
    raw = [LINES[i % 4] * (1 + i % 3) for i in range(80)]
    (tmp_path / "raw.txt").write_text("\n".join(raw) + "\n", encoding="utf-8")
    spaced = load_script(LM / "run_mlm.py").jieba_spaced({"text": raw})["text"]
    (tmp_path / "spaced.txt").write_text("\n".join(spaced) + "\n", encoding="utf-8")
    states = {}
    for name, extra in (("raw", []), ("spaced", ["--pre_segmented"])):
        out = tmp_path / name
        args = ["--train_file", str(tmp_path / f"{name}.txt"), "--validation_split_percentage", "10",
                "--tokenizer_name", str(TOKENIZER), "--whole_word_masking", *extra, "--max_seq_length", "32",
                "--max_steps", "3", "--logging_steps", "1", "--seed", "5", "--output_dir", str(out), *SIZES, *TRAINER]  # fmt: skip
        run_in_process(MLM, args, monkeypatch)
        states[name] = json.loads((out / "trainer_state.json").read_text())["log_history"]
        states[name + "_metrics"] = check_saved_folder(out, "AutoModelForMaskedLM")
    losses = {name: [row["loss"] for row in states[name] if "loss" in row] for name in ("raw", "spaced")}
    assert len(losses["raw"]) == 3 and losses["raw"] == losses["spaced"]
    for key in ("eval_loss", "train_blocks", "eval_blocks"):
        assert states["raw_metrics"][key] == states["spaced_metrics"][key], key
    with pytest.raises(ValueError, match="--whole_word_masking"):
        run_in_process(MLM, [*args[:6], "--pre_segmented", "--output_dir", str(tmp_path / "bad")], monkeypatch)


def test_time_budget_stops_training_and_says_where(tmp_path, monkeypatch):
    (tmp_path / "corpus.txt").write_text("\n".join(LINES * 30) + "\n", encoding="utf-8")
    out = tmp_path / "mlm"
    args = ["--train_file", str(tmp_path / "corpus.txt"), "--tokenizer_name", str(TOKENIZER), "--max_seq_length", "32",
            "--max_steps", "40", "--max_train_seconds", "0.001", "--output_dir", str(out), *SIZES, *TRAINER]  # fmt: skip
    run_in_process(MLM, args, monkeypatch)
    metrics = check_saved_folder(out, "AutoModelForMaskedLM")
    assert metrics["stopped_at_step"] == 1
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 1
    with pytest.raises(ValueError, match="must be positive"):
        run_in_process(MLM, [*args[: -len(SIZES) - len(TRAINER)], "--max_train_seconds", "0"], monkeypatch)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """export_corpus.py's layout at a tiny size: pre-segmented MLM text and the sentiment splits (read only)."""
    data = tmp_path_factory.mktemp("data")
    (data / "mlm").mkdir()
    for split, count in (("train", 120), ("validation", 12)):
        with lzma.open(data / "mlm" / f"{split}.txt.xz", "wt", encoding="utf-8") as handle:
            handle.writelines(" ".join(LINES[i % 4] * 8) + "\n" for i in range(count))
    (data / "chinese_sentiment").mkdir()
    for split in ("train", "validation", "test"):
        rows = [{"text": LINES[i % 4], "label": i % 2} for i in range(40)]
        (data / "chinese_sentiment" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def dry_run(data: Path, out: Path, *flags: str) -> dict:
    """gpu_pretrain.py --dry-run: every job of the GPU script on the CPU at tiny sizes; its summary."""
    argv = [sys.executable, LM / "gpu_pretrain.py", "--data", data, "--out", out, "--dry-run", "--budget", "1500"]
    run([*argv, *flags], ROOT)
    return json.loads((out / "summary.json").read_text())


def test_gpu_pretrain_dry_run_chain(tmp_path, corpus):
    """One GPU-script job on the CPU at tiny sizes: pretraining, three fine-tunes, summary and comparison table."""
    out = tmp_path / "out"
    steps = dry_run(corpus, out, "--jobs", "rope-s1")["jobs"]["rope-s1"]
    tunes = [f"finetune rope-s1-{task}" for task in ("sentiment", "statutes512", "statutes1024")]
    assert list(steps) == ["pretrain rope-s1", *tunes]
    assert all(step["status"] == "passed" for step in steps.values()), steps
    assert 0 <= steps["finetune rope-s1-statutes1024"]["test_accuracy"] <= 1
    config = json.loads((out / "models" / "rope-s1" / "config.json").read_text())
    assert config["position_encoding"] == "rope" and config["hidden_size"] == 128
    table = load_script(LM / "plot_position_comparison.py").main([str(out), "--output", str(tmp_path / "fig.png")])
    assert "| rope | 1 |" in table and "rope, mean of 1" in table and (tmp_path / "fig.png").stat().st_size > 0


def test_gpu_pretrain_long_plan_runs_the_fine_tunes_at_once(tmp_path, corpus):
    """`--plan long`: one pretraining, then three overlapping sentiment fine-tunes; 256-token recipes read 256."""
    module = load_script(LM / "gpu_pretrain.py")
    jobs = module.plan_long(module.Sizes(dry=True), corpus, tmp_path / "planned", 500)
    assert list(jobs) == ["small-long", "mini-long"]
    pretraining, group = jobs["mini-long"]
    assert pretraining.seconds == 0.7 * 500 and isinstance(group, list) and len(group) == 3
    assert [s.args[s.args.index("--max_seq_length") + 1] for s in group] == ["128", "256", "256"]
    out = tmp_path / "out"
    summary = dry_run(corpus, out, "--plan", "long", "--jobs", "mini-long")
    steps = summary["jobs"]["mini-long"]
    tunes = [f"finetune mini-long-sentiment-{recipe}" for recipe in ("a128", "c256", "d256")]
    assert list(steps) == ["pretrain mini-long", *tunes]
    assert all(step["status"] == "passed" for step in steps.values()), steps
    # at once: the whole run took less than its steps one after another would (each step timed on its own)
    assert summary["wall_seconds"] < sum(step["seconds"] for step in steps.values()) - 5


def test_comparison_table_means_and_missing_runs(tmp_path):
    compare = load_script(LM / "plot_position_comparison.py")
    for encoding, seed, loss, accuracy in (("rope", 1, 4.0, 0.8), ("rope", 2, 5.0, 0.9), ("learned", 1, 6.0, 0.7)):
        run_dir = tmp_path / "models" / f"{encoding}-s{seed}"
        run_dir.mkdir(parents=True)
        history = [{"step": 100, "eval_loss": loss + 1}, {"step": 200, "eval_loss": loss}, {"step": 200, "loss": 9.0}]
        (run_dir / "trainer_state.json").write_text(json.dumps({"log_history": history}))
        tuned = tmp_path / "finetune" / f"{encoding}-s{seed}-sentiment"
        tuned.mkdir(parents=True)
        (tuned / "all_results.json").write_text(json.dumps({"test_accuracy": accuracy}))
    table = compare.main([str(tmp_path)])
    assert "| rope | 1 | 200 | 4.000 | 0.800 | — | — |" in table
    assert "| **rope, mean of 2** | | | 4.500 | 0.850 | — | — |" in table
    assert "| **learned, mean of 1** | | | 6.000 | 0.700 | — | — |" in table
    with pytest.raises(ValueError, match="No models"):
        compare.main([str(tmp_path / "finetune")])


def test_calibrated_steps_fit_each_kinds_training_time(tmp_path):
    """Steps from a smoke run's seconds per step: the slowest job of a kind decides, 15 % is kept spare."""
    module = load_script(LM / "gpu_pretrain.py")
    runtimes = {"small": 4.0, "mini": 2.0, "rope-s1": 1.0, "learned-s1": 2.0}
    jobs = {n: {f"pretrain {n}": {"status": "passed", "train_runtime": t}} for n, t in runtimes.items()}
    (tmp_path / "summary.json").write_text(json.dumps({"jobs": jobs}))
    steps = module.calibrated_steps(tmp_path / "summary.json", 400)
    # small: 0.5 * 400 = 200 s for the process, 0.9 * 200 - 45 = 135 s of training, at 0.1 s a step
    assert steps == {"small": int(0.85 * 135 / 0.1), "mini": int(0.85 * 135 / 0.05), "compare": int(0.85 * 63 / 0.05)}
    for kind in ("small", "compare"):  # a job's pretraining and fine-tunes fit the budget together
        tunes = ["sentiment-big"] * 2 if kind == "small" else ["sentiment", "statutes512", "statutes1024"]
        assert module.SHARE[kind] + sum(module.FINETUNE_SHARE[t] for t in tunes) <= 1.0 + 1e-9
    jobs["mini"]["pretrain mini"]["status"] = "failed (exit 1)"
    (tmp_path / "summary.json").write_text(json.dumps({"jobs": jobs}))
    with pytest.raises(ValueError, match="did not pass"):
        module.calibrated_steps(tmp_path / "summary.json", 400)


@pytest.mark.parametrize(("args", "message"), [
    (["--budget", "-5"], "at least 60"), (["--calibrate", "missing.json"], "--smoke run"),
    (["--steps", "small=0"], "N >= 1"), (["--jobs", "nope"], "Unknown --jobs"), (["--smoke"], "exclude each other"),
])  # fmt: skip
def test_gpu_pretrain_refuses_bad_arguments_before_any_work(tmp_path, corpus, args, message):
    module = load_script(LM / "gpu_pretrain.py")
    with pytest.raises(ValueError, match=message):
        module.main(["--data", str(corpus), "--out", str(tmp_path / "out"), "--dry-run", *args])
    assert not (tmp_path / "out").exists()
