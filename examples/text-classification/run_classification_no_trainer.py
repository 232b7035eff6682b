#!/usr/bin/env python
"""The `accelerate` twin of run_classification.py: the same data and model, an explicit training loop.

One script for CPU, one GPU, multi-GPU DDP, FSDP, DeepSpeed and bf16: the launch config decides.

    accelerate launch --config_file ../accelerate/multi_gpu.yaml run_classification_no_trainer.py \
        --dataset chinese_sentiment --output_dir out/sentiment_ddp
    accelerate launch --num_processes 2 --cpu run_classification_no_trainer.py --dataset statutes ...

Each rank writes `train_log_rank{i}.json` (its losses), so a run shows that every process trained.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from run_classification import DATASETS, DEMO_SENTENCES, DESCRIPTIONS, DataArguments
from torch.utils.data import DataLoader
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    get_linear_schedule_with_warmup,
    pipeline,
)

import roformer_ext  # noqa: F401  (registers the Auto classes)
from roformer_ext.example_data import load_example_dataset
from roformer_ext.example_utils import (
    ModelArguments,
    accuracy,
    get_model,
    get_tokenizer,
    parse_arguments,
    save_json,
    write_model_card,
)


@dataclass
class LoopArguments:
    """The few training settings the loop needs (precision and devices come from the accelerate config)."""

    output_dir: str = field(
        metadata={"help": "Where the model, tokenizer, metrics and README.md go."}
    )
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 64
    num_train_epochs: int = 1
    max_train_steps: int | None = field(
        default=None, metadata={"help": "Overrides num_train_epochs."}
    )
    gradient_accumulation_steps: int = 1
    warmup_ratio: float = 0.1
    logging_steps: int = 20
    seed: int = 42
    push_to_hub: bool = False
    hub_model_id: str | None = None


def main() -> None:
    model_args, data_args, args = parse_arguments(
        (ModelArguments, DataArguments, LoopArguments)
    )
    if data_args.dataset not in DATASETS:
        raise ValueError(
            f"--dataset must be one of {DATASETS}, not {data_args.dataset!r}."
        )
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps
    )
    set_seed(args.seed)
    output_dir = Path(args.output_dir)

    raw = load_example_dataset(data_args.dataset)
    for split, limit in (
        ("train", data_args.max_train_samples),
        ("validation", data_args.max_eval_samples),
        ("test", data_args.max_eval_samples),
    ):
        if limit is not None:
            raw[split] = (
                raw[split]
                .shuffle(seed=args.seed)
                .select(range(min(limit, len(raw[split]))))
            )
    labels = raw["train"].features["label"].names

    # The main process trains the vocabulary and saves it; the other ranks then load that same one.
    vocab_cache = output_dir / "trained_tokenizer"
    with accelerator.main_process_first():
        tokenizer = get_tokenizer(
            model_args, raw["train"]["text"], cache_dir=str(vocab_cache)
        )
        data = raw.map(
            lambda batch: tokenizer(
                batch["text"], truncation=True, max_length=data_args.max_seq_length
            ),
            batched=True,
            remove_columns=[c for c in raw["train"].column_names if c != "label"],
        )
    model = get_model(
        AutoModelForSequenceClassification,
        model_args,
        tokenizer,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
    )

    collate = DataCollatorWithPadding(tokenizer)
    train_loader = DataLoader(
        data["train"],
        shuffle=True,
        batch_size=args.per_device_train_batch_size,
        collate_fn=collate,
    )
    eval_loader = DataLoader(
        data["validation"],
        batch_size=args.per_device_eval_batch_size,
        collate_fn=collate,
    )
    test_loader = DataLoader(
        data["test"], batch_size=args.per_device_eval_batch_size, collate_fn=collate
    )
    no_decay = ("bias", "norm")
    groups = [
        {
            "params": [
                p
                for n, p in model.named_parameters()
                if not any(k in n for k in no_decay)
            ],
            "weight_decay": args.weight_decay,
        },
        {
            "params": [
                p for n, p in model.named_parameters() if any(k in n for k in no_decay)
            ],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate)
    # Steps are counted per process after sharding: len(train_loader) shrinks with the number of ranks.
    steps_per_epoch = math.ceil(
        len(train_loader) / accelerator.num_processes / args.gradient_accumulation_steps
    )
    max_steps = args.max_train_steps or args.num_train_epochs * steps_per_epoch
    scheduler = get_linear_schedule_with_warmup(
        optimizer, int(args.warmup_ratio * max_steps), max_steps
    )
    model, optimizer, train_loader, eval_loader, test_loader, scheduler = (
        accelerator.prepare(
            model, optimizer, train_loader, eval_loader, test_loader, scheduler
        )
    )

    losses: list[float] = []
    step = 0
    while step < max_steps:
        model.train()
        for batch in train_loader:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                step += 1
                losses.append(loss.item())
                if step % args.logging_steps == 0:
                    accelerator.print(
                        f"step {step}/{max_steps} loss {sum(losses[-args.logging_steps :]) / args.logging_steps:.4f}"
                    )
                if step >= max_steps:
                    break
    output_dir.mkdir(parents=True, exist_ok=True)
    save_json(
        output_dir / f"train_log_rank{accelerator.process_index}.json",
        {
            "process_index": accelerator.process_index,
            "num_processes": accelerator.num_processes,
            "steps": step,
            "losses": losses,
        },
    )

    def evaluate(loader: DataLoader) -> float:
        model.eval()
        predictions, references = [], []
        for batch in loader:
            with torch.no_grad():
                logits = model(**batch).logits
            # gather_for_metrics drops the samples accelerate duplicated to even out the last batch
            predicted, gold = accelerator.gather_for_metrics(
                (logits.argmax(dim=-1), batch["labels"])
            )
            predictions.append(predicted.cpu())
            references.append(gold.cpu())
        return accuracy(torch.cat(predictions).numpy(), torch.cat(references).numpy())

    metrics = {
        "eval_accuracy": evaluate(eval_loader),
        "test_accuracy": evaluate(test_loader),
        "train_steps": step,
    }
    metrics["train_loss_first"], metrics["train_loss_last"] = losses[0], losses[-1]

    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained(
        output_dir,
        is_main_process=accelerator.is_main_process,
        save_function=accelerator.save,
        state_dict=accelerator.get_state_dict(model),  # gathers FSDP / DeepSpeed shards
    )
    if accelerator.is_main_process:
        tokenizer.save_pretrained(output_dir)
        shutil.rmtree(vocab_cache, ignore_errors=True)
        metrics["num_processes"] = accelerator.num_processes
        save_json(output_dir / "all_results.json", metrics)
        write_model_card(
            output_dir,
            title=f"RoFormerExt for {data_args.dataset.replace('_', ' ')} classification (accelerate)",
            task="text-classification",
            dataset=data_args.dataset,
            dataset_description=DESCRIPTIONS[data_args.dataset]
            + f" Inputs truncated to {data_args.max_seq_length} tokens.",
            metrics=metrics,
            model_args=model_args,
            config=unwrapped.config,
            extra=f"- processes: {accelerator.num_processes}, mixed precision: {accelerator.mixed_precision}\n",
        )
        print(
            f"eval accuracy {metrics['eval_accuracy']:.4f}, test accuracy {metrics['test_accuracy']:.4f}"
        )
        print(f"model saved to {output_dir}")
        classifier = pipeline(
            "text-classification",
            model=unwrapped,
            tokenizer=tokenizer,
            device=accelerator.device,
        )
        for sentence, result in zip(
            DEMO_SENTENCES[data_args.dataset],
            classifier(DEMO_SENTENCES[data_args.dataset]),
        ):
            print(f"pipeline: {sentence} -> {result['label']} ({result['score']:.3f})")
        if args.push_to_hub:
            from huggingface_hub import HfApi

            repo_id = args.hub_model_id or output_dir.name
            HfApi().create_repo(repo_id, exist_ok=True)
            HfApi().upload_folder(
                repo_id=repo_id,
                folder_path=str(output_dir),
                ignore_patterns=["train_log_rank*"],
            )
    accelerator.end_training()


if __name__ == "__main__":
    main()
