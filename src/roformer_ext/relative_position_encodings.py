"""The relative position encodings (Shaw, T5, ALiBi, Transformer-XL, TUPE, DeBERTa-v2): a term on the attention
scores from query and key positions, each a `RelativePositionEncoding` with its `RelativeScores`. Each reads its knobs
from `config.position_encoding_parameters`, completed and checked by the configuration."""

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .compat import relative_position_bucket as t5_relative_bucket  # T5's bucket of a key − query distance
from .encoding_knobs import DebertaKnobs, ShawKnobs, T5BiasKnobs, TransformerXLKnobs, TupeKnobs, deberta_reach
from .position_encodings import RelativePositionEncoding, RelativeScores, register_position_encoding


class ShawScores(RelativeScores):
    """Shaw et al. (2018): score_ij += q_i · a_clip(j−i) / sqrt(d), one key table a of 2K+1 rows per layer."""

    def __init__(self, query_positions: torch.Tensor, key_positions: torch.Tensor, max_distance: int, scaling: float):
        super().__init__(query_positions, key_positions)
        self.max_distance, self.scaling = max_distance, scaling

    def per_row(self, query: torch.Tensor, table: nn.Module) -> torch.Tensor:
        """q · a / √d for every table row, (b, h, q, 2K+1): each score then picks its row. Never a (q, k, d) tensor."""
        return torch.matmul(query, table.weight.to(query.dtype).T) * self.scaling

    def dense(self, query: torch.Tensor, table: nn.Module) -> torch.Tensor:
        rows = self.distances().clamp(-self.max_distance, self.max_distance) + self.max_distance
        per_row = self.per_row(query, table)
        return torch.gather(per_row, -1, rows[:, None].expand(query.shape[0], query.shape[1], -1, -1))

    def score_mod(self, query: torch.Tensor, table: nn.Module) -> Callable:
        per_row = self.per_row(query, table)
        max_distance = self.max_distance

        def shaw(score, batch_idx, head_idx, q_idx, kv_idx):
            row = self._position_at(batch_idx, q_idx, kv_idx).clamp(-max_distance, max_distance) + max_distance
            return score + per_row[batch_idx, head_idx, q_idx, row]

        return shaw


