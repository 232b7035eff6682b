"""Whatever describes the packing, each sequence computes as alone (1e-5, position-sensitive); bad input is refused."""

import pytest
import torch
from conftest import assert_position_sensitive
from test_packing import ATOL, model_for, padded, sequences
from test_packing_edges import cu

from roformer_ext import (
    DataCollatorForPackedClassification,
    RoFormerExtForCausalLM,
    RoFormerExtForQuestionAnswering,
    RoFormerExtForSequenceClassification,
    RoFormerExtModel,
)

ROW_LENGTHS = ((5, 4, 3), (6, 6))  # two packed rows of 12 tokens each


def two_packed_rows(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[list[int]]]:
    """input_ids (2, 12), seq_idx, restarting position_ids and the sequences in order."""
    generator = torch.Generator().manual_seed(seed)
    rows, seq_idx, positions, seqs = [], [], [], []
    for lengths in ROW_LENGTHS:
        parts = [torch.randint(5, 99, (n,), generator=generator) for n in lengths]
        seqs += [p.tolist() for p in parts]
        rows.append(torch.cat(parts))
        seq_idx.append(torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)]))
        positions.append(torch.cat([torch.arange(n) for n in lengths]))
    return torch.stack(rows), torch.stack(seq_idx), torch.stack(positions), seqs


def assert_rows_equal_alone(model, states: torch.Tensor, seqs: list[list[int]], row_lengths=ROW_LENGTHS) -> None:
    pieces = [piece for row, lengths in zip(states, row_lengths) for piece in torch.split(row, lengths)]
    with torch.no_grad():
        for piece, seq in zip(pieces, seqs, strict=True):
            alone = model(torch.tensor([seq]), output_hidden_states=True).hidden_states[-1][0]
            torch.testing.assert_close(piece, alone, rtol=ATOL, atol=ATOL)


@pytest.mark.parametrize(
    ("overrides", "with_positions"),
    [
        # linear attention: each sequence its own running sums (they mixed: 0.011 / 0.041)
        (dict(attention_type="linear"), True),
        (dict(attention_type="linear", is_decoder=True), True),
        # seq_idx without position_ids: positions restart in each sequence (they ran on across the row, 3.8 off)
        (dict(position_encoding="rope"), False),
        (dict(position_encoding="sinusoidal", max_position_embeddings=64), False),
        (dict(position_encoding="learned", max_position_embeddings=64), False),
    ],
)
def test_two_packed_rows_by_seq_idx_compute_each_sequence_alone(overrides, with_positions):
    model = model_for(RoFormerExtModel, "sdpa", **overrides)
    input_ids, seq_idx, positions, seqs = two_packed_rows(0 if with_positions else 1)
    given = dict(seq_idx=seq_idx, position_ids=positions if with_positions else None)
    with torch.no_grad():
        states = model(input_ids, **given, output_hidden_states=True).hidden_states[-1]
    assert_rows_equal_alone(model, states, seqs)
    assert_position_sensitive(model, lambda m: m(input_ids, **given), ATOL)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_restarting_positions_broadcast_over_rows(attn_implementation):
    """position_ids of shape (1, seq) restarting at 0 with batch 2: every row packed the same way (it crashed)."""
    model = model_for(RoFormerExtModel, attn_implementation)
    generator = torch.Generator().manual_seed(2)
    lengths = (5, 7)
    input_ids = torch.randint(5, 99, (2, sum(lengths)), generator=generator)
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    with torch.no_grad():
        states = model(input_ids, position_ids=positions, output_hidden_states=True).hidden_states[-1]
        expanded = model(input_ids, position_ids=positions.expand(2, -1), output_hidden_states=True).hidden_states[-1]
    torch.testing.assert_close(states, expanded, rtol=0, atol=0)
    seqs = [seq.tolist() for row in input_ids for seq in torch.split(row, lengths)]
    assert_rows_equal_alone(model, states, seqs, (lengths, lengths))
    assert_position_sensitive(model, lambda m: m(input_ids, position_ids=positions), ATOL)


@pytest.mark.parametrize("model_class", [RoFormerExtModel, RoFormerExtForSequenceClassification])
@pytest.mark.parametrize(
    ("given", "message"),
    [
        (dict(cu_seq_lens_q=cu([4, 4])), r"cu_seq_lens_q ends at 8 but the batch holds 9 tokens"),
        (dict(cu_seq_lens_q=torch.tensor([1, 4, 9], dtype=torch.int32)), r"cu_seq_lens_q must start at 0"),
        (dict(cu_seq_lens_q=torch.tensor([0, 6, 4, 9], dtype=torch.int32)), r"sequence 1 .*length -2"),
        # a zero-length sequence has no [CLS] and no mean (NaN, or the next sequence's [CLS])
        (dict(cu_seq_lens_q=cu([4, 0, 5]), cu_seq_lens_k=cu([4, 0, 5]), max_length_q=5), r"sequence 1 .*length 0"),
        (dict(cu_seq_lens_q=cu([4, 5]), cu_seq_lens_k=cu([5, 4])), r"cu_seq_lens_k .* differs from cu_seq_lens_q"),
        (dict(cu_seq_lens_q=cu([4, 5]).float()), r"cu_seq_lens_q must be an integer tensor"),
        (dict(seq_idx=torch.tensor([[0, 0, 1, 1, 0, 2, 2, 2, 2]])), r"seq_idx must not decrease"),
        (dict(seq_idx=torch.zeros(1, 8, dtype=torch.long)), r"seq_idx has shape \(1, 8\).*\(1, 9\)"),
        (dict(cu_seq_lens_q=cu([4, 5]), attention_mask=torch.tensor([[1] * 8 + [0]])), r"padding inside a packed"),
    ],
    ids=["short", "start", "decreasing", "empty", "k-differs", "float", "seq_idx-order", "seq_idx-shape", "padding"],
)
def test_inconsistent_packing_gets_one_clear_error(given, message, model_class):
    """From the base model and from a head that describes the batch itself (mean pooling), on eager and sdpa."""
    model = model_for(model_class, "sdpa", classifier_pooling="mean")
    input_ids = torch.randint(5, 99, (1, 9))
    for backend in ("eager", "sdpa"):
        model.set_attn_implementation(backend)
        with pytest.raises((ValueError, TypeError), match=message):
            model(input_ids, **given)


