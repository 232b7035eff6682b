#!/usr/bin/env python
"""Does the text AFTER a picture read it worse than the text BEFORE it? One grid of runs per position scheme.

Su Jianlin's RoPE-Tie-v2 post asks how much it matters that a scheme is symmetric between the text before
and after a vision block: in Qwen2-VL's M-RoPE the text after a picture continues at max(position) + 1, i.e.
right after the longest extent (for a small-but-long video, the time axis), not after h*w patches, while
RoPE-Tie-v2 is built so that (first patch - last text before) = (next text - last patch). This script tests it
on the spatial digit questions of examples/vision-text/run_spatial_digits.py (whose pieces it imports):

- layout `before`: "which digit is in row 2, column 3? [IMAGE]"; layout `after`: "[IMAGE] which digit ...?";
- modality `image`: a g x g grid of handwritten digits, one patch per digit; modality `video`: T frames of a
  small grid, given as a "[VIDEO]" (so M-RoPE uses its time axis), question "which digit is in frame f,
  row r, column c?";
- read-out `question` (default): the classifier reads the mean of the question's token states, not [CLS].
  [CLS] is the first token in both layouts, so with it the `before` layout has the question next to the
  read-out token and the `after` layout has the picture between them: the comparison would mix "question
  after the picture" with "read-out far from the question". Pooling the question's own tokens reads the same
  tokens, with the same positions among themselves, in both layouts. `--readout cls` gives the [CLS] variant.

Every run of the grid (scheme x modality x layout x seed) has the same budget (steps, batch, learning rate,
warm-up) and the same data (the grids depend on --grid_seed only; the seed changes initialisation and batch
order), so `after - before` is a paired difference per seed. Results go to one JSON file (rewritten after
every run; a rerun with the same settings resumes) and a Markdown table next to it:

    python examples/position-lab/run_symmetry.py --output benchmarks/results/symmetry/symmetry.json

A tiny smoke run: `--schemes rope_tie_v2,mrope --seeds 0 --max_steps 2 --num_test 16 --hidden_size 32`.

Beside the 18 scheme names: variants with more rope_parameters (`VARIANTS`: HoPE's temporal scaling, MM-RoPE with
Lumos-1's position scale; not in `--schemes all`), and training on several video lengths (`--train_video_frames 1,2`);
docs/vision-symmetry.md, third round.
"""

import json
import logging
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import transformers
from datasets import Dataset, concatenate_datasets
from transformers import HfArgumentParser, Trainer, TrainingArguments, set_seed
from transformers.modeling_outputs import SequenceClassifierOutput

EXAMPLES = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(EXAMPLES))  # common/
sys.path.insert(0, str(EXAMPLES / "vision-text"))  # run_spatial_digits

from common.utils import accuracy, get_tokenizer, no_pin_memory_without_accelerator, save_json  # noqa: E402
from run_spatial_digits import (  # noqa: E402
    QUESTION_POSITIONS,
    SCHEMES,
    GridCollator,
    SpatialModelArguments,
    build_config,
    build_processor,
    compose_grid,
    load_digits,
    make_split,
    per_kind_accuracy,
    place_question,
    split_digits,
)

from roformer_ext import RoFormerExtVisionTextForSequenceClassification  # noqa: E402
from roformer_ext.positions import build_position_ids  # noqa: E402

logger = logging.getLogger(__name__)