@register_position_encoding("shaw")
class ShawPositionEncoding(RelativePositionEncoding):
    """Relative key embeddings clipped at `max_relative_position` (Shaw, Uszkoreit & Vaswani 2018), per layer."""

    knobs = ShawKnobs

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.max_distance = config.position_encoding_parameters["max_relative_position"]
        self.scaling = config.head_dim**-0.5

    def relative_scores(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> ShawScores:
        return ShawScores(query_positions, key_positions, self.max_distance, self.scaling)

    @staticmethod
    def layer_table(config: Any) -> nn.Module:
        return nn.Embedding(2 * config.position_encoding_parameters["max_relative_position"] + 1, config.head_dim)


class T5Scores(RelativeScores):
    """T5's learned scalar per (bucket, head), shared by every layer."""

    def __init__(self, query_positions, key_positions, encoding: "T5BiasPositionEncoding") -> None:
        super().__init__(query_positions, key_positions)
        self.encoding = encoding

    def bucket(self, distance: torch.Tensor) -> torch.Tensor:
        encoding = self.encoding
        return t5_relative_bucket(distance, encoding.bidirectional, encoding.num_buckets, encoding.max_distance)

    def shared_bias(self) -> torch.Tensor:
        return self.encoding.relative_attention_bias(self.bucket(self.distances())).permute(0, 3, 1, 2)

    def score_mod(self, query: torch.Tensor, table: nn.Module | None) -> Callable:
        weights = self.encoding.relative_attention_bias.weight.to(query.dtype)

        def t5_bias(score, batch_idx, head_idx, q_idx, kv_idx):
            return score + weights[self.bucket(self._position_at(batch_idx, q_idx, kv_idx)), head_idx]

        return t5_bias


@register_position_encoding("t5_bias")
class T5BiasPositionEncoding(RelativePositionEncoding):
    """T5's bucketed relative bias: bidirectional buckets for an encoder, causal buckets for a decoder."""

    knobs = T5BiasKnobs

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        knobs = config.position_encoding_parameters
        self.num_buckets = knobs["relative_attention_num_buckets"]
        self.max_distance = knobs["relative_attention_max_distance"]
        self.bidirectional = not config.is_decoder
        self.relative_attention_bias = nn.Embedding(self.num_buckets, config.num_attention_heads)

    def relative_scores(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> T5Scores:
        return T5Scores(query_positions, key_positions, self)


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes 2^(−8 i / n); n not a power of two: the lower power's, then every other of twice as many
    (as Bloom)."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-8.0 / closest)
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest < num_heads:
        extra_base = 2.0 ** (-4.0 / closest)
        slopes += [extra_base ** (2 * i + 1) for i in range(num_heads - closest)]
    return torch.tensor(slopes)


class AlibiScores(RelativeScores):
    """−slope_h · |j − i| (encoder) or −slope_h · (i − j) (decoder: only keys before the query are seen)."""

    def __init__(self, query_positions, key_positions, slopes: torch.Tensor) -> None:
        super().__init__(query_positions, key_positions)
        self.slopes = slopes

    def shared_bias(self) -> torch.Tensor:
        return -self.slopes[None, :, None, None] * self.distances().abs()[:, None].to(self.slopes.dtype)

    def score_mod(self, query: torch.Tensor, table: nn.Module | None) -> Callable:
        slopes = self.slopes.to(query.dtype)

        def alibi(score, batch_idx, head_idx, q_idx, kv_idx):
            return score - slopes[head_idx] * self._position_at(batch_idx, q_idx, kv_idx).abs()

        return alibi


@register_position_encoding("alibi")
class AlibiPositionEncoding(RelativePositionEncoding):
    """Attention with Linear Biases: a fixed penalty growing linearly with distance, one slope per head."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.register_buffer("slopes", alibi_slopes(config.num_attention_heads), persistent=False)

    def relative_scores(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> AlibiScores:
        return AlibiScores(query_positions, key_positions, self.slopes.float())

    @torch.no_grad()
    def init_position_weights(self, config: Any) -> None:
        """Non-persistent buffers are empty after `from_pretrained` / meta-device init."""
        self.slopes.copy_(alibi_slopes(self.slopes.numel()))


def xlnet_relative_sinusoid(distance: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """XLNet's relative embedding of a query − key distance d: [sin(d·ω), cos(d·ω)], ω_i = base^(−2i/dim), the sines
    then the cosines (concatenated, not interleaved). (...,) -> (..., dim)."""
    inv_freq = 1 / torch.pow(base, torch.arange(0, dim, 2.0, device=distance.device) / dim)
    angles = distance.float()[..., None] * inv_freq
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


class TransformerXLLayerParameters(nn.Module):
    """One layer's parameters, named as XLNet's: `r` (W_r, no bias), `r_w_bias` (u) and `r_r_bias` (v)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.r = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.r_w_bias = nn.Parameter(torch.zeros(config.num_attention_heads, config.head_dim))
        self.r_r_bias = nn.Parameter(torch.zeros(config.num_attention_heads, config.head_dim))

    @torch.no_grad()
    def init_position_weights(self, config: Any) -> None:
        """u and v as XLNet initialises them, N(0, initializer_range); `r` is a Linear, initialised as every other."""
        from transformers import initialization as init

        init.normal_(self.r_w_bias, mean=0.0, std=config.initializer_range)
        init.normal_(self.r_r_bias, mean=0.0, std=config.initializer_range)


class TransformerXLScores(RelativeScores):
    """Dai et al. (2019) / XLNet: score_ij = [(q_i + u)·k_j + (q_i + v)·W_r r_{i−j}] / √d, r the relative sinusoid;
    the table (a row per distance, clamped to ±`clamp_len` when > 0) is built once per forward, projected per layer."""

    fits_local_heads = False  # u, v and W_r hold every head

    def __init__(self, query_positions: torch.Tensor, key_positions: torch.Tensor, clamp_len: int, dim: int):
        super().__init__(query_positions, key_positions)
        self.clamp_len = clamp_len
        distance = self.clamped(-self.distances())  # query − key, XLNet's i − j
        if clamp_len > 0:  # a fixed table: no look at the data
            self.low, high = -clamp_len, clamp_len
        else:  # the batch's own range (one host sync)
            self.low, high = int(distance.min()), int(distance.max())
        self.rows = distance - self.low  # (batch | 1, q, k): each score's row of the table
        # (n, hidden): a constant of the positions, built once per forward and carried as data
        self.sinusoid = xlnet_relative_sinusoid(torch.arange(self.low, high + 1, device=distance.device), dim)

    def clamped(self, distance: torch.Tensor) -> torch.Tensor:
        return distance.clamp(-self.clamp_len, self.clamp_len) if self.clamp_len > 0 else distance

    def layer_term(self, attention, query, key, per_score):
        table: TransformerXLLayerParameters = attention.relative_table
        scale = attention.scaling
        # W_r r for every table row: (heads, n, head_dim)
        projected = table.r(self.sinusoid.to(query.dtype)).view(self.sinusoid.shape[0], -1, table.head_dim)
        per_row = torch.matmul(query + table.r_r_bias[:, None], projected.permute(1, 2, 0)) * scale  # (b, h, q, n)
        content = (key * table.r_w_bias[:, None]).sum(-1) * scale  # u·k_j, (b, h, k)
        if per_score:
            clamped, low = self.clamped, self.low

            def transformer_xl(score, batch_idx, head_idx, q_idx, kv_idx):
                row = clamped(-self._position_at(batch_idx, q_idx, kv_idx)) - low
                return score + per_row[batch_idx, head_idx, q_idx, row] + content[batch_idx, head_idx, kv_idx]

            return transformer_xl
        batch, heads = query.shape[:2]
        rows = self.rows[:, None].expand(batch, heads, -1, -1)
        return torch.gather(per_row, -1, rows) + content[:, :, None, :]


@register_position_encoding("transformer_xl")
class TransformerXLPositionEncoding(RelativePositionEncoding):
    """Transformer-XL's relative attention as XLNet runs it (`rel_attn_core`, content stream, `attn_type="bi"`)."""

    knobs = TransformerXLKnobs

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.clamp_len = config.position_encoding_parameters["clamp_len"]
        self.dim = config.hidden_size

    def relative_scores(self, query_positions, key_positions) -> TransformerXLScores:
        return TransformerXLScores(query_positions, key_positions, self.clamp_len, self.dim)

    @staticmethod
    def layer_table(config: Any) -> nn.Module:
        return TransformerXLLayerParameters(config)


class TupeScores(RelativeScores):
    """TUPE (Ke, He & Liu 2021): score_ij = x_i W_q (x_j W_k)ᵀ/√(2d) + p̃_i U_q (p̃_j U_k)ᵀ/√(2d) + b_bucket(j−i), p̃
    the LayerNorm'd table (position n reads row n + 1); [CLS] reset: its row θ₁, its column θ₂, spare buckets."""

    def __init__(self, query_positions, key_positions, encoding: "TupePositionEncoding") -> None:
        super().__init__(query_positions, key_positions)
        self.encoding = encoding

    def projected(self, rows: torch.Tensor, projection: nn.Linear, scale: float = 1.0) -> torch.Tensor:
        """U p̃ of table rows (...,) -> (..., heads, head_dim)."""
        encoding = self.encoding
        vectors = projection(encoding.norm(encoding.position_embeddings(rows))) * scale
        return vectors.view(*rows.shape, encoding.num_heads, -1)

    def pair_table(self, rows: torch.Tensor) -> torch.Tensor:
        """p̃_a U_q (p̃_b U_k)ᵀ/√(2d) for every pair of `rows`, (heads, n, n)."""
        queries = self.projected(rows, self.encoding.query, self.encoding.scaling).transpose(0, 1)
        keys = self.projected(rows, self.encoding.key).transpose(0, 1)
        return torch.matmul(queries, keys.transpose(-1, -2))

    def cls_terms(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(θ₁, θ₂) per head: [CLS] → others (row 0 with itself) and others → [CLS] (row 1 with itself)."""
        table = self.pair_table(torch.arange(2, device=self.query_positions.device))
        return table[:, 0, 0], table[:, 1, 1]

    def buckets(self, distance: torch.Tensor, query_first: torch.Tensor, key_first: torch.Tensor) -> torch.Tensor:
        encoding = self.encoding
        bucket = t5_relative_bucket(distance, encoding.bidirectional, encoding.num_buckets, encoding.max_distance)
        if encoding.cls_reset:  # the column, then the row (integer arithmetic: it also runs inside a flex score_mod)
            cls_to_others = encoding.num_buckets // 2 if encoding.bidirectional else encoding.num_buckets
            bucket = bucket + (encoding.num_buckets - bucket) * key_first.long()
            bucket = bucket + (cls_to_others - bucket) * query_first.long()
        return bucket

    def key_rows(self) -> torch.Tensor:
        # a static cache's unwritten slots may lie past the table: the mask hides them, any row will do
        return self.key_positions.clamp(max=self.encoding.max_positions - 1) + 1

    def shared_bias(self) -> torch.Tensor:
        encoding = self.encoding
        queries = self.projected(self.query_positions + 1, encoding.query, encoding.scaling).transpose(1, 2)
        keys = self.projected(self.key_rows(), encoding.key).transpose(1, 2)
        bias = torch.matmul(queries, keys.transpose(-1, -2))  # (batch | 1, heads, q, k)
        query_first = (self.query_positions == 0)[:, None, :, None]
        key_first = (self.key_positions == 0)[:, None, None, :]
        if encoding.cls_reset:  # the column first, then the row: [CLS] with itself is θ₁, as in TUPE
            cls_to_others, others_to_cls = (theta[None, :, None, None] for theta in self.cls_terms())
            bias = torch.where(key_first, others_to_cls, bias)
            bias = torch.where(query_first, cls_to_others, bias)
        if encoding.rel_pos:
            buckets = self.buckets(self.distances(), query_first[:, 0], key_first[:, 0])
            bias = bias + encoding.relative_attention_bias(buckets).permute(0, 3, 1, 2)
        return bias

    def score_mod(self, query: torch.Tensor, table: nn.Module | None) -> Callable:
        """The correlation of every pair of table rows in use (heads, n, n), the reset written in, read per score."""
        encoding = self.encoding
        n = int(max(self.query_positions.max(), self.key_rows().max() - 1)) + 2
        pairs = self.pair_table(torch.arange(n, device=query.device))
        if encoding.cls_reset:  # position 0 is row 1: its column θ₂, then its row θ₁
            cls_to_others, others_to_cls = self.cls_terms()
            pairs = pairs.clone()
            pairs[:, :, 1] = others_to_cls[:, None]
            pairs[:, 1, :] = cls_to_others[:, None]
        pairs = pairs.to(query.dtype)
        weights = encoding.relative_attention_bias.weight.to(query.dtype) if encoding.rel_pos else None
        key_rows = self.key_rows()

        def tupe(score, batch_idx, head_idx, q_idx, kv_idx):
            query_batch = batch_idx if self.query_positions.shape[0] > 1 else 0
            key_batch = batch_idx if self.key_positions.shape[0] > 1 else 0
            query_position = self.query_positions[query_batch, q_idx]
            key_position = self.key_positions[key_batch, kv_idx]
            score = score + pairs[head_idx, query_position + 1, key_rows[key_batch, kv_idx]]
            if weights is not None:
                buckets = self.buckets(key_position - query_position, query_position == 0, key_position == 0)
                score = score + weights[buckets, head_idx]
            return score

        return tupe


@register_position_encoding("tupe")
class TupePositionEncoding(RelativePositionEncoding):
    """TUPE: untied absolute positions (a table of `max_position_embeddings` + 1 rows, projections U_q, U_k), T5's
    bias (`tupe_rel_pos`: TUPE-R) and the [CLS] reset (`tupe_cls_reset`), shared by every layer as the authors'."""

    knobs = TupeKnobs

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        knobs = config.position_encoding_parameters
        hidden = config.hidden_size
        self.max_positions = int(config.max_position_embeddings)
        self.num_heads = config.num_attention_heads
        self.scaling = (config.head_dim * 2) ** -0.5
        self.position_embeddings = nn.Embedding(self.max_positions + 1, hidden)
        self.norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.query = nn.Linear(hidden, hidden, bias=config.use_bias)  # U_q
        self.key = nn.Linear(hidden, hidden, bias=config.use_bias)  # U_k
        self.rel_pos, self.cls_reset = knobs["tupe_rel_pos"], knobs["tupe_cls_reset"]
        self.bidirectional = not config.is_decoder
        self.num_buckets = knobs["relative_attention_num_buckets"]
        self.max_distance = knobs["relative_attention_max_distance"]
        if self.rel_pos:  # one spare bucket for the [CLS] reset
            self.relative_attention_bias = nn.Embedding(self.num_buckets + 1, config.num_attention_heads)

    def relative_scores(self, query_positions, key_positions) -> TupeScores:
        eager = not torch.compiler.is_compiling() and query_positions.numel()  # as the learned table
        if eager and int(query_positions.max()) >= self.max_positions:
            raise ValueError(
                f"position_encoding='tupe' has a table of max_position_embeddings = {self.max_positions} positions, "
                f"but got positions up to {int(query_positions.max())}. Shorten the input or build the model with a "
                "larger max_position_embeddings."
            )
        return TupeScores(query_positions, key_positions, self)

    @staticmethod
    def content_scale(config: Any) -> float:
        return 0.5**0.5  # q·k / √(2d)


def deberta_log_bucket(distance: torch.Tensor, position_buckets: int, max_relative_positions: int) -> torch.Tensor:
    """DeBERTa-v2's log bucket of a query − key distance (transformers' own function)."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    return make_log_bucket_position(distance, position_buckets, max_relative_positions).long()


class DebertaLayerParameters(nn.Module):
    """One layer's position projections when `share_att_key=False` (transformers' `pos_key_proj`, `pos_query_proj`)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        terms, hidden = config.position_encoding_parameters["pos_att_type"], config.hidden_size
        if "c2p" in terms:
            self.pos_key_proj = nn.Linear(hidden, hidden, bias=config.use_bias)
        if "p2c" in terms:
            self.pos_query_proj = nn.Linear(hidden, hidden, bias=config.use_bias)


class DebertaScores(RelativeScores):
    """DeBERTa-v2: score_ij = (q_i·k_j + q_i·K_r[δ(i, j)] (c2p) + k_j·Q_r[δ(i, j)] (p2c)) / √(s·d), s = 1 + terms;
    δ(i, j) = clamp(bucket(p_i − p_j) + span, 0, 2·span − 1), K_r / Q_r the shared table projected per layer."""

    fits_local_heads = False  # the separate position projections hold every head

    def __init__(self, query_positions, key_positions, encoding: "DebertaPositionEncoding") -> None:
        super().__init__(query_positions, key_positions)
        self.encoding = encoding
        self.reach = max(encoding.span, encoding.max_relative_positions)
        distance = torch.arange(-self.reach, self.reach + 1, device=self.query_positions.device)
        if encoding.position_buckets > 0:
            distance = deberta_log_bucket(distance, encoding.position_buckets, encoding.max_relative_positions)
        self.lookup = (distance + encoding.span).clamp(0, 2 * encoding.span - 1)  # row of each clamped distance
        self.rows = self.row_of(-self.distances())  # (batch | 1, q, k)

    def row_of(self, distance: torch.Tensor) -> torch.Tensor:
        return self.lookup[distance.clamp(-self.reach, self.reach) + self.reach]

    def layer_term(self, attention, query, key, per_score):
        encoding, head_dim = self.encoding, query.shape[-1]
        relative = encoding.relative_embeddings().to(query.dtype)  # (2·span, hidden), dropout drawn per layer
        if encoding.share_att_key:
            key_projection, query_projection = attention.key, attention.query
        else:
            key_projection = getattr(attention.relative_table, "pos_key_proj", None)
            query_projection = getattr(attention.relative_table, "pos_query_proj", None)

        def heads(projection: nn.Linear) -> torch.Tensor:  # (heads, 2·span, head_dim)
            return projection(relative).view(relative.shape[0], -1, head_dim).transpose(0, 1)

        scale = attention.scaling  # 1/√(s·d), the content term's too
        c2p = torch.matmul(query, heads(key_projection).transpose(-1, -2)) * scale if "c2p" in encoding.terms else None
        p2c = torch.matmul(key, heads(query_projection).transpose(-1, -2)) * scale if "p2c" in encoding.terms else None
        if per_score:

            def deberta(score, batch_idx, head_idx, q_idx, kv_idx):
                row = self.row_of(-self._position_at(batch_idx, q_idx, kv_idx))
                if c2p is not None:
                    score = score + c2p[batch_idx, head_idx, q_idx, row]
                if p2c is not None:
                    score = score + p2c[batch_idx, head_idx, kv_idx, row]
                return score

            return deberta
        batch, heads_count = query.shape[:2]
        rows = self.rows[:, None].expand(batch, heads_count, -1, -1)  # (b, h, q, k)
        term = 0
        if c2p is not None:  # q_i · K_r[δ(i, j)]
            term = term + torch.gather(c2p, -1, rows)
        if p2c is not None:  # k_j · Q_r[δ(i, j)]: gathered per key, then (q, k)
            term = term + torch.gather(p2c, -1, rows.transpose(-1, -2)).transpose(-1, -2)
        return term


@register_position_encoding("deberta")
class DebertaPositionEncoding(RelativePositionEncoding):
    """DeBERTa-v2's disentangled attention (transformers' `DisentangledSelfAttention`); the relative embeddings get
    dropout (hidden_dropout_prob) in each layer, as DeBERTa's `pos_dropout`."""

    knobs = DebertaKnobs

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        knobs = config.position_encoding_parameters
        self.terms = tuple(knobs["pos_att_type"])
        self.share_att_key = knobs["share_att_key"]
        self.position_buckets = knobs["position_buckets"]
        self.max_relative_positions = deberta_reach(knobs["max_relative_positions"], config)
        self.span = self.position_buckets if self.position_buckets > 0 else self.max_relative_positions
        self.rel_embeddings = nn.Embedding(2 * self.span, config.hidden_size)
        layer_norm = knobs["norm_rel_ebd"] == "layer_norm"
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if layer_norm else None
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def relative_embeddings(self) -> torch.Tensor:
        """The shared table as each layer reads it: normalised, then dropped out."""
        table = self.rel_embeddings.weight
        if self.norm is not None:
            table = self.norm(table)
        return self.dropout(table)

    def relative_scores(self, query_positions, key_positions) -> DebertaScores:
        return DebertaScores(query_positions, key_positions, self)

    @staticmethod
    def layer_table(config: Any) -> nn.Module | None:
        return None if config.position_encoding_parameters["share_att_key"] else DebertaLayerParameters(config)

    @staticmethod
    def content_scale(config: Any) -> float:
        return (1 + len(config.position_encoding_parameters["pos_att_type"])) ** -0.5


#: The built-in relative encodings (registered when this module is imported).
RELATIVE_ENCODINGS = (
    ShawPositionEncoding,
    T5BiasPositionEncoding,
    AlibiPositionEncoding,
    TransformerXLPositionEncoding,
    TupePositionEncoding,
    DebertaPositionEncoding,
)
