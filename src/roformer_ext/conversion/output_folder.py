"""All-or-nothing output folders for converters.

A conversion writes several files (config, weights, tokenizer, model card); a crash half-way must not leave
a folder that looks usable. So everything goes into a hidden sibling folder, which replaces OUT by a rename
only once every file is written, and is removed on any error.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import CheckpointConversionError


class OutputExistsError(CheckpointConversionError):
    """OUT already exists and `force` was not given."""


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _refuse_existing(out: Path) -> None:
    raise OutputExistsError(
        f"Output {out} already exists; choose another folder or pass --force (force=True) to replace it."
    )


@contextmanager
def output_folder(out: str | os.PathLike, force: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder next to `out`; on success it becomes `out`, on error it is deleted.

    An existing `out` is refused unless `force`, in which case it is replaced only after the new folder is
    complete (the old one stays in place if the conversion fails).
    """
    out = Path(out).absolute()
    if (out.exists() or out.is_symlink()) and not force:
        _refuse_existing(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = out.parent / f".{out.name}.partial-{tag}"
    tmp.mkdir()
    try:
        yield tmp
        if out.exists() or out.is_symlink():
            if not force:  # appeared while we were converting
                _refuse_existing(out)
            old = out.parent / f".{out.name}.old-{tag}"
            os.replace(out, old)
            try:
                os.replace(tmp, out)
            except BaseException:
                os.replace(old, out)
                raise
            _remove(old)
        else:
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            _remove(tmp)


__all__ = ["OutputExistsError", "output_folder"]
