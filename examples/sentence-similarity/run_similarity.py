#!/usr/bin/env python
"""Fine-tune a RoFormer-Sim sentence encoder on sentence pairs with sentence-transformers (CoSENT or contrastive).

The model starts from a converted Sim or Sim-FT folder (`roformer-ext-convert original ...`, see
docs/roformer-sim.md) or any roformer-ext model with a pooler; the sentence embedding is the model's own
`pooler_output` ([CLS] through the linear pooler, as RoFormer-Sim computes it). Evaluation is the Spearman
correlation between the cosine similarity of the two embeddings and the gold label / score
(sentence-transformers' `EmbeddingSimilarityEvaluator`), before and after training.

Data: pairs with columns `sentence1,sentence2` and `label` (0/1, or any graded label) or `score` (e.g. STS-B's
0-5), as CSV / TSV / JSON lines / parquet files or a Hub dataset, with transformers' example flags:

    python run_similarity.py --model_name_or_path roformer-sim-base \
        --train_file train.jsonl --validation_file dev.jsonl --test_file test.jsonl --output_dir out/sim-ft
    python run_similarity.py --model_name_or_path roformer-sim-base --dataset_name path/or/hub_id \
        --sentence1_column text_a --sentence2_column text_b --label_column label --loss contrastive ...

No sentence-pair corpus ships inside a pip package we could find, so there is no bundled default; the tiny
`sample_pairs.jsonl` beside this script (38 hand-written pairs) shows the format and runs the script end to end.
The output folder loads with `SentenceTransformer(output_dir)` and with `AutoModel.from_pretrained(output_dir)`,
whose `pooler_output` is the same embedding. With none of --do_train / --do_eval / --do_predict it does all three.
"""

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset, DatasetDict, Value
from sentence_transformers.base.modules.transformer import Transformer
from sentence_transformers.sentence_transformer import (
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
)
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator
from sentence_transformers.sentence_transformer.losses import ContrastiveLoss, CoSENTLoss
from transformers import set_seed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/

from common.data import DataArguments, carve_validation, limit_splits, load_raw_datasets, split_sizes  # noqa: E402
from common.utils import (  # noqa: E402
    check_output_dir,
    no_pin_memory_without_accelerator,
    parse_arguments,
    resolve_phases,
    save_json,
    setup_logging,
)

import roformer_ext  # noqa: E402,F401  (registers the Auto classes)
from roformer_ext.similarity import SENTENCE_TRANSFORMERS_FILES, has_pooler  # noqa: E402

logger = logging.getLogger(__name__)

LOSSES = {"cosent": CoSENTLoss, "contrastive": ContrastiveLoss}
SAMPLE = Path(__file__).resolve().parent / "sample_pairs.jsonl"


@dataclass
class SimilarityModelArguments:
    """The encoder to start from."""

    model_name_or_path: str = field(
        metadata={"help": "A converted RoFormer-Sim / Sim-FT folder, or any roformer-ext model with a pooler."}
    )


