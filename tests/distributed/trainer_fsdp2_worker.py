"""`torchrun --nproc_per_node 2 trainer_fsdp2_worker.py MODEL RESULTS SAVED`; `train` is also the one-process run."""

import gc
import json
import sys
import tempfile

import torch
import torch.distributed as dist
from transformers import DistributedConfig, Trainer, TrainingArguments

from roformer_ext import RoFormerExtForMaskedLM


def train(folder: str, per_device_batch: int, **load_kwargs) -> tuple[list[float], RoFormerExtForMaskedLM]:
    generator = torch.Generator().manual_seed(0)
    rows = [{"input_ids": ids, "labels": ids.clone()} for ids in torch.randint(5, 100, (16, 32), generator=generator)]
    model = RoFormerExtForMaskedLM.from_pretrained(
        folder, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **load_kwargs
    )
    training = dict(max_steps=2, learning_rate=1e-3, logging_steps=1, seed=0, use_cpu=True)
    quiet = dict(save_strategy="no", report_to="none", disable_tqdm=True)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=per_device_batch, **training, **quiet)
        trainer = Trainer(model=model, args=args, train_dataset=rows)
        trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry], model


def main() -> None:
    dist.init_process_group("gloo")
    folder, results, saved = sys.argv[1:4]
    losses, model = train(folder, per_device_batch=4, distributed_config=DistributedConfig(fsdp_size=2))
    held = torch.tensor([sum(p.to_local().numel() for p in model.parameters())])
    gathered = [torch.zeros_like(held) for _ in range(2)]
    dist.all_gather(gathered, held)
    if dist.get_rank() == 0:
        with open(results, "w") as f:
            json.dump({"losses": losses, "local_parameters": [int(t) for t in gathered]}, f)
    model.save_pretrained(saved)  # every process: the shards are gathered, rank 0 writes
    # Free the sharded model (and its hooks' gloo work) before interpreter shutdown, which aborts on it ("terminate
    # called without an active exception", seen in CI on 5.21.0), then leave together.
    del model
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