#: Table name -> (position_scheme, axis_allocation); None keeps the scheme's own allocation (run_spatial_digits).
#: Every built-in scheme by its name, plus M-RoPE's positions with plain interleaved frequencies (the first study's
#: `mrope_interleaved`; Qwen3-VL's own interleaving is `qwen3_vl`).
SCHEMES = {name: (name, None) for name in SCHEMES}  # run_spatial_digits' tuple of names, as a table
SCHEMES["mrope"] = ("mrope", "sections")
SCHEMES["mrope_interleaved"] = ("mrope", "interleaved")
#: Variants run beside the 18 names (not part of `--schemes all`): table name -> (position_scheme, axis_allocation,
#: more rope_parameters). `hope_dynamic`: HoPE with its dynamic temporal scaling, a scale drawn per video from HoPE's
#: training set in training mode (eval keeps `temporal_stride`); `mmrope_lumos_scale`: MM-RoPE with Lumos-1's
#: position scale (4, 8, 8), which spreads h and w over 8 steps per patch. `hope_stride2` / `hope_dynamic_stride2`:
#: the same with a frame step of 2 (VideoRoPE's default; HoPE's set times 2 while training): with HoPE's step 1 and
#: its unrotated time pairs, cell (i + 1, j + 1) of a frame and cell (i, j) of the next share every rotated position.
VARIANTS = {
    "hope_dynamic": ("hope", None, {"temporal_scales": [0.5, 0.75, 1.0, 1.25, 1.5]}),
    "hope_stride2": ("hope", None, {"temporal_stride": 2.0}),
    "hope_dynamic_stride2": ("hope", None, {"temporal_stride": 2.0, "temporal_scales": [1.0, 1.5, 2.0, 2.5, 3.0]}),
    "mmrope_lumos_scale": ("mmrope", None, {"position_scale": [4.0, 8.0, 8.0]}),
}
#: Table order: every variant right after the scheme it varies.
TABLE_ORDER = [n for name in SCHEMES for n in (name, *(v for v, entry in VARIANTS.items() if entry[0] == name))]
#: The first study's six schemes: the default grid.
FIRST_STUDY = ("rope_1d", "rope_2d_rows", "rope_tie", "rope_tie_v2", "mrope", "mrope_interleaved")
#: Schemes that place images only (a one-frame grid): no video runs.
IMAGES_ONLY = ("circle_rope",)
MODALITIES = ("image", "video")
READOUTS = ("question", "cls")


@dataclass
class SymmetryModelArguments(SpatialModelArguments):
    """`SpatialModelArguments` (its scheme flags are set per run) with a tiny model as the default."""

    hidden_size: int = field(default=64, metadata={"help": "From scratch: hidden size."})
    num_hidden_layers: int = field(default=2, metadata={"help": "From scratch: layers."})
    num_attention_heads: int = field(default=4, metadata={"help": "From scratch: heads."})
    intermediate_size: int = field(default=128, metadata={"help": "From scratch: feed-forward size."})
    config_overrides: str | None = field(
        default="hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0,initializer_range=0.1",
        metadata={
            "help": "More config fields. Default: no dropout (every grid is new) and initial weights of std 0.1 "
            "instead of 0.02, which left the plateau within the budget where 0.02 did not."
        },
    )
    frame_axis: bool = field(
        default=False,
        metadata={"help": "Set per run: videos need a third (frame) axis in the Su schemes and rope_2d_rows."},
    )
    rope_knobs: str | None = field(
        default=None,
        metadata={"help": "Set per run: more rope_parameters as JSON (a variant's knobs, e.g. temporal_scales)."},
    )

    def rope_parameters(self, head_dim: int, num_heads: int | None = None) -> dict:
        """run_spatial_digits' rope_parameters, with 3 axes instead of 2 when videos are fed, and the variant's knobs."""
        rope = super().rope_parameters(head_dim, num_heads)
        if self.frame_axis and rope["axes"] == 2:
            rope["axes"] = 3
        return {**rope, **json.loads(self.rope_knobs or "{}")}


