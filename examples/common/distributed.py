"""`--fsdp_size` / `--tp_size` for the example scripts: transformers' distributed engine, applied at load.

The Trainer and accelerate examples (run_mlm.py, run_classification.py, run_classification_no_trainer.py) import
this module (`common.distributed`) and load the checkpoint with
`from_pretrained(..., distributed_config=DistributedConfig(fsdp_size=N))` (FSDP2: the model's FSDP plan,
`fully_shard` per layer and on the word embeddings) or `DistributedConfig(tp_size=N)` (tensor parallel, the model's
TP plan). Launch with `torchrun --nproc_per_node N`. Plain DDP needs neither flag: torchrun alone makes Trainer and
accelerate train data parallel.

Why not Trainer's own `--fsdp` / `--fsdp_config`: on a machine without an accelerator, accelerate (1.x) runs them as
plain DDP (measured: `--fsdp "full_shard auto_wrap" --fsdp_config '{"fsdp_version": 2}'` under torchrun on CPU
builds a `DistributedDataParallel` and every process holds every parameter). The model sharded at load is what
Trainer (transformers >= 5.21) trains as FSDP2 on CPU too. docs/distributed.md lists what is verified.
"""

import gc
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from transformers import DistributedConfig

from .utils import get_model, load_config


@dataclass
class DistributedArguments:
    """Shard the checkpoint over the torchrun processes as it loads (transformers' distributed engine)."""

    fsdp_size: int = field(
        default=1,
        metadata={
            "help": "FSDP2 over this many processes (torchrun --nproc_per_node N): the model's FSDP plan shards "
            "parameters, gradients and optimizer state; each process trains on its share of every batch. Needs "
            "--model_name_or_path (Trainer's own --fsdp runs as DDP on CPU)."
        },
    )
    tp_size: int = field(
        default=1,
        metadata={
            "help": "Tensor parallel over this many processes for evaluation / prediction (no training): the "
            "model's TP plan splits heads, feed-forward and vocabulary; every process sees every batch. Needs "
            "--model_name_or_path."
        },
    )

    @property
    def sharded(self) -> bool:
        return self.fsdp_size > 1 or self.tp_size > 1

    def check(self, model_name_or_path: str | None, do_train: bool) -> None:
        """Refuse what is not supported here, with the fix."""
        if self.fsdp_size < 1 or self.tp_size < 1:
            raise ValueError("--fsdp_size and --tp_size are process counts (1: not sharded).")
        if self.fsdp_size > 1 and self.tp_size > 1:
            raise ValueError("Give --fsdp_size or --tp_size, not both (2-D meshes are not verified here).")
        if self.sharded and not model_name_or_path:
            raise ValueError(
                "--fsdp_size / --tp_size shard a checkpoint as it loads: give --model_name_or_path (train a fresh "
                "model in one process or with DDP first, or save a fresh one with save_pretrained)."
            )
        if self.tp_size > 1 and do_train:
            raise ValueError(
                "--tp_size runs evaluation and prediction only (--do_eval / --do_predict): train with --fsdp_size "
                "or DDP (torchrun alone)."
            )
        if self.sharded:
            world = int(os.environ.get("WORLD_SIZE", "1"))
            size = max(self.fsdp_size, self.tp_size)
            if world != size:
                raise ValueError(
                    f"--fsdp_size / --tp_size {size} needs `torchrun --nproc_per_node {size}` (found {world})."
                )

    def load_model(self, auto_class: Any, model_args: Any, tokenizer: Any, **task_kwargs: Any):
        """`get_model`, or with --fsdp_size / --tp_size the checkpoint as transformers shards it while it loads."""
        if not self.sharded:
            return get_model(auto_class, model_args, tokenizer, **task_kwargs)
        config = load_config(model_args, **task_kwargs)
        return auto_class.from_pretrained(
            model_args.model_name_or_path,
            config=config,
            trust_remote_code=model_args.trust_remote_code,
            distributed_config=self.distributed_config(config),
        )

    def distributed_config(self, config=None) -> DistributedConfig | None:
        """What `from_pretrained` takes (`None`: load whole). `config`: the model's, checked for FSDP2."""
        if self.fsdp_size > 1:
            if config is not None:
                check_fsdp_vocabulary(config, self.fsdp_size)
            return DistributedConfig(fsdp_size=self.fsdp_size)
        if self.tp_size > 1:
            return DistributedConfig(tp_size=self.tp_size)
        return None


