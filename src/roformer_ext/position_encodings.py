"""Position encodings by name: RoPE and the alternatives the RoFormer paper compares it with, on one model.

`config.position_encoding` selects one registered `PositionEncoding`. An encoding tells attention where tokens are
in one (or more) of three ways. The model asks it twice per forward: `embed` (for the embeddings) and
`attention_terms` (what every layer needs, once for all layers):

- absolute (`"sinusoidal"`, `"learned"`): a vector per position added to the word embeddings (`embed`);
- rotary (`"rope"`): the entry owns its rotary embedding (`rotary_emb`, of the kind `rope_parameters["rope_type"]`
  names in the rotary registry of `rope.py`), whose (cos, sin) every layer rotates q and k with;
- relative scores (`"shaw"`, `"t5_bias"`, `"alibi"`, subclasses of `RelativePositionEncoding`): a term added to the
  attention scores before the softmax (`relative_scores`). eager and sdpa take it as an additive bias (with the
  padding / causal mask folded in); flex attention takes it as a `score_mod` that computes each score's term from
  the positions, so no (q × k) bias is built. Shaw's term depends on the query, so each layer owns its relative key
  table (`layer_table`).

`"none"` (NoPE) does none of the three: the encoder is then permutation-equivariant, the decoder still sees order
through its causal mask. Add your own with `@register_position_encoding("name")` on a `PositionEncoding` subclass.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from .registries import POSITION_ENCODINGS
from .rope import rotary_embedding_class


def register_position_encoding(name: str) -> Callable[[type["PositionEncoding"]], type["PositionEncoding"]]:
    """Register a `PositionEncoding` subclass under `name`, so `config.position_encoding = name` selects it."""

    def decorator(cls: type[PositionEncoding]) -> type[PositionEncoding]:
        if not (isinstance(cls, type) and issubclass(cls, PositionEncoding)):
            raise TypeError(f"register_position_encoding({name!r}) expects a PositionEncoding subclass, got {cls!r}.")
        POSITION_ENCODINGS.register(name, cls)
        return cls

    return decorator


def registered_position_encodings() -> tuple[str, ...]:
    """Names accepted as `config.position_encoding`."""
    return POSITION_ENCODINGS.registered()


def position_encoding_class(name: str) -> type["PositionEncoding"]:
    return POSITION_ENCODINGS.get(name)


class PositionEncoding(nn.Module):
    """How a model tells attention where its tokens are. Every hook defaults to "nothing"; subclasses override some.

    `position_ids` are text positions (batch, seq), float or integer: 0, 1, 2, ... after any cached tokens, and
    restarting at 0 in each sequence of a packed row.
    """

    #: Whether `relative_scores` returns something (packed rows then keep a block mask to add the scores to).
    has_relative_scores = False
    #: Softmax attention only: a term on the (q × k) scores has no place in linear attention.
    supports_linear_attention = True

    def __init__(self, config: Any) -> None:
        super().__init__()
        if config.attention_type == "linear" and not self.supports_linear_attention:
            raise ValueError(
                f"position_encoding={config.position_encoding!r} adds a term to the softmax attention scores, which "
                "linear attention never forms. Use attention_type='softmax', or 'rope' / 'sinusoidal' / 'learned' / "
                "'none' with linear attention."
            )

    def embed(self, embeddings: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Absolute encodings add their vectors here (before the embedding norm, as BERT)."""
        return embeddings

    def attention_terms(
        self,
        hidden_states: torch.Tensor,
        position_ids: torch.Tensor,
        key_positions: Callable[[], torch.Tensor],
        per_score: bool,
    ) -> "AttentionTerms":
        """What every attention layer needs from this encoding in one forward; the model asks once per forward.

        `position_ids` (axes, batch, seq); `key_positions()` gives the positions of the keys the layers see (called
        only by encodings that need them); `per_score`: the backend adds a term per score (flex attention's
        `score_mod`), so no shared bias is built. Nothing for absolute encodings and NoPE.
        """
        return AttentionTerms()

    def relative_scores(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> "RelativeScores | None":
        """Relative encodings return the per-forward object the attention layers add to their scores."""
        return None

    @staticmethod
    def layer_table(config: Any) -> nn.Module | None:
        """A per-layer module the scores need (Shaw's relative key table), or None."""
        return None


class RelativeScores:
    """One forward's relative term on the attention scores, built from query and key positions.

    `shared_bias()` (a term the same for every layer and query) or `dense(query, table)` (one layer's) is the additive
    bias for eager / sdpa; `score_mod(query, table)` is the same term as flex attention's per-score function. Lives
    for one forward only (nothing kept on a module).
    """

    def __init__(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> None:
        # (batch | 1, q) and (batch | 1, k); relative encodings count whole positions, so fractional ones are truncated
        self.query_positions = query_positions.long()
        self.key_positions = key_positions.long()

    def distances(self) -> torch.Tensor:
        """(batch | 1, q, k) relative distance key − query, as T5 and Shaw et al. define it."""
        return self.key_positions[:, None, :] - self.query_positions[:, :, None]

    def shared_bias(self) -> torch.Tensor | None:
        """A term that does not depend on the queries (T5, ALiBi): (batch | 1, heads, q, k), built once per forward.

        The model folds it into the attention mask for eager / sdpa, so the layers get it as the mask tensor they
        already take: gradient checkpointing then sees it as an input of each layer (a tensor kept elsewhere would be
        backpropagated once per layer under reentrant checkpointing). None when the term depends on the queries."""
        return None

    def dense(self, query: torch.Tensor, table: nn.Module | None) -> torch.Tensor:
        """The term for one layer's queries, (batch, heads, q, k): what eager / sdpa add when there is no shared bias."""
        bias = self.shared_bias()
        if bias is None:
            raise NotImplementedError(f"{type(self).__name__} defines neither shared_bias nor dense.")
        return bias.to(query.dtype)

    def score_mod(self, query: torch.Tensor, table: nn.Module | None) -> Callable:
        """flex attention's `score_mod(score, batch, head, q_idx, kv_idx)` adding the same term per score."""
        raise NotImplementedError(f"{type(self).__name__} has no flex score_mod; use attn_implementation='sdpa'.")

    def _position_at(self, batch_idx: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        """Inside a flex score_mod: key − query distance of one score (the batch may broadcast from 1)."""
        query_batch = batch_idx if self.query_positions.shape[0] > 1 else 0
        key_batch = batch_idx if self.key_positions.shape[0] > 1 else 0
        return self.key_positions[key_batch, kv_idx] - self.query_positions[query_batch, q_idx]


class AttentionTerms(NamedTuple):
    """One forward's position information for the attention layers (at most one field is set)."""

    #: RoPE's (cos, sin), (batch, seq, head_dim): every layer rotates q and k with them.
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None
    #: A term the same for every layer (T5, ALiBi on eager / sdpa), (batch | 1, heads, q, k): the model joins it into
    #: the mask once.
    shared_bias: torch.Tensor | None = None
    #: A term each layer computes (Shaw; flex attention's score_mod).
    relative_scores: "RelativeScores | None" = None


# --- RoPE ---------------------------------------------------------------------------------------------------------


@register_position_encoding("rope")
class RotaryPositionEncoding(PositionEncoding):
    """RoFormer's rotary embedding: this entry owns it (`rotary_emb`, of the kind `rope_parameters["rope_type"]`
    names in `rope.py`'s registry of rotary kinds) and gives every layer its (cos, sin). Its buffers are
    non-persistent, so checkpoints hold nothing of it."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.rotary_emb = rotary_embedding_class(config.rope_parameters["rope_type"])(config)

    def attention_terms(self, hidden_states, position_ids, key_positions, per_score) -> AttentionTerms:
        return AttentionTerms(position_embeddings=self.rotary_emb(hidden_states, position_ids))


@register_position_encoding("none")
class NoPositionEncoding(PositionEncoding):
    """NoPE: no position information at all."""


# --- absolute -----------------------------------------------------------------------------------------------------


def sinusoidal_table(position_ids: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Vaswani et al.: PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(p / base^(2i/d)). (..., ) -> (..., dim)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=position_ids.device) / dim))
    angles = position_ids.float()[..., None] * inv_freq
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)[..., :dim]


@register_position_encoding("sinusoidal")
class SinusoidalPositionEncoding(PositionEncoding):
    """The Transformer's fixed sinusoidal table, computed for any position (no length cap, no parameters), times
    `config.sinusoidal_scale` (1.0 keeps Vaswani's table; see the config for why a model trained from scratch
    wants it at the word embeddings' scale)."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.base = float(config.rope_parameters.get("rope_theta", 10000.0))
        self.scale = float(getattr(config, "sinusoidal_scale", 1.0))

    def embed(self, embeddings: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        table = sinusoidal_table(position_ids, embeddings.shape[-1], self.base)
        return embeddings + (self.scale * table).to(embeddings.dtype)


@register_position_encoding("learned")
class LearnedPositionEncoding(PositionEncoding):
    """BERT's learned absolute table of `max_position_embeddings` rows."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.embedding_size)

    def embed(self, embeddings: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        rows = self.position_embeddings.num_embeddings
        if position_ids.numel() and (int(position_ids.max()) >= rows or int(position_ids.min()) < 0):
            raise ValueError(
                f"position_encoding='learned' has a table of max_position_embeddings = {rows} positions, but got "
                f"positions up to {int(position_ids.max())}. Shorten the input or build the model with a larger "
                "max_position_embeddings (an untrained row is still untrained)."
            )
        return embeddings + self.position_embeddings(position_ids.long())


# --- relative scores ----------------------------------------------------------------------------------------------


class RelativePositionEncoding(PositionEncoding):
    """A term on the attention scores from query and key positions: subclasses give `relative_scores`."""

    has_relative_scores = True
    supports_linear_attention = False

    def attention_terms(self, hidden_states, position_ids, key_positions, per_score) -> AttentionTerms:
        scores = self.relative_scores(position_ids[0], key_positions())
        shared = None if per_score else scores.shared_bias()
        if shared is not None:
            return AttentionTerms(shared_bias=shared)
        return AttentionTerms(relative_scores=scores)


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

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.max_distance = int(config.max_relative_position)
        self.scaling = config.head_dim**-0.5

    def relative_scores(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> ShawScores:
        return ShawScores(query_positions, key_positions, self.max_distance, self.scaling)

    @staticmethod
    def layer_table(config: Any) -> nn.Module:
        return nn.Embedding(2 * int(config.max_relative_position) + 1, config.head_dim)


def t5_relative_bucket(
    distance: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """T5's bucket of a key − query distance: exact up to half the buckets, then logarithmic up to `max_distance`
    (bidirectional: half the buckets for keys after the query; causal: only keys at or before it count).
    transformers' own T5 function, so the buckets are T5's by construction."""
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(distance, bidirectional, num_buckets, max_distance)


class T5Scores(RelativeScores):
    """T5's learned scalar per (bucket, head), shared by every layer."""

    def __init__(self, query_positions, key_positions, table: nn.Embedding, bidirectional, num_buckets, max_distance):
        super().__init__(query_positions, key_positions)
        self.table, self.bidirectional = table, bidirectional
        self.num_buckets, self.max_distance = num_buckets, max_distance

    def bucket(self, distance: torch.Tensor) -> torch.Tensor:
        return t5_relative_bucket(distance, self.bidirectional, self.num_buckets, self.max_distance)

    def shared_bias(self) -> torch.Tensor:
        return self.table(self.bucket(self.distances())).permute(0, 3, 1, 2)  # the same for every layer, as T5

    def score_mod(self, query: torch.Tensor, table: nn.Module | None) -> Callable:
        weights = self.table.weight.to(query.dtype)

        def t5_bias(score, batch_idx, head_idx, q_idx, kv_idx):
            return score + weights[self.bucket(self._position_at(batch_idx, q_idx, kv_idx)), head_idx]

        return t5_bias


@register_position_encoding("t5_bias")
class T5BiasPositionEncoding(RelativePositionEncoding):
    """T5's bucketed relative bias: bidirectional buckets for an encoder, causal buckets for a decoder."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.num_buckets = int(config.relative_attention_num_buckets)
        self.max_distance = int(config.relative_attention_max_distance)
        self.bidirectional = not config.is_decoder
        self.relative_attention_bias = nn.Embedding(self.num_buckets, config.num_attention_heads)

    def relative_scores(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> T5Scores:
        return T5Scores(
            query_positions,
            key_positions,
            self.relative_attention_bias,
            self.bidirectional,
            self.num_buckets,
            self.max_distance,
        )


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes (Press et al.): 2^(−8 i / n) for n a power of two; otherwise the closest lower power of
    two's slopes, then every other slope of twice that many heads (the paper's recipe, as Bloom; MPT agrees for powers of
    two and orders the other counts differently)."""
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
    def reset_slopes(self) -> None:
        """Non-persistent buffers are empty after `from_pretrained` / meta-device init; `_init_weights` calls this."""
        self.slopes.copy_(alibi_slopes(self.slopes.numel()))


def add_scores_to_mask(mask: torch.Tensor | None, bias: torch.Tensor) -> torch.Tensor:
    """Fold a relative bias into a mask from transformers' utilities (None, boolean keep-mask or additive float)."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return bias.masked_fill(~mask[..., : bias.shape[-1]], torch.finfo(bias.dtype).min)
    return mask[..., : bias.shape[-1]].to(bias.dtype) + bias


__all__ = [
    "AttentionTerms",
    "PositionEncoding",
    "RelativePositionEncoding",
    "RelativeScores",
    "alibi_slopes",
    "position_encoding_class",
    "register_position_encoding",
    "registered_position_encodings",
    "sinusoidal_table",
    "t5_relative_bucket",
]
