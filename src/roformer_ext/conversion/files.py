"""What both converters share: one-line errors naming the file, the model built with every key and shape checked."""

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from ..hub_code import check_code_repo, share_code, write_compatibility_section
from .output_folder import CheckpointConversionError, output_folder

#: A pooler next to an MLM head: the architecture does not hold it, the saved file does (for AutoModel).
_POOLER = re.compile(r"^(roformer\.)?pooler\.dense\.")


def one_line(err: BaseException) -> str:
    """An exception's message on one line (library messages may span several)."""
    return re.sub(r"\s+", " ", str(err)).strip() or type(err).__name__


def read_text_file(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise CheckpointConversionError(f"Missing {path}.") from None
    except UnicodeDecodeError as err:
        raise CheckpointConversionError(
            f"{path} is not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); re-save it as UTF-8."
        ) from None


def read_json_file(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(read_text_file(path))
    except json.JSONDecodeError as err:
        raise CheckpointConversionError(f"{path} is not valid JSON: {err}.") from None
    if not isinstance(value, dict):
        raise CheckpointConversionError(f"{path} holds a JSON {type(value).__name__}, not an object of settings.")
    return value


def check_config_types(
    config: Mapping[str, Any], path: Path, integers: Iterable[str] = (), numbers: Iterable[str] = (), flags=()
) -> None:
    """Every listed key that is present (and not null) has the right JSON type; else one error naming them all."""
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    checks = (
        (integers, lambda v: number(v) and (isinstance(v, int) or v.is_integer()), "an integer"),
        (numbers, number, "a number"),
        (flags, lambda v: isinstance(v, bool), "true or false"),
    )
    wrong = [
        f"{key} is {config[key]!r} (expected {kind})"
        for keys, check, kind in checks
        for key in keys
        if config.get(key) is not None and not check(config[key])
    ]
    if wrong:
        raise CheckpointConversionError(f"{path}: {'; '.join(wrong)}. Fix the value(s) in that file.")


def command_line(command: str, src: str | Path, out: str | Path, **options: str | bool | None) -> str:
    """The command for the model card: relative paths as typed, absolute ones reduced to their folder name."""
    words = [command, *(Path(p).name or str(p) if Path(p).is_absolute() else str(p) for p in (src, out))]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        words += [flag] if value is True else [flag, value] if value else []
    return shlex.join(["roformer-ext-convert", *words])


def resolve_pooler_activation(has_pooler: bool, given: str | None, default: str | None, where: str) -> str | None:
    """The pooler's activation: `given`, else `default`; needed exactly when there is a pooler (named `where`)."""
    if not has_pooler:
        if given is not None:
            raise CheckpointConversionError(
                f"--pooler-activation was given but the checkpoint has no pooler ({where}); leave it out."
            )
        return None
    activation = given or default
    if activation is None:
        raise CheckpointConversionError(
            f"The checkpoint has a pooler ({where}) but config.json has no pooler_activation; pass "
            "--pooler-activation linear (RoFormer-Sim) or tanh."
        )
    return activation  # RoFormerExtConfig checks the name


def conversion_folder(src: Path, out: str | Path, force: bool, code_repo: str | None):
    """Check the arguments, then the all-or-nothing `output_folder(out)`, which may not overlap `src`."""
    if code_repo is not None:
        try:
            check_code_repo(code_repo)
        except ValueError as error:
            raise CheckpointConversionError(str(error)) from None
    if not src.is_dir():
        raise CheckpointConversionError(f"Source folder {src} does not exist.")
    return output_folder(out, force=force, sources=[src])


def build_model(
    architecture: str, config_kwargs: Mapping[str, Any], state: Mapping[str, torch.Tensor], config_path: Path
) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """Our model with `state` loaded (one error lists every bad key), and the pooler tensors it does not hold."""
    from .. import RoFormerExtConfig, modeling_roformer_ext

    try:
        config = RoFormerExtConfig(**config_kwargs)
    except (ValueError, TypeError) as err:
        raise CheckpointConversionError(f"{config_path} gives an invalid configuration: {err}") from None
    model = getattr(modeling_roformer_ext, architecture)(config)
    if model.base_model is model:  # a bare encoder's keys carry no "roformer." prefix
        state = {k.removeprefix(f"{model.base_model_prefix}."): v for k, v in state.items()}
    expected = model.state_dict()
    extra = {k: v for k, v in state.items() if k not in expected and _POOLER.match(k)}
    missing = sorted(k for k in expected if k not in state and k != "lm_head.decoder.weight")  # tied
    unexpected = sorted(k for k in state if k not in expected and k not in extra)
    misshaped = [
        f"{k}: expected {tuple(expected[k].shape)}, found {tuple(v.shape)}"
        for k, v in state.items()
        if k in expected and v.shape != expected[k].shape
    ]
    if missing or unexpected or misshaped:
        raise CheckpointConversionError(
            f"The checkpoint does not fit its {config_path}:"
            + (f"\n  missing: {', '.join(missing)}" if missing else "")
            + (f"\n  unexpected: {', '.join(unexpected)}" if unexpected else "")
            + ("\n  mis-shaped: " + "; ".join(misshaped) if misshaped else "")
            + f"\nCheck that {config_path.name} (vocab_size, hidden_size, num_hidden_layers, ...) belongs to these "
            "weights."
        )
    model.load_state_dict(state, strict=False)
    return model.eval(), extra


def save_folder(
    folder: Path,
    model: torch.nn.Module,
    extra: Mapping[str, torch.Tensor],
    card: str,
    code_repo: str | None,
    vocab_file: Path | None,
    do_lower_case: bool = True,
) -> None:
    """Write the model (with the `extra` tensors), our tokenizer from `vocab_file`, RoFormer-Sim's extras, the card."""
    from safetensors.torch import load_file, save_file

    from ..similarity import sim_generation_config, write_sentence_transformers_config
    from ..tokenization_roformer_ext import RoFormerExtTokenizerFast

    model.save_pretrained(folder)
    if extra:
        path = folder / "model.safetensors"
        if not path.is_file():
            raise CheckpointConversionError(f"Found a sharded save, no single {path} to add {sorted(extra)} to.")
        tensors = load_file(path)
        tensors.update({k: v.contiguous() for k, v in extra.items()})
        save_file(tensors, path, metadata={"format": "pt"})
    tokenizer = None
    if vocab_file is not None:
        read_text_file(vocab_file)  # a clear error for a vocabulary in another encoding
        tokenizer = RoFormerExtTokenizerFast.from_vocab_file(vocab_file, segmenter="auto", do_lower_case=do_lower_case)
        tokenizer.save_pretrained(folder)
    if model.config.decoder_attention == "unilm" and tokenizer is not None:  # stop at [SEP], pad with [PAD]
        sim_generation_config(tokenizer).save_pretrained(folder)
    if model.config.pooler_activation is not None:
        write_sentence_transformers_config(folder)
    (folder / "README.md").write_text(card, encoding="utf-8")
    write_compatibility_section(folder)
    if code_repo:
        share_code(folder, code_repo)
