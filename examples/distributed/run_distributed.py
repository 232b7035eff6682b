#!/usr/bin/env python
"""DDP, FSDP2 and tensor parallel with transformers' distributed engine, checked against one process.

    torchrun --nproc_per_node 2 examples/distributed/run_distributed.py \
        --model_name_or_path CONVERTED_FOLDER --task mlm --modes ddp,fsdp2,tp --output_dir out/distributed

For each mode in `--modes`, on the same seeded batches (synthetic token ids: this script checks the engines, it does
not teach the model anything):
- `ddp`: torch's DistributedDataParallel; each process trains on its half of every batch.
- `fsdp2`: `from_pretrained(..., distributed_config=DistributedConfig(fsdp_size=world))`: transformers applies the
  model's FSDP plan (`fully_shard` per layer and on the word embeddings, then the root); each process its half.
- `tp`: `from_pretrained(..., distributed_config=DistributedConfig(tp_size=world))` (what `tp_plan="auto"` did):
  inference with the model's tensor-parallel plan (heads split over the processes).
Rank 0 also trains / runs a plain copy on the whole batch (the single-process reference) and reports the largest
difference of the losses (training) or logits (tp); every process reports the parameter elements it holds. The
sharded model is saved with `save_pretrained` (transformers gathers the shards) and rank 0 reloads it into one
process with `from_pretrained`: its outputs must equal the distributed model's. Results go to
`OUTPUT_DIR/results.json`. Tasks: `mlm` (masked LM, a fixed number of masked tokens per row, so each half of a batch
holds the same number of predicted tokens and the mean over processes is the mean over the batch) and
`classification` (sequence classification). `--no_dropout` for the comparison (dropout's random masks differ between a
share and the whole batch); `--benchmark` times one mode per launch and reports the parameters held and the peak
memory per process, without the single-process copy or the save (docs/distributed.md).
"""

import argparse
import copy
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.nn.parallel import DistributedDataParallel
from transformers import DistributedConfig

from roformer_ext import RoFormerExtForMaskedLM, RoFormerExtForSequenceClassification

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/
from common.distributed import check_fsdp_vocabulary, local_parameter_elements  # noqa: E402

TASKS = {"mlm": RoFormerExtForMaskedLM, "classification": RoFormerExtForSequenceClassification}
MODES = ("ddp", "fsdp2", "tp")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_name_or_path", required=True, help="a roformer_ext folder (e.g. a converted one)")
    parser.add_argument("--task", choices=sorted(TASKS), default="mlm")
    parser.add_argument("--modes", default="ddp,fsdp2,tp", help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=4, help="global batch (split over the processes)")
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--benchmark",
        action="store_true",
        help="time the steps and measure memory only: no single-process copy, no save (one mode per launch, so the "
        "peak memory is that mode's)",
    )
    parser.add_argument(
        "--no_dropout", action="store_true", help="dropout 0 (random masks differ between a share and the whole batch)"
    )
    args = parser.parse_args(argv)
    args.modes = [mode for mode in args.modes.split(",") if mode]
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown:
        parser.error(f"unknown --modes {unknown}; choose from {', '.join(MODES)}")
    return args


