"""Each relative encoding's term against a plain loop over its paper's formula, both as the eager / sdpa bias and as
flex's `score_mod` called on index grids; fractional positions, batches of 2 and 1 both ways round. Then dtypes,
devices, the modules' settings and the refusals."""

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import knob_kwargs
from torch import nn
from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position
from transformers.models.t5.modeling_t5 import T5Attention

from roformer_ext import RoFormerExtConfig
from roformer_ext.encoding_knobs import Capabilities, EncodingKnobs, SinusoidalKnobs
from roformer_ext.position_encodings import (
    LearnedPositionEncoding,
    PositionEncoding,
    RelativeScores,
    SinusoidalPositionEncoding,
    add_scores_to_mask,
    position_encoding_class,
    register_position_encoding,
    registered_position_encodings,
    sinusoidal_table,
)
from roformer_ext.registries import POSITION_ENCODINGS
from roformer_ext.relative_position_encodings import (
    AlibiPositionEncoding,
    DebertaLayerParameters,
    DebertaPositionEncoding,
    ShawPositionEncoding,
    T5BiasPositionEncoding,
    TransformerXLLayerParameters,
    TransformerXLPositionEncoding,
    TupePositionEncoding,
    alibi_slopes,
    xlnet_relative_sinusoid,
)

HEADS, HEAD_DIM, HIDDEN = 4, 8, 32
#: (query positions, key positions): batch 2 against batch 1 and the reverse; fractional ones count as whole; a key
#: past TUPE's table of 64 rows (a static cache's unwritten slot)
POSITION_PAIRS = {
    "queries_batched": (
        torch.tensor([[0.0, 1.0, 2.9], [3.5, 5.0, 30.0]]),
        torch.tensor([[0.0, 1.0, 2.0, 4.7, 7.0, 41.0]]),
    ),
    "keys_batched": (
        torch.tensor([[0.0, 2.0, 6.0]]),
        torch.tensor([[0.0, 1.0, 3.0, 4.0, 25.0, 9.0], [2.0, 0.0, 1.0, 11.0, 12.0, 70.0]]),
    ),
}
PAIRS = pytest.mark.parametrize(("queries", "keys"), list(POSITION_PAIRS.values()), ids=list(POSITION_PAIRS))


def config(position_encoding: str, **overrides) -> RoFormerExtConfig:
    fields = dict(
        vocab_size=97,
        hidden_size=HIDDEN,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    knobs = dict(
        max_relative_position=3,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        position_buckets=8,
        max_relative_positions=20,
    )
    return RoFormerExtConfig(**{**fields, **knob_kwargs(position_encoding, knobs, overrides)})


def randomized(module: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.5)
    return module.eval()


def whole(positions: torch.Tensor) -> list[list[int]]:
    return [[math.floor(p) for p in row] for row in positions.tolist()]


def sizes(queries: torch.Tensor, keys: torch.Tensor) -> tuple:
    """Whole query and key positions, and the (batch, q, k) of the scores."""
    qp, kp = whole(queries), whole(keys)
    return qp, kp, max(len(qp), len(kp)), queries.shape[1], keys.shape[1]


def grid(score_mod, batch: int, q: int, k: int, dtype=torch.float32) -> torch.Tensor:
    """flex attention's view of a score_mod: every (batch, head, q, k) score of a zero score matrix."""
    b, h, i, j = (torch.arange(n) for n in (batch, HEADS, q, k))
    zeros = torch.zeros(batch, HEADS, q, k, dtype=dtype)
    return score_mod(
        zeros, b[:, None, None, None], h[None, :, None, None], i[None, None, :, None], j[None, None, None, :]
    )


def loop(batch: int, q: int, k: int, term) -> torch.Tensor:
    """term(b, h, i, j) for every score: the plain loop the references are written in."""
    out = torch.zeros(batch, HEADS, q, k)
    for b in range(batch):
        for h in range(HEADS):
            for i in range(q):
                for j in range(k):
                    out[b, h, i, j] = term(b, h, i, j)
    return out


def at(positions: list[list[int]], b: int, index: int) -> int:
    return positions[b if len(positions) > 1 else 0][index]


@PAIRS
def test_distances_are_key_minus_query_of_whole_positions(queries, keys):
    scores = RelativeScores(queries, keys)
    qp, kp, batch, q, k = sizes(queries, keys)
    expected = torch.tensor([[[at(kp, b, j) - at(qp, b, i) for j in range(k)] for i in range(q)] for b in range(batch)])
    assert scores.query_positions.dtype == scores.key_positions.dtype == torch.long
    assert torch.equal(scores.distances(), expected)
    position_at = scores._position_at(
        torch.arange(batch)[:, None, None], torch.arange(queries.shape[1])[None, :, None], torch.arange(keys.shape[1])
    )
    assert torch.equal(position_at, expected)


def test_the_base_has_neither_bias_nor_score_mod_and_fits_local_heads():
    scores = RelativeScores(torch.arange(3.0)[None], torch.arange(3.0)[None])
    assert scores.shared_bias() is None
    with pytest.raises(NotImplementedError, match="RelativeScores defines neither shared_bias nor dense"):
        scores.dense(torch.zeros(1, HEADS, 3, HEAD_DIM), None)
    with pytest.raises(NotImplementedError, match="RelativeScores has no flex score_mod"):
        scores.score_mod(torch.zeros(1, HEADS, 3, HEAD_DIM), None)
    assert scores.fits_local_heads


@pytest.mark.parametrize(
    "num_heads, slopes",
    [(1, [2.0**-8]), (3, [2.0**-4, 2.0**-8, 2.0**-2]), (4, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]),
     # six: the four-head slopes, then 2^(-8i/8) for i = 1, 3 (the odd ones of eight heads)
     (6, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3])],
)  # fmt: skip
def test_alibi_slopes_written_out(num_heads, slopes):
    assert alibi_slopes(num_heads).tolist() == slopes
    assert alibi_slopes(num_heads).dtype == torch.float32


