"""Shared code on the Hub: a checkpoint whose `auto_map` names a code repository loads its code from there, and an
update published there reaches it. Without network: a local stand-in Hub (hub_standin.py) serves the HTTP endpoints
huggingface_hub uses, and every load runs in a fresh process that has only the folder (roformer_ext blocked)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import tiny_config
from hub_standin import StandInHub

import roformer_ext
from roformer_ext import RoFormerExtForCausalLM, RoFormerExtForSequenceClassification, RoFormerExtTokenizerFast
from roformer_ext.compat import SUPPORTED_RANGE
from roformer_ext.hub_code import check_code_repo, code_files, code_repo_of, share_code, update_code

CODE_REPO = "owner/roformer-ext"
PACKAGE = Path(roformer_ext.__file__).parent

LOADER = textwrap.dedent(
    """
    import json, sys
    sys.modules["roformer_ext"] = None  # only what the folder and the code repository hold
    import torch, transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
    module = sys.modules[type(model).__module__]
    ids = model.generate(torch.tensor([[5, 6, 7, 8]]), max_new_tokens=5, do_sample=False, pad_token_id=0)
    print(json.dumps({"ids": ids.tolist(), "module": module.__name__, "mark": getattr(module, "CODE_MARK", None),
                      "tokenizer": type(tokenizer).__module__, "tokens": tokenizer("a b")["input_ids"]}))
    """
)


#: `push_to_hub(repo_id, code_repo=...)` of a model and its tokenizer, with roformer_ext installed.
PUSHER = textwrap.dedent(
    """
    import sys, transformers
    import roformer_ext
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        auto.from_pretrained(sys.argv[1]).push_to_hub(sys.argv[2], code_repo="owner/roformer-ext")
    """
)


def _env(hub: StandInHub, tmp_path: Path) -> dict:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_standin"}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_MODULES_CACHE=str(tmp_path / "modules"))
    env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_ETAG_TIMEOUT="30", HF_HUB_DOWNLOAD_TIMEOUT="30")
    return env


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "roformer_ext.cli", *args]


def _tokenizer() -> RoFormerExtTokenizerFast:
    return RoFormerExtTokenizerFast(vocab={w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"])})


def test_checkpoint_loads_its_code_from_the_code_repository_and_gets_updates(tmp_path):
    torch.manual_seed(0)
    model = RoFormerExtForCausalLM(tiny_config(initializer_range=0.5)).eval()
    folder = tmp_path / "checkpoint"
    model.save_pretrained(folder, code_repo=CODE_REPO)
    _tokenizer().save_pretrained(folder, code_repo=CODE_REPO)
    expected = model.generate(torch.tensor([[5, 6, 7, 8]]), max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert not list(folder.glob("*.py"))  # no copies: the code is the repository's
    config = json.loads((folder / "config.json").read_text())
    assert code_repo_of(config["auto_map"]) == CODE_REPO
    assert config["auto_map"]["AutoModelForCausalLM"] == f"{CODE_REPO}--modeling_roformer_ext.RoFormerExtForCausalLM"

    with StandInHub() as hub:
        env = _env(hub, tmp_path)
        published = _run(_cli("push-code", CODE_REPO), env)
        assert published.returncode == 0, published.stderr[-3000:]
        assert set(hub.repos[CODE_REPO]["files"]) == {p.name for p in code_files()} | {"README.md"}
        first = _run([sys.executable, "-c", LOADER, str(folder)], env)
        assert first.returncode == 0, first.stderr[-3000:]
        loaded = json.loads(first.stdout.strip().splitlines()[-1])
        assert loaded["ids"] == expected.tolist() and loaded["mark"] is None
        assert loaded["module"].startswith("transformers_modules.owner.roformer_hyphen_ext.")  # the repo's code
        assert loaded["tokenizer"].endswith("tokenization_roformer_ext") and loaded["tokens"] == [2, 4, 5, 3]

        own_card = b"---\nlicense: mit\n---\n# My own card\n"  # a card the repository has: push keeps it
        hub.repos["owner/tiny-decoder"] = {"commit": "0" * 40, "files": {"README.md": own_card}}
        pushed = _run([sys.executable, "-c", PUSHER, str(folder), "owner/tiny-decoder"], env)
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        files = hub.repos["owner/tiny-decoder"]["files"]
        assert "model.safetensors" in files and not [name for name in files if name.endswith(".py")]
        card = files["README.md"].decode()
        assert card.startswith(own_card.decode()) and card.count("## Compatibility") == 1 and SUPPORTED_RANGE in card
        from_hub = _run([sys.executable, "-c", LOADER, "owner/tiny-decoder"], env)  # the checkpoint's repo id
        assert from_hub.returncode == 0, from_hub.stderr[-3000:]
        assert json.loads(from_hub.stdout.strip().splitlines()[-1])["ids"] == expected.tolist()

        patched = tmp_path / "patched"  # the maintainer's fixed checkout
        shutil.copytree(PACKAGE, patched, ignore=shutil.ignore_patterns("__pycache__"))
        with open(patched / "modeling_roformer_ext.py", "a", encoding="utf-8") as handle:
            handle.write('\nCODE_MARK = "update 2"\n')
        updated = _run(_cli("push-code", CODE_REPO, "--source", str(patched)), env)
        assert updated.returncode == 0, updated.stderr[-3000:]
        second = _run([sys.executable, "-c", LOADER, str(folder)], env)
        assert second.returncode == 0, second.stderr[-3000:]
        reloaded = json.loads(second.stdout.strip().splitlines()[-1])
    assert reloaded["mark"] == "update 2" and reloaded["ids"] == expected.tolist()


def test_share_code_points_a_saved_folder_at_the_repository(tmp_path):
    """`roformer-ext share-code` on a folder in copy mode: auto_maps rewritten, our code files gone, a file of the
    user's kept, and the card says where the code is."""
    RoFormerExtForSequenceClassification(tiny_config()).save_pretrained(tmp_path)
    _tokenizer().save_pretrained(tmp_path)
    (tmp_path / "my_script.py").write_text("print('mine')\n")
    assert (tmp_path / "modeling_roformer_ext.py").is_file()
    done = _run(_cli("share-code", str(tmp_path), CODE_REPO), dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("*.py")) == ["my_script.py"]
    for name in ("config.json", "tokenizer_config.json"):
        assert code_repo_of(json.loads((tmp_path / name).read_text())["auto_map"]) == CODE_REPO
    card = (tmp_path / "README.md").read_text()
    assert SUPPORTED_RANGE in card and f"push-code {CODE_REPO}" in card
    assert card.count("## Compatibility") == 1


