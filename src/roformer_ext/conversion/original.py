"""Convert the original RoFormer releases (bert4keras TF checkpoints) by an explicit name map, every shape checked."""

import logging
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from .files import (
    CheckpointConversionError,
    build_model,
    check_config_types,
    command_line,
    conversion_folder,
    read_json_file,
    read_text_file,
    resolve_pooler_activation,
    save_folder,
)
from .tf_checkpoint import TFCheckpointReader

logger = logging.getLogger(__name__)

VARIANTS = ("v1", "sim", "gpt", "v2")

#: Optimizer state and bookkeeping that training checkpoints may carry next to the weights.
_IGNORED = re.compile(
    r"(^|/)(global_step|_CHECKPOINTABLE_OBJECT_GRAPH|beta1_power|beta2_power|good_steps|loss_scale)$"
    r"|/(adam_m|adam_v|Adam|AdamWeightDecayOptimizer|lamb_m|lamb_v|Momentum|accumulator)(_\d+)?$"
    r"|^(training|optimizer)/"
)

#: bert4keras activation names -> transformers ACT2FN names.
_ACTIVATIONS = {"gelu": "gelu", "gelu_erf": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "swish": "silu",
                "tanh": "tanh"}  # fmt: skip
#: bert4keras' rotary: interleaved pairs, base 10000.
_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "pair_layout": "interleaved", "axes": 1,
         "axis_allocation": "interleaved", "position_scheme": "rope_1d"}  # fmt: skip


class VariableSpec(NamedTuple):
    """One checkpoint variable and its key; Dense kernels are [in, out], torch Linear weights [out, in]."""

    tf_name: str
    torch_key: str
    tf_shape: tuple[int, ...]
    transpose: bool = False


class ConversionPlan(NamedTuple):
    """Everything decided before any weight is read."""

    variant: str
    architecture: str
    config_kwargs: dict[str, Any]
    specs: list[VariableSpec]
    ignored: list[str]


def _is_ignored(name: str) -> bool:
    return bool(_IGNORED.search(name))


def detect_variant(variables: Mapping[str, tuple[int, ...]]) -> str:
    """ "v2" (no biases, no norm parameters, no `cls/` head), "sim" (v1 + pooler) or "v1"; gpt is never guessed."""
    names = {n for n in variables if not _is_ignored(n)}
    needed = ("bert/embeddings/word_embeddings", "bert/encoder/layer_0/attention/self/query/kernel")
    if not all(n in names for n in needed):
        sample = ", ".join(sorted(names)[:8]) or "(none)"
        raise CheckpointConversionError(
            f"Unknown checkpoint variant: no {' / '.join(needed)}, so this is not a bert4keras RoFormer "
            f"checkpoint (first variables: {sample}). Supported variants: {', '.join(VARIANTS)}."
        )
    has_norm = any("LayerNorm" in n for n in names)
    has_bias = any(n.endswith(("/bias", "/beta", "output_bias")) for n in names)
    has_head = any(n.startswith("cls/") for n in names)
    if not (has_norm or has_bias or has_head):
        return "v2"
    if has_norm and has_bias:
        return "sim" if "bert/pooler/dense/kernel" in names else "v1"
    raise CheckpointConversionError(
        "Unknown checkpoint variant: it has "
        f"{'norm parameters' if has_norm else 'no norm parameters'} and {'biases' if has_bias else 'no biases'}, "
        "but RoFormer v1/Sim/GPT have both and RoFormer-V2 neither. Pass --variant to force one; the "
        "mismatching variables will then be listed."
    )


def _dense(tf_prefix: str, key_prefix: str, shape_in_out: tuple[int, int], bias: bool) -> list[VariableSpec]:
    kernel = VariableSpec(f"{tf_prefix}/kernel", f"{key_prefix}.weight", shape_in_out, transpose=True)
    return [kernel] + ([VariableSpec(f"{tf_prefix}/bias", f"{key_prefix}.bias", shape_in_out[1:])] if bias else [])


def _norm(tf_prefix: str, key_prefix: str, size: int) -> list[VariableSpec]:
    pairs = (("gamma", "weight"), ("beta", "bias"))
    return [VariableSpec(f"{tf_prefix}/{tf}", f"{key_prefix}.{pt}", (size,)) for tf, pt in pairs]


