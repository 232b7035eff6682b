"""Differences between encodings against the seed spread, from a position-lab results file.

For each encoding: the rise with length (loss at the longest eval length minus the loss at the training length) and
its difference from a reference encoding at the shortest and the longest length, each computed per seed (a seed
fixes the initialisation, the data order and the masks, so the same seed of two encodings saw the same batches) and
given as mean ± standard deviation over the seeds both have. Prints a Markdown table.

    python examples/position-lab/seed_summary.py benchmarks/results/extrapolation/extrapolation_causal.json
    python examples/position-lab/seed_summary.py RESULTS.json --reference rope --encodings alibi shaw deberta
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _mean_std(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:+.3f}" if values else "–"
    return f"{statistics.fmean(values):+.3f} ± {statistics.stdev(values):.3f}"


def summary(results: dict, reference: str = "rope", encodings: list[str] | None = None) -> str:
    runs = {(r["encoding"], r["seed"]): r for r in results["runs"]}
    names = list(dict.fromkeys(r["encoding"] for r in results["runs"]))
    names = [n for n in names if encodings is None or n in encodings]
    lengths = list(results["runs"][0]["eval"])
    short, long = lengths[0], lengths[-1]
    factor = int(long) // int(short)

    def loss(encoding: str, seed: int, length: str) -> float:
        return runs[encoding, seed]["eval"][length]["loss"]

    header = ["encoding", "seeds", f"{factor}× − 1×", f"− {reference} at 1×", f"− {reference} at {factor}×"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for name in names:
        seeds = sorted(s for (e, s) in runs if e == name)
        paired = [s for s in seeds if (reference, s) in runs]
        rise = [loss(name, s, long) - loss(name, s, short) for s in seeds]
        at_short = [loss(name, s, short) - loss(reference, s, short) for s in paired]
        at_long = [loss(name, s, long) - loss(reference, s, long) for s in paired]
        cells = [name, ",".join(map(str, seeds)), _mean_std(rise)]
        cells += ["–", "–"] if name == reference else [_mean_std(at_short), _mean_std(at_long)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", help="A results file (setup + runs) of run_extrapolation / bench_extrapolation.")
    parser.add_argument("--reference", default="rope", help="Encoding the differences are taken from (per seed).")
    parser.add_argument("--encodings", nargs="+", default=None, help="Rows to print (default: every encoding).")
    args = parser.parse_args(argv)
    text = summary(json.loads(Path(args.results).read_text()), args.reference, args.encodings)
    print(text)
    return text


if __name__ == "__main__":
    main()
