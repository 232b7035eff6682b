"""Every difference between supported transformers releases and every private name reached, decided once here (by
feature detection). An untested release gets one warning and a self-check (self_check.py), never a refusal. Imports
nothing of the package."""

import functools
import inspect
import sys
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch
import transformers
from packaging.version import Version
from torch import nn
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import is_flash_attention_requested

#: The tested range (CI runs both ends; setup.cfg declares it): the first release outside is the next minor.
LOWEST_TRANSFORMERS, TRANSFORMERS_BELOW = "5.21.0", "5.26.0"
SUPPORTED_RANGE = f"transformers>={LOWEST_TRANSFORMERS},<{TRANSFORMERS_BELOW}"
LOWEST_TORCH = "2.13.0"
#: How a user gets code that knows a newer transformers (the warning and a failed self-check say it).
UPDATE_HINT = (
    "Get updated code: `git pull && pip install -e .` in a clone of roformer-ext, then `roformer-ext update-code "
    "FOLDER` gives a saved folder that version's code; for a folder whose config.json `auto_map` names a code "
    "repository (`owner/repo--...`), that repository's maintainer publishes the fix once with `roformer-ext push-code "
    f'owner/repo` and every checkpoint pointing there gets it. Meanwhile a tested release works: pip install "{SUPPORTED_RANGE}".'
)


class UntestedTransformersWarning(UserWarning):
    """transformers is outside the tested range (it still runs, self-checked)."""


class IncompatibleTransformersError(RuntimeError):
    """transformers failed the self-check: running would give wrong results."""


def is_tested_release(version: str) -> bool:
    """Whether `version` is in the tested range (pre-releases of the first release outside are outside)."""
    parsed = Version(version)
    return parsed >= Version(LOWEST_TRANSFORMERS) and parsed.release < Version(TRANSFORMERS_BELOW).release


def process_state() -> types.ModuleType:
    """One state per process, however many copies of this file run (one per saved folder's class module)."""
    state = sys.modules.get("_roformer_ext_compat_state")
    if state is None:
        state = types.ModuleType("_roformer_ext_compat_state", "roformer-ext's per-process compatibility state")
        state.lock = threading.RLock()
        # failure: what the self-check found ("" nothing, None not run); checker: the thread it runs in
        state.policy = {"tested": None, "warned": False, "failure": None, "checker": None}
        state = sys.modules.setdefault("_roformer_ext_compat_state", state)
    return state


_policy_lock, _policy = process_state().lock, process_state().policy


def check_transformers_version(version: str | None = None) -> bool:
    """Warn once per process when transformers is outside the tested range; returns whether it is inside."""
    version = version or transformers.__version__
    if is_tested_release(version):
        return True
    with _policy_lock:
        if not _policy["warned"]:
            _policy["warned"] = True
            warnings.warn(
                f"roformer-ext was tested on {SUPPORTED_RANGE}; transformers {version} is installed. It runs, after "
                "a self-check of cached generation, the cache's name, the mask helpers and the processor on a tiny "
                f"model at the first forward. {UPDATE_HINT}",
                UntestedTransformersWarning,
                stacklevel=2,
            )
    return False


check_transformers_version()

#: The KV cache's name in forward arguments, model outputs and generate's kwargs; the mask helpers' (apart: a release
#: could rename one before the other).
CACHE = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"
_MASK_CACHE = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def accepts_old_cache_name(forward: Callable) -> Callable:
    """Let a forward that takes `cache` also take `past_key_values` (deprecated from 5.24). The outermost decorator."""
    if CACHE == "cache":
        return deprecate_kwarg("past_key_values", version="5.40.0", new_name="cache")(forward)

    @functools.wraps(forward)
    def renamed(*args, **kwargs):
        if "past_key_values" in kwargs:
            old = kwargs.pop("past_key_values")
            if kwargs.get("cache") is not None and old is not None:
                raise ValueError("Pass the KV cache once, as `cache` or as `past_key_values`, not both.")
            kwargs["cache"] = kwargs.get("cache") if old is None else old
        return forward(*args, **kwargs)

    return renamed


