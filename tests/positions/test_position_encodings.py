"""Position encodings by name: exact against the plain formula or transformers' model with the same mechanism, and
every encoding and variant working wherever the others do."""

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
from roformer_ext.compat import enable_activation_checkpointing, output_cache
from roformer_ext.modeling_roformer_ext_layers import check_terms_fit_local_heads
from roformer_ext.position_encodings import sinusoidal_table
from roformer_ext.registries import POSITION_ENCODINGS
from roformer_ext.relative_position_encodings import alibi_slopes, t5_relative_bucket

BASIC = ("rope", "sinusoidal", "learned", "shaw", "t5_bias", "alibi", "none")
SEED_ENCODINGS = ("transformer_xl", "tupe", "deberta")
ENCODINGS = BASIC + SEED_ENCODINGS
VARIANTS = {
    **{encoding: {} for encoding in ENCODINGS},
    "transformer_xl_clamped": {"position_encoding": "transformer_xl", "clamp_len": 4},
    "tupe_a_no_reset": {"position_encoding": "tupe", "tupe_rel_pos": False, "tupe_cls_reset": False},
    "tupe_r_no_reset": {"position_encoding": "tupe", "tupe_cls_reset": False},
    "tupe_a": {"position_encoding": "tupe", "tupe_rel_pos": False},
    "deberta_separate_c2p": {"position_encoding": "deberta", "share_att_key": False, "pos_att_type": ["c2p"]},
    "deberta_p2c_no_buckets": {"position_encoding": "deberta", "pos_att_type": "p2c", "position_buckets": -1,
                               "max_relative_positions": 6, "norm_rel_ebd": "none"},
}  # fmt: skip
#: flex compiles a kernel per score_mod and shape on CPU (seconds each): flex for the encodings' defaults only.
CASES = [(v, b) for v in VARIANTS for b in ("eager", "sdpa")] + [(e, "flex_attention") for e in ENCODINGS]


def config(variant: str, **overrides) -> RoFormerExtConfig:
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
    knobs = dict(
        max_relative_position=5,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        position_buckets=8,
        max_relative_positions=20,
    )
    return RoFormerExtConfig(**{**fields, **knob_kwargs(variant, knobs, {**VARIANTS.get(variant, {}), **overrides})})


def model_for(variant: str, decoder: bool = False, implementation: str = "eager", **overrides):
    """Non-trivial position parameters and tables (σ = 0.5), so a term that went missing or wrong would show."""
    torch.manual_seed(0)
    cls = RoFormerExtForCausalLM if decoder else RoFormerExtForMaskedLM
    model = cls(config(variant, is_decoder=decoder, **overrides)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "position_encoding" in name or "relative_table" in name:
                parameter.normal_(0.0, 0.5)
        for module in model.modules() if model.config.position_encoding in BASIC else ():  # the token-type table
            if isinstance(module, nn.Embedding) and module is not model.get_input_embeddings():
                module.weight.normal_(0.0, 0.5)
    model.set_attn_implementation(implementation)
    return model


def position_parameters_get_gradients(model) -> None:
    for name, parameter in model.named_parameters():
        if "position_encoding" in name or "relative_table" in name:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


# --- exactness against transformers' models and the formulas ------------------------------------------------------


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
    buckets = dict(relative_attention_num_buckets=8, relative_attention_max_distance=20)
    t5_config = T5Config(d_model=32, d_kv=8, num_heads=4, is_decoder=decoder, **buckets)
    t5 = T5Attention(t5_config, has_relative_attention_bias=True)
    encoding = model.roformer.position_encoding
    t5.relative_attention_bias.weight.data.copy_(encoding.relative_attention_bias.weight)
    positions = torch.arange(23)[None]
    ours = encoding.relative_scores(positions, positions).shared_bias()
    torch.testing.assert_close(ours, t5.compute_bias(23, 23), rtol=0, atol=1e-6)


@pytest.mark.parametrize("num_heads", [1, 2, 4, 6, 8, 12, 16, 24, 32])
def test_alibi_slopes_equal_blooms_and_mpts(num_heads):
    """MPT orders a non-power-of-two head count's slopes otherwise (its docstring says so)."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    bloom = build_alibi_tensor(torch.ones(1, 3), num_heads, torch.float32)  # slope_h × position (0, 1, 2)
    torch.testing.assert_close(alibi_slopes(num_heads), bloom[:, 0, 1], rtol=1e-6, atol=0)
    if num_heads & (num_heads - 1) == 0:
        mpt = build_mpt_alibi_tensor(num_heads, 3)  # slope_h × (−2, −1, 0)
        torch.testing.assert_close(alibi_slopes(num_heads), -mpt[:, 0, 0] / 2, rtol=1e-6, atol=0)


def test_alibi_formula():
    """The paper's geometric sequence for 8 heads: 1/2, 1/4, ..., 1/256; the bias is −slope·|j − i|."""
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)]))
    positions = torch.arange(6)[None]
    bias = model_for("alibi").roformer.position_encoding.relative_scores(positions, positions).shared_bias()
    distance = (positions[0, None, :] - positions[0, :, None]).abs()
    torch.testing.assert_close(bias[0], -alibi_slopes(4)[:, None, None] * distance)