def map_original_variables(
    bert_config: Mapping[str, Any], variant: str, with_pooler: bool, with_mlm_head: bool
) -> list[VariableSpec]:
    """The variables a bert4keras RoFormer of this config and variant has, keyed as RoFormerExtForMaskedLM."""
    v1 = variant != "v2"
    size = _sizes(bert_config)
    vocab, emb, hidden, inter = (size[k] for k in ("vocab_size", "embedding_size", "hidden_size", "intermediate_size"))
    specs = [
        VariableSpec(f"bert/embeddings/{name}", f"roformer.embeddings.{name}.weight", (rows, emb))
        for name, rows in (("word_embeddings", vocab), ("token_type_embeddings", size["type_vocab_size"]))
    ]
    if v1:
        specs += _norm("bert/embeddings/LayerNorm", "roformer.embeddings.norm", emb)
    if emb != hidden:
        specs += _dense("bert/encoder/embedding_hidden_mapping_in", "roformer.embeddings.projection", (emb, hidden), v1)
    for i in range(size["num_hidden_layers"]):
        tf, pt = f"bert/encoder/layer_{i}", f"roformer.layers.{i}"
        for part in ("query", "key", "value"):
            specs += _dense(f"{tf}/attention/self/{part}", f"{pt}.attention.{part}", (hidden, hidden), v1)
        specs += _dense(f"{tf}/attention/output/dense", f"{pt}.attention.output", (hidden, hidden), v1)
        specs += _dense(f"{tf}/intermediate/dense", f"{pt}.feed_forward.intermediate", (hidden, inter), v1)
        specs += _dense(f"{tf}/output/dense", f"{pt}.feed_forward.output", (inter, hidden), v1)
        if v1:
            specs += _norm(f"{tf}/attention/output/LayerNorm", f"{pt}.attention_norm", hidden)
            specs += _norm(f"{tf}/output/LayerNorm", f"{pt}.output_norm", hidden)
    if with_pooler:
        specs += _dense("bert/pooler/dense", "roformer.pooler.dense", (hidden, hidden), v1)
    if with_mlm_head and v1:  # V2's head is the tied embedding alone: nothing stored
        specs += _dense("cls/predictions/transform/dense", "lm_head.transform.dense", (hidden, emb), True)
        specs += _norm("cls/predictions/transform/LayerNorm", "lm_head.transform.norm", emb)
        specs.append(VariableSpec("cls/predictions/output_bias", "lm_head.bias", (vocab,)))
    return specs


def _check_variables(variables: Mapping[str, tuple[int, ...]], specs: list[VariableSpec], variant: str) -> None:
    """One error listing every missing, unexpected and mis-shaped variable, so a user fixes them in one go."""
    expected = {s.tf_name: s.tf_shape for s in specs}
    present = {n: tuple(s) for n, s in variables.items() if not _is_ignored(n)}
    missing = sorted(set(expected) - set(present))
    unexpected = sorted(set(present) - set(expected))
    misshaped = sorted(n for n in set(expected) & set(present) if expected[n] != present[n])
    if not (missing or unexpected or misshaped):
        return
    lines = [f"The checkpoint does not match a RoFormer {variant} of its bert_config.json:"]
    lines += [f"  missing variable {n} (expected shape {list(expected[n])})" for n in missing]
    lines += [f"  unexpected variable {n} (shape {list(present[n])})" for n in unexpected]
    lines += [f"  variable {n} has shape {list(present[n])}, expected {list(expected[n])}" for n in misshaped]
    lines.append("Check that bert_config.json belongs to this checkpoint, or pass --variant (v1, sim, gpt, v2).")
    raise CheckpointConversionError("\n".join(lines))


_REQUIRED_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
_INTEGER_KEYS = (*_REQUIRED_KEYS, "embedding_size", "type_vocab_size", "max_position_embeddings")
_NUMBER_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")


def _sizes(bert_config: Mapping[str, Any]) -> dict[str, int]:
    missing = [k for k in _REQUIRED_KEYS if k not in bert_config]
    if missing:
        raise CheckpointConversionError(f"bert_config.json lacks {', '.join(missing)}.")
    sizes = {k: int(bert_config[k]) for k in _REQUIRED_KEYS}
    sizes["embedding_size"] = int(bert_config.get("embedding_size") or sizes["hidden_size"])
    sizes["type_vocab_size"] = int(bert_config.get("type_vocab_size", 2))
    return sizes


