#!/usr/bin/env python
"""Length extrapolation of the position encodings: one tiny model per encoding, trained at one length, evaluated at
1x, 2x, 4x, 8x, 16x that length.

Every model is the same small RoFormerExt (char-level vocabulary trained on the corpus with the project's WordPiece
tokenizer; Chinese splits into single characters), trained from scratch with `Trainer` on the bundled statutes
(train laws) concatenated and cut into blocks of `--train_length` tokens. Evaluation reads the held-out test laws:
the same token stream (its first `--eval_blocks` x 16 x train_length tokens) is cut into blocks of each eval length,
so every length scores the same tokens. MLM masks are drawn once over that stream from `--mask_seed`
(BERT's 80/10/10), so every encoding, seed and length sees the same corrupted inputs; `--objective causal` scores
next-token prediction instead. RoPE's eval-time scalings (linear, dynamic/NTK-aware, YaRN; transformers' own
`rope_parameters`) reload the trained RoPE model with a changed config. Results go to one JSON file (per objective,
encoding, seed and length: mean loss over all scored tokens and over those at positions >= train_length), which is
merged, so an interrupted or extended run only trains what is missing.

    python examples/position-lab/run_extrapolation.py --output_dir out/position-lab --torch_threads 1
    python examples/position-lab/run_extrapolation.py --output_dir out/position-lab --objective causal --seeds 0
    python examples/position-lab/run_extrapolation.py --output_dir out/position-lab --decay_plot docs/images/x.png

Names: the encodings of `roformer_ext.registered_position_encodings()`, plus "sinusoidal_scaled" (the sinusoidal
table times 0.02·sqrt(2), the norm of an initial word embedding) and "linear_attention" (RoPE with
`attention_type="linear"`); eval-time variants are reported as "rope+linear", "rope+dynamic", "rope+yarn".
"""

import hashlib
import json
import logging
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.nn import functional as F
from transformers import DataCollatorForLanguageModeling, HfArgumentParser, Trainer, TrainingArguments, set_seed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/
sys.path.insert(0, str(Path(__file__).resolve().parent))  # examples/position-lab/: decay_analysis, beside this script

from common.corpora import load_example_dataset  # noqa: E402
from common.utils import train_wordpiece_tokenizer  # noqa: E402
from decay_analysis import (  # noqa: E402
    alibi_bias,
    deberta_embedding_by_distance,
    plot_decay_panels,
    position_cosine_by_distance,
    relative_embedding_by_distance,
    sinusoidal_similarity,
    t5_bias_by_distance,
    transformer_xl_position_bias,
    tupe_bias_by_distance,
)

import roformer_ext  # noqa: E402
from roformer_ext import RoFormerExtConfig, RoFormerExtForCausalLM, RoFormerExtForMaskedLM  # noqa: E402
from roformer_ext.plotting import long_range_decay  # noqa: E402

logger = logging.getLogger(__name__)

OBJECTIVES = ("mlm", "causal")
#: Study names that are not a `position_encoding` of their own: config fields on top of RoPE.
EXTRA_ENCODINGS = {
    "linear_attention": {"attention_type": "linear"},
    # Vaswani's table at the norm of an initial word embedding (initializer_range 0.02): 0.02 * sqrt(2).
    "sinusoidal_scaled": {
        "position_encoding": "sinusoidal",
        "position_encoding_parameters": {"sinusoidal_scale": 0.02 * 2**0.5},
    },
}
#: RoPE's eval-time scalings: name -> rope_parameters (train_length and factor filled in).
ROPE_SCALINGS = ("linear", "dynamic", "yarn")
CORPORA = ("statutes", "chinese_sentiment", "rotten_tomatoes")
DEFAULT_ENCODINGS = ["rope", "sinusoidal", "learned", "shaw", "t5_bias", "alibi", "none", "linear_attention"]


