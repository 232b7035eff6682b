"""Packed batches through the collator, the question-answering head and PaddingFreeTrainer line up with the padded
batch row for row (issue #31, defects 6, 7 and 9)."""

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

ATOL = 1e-5


def test_collator_checks_every_feature_for_a_label():
    """Defect (issue #31, 7): only the first feature was checked for a label, so a later feature's label was dropped
    silently (first unlabelled) or a later missing one raised a bare KeyError. Every label or none; a mix is a
    ValueError naming the features."""
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