@PAIRS
def test_alibi_bias_and_score_mod_are_minus_slope_times_distance(queries, keys):
    encoding = AlibiPositionEncoding(config("alibi"))
    scores = encoding.relative_scores(queries, keys)
    qp, kp, batch, q, k = sizes(queries, keys)
    slopes = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    expected = loop(batch, q, k, lambda b, h, i, j: -slopes[h] * abs(at(kp, b, j) - at(qp, b, i)))
    torch.testing.assert_close(scores.shared_bias(), expected, rtol=0, atol=0)
    assert scores.shared_bias().dtype == torch.float32
    torch.testing.assert_close(
        scores.dense(torch.zeros(batch, HEADS, q, HEAD_DIM, dtype=torch.float64), None), expected.double()
    )
    torch.testing.assert_close(
        grid(scores.score_mod(torch.zeros(1, dtype=torch.float64), None), batch, q, k), expected.double()
    )


@pytest.mark.parametrize("decoder", [False, True])
@PAIRS
def test_t5_bias_and_score_mod_read_t5s_bucket_of_key_minus_query(queries, keys, decoder):
    encoding = randomized(T5BiasPositionEncoding(config("t5_bias", is_decoder=decoder)))
    scores = encoding.relative_scores(queries, keys)
    qp, kp, batch, q, k = sizes(queries, keys)
    weight = encoding.relative_attention_bias.weight.detach()

    def term(b, h, i, j):
        distance = torch.tensor(at(kp, b, j) - at(qp, b, i))
        bucket = T5Attention._relative_position_bucket(distance, not decoder, 8, 20)
        return weight[bucket, h]

    expected = loop(batch, q, k, term)
    with torch.no_grad():
        torch.testing.assert_close(scores.shared_bias(), expected, rtol=0, atol=0)
        torch.testing.assert_close(grid(scores.score_mod(torch.zeros(1), None), batch, q, k), expected, rtol=0, atol=0)


@PAIRS
def test_shaw_term_and_score_mod_are_the_query_times_the_clipped_key_row(queries, keys):
    cfg = config("shaw")
    encoding = ShawPositionEncoding(cfg)
    table = randomized(ShawPositionEncoding.layer_table(cfg))
    assert table.weight.shape == (2 * 3 + 1, HEAD_DIM)
    scores = encoding.relative_scores(queries, keys)
    qp, kp, batch, q, k = sizes(queries, keys)
    torch.manual_seed(1)
    query = torch.randn(batch, HEADS, q, HEAD_DIM)
    weight = table.weight.detach()

    def term(b, h, i, j):
        row = min(max(at(kp, b, j) - at(qp, b, i), -3), 3) + 3
        return (query[b, h, i] * weight[row]).sum() / math.sqrt(HEAD_DIM)

    expected = loop(batch, q, k, term)
    with torch.no_grad():
        torch.testing.assert_close(scores.dense(query, table), expected)
        torch.testing.assert_close(grid(scores.score_mod(query, table), batch, q, k), expected)
        layer = SimpleNamespace(relative_table=table)
        torch.testing.assert_close(scores.layer_term(layer, query, None, False), expected)
        torch.testing.assert_close(grid(scores.layer_term(layer, query, None, True), batch, q, k), expected)


