"""Serve encoders on CPU: ONNX export (fp32, dynamic int8) of a graph taking padded int64 (batch, seq) batches of any
size, never packed ones; ONNX Runtime inference; torch's dynamic int8 (docs/deployment.md)."""

import copy
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .conversion.output_folder import output_folder

#: What each exported task returns (the output names of the ONNX graph).
TASK_OUTPUTS: dict[str, tuple[str, ...]] = {
    "feature-extraction": ("last_hidden_state",),
    "sentence-embedding": ("sentence_embedding",),
    "fill-mask": ("logits",),
    "sequence-classification": ("logits",),
    "token-classification": ("logits",),
    "question-answering": ("start_logits", "end_logits"),
}
#: The head classes' tasks; a base model serves sentence-embedding (with a pooler, RoFormer-Sim) or feature-extraction.
HEAD_TASKS = {
    "RoFormerExtForSequenceClassification": "sequence-classification",
    "RoFormerExtForTokenClassification": "token-classification",
    "RoFormerExtForQuestionAnswering": "question-answering",
    "RoFormerExtForMaskedLM": "fill-mask",
}
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
#: Inputs of a packed (padding-free) batch, which the ONNX graph does not take.
PACKED_INPUTS = ("position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")
ONNX_FILE, ONNX_INT8_FILE = "model.onnx", "model_int8.onnx"


def _task(class_names: Sequence[str], pooler: bool) -> str:
    heads = [HEAD_TASKS[name] for name in class_names if name in HEAD_TASKS]
    return heads[0] if heads else "sentence-embedding" if pooler else "feature-extraction"


def default_task(model: nn.Module) -> str:
    """The task an ONNX export of `model` serves, from its class."""
    model_type = getattr(model.config, "model_type", None)
    if model_type != "roformer_ext":
        raise TypeError(
            f"export_onnx exports roformer-ext text models (model_type 'roformer_ext'), got {type(model).__name__} "
            f"with model_type {model_type!r}."
        )
    names = [cls.__name__ for cls in type(model).__mro__]
    if {"RoFormerExtForCausalLM", "RoFormerExtForMultipleChoice"} & set(names) or model.config.is_decoder:
        raise ValueError(
            f"{type(model).__name__} is not exported: generation needs the KV cache loop and multiple choice a 3-D "
            "input. Export an encoder (AutoModel, a classification, token classification, question answering or "
            "masked-LM head) and keep generation in PyTorch."
        )
    return _task(names, getattr(model, "pooler", None) is not None)


