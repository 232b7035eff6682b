"""Pluggable rotary position embeddings (RoPE) for RoFormerExt.

The model asks a *rotary kind* (selected by `config.rope_parameters["rope_type"]`) for `(cos, sin)` once per
forward, from float position ids of shape `(axes, batch, seq)`, and every layer rotates its queries and keys with
`apply_rotary`. A kind only has to produce one inverse frequency per rotated pair; how the pairs are laid out in
the head (`pair_layout`) and which position axis drives each pair (`axis_allocation`) are shared machinery here.

Built-in kinds: "default" (θ_i = base^(-2i/d), as RoFormer) and every scaling type of
`transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS` (linear, dynamic, yarn, longrope, llama3, ...).
Add your own with `@register_rotary_embedding("name")` on a `RotaryEmbedding` subclass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update

PAIR_LAYOUTS = ("interleaved", "half")
AXIS_ALLOCATIONS = ("interleaved", "sections", "split")

_ROTARY_KINDS: dict[str, type[RotaryEmbedding]] = {}


def register_rotary_embedding(name: str) -> Callable[[type[RotaryEmbedding]], type[RotaryEmbedding]]:
    """Register a `RotaryEmbedding` subclass under `name`, so `rope_parameters={"rope_type": name}` selects it.

    Our registry is separate from transformers' `ROPE_INIT_FUNCTIONS`, which we never modify.
    """

    def decorator(cls: type[RotaryEmbedding]) -> type[RotaryEmbedding]:
        if not (isinstance(cls, type) and issubclass(cls, RotaryEmbedding)):
            raise TypeError(f"register_rotary_embedding({name!r}) expects a RotaryEmbedding subclass, got {cls!r}.")
        _ROTARY_KINDS[name] = cls
        return cls

    return decorator


def registered_rotary_kinds() -> tuple[str, ...]:
    """Names accepted as `rope_parameters["rope_type"]`."""
    return tuple(sorted(_ROTARY_KINDS))


def rotary_embedding_class(rope_type: str) -> type[RotaryEmbedding]:
    try:
        return _ROTARY_KINDS[rope_type]
    except KeyError:
        raise ValueError(
            f"Unknown rotary kind {rope_type!r}. Registered kinds: {', '.join(registered_rotary_kinds())}. "
            "Register a new one with roformer_ext.register_rotary_embedding(name)."
        ) from None


class _HeadDimView:
    """Config proxy with another head_dim: transformers' frequency functions read it from the config."""

    def __init__(self, config: Any, head_dim: int) -> None:
        self._config, self.head_dim = config, head_dim

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


