"""One prepared check of the GPU paths, run by `bash benchmarks/gpu/check.sh` (docs/benchmarks.md#gpu).

A GPU is lent only now and then, for minutes, with no network: this script must be right before one is. Stages, in
order, each with a time budget (a stage that would not fit in what is left of the limit is skipped, with the reason):
- environment: versions, the GPU, which optional packages are installed (flash-attn, datasets);
- gpu_tests: tests/model/test_gpu.py under pytest;
- packed_varlen: DataCollatorWithFlattening's packed row equals the padded batch, per sequence, forward and
  gradients, on sdpa (on CUDA: torch's varlen flash kernel, one call per layer, counted) and flash_attention_2 (its
  varlen kernel reads cu_seq_lens), encoder and causal decoder;
- packed_speed: packed row vs padded batch, time, for the 4,108-token row and a review mix (Rotten Tomatoes lengths),
  on sdpa (varlen) and flex attention (its block mask; CUDA only), inference and a bf16 MLM training step, and the
  packed step's loss against the padded one's;
- modernbert: benchmarks/bench_modernbert.py on the device: ours padded and packed against transformers' ModernBERT
  (sdpa, padded; every layer global, and its local/global default) at matched parameter counts;
- bf16: an MLM training step under bf16 autocast against fp32 (loss, gradient direction, loss after an AdamW step),
  and bf16 greedy generation's logits against the fp32 model on the same tokens;
- benchmark: benchmarks/bench_model.py on the device, transformers' RoFormer vs ours on the same weights at base
  size, inference and training, speed ratios measured in the same run (full: 512 / 2048 / 8192 tokens and the
  peak CUDA memory of every case in a fresh process; quick: 512 / 2048, no memory processes);
- run_mlm: examples/language-modeling/run_mlm.py at base size in bf16 on the statutes text, with the time left
  (full mode only; needs `datasets`).

Every stage records the peak CUDA memory it allocated. A stage passes, fails (a tolerance missed, an error, its
subprocess past its budget) or is skipped (with the reason: no CUDA, a package missing, no time left); the exit
status is 1 if any stage failed. check.json and check.md are written after every stage, so a run cut short keeps
what it measured. `--dry-run` runs the same stages on CPU at tiny sizes (only what needs CUDA is skipped) and is
run by tests/benchmarks/test_gpu_check.py.

    bash benchmarks/gpu/check.sh --quick            # ≤ 3 minutes on one H100 / H200 (limit 170 s + imports)
    bash benchmarks/gpu/check.sh                    # ≤ 8 minutes (limit 450 s + imports)

Beside the working tree the machine needs only what benchmarks/gpu/fetch_wheels.sh lists (a supported transformers,
datasets: about 15 MB, within the 64 MiB the GPU machine takes with the tree); torch (≥ 2.11 for the
varlen kernel's window_size) comes with the GPU image.
    bash benchmarks/gpu/check.sh --dry-run --out /tmp/gpu-dry
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

# bench_model imports roformer_ext: the stages import it, after the environment stage has checked that it imports
from bench_utils import markdown_table, median_seconds, synchronize  # noqa: E402

STAGES = (
    "environment", "gpu_tests", "packed_varlen", "packed_speed", "modernbert", "bf16", "benchmark",
    "run_mlm",
)  # fmt: skip
STATUSES = ("passed", "failed", "skipped")

#: (value, what it bounds). A "max" value is an upper bound (atol = rtol for the `close` ones); `--tolerance-scale`
#: multiplies them all (0 demands bit-equality). bf16 keeps 8 bits of mantissa: one rounding is ~4e-3 relative.
TOLERANCES = {
    "packed_vs_padded_fp32": (1e-5, "packed row vs padded batch, fp32 (atol = rtol), as tests/packing"),
    "packed_vs_padded_bf16": (2e-2, "packed row vs padded batch, bf16 weights (atol = rtol), as tests/model/test_gpu"),
    "packed_grad_rel_fp32": (1e-4, "max |grad(packed) - grad(padded)| / max |grad(padded)|, all parameters, fp32"),
    "packed_grad_rel_bf16": (5e-2, "max |grad(packed) - grad(padded)| / max |grad(padded)|, all parameters, bf16"),
    "bf16_loss_rel": (2e-2, "|loss(bf16 autocast) - loss(fp32)| / loss(fp32), before and after one AdamW step"),
    "bf16_grad_cosine_gap": (1e-2, "1 - cosine(gradient under bf16 autocast, fp32 gradient)"),
    "bf16_logits_rel": (3e-2, "max |bf16 generate logits - fp32 logits on the same tokens| / max |fp32 logits|"),
    "same_weights_abs": (1e-3, "benchmark: max |ours - transformers'| encoder output, fp32, same weights"),
}

#: Per mode: the limit (s; check.sh's imports come on top), each stage's budget (s) and the sizes. A stage starts only
#: if its budget fits in what is left; run_mlm's budget is a minimum: it gets all that is left.
GPU_SIZES = {
    "size": "small",
    "packed_lengths": (512, 1200, 37, 2048, 311),  # 4,108 tokens
    "reviews": 256,  # the review mix: Rotten Tomatoes lengths (bench_modernbert's tokenizer)
    "review_rows": None,
    "flex_batches": ("row", "reviews"),
    "train_batch": (8, 512),
    "mlm_lines": None,
}
PLANS = {
    "full": {
        **GPU_SIZES, "limit": 450, "generate": (2, 64, 32), "repeats": 5,
        "budgets": {"environment": 30, "gpu_tests": 90, "packed_varlen": 45, "packed_speed": 60, "modernbert": 60,
                    "bf16": 45, "benchmark": 120, "run_mlm": 45},
        "modernbert": ["--reviews", "256", "--doc-tokens", "16384", "--repeats", "5"],
        "bench_seqs": (512, 2048, 8192), "bench": ["--size", "base", "--tokens", "16384", "--repeats", "3"],
        "mlm": ["--hidden_size", "768", "--num_hidden_layers", "12", "--num_attention_heads", "12",
                "--intermediate_size", "3072", "--vocab_size", "8000", "--max_seq_length", "512", "--bf16",
                "--per_device_train_batch_size", "32", "--max_steps", "200", "--max_eval_samples", "512"],
    },
    "quick": {
        **GPU_SIZES, "limit": 170, "generate": (2, 64, 16), "repeats": 3,
        "budgets": {"environment": 10, "gpu_tests": 35, "packed_varlen": 20, "packed_speed": 30, "modernbert": 25,
                    "bf16": 15, "benchmark": 35, "run_mlm": 0},
        "modernbert": ["--reviews", "128", "--doc-lengths", "512", "2048", "--repeats", "3"],
        "flex_batches": ("row",),  # flex compiles per shape: the review mix in the full check only
        "bench_seqs": (512,), "bench": ["--size", "base", "--tokens", "16384", "--repeats", "2", "--no-memory"],
        "mlm": [],
    },
    "dry-run": {  # generous budgets: CI machines are shared (the time it took is in the report)
        "limit": 780, "size": "tiny", "packed_lengths": (5, 9, 3, 8),
        "train_batch": (2, 16), "generate": (2, 5, 4), "mlm_lines": 200, "repeats": 1, "reviews": 6,
        "review_rows": 300, "flex_batches": (),
        "budgets": {"environment": 30, "gpu_tests": 120, "packed_varlen": 60, "packed_speed": 60, "modernbert": 120,
                    "bf16": 60, "benchmark": 150, "run_mlm": 120},
        "modernbert": ["--quick"],
        "bench_seqs": (16,), "bench": ["--size", "tiny", "--tokens", "32", "--repeats", "1", "--gemm-size", "64",
                                       "--no-memory"],
        "mlm": ["--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "4",
                "--intermediate_size", "64", "--vocab_size", "500", "--vocab_min_frequency", "1",
                "--max_seq_length", "64", "--per_device_train_batch_size", "8", "--max_steps", "2",
                "--max_eval_samples", "16"],
    },
}  # fmt: skip


class Skip(Exception):
    """The stage (or all of it that matters) cannot run here; the message is the recorded reason."""


class CheckFailed(Exception):
    """A comparison missed its tolerance; the message says which and by how much."""


@dataclass
class Context:
    mode: str
    device: str
    out: Path
    deadline: float
    plan: dict
    tolerance: dict[str, float]
    budget: float = 0.0
    details: dict = field(default_factory=dict)


# --- helpers --------------------------------------------------------------------------------------------------------


def subprocess_env() -> dict[str, str]:
    """The working tree's src first, offline: what check.sh sets, also when check.py is run on its own."""
    path = os.environ.get("PYTHONPATH", "")
    src = str(REPO / "src")
    return {
        **os.environ,
        "PYTHONPATH": path if src in path.split(os.pathsep) else os.pathsep.join(filter(None, [src, path])),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def run_logged(command: list[str], log: Path, timeout: float, cwd: Path = REPO) -> int | None:
    """Run `command` with its output in `log`; the exit code, or None when it ran past `timeout` (then killed)."""
    with open(log, "w") as handle:
        try:
            return subprocess.run(
                command, cwd=cwd, env=subprocess_env(), stdout=handle, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            return None


def tail(path: Path, chars: int = 1500) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def close(got: torch.Tensor, want: torch.Tensor, tol: float) -> tuple[bool, float]:
    """torch.testing.assert_close's rule (|got - want| ≤ atol + rtol·|want|, atol = rtol = tol), without raising."""
    got, want = got.float(), want.float()
    diff = (got - want).abs()
    return bool((diff <= tol + tol * want.abs()).all()), diff.max().item()


def median_ms(fn: Callable[[], object], device: str, repeats: int = 5) -> float:
    def timed() -> None:
        fn()
        synchronize(device)

    return 1e3 * median_seconds(timed, repeats)


def model_config(size: str, **overrides):
    from bench_model import SIZES

    from roformer_ext import RoFormerExtConfig

    values = dict(SIZES[size], type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return RoFormerExtConfig(**{**values, **overrides})


def flash_attention_reason(device: str) -> str | None:
    """Why flash_attention_2 cannot run here, or None."""
    from transformers.utils import is_flash_attn_2_available

    if device != "cuda":
        return "needs CUDA"
    if not is_flash_attn_2_available():
        return "flash-attn is not installed (transformers' is_flash_attn_2_available() is False)"
    return None


@contextlib.contextmanager
def varlen_calls() -> Iterator[list[int]]:
    """Counts the calls of torch's varlen kernel from roformer_ext's packed path: the route the attention plan chose."""
    from roformer_ext import packing

    kernel, calls = packing.varlen_attn, [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return kernel(*args, **kwargs)

    packing.varlen_attn = counted
    try:
        yield calls
    finally:
        packing.varlen_attn = kernel


def gradient_gap(model: torch.nn.Module, packed: dict, padded: dict, lengths: list[int]) -> float:
    """max |grad(packed) - grad(padded)| / max |grad(padded)| over all parameters, for the same loss on both: a fixed
    random projection of each real token's output."""
    generator = torch.Generator().manual_seed(2)
    device = padded["input_ids"].device
    probes = [torch.randn(n, model.config.hidden_size, generator=generator).to(device) for n in lengths]
    grads = []
    for inputs, pieces in (
        (packed, lambda out: torch.split(out[0], lengths)),
        (padded, lambda out: [out[index, :n] for index, n in enumerate(lengths)]),
    ):
        model.zero_grad(set_to_none=True)
        out = model(**inputs).last_hidden_state
        sum((piece.float() * probe).sum() for piece, probe in zip(pieces(out), probes)).backward()
        grads.append(torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None]))
    model.zero_grad(set_to_none=True)
    return ((grads[0] - grads[1]).abs().max() / grads[1].abs().max()).item()


def fail_if(failures: list[str]) -> None:
    if failures:
        raise CheckFailed("; ".join(failures))


# --- stages ---------------------------------------------------------------------------------------------------------


def stage_environment(ctx: Context) -> None:
    """Versions and devices; fails when roformer_ext is not the working tree's or (off the dry run) there is no GPU."""
    import transformers

    details = ctx.details
    details.update(
        python=sys.version.split()[0],
        torch=torch.__version__,
        cuda=torch.version.cuda,
        transformers=transformers.__version__,
        gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        optional={name: importlib.util.find_spec(name) is not None for name in ("flash_attn", "datasets")},
    )
    if ctx.device == "cuda":
        if not torch.cuda.is_available():
            raise CheckFailed("no CUDA device: run `check.sh --dry-run` on a machine without one")
        details["gpu_memory_gb"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    try:
        import roformer_ext
    except ImportError as error:
        raise CheckFailed(
            f"roformer_ext does not import: {error} (carry supported wheels: benchmarks/gpu/fetch_wheels.sh, "
            "then check.sh --wheels .whl)"
        ) from error
    from roformer_ext.compat import is_tested_release
    from roformer_ext.self_check import self_check

    details["transformers_tested"] = is_tested_release(transformers.__version__)
    if not details["transformers_tested"]:  # outside the tested range: the self-check a model runs at its first forward
        failures = self_check(roformer_ext.RoFormerExtForCausalLM)
        if failures:
            raise CheckFailed(f"roformer_ext's self-check fails on this transformers: {'; '.join(failures)}")
    location = Path(roformer_ext.__file__).resolve()
    if not location.is_relative_to(REPO / "src"):
        raise CheckFailed(f"roformer_ext comes from {location}, not this working tree: set PYTHONPATH=src")
    details["roformer_ext"] = str(location.relative_to(REPO))
    details["summary"] = (
        f"{details['gpu'] or 'CPU'}, torch {torch.__version__}, transformers {transformers.__version__}"
    )


def stage_gpu_tests(ctx: Context) -> None:
    """tests/model/test_gpu.py under pytest; counts, skip reasons and failures from its JUnit XML."""
    log = ctx.out / "gpu_tests.log"
    with tempfile.TemporaryDirectory() as folder:
        xml = Path(folder) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}"]
        code = run_logged([*command, "tests/model/test_gpu.py"], log, ctx.budget)
        cases = ElementTree.parse(xml).getroot().iter("testcase") if xml.exists() else []
        outcome = {"passed": [], "skipped": {}, "failed": {}}
        for case in cases:
            name = case.get("name")
            problem = case.find("failure") if case.find("failure") is not None else case.find("error")
            if problem is not None:
                outcome["failed"][name] = (problem.get("message") or "")[:300]
            elif case.find("skipped") is not None:
                outcome["skipped"][name] = case.find("skipped").get("message")
            else:
                outcome["passed"].append(name)
    ctx.details.update(outcome, exit_code=code, log=log.name)
    if code is None:
        raise CheckFailed(f"pytest ran past its budget of {ctx.budget:.0f} s ({log.name})")
    if code != 0 or outcome["failed"]:
        raise CheckFailed(f"pytest exit code {code}; failed: {sorted(outcome['failed'])}; {log.name}: {tail(log, 600)}")
    ctx.details["summary"] = f"{len(outcome['passed'])} passed, {len(outcome['skipped'])} skipped"


def stage_packed_varlen(ctx: Context) -> None:
    """A packed row (DataCollatorWithFlattening, cu_seq_lens) equals the padded batch per sequence, forward and
    gradients; on CUDA sdpa's packed row takes torch's varlen kernel once per layer. Times both."""
    from bench_model import SIZES
    from transformers import DataCollatorWithFlattening

    from roformer_ext import RoFormerExtModel

    device, cuda = ctx.device, ctx.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    tol = ctx.tolerance["packed_vs_padded_bf16" if cuda else "packed_vs_padded_fp32"]
    grad_tol = ctx.tolerance["packed_grad_rel_bf16" if cuda else "packed_grad_rel_fp32"]
    lengths = ctx.plan["packed_lengths"]
    vocab = SIZES[ctx.plan["size"]]["vocab_size"]
    generator = torch.Generator().manual_seed(1)
    seqs = [torch.randint(5, vocab, (n,), generator=generator).tolist() for n in lengths]
    packed = DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": s} for s in seqs])
    packed.pop("labels")
    packed = {k: v.to(device) if torch.is_tensor(v) else v for k, v in packed.items()}
    longest = max(lengths)
    input_ids = torch.tensor([s + [0] * (longest - len(s)) for s in seqs], device=device)
    attention_mask = torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in seqs], device=device)
    cases, skipped, failures = {}, {}, []
    for impl in ("sdpa", "flash_attention_2"):
        if impl == "flash_attention_2" and (reason := flash_attention_reason(device)):
            skipped[impl] = reason
            continue
        for decoder in (False, True):
            name = f"{impl}, {'decoder' if decoder else 'encoder'}"
            torch.manual_seed(0)
            config = model_config(ctx.plan["size"], is_decoder=decoder)
            model = RoFormerExtModel._from_config(config, attn_implementation=impl, dtype=dtype).to(device).eval()
            with torch.no_grad():
                padded = model(input_ids, attention_mask=attention_mask).last_hidden_state
                with varlen_calls() as calls:
                    row = model(**packed).last_hidden_state
                ok, max_diff = True, 0.0
                for index, piece in enumerate(torch.split(row[0], lengths)):
                    piece_ok, diff = close(piece, padded[index, : lengths[index]], tol)
                    ok, max_diff = ok and piece_ok, max(max_diff, diff)
                cases[name] = {
                    "max_abs_diff": max_diff,
                    "varlen_calls": calls[0],
                    "packed_ms": median_ms(lambda m=model: m(**packed), device),
                    "padded_ms": median_ms(lambda m=model: m(input_ids, attention_mask=attention_mask), device),
                }
            padded_inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            cases[name]["grad_rel"] = gradient_gap(model, packed, padded_inputs, list(lengths))
            if not ok:
                failures.append(f"{name}: packed vs padded max |diff| {max_diff:.2e} > tolerance {tol:g}")
            if not cases[name]["grad_rel"] <= grad_tol:
                failures.append(f"{name}: gradients differ by {cases[name]['grad_rel']:.2e} > {grad_tol:g} (relative)")
            if cuda and impl == "sdpa" and calls[0] != config.num_hidden_layers:
                failures.append(f"{name}: {calls[0]} varlen kernel calls for {config.num_hidden_layers} layers")
    ctx.details.update(
        dtype=str(dtype).removeprefix("torch."), lengths=list(lengths), tolerance=tol, grad_tolerance=grad_tol,
        cases=cases, skipped=skipped,
    )  # fmt: skip
    fail_if(failures)
    ctx.details["summary"] = ", ".join(
        f"{name} {case['max_abs_diff']:.1e} (grad {case['grad_rel']:.1e})" for name, case in cases.items()
    )


