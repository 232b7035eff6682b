"""transformers' RoFormer against roformer-ext, same weights, same inputs, interleaved in one process.

A random transformers `RoFormerForMaskedLM` is saved to a temporary folder and converted with our converter, so
both models hold the same weights (checked: max |diff| of the encoder output is reported). For every sequence
length, with `batch = max(1, tokens // seq)` so each step sees about the same number of tokens:
- inference: the encoders (`RoFormerModel` / `RoFormerExtModel`), one forward under `torch.inference_mode`;
- training: the MLM models, forward with labels + backward + AdamW step (hidden dropout 0.1; attention dropout 0
  unless `--attention-dropout`: any attention dropout sends CPU SDPA to its O(N²) math kernel,
  docs/benchmarks.md#attention-dropout-on-cpu).
  Training is also timed with `sparse_prediction=True` (ours only: the vocabulary projection runs on the 15%
  labelled positions, as ModernBERT's option of that name; same loss).
Median time per step over `--repeats`, the two models alternating; the speed-up is theirs / ours.

GFLOP/s: analytic matmul FLOPs (projections, FFN, QKᵀ and PV at full N², MLM head when training; training =
3 × forward) divided by the median time, against the fp32 and bf16 GEMM rates of one large `torch.matmul`
measured in the same run.

Peak memory: each case again in a fresh process (forked from a server that only imported the libraries), which
builds the model from its config, runs one step (training: two) and reports `ru_maxrss` (the high-water resident
set of the whole process: Python, torch, weights, optimizer state, activations) and that peak minus the resident
set just before the first step.

`--device cuda` runs both models on the GPU (timers wait for the kernels; bf16 = torch.autocast on CUDA); peak
memory is then the CUDA allocator's peak (`torch.cuda.max_memory_allocated`) in each fresh process, and Δ the peak
minus the memory allocated before the first step. benchmarks/gpu/check.sh runs it so.

`--attention linear` benchmarks our linear attention (RoFormer §3.4.3) instead: bidirectional and causal
encoders, and our softmax (SDPA) encoder for reference; transformers has no linear attention.

    python benchmarks/bench_model.py --size base --out benchmarks/results
    python benchmarks/bench_model.py --size small --attention linear --seqs 1024 4096 16384 --tokens 1
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import multiprocessing
import sys
import tempfile
from collections.abc import Callable

import torch
from bench_utils import (
    DTYPES,
    current_rss_mb,
    gemm_gflops,
    interleaved_medians,
    load_average,
    machine_info,
    machine_markdown,
    markdown_table,
    memory_limit,
    peak_rss_mb,
    release_freed_memory,
    synchronize,
    write_results,
)
from transformers import RoFormerConfig, RoFormerForMaskedLM

from roformer_ext import RoFormerExtConfig, RoFormerExtForMaskedLM, RoFormerExtModel
from roformer_ext.conversion.from_transformers import (
    build_converted_model,
    convert_transformers_config,
)

SIZES = {
    # hidden, layers, heads, intermediate, vocab (12000: RoFormer's chinese char vocabulary)
    "tiny": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 37,
        "vocab_size": 99,
    },
    "small": {
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "intermediate_size": 1024,
        "vocab_size": 12000,
    },
    "base": {
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "vocab_size": 12000,
    },
}
DEFAULT_SEQS = {"softmax": [128, 512, 1024, 2048, 4096], "linear": [1024, 4096, 16384]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--seqs", type=int, nargs="+", help="sequence lengths (default: by --attention)")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per step: batch = max(1, tokens // seq)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=["inference", "training"], default=["inference", "training"])
    parser.add_argument("--attention", choices=["softmax", "linear"], default="softmax")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="bf16 = torch.autocast")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile(ours)")
    parser.add_argument(
        "--attention-dropout",
        type=float,
        default=0.0,
        help="attention_probs_dropout_prob of both models (training; > 0 sends CPU SDPA to its math kernel)",
    )
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the per-case processes")
    parser.add_argument("--memory-only", action="store_true", help="only the per-case peak-memory processes")
    parser.add_argument("--gemm-size", type=int, default=4096)
    parser.add_argument("--out", default="benchmarks/results")
    return parser.parse_args(argv)


# --- models ---------------------------------------------------------------------------------------------------------


def their_config(size: str, max_seq: int, attention_dropout: float = 0.0) -> RoFormerConfig:
    """transformers' RoFormer indexes a fixed table: it needs max_position_embeddings ≥ the longest sequence."""
    return RoFormerConfig(
        **SIZES[size],
        max_position_embeddings=max(max_seq, 512),
        type_vocab_size=2,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=attention_dropout,
    )


