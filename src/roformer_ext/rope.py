"""Pluggable rotary position embeddings (RoPE) for RoFormerExt.

The model asks a *rotary kind* (selected by `config.rope_parameters["rope_type"]`) for `(cos, sin)` once per
forward, from float position ids of shape `(axes, batch, seq)`, and every layer rotates its queries and keys with
`apply_rotary`. A kind only has to produce one inverse frequency per rotated pair; how the pairs are laid out in
the head (`pair_layout`) is shared machinery here; which position axis drives each pair (`axis_allocation`) is
axis_allocations.py's.

Built-in kinds: "default" (θ_i = base^(-2i/d), as RoFormer) and every scaling type of
`transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS` (linear, dynamic, yarn, longrope, llama3, ...).
Add your own with `@register_rotary_embedding("name")` on a `RotaryEmbedding` subclass.
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
    """Register a `RotaryEmbedding` subclass under `name`, so `rope_parameters={"rope_type": name}` selects it.

    Our registry is separate from transformers' `ROPE_INIT_FUNCTIONS`, which we never modify.
    """

    def decorator(cls: type[RotaryEmbedding]) -> type[RotaryEmbedding]:
        if not (isinstance(cls, type) and issubclass(cls, RotaryEmbedding)):
            raise TypeError(f"register_rotary_embedding({name!r}) expects a RotaryEmbedding subclass, got {cls!r}.")
        ROTARY_KINDS.register(name, cls)
        return cls

    return decorator


def registered_rotary_kinds() -> tuple[str, ...]:
    """Names accepted as `rope_parameters["rope_type"]`."""
    return ROTARY_KINDS.registered()


def rotary_embedding_class(rope_type: str) -> type[RotaryEmbedding]:
    return ROTARY_KINDS.get(rope_type)


class RotaryEmbedding(nn.Module):
    """Turns position ids into the `(cos, sin)` every attention layer uses.

    Subclasses change `compute_inv_freq` (or `angles`) only. Buffers are non-persistent: nothing about positions
    is saved in a checkpoint, and there is no length cap.
    """

    def __init__(self, config: Any) -> None:
        super().__init__()
        rope = config.rope_parameters
        self.rope_type: str = rope["rope_type"]
        self.axes: int = int(rope.get("axes", 1))
        self.head_dim: int = config.hidden_size // config.num_attention_heads
        allocation = rope["axis_allocation"]  # checked by the configuration, with the sizes it needs
        self.split_axes = self.axes if allocation == "split" else 1
        # transformers' dynamic/longrope updates re-read frequencies through self.config.
        self.config = config if self.split_axes == 1 else HeadDimView(config, self.head_dim // self.split_axes)
        self.max_seq_len_cached = self.original_max_seq_len = config.max_position_embeddings
        self.axis_ladders: bool = allocation_knobs_class(allocation).axis_ladders
        if self.axis_ladders and self.rope_type in ("dynamic", "longrope"):
            raise ValueError(
                f"axis_allocation {allocation!r} gives each axis its own frequency ladder, which rope_type "
                f"{self.rope_type!r} (frequencies recomputed for the whole head while running) does not support; use "
                "another rope_type (default, linear, yarn, ...) or allocation 'sections'."
            )
        inv_freq, self.attention_scaling = self.initial_frequencies()
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("original_inv_freq", inv_freq.clone(), persistent=False)
        self.num_heads: int = config.num_attention_heads
        axis = axis_of_pair(self.head_dim // 2, self.axes, allocation, rope.get("mrope_section"), self.num_heads)
        self.register_buffer("axis_of_pair", axis, persistent=False)

    @property
    def pair_layout(self) -> str:
        """Read from the config, the one place it is kept (`convert_pair_layout` changes it there)."""
        return self.config.rope_parameters["pair_layout"]

    def compute_inv_freq(self, config: Any) -> tuple[torch.Tensor, float]:
        """Inverse frequencies of one axis group, and the cos/sin scaling factor (1.0 unless yarn/longrope)."""
        if self.rope_type in ROPE_INIT_FUNCTIONS:
            return ROPE_INIT_FUNCTIONS[self.rope_type](config, None)
        base, dim = config.rope_parameters["rope_theta"], config.head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        return inv_freq, 1.0

    def initial_frequencies(self) -> tuple[torch.Tensor, float]:
        """`compute_inv_freq` of the head (of one axis group for "split"), or with an `axis_ladders` allocation one
        ladder per axis, of 2·(pairs the axis reads) dims, its k-th frequency on the axis's k-th pair."""
        if not self.axis_ladders:
            return self.compute_inv_freq(self.config)
        rope = self.config.rope_parameters
        axis = AXIS_ALLOCATIONS.get(rope["axis_allocation"])(self.head_dim // 2, self.axes, rope.get("mrope_section"))
        ladders = {a: self.compute_inv_freq(HeadDimView(self.config, 2 * axis.count(a))) for a in set(axis) if a >= 0}
        taken = dict.fromkeys(ladders, 0)
        pieces = []  # plain Python bookkeeping: this also runs under the meta device
        for a in axis:
            if a < 0:
                pieces.append(torch.ones(1))  # an unrotated pair: its frequency is masked in pair_frequencies
            else:
                pieces.append(ladders[a][0][taken[a] : taken[a] + 1].float())
                taken[a] += 1
        return torch.cat(pieces), next(iter(ladders.values()))[1]

    @torch.no_grad()
    def init_position_weights(self, config: Any) -> None:
        """The weight-init hook `_init_weights` calls on every position module that has one."""
        self.reset_frequencies()

    def reset_frequencies(self) -> None:
        """Recompute the buffers: `from_pretrained` and meta-device init leave non-persistent buffers empty."""
        inv_freq, self.attention_scaling = self.initial_frequencies()
        self.inv_freq.copy_(inv_freq)
        self.original_inv_freq.copy_(inv_freq)
        rope = self.config.rope_parameters
        self.axis_of_pair.copy_(
            axis_of_pair(
                self.head_dim // 2, self.axes, rope["axis_allocation"], rope.get("mrope_section"), self.num_heads
            )
        )

    def pair_frequencies(self) -> torch.Tensor:
        """One inverse frequency per rotated pair (head_dim // 2,), after the split allocation is applied; 0 for a pair
        the allocation leaves unrotated. (heads, head_dim // 2) for a head-wise allocation."""
        return self.inv_freq.repeat(self.split_axes) * (self.axis_of_pair >= 0)

    def angles(self, position_ids: torch.Tensor) -> torch.Tensor:
        """Angle of each pair: position on its axis × its frequency. (axes, b, s) -> (b, s, head_dim // 2), or
        (b, heads, s, head_dim // 2) when heads differ (a head-wise allocation, per-head frequencies)."""
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
        """(cos, sin) of shape (batch, seq, head_dim), laid out for `pair_layout`, in x's dtype.

        `position_ids` is (axes, batch, seq), the one shape the model uses; (batch, seq) is read as text positions
        (every axis the same), as transformers' text rotary modules take them.
        """
        angles = self.angles(self.normalize_position_ids(position_ids))
        if self.pair_layout == "half":
            angles = torch.cat((angles, angles), dim=-1)
        else:
            angles = torch.repeat_interleave(angles, 2, dim=-1)
        cos = angles.cos() * self.attention_scaling
        sin = angles.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)