def xl_sinusoid(distance: int) -> torch.Tensor:
    """[sin(d ω_0), ..., sin(d ω_15), cos(d ω_0), ..., cos(d ω_15)], ω_i = 10000^(−2i/32)."""
    frequencies = [10000.0 ** (-2 * i / HIDDEN) for i in range(HIDDEN // 2)]
    return torch.tensor([math.sin(distance * w) for w in frequencies] + [math.cos(distance * w) for w in frequencies])


def test_xlnet_sinusoid_written_out():
    grid_of_distances = xlnet_relative_sinusoid(torch.tensor([[1, -2], [3, 0]]), HIDDEN)  # sines then cosines
    expected = torch.stack([torch.stack([xl_sinusoid(d) for d in row]) for row in ([1, -2], [3, 0])])
    torch.testing.assert_close(grid_of_distances, expected)
    expected = torch.tensor(
        [math.sin(2 * 100.0**-0.0), math.sin(2 * 100.0**-0.5), math.cos(2.0), math.cos(2 * 100.0**-0.5)]
    )
    torch.testing.assert_close(xlnet_relative_sinusoid(torch.tensor([2.0]), 4, base=100.0)[0], expected)


@pytest.mark.parametrize("clamp_len", [-1, 0, 1, 4])
@PAIRS
def test_transformer_xl_term_and_score_mod_are_xls_formula(queries, keys, clamp_len):
    cfg = config("transformer_xl", clamp_len=clamp_len)
    encoding = TransformerXLPositionEncoding(cfg)
    table = randomized(TransformerXLLayerParameters(cfg))
    scores = encoding.relative_scores(queries, keys)
    qp, kp, batch, q, k = sizes(queries, keys)
    torch.manual_seed(1)
    query, key = torch.randn(batch, HEADS, q, HEAD_DIM), torch.randn(batch, HEADS, k, HEAD_DIM)
    scale = 0.3
    u, v, w_r = table.r_w_bias.detach(), table.r_r_bias.detach(), table.r.weight.detach()

    def term(b, h, i, j):
        distance = at(qp, b, i) - at(kp, b, j)  # query − key
        if clamp_len > 0:
            distance = min(max(distance, -clamp_len), clamp_len)
        projected = (w_r @ xl_sinusoid(distance)).view(HEADS, HEAD_DIM)[h]
        return ((query[b, h, i] + v[h]) @ projected + u[h] @ key[b, h, j]) * scale

    expected = loop(batch, q, k, term)
    layer = SimpleNamespace(relative_table=table, scaling=scale)
    with torch.no_grad():
        torch.testing.assert_close(scores.layer_term(layer, query, key, False), expected)
        torch.testing.assert_close(grid(scores.layer_term(layer, query, key, True), batch, q, k), expected)
    rows = scores.sinusoid.shape[0]
    if clamp_len > 0:  # a fixed table of the clamped distances
        assert (scores.low, rows) == (-clamp_len, 2 * clamp_len + 1)
    else:  # the batch's own range of query − key
        distances = [at(qp, b, i) - at(kp, b, j) for b in range(batch) for i in range(q) for j in range(k)]
        assert (scores.low, rows) == (min(distances), max(distances) - min(distances) + 1)


def test_transformer_xl_layer_parameters_shapes():
    table = TransformerXLPositionEncoding.layer_table(config("transformer_xl"))
    assert isinstance(table, TransformerXLLayerParameters) and table.head_dim == HEAD_DIM
    assert table.r.weight.shape == (HIDDEN, HIDDEN) and table.r.bias is None
    assert table.r_w_bias.shape == table.r_r_bias.shape == (HEADS, HEAD_DIM)
    assert not table.r_w_bias.any() and not table.r_r_bias.any()
    table.init_position_weights(SimpleNamespace(initializer_range=0.5))
    assert 0.2 < table.r_w_bias.std() < 1.0 and 0.2 < table.r_r_bias.std() < 1.0


DEBERTA_VARIANTS = {
    "shared_keys_log_buckets": {},
    "own_projections_c2p": {"share_att_key": False, "pos_att_type": ["c2p"]},
    "own_projections_both": {"share_att_key": False},
    "own_projections_p2c": {"share_att_key": False, "pos_att_type": ["p2c"]},
    # more buckets than max_relative_positions: the farthest distances' log buckets pass −span, the first row clamps
    "buckets_past_max_relative": {"position_buckets": 16, "max_relative_positions": 10},
    "p2c_no_buckets": {
        "pos_att_type": "p2c",
        "position_buckets": -1,
        "max_relative_positions": 6,
        "norm_rel_ebd": "none",
    },
    "no_buckets_table_length": {"position_buckets": 0, "max_relative_positions": -1},
}


@pytest.mark.parametrize("variant", list(DEBERTA_VARIANTS))
@PAIRS
def test_deberta_term_and_score_mod_are_c2p_plus_p2c_of_the_bucketed_row(queries, keys, variant):
    overrides = DEBERTA_VARIANTS[variant]
    cfg = config("deberta", **overrides)
    encoding = randomized(DebertaPositionEncoding(cfg))
    buckets = overrides.get("position_buckets", 8)
    max_relative = overrides.get("max_relative_positions", 20)
    max_relative = max_relative if max_relative > 0 else 64
    span = buckets if buckets > 0 else max_relative
    assert (encoding.span, encoding.max_relative_positions) == (span, max_relative)
    assert encoding.rel_embeddings.weight.shape == (2 * span, HIDDEN)
    only = {"own_projections_c2p": ("c2p",), "p2c_no_buckets": ("p2c",), "own_projections_p2c": ("p2c",)}
    terms = only.get(variant, ("c2p", "p2c"))
    assert encoding.terms == terms
    assert DebertaPositionEncoding.content_scale(cfg) == pytest.approx((1 + len(terms)) ** -0.5)
    own = DebertaPositionEncoding.layer_table(cfg)
    if encoding.share_att_key:
        assert own is None
        torch.manual_seed(2)
        layer = SimpleNamespace(key=nn.Linear(HIDDEN, HIDDEN), query=nn.Linear(HIDDEN, HIDDEN), relative_table=None)
        key_projection, query_projection = layer.key, layer.query
    else:
        own = randomized(own)
        assert hasattr(own, "pos_key_proj") == ("c2p" in terms) and hasattr(own, "pos_query_proj") == ("p2c" in terms)
        layer = SimpleNamespace(relative_table=own)
        key_projection = getattr(own, "pos_key_proj", None)
        query_projection = getattr(own, "pos_query_proj", None)
    layer.scaling = 0.3
    scores = encoding.relative_scores(queries, keys)
    qp, kp, batch, q, k = sizes(queries, keys)
    torch.manual_seed(1)
    query, key = torch.randn(batch, HEADS, q, HEAD_DIM), torch.randn(batch, HEADS, k, HEAD_DIM)
    with torch.no_grad():
        relative = encoding.rel_embeddings.weight
        if cfg.position_encoding_parameters["norm_rel_ebd"] == "layer_norm":
            relative = nn.functional.layer_norm(relative, (HIDDEN,), encoding.norm.weight, encoding.norm.bias, 1e-12)
        torch.testing.assert_close(encoding.relative_embeddings(), relative)

        def term(b, h, i, j):
            distance = torch.tensor(at(qp, b, i) - at(kp, b, j))  # query − key
            bucket = make_log_bucket_position(distance, buckets, max_relative) if buckets > 0 else distance
            row = int(min(max(int(bucket) + span, 0), 2 * span - 1))
            value = 0.0
            if "c2p" in terms:
                value += query[b, h, i] @ key_projection(relative[row]).view(HEADS, HEAD_DIM)[h] * 0.3
            if "p2c" in terms:
                value += key[b, h, j] @ query_projection(relative[row]).view(HEADS, HEAD_DIM)[h] * 0.3
            return value

        expected = loop(batch, q, k, term)
        torch.testing.assert_close(scores.layer_term(layer, query, key, False), expected)
        torch.testing.assert_close(grid(scores.layer_term(layer, query, key, True), batch, q, k), expected)
    assert not scores.fits_local_heads


def test_deberta_relative_embeddings_are_dropped_out_in_training():
    encoding = DebertaPositionEncoding(config("deberta", hidden_dropout_prob=0.5)).train()
    torch.manual_seed(0)
    dropped = encoding.relative_embeddings()
    assert (dropped == 0).float().mean() > 0.3
    assert torch.allclose(dropped[dropped != 0], 2 * encoding.norm(encoding.rel_embeddings.weight)[dropped != 0])


TUPE_VARIANTS = {
    "tupe_r_reset": {},
    "tupe_r_no_reset": {"tupe_cls_reset": False},
    "tupe_a_reset": {"tupe_rel_pos": False},
    "tupe_a_no_reset": {"tupe_rel_pos": False, "tupe_cls_reset": False},
    "decoder_tupe_r_reset": {"is_decoder": True},
}


@pytest.mark.parametrize("variant", list(TUPE_VARIANTS))
@PAIRS
def test_tupe_bias_and_score_mod_are_the_untied_correlation_reset_and_bucket(queries, keys, variant):
    overrides = TUPE_VARIANTS[variant]
    cfg = config("tupe", **overrides)
    encoding = randomized(TupePositionEncoding(cfg))
    reset, rel_pos = overrides.get("tupe_cls_reset", True), overrides.get("tupe_rel_pos", True)
    bidirectional = not overrides.get("is_decoder", False)
    assert encoding.position_embeddings.weight.shape == (65, HIDDEN)
    assert hasattr(encoding, "relative_attention_bias") == rel_pos
    if rel_pos:
        assert encoding.relative_attention_bias.weight.shape == (9, HEADS)
    assert TupePositionEncoding.content_scale(cfg) == pytest.approx(2**-0.5)
    scores = encoding.relative_scores(queries, keys)
    qp, kp, batch, q, k = sizes(queries, keys)
    with torch.no_grad():
        table = nn.functional.layer_norm(
            encoding.position_embeddings.weight, (HIDDEN,), encoding.norm.weight, encoding.norm.bias, cfg.layer_norm_eps
        )
        uq = encoding.query(table).view(65, HEADS, HEAD_DIM) / math.sqrt(2 * HEAD_DIM)
        uk = encoding.key(table).view(65, HEADS, HEAD_DIM)

        def term(b, h, i, j):
            a, c = at(qp, b, i), at(kp, b, j)
            value = uq[a + 1, h] @ uk[min(c, 63) + 1, h]  # position n reads row n + 1
            if reset and c == 0:
                value = uq[1, h] @ uk[1, h]  # θ₂: others → [CLS]
            if reset and a == 0:
                value = uq[0, h] @ uk[0, h]  # θ₁: [CLS] → others, the spare row 0
            if rel_pos:
                bucket = int(T5Attention._relative_position_bucket(torch.tensor(c - a), bidirectional, 8, 20))
                if reset and c == 0:
                    bucket = 8
                if reset and a == 0:
                    bucket = 4 if bidirectional else 8
                value = value + encoding.relative_attention_bias.weight[bucket, h]
            return value

        expected = loop(batch, q, k, term)
        torch.testing.assert_close(scores.shared_bias(), expected)
        torch.testing.assert_close(grid(scores.score_mod(torch.zeros(1), None), batch, q, k), expected)
    assert not scores.fits_local_heads


def test_tupe_table_ends_at_max_position_embeddings():
    encoding = TupePositionEncoding(config("tupe"))
    keys = torch.arange(70.0)[None]
    encoding.relative_scores(torch.tensor([[63.0]]), keys)  # the last row
    with pytest.raises(ValueError, match=r"'tupe' has a table of max_position_embeddings = 64 .* up to 64\. Shorten"):
        encoding.relative_scores(torch.tensor([[3.0, 64.0]]), keys)
    encoding.relative_scores(torch.zeros(1, 0), keys)  # no queries: nothing to check


# --- absolute ----------------------------------------------------------------------------------------------------------


def test_sinusoidal_table_written_out_for_an_odd_width():
    # PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(p / base^(2i/d)); d = 5, base 100: the last cosine dropped
    p = 3.0
    angles = [p / 100.0 ** (2 * i / 5) for i in range(3)]
    expected = [math.sin(angles[0]), math.cos(angles[0]), math.sin(angles[1]), math.cos(angles[1]), math.sin(angles[2])]
    torch.testing.assert_close(sinusoidal_table(torch.tensor([3]), 5, base=100.0)[0], torch.tensor(expected))
    default = [7 / 10000.0 ** (2 * i / 4) for i in range(2)]
    expected = [math.sin(default[0]), math.cos(default[0]), math.sin(default[1]), math.cos(default[1])]
    torch.testing.assert_close(sinusoidal_table(torch.tensor([[7]]), 4)[0, 0], torch.tensor(expected))


def test_sinusoidal_embed_adds_the_scaled_table_of_rope_theta():
    cfg = config("sinusoidal", rope_parameters={"rope_type": "default", "rope_theta": 100.0}, sinusoidal_scale=0.25)
    encoding = SinusoidalPositionEncoding(cfg)
    assert (encoding.base, encoding.scale) == (100.0, 0.25)
    embeddings = torch.ones(1, 2, HIDDEN, dtype=torch.float64)
    out = encoding.embed(embeddings, torch.tensor([[0, 5]]))
    angles = [5 / 100.0 ** (2 * i / HIDDEN) for i in range(HIDDEN // 2)]
    row5 = [f(a) for a in angles for f in (math.sin, math.cos)]
    row0 = [0.0, 1.0] * (HIDDEN // 2)
    expected = 1 + 0.25 * torch.tensor([row0, row5], dtype=torch.float64)[None]
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected)


def test_learned_embed_reads_the_row_of_each_position_and_refuses_the_rest():
    encoding = randomized(LearnedPositionEncoding(config("learned")))
    rows = encoding.position_embeddings.weight
    assert rows.shape == (64, HIDDEN)
    embeddings = torch.zeros(1, 3, HIDDEN)
    with torch.no_grad():
        out = encoding.embed(embeddings, torch.tensor([[0.0, 5.0, 63.0]]))
        torch.testing.assert_close(out, rows[[0, 5, 63]][None])
        assert encoding.embed(torch.zeros(1, 0, HIDDEN), torch.zeros(1, 0)).shape == (1, 0, HIDDEN)
    with pytest.raises(
        ValueError, match=r"'learned' has a table of max_position_embeddings = 64 .* up to 64\. Shorten"
    ):
        encoding.embed(embeddings, torch.tensor([[0, 64, 1]]))
    with pytest.raises(ValueError, match="max_position_embeddings = 64 positions"):
        encoding.embed(embeddings, torch.tensor([[0, -1, 1]]))


def test_add_scores_to_mask_for_each_kind_of_mask():
    # fewer queries than the mask's: the mask is cut to the keys
    keep = torch.tensor([[[[False, True, False]]]])
    minimum = torch.finfo(torch.float32).min
    torch.testing.assert_close(
        add_scores_to_mask(keep, torch.tensor([[[[1.0, 2.0]]]])), torch.tensor([[[[minimum, 2.0]]]])
    )
    bias = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    assert add_scores_to_mask(None, bias) is bias
    keep = torch.tensor([[[[True, False, True], [True, True, False]]]])  # one column more than the bias
    torch.testing.assert_close(add_scores_to_mask(keep, bias), torch.tensor([[[[1.0, minimum], [3.0, 4.0]]]]))
    additive = torch.tensor([[[[0.0, -10.0, 7.0], [-5.0, 0.0, 7.0]]]], dtype=torch.float64)
    out = add_scores_to_mask(additive, bias)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[[[1.0, -8.0], [-2.0, 4.0]]]]))


@pytest.mark.parametrize("use_bias", [True, False])
def test_projections_follow_use_bias_and_norms_the_config_eps(use_bias):
    tupe = TupePositionEncoding(config("tupe", use_bias=use_bias, layer_norm_eps=1e-7))
    own = DebertaLayerParameters(config("deberta", share_att_key=False, use_bias=use_bias))
    deberta = DebertaPositionEncoding(config("deberta", layer_norm_eps=1e-7, hidden_dropout_prob=0.25))
    projections = (tupe.query, tupe.key, own.pos_key_proj, own.pos_query_proj)
    assert [p.bias is not None for p in projections] == [use_bias] * 4
    assert all(p.weight.shape == (HIDDEN, HIDDEN) for p in projections)
    assert tupe.norm.eps == deberta.norm.eps == 1e-7 and tupe.norm.normalized_shape == deberta.norm.normalized_shape
    assert tupe.norm.normalized_shape == (HIDDEN,) and deberta.dropout.p == 0.25
    assert DebertaPositionEncoding(config("deberta", norm_rel_ebd="none")).norm is None


def test_alibi_slopes_are_a_non_persistent_fp32_buffer_and_linear_attention_is_refused():
    with pytest.raises(ValueError, match="'alibi' adds a term .* linear attention never forms. Use attention_type="):
        AlibiPositionEncoding(config("alibi", attention_type="linear"))
    alibi = AlibiPositionEncoding(config("alibi", num_attention_heads=8, hidden_size=64))
    assert alibi.slopes.tolist() == [2.0**-k for k in range(1, 9)] and "slopes" not in alibi.state_dict()
    alibi.slopes.zero_()
    alibi.init_position_weights(None)  # non-persistent: refilled by the weight init
    assert alibi.slopes.tolist() == [2.0**-k for k in range(1, 9)]
    alibi.half()
    assert alibi.relative_scores(torch.zeros(1, 2), torch.zeros(1, 2)).slopes.dtype == torch.float32


@pytest.mark.parametrize("per_score", [False, True])
@pytest.mark.parametrize("encoding", ["alibi", "t5_bias", "shaw"])
def test_attention_terms_share_a_bias_unless_per_score_or_query_dependent(encoding, per_score):
    module = position_encoding_class(encoding)(config(encoding))
    positions = torch.tensor([[[0.0, 1.0, 2.0]], [[5.0, 5.0, 5.0]]])  # (axes, batch, seq): the text axis is the first
    keys = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    terms = module.attention_terms(torch.zeros(1, 3, HIDDEN), positions, lambda: keys, per_score)
    assert terms.position_embeddings is None
    if encoding == "shaw" or per_score:
        assert terms.shared_bias is None
        assert torch.equal(terms.relative_scores.query_positions, torch.tensor([[0, 1, 2]]))
        assert torch.equal(terms.relative_scores.key_positions, torch.tensor([[0, 1, 2, 3]]))
    else:
        assert terms.relative_scores is None
        expected = module.relative_scores(positions[0], keys).shared_bias()
        assert terms.shared_bias.shape == (1, HEADS, 3, 4) and torch.equal(terms.shared_bias, expected)


@pytest.mark.parametrize("encoding", ["alibi", "t5_bias", "tupe", "tupe_a"])
def test_score_mods_add_their_term_in_the_querys_dtype(encoding):
    """flex attention's scores are in the query's dtype: a term kept in fp32 would promote them."""
    cfg = config("tupe", tupe_rel_pos=False) if encoding == "tupe_a" else config(encoding)
    module = randomized(position_encoding_class(cfg.position_encoding)(cfg))
    queries, keys = POSITION_PAIRS["queries_batched"]
    scores = module.relative_scores(queries, keys)
    with torch.no_grad():
        out = grid(scores.score_mod(torch.zeros(1, dtype=torch.bfloat16), None), 2, 3, 6, torch.bfloat16)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.float(), scores.shared_bias(), rtol=2e-2, atol=2e-2)