@dataclass
class LabArguments:
    """What to train and evaluate; sizes default to a study that fits ~45 minutes of one CPU core."""

    output_dir: str = field(default="out/position-lab", metadata={"help": "Models, tokenizer and the JSON go here."})
    results_file: str | None = field(
        default=None, metadata={"help": "JSON results (default: <output_dir>/extrapolation_<objective>.json)."}
    )
    objective: str = field(default="mlm", metadata={"help": "'mlm' (masked LM) or 'causal' (next-token LM)."})
    encodings: list[str] = field(
        default_factory=lambda: list(DEFAULT_ENCODINGS), metadata={"help": "Encodings to train (see module doc)."}
    )
    rope_scalings: list[str] = field(
        default_factory=lambda: list(ROPE_SCALINGS),
        metadata={"help": "Eval-time RoPE scalings of the trained 'rope' model ('none': no scalings)."},
    )
    scaling_factor: float = field(default=4.0, metadata={"help": "rope_parameters['factor'] of the scalings."})
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={"help": "Training seeds."})
    corpus: str = field(default="statutes", metadata={"help": f"Bundled corpus, one of {CORPORA}."})
    train_length: int = field(default=64, metadata={"help": "Training block length in tokens."})
    eval_factors: list[int] = field(
        default_factory=lambda: [1, 2, 4, 8, 16], metadata={"help": "Eval lengths / train_length."}
    )
    eval_blocks: int = field(default=32, metadata={"help": "Blocks of the longest eval length; fixes the eval tokens."})
    eval_batch_tokens: int = field(default=8192, metadata={"help": "Tokens per eval forward pass."})
    mask_seed: int = field(default=1234, metadata={"help": "Seed of the eval masks (shared by every encoding)."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens masked (train and eval)."})
    max_train_tokens: int | None = field(default=None, metadata={"help": "Cut the training stream (tests)."})
    vocab_size: int = field(default=2000, metadata={"help": "WordPiece vocabulary (a char vocabulary for Chinese)."})
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 512
    max_steps: int = field(default=250, metadata={"help": "Training steps per model."})
    batch_size: int = field(default=32, metadata={"help": "Blocks per training step."})
    learning_rate: float = 2e-3
    warmup_ratio: float = 0.05
    torch_threads: int = field(default=1, metadata={"help": "torch.set_num_threads (the study's figures: 1)."})
    decay_plot: str | None = field(
        default=None, metadata={"help": "Write the decay figure of the trained models to this PNG and exit."}
    )
    decay_seed: int = field(default=0, metadata={"help": "Seed of the trained models the decay figure reads."})

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"--objective must be one of {OBJECTIVES}, got {self.objective!r}.")
        if self.corpus not in CORPORA:
            raise ValueError(f"--corpus must be one of {CORPORA}, got {self.corpus!r}.")
        known = available_encodings()
        unknown = [e for e in self.encodings if e not in known]
        if unknown:
            raise ValueError(f"Unknown encodings {unknown}; this roformer_ext has {known}.")
        if self.rope_scalings == ["none"]:
            self.rope_scalings = []
        bad = [s for s in self.rope_scalings if s not in ROPE_SCALINGS]
        if bad:
            raise ValueError(f"--rope_scalings takes {ROPE_SCALINGS}, got {bad}.")
        if self.rope_scalings and "rope" not in self.encodings:
            raise ValueError(
                "--rope_scalings evaluate the trained 'rope' model: add rope to --encodings, or pass --rope_scalings none."
            )
        if not self.eval_factors or any(k < 1 for k in self.eval_factors):
            raise ValueError(f"--eval_factors must be positive integers, got {self.eval_factors}.")
        if self.train_length < 2 or self.eval_blocks < 1 or not self.seeds:
            raise ValueError("--train_length must be >= 2, --eval_blocks >= 1, and --seeds non-empty.")

    @property
    def results_path(self) -> Path:
        return Path(self.results_file or Path(self.output_dir) / f"extrapolation_{self.objective}.json")

    @property
    def eval_lengths(self) -> list[int]:
        return [k * self.train_length for k in self.eval_factors]


def available_encodings() -> list[str]:
    """The encodings this roformer_ext can build (RoPE only before `position_encoding` exists) plus the extras."""
    registered = getattr(roformer_ext, "registered_position_encodings", lambda: ["rope"])()
    return list(registered) + list(EXTRA_ENCODINGS)


# ----------------------------------------------------------------------------------------------------- data


def load_token_streams(args: LabArguments, tokenizer_dir: Path):
    """The tokenizer (trained once on the train split, then reused) and the train / test token streams."""
    from roformer_ext import RoFormerExtTokenizerFast

    data = load_example_dataset(args.corpus)
    if (tokenizer_dir / "tokenizer_config.json").is_file():
        tokenizer = RoFormerExtTokenizerFast.from_pretrained(tokenizer_dir)
    else:
        tokenizer = train_wordpiece_tokenizer(data["train"]["text"], args.vocab_size)
        tokenizer.save_pretrained(tokenizer_dir)

    def stream(texts: list[str], needed: int | None) -> torch.Tensor:
        # Texts joined with [SEP]: one long document stream, as run_mlm's group_texts does without specials.
        # Tokenized in chunks, stopping once `needed` tokens are there (a small run need not tokenize the corpus).
        joined: list[int] = []
        for start in range(0, len(texts), 256):
            for ids in tokenizer(texts[start : start + 256], add_special_tokens=False)["input_ids"]:
                joined += [*ids, tokenizer.sep_token_id]
            if needed is not None and len(joined) >= needed:
                break
        return torch.tensor(joined[:needed], dtype=torch.long)

    train = stream(list(data["train"]["text"]), args.max_train_tokens)
    return tokenizer, train, stream(list(data["test"]["text"]), eval_stream_length(args))


def train_blocks(stream: torch.Tensor, length: int) -> torch.Tensor:
    """(blocks, length): the stream cut into full blocks (the remainder is dropped)."""
    return stream[: len(stream) // length * length].view(-1, length)


def eval_stream_length(args: LabArguments) -> int:
    """Tokens every eval length covers: whole blocks of the longest length."""
    return args.eval_blocks * max(args.eval_lengths)


def eval_masks(num_tokens: int, seed: int, probability: float, vocab_size: int, first_regular_id: int):
    """BERT's corruption drawn once over the eval stream: which tokens are scored, which become [MASK], which a
    random token (and that token). Depends only on the seed and sizes, never on the model: the same for every
    encoding, training seed and eval length."""
    generator = torch.Generator().manual_seed(seed)
    selected = torch.rand(num_tokens, generator=generator) < probability
    draw = torch.rand(num_tokens, generator=generator)
    random_tokens = torch.randint(first_regular_id, vocab_size, (num_tokens,), generator=generator)
    return selected, selected & (draw < 0.8), selected & (draw >= 0.8) & (draw < 0.9), random_tokens


def eval_batches(stream: torch.Tensor, args: LabArguments, tokenizer, length: int):
    """Inputs and labels of the eval stream in blocks of `length`, as (blocks, length) tensors.

    MLM: the masks of `eval_masks` applied (labels -100 where not scored). Causal: inputs = labels = the tokens
    (the model's loss shifts them).
    """
    tokens = stream[: eval_stream_length(args)]
    if len(tokens) < eval_stream_length(args):
        raise ValueError(
            f"The held-out text has {len(tokens)} tokens, fewer than --eval_blocks x the longest eval length "
            f"= {eval_stream_length(args)}; lower --eval_blocks or the --eval_factors."
        )
    if args.objective == "causal":
        return tokens.view(-1, length), tokens.view(-1, length).clone()
    selected, to_mask, to_random, random_tokens = eval_masks(
        len(tokens), args.mask_seed, args.mlm_probability, len(tokenizer), len(tokenizer.all_special_ids)
    )
    inputs = torch.where(to_mask, tokenizer.mask_token_id, torch.where(to_random, random_tokens, tokens))
    labels = torch.where(selected, tokens, -100)
    return inputs.view(-1, length), labels.view(-1, length)


def mask_checksum(labels: torch.Tensor) -> str:
    """A short fingerprint of which tokens are scored: equal across encodings when the masks are equal."""
    return hashlib.sha1((labels.flatten() != -100).numpy().tobytes()).hexdigest()[:12]


class BlockDataset(torch.utils.data.Dataset):
    """Training blocks as the dicts the collators take."""

    def __init__(self, blocks: torch.Tensor):
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[index]}


# ---------------------------------------------------------------------------------------------------- models


def model_config(args: LabArguments, encoding: str, tokenizer) -> RoFormerExtConfig:
    """The one architecture of the study, with `encoding`'s position encoding.

    No dropout (training sees each block at most once); `max_position_embeddings` covers the longest eval length,
    so "learned" has rows there that training never reaches (they keep their initial values: weight decay is 0).
    """
    kwargs = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        hidden_size=args.hidden_size,
        num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads,
        intermediate_size=args.intermediate_size,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=max(args.eval_lengths),
        is_decoder=args.objective == "causal",
        sparse_prediction=args.objective == "mlm",
    )
    if encoding in EXTRA_ENCODINGS:
        kwargs.update(EXTRA_ENCODINGS[encoding])
    elif encoding != "rope":
        kwargs["position_encoding"] = encoding
    return RoFormerExtConfig(**kwargs)


