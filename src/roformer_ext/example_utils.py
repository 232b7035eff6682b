"""What the fine-tuning examples share: model arguments, vocabulary training, metrics, model cards.

The scripts in `examples/` stay short (in the spirit of transformers' `run_glue.py`) by importing
these pieces instead of repeating them. Nothing here is remote code: a saved model never needs it.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from transformers import (
    AutoConfig,
    AutoTokenizer,
    HfArgumentParser,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from .configuration_roformer_ext import RoFormerExtConfig
from .tokenization_roformer_ext import RoFormerExtTokenizerFast

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ROFORMER_CITATION = """@article{su2021roformer,
  title   = {RoFormer: Enhanced Transformer with Rotary Position Embedding},
  author  = {Su, Jianlin and Lu, Yu and Pan, Shengfeng and Murtadha, Ahmed and Wen, Bo and Liu, Yunfeng},
  journal = {arXiv preprint arXiv:2104.09864},
  year    = {2021}
}"""


@dataclass
class ModelArguments:
    """Which model to start from: a checkpoint (`model_name_or_path`), or a fresh one of the given sizes.

    From scratch, a WordPiece vocabulary of `vocab_size` is trained on the training text (Chinese
    splits into single characters, as in RoFormer's char models).
    """

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Checkpoint folder or Hub id; empty = from scratch."},
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer folder, if not the model's."}
    )
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Allow a checkpoint's own code (auto_map)."}
    )
    vocab_size: int = field(
        default=8000,
        metadata={"help": "From scratch: WordPiece vocabulary size to train."},
    )
    vocab_min_frequency: int = field(
        default=2,
        metadata={"help": "From scratch: rarer pieces are left out (become [UNK])."},
    )
    hidden_size: int = field(
        default=128, metadata={"help": "From scratch: hidden size."}
    )
    num_hidden_layers: int = field(
        default=2, metadata={"help": "From scratch: layers."}
    )
    num_attention_heads: int = field(
        default=4, metadata={"help": "From scratch: heads."}
    )
    intermediate_size: int = field(
        default=512, metadata={"help": "From scratch: feed-forward size."}
    )
    rope_type: str = field(
        default="default",
        metadata={"help": "From scratch: rope_parameters['rope_type']."},
    )
    pair_layout: str = field(
        default="interleaved",
        metadata={"help": "From scratch: 'interleaved' or 'half'."},
    )
    attention_type: str = field(
        default="softmax", metadata={"help": "From scratch: 'softmax' or 'linear'."}
    )
    norm_type: str = field(
        default="layer_norm",
        metadata={"help": "From scratch: 'layer_norm' or 'rms_scale_free' (V2)."},
    )
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "More config fields, 'key=value,key=value' (e.g. hidden_dropout_prob=0.0)."
        },
    )

    def config_kwargs(self) -> dict[str, Any]:
        """The `RoFormerExtConfig` fields for a model trained from scratch."""
        kwargs: dict[str, Any] = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "attention_type": self.attention_type,
            "norm_type": self.norm_type,
            "rope_parameters": {
                "rope_type": self.rope_type,
                "pair_layout": self.pair_layout,
            },
        }
        for item in filter(None, (self.config_overrides or "").split(",")):
            key, value = item.split("=", 1)
            kwargs[key.strip()] = _parse_value(value.strip())
        return kwargs


def _parse_value(value: str) -> Any:
    """`'0.1'` -> 0.1, `'true'` -> True, `'none'` -> None, anything else stays a string."""
    try:
        return json.loads(
            value.lower() if value.lower() in ("true", "false", "null") else value
        )
    except json.JSONDecodeError:
        return None if value.lower() == "none" else value


def parse_arguments(dataclass_types: Sequence[type]) -> tuple:
    """`HfArgumentParser` over the command line, or over a single `.json` / `.yaml` file argument."""
    parser = HfArgumentParser(dataclass_types)
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        return parser.parse_json_file(json_file=str(Path(sys.argv[1]).resolve()))
    if len(sys.argv) == 2 and sys.argv[1].endswith((".yaml", ".yml")):
        return parser.parse_yaml_file(yaml_file=str(Path(sys.argv[1]).resolve()))
    return parser.parse_args_into_dataclasses()


def train_wordpiece_tokenizer(
    texts: Iterable[str], vocab_size: int, min_frequency: int = 2
) -> RoFormerExtTokenizerFast:
    """Train a WordPiece vocabulary with BERT's normaliser and pre-tokenizer, the same pipeline that
    `RoFormerExtTokenizerFast` runs in char mode, so every trained piece is reachable at encode time.
    Chinese characters are split one by one, so a Chinese vocabulary is a char vocabulary."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers.models import WordPiece

    backend = Tokenizer(WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, lowercase=True
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    return RoFormerExtTokenizerFast(vocab=backend.get_vocab())


def get_tokenizer(
    model_args: ModelArguments,
    training_texts: Iterable[str],
    cache_dir: str | None = None,
) -> PreTrainedTokenizerBase:
    """The checkpoint's tokenizer, else a WordPiece vocabulary trained on `training_texts`.

    With `cache_dir`, a trained tokenizer is saved there and reused: under `accelerate launch` the
    main process trains it and the other ranks load the very same vocabulary.
    """
    source = model_args.tokenizer_name or model_args.model_name_or_path
    if source:
        return AutoTokenizer.from_pretrained(
            source, trust_remote_code=model_args.trust_remote_code
        )
    if cache_dir and (Path(cache_dir) / "tokenizer_config.json").is_file():
        return RoFormerExtTokenizerFast.from_pretrained(cache_dir)
    tokenizer = train_wordpiece_tokenizer(
        training_texts, model_args.vocab_size, model_args.vocab_min_frequency
    )
    if cache_dir:
        tokenizer.save_pretrained(cache_dir)
    return tokenizer


def get_model(
    auto_class: Any,
    model_args: ModelArguments,
    tokenizer: PreTrainedTokenizerBase,
    **task_kwargs: Any,
) -> PreTrainedModel:
    """Load `model_args.model_name_or_path` into `auto_class`, or build a fresh model from the sizes.

    `task_kwargs` (num_labels, id2label, label2id) go into the config either way; a fresh model gets
    the tokenizer's true vocabulary size and pad id, which may be below the requested size.
    """
    if model_args.model_name_or_path:
        config = AutoConfig.from_pretrained(
            model_args.model_name_or_path,
            trust_remote_code=model_args.trust_remote_code,
            **task_kwargs,
        )
        return auto_class.from_pretrained(
            model_args.model_name_or_path,
            config=config,
            trust_remote_code=model_args.trust_remote_code,
        )
    kwargs = {**model_args.config_kwargs(), **task_kwargs}
    kwargs["vocab_size"] = len(tokenizer)
    kwargs["pad_token_id"] = tokenizer.pad_token_id
    return auto_class.from_config(RoFormerExtConfig(**kwargs))


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Share of predictions equal to the labels (computed here: no `evaluate` download)."""
    return float((np.asarray(predictions) == np.asarray(labels)).mean())


def bmes_entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """Entities `(type, start, end_exclusive)` of a BMES (or IOBES) tag sequence, strictly parsed.

    Only well-formed spans count: `S-X`, or `B-X` `M-X`* `E-X` with one type throughout (`I-` is read
    as `M-`). A span that breaks off (B without E, a type change, a stray M/E) yields nothing, which is
    how seqeval's strict mode scores it.
    """
    entities: set[tuple[str, int, int]] = set()
    start, kind = None, None
    for i, tag in enumerate(tags):
        prefix, _, label = tag.partition("-")
        prefix = "M" if prefix == "I" else prefix
        if prefix == "S":
            entities.add((label, i, i + 1))
            start = None
        elif prefix == "B":
            start, kind = i, label
        elif prefix == "M" and start is not None and label == kind:
            continue
        elif prefix == "E" and start is not None and label == kind:
            entities.add((label, start, i + 1))
            start = None
        else:
            start = None
    return entities


def entity_f1(
    predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]
) -> dict[str, float]:
    """Micro entity-level precision / recall / F1 over sentences (an entity counts only if exact)."""
    true_positive = n_predicted = n_gold = 0
    for predicted, gold in zip(predictions, references):
        p, g = bmes_entities(predicted), bmes_entities(gold)
        true_positive += len(p & g)
        n_predicted += len(p)
        n_gold += len(g)
    precision = true_positive / n_predicted if n_predicted else 0.0
    recall = true_positive / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def command_line() -> str:
    """How this run was started, for the model card."""
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])


def write_model_card(
    output_dir: str | Path,
    *,
    title: str,
    task: str,
    dataset: str,
    dataset_description: str,
    metrics: dict[str, float],
    model_args: ModelArguments,
    config: RoFormerExtConfig,
    extra: str = "",
) -> Path:
    """A README.md with what a reader needs to trust or reproduce the checkpoint: the data and where
    it came from, the measured metrics, the exact command, the architecture, and the citation."""
    base = (
        model_args.model_name_or_path
        or "none (trained from scratch, WordPiece vocabulary trained on the training split)"
    )
    rows = "\n".join(
        f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |"
        for k, v in sorted(metrics.items())
    )
    rope = json.dumps(config.rope_parameters, ensure_ascii=False)
    text = f"""---
library_name: transformers
pipeline_tag: {task}
tags:
- roformer_ext
- rotary-position-embedding
---

# {title}

A RoFormer (rotary position embedding) model from `roformer-ext`, fine-tuned on **{dataset}**.
Load it with `trust_remote_code=True` (the modelling code is in this folder) or after `import roformer_ext`.

## Data
{dataset_description}

## Results
| metric | value |
|---|---|
{rows}

## Training
- base model: {base}
- architecture: hidden {config.hidden_size}, {config.num_hidden_layers} layers, {config.num_attention_heads} heads,
  intermediate {config.intermediate_size}, vocabulary {config.vocab_size}, attention `{config.attention_type}`,
  norm `{config.norm_type}`, rope_parameters `{rope}`
- command: `{command_line()}`
{extra}
## Usage
```python
from transformers import pipeline
pipe = pipeline("{task}", model="PATH_OR_HUB_ID", trust_remote_code=True)
```

## Citation
```bibtex
{ROFORMER_CITATION}
```
"""
    path = Path(output_dir) / "README.md"
    path.write_text(text, encoding="utf-8")
    return path


def save_json(path: str | Path, data: dict[str, Any]) -> None:
    """Write metrics / logs as indented UTF-8 JSON (Chinese label names stay readable)."""
    Path(path).write_text(
        json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n",
        encoding="utf-8",
    )


def arguments_dict(*dataclass_objects: Any) -> dict[str, Any]:
    """Flatten our argument dataclasses for logs (TrainingArguments has its own to_dict)."""
    out: dict[str, Any] = {}
    for obj in dataclass_objects:
        out.update(obj.to_dict() if hasattr(obj, "to_dict") else asdict(obj))
    return out
