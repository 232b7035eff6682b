"""Convert a `model_type: roformer` folder (transformers' RoFormer, or junnyu's `roformer` package) into roformer-ext.

An explicit key map with every shape checked (nanoGPT's `from_pretrained` style). transformers' sinusoidal
position table is dropped: our rotary computes the same angles from positions, at any length.

junnyu's Hub folders use transformers' names plus three switches of his `roformer` package (read from his
`modeling_roformer.py`): `use_bias: false` removes every bias of the encoder; a `norm_type` other than
"layer_norm" makes every norm his parameter-free `x / sqrt(mean(x^2) + eps)` and the MLM head the tied decoder
alone (`cls.predictions.decoder.weight`, no transform, no bias) — RoFormer-V2; and a pooler
(`roformer.pooler.dense.*`, always with a bias) with `pooler_activation` ("linear" for RoFormer-Sim).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..hub_code import check_code_repo, share_code, write_compatibility_section
from . import CheckpointConversionError
from .files import (
    add_to_safetensors,
    check_config_types,
    one_line,
    portable_command,
    portable_path,
    read_json_file,
    read_text_file,
    write_sim_files,
)
from .output_folder import output_folder

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

#: transformers class -> ours (architectures entry of config.json).
ARCHITECTURES = {
    "RoFormerModel": "RoFormerExtModel",
    "RoFormerForMaskedLM": "RoFormerExtForMaskedLM",
    "RoFormerForCausalLM": "RoFormerExtForCausalLM",
    "RoFormerForSequenceClassification": "RoFormerExtForSequenceClassification",
    "RoFormerForTokenClassification": "RoFormerExtForTokenClassification",
    "RoFormerForQuestionAnswering": "RoFormerExtForQuestionAnswering",
    "RoFormerForMultipleChoice": "RoFormerExtForMultipleChoice",
}

#: What `detect_source_kind` returns, and how it is shown.
SOURCE_KINDS = {
    "transformers": "transformers RoFormer",
    "junnyu-v1": "junnyu v1",
    "junnyu-v2": "junnyu V2",
    "junnyu-sim": "junnyu Sim",
}

#: (pattern on their key without the "roformer." prefix, replacement). Order matters: first match wins.
_BODY_RULES = [
    (r"embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"embeddings\.(word_embeddings|token_type_embeddings)\.", r"embeddings.\1."),
    (r"embeddings_project\.", "embeddings.projection."),
    (r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.", r"layers.\1.attention.\2."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention.output."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attention_norm."),
    (r"encoder\.layer\.(\d+)\.crossattention\.self\.(query|key|value)\.", r"layers.\1.crossattention.\2."),
    (r"encoder\.layer\.(\d+)\.crossattention\.output\.dense\.", r"layers.\1.crossattention.output."),
    (r"encoder\.layer\.(\d+)\.crossattention\.output\.LayerNorm\.", r"layers.\1.crossattention_norm."),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.feed_forward.intermediate."),
    (r"encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.feed_forward.output."),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.output_norm."),
    (r"pooler\.dense\.", "pooler.dense."),  # junnyu's RoFormer-Sim
]
_HEAD_RULES = [
    (r"cls\.predictions\.transform\.dense\.", "lm_head.transform.dense."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "lm_head.transform.norm."),
    (r"cls\.predictions\.bias$", "lm_head.bias"),
    (r"(classifier|qa_outputs)\.", r"\1."),
]
#: Keys with no counterpart: the position table, and the decoder tied to the word embeddings.
_DROPPED = re.compile(r"(encoder\.embed_positions\.weight|cls\.predictions\.decoder\.(weight|bias))$")
_POOLER = re.compile(r"^(roformer\.)?pooler\.dense\.")
_DECODER = "cls.predictions.decoder.weight"
_WORD_EMBEDDINGS = re.compile(r"^(roformer\.)?embeddings\.word_embeddings\.weight$")

_CONFIG_FIELDS = (
    "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
    "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id", "bos_token_id", "eos_token_id",
    "rotary_value", "is_decoder", "add_cross_attention", "id2label", "label2id", "problem_type",
    "tie_word_embeddings", "use_bias",
)  # fmt: skip
_INTEGER_FIELDS = (
    "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "max_position_embeddings", "type_vocab_size", "pad_token_id", "bos_token_id",
)  # fmt: skip
_NUMBER_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps")
_FLAG_FIELDS = ("rotary_value", "is_decoder", "add_cross_attention", "tie_word_embeddings", "use_bias")
#: Keys only junnyu's `roformer` package writes: they tell his folders from transformers' own.
_JUNNYU_KEYS = ("norm_type", "use_bias", "pooler_activation")
_POOLER_ACTIVATIONS = ("linear", "tanh")


# ------------------------------------------------------------------------------------------ detection
def _is_v2(their: Mapping[str, Any]) -> bool:
    """junnyu's code builds LayerNorm only for norm_type == "layer_norm"; any other value is his scale-free norm."""
    return their.get("norm_type", "layer_norm") != "layer_norm" or their.get("use_bias", True) is False