def test_learned_equals_bert_embeddings():
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertEmbeddings

    model = model_for("learned").roformer
    bert_config = BertConfig(vocab_size=97, hidden_size=32, max_position_embeddings=128, hidden_dropout_prob=0.0)
    bert, ours = BertEmbeddings(bert_config).eval(), model.embeddings
    bert.word_embeddings.weight.data.copy_(ours.word_embeddings.weight)
    bert.token_type_embeddings.weight.data.copy_(ours.token_type_embeddings.weight)
    bert.position_embeddings.weight.data.copy_(model.position_encoding.position_embeddings.weight)
    bert.LayerNorm.load_state_dict(ours.norm.state_dict())
    ids, types = torch.randint(0, 97, (2, 11)), torch.randint(0, 2, (2, 11))
    positions = torch.arange(11)[None].expand(2, 11)
    expected = bert(input_ids=ids, token_type_ids=types, position_ids=positions)
    torch.testing.assert_close(ours(ids, types, None, model.position_encoding, positions), expected, rtol=0, atol=1e-6)


def test_sinusoidal_equals_distilberts_table_and_the_formula():
    from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings

    table = torch.empty(50, 32)
    create_sinusoidal_embeddings(50, 32, table)
    torch.testing.assert_close(sinusoidal_table(torch.arange(50), 32), table, rtol=0, atol=1e-5)
    # PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(...)
    p, i, d = 37, 5, 32
    row = sinusoidal_table(torch.tensor([p]), d)[0]
    assert math.isclose(float(row[2 * i]), math.sin(p / 10000 ** (2 * i / d)), abs_tol=1e-6)
    assert math.isclose(float(row[2 * i + 1]), math.cos(p / 10000 ** (2 * i / d)), abs_tol=1e-6)


def test_sinusoidal_scale_multiplies_the_table_and_is_saved(tmp_path):
    ids = torch.randint(1, 97, (2, 9), generator=torch.Generator().manual_seed(0))
    sums = {}
    for scale in (1.0, 0.25):
        model = model_for("sinusoidal", position_encoding_parameters={"sinusoidal_scale": scale})
        hook = model.roformer.embeddings.norm.register_forward_hook(
            lambda m, args, out, scale=scale: sums.setdefault(scale, args[0])
        )
        with torch.no_grad():
            model(input_ids=ids)
        hook.remove()
    table = sinusoidal_table(torch.arange(9), 32)
    torch.testing.assert_close(sums[1.0] - sums[0.25], 0.75 * table.expand(2, 9, 32), rtol=0, atol=1e-6)
    model.save_pretrained(tmp_path)
    loaded = RoFormerExtForMaskedLM.from_pretrained(tmp_path).config
    assert loaded.position_encoding_parameters == {"sinusoidal_scale": 0.25}
    assert loaded.position_encoding_knobs.sinusoidal_scale == 0.25


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "tupe"])
def test_absolute_encodings_move_with_the_positions_and_tables_cap_the_length(encoding):
    model = model_for(encoding)
    ids = torch.randint(1, 97, (1, 10))
    with torch.no_grad():
        moved = model(input_ids=ids, position_ids=torch.arange(10)[None] + 7).logits
        assert (moved - model(input_ids=ids).logits).abs().max() > 1e-3
        if encoding == "sinusoidal":  # no length cap, and linear attention takes it
            model(input_ids=torch.randint(0, 97, (1, 300)))
            linear = RoFormerExtForMaskedLM(config("sinusoidal", attention_type="linear")).eval()
            assert torch.isfinite(linear(input_ids=torch.randint(1, 97, (2, 9))).logits).all()
            return
        with pytest.raises(ValueError, match="max_position_embeddings = 128"):
            model(input_ids=torch.randint(1, 97, (1, 129)))


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


