"""Optional fused GPU rotary kernel: liger-kernel's Triton RoPE, used when installed and the tensors are on CUDA.

It rotates q and k in one launch, in place on the projection outputs, and implements the *half* pair layout only
(pairs (i, i + d/2), reading the first half of cos/sin). An interleaved checkpoint (the original RoFormer) uses it
after `roformer_ext.conversion.pair_layout.convert_pair_layout(model, "half")`, which permutes the q/k projection
rows so the model computes the same function.

A model decides once: `rope.query_key_rotation` picks `FusedHalfPairRotation` for a half-layout layer when
`fused_rotary_installed()`, and that rotation calls `fused_half_rotate_query_key` for CUDA tensors.
Code outside a model uses the same path: `rope.FusedHalfPairRotation().query_key(query, key, cos, sin)`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


@functools.cache
def _liger_rotary() -> Callable | None:
    """liger-kernel's `liger_rotary_pos_emb(q, k, cos, sin)`, or None when it is not installed (looked up once)."""
    try:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
    except ImportError:
        return None
    return liger_rotary_pos_emb


def fused_rotary_installed() -> bool:
    """Whether a fused kernel can run on this machine at all (CUDA present, liger-kernel installed)."""
    return torch.cuda.is_available() and _liger_rotary() is not None


def fused_half_rotate_query_key(
    query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Half-layout (query, key) on CUDA rotated by the fused kernel (which must be installed).

    query/key: (batch, heads, seq, head_dim); cos/sin: (batch, seq, head_dim) as `RotaryEmbedding` returns them.
    Multi-axis rotaries give the same (cos, sin) shape, so they are covered too.
    """
    kernel = _liger_rotary()
    if kernel is None:
        raise ImportError(
            "fused_half_rotate_query_key needs liger-kernel (pip install liger-kernel); without it rotate with "
            "roformer_ext.rope.HalfPairRotation().query_key(query, key, cos, sin)."
        )
    return kernel(query, key, cos.to(query.dtype), sin.to(query.dtype))
