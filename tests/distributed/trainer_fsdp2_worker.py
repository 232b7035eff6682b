"""`torchrun --nproc_per_node 2 trainer_fsdp2_worker.py MODEL_FOLDER RESULTS_JSON SAVED_FOLDER`: `Trainer` on a masked
LM sharded at load (`DistributedConfig(fsdp_size=2)`); rank 0 writes the losses and each process's parameter count,
and the still sharded model is saved to SAVED_FOLDER."""

import gc
import json
import sys

import torch
import torch.distributed as dist
from trainer_fsdp2_common import train
from transformers import DistributedConfig


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
