"""DataCollatorWithFlattening's packed rows equal the padded batch per sequence (1e-5), on position-sensitive models."""

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config, tiny_config
from transformers import DataCollatorWithFlattening

from roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtForMultipleChoice,
    RoFormerExtForQuestionAnswering,
    RoFormerExtForSequenceClassification,
    RoFormerExtForTokenClassification,
    RoFormerExtModel,
)
from roformer_ext.packing import per_sequence_sdpa

LENGTHS = (5, 9, 3, 8)  # total 25: torch 2.13's CPU flex attention is wrong at lengths 8, 24, 40 (≡ 8 mod 16)
ATOL = 1e-5


def sequences(seed: int = 0, lengths=LENGTHS) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(5, 99, (n,), generator=generator).tolist() for n in lengths]


def padded(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(map(len, seqs))
    input_ids = torch.tensor([s + [0] * (longest - len(s)) for s in seqs])
    attention_mask = torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in seqs])
    return input_ids, attention_mask


def packed(seqs: list[list[int]], **collator_options) -> dict:
    collator = DataCollatorWithFlattening(return_tensors="pt", **collator_options)
    batch = collator([{"input_ids": s} for s in seqs])
    batch.pop("labels", None)
    return batch


def per_sequence(packed_states: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.split(packed_states[0], LENGTHS))


def model_for(model_class, attn_implementation: str, **overrides):
    torch.manual_seed(0)
    config = position_sensitive_config(**overrides)
    if model_class is RoFormerExtForCausalLM:
        config.is_decoder = True
    model = model_class(config).eval()
    model.set_attn_implementation(attn_implementation)
    return model


COLLATOR_OPTIONS = [
    {},  # position_ids alone
    {"return_flash_attn_kwargs": True},
    {"return_seq_idx": True, "return_position_ids": True},
]


