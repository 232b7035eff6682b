"""The rotation is chosen once: each attention's rotation at construction, the half layout's reordered q/k rows
kept until the weights change, and RoPE a real entry of the position-encoding registry (no checkpoint change)."""

import copy

import pytest
import torch
from conftest import random_inputs, tiny_config

from roformer_ext import RoFormerExtForMaskedLM, RoFormerExtModel, rope
from roformer_ext.position_encodings import RotaryPositionEncoding, registered_position_encodings

BUILT_IN_ENCODINGS = ["alibi", "learned", "none", "rope", "shaw", "sinusoidal", "t5_bias"]


@pytest.fixture
def count_reorders(monkeypatch):
    """Counts `rope.reorder_rows` calls (one per q or k projection each time the rows are gathered)."""
    calls = []
    original = rope.reorder_rows

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(rope, "reorder_rows", counted)
    return calls


def _half_pair(seed: int = 0) -> tuple[RoFormerExtForMaskedLM, RoFormerExtForMaskedLM]:
    """A half-layout model and a copy whose key projections carry a no-op hook: the plain (activation) path."""
    torch.manual_seed(seed)
    model = RoFormerExtForMaskedLM(tiny_config(rope_parameters={"pair_layout": "half"})).eval()
    plain = copy.deepcopy(model)
    for layer in plain.roformer.layers:
        layer.attention.key.register_forward_hook(lambda *unused: None)
    return model, plain


def test_reordered_rows_are_computed_once_in_eval_and_again_after_an_optimizer_step(count_reorders):
    model, plain = _half_pair()
    layers = len(model.roformer.layers)
    input_ids, attention_mask, _ = random_inputs(batch=4, seq=12)  # 48 rows > 32 outputs: the reordered path
    with torch.no_grad():
        for _ in range(3):
            logits = model(input_ids, attention_mask=attention_mask).logits
    assert len(count_reorders) == 2 * layers  # q and k of each layer, once for three forwards
    with torch.no_grad():
        torch.testing.assert_close(logits, plain(input_ids, attention_mask=attention_mask).logits, rtol=0, atol=1e-5)

    # One training step on both models (same weights, same gradients): the kept rows are stale afterwards.
    for m in (model, plain):
        optimizer = torch.optim.SGD(m.parameters(), lr=0.5)
        m.train()
        m(input_ids, attention_mask=attention_mask, labels=input_ids).loss.backward()
        optimizer.step()
        m.eval()
    count_reorders.clear()
    with torch.no_grad():
        after = model(input_ids, attention_mask=attention_mask).logits
        model(input_ids, attention_mask=attention_mask)
        expected = plain(input_ids, attention_mask=attention_mask).logits
    assert len(count_reorders) == 2 * layers  # recomputed once for the new weights, kept for the next forward
    assert not torch.allclose(after, logits, atol=1e-3)  # the step did change the function
    torch.testing.assert_close(after, expected, rtol=0, atol=1e-5)


def test_reordered_rows_follow_load_state_dict_and_moves(count_reorders):
    model, plain = _half_pair()
    other, _ = _half_pair(seed=1)
    input_ids, attention_mask, _ = random_inputs(batch=4, seq=12)
    with torch.no_grad():
        expected = other(input_ids, attention_mask=attention_mask).logits
        count_reorders.clear()
        model(input_ids, attention_mask=attention_mask)
        model.load_state_dict(other.state_dict())
        got = model(input_ids, attention_mask=attention_mask).logits
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        model.double()  # new storage and dtype: gathered again
        double = model(input_ids, attention_mask=attention_mask).logits
    assert double.dtype == torch.float64
    torch.testing.assert_close(double.float(), got, rtol=0, atol=1e-5)
    assert len(count_reorders) == 3 * 2 * len(model.roformer.layers)


def test_reordered_rows_with_gradients_are_gathered_in_the_forward(count_reorders):
    """While autograd records, the rows are gathered in the forward (gradients reach the weights), never kept."""
    model, plain = _half_pair()
    input_ids, attention_mask, _ = random_inputs(batch=4, seq=12)
    for _ in range(2):  # gradient accumulation: the second backward must not reuse a freed graph
        model(input_ids, attention_mask=attention_mask, labels=input_ids).loss.backward()
        plain(input_ids, attention_mask=attention_mask, labels=input_ids).loss.backward()
    assert len(count_reorders) == 2 * 2 * len(model.roformer.layers)
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_kept_rows_leave_copies_and_pickles(tmp_path):
    model, _ = _half_pair()
    input_ids, _, _ = random_inputs(batch=4, seq=12)
    with torch.no_grad():
        expected = model(input_ids).logits
    rows = model.roformer.layers[0].attention.rotation.query_rows
    assert rows._rows is not None
    copied = copy.deepcopy(model)
    assert copied.roformer.layers[0].attention.rotation.query_rows._rows is None
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    with torch.no_grad():
        torch.testing.assert_close(copied(input_ids).logits, expected, rtol=0, atol=0)
        torch.testing.assert_close(loaded(input_ids).logits, expected, rtol=0, atol=0)


