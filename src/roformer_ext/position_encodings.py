"""Position encodings by name (`config.position_encoding`): RoPE and the alternatives the RoFormer paper compares it
with. Each gives `embed` (absolute encodings) and `attention_terms` (per forward: RoPE's (cos, sin) or a relative term
on the scores, relative_position_encodings.py); "none" is NoPE."""

from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn

from .encoding_knobs import SCORE_TERM_CAPABILITIES, Capabilities, EncodingKnobs, SinusoidalKnobs
from .registries import POSITION_ENCODINGS
from .rope import rotary_embedding_class


def register_position_encoding(name: str) -> Callable[[type["PositionEncoding"]], type["PositionEncoding"]]:
    """Register a `PositionEncoding` subclass under `name`, so `config.position_encoding = name` selects it."""

    def decorator(cls: type[PositionEncoding]) -> type[PositionEncoding]:
        if not (isinstance(cls, type) and issubclass(cls, PositionEncoding)):
            raise TypeError(f"register_position_encoding({name!r}) expects a PositionEncoding subclass, got {cls!r}.")
        if not (isinstance(cls.knobs, type) and issubclass(cls.knobs, EncodingKnobs)):
            raise TypeError(f"{cls.__name__}.knobs must be an EncodingKnobs dataclass; got {cls.knobs!r}.")
        if not isinstance(cls.capabilities, Capabilities):
            raise TypeError(f"{cls.__name__}.capabilities must be a Capabilities; got {cls.capabilities!r}.")
        POSITION_ENCODINGS.register(name, cls)
        return cls

    return decorator


def registered_position_encodings() -> tuple[str, ...]:
    """Names accepted as `config.position_encoding`."""
    return POSITION_ENCODINGS.registered()


def position_encoding_class(name: str) -> type["PositionEncoding"]:
    return POSITION_ENCODINGS.get(name)