def our_config(config: RoFormerConfig, attention: str = "softmax", causal: bool = False) -> RoFormerExtConfig:
    kwargs = convert_transformers_config({**config.to_dict(), "architectures": ["RoFormerForMaskedLM"]})
    kwargs.update(attention_type=attention, is_decoder=causal)
    return RoFormerExtConfig(**kwargs)


def build_pair(
    size: str, max_seq: int, attention_dropout: float = 0.0
) -> tuple[RoFormerForMaskedLM, RoFormerExtForMaskedLM]:
    """Their random MLM model and ours converted from its saved folder (the weights are the same)."""
    torch.manual_seed(0)
    theirs = RoFormerForMaskedLM(their_config(size, max_seq, attention_dropout))
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        ours = build_converted_model(folder)
    return theirs, ours


def make_inputs(batch: int, seq: int, vocab: int, seed: int = 0, device: str = "cpu") -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab, (batch, seq), generator=generator).to(device)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


def mlm_labels(input_ids: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """15% of positions predicted, the rest ignored (-100), as in MLM pre-training."""
    generator = torch.Generator().manual_seed(seed)
    picked = torch.rand(input_ids.shape, generator=generator) < 0.15
    return input_ids.masked_fill(~picked.to(input_ids.device), -100)


def autocast(dtype: str, device: torch.device | str = "cpu"):
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=dtype == "bf16")


def inference_step(encoder: torch.nn.Module, inputs: dict, dtype: str):
    device = inputs["input_ids"].device

    def step() -> None:
        with torch.inference_mode(), autocast(dtype, device):
            encoder(**inputs)
        synchronize(device)

    return step


