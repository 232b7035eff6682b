"""Outside its tested transformers range, the first forward runs `self_check()` on a tiny random model (in its own
thread, so the caller's per-thread state is untouched) and a failure raises `IncompatibleTransformersError`: never
silently wrong, as 5.24's rename of `past_key_values` made every model reading the old name."""

import threading
from collections.abc import Callable

import torch
import transformers
from torch import nn
from transformers.cache_utils import Cache
from transformers.utils import is_vision_available

from .compat import (
    CACHE,
    SUPPORTED_RANGE,
    UPDATE_HINT,
    IncompatibleTransformersError,
    is_tested_release,
    merge_processor_kwargs,
    process_state,
)
from .configuration_roformer_ext import RoFormerExtConfig
from .image_processing_roformer_ext import RoFormerExtImageProcessor
from .processing_roformer_ext import RoFormerExtProcessor, add_vision_tokens
from .tokenization_roformer_ext import RoFormerExtTokenizerFast

_lock, _policy = process_state().lock, process_state().policy


def ensure_compatible(decoder_class: type[nn.Module]) -> None:
    """Outside the tested range, run `self_check` once per process and raise at every forward if it failed."""
    failure = _self_check_failure(decoder_class)
    if failure:
        raise IncompatibleTransformersError(failure)


@torch.compiler.assume_constant_result  # traced, this runs once while the forward is traced: its result a constant
def _self_check_failure(decoder_class: type[nn.Module]) -> str:
    if _policy["tested"] is None:
        _policy["tested"] = is_tested_release(transformers.__version__)
    if _policy["tested"]:
        return ""
    if _policy["failure"] is None and _policy["checker"] != threading.get_ident():  # (not its own tiny model's)
        with _lock:
            if _policy["failure"] is None:
                failures = "; ".join(self_check(decoder_class))
                _policy["failure"] = failures and (
                    f"roformer-ext's self-check failed under transformers {transformers.__version__} (tested: "
                    f"{SUPPORTED_RANGE}); running would give wrong results. What broke: {failures}. {UPDATE_HINT}"
                )
    return _policy["failure"] or ""


def self_check(decoder_class: type[nn.Module]) -> list[str]:
    """What fails on this transformers, one line each, on a tiny random `decoder_class` (a causal LM)."""
    outcome = [["the self-check stopped before it finished"]]

    def run() -> None:
        _policy["checker"] = threading.get_ident()
        try:
            with torch.device("cpu"):
                outcome[0] = _run_checks(decoder_class)
        finally:
            _policy["checker"] = None

    thread = threading.Thread(target=run, name="roformer-ext self-check")
    thread.start()
    thread.join()
    return outcome[0]


def _run_checks(decoder_class: type[nn.Module]) -> list[str]:
    try:
        model = _tiny_decoder(decoder_class)
    except Exception as error:
        return [f"a tiny model builds ({type(error).__name__}: {error})"]
    failures = []
    for name, check in _SELF_CHECKS:
        try:
            check(model)
        except Exception as error:  # each check names itself; the error says how it broke
            failures.append(f"{name} ({type(error).__name__}: {error})")
    return failures


def _tiny_decoder(decoder_class: type[nn.Module]) -> nn.Module:
    sizes = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    config = RoFormerExtConfig(**sizes, is_decoder=True, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)
    with torch.random.fork_rng(devices=[]):  # construction draws from the CPU stream: the caller's is restored
        model = decoder_class(config).float().eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():  # large weights: outputs that depend on every earlier token
            parameter.normal_(0.0, 0.5, generator=generator)
    return model


def _check_generation(model: nn.Module) -> None:
    """`generate` hands the cache under a name the forward reads, and cached greedy scores equal recomputed ones."""
    prompt = torch.tensor([[5, 6, 7, 8, 9]])
    settings = dict(max_new_tokens=4, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    received = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: received.append({k for k, v in kwargs.items() if isinstance(v, Cache)}),
        with_kwargs=True,
    )
    try:
        with torch.no_grad():
            cached = model.generate(prompt, use_cache=True, **settings)
    finally:
        hook.remove()
    names = set().union(*received)
    if not names or not names <= {CACHE, "past_key_values"} or not all(received[1:]):
        raise AssertionError(f"generate passed the cache as {sorted(names) or 'nothing'}; this code reads `{CACHE}`")
    with torch.no_grad():
        recomputed = model.generate(prompt, use_cache=False, **settings)
    if cached.sequences.tolist() != recomputed.sequences.tolist():
        raise AssertionError("cached greedy tokens differ from recomputed ones")
    gap = max((a - b).abs().max().item() for a, b in zip(cached.scores, recomputed.scores))
    if gap > 1e-4:
        raise AssertionError(f"cached scores differ from recomputed ones by {gap:.2e}")


def _check_masks(model: nn.Module) -> None:
    """The mask helpers take what we pass: a left-padded row equals the same prompt alone, eager and sdpa."""
    input_ids = torch.tensor([[0, 0, 5, 6, 7], [9, 8, 7, 6, 5]])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    for implementation in ("eager", "sdpa"):
        model.set_attn_implementation(implementation)
        with torch.no_grad():
            batch = model(input_ids, attention_mask=attention_mask).logits[0, 2:]
            alone = model(input_ids[:1, 2:]).logits[0]
        if not torch.allclose(batch, alone, atol=1e-4):
            raise AssertionError(f"a left-padded row differs from the prompt alone on {implementation}")


def _check_processor(model: nn.Module) -> None:
    """The processor merges its kwargs (skipped without the vision extra)."""
    if not is_vision_available():
        return
    tokenizer = RoFormerExtTokenizerFast(vocab={t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"])})
    add_vision_tokens(tokenizer)
    processor = RoFormerExtProcessor(image_processor=RoFormerExtImageProcessor(), tokenizer=tokenizer)
    merged = merge_processor_kwargs(processor, tokenizer.init_kwargs, {"padding": "max_length", "max_length": 7})
    if merged.get("text_kwargs", {}).get("max_length") != 7:
        raise AssertionError(f"the processor's kwargs were merged as {merged}")
    if len(processor("a a", padding="max_length", max_length=7)["input_ids"][0]) != 7:
        raise AssertionError("the processor dropped its text kwargs")


_SELF_CHECKS: tuple[tuple[str, Callable[[nn.Module], None]], ...] = (
    (
        "cached generation: the cache reaches the forward under the name generate passes, and equals recomputation",
        _check_generation,
    ),
    ("the mask helpers accept what we pass", _check_masks),
    ("the processor merges kwargs", _check_processor),
)