class PositionEncoding(nn.Module):
    """How a model tells attention where its tokens are; every hook defaults to "nothing". A submodule's
    `init_position_weights(config)` initialises it (non-persistent buffers are empty after `from_pretrained`)."""

    #: Whether `relative_scores` returns something (packed rows then keep a block mask to add the scores to).
    has_relative_scores = False
    #: Its knobs (`config.position_encoding_parameters`, validated by the configuration) and what it works with.
    knobs: ClassVar[type[EncodingKnobs]] = EncodingKnobs
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, config: Any) -> None:
        super().__init__()
        if config.attention_type == "linear" and not self.capabilities.linear_attention:
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
        """What every layer needs in one forward. `position_ids` (axes, batch, seq); `key_positions()` the keys' (called
        only when needed); `per_score`: the backend adds a term per score (flex's `score_mod`), so build no bias."""
        return AttentionTerms()

    def relative_scores(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> "RelativeScores | None":
        """Relative encodings: the per-forward term the layers add to their scores."""
        return None

    @staticmethod
    def layer_table(config: Any) -> nn.Module | None:
        """A per-layer module the scores need (Shaw's relative key table), or None."""
        return None

    @staticmethod
    def content_scale(config: Any) -> float:
        """A factor on q·k/√d so content and position terms share 1/√(n·d) (TUPE, DeBERTa)."""
        return 1.0


class RelativeScores:
    """One forward's relative term on the scores: `shared_bias()` (the same for every layer) or `dense(query, table)`
    (one layer's) for eager / sdpa, `score_mod(query, table)` for flex attention."""

    def __init__(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> None:
        # (batch | 1, q) and (batch | 1, k); relative encodings count whole positions, so fractional ones are truncated
        self.query_positions = query_positions.long()
        self.key_positions = key_positions.long()

    def distances(self) -> torch.Tensor:
        """(batch | 1, q, k) relative distance key − query, as T5 and Shaw et al. define it."""
        return self.key_positions[:, None, :] - self.query_positions[:, :, None]

    def shared_bias(self) -> torch.Tensor | None:
        """A query-independent term (T5, ALiBi), (batch | 1, heads, q, k): folded into the mask, so gradient
        checkpointing sees it as each layer's input. None when the term depends on the queries."""
        return None

    def dense(self, query: torch.Tensor, table: nn.Module | None) -> torch.Tensor:
        """One layer's term, (batch, heads, q, k)."""
        bias = self.shared_bias()
        if bias is None:
            raise NotImplementedError(f"{type(self).__name__} defines neither shared_bias nor dense.")
        return bias.to(query.dtype)

    def score_mod(self, query: torch.Tensor, table: nn.Module | None) -> Callable:
        """flex attention's `score_mod(score, batch, head, q_idx, kv_idx)` adding the same term per score."""
        raise NotImplementedError(f"{type(self).__name__} has no flex score_mod; use attn_implementation='sdpa'.")

    def layer_term(
        self, attention: nn.Module, query: torch.Tensor, key: torch.Tensor, per_score: bool
    ) -> "torch.Tensor | Callable":
        """One layer's term (the bias, or flex's `score_mod` when `per_score`); `attention` is the layer, `query` /
        `key` (batch, heads, q | k, head_dim), cached keys included."""
        table = attention.relative_table
        return self.score_mod(query, table) if per_score else self.dense(query, table)

    @property
    def fits_local_heads(self) -> bool:
        """Whether one tensor-parallel rank's heads suffice: not with per-head values (T5, ALiBi, TUPE)."""
        return type(self).shared_bias is RelativeScores.shared_bias

    def _position_at(self, batch_idx: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        """Inside a flex score_mod: key − query distance of one score (the batch may broadcast from 1)."""
        query_batch = batch_idx if self.query_positions.shape[0] > 1 else 0
        key_batch = batch_idx if self.key_positions.shape[0] > 1 else 0
        return self.key_positions[key_batch, kv_idx] - self.query_positions[query_batch, q_idx]


class AttentionTerms(NamedTuple):
    """One forward's position information for the layers (at most one field is set)."""

    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None  # RoPE's (cos, sin)
    shared_bias: torch.Tensor | None = None  # joined into the mask once
    relative_scores: "RelativeScores | None" = None  # computed by each layer


@register_position_encoding("rope")
class RotaryPositionEncoding(PositionEncoding):
    """RoFormer's rotary embedding (`rotary_emb`, the kind `rope_parameters["rope_type"]` names): (cos, sin)."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.rotary_emb = rotary_embedding_class(config.rope_parameters["rope_type"])(config)

    def attention_terms(self, hidden_states, position_ids, key_positions, per_score) -> AttentionTerms:
        return AttentionTerms(position_embeddings=self.rotary_emb(hidden_states, position_ids))


@register_position_encoding("none")
class NoPositionEncoding(PositionEncoding):
    """NoPE: no position information at all."""


def sinusoidal_table(position_ids: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Vaswani et al.: PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(p / base^(2i/d)). (..., ) -> (..., dim)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=position_ids.device) / dim))
    angles = position_ids.float()[..., None] * inv_freq
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)[..., :dim]


@register_position_encoding("sinusoidal")
class SinusoidalPositionEncoding(PositionEncoding):
    """The Transformer's fixed sinusoidal table for any position, times `sinusoidal_scale`."""

    knobs = SinusoidalKnobs

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.base = float(config.rope_parameters.get("rope_theta", 10000.0))
        self.scale = float(config.position_encoding_parameters["sinusoidal_scale"])

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
        # Eager calls only: traced, the positions are not on the host (an exported lookup refuses the row itself).
        eager = not torch.compiler.is_compiling() and position_ids.numel()
        if eager and (int(position_ids.max()) >= rows or int(position_ids.min()) < 0):
            raise ValueError(
                f"position_encoding='learned' has a table of max_position_embeddings = {rows} positions, but got "
                f"positions up to {int(position_ids.max())}. Shorten the input or build the model with a larger "
                "max_position_embeddings (an untrained row is still untrained)."
            )
        return embeddings + self.position_embeddings(position_ids.long())


class RelativePositionEncoding(PositionEncoding):
    """A term on the attention scores from query and key positions: subclasses give `relative_scores`."""

    has_relative_scores = True
    capabilities = SCORE_TERM_CAPABILITIES

    def attention_terms(self, hidden_states, position_ids, key_positions, per_score) -> AttentionTerms:
        scores = self.relative_scores(position_ids[0], key_positions())
        shared = None if per_score else scores.shared_bias()
        if shared is not None:
            return AttentionTerms(shared_bias=shared)
        return AttentionTerms(relative_scores=scores)


def add_scores_to_mask(mask: torch.Tensor | None, bias: torch.Tensor) -> torch.Tensor:
    """Fold a relative bias into a mask from transformers' utilities (None, boolean keep-mask or additive float)."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return bias.masked_fill(~mask[..., : bias.shape[-1]], torch.finfo(bias.dtype).min)
    return mask[..., : bias.shape[-1]].to(bias.dtype) + bias