def test_shaw_term_is_in_the_querys_dtype():
    cfg = config("shaw")
    table = randomized(ShawPositionEncoding.layer_table(cfg))
    queries, keys = POSITION_PAIRS["queries_batched"]
    scores = ShawPositionEncoding(cfg).relative_scores(queries, keys)
    torch.manual_seed(1)
    query = torch.randn(2, HEADS, 3, HEAD_DIM)
    with torch.no_grad():
        expected = scores.dense(query, table)
        low = scores.dense(query.bfloat16(), table)
        assert low.dtype == torch.bfloat16
        torch.testing.assert_close(low.float(), expected, rtol=3e-2, atol=3e-2)
        assert grid(scores.score_mod(query.double(), table), 2, 3, 6).dtype == torch.float64


def test_sinusoidal_table_is_fp32_whatever_the_default_dtype():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        table = sinusoidal_table(torch.tensor([[3, 4]]), 6)
    finally:
        torch.set_default_dtype(default)
    assert table.dtype == torch.float32 and torch.equal(table, sinusoidal_table(torch.tensor([[3, 4]]), 6))


def test_sinusoidal_defaults_without_the_config_fields_and_the_embeddings_dtype():
    # a config without rope_theta, with the default knobs: Vaswani's base 10000 and the table unscaled
    bare = SimpleNamespace(
        attention_type="softmax", rope_parameters={}, position_encoding_parameters=SinusoidalKnobs().to_dict()
    )
    encoding = SinusoidalPositionEncoding(bare)
    assert (encoding.base, encoding.scale) == (10000.0, 1.0)
    embeddings = torch.zeros(1, 2, 4, dtype=torch.bfloat16)
    out = encoding.embed(embeddings, torch.tensor([[0, 7]]))
    assert out.dtype == torch.bfloat16
    expected = sinusoidal_table(torch.tensor([[0, 7]]), 4)  # Vaswani's base, written out in the odd-width test
    torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("encoding", ["transformer_xl", "deberta"])
