"""Linear attention with RoPE in the numerator only (RoFormer §3.4.3).

out_i = Σ_j (R_i φ(q_i))ᵀ (R_j φ(k_j)) v_j / Σ_j φ(q_i)ᵀ φ(k_j),  φ = elu + 1 (the unrotated denominator stays positive).

Sums over keys of d×d outer products cost O(N·d²), not O(N²·d): bidirectional, one state S = Σ_j R_j φ(k_j) v_jᵀ and
z = Σ_j φ(k_j); causal, chunks with exact masked products inside and the running (S, z) across (memory O(N·d));
generation, (S, z) per layer is the whole past (`LinearAttentionState`, O(d²) a step). Sums run in float32.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers.cache_utils import Cache, DynamicLayer

from .packing import PackedBatch
from .rope import apply_rotary, rotate_for_scores

#: Queries per chunk (causal): (C×C) products grow with C, per-chunk (d×d) states shrink; 64 ≈ head_dim balances them.
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
    """(batch, heads, seq, head_dim) in, (batch, seq, heads, head_dim) out. `module` supplies `config`, `rotary_value`,
    `is_causal` and `layer_idx`; `attention_mask` (batch, past + seq) drops padded keys from both sums; a `cache`
    (causal only) holds the layer's running state."""
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(
            "Linear attention takes a 2D (batch, seq) padding mask only; a 4D mask (e.g. the UniLM mask) needs "
            "attention_type='softmax'."
        )
    if cache is not None and not module.is_causal:
        raise ValueError("A cache with linear attention needs a causal (decoder) model.")
    layout = module.config.rope_parameters["pair_layout"]
    with torch.autocast(device_type=query.device.type, enabled=False):  # φ(q), R φ(q), φ(k), R φ(k), v in float32
        q, k, v = feature_map(query.float()), feature_map(key.float()), value.float()
        q_rot, k_rot = q, k  # an absolute (or no) position encoding: nothing to rotate
        if position_embeddings is not None:
            cos, sin = (t.float() for t in position_embeddings)
            if module.rotary_value:
                v = apply_rotary(v, cos, sin, layout)
        if attention_mask is not None:  # padded keys dropped: the last `seq` columns are this call's tokens
            k = k * attention_mask[:, None, -k.shape[2] :, None].to(k.dtype)
        if position_embeddings is not None:
            q_rot, k_rot = rotate_for_scores(q, cos, sin, layout), rotate_for_scores(k, cos, sin, layout)
        if not module.is_causal:  # every query sees every key: one (d × d_v) state for the whole sequence
            state = k_rot.transpose(-1, -2) @ v  # (b, h, d, d_v)
            out = (q_rot @ state) / (q @ k.sum(dim=2, keepdim=True).transpose(-1, -2) + eps)
        else:
            layer = cache.layers[module.layer_idx] if cache is not None else None
            state = layer.state() if layer is not None else None
            out, state = causal_linear_attention(q, q_rot, k, k_rot, v, state, eps)
            if layer is not None:
                layer.write(state, q.shape[2])
    return out.to(query.dtype).transpose(1, 2).contiguous()


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
    """Query i sees keys ≤ i and `state` (S, z): S = Σ R φ(k) vᵀ (b, h, d, d_v), z = Σ φ(k) (b, h, d) over earlier
    tokens. Chunks run as batched matmuls: an exclusive prefix sum of their (S, z) gives what each sees from before.
    Returns the output and the final state."""
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


@torch.compiler.disable  # the split sizes are host lengths: torch.compile runs this eagerly (a graph break)
def per_sequence_linear_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None,
    packed: PackedBatch,
) -> torch.Tensor:
    """(1, heads, total, head_dim) rows end to end in, (1, total, heads, head_dim) out: each sequence alone, so no
    state leaks into the next; `position_embeddings` (1, total, dim). One split (backward: one concatenation)."""
    lengths = (
        packed.lengths or torch.unique_consecutive(packed.sequence_ids.reshape(-1), return_counts=True)[1].tolist()
    )
    rotations = [None] * len(lengths)
    if position_embeddings is not None:
        rotations = zip(*(t.split(lengths, dim=1) for t in position_embeddings))
    pieces = zip(*(t.split(lengths, dim=2) for t in (query, key, value)), rotations)
    return torch.cat([linear_attention_forward(module, q, k, v, rotation, None) for q, k, v, rotation in pieces], 1)


class LinearAttentionState(DynamicLayer):
    """A cache layer holding linear attention's state [S | z] (batch, heads, d, d_v + 1), replaced at every step,
    and the tokens it has seen. `keys` and `values` both name it, so the inherited batch operations (beam search's
    reordering, repeat, select), offloading and reset act on it. Cropping cannot undo a sum."""

    is_croppable = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seen = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        raise TypeError("A linear-attention cache layer holds a running state, not keys and values: use `write`.")

    def write(self, state: tuple[torch.Tensor, torch.Tensor], new_tokens: int) -> None:  # (S, z) after new tokens
        self.keys = self.values = torch.cat((state[0], state[1].unsqueeze(-1)), dim=-1)
        self.device, self.is_initialized = self.values.device, True
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

    def state(self) -> tuple[torch.Tensor, torch.Tensor] | None:  # (S, z), None before the first token
        if self.get_seq_length() == 0:
            return None
        return self.values[..., :-1], self.values[..., -1]


def use_state_layers(cache: Cache, num_layers: int) -> None:
    """`LinearAttentionState` layers in `cache`: empty plain layers (`generate`'s) are replaced, others refused."""
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
