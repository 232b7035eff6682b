"""Packed (padding-free) batches: several sequences in one row, as transformers' `DataCollatorWithFlattening` builds.

Where one sequence ends is read only from explicit inputs: `cu_seq_lens_q` (cumulative lengths, the flash-attention
convention), `seq_idx` (the index of each token's sequence), or `position_ids` that restart at 0 (the collator's
default output). A forward jump in positions (an image block, a caller's own positions) never starts a sequence.
Attention then stays inside each sequence on every backend; on CPU, SDPA runs per sequence so that the work is the sum
of the sequences' own attention, not one attention over the whole row.
"""

import torch
from torch.nn import functional as F


def packed_sequence_ids(
    position_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    past_length: int | torch.Tensor,
    cu_seq_lens: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """(batch, seq) index of each token's sequence within its row, or None when the rows are not packed.

    `position_ids` count only when the caller gave them as text positions (batch, seq), with no padding mask and no
    cache: a token at position 0 after the row's first token starts a new sequence.
    """
    if cu_seq_lens is not None:
        lengths = torch.diff(cu_seq_lens.long())
        return torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)[None]
    if seq_idx is not None:
        return seq_idx.long()
    if position_ids is None or attention_mask is not None or position_ids.dim() != 2 or int(past_length) != 0:
        return None
    starts = position_ids == 0
    starts[:, 0] = False
    if not bool(starts.any()):
        return None
    return torch.cumsum(starts.long(), dim=1)


def cumulative_lengths(sequence_ids: torch.Tensor) -> torch.Tensor:
    """cu_seq_lens (int32, sequences + 1) of a packed batch of one row: 0, len0, len0 + len1, ..."""
    if sequence_ids.shape[0] != 1:
        raise ValueError(
            f"A packed batch holds its sequences in one row (DataCollatorWithFlattening gives batch 1); got "
            f"{sequence_ids.shape[0]} rows. Pad instead, or pack everything into one row."
        )
    lengths = torch.unique_consecutive(sequence_ids[0], return_counts=True)[1]
    return F.pad(torch.cumsum(lengths, 0), (1, 0)).to(torch.int32)


def packed_row_lengths(
    position_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, kwargs: dict
) -> torch.Tensor | None:
    """cu_seq_lens of a packed one-row batch given to a head (no cache there), or None for an ordinary batch."""
    sequence_ids = packed_sequence_ids(
        position_ids, attention_mask, 0, kwargs.get("cu_seq_lens_q"), kwargs.get("seq_idx")
    )
    if sequence_ids is None:
        return None
    return kwargs.get("cu_seq_lens_q", cumulative_lengths(sequence_ids))


def positions_from_lengths(cu_seq_lens: torch.Tensor) -> torch.Tensor:
    """(1, total) positions restarting at 0 in each sequence, for callers that give only cu_seq_lens."""
    lengths = torch.diff(cu_seq_lens.long())
    starts = torch.repeat_interleave(cu_seq_lens[:-1].long(), lengths)
    return (torch.arange(int(cu_seq_lens[-1]), device=cu_seq_lens.device) - starts)[None]


def unpack(packed: torch.Tensor, cu_seq_lens: torch.Tensor, fill: float) -> torch.Tensor:
    """(1, total, ...) -> (sequences, longest, ...), padded with `fill`: the padded batch's layout."""
    pieces = torch.tensor_split(packed[0], cu_seq_lens[1:-1].tolist())
    return torch.nn.utils.rnn.pad_sequence(list(pieces), batch_first=True, padding_value=fill)


def per_sequence_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool = False,
    cu_seq_lens_q: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """SDPA on each packed sequence alone: (1, heads, total, d) in, (1, total, heads, d) out.

    The cost is Σ len² instead of total², and no (total × total) mask is built. Same signature as transformers'
    attention functions; `attention_mask` is ignored because the sequences are already apart.

    The row is split once along the sequence dimension and each sequence runs alone, still 4D: torch's fused CPU
    kernel takes only 4D inputs (3D pieces fall back to the unfused math path, 2x slower on review lengths,
    benchmarks/bench_packed_attention.py). In backward the split is one concatenation, where a slice per sequence
    fills a zero tensor of the whole row each. Batching the sequences that share a length into one call measured no
    faster on CPU than one call each, so the code stays simple.
    """
    if cu_seq_lens_q is None:
        raise ValueError("per_sequence_sdpa needs cu_seq_lens_q (0, len0, len0 + len1, ...) to find the sequences.")
    total = int(cu_seq_lens_q[-1])
    if query.shape[0] != 1 or query.shape[2] != total or key.shape[2] != total:
        raise ValueError(
            f"per_sequence_sdpa takes one packed row of {total} tokens (cu_seq_lens_q[-1]) as query, key and value; "
            f"got query {tuple(query.shape)} and key {tuple(key.shape)} (batch, heads, seq, head_dim). Pass an "
            "ordinary batch with an attention mask to the backend's own attention function instead."
        )
    lengths = torch.diff(cu_seq_lens_q).tolist()
    pieces = zip(*(tensor.split(lengths, dim=2) for tensor in (query, key, value)))  # (1, heads, length, head_dim)
    outputs = [
        F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=is_causal, scale=scaling).transpose(1, 2)
        for q, k, v in pieces
    ]
    return torch.cat(outputs, dim=1), None  # (1, total, heads, head_dim), packed order


__all__ = [
    "cumulative_lengths",
    "packed_row_lengths",
    "packed_sequence_ids", "per_sequence_sdpa", "positions_from_lengths", "unpack"]