def test_layer_terms_cast_the_shared_table_to_the_querys_dtype(encoding):
    """The shared tables (XL's sinusoid, DeBERTa's relative embeddings) meet each layer's projections in the query's
    dtype: a layer in fp64 with the table in fp32 computes the same term in fp64."""
    cfg = config(encoding, **({"share_att_key": False} if encoding == "deberta" else {}))
    queries, keys = POSITION_PAIRS["queries_batched"]
    torch.manual_seed(1)
    query, key = torch.randn(2, HEADS, 3, HEAD_DIM), torch.randn(2, HEADS, 6, HEAD_DIM)
    if encoding == "transformer_xl":
        module, table = TransformerXLPositionEncoding(cfg), randomized(TransformerXLLayerParameters(cfg))
    else:
        module, table = randomized(DebertaPositionEncoding(cfg)), randomized(DebertaLayerParameters(cfg))
    scores = module.relative_scores(queries, keys)
    layer = SimpleNamespace(relative_table=table, scaling=0.3)
    with torch.no_grad():
        expected = scores.layer_term(layer, query, key, False)
        table.double()
        out = scores.layer_term(layer, query.double(), key.double(), False)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected.double(), rtol=1e-5, atol=1e-5)


def test_registered_encodings_are_the_classes_by_name():
    for not_a_class in (object, PositionEncoding(config("none"))):
        with pytest.raises(TypeError, match=r"register_position_encoding\('bad'\) expects a PositionEncoding subclass"):
            register_position_encoding("bad")(not_a_class)
    assert position_encoding_class("alibi") is AlibiPositionEncoding
    names = "rope none sinusoidal learned shaw t5_bias alibi transformer_xl tupe deberta"
    assert set(names.split()) <= set(registered_position_encodings())

    @register_position_encoding("edges_probe")
    class Probe(PositionEncoding):
        pass

    try:
        assert position_encoding_class("edges_probe") is Probe and Probe.__name__ == "Probe"
        assert "edges_probe" in registered_position_encodings()
    finally:
        POSITION_ENCODINGS.unregister("edges_probe")


