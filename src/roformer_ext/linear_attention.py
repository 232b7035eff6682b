"""Linear attention with RoPE in the numerator only (RoFormer §3.4.3).

out_i = Σ_j (R_i φ(q_i))ᵀ (R_j φ(k_j)) v_j / Σ_j φ(q_i)ᵀ φ(k_j),  φ = elu + 1.

The rotation keeps the numerator relative-position aware; the denominator stays unrotated so it remains positive.
Everything is a sum over keys of d×d outer products, so cost is O(N·d²) instead of O(N²·d):

- bidirectional: one state S = Σ_j R_j φ(k_j) v_jᵀ and z = Σ_j φ(k_j) for the whole sequence;
- causal: the sequence is cut into chunks; inside a chunk the (chunk × chunk) masked products are exact, across
  chunks the running (S, z) carries the prefix. Memory is O(N·d) like q itself, with no N² or N·d² term;
- generation: (S, z) per layer is the whole past, so a step costs O(d²) whatever the length. It is kept in the
  cache layer of its own (`LinearAttentionState`, on transformers' public `DynamicLayer`), not recomputed from
  cached keys.

Sums run in float32 even under bf16 autocast: they accumulate over the whole sequence.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers.cache_utils import Cache, DynamicLayer

from .packing import PackedBatch
from .rope import apply_rotary, rotate_for_scores

#: Queries per chunk in the causal form: the (C×C) intra-chunk products grow with C, the per-chunk (d×d) states
#: shrink; C = 64 ≈ head_dim keeps the two of the same order. Any value gives the same result (tested).
CAUSAL_CHUNK = 64


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1: positive, so the denominator never vanishes."""
    return F.elu(x) + 1.0


def linear_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None,
    attention_mask: torch.Tensor | None,
    cache=None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """(batch, heads, seq, head_dim) in, (batch, seq, heads, head_dim) out.

    `module` supplies `config` (its pair layout), `rotary_value`, `is_causal` and `layer_idx`. `attention_mask` is the 2D
    padding mask (batch, past + seq); padded keys are dropped from both sums. With a `cache` (causal only)
    the layer's running state is read from and written back to the cache.
    """
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(
            "Linear attention takes a 2D (batch, seq) padding mask only; a 4D mask (e.g. the UniLM mask) needs "
            "attention_type='softmax'."
        )
    if cache is not None and not module.is_causal:
        raise ValueError("A cache with linear attention needs a causal (decoder) model.")
    with torch.autocast(device_type=query.device.type, enabled=False):
        layout = module.config.rope_parameters["pair_layout"]
        q, q_rot, k, k_rot, v = _features(
            query, key, value, position_embeddings, attention_mask, layout, module.rotary_value
        )
        if not module.is_causal:
            out = bidirectional_linear_attention(q, q_rot, k, k_rot, v, eps)
        else:
            state = _read_state(cache, module.layer_idx) if cache is not None else None
            out, state = causal_linear_attention(q, q_rot, k, k_rot, v, state, eps)
            if cache is not None:
                _write_state(cache, module.layer_idx, state, q.shape[2])
    return out.to(query.dtype).transpose(1, 2).contiguous()


def _features(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None,
    attention_mask: torch.Tensor | None,
    layout: str,
    rotary_value: bool,
) -> tuple[torch.Tensor, ...]:
    """φ(q), R φ(q), φ(k), R φ(k) and v (rotated when `rotary_value`), in float32; padded keys zeroed."""
    cos, sin = (t.float() for t in position_embeddings) if position_embeddings is not None else (None, None)
    q, k, v = feature_map(query.float()), feature_map(key.float()), value.float()
    if rotary_value and position_embeddings is not None:
        v = apply_rotary(v, cos, sin, layout)
    if attention_mask is not None:
        # (batch, 1, seq, 1): the last `seq` columns are this call's tokens when earlier ones are cached.
        keep = attention_mask[:, None, -k.shape[2] :, None].to(k.dtype)
        k = k * keep
    if position_embeddings is None:  # an absolute (or no) position encoding: nothing to rotate
        return q, q, k, k, v
    return q, rotate_for_scores(q, cos, sin, layout), k, rotate_for_scores(k, cos, sin, layout), v


