"""Position encodings by name: each exact against an independent reference, and their invariances.

References: the formula written plainly here, and transformers' own models with the same mechanism — T5's bucketed
relative bias (`T5Attention`), Bloom's and MPT's ALiBi slopes, BERT's learned absolute table (`BertEmbeddings`),
DistilBERT's sinusoidal table, and Wav2Vec2-BERT's clipped relative keys (Shaw et al.).
Tolerances: fp32, 1e-6 absolute on biases and embeddings, 1e-5 on model outputs.
"""

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import knob_kwargs
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import roformer_ext
from roformer_ext import (
    PositionEncoding,
    RoFormerExtConfig,
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtModel,
    RoFormerExtVisionTextConfig,
    register_position_encoding,
    registered_position_encodings,
)
from roformer_ext.compat import output_cache
from roformer_ext.position_encodings import sinusoidal_table
from roformer_ext.registries import POSITION_ENCODINGS
from roformer_ext.relative_position_encodings import alibi_slopes, t5_relative_bucket

ENCODINGS = ("rope", "sinusoidal", "learned", "shaw", "t5_bias", "alibi", "none")
RELATIVE = ("rope", "shaw", "t5_bias", "alibi")
BACKENDS = ("eager", "sdpa", "flex_attention")


def config(position_encoding: str, **overrides) -> RoFormerExtConfig:
    fields = dict(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    # small windows and buckets, so short inputs reach the clipped and logarithmic ranges
    knobs = dict(max_relative_position=5, relative_attention_num_buckets=8, relative_attention_max_distance=20)
    return RoFormerExtConfig(**{**fields, **knob_kwargs(position_encoding, knobs, overrides)})


def model_for(position_encoding: str, decoder: bool = False, implementation: str = "eager", **overrides):
    torch.manual_seed(0)
    cls = RoFormerExtForCausalLM if decoder else RoFormerExtForMaskedLM
    model = cls(config(position_encoding, is_decoder=decoder, **overrides)).eval()
    with torch.no_grad():  # non-zero tables, so a missing term would show
        for module in model.modules():
            if isinstance(module, nn.Embedding) and module is not model.get_input_embeddings():
                module.weight.normal_(0.0, 0.5)
    model.set_attn_implementation(implementation)
    return model


def test_registry_lists_every_encoding():
    assert set(ENCODINGS) <= set(registered_position_encodings())
    with pytest.raises(ValueError, match="Registered choices: .*alibi.*t5_bias"):
        config("rotary-ish")


# --- exactness against transformers' models -----------------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 20), (16, 50)])
def test_t5_buckets_equal_t5s(bidirectional, num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    distance = torch.arange(-300, 301)[None]
    ours = t5_relative_bucket(distance, bidirectional, num_buckets, max_distance)
    theirs = T5Attention._relative_position_bucket(distance, bidirectional, num_buckets, max_distance)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


@pytest.mark.parametrize("decoder", [False, True])
def test_t5_bias_equals_t5_attention_compute_bias(decoder):
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    model = model_for("t5_bias", decoder)
    t5 = T5Attention(
        T5Config(
            d_model=32,
            d_kv=8,
            num_heads=4,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=20,
            is_decoder=decoder,
        ),
        has_relative_attention_bias=True,
    )
    encoding = model.roformer.position_encoding
    t5.relative_attention_bias.weight.data.copy_(encoding.relative_attention_bias.weight)
    positions = torch.arange(23)[None]
    ours = encoding.relative_scores(positions, positions).shared_bias()
    torch.testing.assert_close(ours, t5.compute_bias(23, 23), rtol=0, atol=1e-6)


@pytest.mark.parametrize("num_heads", [1, 2, 4, 6, 8, 12, 16, 24, 32])
def test_alibi_slopes_equal_blooms(num_heads):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    alibi = build_alibi_tensor(torch.ones(1, 3), num_heads, torch.float32)  # slope_h × position (0, 1, 2)
    torch.testing.assert_close(alibi_slopes(num_heads), alibi[:, 0, 1], rtol=1e-6, atol=0)


@pytest.mark.parametrize("num_heads", [1, 2, 4, 8, 16])
def test_alibi_slopes_equal_mpts_for_powers_of_two(num_heads):
    """MPT orders the slopes of a non-power-of-two head count differently from the paper and Bloom (its docstring says
    so); for powers of two the three agree."""
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    alibi = build_mpt_alibi_tensor(num_heads, 3)  # slope_h × (−2, −1, 0)
    torch.testing.assert_close(alibi_slopes(num_heads), -alibi[:, 0, 0] / 2, rtol=1e-6, atol=0)


def test_alibi_formula():
    """The paper's geometric sequence for 8 heads: 1/2, 1/4, ..., 1/256; the bias is −slope·|j − i|."""
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)]))
    model = model_for("alibi")
    positions = torch.arange(6)[None]
    bias = model.roformer.position_encoding.relative_scores(positions, positions).shared_bias()
    slopes = alibi_slopes(4)
    for i in range(6):
        for j in range(6):
            torch.testing.assert_close(bias[0, :, i, j], -slopes * abs(j - i))