for _name in ("default", *ROPE_INIT_FUNCTIONS):
    register_rotary_embedding(_name)(RotaryEmbedding)


@register_rotary_embedding("grape_m")
class GrapeRotaryEmbedding(RotaryEmbedding):
    """Multiplicative GRAPE, commuting (Zhang et al., ICLR 2026, "Group Representational Position Encoding", §3.1; the
    official `MSGRAPECommuting`): position n acts on each canonical plane of a pair by exp(n·ω_i·L_i), i.e. RoPE's
    rotations with *learned* frequencies ω_i = exp(log_freq_i / s), initialised to RoPE's spectrum (log_freq =
    s·log θ_i, s = rope_parameters["grape_log_freq_scale"], 16: a learning-rate scaling), shared by all heads or, with
    `grape_share_across_heads` False, one set per head (the official `share_across_heads` option; cos / sin then carry
    a heads axis and the layers rotate per head). One set per model here (the official model has one per layer). As
    the official code, a pair turns by −n·ω_i (the same relative law; RoPE's sign convention mirrored).
    `grape_learnable_freq` False freezes them. The log-frequencies are a parameter, saved with the model."""

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
    """Rotate every pair of `x` (batch, heads, seq, head_dim) by its angle; cos/sin (batch, seq, head_dim).

    As transformers' `apply_rotary_pos_emb`, cos/sin get a heads axis at `unsqueeze_dim` to broadcast over heads.
    The dim order is kept (what values need: the output projection reads it). Both members of a pair carry the same
    angle in cos/sin (as `RotaryEmbedding` lays them out). A model does not call this per layer: its attention calls
    the `QueryKeyRotation` chosen for its layout when it was built.
    """
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    if pair_layout == "half":
        return _rotate_half_pairs(x, cos, sin)
    return _rotate_interleaved_pairs(x, cos, sin)