@dataclass
class SymmetryArguments:
    """The grid of runs, the data, and the budget shared by every run."""

    schemes: str = field(
        default=",".join(FIRST_STUDY),
        metadata={
            "help": "Comma-separated, or 'all' (the 18 names): "
            + ", ".join(SCHEMES)
            + "; variants (not in 'all'): "
            + ", ".join(VARIANTS)
        },
    )
    modalities: str = field(default=",".join(MODALITIES), metadata={"help": "Comma-separated: image, video"})
    layouts: str = field(default=",".join(QUESTION_POSITIONS), metadata={"help": "Comma-separated: before, after"})
    seeds: str = field(default="0,1,2", metadata={"help": "Comma-separated training seeds (init, batch order)."})
    readout: str = field(
        default="question", metadata={"help": "question: mean of the question's token states; cls: [CLS]."}
    )
    dataset: str = field(default="sklearn_digits", metadata={"help": "Digits: sklearn_digits (8x8) or mnist (28x28)."})
    image_grid: int = field(default=3, metadata={"help": "Image: digits per side."})
    video_grid: int = field(default=2, metadata={"help": "Video: digits per side of each frame."})
    video_frames: int = field(default=4, metadata={"help": "Video: frames (T)."})
    long_video_frames: int = field(
        default=0,
        metadata={
            "help": "Video runs: also test on videos of this many frames (0: off), asking only about the first "
            "--video_frames frames, so only the video's length (and the distance to the text after it) is new."
        },
    )
    train_video_frames: str | None = field(
        default=None,
        metadata={
            "help": "Video runs: train on videos of these frame counts instead (comma-separated, e.g. '1,2': an equal "
            "share of each, every batch of one length); the test sets stay those of --video_frames and "
            "--long_video_frames. Default: --video_frames only."
        },
    )
    num_test: int = field(
        default=1000, metadata={"help": "Test questions per modality (digit images unseen in training)."}
    )
    max_steps: int = field(default=900, metadata={"help": "Training steps of every run (one epoch of new grids)."})
    batch_size: int = field(default=32, metadata={"help": "Training batch of every run."})
    learning_rate: float = field(default=1e-3, metadata={"help": "Peak learning rate of every run (AdamW)."})
    warmup_steps: int = field(default=30, metadata={"help": "Linear warm-up steps of every run."})
    lr_scheduler_type: str = field(
        default="constant_with_warmup",
        metadata={
            "help": "Trainer's schedule; a constant rate leaves the 'bag of digits' plateau sooner than linear decay."
        },
    )
    grid_seed: int = field(default=0, metadata={"help": "Seed of the digit split, the grids and the questions."})
    torch_threads: int = field(default=1, metadata={"help": "torch.set_num_threads; 1 on a busy small CPU."})
    output: str = field(
        default="benchmarks/results/symmetry/symmetry.json",
        metadata={"help": "Results JSON (the Markdown table is written next to it, same name, .md)."},
    )
    overwrite: bool = field(default=False, metadata={"help": "Start over even if --output holds finished runs."})
    merge: str | None = field(
        default=None,
        metadata={
            "help": "Comma-separated results files of other processes run with the same settings (e.g. other seeds): "
            "their runs of this call's --schemes join --output's before the grid runs (a run in both is kept once)."
        },
    )

    def __post_init__(self) -> None:
        self.scheme_list = (
            list(SCHEMES) if self.schemes == "all" else _choices(self.schemes, tuple(TABLE_ORDER), "--schemes")
        )
        self.modality_list = _choices(self.modalities, MODALITIES, "--modalities")
        self.layout_list = _choices(self.layouts, QUESTION_POSITIONS, "--layouts")
        try:
            self.seed_list = [int(seed) for seed in self.seeds.split(",") if seed.strip()]
        except ValueError:
            raise ValueError(f"--seeds must be comma-separated integers, not {self.seeds!r}.") from None
        if not self.seed_list:
            raise ValueError("--seeds must name at least one seed.")
        if self.readout not in READOUTS:
            raise ValueError(f"--readout must be one of {READOUTS}, not {self.readout!r}.")
        if min(self.image_grid, self.video_grid, self.video_frames, self.max_steps, self.batch_size, self.num_test) < 1:
            raise ValueError("Grid sizes, frames, steps, batch and test size must be positive.")
        if self.long_video_frames and self.long_video_frames <= self.video_frames:
            raise ValueError(
                f"--long_video_frames ({self.long_video_frames}) must exceed --video_frames ({self.video_frames}), "
                "or be 0 (no long-video test)."
            )
        try:
            self.train_frames_list = [int(n) for n in (self.train_video_frames or "").split(",") if n.strip()] or None
        except ValueError:
            raise ValueError(
                f"--train_video_frames must be comma-separated integers, not {self.train_video_frames!r}."
            ) from None
        if self.train_frames_list and (
            min(self.train_frames_list) < 1 or max(self.train_frames_list) > self.video_frames
        ):
            raise ValueError(
                f"--train_video_frames ({self.train_video_frames}) must be frame counts from 1 to --video_frames "
                f"({self.video_frames}), the length of the test videos."
            )

    def setup(self) -> dict:
        """What makes runs comparable: everything but the output path, the grid's extent and resuming."""
        skip = {"schemes", "modalities", "layouts", "seeds", "output", "overwrite", "torch_threads", "merge"}
        if self.train_video_frames is None:  # unset: the setup of the files written before the flag existed
            skip.add("train_video_frames")
        return {key: value for key, value in asdict(self).items() if key not in skip}