def time_layout(model: torch.nn.Module, batch: dict, layout: str, dtype: str, repeats: int) -> dict:
    """One layout's varlen calls (one forward), inference and training times (ms)."""
    from bench_model import autocast

    device = batch["input_ids"].device
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def infer() -> None:
        with torch.inference_mode(), autocast(dtype, device):
            model.roformer(**inputs)

    def train() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast(dtype, device):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()

    model.eval()
    with varlen_calls() as calls:
        infer()
    measured = {f"{layout}_varlen_calls": calls[0], f"{layout}_inference_ms": median_ms(infer, device, repeats)}
    model.train()
    measured[f"{layout}_training_ms"] = median_ms(train, device, repeats)
    return measured


def stage_packed_speed(ctx: Context) -> None:
    """Packed row vs padded batch, time (the 4,108-token row and the review mix) on sdpa (torch's varlen kernel on
    CUDA) and flex attention (its block mask over the row), inference and a bf16 MLM training step; the packed step's
    loss against the padded one's."""
    from bench_model import autocast
    from bench_modernbert import corpus_lengths, layouts

    from roformer_ext import RoFormerExtForMaskedLM

    device, cuda = ctx.device, ctx.device == "cuda"
    dtype = "bf16" if cuda else "fp32"
    config = model_config(ctx.plan["size"])
    wordpiece = argparse.Namespace(corpus_rows=ctx.plan["review_rows"], vocab=config.vocab_size)
    reviews = corpus_lengths(wordpiece)["rotten_tomatoes"]
    mix = [reviews[i] for i in torch.randperm(len(reviews), generator=torch.Generator().manual_seed(0)).tolist()]
    lengths = {"row": list(ctx.plan["packed_lengths"]), "reviews": mix[: ctx.plan["reviews"]]}
    data = {name: layouts(seqs, config.vocab_size, 0, device) for name, seqs in lengths.items()}
    cases, skipped, failures = {}, {}, []
    for impl in ("sdpa", "flex_attention"):
        names = list(lengths) if impl == "sdpa" else [n for n in lengths if cuda and n in ctx.plan["flex_batches"]]
        if impl == "flex_attention" and not cuda:
            skipped[impl] = "CUDA only: flex attention compiles its kernels, minutes on a shared CPU runner"
        torch.manual_seed(0)
        model = RoFormerExtForMaskedLM._from_config(config, attn_implementation=impl).to(device)
        for name in names:
            case = cases[f"{impl}, {name}"] = {"sequences": len(lengths[name]), "tokens": sum(lengths[name])}
            with torch.no_grad(), autocast(dtype, device):  # before any step changes the weights
                case.update({f"{layout}_loss": model(**batch).loss.item() for layout, batch in data[name].items()})
            for layout, batch in data[name].items():
                case.update(time_layout(model, batch, layout, dtype, ctx.plan["repeats"]))
            for mode in ("inference", "training"):
                case[f"{mode}_packed_over_padded"] = case[f"packed_{mode}_ms"] / case[f"padded_{mode}_ms"]
            case["loss_rel"] = abs(case["packed_loss"] - case["padded_loss"]) / abs(case["padded_loss"])
            if not case["loss_rel"] <= ctx.tolerance["bf16_loss_rel"]:
                failures.append(f"{impl}, {name}: packed loss vs padded rel {case['loss_rel']:.2e}")
            if cuda and impl == "sdpa" and case["packed_varlen_calls"] != config.num_hidden_layers:
                failures.append(f"{impl}, {name}: {case['packed_varlen_calls']} varlen kernel calls")
    ctx.details.update(dtype=dtype, lengths=lengths, cases=cases, skipped=skipped)
    fail_if(failures)
    ctx.details["summary"] = "packed / padded time: " + "; ".join(
        f"{name} inference {c['inference_packed_over_padded']:.2f}, training {c['training_packed_over_padded']:.2f}"
        for name, c in cases.items()
    )


