"""Every difference between the transformers releases roformer-ext runs on, and every private name of transformers,
torch and tokenizers that it reaches, decided here once.

Modeling code reads one name for each thing that moved; this module maps it onto the installed release by looking at
what the release has (feature detection). A saved folder loaded with `trust_remote_code=True` runs this file under
whatever transformers the user has, for years: so a release outside the tested range is never refused on its version
string. It gets one warning naming the tested range, and the first forward runs the self-check (self_check.py). This
module imports nothing of the package: every other module may import it.

What moved, and since when:
- transformers 5.24 made the kwargs class of `ProcessorMixin._merge_kwargs` optional (required before).
- transformers 5.23 renamed `gradient_checkpointing_enable` to `activation_checkpointing_enable` (the old name a
  deprecated alias).
- transformers 5.24 renamed `past_key_values` to `cache` in forward arguments, model outputs, the mask helpers
  (`create_causal_mask`, `create_bidirectional_mask`, `create_masks_for_generate`) and `generate`'s model kwargs.

Private names: `PRIVATE_NAMES` lists each one with how it is used; the functions below are the only places that
touch them (tests/model/test_private_names.py fails naming a symbol that disappears, and any private name reached
outside this module).
"""

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

# --- The tested range, and what happens outside it -----------------------------------------------------------------

#: The transformers releases this code is tested on (CI runs the newest and the lowest); setup.cfg declares the same.
LOWEST_TRANSFORMERS = "5.21.0"
#: The first release outside the tested range: the newest tested release's next minor (its pre-releases too).
TRANSFORMERS_BELOW = "5.26.0"
SUPPORTED_RANGE = f"transformers>={LOWEST_TRANSFORMERS},<{TRANSFORMERS_BELOW}"
#: The torch releases the suite ran on (setup.cfg declares `torch>=` this; docs/compatibility.md says what ran).
LOWEST_TORCH = "2.13.0"
#: How a user gets code that knows a newer transformers (said by the warning and by a failed self-check).
UPDATE_HINT = (
    "Get updated code: `git pull && pip install -e .` in a clone of roformer-ext, then `roformer-ext update-code "
    "FOLDER` gives a saved folder that version's code; for a folder whose config.json `auto_map` names a code "
    "repository (`owner/repo--...`), that repository's maintainer publishes the fix once with `roformer-ext push-code "
    f'owner/repo` and every checkpoint pointing there gets it. Meanwhile a tested release works: pip install "{SUPPORTED_RANGE}".'
)


class UntestedTransformersWarning(UserWarning):
    """The installed transformers is outside the range roformer-ext was tested on (it still runs, self-checked)."""


class IncompatibleTransformersError(RuntimeError):
    """The installed transformers failed roformer-ext's self-check: running would give wrong results."""


def is_tested_release(version: str) -> bool:
    """Whether `version` is inside the tested range; a pre-release of the first release outside it is outside."""
    parsed = Version(version)
    return parsed >= Version(LOWEST_TRANSFORMERS) and parsed.release < Version(TRANSFORMERS_BELOW).release


def process_state() -> types.ModuleType:
    """One state per process, however many copies of this file run: transformers imports a saved folder's code once
    per class module (config, model, tokenizer each in a package of its own), and roformer_ext may be installed too."""
    state = sys.modules.get("_roformer_ext_compat_state")
    if state is None:
        state = types.ModuleType("_roformer_ext_compat_state", "roformer-ext's per-process compatibility state")
        state.lock = threading.RLock()
        # tested: inside the range; warned: the warning given; failure: what the self-check found ("" nothing, None
        # not run yet); checker: the thread the self-check runs in
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

# --- Names that moved between tested releases -----------------------------------------------------------------------

#: The name of the KV cache in forward arguments, model outputs, mask helpers and generate's kwargs.
CACHE = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"
#: The name the mask helpers take (detected on its own: a release could rename one before the other).
_MASK_CACHE = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def accepts_old_cache_name(forward: Callable) -> Callable:
    """Let a forward that takes `cache` also take `past_key_values`, its name before transformers 5.24.

    On releases that renamed it, the old name is deprecated there, so it warns as transformers' own models do (their
    `deprecate_kwarg`); before the rename it is the name `generate` itself passes, taken silently. Apply it as the
    outermost decorator, so the decorators inside see the one name."""
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
    """Turn on activation (gradient) checkpointing: `activation_checkpointing_enable` since transformers 5.23,
    `gradient_checkpointing_enable` (its deprecated alias there) before. `checkpointing_kwargs` (torch's checkpoint
    arguments, e.g. {"use_reentrant": False}) go positionally: the two names call that argument differently."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable(checkpointing_kwargs, **kwargs)


def merge_processor_kwargs(processor, tokenizer_init_kwargs: dict, kwargs: dict) -> dict[str, dict]:
    """transformers' `ProcessorMixin._merge_kwargs` with the processor's kwargs class given explicitly: required
    before 5.24, the default since."""
    return processor._merge_kwargs(
        processor.valid_processor_kwargs, tokenizer_init_kwargs=tokenizer_init_kwargs, **kwargs
    )


def cache_field(cache) -> dict:
    """Keyword arguments that put a cache into a model output (`cache=` on 5.24+, `past_key_values=` before)."""
    return {CACHE: cache}


def mask_cache(cache) -> dict:
    """Keyword arguments that hand a cache to transformers' mask helpers."""
    return {_MASK_CACHE: cache}