def model_class(objective: str):
    return RoFormerExtForMaskedLM if objective == "mlm" else RoFormerExtForCausalLM


def scaled_rope_overrides(scaling: str, args: LabArguments) -> dict:
    """Config changes that turn the trained RoPE model into its eval-time scaled variant (transformers' types).

    `dynamic` reads the training length from `max_position_embeddings` (it rescales only beyond it); `yarn` from
    `original_max_position_embeddings`.
    """
    rope = {"rope_type": scaling, "factor": args.scaling_factor}
    if scaling == "yarn":
        rope["original_max_position_embeddings"] = args.train_length
    overrides = {"rope_parameters": rope}
    if scaling == "dynamic":
        overrides["max_position_embeddings"] = args.train_length
    if scaling == "yarn":  # transformers checks factor == max_position_embeddings / original
        overrides["max_position_embeddings"] = round(args.train_length * args.scaling_factor)
    return overrides


@torch.no_grad()
def check_causal(model, vocab_size: int, length: int = 16) -> None:
    """A causal LM whose early logits move when a later token changes sees the future: its loss would be meaningless
    (a model that copies the next token reaches near-zero loss). Checked before each causal model is trained."""
    tokens = torch.randint(5, vocab_size, (1, length), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[0, -1] = 5 if tokens[0, -1] != 5 else 6
    was_training = model.training
    model.eval()
    before, after = model(input_ids=tokens).logits[0, :-1], model(input_ids=changed).logits[0, :-1]
    model.train(was_training)
    if not torch.allclose(before, after, atol=1e-5):
        raise RuntimeError(
            f"position_encoding={model.config.position_encoding!r} lets a causal model see later tokens (changing the "
            f"last token moved earlier logits by {float((before - after).abs().max()):.3g}); its causal LM loss would "
            "be meaningless. Fix the attention mask of this encoding before running the study."
        )


def train_model(args: LabArguments, encoding: str, seed: int, tokenizer, blocks: torch.Tensor, save_dir: Path):
    """Train one model with `Trainer`; returns the model and its last logged training loss."""
    set_seed(seed)
    model = model_class(args.objective)(model_config(args, encoding, tokenizer))
    if args.objective == "causal":
        check_causal(model, len(tokenizer))
    collator = DataCollatorForLanguageModeling(
        tokenizer, mlm=args.objective == "mlm", mlm_probability=args.mlm_probability, seed=seed
    )
    with tempfile.TemporaryDirectory() as scratch:
        training_args = TrainingArguments(
            output_dir=scratch,
            max_steps=args.max_steps,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            warmup_steps=max(1, round(args.warmup_ratio * args.max_steps)),
            weight_decay=0.0,
            lr_scheduler_type="linear",
            logging_steps=max(1, args.max_steps // 20),
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            seed=seed,
            data_seed=seed,
            dataloader_num_workers=0,
            use_cpu=True,
        )
        trainer = Trainer(model=model, args=training_args, train_dataset=BlockDataset(blocks), data_collator=collator)
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    model.save_pretrained(save_dir)
    return model.eval(), losses[-1]


@torch.no_grad()
def evaluate(model, args: LabArguments, tokenizer, stream: torch.Tensor) -> dict[str, dict]:
    """Per eval length: mean loss over the scored tokens, over those at positions >= train_length, and counts."""
    results = {}
    for length in args.eval_lengths:
        inputs, labels = eval_batches(stream, args, tokenizer, length)
        rows = max(1, args.eval_batch_tokens // length)
        total, count, beyond_total, beyond_count = 0.0, 0, 0.0, 0
        for start in range(0, len(inputs), rows):
            batch_inputs, batch_labels = inputs[start : start + rows], labels[start : start + rows]
            positions = torch.arange(length).expand_as(batch_labels)
            if args.objective == "causal":  # token t is predicted at position t-1
                logits = model(input_ids=batch_inputs).logits[:, :-1]
                batch_labels, positions = batch_labels[:, 1:], positions[:, 1:]
            else:  # sparse prediction: logits of the scored tokens only, in row-major order
                logits = model(input_ids=batch_inputs, labels=batch_labels).logits
            scored = batch_labels != -100
            losses = F.cross_entropy(
                logits[scored] if logits.dim() == 3 else logits, batch_labels[scored], reduction="none"
            )
            beyond = positions[scored] >= args.train_length
            total, count = total + losses.sum().item(), count + len(losses)
            beyond_total, beyond_count = beyond_total + losses[beyond].sum().item(), beyond_count + int(beyond.sum())
        results[str(length)] = {
            "factor": length // args.train_length,
            "blocks": len(inputs),
            "block_length": int(inputs.shape[1]),
            "loss": total / count,
            "loss_beyond_train_length": beyond_total / beyond_count if beyond_count else None,
            "scored_tokens": count,
            "mask_checksum": mask_checksum(labels),
        }
    return results


# --------------------------------------------------------------------------------------------------- results


def load_results(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {"setup": {}, "runs": []}


def find_run(results: dict, objective: str, encoding: str, seed: int) -> dict | None:
    return next(
        (r for r in results["runs"] if (r["objective"], r["encoding"], r["seed"]) == (objective, encoding, seed)),
        None,
    )


def unigram_entropy(stream: torch.Tensor) -> float:
    """Entropy (nats) of the training token distribution: the loss of a model that ignores context."""
    counts = torch.bincount(stream).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


def save_results(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")


def run(args: LabArguments, command: str = "") -> dict:
    """Train what the results file lacks, evaluate it, and return the merged results."""
    torch.set_num_threads(args.torch_threads)
    out = Path(args.output_dir)
    tokenizer, train_stream, test_stream = load_token_streams(args, out / "tokenizer")
    blocks = train_blocks(train_stream, args.train_length)
    results = load_results(args.results_path)
    ignored = ("output_dir", "results_file", "decay_plot", "decay_seed")
    setup = {k: v for k, v in asdict(args).items() if k not in ignored}
    setup.update(
        vocab_size_trained=len(tokenizer),
        train_blocks=len(blocks),
        eval_tokens=eval_stream_length(args),
        unigram_entropy=unigram_entropy(blocks.flatten()),
        command=command,
        torch=torch.__version__,
    )
    results["setup"] = setup
    for seed in args.seeds:  # seeds outermost: an interrupted run still has every encoding at the first seeds
        for encoding in args.encodings:
            model_dir = out / "models" / args.objective / encoding / f"seed{seed}"
            if find_run(results, args.objective, encoding, seed) is None:
                logger.info("training %s %s seed %d", args.objective, encoding, seed)
                start = time.perf_counter()
                model, train_loss = train_model(args, encoding, seed, tokenizer, blocks, model_dir)
                seconds = time.perf_counter() - start
                record = {"objective": args.objective, "encoding": encoding, "seed": seed, "train_loss": train_loss}
                record.update(train_seconds=round(seconds, 1), eval=evaluate(model, args, tokenizer, test_stream))
                results["runs"].append(record)
                save_results(args.results_path, results)
                logger.info("%s", json.dumps({k: v for k, v in record.items() if k != "eval"}))
            if encoding != "rope":
                continue
            for scaling in args.rope_scalings:
                name = f"rope+{scaling}"
                if find_run(results, args.objective, name, seed) is not None:
                    continue
                overrides = scaled_rope_overrides(scaling, args)
                model = model_class(args.objective).from_pretrained(model_dir, **overrides).eval()
                base = find_run(results, args.objective, "rope", seed)
                record = {"objective": args.objective, "encoding": name, "seed": seed, "train_loss": base["train_loss"]}
                record.update(eval_overrides=overrides, eval=evaluate(model, args, tokenizer, test_stream))
                results["runs"].append(record)
                save_results(args.results_path, results)
    return results


# ----------------------------------------------------------------------------------------------------- decay


def decay_panels(args: LabArguments, seed: int = 0, max_distance: int | None = None) -> dict[str, dict]:
    """Each encoding's position term against relative distance: formulas where the encoding fixes it, read from
    the study's trained models (`seed`) where it is learned. Keys are panel titles (see `plot_decay_panels`)."""
    from roformer_ext.relative_position_encodings import alibi_slopes

    max_distance = max_distance or 4 * args.train_length
    head_dim = args.hidden_size // args.num_attention_heads
    bounds = {d: long_range_decay(max_distance, d) for d in dict.fromkeys((head_dim, 128))}
    panels = {
        "rope (formula)": {
            "curves": {
                f"d = {d}" + (" (paper)" if d == 128 else " (these heads)"): b / b[0] for d, b in bounds.items()
            },
            "ylabel": "upper bound mean_j |S_j|, rel. to k = 0",
            "note": "RoFormer §3.4.3",
        },
        f"sinusoidal (formula, d = {args.hidden_size})": {
            "curves": {"cos(p_m, p_m+k)": sinusoidal_similarity(max_distance, args.hidden_size)},
            "ylabel": "cosine of position vectors",
        },
        "alibi (formula)": {
            "curves": {
                f"head {h}": row
                for h, row in enumerate(alibi_bias(alibi_slopes(args.num_attention_heads), max_distance))
            },
            "ylabel": "score bias −slope·k",
        },
    }
    models = Path(args.output_dir) / "models" / args.objective
    trained = {
        e: models / e / f"seed{seed}" for e in ("t5_bias", "shaw", "learned") if (models / e / f"seed{seed}").is_dir()
    }
    if "t5_bias" in trained:
        config = RoFormerExtConfig.from_pretrained(trained["t5_bias"])
        table = model_class(args.objective).from_pretrained(trained["t5_bias"]).roformer.position_encoding
        bias = t5_bias_by_distance(
            table.relative_attention_bias.weight,
            max_distance,
            bidirectional=not config.is_decoder,
            num_buckets=table.num_buckets,
            bucket_max_distance=table.max_distance,
            direction=-1,
        )
        panels[f"t5_bias (trained, seed {seed})"] = {
            "curves": {f"head {h}": row for h, row in enumerate(bias)},
            "ylabel": "learned bias (key k to the left)",
            "note": f"last bucket from k = {table.max_distance}",
        }
    if "shaw" in trained:
        model = model_class(args.objective).from_pretrained(trained["shaw"])
        curves = {}
        for i, layer in enumerate(model.roformer.layers):
            norm, cosine = relative_embedding_by_distance(layer.attention.relative_table.weight, max_distance)
            curves[f"layer {i}: cos(a_k, a_0)"] = cosine
        panels[f"shaw (trained, seed {seed})"] = {
            "curves": curves,
            "ylabel": "cosine of key embeddings",
            "note": f"clipped at k = {model.config.position_encoding_knobs.max_relative_position}",
        }
    if "learned" in trained:
        model = model_class(args.objective).from_pretrained(trained["learned"])
        table = model.roformer.position_encoding.position_embeddings.weight
        panels[f"learned (trained, seed {seed})"] = {
            "curves": {
                f"rows < {args.train_length} (trained)": position_cosine_by_distance(table[: args.train_length]),
                "all rows": position_cosine_by_distance(table, max_distance),
            },
            "ylabel": "mean cos(p_m, p_m+k)",
        }
    for encoding in ("transformer_xl", "tupe", "deberta"):
        folder = models / encoding / f"seed{seed}"
        if folder.is_dir():
            panels.update(seed_encoding_panel(model_class(args.objective).from_pretrained(folder), max_distance, seed))
    panels["none (NoPE)"] = {"curves": {"no position term": torch.zeros(max_distance + 1)}, "ylabel": "0"}
    return panels


def seed_encoding_panel(model, max_distance: int, seed: int) -> dict[str, dict]:
    """The decay panel of a trained transformer_xl, tupe or deberta model (decay_analysis.py has the curves)."""
    encoding = model.config.position_encoding
    title = f"{encoding} (trained, seed {seed})"
    if encoding == "transformer_xl":
        curves = {}
        for i, layer in enumerate(model.roformer.layers):
            for h, row in enumerate(transformer_xl_position_bias(layer.attention.relative_table, max_distance)):
                curves[f"layer {i} head {h}"] = row
        return {title: {"curves": curves, "ylabel": "v·W_r r_k / √d (key k to the left)"}}
    if encoding == "tupe":
        bias = tupe_bias_by_distance(model.roformer.position_encoding, max_distance)
        return {title: {"curves": {f"head {h}": row for h, row in enumerate(bias)}, "ylabel": "mean bias over queries"}}
    cosine = deberta_embedding_by_distance(model.roformer.position_encoding, max_distance)
    return {title: {"curves": {"cos(K_r row δ(k), δ(0))": cosine}, "ylabel": "cosine of relative embeddings"}}


def plot_trained_decay(args: LabArguments, path: str | Path) -> Path:
    return plot_decay_panels(
        path,
        decay_panels(args, seed=args.decay_seed),
        title=f"Position term vs relative distance ({args.objective}; trained at {args.train_length} tokens)",
    )


def parse_args(argv: list[str] | None = None) -> LabArguments:
    parser = HfArgumentParser(LabArguments)
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    return args


def main(argv: list[str] | None = None) -> dict | None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.decay_plot:
        torch.set_num_threads(args.torch_threads)
        path = plot_trained_decay(args, args.decay_plot)
        logger.info("decay figure: %s", path)
        return None
    results = run(args, command=" ".join(["python examples/position-lab/run_extrapolation.py", *argv]))
    logger.info("results: %s", args.results_path)
    return results


if __name__ == "__main__":
    main()
