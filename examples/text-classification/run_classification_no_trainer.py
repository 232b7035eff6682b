#!/usr/bin/env python
"""The `accelerate` twin of run_classification.py: the same data and model, an explicit training loop.

One script for CPU, one GPU, multi-GPU DDP, FSDP, DeepSpeed and bf16: the launch config decides. It takes
the same data flags as run_classification.py (`--train_file`, `--dataset_name`, `--text_column_names`, ...,
or a bundled `--dataset`).

    accelerate launch --config_file ../accelerate/multi_gpu.yaml run_classification_no_trainer.py \
        --dataset chinese_sentiment --output_dir out/sentiment_ddp
    ACCELERATE_USE_CPU=1 accelerate launch --config_file ../accelerate/cpu_ddp.yaml \
        run_classification_no_trainer.py --train_file train.csv ...       # 2 CPU processes (DDP over gloo)
    torchrun --nproc_per_node 2 run_classification_no_trainer.py ...     # the same, on a machine without a GPU

FSDP2 on any machine, CPU included: `torchrun --nproc_per_node 2 run_classification_no_trainer.py
--model_name_or_path CHECKPOINT --fsdp_size 2 ...` loads the checkpoint sharded by transformers' `DistributedConfig`
(the model's FSDP plan) and hands accelerate only the optimizer, scheduler and data (accelerate's own FSDP runs as
DDP on a CPU). Each process's parameter count is printed (docs/distributed.md).

`accelerate launch --cpu` starts one process whatever `--num_processes` says (accelerate 1.15). Each rank writes
`train_log_rank{i}.json` (its losses and the number of processes), so a run shows that every process trained.

Batches are padding-free by default, as in run_classification.py: each batch is packed into one row without padding
tokens and attention stays within each sentence (docs/fine-tuning.md#padding-free-batches). `--no_padding_free`
pads each batch to its longest sequence instead; `--group_by_length` draws batches of similar lengths.
"""

import logging
import math
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed
from run_classification import (
    ClassificationData,
    ClassificationDataArguments,
    demo_pipeline,
    load_classification_data,
    write_predictions,
)
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, get_linear_schedule_with_warmup
from transformers.trainer_pt_utils import LengthGroupedSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/

from common.card import (  # noqa: E402
    REGRESSION_USAGE,
    ModelCardInfo,
    architecture_of,
    base_model_id,
    save_card_and_push,
)
from common.data import sizes_text, split_sizes  # noqa: E402
from common.distributed import (  # noqa: E402
    DistributedArguments,
    end_accelerate_training,
    end_process_group,
    parameters_held,
)
from common.padding_free import BatchingArguments, check_padding_free_model  # noqa: E402
from common.utils import (  # noqa: E402
    ModelArguments,
    accuracy,
    check_output_dir,
    get_tokenizer,
    load_config,
    log_run_summary,
    parse_arguments,
    save_json,
    setup_logging,
)

import roformer_ext  # noqa: E402,F401  (registers the Auto classes)
from roformer_ext.data_collator import FlattenPaddedBatch  # noqa: E402

logger = logging.getLogger(__name__)


@dataclass
class LoopArguments:
    """The few training settings the loop needs (precision and devices come from the accelerate config)."""

    output_dir: str = field(metadata={"help": "Where the model, tokenizer, metrics and README.md go."})
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 64
    num_train_epochs: int = 1
    max_train_steps: int | None = field(default=None, metadata={"help": "Overrides num_train_epochs."})
    gradient_accumulation_steps: int = 1
    warmup_ratio: float = 0.1
    logging_steps: int = 20
    seed: int = 42
    do_train: bool = field(default=False, metadata={"help": "Train (with none of the three: all of them)."})
    do_eval: bool = field(default=False, metadata={"help": "Evaluate on the validation split."})
    do_predict: bool = field(default=False, metadata={"help": "Predict (and score, with labels) the test split."})
    push_to_hub: bool = field(default=False, metadata={"help": "Upload the folder with its model card, once."})
    hub_model_id: str | None = field(default=None, metadata={"help": "Repo id; default: the output folder's name."})
    hub_token: str | None = None
    # `bool` with default None (the Hub's default visibility): HfArgumentParser asks `bool | None` for a value.
    hub_private_repo: bool = field(default=None, metadata={"help": "Create the repo private (`--hub_private_repo`)."})
    hub_revision: str | None = None

    def phases(self) -> tuple[bool, bool, bool]:
        """(train, evaluate, predict): all three when none is asked for, as run_classification.py."""
        if not (self.do_train or self.do_eval or self.do_predict):
            return True, True, True
        return self.do_train, self.do_eval, self.do_predict


