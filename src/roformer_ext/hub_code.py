"""Where a saved folder's code lives: copies in the folder, or one shared code repository that every `auto_map` names
(`owner/name--module.Class`), so a fix published there reaches every checkpoint (as jinaai's BERT family does)."""

import json
import os
import shutil
import tempfile
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from huggingface_hub.utils import validate_repo_id
from transformers import PreTrainedModel
from transformers.dynamic_module_utils import get_relative_import_files

from .compat import LOWEST_TRANSFORMERS, SUPPORTED_RANGE, TRANSFORMERS_BELOW, parent_upload_modified_files

#: The modules the Auto classes load; their relative imports come along.
CODE_MODULES = (
    "configuration_roformer_ext",
    "modeling_roformer_ext",
    "modeling_roformer_ext_vision",
    "tokenization_roformer_ext",
    "processing_roformer_ext",
    "image_processing_roformer_ext",
)
AUTO_MAP_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")
MODEL_TYPES = ("roformer_ext", "roformer_ext_vision")
_CARD_START, _CARD_END = "<!-- roformer-ext compatibility -->", "<!-- /roformer-ext compatibility -->"


def check_code_repo(code_repo: Any) -> str:
    """`code_repo` if huggingface_hub accepts it as "owner/name", else a ValueError naming the id and the rule."""
    try:
        if not isinstance(code_repo, str) or code_repo.count("/") != 1:
            raise ValueError("it names no owner, or more than one folder.")
        validate_repo_id(code_repo)
    except ValueError as error:  # huggingface_hub's HFValidationError is one
        raise ValueError(
            f"code_repo must be a Hub model repository id 'owner/name', got {code_repo!r}: {error} Publish the code "
            "there with `roformer-ext push-code owner/name`."
        ) from None
    return code_repo


def check_saved_folder(folder: str | os.PathLike) -> Path:
    """`folder` as a Path, or why it is not a saved roformer-ext folder (FileNotFoundError / ValueError)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} is not a saved model folder (it has no config.json).")
    model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"{folder} is not a roformer-ext folder: its config.json has model_type {model_type!r}, not one of "
            f"{list(MODEL_TYPES)}. The code commands change only roformer-ext's folders; nothing was changed."
        )
    return folder


def code_files(source: str | os.PathLike | None = None) -> list[Path]:
    """The Auto classes' modules and everything they import, from `source` (default: this installed package)."""
    here = Path(source).resolve() if source is not None else Path(__file__).resolve().parent
    if not (here / "modeling_roformer_ext.py").is_file():
        raise FileNotFoundError(f"{here} holds no roformer-ext code (no modeling_roformer_ext.py).")
    files = {here / "hub_code.py"}
    for module in CODE_MODULES:
        path = here / f"{module}.py"
        if path.exists():
            files |= {path, *map(Path, get_relative_import_files(str(path)))}
    return sorted(files)


def _auto_map_refs(auto_map: dict | None) -> list[str]:
    """Every class reference of an `auto_map` (a tokenizer's [slow, fast] list flattened, its None skipped)."""
    refs = [ref for value in (auto_map or {}).values() for ref in (value if isinstance(value, list) else [value])]
    return [ref for ref in refs if isinstance(ref, str)]


def code_repo_of(auto_map: dict | None) -> str | None:
    """The code repository an `auto_map` points to (None when it names local modules)."""
    repos = {ref.split("--")[0] for ref in _auto_map_refs(auto_map) if "--" in ref}
    return repos.pop() if len(repos) == 1 else None


def _pointed(ref: Any, code_repo: str | None) -> Any:
    if isinstance(ref, list):
        return [_pointed(r, code_repo) for r in ref]
    if not isinstance(ref, str):
        return ref
    local = ref.split("--")[-1]
    return f"{code_repo}--{local}" if code_repo else local


