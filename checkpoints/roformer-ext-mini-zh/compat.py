"""Every difference between the transformers releases roformer-ext supports, decided here once.

Modeling code reads one name for each thing that moved; this module maps it onto the installed release, by
looking at what the release has (feature detection), never by comparing version strings. The one version
comparison is the supported range itself: a saved folder loaded with `trust_remote_code=True` runs this file under
whatever transformers the user has, and outside the tested range it stops with one clear error instead of running
a model whose generation may be silently wrong (as transformers 5.24's rename of `past_key_values` to `cache`
made it for every model that read only the old name).

What moved, and since when:
- transformers 5.24 made the kwargs class of `ProcessorMixin._merge_kwargs` optional (required before).
- transformers 5.23 renamed `gradient_checkpointing_enable` to `activation_checkpointing_enable` (the old name a
  deprecated alias).
- transformers 5.24 renamed `past_key_values` to `cache` in forward arguments, model outputs, the mask helpers
  (`create_causal_mask`, `create_bidirectional_mask`, `create_masks_for_generate`) and `generate`'s model kwargs.
"""

import functools
import inspect
import os
from collections.abc import Callable

import transformers
from packaging.version import Version
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils.deprecation import deprecate_kwarg

#: The transformers releases this code is tested on (CI runs the newest and the lowest); setup.cfg declares the same.
LOWEST_TRANSFORMERS = "5.21.0"
#: The first release NOT admitted: the newest tested release's next minor.
TRANSFORMERS_BELOW = "5.25.0"
SUPPORTED_RANGE = f"transformers>={LOWEST_TRANSFORMERS},<{TRANSFORMERS_BELOW}"
#: Set to 1 to run on a release outside the range anyway (to try a new release before it is declared).
ALLOW_UNTESTED_ENV = "ROFORMER_EXT_ALLOW_UNTESTED_TRANSFORMERS"


def check_transformers_version(version: str | None = None) -> None:
    """Refuse a transformers release outside the tested range, naming the range and the fix."""
    version = version or transformers.__version__
    if Version(LOWEST_TRANSFORMERS) <= Version(version) < Version(TRANSFORMERS_BELOW):
        return
    if os.environ.get(ALLOW_UNTESTED_ENV) == "1":
        return
    raise ImportError(
        f"roformer-ext supports {SUPPORTED_RANGE}; transformers {version} is installed. Install a supported "
        f'release (pip install "{SUPPORTED_RANGE}"), or upgrade roformer-ext (or the saved folder\'s code files) '
        f"to a version that supports transformers {version}. To run anyway at your own risk, set "
        f"{ALLOW_UNTESTED_ENV}=1."
    )


check_transformers_version()

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


__all__ = [
    "CACHE",
    "LOWEST_TRANSFORMERS",
    "SUPPORTED_RANGE",
    "TRANSFORMERS_BELOW",
    "cache_field",
    "check_transformers_version",
    "enable_activation_checkpointing",
    "mask_cache",
    "merge_processor_kwargs",
    "output_cache",
    "accepts_old_cache_name",
]