@dataclass
class SimilarityDataArguments(DataArguments):
    """`DataArguments` (files, Hub dataset, sizes) plus the pair columns and the loss."""

    sentence1_column: str = field(default="sentence1", metadata={"help": "The first sentence's column."})
    sentence2_column: str = field(default="sentence2", metadata={"help": "The second sentence's column."})
    label_column: str | None = field(
        default=None, metadata={"help": "The gold similarity: a 0/1 label or a graded score (default: label or score)."}
    )
    loss: str = field(
        default="cosent",
        metadata={"help": "cosent (Su's CoSENT: any graded label) or contrastive (0/1 labels; 1 = similar)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.own_data:
            raise ValueError(
                "Give your sentence pairs with --train_file / --validation_file / --test_file or --dataset_name "
                f"(try --train_file {SAMPLE.name} from the script's folder, a 38-pair sample)."
            )
        if self.loss not in LOSSES:
            raise ValueError(f"--loss must be one of {', '.join(LOSSES)}, not {self.loss!r}.")


def pair_splits(raw: DatasetDict, args: SimilarityDataArguments) -> DatasetDict:
    """Every split as (sentence1, sentence2, score) with float scores, whatever the user's column names."""
    out = {}
    for split, data in raw.items():
        label = args.label_column or next((c for c in ("label", "score") if c in data.column_names), None)
        wanted = [args.sentence1_column, args.sentence2_column, label]
        missing = [c for c in wanted if c is None or c not in data.column_names]
        if missing:
            raise ValueError(
                f"The {split} split has the columns {data.column_names}; it needs {wanted[0]}, {wanted[1]} and a "
                "label (label or score): name them with --sentence1_column / --sentence2_column / --label_column."
            )
        data = data.select_columns(wanted)
        data = data.rename_columns(dict(zip(wanted, ("sentence1", "sentence2", "score"))))
        out[split] = data.cast_column("score", Value("float32"))
        if args.loss == "contrastive" and not set(out[split]["score"]) <= {0.0, 1.0}:
            raise ValueError(f"--loss contrastive needs 0/1 labels; the {split} split has others (use --loss cosent).")
    return DatasetDict(out)


def sim_encoder(model_name_or_path: str, max_seq_length: int) -> SentenceTransformer:
    """A SentenceTransformer whose embedding is the model's `pooler_output` (as a converted Sim folder declares)."""
    settings = SENTENCE_TRANSFORMERS_FILES["sentence_bert_config.json"]
    module = Transformer(
        model_name_or_path,
        max_seq_length=max_seq_length,
        modality_config=settings["modality_config"],
        module_output_name=settings["module_output_name"],
    )
    if not has_pooler(module.auto_model):
        raise ValueError(
            f"{model_name_or_path} has no pooler (pooler_activation is not set), so it has no Sim embedding: start "
            "from a converted RoFormer-Sim / Sim-FT folder."
        )
    return SentenceTransformer(modules=[module], similarity_fn_name="cosine")


def evaluator_for(data: Dataset, name: str) -> EmbeddingSimilarityEvaluator:
    return EmbeddingSimilarityEvaluator(
        list(data["sentence1"]), list(data["sentence2"]), list(data["score"]), main_similarity="cosine", name=name
    )


def spearman(model: SentenceTransformer, data: Dataset, name: str) -> float:
    return float(evaluator_for(data, name)(model)[f"{name}_spearman_cosine"])


def main() -> dict:
    model_args, data_args, training_args = parse_arguments(
        (SimilarityModelArguments, SimilarityDataArguments, SentenceTransformerTrainingArguments)
    )
    setup_logging()
    check_output_dir(training_args.output_dir, data_args.overwrite_output_dir, training_args.resume_from_checkpoint)
    do_train, do_eval, do_predict = resolve_phases(training_args)
    no_pin_memory_without_accelerator(training_args)
    set_seed(training_args.seed)

    raw = load_raw_datasets(data_args)
    raw = carve_validation(raw, data_args.validation_split_percentage, training_args.seed) if do_train else raw
    data = pair_splits(limit_splits(raw, data_args, training_args.seed), data_args)
    logger.info("sentence pairs: %s", split_sizes(data))
    if do_train and "train" not in data:
        raise ValueError("Training needs a train split: give --train_file or a dataset with one.")

    model = sim_encoder(model_args.model_name_or_path, data_args.max_seq_length)
    metrics = {}
    if do_eval and "validation" in data:
        metrics["eval_spearman_cosine_before"] = spearman(model, data["validation"], "validation")
    if do_train:
        trainer = SentenceTransformerTrainer(
            model=model,
            args=training_args,
            train_dataset=data["train"],
            eval_dataset=data.get("validation"),
            loss=LOSSES[data_args.loss](model),
            evaluator=evaluator_for(data["validation"], "validation") if "validation" in data else None,
        )
        result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        metrics.update({f"train_{k.removeprefix('train_')}": v for k, v in result.metrics.items()})
        model.save(training_args.output_dir)  # config + weights + tokenizer + modules.json: both libraries load it
    if do_eval and "validation" in data:
        metrics["eval_spearman_cosine"] = spearman(model, data["validation"], "validation")
    if do_predict and "test" in data:
        metrics["test_spearman_cosine"] = spearman(model, data["test"], "test")
    Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
    save_json(Path(training_args.output_dir) / "all_results.json", metrics)
    logger.info("results: %s", metrics)
    return metrics


if __name__ == "__main__":
    main()
