#!/usr/bin/env python
"""Fetch transformers' common model tests (`ModelTesterMixin`, `ConfigTester`, `TensorParallelTesterMixin`,
`FSDPTesterMixin`) for the installed transformers: they are only in its sdist on PyPI. Downloads it with pip, checks
the version, extracts those files into `upstream/` (gitignored) next to our stand-ins for what they import. Does
nothing when the files there were fetched for the installed version.
"""

import argparse
import hashlib
import importlib.metadata
import json
import subprocess
import sys
import tarfile
import tempfile
from email.parser import Parser
from pathlib import Path

UPSTREAM_DIR = Path(__file__).resolve().parent / "upstream"
#: Paths inside the sdist, below its `transformers-<version>/` folder.
UPSTREAM_FILES = (
    "tests/test_modeling_common.py",
    "tests/test_configuration_common.py",
    "tests/test_tensor_parallel_mixin.py",
    "tests/test_fsdp_mixin.py",
)
#: What was fetched, for which version: the test modules refuse stale files.
STAMP = UPSTREAM_DIR / "fetched_common_tests.json"
FETCH_COMMAND = "python tests/transformers_suite/fetch_upstream.py"


class FetchError(RuntimeError):
    """The sdist could not be downloaded, is another version, or lacks the files."""


def installed_transformers_version() -> str:
    return importlib.metadata.version("transformers")


def fetched_version() -> str | None:
    """The transformers version the files in UPSTREAM_DIR come from, or None when they are missing or edited."""
    try:
        stamp = json.loads(STAMP.read_text())
        for name, digest in stamp["sha256"].items():
            if hashlib.sha256((UPSTREAM_DIR / name).read_bytes()).hexdigest() != digest:
                return None
        if sorted(stamp["sha256"]) != sorted(Path(path).name for path in UPSTREAM_FILES):
            return None
        return stamp["transformers_version"]
    except (OSError, KeyError, ValueError):
        return None


def download_sdist(version: str, destination: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", f"transformers=={version}", "--no-deps", "--no-binary", ":all:",
               "--dest", str(destination)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise FetchError(
            f"`{' '.join(command)}` failed (exit {result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    archives = sorted(destination.glob("transformers-*.tar.gz"))
    if len(archives) != 1:
        found = [path.name for path in destination.iterdir()]
        raise FetchError(f"pip download left {found}, expected one transformers sdist.")
    return archives[0]


def extract_common_tests(sdist: Path, version: str) -> dict[str, bytes]:
    """The UPSTREAM_FILES from `sdist`, after checking its PKG-INFO names transformers at `version`."""
    root = f"transformers-{version}"
    try:
        with tarfile.open(sdist, "r:gz") as archive:
            names = set(archive.getnames())
            if f"{root}/PKG-INFO" not in names:
                raise FetchError(f"{sdist.name} has no {root}/PKG-INFO: it is not the sdist of transformers {version}.")
            metadata = Parser().parsestr(archive.extractfile(f"{root}/PKG-INFO").read().decode())
            if metadata["Name"].lower() != "transformers" or metadata["Version"] != version:
                raise FetchError(
                    f"{sdist.name} is {metadata['Name']} {metadata['Version']}, but transformers {version} is "
                    "installed: the common tests must come from the installed version."
                )
            missing = [path for path in UPSTREAM_FILES if f"{root}/{path}" not in names]
            if missing:
                raise FetchError(f"{sdist.name} lacks {missing}.")
            return {Path(path).name: archive.extractfile(f"{root}/{path}").read() for path in UPSTREAM_FILES}
    except (tarfile.TarError, OSError) as err:
        raise FetchError(f"{sdist} is not a readable .tar.gz: {err}") from err


def write_files(files: dict[str, bytes], version: str) -> None:
    for name, data in files.items():
        partial = UPSTREAM_DIR / f"{name}.partial"
        partial.write_bytes(data)
        partial.replace(UPSTREAM_DIR / name)
    stamp = {
        "transformers_version": version,
        "sha256": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
    }
    STAMP.write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")


def fetch(sdist: Path | None = None, force: bool = False) -> str:
    """Make UPSTREAM_DIR hold the common tests of the installed transformers; returns what was done."""
    version = installed_transformers_version()
    if not force and sdist is None and fetched_version() == version:
        return f"transformers {version} common tests already in {UPSTREAM_DIR}"
    with tempfile.TemporaryDirectory() as tmp:
        archive = sdist if sdist is not None else download_sdist(version, Path(tmp))
        files = extract_common_tests(archive, version)
    write_files(files, version)
    return f"extracted {', '.join(files)} of transformers {version} into {UPSTREAM_DIR}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, help="use this transformers-<version>.tar.gz instead of downloading")
    parser.add_argument("--force", action="store_true", help="fetch again even when the files are up to date")
    args = parser.parse_args(argv)
    try:
        print(fetch(args.sdist, args.force))
    except FetchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
