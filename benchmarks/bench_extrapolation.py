"""Length extrapolation of the position encodings: runs examples/position-lab/run_extrapolation.py (training only what
its results file lacks), then writes the table (mean ± standard deviation over seeds) and the figures.

    python benchmarks/bench_extrapolation.py --output_dir examples/position-lab/out --torch_threads 1
    python benchmarks/bench_extrapolation.py --output_dir examples/position-lab/out --objective causal --seeds 0
    python benchmarks/bench_extrapolation.py --output_dir examples/position-lab/out --report-only   # no training

Every argument other than this script's own (--out, --images, --report-only, --decay, --merge,
--merge-encodings, --collect) goes to the example script (its --help lists them). Writes
<out>/extrapolation_<objective>.{json,md}, <images>/extrapolation_<objective>.png and, with --decay,
<images>/position_decay_<objective>.png (the decay curves of the study's trained seed-0 models, or of
--decay_seed's). --collect joins results files of separate processes into one file for --merge.
"""

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

from bench_utils import load_average, markdown_table, write_results

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "position-lab" / "run_extrapolation.py"


def load_example():
    spec = importlib.util.spec_from_file_location("run_extrapolation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _check_same_study(setup: dict, other: dict) -> None:
    ignored = {"seeds", "encodings", "rope_scalings", "command", "load_average_before_after", "merged_commands"}
    mine = {k: v for k, v in setup.items() if k not in ignored}
    theirs = {k: v for k, v in other.items() if k not in ignored}
    if mine != theirs:
        changed = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        raise ValueError(f"Cannot merge results of a different study: {changed} differ.")


def merge_runs(results: dict, other: dict, encodings: list[str] | None = None) -> None:
    """Add `other`'s runs that `results` lacks; the two must be the same study (setup equal but for the seeds).

    `other` is one process's results file ({"setup", "runs"}) or several processes' joined by `collect`
    ({"setups", "runs"}: every setup must match). `encodings`: take only these encodings' runs."""
    setups = other["setups"] if "setups" in other else [other["setup"]]
    for setup in setups:
        _check_same_study(results["setup"], setup)
    seen = {(r["objective"], r["encoding"], r["seed"]) for r in results["runs"]}
    new = [r for r in other["runs"] if (r["objective"], r["encoding"], r["seed"]) not in seen]
    new = [r for r in new if encodings is None or r["encoding"] in encodings]
    results["runs"] += new
    commands = [s["command"] for s in setups if s["command"] not in results["setup"].get("merged_commands", [])]
    results["setup"]["merged_commands"] = results["setup"].get("merged_commands", []) + commands
    for key in ("seeds", "encodings"):  # what the merged file now holds
        held = [v for s in setups for v in s[key] if key == "seeds" or encodings is None or v in encodings]
        results["setup"][key] = list(dict.fromkeys([*results["setup"][key], *held]))


def collect(path: Path, files: list[str]) -> dict:
    """Append the runs of `files` (one process's results each) to `path`, a {"note", "setups", "runs"} file of runs
    made in separate processes; a run (objective, encoding, seed) already there is kept, not replaced."""
    joined = json.loads(path.read_text()) if path.is_file() else {"note": "", "setups": [], "runs": []}
    seen = {(r["objective"], r["encoding"], r["seed"]) for r in joined["runs"]}
    for file in files:
        other = json.loads(Path(file).read_text())
        if joined["setups"]:
            _check_same_study(joined["setups"][0], other["setup"])
        new = [r for r in other["runs"] if (r["objective"], r["encoding"], r["seed"]) not in seen]
        if new:
            joined["setups"].append(other["setup"])
            joined["runs"] += new
            seen |= {(r["objective"], r["encoding"], r["seed"]) for r in new}
    path.write_text(json.dumps(joined, indent=1) + "\n")
    return joined


def summarise(results: dict) -> tuple[list[str], list[str], dict]:
    """Encodings in study order, eval lengths, and {(encoding, length): (mean, std, n)} of the loss over seeds."""
    order = ["rope", "rope+linear", "rope+dynamic", "rope+yarn", "sinusoidal", "sinusoidal_scaled", "learned", "shaw"]
    order += ["t5_bias", "alibi", "transformer_xl", "tupe", "deberta"]
    order += ["none", "linear_attention"]
    names = dict.fromkeys(run["encoding"] for run in results["runs"])
    encodings = sorted(names, key=lambda name: order.index(name) if name in order else len(order))
    lengths = list(results["runs"][0]["eval"]) if results["runs"] else []
    cells = {}
    for encoding in encodings:
        runs = [r for r in results["runs"] if r["encoding"] == encoding]
        for length in lengths + ["train"]:
            values = [r["train_loss"] if length == "train" else r["eval"][length]["loss"] for r in runs]
            spread = statistics.stdev(values) if len(values) > 1 else None
            cells[encoding, length] = (statistics.fmean(values), spread, len(values))
    return encodings, lengths, cells


def _cell(mean: float, spread: float | None) -> str:
    return f"{mean:.3f}" if spread is None else f"{mean:.3f} ± {spread:.3f}"


def table(results: dict) -> str:
    encodings, lengths, cells = summarise(results)
    setup = results["setup"]
    train_length = setup["train_length"]
    header = ["encoding", "seeds", "train loss"] + [f"{int(n) // train_length}× ({n})" for n in lengths]
    rows = [
        [name, cells[name, "train"][2], _cell(*cells[name, "train"][:2])]
        + [_cell(*cells[name, n][:2]) for n in lengths]
        for name in encodings
    ]
    kind = "masked-LM loss on the masked tokens" if setup["objective"] == "mlm" else "next-token loss"
    return (
        f"{kind} (nats; perplexity = e^loss), mean ± standard deviation over seeds, at each eval length "
        f"(× the training length {train_length}). Unigram entropy of the training text: "
        f"{setup['unigram_entropy']:.3f}.\n\n" + markdown_table(header, rows)
    )


def plot(results: dict, path: Path) -> Path:
    from roformer_ext import plotting

    plt = plotting._pyplot()
    encodings, lengths, cells = summarise(results)
    setup = results["setup"]
    figure, axis = plt.subplots(figsize=(7.6, 4.8))
    x = [int(n) for n in lengths]
    # A model that never left the unigram plateau would squash the others into a line: listed, not drawn.
    plateau = setup["unigram_entropy"] - 0.1
    learnt = [name for name in encodings if cells[name, lengths[0]][0] < plateau]
    colours = plt.get_cmap("tab20").colors
    for index, name in enumerate(learnt):
        means = [cells[name, n][0] for n in lengths]
        spreads = [cells[name, n][1] or 0.0 for n in lengths]
        style = "--" if name.startswith("rope+") else "-"
        axis.errorbar(
            x,
            means,
            yerr=spreads,
            fmt=style,
            marker="o",
            markersize=3.5,
            capsize=2,
            label=name,
            color=colours[(2 * index) % 20 + (2 * index) // 20],
        )
    axis.axvline(setup["train_length"], color="black", linewidth=0.8, alpha=0.5)
    left_out = [name for name in encodings if name not in learnt]
    note = (
        f"\nnot drawn, loss within 0.1 of the unigram entropy {setup['unigram_entropy']:.2f}: " + ", ".join(left_out)
        if left_out
        else ""
    )
    axis.set_xscale("log", base=2)
    axis.set_xticks(x, [str(n) for n in x])
    axis.set_xlabel(f"eval length (tokens; trained at {setup['train_length']})")
    axis.set_ylabel("MLM loss (nats)" if setup["objective"] == "mlm" else "causal LM loss (nats)")
    seeds = max(cells[name, lengths[0]][2] for name in encodings)
    axis.set_title(f"Length extrapolation, {setup['objective']}, {seeds} seed(s){note}", fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    return plotting._save(figure, path, plt)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results/extrapolation", help="Table and JSON go here.")
    parser.add_argument("--images", default="docs/images", help="Figures go here.")
    parser.add_argument("--report-only", action="store_true", help="Train nothing; tabulate the results file.")
    parser.add_argument("--decay", action="store_true", help="Also draw the decay figure of the trained models.")
    parser.add_argument(
        "--merge",
        nargs="+",
        default=[],
        metavar="JSON",
        help="Results files of the same study run elsewhere (other seeds, in another process): their runs are added.",
    )
    parser.add_argument(
        "--merge-encodings",
        nargs="+",
        default=None,
        metavar="NAME",
        help="Take only these encodings' runs from the --merge files (e.g. those with every seed).",
    )
    parser.add_argument(
        "--collect",
        default=None,
        metavar="JSON",
        help="Append the runs of the --merge files to this {note, setups, runs} file and stop (no table, no training).",
    )
    own, rest = parser.parse_known_args(argv)
    if own.collect:
        return collect(Path(own.collect), own.merge)
    example = load_example()
    args = example.parse_args(rest)
    load_before = load_average()
    if own.report_only:
        results = example.load_results(args.results_path)
        if not results["runs"]:
            raise ValueError(f"{args.results_path} has no runs; drop --report-only to train them.")
    else:
        command = " ".join(["python benchmarks/bench_extrapolation.py", *(argv if argv is not None else sys.argv[1:])])
        results = example.run(args, command=command)
        results["setup"]["load_average_before_after"] = [load_before, load_average()]
    for path in own.merge:
        merge_runs(results, json.loads(Path(path).read_text()), own.merge_encodings)
    markdown = table(results)
    print(markdown)
    write_results(own.out, f"extrapolation_{args.objective}", results, markdown)
    print(plot(results, Path(own.images) / f"extrapolation_{args.objective}.png"))
    if own.decay:
        print(example.plot_trained_decay(args, Path(own.images) / f"position_decay_{args.objective}.png"))
    return results


if __name__ == "__main__":
    main()
