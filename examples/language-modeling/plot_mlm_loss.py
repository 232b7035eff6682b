#!/usr/bin/env python
"""Plot a masked-LM run's loss curve from the `trainer_state.json` that run_mlm.py leaves in its output folder.

Why: the loss curve shows whether the pretraining budget was spent well (still falling: more steps would help).
The shipped checkpoint keeps its `trainer_state.json`, so its figure can be redrawn from the repository:

    python examples/language-modeling/plot_mlm_loss.py checkpoints/roformer-ext-mini-zh \
        --output docs/images/roformer-ext-mini-zh-loss.png

A run continued from an earlier run's checkpoint (`run_mlm.py --model_name_or_path`) counts its steps from 0
again; `--previous` draws the earlier run first (its `trainer_state.json`) and shifts the later one by its last step:

    python examples/language-modeling/plot_mlm_loss.py out/mlm-continued --previous out/mlm/trainer_state.json \
        --output loss.png

Needs matplotlib.
"""

import argparse
import json
from pathlib import Path


def loss_points(state_file: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(step, training loss) and (step, validation loss) pairs from a Trainer state's log history."""
    if not state_file.is_file():
        raise ValueError(f"{state_file} does not exist: give the output folder of a run_mlm.py training run.")
    history = json.loads(state_file.read_text(encoding="utf-8")).get("log_history", [])
    train = [(row["step"], float(row["loss"])) for row in history if "loss" in row]
    evaluation = [(row["step"], float(row["eval_loss"])) for row in history if "eval_loss" in row]
    if not train:
        raise ValueError(f"{state_file} logs no training loss: train with --logging_steps smaller than --max_steps.")
    return train, evaluation


def last_step(state_file: Path) -> int:
    """The global step a Trainer state ends at (where a run continued from its checkpoint starts counting)."""
    return int(json.loads(state_file.read_text(encoding="utf-8"))["global_step"])


def shifted(points: list[tuple[int, float]], offset: int) -> list[tuple[int, float]]:
    return [(step + offset, value) for step, value in points]


def plot(run_dir: Path, output: Path, title: str | None = None, previous: Path | None = None) -> Path:
    """Draw the training loss (line) and any validation loss (points) against the step; returns the PNG path.

    `previous`: the `trainer_state.json` of the run this one continued; drawn first, this run shifted by its steps.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    train, evaluation = loss_points(run_dir / "trainer_state.json")
    figure, axis = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    if previous is not None:
        offset = last_step(previous)
        earlier_train, earlier_evaluation = loss_points(previous)
        axis.plot(*zip(*earlier_train), label=f"training loss, steps 1-{offset:,}")
        if earlier_evaluation:
            axis.plot(*zip(*earlier_evaluation), "o", label="validation loss, first run")
        axis.axvline(offset, color="grey", linestyle=":", linewidth=1)
        train, evaluation = shifted(train, offset), shifted(evaluation, offset)
        axis.plot(*zip(*train), label="training loss, continued from there")
    else:
        axis.plot(*zip(*train), label="training loss (masked tokens)")
    if evaluation:
        axis.plot(*zip(*evaluation), "o", label="validation loss")
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("cross-entropy (nats)")
    axis.set_title(title or f"MLM pretraining: {run_dir.name}")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output)
    plt.close(figure)
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="Output folder of run_mlm.py (holds trainer_state.json).")
    parser.add_argument("--output", type=Path, required=True, help="PNG file to write.")
    parser.add_argument("--title", default=None)
    parser.add_argument(
        "--previous",
        type=Path,
        default=None,
        help="trainer_state.json of the run this one continued (--model_name_or_path): drawn before it.",
    )
    args = parser.parse_args()
    print(f"wrote {plot(args.run_dir, args.output, args.title, args.previous)}")


if __name__ == "__main__":
    main()