def _choices(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    if not chosen or set(chosen) - set(allowed):
        raise ValueError(f"{flag} must be a comma-separated subset of {', '.join(allowed)}, not {text!r}.")
    return chosen


# ------------------------------------------------------------------------------------------------- videos
def video_question(frame: int, row: int, col: int) -> str:
    """1-based frame, row and column, as the image questions count rows and columns."""
    return f"which digit is in frame {frame + 1}, row {row + 1}, column {col + 1}?"


def make_video_split(
    pool: np.ndarray,
    labels: np.ndarray,
    count: int,
    frames: int,
    grid: int,
    rng: np.random.Generator,
    asked_frames: int | None = None,
) -> Dataset:
    """`count` videos of `frames` grids (tiles frame-major, then row-major), one cell question each, about one of
    the first `asked_frames` frames (default all).

    `kind` is "frame f", so the accuracy can be read per frame.
    """
    cells = grid * grid
    tiles = rng.choice(pool, size=(count, frames * cells))
    asked = rng.integers(asked_frames or frames, size=count)
    frame, row, col = (asked, rng.integers(grid, size=count), rng.integers(grid, size=count))
    index = frame * cells + row * grid + col
    return Dataset.from_dict(
        {
            "tiles": tiles.tolist(),
            "question": [video_question(f, r, c) for f, r, c in zip(frame, row, col)],
            "label": labels[tiles[np.arange(count), index]].tolist(),
            "kind": [f"frame {f + 1}" for f in frame],
        }
    )


def question_token_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: list[int]) -> torch.Tensor:
    """1 on the question's tokens: real tokens that are not [CLS], [SEP], [IMG], [/IMG] or placeholders."""
    return attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(special_ids))


@dataclass
class SymmetryCollator(GridCollator):
    """`GridCollator` for images, its video twin for `frames > 1` (or `video`: one-frame videos), plus the question
    read-out mask."""

    frames: int = 1
    readout: str = "question"
    video: bool = False

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        if self.frames == 1 and not self.video:
            batch = super().__call__(rows)
        else:
            videos = [
                [
                    compose_grid(tiles, self.grid)
                    for tiles in self.digits[row["tiles"]].reshape(self.frames, self.grid**2, *self.digits.shape[1:])
                ]
                for row in rows
            ]
            texts = [
                place_question(self.processor.video_token, row["question"], self.question_position) for row in rows
            ]
            batch = dict(self.processor(text=texts, videos=videos, padding=True, return_tensors="pt"))
            batch["labels"] = torch.tensor([row["label"] for row in rows])
        if self.readout == "question":
            special = self.processor.tokenizer.all_special_ids
            batch["readout_mask"] = question_token_mask(batch["input_ids"], batch["attention_mask"], special)
        return batch


# ------------------------------------------------------------------------------------------ encoded once
class EncodedSplit(torch.utils.data.Dataset):
    """A split run through `SymmetryCollator` once, kept as tensors: the 36 runs of a (modality, layout) share it.

    Every run would otherwise redo the same image processing and tokenisation at every step. `features` hold one
    row per sample; the pixel tensor is (samples, patches per sample, patch dim).
    """

    def __init__(self, rows: Dataset, collator: SymmetryCollator, chunk: int = 512) -> None:
        parts = []
        for start in range(0, len(rows), chunk):
            columns = rows[start : start + chunk]
            parts.append(collator([dict(zip(columns, values)) for values in zip(*columns.values())]))
        lengths = {part["input_ids"].shape[1] for part in parts}
        if len(lengths) != 1:  # the questions of a kind tokenise to one length, so chunks pad alike
            raise ValueError(f"Encoded chunks have different lengths {sorted(lengths)}; encode the split in one chunk.")
        self.pixel_key = "pixel_values" if "pixel_values" in parts[0] else "pixel_values_videos"
        self.grid_key = "image_grid_thw" if self.pixel_key == "pixel_values" else "video_grid_thw"
        self.features = {key: torch.cat([part[key] for part in parts]) for key in parts[0]}
        self.features[self.pixel_key] = self.features[self.pixel_key].reshape(
            len(rows), -1, self.features[self.pixel_key].shape[-1]
        )
        self.kinds = list(rows["kind"])

    def __len__(self) -> int:
        return len(self.kinds)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {key: value[index] for key, value in self.features.items()}

    def shared_position_ids(self, config) -> torch.Tensor | None:
        """Positions (axes, 1, seq) when every sample has the same layout of text, placeholders and padding (the
        model would compute the same positions for every row), else None (the model computes them per batch)."""
        ids, mask = self.features["input_ids"], self.features["attention_mask"]
        placeholders = torch.isin(ids, torch.tensor([config.image_token_id, config.video_token_id]))
        if not (bool((placeholders == placeholders[0]).all()) and bool((mask == mask[0]).all())):
            return None
        grid = {self.grid_key: self.features[self.grid_key][:1]}
        return build_position_ids(ids[:1], config, attention_mask=mask[:1], **grid)[0]


