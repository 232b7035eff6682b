"""Linear attention with RoPE in the numerator only (RoFormer §3.4.3).

out_i = Σ_j (R_i φ(q_i))ᵀ (R_j φ(k_j)) v_j / Σ_j φ(q_i)ᵀ φ(k_j),  φ = elu + 1.

The rotation keeps the numerator relative-position aware; the denominator stays unrotated so it remains positive.
Cost is O(N·d²) instead of O(N²·d).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .rope import apply_rotary


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1: positive, so the denominator never vanishes."""
    return F.elu(x) + 1.0


def linear_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    attention_mask: torch.Tensor | None,
    past_key_values=None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """(batch, heads, seq, head_dim) in, (batch, seq, heads, head_dim) out.

    `attention_mask` is the 2D padding mask (batch, keys); padded keys are dropped from both sums.
    Causal when `module.is_causal`; with a cache, the rotated features and values of earlier tokens are kept in it.
    """
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(
            "Linear attention takes a 2D (batch, seq) padding mask only; a 4D mask (e.g. the UniLM mask) needs "
            "attention_type='softmax'."
        )
    cos, sin = position_embeddings
    layout = module.pair_layout
    q, k = feature_map(query.float()), feature_map(key.float())
    v = value.float()
    if module.rotary_value:
        v = apply_rotary(v, cos, sin, layout)
    q_rot, k_rot = apply_rotary(q, cos, sin, layout), apply_rotary(k, cos, sin, layout)
    if past_key_values is not None:
        # Cache the rotated and plain key features side by side, so a step only adds its own token.
        k_both, v = past_key_values.update(torch.cat((k_rot, k), dim=-1), v, module.layer_idx)
        k_rot, k = k_both.chunk(2, dim=-1)
    if attention_mask is not None:
        keep = attention_mask[:, None, -k.shape[2] :, None].to(k.dtype)
        k, k_rot = k * keep, k_rot * keep
    if module.is_causal:
        out = _causal(q, q_rot, k, k_rot, v, eps)
    else:
        numerator = torch.einsum("bhqd,bhde->bhqe", q_rot, torch.einsum("bhkd,bhke->bhde", k_rot, v))
        denominator = torch.einsum("bhqd,bhd->bhq", q, k.sum(dim=2))
        out = numerator / (denominator[..., None] + eps)
    return out.to(query.dtype).transpose(1, 2).contiguous()


def _causal(q, q_rot, k, k_rot, v, eps: float) -> torch.Tensor:
    """Prefix sums; queries are the last q.shape[2] of the k.shape[2] cached positions."""
    offset = k.shape[2] - q.shape[2]
    state = torch.einsum("bhkd,bhke->bhkde", k_rot, v).cumsum(dim=2)[:, :, offset:]
    normaliser = k.cumsum(dim=2)[:, :, offset:]
    numerator = torch.einsum("bhqd,bhqde->bhqe", q_rot, state)
    denominator = (q * normaliser).sum(-1)
    return numerator / (denominator[..., None] + eps)