def training_step(model: torch.nn.Module, inputs: dict, labels: torch.Tensor, dtype: str, sparse: bool = False):
    """sparse: ours with `sparse_prediction` (vocabulary projection on the labelled 15% only), for this step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    device = inputs["input_ids"].device

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        if sparse:
            model.config.sparse_prediction = True
        try:
            with autocast(dtype, device):
                loss = model(**inputs, labels=labels).loss
        finally:
            if sparse:
                model.config.sparse_prediction = False
        loss.backward()
        optimizer.step()
        synchronize(device)

    return step


# --- FLOPs ----------------------------------------------------------------------------------------------------------


def forward_flops(config, batch: int, seq: int, mlm_head: bool, attention: str = "softmax") -> float:
    """Matmul FLOPs of one forward (2 per multiply-add); norms, softmax and activations are not counted."""
    hidden, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    tokens = batch * seq
    per_layer = 2 * tokens * (4 * hidden * hidden + 2 * hidden * inter)
    if attention == "softmax":
        per_layer += 2 * 2 * batch * seq * seq * hidden  # QKᵀ and PV over all heads
    else:
        per_layer += 2 * 2 * tokens * hidden * config.head_dim  # Σ k vᵀ and q S per head
    flops = layers * per_layer
    if mlm_head:
        flops += 2 * tokens * hidden * (hidden + config.vocab_size)
    return float(flops)


# --- one case in a fresh process (peak memory) ----------------------------------------------------------------------


def memory_case(spec: dict) -> dict:
    """Build one model from its config, run its step(s), report ru_maxrss and the rise over the RSS before stepping."""
    torch.manual_seed(0)
    config = their_config(spec["size"], spec["seq"], spec.get("attention_dropout", 0.0))
    training = spec["mode"] == "training"
    if spec["impl"] == "theirs":
        model = RoFormerForMaskedLM(config)
    else:
        ours = our_config(config, spec.get("attention", "softmax"), spec.get("causal", False))
        model = RoFormerExtForMaskedLM(ours) if training else RoFormerExtModel(ours, add_pooling_layer=False)
    device = spec.get("device", "cpu")
    model.to(device)
    inputs = make_inputs(spec["batch"], spec["seq"], config.vocab_size, device=device)
    if training:
        step = training_step(
            model.train(), inputs, mlm_labels(inputs["input_ids"]), spec["dtype"], sparse=spec.get("sparse", False)
        )
    else:
        encoder = model.roformer if spec["impl"] == "theirs" else model
        step = inference_step(encoder.eval(), inputs, spec["dtype"])
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated() / 2**20
    else:
        before = current_rss_mb()
    for _ in range(2 if training else 1):  # training: the 2nd step's activations meet the AdamW state of the 1st
        step()
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
        return {"peak_cuda_mb": peak, "cuda_before_step_mb": before, "step_peak_mb": peak - before}
    peak = peak_rss_mb()
    return {"peak_rss_mb": peak, "rss_before_step_mb": before, "step_peak_mb": peak - before}


#: The peak each device's memory cases report: the whole process's resident set, or the CUDA allocator's peak.
PEAK_FIELD = {"cpu": "peak_rss_mb", "cuda": "peak_cuda_mb"}


def address_space_limit(device: str) -> contextlib.AbstractContextManager:
    """`memory_limit` on CPU; none on CUDA (its driver reserves far more address space than it uses)."""
    return memory_limit() if device == "cpu" else contextlib.nullcontext(None)


_MEMORY_PRELOAD = ["torch", "transformers.models.roformer.modeling_roformer", "roformer_ext"]


@functools.cache
def _memory_processes() -> multiprocessing.context.BaseContext:
    """A fork server that has imported torch, transformers and roformer_ext once.

    Each case is forked from it: a fresh process (its high-water mark starts at the imports' footprint, nothing of
    this process's models or earlier cases) without paying several seconds of imports per case.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_MEMORY_PRELOAD)
    return context


def _memory_child(spec: dict, connection) -> None:
    with address_space_limit(spec.get("device", "cpu")) as budget_mb:
        try:
            result = memory_case(spec)
        except (MemoryError, RuntimeError) as error:
            out_of_memory = isinstance(error, MemoryError) or "allocate" in str(error)
            result = (
                {"error": "out of memory", "budget_mb": budget_mb}
                if out_of_memory
                else {"error": f"{type(error).__name__}: {error}"}
            )
    connection.send(result)


def measure_memory(spec: dict) -> dict:
    """Run `memory_case` in its own process; an out-of-memory kill is reported as an error, not raised."""
    release_freed_memory()  # the child's budget is what is available now
    context = _memory_processes()
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_memory_child, args=(spec, send))
    process.start()
    send.close()
    try:
        result = receive.recv()
    except EOFError:
        result = {"error": "the process died (exit code below; -9 is usually the out-of-memory killer)"}
    process.join()
    if process.exitcode:
        result["exit_code"] = process.exitcode
    return result


# --- the comparison -------------------------------------------------------------------------------------------------


def timing_fields(seconds: dict[str, float | str], flops: float | None = None) -> dict:
    """`<name>_ms` (and `<name>_gflops`) per timed function; an out-of-memory case keeps its message instead."""
    row = {}
    for name, t in seconds.items():
        row[f"{name}_ms"] = 1e3 * t if isinstance(t, float) else t
        if flops is not None:
            row[f"{name}_gflops"] = flops / t / 1e9 if isinstance(t, float) else None
    return row


def ratio(a: float | str | None, b: float | str | None) -> float | None:
    return a / b if isinstance(a, float) and isinstance(b, float) else None


def memory_cases(args: argparse.Namespace, seq: int, batch: int, mode: str) -> dict:
    """Peak memory of theirs, ours (and ours with sparse prediction when training), each in a fresh process."""
    impls = ("theirs", "ours", "ours_sparse") if mode == "training" else ("theirs", "ours")
    row = {}
    for impl in impls:
        spec = {
            "impl": impl.removesuffix("_sparse"),
            "mode": mode,
            "seq": seq,
            "batch": batch,
            "size": args.size,
            "dtype": args.dtype,
            "sparse": impl.endswith("_sparse"),
            "attention_dropout": args.attention_dropout,
            "device": args.device,
        }
        row[f"{impl}_memory"] = measure_memory(spec)
    peak = PEAK_FIELD[args.device]
    row["memory_ratio"] = ratio(*(row[f"{impl}_memory"].get(peak) for impl in ("ours", "theirs")))
    return row