@pytest.mark.parametrize("options", COLLATOR_OPTIONS, ids=["positions", "cu_seq_lens", "seq_idx"])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa", "flex_attention"])
@pytest.mark.parametrize("model_class", [RoFormerExtModel, RoFormerExtForCausalLM])
def test_packed_hidden_states_equal_padded(model_class, attn_implementation, options):
    model = model_for(model_class, attn_implementation)
    seqs = sequences()
    input_ids, attention_mask = padded(seqs)
    with torch.no_grad():
        reference = model(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states[-1]
        out = model(**packed(seqs, **options), output_hidden_states=True).hidden_states[-1]
    for row, states in enumerate(per_sequence(out)):
        torch.testing.assert_close(states, reference[row, : LENGTHS[row]], rtol=ATOL, atol=ATOL)
    assert_position_sensitive(model, lambda m: m(**packed(seqs, **options)), ATOL)


def test_positions_that_jump_forward_are_one_sequence():
    """Only a restart at 0 separates sequences: [0, 1, 2, 10, 11] is one sequence attending across the jump."""
    model = model_for(RoFormerExtModel, "sdpa")
    input_ids = torch.randint(5, 99, (1, 5))
    jump = torch.tensor([[0, 1, 2, 10, 11]])
    with torch.no_grad():
        out = model(input_ids, position_ids=jump).last_hidden_state
        reference = model(input_ids, position_ids=jump, attention_mask=torch.ones_like(input_ids)).last_hidden_state
    torch.testing.assert_close(out, reference)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_mean_pooling_reads_each_sequences_own_tokens(attn_implementation):
    """classifier_pooling='mean' reads each sequence's own tokens, padded or packed."""
    mean = dict(num_labels=3, classifier_pooling="mean")
    model = model_for(RoFormerExtForSequenceClassification, attn_implementation, **mean)
    seqs = sequences(6)
    input_ids, attention_mask = padded(seqs)
    labels = torch.tensor([1, 0, 2, 1])
    with torch.no_grad():
        alone = [model.roformer(torch.tensor([s])).last_hidden_state[0].mean(dim=0) for s in seqs]
        expected = model.classifier(torch.stack(alone))
        ref = model(input_ids, attention_mask=attention_mask, labels=labels)
        out = model(**packed(seqs), labels=labels)
    torch.testing.assert_close(ref.logits, expected, rtol=ATOL, atol=ATOL)
    torch.testing.assert_close(out.logits, expected, rtol=ATOL, atol=ATOL)
    torch.testing.assert_close(out.loss, ref.loss, rtol=ATOL, atol=ATOL)
    assert_position_sensitive(model, lambda m: m(**packed(seqs)).logits, ATOL)
    with pytest.raises(ValueError, match="2D padding mask"):
        square = attention_mask.bool()[:, None, None, :].expand(-1, 1, input_ids.shape[1], -1)
        model(input_ids, attention_mask=square)
    with pytest.raises(ValueError, match="Unknown classifier_pooling 'max'"):
        tiny_config(classifier_pooling="max")


def test_varlen_kwargs_reach_other_attention_backends():
    """A registered non-sdpa backend gets cu_seq_lens_q/k and max_length_q/k for the packed row."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    seen = []

    def recording_varlen(module, query, key, value, attention_mask, **kwargs):
        names = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
        seen.append({name: kwargs.get(name) for name in names})
        return per_sequence_sdpa(module, query, key, value, attention_mask, **kwargs)

    ALL_ATTENTION_FUNCTIONS["recording_varlen"] = recording_varlen  # this instance only, removed below
    try:
        model = model_for(RoFormerExtModel, "sdpa")
        model.set_attn_implementation("recording_varlen")
        seqs = sequences(7)
        with torch.no_grad():
            row = model(**packed(seqs, return_flash_attn_kwargs=True)).last_hidden_state
            model.set_attn_implementation("sdpa")
            input_ids, attention_mask = padded(seqs)
            reference = model(input_ids, attention_mask=attention_mask).last_hidden_state
    finally:
        del ALL_ATTENTION_FUNCTIONS["recording_varlen"]
    assert len(seen) == model.config.num_hidden_layers
    cumulative = [0, 5, 14, 17, 25]
    for call in seen:
        assert call["cu_seq_lens_q"].tolist() == call["cu_seq_lens_k"].tolist() == cumulative
        assert call["max_length_q"] == call["max_length_k"] == max(LENGTHS)
    for index, piece in enumerate(per_sequence(row)):
        torch.testing.assert_close(piece, reference[index, : LENGTHS[index]], rtol=ATOL, atol=ATOL)
    assert_position_sensitive(model, lambda m: m(**packed(seqs, return_flash_attn_kwargs=True)), ATOL)


REPEATED_LENGTHS = (5, 9, 5, 3, 9, 5)  # three lengths, two of them shared


@pytest.mark.parametrize("model_class", [RoFormerExtModel, RoFormerExtForCausalLM])
def test_packed_gradients_equal_padded(model_class):
    """Repeated lengths on a packed row compute as each alone, with the padded batch's gradients."""
    model = model_for(model_class, "sdpa")
    seqs = sequences(7, REPEATED_LENGTHS)
    input_ids, attention_mask = padded(seqs)
    weights = torch.randn(
        len(seqs), input_ids.shape[1], model.config.hidden_size, generator=torch.Generator().manual_seed(0)
    )
    real = attention_mask.bool()

    def gradients(loss: torch.Tensor) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    states = model(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states[-1]
    reference = gradients((states * weights)[real].sum())
    states = model(**packed(seqs), output_hidden_states=True).hidden_states[-1]
    with torch.no_grad():
        for piece, seq in zip(torch.split(states[0], REPEATED_LENGTHS), seqs):
            alone = model(torch.tensor([seq]), output_hidden_states=True).hidden_states[-1][0]
            torch.testing.assert_close(piece, alone, rtol=ATOL, atol=ATOL)
    out = gradients((states[0] * weights[real]).sum())
    assert out.keys() == reference.keys() and len(out) > 10
    for name, grad in out.items():  # fp32 sums over every token: the error scales with the largest gradient entry
        scale = max(1.0, reference[name].abs().max().item())
        torch.testing.assert_close(grad, reference[name], rtol=ATOL, atol=ATOL * scale, msg=name)
    assert_position_sensitive(model, lambda m: m(**packed(seqs), output_hidden_states=True).hidden_states[-1], ATOL)


#: Every head on a packed row against the padded batch, outputs and loss (the base model: the hidden-states test):
#: per-token heads token by token, per-sequence heads (classification, question answering) sequence by sequence.
PER_TOKEN_HEADS = [RoFormerExtForMaskedLM, RoFormerExtForCausalLM, RoFormerExtForTokenClassification]


def head_outputs(model, output) -> list[torch.Tensor]:
    if isinstance(model, RoFormerExtForQuestionAnswering):
        return [output.start_logits, output.end_logits]
    return [output.logits]


def head_labels(model_class, input_ids, attention_mask, batch) -> tuple[dict, dict]:
    """Labels for the padded batch (pads -100) and the packed row (the collator's for the causal LM)."""
    pad = attention_mask == 0
    if model_class in (RoFormerExtForMaskedLM, RoFormerExtForTokenClassification):
        modulus = 1000 if model_class is RoFormerExtForMaskedLM else 2  # token ids, or a class per token
        return dict(labels=(input_ids % modulus).masked_fill(pad, -100)), dict(labels=batch["input_ids"] % modulus)
    if model_class is RoFormerExtForCausalLM:
        flat = DataCollatorWithFlattening(return_tensors="pt")([{"input_ids": ids} for ids in batch["seqs"]])
        return dict(labels=input_ids.masked_fill(pad, -100)), dict(labels=flat["labels"])
    if model_class is RoFormerExtForSequenceClassification:
        labels = dict(labels=torch.tensor([0, 2, 1, 2]))
    elif model_class is RoFormerExtForQuestionAnswering:
        labels = dict(start_positions=torch.tensor([1, 4, 0, 2]), end_positions=torch.tensor([3, 8, 2, 7]))
    else:
        labels = {}
    return labels, labels


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize(
    "model_class",
    PER_TOKEN_HEADS + [RoFormerExtForSequenceClassification, RoFormerExtForQuestionAnswering],
    ids=lambda c: c.__name__.removeprefix("RoFormerExt"),
)
def test_every_head_packed_equals_padded(model_class, attn_implementation):
    labels = {"num_labels": 3} if model_class is RoFormerExtForSequenceClassification else {}
    model = model_for(model_class, attn_implementation, **labels)
    seqs = sequences(8)
    input_ids, attention_mask = padded(seqs)
    batch = packed(seqs)
    padded_labels, packed_labels = head_labels(model_class, input_ids, attention_mask, {**batch, "seqs": seqs})
    with torch.no_grad():
        ref = model(input_ids, attention_mask=attention_mask, **padded_labels)
        out = model(**batch, **packed_labels)
    for got, expected in zip(head_outputs(model, out), head_outputs(model, ref), strict=True):
        if model_class is RoFormerExtForSequenceClassification:
            assert got.shape == (len(LENGTHS), 3)
            torch.testing.assert_close(got, expected, rtol=ATOL, atol=ATOL)
            continue
        pieces = per_sequence(got) if model_class in PER_TOKEN_HEADS else list(got)
        for row, (piece, length) in enumerate(zip(pieces, LENGTHS)):
            torch.testing.assert_close(piece[:length], expected[row, :length], rtol=ATOL, atol=ATOL)
    if packed_labels:  # no padded position competes in the packed loss (question answering masks its pads too)
        torch.testing.assert_close(out.loss, ref.loss, rtol=ATOL, atol=ATOL)
    assert_position_sensitive(model, lambda m: m(**batch, **packed_labels), ATOL)  # outputs and loss


def test_multiple_choice_rows_equal_each_choice_alone():
    """Each choice's score equals that choice run alone (the padded one too)."""
    model = model_for(RoFormerExtForMultipleChoice, "sdpa")
    input_ids, attention_mask = padded(sequences(9)[:3])
    input_ids, attention_mask = input_ids[None], attention_mask[None]  # one question, three choices
    with torch.no_grad():
        together = model(input_ids, attention_mask=attention_mask).logits[0]
        alone = [
            model(input_ids[:, i : i + 1, :n], attention_mask=attention_mask[:, i : i + 1, :n]).logits[0, 0]
            for i, n in enumerate(LENGTHS[:3])
        ]
    torch.testing.assert_close(together, torch.stack(alone), rtol=ATOL, atol=ATOL)
    assert_position_sensitive(model, lambda m: m(input_ids, attention_mask=attention_mask).logits, ATOL)