def original_config_kwargs(
    bert_config: Mapping[str, Any], variant: str, pooler_activation: str | None, pad_token_id: int = 0
) -> dict[str, Any]:
    """RoFormerExtConfig keyword arguments that reproduce what bert4keras computes for this variant."""
    v2 = variant == "v2"
    act = str(bert_config.get("hidden_act", "gelu"))
    if act not in _ACTIVATIONS:
        raise CheckpointConversionError(
            f"Unsupported hidden_act {act!r} in bert_config.json (known: {', '.join(_ACTIVATIONS)})."
        )
    if v2 and _sizes(bert_config)["embedding_size"] != bert_config["hidden_size"]:
        raise CheckpointConversionError(
            "RoFormer-V2 with embedding_size != hidden_size cannot be converted faithfully: bert4keras adds an "
            "'Output-Mapping' layer to its MLM head that is never saved in the checkpoint."
        )
    return {
        **_sizes(bert_config),
        "hidden_act": _ACTIVATIONS[act],
        "hidden_dropout_prob": float(bert_config.get("hidden_dropout_prob", 0.1)),
        "attention_probs_dropout_prob": float(bert_config.get("attention_probs_dropout_prob", 0.1)),
        "max_position_embeddings": int(bert_config.get("max_position_embeddings", 512)),
        "initializer_range": float(bert_config.get("initializer_range", 0.02)),
        "layer_norm_eps": 1e-7,  # keras' K.epsilon(), which bert4keras uses for every norm of the encoder
        "pad_token_id": pad_token_id,
        "use_bias": not v2,
        "norm_type": "rms_scale_free" if v2 else "layer_norm",
        "mlm_head_transform": not v2,
        "rotary_value": False,
        "attention_type": "softmax",
        "pooler_activation": pooler_activation,
        "is_decoder": variant == "gpt",
        "rope_parameters": dict(_ROPE),
    }


def plan_conversion(
    variables: Mapping[str, tuple[int, ...]],
    bert_config: Mapping[str, Any],
    variant: str | None = None,
    pooler_activation: str | None = None,
    pad_token_id: int = 0,
) -> ConversionPlan:
    """Decide variant, architecture, config and variable map, checking the checkpoint against them."""
    if variant is not None and variant not in VARIANTS:
        raise CheckpointConversionError(f"Unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}.")
    variant = variant or detect_variant(variables)
    has_pooler = "bert/pooler/dense/kernel" in variables or variant == "sim"
    has_head = variant in ("v2", "gpt") or any(n.startswith("cls/") for n in variables)
    default = "linear" if variant == "sim" else "tanh"  # RoFormer-Sim's pooler is linear
    pooler = resolve_pooler_activation(has_pooler, pooler_activation, default, "bert/pooler/dense")
    specs = map_original_variables(bert_config, variant, has_pooler, has_head)
    _check_variables(variables, specs, variant)
    architecture = "RoFormerExtForMaskedLM" if has_head else "RoFormerExtModel"
    architecture = "RoFormerExtForCausalLM" if variant == "gpt" else architecture
    config_kwargs = original_config_kwargs(bert_config, variant, pooler, pad_token_id)
    if variant == "sim" and has_head:  # the generator: AutoModelForCausalLM loads it as bert4keras' application='unilm'
        config_kwargs["decoder_attention"] = "unilm"
    ignored = sorted(n for n in variables if _is_ignored(n))
    return ConversionPlan(variant, architecture, config_kwargs, specs, ignored)


def convert_original_checkpoint(
    src: str | Path,
    out: str | Path,
    variant: str | None = None,
    pooler_activation: str | None = None,
    force: bool = False,
    command: str | None = None,
    code_repo: str | None = None,
) -> Path:
    """Convert the release folder `src` into `out`, all or nothing; `variant` None: detected (never gpt)."""
    options = dict(variant=variant, pooler_activation=pooler_activation, code_repo=code_repo, force=force)
    command = command or command_line("original", src, out, **options)  # relative paths as typed
    src, out = Path(src), Path(out)
    with conversion_folder(src, out, force, code_repo) as tmp:
        for name in ("bert_config.json", "vocab.txt"):
            if not (src / name).is_file():
                raise CheckpointConversionError(
                    f"Missing {src / name}: an original release folder holds bert_config.json, bert_model.ckpt.* "
                    "and vocab.txt."
                )
        bert_config = read_json_file(src / "bert_config.json")
        check_config_types(bert_config, src / "bert_config.json", _INTEGER_KEYS, _NUMBER_KEYS)
        vocab = read_text_file(src / "vocab.txt").splitlines()
        reader = TFCheckpointReader(src)
        pad_id = vocab.index("[PAD]") if "[PAD]" in vocab else 0
        plan = plan_conversion(reader.variables, bert_config, variant, pooler_activation, pad_id)
        logger.info("%s", describe_variant(plan, forced=variant is not None))
        if len(vocab) > plan.config_kwargs["vocab_size"]:  # fewer is harmless: unused embedding rows
            raise CheckpointConversionError(
                f"vocab.txt has {len(vocab)} entries but the embeddings only "
                f"{plan.config_kwargs['vocab_size']} rows: the vocabulary does not belong to this checkpoint."
            )
        state = {}
        for spec in plan.specs:  # TF Dense kernels are [in, out], torch Linear weights [out, in]
            array = reader.get_tensor(spec.tf_name).astype(np.float32, copy=False)
            state[spec.torch_key] = torch.from_numpy(np.ascontiguousarray(array.T if spec.transpose else array))
        model, extra = build_model(plan.architecture, plan.config_kwargs, state, src / "bert_config.json")
        save_folder(tmp, model, extra, model_card(src, plan, command), code_repo, src / "vocab.txt")
        shutil.copyfile(src / "vocab.txt", tmp / "vocab.txt")
    return out