class _ExportedOutputs(nn.Module):
    """The model with positional inputs and tuple outputs of `task`."""

    def __init__(self, model: nn.Module, task: str) -> None:
        super().__init__()
        self.model, self.task = model, task

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):
        out = self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True)
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
    """Export `model` (fp32, CPU) to `path` with dynamic batch and length; `task` defaults to `default_task`."""
    inferred = default_task(model)
    task = task or inferred
    if task not in TASK_OUTPUTS:
        raise ValueError(f"Unknown task {task!r}; choose one of {', '.join(TASK_OUTPUTS)}.")
    if task == "sentence-embedding" and getattr(model, "pooler", None) is None:
        raise ValueError(
            "task='sentence-embedding' exports the pooler output (RoFormer-Sim's embedding), and this model has no "
            "pooler: build it with pooler_activation='linear' or 'tanh', or export task='feature-extraction'."
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
    parameter = next(model.parameters())
    if parameter.dtype != torch.float32 or parameter.device.type != "cpu":
        raise ValueError("export_onnx takes an fp32 model on the CPU: call model.float().cpu() first.")
    example = (
        torch.full((2, example_length), 5, dtype=torch.long),
        torch.ones(2, example_length, dtype=torch.long),
        torch.zeros(2, example_length, dtype=torch.long),
    )
    example[1][1, example_length // 2 :] = 0  # one padded row, so the traced graph masks padding
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        program = torch.onnx.export(
            _ExportedOutputs(model.eval(), task).eval(),
            example,
            input_names=list(INPUT_NAMES),
            output_names=list(TASK_OUTPUTS[task]),
            dynamic_shapes={name: {0: batch, 1: sequence} for name in INPUT_NAMES},
            opset_version=opset_version,
            dynamo=True,
            verbose=False,
        )
    program.save(str(path))
    return path


def quantize_onnx(source: str | os.PathLike, target: str | os.PathLike, per_channel: bool = False) -> Path:
    """ONNX Runtime's dynamic int8 quantization of `source` (int8 weights, activations quantized per batch)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=per_channel)
    return Path(target)


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` whose `nn.Linear`s run torch's dynamic int8 kernels (fbgemm on x86), for CPU inference."""
    quantized = copy.deepcopy(model).eval()
    with warnings.catch_warnings():
        # torch.ao.quantization is deprecated for torchao, whose CPU int8 path measured 16x slower than fp32 on a
        # 384 -> 1536 -> 384 feed-forward (torchao 0.18, torch 2.13), torch.ao's 1.5x faster (docs/deployment.md)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.ao")
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated.*")
        warnings.filterwarnings("ignore", message=r".*quantize_per_tensor.*deprecated.*")
        return torch.ao.quantization.quantize_dynamic(quantized, {nn.Linear}, dtype=torch.qint8)


class OnnxModel:
    """An exported model in an ONNX Runtime session: padded int arrays in, a dict of numpy outputs out."""

    def __init__(self, path: str | os.PathLike, tokenizer: Any = None, threads: int | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.path, self.tokenizer = Path(path), tokenizer
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        self.output_names = [output.name for output in self.session.get_outputs()]

    @classmethod
    def from_pretrained(
        cls, folder: str | os.PathLike, file_name: str = ONNX_FILE, threads: int | None = None
    ) -> "OnnxModel":
        """The ONNX file and the tokenizer of a folder written by `export_folder` / `roformer-ext export`."""
        from transformers import AutoTokenizer

        folder = Path(folder)
        if not (folder / file_name).is_file():
            flag = " --int8" if file_name == ONNX_INT8_FILE else ""
            raise FileNotFoundError(
                f"{folder / file_name} does not exist: write it with `roformer-ext export MODEL_DIR {folder}`{flag}."
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
        import numpy as np

        if input_ids is None:
            raise ValueError("input_ids is required.")
        feeds = {}
        for name, value in zip(INPUT_NAMES, (input_ids, attention_mask, token_type_ids)):
            if value is None:  # all real tokens, one segment (the model's own defaults)
                value = np.full(feeds["input_ids"].shape, int(name == "attention_mask"))
            array = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value)
            if not np.issubdtype(array.dtype, np.integer):
                raise TypeError(f"{name} must hold integers, got dtype {array.dtype}.")
            feeds[name] = array.astype(np.int64, copy=False)
            if feeds[name].shape != feeds["input_ids"].shape or array.ndim != 2:
                raise ValueError(
                    f"{name} has shape {array.shape}, input_ids {feeds['input_ids'].shape}: (batch, seq) both."
                )
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
        chunks, options = [], dict(padding=True, truncation=max_length is not None, max_length=max_length)
        for start in range(0, len(sentences), batch_size):
            batch = self.tokenizer(sentences[start : start + batch_size], return_tensors="np", **options)
            chunks.append(self(**{name: batch[name] for name in INPUT_NAMES if name in batch})["sentence_embedding"])
        embeddings = np.concatenate(chunks) if chunks else np.zeros((0, 0), dtype=np.float32)
        if normalize_embeddings:
            embeddings = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True).clip(min=1e-12)
        return embeddings[0] if single else embeddings


def export_folder(
    model_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    task: str | None = None,
    int8: bool = False,
    example_length: int = 16,
    force: bool = False,
) -> list[Path]:
    """Write `out_dir`/model.onnx (and model_int8.onnx) with the tokenizer and config, all or nothing."""
    import transformers

    from . import RoFormerExtConfig  # noqa: F401  (registers the Auto classes)

    if not Path(model_dir).is_dir():  # else transformers reads the path as a Hub repo id and says so
        state = "is a file" if Path(model_dir).exists() else "does not exist"
        raise FileNotFoundError(
            f"Model folder {str(model_dir)!r} {state}; give a saved roformer-ext folder (save_pretrained, a "
            "converter's or an example's output)."
        )
    config = transformers.AutoConfig.from_pretrained(model_dir)
    if task is None:
        pooler = bool(getattr(config, "pooler_activation", None))
        modules = (Path(model_dir) / "modules.json").is_file()
        task = "sentence-embedding" if modules else _task(config.architectures or [], pooler)
    if task not in TASK_OUTPUTS:
        raise ValueError(f"Unknown task {task!r}; choose one of {', '.join(TASK_OUTPUTS)}.")
    head = next((name for name, head_task in HEAD_TASKS.items() if head_task == task), None)
    auto_class = "AutoModel" + head.removeprefix("RoFormerExt") if head else "AutoModel"
    model = getattr(transformers, auto_class).from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    out_dir = Path(out_dir).absolute()
    with output_folder(out_dir, force=force, sources=[model_dir]) as partial:
        export_onnx(model, partial / ONNX_FILE, task=task, example_length=example_length)
        tokenizer.save_pretrained(partial)
        model.config.save_pretrained(partial)
        if int8:
            quantize_onnx(partial / ONNX_FILE, partial / ONNX_INT8_FILE)
    return [out_dir / name for name in ([ONNX_FILE, ONNX_INT8_FILE] if int8 else [ONNX_FILE])]
