"""`roformer-ext` console script (also `python -m roformer_ext.cli`).

`roformer-ext export MODEL_DIR OUT_DIR [--task TASK] [--int8]` writes OUT_DIR/model.onnx (dynamic batch and
length), the tokenizer and config beside it, and with `--int8` ONNX Runtime's dynamic int8 `model_int8.onnx`
(`roformer_ext.export`; needs the `onnx` extra). Load them with `roformer_ext.export.OnnxModel.from_pretrained`.

`roformer-ext push-code OWNER/NAME [--source DIR]` publishes (or updates) the code files in a Hub code repository;
`roformer-ext share-code FOLDER OWNER/NAME` makes a saved folder load its code from there instead of carrying copies;
`roformer-ext update-code FOLDER` replaces a folder's copies by this installed version's (`roformer_ext.hub_code`).

`roformer-ext plot --out DIR` writes `positions.png` (where every position scheme puts a text–image–text
layout) and `long_range_decay.png` (RoPE's long-term decay, RoFormer §3.4.3). Needs matplotlib, the `plot`
extra; without it the command exits with the pip command to run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="roformer-ext", description="roformer-ext utilities.")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{plot,export,push-code,share-code,update-code}"
    )
    plot = commands.add_parser(
        "plot",
        help="draw the position schemes and RoPE's long-range decay",
        description="Write positions.png and long_range_decay.png into --out.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    plot.add_argument("--out", default=".", help="folder for the PNG files")
    plot.add_argument("--text-before", type=_count, default=5, help="text tokens before the image")
    plot.add_argument("--image-rows", type=_positive, default=3, help="patch rows of the image (h)")
    plot.add_argument("--image-cols", type=_positive, default=4, help="patch columns of the image (w)")
    plot.add_argument("--text-after", type=_count, default=4, help="text tokens after the image")
    plot.add_argument(
        "--max-distance", type=_positive, default=256, help="largest relative distance of the decay curve"
    )
    plot.add_argument("--dim", type=_even, default=128, help="head dimension d of the decay curve")
    plot.add_argument("--base", type=float, default=10000.0, help="RoPE base: θ_i = base^(-2i/d)")
    from .export import TASK_OUTPUTS

    export = commands.add_parser(
        "export",
        help="export an encoder to ONNX (fp32, and int8 with --int8)",
        description="Write OUT_DIR/model.onnx (+ model_int8.onnx with --int8), the tokenizer and the config.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    export.add_argument("model_dir", help="a saved roformer-ext folder (save_pretrained / the examples' output)")
    export.add_argument("out_dir", help="folder for the ONNX files")
    export.add_argument(
        "--task",
        choices=sorted(TASK_OUTPUTS),
        default=None,
        help="what the graph returns (default: from the folder's architectures; sentence-embedding for a base "
        "model with a pooler, as RoFormer-Sim)",
    )
    export.add_argument("--int8", action="store_true", help="also write ONNX Runtime's dynamic int8 model_int8.onnx")
    export.add_argument(
        "--force",
        action="store_true",
        help="replace an existing OUT_DIR (only an empty folder or an earlier roformer-ext export)",
    )
    export.add_argument(
        "--example-length", type=_positive, default=16, help="tokens per row of the batch the graph is traced on"
    )
    _add_code_commands(commands)
    return parser


def _add_code_commands(commands: Any) -> None:
    """push-code, share-code and update-code (`commands`: what `add_subparsers` returned)."""
    push = commands.add_parser(
        "push-code",
        help="publish or update the code files in a Hub code repository",
        description="Upload roformer-ext's code files to OWNER/NAME (created if needed), one commit. Checkpoints "
        "whose auto_map names OWNER/NAME--... load this code from then on.",
    )
    push.add_argument("code_repo", metavar="OWNER/NAME", help="the code repository on the Hub")
    push.add_argument("--source", help="folder to publish the code files from (default: the installed package)")
    push.add_argument("--revision", help="branch to commit to (default: main)")
    push.add_argument("--private", action="store_true", help="create the repository private")
    push.add_argument("--message", help="commit message")
    share = commands.add_parser(
        "share-code",
        help="make a saved folder load its code from a code repository",
        description="Point every auto_map in FOLDER at OWNER/NAME and remove the code files it carries.",
    )
    share.add_argument("folder", help="a saved roformer-ext folder")
    share.add_argument("code_repo", metavar="OWNER/NAME", help="the code repository (see push-code)")
    update = commands.add_parser(
        "update-code",
        help="replace a saved folder's code files by this installed version's",
        description="For a folder that carries its own code: write this version's code files into it.",
    )
    update.add_argument("folder", help="a saved roformer-ext folder")


def _code_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from . import hub_code

    try:
        if args.command == "push-code":
            print(
                hub_code.push_code(
                    args.code_repo,
                    private=args.private or None,
                    revision=args.revision,
                    commit_message=args.message,
                    source=args.source,
                )
            )
        elif args.command == "share-code":
            hub_code.share_code(args.folder, args.code_repo)
            print(f"{args.folder} now loads its code from {args.code_repo}")
        else:
            for path in hub_code.update_code(args.folder):
                print(path)
    except (OSError, ValueError) as error:
        parser.exit(1, f"roformer-ext {args.command}: {error}\n")
    return 0


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a count >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _even(text: str) -> int:
    value = _positive(text)
    if value % 2:
        raise argparse.ArgumentTypeError(f"expected an even dimension, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "export":
        return _export(parser, args)
    if args.command in ("push-code", "share-code", "update-code"):
        return _code_command(parser, args)

    from .plotting import plot_long_range_decay, plot_positions

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        parser.exit(1, f"roformer-ext plot: --out {out} is a file; give a folder (it is created if missing).\n")
    try:
        written = [
            plot_positions(out / "positions.png", args.text_before, args.image_rows, args.image_cols, args.text_after),
            plot_long_range_decay(out / "long_range_decay.png", args.max_distance, args.dim, args.base),
        ]
    except ImportError as error:  # matplotlib missing: say what to install, without a traceback
        parser.exit(1, f"roformer-ext plot: {error}\n")
    except OSError as error:  # a folder that cannot be made or written (a file on the way, permissions)
        parser.exit(1, f"roformer-ext plot: cannot write into --out {out}: {error}\n")
    for path in written:
        print(path)
    return 0


def _export(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        from .export import export_folder

        written = export_folder(
            args.model_dir, args.out_dir, args.task, args.int8, args.example_length, force=args.force
        )
    except ImportError as error:  # onnx / onnxscript / onnxruntime missing
        parser.exit(1, f"roformer-ext export: {error} (in the roformer-ext clone: pip install -e '.[onnx]')\n")
    except (OSError, ValueError, TypeError) as error:
        parser.exit(1, f"roformer-ext export: {error}\n")
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
