"""A checkpoint whose `auto_map` names a code repository loads its code from there (hub_standin.py; fresh processes)."""

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
from transformers import BertConfig, BertModel, BertTokenizer

import roformer_ext
from roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtForSequenceClassification,
    RoFormerExtTokenizerFast,
    RoFormerExtVisionTextConfig,
)
from roformer_ext.compat import SUPPORTED_RANGE
from roformer_ext.hub_code import check_code_repo, code_files, code_repo_of, share_code, update_code

CODE_REPO = "owner/roformer-ext"
BERT_SIZES = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
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

#: Publishes a saved model folder and its tokenizer in each way transformers offers (argv: kind, source, work folder),
#: each into its own repository `owner/{kind}-{case}`; prints the error type of each case that raised.
PUBLISHER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import transformers
    import roformer_ext
    kind, source, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    model = transformers.AutoModel.from_pretrained(source)
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)

    def out(case):  # a training run's output folder: it holds files that no save writes
        folder = work / kind / case
        folder.mkdir(parents=True)
        (folder / ".env").write_text("HF_TOKEN=hf_secret")
        (folder / "optimizer.pt").write_bytes(b"optimizer state")
        return str(folder)

    def save(obj, case, **kwargs):
        return lambda: obj.save_pretrained(out(case), push_to_hub=True, repo_id=f"owner/{kind}-{case}", **kwargs)

    def push(obj, case, **kwargs):
        return lambda: obj.push_to_hub(f"owner/{kind}-{case}", **kwargs)

    cases = {
        "save": save(model, "save"),
        "save-pr": save(model, "save-pr", create_pr=True),
        "save-private-token": save(model, "save-private-token", private=True, token="hf_other"),
        "save-revision": save(model, "save-revision", revision="dev"),
        "push-pr": push(model, "push-pr", create_pr=True),
        "push-revision": push(model, "push-revision", revision="dev"),
        "push-private-token": push(model, "push-private-token", private=True, token="hf_other"),
        "tokenizer-save": save(tokenizer, "tokenizer-save"),
        "tokenizer-save-pr": save(tokenizer, "tokenizer-save-pr", create_pr=True),
        "tokenizer-push-pr": push(tokenizer, "tokenizer-push-pr", create_pr=True),
    }
    if kind == "ours":  # last: the processor's tokenizer gains the vision tokens
        from roformer_ext.processing_roformer_ext import add_vision_tokens

        add_vision_tokens(tokenizer)
        processor = roformer_ext.RoFormerExtProcessor(roformer_ext.RoFormerExtImageProcessor(), tokenizer)
        cases["processor-save"] = save(processor, "processor-save")
    errors = {}
    for case, publish in cases.items():
        try:
            publish()
        except Exception as error:
            errors[case] = type(error).__name__
    print(json.dumps(errors))
    """
)


def _env(hub: StandInHub, tmp_path: Path) -> dict:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_standin"}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_MODULES_CACHE=str(tmp_path / "modules"))
    env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_ETAG_TIMEOUT="30", HF_HUB_DOWNLOAD_TIMEOUT="30")
    return env


def _ok(args: list[str], env: dict):
    """Run a command that must succeed; the JSON its last line prints, if any."""
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1:] or [""]
    return json.loads(last[0]) if last[0].startswith(("{", "[")) else done


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "roformer_ext.cli", *args]


def _auto_map(folder: Path, name: str = "config.json") -> dict:
    return json.loads((folder / name).read_text())["auto_map"]


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
        _ok(_cli("push-code", CODE_REPO), env)
        assert set(hub.repos[CODE_REPO]["files"]) == {p.name for p in code_files()} | {"README.md"}
        loaded = _ok([sys.executable, "-c", LOADER, str(folder)], env)
        assert loaded["ids"] == expected.tolist() and loaded["mark"] is None
        assert loaded["module"].startswith("transformers_modules.owner.roformer_hyphen_ext.")  # the repo's code
        assert loaded["tokenizer"].endswith("tokenization_roformer_ext") and loaded["tokens"] == [2, 4, 5, 3]

        own_card = b"---\nlicense: mit\n---\n# My own card\n"  # a card the repository has: push keeps it
        hub.repo("owner/tiny-decoder", {"README.md": own_card})
        _ok([sys.executable, "-c", PUSHER, str(folder), "owner/tiny-decoder"], env)
        files = hub.repos["owner/tiny-decoder"]["files"]
        assert "model.safetensors" in files and not [name for name in files if name.endswith(".py")]
        card = files["README.md"].decode()
        assert card.startswith(own_card.decode()) and card.count("## Compatibility") == 1 and SUPPORTED_RANGE in card
        assert _ok([sys.executable, "-c", LOADER, "owner/tiny-decoder"], env)["ids"] == expected.tolist()  # by repo id

        patched = tmp_path / "patched"  # the maintainer's fixed checkout
        shutil.copytree(PACKAGE, patched, ignore=shutil.ignore_patterns("__pycache__"))
        with open(patched / "modeling_roformer_ext.py", "a", encoding="utf-8") as handle:
            handle.write('\nCODE_MARK = "update 2"\n')
        _ok(_cli("push-code", CODE_REPO, "--source", str(patched)), env)
        reloaded = _ok([sys.executable, "-c", LOADER, str(folder)], env)
    assert reloaded["mark"] == "update 2" and reloaded["ids"] == expected.tolist()


def test_share_code_points_a_saved_folder_at_the_repository(tmp_path):
    """Copy mode to shared: auto_maps rewritten, our code files gone, the user's file kept, the card says where."""
    RoFormerExtForSequenceClassification(tiny_config()).save_pretrained(tmp_path)
    _tokenizer().save_pretrained(tmp_path)
    (tmp_path / "my_script.py").write_text("print('mine')\n")
    _ok(_cli("share-code", str(tmp_path), CODE_REPO), dict(os.environ))
    assert sorted(p.name for p in tmp_path.glob("*.py")) == ["my_script.py"]
    for name in ("config.json", "tokenizer_config.json"):
        assert code_repo_of(_auto_map(tmp_path, name)) == CODE_REPO
    card = (tmp_path / "README.md").read_text()
    assert SUPPORTED_RANGE in card and f"push-code {CODE_REPO}" in card
    assert card.count("## Compatibility") == 1