def main() -> None:
    model_args, data_args, batching, distributed, args = parse_arguments(
        (ModelArguments, ClassificationDataArguments, BatchingArguments, DistributedArguments, LoopArguments)
    )
    setup_logging()
    do_train, do_eval, do_predict = args.phases()
    if distributed.tp_size > 1:
        raise ValueError("--tp_size: evaluate with run_classification.py --tp_size (this loop splits every batch).")
    distributed.check(model_args.model_name_or_path, do_train)
    if do_train:
        check_output_dir(args.output_dir, data_args.overwrite_output_dir)
    # Without an accelerator, say so: accelerate otherwise reads torchrun's processes (`accelerate launch --multi_gpu`,
    # `torchrun`) as one-process runs on a CPU, and each would train alone on all the data.
    # The seedable sampler draws the training order from --seed alone: the same rows make up each step's batch on
    # one process and on N (each takes its share), so their losses compare (docs/distributed.md).
    accelerator = Accelerator(
        cpu=not torch.accelerator.is_available(),
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
    )
    set_seed(args.seed)
    output_dir = Path(args.output_dir)

    known_labels = None
    if model_args.model_name_or_path and not do_train:
        id2label = load_config(model_args).id2label
        known_labels = [id2label[i] for i in range(len(id2label))]
    data: ClassificationData = load_classification_data(data_args, args.seed, known_labels)
    if do_train and "train" not in data.raw:
        raise ValueError("Training needs a train split: give --train_file or a dataset with one.")
    regression = data.label_names is None

    # The main process trains the vocabulary and saves it; the other ranks then load that same one. A cache
    # left by an earlier run in this folder is removed first: it may hold another data set's vocabulary.
    vocab_cache = output_dir / "trained_tokenizer"
    with accelerator.main_process_first():
        if accelerator.is_main_process:
            shutil.rmtree(vocab_cache, ignore_errors=True)
        tokenizer = get_tokenizer(model_args, data.texts if "train" in data.raw else [], cache_dir=str(vocab_cache))
        encoded = {
            split: dataset.map(
                lambda batch: tokenizer(
                    batch["sentence1"],
                    batch["sentence2"] if data.pair else None,
                    truncation=True,
                    max_length=data_args.max_seq_length,
                ),
                batched=True,
                remove_columns=[c for c in dataset.column_names if c != "label"],
            )
            for split, dataset in data.raw.items()
        }
    if regression:
        task_kwargs = {"num_labels": 1, "problem_type": "regression"}
    else:
        task_kwargs = {
            "num_labels": len(data.label_names),
            "id2label": dict(enumerate(data.label_names)),
            "label2id": {name: i for i, name in enumerate(data.label_names)},
            "problem_type": "single_label_classification",
        }
    # with --fsdp_size transformers shards it (FSDP2) as it loads
    model = distributed.load_model(AutoModelForSequenceClassification, model_args, tokenizer, **task_kwargs)
    held = parameters_held(model)  # several processes: what each holds (printed by the main process)
    if accelerator.is_main_process:
        log_run_summary(logger, split_sizes(data.raw), data.label_names, model)

    collate = DataCollatorWithPadding(tokenizer)
    if batching.padding_free:
        check_padding_free_model(model)
        collate = FlattenPaddedBatch(collate, per_token_labels=False)

    def sampler(split: str) -> LengthGroupedSampler | None:
        """--group_by_length: transformers' sampler over the whole batch of an optimizer step, as Trainer builds it."""
        if split != "train" or not batching.group_by_length:
            return None
        lengths = [len(ids) for ids in encoded[split][tokenizer.model_input_names[0]]]
        step_batch = args.per_device_train_batch_size * args.gradient_accumulation_steps
        return LengthGroupedSampler(step_batch, lengths=lengths)

    loaders = {
        split: DataLoader(
            dataset,
            shuffle=split == "train" and not batching.group_by_length,
            sampler=sampler(split),
            batch_size=args.per_device_train_batch_size if split == "train" else args.per_device_eval_batch_size,
            collate_fn=collate,
        )
        for split, dataset in encoded.items()
    }
    no_decay = ("bias", "norm")
    groups = [
        {
            "params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
            "weight_decay": args.weight_decay,
        },
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate)
    # Steps are counted per process after sharding: len(train_loader) shrinks with the number of ranks.
    steps_per_epoch = (
        math.ceil(len(loaders["train"]) / accelerator.num_processes / args.gradient_accumulation_steps)
        if do_train
        else 0
    )
    max_steps = args.max_train_steps or args.num_train_epochs * steps_per_epoch
    # accelerate steps a prepared scheduler once per process at each optimizer step (its schedules count the steps of
    # one process on all the data): counted here in those steps, the schedule is the same on any number of processes.
    scheduler = get_linear_schedule_with_warmup(
        optimizer,
        int(args.warmup_ratio * max_steps) * accelerator.num_processes,
        max_steps * accelerator.num_processes,
    )
    splits = list(loaders)
    if distributed.sharded:  # already FSDP2: accelerate would wrap it in DDP; it gets the rest
        optimizer, scheduler, *prepared = accelerator.prepare(optimizer, scheduler, *loaders.values())
    else:
        model, optimizer, scheduler, *prepared = accelerator.prepare(model, optimizer, scheduler, *loaders.values())
    loaders = dict(zip(splits, prepared))

    losses: list[float] = []
    step = 0
    while do_train and step < max_steps:
        model.train()
        for batch in loaders["train"]:
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
    if do_train:
        save_json(
            output_dir / f"train_log_rank{accelerator.process_index}.json",
            {
                "process_index": accelerator.process_index,
                "num_processes": accelerator.num_processes,
                "steps": step,
                "losses": losses,
            },
        )

    def predict(loader: DataLoader) -> tuple[np.ndarray, np.ndarray | None]:
        model.eval()
        predictions, references = [], []
        for batch in loader:
            labels = batch.pop("labels", None)
            with torch.no_grad():
                logits = model(**batch).logits
            predicted = logits.squeeze(-1) if regression else logits.argmax(dim=-1)
            # gather_for_metrics drops the samples accelerate duplicated to even out the last batch
            predictions.append(accelerator.gather_for_metrics(predicted).cpu())
            if labels is not None:
                references.append(accelerator.gather_for_metrics(labels).cpu())
        return torch.cat(predictions).numpy(), torch.cat(references).numpy() if references else None

    def scores(prefix: str, predicted: np.ndarray, gold: np.ndarray) -> dict[str, float]:
        if regression:
            return {f"{prefix}_mse": float(((predicted - gold) ** 2).mean())}
        return {f"{prefix}_accuracy": accuracy(predicted, gold)}

    metrics: dict[str, float] = {}
    if do_eval and "validation" in loaders:
        metrics.update(scores("eval", *predict(loaders["validation"])))
    test_predictions = None
    if do_predict and "test" in loaders:
        test_predictions, gold = predict(loaders["test"])
        if gold is not None:
            metrics.update(scores("test", test_predictions, gold))
    if do_train:
        metrics["train_steps"] = step
        metrics["train_loss_first"], metrics["train_loss_last"] = losses[0], losses[-1]

    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    if do_train and distributed.sharded:  # every process: transformers gathers the shards
        unwrapped.save_pretrained(output_dir, is_main_process=accelerator.is_main_process)
        if accelerator.is_main_process:
            unwrapped = AutoModelForSequenceClassification.from_pretrained(output_dir)  # whole, for the demo
    elif do_train:
        unwrapped.save_pretrained(
            output_dir,
            is_main_process=accelerator.is_main_process,
            save_function=accelerator.save,
            state_dict=accelerator.get_state_dict(model),  # gathers FSDP / DeepSpeed shards
        )
    if accelerator.is_main_process:
        metrics["num_processes"] = accelerator.num_processes
        save_json(output_dir / "all_results.json", metrics)
        if held is not None:
            save_json(output_dir / "parameters_held.json", held)
        if test_predictions is not None:
            write_predictions(output_dir / "predict_results.txt", test_predictions, data.label_names)
        for split in ("eval", "test"):
            if f"{split}_accuracy" in metrics:
                print(f"{split} accuracy {metrics[f'{split}_accuracy']:.4f}")
    if accelerator.is_main_process and do_train:
        tokenizer.save_pretrained(output_dir)
        shutil.rmtree(vocab_cache, ignore_errors=True)
        card = ModelCardInfo(
            title=f"RoFormerExt for {(data_args.dataset or 'text').replace('_', ' ')} classification (accelerate)",
            task="text-classification",
            summary="A RoFormer (rotary position embedding) sequence classifier from `roformer-ext`, trained with an "
            "`accelerate` loop.",
            data=data.description + f" Rows: {sizes_text(data.raw)}. Inputs truncated to {data_args.max_seq_length} "
            "tokens." + (f" Labels: {', '.join(data.label_names)}." if data.label_names else " Regression."),
            metrics=metrics,
            architecture=architecture_of(unwrapped),
            datasets=data.datasets,
            language=data.language,
            license=model_args.license,
            base_model=base_model_id(model_args.model_name_or_path),
            usage=REGRESSION_USAGE if regression else None,
            extra=f"- processes: {accelerator.num_processes}, mixed precision: {accelerator.mixed_precision}\n"
            f"- batches: {'padding-free' if batching.padding_free else 'padded to the longest'}"
            f"{', grouped by length' if batching.group_by_length else ''}\n",
        )
        save_card_and_push(
            card,
            output_dir,
            push_to_hub=args.push_to_hub,
            hub_model_id=args.hub_model_id,
            code_repo=model_args.code_repo,
            hub_token=args.hub_token,
            hub_private_repo=args.hub_private_repo,
            hub_revision=args.hub_revision,
            commit_message=f"RoFormerExt {data_args.dataset or 'text'} classifier (accelerate)",
        )
        print(f"model saved to {output_dir}")
        demo_pipeline(unwrapped, tokenizer, data, data_args.dataset)
    model = None  # the prepared (DDP) model, shared with `predict`: gone before the process group is
    end_accelerate_training(accelerator)


if __name__ == "__main__":
    try:
        main()
    finally:
        end_process_group()  # under torchrun: no gloo threads left alive at exit
