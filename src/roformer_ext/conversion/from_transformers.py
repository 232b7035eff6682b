"""Convert a transformers `model_type: roformer` folder (any head; junnyu's hub folders too) into roformer-ext.

An explicit key map with every shape checked (nanoGPT's `from_pretrained` style). transformers' sinusoidal
position table is dropped: our rotary computes the same angles from positions, at any length.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from . import CheckpointConversionError
from .output_folder import output_folder

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

#: (pattern on their key without the "roformer." prefix, replacement). Order matters: first match wins.
_BODY_RULES = [
    (r"embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"embeddings\.(word_embeddings|token_type_embeddings)\.", r"embeddings.\1."),
    (r"embeddings_project\.", "embeddings.projection."),
    (r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.", r"layers.\1.attention.\2."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention.output."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attention_norm."),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.feed_forward.intermediate."),
    (r"encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.feed_forward.output."),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.output_norm."),
]
_HEAD_RULES = [
    (r"cls\.predictions\.transform\.dense\.", "lm_head.transform.dense."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "lm_head.transform.norm."),
    (r"cls\.predictions\.bias$", "lm_head.bias"),
    (r"(classifier|qa_outputs)\.", r"\1."),
]
#: Keys with no counterpart: the position table, and the decoder tied to the word embeddings.
_DROPPED = re.compile(r"(encoder\.embed_positions\.weight|cls\.predictions\.decoder\.(weight|bias))$")

_CONFIG_FIELDS = (
    "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
    "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id", "bos_token_id", "eos_token_id",
    "rotary_value", "is_decoder", "id2label", "label2id", "problem_type", "tie_word_embeddings",
)


def convert_transformers_config(their: dict) -> dict:
    """Our config kwargs from theirs. Their multiple-choice head pools the last token; we keep that."""
    if their.get("model_type") != "roformer":
        raise CheckpointConversionError(
            f"config.json has model_type {their.get('model_type')!r}; this converter reads transformers' "
            "'roformer' folders. For the original TensorFlow releases use `roformer-ext-convert original`."
        )
    ours = {key: their[key] for key in _CONFIG_FIELDS if key in their}
    ours["multiple_choice_pooling"] = "last"
    architectures = their.get("architectures") or ["RoFormerModel"]
    unknown = [a for a in architectures if a not in ARCHITECTURES]
    if unknown:
        raise CheckpointConversionError(f"Unknown architecture(s) {unknown}; known: {', '.join(ARCHITECTURES)}.")
    ours["architectures"] = [ARCHITECTURES[a] for a in architectures]
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


def convert_transformers_state_dict(their: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename every tensor; the decoder bias stands in for `cls.predictions.bias` when only it was saved."""
    ours = {}
    for key, tensor in their.items():
        new_key = _rename(key)
        if new_key is not None:
            ours[new_key] = tensor
    if "cls.predictions.decoder.bias" in their and "lm_head.bias" not in ours:
        ours["lm_head.bias"] = their["cls.predictions.decoder.bias"]
    return ours


def load_state_dict_from_folder(src: Path) -> dict[str, torch.Tensor]:
    """model.safetensors (single or sharded) or pytorch_model.bin, as transformers writes them."""
    from safetensors.torch import load_file

    index = next((src / n for n in ("model.safetensors.index.json", "pytorch_model.bin.index.json")
                  if (src / n).exists()), None)
    if index is not None:
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (src / "model.safetensors").exists():
        files = ["model.safetensors"]
    elif (src / "pytorch_model.bin").exists():
        files = ["pytorch_model.bin"]
    else:
        raise CheckpointConversionError(f"No model.safetensors or pytorch_model.bin in {src}.")
    state = {}
    for name in files:
        path = src / name
        state.update(load_file(path) if name.endswith(".safetensors") else torch.load(path, weights_only=True))
    return state


def _check_and_load(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Every expected tensor present with its shape, nothing left over — else one error listing them all."""
    if model.base_model is model:  # a bare encoder's keys carry no "roformer." prefix
        state = {k.removeprefix(f"{model.base_model_prefix}."): v for k, v in state.items()}
    expected = model.state_dict()
    tied = {"lm_head.decoder.weight"}
    missing = sorted(k for k in expected if k not in state and k not in tied)
    unexpected = sorted(k for k in state if k not in expected)
    misshaped = [f"{k}: expected {tuple(expected[k].shape)}, found {tuple(v.shape)}"
                 for k, v in state.items() if k in expected and tuple(v.shape) != tuple(expected[k].shape)]
    if missing or unexpected or misshaped:
        raise CheckpointConversionError(
            "The checkpoint does not fit its config.json:"
            + (f"\n  missing: {', '.join(missing)}" if missing else "")
            + (f"\n  unexpected: {', '.join(unexpected)}" if unexpected else "")
            + ("\n  mis-shaped: " + "; ".join(misshaped) if misshaped else "")
        )
    model.load_state_dict(state, strict=False)


def build_converted_model(src: str | Path) -> torch.nn.Module:
    """Our model, in memory, from a transformers RoFormer folder."""
    from .. import modeling_roformer_ext
    from ..configuration_roformer_ext import RoFormerExtConfig

    src = Path(src)
    if not (src / "config.json").exists():
        raise CheckpointConversionError(f"{src} has no config.json; pass a folder written by save_pretrained.")
    kwargs = convert_transformers_config(json.loads((src / "config.json").read_text()))
    architecture = kwargs["architectures"][0]
    config = RoFormerExtConfig(**kwargs)
    model = getattr(modeling_roformer_ext, architecture)(config)
    _check_and_load(model, convert_transformers_state_dict(load_state_dict_from_folder(src)))
    return model.eval()


def convert_transformers_checkpoint(src: str | Path, out: str | Path, force: bool = False) -> Path:
    """Write our folder (config with auto_map, safetensors, code, tokenizer) to `out`, atomically.

    The tokenizer becomes ours, built from vocab.txt (jieba word mode when the vocabulary holds words, as
    transformers' RoFormerTokenizer segments), so the folder no longer needs rjieba and keeps jieba on reload.
    """
    from ..tokenization_roformer_ext import RoFormerExtTokenizerFast

    src = Path(src)
    model = build_converted_model(src)
    with output_folder(out, force=force) as tmp:
        model.save_pretrained(tmp)
        if (src / "vocab.txt").exists():
            settings = json.loads((src / "tokenizer_config.json").read_text()) if (src / "tokenizer_config.json").exists() else {}
            tokenizer = RoFormerExtTokenizerFast.from_vocab_file(
                src / "vocab.txt", segmenter="auto", do_lower_case=settings.get("do_lower_case", True)
            )
            tokenizer.save_pretrained(tmp)
        (tmp / "README.md").write_text(_model_card(src, model))
    return Path(out)


def _model_card(src: Path, model: torch.nn.Module) -> str:
    return (
        "---\nlibrary_name: transformers\ntags: [roformer, roformer-ext]\n---\n"
        f"# {model.__class__.__name__} converted from transformers' RoFormer\n\n"
        f"Source: `{src.name}` (`model_type: roformer`). Made with `roformer-ext-convert transformers {src.name} OUT`.\n"
        "Outputs agree with transformers' RoFormer within 1e-5 (fp32); there is no length cap.\n\n"
        "Load with `AutoModel.from_pretrained(path, trust_remote_code=True)` or after `import roformer_ext`.\n\n"
        "Su et al., *RoFormer: Enhanced Transformer with Rotary Position Embedding*, arXiv:2104.09864 (2021).\n"
    )