def enable_activation_checkpointing(model, checkpointing_kwargs: dict | None = None, **kwargs) -> None:
    """Activation checkpointing under either name; `checkpointing_kwargs` go positionally (named differently)."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable(checkpointing_kwargs, **kwargs)


def merge_processor_kwargs(processor, tokenizer_init_kwargs: dict, kwargs: dict) -> dict[str, dict]:
    """`ProcessorMixin._merge_kwargs` with the kwargs class given (required before 5.24)."""
    return processor._merge_kwargs(
        processor.valid_processor_kwargs, tokenizer_init_kwargs=tokenizer_init_kwargs, **kwargs
    )


def cache_field(cache) -> dict:
    return {CACHE: cache}


def mask_cache(cache) -> dict:
    return {_MASK_CACHE: cache}


def output_cache(outputs):
    """The cache a model output holds, read without the deprecated alias."""
    return outputs.get(CACHE) if hasattr(outputs, "get") else getattr(outputs, CACHE, None)


#: Every private name roformer-ext reaches, "module:Owner.name" -> how: "override" (a hook our subclass defines: a
#: rename upstream would silently skip it), "declare" (a class attribute transformers reads), "call" / "read" /
#: "write" through the function named after the dash (in this module only).
_MODELS = "transformers.modeling_utils:PreTrainedModel."
_FAST = "transformers.tokenization_utils_tokenizers:TokenizersBackend."
_SLOW = "transformers.tokenization_python:PythonBackend."
_IMAGES = "transformers.image_processing_utils:BaseImageProcessor."
PRIVATE_NAMES: dict[str, str] = {
    _MODELS + "_init_weights": "override, call - parent_init_weights",
    _MODELS + "_auto_class": "read - auto_class",
    **{  # set on our classes by `register_for_auto_class`
        f"transformers.{owner}._auto_class": "declare"
        for owner in "configuration_utils:PreTrainedConfig tokenization_utils_base:PreTrainedTokenizerBase "
        "processing_utils:ProcessorMixin image_processing_base:ImageProcessingMixin".split()
    },
    # transformers' heuristic looks for the backend lookup in the modeling file; ours is in attention_plan.py
    _MODELS + "_can_set_attn_implementation": "override",
    **{
        _MODELS + name: "declare"
        for name in "_no_split_modules _skip_keys_device_placement _supports_flash_attn _supports_sdpa "
        "_supports_flex_attn _supports_attention_backend _can_compile_fullgraph _can_record_outputs "
        "_keys_to_ignore_on_load_unexpected _tied_weights_keys _tp_plan _fsdp_plan".split()
    },
    "transformers.configuration_utils:PreTrainedConfig._attn_implementation": "read - attn_implementation",
    "transformers.modeling_rope_utils:RotaryEmbeddingConfigMixin._validate_longrope_rope_parameters": (
        "override, call - parent_validate_longrope_rope_parameters"
    ),
    "transformers.generation.utils:GenerationMixin._expand_inputs_for_generation": (
        "override, call - parent_expand_inputs_for_generation"
    ),
    "transformers.generation.utils:GenerationMixin._prepare_position_ids_for_generation": (
        "override, call - parent_prepare_position_ids_for_generation"
    ),
    "transformers.models.t5.modeling_t5:T5Attention._relative_position_bucket": "call - relative_position_bucket",
    "transformers.trainer:Trainer._get_eval_sampler": "override",
    _FAST + "_encode_plus": "override, call - parent_encode_plus",
    _FAST + "_encode_without_added_tokens": "override, call - parent_encode_without_added_tokens",
    _FAST + "_save_pretrained": "override, call - parent_save_pretrained_files",
    _FAST + "_tokenizer": "write - set_backend_tokenizer",
    _SLOW + "_tokenize": "override",
    _SLOW + "_convert_token_to_id": "override",
    _SLOW + "_convert_id_to_token": "override",
    "transformers.processing_utils:ProcessorMixin._merge_kwargs": "call - merge_processor_kwargs",
    _IMAGES + "_standardize_kwargs": "override, call - parent_standardize_kwargs",
    _IMAGES + "_validate_preprocess_kwargs": "override, call - parent_validate_preprocess_kwargs",
    _IMAGES + "_preprocess_image_like_inputs": "override",
    "transformers.utils.hub:PushToHubMixin._upload_modified_files": "override, call - parent_upload_modified_files",
}


def attn_implementation(config) -> str | None:
    return config._attn_implementation


def is_flash_attention(implementation: str | None) -> bool:
    """A flash-attention backend (no dense mask, no score term), by transformers' own test."""
    return is_flash_attention_requested(requested_attention_implementation=implementation)


def auto_class(cls) -> str | None:
    return cls._auto_class


def relative_position_bucket(distance: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int):
    """T5's own bucketing of a key - query distance."""
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(distance, bidirectional, num_buckets, max_distance)


# `super()._hook(...)` calls: `parent` is the caller's `super()`.
def parent_init_weights(parent, module: nn.Module) -> None:
    parent._init_weights(module)


def parent_expand_inputs_for_generation(parent, expand_size: int, is_encoder_decoder: bool, input_ids, **kwargs):
    return parent._expand_inputs_for_generation(expand_size, is_encoder_decoder, input_ids, **kwargs)


def parent_prepare_position_ids_for_generation(parent, inputs_tensor, model_kwargs: dict):
    return parent._prepare_position_ids_for_generation(inputs_tensor, model_kwargs)


def parent_encode_plus(parent, *args, **kwargs):
    return parent._encode_plus(*args, **kwargs)


def parent_encode_without_added_tokens(parent, text: str) -> list[int]:
    return parent._encode_without_added_tokens(text)


def parent_save_pretrained_files(parent, *args, **kwargs) -> tuple[str, ...]:
    return parent._save_pretrained(*args, **kwargs)


def parent_upload_modified_files(parent, working_dir, *args, **kwargs):
    return parent._upload_modified_files(working_dir, *args, **kwargs)


def parent_standardize_kwargs(parent, **kwargs) -> dict:
    return parent._standardize_kwargs(**kwargs)


def parent_validate_preprocess_kwargs(parent, **kwargs) -> None:
    parent._validate_preprocess_kwargs(**kwargs)


class HeadDimView:
    """A config read through with another `head_dim` (a split allocation's ladder spans fewer dims than the head)."""

    def __init__(self, config: Any, head_dim: int) -> None:
        self._config, self.head_dim = config, head_dim

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


def parent_validate_longrope_rope_parameters(config, rope_parameters: dict, ignore_keys: Any, head_dim: int) -> None:
    """transformers' longrope checks for a frequency ladder of `head_dim` dims."""
    from transformers.modeling_rope_utils import RotaryEmbeddingConfigMixin

    RotaryEmbeddingConfigMixin._validate_longrope_rope_parameters(
        HeadDimView(config, head_dim), rope_parameters, ignore_keys=ignore_keys
    )


def set_backend_tokenizer(tokenizer, backend) -> None:
    """Give a fast tokenizer its `tokenizers.Tokenizer` before `super().__init__` (as transformers' own do)."""
    tokenizer._tokenizer = backend