def describe_variant(plan: ConversionPlan, forced: bool = False) -> str:
    """One line for the user: the variant (detected or forced) and what it becomes."""
    how, pooler = "forced with --variant" if forced else "detected", plan.config_kwargs["pooler_activation"]
    extra = f", pooler activation {pooler}" if pooler else ""
    return f"Variant {plan.variant} ({how}): {_VARIANT_NAMES[plan.variant]} -> {plan.architecture}{extra}."


_CITATION = """@article{su2021roformer,
  title   = {RoFormer: Enhanced Transformer with Rotary Position Embedding},
  author  = {Su, Jianlin and Lu, Yu and Pan, Shengfeng and Murtadha, Ahmed and Wen, Bo and Liu, Yunfeng},
  journal = {arXiv preprint arXiv:2104.09864},
  year    = {2021}
}"""

_VARIANT_NAMES = {"v1": "RoFormer v1", "sim": "RoFormer-Sim", "gpt": "RoFormer-GPT", "v2": "RoFormer-V2"}
_VARIANT_TEXT = {
    "v1": "RoFormer (v1): post-norm BERT layout with biases and LayerNorm, rotary position embedding, MLM head.",
    "sim": "RoFormer-Sim: RoFormer v1 plus a pooler on [CLS] (linear in the original) for sentence similarity, and "
    "(with the MLM head) a UniLM seq2seq generator of similar sentences.",
    "gpt": "RoFormer-GPT: RoFormer v1 weights used as a causal language model (the v1 MLM head is the LM head).",
    "v2": "RoFormer-V2: no biases, parameter-free RMS norm, MLM head = tied embeddings.",
}


def model_card(src: Path, plan: ConversionPlan, command: str) -> str:
    """A short README.md: where the weights come from, how they were converted and what was kept."""
    cfg = plan.config_kwargs
    pooler = f"pooler activation `{cfg['pooler_activation']}`" if cfg["pooler_activation"] else "no pooler"
    sim = "".join(f"\n{line}\n" for line, wanted in _SIM_CARD if wanted(cfg))
    auto = {"RoFormerExtForMaskedLM": "AutoModelForMaskedLM", "RoFormerExtForCausalLM": "AutoModelForCausalLM"}
    auto_class = auto.get(plan.architecture, "AutoModel")
    name = src.resolve().name
    return f"""---
library_name: transformers
language: zh
tags:
- roformer
- roformer-ext
---

# {name} (roformer-ext)

Converted from the original release `{name}` (bert4keras TF checkpoint, ZhuiyiTechnology) with roformer-ext.

- Variant: **{plan.variant}** — {_VARIANT_TEXT[plan.variant]}
- Architecture: `{plan.architecture}`; {cfg["num_hidden_layers"]} layers, hidden {cfg["hidden_size"]},
  {cfg["num_attention_heads"]} heads, embedding {cfg["embedding_size"]}, vocab {cfg["vocab_size"]}; {pooler}.
- Kept from the original: activation `{cfg["hidden_act"]}` (`gelu` is the exact erf gelu), norm epsilon 1e-7,
  interleaved rotary pairs with base 10000.

Made with:

```bash
{command}
```

```python
import roformer_ext  # registers the Auto classes (or pass trust_remote_code=True)
from transformers import {auto_class}, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")
model = {auto_class}.from_pretrained("path/to/this/folder")
```
{sim}
## Citation

```bibtex
{_CITATION}
```
"""


#: How a Sim folder is used: similar sentences through generate(), embeddings through sentence-transformers.
_SIM_CARD = [
    (
        "Similar sentences: `AutoModelForCausalLM.from_pretrained(folder)` is the UniLM seq2seq model (config: "
        "`decoder_attention: unilm`; generation config: stop at [SEP]), e.g. `model.generate(**tokenizer(text, "
        "return_tensors='pt'), do_sample=True, top_p=0.95, top_k=0, num_return_sequences=50)`; "
        "`roformer_ext.SimilarSentenceGenerator.from_pretrained(folder)(text, n=100, k=20)` ranks them "
        "(bert4keras' `gen_synonyms`).",
        lambda cfg: cfg.get("decoder_attention") == "unilm",
    ),
    (
        "Sentence embeddings: `SentenceTransformer(folder).encode(texts)` (sentence-transformers >= 6) equals "
        "`AutoModel.from_pretrained(folder)(**batch).pooler_output`; compare by cosine similarity.",
        lambda cfg: cfg["pooler_activation"] is not None,
    ),
]