def stage_modernbert(ctx: Context) -> None:
    """benchmarks/bench_modernbert.py on the device: ours padded and packed against ModernBERT (sdpa, padded; global
    and local/global) at matched parameter counts; ModernBERT's time over ours from its JSON."""
    log = ctx.out / "modernbert.log"
    result_path = ctx.out / "bench_modernbert.json"
    result_path.unlink(missing_ok=True)
    dtype = "bf16" if ctx.device == "cuda" else "fp32"
    command = [sys.executable, "benchmarks/bench_modernbert.py", "--device", ctx.device, "--dtype", dtype]
    code = run_logged([*command, *ctx.plan["modernbert"], "--out", str(ctx.out)], log, ctx.budget)
    result = json.loads(result_path.read_text()) if result_path.exists() else {"batches": []}
    ratios = {
        f"{batch['batch']} {mode}": {
            key: cases[key].get("time_vs_ours_packed") for key in ("modernbert_global", "modernbert_local")
        }
        for batch in result["batches"]
        for mode, cases in batch["modes"].items()
    }
    ctx.details.update(exit_code=code, sizes=result.get("sizes"), modernbert_time_over_ours_packed=ratios)
    ctx.details["tables"] = "bench_modernbert.md"
    if code is None:
        raise CheckFailed(f"bench_modernbert.py ran past its budget of {ctx.budget:.0f} s")
    if code != 0:
        raise CheckFailed(f"bench_modernbert.py exit code {code}: {tail(log, 800)}")
    log.unlink()
    ctx.details["summary"] = "ModernBERT global / ours packed: " + "; ".join(
        f"{name} {value['modernbert_global']:.2f}" for name, value in ratios.items() if value["modernbert_global"]
    )


