"""What a transformers user expects to work: Trainer (resume, gradient accumulation, checkpointing), pipelines."""

import pytest
import torch
from conftest import tiny_config
from datasets import Dataset
from transformers import Trainer, TrainingArguments, pipeline

from roformer_ext import (
    RoFormerExtForMaskedLM,
    RoFormerExtForSequenceClassification,
    RoFormerExtForTokenClassification,
    RoFormerExtModel,
    RoFormerExtTokenizerFast,
)

WORDS = ["good", "bad", "movie", "plot", "great", "awful", "the", "a", "was", "very"]


def tokenizer() -> RoFormerExtTokenizerFast:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    return RoFormerExtTokenizerFast(vocab={token: i for i, token in enumerate(vocab)})


def sentiment_dataset(n: int = 32) -> Dataset:
    """Label 1 iff the sentence says good/great: learnable in a few steps."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        label = i % 2
        word = ["bad", "awful"][i % 4 // 2] if label == 0 else ["good", "great"][i % 4 // 2]
        filler = [WORDS[6 + int(j)] for j in torch.randint(0, 4, (3,), generator=generator)]
        text = " ".join([*filler[:2], word, "movie", filler[2]])
        rows.append({**tokenizer()(text), "labels": label})
    return Dataset.from_list(rows)


def train(tmp_path, name: str, resume: str | None = None, **arguments) -> Trainer:
    """A trained Trainer (seed 0) of the tiny classifier on `sentiment_dataset`."""
    torch.manual_seed(0)
    model = RoFormerExtForSequenceClassification(tiny_config(vocab_size=15, num_labels=2))
    defaults = dict(
        output_dir=str(tmp_path / name),
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        seed=0,
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
    )
    trainer = Trainer(
        model=model, args=TrainingArguments(**{**defaults, **arguments}), train_dataset=sentiment_dataset()
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def losses(trainer: Trainer) -> dict[int, float]:
    return {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}


def test_resume_from_checkpoint_continues_the_same_loss_curve(tmp_path):
    full = train(tmp_path, "full", max_steps=6)
    train(tmp_path, "resumed", max_steps=6, save_strategy="steps", save_steps=3)
    checkpoint = str(tmp_path / "resumed" / "checkpoint-3")
    resumed = train(tmp_path, "resumed", checkpoint, max_steps=6, save_strategy="steps", save_steps=3)
    expected, actual = losses(full), losses(resumed)
    assert set(actual) >= {4, 5, 6}
    for step in (4, 5, 6):
        assert abs(actual[step] - expected[step]) < 1e-5, (step, actual, expected)


def test_gradient_accumulation_matches_the_larger_batch(tmp_path):
    big = train(tmp_path, "big", max_steps=2, per_device_train_batch_size=4, dataloader_drop_last=True)
    accumulated = train(tmp_path, "acc", max_steps=2, per_device_train_batch_size=2, gradient_accumulation_steps=2)
    for (name, p), (_, q) in zip(big.model.named_parameters(), accumulated.model.named_parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=0, msg=name)


def test_gradient_checkpointing_and_loss_falls(tmp_path):
    curve = list(losses(train(tmp_path, "gc", max_steps=16, gradient_checkpointing=True)).values())
    assert sum(curve[-4:]) / 4 < sum(curve[:4]) / 4


@pytest.mark.parametrize(
    "model_class, task",
    [(RoFormerExtForMaskedLM, "fill-mask"), (RoFormerExtForSequenceClassification, "text-classification"),
     (RoFormerExtForTokenClassification, "token-classification"), (RoFormerExtModel, "feature-extraction")],
)  # fmt: skip
def test_pipelines(tmp_path, model_class, task):
    tok = tokenizer()
    torch.manual_seed(0)
    model_class(tiny_config(vocab_size=len(tok), num_labels=3)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    runner = pipeline(task, model=str(tmp_path), device="cpu")
    if task == "fill-mask":
        assert [("token_str" in r) for r in runner("the movie was [MASK]")] == [True] * 5
    elif task == "text-classification":
        assert [r["label"][:6] for r in runner(["the movie was good", "a bad plot"])] == ["LABEL_"] * 2
    elif task == "token-classification":
        assert isinstance(runner("the movie was very good"), list)
    else:
        assert torch.tensor(runner("the plot was great")).shape[-1] == 32
