"""The model card (README.md) every example writes, and its one push to the Hub.

The card says what a reader needs to trust or reproduce the checkpoint: the data and where it came from,
the measured metrics, the command (without this machine's paths), the architecture and the citation, with
the Hub metadata (`language`, `datasets`, `license`, `library_name`, `pipeline_tag`, `base_model`) written by
huggingface_hub's `ModelCardData`.
"""

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, ModelCard, ModelCardData

from roformer_ext.hub_code import share_code, write_compatibility_section

ROFORMER_CITATION = """@article{su2021roformer,
  title   = {RoFormer: Enhanced Transformer with Rotary Position Embedding},
  author  = {Su, Jianlin and Lu, Yu and Pan, Shengfeng and Murtadha, Ahmed and Wen, Bo and Liu, Yunfeng},
  journal = {arXiv preprint arXiv:2104.09864},
  year    = {2021}
}"""
#: Left out of the upload: Trainer's checkpoints and private files, per-rank logs, the tokenizer cache.
IGNORE_PATTERNS = ["_*", "checkpoint-*", "checkpoint-*/**", "train_log_rank*", "trained_tokenizer/**", "runs/**"]


def portable(argument: str) -> str:
    """An argument without this machine's absolute paths: a path under the working directory becomes
    relative to it, any other absolute path keeps its last component (`--x=/a/b` too)."""
    if argument.startswith("--") and "=" in argument:
        flag, value = argument.split("=", 1)
        return f"{flag}={portable(value)}"
    if not os.path.isabs(argument):
        return argument
    path, cwd = Path(argument), Path.cwd()
    if path == cwd:
        return "."
    if path.is_relative_to(cwd):
        return str(path.relative_to(cwd))
    return path.name


def command_line(argv: list[str] | None = None) -> str:
    """How this run was started (`python script.py ...`), with `portable` arguments."""
    argv = sys.argv if argv is None else argv
    return " ".join(shlex.quote(part) for part in ["python", *map(portable, argv)])


def arguments_file(argv: list[str] | None = None) -> dict[str, Any] | None:
    """The arguments of a run started with one JSON file (`python run_x.py args.json`), paths made portable."""
    argv = sys.argv if argv is None else argv
    if len(argv) != 2 or not argv[1].endswith(".json"):
        return None
    arguments = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    return {k: portable(v) if isinstance(v, str) else v for k, v in arguments.items()}


def base_model_id(model_name_or_path: str | None) -> str | None:
    """A Hub id for the `base_model` metadata; a local folder is no Hub model, so it gives none."""
    if not model_name_or_path or Path(model_name_or_path).exists():
        return None
    return model_name_or_path


@dataclass
class ModelCardInfo:
    """What goes into the card; `render(model_id)` fills in where the model is loaded from."""

    title: str
    task: str  # a pipeline tag: text-classification, fill-mask, token-classification, ...
    summary: str
    data: str
    metrics: dict[str, Any]
    architecture: str
    datasets: list[str]
    language: str | list[str] | None = None
    license: str | None = "apache-2.0"
    base_model: str | None = None
    extra: str = ""
    usage: str | None = None  # Python code; "{model_id}" is replaced. Default: a `pipeline` call.
    tags: list[str] = field(default_factory=lambda: ["roformer_ext", "rotary-position-embedding"])

    def render(self, model_id: str) -> ModelCard:
        metadata = ModelCardData(
            language=self.language,
            license=self.license,
            library_name="transformers",
            pipeline_tag=self.task,
            datasets=self.datasets or None,
            base_model=self.base_model,
            tags=self.tags,
        )
        rows = "\n".join(
            f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in sorted(self.metrics.items())
        )
        arguments = arguments_file()
        arguments_block = (
            "\n  with the arguments\n```json\n" + json.dumps(arguments, indent=2, ensure_ascii=False) + "\n```\n"
            if arguments
            else "\n"
        )
        usage = (self.usage or DEFAULT_USAGE).replace("{model_id}", model_id).replace("{task}", self.task)
        body = f"""
# {self.title}

{self.summary}
Load it with `trust_remote_code=True` (the modelling code is in this repository) or after `import roformer_ext`.

## Data
{self.data}

## Results
| metric | value |
|---|---|
{rows}

## Training
- base model: {self.base_model or "none: trained from scratch, or continued from a local checkpoint (see the command)"}
- architecture: {self.architecture}
- command: `{command_line()}`{arguments_block}{self.extra}
## Usage
```python
{usage.strip()}
```

## Citation
```bibtex
{ROFORMER_CITATION}
```
"""
        return ModelCard(f"---\n{metadata.to_yaml()}\n---\n{body}")

    def write(self, output_dir: str | Path, model_id: str) -> Path:
        """README.md, with roformer-ext's compatibility section (tested range, how to update the code)."""
        path = Path(output_dir) / "README.md"
        path.write_text(str(self.render(model_id)), encoding="utf-8")
        write_compatibility_section(output_dir)
        return path


DEFAULT_USAGE = """
from transformers import pipeline

pipe = pipeline("{task}", model="{model_id}", trust_remote_code=True)
"""
#: A regression head's output is the value itself: no sigmoid, and its one "label" means nothing.
REGRESSION_USAGE = """
from transformers import pipeline

pipe = pipeline("text-classification", model="{model_id}", trust_remote_code=True, function_to_apply="none")
value = pipe("your text")[0]["score"]  # the predicted value
"""


def architecture_of(model) -> str:
    """One line on the model's shape for the card."""
    config = model.config
    return (
        f"`{type(model).__name__}`, hidden {config.hidden_size}, "
        f"{config.num_hidden_layers} layers, {config.num_attention_heads} heads, intermediate {config.intermediate_size}, "
        f"vocabulary {config.vocab_size}, attention `{config.attention_type}`, norm `{config.norm_type}`, "
        f"rope_parameters `{json.dumps(config.rope_parameters, ensure_ascii=False)}`"
    )


def local_model_id(output_dir: str | Path) -> str:
    """How a reader of an unpushed card loads the model: the output folder as given, never an absolute path."""
    return portable(str(output_dir))


def save_card_and_push(
    card: ModelCardInfo,
    output_dir: str | Path,
    *,
    push_to_hub: bool,
    hub_model_id: str | None = None,
    hub_token: str | None = None,
    hub_private_repo: bool | None = None,
    hub_revision: str | None = None,
    commit_message: str = "End of training",
    code_repo: str | None = None,
) -> str:
    """Write README.md and, with `push_to_hub`, upload the folder in ONE commit; returns the model id.

    With `code_repo` the folder's auto_map points to that code repository and its code copies go (`share_code`).

    The repository is created first (as Trainer's `init_hf_repo` does, `--hub_model_id` or the output
    folder's name) so that the card names the real repo id (`user/name`) before the single upload.
    """
    if code_repo:
        share_code(output_dir, code_repo)
    if not push_to_hub:
        card.write(output_dir, local_model_id(output_dir))
        return local_model_id(output_dir)
    api = HfApi(token=hub_token)
    repo_id = api.create_repo(
        hub_model_id or Path(output_dir).absolute().name, private=hub_private_repo, exist_ok=True
    ).repo_id
    card.write(output_dir, repo_id)
    api.upload_folder(
        repo_id=repo_id,
        folder_path=str(output_dir),
        commit_message=commit_message,
        revision=hub_revision,
        ignore_patterns=IGNORE_PATTERNS,
    )
    print(f"pushed {output_dir} to https://huggingface.co/{repo_id} (one commit)")
    return repo_id
