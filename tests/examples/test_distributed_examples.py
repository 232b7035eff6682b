"""Examples under `torchrun --nproc_per_node 2` (CPU, gloo: DDP, FSDP2, TP) against one process (docs/distributed.md)."""

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset

# tests/distributed (tests/conftest.py puts it on the path). Tolerances: training losses of 2 processes against one
# (measured up to 2e-6 on MLM losses of ~12), tensor-parallel logits / losses against one process (partial sums added
# in another order; measured 1.1e-8 on the classifier's logits, 1e-6 on the MLM evaluation loss).
from test_distributed_runs import FIXTURE, LOGITS_ATOL, LOSS_ATOL, torchrun
from test_examples import CLASSIFY, CLASSIFY_LOOP, MLM, check_saved_folder, read_json, run_in_process
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer

from roformer_ext.conversion.cli import main as convert

pytestmark = [
    pytest.mark.xdist_group("two_processes"),  # never beside another two-process run: 2 cores, gloo rendezvous
    pytest.mark.skipif(torch.accelerator.is_available(), reason="the runs compare CPU processes (gloo)"),
]
TRAINER = ["--max_seq_length", "32", "--logging_steps", "1", "--learning_rate", "1e-3", "--report_to", "none",
           "--save_strategy", "no", "--disable_tqdm", "true", "--use_cpu", "--seed", "0"]  # fmt: skip


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """The v1 fixture without dropout, as a masked LM and with a seeded 2-label head; a small classification set."""
    root = tmp_path_factory.mktemp("checkpoints")
    assert convert(["original", str(FIXTURE), str(root / "converted")]) == 0
    tokenizer = AutoTokenizer.from_pretrained(root / "converted")
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    AutoModelForMaskedLM.from_pretrained(root / "converted", **no_dropout).save_pretrained(root / "mlm")
    torch.manual_seed(0)
    classifier = AutoModelForSequenceClassification.from_pretrained(root / "converted", num_labels=2, **no_dropout)
    classifier.save_pretrained(root / "classifier")
    for folder in ("mlm", "classifier"):
        tokenizer.save_pretrained(root / folder)
    characters = [t for t in tokenizer.get_vocab() if len(t) == 1 and "\u4e00" <= t <= "\u9fff"]
    rng = random.Random(0)
    lines = ["".join(rng.choice(characters) for _ in range(rng.randint(12, 30))) for _ in range(60)]
    (root / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = [{"text": line, "label": "pos" if "好" in line else "neg"} for line in lines]
    Dataset.from_list(rows[:40]).to_csv(root / "train.csv", index=False)
    Dataset.from_list(rows[40:50]).to_csv(root / "dev.csv", index=False)
    Dataset.from_list(rows[50:]).to_csv(root / "test.csv", index=False)
    return {"root": root, "mlm": root / "mlm", "classifier": root / "classifier"}


def logged_losses(folder: Path) -> list[float]:
    return [entry["loss"] for entry in read_json(folder / "trainer_state.json")["log_history"] if "loss" in entry]


def shares(folder: Path) -> list[float]:
    held = read_json(folder / "parameters_held.json")
    assert held["world_size"] == 2 and len(held["held_per_process"]) == 2, held
    return held["shares"]


def check_trained_like_one_process(losses: list[float], expected: list[float], folder: Path, share: float) -> None:
    assert len(losses) == len(expected) == 3 and losses != losses[:1] * 3, losses  # 3 steps, and it trained
    assert max(abs(a - b) for a, b in zip(losses, expected)) <= LOSS_ATOL, (losses, expected)
    assert all(abs(s - share) <= 0.01 for s in shares(folder)), shares(folder)


def test_run_classification_ddp_fsdp2_and_tensor_parallel_prediction(checkpoints, tmp_path, monkeypatch):
    data = checkpoints["root"]
    files = ["--train_file", data / "train.csv", "--validation_file", data / "dev.csv", "--test_file",
             data / "test.csv"]  # fmt: skip
    common = ["--model_name_or_path", checkpoints["classifier"], *files, "--max_steps", "3", *TRAINER]
    one = tmp_path / "one"
    run_in_process(CLASSIFY, [*common, "--output_dir", one, "--per_device_train_batch_size", "8"], monkeypatch)
    expected = logged_losses(one)
    for mode, flags, share in (("ddp", [], 1.0), ("fsdp2", ["--fsdp_size", "2"], 0.5)):
        out = tmp_path / mode
        result = torchrun(CLASSIFY, *common, "--output_dir", out, "--per_device_train_batch_size", "4", *flags)
        assert "parameters held per process: [" in result.stdout
        check_trained_like_one_process(logged_losses(out), expected, out, share)
        metrics = check_saved_folder(out, "AutoModelForSequenceClassification")  # FSDP2: our code, not torch's
        assert not list(out.glob("_fsdp*.py"))
        logits = np.load(out / "predict_logits.npy")
        np.testing.assert_allclose(logits, np.load(one / "predict_logits.npy"), atol=LOGITS_ATOL)
        # Trainer's multi-process eval_loss is a mean of each process's batch means, not the rows' (see the docs)
        assert metrics["eval_accuracy"] == read_json(one / "all_results.json")["eval_accuracy"]

    # Tensor parallel: the one-process model predicts the test split (and evaluates) with its heads split in two.
    out = tmp_path / "tp"
    tp = ["--do_eval", "--do_predict", "--tp_size", "2", "--output_dir", out, *TRAINER]
    result = torchrun(CLASSIFY, "--model_name_or_path", one, *files, *tp)
    assert "parameters held per process: [" in result.stdout
    logits, expected_logits = np.load(out / "predict_logits.npy"), np.load(one / "predict_logits.npy")
    assert logits.shape == expected_logits.shape == (10, 2)
    assert np.abs(logits - expected_logits).max() <= LOGITS_ATOL
    metrics, expected_metrics = (read_json(f / "all_results.json") for f in (out, one))
    assert metrics["eval_loss"] == pytest.approx(expected_metrics["eval_loss"], abs=LOGITS_ATOL)
    assert metrics["eval_accuracy"] == expected_metrics["eval_accuracy"]
    # heads, intermediate and vocabulary split; norms, token types and the classifier head whole
    assert all(0.5 <= s <= 0.6 for s in shares(out)), shares(out)


def test_run_mlm_fsdp2_and_tensor_parallel_evaluation(checkpoints, tmp_path, monkeypatch):
    """Every token predicted from unmasked text: the masks do not depend on which process draws them."""
    common = ["--train_file", str(checkpoints["root"] / "corpus.txt"), "--validation_split_percentage", "10",
              "--mlm_probability", "1", "--mask_replace_prob", "0", "--random_replace_prob", "0",
              "--max_steps", "3", *TRAINER]  # fmt: skip
    one = tmp_path / "one"
    model = ["--model_name_or_path", checkpoints["mlm"]]
    run_in_process(MLM, [*model, *common, "--per_device_train_batch_size", "8", "--output_dir", one], monkeypatch)
    out = tmp_path / "fsdp2"
    torchrun(MLM, *model, *common, "--output_dir", out, "--per_device_train_batch_size", "4", "--fsdp_size", "2")
    check_trained_like_one_process(logged_losses(out), logged_losses(one), out, 0.5)
    check_saved_folder(out, "AutoModelForMaskedLM")
    assert not list(out.glob("_fsdp*.py"))

    out = tmp_path / "tp"  # the one-process model evaluated with its heads and vocabulary split in two
    torchrun(MLM, "--model_name_or_path", one, *common, "--do_eval", "--tp_size", "2", "--output_dir", out)
    metrics, expected = (read_json(f / "all_results.json") for f in (out, one))
    assert metrics["eval_loss"] == pytest.approx(expected["eval_loss"], abs=LOGITS_ATOL)
    assert metrics["eval_masked_accuracy"] == expected["eval_masked_accuracy"]
    assert all(0.5 <= s <= 0.6 for s in shares(out)), shares(out)


def test_no_trainer_fsdp2_trains_like_one_process(checkpoints, tmp_path, monkeypatch):
    data = checkpoints["root"]
    common = ["--model_name_or_path", str(checkpoints["classifier"]), "--train_file", str(data / "train.csv"),
              "--validation_file", str(data / "dev.csv"), "--max_seq_length", "32", "--max_train_steps", "3",
              "--learning_rate", "1e-3", "--warmup_ratio", "0", "--logging_steps", "1", "--seed", "0"]  # fmt: skip
    one = tmp_path / "one"
    run_in_process(CLASSIFY_LOOP, [*common, "--output_dir", one, "--per_device_train_batch_size", "8"], monkeypatch)
    expected = read_json(one / "train_log_rank0.json")["losses"]
    out = tmp_path / "fsdp2"
    torchrun(CLASSIFY_LOOP, *common, "--output_dir", out, "--per_device_train_batch_size", "4", "--fsdp_size", "2")
    logs = [read_json(out / f"train_log_rank{rank}.json") for rank in (0, 1)]
    # one two-process run under torchrun on a CPU (not two one-process runs on all the data)
    assert all(log["num_processes"] == 2 for log in logs), logs
    # each process's loss on its 4 rows: the mean is the batch's
    losses = [sum(pair) / 2 for pair in zip(*(log["losses"] for log in logs))]
    check_trained_like_one_process(losses, expected, out, 0.5)
    metrics = check_saved_folder(out, "AutoModelForSequenceClassification")
    assert metrics["num_processes"] == 2
    assert metrics["eval_accuracy"] == read_json(one / "all_results.json")["eval_accuracy"]
