"""What the example scripts share: model arguments, vocabulary training, model building, run set-up, metrics.

The scripts stay short (in the spirit of transformers' `run_glue.py`) by importing these pieces. Nothing
here is remote code: a saved model never needs it, and the `roformer_ext` library does not import it.
"""

import json
import logging
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoTokenizer,
    HfArgumentParser,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint

from roformer_ext import RoFormerExtConfig, RoFormerExtTokenizerFast

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
#: What a saved model leaves in its folder; finding one there means a trained model would be overwritten.
MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


@dataclass
class ModelArguments:
    """Which model to start from: a checkpoint (`model_name_or_path`), or a fresh one of the given sizes.

    From scratch, a WordPiece vocabulary of `vocab_size` is trained on the training text (Chinese
    splits into single characters, as in RoFormer's char models).
    """

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Checkpoint folder or Hub id; empty = from scratch."}
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer folder, if not the model's."})
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow a checkpoint's own code (auto_map)."})
    vocab_size: int = field(default=8000, metadata={"help": "From scratch: WordPiece vocabulary size to train."})
    vocab_min_frequency: int = field(
        default=2, metadata={"help": "From scratch: rarer pieces are left out (become [UNK])."}
    )
    hidden_size: int = field(default=128, metadata={"help": "From scratch: hidden size."})
    num_hidden_layers: int = field(default=2, metadata={"help": "From scratch: layers."})
    num_attention_heads: int = field(default=4, metadata={"help": "From scratch: heads."})
    intermediate_size: int = field(default=512, metadata={"help": "From scratch: feed-forward size."})
    rope_type: str = field(default="default", metadata={"help": "From scratch: rope_parameters['rope_type']."})
    pair_layout: str = field(default="interleaved", metadata={"help": "From scratch: 'interleaved' or 'half'."})
    attention_type: str = field(default="softmax", metadata={"help": "From scratch: 'softmax' or 'linear'."})
    norm_type: str = field(
        default="layer_norm", metadata={"help": "From scratch: 'layer_norm' or 'rms_scale_free' (V2)."}
    )
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "More config fields, 'key=value,key=value' (e.g. hidden_dropout_prob=0.0); applied to a "
            "checkpoint's config too."
        },
    )
    license: str = field(
        default="apache-2.0", metadata={"help": "Licence of the trained model, for the model card's metadata."}
    )
    code_repo: str | None = field(
        default=None,
        metadata={
            "help": "Hub code repository ('owner/name', published with `roformer-ext push-code`) the saved folder's "
            "auto_map points to, instead of carrying copies of the code (docs/compatibility.md)."
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
            "rope_parameters": {"rope_type": self.rope_type, "pair_layout": self.pair_layout},
        }
        return {**kwargs, **self.overrides()}

    def overrides(self) -> dict[str, Any]:
        """`--config_overrides` as config fields: a fresh model's, or changes to a checkpoint's (e.g. its dropout)."""
        fields: dict[str, Any] = {}
        for item in filter(None, (self.config_overrides or "").split(",")):
            if "=" not in item:
                raise ValueError(f"--config_overrides expects 'key=value' items separated by commas, got {item!r}.")
            key, value = item.split("=", 1)
            fields[key.strip()] = _parse_value(value.strip())
        return fields


def _parse_value(value: str) -> Any:
    """`'0.1'` -> 0.1, `'true'` -> True, `'none'` -> None, anything else stays a string."""
    try:
        return json.loads(value.lower() if value.lower() in ("true", "false", "null") else value)
    except json.JSONDecodeError:
        return None if value.lower() == "none" else value


def parse_arguments(dataclass_types: Sequence[type]) -> tuple:
    """`HfArgumentParser` over the command line, or over a single `.json` / `.yaml` file argument."""
    parser = HfArgumentParser(dataclass_types)
    if len(sys.argv) == 2 and sys.argv[1].endswith((".json", ".yaml", ".yml")):
        config_file = Path(sys.argv[1]).resolve()
        parse = parser.parse_json_file if config_file.suffix == ".json" else parser.parse_yaml_file
        parsed = parse(str(config_file))
        for arguments in parsed:
            resolve_checkpoint_paths(arguments, config_file)
        return parsed
    return parser.parse_args_into_dataclasses()


def resolve_checkpoint_paths(arguments: Any, config_file: Path) -> None:
    """A relative checkpoint folder named in a config file, and missing from the working directory, is looked up
    from the file's folder and then each folder above it: `main_job.json` names `checkpoints/...` of the repository
    and works whichever folder it is run from. Names found nowhere (Hub ids) are left as they are."""
    for name in ("model_name_or_path", "tokenizer_name"):
        value = getattr(arguments, name, None)
        if not value or Path(value).is_absolute() or Path(value).exists():
            continue
        for folder in config_file.parents:
            if (folder / value).is_dir():
                setattr(arguments, name, str(folder / value))
                break


def setup_logging() -> None:
    """INFO for the script (sizes, labels, parameter count), as transformers' examples log."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)


def check_output_dir(output_dir: str | Path, overwrite: bool, resume_from_checkpoint: str | bool | None = None) -> None:
    """Refuse to train over a trained model or its checkpoints unless told (`--overwrite_output_dir`).

    transformers' examples did this with `TrainingArguments.overwrite_output_dir`, which transformers 5
    dropped; the flag now lives in the examples' data arguments. Resuming from a checkpoint is allowed.
    """
    folder = Path(output_dir)
    if overwrite or resume_from_checkpoint or not folder.is_dir():
        return
    found = [name for name in MODEL_FILES if (folder / name).is_file()]
    checkpoint = get_last_checkpoint(str(folder))
    if checkpoint:
        found.append(Path(checkpoint).name)
    if found:
        raise ValueError(
            f"--output_dir {output_dir} already holds a trained model ({', '.join(found)}). Pass "
            "--overwrite_output_dir to replace it, --resume_from_checkpoint to continue from a checkpoint, or "
            "choose another --output_dir."
        )


def resolve_phases(training_args: TrainingArguments) -> tuple[bool, bool, bool]:
    """(train, evaluate, predict) as transformers' `--do_train` / `--do_eval` / `--do_predict` say.

    With none of them the script does all three, as these examples always did (so `main_job.json` needs
    none). `TrainingArguments` turns `do_eval` on by itself for an `--eval_strategy` other than "no",
    which evaluates during training: that alone does not count as asking for evaluation only.
    """
    train, predict = training_args.do_train, training_args.do_predict
    evaluate = training_args.do_eval
    asked_for_eval_only = evaluate and training_args.eval_strategy == "no"
    if not (train or predict or asked_for_eval_only):
        return True, True, True
    return train, evaluate, predict


def no_pin_memory_without_accelerator(training_args: TrainingArguments) -> None:
    """Pinned memory only helps copies to an accelerator; on CPU torch warns about it at every epoch."""
    if training_args.use_cpu or not torch.accelerator.is_available():
        training_args.dataloader_pin_memory = False


def take_over_hub_push(training_args: TrainingArguments) -> bool:
    """Switch off Trainer's own pushes and return whether the user asked for `--push_to_hub`.

    Trainer pushes from `save_model` and at every checkpoint, each time with its generic model card
    (it overwrites README.md first). The examples instead push once at the end, with their own card:
    see `card.save_card_and_push`.
    """
    push = training_args.push_to_hub
    training_args.push_to_hub = False
    return push


def log_run_summary(logger: logging.Logger, sizes: dict[str, int], labels: Sequence[str] | None, model) -> None:
    """Dataset sizes, labels and parameter count before training, as transformers' run_glue logs them."""
    logger.info("data: %s", ", ".join(f"{split} {count:,}" for split, count in sizes.items()))
    if labels is not None:
        logger.info("labels (%d): %s", len(labels), ", ".join(map(str, labels)))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    logger.info(
        "model: %s, %s parameters (%s trainable)", type(model).__name__, f"{model.num_parameters():,}", f"{trainable:,}"
    )


def train_wordpiece_tokenizer(
    texts: Iterable[str], vocab_size: int, min_frequency: int = 2
) -> RoFormerExtTokenizerFast:
    """Train a WordPiece vocabulary with BERT's normaliser and pre-tokenizer, the same pipeline that
    `RoFormerExtTokenizerFast` runs in char mode, so every trained piece is reachable at encode time.
    Chinese characters are split one by one, so a Chinese vocabulary is a char vocabulary.

    The same texts always give the same vocabulary, ids included. huggingface tokenizers' trainer numbers the
    characters (`a`, `##a`) in hash-map order, which changes from run to run, and breaks ties between equally
    frequent pairs by those numbers: so not only the ids but the merged pieces themselves differed between two
    trainings (5,840 to 5,843 pieces on the bundled reviews at 6,000). Here a first pass finds the characters, and
    the real pass is given them up front, sorted, so every id and every tie is decided the same way each time.
    """
    texts = list(texts)
    alphabet = sorted(
        token
        for token in _train_wordpiece_vocab(texts, vocab_size, min_frequency, SPECIAL_TOKENS)
        if token not in SPECIAL_TOKENS and (len(token) == 1 or (token.startswith("##") and len(token) == 3))
    )
    vocab = _train_wordpiece_vocab(texts, vocab_size, min_frequency, SPECIAL_TOKENS + alphabet)
    return RoFormerExtTokenizerFast(vocab=vocab)


def _train_wordpiece_vocab(
    texts: list[str], vocab_size: int, min_frequency: int, initial_tokens: list[str]
) -> dict[str, int]:
    """One run of tokenizers' WordPiece trainer; `initial_tokens` take the first ids, in their order."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers.models import WordPiece

    backend = Tokenizer(WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=initial_tokens
    )
    backend.train_from_iterator(texts, trainer=trainer)
    return backend.get_vocab()


def get_tokenizer(
    model_args: ModelArguments, training_texts: Iterable[str], cache_dir: str | None = None
) -> PreTrainedTokenizerBase:
    """The checkpoint's tokenizer, else a WordPiece vocabulary trained on `training_texts`.

    With `cache_dir`, a trained tokenizer is saved there and reused: under `accelerate launch` the
    main process trains it and the other ranks load the very same vocabulary.
    """
    source = model_args.tokenizer_name or model_args.model_name_or_path
    if source:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=model_args.trust_remote_code)
    if cache_dir and (Path(cache_dir) / "tokenizer_config.json").is_file():
        return RoFormerExtTokenizerFast.from_pretrained(cache_dir)
    tokenizer = train_wordpiece_tokenizer(training_texts, model_args.vocab_size, model_args.vocab_min_frequency)
    if cache_dir:
        tokenizer.save_pretrained(cache_dir)
    return tokenizer


def load_config(model_args: ModelArguments, **task_kwargs: Any):
    """The checkpoint's config with `--config_overrides` and the task's fields (num_labels, id2label, ...) applied."""
    return AutoConfig.from_pretrained(
        model_args.model_name_or_path,
        trust_remote_code=model_args.trust_remote_code,
        **{**model_args.overrides(), **task_kwargs},
    )


def get_model(
    auto_class: Any, model_args: ModelArguments, tokenizer: PreTrainedTokenizerBase, **task_kwargs: Any
) -> PreTrainedModel:
    """Load `model_args.model_name_or_path` into `auto_class`, or build a fresh model from the sizes.

    `task_kwargs` (num_labels, id2label, label2id, problem_type) go into the config either way; a fresh
    model gets the tokenizer's true vocabulary size and pad id, which may be below the requested size.
    """
    if model_args.model_name_or_path:
        return auto_class.from_pretrained(
            model_args.model_name_or_path,
            config=load_config(model_args, **task_kwargs),
            trust_remote_code=model_args.trust_remote_code,
        )
    kwargs = {**model_args.config_kwargs(), **task_kwargs}
    kwargs["vocab_size"] = len(tokenizer)
    kwargs["pad_token_id"] = tokenizer.pad_token_id
    return auto_class.from_config(RoFormerExtConfig(**kwargs))


def limit_rows(dataset, limit: int | None, seed: int):
    """A seeded random subset of `limit` rows (all rows when `limit` is None), for quick runs."""
    if limit is None:
        return dataset
    return dataset.shuffle(seed=seed).select(range(min(limit, len(dataset))))


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Share of predictions equal to the labels (computed here: no `evaluate` download)."""
    return float((np.asarray(predictions) == np.asarray(labels)).mean())


def tagging_scheme(labels: Iterable[str]) -> str:
    """ "bmes" when any tag is E-/S-/M- (BMES, IOBES), else "iob2" (B-X I-X ..., CoNLL style)."""
    return "bmes" if any(tag[:2] in ("E-", "S-", "M-") for tag in labels) else "iob2"


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


def iob2_entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """Entities of an IOB2 tag sequence, strictly parsed: `B-X` then `I-X`*; a stray `I-X` starts nothing
    (seqeval's strict IOB2 mode)."""
    entities: set[tuple[str, int, int]] = set()
    start, kind = None, None
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, label = tag.partition("-")
        if prefix == "I" and start is not None and label == kind:
            continue
        if start is not None:
            entities.add((kind, start, i))
        start, kind = (i, label) if prefix == "B" else (None, None)
    return entities


def entity_f1(
    predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]], scheme: str = "bmes"
) -> dict[str, float]:
    """Micro entity-level precision / recall / F1 over sentences (an entity counts only if exact)."""
    if scheme not in ("bmes", "iob2"):
        raise ValueError(f"scheme must be 'bmes' or 'iob2', not {scheme!r}.")
    entities = bmes_entities if scheme == "bmes" else iob2_entities
    true_positive = n_predicted = n_gold = 0
    for predicted, gold in zip(predictions, references):
        p, g = entities(predicted), entities(gold)
        true_positive += len(p & g)
        n_predicted += len(p)
        n_gold += len(g)
    precision = true_positive / n_predicted if n_predicted else 0.0
    recall = true_positive / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def save_json(path: str | Path, data: dict[str, Any]) -> None:
    """Write metrics / logs as indented UTF-8 JSON (Chinese label names stay readable)."""
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")