def point_auto_maps(folder: str | os.PathLike, code_repo: str | None) -> None:
    """Point every `auto_map` in `folder` at `code_repo` (None: the folder's own modules)."""
    for name in AUTO_MAP_FILES:
        path = Path(folder) / name
        if not path.is_file():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data.get("auto_map"), dict):
            continue
        pointed = {key: _pointed(value, code_repo) for key, value in data["auto_map"].items()}
        if pointed == data["auto_map"]:
            continue
        data["auto_map"] = pointed
        _write_atomically(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def share_code(folder: str | os.PathLike, code_repo: str) -> None:
    """Make a saved folder load its code from `code_repo` (auto_maps point there, our copies go); checked first."""
    _share(check_saved_folder(folder), check_code_repo(code_repo))
    write_compatibility_section(folder)


def _share(folder: str | os.PathLike, code_repo: str) -> None:
    point_auto_maps(folder, code_repo)
    ours = {path.name for path in code_files()}
    for path in Path(folder).glob("*.py"):
        if path.name in ours:
            path.unlink()


def update_code(folder: str | os.PathLike) -> list[Path]:
    """Replace a copy-mode folder's code files by this installed version's (and those it lost); returns them."""
    folder = check_saved_folder(folder)
    auto_map = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("auto_map")
    if code_repo_of(auto_map):
        raise ValueError(
            f"{folder} loads its code from a code repository; update that repository instead "
            "(`roformer-ext push-code owner/name`)."
        )
    present = {path.name for path in folder.glob("*.py")}
    present |= {f"{ref.rsplit('.', 1)[0]}.py" for ref in _auto_map_refs(auto_map) if "." in ref}
    here = Path(__file__).resolve().parent  # and what this version of them imports (maybe a new module)
    for name in list(present):
        if (here / name).exists():
            present |= {Path(p).name for p in get_relative_import_files(str(here / name))}
    updated = [folder / source.name for source in code_files() if source.name in present]
    for path in updated:
        _write_atomically(path, (here / path.name).read_text(encoding="utf-8"))
    write_compatibility_section(folder)
    return updated


def compatibility_section(code_repo: str | None) -> str:
    """The model card's section: the tested transformers range and how to get updated code."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        release = f"roformer-ext {version('roformer-ext')}"
    except PackageNotFoundError:  # a saved folder's copy of the code, without the package
        release = "roformer-ext"
    if code_repo:
        where = (
            f"The modelling code lives in the code repository [`{code_repo}`](https://huggingface.co/{code_repo}) "
            f"(this folder's `auto_map` points there): its maintainer publishes a fix once with `roformer-ext "
            f"push-code {code_repo}` and this checkpoint loads it. Pin a version with `code_revision=`."
        )
    else:
        where = (
            "This folder carries its own copy of the modelling code (`*.py`). To update it: `pip install -U "
            "roformer-ext` and run `roformer-ext update-code FOLDER` (then push the folder again), or load the model "
            "after `import roformer_ext` and `save_pretrained` it again."
        )
    return (
        f"{_CARD_START}\n## Compatibility\n\n"
        f"Saved with {release}, tested on `{SUPPORTED_RANGE}` (CI runs {LOWEST_TRANSFORMERS} and the newest release "
        f"below {TRANSFORMERS_BELOW}). On a release outside that range the code warns once and runs a self-check at "
        "the first forward (cached generation, the cache's name, the mask helpers, the processor); it stops only if "
        f"that check fails, with an error saying what broke.\n\n{where}\n{_CARD_END}\n"
    )


def write_compatibility_section(folder: str | os.PathLike, create: bool = True) -> None:
    """Add or refresh the section in the folder's README.md (created when missing, if `create`)."""
    folder = Path(folder)
    maps = (
        json.loads((folder / name).read_text(encoding="utf-8")).get("auto_map")
        for name in AUTO_MAP_FILES
        if (folder / name).is_file()
    )
    auto_map = next(maps, None)  # the first file's
    path = folder / "README.md"
    if not path.is_file() and not create:
        return
    card = path.read_text(encoding="utf-8") if path.is_file() else "---\nlibrary_name: transformers\n---\n"
    section = compatibility_section(code_repo_of(auto_map))
    if _CARD_START in card and _CARD_END in card:
        before, rest = card.split(_CARD_START, 1)
        updated = before + section + rest.split(_CARD_END, 1)[1].lstrip("\n")
    else:
        updated = card.rstrip("\n") + "\n\n" + section if card.strip() else section
    if updated != card:
        _write_atomically(path, updated)


def push_code(
    code_repo: str,
    *,
    token: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    source: str | os.PathLike | None = None,
) -> str:
    """Publish the code files (from `source`, default this package) to the code repository; returns the commit URL."""
    from huggingface_hub import HfApi

    code_repo, files, api = check_code_repo(code_repo), code_files(source), HfApi(token=token)
    api.create_repo(code_repo, private=private, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            shutil.copyfile(path, Path(tmp) / path.name)
        card = (
            "---\nlibrary_name: transformers\ntags:\n- roformer-ext\n---\n# roformer-ext code\n\nThe modelling, "
            "configuration, tokenizer and processor code of roformer-ext. Checkpoints whose `config.json` `auto_map` "
            f"names `{code_repo}--...` load it with `trust_remote_code=True`; save one with "
            f'`model.save_pretrained(folder, code_repo="{code_repo}")`.\n\n' + compatibility_section(code_repo)
        )
        (Path(tmp) / "README.md").write_text(card, encoding="utf-8")
        message = commit_message or "roformer-ext code"
        return str(api.upload_folder(repo_id=code_repo, folder_path=tmp, revision=revision, commit_message=message))


def _write_atomically(path: Path, text: str) -> None:
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: The save or push in progress in this thread / task (its owner, `code_repo` and placement), for the upload hook
#: transformers calls inside it and the saves nested in it (per call, never stored on the object).
_CALL: ContextVar[tuple[Any, Any, tuple[str | None, bool]] | None] = ContextVar("roformer_ext_code_call", default=None)


class SharedCodeMixin:
    """`save_pretrained` / `push_to_hub` with `code_repo`: None keeps what the object was loaded with, False copies."""

    def save_pretrained(self, save_directory, *args, code_repo: str | bool | None = None, **kwargs):
        placement = self._placement(code_repo)  # a bad id is refused before anything is written
        reset = _CALL.set((self, code_repo, placement))
        try:
            result = super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            _CALL.reset(reset)
        if not kwargs.get("push_to_hub") and kwargs.get("is_main_process", True):
            self._place_code(save_directory, placement)
        return result

    def push_to_hub(self, repo_id: str, *args, code_repo: str | bool | None = None, **kwargs) -> str:
        """transformers' `push_to_hub` (same arguments) with `code_repo`."""
        reset = _CALL.set((self, code_repo, self._placement(code_repo)))
        try:
            return super().push_to_hub(repo_id, *args, **kwargs)
        finally:
            _CALL.reset(reset)

    def _upload_modified_files(self, working_dir, *args, **kwargs):
        self._place_code(working_dir, self._placement(None))
        return parent_upload_modified_files(super(), working_dir, *args, **kwargs)

    def _place_code(self, folder: str | os.PathLike, placement: tuple[str | None, bool]) -> None:
        shared, copies = placement
        if shared:
            _share(folder, shared)
        elif copies:  # auto_map entries inherited from a code repository go
            point_auto_maps(folder, None)
        write_compatibility_section(folder, create=isinstance(self, PreTrainedModel))

    def _placement(self, code_repo: str | bool | None) -> tuple[str | None, bool]:
        """(code repository or None, copies asked for); inside a save or push, what it was given."""
        if code_repo is None and _CALL.get() is not None:
            owner, code_repo, placement = _CALL.get()
            if owner is self:
                return placement
        if code_repo is False:
            return None, True
        if code_repo is None or code_repo is True:
            config = getattr(self, "config", None)
            auto_map = getattr(config, "auto_map", None) or getattr(self, "init_kwargs", {}).get("auto_map")
            inherited = code_repo_of(auto_map if isinstance(auto_map, dict) else None)
            if code_repo is True and inherited is None:
                raise ValueError("code_repo=True needs a loaded folder that points to a code repository; pass its id.")
            return inherited, False
        return check_code_repo(code_repo), False