def stage_bf16(ctx: Context) -> None:
    """bf16 autocast training step and bf16 generate against fp32 on the same weights and inputs."""
    from bench_model import autocast, make_inputs, mlm_labels

    from roformer_ext import RoFormerExtForCausalLM, RoFormerExtForMaskedLM

    device, tol, failures = ctx.device, ctx.tolerance, []
    batch, seq = ctx.plan["train_batch"]
    torch.manual_seed(0)
    mlm = RoFormerExtForMaskedLM(model_config(ctx.plan["size"])).to(device).train()
    inputs = make_inputs(batch, seq, mlm.config.vocab_size, device=device)
    labels = mlm_labels(inputs["input_ids"])

    def train(model: torch.nn.Module, dtype: str) -> tuple[float, torch.Tensor, float]:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        with autocast(dtype, device):
            loss = model(**inputs, labels=labels).loss
        loss.backward()
        grads = torch.cat([p.grad.flatten().double() for p in model.parameters() if p.grad is not None])
        optimizer.step()
        with torch.no_grad(), autocast(dtype, device):
            after = model(**inputs, labels=labels).loss
        return loss.item(), grads, after.item()

    loss32, grads32, after32 = train(copy.deepcopy(mlm), "fp32")
    loss16, grads16, after16 = train(copy.deepcopy(mlm), "bf16")
    training = {
        "loss_fp32": loss32,
        "loss_bf16": loss16,
        "loss_rel": abs(loss16 - loss32) / abs(loss32),
        "loss_after_step_fp32": after32,
        "loss_after_step_bf16": after16,
        "loss_after_step_rel": abs(after16 - after32) / abs(after32),
        "grad_cosine": torch.nn.functional.cosine_similarity(grads16, grads32, dim=0).item(),
    }
    for key in ("loss_rel", "loss_after_step_rel"):
        if not training[key] <= tol["bf16_loss_rel"]:
            failures.append(f"training {key} {training[key]:.2e} > {tol['bf16_loss_rel']:g}")
    if not 1 - training["grad_cosine"] <= tol["bf16_grad_cosine_gap"]:
        failures.append(f"gradient cosine {training['grad_cosine']:.5f} < {1 - tol['bf16_grad_cosine_gap']:g}")
    if not (after32 < loss32 and after16 < loss16):
        failures.append("one AdamW step did not lower the loss on its own batch")

    rows, prompt_len, new_tokens = ctx.plan["generate"]
    torch.manual_seed(0)
    lm32 = RoFormerExtForCausalLM(model_config(ctx.plan["size"], is_decoder=True)).to(device).eval()
    lm16 = copy.deepcopy(lm32).to(torch.bfloat16)
    prompt = make_inputs(rows, prompt_len, lm32.config.vocab_size, seed=1, device=device)["input_ids"]
    greedy = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        out16 = lm16.generate(prompt, return_dict_in_generate=True, output_logits=True, **greedy)
        logits16 = torch.stack(out16.logits, dim=1).float()  # (rows, new_tokens, vocab)
        reference = lm32(out16.sequences).logits[:, prompt_len - 1 : -1]  # fp32 on bf16's tokens, no cache
        tokens32 = lm32.generate(prompt, **greedy)[:, prompt_len:]
    generate = {
        "logits_rel": ((logits16 - reference).abs().max() / reference.abs().max()).item(),
        "token_agreement": (tokens32 == out16.sequences[:, prompt_len:]).float().mean().item(),
        "new_tokens": new_tokens,
    }
    if not generate["logits_rel"] <= tol["bf16_logits_rel"]:
        failures.append(f"generate logits_rel {generate['logits_rel']:.2e} > {tol['bf16_logits_rel']:g}")
    ctx.details.update(training=training, generate=generate, train_batch=[batch, seq])
    fail_if(failures)
    ctx.details["summary"] = (
        f"loss rel {training['loss_rel']:.1e}, grad cos {training['grad_cosine']:.4f}, "
        f"generate logits rel {generate['logits_rel']:.1e}, tokens agree {generate['token_agreement']:.0%}"
    )


