"""Serve roformer-ext encoders on CPU: ONNX export (fp32 and int8) and ONNX Runtime inference, and torch int8.

`export_onnx` traces a model with `torch.onnx.export(..., dynamo=True)` with a dynamic batch and sequence length: the
graph takes padded batches (`input_ids`, `attention_mask`, `token_type_ids`, int64, (batch, seq)) of any length,
also longer than the example it was traced with (RoPE's angles are computed in the graph). `quantize_onnx` writes
ONNX Runtime's dynamic int8 version; `OnnxModel` runs either through an `InferenceSession` and, for the sentence
embedding (RoFormer-Sim's pooler output), encodes sentences as `SentenceTransformer.encode` does.

Packed (padding-free) batches are a training-time layout: the graph has no `position_ids` / `cu_seq_lens` inputs,
and `OnnxModel` refuses them with a ValueError (pad the sequences instead, or run packed rows in PyTorch).

`quantize_dynamic_int8` is torch's dynamic int8 (`torch.ao.quantization.quantize_dynamic` on the `nn.Linear`s).
torch marks `torch.ao.quantization` deprecated in favour of torchao, whose int8 CPU path measured 16x slower than
fp32 on a 384 -> 1536 -> 384 feed-forward (torchao 0.18, torch 2.13, this repository's 2-core machine) while
torch.ao's ran 1.5x faster; so the torch.ao call stays, its deprecation warning silenced at that one call, and
ONNX Runtime int8 is the path that does not depend on it.

Command line: `roformer-ext export MODEL_DIR OUT_DIR [--task ...] [--int8] [--force]` (docs/deployment.md).
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .conversion.output_folder import output_folder

#: What each exported task returns, by the class of the model (the output names of the ONNX graph).
TASK_OUTPUTS: dict[str, tuple[str, ...]] = {
    "feature-extraction": ("last_hidden_state",),
    "sentence-embedding": ("sentence_embedding",),
    "fill-mask": ("logits",),
    "sequence-classification": ("logits",),
    "token-classification": ("logits",),
    "question-answering": ("start_logits", "end_logits"),
}

#: The Auto class that loads a folder for each task.
TASK_AUTO_CLASSES: dict[str, str] = {
    "feature-extraction": "AutoModel",
    "sentence-embedding": "AutoModel",
    "fill-mask": "AutoModelForMaskedLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
}

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")

#: Inputs of a packed (padding-free) batch, which the ONNX graph does not take.
PACKED_INPUTS = ("position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")

ONNX_FILE, ONNX_INT8_FILE = "model.onnx", "model_int8.onnx"


def default_task(model: nn.Module) -> str:
    """The task an ONNX export of `model` serves, from its class."""
    from .modeling_roformer_ext import (
        RoFormerExtForCausalLM,
        RoFormerExtForMaskedLM,
        RoFormerExtForMultipleChoice,
        RoFormerExtForQuestionAnswering,
        RoFormerExtForSequenceClassification,
        RoFormerExtForTokenClassification,
        RoFormerExtModel,
    )

    if getattr(model.config, "model_type", None) != "roformer_ext":
        raise TypeError(
            f"export_onnx exports roformer-ext text models (model_type 'roformer_ext'), got {type(model).__name__} "
            f"with model_type {getattr(model.config, 'model_type', None)!r}."
        )
    if isinstance(model, (RoFormerExtForCausalLM, RoFormerExtForMultipleChoice)) or model.config.is_decoder:
        raise ValueError(
            f"{type(model).__name__} is not exported: generation needs the KV cache loop and multiple choice a 3-D "
            "input, which this exporter does not trace. Export an encoder (AutoModel, a classification, token "
            "classification, question answering or masked-LM head) and keep generation in PyTorch."
        )
    classes = {
        RoFormerExtForSequenceClassification: "sequence-classification",
        RoFormerExtForTokenClassification: "token-classification",
        RoFormerExtForQuestionAnswering: "question-answering",
        RoFormerExtForMaskedLM: "fill-mask",
    }
    for cls, task in classes.items():
        if isinstance(model, cls):
            return task
    if isinstance(model, RoFormerExtModel):
        return "sentence-embedding" if getattr(model, "pooler", None) is not None else "feature-extraction"
    raise TypeError(f"No ONNX task for {type(model).__name__}; export one of the classes named in docs/deployment.md.")


class _ExportedOutputs(nn.Module):
    """The model with positional inputs (input_ids, attention_mask, token_type_ids) and tuple outputs of `task`."""

    def __init__(self, model: nn.Module, task: str) -> None:
        super().__init__()
        self.model, self.task = model, task

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True
        )
        if self.task == "sentence-embedding":
            return (out.pooler_output,)
        return tuple(out[name] for name in TASK_OUTPUTS[self.task])


def export_onnx(
    model: nn.Module,
    path: str | os.PathLike,
    task: str | None = None,
    example_length: int = 16,
    opset_version: int | None = None,
) -> Path:
    """Export `model` (eval mode, fp32, CPU) to the ONNX file `path`, with dynamic batch and sequence length.

    `task` defaults to the model's class (`default_task`); "sentence-embedding" is the pooler output of a base model
    built with a pooler (RoFormer-Sim), "feature-extraction" its last hidden state. The graph is traced on a batch
    of 2 × `example_length` tokens; it runs on any batch size and length.
    """
    task = task or default_task(model)
    if task not in TASK_OUTPUTS:
        raise ValueError(f"Unknown task {task!r}; choose one of {', '.join(TASK_OUTPUTS)}.")
    inferred = default_task(model)
    if task == "sentence-embedding" and getattr(model, "pooler", None) is None:
        raise ValueError(
            "task='sentence-embedding' exports the pooler output (RoFormer-Sim's embedding), and this model has no "
            "pooler: load the folder with AutoModel after building it with pooler_activation='linear' or 'tanh', or "
            "export task='feature-extraction' and pool the last hidden state yourself."
        )
    if task != inferred and {task, inferred} != {"sentence-embedding", "feature-extraction"}:
        raise ValueError(f"{type(model).__name__} serves task {inferred!r}, not {task!r}: load the matching head.")
    if example_length < 2:
        raise ValueError(
            f"example_length must be >= 2 (a dynamic length needs an example above 1), got {example_length}."
        )
    encoding = getattr(model.base_model, "position_encoding", None)
    if encoding is not None and not encoding.capabilities.onnx:
        raise ValueError(
            f"position_encoding={model.config.position_encoding!r} does not export to ONNX (its capabilities say so); "
            "serve it with PyTorch (torch int8: roformer_ext.export.quantize_dynamic_int8) instead."
        )
    model = model.eval()
    if next(model.parameters()).dtype != torch.float32 or next(model.parameters()).device.type != "cpu":
        raise ValueError("export_onnx takes an fp32 model on the CPU: call model.float().cpu() first.")
    wrapper = _ExportedOutputs(model, task).eval()
    example = (
        torch.full((2, example_length), 5, dtype=torch.long),
        torch.ones(2, example_length, dtype=torch.long),
        torch.zeros(2, example_length, dtype=torch.long),
    )
    example[1][1, example_length // 2 :] = 0  # one padded row, so the traced graph masks padding
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    dynamic_shapes = {name: {0: batch, 1: sequence} for name in INPUT_NAMES}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        program = torch.onnx.export(
            wrapper,
            example,
            input_names=list(INPUT_NAMES),
            output_names=list(TASK_OUTPUTS[task]),
            dynamic_shapes=dynamic_shapes,
            opset_version=opset_version,
            dynamo=True,
            verbose=False,
        )
    program.save(str(path))
    return path


def quantize_onnx(source: str | os.PathLike, target: str | os.PathLike, per_channel: bool = False) -> Path:
    """ONNX Runtime's dynamic int8 quantization of `source` (int8 weights, activations quantized per batch)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = Path(target)
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=per_channel)
    return target


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` whose `nn.Linear`s run torch's dynamic int8 kernels (fbgemm on x86), for CPU inference."""
    quantized = copy.deepcopy(model).eval()
    with warnings.catch_warnings():
        # torch.ao.quantization is deprecated for torchao, whose CPU int8 path is the slower one (module docstring)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.ao")
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated.*")
        warnings.filterwarnings("ignore", message=r".*quantize_per_tensor.*deprecated.*")
        return torch.ao.quantization.quantize_dynamic(quantized, {nn.Linear}, dtype=torch.qint8)


class OnnxModel:
    """An exported roformer-ext model in an ONNX Runtime session.

    Call it with padded numpy / torch int arrays (`input_ids`, `attention_mask`, `token_type_ids`, as the tokenizer
    returns them) to get a dict of numpy outputs; `encode` embeds sentences (sentence-embedding exports).
    """

    def __init__(self, path: str | os.PathLike, tokenizer: Any = None, threads: int | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.path = Path(path)
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        self.output_names = [output.name for output in self.session.get_outputs()]
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(
        cls, folder: str | os.PathLike, file_name: str = ONNX_FILE, threads: int | None = None
    ) -> OnnxModel:
        """The ONNX file and the tokenizer of a folder written by `export_folder` / `roformer-ext export`."""
        from transformers import AutoTokenizer

        folder = Path(folder)
        if not (folder / file_name).is_file():
            raise FileNotFoundError(
                f"{folder / file_name} does not exist: write it with `roformer-ext export MODEL_DIR {folder}`"
                + (" --int8" if file_name == ONNX_INT8_FILE else "")
                + "."
            )
        return cls(folder / file_name, AutoTokenizer.from_pretrained(folder), threads)

    def __call__(self, input_ids: Any, attention_mask: Any = None, token_type_ids: Any = None, **kwargs: Any):
        packed = [name for name in kwargs if name in PACKED_INPUTS]
        if packed:
            raise ValueError(
                f"The ONNX graph takes padded batches (input_ids, attention_mask, token_type_ids), not packed ones "
                f"({', '.join(packed)} given): pad the sequences (the tokenizer's padding=True), or run packed rows in "
                "PyTorch."
            )
        if kwargs:
            raise TypeError(f"Unexpected inputs {sorted(kwargs)}; the ONNX graph takes {', '.join(INPUT_NAMES)}.")
        input_ids = _as_int64(input_ids, "input_ids")
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be (batch, seq), got shape {tuple(input_ids.shape)}.")
        feeds = {
            "input_ids": input_ids,
            "attention_mask": _as_int64(attention_mask, "attention_mask", like=input_ids, fill=1),
            "token_type_ids": _as_int64(token_type_ids, "token_type_ids", like=input_ids, fill=0),
        }
        for name, array in feeds.items():
            if array.shape != input_ids.shape:
                raise ValueError(f"{name} has shape {array.shape}, input_ids {input_ids.shape}: give them alike.")
        return dict(zip(self.output_names, self.session.run(self.output_names, feeds)))

    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int = 32,
        max_length: int | None = None,
        normalize_embeddings: bool = False,
    ):
        """Embed sentences as `SentenceTransformer(folder).encode` does: (n, hidden) float32, or (hidden,) for one."""
        import numpy as np

        if self.output_names != ["sentence_embedding"]:
            raise ValueError(
                f"encode needs a sentence-embedding export, this one returns {self.output_names}: export the Sim "
                "encoder with `roformer-ext export MODEL_DIR OUT_DIR --task sentence-embedding`."
            )
        if self.tokenizer is None:
            raise ValueError("encode needs a tokenizer: load with OnnxModel.from_pretrained(folder) or pass one.")
        single = isinstance(sentences, str)
        sentences = [sentences] if single else list(sentences)
        chunks = []
        for start in range(0, len(sentences), batch_size):
            batch = self.tokenizer(
                sentences[start : start + batch_size],
                padding=True,
                truncation=max_length is not None,
                max_length=max_length,
                return_tensors="np",
            )
            chunks.append(self(**{name: batch[name] for name in INPUT_NAMES if name in batch})["sentence_embedding"])
        embeddings = np.concatenate(chunks) if chunks else np.zeros((0, 0), dtype=np.float32)
        if normalize_embeddings:
            embeddings = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True).clip(min=1e-12)
        return embeddings[0] if single else embeddings


def _as_int64(value: Any, name: str, like: Any = None, fill: int = 0):
    import numpy as np

    if value is None:
        if like is None:
            raise ValueError(f"{name} is required.")
        return np.full(like.shape, fill, dtype=np.int64)
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {array.dtype}.")
    return array.astype(np.int64, copy=False)


def export_folder(
    model_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    task: str | None = None,
    int8: bool = False,
    example_length: int = 16,
    force: bool = False,
) -> list[Path]:
    """Load `model_dir` for `task`, write `out_dir`/model.onnx with the tokenizer and config beside it, and
    `model_int8.onnx` with `int8`. Returns the files written.

    As the converters do, everything is written to a hidden sibling folder that becomes `out_dir` by a rename once
    complete: a failed export leaves nothing. An existing `out_dir` is refused unless `force`, and even then replaced
    only when it is empty or an earlier roformer-ext output; `out_dir` may not be, hold or sit inside `model_dir`.

    The default task: "sentence-embedding" for a sentence-transformers folder (`modules.json`, as
    `save_for_sentence_transformers` and the converter write for RoFormer-Sim), else from the config's
    architectures (a head's task; a base model: sentence-embedding with a pooler, feature-extraction without)."""
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    from . import RoFormerExtConfig  # noqa: F401  (registers the Auto classes)

    if not Path(model_dir).is_dir():  # else transformers reads the path as a Hub repo id and says so
        state = "is a file" if Path(model_dir).exists() else "does not exist"
        raise FileNotFoundError(
            f"Model folder {str(model_dir)!r} {state}; give a saved roformer-ext folder (save_pretrained, a "
            "converter's or an example's output)."
        )
    config = AutoConfig.from_pretrained(model_dir)
    if task is None:
        task = (
            "sentence-embedding" if (Path(model_dir) / "modules.json").is_file() else _task_from_architectures(config)
        )
    if task not in TASK_AUTO_CLASSES:
        raise ValueError(f"Unknown task {task!r}; choose one of {', '.join(TASK_AUTO_CLASSES)}.")
    model = getattr(transformers, TASK_AUTO_CLASSES[task]).from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    out_dir = Path(out_dir).absolute()
    names = [ONNX_FILE, ONNX_INT8_FILE] if int8 else [ONNX_FILE]
    with output_folder(out_dir, force=force, sources=[model_dir]) as partial:
        export_onnx(model, partial / ONNX_FILE, task=task, example_length=example_length)
        tokenizer.save_pretrained(partial)
        model.config.save_pretrained(partial)
        if int8:
            quantize_onnx(partial / ONNX_FILE, partial / ONNX_INT8_FILE)
    return [out_dir / name for name in names]


def _task_from_architectures(config: Any) -> str:
    architectures = config.architectures or []
    names = {
        "RoFormerExtForSequenceClassification": "sequence-classification",
        "RoFormerExtForTokenClassification": "token-classification",
        "RoFormerExtForQuestionAnswering": "question-answering",
        "RoFormerExtForMaskedLM": "fill-mask",
    }
    for architecture in architectures:
        if architecture in names:
            return names[architecture]
    if getattr(config, "pooler_activation", None):
        return "sentence-embedding"
    return "feature-extraction"


__all__ = [
    "ONNX_FILE",
    "ONNX_INT8_FILE",
    "OnnxModel",
    "TASK_OUTPUTS",
    "default_task",
    "export_folder",
    "export_onnx",
    "quantize_dynamic_int8",
    "quantize_onnx",
]
