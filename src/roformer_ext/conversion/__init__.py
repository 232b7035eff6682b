"""Converters from other RoFormer formats into roformer-ext folders, and the `roformer-ext-convert` script."""

from .cli import main  # noqa: I001  (last: it imports the converters)
from .files import CheckpointConversionError
from .from_transformers import build_converted_model, convert_transformers_checkpoint, detect_source_kind
from .original import (
    VARIANTS,
    convert_original_checkpoint,
    detect_variant,
    map_original_variables,
    original_config_kwargs,
)
from .output_folder import OutputExistsError, OutputOverlapsSourceError, output_folder
from .tf_checkpoint import TFCheckpointError, TFCheckpointReader, read_tf_checkpoint

__all__ = [
    "VARIANTS",
    "CheckpointConversionError",
    "OutputExistsError",
    "OutputOverlapsSourceError",
    "TFCheckpointError",
    "TFCheckpointReader",
    "build_converted_model",
    "convert_original_checkpoint",
    "convert_transformers_checkpoint",
    "detect_source_kind",
    "detect_variant",
    "main",
    "map_original_variables",
    "original_config_kwargs",
    "output_folder",
    "read_tf_checkpoint",
]