def stage_benchmark(ctx: Context) -> None:
    """benchmarks/bench_model.py on the device (bf16 autocast); speed-ups and memory ratios from its JSON."""
    log = ctx.out / "benchmark.log"
    seqs = [str(seq) for seq in ctx.plan["bench_seqs"]]
    command = [sys.executable, "benchmarks/bench_model.py", "--device", ctx.device, "--dtype", "bf16", "--seqs", *seqs]
    result_path = ctx.out / "bench_model.json"
    result_path.unlink(missing_ok=True)  # a folder reused: never read an earlier run's rows
    code = run_logged([*command, *ctx.plan["bench"], "--out", str(ctx.out)], log, ctx.budget)
    result = json.loads(result_path.read_text()) if result_path.exists() else {"results": []}
    keys = ("seq", "batch", "mode", "theirs_ms", "ours_ms", "speedup", "sparse_speedup", "memory_ratio")
    rows = [{k: row.get(k) for k in keys} for row in result["results"]]
    ctx.details.update(exit_code=code, rows=rows, max_abs_diff_encoder=result.get("max_abs_diff_encoder"))
    ctx.details["tables"] = "bench_model.md"
    if code is None:
        raise CheckFailed(f"bench_model.py ran past its budget of {ctx.budget:.0f} s; {len(rows)} rows kept")
    if code != 0:
        raise CheckFailed(f"bench_model.py exit code {code}: {tail(log, 800)}")
    log.unlink()  # on success the JSON and Markdown say it all
    expected = 2 * len(seqs)  # inference and training at each length
    if len(rows) != expected:
        raise CheckFailed(f"{len(rows)} benchmark rows, expected {expected}")
    diff = ctx.details["max_abs_diff_encoder"]
    if not diff <= ctx.tolerance["same_weights_abs"]:
        raise CheckFailed(f"same weights, encoder outputs differ by {diff:.2e} > {ctx.tolerance['same_weights_abs']:g}")
    ctx.details["summary"] = "; ".join(
        f"{r['mode']} {r['seq']}: "
        + (f"×{r['speedup']:.2f}" if r["speedup"] else f"{r['theirs_ms']} vs {r['ours_ms']}")
        for r in rows  # no speed-up: a case ran out of memory
    )


