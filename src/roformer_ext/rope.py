"""Rotary position embeddings (RoPE): a rotary kind makes (cos, sin) once per forward, a free function rotates.

A kind (`rope_parameters["rope_type"]`) gives one inverse frequency per rotated pair: "default" (θ_i = base^(-2i/d), as
RoFormer), every type of transformers' `ROPE_INIT_FUNCTIONS`, or yours (`@register_rotary_embedding`). Which position
axis turns each pair is axis_allocations.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update

from .axis_allocations import axis_of_pair
from .compat import HeadDimView
from .registries import AXIS_ALLOCATIONS, ROTARY_KINDS
from .scheme_knobs import allocation_knobs_class, rotates_per_head


def register_rotary_embedding(name: str) -> Callable[[type[RotaryEmbedding]], type[RotaryEmbedding]]:
    """Register a `RotaryEmbedding` subclass as `rope_parameters={"rope_type": name}` (transformers' registry is
    never modified)."""

    def decorator(cls: type[RotaryEmbedding]) -> type[RotaryEmbedding]:
        if not (isinstance(cls, type) and issubclass(cls, RotaryEmbedding)):
            raise TypeError(f"register_rotary_embedding({name!r}) expects a RotaryEmbedding subclass, got {cls!r}.")
        ROTARY_KINDS.register(name, cls)
        return cls

    return decorator


def registered_rotary_kinds() -> tuple[str, ...]:
    """Names accepted as `rope_parameters["rope_type"]`."""
    return ROTARY_KINDS.registered()


rotary_embedding_class = ROTARY_KINDS.get  # the class registered under a rope_type


class RotaryEmbedding(nn.Module):
    """Turns position ids into the `(cos, sin)` every attention layer uses; subclasses change `compute_inv_freq`,
    `pair_frequencies` or `angles`. Buffers are non-persistent: no positions in a checkpoint, no length cap."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        rope = config.rope_parameters
        self.rope_type: str = rope["rope_type"]
        self.axes: int = int(rope.get("axes", 1))
        self.head_dim: int = config.hidden_size // config.num_attention_heads
        self.num_heads: int = config.num_attention_heads
        allocation = rope["axis_allocation"]  # checked by the configuration, with the sizes it needs
        self.split_axes = self.axes if allocation == "split" else 1
        # transformers' dynamic/longrope updates re-read frequencies through self.config.
        self.config = config if self.split_axes == 1 else HeadDimView(config, self.head_dim // self.split_axes)
        self.max_seq_len_cached = self.original_max_seq_len = config.max_position_embeddings
        self.axis_ladders: bool = allocation_knobs_class(allocation).axis_ladders
        if self.axis_ladders and self.rope_type in ("dynamic", "longrope"):
            raise ValueError(
                f"axis_allocation {allocation!r} gives each axis its own frequency ladder, which rope_type "
                f"{self.rope_type!r} (frequencies recomputed for the whole head while running) does not support; "
                "use another rope_type (default, linear, yarn, ...) or allocation 'sections'."
            )
        inv_freq, self.attention_scaling = self.initial_frequencies()
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("original_inv_freq", inv_freq.clone(), persistent=False)
        self.register_buffer("axis_of_pair", self.pair_axes(), persistent=False)

    @property
    def pair_layout(self) -> str:
        """Read from the config, the one place it is kept (`convert_pair_layout` changes it there)."""
        return self.config.rope_parameters["pair_layout"]

    def pair_axes(self) -> torch.Tensor:
        """The position axis of each pair (-1: unrotated): (pairs,), or (heads, pairs) for a head-wise allocation."""
        rope, pairs = self.config.rope_parameters, self.head_dim // 2
        return axis_of_pair(pairs, self.axes, rope["axis_allocation"], rope.get("mrope_section"), self.num_heads)

    def compute_inv_freq(self, config: Any) -> tuple[torch.Tensor, float]:
        """Inverse frequencies of one axis group, and the cos/sin scaling factor (1.0 unless yarn/longrope)."""
        if self.rope_type in ROPE_INIT_FUNCTIONS:
            return ROPE_INIT_FUNCTIONS[self.rope_type](config, None)
        base, dim = config.rope_parameters["rope_theta"], config.head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        return inv_freq, 1.0

    def initial_frequencies(self) -> tuple[torch.Tensor, float]:
        """`compute_inv_freq` of the head (of one axis group for "split"); with `axis_ladders`, one ladder per axis of
        2·(pairs the axis reads) dims, its k-th frequency on the axis's k-th pair."""
        if not self.axis_ladders:
            return self.compute_inv_freq(self.config)
        rope = self.config.rope_parameters
        axis = AXIS_ALLOCATIONS.get(rope["axis_allocation"])(self.head_dim // 2, self.axes, rope.get("mrope_section"))
        ladders = {a: self.compute_inv_freq(HeadDimView(self.config, 2 * axis.count(a))) for a in set(axis) if a >= 0}
        taken, pieces = {}, []  # plain Python bookkeeping: this also runs under the meta device
        for a in axis:  # an unrotated pair (-1) gets 1, masked in pair_frequencies
            k = taken[a] = taken.get(a, -1) + 1
            pieces.append(ladders[a][0][k : k + 1].float() if a >= 0 else torch.ones(1))
        return torch.cat(pieces), next(iter(ladders.values()))[1]

    @torch.no_grad()
    def init_position_weights(self, config: Any) -> None:
        """`_init_weights`' hook: `from_pretrained` and meta-device init leave non-persistent buffers empty."""
        self.reset_frequencies()

    def reset_frequencies(self) -> None:
        inv_freq, self.attention_scaling = self.initial_frequencies()
        self.inv_freq.copy_(inv_freq)
        self.original_inv_freq.copy_(inv_freq)
        self.axis_of_pair.copy_(self.pair_axes())

    def pair_frequencies(self) -> torch.Tensor:
        """One inverse frequency per pair (pairs,) or (heads, pairs), the split allocation applied; 0 if unrotated."""
        return self.inv_freq.repeat(self.split_axes) * (self.axis_of_pair >= 0)

    def angles(self, position_ids: torch.Tensor) -> torch.Tensor:
        """Position on its axis × frequency: (axes, b, s) -> (b, s, pairs), or (b, heads, s, pairs) per head."""
        dtype = torch.float64 if position_ids.dtype == torch.float64 else torch.float32  # fp64 only if asked
        freqs = self.pair_frequencies().to(dtype)  # (pairs,), or (heads, pairs) when they differ per head
        if self.axes == 1:
            positions = position_ids[0].to(dtype)[..., None]  # (b, s, 1)
        else:  # for every pair, the position of the axis that drives it: (b, s, pairs) or (b, s, heads, pairs)
            positions = position_ids.to(dtype).permute(1, 2, 0)[..., self.axis_of_pair.clamp(min=0)]
        if freqs.dim() == 2 and positions.dim() == 3:  # per-head frequencies, positions shared by the heads
            positions = positions[:, :, None]
        angles = positions * freqs
        return angles.transpose(1, 2) if angles.dim() == 4 else angles

    def normalize_position_ids(self, position_ids: torch.Tensor) -> torch.Tensor:
        """Accept (b, s) for text or (axes, b, s); text positions are repeated on every axis."""
        if position_ids.dim() == 2:
            return position_ids.unsqueeze(0).expand(self.axes, *position_ids.shape)
        if position_ids.dim() == 3 and position_ids.shape[0] in (1, self.axes):
            return position_ids.expand(self.axes, *position_ids.shape[1:])
        raise ValueError(
            f"position_ids must have shape (batch, seq) or ({self.axes}, batch, seq) for a rotary with "
            f"{self.axes} axes; got {tuple(position_ids.shape)}."
        )

    @dynamic_rope_update  # no torch.no_grad(): a registered kind may learn its frequencies
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) (batch, seq, head_dim) laid out for `pair_layout`, in x's dtype, from `position_ids` (axes,
        batch, seq) or text positions (batch, seq)."""
        angles = self.angles(self.normalize_position_ids(position_ids))
        angles = torch.cat((angles, angles), dim=-1) if self.pair_layout == "half" else angles.repeat_interleave(2, -1)
        cos = angles.cos() * self.attention_scaling
        sin = angles.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)


for _name in ("default", *ROPE_INIT_FUNCTIONS):
    register_rotary_embedding(_name)(RotaryEmbedding)


@register_rotary_embedding("grape_m")
class GrapeRotaryEmbedding(RotaryEmbedding):
    """Multiplicative GRAPE, commuting (Zhang et al., ICLR 2026, §3.1; official `MSGRAPECommuting`): RoPE with learned
    frequencies ω_i = exp(log_freq_i / s), log_freq initialised to s·log θ_i (s = `grape_log_freq_scale`, 16), one set
    per model, per head with `grape_share_across_heads` False, frozen with `grape_learnable_freq` False. As the
    official code, a pair turns by −n·ω_i."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        rope = config.rope_parameters
        self.log_freq_scale = float(rope.get("grape_log_freq_scale", 16.0))
        learnable = rope.get("grape_learnable_freq", True)
        initial = self.inv_freq.log() * self.log_freq_scale  # (pairs,)
        if rope.get("grape_share_across_heads") is False:
            initial = initial.expand(self.num_heads, -1).clone()  # (heads, pairs)
        self.log_freq = nn.Parameter(initial, requires_grad=learnable)

    @torch.no_grad()
    def reset_frequencies(self) -> None:
        """The buffers, and the log-frequencies at RoPE's spectrum unless loaded from a checkpoint."""
        from transformers import initialization as init

        super().reset_frequencies()
        init.copy_(self.log_freq, (self.inv_freq.log() * self.log_freq_scale).expand_as(self.log_freq))

    def pair_frequencies(self) -> torch.Tensor:
        frequencies = torch.exp(self.log_freq / self.log_freq_scale)  # (pairs,) or (heads, pairs)
        return frequencies.repeat(*[1] * (frequencies.dim() - 1), self.split_axes) * (self.axis_of_pair >= 0)

    def angles(self, position_ids: torch.Tensor) -> torch.Tensor:
        return -super().angles(position_ids)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Pairs (i, i + d/2): (x1, x2) -> (-x2, x1)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_interleaved(x: torch.Tensor) -> torch.Tensor:
    """Pairs (2i, 2i+1): (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)."""
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pair_layout: str, unsqueeze_dim: int = 1
) -> torch.Tensor:
    """Rotate every pair of `x` (batch, heads, seq, head_dim) by its angle, dim order kept. As transformers'
    `apply_rotary_pos_emb`, cos / sin (batch, seq, head_dim) get a heads axis at `unsqueeze_dim`."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    if pair_layout == "half":
        return x * cos + rotate_half(x) * sin
    if torch.compiler.is_compiling() or x.dtype not in (torch.float32, torch.float64):  # no complex views there
        return x * cos + rotate_interleaved(x) * sin
    # Adjacent pairs as complex numbers, one multiply by e^{i·angle}: the formula's products and sums in one pass
    # instead of five; 20 % of a whole forward (docs/benchmarks.md, "What each fast path buys").
    if x.stride(-1) != 1 or x.storage_offset() % 2 or any(s % 2 for s in x.stride()[:-1]):
        x = x.contiguous()  # a complex view needs adjacent, aligned pairs
    rotation = torch.complex(cos[..., 0::2], sin[..., 0::2])
    return torch.view_as_real(torch.view_as_complex(x.unflatten(-1, (-1, 2))) * rotation).flatten(-2)


def rotate_for_scores(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pair_layout: str) -> torch.Tensor:
    """`apply_rotary` for queries and keys: scores need them only in the same dim order, and both layouts give each
    pair's two dims side by side (2i, 2i + 1), so a half model sums q·k as the interleaved one does, bit for bit."""
    rotated = apply_rotary(x, cos, sin, pair_layout)
    return rotated.unflatten(-1, (2, -1)).transpose(-1, -2).flatten(-2) if pair_layout == "half" else rotated