def _rotate_half_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Pairs (x_i, x_{i+d/2}) by the formula, dim order kept; cos/sin already broadcast over heads."""
    return x * cos + rotate_half(x) * sin


def _rotate_interleaved_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Pairs (2i, 2i+1); cos/sin already broadcast over heads.

    Interleaved pairs are adjacent, so for fp32/fp64 `x` is viewed as complex in place and rotated by one complex
    multiply by e^{i·angle}: about one pass over memory instead of the formula's five (benchmarks/bench_rope.py). The
    products and sums are those of the plain formula (vectorised complex multiply does not fuse them; a scalar tail
    may round differently, by one ulp). Under torch.compile inductor fuses the plain formula into one loop (complex
    views would break the graph), and there are no complex bf16/fp16 kernels on every device: the formula then. These
    two tests are about the tensors of this call (autocast decides their dtype per call), not about the model.
    """
    if torch.compiler.is_compiling() or x.dtype not in (torch.float32, torch.float64):
        return x * cos + rotate_interleaved(x) * sin
    return _rotate_adjacent_pairs(x, cos[..., 0::2], sin[..., 0::2])


def _rotate_adjacent_pairs(x: torch.Tensor, cos_pairs: torch.Tensor, sin_pairs: torch.Tensor) -> torch.Tensor:
    """fp32/fp64 `x` whose pair i sits at dims (2i, 2i+1), rotated by one complex multiply; cos/sin one per pair.
    (Under CPU autocast a bf16 `x` is fine: autocast runs `view_as_complex` in fp32.)"""
    if x.stride(-1) != 1 or x.storage_offset() % 2 or any(s % 2 for s in x.stride()[:-1]):
        x = x.contiguous()  # a complex view needs adjacent, aligned pairs
    rotation = torch.complex(cos_pairs, sin_pairs)
    return torch.view_as_real(torch.view_as_complex(x.unflatten(-1, (-1, 2))) * rotation).flatten(-2)


def rotate_for_scores(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pair_layout: str) -> torch.Tensor:
    """Rotated `x` (batch, heads, seq, head_dim) for attention scores, with each pair's two dims side by side.

    Scores only need q·k, which any permutation of the head dims applied to both q and k leaves unchanged, so the
    result's dims are in interleaved order (pair i at 2i, 2i+1) for both layouts (see `HalfPairRotation.for_scores`).
    Use it for queries and keys (and the keys a cache keeps), never where the dim order is read (values:
    `apply_rotary`).
    """
    return _ROTATIONS[pair_layout].for_scores(x, cos, sin)


def _half_to_interleaved(t: torch.Tensor) -> torch.Tensor:
    """The last dim reordered from half pairs (i, i + d/2) to adjacent pairs (2i, 2i + 1): 0, d/2, 1, d/2 + 1, ..."""
    return t.unflatten(-1, (2, -1)).transpose(-1, -2).flatten(-2)


def _heads(projected: torch.Tensor, head_dim: int) -> torch.Tensor:
    """(batch, seq, hidden) -> (batch, heads, seq, head_dim)."""
    return projected.view(*projected.shape[:-1], -1, head_dim).transpose(1, 2)