def test_learned_equals_bert_embeddings():
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertEmbeddings

    model = model_for("learned").roformer
    bert = BertEmbeddings(
        BertConfig(
            vocab_size=97,
            hidden_size=32,
            max_position_embeddings=128,
            type_vocab_size=2,
            hidden_dropout_prob=0.0,
            layer_norm_eps=1e-12,
        )
    ).eval()
    ours = model.embeddings
    bert.word_embeddings.weight.data.copy_(ours.word_embeddings.weight)
    bert.token_type_embeddings.weight.data.copy_(ours.token_type_embeddings.weight)
    bert.position_embeddings.weight.data.copy_(model.position_encoding.position_embeddings.weight)
    bert.LayerNorm.load_state_dict(ours.norm.state_dict())
    ids = torch.randint(0, 97, (2, 11))
    types = torch.randint(0, 2, (2, 11))
    positions = torch.arange(11)[None].expand(2, 11)
    expected = bert(input_ids=ids, token_type_ids=types, position_ids=positions)
    got = ours(ids, types, None, model.position_encoding, positions)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_sinusoidal_equals_distilberts_table():
    from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings

    table = torch.empty(50, 32)
    create_sinusoidal_embeddings(50, 32, table)
    torch.testing.assert_close(sinusoidal_table(torch.arange(50), 32), table, rtol=0, atol=1e-5)
    # and the formula: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(...)
    p, i, d = 37, 5, 32
    assert math.isclose(
        float(sinusoidal_table(torch.tensor([p]), d)[0, 2 * i]), math.sin(p / 10000 ** (2 * i / d)), abs_tol=1e-6
    )
    assert math.isclose(
        float(sinusoidal_table(torch.tensor([p]), d)[0, 2 * i + 1]), math.cos(p / 10000 ** (2 * i / d)), abs_tol=1e-6
    )


def test_sinusoidal_scale_multiplies_the_table_and_is_saved(tmp_path):
    """The embeddings' input is word + token type + scale × table: the scale is applied once, and kept on save."""
    ids = torch.randint(1, 97, (2, 9), generator=torch.Generator().manual_seed(0))
    sums = {}
    for scale in (1.0, 0.25):
        model = model_for("sinusoidal", position_encoding_parameters={"sinusoidal_scale": scale})
        captured = []
        hook = model.roformer.embeddings.norm.register_forward_hook(
            lambda module, args, out, store=captured: store.append(args[0])
        )
        with torch.no_grad():
            model(input_ids=ids)
        hook.remove()
        sums[scale] = captured[0]
    table = sinusoidal_table(torch.arange(9), 32)
    torch.testing.assert_close(sums[1.0] - sums[0.25], 0.75 * table.expand(2, 9, 32), rtol=0, atol=1e-6)
    model.save_pretrained(tmp_path)
    loaded = RoFormerExtForMaskedLM.from_pretrained(tmp_path).config
    assert loaded.position_encoding_parameters == {"sinusoidal_scale": 0.25}
    assert loaded.position_encoding_knobs.sinusoidal_scale == 0.25