class LengthBatches(torch.utils.data.Dataset):
    """Whole training batches from encoded splits of several video lengths, every batch of one length (their
    inputs differ in shape): item k is batch k, ready for the model (feed it with batch size 1 and `first_item`).

    Each split's samples are shuffled with `seed` and cut into batches of `batch_size` (a last short one dropped);
    the Trainer's sampler then shuffles the batches. `shared` gives each length its shared positions.
    """

    def __init__(self, parts: list[EncodedSplit], batch_size: int, seed: int, config, shared: bool) -> None:
        rng = np.random.default_rng(seed)
        self.batches = []
        for part in parts:
            collate = EncodedCollator(part.pixel_key, part.shared_position_ids(config) if shared else None)
            order = rng.permutation(len(part))
            for start in range(0, len(order) - batch_size + 1, batch_size):
                self.batches.append((part, order[start : start + batch_size], collate))

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        part, rows, collate = self.batches[index]
        return collate([part[int(row)] for row in rows])


def first_item(items: list[dict]) -> dict:
    """The collator of `LengthBatches`: its items are batches already."""
    return items[0]


@dataclass
class EncodedCollator:
    """Stacks `EncodedSplit` samples into a model batch (pixels flattened to (patches, dim), as the processor
    gives them), with the run's shared positions when there are any."""

    pixel_key: str
    position_ids: torch.Tensor | None = None

    def __call__(self, samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        batch = {key: torch.stack([sample[key] for sample in samples]) for key in samples[0]}
        batch[self.pixel_key] = batch[self.pixel_key].flatten(0, 1)
        if self.position_ids is not None:
            batch["position_ids"] = self.position_ids.expand(-1, len(samples), -1)
        return batch


# -------------------------------------------------------------------------------------------------- model
class QuestionReadoutForSequenceClassification(RoFormerExtVisionTextForSequenceClassification):
    """The vision-text classifier, reading the mean of the `readout_mask` tokens instead of [CLS] when given.

    Without `readout_mask` it is exactly the library class ([CLS] read-out).
    """

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        readout_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        if readout_mask is None:
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)
        hidden = self.roformer(input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
        weights = readout_mask.unsqueeze(-1).to(hidden.dtype)  # (batch, seq, 1)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)  # (batch, hidden)
        logits = self.classifier(pooled)
        loss = self.loss_function(labels, logits, self.config) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)


# ---------------------------------------------------------------------------------------------------- data
@dataclass
class ModalityData:
    """One modality's train / test questions, its processor and its digits: shared by every run."""

    train: Dataset
    test: Dataset
    processor: object
    digits: np.ndarray
    grid: int
    frames: int
    floor: float  # accuracy of answering the grid's most frequent digit: the "bag of digits" plateau
    long_test: Dataset | None = None  # longer videos, questions about the first `frames` frames
    long_frames: int = 0
    train_by_frames: dict[int, Dataset] | None = None  # mixed-length training: the training videos per length
    encoded: dict[tuple[str, str], dict[str, EncodedSplit]] = field(default_factory=dict)

    def encode(self, layout: str, readout: str) -> dict[str, EncodedSplit]:
        """The train and test splits as model inputs for `layout` and `readout` (computed on first use)."""
        if (layout, readout) not in self.encoded:
            collator = SymmetryCollator(self.processor, self.digits, self.grid, layout, self.frames, readout)
            splits = {"test": EncodedSplit(self.test, collator)}
            if self.train_by_frames is None:
                splits["train"] = EncodedSplit(self.train, collator)
            else:  # one encoded split per length; the runs cut them into batches
                splits["train_parts"] = [
                    EncodedSplit(rows, replace(collator, frames=frames, video=True))
                    for frames, rows in self.train_by_frames.items()
                ]
            if self.long_test is not None:
                long_collator = replace(collator, frames=self.long_frames)
                splits["long_test"] = EncodedSplit(self.long_test, long_collator)
            self.encoded[layout, readout] = splits
        return self.encoded[layout, readout]


def most_frequent_digit_accuracy(data: Dataset, labels: np.ndarray) -> float:
    """Accuracy of always answering the most frequent digit of the sample (ties: the smallest)."""
    guesses = [int(np.bincount(labels[tiles], minlength=10).argmax()) for tiles in data["tiles"]]
    return accuracy(np.array(guesses), np.array(data["label"]))


