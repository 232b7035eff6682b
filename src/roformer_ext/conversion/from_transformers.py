"""Convert a `model_type: roformer` folder (transformers' RoFormer, or junnyu's `roformer` package) into roformer-ext
by an explicit key map; the sinusoidal table is dropped (our rotary computes it). junnyu's `use_bias: false` drops every
bias, a `norm_type` other than "layer_norm" means his scale-free RMS norm and a bare tied MLM decoder (RoFormer-V2)."""

import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from .files import (
    _POOLER,
    CheckpointConversionError,
    build_model,
    check_config_types,
    command_line,
    conversion_folder,
    one_line,
    read_json_file,
    resolve_pooler_activation,
    save_folder,
)

logger = logging.getLogger(__name__)

#: transformers class -> ours (architectures entry of config.json).
_HEADS = (
    "Model",
    "ForMaskedLM",
    "ForCausalLM",
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
    "ForMultipleChoice",
)
ARCHITECTURES = {f"RoFormer{head}": f"RoFormerExt{head}" for head in _HEADS}

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
    (r"encoder\.layer\.(\d+)\.(attention|crossattention)\.self\.(query|key|value)\.", r"layers.\1.\2.\3."),
    (r"encoder\.layer\.(\d+)\.(attention|crossattention)\.output\.dense\.", r"layers.\1.\2.output."),
    (r"encoder\.layer\.(\d+)\.(attention|crossattention)\.output\.LayerNorm\.", r"layers.\1.\2_norm."),
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

_INTEGER_FIELDS = (
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "pad_token_id",
    "bos_token_id",
)
_NUMBER_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps")
_FLAG_FIELDS = ("rotary_value", "is_decoder", "add_cross_attention", "tie_word_embeddings", "use_bias")
_OTHER_FIELDS = ("hidden_act", "eos_token_id", "id2label", "label2id", "problem_type")
_CONFIG_FIELDS = _INTEGER_FIELDS + _NUMBER_FIELDS + _FLAG_FIELDS + _OTHER_FIELDS
#: Keys only junnyu's `roformer` package writes: they tell his folders from transformers' own.
_JUNNYU_KEYS = ("norm_type", "use_bias", "pooler_activation")


def _has_pooler(keys: Iterable[str]) -> bool:
    return any(_POOLER.match(k) for k in keys)


def detect_source_kind(their: Mapping[str, Any], keys: Iterable[str]) -> str:
    """Returns "junnyu-v2", "junnyu-sim" (a pooler), "junnyu-v1" (his config keys, neither) or "transformers"."""
    keys = list(keys)
    if their.get("norm_type", "layer_norm") != "layer_norm" or their.get("use_bias", True) is False:
        return "junnyu-v2"
    if _has_pooler(keys):
        return "junnyu-sim"
    if any(key in their for key in _JUNNYU_KEYS):
        return "junnyu-v1"
    return "transformers"


def _check_model_type(their: Mapping[str, Any]) -> None:
    if their.get("model_type") != "roformer":
        raise CheckpointConversionError(
            f"config.json has model_type {their.get('model_type')!r}; this converter reads transformers' "
            "'roformer' folders. For the original TensorFlow releases use `roformer-ext-convert original`."
        )


def _architecture(their: Mapping[str, Any], keys: list[str]) -> str:
    """Ours for theirs; a pooler (RoFormer-Sim) keeps the encoder bidirectional: MLM head or bare model."""
    if _has_pooler(keys):
        # junnyu's Sim runs a bidirectional first pass (UniLM), which our MLM model reproduces and a causal one not
        return "RoFormerExtForMaskedLM" if any(k.startswith("cls.predictions.") for k in keys) else "RoFormerExtModel"
    architectures = their.get("architectures") or ["RoFormerModel"]
    unknown = [a for a in architectures if a not in ARCHITECTURES]
    if unknown:
        raise CheckpointConversionError(f"Unknown architecture(s) {unknown}; known: {', '.join(ARCHITECTURES)}.")
    return ARCHITECTURES[architectures[0]]


def convert_transformers_config(
    their: Mapping[str, Any],
    keys: Iterable[str] = (),
    pooler_activation: str | None = None,
    path: Path = Path("config.json"),
) -> dict[str, Any]:
    """Our config kwargs from theirs (read from `path`) and their weight names."""
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
    ours["multiple_choice_pooling"] = "last"  # as their multiple-choice head
    ours["architectures"] = [_architecture(their, keys)]
    ours["pooler_activation"] = resolve_pooler_activation(
        _has_pooler(keys), pooler_activation, their.get("pooler_activation"), "roformer.pooler.dense"
    )
    if ours["pooler_activation"] is not None:
        ours["is_decoder"] = False  # see _architecture
        if ours["architectures"] == ["RoFormerExtForMaskedLM"]:  # the Sim generator: UniLM, as junnyu runs it
            ours["decoder_attention"] = "unilm"
    return ours


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