def test_sinusoidal_has_no_length_cap():
    model = model_for("sinusoidal")
    with torch.no_grad():
        model(input_ids=torch.randint(0, 97, (1, 300)))  # longer than max_position_embeddings


def test_learned_beyond_table_is_a_clear_error():
    model = model_for("learned")
    with pytest.raises(ValueError, match="max_position_embeddings = 128"):
        model(input_ids=torch.randint(0, 97, (1, 130)))


def test_shaw_equals_wav2vec2_bert_relative_key():
    from transformers.models.wav2vec2_bert.modeling_wav2vec2_bert import _apply_relative_key_position_encoding

    model = model_for("shaw")
    table = model.roformer.layers[0].attention.relative_table
    stand_in = SimpleNamespace(
        left_max_position_embeddings=5, right_max_position_embeddings=5, distance_embedding=table, scaling=8**-0.5
    )
    query, key = torch.randn(2, 4, 17, 8), torch.randn(2, 4, 17, 8)
    _, expected = _apply_relative_key_position_encoding(stand_in, query, key)
    positions = torch.arange(17)[None]
    got = model.roformer.position_encoding.relative_scores(positions, positions).dense(query, table)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_every_layer_has_its_own_shaw_table_and_t5_shares_one():
    shaw = model_for("shaw")
    tables = [layer.attention.relative_table for layer in shaw.roformer.layers]
    assert tables[0] is not tables[1] and tables[0].weight.shape == (11, 8)
    t5 = model_for("t5_bias")
    assert all(layer.attention.relative_table is None for layer in t5.roformer.layers)
    assert "roformer.position_encoding.relative_attention_bias.weight" in t5.state_dict()


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("decoder", [False, True])
def test_attention_weights_follow_the_plain_formula(encoding, decoder):
    """Layer 0's eager attention probabilities = softmax(q·kᵀ/√d + term [+ causal mask]) computed here by hand."""
    model = model_for(encoding, decoder)
    ids = torch.randint(0, 97, (2, 9))
    out = model(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    attention = model.roformer.layers[0].attention
    hidden = out.hidden_states[0]
    heads = lambda p: p(hidden).view(2, 9, 4, 8).transpose(1, 2)  # noqa: E731
    q, k = heads(attention.query), heads(attention.key)
    positions = torch.arange(9)
    if encoding == "rope":
        angles = positions[:, None] * 10000.0 ** (-torch.arange(0, 8, 2) / 8)  # (9, 4): pair i of dims (2i, 2i+1)

        def rotate(x):
            x0, x1 = x[..., 0::2], x[..., 1::2]
            return torch.stack(
                (x0 * angles.cos() - x1 * angles.sin(), x0 * angles.sin() + x1 * angles.cos()), -1
            ).flatten(-2)

        q, k = rotate(q), rotate(k)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    distance = positions[None, :] - positions[:, None]  # key − query
    if encoding == "shaw":
        table = attention.relative_table.weight
        a = table[distance.clamp(-5, 5) + 5]  # (q, k, d)
        scores = scores + torch.einsum("bhqd,qkd->bhqk", q, a) / math.sqrt(8)
    if encoding == "t5_bias":
        from transformers.models.t5.modeling_t5 import T5Attention

        buckets = T5Attention._relative_position_bucket(distance, not decoder, 8, 20)
        scores = scores + model.roformer.position_encoding.relative_attention_bias.weight[buckets].permute(2, 0, 1)
    if encoding == "alibi":
        scores = scores - alibi_slopes(4)[:, None, None] * distance.abs()
    if decoder:
        scores = scores.masked_fill(distance > 0, float("-inf"))
    torch.testing.assert_close(out.attentions[0], scores.softmax(-1), rtol=0, atol=1e-5)


# --- backends, packing, cache ----------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("decoder", [False, True])
def test_backends_agree_with_padding(encoding, decoder):
    ids = torch.randint(1, 97, (2, 13))
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[1, 9:] = 0
    outputs = {}
    for implementation in BACKENDS:
        with torch.no_grad():
            outputs[implementation] = model_for(encoding, decoder, implementation)(
                input_ids=ids, attention_mask=mask
            ).logits
    for implementation in BACKENDS[1:]:
        torch.testing.assert_close(outputs[implementation][0], outputs["eager"][0], rtol=0, atol=1e-5)
        torch.testing.assert_close(outputs[implementation][1, :9], outputs["eager"][1, :9], rtol=0, atol=1e-5)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("implementation", BACKENDS)
def test_packed_rows_equal_the_padded_batch(encoding, implementation):
    """Positions restart per sequence, so each packed sequence gets its own absolute and relative positions."""
    lengths = (5, 9, 3)
    model = model_for(encoding, implementation=implementation)
    sequences = [torch.randint(1, 97, (n,)) for n in lengths]
    packed_ids = torch.cat(sequences)[None]
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    with torch.no_grad():
        packed = model(input_ids=packed_ids, position_ids=position_ids).logits[0]
        start = 0
        for sequence in sequences:
            alone = model(input_ids=sequence[None]).logits[0]
            torch.testing.assert_close(packed[start : start + len(sequence)], alone, rtol=0, atol=1e-5)
            start += len(sequence)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_cached_greedy_decoding_equals_recomputation(encoding):
    model = model_for(encoding, decoder=True)
    prompt = torch.randint(1, 97, (2, 6))
    with torch.no_grad():
        cached = model.generate(prompt, max_new_tokens=8, do_sample=False, use_cache=True, pad_token_id=0)
        uncached = model.generate(prompt, max_new_tokens=8, do_sample=False, use_cache=False, pad_token_id=0)
    torch.testing.assert_close(cached, uncached, rtol=0, atol=0)
    with torch.no_grad():  # and the logits of the cached continuation equal one forward over everything
        full = model(cached, use_cache=False).logits[:, -1]
        first = model(cached[:, :-3], use_cache=True)
        step = model(cached[:, -3:], cache=output_cache(first)).logits[:, -1]
    torch.testing.assert_close(step, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("encoding", ["t5_bias", "alibi", "shaw"])
def test_static_cache_decoding_equals_dynamic(encoding):
    model = model_for(encoding, decoder=True)
    prompt = torch.randint(1, 97, (1, 5))
    with torch.no_grad():
        dynamic = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
        static = model.generate(
            prompt, max_new_tokens=6, do_sample=False, pad_token_id=0, cache_implementation="static"
        )
    torch.testing.assert_close(static, dynamic, rtol=0, atol=0)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_save_and_reload_keeps_the_function(encoding, tmp_path):
    model = model_for(encoding)
    model.save_pretrained(tmp_path)
    reloaded = RoFormerExtForMaskedLM.from_pretrained(tmp_path).eval()
    reloaded.set_attn_implementation("eager")
    assert reloaded.config.position_encoding == encoding
    ids = torch.randint(1, 97, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, model(input_ids=ids).logits, rtol=0, atol=1e-6)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_training_step_reaches_the_position_parameters(encoding):
    model = model_for(encoding)
    model.train()
    ids = torch.randint(1, 97, (2, 12))
    model(input_ids=ids, labels=ids).loss.backward()
    for name, parameter in model.named_parameters():
        if "position_encoding" in name or "relative_table" in name:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


# --- invariances (property tests) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", RELATIVE)
@settings(max_examples=8, deadline=None)
@given(shift=st.integers(min_value=1, max_value=500))
def test_relative_encodings_are_shift_invariant(encoding, shift):
    model = model_for(encoding)
    ids = torch.randint(1, 97, (1, 10), generator=torch.Generator().manual_seed(shift))
    positions = torch.arange(10)[None]
    with torch.no_grad():
        base = model(input_ids=ids, position_ids=positions).logits
        shifted = model(input_ids=ids, position_ids=positions + shift).logits
    torch.testing.assert_close(shifted, base, rtol=0, atol=2e-4)  # RoPE's large angles lose a few fp32 bits


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned"])
def test_absolute_encodings_are_not_shift_invariant(encoding):
    model = model_for(encoding)
    ids = torch.randint(1, 97, (1, 10))
    positions = torch.arange(10)[None]
    with torch.no_grad():
        difference = (model(input_ids=ids, position_ids=positions + 7).logits - model(input_ids=ids).logits).abs().max()
    assert difference > 1e-3


@settings(max_examples=25, deadline=None)
@given(m=st.integers(0, 2000), n=st.integers(0, 2000), shift=st.integers(-1000, 1000))
def test_rope_score_depends_only_on_n_minus_m(m, n, shift):
    """<R_m q, R_n k> = <R_{m+c} q, R_{n+c} k>: computed with the model's own rotary embedding and rotation."""
    from roformer_ext.rope import apply_rotary

    rotary = RoFormerExtModel(config("rope")).position_encoding.rotary_emb
    generator = torch.Generator().manual_seed(m * 7 + n)
    q, k = (
        torch.randn(1, 1, 1, 8, generator=generator, dtype=torch.float64),
        torch.randn(1, 1, 1, 8, generator=generator, dtype=torch.float64),
    )

    def score(a, b):
        cos_a, sin_a = rotary(q, torch.tensor([[[float(a)]]], dtype=torch.float64))
        cos_b, sin_b = rotary(k, torch.tensor([[[float(b)]]], dtype=torch.float64))
        return float(
            (apply_rotary(q, cos_a, sin_a, "interleaved") * apply_rotary(k, cos_b, sin_b, "interleaved")).sum()
        )

    shifted_m, shifted_n = m + shift, n + shift
    if min(shifted_m, shifted_n) < 0:
        shifted_m, shifted_n = shifted_m - min(shifted_m, shifted_n), shifted_n - min(shifted_m, shifted_n)
    assert math.isclose(score(m, n), score(shifted_m, shifted_n), rel_tol=1e-9, abs_tol=1e-9)


def test_nope_encoder_is_permutation_equivariant():
    model = model_for("none")
    ids = torch.randint(1, 97, (1, 10))
    order = torch.randperm(10)
    with torch.no_grad():
        torch.testing.assert_close(
            model(input_ids=ids[:, order]).logits, model(input_ids=ids).logits[:, order], rtol=0, atol=1e-5
        )


# --- configuration errors and extension ----------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["shaw", "t5_bias", "alibi"])
def test_score_terms_need_softmax_attention(encoding):
    with pytest.raises(ValueError, match="linear attention never forms"):
        RoFormerExtModel(config(encoding, attention_type="linear"))


def test_linear_attention_with_absolute_positions_runs():
    model = RoFormerExtForMaskedLM(config("sinusoidal", attention_type="linear")).eval()
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=torch.randint(1, 97, (2, 9))).logits).all()