def output_cache(outputs):
    """The cache held by a model output, read without the deprecated alias."""
    return outputs.get(CACHE) if hasattr(outputs, "get") else getattr(outputs, CACHE, None)


# --- Private names of transformers, torch and tokenizers -------------------------------------------------------------

#: The releases every entry below was checked on (CI runs the suite on both transformers ends).
PRIVATE_NAMES_CHECKED_ON = "transformers 5.21.0 and 5.24.0, torch 2.13.0, tokenizers 0.22-0.23"

#: Every private name roformer-ext reaches, "module:Owner.name" -> how. "override": a hook our subclass defines
#: (transformers calls it; if it were renamed our override would silently stop running). "declare": a class attribute
#: transformers reads from every model (its model-definition protocol). "call" / "read" / "write": reached through the
#: function named after the dash, in this module only.
PRIVATE_NAMES: dict[str, str] = {
    # transformers: models
    "transformers.modeling_utils:PreTrainedModel._init_weights": (
        "override, call - parent_init_weights: the one place weights are initialised"
    ),
    "transformers.modeling_utils:PreTrainedModel._auto_class": "read - auto_class (register_for_auto_class sets it)",
    "transformers.modeling_utils:PreTrainedModel._can_set_attn_implementation": (
        "override: the attention plan reads the backend at every forward; transformers' heuristic looks for the "
        "lookup in the modeling file's source, ours is in attention_plan.py"
    ),
    "transformers.modeling_utils:PreTrainedModel._no_split_modules": "declare",
    "transformers.modeling_utils:PreTrainedModel._skip_keys_device_placement": "declare",
    "transformers.modeling_utils:PreTrainedModel._supports_flash_attn": "declare",
    "transformers.modeling_utils:PreTrainedModel._supports_sdpa": "declare",
    "transformers.modeling_utils:PreTrainedModel._supports_flex_attn": "declare",
    "transformers.modeling_utils:PreTrainedModel._supports_attention_backend": "declare",
    "transformers.modeling_utils:PreTrainedModel._can_compile_fullgraph": "declare",
    "transformers.modeling_utils:PreTrainedModel._can_record_outputs": "declare",
    "transformers.modeling_utils:PreTrainedModel._keys_to_ignore_on_load_unexpected": "declare",
    "transformers.modeling_utils:PreTrainedModel._tied_weights_keys": "declare",
    "transformers.modeling_utils:PreTrainedModel._tp_plan": "declare",
    "transformers.modeling_utils:PreTrainedModel._fsdp_plan": "declare",
    "transformers.configuration_utils:PreTrainedConfig._attn_implementation": "read - attn_implementation",
    "transformers.modeling_rope_utils:RotaryEmbeddingConfigMixin._validate_longrope_rope_parameters": (
        "override, call - parent_validate_longrope_rope_parameters: a 'split' allocation's factors count one axis "
        "group's frequencies"
    ),
    "transformers.configuration_utils:PreTrainedConfig._auto_class": "read - auto_class",
    "transformers.generation.utils:GenerationMixin._expand_inputs_for_generation": (
        "override, call - parent_expand_inputs_for_generation: per-prompt images for beams / return sequences"
    ),
    "transformers.models.t5.modeling_t5:T5Attention._relative_position_bucket": "call - relative_position_bucket",
    "transformers.trainer:Trainer._get_eval_sampler": "override: evaluation in the packed order",
    # transformers: tokenizers and processors
    "transformers.tokenization_utils_tokenizers:TokenizersBackend._encode_plus": "override, call - parent_encode_plus",
    "transformers.tokenization_utils_tokenizers:TokenizersBackend._encode_without_added_tokens": (
        "override, call - parent_encode_without_added_tokens"
    ),
    "transformers.tokenization_utils_tokenizers:TokenizersBackend._save_pretrained": (
        "override, call - parent_save_pretrained_files"
    ),
    "transformers.tokenization_utils_tokenizers:TokenizersBackend._tokenizer": "write - set_backend_tokenizer",
    "transformers.tokenization_python:PythonBackend._tokenize": "override",
    "transformers.tokenization_python:PythonBackend._convert_token_to_id": "override",
    "transformers.tokenization_python:PythonBackend._convert_id_to_token": "override",
    "transformers.tokenization_utils_base:PreTrainedTokenizerBase._auto_class": "read - auto_class",
    "transformers.processing_utils:ProcessorMixin._merge_kwargs": "call - merge_processor_kwargs",
    "transformers.processing_utils:ProcessorMixin._auto_class": "read - auto_class",
    "transformers.image_processing_utils:BaseImageProcessor._standardize_kwargs": (
        "override, call - parent_standardize_kwargs"
    ),
    "transformers.image_processing_utils:BaseImageProcessor._validate_preprocess_kwargs": (
        "override, call - parent_validate_preprocess_kwargs"
    ),
    "transformers.image_processing_utils:BaseImageProcessor._preprocess_image_like_inputs": "override",
    "transformers.image_processing_base:ImageProcessingMixin._auto_class": "read - auto_class",
    "transformers.utils.hub:PushToHubMixin._upload_modified_files": (
        "override, call - parent_upload_modified_files: a push uploads our code placement and card section too"
    ),
}


