"""`Trainer` for padding-free (packed) batches (not imported by `import roformer_ext`, which loads no Trainer)."""

from typing import Any

import torch
from torch.utils.data import Dataset, Sampler, SequentialSampler
from transformers import Trainer
from transformers.trainer_utils import has_length

from .packing import unpack


def _per_sequence(value: Any, cu_seq_lens: torch.Tensor) -> Any:
    """A packed (1, total, ...) tensor as (sequences, longest, ...), padded with -100 (Trainer's padding index)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_per_sequence(v, cu_seq_lens) for v in value)
    total = int(cu_seq_lens[-1])
    if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[:2] == (1, total):
        return unpack(value, cu_seq_lens, fill=-100)
    return value


class PaddingFreeTrainer(Trainer):
    """`Trainer` whose evaluation sees one row per sequence of a packed batch (padded with -100), in the data's order
    (grouping by length would make a predictions file name the wrong rows)."""

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
        if inputs.get("cu_seq_lens_q") is None:
            return loss, logits, labels
        cu_seq_lens = inputs["cu_seq_lens_q"].cpu()
        if "inputs" in (self.args.include_for_metrics or []):
            # Trainer reads compute_metrics' inputs from this batch (its own, used up here) right after this step
            name = getattr(self.model, "main_input_name", "input_ids")
            if name in inputs:
                inputs[name] = _per_sequence(inputs[name], cu_seq_lens)
        return loss, _per_sequence(logits, cu_seq_lens), _per_sequence(labels, cu_seq_lens)