def make_batches(args, config) -> list[dict]:
    """`steps` seeded batches of `batch_size` rows: MLM rows with 1/4 of the tokens masked, or one label per row."""
    generator = torch.Generator().manual_seed(args.seed)
    batches = []
    for _ in range(args.steps):
        input_ids = torch.randint(5, config.vocab_size, (args.batch_size, args.seq_len), generator=generator)
        if args.task == "mlm":
            masked = torch.rand(args.batch_size, args.seq_len, generator=generator).argsort(dim=1)
            masked = masked[:, : args.seq_len // 4]
            labels = torch.full_like(input_ids, -100).scatter(1, masked, input_ids.gather(1, masked))
            mask_id = config.mask_token_id if getattr(config, "mask_token_id", None) is not None else 4
            input_ids = input_ids.scatter(1, masked, mask_id)
        else:
            labels = torch.randint(0, config.num_labels, (args.batch_size,), generator=generator)
        batches.append({"input_ids": input_ids, "labels": labels})
    return batches


def rows(batch: dict, rank: int, world: int) -> dict:
    """This process's contiguous share of the batch's rows."""
    per_rank = batch["input_ids"].shape[0] // world
    return {key: value[rank * per_rank : (rank + 1) * per_rank] for key, value in batch.items()}


def local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def training_state_mib(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """MiB this process holds in parameters, gradients and optimizer state (local shards of DTensors)."""
    tensors = [p for p in model.parameters()] + [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [t for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)]
    return sum(local_bytes(t) for t in tensors) / 2**20


def train(model, batches, args, rank: int, world: int, split: bool) -> dict:
    """AdamW steps: the loss of the whole batch each step (averaged over processes when each took a share), the
    seconds per step and the MiB of parameters, gradients and optimizer state this process held after a step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    model.train()
    losses, start = [], time.perf_counter()
    for batch in batches:
        loss = model(**(rows(batch, rank, world) if split else batch)).loss
        loss.backward()
        optimizer.step()
        state_mib = training_state_mib(model, optimizer)  # gradients still there: the step's full state
        optimizer.zero_grad()
        loss = loss.detach()
        if split:
            dist.all_reduce(loss)
            loss = loss / world
        losses.append(loss.item())
    seconds = (time.perf_counter() - start) / len(batches)
    return {"losses": losses, "step_seconds": seconds, "training_state_mib": state_mib}


@torch.no_grad()
def logits_of(model, batch: dict) -> torch.Tensor:
    model.eval()
    return model(input_ids=batch["input_ids"]).logits


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def save_and_reload(model, cls, folder: Path, batch: dict, rank: int) -> float | None:
    """save_pretrained from every process (transformers gathers shards), reload on rank 0 into one process: the
    largest difference of its logits to the distributed model's."""
    distributed_logits = full_tensor(logits_of(model, batch))
    model.save_pretrained(folder, is_main_process=rank == 0)
    dist.barrier()
    if rank != 0:
        return None
    reloaded = cls.from_pretrained(folder)
    return (logits_of(reloaded, batch) - distributed_logits).abs().max().item()


def reshard(model: torch.nn.Module) -> None:
    """Shard again what an FSDP2 forward without gradients left whole (the root and `keep_full_weight` groups):
    training on from there reuses those whole weights outside autograd and its gradients go wrong (measured: the
    second loss 4.620 against one process's 4.585 without this call, equal with it)."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def load(cls, args, **kwargs):
    """The model of `--model_name_or_path` (its missing weights initialised from `--seed` on every process)."""
    torch.manual_seed(args.seed)
    if args.no_dropout:
        kwargs.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return cls.from_pretrained(args.model_name_or_path, **kwargs)


def run_mode(mode: str, args, cls, batches: list[dict], rank: int, world: int) -> dict:
    result: dict = {"mode": mode}
    if mode == "ddp":
        model = load(cls, args)
        result["local_parameters"] = local_parameter_elements(model)
        result.update(train(DistributedDataParallel(model), batches, args, rank, world, True))
        if not args.benchmark:
            model.save_pretrained(args.output_dir / "ddp", is_main_process=rank == 0)
    elif mode == "fsdp2":
        check_fsdp_vocabulary(cls.config_class.from_pretrained(args.model_name_or_path), world)
        model = load(cls, args, distributed_config=DistributedConfig(fsdp_size=world))
        result["local_parameters"] = local_parameter_elements(model)
        if not args.benchmark:  # an evaluation before training: what it keeps (the half layout's rows) must go stale
            logits_of(model, batches[0])
            reshard(model)
        result.update(train(model, batches, args, rank, world, True))
        if not args.benchmark:
            result["reload_max_abs_diff"] = save_and_reload(model, cls, args.output_dir / "fsdp2", batches[0], rank)
    else:  # tp: inference (`tp_plan="auto"` says the same, deprecated since transformers 5.24)
        model = load(cls, args, distributed_config=DistributedConfig(tp_size=world))
        result["local_parameters"] = local_parameter_elements(model)
        start = time.perf_counter()
        result["logits"] = [full_tensor(logits_of(model, batch)) for batch in batches]
        result["step_seconds"] = (time.perf_counter() - start) / len(batches)
        if args.benchmark:
            return result
        result["reload_max_abs_diff"] = save_and_reload(model, cls, args.output_dir / "tp", batches[0], rank)
        if rank == 0:  # the gathered checkpoint holds the original weights, exactly
            saved = cls.from_pretrained(args.output_dir / "tp").state_dict()
            original = load(cls, args).state_dict()
            result["saved_weights_max_abs_diff"] = max((saved[k] - original[k]).abs().max().item() for k in original)
    return result


def reference(mode: str, args, cls, batches: list[dict]) -> dict:
    """One process, the whole batch: what the mode must reproduce."""
    model = load(cls, args)
    if mode == "tp":
        return {"logits": [logits_of(model, batch) for batch in batches]}
    return {**train(model, batches, args, 0, 1, split=False), "parameters": local_parameter_elements(model)}


def main(argv=None) -> dict:
    args = parse_args(argv)
    dist.init_process_group("gloo" if not torch.cuda.is_available() else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size % world:
        raise ValueError(f"--batch_size {args.batch_size} must divide by the {world} processes (each takes a share).")
    cls = TASKS[args.task]
    config = cls.config_class.from_pretrained(args.model_name_or_path)
    batches = make_batches(args, config)
    report = {"task": args.task, "world_size": world, "parameters": None, "modes": {}}
    for mode in args.modes:
        result = run_mode(mode, args, cls, copy.deepcopy(batches), rank, world)
        held = torch.tensor([result["local_parameters"]])
        gathered = [torch.zeros_like(held) for _ in range(world)]
        dist.all_gather(gathered, held)
        result["local_parameters"] = [int(t) for t in gathered]
        if args.benchmark:
            result.pop("logits", None)
        if "losses" in result:
            state = torch.tensor([result["training_state_mib"]])
            states = [torch.zeros_like(state) for _ in range(world)]
            dist.all_gather(states, state)
            result["training_state_mib"] = [round(float(t), 1) for t in states]
        if rank == 0 and args.benchmark:
            print(f"[{mode}] parameters held per process: {result['local_parameters']}; "
                  f"{result['step_seconds']:.3f} s per step", flush=True)  # fmt: skip
            report["modes"][mode] = result
        elif rank == 0:
            expected = reference(mode, args, cls, batches)
            if "losses" in result:
                diffs = [abs(a - b) for a, b in zip(result["losses"], expected["losses"])]
                result["single_process_losses"] = expected["losses"]
                result["single_process_step_seconds"] = expected["step_seconds"]
                result["single_process_training_state_mib"] = expected["training_state_mib"]
                report["parameters"] = expected["parameters"]
            else:
                diffs = [(a - b).abs().max().item() for a, b in zip(result.pop("logits"), expected["logits"])]
            result["max_abs_diff_to_single_process"] = max(diffs)
            total = report["parameters"] or local_parameter_elements(load(cls, args))
            report["parameters"] = total
            result["local_share"] = [round(n / total, 3) for n in result["local_parameters"]]
            print(
                f"[{mode}] parameters held per process: {result['local_parameters']} of {total} "
                f"({', '.join(f'{share:.1%}' for share in result['local_share'])}); largest difference to one "
                f"process: {result['max_abs_diff_to_single_process']:.3g}; reloaded into one process: "
                f"{result.get('reload_max_abs_diff')}",
                flush=True,
            )
            report["modes"][mode] = result
        else:
            result.pop("logits", None)
        dist.barrier()
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024])
    peaks = [torch.zeros_like(peak) for _ in range(world)]
    dist.all_gather(peaks, peak)
    if rank == 0:
        report["peak_rss_mib_per_process"] = [round(float(t), 1) for t in peaks]
        args.output_dir.mkdir(parents=True, exist_ok=True)
        (args.output_dir / "results.json").write_text(json.dumps(report, indent=2) + "\n")
        print(f"results: {args.output_dir / 'results.json'}", flush=True)
    dist.destroy_process_group()
    return report


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