def stage_run_mlm(ctx: Context) -> None:
    """examples/language-modeling/run_mlm.py from scratch on the statutes text (shipped in examples/data)."""
    if not ctx.plan["mlm"]:
        raise Skip("quick mode: the pretraining script runs in the full check only")
    try:
        import datasets  # noqa: F401
    except Exception as error:  # noqa: BLE001 (any import failure: the environment lacks it, not our code)
        raise Skip(f"datasets does not import ({error}); carry its wheels: benchmarks/gpu/fetch_wheels.sh") from None
    import lzma

    log = ctx.out / "run_mlm.log"
    with lzma.open(REPO / "examples/data/statutes.jsonl.xz", "rt", encoding="utf-8") as handle:
        texts = [json.loads(line)["text"].replace("\n", " ") for line in handle]
    texts = texts[: ctx.plan["mlm_lines"]]
    with tempfile.TemporaryDirectory() as folder:
        train_file, output_dir = Path(folder) / "statutes.txt", Path(folder) / "mlm"
        train_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
        command = [sys.executable, "run_mlm.py", "--train_file", str(train_file), "--output_dir", str(output_dir),
                   "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", "--learning_rate", "5e-4",
                   "--pair_layout", "half", *ctx.plan["mlm"]]  # fmt: skip
        code = run_logged(command, log, ctx.budget, cwd=REPO / "examples/language-modeling")
        results = output_dir / "all_results.json"
        metrics = json.loads(results.read_text()) if results.exists() else {}
    (ctx.out / "run_mlm_results.json").write_text(json.dumps(metrics, indent=2) + "\n")
    keep = ("train_loss", "eval_loss", "perplexity", "train_runtime", "train_samples_per_second", "train_blocks")
    ctx.details.update(exit_code=code, lines=len(texts), metrics={k: metrics.get(k) for k in keep}, log=log.name)
    if code is None:
        raise CheckFailed(f"run_mlm.py ran past the {ctx.budget:.0f} s left ({log.name})")
    if code != 0:
        raise CheckFailed(f"run_mlm.py exit code {code}: {tail(log, 800)}")
    losses = [metrics.get("train_loss"), metrics.get("eval_loss")]
    if not all(isinstance(x, float) and math.isfinite(x) for x in losses):
        raise CheckFailed(f"run_mlm.py losses are not finite numbers: {losses}")
    ctx.details["summary"] = f"train loss {losses[0]:.3f}, eval loss {losses[1]:.3f}, {metrics.get('train_runtime')} s"