def axis_of_pair(num_pairs: int, axes: int, allocation: str, mrope_section: list[int] | None = None) -> torch.Tensor:
    """For each frequency pair, the index of the position axis that drives it.

    interleaved: θ0→axis 0, θ1→axis 1, ... (RoPE-Tie, Qwen3-VL); sections: contiguous bands of
    `mrope_section` (Qwen2-VL); split: equal contiguous halves/thirds, each with its own full θ set (RoPE-2D).
    """
    # Plain Python lists: this also runs under the meta device, where repeat_interleave cannot.
    if allocation == "interleaved":
        return torch.tensor([pair % axes for pair in range(num_pairs)])
    if allocation == "sections":
        return torch.tensor([axis for axis, size in enumerate(mrope_section) for _ in range(size)])
    if allocation == "split":
        return torch.tensor([pair // (num_pairs // axes) for pair in range(num_pairs)])
    raise ValueError(f"Unknown axis_allocation {allocation!r}; choose one of {', '.join(AXIS_ALLOCATIONS)}.")


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
        allocation = rope.get("axis_allocation", "interleaved")
        self.split_axes = self.axes if allocation == "split" else 1
        # transformers' dynamic/longrope updates re-read frequencies through self.config.
        self.config = config if self.split_axes == 1 else _HeadDimView(config, self.head_dim // self.split_axes)
        self.max_seq_len_cached = self.original_max_seq_len = config.max_position_embeddings
        inv_freq, self.attention_scaling = self.compute_inv_freq(self.config)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("original_inv_freq", inv_freq.clone(), persistent=False)
        axis = axis_of_pair(self.head_dim // 2, self.axes, allocation, rope.get("mrope_section"))
        self.register_buffer("axis_of_pair", axis, persistent=False)

    @property
    def pair_layout(self) -> str:
        """Read from the config, the one place it is kept (`convert_pair_layout` changes it there)."""
        return self.config.rope_parameters.get("pair_layout", "interleaved")

    def compute_inv_freq(self, config: Any) -> tuple[torch.Tensor, float]:
        """Inverse frequencies of one axis group, and the cos/sin scaling factor (1.0 unless yarn/longrope)."""
        if self.rope_type in ROPE_INIT_FUNCTIONS:
            return ROPE_INIT_FUNCTIONS[self.rope_type](config, None)
        base, dim = config.rope_parameters["rope_theta"], config.head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        return inv_freq, 1.0

    @torch.no_grad()
    def reset_frequencies(self) -> None:
        """Recompute the buffers: `from_pretrained` and meta-device init leave non-persistent buffers empty."""
        inv_freq, self.attention_scaling = self.compute_inv_freq(self.config)
        self.inv_freq.copy_(inv_freq)
        self.original_inv_freq.copy_(inv_freq)
        rope = self.config.rope_parameters
        allocation = rope.get("axis_allocation", "interleaved")
        self.axis_of_pair.copy_(axis_of_pair(self.head_dim // 2, self.axes, allocation, rope.get("mrope_section")))

    def pair_frequencies(self) -> torch.Tensor:
        """One inverse frequency per rotated pair (head_dim // 2,), after the split allocation is applied."""
        return self.inv_freq.repeat(self.split_axes)

    def angles(self, position_ids: torch.Tensor) -> torch.Tensor:
        """Angle of each pair: position on its axis × its frequency. (axes, b, s) -> (b, s, head_dim // 2)."""
        dtype = torch.float64 if position_ids.dtype == torch.float64 else torch.float32  # fp64 only if asked
        freqs = self.pair_frequencies().to(dtype)
        if self.axes == 1:
            return position_ids[0].to(dtype)[..., None] * freqs
        # Pick, for every pair, the position of the axis that drives it: (b, s, pairs).
        positions = position_ids.to(dtype).permute(1, 2, 0)[..., self.axis_of_pair]
        return positions * freqs

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

    Both members of a pair carry the same angle in cos/sin (as `RotaryEmbedding` lays them out). Interleaved pairs
    are adjacent, so for fp32/fp64 `x` is viewed as complex in place and rotated by one complex multiply by
    e^{i·angle}: about one pass over memory instead of the formula's five (benchmarks/bench_rope.py). The products
    and sums are those of the plain formula (vectorised complex multiply does not fuse them; a scalar tail may round
    differently, by one ulp). Half pairs (x_i, x_{i+d/2}) take the plain formula here, which keeps the dim order;
    attention projects and rotates its queries and keys with `project_rotated_query_key`, fast in both layouts.
    """
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    if pair_layout == "half":
        return x * cos + rotate_half(x) * sin
    # Under torch.compile inductor fuses the plain formula into one loop (complex views would break the graph);
    # there are no complex bf16/fp16 kernels on every device.
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

    Scores only need q·k, which any permutation of the head dims applied to both q and k leaves unchanged. So half
    pairs (x_i, x_{i+d/2}) are read straight into a complex tensor (one pass) and rotated as interleaved pairs are,
    instead of the plain formula's five passes: the half layout then costs about what the interleaved one does
    (benchmarks/bench_rope.py). The result's dims are in interleaved order (pair i at 2i, 2i+1) for both layouts;
    use it for queries and keys (and the keys a cache keeps), never where the dim order is read (values: `apply_rotary`).
    """
    if pair_layout != "half":
        return apply_rotary(x, cos, sin, pair_layout)
    half = x.shape[-1] // 2
    if torch.compiler.is_compiling() or x.dtype not in (torch.float32, torch.float64):
        # The same order by the plain formula: bring each pair together, then rotate interleaved pairs.
        x, cos, sin = (_half_to_interleaved(t) for t in (x, cos, sin))
        return apply_rotary(x, cos, sin, "interleaved")
    rotation = torch.complex(cos[..., :half], sin[..., :half]).unsqueeze(1)
    return torch.view_as_real(torch.complex(x[..., :half], x[..., half:]) * rotation).flatten(-2)


def _half_to_interleaved(t: torch.Tensor) -> torch.Tensor:
    """The last dim reordered from half pairs (i, i + d/2) to adjacent pairs (2i, 2i + 1): 0, d/2, 1, d/2 + 1, ..."""
    return t.unflatten(-1, (2, -1)).transpose(-1, -2).flatten(-2)


def rotate_query_key(
    query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pair_layout: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys rotated for softmax attention: liger-kernel's fused GPU kernel where it applies (half layout,
    CUDA, installed), else `rotate_for_scores`."""
    if query.is_cuda:
        from .fused_rotary import fused_rotate_query_key

        fused = fused_rotate_query_key(query, key, cos, sin, pair_layout)
        if fused is not None:
            return fused
    return rotate_for_scores(query, cos, sin, pair_layout), rotate_for_scores(key, cos, sin, pair_layout)


def project_rotated_query_key(
    states: torch.Tensor,
    query_projection: nn.Module,
    key_projection: nn.Module,
    head_dim: int,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pair_layout: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Project `states` (batch, seq, hidden) to queries and keys (batch, heads, seq, head_dim), rotated for scores.

    The one place that chooses how a layout is rotated. Half pairs (x_i, x_{i+d/2}) need their two dims brought side
    by side before one complex multiply can rotate them, a pass over q and k that interleaved pairs skip. When the
    batch has more rows than the projection has outputs, moving the projection's weight rows costs less than
    moving the activations, so the half layout projects straight into pair-adjacent order (each head's rows
    0, d/2, 1, d/2 + 1, ...) and rotates as interleaved pairs do: the scores are those of the half layout (the same
    permutation on q and k), at the interleaved layout's cost. Only plain `nn.Linear` projections without hooks take
    this path: an adapter (LoRA), a quantized layer or a hook keeps its own forward, then q and k are rotated after.
    """

    def heads(projected: torch.Tensor) -> torch.Tensor:
        return projected.view(*states.shape[:-1], -1, head_dim).transpose(1, 2)

    rows = states.numel() // states.shape[-1]
    if not _projects_pair_adjacent(states, query_projection, key_projection, rows, pair_layout):
        return rotate_query_key(heads(query_projection(states)), heads(key_projection(states)), cos, sin, pair_layout)
    half = head_dim // 2
    rows_per_head = torch.arange(query_projection.weight.shape[0], device=states.device).view(-1, head_dim)
    order = _half_to_interleaved(rows_per_head).flatten()  # each head's rows 0, d/2, 1, d/2 + 1, ...
    cos_pairs, sin_pairs = cos[..., :half].unsqueeze(1), sin[..., :half].unsqueeze(1)

    def project(projection: nn.Linear) -> torch.Tensor:
        bias = None if projection.bias is None else projection.bias[order]
        return heads(F.linear(states, projection.weight[order], bias))

    return tuple(_rotate_adjacent_pairs(project(p), cos_pairs, sin_pairs) for p in (query_projection, key_projection))


def _projects_pair_adjacent(
    states: torch.Tensor, query_projection: nn.Module, key_projection: nn.Module, rows: int, pair_layout: str
) -> bool:
    """Whether `project_rotated_query_key` reorders the projection rows instead of the activations."""
    if pair_layout != "half" or torch.compiler.is_compiling() or states.dtype not in (torch.float32, torch.float64):
        return False
    if states.is_cuda:
        from .fused_rotary import fused_rotary_available

        if fused_rotary_available(states.device, pair_layout):
            return False
    # Hooks registered for every module (torch.nn.modules.module.register_module_forward_hook) must see q and k too.
    hooks = any(getattr(nn.modules.module, name, None) for name in ("_global_forward_hooks", "_global_forward_pre_hooks"))
    plain = not hooks and all(
        type(p) is nn.Linear and not (p._forward_hooks or p._forward_pre_hooks) and "forward" not in vars(p)
        for p in (query_projection, key_projection)
    )
    return plain and rows > query_projection.weight.shape[0]


def interleaved_to_half_permutation(head_dim: int) -> torch.Tensor:
    """Index that reorders one head's dims from (0,1),(2,3),... pairs to (i, i+d/2) pairs.

    Applying it to the q/k projection rows of every head (and v / output columns when rotary_value is on) turns an
    interleaved checkpoint into a half-layout one that computes exactly the same function.
    """
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))


__all__ = [
    "RotaryEmbedding",
    "apply_rotary",
    "interleaved_to_half_permutation",
    "project_rotated_query_key",
    "register_rotary_embedding",
    "registered_rotary_kinds",
    "rotary_embedding_class",
    "rotate_for_scores",
    "rotate_query_key",
]