def compare_memory(args: argparse.Namespace, seqs: list[int], save: Callable[[list[dict], dict], None]) -> None:
    """--memory-only: the peak-memory processes without the timing (which keeps both models in this process)."""
    rows = []
    for seq in seqs:
        batch = max(1, args.tokens // seq)
        for mode in args.modes:
            print(f"seq {seq} batch {batch} {mode} memory ...", file=sys.stderr, flush=True)
            rows.append({"seq": seq, "batch": batch, "mode": mode, **memory_cases(args, seq, batch, mode)})
            save(rows, {})


def compare_softmax(args: argparse.Namespace, seqs: list[int], save: Callable[[list[dict], dict], None]) -> None:
    theirs, ours = build_pair(args.size, max(seqs), args.attention_dropout)
    theirs, ours = theirs.to(args.device), ours.to(args.device)
    config = ours.config
    check = make_inputs(2, min(seqs), config.vocab_size, device=args.device)
    with torch.inference_mode():
        diff = theirs.roformer.eval()(**check).last_hidden_state - ours.roformer.eval()(**check).last_hidden_state
    checks = {"max_abs_diff_encoder": diff.abs().max().item()}
    # Compiled twins share ours' parameters; the encoder is compiled on its own (attributes of a compiled module
    # are the uncompiled originals).
    compiled = {"mlm": torch.compile(ours), "encoder": torch.compile(ours.roformer)} if args.compile else None
    rows = []
    for seq in seqs:
        batch = max(1, args.tokens // seq)
        inputs = make_inputs(batch, seq, config.vocab_size, device=args.device)
        labels = mlm_labels(inputs["input_ids"])
        for mode in args.modes:
            training = mode == "training"
            if training:
                steps = {
                    "theirs": training_step(theirs.train(), inputs, labels, args.dtype),
                    "ours": training_step(ours.train(), inputs, labels, args.dtype),
                    "ours_sparse": training_step(ours, inputs, labels, args.dtype, sparse=True),
                }
                if compiled is not None:
                    steps["ours_compiled"] = training_step(compiled["mlm"], inputs, labels, args.dtype)
            else:
                steps = {
                    "theirs": inference_step(theirs.roformer.eval(), inputs, args.dtype),
                    "ours": inference_step(ours.roformer.eval(), inputs, args.dtype),
                }
                if compiled is not None:
                    steps["ours_compiled"] = inference_step(compiled["encoder"].eval(), inputs, args.dtype)
            print(f"seq {seq} batch {batch} {mode} ...", file=sys.stderr, flush=True)
            seconds = interleaved_medians(steps, args.repeats)
            del steps  # the optimizers' state
            theirs.zero_grad(set_to_none=True)
            ours.zero_grad(set_to_none=True)
            flops = forward_flops(config, batch, seq, mlm_head=training) * (3 if training else 1)
            row = {
                "seq": seq,
                "batch": batch,
                "mode": mode,
                "flops": flops,
                **timing_fields(seconds, flops),
                "speedup": ratio(seconds["theirs"], seconds["ours"]),
            }
            if compiled is not None:
                row["compiled_speedup"] = ratio(seconds["theirs"], seconds["ours_compiled"])
            if training:
                row["sparse_speedup"] = ratio(seconds["theirs"], seconds["ours_sparse"])
            if args.memory:
                row.update(memory_cases(args, seq, batch, mode))
            rows.append(row)
            save(rows, checks)


def compare_linear(args: argparse.Namespace, seqs: list[int], save: Callable[[list[dict], dict], None]) -> None:
    """Ours only: linear bidirectional, linear causal, and softmax (SDPA) for reference; inference."""
    config = their_config(args.size, max(seqs))
    variants = {"linear": ("linear", False), "linear_causal": ("linear", True), "softmax": ("softmax", False)}
    encoders = {}
    for name, (attention, causal) in variants.items():
        torch.manual_seed(0)
        encoder = RoFormerExtModel(our_config(config, attention, causal), add_pooling_layer=False)
        encoders[name] = encoder.to(args.device).eval()
    rows = []
    for seq in seqs:
        batch = max(1, args.tokens // seq)
        inputs = make_inputs(batch, seq, config.vocab_size, device=args.device)
        print(f"seq {seq} batch {batch} linear ...", file=sys.stderr, flush=True)
        steps = {name: inference_step(encoder, inputs, args.dtype) for name, encoder in encoders.items()}
        seconds = interleaved_medians(steps, args.repeats)
        row = {
            "seq": seq,
            "batch": batch,
            "mode": "inference",
            **timing_fields(seconds),
            **{
                f"{name}_us_per_token": 1e6 * t / (batch * seq) if isinstance(t, float) else None
                for name, t in seconds.items()
            },
        }
        if args.memory:
            for name, (attention, causal) in variants.items():
                spec = {
                    "impl": "ours",
                    "mode": "inference",
                    "seq": seq,
                    "batch": batch,
                    "size": args.size,
                    "dtype": args.dtype,
                    "attention": attention,
                    "causal": causal,
                    "device": args.device,
                }
                row[f"{name}_memory"] = measure_memory(spec)
        rows.append(row)
        save(rows, {})


def run(args: argparse.Namespace, argv: list[str]) -> dict:
    """Measure, writing the JSON and Markdown after every case (a long run that dies keeps what it measured)."""
    seqs = args.seqs or DEFAULT_SEQS[args.attention]
    result = {
        "machine": machine_info("bench_model.py", argv),
        "load_average_before": load_average(),
        "size": args.size,
        "config": SIZES[args.size],
        "attention": args.attention,
        "dtype": args.dtype,
        "device": args.device,
        "tokens_per_step": args.tokens,
        "repeats": args.repeats,
        "compile": args.compile,
        "attention_dropout": args.attention_dropout,
        "memory_only": args.memory_only,
        "gemm_size": args.gemm_size,
        "gemm_gflops": {name: gemm_gflops(args.gemm_size, dtype, device=args.device) for name, dtype in DTYPES.items()},
        "results": [],
    }
    stem = "bench_model_linear" if args.attention == "linear" else "bench_model"

    def save(rows: list[dict], checks: dict) -> None:
        result.update(checks, results=rows, load_average_after=load_average())
        write_results(args.out, stem, result, to_markdown(result))

    with address_space_limit(args.device) as budget_mb:
        result["memory_budget_mb"] = budget_mb
        if args.attention == "linear":
            compare_linear(args, seqs, save)
        else:
            (compare_memory if args.memory_only else compare_softmax)(args, seqs, save)
    return result


# --- Markdown -------------------------------------------------------------------------------------------------------


def _mem(row: dict, key: str, field: str = "peak_rss_mb") -> float | str | None:
    memory = row.get(key, {})
    if "error" in memory:
        return "OOM" if memory["error"] == "out of memory" else "error"
    return memory.get(field)


def _peak(result: dict) -> str:
    return PEAK_FIELD[result.get("device", "cpu")]


def _percent(gflops: float | None, peak: float) -> float | None:
    return None if gflops is None else 100 * gflops / peak


MEMORY_HEADER = ["transformers peak MB", "ours peak MB", "memory ratio", "transformers Δ MB", "ours Δ MB"]


def memory_cells(row: dict, sparse: bool, peak: str = "peak_rss_mb") -> list:
    """The MEMORY_HEADER columns of one row (plus "sparse Δ MB" when `sparse`); `peak`: the field of PEAK_FIELD."""
    cells = [
        _mem(row, "theirs_memory", peak),
        _mem(row, "ours_memory", peak),
        row.get("memory_ratio"),
        _mem(row, "theirs_memory", "step_peak_mb"),
        _mem(row, "ours_memory", "step_peak_mb"),
    ]
    return cells + ([_mem(row, "ours_sparse_memory", "step_peak_mb")] if sparse else [])


def softmax_markdown(result: dict) -> str:
    fp32 = result["gemm_gflops"]["fp32"]
    compiled = result["compile"]
    parts = []
    for mode in ("inference", "training"):
        rows = [r for r in result["results"] if r["mode"] == mode]
        if not rows:
            continue
        sparse = mode == "training"
        header = ["seq", "batch", "transformers ms", "ours ms", "speed-up"]
        header += ["compiled ms", "compiled speed-up"] if compiled else []
        header += ["sparse-prediction ms", "sparse speed-up"] if sparse else []
        header += ["ours GFLOP/s", "% of fp32 GEMM", *MEMORY_HEADER]
        header += ["sparse Δ MB"] if sparse else []
        table = []
        for r in rows:
            line = [r["seq"], r["batch"], r["theirs_ms"], r["ours_ms"], r["speedup"]]
            line += [r["ours_compiled_ms"], r["compiled_speedup"]] if compiled else []
            line += [r["ours_sparse_ms"], r["sparse_speedup"]] if sparse else []
            line += [r["ours_gflops"], _percent(r["ours_gflops"], fp32), *memory_cells(r, sparse, _peak(result))]
            table.append(line)
        what = "encoder forward" if mode == "inference" else "MLM forward with labels + backward + AdamW step"
        parts.append(f"#### {mode.capitalize()} ({what})\n\n" + markdown_table(header, table))
    return "\n\n".join(parts)


def memory_markdown(result: dict) -> str:
    header = ["seq", "batch", "mode", *MEMORY_HEADER, "sparse Δ MB"]
    table = [[r["seq"], r["batch"], r["mode"], *memory_cells(r, True, _peak(result))] for r in result["results"]]
    return "#### Peak memory only (each case in a fresh process)\n\n" + markdown_table(header, table)


def linear_markdown(result: dict) -> str:
    names = {"linear": "linear", "linear_causal": "causal", "softmax": "softmax (SDPA)"}
    header = [
        "seq",
        "batch",
        *(f"{label} ms" for label in names.values()),
        *(f"{label} µs/token" for label in names.values()),
        *(f"{label} Δ MB" for label in names.values()),
    ]
    rows = sorted(result["results"], key=lambda r: r["seq"])
    table = [
        [
            r["seq"],
            r["batch"],
            *(r[f"{n}_ms"] for n in names),
            *(r[f"{n}_us_per_token"] for n in names),
            *(_mem(r, f"{n}_memory", "step_peak_mb") for n in names),
        ]
        for r in rows
    ]
    ratios = [
        f"t({hi['seq']})/t({lo['seq']}) = "
        + ", ".join(f"{label} {hi[f'{n}_ms'] / lo[f'{n}_ms']:.2f}" for n, label in names.items())
        + f" [{hi['seq'] / lo['seq']:g}]"
        for lo, hi in itertools.pairwise(rows)
        if lo["batch"] == hi["batch"]
    ]
    scaling = "\n\nTime ratios at equal batch (sequence ratio in brackets): " + "; ".join(ratios) if ratios else ""
    return (
        markdown_table(header, table)
        + scaling
        + (
            "\n\nBidirectional and causal linear attention (φ = elu + 1, RoPE in the numerator) against our softmax "
            "encoder (SDPA: O(N²) time, O(N) memory); inference, no MLM head."
        )
    )


def to_markdown(result: dict) -> str:
    config = result["config"]
    gemm = result["gemm_gflops"]
    title = (
        f"### {'Linear attention' if result['attention'] == 'linear' else 'transformers RoFormer vs ours'}: "
        f"{result['size']} (hidden {config['hidden_size']}, {config['num_hidden_layers']} layers, "
        f"{config['num_attention_heads']} heads, vocab {config['vocab_size']}), {result['dtype']}, "
        + (f"{result['device']}, " if result.get("device", "cpu") != "cpu" else "")
        + f"batch = max(1, {result['tokens_per_step']} // seq), median of {result['repeats']}"
        + (f", attention dropout {result['attention_dropout']:g}" if result.get("attention_dropout") else "")
    )
    if result["attention"] == "linear":
        body = linear_markdown(result)
    else:
        body = memory_markdown(result) if result.get("memory_only") else softmax_markdown(result)
    notes = (
        f"GEMM rate measured in this run ({result['gemm_size']}² matmul): fp32 {gemm['fp32']:.0f} GFLOP/s, "
        f"bf16 {gemm['bf16']:.0f} GFLOP/s. "
        + (
            "Peak MB = torch.cuda.max_memory_allocated of a fresh process running that case; Δ = peak − CUDA memory "
            "allocated before the first step."
            if result.get("device") == "cuda"
            else "Peak MB = ru_maxrss of a fresh process running that case (whole process); Δ = peak − RSS before "
            "the first step."
        )
    )
    if "max_abs_diff_encoder" in result:
        notes += f" Same weights: encoder outputs differ by at most {result['max_abs_diff_encoder']:.1e}."
    return "\n\n".join(
        [
            title,
            body,
            notes,
            machine_markdown(result["machine"], result["load_average_before"], result["load_average_after"]),
        ]
    )


def main(argv: list[str] | None = None) -> dict:
    """Run, write the JSON and Markdown under --out, print the tables; returns the result."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    result = run(args, argv)
    print(to_markdown(result))
    print(f"\nwrote bench_model{'_linear' if args.attention == 'linear' else ''}.json and .md in {args.out}")
    return result


if __name__ == "__main__":
    main()