def convert_transformers_state_dict(their: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename every tensor; the decoder bias stands in for `cls.predictions.bias` when only it was saved."""
    embeddings = their.get("roformer.embeddings.word_embeddings.weight", their.get("embeddings.word_embeddings.weight"))
    decoder = their.get("cls.predictions.decoder.weight")
    same_shape = decoder is not None and embeddings is not None and decoder.shape == embeddings.shape
    if same_shape and not torch.equal(decoder, embeddings):  # we drop the decoder: it must be the embeddings, tied
        raise CheckpointConversionError(
            "cls.predictions.decoder.weight differs from the word embeddings, but roformer-ext ties the MLM "
            "decoder to them; an untied decoder cannot be converted."
        )
    ours = {_rename(key): tensor for key, tensor in their.items()}
    ours.pop(None, None)  # keys with no counterpart
    if "cls.predictions.decoder.bias" in their and "lm_head.bias" not in ours:
        ours["lm_head.bias"] = their["cls.predictions.decoder.bias"]
    return ours


def _weight_files(src: Path) -> list[Path]:
    """model.safetensors (single or sharded) or pytorch_model.bin, as transformers writes them."""
    for index in (src / "model.safetensors.index.json", src / "pytorch_model.bin.index.json"):
        if index.exists():
            weight_map = read_json_file(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise CheckpointConversionError(f"{index} has no weight_map; the index file is damaged.")
            return [src / name for name in sorted(set(weight_map.values()))]
    for path in (src / "model.safetensors", src / "pytorch_model.bin"):
        if path.exists():
            return [path]
    raise CheckpointConversionError(f"No model.safetensors or pytorch_model.bin in {src}.")


def load_state_dict_from_folder(src: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's weight file(s); a missing, damaged or foreign file is a one-line error."""
    from safetensors.torch import load_file

    state = {}
    for path in _weight_files(src):
        safetensors = path.name.endswith(".safetensors")
        if not path.is_file():
            raise CheckpointConversionError(f"Missing {path}, which the weight index lists.")
        try:
            part = load_file(path) if safetensors else torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 (safetensors, zipfile, pickle and torch raise their own kinds)
            raise CheckpointConversionError(
                f"{path} cannot be read as a {'safetensors' if safetensors else 'PyTorch'} weights file "
                f"({one_line(err)}); it is damaged or truncated: download or save it again."
            ) from None
        if not isinstance(part, dict) or not all(isinstance(v, torch.Tensor) for v in part.values()):
            raise CheckpointConversionError(f"{path} does not hold a state dict (names -> tensors).")
        state.update(part)
    return state


def _build(src: Path, pooler_activation: str | None) -> tuple[torch.nn.Module, str, dict[str, torch.Tensor]]:
    """Our model with their weights, the detected source kind, and pooler tensors the model does not hold."""
    if not (src / "config.json").exists():
        raise CheckpointConversionError(f"{src} has no config.json; pass a folder written by save_pretrained.")
    their = read_json_file(src / "config.json")
    _check_model_type(their)
    state = load_state_dict_from_folder(src)
    kwargs = convert_transformers_config(their, state, pooler_activation, src / "config.json")
    ours = convert_transformers_state_dict(state)
    model, extra = build_model(kwargs["architectures"][0], kwargs, ours, src / "config.json")
    return model, detect_source_kind(their, state), extra


def build_converted_model(src: str | Path, pooler_activation: str | None = None) -> torch.nn.Module:
    """Our model, in memory, from a transformers / junnyu RoFormer folder."""
    return _build(Path(src), pooler_activation)[0]


def convert_transformers_checkpoint(
    src: str | Path,
    out: str | Path,
    force: bool = False,
    pooler_activation: str | None = None,
    command: str | None = None,
    code_repo: str | None = None,
) -> Path:
    """Write our folder (config, weights, code, tokenizer from vocab.txt, card) to `out`, all or nothing."""
    options = dict(pooler_activation=pooler_activation, code_repo=code_repo, force=force)
    command = command or command_line("transformers", src, out, **options)  # relative paths as typed
    src, out = Path(src), Path(out)
    with conversion_folder(src, out, force, code_repo) as tmp:
        model, kind, extra = _build(src, pooler_activation)
        logger.info("Detected %s -> %s.", SOURCE_KINDS[kind], model.__class__.__name__)
        vocab = src / "vocab.txt"
        if not vocab.exists():
            vocab = None
            logger.warning(
                f"{src} has no vocab.txt, so {out} gets no tokenizer: put the model's vocab.txt into {src} and "
                f"convert again (or save a tokenizer into {out} yourself)."
            )
        settings = read_json_file(src / "tokenizer_config.json") if (src / "tokenizer_config.json").exists() else {}
        card = _model_card(src, model, kind, command)
        save_folder(tmp, model, extra, card, code_repo, vocab, settings.get("do_lower_case", True))
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
