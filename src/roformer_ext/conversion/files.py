"""Reading a checkpoint's side files with one-line errors, and writing what several converters share.

A release's config, vocabulary and weights come from elsewhere: a wrong value or a damaged file there is the
user's to fix, so each failure becomes a CheckpointConversionError naming the file and the problem, never a
traceback from json, the codec or torch.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import CheckpointConversionError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..configuration_roformer_ext import RoFormerExtConfig


def one_line(err: BaseException) -> str:
    """An exception's message on one line (library messages may span several)."""
    return re.sub(r"\s+", " ", str(err)).strip() or type(err).__name__


def read_text_file(path: Path) -> str:
    """The file as UTF-8 text; a missing file or another encoding is a CheckpointConversionError."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise CheckpointConversionError(f"Missing {path}.") from None
    except UnicodeDecodeError as err:
        raise CheckpointConversionError(
            f"{path} is not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); re-save it as UTF-8."
        ) from None


def read_json_file(path: Path) -> dict[str, Any]:
    """A JSON object from `path` (UTF-8); anything else is a CheckpointConversionError naming the file."""
    try:
        value = json.loads(read_text_file(path))
    except json.JSONDecodeError as err:
        raise CheckpointConversionError(f"{path} is not valid JSON: {err}.") from None
    if not isinstance(value, dict):
        raise CheckpointConversionError(f"{path} holds a JSON {type(value).__name__}, not an object of settings.")
    return value


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_config_types(
    config: Mapping[str, Any],
    path: Path,
    integers: Iterable[str] = (),
    numbers: Iterable[str] = (),
    flags: Iterable[str] = (),
) -> None:
    """Every listed key that is present (and not null) has the right JSON type; else one error naming them all."""
    wrong = []
    for keys, check, kind in (
        (integers, _is_int, "an integer"),
        (numbers, _is_number, "a number"),
        (flags, lambda v: isinstance(v, bool), "true or false"),
    ):
        wrong += [
            f"{key} is {config[key]!r} (expected {kind})"
            for key in keys
            if config.get(key) is not None and not check(config[key])
        ]
    if wrong:
        raise CheckpointConversionError(f"{path}: {'; '.join(wrong)}. Fix the value(s) in that file.")


def portable_path(arg: str | Path) -> str:
    """How a path argument appears in a model card: as given when relative, only the folder name when absolute."""
    path = Path(arg)
    if path.is_absolute():
        return path.name or str(arg)
    return str(arg)


def portable_command(*args: str | Path | None) -> str:
    """`roformer-ext-convert ...` with no local absolute path in it (None arguments are left out)."""
    return shlex.join(["roformer-ext-convert", *(str(a) for a in args if a is not None)])


def add_to_safetensors(folder: Path, extra: Mapping[str, Any]) -> None:
    """Add tensors the saved architecture does not hold (a pooler next to an MLM head) so AutoModel loads them."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    if not path.is_file():
        raise CheckpointConversionError(f"Expected a single {path} to add {sorted(extra)} to; found a sharded save.")
    tensors = load_file(path)
    tensors.update({k: v.contiguous() for k, v in extra.items()})
    save_file(tensors, path, metadata={"format": "pt"})


def write_sim_files(folder: Path, config: RoFormerExtConfig, tokenizer: PreTrainedTokenizerBase | None) -> None:
    """RoFormer-Sim's extras: a UniLM generator's generation config (stop at [SEP], pad with [PAD]) when there is a
    tokenizer to take the ids from, and the sentence-transformers files when the model has a pooler."""
    from ..similarity import sim_generation_config, write_sentence_transformers_config

    if config.decoder_attention == "unilm" and tokenizer is not None:
        sim_generation_config(tokenizer).save_pretrained(folder)
    if config.pooler_activation is not None:
        write_sentence_transformers_config(folder)


__all__ = [
    "add_to_safetensors",
    "check_config_types",
    "one_line",
    "portable_command",
    "portable_path",
    "read_json_file",
    "read_text_file",
    "write_sim_files",
]