@dataclass
class BudgetArguments:
    """A wall-clock limit on training, for a machine lent for minutes (the schedule still follows --max_steps)."""

    max_train_seconds: float | None = field(
        default=None,
        metadata={
            "help": "Stop training after this many seconds (the step reached is logged and kept in the metrics as "
            "`stopped_at_step`); rerun with that --max_steps to reproduce a full schedule."
        },
    )

    def __post_init__(self) -> None:
        if self.max_train_seconds is not None and not self.max_train_seconds > 0:
            raise ValueError(f"--max_train_seconds must be positive, not {self.max_train_seconds}.")


class TimeBudgetCallback(TrainerCallback):
    """Ends training at the first step past `seconds` of training, and times the steps after the first ten.

    Why: a GPU lent for a few minutes cannot be asked to run past its lease; the learning-rate schedule is the
    one of `--max_steps`, so a run cut by time has not decayed to zero (the metrics say where it stopped). The
    first steps (kernel selection, loader start) are left out of `seconds_per_step`, which plans a longer run.
    """

    WARM_UP_STEPS = 10

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started: float | None = None
        self.stopped_at_step: int | None = None
        self.warm: tuple[int, float] | None = None
        self.last: tuple[int, float] | None = None

    @property
    def seconds_per_step(self) -> float | None:
        if self.warm is None or self.last is None or self.last[0] <= self.warm[0]:
            return None
        return (self.last[1] - self.warm[1]) / (self.last[0] - self.warm[0])

    def metrics(self) -> dict[str, float]:
        """`stopped_at_step` and `seconds_per_step`, where the run has them, for the run's metrics."""
        found = {"stopped_at_step": self.stopped_at_step, "seconds_per_step": self.seconds_per_step}
        return {name: value for name, value in found.items() if value is not None}

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.monotonic()
        if state.global_step == self.WARM_UP_STEPS:
            self.warm = (state.global_step, now)
        self.last = (state.global_step, now)
        if self.started is not None and now - self.started >= self.seconds:
            if state.global_step < state.max_steps:
                self.stopped_at_step = state.global_step
                logging.getLogger(__name__).warning(
                    "--max_train_seconds %s reached at step %d of %d: training stops here.",
                    self.seconds,
                    state.global_step,
                    state.max_steps,
                )
            control.should_training_stop = True  # the script's own final evaluation and save follow
        return control
