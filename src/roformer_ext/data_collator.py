"""Packed (padding-free) training batches as transformers' `DataCollatorWithFlattening` makes them, but keeping
`token_type_ids` and a per-sequence class label, which it drops or turns into token labels."""

from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F

#: Per-token inputs of a padded batch; `labels` joins them for token-level tasks (`per_token_labels=True`).
TOKEN_KEYS = ("input_ids", "token_type_ids", "special_tokens_mask")


def _packing_fields(lengths: torch.Tensor) -> dict[str, Any]:
    """Positions restarting at 0 and the flash-attention kwargs of sequences of these lengths, packed in one row."""
    cu_seq_lens = F.pad(torch.cumsum(lengths, 0), (1, 0)).to(torch.int32)
    longest = int(lengths.max())
    starts = torch.repeat_interleave(cu_seq_lens[:-1].long(), lengths)
    positions = torch.arange(int(cu_seq_lens[-1])) - starts
    flash = dict(cu_seq_lens_q=cu_seq_lens, cu_seq_lens_k=cu_seq_lens, max_length_q=longest, max_length_k=longest)
    return dict(position_ids=positions[None], **flash)


class DataCollatorForPackedClassification:
    """Features with one `label` / `labels` each -> one packed row (1, total) and `labels` (sequences, ...)."""

    def __init__(self, return_tensors: str = "pt") -> None:
        if return_tensors != "pt":
            raise ValueError(
                f"DataCollatorForPackedClassification returns PyTorch tensors only; got {return_tensors!r}."
            )

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        if not features:
            raise ValueError("DataCollatorForPackedClassification got no features: a batch needs one sequence or more.")
        sequences = [list(feature["input_ids"]) for feature in features]
        empty = [index for index, sequence in enumerate(sequences) if not sequence]
        if empty:
            raise ValueError(f"Features {empty} have no input_ids; a packed sequence needs at least one token.")
        lengths = torch.tensor([len(sequence) for sequence in sequences])
        batch: dict[str, Any] = {"input_ids": torch.tensor([token for s in sequences for token in s])[None]}
        if "token_type_ids" in features[0]:
            batch["token_type_ids"] = torch.tensor([t for feature in features for t in feature["token_type_ids"]])[None]
            if batch["token_type_ids"].shape != batch["input_ids"].shape:
                raise ValueError("token_type_ids must have one entry per input id in every feature.")
        batch.update(_packing_fields(lengths))
        labels = [_label_of(feature, index) for index, feature in enumerate(features)]
        unlabelled = [index for index, label in enumerate(labels) if label is None]
        if unlabelled and len(unlabelled) < len(labels):  # every label or none: a mix would misalign the rows
            raise ValueError(
                f"Features {unlabelled} have no label ('label' or 'labels') while the others have one: label every "
                "feature (training, evaluation) or none (prediction)."
            )
        if not unlabelled:
            labels = [v.tolist() if isinstance(v, torch.Tensor) else v for v in labels]
            # regression values and multi-label targets (one 0/1 per class) are float, as transformers' losses take
            real = any(isinstance(v, (float, list, tuple)) for v in labels)
            batch["labels"] = torch.tensor(labels, dtype=torch.float if real else torch.long)
        return batch


def _label_of(feature: dict[str, Any], index: int) -> Any:
    """A feature's class label under `labels` or `label` (None: no label); both at once is ambiguous."""
    given = [name for name in ("labels", "label") if feature.get(name) is not None]
    if len(given) > 1:
        raise ValueError(f"Feature {index} has both 'label' and 'labels'; give its class label under one name.")
    return feature[given[0]] if given else None


class FlattenPaddedBatch:
    """A padding collator's batch with the padding removed: per-token keys (1, total), a sequence label (sequences,)."""

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
        packed.update(_packing_fields(mask.sum(dim=1)))
        return packed
