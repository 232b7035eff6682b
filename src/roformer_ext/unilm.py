"""RoFormer-Sim's UniLM sequence-to-sequence attention mask, as a 4D boolean mask the models accept."""

from __future__ import annotations

import torch


def unilm_attention_mask(token_type_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.BoolTensor:
    """Return a (batch, 1, seq, seq) mask, True where query i may attend to key j.

    UniLM (bert4keras `application='unilm'`, used by RoFormer-Sim to generate similar sentences) lets key j
    be seen from query i iff cumsum(segment)[j] <= cumsum(segment)[i]: the source (segment 0) attends
    bidirectionally to itself, each target token (segment 1) sees the whole source and the target tokens up
    to and including itself. Keys where `attention_mask` is 0 (padding) are hidden from every query; padded
    queries keep their rows (they are computed and ignored, as in the original).
    """
    if token_type_ids.dim() != 2:
        raise ValueError(f"token_type_ids must be (batch, seq), got shape {tuple(token_type_ids.shape)}.")
    order = torch.cumsum(token_type_ids.long(), dim=1)  # (batch, seq)
    allowed = order[:, None, :] <= order[:, :, None]  # (batch, query, key)
    if attention_mask is not None:
        if attention_mask.shape != token_type_ids.shape:
            raise ValueError(
                f"attention_mask shape {tuple(attention_mask.shape)} differs from token_type_ids "
                f"shape {tuple(token_type_ids.shape)}; both must be (batch, seq)."
            )
        allowed = allowed & attention_mask.bool()[:, None, :]
    return allowed[:, None]  # (batch, 1, query, key)


__all__ = ["unilm_attention_mask"]