STAGE_FUNCTIONS: dict[str, Callable[[Context], None]] = {
    "environment": stage_environment,
    "gpu_tests": stage_gpu_tests,
    "packed_varlen": stage_packed_varlen,
    "packed_speed": stage_packed_speed,
    "modernbert": stage_modernbert,
    "bf16": stage_bf16,
    "benchmark": stage_benchmark,
    "run_mlm": stage_run_mlm,
}


# --- running, the report --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help=f"at most {PLANS['quick']['limit']} s: no run_mlm")
    mode.add_argument("--dry-run", action="store_true", help="every stage on CPU at tiny sizes (CI)")
    parser.add_argument("--out", required=True, help="folder for check.json, check.md and the stages' files")
    parser.add_argument("--stages", nargs="+", choices=STAGES, help="run only these (the others: skipped)")
    parser.add_argument("--limit", type=float, help="total seconds (default: by mode)")
    parser.add_argument(
        "--tolerance-scale",
        type=float,
        default=1.0,
        help="multiply every tolerance (0: demand bit-equality, which the bf16 stage cannot meet)",
    )
    args = parser.parse_args(argv)
    if args.tolerance_scale < 0:
        parser.error(f"--tolerance-scale must be ≥ 0, got {args.tolerance_scale}")
    if args.limit is not None and args.limit <= 0:
        parser.error(f"--limit must be a positive number of seconds, got {args.limit}")
    return args