def test_copies_by_default_and_when_asked(tmp_path):
    """Default: copies, local auto_map; a model loaded from a shared folder stays shared unless code_repo=False."""
    model = RoFormerExtForCausalLM(tiny_config())
    model.save_pretrained(tmp_path / "copies")
    assert (tmp_path / "copies" / "modeling_roformer_ext.py").is_file()
    assert code_repo_of(_auto_map(tmp_path / "copies")) is None
    card = (tmp_path / "copies" / "README.md").read_text()
    assert SUPPORTED_RANGE in card and "roformer-ext update-code FOLDER" in card

    model.save_pretrained(tmp_path / "shared", code_repo=CODE_REPO)
    again = RoFormerExtForCausalLM.from_pretrained(tmp_path / "shared")
    again.save_pretrained(tmp_path / "inherited")
    assert not list((tmp_path / "inherited").glob("*.py"))
    assert code_repo_of(_auto_map(tmp_path / "inherited")) == CODE_REPO
    again.save_pretrained(tmp_path / "local", code_repo=False)
    assert (tmp_path / "local" / "modeling_roformer_ext.py").is_file()
    local_map = _auto_map(tmp_path / "local")
    assert code_repo_of(local_map) is None and all("--" not in ref for ref in local_map.values())


def test_update_code_refreshes_and_restores_a_folders_copies(tmp_path):
    """Old copies replaced, lost copies restored, the user's file kept; a shared folder is refused."""
    RoFormerExtForCausalLM(tiny_config()).save_pretrained(tmp_path)
    saved = sorted(p.name for p in tmp_path.glob("*.py"))
    for path in tmp_path.glob("*.py"):
        path.unlink()
    (tmp_path / "rope.py").write_text("# an old copy\n")
    (tmp_path / "my_script.py").write_text("print('mine')\n")
    _ok(_cli("update-code", str(tmp_path)), dict(os.environ))
    assert sorted(p.name for p in tmp_path.glob("*.py")) == sorted([*saved, "my_script.py"])
    for name in ("rope.py", "modeling_roformer_ext.py"):
        assert (tmp_path / name).read_text() == (PACKAGE / name).read_text()
    assert (tmp_path / "my_script.py").read_text() == "print('mine')\n"
    share_code(tmp_path, CODE_REPO)
    with pytest.raises(ValueError, match="loads its code from a code repository"):
        update_code(tmp_path)


#: Ids the Hub refuses: no owner, empty name, '--', path-like, a trailing '-' or '.', '.git', over 96 characters.
BAD_IDS = ["roformer-ext", "owner/", "owner/a--b", "../x/y", "a/b/c", "", "owner/code-", "owner/code.", "owner/code.git",
           "owner/" + "c" * 97]  # fmt: skip


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("bad", [*BAD_IDS, 3])
def test_bad_code_repo_is_refused_before_anything_is_written(bad, tmp_path):
    """huggingface_hub's own validator decides, before a save writes or share-code touches the folder's copies."""
    with pytest.raises(ValueError, match="code_repo must be a Hub model repository id"):
        check_code_repo(bad)
    model = RoFormerExtForCausalLM(tiny_config())
    with pytest.raises(ValueError, match="code_repo must be"):
        model.save_pretrained(tmp_path / "out", code_repo=bad)
    assert not (tmp_path / "out").exists()
    model.save_pretrained(tmp_path / "saved")
    before = _snapshot(tmp_path / "saved")
    with pytest.raises(ValueError, match="code_repo must be") as error:
        share_code(tmp_path / "saved", bad)
    assert repr(bad) in str(error.value) and _snapshot(tmp_path / "saved") == before


