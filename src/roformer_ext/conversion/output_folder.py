"""All-or-nothing output folders written into a hidden sibling `.OUT.partial-PID-HEX8`, renamed to OUT once complete;
deleted are only that sibling, OUT with `force` (empty or our earlier output) and our siblings whose process is gone."""

import hashlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)


class CheckpointConversionError(ValueError):
    """A checkpoint cannot be converted as asked; the message names what is wrong and how to fix it."""


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


#: Bytes a hidden sibling adds to OUT's name: "." + ".partial-" + a pid (at most 10 digits) + "-" + 8 hex digits.
_SIBLING_OVERHEAD = 1 + len(".partial-") + 10 + 1 + 8


def _name_max(folder: Path) -> int:
    """The longest file name in bytes on the file system of `folder` or its nearest existing parent (else 255)."""
    for parent in (folder, *folder.parents):
        if os.path.isdir(parent):  # os.path.isdir, unlike Path.is_dir, is False (not an error) for a too-long name
            try:
                return os.pathconf(parent, "PC_NAME_MAX")
            except (OSError, ValueError, AttributeError):  # no pathconf on Windows
                break
    return 255


def refuse_long_names(out: Path) -> None:
    """Every component of `out` fits the file system's name limit; else one error before anything is written."""
    limit = _name_max(out.parent)
    for part in out.parts[1:]:
        size = len(os.fsencode(part))
        if size > limit:
            raise CheckpointConversionError(
                f"Output {out}: the name {part[:16]}... is {size} bytes, but file names here may have at most {limit} "
                "bytes; choose a shorter name for OUT_DIR (nothing was written)."
            )


def sibling_stem(out: Path) -> str:
    """OUT's name in our siblings: the name, or when the suffix would not fit, cut short plus `~` and its hash."""
    name = os.fsencode(out.name)
    room = _name_max(out.parent) - _SIBLING_OVERHEAD
    if len(name) <= room:
        return out.name
    digest = hashlib.sha256(name).hexdigest()[:8]
    return name[: room - 9].decode(errors="ignore") + "~" + digest  # a cut multi-byte character is dropped


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # someone else's process
        pass
    return True


def clear_leftovers(out: Path) -> None:
    """Remove our siblings of `out` whose process is gone; an `.old` one that is the only copy of OUT is an error."""
    if not out.parent.is_dir():
        return
    pattern = re.compile(rf"\.{re.escape(sibling_stem(out))}\.(?P<kind>partial|old)-(?P<pid>\d+)-[0-9a-f]{{8}}")
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
    old = out.parent / f".{sibling_stem(out)}.old-{tag}"
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
    """Yield an empty folder next to `out` that becomes `out` on success and is deleted on error."""
    out = Path(out).absolute()
    refuse_long_names(out)
    refuse_overlap(out, sources)
    clear_leftovers(out)
    refuse_existing(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = out.parent / f".{sibling_stem(out)}.partial-{tag}"
    tmp.mkdir()
    try:
        yield tmp
        refuse_existing(out, force)  # it may have appeared, or changed, while we were converting
        _swap_in(tmp, out, tag)
    finally:
        if tmp.exists():
            _remove(tmp)