def test_flash_attention_with_a_score_term_is_a_clear_error():
    model = model_for("alibi")
    model.config._attn_implementation = "flash_attention_2"  # what set_attn_implementation would do with a GPU
    with pytest.raises(ValueError, match="attn_implementation='sdpa'"):
        model(input_ids=torch.randint(1, 97, (1, 5)))


def test_vision_text_models_need_rope():
    with pytest.raises(ValueError, match="position_encoding must be 'rope'"):
        RoFormerExtVisionTextConfig(hidden_size=32, num_attention_heads=4, position_encoding="alibi")


def test_bad_sizes_are_clear_errors():
    with pytest.raises(ValueError, match="max_relative_position must be a positive integer"):
        config("shaw", max_relative_position=0)
    with pytest.raises(ValueError, match="relative_attention_max_distance larger than half"):
        config("t5_bias", relative_attention_num_buckets=32, relative_attention_max_distance=10)
    with pytest.raises(ValueError, match="sinusoidal_scale must be a positive number"):
        config("sinusoidal", sinusoidal_scale=0.0)


def test_config_passed_in_is_not_changed():
    cfg = config("t5_bias")
    before = cfg.to_dict()
    RoFormerExtForCausalLM(cfg)
    assert cfg.to_dict() == before


def test_users_register_their_own_encoding():
    @register_position_encoding("constant_offset_test")
    class ConstantOffset(PositionEncoding):
        """Adds 0.1 × position to every embedding dimension (a toy absolute encoding)."""

        def embed(self, embeddings, position_ids):
            return embeddings + 0.1 * position_ids[..., None].to(embeddings.dtype)

    try:
        assert "constant_offset_test" in roformer_ext.registered_position_encodings()
        model = model_for("constant_offset_test")
        ids = torch.randint(1, 97, (1, 6))
        with torch.no_grad():
            assert not torch.allclose(model(input_ids=ids).logits, model_for("none")(input_ids=ids).logits)
    finally:
        POSITION_ENCODINGS.unregister("constant_offset_test")
    with pytest.raises(TypeError, match="PositionEncoding subclass"):
        register_position_encoding("bad")(object)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(
    "head",
    [
        "RoFormerExtForSequenceClassification",
        "RoFormerExtForTokenClassification",
        "RoFormerExtForQuestionAnswering",
        "RoFormerExtForMultipleChoice",
    ],
)
def test_every_head_takes_every_encoding(encoding, head):
    """Each head's loss is finite and its gradient reaches the encoding's parameters."""
    torch.manual_seed(0)
    model = getattr(roformer_ext, head)(config(encoding, num_labels=2 if head.endswith("Answering") else 3))
    ids = torch.randint(1, 97, (2, 8))
    if head.endswith("MultipleChoice"):
        output = model(input_ids=torch.randint(1, 97, (2, 2, 8)), labels=torch.tensor([0, 1]))
    elif head.endswith("QuestionAnswering"):
        output = model(input_ids=ids, start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))
    elif head.endswith("TokenClassification"):
        output = model(input_ids=ids, labels=torch.randint(0, 3, (2, 8)))
    else:
        output = model(input_ids=ids, labels=torch.tensor([0, 2]))
    assert torch.isfinite(output.loss)
    output.loss.backward()
    for name, parameter in model.named_parameters():
        if "position_encoding" in name or "relative_table" in name:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_documented_custom_encoding_runs():
    """The example of docs/position-encodings.md: a learnable scale on the sinusoidal table."""

    @register_position_encoding("scaled_sinusoidal_doc")
    class ScaledSinusoidal(PositionEncoding):
        def __init__(self, config):
            super().__init__(config)
            self.scale = torch.nn.Parameter(torch.ones(()))

        def embed(self, embeddings, position_ids):
            return embeddings + self.scale * sinusoidal_table(position_ids, embeddings.shape[-1]).to(embeddings.dtype)

    try:
        model = RoFormerExtForMaskedLM(config("scaled_sinusoidal_doc"))
        ids = torch.randint(1, 97, (1, 7))
        model(input_ids=ids, labels=ids).loss.backward()
        assert model.roformer.position_encoding.scale.grad is not None
    finally:
        POSITION_ENCODINGS.unregister("scaled_sinusoidal_doc")


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("implementation", BACKENDS)
def test_decoder_never_sees_later_tokens(encoding, implementation):
    """Changing a later token leaves earlier logits alone. Regression: with a score term, sdpa once dropped the causal
    mask (transformers' utilities may skip it for is_causal), so decoders with shaw / t5_bias / alibi saw the future."""
    model = model_for(encoding, decoder=True, implementation=implementation)
    ids = torch.randint(1, 97, (1, 12))
    changed = ids.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 97
    with torch.no_grad():
        before, after = (model(input_ids=x, use_cache=False).logits for x in (ids, changed))
    torch.testing.assert_close(after[:, :8], before[:, :8], rtol=0, atol=1e-6)
    assert (after[:, 8:] - before[:, 8:]).abs().max() > 1e-4
