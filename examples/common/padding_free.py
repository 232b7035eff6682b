"""Padding-free batches in the examples: the command-line switch and the model check.

The collator (`roformer_ext.data_collator.FlattenPaddedBatch`) and the Trainer (`roformer_ext.trainer.
PaddingFreeTrainer`) are the package's: one of transformers' padding collators builds each batch as usual and
`FlattenPaddedBatch` removes the padding (per-token tensors become one (1, total) row, a per-sequence label stays
(sequences,)); `PaddingFreeTrainer` gives evaluation and prediction back one row per sequence, in the data set's order.
"""

from dataclasses import dataclass, field

from transformers import PreTrainedModel, TrainingArguments


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