def _has_pooler(keys: Iterable[str]) -> bool:
    return any(_POOLER.match(k) for k in keys)


def _has_mlm_head(keys: Iterable[str]) -> bool:
    return any(k.startswith("cls.predictions.") for k in keys)


def detect_source_kind(their: Mapping[str, Any], keys: Iterable[str]) -> str:
    """Returns "junnyu-v2", "junnyu-sim" (a pooler), "junnyu-v1" (his config keys, neither) or "transformers"."""
    keys = list(keys)
    if _is_v2(their):
        return "junnyu-v2"
    if _has_pooler(keys):
        return "junnyu-sim"
    if any(key in their for key in _JUNNYU_KEYS):
        return "junnyu-v1"
    return "transformers"


# --------------------------------------------------------------------------------------------- config
def _check_model_type(their: Mapping[str, Any]) -> None:
    if their.get("model_type") != "roformer":
        raise CheckpointConversionError(
            f"config.json has model_type {their.get('model_type')!r}; this converter reads transformers' "
            "'roformer' folders. For the original TensorFlow releases use `roformer-ext-convert original`."
        )


def _architecture(their: Mapping[str, Any], keys: list[str]) -> str:
    """Ours for theirs; a pooler (RoFormer-Sim) keeps the encoder bidirectional: MLM head or bare model."""
    if _has_pooler(keys):
        # junnyu runs Sim as RoFormerForCausalLM whose first pass (the source) is bidirectional: UniLM, which
        # our MLM model with `unilm_attention_mask` reproduces; a causal model would not.
        return "RoFormerExtForMaskedLM" if _has_mlm_head(keys) else "RoFormerExtModel"
    architectures = their.get("architectures") or ["RoFormerModel"]
    unknown = [a for a in architectures if a not in ARCHITECTURES]
    if unknown:
        raise CheckpointConversionError(f"Unknown architecture(s) {unknown}; known: {', '.join(ARCHITECTURES)}.")
    return ARCHITECTURES[architectures[0]]


def _pooler_activation(their: Mapping[str, Any], keys: list[str], override: str | None) -> str | None:
    """The pooler's activation: the override, else config.json's; needed exactly when there is a pooler."""
    if not _has_pooler(keys):
        if override is not None:
            raise CheckpointConversionError(
                "--pooler-activation was given but the checkpoint has no pooler (roformer.pooler.dense); leave it out."
            )
        return None
    activation = override or their.get("pooler_activation")
    if activation is None:
        raise CheckpointConversionError(
            "The checkpoint has a pooler (roformer.pooler.dense) but config.json has no pooler_activation; pass "
            "--pooler-activation linear (RoFormer-Sim) or tanh."
        )
    if activation not in _POOLER_ACTIVATIONS:
        raise CheckpointConversionError(
            f"pooler_activation {activation!r} is not supported; roformer-ext has {', '.join(_POOLER_ACTIVATIONS)}."
        )
    return activation