def test_code_commands_refuse_what_they_cannot_change(tmp_path):
    """A BERT checkpoint, a bad id: the API and the CLI (one line) say why, and no file (card included) changes."""
    RoFormerExtForCausalLM(tiny_config()).save_pretrained(tmp_path / "ours")
    BertModel(BertConfig(**BERT_SIZES)).save_pretrained(tmp_path / "bert")
    (tmp_path / "bert" / "README.md").write_text("# A BERT card\n")
    before = {name: _snapshot(tmp_path / name) for name in ("ours", "bert")}
    with pytest.raises(ValueError, match="model_type 'bert'"):
        share_code(tmp_path / "bert", CODE_REPO)
    with pytest.raises(ValueError, match="model_type 'bert'"):
        update_code(tmp_path / "bert")
    for command, phrase in [
        (["update-code", str(tmp_path / "bert")], "not a roformer-ext folder"),
        (["share-code", str(tmp_path / "missing"), CODE_REPO], "is not a saved model folder"),
        (["push-code", "not a repo"], "code_repo must be"),
        (["share-code", str(tmp_path / "ours"), "owner/roformer-ext-"], "'owner/roformer-ext-'"),
    ]:
        done = subprocess.run(_cli(*command), capture_output=True, text=True, timeout=300)
        assert done.returncode == 1 and phrase in done.stderr and "Traceback" not in done.stderr
    assert {name: _snapshot(tmp_path / name) for name in ("ours", "bert")} == before
    RoFormerExtVisionTextConfig().save_pretrained(tmp_path / "vision")  # roformer-ext's other model type
    assert update_code(tmp_path / "vision")


def _published(hub: StandInHub, repo_id: str, leave_out: set[str] = frozenset()) -> dict | None:
    """`repo_id`'s refs' files (but for code files and `leave_out`), visibility and commit tokens."""
    repo = hub.repos.get(repo_id)
    if repo is None:
        return None
    names = lambda ref: sorted(n for n in ref["files"] if not n.endswith(".py") and n not in leave_out)  # noqa: E731
    commits = [line.split(" ")[2:] for line in hub.requests if f"/api/models/{repo_id}/commit/" in line]
    return {
        "visibility": repo["visibility"],
        "main": names(repo),
        "branches": {name: names(ref) for name, ref in repo["branches"].items()},
        "prs": [names(pr) for pr in repo["prs"]],
        "commit tokens": sorted({" ".join(token) for token in commits}),
    }


def test_push_to_hub_publishes_what_transformers_would(tmp_path):
    """Side by side with BERT, each way: the same files uploaded (but our code files and vocab.txt) and behaviour."""
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])}
    BertModel(BertConfig(**BERT_SIZES)).save_pretrained(tmp_path / "bert")
    roformer_ext.RoFormerExtModel(tiny_config()).save_pretrained(tmp_path / "ours")
    tokenizer_files = {}
    for kind, tokenizer in (("bert", BertTokenizer(vocab=vocab)), ("ours", _tokenizer())):
        tokenizer.save_pretrained(tmp_path / kind)
        tokenizer.save_pretrained(tmp_path / f"{kind}-tokenizer")
        tokenizer_files[kind] = {path.name for path in (tmp_path / f"{kind}-tokenizer").iterdir()}
    ours_only = tokenizer_files["ours"] - tokenizer_files["bert"]  # our tokenizer's own files: its vocab.txt
    with StandInHub() as hub:
        env = _env(hub, tmp_path)
        work = str(tmp_path / "work")
        errors = {
            kind: _ok([sys.executable, "-c", PUBLISHER, kind, str(tmp_path / kind), work], env)
            for kind in ("bert", "ours")
        }
        cases = sorted({repo_id.split("-", 1)[1] for repo_id in hub.repos if repo_id.startswith("owner/bert-")})
        bert = {case: _published(hub, f"owner/bert-{case}") for case in cases}
        ours = {case: _published(hub, f"owner/ours-{case}", leave_out=ours_only) for case in cases}
        our_code = [name for name in hub.repos["owner/ours-save"]["files"] if name.endswith(".py")]
        processor = _published(hub, "owner/ours-processor-save")
    assert ".env" not in ours["save"]["main"] and "optimizer.pt" not in ours["save"]["main"]
    assert errors["ours"].pop("processor-save", None) is None
    assert errors["ours"] == errors["bert"]
    assert ours == bert
    assert "modeling_roformer_ext.py" in our_code  # copy mode: the save wrote them
    assert ours["save-pr"]["main"] == [] and "config.json" in ours["save-pr"]["prs"][0]
    assert ours["push-pr"]["main"] == [] and "model.safetensors" in ours["push-pr"]["prs"][0]
    assert ours["push-revision"]["main"] == [] and "config.json" in ours["push-revision"]["branches"]["dev"]
    assert ours["push-private-token"]["visibility"] == "private"
    assert ours["push-private-token"]["commit tokens"] == ["Bearer hf_other"]
    assert "processor_config.json" in processor["main"] and ".env" not in processor["main"]