def prepare(args: SymmetryArguments, model_args: SymmetryModelArguments, modality: str) -> ModalityData:
    digits, labels = load_digits(args.dataset)
    pools = split_digits(labels, args.grid_seed)
    rng = np.random.default_rng([args.grid_seed, MODALITIES.index(modality)])
    count = args.max_steps * args.batch_size
    if modality == "image":
        grid, frames = args.image_grid, 1
        train = make_split(pools["train"], labels, count, grid, ["position"], rng)
        test = make_split(pools["test"], labels, args.num_test, grid, ["position"], rng)
    else:
        grid, frames = args.video_grid, args.video_frames
        train = make_video_split(pools["train"], labels, count, frames, grid, rng)
        test = make_video_split(pools["test"], labels, args.num_test, frames, grid, rng)
    long_frames = args.long_video_frames if modality == "video" else 0
    long_test = None
    if long_frames:  # drawn after the others: the train and test sets do not change with the flag
        long_test = make_video_split(pools["test"], labels, args.num_test, long_frames, grid, rng, frames)
    train_by_frames = None
    if modality == "video" and args.train_frames_list:  # its own stream: the test sets stay those above
        mixed_rng = np.random.default_rng([args.grid_seed, MODALITIES.index(modality), 1])
        share = count // len(args.train_frames_list)
        train_by_frames = {
            n: make_video_split(pools["train"], labels, share, n, grid, mixed_rng) for n in args.train_frames_list
        }
        train = concatenate_datasets(list(train_by_frames.values()))
    tile = digits.shape[-1]
    tokenizer = get_tokenizer(model_args, train["question"])
    processor = build_processor(tokenizer, digits[pools["train"]], tile, grid * tile)
    floor = most_frequent_digit_accuracy(test, labels)
    return ModalityData(train, test, processor, digits, grid, frames, floor, long_test, long_frames, train_by_frames)


