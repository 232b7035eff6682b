"""Figures of a run_symmetry.py results file: one per question.

- `<stem>_before_after.png`: per scheme and modality, the test accuracy with the question before and after the
  picture, one dot per seed joined by a line (the paired difference the table reports);
- `<stem>_long_video.png` (when the file has long-video runs): per scheme, accuracy on the training-length videos
  and on the longer ones, one dot per seed and layout; with `--baseline OTHER.json` (e.g. the same schemes trained
  on one length; several files: their runs together) also those long-video accuracies, as grey crosses.

    python examples/position-lab/plot_symmetry.py benchmarks/results/symmetry_all/symmetry.json \
        --out docs/images --stem symmetry_all
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LAYOUT_COLORS = {"before": "tab:blue", "after": "tab:orange"}


def load_runs(path: Path) -> tuple[list[dict], dict]:
    results = json.loads(path.read_text())
    return results["runs"], results


def schemes_in_order(runs: list[dict]) -> list[str]:
    return list(dict.fromkeys(run["scheme"] for run in runs))


def before_after_figure(runs: list[dict], results: dict, path: Path) -> Path:
    """One panel per modality: x = scheme, y = accuracy; per seed a grey line from 'before' to 'after'."""
    modalities = [m for m in ("image", "video") if any(run["modality"] == m for run in runs)]
    schemes = schemes_in_order(runs)
    by_cell = defaultdict(dict)  # (scheme, modality, seed) -> layout -> accuracy
    for run in runs:
        by_cell[run["scheme"], run["modality"], run["seed"]][run["layout"]] = run["test_accuracy"]
    figure, axes = plt.subplots(len(modalities), 1, figsize=(13, 3.6 * len(modalities)), squeeze=False)
    for axis, modality in zip(axes[:, 0], modalities):
        for x, scheme in enumerate(schemes):
            for (s, m, _seed), layouts in by_cell.items():
                if (s, m) != (scheme, modality):
                    continue
                if {"before", "after"} <= set(layouts):
                    axis.plot([x - 0.15, x + 0.15], [layouts["before"], layouts["after"]], color="0.6", lw=0.8)
                for layout, offset in (("before", -0.15), ("after", 0.15)):
                    if layout in layouts:
                        axis.scatter(x + offset, layouts[layout], s=14, color=LAYOUT_COLORS[layout], zorder=3)
        floor = results.get("floors", {}).get(modality)
        if floor is not None:
            axis.axhline(floor, color="0.3", ls=":", lw=1, label=f"most frequent digit ({floor:.3f})")
        axis.axhline(0.1, color="0.5", ls="--", lw=0.8, label="chance (0.1)")
        frames = results["setup"]["video_frames"] if modality == "video" else 1
        axis.set_title(f"{modality}" + (f" ({frames} frames)" if modality == "video" else "") + ": question before "
                       "(blue) vs after (orange) the picture, one line per seed")  # fmt: skip
        axis.set_xticks(range(len(schemes)), schemes, rotation=35, ha="right", fontsize=8)
        axis.set_xlim(-0.6, len(schemes) - 0.4)
        axis.set_ylabel("test accuracy")
        axis.set_ylim(0, 1.02)
        axis.legend(loc="lower left", fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def long_video_figure(
    runs: list[dict], results: dict, path: Path, baseline: tuple[list[dict], dict] | None = None
) -> Path | None:
    """x = scheme; per seed and layout the training-length accuracy (hollow) and the long-video one (filled); the
    baseline file's long-video accuracies of the same schemes as grey crosses."""
    long_runs = [run for run in runs if "long_test_accuracy" in run]
    if not long_runs:
        return None
    schemes = schemes_in_order(long_runs)
    trained, longer = results["setup"]["video_frames"], results["setup"]["long_video_frames"]
    trained_on = results["setup"].get("train_video_frames") or trained
    figure, axis = plt.subplots(figsize=(13, 3.8))
    if baseline is not None:
        base_runs, base_results = baseline
        base_trained = base_results["setup"].get("train_video_frames") or base_results["setup"]["video_frames"]
        shown = [r for r in base_runs if "long_test_accuracy" in r and r["scheme"] in schemes]
        for run in shown:
            x = schemes.index(run["scheme"]) + (-0.3 if run["layout"] == "before" else 0.3)
            axis.scatter(x, run["long_test_accuracy"], s=18, marker="x", color="0.45", zorder=2)
        if shown:
            axis.scatter([], [], s=18, marker="x", color="0.45", label=f"trained on {base_trained}-frame videos only")
            axis.legend(loc="center left", fontsize=7)
    for run in long_runs:
        x = schemes.index(run["scheme"]) + (-0.15 if run["layout"] == "before" else 0.15)
        color = LAYOUT_COLORS[run["layout"]]
        axis.plot([x, x], [run["test_accuracy"], run["long_test_accuracy"]], color="0.7", lw=0.8)
        axis.scatter(x, run["test_accuracy"], s=16, facecolors="none", edgecolors=color, zorder=3)
        axis.scatter(x, run["long_test_accuracy"], s=16, color=color, zorder=3)
    axis.axhline(0.1, color="0.5", ls="--", lw=0.8)
    axis.set_title(
        f"trained on {trained_on}-frame videos; tested on {trained}-frame (hollow) and {longer}-frame videos (filled), "
        f"questions about the first {trained} frames\nblue: question before, orange: after; one pair per seed and layout"
    )
    axis.set_xticks(range(len(schemes)), schemes, rotation=35, ha="right", fontsize=8)
    axis.set_xlim(-0.6, len(schemes) - 0.4)
    axis.set_ylabel("test accuracy")
    axis.set_ylim(0, 1.02)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a run_symmetry.py results JSON")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for the PNG files")
    parser.add_argument("--stem", default=None, help="file name stem (default: the results file's stem)")
    parser.add_argument(
        "--baseline",
        type=Path,
        nargs="+",
        default=None,
        help="other results JSONs (one setup) whose long-video runs are drawn as crosses (a run in several: once)",
    )
    args = parser.parse_args()
    runs, results = load_runs(args.results)
    stem = args.stem or args.results.stem
    args.out.mkdir(parents=True, exist_ok=True)
    written = [before_after_figure(runs, results, args.out / f"{stem}_before_after.png")]
    baseline = None
    if args.baseline:
        files = [load_runs(path) for path in args.baseline]
        unique = {(r["scheme"], r["modality"], r["layout"], r["seed"]): r for runs_, _ in files for r in runs_}
        baseline = list(unique.values()), files[0][1]
    written.append(long_video_figure(runs, results, args.out / f"{stem}_long_video.png", baseline))
    for path in written:
        if path is not None:
            print(path)


if __name__ == "__main__":
    main()
