"""`roformer-ext-convert`: original RoFormer releases or transformers RoFormer folders -> roformer-ext folders."""

import argparse
import errno
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from .files import CheckpointConversionError, one_line
from .from_transformers import convert_transformers_checkpoint
from .original import VARIANTS, convert_original_checkpoint

_ORIGINAL_HELP = """\
Convert an original ZhuiyiTechnology release (bert4keras TF checkpoint: bert_config.json,
bert_model.ckpt.*, vocab.txt). The variant is detected from the variables: v2 (no biases, no norm
parameters), sim (a pooler), else v1; gpt (causal LM) only with --variant gpt. OUT_DIR may not be,
hold or lie inside SRC_DIR; --force replaces only an empty folder or an earlier roformer-ext output."""

_TRANSFORMERS_HELP = """\
Convert a transformers `model_type: roformer` folder: one written by transformers' RoFormer, or one of
junnyu's Hub folders (his `roformer` package: v1, V2 with `use_bias: false` and a norm_type other than
layer_norm, Sim with a pooler). The kind is detected from config.json and the weight names."""


_CODE_REPO_HELP = (
    "load the code from this Hub code repository (published with `roformer-ext push-code`) instead of carrying copies"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roformer-ext-convert", description="Convert RoFormer checkpoints into roformer-ext folders."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{original,transformers}")
    original = commands.add_parser("original", help="an original bert4keras/TF release", description=_ORIGINAL_HELP)
    original.add_argument(
        "src", metavar="SRC_DIR", help="folder with bert_config.json, bert_model.ckpt.* and vocab.txt"
    )
    original.add_argument("--variant", choices=VARIANTS, help="force the variant instead of detecting it")
    transformers = commands.add_parser(
        "transformers",
        help="a transformers `model_type: roformer` folder or a junnyu `roformer` folder",
        description=_TRANSFORMERS_HELP,
    )
    transformers.add_argument("src", metavar="SRC", help="folder with config.json and weights")
    for command in (original, transformers):
        command.add_argument("out", metavar="OUT_DIR", help="folder to create")
        pooler_help = (
            "activation of the pooler, which the checkpoint does not record (default: linear for sim, tanh otherwise)"
            if command is original
            else "activation of a pooler (roformer.pooler.dense) when config.json has no pooler_activation"
        )
        command.add_argument("--pooler-activation", choices=("linear", "tanh"), help=pooler_help)
        command.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
        command.add_argument("--code-repo", metavar="OWNER/NAME", help=_CODE_REPO_HELP)
    return parser


class _CliFormatter(logging.Formatter):
    """`roformer-ext-convert: message`, with `warning: ` before warnings, as the errors are printed."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"roformer-ext-convert: {level}{record.getMessage()}"


@contextmanager
def _report_to_stderr() -> Iterator[None]:
    """Show the converters' info and warnings (detected variant, missing vocabulary) on stderr for this run."""
    logger, handler = logging.getLogger(__package__), logging.StreamHandler(sys.stderr)
    handler.setFormatter(_CliFormatter())
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the converter; print the error and return 1 instead of a traceback for conversion errors."""
    args = build_parser().parse_args(argv)
    options = dict(pooler_activation=args.pooler_activation, force=args.force, code_repo=args.code_repo)
    try:
        with _report_to_stderr():
            if args.command == "original":
                out = convert_original_checkpoint(args.src, args.out, variant=args.variant, **options)
            else:
                out = convert_transformers_checkpoint(args.src, args.out, **options)
    except CheckpointConversionError as err:
        print(f"roformer-ext-convert: error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # the file system refused (full disk, permissions, a path too long): not a bug of ours
        print(f"roformer-ext-convert: error: {_os_error_line(err)}", file=sys.stderr)
        return 1
    print(f"Wrote {out}")
    return 0


_DISK = "free some space or choose an OUT_DIR on another disk"
_PERMISSIONS = "check the permissions of that path, or choose an OUT_DIR you can write to"
_OS_ERROR_FIXES = {
    errno.ENOSPC: _DISK, errno.EDQUOT: _DISK, errno.EACCES: _PERMISSIONS, errno.EPERM: _PERMISSIONS,
    errno.EROFS: "choose an OUT_DIR on a writable file system", errno.ENAMETOOLONG: "choose a shorter path",
}  # fmt: skip


def _os_error_line(err: OSError) -> str:
    """`What happened: path; the fix`, on one line (output_folder has already removed its temporary folder)."""
    where = " -> ".join(str(name) for name in (err.filename, err.filename2) if name is not None)
    what = err.strerror or one_line(err)
    fix = _OS_ERROR_FIXES.get(err.errno, "check the path and run again")
    return f"{what}{': ' + where if where else ''}; {fix}."
