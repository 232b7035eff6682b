#!/usr/bin/env python
"""RoPE against learned absolute positions: the MLM validation loss per step, and the fine-tuned accuracies.

Reads the folder written by `gpu_pretrain.py` (its `models/<encoding>-s<seed>/trainer_state.json` and
`finetune/<encoding>-s<seed>-<task>/all_results.json`), draws one figure of validation loss against steps (one line
per encoding and seed, as the RoFormer paper's pretraining figure) and prints a markdown table (per run, then the
mean over seeds):

    python examples/language-modeling/plot_position_comparison.py benchmarks/results/gpu_pretrain \
        --output docs/images/rope-vs-learned-mlm.png

Needs matplotlib.
"""

import argparse
import json
import re
from pathlib import Path
from statistics import mean

RUN = re.compile(r"^(?P<encoding>[a-z0-9_]+)-s(?P<seed>\d+)$")
TASKS = (("sentiment", "chinese_sentiment, 128"), ("statutes512", "statutes, 512"), ("statutes1024", "statutes, 1024"))


def runs(folder: Path) -> dict[tuple[str, int], Path]:
    """(encoding, seed) -> the pretraining run's folder, for every `<encoding>-s<seed>` under models/."""
    found = {}
    for path in sorted((folder / "models").glob("*-s*")):
        match = RUN.match(path.name)
        if match and (path / "trainer_state.json").is_file():
            found[(match["encoding"], int(match["seed"]))] = path
    if not found:
        raise ValueError(f"No models/<encoding>-s<seed>/trainer_state.json under {folder}: give gpu_pretrain's --out.")
    return found


def eval_curve(run: Path) -> list[tuple[int, float]]:
    history = json.loads((run / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    return [(row["step"], float(row["eval_loss"])) for row in history if "eval_loss" in row]


def test_accuracy(folder: Path, name: str, task: str) -> float | None:
    path = folder / "finetune" / f"{name}-{task}" / "all_results.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("test_accuracy")


def table(folder: Path, found: dict[tuple[str, int], Path]) -> str:
    header = "| encoding | seed | steps | final MLM validation loss | " + " | ".join(t[1] for t in TASKS) + " |"
    lines = [header, "|" + "---|" * (4 + len(TASKS))]
    per_encoding: dict[str, list[list[float | None]]] = {}
    for (encoding, seed), run in sorted(found.items()):
        curve = eval_curve(run)
        accuracies = [test_accuracy(folder, run.name, task) for task, _ in TASKS]
        row = [curve[-1][1] if curve else None, *accuracies]
        per_encoding.setdefault(encoding, []).append(row)
        steps = curve[-1][0] if curve else ""
        lines.append(f"| {encoding} | {seed} | {steps} | " + " | ".join(_cell(v) for v in row) + " |")
    for encoding, rows in per_encoding.items():
        means = [mean(col) if all(v is not None for v in col) else None for col in zip(*rows)]
        lines.append(f"| **{encoding}, mean of {len(rows)}** | | | " + " | ".join(_cell(v) for v in means) + " |")
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def plot(found: dict[tuple[str, int], Path], output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors: dict[str, str] = {}
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    for (encoding, seed), run in sorted(found.items()):
        color = colors.setdefault(encoding, palette[len(colors) % len(palette)])
        steps, losses = zip(*eval_curve(run))
        axes.plot(steps, losses, color=color, linestyle="-" if seed % 2 else "--", label=f"{encoding}, seed {seed}")
    axes.set_xlabel("training step")
    axes.set_ylabel("MLM validation loss (nats)")
    axes.set_title("Whole-word MLM on the bundled Chinese corpus, blocks of 512")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=120)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="gpu_pretrain.py's --out folder (or its results unpacked).")
    parser.add_argument("--output", type=Path, help="Write the figure here (png).")
    args = parser.parse_args(argv)
    found = runs(args.folder)
    if args.output:
        plot(found, args.output)
    text = table(args.folder, found)
    print(text)
    return text


if __name__ == "__main__":
    main()
