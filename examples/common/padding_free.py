"""Padding-free batches for the Trainer examples: every sequence of a batch in one row, no padding token computed.

A RoFormerExt model reads a packed row the way transformers' `DataCollatorWithFlattening` builds it (positions
restarting at 0, `cu_seq_lens_q` / `cu_seq_lens_k`, `max_length_q` / `max_length_k`) and attends within each
sequence only; its dense layers then run on real tokens only. That collator keeps only `input_ids` and per-token
`labels`, though: it drops `token_type_ids` (sentence pairs) and cannot carry one label per sequence. So here one
of transformers' padding collators builds the batch as usual (`DataCollatorWithPadding`,
`DataCollatorForTokenClassification`, `DataCollatorForLanguageModeling`, whose masking is per token, so masking
the padded rows and then dropping the padding masks exactly what it would mask unpadded), and
`FlattenPaddedBatch` removes the padding: the per-token tensors become one (1, total) row, a per-sequence label
stays (sequences,).

`PaddingFreeTrainer` gives evaluation and prediction back one row per sequence, as a padded batch would, so that
metrics that look at sequences (entity F1, predictions files) see the same sequences, in the data set's order.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import Dataset, Sampler, SequentialSampler
from transformers import PreTrainedModel, Trainer, TrainingArguments
from transformers.trainer_utils import has_length

#: Per-token inputs of a padded batch; `labels` joins them for token-level tasks (`per_token_labels=True`).
TOKEN_KEYS = ("input_ids", "token_type_ids", "special_tokens_mask")


@dataclass
class BatchingArguments:
    """How training batches are formed: packed without padding, and/or grouped by length."""

    padding_free: bool = field(
        default=True,
        metadata={
            "help": "Pack each batch into one row without padding (attention stays within each sequence); "
            "--no_padding_free pads each batch to its longest sequence instead."
        },
    )
    group_by_length: bool = field(
        default=False,
        metadata={
            "help": "Draw training batches of similar lengths (transformers' LengthGroupedSampler; the same as "
            "--train_sampling_strategy group_by_length): less padding when padded."
        },
    )

    def apply(self, training_args: TrainingArguments) -> None:
        """`--group_by_length` as transformers 5 spells it: `train_sampling_strategy="group_by_length"`."""
        if not self.group_by_length:
            return
        if training_args.train_sampling_strategy not in ("random", "group_by_length"):
            raise ValueError(
                f"--group_by_length contradicts --train_sampling_strategy {training_args.train_sampling_strategy}: "
                "give one of them."
            )
        training_args.train_sampling_strategy = "group_by_length"


def check_padding_free_model(model: PreTrainedModel) -> None:
    """Only a model that reads sequence boundaries from a packed row may get one: any other would attend across
    the packed sequences without an error."""
    model_type = getattr(model.config, "model_type", None)
    if model_type != "roformer_ext":
        raise ValueError(
            f"--padding_free packs a batch into one row, which only RoFormerExt models (model_type 'roformer_ext') "
            f"split back into sequences; this model is {model_type!r}. Pass --no_padding_free."
        )


class FlattenPaddedBatch:
    """Wrap a padding collator: its batch, with the padding removed and the sequences packed into one row.

    Returns `input_ids` (and `token_type_ids`, per-token `labels`) of shape (1, total), `position_ids` restarting
    at 0 in each sequence, and the sequence boundaries as flash-attention kwargs, which the CPU path uses too.
    """

    def __init__(self, collator: Callable[[list[dict]], dict], per_token_labels: bool) -> None:
        self.collator = collator
        self.token_keys = TOKEN_KEYS + (("labels",) if per_token_labels else ())

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = dict(self.collator(features))
        if "attention_mask" not in batch:
            raise ValueError(
                "The padding collator returned no attention_mask, so the padding cannot be told from the tokens: "
                "use a tokenizer whose model_input_names include 'attention_mask'."
            )
        mask = batch.pop("attention_mask").bool()
        starts = mask & ~F.pad(mask, (1, 0))[:, :-1]  # a 0 -> 1 step (or a 1 in the first column)
        if bool((starts.sum(dim=1) != 1).any()):
            raise ValueError("Every row of a padded batch needs one contiguous run of tokens to pack it.")
        packed: dict[str, Any] = {}
        for key, value in batch.items():
            if key in self.token_keys and isinstance(value, torch.Tensor):
                if value.shape[:2] != mask.shape:
                    raise ValueError(
                        f"{key} has shape {tuple(value.shape)}, not the padded batch's {tuple(mask.shape)}."
                    )
                value = value[mask][None]  # (1, total)
            packed[key] = value
        lengths = mask.sum(dim=1)
        cu_seq_lens = F.pad(torch.cumsum(lengths, 0), (1, 0)).to(torch.int32)
        longest = int(lengths.max())
        packed["position_ids"] = (mask.cumsum(dim=1) - 1)[mask][None]  # (1, total), restarting at 0 per sequence
        packed.update(cu_seq_lens_q=cu_seq_lens, cu_seq_lens_k=cu_seq_lens, max_length_q=longest, max_length_k=longest)
        return packed


def _per_sequence(value: Any, cu_seq_lens: torch.Tensor) -> Any:
    """A packed (1, total, ...) tensor as (sequences, longest, ...), padded with -100 (Trainer's padding index)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_per_sequence(v, cu_seq_lens) for v in value)
    total = int(cu_seq_lens[-1])
    if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[:2] == (1, total):
        pieces = torch.tensor_split(value[0], cu_seq_lens[1:-1].tolist())
        return torch.nn.utils.rnn.pad_sequence(list(pieces), batch_first=True, padding_value=-100)
    return value


class PaddingFreeTrainer(Trainer):
    """`Trainer` whose evaluation and prediction see one row per sequence, as with padded batches.

    A packed batch's token-level logits and labels are (1, total): concatenated over batches they would make one
    "sequence" per batch, so entity spans could join across sentences and a predictions file would get one line
    per batch. Sequence-level outputs (classification logits) are already one row per sequence and pass through.

    Evaluation and prediction read the data in its own order. transformers 5's Trainer also draws evaluation
    batches through `LengthGroupedSampler` under `train_sampling_strategy="group_by_length"`, so `predict()` gave
    its rows in another order than the test set's: the metrics were right (labels travel with the rows), but a
    predictions file written in test-set order named the wrong rows (main job: 0.50 "accuracy" against the test
    labels for a 0.82 model).
    """

    def _get_eval_sampler(self, eval_dataset: Dataset) -> Sampler | None:
        """Trainer's own choice without grouping: in order (several processes: accelerate shards it in order)."""
        if eval_dataset is None or not has_length(eval_dataset) or self.args.world_size > 1:
            return None
        return SequentialSampler(eval_dataset)

    def prediction_step(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor | Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[torch.Tensor | None, Any, Any]:
        loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        cu_seq_lens = inputs.get("cu_seq_lens_q")
        if cu_seq_lens is None:
            return loss, logits, labels
        cu_seq_lens = cu_seq_lens.cpu()
        return loss, _per_sequence(logits, cu_seq_lens), _per_sequence(labels, cu_seq_lens)