def test_description_is_made_once_per_forward(monkeypatch):
    """The base model describes the batch once; the heads that pool per sequence hand their description down."""
    from roformer_ext import modeling_roformer_ext, packing

    calls, original = [], packing.describe_packed_batch
    counting = lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs)  # noqa: E731
    monkeypatch.setattr(modeling_roformer_ext, "describe_packed_batch", counting)
    input_ids, seq_idx, positions, _ = two_packed_rows()
    for model_class in (RoFormerExtModel, RoFormerExtForSequenceClassification, RoFormerExtForQuestionAnswering):
        calls.clear()
        model = model_for(model_class, "sdpa")
        with torch.no_grad():
            model(input_ids, seq_idx=seq_idx, position_ids=positions)
        assert len(calls) == 1, model_class


def test_flattening_collator_labels_with_a_classifier_get_a_clear_error():
    """transformers' DataCollatorWithFlattening turns a class label into token labels: the head says what to use."""
    from transformers import DataCollatorWithFlattening

    model = model_for(RoFormerExtForSequenceClassification, "sdpa", num_labels=3)
    seqs = sequences(3)
    batch = DataCollatorWithFlattening(return_tensors="pt")([{"input_ids": s, "label": 1} for s in seqs])
    with pytest.raises(ValueError, match=r"one label per packed sequence.*DataCollatorForPackedClassification"):
        model(**batch)


@pytest.mark.parametrize("model_class", [RoFormerExtModel, RoFormerExtForCausalLM])
def test_padded_rows_of_packed_sequences(model_class):
    """seq_idx with a padding mask: rows packed to a fixed length and padded at the end."""
    model = model_for(model_class, "eager")
    input_ids, seq_idx, positions, seqs = two_packed_rows(3)
    input_ids = torch.nn.functional.pad(input_ids, (0, 2))
    seq_idx = torch.cat([seq_idx, seq_idx[:, -1:].expand(-1, 2)], dim=1)
    positions = torch.nn.functional.pad(positions, (0, 2))
    mask = torch.ones_like(input_ids)
    mask[:, -2:] = 0
    with torch.no_grad():
        states = model(
            input_ids, attention_mask=mask, seq_idx=seq_idx, position_ids=positions, output_hidden_states=True
        ).hidden_states[-1]
    assert_rows_equal_alone(model, states[:, :-2], seqs)
    run = lambda m: m(input_ids, attention_mask=mask, seq_idx=seq_idx, position_ids=positions)[0][:, :-2]  # noqa: E731
    assert_position_sensitive(model, run, ATOL)


@pytest.mark.parametrize(("labels", "problem_type"), [
    ([2, 0, 1, 1], "single_label_classification"), ([0.5, -1.0, 2.0, 0.25], "regression"),
    ([[1, 0, 1], [0, 0, 1], [1, 1, 0], [0, 1, 0]], "multi_label_classification"),
])  # fmt: skip
def test_package_collator_for_packed_classification_equals_padded(labels, problem_type):
    """One label per packed sequence (class, value or multi-label): logits and loss equal the padded batch's."""
    num_labels = 1 if problem_type == "regression" else 3
    model = model_for(RoFormerExtForSequenceClassification, "sdpa", num_labels=num_labels, problem_type=problem_type)
    seqs = sequences(5)
    batch = DataCollatorForPackedClassification()([{"input_ids": s, "label": y} for s, y in zip(seqs, labels)])
    assert batch["labels"].tolist() == labels and batch["input_ids"].shape == (1, sum(map(len, seqs)))
    assert batch["labels"].dtype == (torch.long if problem_type == "single_label_classification" else torch.float)
    input_ids, attention_mask = padded(seqs)
    with torch.no_grad():
        out = model(**batch)
        ref = model(input_ids, attention_mask=attention_mask, labels=batch["labels"])
    torch.testing.assert_close(out.logits, ref.logits, rtol=ATOL, atol=ATOL)
    torch.testing.assert_close(out.loss, ref.loss, rtol=ATOL, atol=ATOL)
    assert_position_sensitive(model, lambda m: m(**batch), ATOL)