def bidirectional_linear_attention(
    q: torch.Tensor, q_rot: torch.Tensor, k: torch.Tensor, k_rot: torch.Tensor, v: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """Every query sees every key: one (d × d_v) state for the whole sequence. Output (batch, heads, seq, d_v)."""
    state = k_rot.transpose(-1, -2) @ v  # (b, h, d, d_v)
    normaliser = k.sum(dim=2, keepdim=True).transpose(-1, -2)  # (b, h, d, 1)
    return (q_rot @ state) / (q @ normaliser + eps)


def causal_linear_attention(
    q: torch.Tensor,
    q_rot: torch.Tensor,
    k: torch.Tensor,
    k_rot: torch.Tensor,
    v: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
    eps: float = 1e-6,
    chunk: int = CAUSAL_CHUNK,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Query i sees keys ≤ i (and everything summarised in `state`). Returns the output and the final state.

    `state` is (S, z): S = Σ R φ(k) vᵀ (b, h, d, d_v), z = Σ φ(k) (b, h, d) over all earlier tokens.
    Chunks run as batched matmuls, not a Python loop: per chunk, its own (S, z) contribution, then an exclusive
    prefix sum over chunks gives what every chunk sees from before it.
    """
    seq = q.shape[2]
    size = max(1, min(chunk, seq))
    pad = -seq % size
    if pad:  # zero keys add nothing; the padded queries' outputs are cut off below
        q, q_rot, k, k_rot, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, q_rot, k, k_rot, v))
    chunks = (seq + pad) // size
    # (b, h, chunks, chunk, d)
    q, q_rot, k, k_rot, v = (t.unflatten(2, (chunks, size)) for t in (q, q_rot, k, k_rot, v))

    chunk_s = k_rot.transpose(-1, -2) @ v  # (b, h, chunks, d, d_v)
    s_before = torch.cumsum(chunk_s, dim=2)
    s_final = s_before[:, :, -1]
    s_before = torch.cat((torch.zeros_like(s_before[:, :, :1]), s_before[:, :, :-1]), dim=2)  # exclusive: shift
    # Denominator: φ(q_i)·Σ_{j≤i} φ(k_j) needs only a running sum of k: within the chunk, plus all earlier chunks.
    k_within = torch.cumsum(k, dim=3)  # (b, h, chunks, chunk, d)
    z_chunks = torch.cumsum(k_within[:, :, :, -1], dim=2)  # (b, h, chunks, d), inclusive
    z_final = z_chunks[:, :, -1]
    z_before = torch.cat((torch.zeros_like(z_chunks[:, :, :1]), z_chunks[:, :, :-1]), dim=2)
    if state is not None:
        s_past, z_past = state
        s_before = s_before + s_past[:, :, None]
        z_before = z_before + z_past[:, :, None]
        s_final, z_final = s_final + s_past, z_final + z_past

    scores = torch.tril(q_rot @ k_rot.transpose(-1, -2))  # (b, h, chunks, chunk, chunk), keys ≤ query
    numerator = scores @ v + q_rot @ s_before
    denominator = (q * (k_within + z_before.unsqueeze(3))).sum(dim=-1, keepdim=True)
    out = (numerator / (denominator + eps)).flatten(2, 3)[:, :, :seq]
    return out, (s_final, z_final)


# --- Packed rows: each sequence with its own sums -------------------------------------------------------------------


@torch.compiler.disable  # the split sizes are host lengths: torch.compile runs this eagerly (a graph break)
def per_sequence_linear_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None,
    packed: PackedBatch,
) -> torch.Tensor:
    """Packed rows laid end to end (1, heads, total, head_dim) in, (1, total, heads, head_dim) out: each sequence of
    `packed` alone, so no state leaks into the next. `position_embeddings` (1, total, dim).

    The row is split once (a slice per sequence would fill a zero tensor of the whole row each in backward)."""
    lengths = list(packed.sequence_lengths())
    rotations = [None] * len(lengths)
    if position_embeddings is not None:
        rotations = list(zip(*(t.split(lengths, dim=1) for t in position_embeddings)))
    layout = module.config.rope_parameters["pair_layout"]
    pieces = []
    for q, k, v, rotation in zip(*(t.split(lengths, dim=2) for t in (query, key, value)), rotations):
        with torch.autocast(device_type=query.device.type, enabled=False):
            q, q_rot, k, k_rot, v = _features(q, k, v, rotation, None, layout, module.rotary_value)
            if module.is_causal:
                out = causal_linear_attention(q, q_rot, k, k_rot, v)[0]
            else:
                out = bidirectional_linear_attention(q, q_rot, k, k_rot, v)
        pieces.append(out.to(query.dtype).transpose(1, 2))
    return torch.cat(pieces, dim=1)


# --- The running state: a cache layer of its own, on transformers' public cache-layer API ---------------------------


class LinearAttentionState(DynamicLayer):
    """A cache layer holding linear attention's running state instead of keys and values.

    The state [S | z] (batch, heads, d, d_v + 1) is replaced at every step and the tokens it has seen are counted.
    `keys` and `values` both name the state, so the inherited batch operations (beam search's reordering, repeat and
    select: batch first), offloading and reset act on it. Cropping cannot undo a sum."""

    is_croppable = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seen = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        raise TypeError("A linear-attention cache layer holds a running state, not keys and values: use `write`.")

    def write(self, state: torch.Tensor, new_tokens: int) -> None:
        """Replace the state by the one after `new_tokens` more tokens."""
        self.keys = self.values = state
        self.device, self.is_initialized = state.device, True
        self.seen += new_tokens

    def get_seq_length(self) -> int:
        return self.seen if self.is_initialized else 0

    def reset(self) -> None:
        super().reset()
        self.seen = 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise ValueError(
                "A linear-attention cache keeps sums over the past, which cannot be cropped (assisted or "
                "speculative decoding needs attention_type='softmax')."
            )

    def state(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(S, z), or None before the first token."""
        if self.get_seq_length() == 0:
            return None
        return self.values[..., :-1], self.values[..., -1]


def use_state_layers(cache: Cache, num_layers: int) -> None:
    """Give each of the first `num_layers` layers of `cache` a `LinearAttentionState` (called once per forward by the
    model): an empty plain layer (what `generate` and `DynamicCache()` make) is replaced; anything else is refused."""
    for layer_idx in range(num_layers):
        if layer_idx == len(cache.layers):
            cache.layers.append(LinearAttentionState())
            continue
        layer = cache.layers[layer_idx]
        if isinstance(layer, LinearAttentionState):
            continue
        if type(layer) is not DynamicLayer or layer.get_seq_length() != 0:
            raise TypeError(
                f"Linear attention keeps its running state in a cache layer of its own; got a filled or "
                f"{type(layer).__name__} layer {layer_idx}. Pass a DynamicCache (new, or one this model filled), or none."
            )
        cache.layers[layer_idx] = LinearAttentionState()


def _read_state(cache: Cache, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    return cache.layers[layer_idx].state()


def _write_state(cache: Cache, layer_idx: int, state: tuple[torch.Tensor, torch.Tensor], new_tokens: int) -> None:
    s, z = state
    cache.layers[layer_idx].write(torch.cat((s, z.unsqueeze(-1)), dim=-1), new_tokens)