def convert_transformers_config(
    their: Mapping[str, Any],
    keys: Iterable[str] = (),
    pooler_activation: str | None = None,
    path: Path = Path("config.json"),
) -> dict[str, Any]:
    """Our config kwargs from theirs (read from `path`) and their weight names.

    Their multiple-choice head pools the last token; we keep that.
    """
    _check_model_type(their)
    check_config_types(their, path, _INTEGER_FIELDS, _NUMBER_FIELDS, _FLAG_FIELDS)
    keys = list(keys)
    ours = {key: their[key] for key in _CONFIG_FIELDS if key in their}
    for key in _INTEGER_FIELDS:  # 128.0 passed the check above as an integer; torch needs the int
        if isinstance(ours.get(key), float):
            ours[key] = int(ours[key])
    layer_norm = their.get("norm_type", "layer_norm") == "layer_norm"  # junnyu: any other value is his RMS norm
    ours["norm_type"] = "layer_norm" if layer_norm else "rms_scale_free"
    ours["mlm_head_transform"] = layer_norm  # his MLM head has the transform iff norm_type == "layer_norm"
    ours["multiple_choice_pooling"] = "last"
    ours["architectures"] = [_architecture(their, keys)]
    ours["pooler_activation"] = _pooler_activation(their, keys, pooler_activation)
    if ours["pooler_activation"] is not None:
        ours["is_decoder"] = False  # see _architecture
        if _has_mlm_head(keys):  # the Sim generator: AutoModelForCausalLM loads it as junnyu runs it (UniLM)
            ours["decoder_attention"] = "unilm"
    return ours


# ---------------------------------------------------------------------------------------------- weights
def _rename(key: str) -> str | None:
    """Our key for one of theirs, or None when it has no counterpart (raises on an unknown key)."""
    if _DROPPED.search(key):
        return None
    for pattern, replacement in _HEAD_RULES:
        if re.match(pattern, key):
            return re.sub(pattern, replacement, key)
    body = key.removeprefix("roformer.")
    for pattern, replacement in _BODY_RULES:
        if re.match(pattern, body):
            return "roformer." + re.sub(pattern, replacement, body)
    raise CheckpointConversionError(f"Unexpected variable {key!r} in the transformers checkpoint.")


def _check_decoder_is_tied(their: Mapping[str, torch.Tensor]) -> None:
    """The decoder we drop must equal the word embeddings we keep (it is tied in both libraries)."""
    embeddings = next((v for k, v in their.items() if _WORD_EMBEDDINGS.match(k)), None)
    decoder = their.get(_DECODER)
    if decoder is None or embeddings is None or decoder.shape != embeddings.shape:
        return
    if not torch.equal(decoder, embeddings):
        raise CheckpointConversionError(
            f"{_DECODER} differs from the word embeddings, but roformer-ext ties the MLM decoder to them; an "
            "untied decoder cannot be converted."
        )


