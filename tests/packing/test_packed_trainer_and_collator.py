"""Collator, question-answering head and PaddingFreeTrainer line up with the padded batch (issue #31)."""

import pytest
import torch
from conftest import tiny_config
from test_packing import LENGTHS, model_for, packed, padded, sequences
from transformers import TrainingArguments

from roformer_ext import (
    DataCollatorForPackedClassification,
    RoFormerExtForQuestionAnswering,
    RoFormerExtForSequenceClassification,
)
from roformer_ext.trainer import PaddingFreeTrainer


def test_collator_checks_every_feature_for_a_label():
    """Every feature has a label or none does; a mix is a ValueError naming the features."""
    collate = DataCollatorForPackedClassification()
    seqs = sequences()
    with pytest.raises(ValueError, match=r"Features \[0, 2\] have no label"):
        collate([{"input_ids": seqs[0]}, {"input_ids": seqs[1], "label": 1}, {"input_ids": seqs[2]}])
    with pytest.raises(ValueError, match=r"Features \[1\] have no label"):
        collate([{"input_ids": seqs[0], "label": 0}, {"input_ids": seqs[1]}])
    with pytest.raises(ValueError, match="Feature 1 has both 'label' and 'labels'"):
        collate([{"input_ids": seqs[0], "label": 0}, {"input_ids": seqs[1], "label": 1, "labels": 1}])
    mixed_names = collate([{"input_ids": seqs[0], "labels": 2}, {"input_ids": seqs[1], "label": 1}])
    assert mixed_names["labels"].tolist() == [2, 1]
    assert "labels" not in collate([{"input_ids": s} for s in seqs])  # prediction: no labels at all


def test_packed_question_answering_masks_padding_as_the_padded_batch_does():
    """Packed and padded question answering both set the pads' logits to the dtype's minimum."""
    model = model_for(RoFormerExtForQuestionAnswering, "sdpa")
    seqs = sequences(5)
    input_ids, attention_mask = padded(seqs)
    with torch.no_grad():
        ref, out = model(input_ids, attention_mask=attention_mask), model(**packed(seqs))
    lowest = torch.finfo(ref.start_logits.dtype).min
    for logits in (out.start_logits, ref.start_logits, out.end_logits, ref.end_logits):
        assert all((logits[row, length:] == lowest).all() for row, length in enumerate(LENGTHS))
        assert all((logits[row, :length] > lowest).all() for row, length in enumerate(LENGTHS))


def test_padding_free_trainer_gives_compute_metrics_the_inputs_per_sequence(tmp_path):
    """include_for_metrics=['inputs']: row i holds sequence i's tokens (then -100), as predictions and labels."""
    torch.manual_seed(0)
    model = RoFormerExtForSequenceClassification(tiny_config(num_labels=3))
    generator = torch.Generator().manual_seed(3)
    lengths = [5, 9, 3, 8, 6, 4, 7, 2, 9, 5, 3]
    tokens = [torch.randint(5, 99, (n,), generator=generator).tolist() for n in lengths]
    data = [{"input_ids": ids, "label": i % 3} for i, ids in enumerate(tokens)]
    seen = {}

    def compute_metrics(prediction):
        seen.update(inputs=prediction.inputs, predictions=prediction.predictions, labels=prediction.label_ids)
        return {}

    quiet = dict(report_to=[], use_cpu=True, disable_tqdm=True)
    args = TrainingArguments(str(tmp_path), per_device_eval_batch_size=4, include_for_metrics=["inputs"], **quiet)
    collator = DataCollatorForPackedClassification()
    PaddingFreeTrainer(model, args, collator, eval_dataset=data, compute_metrics=compute_metrics).evaluate()
    assert seen["inputs"].shape == (len(data), max(lengths))
    assert seen["predictions"].shape == (len(data), 3) and seen["labels"].tolist() == [d["label"] for d in data]
    for row, feature in zip(seen["inputs"].tolist(), data):
        length = len(feature["input_ids"])
        assert row[:length] == feature["input_ids"] and all(t == -100 for t in row[length:])
