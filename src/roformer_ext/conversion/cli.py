"""`roformer-ext-convert`: original RoFormer releases or transformers RoFormer folders -> roformer-ext folders."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from . import CheckpointConversionError

_ORIGINAL_HELP = """\
Convert an original ZhuiyiTechnology release (bert4keras TF checkpoint: bert_config.json,
bert_model.ckpt.*, vocab.txt). The variant is detected from the variables: v2 (no biases, no norm
parameters), sim (a pooler), else v1; gpt (causal LM) only with --variant gpt."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roformer-ext-convert", description="Convert RoFormer checkpoints into roformer-ext folders."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{original,transformers}")

    original = commands.add_parser("original", help="an original bert4keras/TF release", description=_ORIGINAL_HELP)
    original.add_argument(
        "src", metavar="SRC_DIR", help="folder with bert_config.json, bert_model.ckpt.* and vocab.txt"
    )
    original.add_argument("out", metavar="OUT_DIR", help="folder to create")
    original.add_argument(
        "--variant", choices=("v1", "sim", "gpt", "v2"), help="force the variant instead of detecting it"
    )
    original.add_argument(
        "--pooler-activation",
        choices=("linear", "tanh"),
        help="activation of the pooler, which the checkpoint does not record (default: linear for sim, tanh otherwise)",
    )
    original.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")

    transformers = commands.add_parser(
        "transformers", help="a transformers `model_type: roformer` folder or a junnyu `roformer` folder"
    )
    transformers.add_argument("src", metavar="SRC", help="folder with config.json and weights")
    transformers.add_argument("out", metavar="OUT_DIR", help="folder to create")
    transformers.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the converter; print the error and return 1 instead of a traceback for conversion errors."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        if args.command == "original":
            from .original import convert_original_checkpoint

            out = convert_original_checkpoint(
                args.src,
                args.out,
                variant=args.variant,
                pooler_activation=args.pooler_activation,
                force=args.force,
                command=shlex.join(["roformer-ext-convert", *argv]),
            )
        else:
            from .from_transformers import convert_transformers_checkpoint

            out = convert_transformers_checkpoint(args.src, args.out, force=args.force)
    except CheckpointConversionError as err:
        print(f"roformer-ext-convert: error: {err}", file=sys.stderr)
        return 1
    print(f"Wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