def test_inference_mode_rows_work_outside_it():
    """Rows kept under torch.inference_mode are ordinary tensors: a later forward with gradients still works."""
    model, _ = _half_pair()
    input_ids, _, _ = random_inputs(batch=4, seq=12)
    with torch.inference_mode():
        model(input_ids)
    with torch.no_grad():
        model(input_ids)  # uses the kept rows outside inference mode
    model(input_ids, labels=input_ids).loss.backward()


# --- RoPE as a registry entry ---------------------------------------------------------------------------------------


def _expected_keys(encoding: str, layers: int = 2) -> set[str]:
    """The state-dict keys RoFormerExtModel had before RoPE became a registry entry (tiny config, no pooler)."""
    keys = {f"embeddings.{name}.weight" for name in ("word_embeddings", "token_type_embeddings", "norm")}
    keys.add("embeddings.norm.bias")
    for i in range(layers):
        for part in (
            "attention.query",
            "attention.key",
            "attention.value",
            "attention.output",
            "attention_norm",
            "feed_forward.intermediate",
            "feed_forward.output",
            "output_norm",
        ):
            keys |= {f"layers.{i}.{part}.weight", f"layers.{i}.{part}.bias"}
        if encoding == "shaw":
            keys.add(f"layers.{i}.attention.relative_table.weight")
    if encoding == "learned":
        keys.add("position_encoding.position_embeddings.weight")
    if encoding == "t5_bias":
        keys.add("position_encoding.relative_attention_bias.weight")
    return keys


@pytest.mark.parametrize("encoding", BUILT_IN_ENCODINGS)
def test_state_dict_keys_unchanged_for_every_encoding(encoding):
    assert set(BUILT_IN_ENCODINGS) <= set(registered_position_encodings())
    model = RoFormerExtModel(tiny_config(position_encoding=encoding, pooler_activation=None))
    assert set(model.state_dict()) == _expected_keys(encoding)


def test_rope_entry_owns_its_rotary_embedding():
    model = RoFormerExtModel(tiny_config(rope_parameters={"rope_type": "linear", "factor": 2.0}))
    assert isinstance(model.position_encoding, RotaryPositionEncoding)
    rotary = model.position_encoding.rotary_emb
    assert isinstance(rotary, rope.rotary_embedding_class("linear")) and rotary.rope_type == "linear"
    assert model.rotary_emb is rotary  # read-only view for callers of model.rotary_emb
    assert "rotary_emb" not in model._modules  # one attribute: the position encoding
    assert RoFormerExtModel(tiny_config(position_encoding="alibi")).rotary_emb is None


@pytest.mark.parametrize("encoding", BUILT_IN_ENCODINGS)
def test_one_call_per_forward_gives_what_the_layers_need(encoding):
    """attention_terms: (cos, sin) for rope, a shared bias (T5, ALiBi) or per-layer scores (Shaw), else nothing."""
    model = RoFormerExtModel(tiny_config(position_encoding=encoding))
    hidden = torch.zeros(2, 5, 32)
    positions = torch.arange(5.0).expand(1, 2, 5)
    terms = model.position_encoding.attention_terms(hidden, positions, lambda: positions[0], per_score=False)
    given = {name for name, value in terms._asdict().items() if value is not None}
    expected = {
        "rope": {"position_embeddings"},
        "t5_bias": {"shared_bias"},
        "alibi": {"shared_bias"},
        "shaw": {"relative_scores"},
    }.get(encoding, set())
    assert given == expected
    if encoding == "rope":
        cos, sin = terms.position_embeddings
        assert cos.shape == sin.shape == (2, 5, 8)
    flex = model.position_encoding.attention_terms(hidden, positions, lambda: positions[0], per_score=True)
    if encoding in ("t5_bias", "alibi"):  # flex computes the term per score
        assert flex.shared_bias is None and flex.relative_scores is not None