class QueryKeyRotation:
    """How one attention layer rotates, chosen for its pair layout when the layer is built (`query_key_rotation`;
    `convert_pair_layout` chooses again). cos / sin are `RotaryEmbedding`'s: (batch, seq, head_dim)."""

    def __init__(self, pair_layout: str) -> None:
        self.pair_layout = pair_layout

    def project_query_key(
        self, states: torch.Tensor, query_projection: nn.Module, key_projection: nn.Module, head_dim: int, cos, sin
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys (batch, heads, seq, head_dim) projected from `states` (batch, seq, hidden), rotated."""
        query, key = (
            p(states).unflatten(-1, (-1, head_dim)).transpose(1, 2) for p in (query_projection, key_projection)
        )
        return self.query_key(query, key, cos, sin)

    def query_key(self, query, key, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        return self.for_scores(query, cos, sin), self.for_scores(key, cos, sin)

    def for_scores(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return rotate_for_scores(x, cos, sin, self.pair_layout)

    def values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """`x` rotated, dim order kept (`rotary_value`: the output projection reads the order)."""
        return apply_rotary(x, cos, sin, self.pair_layout)


class HeadwiseRotation(QueryKeyRotation):
    """cos / sin with a heads axis (batch, heads, seq, head_dim): a head-wise allocation (MHRoPE) or per-head GRAPE."""

    def for_scores(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return x * cos + (rotate_half if self.pair_layout == "half" else rotate_interleaved)(x) * sin

    values = for_scores


def query_key_rotation(config: Any) -> QueryKeyRotation:
    """The rotation for one attention layer of `config` (its pair layout is checked by the configuration)."""
    rotation = HeadwiseRotation if rotates_per_head(config.rope_parameters) else QueryKeyRotation
    return rotation(config.rope_parameters["pair_layout"])
