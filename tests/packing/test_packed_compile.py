"""Packed batches under torch.compile equal the eager step, forward and backward (1e-5, position-sensitive)."""

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config, tiny_config
from test_packing import sequences
from transformers import DataCollatorWithFlattening

from roformer_ext import (
    DataCollatorForPackedClassification,
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtForSequenceClassification,
)


def batches() -> dict:
    seqs = sequences(11)
    features = [{"input_ids": s} for s in seqs]
    with_cu = DataCollatorWithFlattening(return_tensors="pt", return_flash_attn_kwargs=True)(features)
    classified = DataCollatorForPackedClassification()([{"input_ids": s, "label": i % 2} for i, s in enumerate(seqs)])
    positions = DataCollatorWithFlattening(return_tensors="pt")(features)
    return {
        "mlm-cu_seq_lens": (RoFormerExtForMaskedLM, with_cu),
        "mlm-positions": (RoFormerExtForMaskedLM, positions),
        "classification": (RoFormerExtForSequenceClassification, classified),
        "causal-cu_seq_lens": (RoFormerExtForCausalLM, with_cu),
    }


@pytest.mark.parametrize(
    ("case", "attn_implementation", "attention_type"),
    [
        ("mlm-cu_seq_lens", "eager", "softmax"),
        ("mlm-positions", "sdpa", "softmax"),
        ("classification", "eager", "softmax"),
        ("mlm-cu_seq_lens", "sdpa", "softmax"),
        ("classification", "sdpa", "softmax"),
        ("mlm-cu_seq_lens", "sdpa", "linear"),
        ("mlm-positions", "sdpa", "linear"),
        ("causal-cu_seq_lens", "sdpa", "linear"),
    ],
)
def test_packed_training_step_compiles_and_equals_eager(case, attn_implementation, attention_type):
    model_class, batch = batches()[case]
    torch.manual_seed(0)
    kinds = dict(attn_implementation=attn_implementation, attention_type=attention_type)
    model = model_class(position_sensitive_config(is_decoder=model_class is RoFormerExtForCausalLM, **kinds)).train()
    steps = []
    one_graph = attention_type == "softmax" and (attn_implementation == "eager" or case == "mlm-positions")
    for forward in (model, torch.compile(model, fullgraph=one_graph)):
        model.zero_grad()
        output = forward(**batch)
        output.loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        steps.append((output.logits.detach(), output.loss.detach(), grads))
    torch.testing.assert_close(steps[1], steps[0], rtol=1e-5, atol=1e-5)  # logits, loss and every gradient
    assert_position_sensitive(model, lambda m: m(**batch), 1e-5)  # the eager step: logits and loss


def test_packed_step_compiles_under_bf16_autocast():
    """Per-sequence SDPA compiled under bf16 autocast: the eager loss (bf16 tolerance 2e-2)."""
    _, batch = batches()["mlm-cu_seq_lens"]
    torch.manual_seed(0)
    model = RoFormerExtForMaskedLM(tiny_config(attn_implementation="sdpa")).train()
    losses = []
    for forward in (model, torch.compile(model)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            output = forward(**batch)
        output.loss.backward()
        losses.append(output.loss.detach())
    torch.testing.assert_close(losses[1], losses[0], rtol=2e-2, atol=2e-2)
