"""fetch_upstream.py takes the upstream files only from the installed version's sdist and notices stale files."""

import io
import tarfile
from pathlib import Path

import pytest

from . import fetch_upstream


def make_sdist(path: Path, version: str, files=fetch_upstream.UPSTREAM_FILES, metadata_version=None) -> Path:
    """A tiny stand-in sdist: PKG-INFO plus the given test files under `transformers-<version>/`."""
    root = f"transformers-{version}"
    metadata = f"Metadata-Version: 2.1\nName: transformers\nVersion: {metadata_version or version}\n"
    entries = {f"{root}/PKG-INFO": metadata}
    entries.update({f"{root}/{file}": f"# {file} of {version}\n" for file in files})
    with tarfile.open(path, "w:gz") as archive:
        for member, text in entries.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def upstream_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "upstream"
    target.mkdir()
    monkeypatch.setattr(fetch_upstream, "UPSTREAM_DIR", target)
    monkeypatch.setattr(fetch_upstream, "STAMP", target / "fetched_common_tests.json")
    return target


def test_extracts_the_files_and_records_the_version(tmp_path, upstream_dir):
    version = fetch_upstream.installed_transformers_version()
    sdist = make_sdist(tmp_path / f"transformers-{version}.tar.gz", version)
    fetch_upstream.fetch(sdist)
    names = [
        "test_configuration_common.py",
        "test_fsdp_mixin.py",
        "test_modeling_common.py",
        "test_tensor_parallel_mixin.py",
    ]
    assert sorted(path.name for path in upstream_dir.glob("test_*.py")) == names
    assert (upstream_dir / "test_modeling_common.py").read_text() == f"# tests/test_modeling_common.py of {version}\n"
    assert fetch_upstream.fetched_version() == version
    # A second run finds them up to date and downloads nothing.
    assert "already" in fetch_upstream.fetch()


def test_another_version_or_a_missing_file_is_refused(tmp_path, upstream_dir):
    installed = fetch_upstream.installed_transformers_version()
    with pytest.raises(fetch_upstream.FetchError, match=f"transformers-{installed}/PKG-INFO"):
        fetch_upstream.extract_common_tests(make_sdist(tmp_path / "old.tar.gz", "4.0.0"), installed)
    other = make_sdist(tmp_path / "other.tar.gz", installed, metadata_version="4.0.0")  # laid out right, metadata not
    with pytest.raises(fetch_upstream.FetchError, match="must come from the installed version"):
        fetch_upstream.extract_common_tests(other, installed)
    partial = make_sdist(tmp_path / "partial.tar.gz", installed, files=("tests/test_modeling_common.py",))
    with pytest.raises(fetch_upstream.FetchError, match="lacks"):
        fetch_upstream.extract_common_tests(partial, installed)


def test_edited_or_missing_files_read_as_not_fetched(tmp_path, upstream_dir):
    version = fetch_upstream.installed_transformers_version()
    fetch_upstream.fetch(make_sdist(tmp_path / "sdist.tar.gz", version))
    (upstream_dir / "test_configuration_common.py").write_text("# edited\n")
    assert fetch_upstream.fetched_version() is None
    (upstream_dir / "test_configuration_common.py").unlink()
    assert fetch_upstream.fetched_version() is None
    assert fetch_upstream.main(["--sdist", str(tmp_path / "missing.tar.gz")]) == 1
