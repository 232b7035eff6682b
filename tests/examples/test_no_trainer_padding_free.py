"""The accelerate classification script: packed batches (the default) train as padded ones; `--group_by_length`."""

import json
import math
from pathlib import Path

import pytest
import torch
from test_examples import CLASSIFY_LOOP, run_in_process
from test_examples import TINY as SIZES

from roformer_ext import RoFormerExtForSequenceClassification

TINY = ["--dataset", "chinese_sentiment", "--max_train_samples", "32", "--max_eval_samples", "16",
        "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8", "--max_train_steps", "4",
        "--learning_rate", "1e-3", "--warmup_ratio", "0", "--logging_steps", "2",
        "--config_overrides", "hidden_dropout_prob=0,attention_probs_dropout_prob=0", *SIZES]  # fmt: skip
FORWARD = RoFormerExtForSequenceClassification.forward  # unwrapped, however many runs a test records


def run_recording(args: list[str], monkeypatch) -> list[dict]:
    """`python run_classification_no_trainer.py args` in this process; the inputs of every training forward."""
    calls = []

    def recording_forward(self, *positional, **inputs):
        if self.training:
            calls.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})
        return FORWARD(self, *positional, **inputs)

    monkeypatch.setattr(RoFormerExtForSequenceClassification, "forward", recording_forward)
    run_in_process(CLASSIFY_LOOP, args, monkeypatch)
    return calls


def check_packed(batch: dict) -> list[int]:
    """One row, cu_seq_lens, positions restarting at each sequence start, one label per sequence: the lengths."""
    assert "attention_mask" not in batch and batch["input_ids"].shape[0] == 1
    cu_seq_lens = batch["cu_seq_lens_q"]
    lengths = torch.diff(cu_seq_lens).tolist()
    assert int(cu_seq_lens[-1]) == batch["input_ids"].shape[1] == batch["position_ids"].shape[1]
    expected = torch.cat([torch.arange(n) for n in lengths])
    assert torch.equal(batch["position_ids"][0], expected)
    assert batch["labels"].shape == (len(lengths),) and batch["max_length_q"] == max(lengths)
    return lengths


def results(folder: Path) -> tuple[dict, list[float]]:
    metrics = json.loads((folder / "all_results.json").read_text())
    losses = json.loads((folder / "train_log_rank0.json").read_text())["losses"]
    assert len(losses) == metrics["train_steps"] == 4 and all(math.isfinite(loss) for loss in losses)
    assert {"eval_accuracy", "test_accuracy"} <= set(metrics)
    return metrics, losses


def test_no_trainer_padding_free_by_default_trains_as_padded_and_groups_by_length(tmp_path, monkeypatch):
    """No flag: packed rows that train as the padded run; --group_by_length: LengthGroupedSampler's order."""
    grouped = [*TINY, "--group_by_length"]
    packed_calls = run_recording([*grouped, "--output_dir", str(tmp_path / "packed")], monkeypatch)
    # the packed run's vocabulary: WordPiece training may order tied pieces differently each time it runs
    padded = ["--output_dir", tmp_path / "padded", "--no_padding_free", "--tokenizer_name", tmp_path / "packed"]
    padded_calls = run_recording([*grouped, *padded], monkeypatch)
    assert len(packed_calls) == len(padded_calls) == 4
    batches = [check_packed(batch) for batch in packed_calls]
    for packed, padded, lengths in zip(packed_calls, padded_calls, batches):
        assert len(lengths) == 8 and lengths == sorted(lengths, reverse=True)  # each batch longest first
        # the same 8 reviews (same seed, same shuffle), padded: the packed row is exactly their real tokens
        mask = padded["attention_mask"].bool()
        assert padded["input_ids"].shape[0] == 8 and mask.sum(dim=1).tolist() == lengths
        assert torch.equal(packed["input_ids"][0], padded["input_ids"][mask])
        assert torch.equal(packed["labels"], padded["labels"])
    assert batches[0][0] == max(n for lengths in batches for n in lengths)  # the batch with the longest row first
    packed_metrics, packed_losses = results(tmp_path / "packed")
    padded_metrics, padded_losses = results(tmp_path / "padded")
    assert packed_losses == pytest.approx(padded_losses, rel=1e-5, abs=1e-6)
    for key in ("eval_accuracy", "test_accuracy"):
        assert packed_metrics[key] == padded_metrics[key]
    assert "- batches: padding-free, grouped by length" in (tmp_path / "packed" / "README.md").read_text()