def attn_implementation(config) -> str | None:
    """The attention backend transformers resolved for `config` (set by `from_pretrained` / `set_attn_implementation`)."""
    return config._attn_implementation


def is_flash_attention(implementation: str | None) -> bool:
    """Whether `implementation` is a flash-attention backend (flash_attention_2/3/4, or a Hub kernel of one): those
    take no dense mask and no score term. transformers' own test, not a substring of ours."""
    return is_flash_attention_requested(requested_attention_implementation=implementation)


def auto_class(cls) -> str | None:
    """The Auto class `register_for_auto_class` gave `cls` (None when not registered)."""
    return cls._auto_class


def relative_position_bucket(
    distance: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """transformers' own T5 bucketing of a key - query distance, so our buckets are T5's by construction."""
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(distance, bidirectional, num_buckets, max_distance)


def parent_init_weights(parent, module: nn.Module) -> None:
    """`super()._init_weights(module)`: transformers' initialisation of the modules it knows (Linear, Embedding...)."""
    parent._init_weights(module)


def parent_expand_inputs_for_generation(parent, expand_size: int, is_encoder_decoder: bool, input_ids, **kwargs):
    """`super()._expand_inputs_for_generation(...)`: `generate`'s repeat of each prompt for beams and return sequences."""
    return parent._expand_inputs_for_generation(expand_size, is_encoder_decoder, input_ids, **kwargs)


def parent_encode_plus(parent, *args, **kwargs):
    """`super()._encode_plus(...)`: the fast tokenizer's one encoding entry."""
    return parent._encode_plus(*args, **kwargs)


def parent_encode_without_added_tokens(parent, text: str) -> list[int]:
    return parent._encode_without_added_tokens(text)


def parent_save_pretrained_files(parent, *args, **kwargs) -> tuple[str, ...]:
    """`super()._save_pretrained(...)`: the tokenizer files, without the config and code that `save_pretrained` adds."""
    return parent._save_pretrained(*args, **kwargs)


def parent_upload_modified_files(parent, working_dir, *args, **kwargs):
    """`super()._upload_modified_files(...)`: transformers' push of the files a save wrote or changed (one commit)."""
    return parent._upload_modified_files(working_dir, *args, **kwargs)


def parent_standardize_kwargs(parent, **kwargs) -> dict:
    return parent._standardize_kwargs(**kwargs)


def parent_validate_preprocess_kwargs(parent, **kwargs) -> None:
    parent._validate_preprocess_kwargs(**kwargs)


class HeadDimView:
    """A config read through, with another `head_dim`: transformers' rope frequency functions and validators read it
    from the config, and a "split" or per-axis allocation's frequency ladder spans fewer dims than the head."""

    def __init__(self, config: Any, head_dim: int) -> None:
        self._config, self.head_dim = config, head_dim

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


def parent_validate_longrope_rope_parameters(config, rope_parameters: dict, ignore_keys: Any, head_dim: int) -> None:
    """transformers' longrope checks (its keys, the factors' lengths) for a frequency ladder of `head_dim` dims."""
    from transformers.modeling_rope_utils import RotaryEmbeddingConfigMixin

    RotaryEmbeddingConfigMixin._validate_longrope_rope_parameters(
        HeadDimView(config, head_dim), rope_parameters, ignore_keys=ignore_keys
    )


def set_backend_tokenizer(tokenizer, backend) -> None:
    """Give a fast tokenizer the `tokenizers.Tokenizer` it built, before `super().__init__` (transformers 5's own
    tokenizers that build their pipeline do the same)."""
    tokenizer._tokenizer = backend


__all__ = [
    "CACHE",
    "LOWEST_TORCH",
    "LOWEST_TRANSFORMERS",
    "PRIVATE_NAMES",
    "SUPPORTED_RANGE",
    "TRANSFORMERS_BELOW",
    "IncompatibleTransformersError",
    "UntestedTransformersWarning",
    "accepts_old_cache_name",
    "cache_field",
    "check_transformers_version",
    "enable_activation_checkpointing",
    "is_tested_release",
    "mask_cache",
    "merge_processor_kwargs",
    "output_cache",
    "process_state",
]
