"""The Trainer run test_trainer_fsdp2.py compares: one process on 8 rows per step, or each of 2 FSDP2 processes on 4."""

import tempfile

import torch
from transformers import Trainer, TrainingArguments

from roformer_ext import RoFormerExtForMaskedLM


def train(folder: str, per_device_batch: int, **load_kwargs) -> tuple[list[float], RoFormerExtForMaskedLM]:
    generator = torch.Generator().manual_seed(0)
    rows = [{"input_ids": ids, "labels": ids.clone()} for ids in torch.randint(5, 100, (16, 32), generator=generator)]
    model = RoFormerExtForMaskedLM.from_pretrained(
        folder, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **load_kwargs
    )
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=per_device_batch, max_steps=2, learning_rate=1e-3,
            logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True, seed=0,
        )  # fmt: skip
        trainer = Trainer(model=model, args=args, train_dataset=rows)
        trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry], model