def run_stage(name: str, ctx: Context, report: dict, blocked: str | None) -> dict:
    """Run one stage within its budget; a stage that raises fails, one that raises Skip is skipped."""
    plan_budget = ctx.plan["budgets"][name]
    left = ctx.deadline - time.monotonic()
    record = {"name": name, "status": "skipped", "seconds": 0.0, "budget_s": plan_budget, "details": {}}
    if blocked:
        return {**record, "reason": blocked}
    if left < plan_budget:
        reason = f"time budget: {left:.0f} s left of {report['limit_s']:.0f} s, stage needs {plan_budget} s"
        return {**record, "reason": reason}
    ctx.budget = left if name == "run_mlm" else plan_budget  # the pretraining script takes the time left
    ctx.details = record["details"]
    if ctx.device == "cuda" and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    start = time.monotonic()
    try:
        STAGE_FUNCTIONS[name](ctx)
        record["status"] = "passed"
    except Skip as skip:
        record.update(status="skipped", reason=str(skip))
    except Exception as error:  # noqa: BLE001 (every failure is recorded; the run goes on to the next stage)
        record.update(status="failed", reason=f"{type(error).__name__}: {error}")
        if not isinstance(error, CheckFailed):
            record["details"]["traceback"] = traceback.format_exc()[-3000:]
    record["seconds"] = round(time.monotonic() - start, 2)
    if ctx.device == "cuda" and torch.cuda.is_available():
        record["details"]["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return record


def validate_report(report: dict) -> None:
    """The report's schema (the dry run in CI checks it): every stage once, in order, a status, a reason if not passed."""
    problems = []
    for key in ("schema", "mode", "device", "started", "limit_s", "elapsed_s", "tolerances", "stages", "ok", "counts"):
        if key not in report:
            problems.append(f"missing key {key!r}")
    names = [stage.get("name") for stage in report.get("stages", [])]
    if names != list(STAGES):
        problems.append(f"stages {names} != {list(STAGES)}")
    for stage in report.get("stages", []):
        if stage.get("status") not in STATUSES:
            problems.append(f"{stage.get('name')}: status {stage.get('status')!r} not in {STATUSES}")
        if stage.get("status") != "passed" and not stage.get("reason"):
            problems.append(f"{stage.get('name')}: {stage.get('status')} without a reason")
        if not isinstance(stage.get("seconds"), (int, float)) or stage["seconds"] < 0:
            problems.append(f"{stage.get('name')}: seconds {stage.get('seconds')!r}")
    if report.get("ok") != all(stage.get("status") != "failed" for stage in report.get("stages", [])):
        problems.append("ok disagrees with the stages")
    if problems:
        raise ValueError("check.json does not follow its schema: " + "; ".join(problems))


def _escaped(text: object) -> object:
    """A Markdown table cell: a `|` inside would end it."""
    return text.replace("|", "\\|") if isinstance(text, str) else text


def _summary(stage: dict) -> str:
    return _escaped(stage.get("reason") or stage["details"].get("summary", ""))


def to_markdown(report: dict) -> str:
    counts = report["counts"]
    lines = [
        f"# GPU check: {report['mode']}, {report['device']} ({report.get('gpu') or 'no GPU'}), {report['started']}",
        "",
        f"**{'PASSED' if report['ok'] else 'FAILED'}**: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped in {report['elapsed_s']:.0f} s (limit {report['limit_s']:.0f} s).",
        "",
        markdown_table(
            ["stage", "status", "seconds", "budget s", "result or reason"],
            [[s["name"], s["status"], s["seconds"], s["budget_s"], _summary(s)] for s in report["stages"]],
        ),
        "",
        "## Tolerances (after --tolerance-scale " + f"{report['tolerance_scale']:g})",
        "",
        markdown_table(
            ["name", "value", "bounds"], [[k, v["value"], _escaped(v["what"])] for k, v in report["tolerances"].items()]
        ),
    ]
    for stage in report["stages"]:
        shown = {k: v for k, v in stage["details"].items() if k not in ("summary", "traceback")}
        if shown:
            lines += ["", f"## {stage['name']}", "", "```json", json.dumps(shown, indent=1)[:4000], "```"]
    for tables in ("bench_modernbert.md", "bench_model.md"):
        if (Path(report["out"]) / tables).exists():
            lines += ["", f"## Benchmark tables ({tables})", "", (Path(report["out"]) / tables).read_text()]
    lines += ["", f"Command: `{report['command']}`"]
    return "\n".join(lines)


def write_report(report: dict, out: Path) -> None:
    report["counts"] = {status: sum(s["status"] == status for s in report["stages"]) for status in STATUSES}
    report["ok"] = report["counts"]["failed"] == 0
    (out / "check.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "check.md").write_text(to_markdown(report) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Run the stages, write check.json / check.md after each; 0 if none failed, 1 if one did, 2 on a bad report."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    mode = "dry-run" if args.dry_run else "quick" if args.quick else "full"
    plan = PLANS[mode]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    limit = args.limit or plan["limit"]
    start = time.monotonic()
    tolerances = {name: value * args.tolerance_scale for name, (value, _) in TOLERANCES.items()}
    ctx = Context(mode, "cpu" if args.dry_run else "cuda", out, start + limit, plan, tolerances)
    report = {
        "schema": 1,
        "mode": mode,
        "device": ctx.device,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "started": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "limit_s": limit,
        "elapsed_s": 0.0,
        "out": str(out),
        "command": " ".join(["bash benchmarks/gpu/check.sh", *argv]),
        "tolerance_scale": args.tolerance_scale,
        "tolerances": {name: {"value": tolerances[name], "what": what} for name, (_, what) in TOLERANCES.items()},
        "stages": [],
    }
    blocked = None
    for name in STAGES:
        stage_blocked = blocked or (None if not args.stages or name in args.stages else "not selected (--stages)")
        if name == "environment":
            stage_blocked = None  # always: the other stages' results mean nothing without it
        print(f"[gpu check] {name} ...", file=sys.stderr, flush=True)
        record = run_stage(name, ctx, report, stage_blocked)
        print(f"[gpu check] {name}: {record['status']} {record.get('reason', '')}", file=sys.stderr, flush=True)
        report["stages"].append(record)
        if name == "environment" and record["status"] == "failed":
            blocked = "the environment stage failed"
        report["elapsed_s"] = round(time.monotonic() - start, 2)
        write_report(report, out)
    try:
        validate_report(report)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    print((out / "check.md").read_text())
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
