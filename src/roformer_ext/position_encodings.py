"""Position encodings by name: RoPE and the alternatives the RoFormer paper compares it with, on one model.

`config.position_encoding` selects one registered `PositionEncoding`. An encoding tells attention where tokens are
in one (or more) of three ways. The model asks it twice per forward: `embed` (for the embeddings) and
`attention_terms` (what every layer needs, once for all layers):

- absolute (`"sinusoidal"`, `"learned"`): a vector per position added to the word embeddings (`embed`);
- rotary (`"rope"`): the entry owns its rotary embedding (`rotary_emb`, of the kind `rope_parameters["rope_type"]`
  names in the rotary registry of `rope.py`), whose (cos, sin) every layer rotates q and k with;
- relative scores (`"shaw"`, `"t5_bias"`, `"alibi"`, `"transformer_xl"`, `"tupe"`, `"deberta"`, subclasses of
  `RelativePositionEncoding`): a term added to the attention scores before the softmax (`relative_scores`). eager and
  sdpa take it as an additive bias (with the padding / causal mask folded in); flex attention takes it as a
  `score_mod` that computes each score's term from the positions, so no (q × k) bias is built. A term that depends
  on the queries or keys (Shaw, Transformer-XL, DeBERTa) is computed by each layer (`RelativeScores.layer_term`) with
  a module the layer owns (`layer_table`: Shaw's key table, XL's W_r, u, v); one that does not (T5, ALiBi, TUPE) is
  built once per forward and shared.

`"none"` (NoPE) does none of the three: the encoder is then permutation-equivariant, the decoder still sees order
through its causal mask. Add your own with `@register_position_encoding("name")` on a `PositionEncoding` subclass.
This module holds the registry, the base classes, RoPE's entry, NoPE and the absolute encodings; the relative ones
are in relative_position_encodings.py.
"""

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
            raise TypeError(
                f"{cls.__name__}.knobs must be an EncodingKnobs dataclass (encoding_knobs); got {cls.knobs!r}."
            )
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
    """How a model tells attention where its tokens are. Every hook defaults to "nothing"; subclasses override some.

    One registration carries everything about an encoding: its name (`@register_position_encoding`), `knobs` (the
    dataclass of its settings, read from `config.position_encoding_knobs`), `capabilities` (what it works with) and
    its weight-init hook.

    Weight init: a module of an encoding (the encoding itself, a per-layer `layer_table`, any submodule) that defines
    `init_position_weights(config)` is initialised by it (non-persistent buffers are empty after `from_pretrained` and
    meta-device init); its `nn.Linear` / `nn.Embedding` submodules get the model's standard init.

    `position_ids` are text positions (batch, seq), float or integer: 0, 1, 2, ... after any cached tokens, and
    restarting at 0 in each sequence of a packed row.
    """

    #: Whether `relative_scores` returns something (packed rows then keep a block mask to add the scores to).
    has_relative_scores = False
    #: The dataclass of its knobs (`config.position_encoding_parameters`); none by default.
    knobs: ClassVar[type[EncodingKnobs]] = EncodingKnobs
    #: What it works with; each flag is read where that decision is made.
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

    @staticmethod
    def content_scale(config: Any) -> float:
        """A factor on the content score q·k/√d, fixed when the attention layer is built: TUPE scales by 1/√2 and
        DeBERTa by 1/√(1 + number of position terms), so that content and position terms share 1/√(n·d)."""
        return 1.0


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

    def layer_term(
        self, attention: nn.Module, query: torch.Tensor, key: torch.Tensor, per_score: bool
    ) -> "torch.Tensor | Callable":
        """One attention layer's term: the additive bias (batch, heads, q, k) for eager / sdpa, or flex's `score_mod`
        when `per_score`. `attention` is the layer (its `relative_table`, its projections and `scaling`); `query`
        (batch, heads, q, head_dim) and `key` (batch, heads, k, head_dim) are what it attends with, cached keys
        included."""
        table = attention.relative_table
        return self.score_mod(query, table) if per_score else self.dense(query, table)

    @property
    def fits_local_heads(self) -> bool:
        """Whether the term can be computed from the heads one tensor-parallel rank holds: not when it has one value
        per head (T5's buckets, ALiBi's slopes, TUPE) or per-head parameters outside the sharded projections."""
        return type(self).shared_bias is RelativeScores.shared_bias

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
    its knob `sinusoidal_scale` (1.0 keeps Vaswani's table; see the config for why a model trained from scratch
    wants it at the word embeddings' scale)."""

    knobs = SinusoidalKnobs

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.base = float(config.rope_parameters.get("rope_theta", 10000.0))
        self.scale = float(config.position_encoding_knobs.sinusoidal_scale)

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
        # Checked in eager calls: traced (torch.compile, torch.export / ONNX) the positions are not on the host, and an
        # exported graph's table lookup refuses a row out of range by itself.
        if (
            not torch.compiler.is_compiling()
            and position_ids.numel()
            and (int(position_ids.max()) >= rows or int(position_ids.min()) < 0)
        ):
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


__all__ = [
    "AttentionTerms",
    "PositionEncoding",
    "RelativePositionEncoding",
    "RelativeScores",
    "position_encoding_class",
    "register_position_encoding",
    "registered_position_encodings",
    "sinusoidal_table",
]