class QueryKeyRotation:
    """How one attention layer rotates: chosen once for its pair layout (`query_key_rotation(config)`, when the layer
    is built, again when `convert_pair_layout` changes the layout), then only called. No call re-decides the layout.

    (cos, sin) are what `RotaryEmbedding` returns: (batch, seq, head_dim), laid out for `pair_layout`.
    """

    pair_layout: str

    def project_query_key(
        self,
        states: torch.Tensor,
        query_projection: nn.Module,
        key_projection: nn.Module,
        head_dim: int,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys (batch, heads, seq, head_dim) projected from `states` (batch, seq, hidden), rotated for
        scores (each pair's dims side by side)."""
        query, key = _heads(query_projection(states), head_dim), _heads(key_projection(states), head_dim)
        return self.query_key(query, key, cos, sin)

    def query_key(
        self, query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected queries and keys rotated for scores."""
        return self.for_scores(query, cos, sin), self.for_scores(key, cos, sin)

    def for_scores(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """`x` (batch, heads, seq, head_dim) rotated with each pair's two dims side by side (`rotate_for_scores`)."""
        raise NotImplementedError

    def values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """`x` rotated with its dim order kept (`rotary_value`: the output projection reads the order)."""
        return apply_rotary(x, cos, sin, self.pair_layout)


class InterleavedPairRotation(QueryKeyRotation):
    """Pairs (2i, 2i+1), as the original RoFormer: already side by side, one complex multiply (fp32/fp64, eager)."""

    pair_layout = "interleaved"

    def for_scores(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return _rotate_interleaved_pairs(x, cos.unsqueeze(1), sin.unsqueeze(1))


class HalfPairRotation(QueryKeyRotation):
    """Pairs (i, i + d/2), as most RoPE code lays them out, at the interleaved layout's cost: for scores, half pairs
    are read straight into a complex tensor (one pass) and rotated as interleaved pairs are, instead of the plain
    formula's five passes."""

    pair_layout = "half"

    def for_scores(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        if torch.compiler.is_compiling() or x.dtype not in (torch.float32, torch.float64):
            # The same order by the plain formula: bring each pair together, then rotate interleaved pairs.
            x, cos, sin = (_half_to_interleaved(t) for t in (x, cos, sin))
            return _rotate_interleaved_pairs(x, cos.unsqueeze(1), sin.unsqueeze(1))
        rotation = torch.complex(cos[..., :half], sin[..., :half]).unsqueeze(1)
        return torch.view_as_real(torch.complex(x[..., :half], x[..., half:]) * rotation).flatten(-2)


class FusedHalfPairRotation(HalfPairRotation):
    """The half layout with liger-kernel's fused Triton kernel for tensors on CUDA (chosen when liger-kernel is
    installed and CUDA is available); on other devices, or made by hand where liger-kernel is missing, the half
    layout as above."""

    @staticmethod
    def fuses(tensor: torch.Tensor) -> bool:
        """Whether this tensor goes through the kernel: on CUDA, with liger-kernel installed."""
        from .fused_rotary import fused_rotary_installed

        return tensor.is_cuda and fused_rotary_installed()

    def query_key(self, query, key, cos, sin):
        if not self.fuses(query):
            return super().query_key(query, key, cos, sin)
        from .fused_rotary import fused_half_rotate_query_key

        return fused_half_rotate_query_key(query, key, cos, sin)


class HeadwiseRotation(QueryKeyRotation):
    """Rotation for a head-wise allocation (MHRoPE): cos / sin are (batch, heads, seq, head_dim), each head its own
    angles, applied by the formula in the layout's own dim order (scores only need q and k in the same order)."""

    def __init__(self, pair_layout: str) -> None:
        self.pair_layout = pair_layout
        self.rotate = rotate_half if pair_layout == "half" else rotate_interleaved

    def for_scores(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return x * cos + self.rotate(x) * sin

    def values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return self.for_scores(x, cos, sin)


def query_key_rotation(config: Any) -> QueryKeyRotation:
    """The rotation for one attention layer of `config`'s pair layout."""
    pair_layout = config.rope_parameters["pair_layout"]  # checked by the configuration
    if rotates_per_head(config.rope_parameters):
        return HeadwiseRotation(pair_layout)
    if pair_layout == "interleaved":
        return InterleavedPairRotation()
    from .fused_rotary import fused_rotary_installed

    return FusedHalfPairRotation() if fused_rotary_installed() else HalfPairRotation()


#: One rotation per layout for `rotate_for_scores` (which keeps no rows).
_ROTATIONS: dict[str, QueryKeyRotation] = {"interleaved": InterleavedPairRotation(), "half": HalfPairRotation()}


def interleaved_to_half_permutation(head_dim: int) -> torch.Tensor:
    """Index that reorders one head's dims from (0,1),(2,3),... pairs to (i, i+d/2) pairs.

    Applying it to the q/k projection rows of every head (and v / output columns when rotary_value is on) turns an
    interleaved checkpoint into a half-layout one that computes exactly the same function.
    """
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))


__all__ = [
    "RotaryEmbedding",
    "apply_rotary",
    "QueryKeyRotation",
    "interleaved_to_half_permutation",
    "query_key_rotation",
    "HeadwiseRotation",
    "register_rotary_embedding",
    "registered_rotary_kinds",
    "rotary_embedding_class",
    "rotate_for_scores",
]
