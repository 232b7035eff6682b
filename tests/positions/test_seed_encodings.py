"""The RoFormer paper's other alternatives, exact (fp32, 1e-5) against transformers' XLNet and DeBERTa-v2 and TUPE's
authors' code (tests/fixtures/tupe/PROVENANCE.md); everything else they do: test_position_encodings."""

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_position_encodings import config, model_for

from roformer_ext import RoFormerExtModel
from roformer_ext.compat import output_cache
from roformer_ext.relative_position_encodings import deberta_log_bucket, t5_relative_bucket, xlnet_relative_sinusoid

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tupe"


def layer0_attention(model, **inputs):
    """The outputs, and layer 0's attention context (before the output projection) and normed output."""
    attention, captured = model.roformer.layers[0].attention, {}
    hooks = [
        attention.output.register_forward_pre_hook(lambda m, args: captured.setdefault("context", args[0])),
        model.roformer.layers[0].attention_norm.register_forward_hook(
            lambda m, args, out: captured.setdefault("normed", out)
        ),
    ]
    with torch.no_grad():
        out = model(**inputs, output_attentions=True, output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    return out, captured


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # DeBERTa-v3's form: c2p + p2c, shared keys, log buckets, LayerNorm'd table
        {"share_att_key": False},
        {"pos_att_type": ["c2p"], "share_att_key": False, "norm_rel_ebd": "none"},
        {"pos_att_type": "p2c"},
        {"position_buckets": -1, "max_relative_positions": 6},  # plain distances, clamped to ±6
        {"position_buckets": 16, "max_relative_positions": 40},  # 23 tokens: past the exact buckets
    ],
)
def test_deberta_equals_transformers_disentangled_self_attention(overrides):
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import DebertaV2Encoder, DisentangledSelfAttention

    model = model_for("deberta", **overrides)
    ours, encoding, knobs = (
        model.roformer.layers[0].attention,
        model.roformer.position_encoding,
        model.config.position_encoding_parameters,
    )
    names = ("position_buckets", "max_relative_positions", "pos_att_type", "share_att_key", "norm_rel_ebd")
    theirs_config = DebertaV2Config(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        relative_attention=True,
        max_position_embeddings=model.config.max_position_embeddings,
        layer_norm_eps=model.config.layer_norm_eps,
        **{name: knobs[name] for name in names},
    )
    theirs = DisentangledSelfAttention(theirs_config).eval()
    encoder = DebertaV2Encoder(theirs_config).eval()  # holds the shared relative embeddings and builds the positions
    with torch.no_grad():
        for name in ("query", "key", "value"):
            getattr(theirs, f"{name}_proj").load_state_dict(getattr(ours, name).state_dict())
        for name in ("pos_key_proj", "pos_query_proj"):
            if hasattr(theirs, name):
                getattr(theirs, name).load_state_dict(getattr(ours.relative_table, name).state_dict())
        encoder.rel_embeddings.load_state_dict(encoding.rel_embeddings.state_dict())
        if encoding.norm is not None:
            encoder.LayerNorm.load_state_dict(encoding.norm.state_dict())
    ids = torch.randint(1, 97, (2, 23), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 23, dtype=torch.long)
    mask[1, 17:] = 0
    out, captured = layer0_attention(model, input_ids=ids, attention_mask=mask)
    hidden = out.hidden_states[0]
    with torch.no_grad():
        relative = dict(relative_pos=encoder.get_rel_pos(hidden), rel_embeddings=encoder.get_rel_embedding())
        context, probabilities = theirs(hidden, encoder.get_attention_mask(mask), output_attentions=True, **relative)
    keep = mask.bool()  # padded query rows have no defined output
    torch.testing.assert_close(out.attentions[0][0], probabilities[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(out.attentions[0][1][:, keep[1]], probabilities[1][:, keep[1]], rtol=0, atol=1e-5)
    torch.testing.assert_close(captured["context"][keep], context[keep], rtol=0, atol=1e-5)


@pytest.mark.parametrize("buckets, max_relative", [(8, 20), (256, 512), (16, 40), (2, 4)])
def test_deberta_rows_equal_transformers_buckets_at_every_distance(buckets, max_relative):
    """Our lookup over clamped distances agrees with transformers' bucketing far past the clamp."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    encoding = RoFormerExtModel(
        config("deberta", position_buckets=buckets, max_relative_positions=max_relative, max_position_embeddings=4096)
    ).position_encoding
    positions = torch.arange(3 * max(buckets, max_relative))[None]
    scores = encoding.relative_scores(positions, positions)
    distance = positions[0, :, None] - positions[0, None, :]  # query − key
    expected = (make_log_bucket_position(distance, buckets, max_relative).long() + buckets).clamp(0, 2 * buckets - 1)
    torch.testing.assert_close(scores.rows[0], expected, rtol=0, atol=0)
    unclamped = make_log_bucket_position(distance, buckets, max_relative).long()
    torch.testing.assert_close(deberta_log_bucket(distance, buckets, max_relative), unclamped, rtol=0, atol=0)


# --- Transformer-XL: exact against XLNet's relative attention core ---------------------------------------------------


def xlnet_attention_from(model, clamp_len: int, attn_type: str):
    """XLNet's relative attention and a tiny XLNet model (its relative sinusoid), with our layer 0's weights."""
    from transformers import XLNetConfig, XLNetModel
    from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

    sizes = dict(vocab_size=97, d_model=32, n_layer=1, n_head=4, d_inner=64, dropout=0.0)
    xlnet_config = XLNetConfig(**sizes, clamp_len=clamp_len, attn_type=attn_type)
    theirs = XLNetRelativeAttention(xlnet_config).eval()
    ours = model.roformer.layers[0].attention
    with torch.no_grad():  # our (out, in) Linear weights as XLNet's (in, heads, head_dim) parameters
        for name, linear in (("q", ours.query), ("k", ours.key), ("v", ours.value), ("r", ours.relative_table.r)):
            getattr(theirs, name).copy_(linear.weight.T.reshape(32, 4, 8))
        theirs.o.copy_(ours.output.weight.reshape(32, 4, 8))  # attn_out = einsum("ibnd,hnd->ibh", vec, o)
        theirs.r_w_bias.copy_(ours.relative_table.r_w_bias)
        theirs.r_r_bias.copy_(ours.relative_table.r_r_bias)
        theirs.layer_norm.load_state_dict(model.roformer.layers[0].attention_norm.state_dict())
    return theirs, XLNetModel(xlnet_config).eval()


def xlnet_heads(theirs, states):
    """XLNet's own einsums: (seq, batch, hidden) -> (seq, batch, heads, head_dim)."""
    return {name: torch.einsum("ibh,hnd->ibnd", states, getattr(theirs, name)) for name in ("q", "k", "v")}


@pytest.mark.parametrize("clamp_len", [-1, 5])
def test_transformer_xl_equals_xlnet_rel_attn_core(clamp_len):
    """Encoder (attn_type "bi"), one padded row: probabilities, attention vector, XLNet's post_attention output."""
    model = model_for("transformer_xl", clamp_len=clamp_len, use_bias=False)  # XLNet's q/k/v/o have no bias
    theirs, xlnet = xlnet_attention_from(model, clamp_len, "bi")
    ids = torch.randint(1, 97, (2, 13), generator=torch.Generator().manual_seed(5))
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[1, 9:] = 0
    out, captured = layer0_attention(model, input_ids=ids, attention_mask=mask)
    hidden = out.hidden_states[0].transpose(0, 1)  # (seq, batch, hidden), XLNet's layout
    with torch.no_grad():
        heads = xlnet_heads(theirs, hidden)
        r = xlnet.relative_positional_encoding(13, 13, bsz=2)
        k_head_r = torch.einsum("ibh,hnd->ibnd", r, theirs.r)
        padding = (1 - mask).float().T[None, :, :, None].expand(13, 13, 2, 1)  # (i, j, batch, 1): 1 hides key j
        vector, probabilities = theirs.rel_attn_core(
            heads["q"], heads["k"], heads["v"], k_head_r, attn_mask=padding, output_attentions=True
        )
        output = theirs.post_attention(hidden, vector)
    keep = mask.bool()
    probabilities = probabilities.permute(2, 3, 0, 1)  # (i, j, b, n) -> (b, n, i, j)
    rows = keep[:, None, :, None].expand(-1, 4, -1, 13)
    torch.testing.assert_close(out.attentions[0][rows], probabilities[rows], rtol=0, atol=1e-5)
    torch.testing.assert_close(captured["context"][keep], vector.transpose(0, 1).flatten(2)[keep], rtol=0, atol=1e-5)
    torch.testing.assert_close(captured["normed"][keep], output.transpose(0, 1)[keep], rtol=0, atol=1e-5)


def test_transformer_xl_cached_step_equals_xlnet_with_memory():
    """A cached step (3 tokens after 6) is XLNet's core with the 6 as memory, attn_type "uni", a causal mask."""
    model = model_for("transformer_xl", decoder=True, use_bias=False)
    theirs, xlnet = xlnet_attention_from(model, -1, "uni")
    ids = torch.randint(1, 97, (2, 9), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        first = model(ids[:, :6], use_cache=True)
    out, captured = layer0_attention(model, input_ids=ids[:, 6:], cache=output_cache(first))
    with torch.no_grad():  # layer 0's input has no position in it: the memory is the first 6 tokens' embeddings
        states = model.roformer.embeddings(ids).transpose(0, 1)  # (9, batch, hidden)
        keys = xlnet_heads(theirs, states)
        query = torch.einsum("ibh,hnd->ibnd", states[6:], theirs.q)
        k_head_r = torch.einsum("ibh,hnd->ibnd", xlnet.relative_positional_encoding(3, 9, bsz=2), theirs.r)
        future = (torch.arange(9)[None, :] > torch.arange(6, 9)[:, None]).float()  # key after the query
        vector, probabilities = theirs.rel_attn_core(
            query, keys["k"], keys["v"], k_head_r, attn_mask=future[:, :, None, None], output_attentions=True
        )
    torch.testing.assert_close(out.attentions[0], probabilities.permute(2, 3, 0, 1), rtol=0, atol=1e-5)
    torch.testing.assert_close(captured["context"], vector.transpose(0, 1).flatten(2), rtol=0, atol=1e-5)


def test_xlnet_sinusoid_equals_xlnets():
    from transformers import XLNetConfig, XLNetModel

    xlnet = XLNetModel(XLNetConfig(vocab_size=10, d_model=32, n_layer=1, n_head=4, d_inner=8, attn_type="bi"))
    expected = xlnet.relative_positional_encoding(7, 7)[:, 0]  # distances 7, 6, ..., -6
    torch.testing.assert_close(xlnet_relative_sinusoid(torch.arange(7, -7, -1), 32), expected, rtol=0, atol=0)


# --- TUPE: against its authors' code (fixtures) and the formula --------------------------------------------------------


def tupe_from_fixture(name: str, cls_reset: bool = True):
    """Our encoder with the weights the authors' TransformerSentenceEncoder ran with (fixture), and the fixture."""
    fixture = load_file(FIXTURES / f"{name}.safetensors")
    weights = {key.removeprefix("weights."): value for key, value in fixture.items() if key.startswith("weights.")}
    tupe = dict(tupe_rel_pos=name == "tupe_r", tupe_cls_reset=cls_reset)
    overrides = dict(vocab_size=40, max_position_embeddings=24, layer_norm_eps=1e-5, hidden_act="gelu", **tupe)
    model = RoFormerExtModel(config("tupe", pooler_activation=None, **overrides)).eval()
    rename = {  # ours: theirs
        "embeddings.word_embeddings": "embed_tokens", "embeddings.norm": "emb_layer_norm",
        "position_encoding.position_embeddings": "pos", "position_encoding.norm": "pos_ln",
        "position_encoding.query": "pos_q_linear", "position_encoding.key": "pos_k_linear",
        "position_encoding.relative_attention_bias": "relative_attention_bias",
    }  # fmt: skip
    for i in range(2):
        ours = ("attention.output", "attention_norm", "feed_forward.intermediate", "feed_forward.output", "output_norm")
        theirs = ("self_attn.out_proj", "self_attn_layer_norm", "fc1", "fc2", "final_layer_norm")
        rename |= {f"layers.{i}.{a}": f"layers.{i}.{b}" for a, b in zip(ours, theirs)}
    state = {
        f"{a}.{kind}": weights[f"{b}.{kind}"]
        for a, b in rename.items()
        for kind in ("weight", "bias")
        if f"{b}.{kind}" in weights
    }
    state["embeddings.token_type_embeddings.weight"] = torch.zeros(2, 32)
    for i in range(2):
        for kind in ("weight", "bias"):
            chunks = weights[f"layers.{i}.self_attn.in_proj_{kind}"].chunk(3)
            state |= {f"layers.{i}.attention.{part}.{kind}": c for part, c in zip(("query", "key", "value"), chunks)}
    model.load_state_dict(state, strict=True)
    return model, fixture


@pytest.mark.parametrize("name", ["tupe_r", "tupe_a"])
def test_tupe_equals_the_authors_encoder(name):
    """guolinke/TUPE's TransformerSentenceEncoder (TUPE-R / TUPE-A, [CLS] reset): the same position bias, and the
    same last hidden states on real tokens (the authors zero padded embeddings, we mask them)."""
    model, fixture = tupe_from_fixture(name)
    tokens = fixture["tokens"]
    mask = (tokens != 0).long()
    positions = torch.arange(tokens.shape[1])[None]
    with torch.no_grad():
        bias = model.position_encoding.relative_scores(positions, positions).shared_bias()[0]
        hidden = model(input_ids=tokens, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(bias, fixture["self_attn_bias"], rtol=0, atol=1e-5)
    keep = mask.bool()
    torch.testing.assert_close(hidden[keep], fixture["last_hidden_state"][keep], rtol=0, atol=1e-5)


def test_tupe_without_reset_is_the_untied_formula():
    """bias_ij = LN(p_{i+1}) U_q · LN(p_{j+1}) U_k / √(2d) + b[bucket(j − i)]; the authors' off the first row / column."""
    model, fixture = tupe_from_fixture("tupe_r", cls_reset=False)
    encoding = model.position_encoding
    positions = torch.arange(19)[None]
    with torch.no_grad():
        bias = encoding.relative_scores(positions, positions).shared_bias()[0]
        table = encoding.norm(encoding.position_embeddings.weight[1:20])
        pq = encoding.query(table).view(19, 4, 8).transpose(0, 1) / math.sqrt(2 * 8)
        pk = encoding.key(table).view(19, 4, 8).transpose(0, 1)
        buckets = t5_relative_bucket(positions[0][None, :] - positions[0][:, None], True, 8, 20)
        expected = pq @ pk.transpose(-1, -2) + encoding.relative_attention_bias.weight[buckets].permute(2, 0, 1)
    torch.testing.assert_close(bias, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(bias[:, 1:, 1:], fixture["self_attn_bias"][:, 1:, 1:], rtol=0, atol=1e-5)


def test_trust_remote_code_in_fresh_process(tmp_path):
    """Transformer-XL (the three share the copied files) reloaded through remote code."""
    from test_remote_code import run_isolated

    model = model_for("transformer_xl")
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    inputs = dict(input_ids=torch.randint(1, 97, (2, 9)), attention_mask=torch.ones(2, 9, dtype=torch.long))
    inputs["attention_mask"][1, 6:] = 0
    torch.save(inputs, folder / "inputs.pt")
    result = run_isolated(folder, "AutoModelForMaskedLM", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    with torch.no_grad():
        expected = model(**inputs).logits
    torch.testing.assert_close(torch.load(folder / "remote_output.pt"), expected, atol=1e-6, rtol=0)


# --- the position lab's decay curves of the three ------------------------------------------------------------------


def test_decay_curves_are_the_models_own_terms():
    """XL: the layer's term for a zero query; TUPE: its bias's diagonal means; DeBERTa: one row per exact bucket."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "position-lab"))
    import decay_analysis as analysis

    xl = model_for("transformer_xl").roformer
    attention = xl.layers[1].attention
    positions = torch.arange(21)[None]
    zeros = torch.zeros(1, 4, 21, 8)
    with torch.no_grad():
        term = xl.position_encoding.relative_scores(positions, positions).layer_term(attention, zeros, zeros, False)
    curve = analysis.transformer_xl_position_bias(attention.relative_table, 20)
    torch.testing.assert_close(curve.float(), term[0, :, 20].flip(-1), rtol=0, atol=1e-6)
    tupe = model_for("tupe").roformer.position_encoding
    with torch.no_grad():
        bias = tupe.relative_scores(positions, positions).shared_bias()[0]
    curve = analysis.tupe_bias_by_distance(tupe, 20)
    torch.testing.assert_close(curve[:, 3].float(), torch.stack([bias[:, i, i - 3] for i in range(3, 21)], -1).mean(-1))
    cosine = analysis.deberta_embedding_by_distance(model_for("deberta").roformer.position_encoding, 20)
    assert cosine[0] == pytest.approx(1.0) and len(set(cosine[:4].tolist())) == 4