def check_fsdp_vocabulary(config, world: int) -> None:
    """FSDP2 (torch 2.13, transformers 5.24) trains tied word embeddings wrongly when the vocabulary does not divide
    by the processes (measured: vocabulary 99 on 2 processes, the second loss 4.5928 against one process's 4.5886;
    100, or untied, equal to 1e-6)."""
    if getattr(config, "tie_word_embeddings", False) and config.vocab_size % world:
        raise ValueError(
            f"FSDP2 with tied word embeddings needs vocab_size ({config.vocab_size}) divisible by the {world} "
            f"processes: pad it first, model.resize_token_embeddings(pad_to_multiple_of={world}), and save."
        )


def local_parameter_elements(model: torch.nn.Module) -> int:
    """Parameter elements this process holds: a DTensor's local shard, else the whole tensor (tied ones once)."""
    return sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())


def parameters_held(model: torch.nn.Module) -> dict | None:
    """Per process, the parameter elements it holds (gathered from every process; call it on all of them), the
    model's total and each share; None in a single process. Rank 0 prints them."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    held = torch.tensor([local_parameter_elements(model)])
    gathered = [torch.zeros_like(held) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, held)
    total = sum(
        p.numel() for p in model.parameters()
    )  # a DTensor's numel is the whole tensor's; tied weights counted once
    counts = [int(t) for t in gathered]
    shares = [round(n / total, 4) for n in counts]
    if dist.get_rank() == 0:
        print(f"parameters held per process: {counts} of {total} ({', '.join(f'{s:.1%}' for s in shares)})", flush=True)
    return {"world_size": dist.get_world_size(), "parameters": total, "held_per_process": counts, "shares": shares}


@torch.no_grad()
def evaluate_in_order(
    model, dataset, collator, batch_size: int, seed: int, compute_metrics=None, preprocess_logits=None, prefix="eval"
) -> tuple[dict[str, float], np.ndarray]:
    """Evaluate / predict a tensor-parallel model as `Trainer.evaluate` / `predict` would: the same batches on every
    process, in order (tensor parallel splits the model, not the data). `Trainer` cannot run it on a CPU: accelerate
    (1.x) refuses the `ParallelismConfig` Trainer builds for a tensor-parallel model under `MULTI_CPU`. The loss is
    averaged over the rows as Trainer does; `seed` makes every process draw the same random masks (MLM). Returns the
    metrics (`{prefix}_loss`, those of `compute_metrics`) and the predictions (logits, or what `preprocess_logits`
    keeps)."""
    from transformers import EvalPrediction
    from transformers.trainer_pt_utils import nested_concat, nested_numpify

    torch.manual_seed(seed)
    model.eval()
    predictions = labels = None
    loss_sum, rows = 0.0, 0
    for start in range(0, len(dataset), batch_size):
        features = [dataset[i] for i in range(start, min(start + batch_size, len(dataset)))]
        batch = collator(features)
        output = model(**batch)
        logits = output.logits.full_tensor() if hasattr(output.logits, "full_tensor") else output.logits
        if batch.get("labels") is not None:
            loss = output.loss.full_tensor() if hasattr(output.loss, "full_tensor") else output.loss
            loss_sum += loss.item() * len(features)
            rows += len(features)
            labels = (
                nested_concat(labels, batch["labels"], padding_index=-100) if labels is not None else batch["labels"]
            )
        kept = preprocess_logits(logits, batch.get("labels")) if preprocess_logits else logits
        predictions = nested_concat(predictions, kept, padding_index=-100) if predictions is not None else kept
    predictions = nested_numpify(predictions)
    metrics: dict[str, float] = {}
    if rows:
        metrics[f"{prefix}_loss"] = loss_sum / rows
        if compute_metrics is not None:
            computed = compute_metrics(EvalPrediction(predictions=predictions, label_ids=nested_numpify(labels)))
            metrics.update({f"{prefix}_{key}": value for key, value in computed.items()})
    return metrics, predictions


def end_process_group() -> None:
    """Destroy the process group this process joined (gloo's threads would otherwise outlive `main`).

    Unreachable models go first (`gc.collect`): a DistributedDataParallel wrapper's reducer that outlived the group
    would hold its last reference and destroy it with the GIL held, joining gloo's threads while one of them waits for
    the GIL to free a finished collective's tensors: a hang at exit (seen with two CPU processes). While the group
    is still registered, the reducer only drops a reference, and the group itself is destroyed without the GIL."""
    gc.collect()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def end_accelerate_training(accelerator: Any) -> None:
    """`accelerator.end_training()` (which destroys the process group) after accelerate's own references to the
    prepared model are gone, for the reason `end_process_group` gives. The caller drops its own references first."""
    accelerator.free_memory()
    end_process_group()
    accelerator.end_training()