# ----------------------------------------------------------------------------------------------------- runs
def train_and_test(
    args: SymmetryArguments, model_args: SymmetryModelArguments, data: ModalityData, scheme: str, layout: str, seed: int
) -> dict:
    """One run: a fresh model for `scheme`, trained with the shared budget, scored on the test questions."""
    position_scheme, allocation, knobs = (*SCHEMES[scheme], {}) if scheme in SCHEMES else VARIANTS[scheme]
    run_args = replace(
        model_args,
        position_scheme=position_scheme,
        axis_allocation=allocation,
        frame_axis=data.frames > 1,
        rope_knobs=json.dumps(knobs) if knobs else None,
    )
    tile = data.digits.shape[-1]
    set_seed(seed)
    model = QuestionReadoutForSequenceClassification(build_config(run_args, data.processor, tile))
    splits = data.encode(layout, args.readout)
    # positions drawn per training batch (HoPE's temporal scales) are the model's to compute: none shared in training
    drawn = model.config.rope_parameters.get("temporal_scales") is not None
    if "train_parts" in splits:  # several lengths: whole batches of one length each
        train_set = LengthBatches(splits["train_parts"], args.batch_size, seed, model.config, shared=not drawn)
        collator, batch_size = first_item, 1
    else:
        shared = None if drawn else splits["train"].shared_position_ids(model.config)
        train_set, collator = splits["train"], EncodedCollator(splits["train"].pixel_key, shared)
        batch_size = args.batch_size
    started = time.time()
    with tempfile.TemporaryDirectory() as folder:
        training_args = TrainingArguments(
            output_dir=folder,
            max_steps=args.max_steps,
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=128,
            learning_rate=args.learning_rate,
            warmup_steps=args.warmup_steps,
            seed=seed,
            save_strategy="no",
            eval_strategy="no",
            logging_steps=max(1, args.max_steps // 10),
            report_to="none",
            disable_tqdm=True,
            lr_scheduler_type=args.lr_scheduler_type,
            remove_unused_columns=False,  # readout_mask is not in the library class's signature
        )
        no_pin_memory_without_accelerator(training_args)
        trainer = Trainer(model=model, args=training_args, train_dataset=train_set, data_collator=collator)
        train_loss = trainer.train().training_loss
        trainer.data_collator = EncodedCollator(
            splits["test"].pixel_key, splits["test"].shared_position_ids(model.config)
        )
        prediction = trainer.predict(splits["test"])
        long_scores = {}
        if "long_test" in splits:  # its own layout: its own shared positions
            long_split = splits["long_test"]
            trainer.data_collator = EncodedCollator(long_split.pixel_key, long_split.shared_position_ids(model.config))
            long_prediction = trainer.predict(long_split)
            long_predicted = np.argmax(long_prediction.predictions, axis=-1)
            long_scores = {
                "long_video_frames": data.long_frames,
                "long_test_accuracy": accuracy(long_predicted, long_prediction.label_ids),
                "long_test_accuracy_by_kind": per_kind_accuracy(
                    long_predicted, long_prediction.label_ids, long_split.kinds
                ),
            }
    predicted = np.argmax(prediction.predictions, axis=-1)
    return {
        "scheme": scheme,
        "modality": "image" if data.frames == 1 else "video",
        "layout": layout,
        "seed": seed,
        "test_accuracy": accuracy(predicted, prediction.label_ids),
        "test_accuracy_by_kind": per_kind_accuracy(predicted, prediction.label_ids, splits["test"].kinds),
        "train_loss": round(float(train_loss), 4),
        "rope_parameters": model.config.rope_parameters,
        "wall_time_s": round(time.time() - started, 1),
        **long_scores,
    }


def summarize(runs: list[dict]) -> list[dict]:
    """Per (scheme, modality, layout): n, mean, std (ddof 1), min, max of the test accuracy; and per (scheme,
    modality) the paired difference after - before over the seeds that ran both."""
    cells = []
    keys = dict.fromkeys((run["scheme"], run["modality"]) for run in runs)
    for scheme, modality in keys:
        by_layout = {run["layout"]: {} for run in runs if (run["scheme"], run["modality"]) == (scheme, modality)}
        long = {layout: {} for layout in by_layout}
        for run in runs:
            if (run["scheme"], run["modality"]) == (scheme, modality):
                by_layout[run["layout"]][run["seed"]] = run["test_accuracy"]
                if "long_test_accuracy" in run:
                    long[run["layout"]][run["seed"]] = run["long_test_accuracy"] - run["test_accuracy"]
        for layout, by_seed in by_layout.items():
            cells.append({"scheme": scheme, "modality": modality, "layout": layout, **_stats(list(by_seed.values()))})
            if long[layout]:  # long-video accuracy minus the training-length accuracy, per seed
                cells.append(
                    {
                        "scheme": scheme,
                        "modality": "long_video",
                        "layout": layout,
                        **_stats(list(long[layout].values())),
                    }
                )
        if {"before", "after"} <= set(by_layout):
            paired = sorted(set(by_layout["before"]) & set(by_layout["after"]))
            differences = [by_layout["after"][seed] - by_layout["before"][seed] for seed in paired]
            if differences:
                cells.append({"scheme": scheme, "modality": modality, "layout": "after-before", **_stats(differences)})
    return cells


def _stats(values: list[float]) -> dict:
    array = np.asarray(values, dtype=np.float64)
    return {
        "n": len(values),
        "mean": round(float(array.mean()), 4),
        "std": round(float(array.std(ddof=1)), 4) if len(values) > 1 else None,
        "min": round(float(array.min()), 4),
        "max": round(float(array.max()), 4),
    }


def markdown_table(results: dict) -> str:
    """scheme x {image, video} x {before, after, after - before}: mean ± std (n), and the floors."""
    cells = {(c["scheme"], c["modality"], c["layout"]): c for c in results["cells"]}
    modalities = [m for m in MODALITIES if any(key[1] == m for key in cells)]
    schemes = [s for s in TABLE_ORDER if any(key[0] == s for key in cells)]
    columns = [(m, layout) for m in modalities for layout in ("before", "after", "after-before")]
    header = (
        "| scheme | "
        + " | ".join(f"{m}: {'after − before' if side == 'after-before' else side}" for m, side in columns)
        + " |"
    )
    lines = [header, "|---|" + "---:|" * len(columns)]

    def show(cell: dict | None, signed: bool) -> str:
        if cell is None:
            return "–"
        spread = "" if cell["std"] is None else f" ± {cell['std']:.3f}"
        return (
            f"{cell['mean']:+.3f}{spread} (n={cell['n']})" if signed else f"{cell['mean']:.3f}{spread} (n={cell['n']})"
        )

    for scheme in schemes:
        shown = [show(cells.get((scheme, m, layout)), layout == "after-before") for m, layout in columns]
        lines.append(f"| `{scheme}` | " + " | ".join(shown) + " |")
    floors = results.get("floors", {})
    lines.append("")
    lines.append(
        "mean ± std over seeds (n runs); after − before is the paired difference per seed. Chance 0.100; answering "
        "the most frequent digit of the sample: "
        + ", ".join(f"{m} {floors[m]:.3f}" for m in modalities if m in floors)
        + "."
    )
    long_schemes = [s for s in TABLE_ORDER if any(key[:2] == (s, "long_video") for key in cells)]
    if long_schemes:
        frames = results["setup"]["video_frames"], results["setup"]["long_video_frames"]
        trained = results["setup"].get("train_video_frames")
        title = f"Long videos, trained on {trained}-frame videos" if trained else "Long videos"
        of_training = "" if trained else " of training"
        lines += [
            "",
            f"{title}: accuracy on {frames[1]}-frame videos minus accuracy on the {frames[0]}-frame videos"
            f"{of_training} (questions about the first {frames[0]} frames), per seed:",
            "",
            "| scheme | question before | question after |",
            "|---|---:|---:|",
        ]
        for scheme in long_schemes:
            shown = [show(cells.get((scheme, "long_video", layout)), True) for layout in ("before", "after")]
            lines.append(f"| `{scheme}` | " + " | ".join(shown) + " |")
    return "\n".join(lines) + "\n"


def load_previous(path: Path, setup: dict, overwrite: bool) -> list[dict]:
    """Finished runs of an earlier call with the same setup (resume), or none."""
    if overwrite or not path.is_file():
        return []
    previous = json.loads(path.read_text())
    if previous.get("setup") != setup:
        raise ValueError(
            f"{path} holds runs with another setup ({previous.get('setup')}); pass --overwrite to start over or "
            "choose another --output."
        )
    return previous["runs"]


def main() -> None:
    parser = HfArgumentParser((SymmetryModelArguments, SymmetryArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, args = parser.parse_json_file(json_file=sys.argv[1])
    else:
        model_args, args = parser.parse_args_into_dataclasses()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.logging.set_verbosity_warning()
    torch.set_num_threads(args.torch_threads)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    model_fields = (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "config_overrides",
        "rope_type",
        "rope_theta",
        "pair_layout",
    )
    setup = {**args.setup(), "model": {name: getattr(model_args, name) for name in model_fields}}
    runs = load_previous(output, setup, args.overwrite)
    done = {(r["scheme"], r["modality"], r["layout"], r["seed"]) for r in runs}
    for other in (args.merge or "").split(","):
        if other.strip():
            if not Path(other.strip()).is_file():
                raise FileNotFoundError(f"--merge names {other.strip()}, which does not exist.")
            for run in load_previous(Path(other.strip()), setup, overwrite=False):
                key = (run["scheme"], run["modality"], run["layout"], run["seed"])
                if key not in done and run["scheme"] in args.scheme_list:
                    runs.append(run)
                    done.add(key)
    results = {
        "setup": setup,
        "environment": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_threads": args.torch_threads,
            "machine": platform.machine(),
            "processor": platform.processor() or None,
        },
    }
    data = {modality: prepare(args, model_args, modality) for modality in args.modality_list}
    # this call's modalities, over those of the files it resumes or merges (a call may prepare only some)
    earlier = [output, *(Path(o.strip()) for o in (args.merge or "").split(",") if o.strip())]
    earlier = [json.loads(path.read_text()) for path in earlier if path.is_file() and not args.overwrite]
    results["floors"] = {k: v for e in earlier for k, v in e.get("floors", {}).items()}
    results["floors"].update({modality: round(d.floor, 4) for modality, d in data.items()})
    results["sizes"] = {k: v for e in earlier for k, v in e.get("sizes", {}).items()}
    results["sizes"].update(
        {
            modality: {"train": len(d.train), "test": len(d.test), "grid_thw": [d.frames, d.grid, d.grid]}
            for modality, d in data.items()
        }
    )
    for seed in args.seed_list:  # seeds outermost: a cut-short grid still has every cell
        for modality in args.modality_list:
            for scheme in args.scheme_list:
                for layout in args.layout_list:
                    if (scheme, modality, layout, seed) in done:
                        continue
                    if modality == "video" and scheme in IMAGES_ONLY:
                        logger.info("%s places images only: no video runs", scheme)
                        continue
                    run = train_and_test(args, model_args, data[modality], scheme, layout, seed)
                    logger.info(
                        "%s %s %s seed %d: test accuracy %.4f (train loss %.3f, %.0f s)", scheme, modality, layout,
                        seed, run["test_accuracy"], run["train_loss"], run["wall_time_s"],
                    )  # fmt: skip
                    runs.append(run)
                    results["runs"] = runs
                    results["cells"] = summarize(runs)
                    save_json(output, results)
                    output.with_suffix(".md").write_text(markdown_table(results))
    results["runs"], results["cells"] = runs, summarize(runs)
    save_json(output, results)
    output.with_suffix(".md").write_text(markdown_table(results))
    print(markdown_table(results))


if __name__ == "__main__":
    main()
