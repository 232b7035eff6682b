"""RoPE is a real entry of the position-encoding registry; its checkpoints load unchanged: test_legacy_configs."""

import pytest
import torch
from conftest import tiny_config

from roformer_ext import RoFormerExtModel, rope
from roformer_ext.position_encodings import RotaryPositionEncoding

BUILT_IN_ENCODINGS = ["alibi", "learned", "none", "rope", "shaw", "sinusoidal", "t5_bias"]


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
