"""Converters from other RoFormer formats into roformer-ext folders, and the `roformer-ext-convert` script.

Submodules are imported lazily: reading a TF checkpoint needs only numpy, and `--help` should not pay for
importing torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import Any


class CheckpointConversionError(ValueError):
    """A checkpoint cannot be converted as asked; the message names what is wrong and how to fix it."""


_LAZY = {
    "TFCheckpointReader": ".tf_checkpoint",
    "TFCheckpointError": ".tf_checkpoint",
    "read_tf_checkpoint": ".tf_checkpoint",
    "convert_original_checkpoint": ".original",
    "detect_variant": ".original",
    "map_original_variables": ".original",
    "original_config_kwargs": ".original",
    "VARIANTS": ".original",
    "output_folder": ".output_folder",
    "OutputExistsError": ".output_folder",
    "OutputOverlapsSourceError": ".output_folder",
    "convert_transformers_checkpoint": ".from_transformers",
    "build_converted_model": ".from_transformers",
    "detect_source_kind": ".from_transformers",
    "main": ".cli",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CheckpointConversionError", *_LAZY]