def test_the_base_encoding_adds_nothing():
    base = PositionEncoding(config("none"))
    embeddings = torch.randn(1, 3, HIDDEN)
    assert base.embed(embeddings, torch.arange(3)[None]) is embeddings
    assert base.attention_terms(embeddings, torch.arange(3)[None, None], lambda: None, False) == (None, None, None)
    assert base.relative_scores(torch.zeros(1, 3), torch.zeros(1, 3)) is None
    assert PositionEncoding.layer_table(config("none")) is None and PositionEncoding.content_scale(None) == 1.0
    assert not PositionEncoding.has_relative_scores and PositionEncoding.capabilities == Capabilities()
    assert PositionEncoding.knobs is EncodingKnobs


def test_deberta_max_relative_positions_zero_or_less_takes_the_table_length():
    for buckets, reach, expected in ((8, 0, (64, 8)), (8, -1, (64, 8)), (0, 6, (6, 6)), (-1, 1, (1, 1))):
        encoding = DebertaPositionEncoding(config("deberta", position_buckets=buckets, max_relative_positions=reach))
        assert (encoding.max_relative_positions, encoding.span) == expected  # 1: the smallest span, 2 rows
        assert encoding.rel_embeddings.weight.shape == (2 * expected[1], HIDDEN)


def test_tables_built_from_the_positions_are_on_the_positions_device():
    """On the meta device (a stand-in for a GPU here): each table made from positions stays on their device."""
    meta = torch.device("meta")
    assert sinusoidal_table(torch.zeros(2, 3, device=meta), 8).device == meta
    assert xlnet_relative_sinusoid(torch.arange(5, device=meta), 8).device == meta
    xl = TransformerXLPositionEncoding(config("transformer_xl", clamp_len=4))  # clamped: no look at the values
    scores = xl.relative_scores(torch.zeros(1, 3, device=meta), torch.zeros(1, 4, device=meta))
    assert scores.sinusoid.device == scores.rows.device == meta and scores.sinusoid.shape == (9, HIDDEN)
    with meta:
        deberta = DebertaPositionEncoding(config("deberta"))
    scores = deberta.relative_scores(torch.zeros(1, 3, device=meta), torch.zeros(1, 4, device=meta))
    assert scores.lookup.device == scores.rows.device == meta
