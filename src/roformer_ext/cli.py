"""The `roformer-ext` console script (also `python -m roformer_ext.cli`): export, the code commands, plot."""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _integer(low: int, even: bool = False):
    def parse(text: str) -> int:
        value = int(text)
        if value < low or (even and value % 2):
            raise argparse.ArgumentTypeError(f"expected an {'even ' if even else ''}integer >= {low}, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    from .export import TASK_OUTPUTS

    parser = argparse.ArgumentParser(prog="roformer-ext", description="roformer-ext utilities.")
    commands = parser.add_subparsers(dest="command", required=True)
    defaults = argparse.ArgumentDefaultsHelpFormatter
    plot = commands.add_parser("plot", help="draw the position schemes and RoPE's decay", formatter_class=defaults)
    plot.add_argument("--out", default=".", help="folder for positions.png and long_range_decay.png")
    plot.add_argument("--text-before", type=_integer(0), default=5, help="text tokens before the image")
    plot.add_argument("--image-rows", type=_integer(1), default=3, help="patch rows of the image (h)")
    plot.add_argument("--image-cols", type=_integer(1), default=4, help="patch columns of the image (w)")
    plot.add_argument("--text-after", type=_integer(0), default=4, help="text tokens after the image")
    plot.add_argument("--max-distance", type=_integer(1), default=256, help="largest distance of the decay curve")
    plot.add_argument("--dim", type=_integer(1, even=True), default=128, help="head dimension d of the decay curve")
    plot.add_argument("--base", type=float, default=10000.0, help="RoPE base: θ_i = base^(-2i/d)")

    export = commands.add_parser("export", help="export an encoder to ONNX (fp32; int8 too)", formatter_class=defaults)
    export.add_argument("model_dir", help="a saved roformer-ext folder")
    export.add_argument("out_dir", help="folder for the ONNX files, the tokenizer and the config")
    export.add_argument("--task", choices=sorted(TASK_OUTPUTS), help="what the graph returns (default: the folder's)")
    export.add_argument("--int8", action="store_true", help="also write ONNX Runtime's dynamic int8 model_int8.onnx")
    export.add_argument("--force", action="store_true", help="replace an earlier export in OUT_DIR")
    export.add_argument("--example-length", type=_integer(1), default=16, help="tokens per row the graph is traced on")

    push = commands.add_parser("push-code", help="publish or update the code files in a Hub code repository")
    push.add_argument("code_repo", metavar="OWNER/NAME", help="the code repository on the Hub (created if needed)")
    push.add_argument("--source", help="folder to publish the code files from (default: the installed package)")
    push.add_argument("--revision", help="branch to commit to (default: main)")
    push.add_argument("--private", action="store_true", help="create the repository private")
    push.add_argument("--message", help="commit message")
    share = commands.add_parser("share-code", help="make a saved folder load its code from a code repository")
    share.add_argument("folder", help="a saved roformer-ext folder")
    share.add_argument("code_repo", metavar="OWNER/NAME", help="the code repository (see push-code)")
    update = commands.add_parser("update-code", help="replace a saved folder's code files by this installed version's")
    update.add_argument("folder", help="a saved roformer-ext folder")
    return parser


def _run(args: argparse.Namespace) -> list:
    """What the command wrote or says, one line each."""
    if args.command == "export":
        from .export import export_folder

        return export_folder(args.model_dir, args.out_dir, args.task, args.int8, args.example_length, force=args.force)
    if args.command == "plot":
        from .plotting import plot_long_range_decay, plot_positions

        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(f"--out {out} is a file; give a folder (it is created if missing).")
        try:
            return [
                plot_positions(
                    out / "positions.png", args.text_before, args.image_rows, args.image_cols, args.text_after
                ),
                plot_long_range_decay(out / "long_range_decay.png", args.max_distance, args.dim, args.base),
            ]
        except OSError as error:  # a folder that cannot be made or written (a file on the way, permissions)
            raise OSError(f"cannot write into --out {out}: {error}") from None
    from . import hub_code

    if args.command == "push-code":
        options = dict(private=args.private or None, revision=args.revision, commit_message=args.message)
        return [hub_code.push_code(args.code_repo, source=args.source, **options)]
    if args.command == "share-code":
        hub_code.share_code(args.folder, args.code_repo)
        return [f"{args.folder} now loads its code from {args.code_repo}"]
    return hub_code.update_code(args.folder)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        lines = _run(args)
    except ImportError as error:  # an optional extra missing: say what to install, without a traceback
        hint = " (in the roformer-ext clone: pip install -e '.[onnx]')" if args.command == "export" else ""
        parser.exit(1, f"roformer-ext {args.command}: {error}{hint}\n")
    except (OSError, ValueError, TypeError) as error:
        parser.exit(1, f"roformer-ext {args.command}: {error}\n")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