def test_copies_by_default_and_when_asked(tmp_path):
    """Default: copies and local auto_map; a model loaded from a shared folder keeps pointing there, unless
    code_repo=False."""
    model = RoFormerExtForCausalLM(tiny_config())
    model.save_pretrained(tmp_path / "copies")
    assert (tmp_path / "copies" / "modeling_roformer_ext.py").is_file()
    assert code_repo_of(json.loads((tmp_path / "copies" / "config.json").read_text())["auto_map"]) is None
    card = (tmp_path / "copies" / "README.md").read_text()
    assert SUPPORTED_RANGE in card and "roformer-ext update-code FOLDER" in card

    model.save_pretrained(tmp_path / "shared", code_repo=CODE_REPO)
    again = RoFormerExtForCausalLM.from_pretrained(tmp_path / "shared")
    again.save_pretrained(tmp_path / "inherited")
    assert not list((tmp_path / "inherited").glob("*.py"))
    assert code_repo_of(json.loads((tmp_path / "inherited" / "config.json").read_text())["auto_map"]) == CODE_REPO
    again.save_pretrained(tmp_path / "local", code_repo=False)
    assert (tmp_path / "local" / "modeling_roformer_ext.py").is_file()
    local_map = json.loads((tmp_path / "local" / "config.json").read_text())["auto_map"]
    assert code_repo_of(local_map) is None and all("--" not in ref for ref in local_map.values())


def test_update_code_refreshes_a_folders_copies(tmp_path):
    RoFormerExtForCausalLM(tiny_config()).save_pretrained(tmp_path)
    (tmp_path / "rope.py").write_text("# an old copy\n")
    (tmp_path / "my_script.py").write_text("print('mine')\n")
    done = _run(_cli("update-code", str(tmp_path)), dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "rope.py").read_text() == (PACKAGE / "rope.py").read_text()
    assert (tmp_path / "my_script.py").read_text() == "print('mine')\n"
    share_code(tmp_path, CODE_REPO)
    with pytest.raises(ValueError, match="loads its code from a code repository"):
        update_code(tmp_path)


def test_update_code_restores_copies_a_folder_lost(tmp_path):
    """A folder copied without its `*.py` (its auto_map still names them) gets them back: it loads again as remote
    code; a file of the user's stays."""
    RoFormerExtForCausalLM(tiny_config()).save_pretrained(tmp_path)
    saved = sorted(p.name for p in tmp_path.glob("*.py"))
    for path in tmp_path.glob("*.py"):
        path.unlink()
    (tmp_path / "my_script.py").write_text("print('mine')\n")
    update_code(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.py")) == sorted([*saved, "my_script.py"])
    assert (tmp_path / "modeling_roformer_ext.py").read_text() == (PACKAGE / "modeling_roformer_ext.py").read_text()
    assert (tmp_path / "my_script.py").read_text() == "print('mine')\n"


@pytest.mark.parametrize("bad", ["roformer-ext", "owner/", "owner/a--b", "../x/y", "a/b/c", "", 3])
def test_bad_code_repo_is_refused_before_anything_is_written(bad, tmp_path):
    with pytest.raises(ValueError, match="code_repo must be a Hub model repository id"):
        check_code_repo(bad)
    model = RoFormerExtForCausalLM(tiny_config())
    with pytest.raises(ValueError, match="code_repo must be"):
        model.save_pretrained(tmp_path / "out", code_repo=bad)
    assert not (tmp_path / "out").exists()


def test_cli_errors_are_one_line(tmp_path):
    done = _run(_cli("share-code", str(tmp_path / "missing"), CODE_REPO), dict(os.environ))
    assert done.returncode == 1 and "is not a saved model folder" in done.stderr and "Traceback" not in done.stderr
    done = _run(_cli("push-code", "not a repo"), dict(os.environ))
    assert done.returncode == 1 and "code_repo must be" in done.stderr and "Traceback" not in done.stderr