def test_parameters_and_their_homes():
    """Per-layer or shared tables (the checkpoint keys); content scaled by 1/√(s·d)."""
    shaw = RoFormerExtModel(config("shaw"))
    tables = [layer.attention.relative_table for layer in shaw.layers]
    assert tables[0] is not tables[1] and tables[0].weight.shape == (11, 8)
    t5 = RoFormerExtModel(config("t5_bias"))
    assert all(layer.attention.relative_table is None for layer in t5.layers)
    assert "position_encoding.relative_attention_bias.weight" in t5.state_dict()
    xl = RoFormerExtModel(config("transformer_xl"))
    assert {
        "layers.1.attention.relative_table.r.weight",
        "layers.1.attention.relative_table.r_w_bias",
    } <= xl.state_dict().keys()
    assert xl.layers[0].attention.scaling == 8**-0.5
    deberta = RoFormerExtModel(config("deberta_separate_c2p"))
    keys = {"position_encoding.rel_embeddings.weight", "layers.0.attention.relative_table.pos_key_proj.weight"}
    assert keys <= deberta.state_dict().keys()
    assert not hasattr(deberta.layers[0].attention.relative_table, "pos_query_proj")
    assert math.isclose(deberta.layers[0].attention.scaling, (8 * 2) ** -0.5)
    assert RoFormerExtModel(config("deberta")).layers[0].attention.relative_table is None
    tupe = RoFormerExtModel(config("tupe"))
    assert tupe.position_encoding.position_embeddings.weight.shape == (129, 32)
    assert tupe.position_encoding.relative_attention_bias.weight.shape == (9, 4)
    assert math.isclose(tupe.layers[0].attention.scaling, (8 * 2) ** -0.5)


def tupe_term(encoding, decoder: bool) -> torch.Tensor:
    """TUPE's bias for 9 tokens, the [CLS] reset included (decoder: the first token's row and column read the spare
    bucket)."""
    rows = encoding.norm(encoding.position_embeddings.weight)  # row 0: the reset's; token n: row n + 1
    pq = encoding.query(rows).view(-1, 4, 8).transpose(0, 1) / math.sqrt(16)
    pk = encoding.key(rows).view(-1, 4, 8).transpose(0, 1)
    term = torch.empty(4, 9, 9)
    for i in range(9):
        for j in range(9):
            if encoding.cls_reset and i == 0:
                term[:, i, j] = (pq[:, 0] * pk[:, 0]).sum(-1)
            elif encoding.cls_reset and j == 0:
                term[:, i, j] = (pq[:, 1] * pk[:, 1]).sum(-1)
            else:
                term[:, i, j] = (pq[:, i + 1] * pk[:, j + 1]).sum(-1)
            if encoding.rel_pos:
                bucket = int(t5_relative_bucket(torch.tensor(j - i), not decoder, 8, 20))
                if encoding.cls_reset and (i == 0 or j == 0):
                    bucket = 4 if (i == 0 and not decoder) else 8
                term[:, i, j] += encoding.relative_attention_bias.weight[bucket]
    return term


@pytest.mark.parametrize("encoding", [*BASIC, "tupe", "tupe_a_no_reset"])
@pytest.mark.parametrize("decoder", [False, True])
def test_attention_weights_follow_the_plain_formula(encoding, decoder):
    """Layer 0's eager attention probabilities = softmax(q·kᵀ/√d + term [+ causal mask]) computed here by hand (TUPE:
    √(2d), its untied position term)."""
    model = model_for(encoding, decoder)
    ids = torch.randint(0, 97, (2, 9))
    out = model(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    attention = model.roformer.layers[0].attention
    hidden = out.hidden_states[0]
    q, k = (p(hidden).view(2, 9, 4, 8).transpose(1, 2) for p in (attention.query, attention.key))
    positions = torch.arange(9)
    if encoding == "rope":
        angles = positions[:, None] * 10000.0 ** (-torch.arange(0, 8, 2) / 8)  # (9, 4): pair i of dims (2i, 2i+1)
        cos, sin = angles.cos(), angles.sin()

        def rotate(x):
            x0, x1 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)

        q, k = rotate(q), rotate(k)
    scores = q @ k.transpose(-1, -2) / math.sqrt(16 if encoding.startswith("tupe") else 8)
    if encoding.startswith("tupe"):
        with torch.no_grad():
            scores = scores + tupe_term(model.roformer.position_encoding, decoder)
    distance = positions[None, :] - positions[:, None]  # key − query
    if encoding == "shaw":
        a = attention.relative_table.weight[distance.clamp(-5, 5) + 5]  # (q, k, d)
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


