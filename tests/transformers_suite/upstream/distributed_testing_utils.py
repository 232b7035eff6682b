"""Stand-in for transformers' tests/distributed_testing_utils.py (repository only): the helpers its distributed
testers import since 5.24. Ranks are forked from a fork server, each with a process group (gloo on CPU)."""

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessRaisedException
from transformers.distributed.utils import get_distributed_backend


def _get_distributed_device_type() -> str:
    device_type = torch._C._get_accelerator().type
    return "cpu" if device_type == "mps" else device_type


def _get_distributed_backend() -> str:
    return get_distributed_backend(_get_distributed_device_type()) or "gloo"


def _get_rank_device(rank: int) -> torch.device:
    device_type = _get_distributed_device_type()
    return torch.device("cpu") if device_type == "cpu" else torch.device(device_type, rank)


def _set_rank_device(rank: int, backend: str | None = None) -> None:
    # gloo ranks run on CPU, and there may be fewer devices than ranks
    if _get_distributed_device_type() != "cpu" and backend != "gloo":
        torch.accelerator.set_device_index(rank)


#: Imported once by the fork server, so a rank starts in a moment (two fresh interpreters took ~10 s of each test).
FORKSERVER_PRELOAD = ["torch", "transformers", "roformer_ext", __name__]


def _start_rank_processes(fn, args: tuple, nprocs: int) -> None:
    """`fn(rank, *args)` in `nprocs` processes forked from a single-threaded fork server (not from the test process,
    which runs threads); raises if a rank fails."""
    mp.set_forkserver_preload(FORKSERVER_PRELOAD)
    mp.start_processes(fn, args=args, nprocs=nprocs, start_method="forkserver")


def _find_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _rank_entry(rank: int, func, world_size: int, port: int, backend: str, func_args: tuple, func_kwargs: dict):
    os.environ.update(
        WORLD_SIZE=str(world_size), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="localhost", MASTER_PORT=str(port)
    )
    _set_rank_device(rank, backend)
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    try:
        func(rank, *func_args, **func_kwargs)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_distributed(world_size: int, max_retries: int = 5, backend: str | None = None):
    """Decorator: `run_distributed(world_size=2)(func)(*args)` runs `func(rank, *args)` on every rank of a fresh
    process group (another free port when the chosen one was taken meanwhile)."""
    backend = backend or _get_distributed_backend()

    def decorator(func):
        def wrapper(*args, **kwargs):
            for attempt in range(max_retries):
                spawn_args = (func, world_size, _find_free_port(), backend, args, kwargs)
                try:
                    _start_rank_processes(_rank_entry, spawn_args, world_size)
                    return
                except ProcessRaisedException as err:
                    if "EADDRINUSE" in str(err) and attempt < max_retries - 1:
                        continue
                    raise

        return wrapper

    return decorator