def convert_transformers_state_dict(their: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename every tensor; the decoder bias stands in for `cls.predictions.bias` when only it was saved."""
    _check_decoder_is_tied(their)
    ours = {}
    for key, tensor in their.items():
        new_key = _rename(key)
        if new_key is not None:
            ours[new_key] = tensor
    if "cls.predictions.decoder.bias" in their and "lm_head.bias" not in ours:
        ours["lm_head.bias"] = their["cls.predictions.decoder.bias"]
    return ours


def _weight_files(src: Path) -> list[Path]:
    """model.safetensors (single or sharded) or pytorch_model.bin, as transformers writes them."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = src / index_name
        if index.exists():
            weight_map = read_json_file(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise CheckpointConversionError(f"{index} has no weight_map; the index file is damaged.")
            return [src / name for name in sorted(set(weight_map.values()))]
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (src / name).exists():
            return [src / name]
    raise CheckpointConversionError(f"No model.safetensors or pytorch_model.bin in {src}.")


def _load_weight_file(path: Path) -> dict[str, torch.Tensor]:
    """One weights file as a dict of tensors; a missing, damaged or foreign file is a one-line error."""
    from safetensors.torch import load_file

    safetensors = path.name.endswith(".safetensors")
    if not path.is_file():
        raise CheckpointConversionError(f"Missing {path}, which the weight index lists.")
    try:
        state = load_file(path) if safetensors else torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 (safetensors, zipfile, pickle and torch raise their own kinds)
        kind = "safetensors" if safetensors else "PyTorch"
        raise CheckpointConversionError(
            f"{path} cannot be read as a {kind} weights file ({one_line(err)}); it is damaged or truncated: "
            "download or save it again."
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointConversionError(f"{path} does not hold a state dict (names -> tensors).")
    return state


def load_state_dict_from_folder(src: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's weight file(s)."""
    state = {}
    for path in _weight_files(src):
        state.update(_load_weight_file(path))
    return state


def _check_and_load(
    model: torch.nn.Module, state: dict[str, torch.Tensor], config_path: Path = Path("config.json")
) -> dict[str, torch.Tensor]:
    """Every expected tensor present with its shape, nothing left over — else one error listing them all.

    Returns the pooler tensors when the architecture does not hold a pooler, to be saved next to its weights.
    """
    if model.base_model is model:  # a bare encoder's keys carry no "roformer." prefix
        state = {k.removeprefix(f"{model.base_model_prefix}."): v for k, v in state.items()}
    expected = model.state_dict()
    tied = {"lm_head.decoder.weight"}
    extra = {k: v for k, v in state.items() if k not in expected and _POOLER.match(k)}
    missing = sorted(k for k in expected if k not in state and k not in tied)
    unexpected = sorted(k for k in state if k not in expected and k not in extra)
    misshaped = [f"{k}: expected {tuple(expected[k].shape)}, found {tuple(v.shape)}"
                 for k, v in state.items() if k in expected and tuple(v.shape) != tuple(expected[k].shape)]  # fmt: skip
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
    return extra


def _build(src: Path, pooler_activation: str | None) -> tuple[torch.nn.Module, str, dict[str, torch.Tensor]]:
    """Our model with their weights, the detected source kind, and pooler tensors the model does not hold."""
    from .. import modeling_roformer_ext
    from ..configuration_roformer_ext import RoFormerExtConfig

    if not (src / "config.json").exists():
        raise CheckpointConversionError(f"{src} has no config.json; pass a folder written by save_pretrained.")
    their = read_json_file(src / "config.json")
    _check_model_type(their)
    state = load_state_dict_from_folder(src)
    kind = detect_source_kind(their, state)
    kwargs = convert_transformers_config(their, state, pooler_activation, src / "config.json")
    try:
        config = RoFormerExtConfig(**kwargs)
    except (ValueError, TypeError) as err:
        raise CheckpointConversionError(f"{src / 'config.json'} gives an invalid configuration: {err}") from None
    model = getattr(modeling_roformer_ext, kwargs["architectures"][0])(config)
    extra = _check_and_load(model, convert_transformers_state_dict(state), src / "config.json")
    return model.eval(), kind, extra


def build_converted_model(src: str | Path, pooler_activation: str | None = None) -> torch.nn.Module:
    """Our model, in memory, from a transformers / junnyu RoFormer folder."""
    return _build(Path(src), pooler_activation)[0]


# --------------------------------------------------------------------------------------------- folder
def _save_tokenizer(src: Path, folder: Path) -> PreTrainedTokenizerBase:
    """Ours, built from vocab.txt (jieba word mode when it holds words, as transformers' RoFormerTokenizer)."""
    from ..tokenization_roformer_ext import RoFormerExtTokenizerFast

    vocab = src / "vocab.txt"
    read_text_file(vocab)  # a clear error for a vocabulary in another encoding
    settings = read_json_file(src / "tokenizer_config.json") if (src / "tokenizer_config.json").exists() else {}
    tokenizer = RoFormerExtTokenizerFast.from_vocab_file(
        vocab, segmenter="auto", do_lower_case=settings.get("do_lower_case", True)
    )
    tokenizer.save_pretrained(folder)
    return tokenizer


def convert_transformers_checkpoint(
    src: str | Path,
    out: str | Path,
    force: bool = False,
    pooler_activation: str | None = None,
    command: str | None = None,
    code_repo: str | None = None,
) -> Path:
    """Write our folder (config with auto_map, safetensors, code, tokenizer, card) to `out`, atomically.

    The tokenizer becomes ours, built from vocab.txt, so the folder no longer needs rjieba and keeps jieba on
    reload; without vocab.txt the folder has no tokenizer and a warning says so. `pooler_activation` is for a
    pooler whose config.json does not name its activation. `out` may not be, hold or lie inside `src`. With
    `code_repo` ("owner/name") the folder loads its code from that Hub code repository instead of carrying copies.
    """
    src, out = Path(src), Path(out)
    if code_repo is not None:
        try:
            check_code_repo(code_repo)
        except ValueError as error:
            raise CheckpointConversionError(str(error)) from None
    if not src.is_dir():
        raise CheckpointConversionError(f"Source folder {src} does not exist.")
    with output_folder(out, force=force, sources=[src]) as tmp:
        model, kind, extra = _build(src, pooler_activation)
        logger.info("Detected %s -> %s.", SOURCE_KINDS[kind], model.__class__.__name__)
        model.save_pretrained(tmp)
        if extra:
            add_to_safetensors(tmp, extra)
        tokenizer = _save_tokenizer(src, tmp) if (src / "vocab.txt").exists() else None
        write_sim_files(tmp, model.config, tokenizer)
        if tokenizer is None:
            logger.warning(
                "%s has no vocab.txt, so %s gets no tokenizer: put the model's vocab.txt into %s and convert "
                "again (or save a tokenizer into %s yourself).", src, out, src, out
            )  # fmt: skip
        if command is None:
            command = portable_command("transformers", portable_path(src), portable_path(out))
        (tmp / "README.md").write_text(_model_card(src, model, kind, command), encoding="utf-8")
        write_compatibility_section(tmp)
        if code_repo:
            share_code(tmp, code_repo)
    return out


_CARD_SOURCE = {
    "transformers": "transformers' RoFormer",
    "junnyu-v1": "junnyu's `roformer` package (RoFormer v1)",
    "junnyu-v2": "junnyu's `roformer` package (RoFormer-V2: no biases, scale-free RMS norm, tied MLM decoder)",
    "junnyu-sim": "junnyu's `roformer` package (RoFormer-Sim: pooler on [CLS] for sentence embeddings, "
    "`SentenceTransformer(folder)` loads it; with the MLM head, `AutoModelForCausalLM` is the UniLM generator of "
    "similar sentences, see `roformer_ext.SimilarSentenceGenerator`)",
}


def _model_card(src: Path, model: torch.nn.Module, kind: str, command: str) -> str:
    return (
        "---\nlibrary_name: transformers\ntags: [roformer, roformer-ext]\n---\n"
        f"# {model.__class__.__name__} converted from {_CARD_SOURCE[kind]}\n\n"
        f"Source: `{src.resolve().name}` (`model_type: roformer`, detected: {SOURCE_KINDS[kind]}). Made with:\n\n"
        f"```bash\n{command}\n```\n\n"
        "The weights are the source's, renamed; there is no length cap (the rotary angles are computed, not "
        "looked up).\n\n"
        "Load with `AutoModel.from_pretrained(path, trust_remote_code=True)` or after `import roformer_ext`.\n\n"
        "Su et al., *RoFormer: Enhanced Transformer with Rotary Position Embedding*, arXiv:2104.09864 (2021).\n"
    )


__all__ = [
    "ARCHITECTURES",
    "SOURCE_KINDS",
    "build_converted_model",
    "convert_transformers_checkpoint",
    "convert_transformers_config",
    "convert_transformers_state_dict",
    "detect_source_kind",
    "load_state_dict_from_folder",
]
