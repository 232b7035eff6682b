"""All-or-nothing output folders for converters, which never delete what they did not write.

A conversion writes several files (config, weights, tokenizer, model card); a crash half-way must not leave
a folder that looks usable. So everything goes into a hidden sibling folder, which replaces OUT by a rename
only once every file is written, and is removed on any error.

What may be deleted is narrow: OUT only with `force` and only when it is empty or an earlier roformer-ext output
(config.json with model_type "roformer_ext"), never a folder that is, holds or sits inside a source, and of the
hidden siblings only those named by our own pattern whose process is gone.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import CheckpointConversionError

logger = logging.getLogger(__name__)


class OutputExistsError(CheckpointConversionError):
    """OUT already exists and `force` was not given, or `force` may not replace it."""


class OutputOverlapsSourceError(CheckpointConversionError):
    """OUT is, contains or is inside a source folder: writing or replacing it would destroy the source."""


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def refuse_overlap(out: Path, sources: Iterable[str | os.PathLike]) -> None:
    """Raise when `out` (symlinks resolved) is a source, holds one, or lies inside one."""
    target = Path(out).resolve()
    for source in sources:
        resolved = Path(source).resolve()
        if target == resolved:
            relation = "is the source folder"
        elif target.is_relative_to(resolved):
            relation = f"is inside the source folder {source}"
        elif resolved.is_relative_to(target):
            relation = f"contains the source folder {source}"
        else:
            continue
        raise OutputOverlapsSourceError(
            f"Output {out} {relation}; choose an OUT_DIR outside the source (nothing was written or deleted)."
        )


# ------------------------------------------------------------------------ leftovers of interrupted runs
def _leftover_pattern(out: Path) -> re.Pattern[str]:
    """Our own hidden sibling names: `.OUT.partial-PID-HEX8` (being written), `.OUT.old-PID-HEX8` (moved aside)."""
    return re.compile(rf"\.{re.escape(out.name)}\.(?P<kind>partial|old)-(?P<pid>\d+)-[0-9a-f]{{8}}")


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OverflowError:
        return False
    return True


def clear_leftovers(out: Path) -> None:
    """Remove our siblings of `out` left by a killed run; an `.old` one that is the only copy of OUT is an error.

    A sibling whose process still runs belongs to a conversion in progress and is left alone.
    """
    if not out.parent.is_dir():
        return
    pattern = _leftover_pattern(out)
    for path in sorted(out.parent.iterdir()):
        match = pattern.fullmatch(path.name)
        if match is None or _process_alive(int(match["pid"])):
            continue
        if match["kind"] == "old" and not (out.exists() or out.is_symlink()):
            raise OutputExistsError(
                f"{path} is the previous {out.name}, moved aside by an interrupted conversion and not put back; "
                f"rename it to {out.name} (or delete it), then run again."
            )
        _remove(path)
        logger.info("Removed %s, left by an interrupted conversion.", path)


# ------------------------------------------------------------------------------------------ replacing
def _written_by_us(folder: Path) -> bool:
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type") == "roformer_ext"
    except (OSError, ValueError, AttributeError):
        return False


def refuse_existing(out: Path, force: bool) -> None:
    """An existing `out` needs `force`, and even then only an empty folder or an earlier roformer-ext output."""
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise OutputExistsError(
            f"Output {out} already exists; choose another folder or pass --force (force=True) to replace it."
        )
    if out.is_symlink():
        reason = "is a symbolic link"
    elif not out.is_dir():
        reason = "is a file, not a folder"
    elif any(out.iterdir()) and not _written_by_us(out):
        reason = "is not a roformer-ext folder (no config.json with model_type 'roformer_ext')"
    else:
        return
    raise OutputExistsError(
        f"Output {out} {reason}; --force only replaces an empty folder or an earlier roformer-ext output. "
        "Remove it yourself or choose another OUT_DIR."
    )


def _swap_in(tmp: Path, out: Path, tag: str) -> None:
    """Move the finished `tmp` to `out`; an existing `out` is moved aside first and deleted only afterwards."""
    if not (out.exists() or out.is_symlink()):
        os.replace(tmp, out)
        return
    old = out.parent / f".{out.name}.old-{tag}"
    os.replace(out, old)
    try:
        os.replace(tmp, out)
    except BaseException:
        os.replace(old, out)
        raise
    _remove(old)


@contextmanager
def output_folder(
    out: str | os.PathLike, force: bool = False, sources: Iterable[str | os.PathLike] = ()
) -> Iterator[Path]:
    """Yield an empty temporary folder next to `out`; on success it becomes `out`, on error it is deleted.

    `out` may not overlap any of `sources`. An existing `out` is refused unless `force`, and replaced only when
    it is empty or an earlier roformer-ext output, and only after the new folder is complete (the old one stays
    in place if the conversion fails). Leftovers of a killed earlier run are cleared first.
    """
    out = Path(out).absolute()
    refuse_overlap(out, sources)
    clear_leftovers(out)
    refuse_existing(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = out.parent / f".{out.name}.partial-{tag}"
    tmp.mkdir()
    try:
        yield tmp
        refuse_existing(out, force)  # it may have appeared, or changed, while we were converting
        _swap_in(tmp, out, tag)
    finally:
        if tmp.exists():
            _remove(tmp)


__all__ = ["OutputExistsError", "OutputOverlapsSourceError", "clear_leftovers", "output_folder", "refuse_overlap"]