# --- backends, packing, cache, training: every encoding and variant ----------------------------------------------


@pytest.mark.parametrize(
    "variant, implementation, decoder",
    [(v, b, d) for v, b in CASES if b != "eager" for d in ((False, True) if b == "sdpa" or v in BASIC else (False,))],
)
def test_backends_agree_with_padding(variant, implementation, decoder):
    ids = torch.randint(1, 97, (2, 13), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[1, 9:] = 0
    outputs = {}
    for backend in ("eager", implementation):
        with torch.no_grad():
            model = model_for(variant, decoder, backend)
            outputs[backend] = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    torch.testing.assert_close(outputs[implementation][0], outputs["eager"][0], rtol=0, atol=1e-5)
    torch.testing.assert_close(outputs[implementation][1, :9], outputs["eager"][1, :9], rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "variant, implementation", [c for c in CASES if c[1] != "flex_attention" or c[0] in (*BASIC, "tupe")]
)
def test_packed_rows_equal_each_sequence_alone(variant, implementation):
    lengths = (5, 9, 3)
    model = model_for(variant, implementation=implementation)
    sequences = [torch.randint(1, 97, (n,), generator=torch.Generator().manual_seed(n)) for n in lengths]
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    with torch.no_grad():
        packed = model(input_ids=torch.cat(sequences)[None], position_ids=position_ids).logits[0]
        for sequence, start in zip(sequences, (0, 5, 14)):
            alone = model(input_ids=sequence[None]).logits[0]
            torch.testing.assert_close(packed[start : start + len(sequence)], alone, rtol=0, atol=1e-5)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cached_decoding_equals_recomputation_dynamic_and_static(variant):
    model = model_for(variant, decoder=True)
    prompt = torch.randint(1, 97, (2, 6), generator=torch.Generator().manual_seed(2))
    greedy = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cached = model.generate(prompt, use_cache=True, **greedy)
        uncached = model.generate(prompt, use_cache=False, **greedy)
        static = model.generate(prompt, cache_implementation="static", **greedy)
        full = model(cached, use_cache=False).logits[:, -1]
        first = model(cached[:, :-3], use_cache=True)
        step = model(cached[:, -3:], cache=output_cache(first)).logits[:, -1]
    torch.testing.assert_close(cached, uncached, rtol=0, atol=0)
    torch.testing.assert_close(static, cached, rtol=0, atol=0)
    torch.testing.assert_close(step, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("variant, implementation", CASES)
def test_decoder_never_sees_later_tokens(variant, implementation):
    """Regression: with a score term, sdpa once dropped the causal mask (transformers may skip it for is_causal)."""
    model = model_for(variant, decoder=True, implementation=implementation)
    ids = torch.randint(1, 97, (1, 12), generator=torch.Generator().manual_seed(4))
    changed = ids.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 97
    with torch.no_grad():
        before, after = (model(input_ids=x, use_cache=False).logits for x in (ids, changed))
    torch.testing.assert_close(after[:, :8], before[:, :8], rtol=0, atol=1e-6)
    assert (after[:, 8:] - before[:, 8:]).abs().max() > 1e-4


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


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_gradients_reach_every_position_parameter_and_checkpointing_keeps_them(variant):
    ids = torch.randint(1, 97, (2, 12), generator=torch.Generator().manual_seed(8))
    gradients = []
    for checkpointing in (None, {"use_reentrant": True}, {"use_reentrant": False}):
        model = model_for(variant)
        model.train()
        if checkpointing is not None:
            enable_activation_checkpointing(model, checkpointing)
        model(input_ids=ids, labels=ids).loss.backward()
        if checkpointing is None:
            position_parameters_get_gradients(model)
        gradients.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    for other in gradients[1:]:
        assert other.keys() == gradients[0].keys()
        for name in gradients[0]:
            torch.testing.assert_close(other[name], gradients[0][name], rtol=0, atol=1e-6)


@pytest.mark.parametrize("encoding", ["rope", "shaw", "t5_bias", "alibi", "transformer_xl", "deberta"])
@settings(max_examples=8, deadline=None)
@given(shift=st.integers(min_value=1, max_value=500))
def test_relative_encodings_are_shift_invariant(encoding, shift):
    model = model_for(encoding)
    ids = torch.randint(1, 97, (1, 10), generator=torch.Generator().manual_seed(shift))
    positions = torch.arange(10)[None]
    with torch.no_grad():
        base = model(input_ids=ids, position_ids=positions).logits
        shifted = model(input_ids=ids, position_ids=positions + shift).logits
    atol = 1e-5 if encoding in SEED_ENCODINGS else 2e-4  # RoPE's large angles lose a few fp32 bits
    torch.testing.assert_close(shifted, base, rtol=0, atol=atol)


def test_nope_encoder_is_permutation_equivariant():
    model = model_for("none")
    ids, order = torch.randint(1, 97, (1, 10)), torch.randperm(10)
    with torch.no_grad():
        expected = model(input_ids=ids).logits[:, order]
        torch.testing.assert_close(model(input_ids=ids[:, order]).logits, expected, rtol=0, atol=1e-5)


# --- configuration errors and extension ----------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["shaw", "t5_bias", "alibi", *SEED_ENCODINGS])
def test_score_terms_are_clear_errors_where_they_cannot_run(encoding):
    """Linear attention and flash attention take no score term; a tensor-parallel rank of 2 of 4 heads neither."""
    with pytest.raises(ValueError, match="linear attention never forms"):
        RoFormerExtModel(config(encoding, attention_type="linear"))
    model = model_for(encoding)
    model.config._attn_implementation = "flash_attention_2"  # what set_attn_implementation would do with a GPU
    with pytest.raises(ValueError, match="attn_implementation='sdpa'"):
        model(input_ids=torch.randint(1, 97, (1, 5)))
    if encoding in SEED_ENCODINGS:
        positions = torch.arange(5)[None]
        scores = model.roformer.position_encoding.relative_scores(positions, positions)
        with pytest.raises(ValueError, match="tensor parallel"):
            check_terms_fit_local_heads(model.config, 2, None, scores)


def test_registered_names_and_the_config_passed_in():
    """Each knob's own checks: test_encoding_knobs."""
    assert set(ENCODINGS) <= set(registered_position_encodings())
    with pytest.raises(ValueError, match="Registered choices: .*alibi.*t5_bias"):
        config("rotary-ish")
    with pytest.raises(ValueError, match="position_encoding must be 'rope'"):
        RoFormerExtVisionTextConfig(hidden_size=32, num_attention_heads=4, position_encoding="alibi")
    cfg = config("t5_bias")
    before = cfg.to_dict()
    RoFormerExtForCausalLM(cfg)
    assert cfg.to_dict() == before  # the config passed in is not changed


def test_users_register_their_own_encoding():
    """The example of docs/position-encodings.md: a learnable scale on the sinusoidal table."""

    @register_position_encoding("scaled_sinusoidal_doc")
    class ScaledSinusoidal(PositionEncoding):
        def __init__(self, config):
            super().__init__(config)
            self.scale = torch.nn.Parameter(torch.ones(()))

        def embed(self, embeddings, position_ids):
            return embeddings + self.scale * sinusoidal_table(position_ids, embeddings.shape[-1]).to(embeddings.dtype)

    try:
        assert "scaled_sinusoidal_doc" in roformer_ext.registered_position_encodings()
        model, ids = model_for("scaled_sinusoidal_doc"), torch.randint(1, 97, (1, 6))
        with torch.no_grad():
            assert not torch.allclose(model(input_ids=ids).logits, model_for("none")(input_ids=ids).logits)
        model(input_ids=ids, labels=ids).loss.backward()
        assert model.roformer.position_encoding.scale.grad is not None
    finally:
        POSITION_ENCODINGS.unregister("scaled_sinusoidal_doc")
    with pytest.raises(TypeError, match="PositionEncoding subclass"):
        register_position_encoding("bad")(object)


HEADS = ["SequenceClassification", "TokenClassification", "QuestionAnswering", "MultipleChoice"]


@pytest.mark.parametrize("encoding", BASIC)
@pytest.mark.parametrize("head", HEADS)
def test_every_head_takes_every_encoding(encoding, head):
    torch.manual_seed(0)
    model = getattr(roformer_ext, f"RoFormerExtFor{head}")(config(encoding, num_labels=2 + (head != HEADS[2])))
    ids, labels = torch.randint(1, 97, (2, 8)), torch.tensor([0, 2])
    span = dict(start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))
    inputs = {
        "MultipleChoice": dict(input_ids=torch.randint(1, 97, (2, 2, 8)), labels=torch.tensor([0, 1])),
        "QuestionAnswering": dict(input_ids=ids, **span),
        "TokenClassification": dict(input_ids=ids, labels=torch.randint(0, 3, (2, 8))),
        "SequenceClassification": dict(input_ids=ids, labels=labels),
    }[head]
    output = model(**inputs)
    assert torch.isfinite(output.loss)
    output.loss.backward()
    position_parameters_get_gradients(model)
