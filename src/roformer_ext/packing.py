"""Packed (padding-free) batches: several sequences in one row, as transformers' `DataCollatorWithFlattening` builds.

Where one sequence ends is read only from explicit inputs: `cu_seq_lens_q` (cumulative lengths, the flash-attention
convention), `seq_idx` (the index of each token's sequence), or `position_ids` that restart at 0 (the collator's
default output). A forward jump in positions (an image block, a caller's own positions) never starts a sequence.
Attention then stays inside each sequence on every backend; with SDPA the work is the sum of the sequences' own
attention, not one attention over the whole row: on CUDA one call of torch's variable-length flash kernel
(`varlen_attention`), elsewhere one SDPA call per sequence (`per_sequence_sdpa`).
"""

from dataclasses import dataclass

import torch
from torch.nn import functional as F
from torch.nn.attention.varlen import varlen_attn


@dataclass(frozen=True)
class PackedBatch:
    """Where each packed sequence lies: made once per forward by `describe_packed_batch`, read by the masks, the
    attention backends and the heads that pool per sequence.

    The rows are laid end to end (flash attention's varlen convention): `cu_seq_lens` counts over all rows, and
    `sequence_ids` numbers the sequences over all rows too, so a sequence is one index wherever it sits.
    """

    sequence_ids: torch.Tensor  # (rows, seq) long: the index of each token's sequence
    # (sequences + 1,) int32: 0, len0, len0 + len1, ... over the rows end to end; None only when traced without it
    cu_seq_lens: torch.Tensor | None
    lengths: tuple[int, ...] | None  # each sequence's length; None when traced (torch.compile): not on the host
    max_length: int | None

    @property
    def rows(self) -> int:
        return self.sequence_ids.shape[0]

    @property
    def num_sequences(self) -> int:
        """How many sequences: from the shape of `cu_seq_lens` (no host round trip when traced)."""
        if self.cu_seq_lens is not None:
            return self.cu_seq_lens.numel() - 1
        return int(self.sequence_ids.max()) + 1

    def sequence_lengths(self) -> tuple[int, ...]:
        """Each sequence's length on the host, for the per-sequence splits."""
        if self.lengths is not None:
            return self.lengths
        return tuple(torch.unique_consecutive(self.sequence_ids.reshape(-1), return_counts=True)[1].tolist())

    def attention_kwargs(self) -> dict:
        """What transformers' attention functions read for packed rows (flash varlen: cu_seq_lens / max_length)."""
        given = dict(cu_seq_lens_q=self.cu_seq_lens, cu_seq_lens_k=self.cu_seq_lens)
        given.update(max_length_q=self.max_length, max_length_k=self.max_length)
        return {name: value for name, value in given.items() if value is not None}

    def starts(self) -> torch.Tensor:
        """(rows, seq) bool: the first token of each sequence."""
        return _run_starts(self.sequence_ids)

    def first_tokens(self) -> torch.Tensor:
        """The index of each sequence's first token in the rows laid end to end, (sequences,)."""
        if self.cu_seq_lens is not None:
            return self.cu_seq_lens[:-1].long()
        return torch.nonzero(self.starts().reshape(-1)).squeeze(-1)

    def positions(self) -> torch.Tensor:
        """(rows, seq) positions restarting at 0 in each sequence, for callers that gave none (tensor ops only)."""
        index = torch.arange(self.sequence_ids.shape[1], device=self.sequence_ids.device).expand_as(self.sequence_ids)
        start = torch.where(self.starts(), index, 0).cummax(dim=1).values
        return index - start


def end_to_end(tensor: torch.Tensor, seq_dim: int) -> torch.Tensor:
    """(rows, ..., seq at `seq_dim`, ...) -> (1, ..., rows * seq, ...): the rows laid end to end, as `cu_seq_lens`
    counts them (sequences never cross rows, so each stays whole)."""
    if tensor.shape[0] == 1:
        return tensor
    return tensor.movedim(0, seq_dim - 1).flatten(seq_dim - 1, seq_dim).unsqueeze(0)


def describe_packed_batch(
    batch: int,
    seq: int,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    past_length: int | torch.Tensor,
    cu_seq_lens_q: torch.Tensor | None = None,
    cu_seq_lens_k: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
) -> PackedBatch | None:
    """The one description of a packed batch, or None for an ordinary one; inconsistent input is one clear error.

    Sequence boundaries come only from explicit inputs, in this order: `cu_seq_lens_q` (cumulative lengths over the
    rows end to end), `seq_idx` (each token's sequence, per row), or text `position_ids` that restart at 0 (the
    collator's default output), given per row or once for every row, with no padding mask and no cache. A forward
    jump in positions never starts a sequence.
    """
    if torch.compiler.is_compiling():
        return _traced_description(batch, seq, attention_mask, position_ids, past_length, cu_seq_lens_q, seq_idx)
    if int(past_length) != 0 and (cu_seq_lens_q is not None or seq_idx is not None):
        raise ValueError(
            "Packed sequences (cu_seq_lens_q / seq_idx) cannot continue a KV cache: a cached step extends one "
            "sequence per row. Decode each sequence in its own row, with an attention mask for the padding."
        )
    if cu_seq_lens_q is not None:
        lengths = _checked_lengths(cu_seq_lens_q, "cu_seq_lens_q", batch * seq)
        if cu_seq_lens_k is not None and not torch.equal(cu_seq_lens_k.cpu().long(), cu_seq_lens_q.cpu().long()):
            raise ValueError(
                f"cu_seq_lens_k {cu_seq_lens_k.tolist()} differs from cu_seq_lens_q {cu_seq_lens_q.tolist()}; in "
                "self-attention each packed sequence attends to itself: pass the same lengths (or cu_seq_lens_q alone)."
            )
        if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.bool().all()):
            raise ValueError(
                "attention_mask has padding inside a packed batch given by cu_seq_lens_q: a packed row holds only real "
                "tokens. Drop the padding (DataCollatorWithFlattening gives none), or pass seq_idx with the mask."
            )
        ends = set(torch.cumsum(torch.tensor(lengths), 0).tolist())
        if any(row * seq not in ends for row in range(1, batch)):
            raise ValueError(
                f"cu_seq_lens_q {cu_seq_lens_q.tolist()} has a sequence running from one row into the next (rows of "
                f"{seq} tokens); each sequence must lie in one row."
            )
        sequence_ids = torch.repeat_interleave(
            torch.arange(len(lengths), device=cu_seq_lens_q.device), torch.tensor(lengths, device=cu_seq_lens_q.device)
        ).view(batch, seq)
        return _packed(sequence_ids, lengths)
    if seq_idx is not None:
        return _packed(_global_sequence_ids(seq_idx, batch, seq), None)
    per_row = _restart_counter(batch, seq, attention_mask, position_ids, past_length)
    if per_row is None or not bool(per_row[:, -1].any()):  # no row restarts: an ordinary batch
        return None
    return _packed(_numbered(per_row), None)


def _traced_description(
    batch: int,
    seq: int,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    past_length: int | torch.Tensor,
    cu_seq_lens: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
) -> PackedBatch | None:
    """Under torch.compile: the same description from tensor operations only, so tracing does not break the graph.

    The checks that need the lengths on the host run in eager calls only. Restarting positions need no decision on
    the host either: a row without a restart is one sequence, which attends as an ordinary row does.
    """
    if cu_seq_lens is not None:
        tokens = torch.arange(batch * seq, device=cu_seq_lens.device)
        sequence_ids = torch.searchsorted(cu_seq_lens[1:].long(), tokens, right=True).view(batch, seq)
        return PackedBatch(sequence_ids, cu_seq_lens, None, None)
    if seq_idx is not None:
        per_row = seq_idx.long().expand(batch, seq)
    else:
        per_row = _restart_counter(batch, seq, attention_mask, position_ids, past_length)
        if per_row is None:
            return None
    return PackedBatch(_numbered(per_row), None, None, None)


def _restart_counter(
    batch: int,
    seq: int,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    past_length: int | torch.Tensor,
) -> torch.Tensor | None:
    """(batch, seq) per-row count of restarts to 0 so far, from text positions given with no mask and no cache; None
    where positions cannot mark boundaries (multi-axis or odd shapes: as_axes_batch_seq checks those)."""
    if position_ids is None or attention_mask is not None or int(past_length) != 0 or position_ids.dim() != 2:
        return None
    if position_ids.shape[-1] != seq or position_ids.shape[0] not in (1, batch):
        return None
    restarts = torch.cat([torch.zeros_like(position_ids[:, :1], dtype=torch.bool), position_ids[:, 1:] == 0], dim=1)
    return torch.cumsum(restarts.long(), dim=1).expand(batch, seq)


def _run_starts(per_row: torch.Tensor) -> torch.Tensor:
    """(rows, seq) bool: where a run of equal values begins in each row (every row's first token included)."""
    return torch.cat([torch.ones_like(per_row[:, :1], dtype=torch.bool), per_row[:, 1:] != per_row[:, :-1]], dim=1)


def _numbered(per_row: torch.Tensor) -> torch.Tensor:
    """Per-row sequence labels (runs of equal values) -> sequence indices 0 .. sequences - 1 over all rows."""
    return torch.cumsum(_run_starts(per_row).reshape(-1).long(), 0).view_as(per_row) - 1


def _checked_lengths(cu_seq_lens: torch.Tensor, name: str, tokens: int) -> list[int]:
    if cu_seq_lens.dtype.is_floating_point or cu_seq_lens.dtype == torch.bool or cu_seq_lens.dim() != 1:
        raise TypeError(
            f"{name} must be an integer tensor of shape (sequences + 1,), as DataCollatorWithFlattening gives "
            f"(int32); got {cu_seq_lens.dtype} of shape {tuple(cu_seq_lens.shape)}. Use {name}.to(torch.int32)."
        )
    bounds = cu_seq_lens.tolist()
    if not bounds or bounds[0] != 0:
        raise ValueError(f"{name} must start at 0 (0, len0, len0 + len1, ...); got {bounds}.")
    lengths = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
    for index, length in enumerate(lengths):
        if length <= 0:
            raise ValueError(
                f"{name} {bounds} gives sequence {index} length {length}: every packed sequence needs at least one "
                "token (a zero-length sequence has no [CLS] to read and no tokens to average). Drop empty sequences."
            )
    if bounds[-1] != tokens:
        raise ValueError(
            f"{name} ends at {bounds[-1]} but the batch holds {tokens} tokens (batch x seq); the lengths must cover "
            "every token of the rows laid end to end."
        )
    return lengths


def _global_sequence_ids(per_row: torch.Tensor, batch: int, seq: int) -> torch.Tensor:
    """Per-row sequence indices (non-decreasing in each row) numbered over all rows: 0 .. sequences - 1."""
    if per_row.shape != (batch, seq) and per_row.shape != (1, seq):
        raise ValueError(
            f"seq_idx has shape {tuple(per_row.shape)}; it gives each token's sequence and must be (batch, seq) = "
            f"({batch}, {seq})."
        )
    if per_row.dtype.is_floating_point:
        raise TypeError(f"seq_idx must hold integers (each token's sequence index); got {per_row.dtype}.")
    per_row = per_row.long().expand(batch, seq)
    if bool((per_row[:, 1:] < per_row[:, :-1]).any()):
        raise ValueError(
            "seq_idx must not decrease along a row: each packed sequence is one contiguous run of tokens. Got "
            f"{per_row.tolist()}."
        )
    return _numbered(per_row)


def _packed(sequence_ids: torch.Tensor, lengths: list[int] | None) -> PackedBatch:
    if lengths is None:
        lengths = torch.unique_consecutive(sequence_ids.reshape(-1), return_counts=True)[1].tolist()
    cu_seq_lens = F.pad(torch.cumsum(torch.tensor(lengths, device=sequence_ids.device), 0), (1, 0)).to(torch.int32)
    return PackedBatch(sequence_ids, cu_seq_lens, tuple(lengths), max(lengths))


def unpack(packed: torch.Tensor, cu_seq_lens: torch.Tensor, fill: float) -> torch.Tensor:
    """(1, total, ...) -> (sequences, longest, ...), padded with `fill`: the padded batch's layout."""
    pieces = torch.tensor_split(packed[0], cu_seq_lens[1:-1].tolist())
    return torch.nn.utils.rnn.pad_sequence(list(pieces), batch_first=True, padding_value=fill)


def varlen_kernel_takes(states: torch.Tensor, head_dim: int, packed: PackedBatch) -> bool:
    """Whether torch's variable-length flash kernel (`varlen_attn`) takes this packed batch: CUDA of compute capability
    8.0 or more, fp16 / bf16 attention inputs (autocast's dtype where it is on), a head dimension that is a multiple
    of 8 up to 256 (flash attention's limits), and the lengths on the host (not traced)."""
    if not states.is_cuda or packed.max_length is None or head_dim % 8 or head_dim > 256:
        return False
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else states.dtype
    return dtype in (torch.float16, torch.bfloat16) and torch.cuda.get_device_capability(states.device) >= (8, 0)


def varlen_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool = False,
    cu_seq_lens_q: torch.Tensor | None = None,
    max_length_q: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Every packed sequence in one call of torch's variable-length flash kernel, forward and backward: (rows, heads,
    seq, d) in, (rows, seq, heads, d) out; causal (window (-1, 0)) for a decoder. The attention plan chooses it where
    `varlen_kernel_takes` the batch. The kernel has no dropout: a step with attention dropout runs per sequence."""
    if dropout > 0:
        return per_sequence_sdpa(module, query, key, value, attention_mask, dropout, scaling, is_causal, cu_seq_lens_q)
    rows, heads, seq, _ = query.shape
    device = query.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else query.dtype  # as SDPA's cast
    # (rows, heads, seq, d) -> (rows * seq, heads, d): the rows end to end, as cu_seq_lens counts them
    query, key, value = (t.transpose(1, 2).reshape(rows * seq, heads, -1).to(dtype) for t in (query, key, value))
    window = (-1, 0) if is_causal else (-1, -1)
    lengths = cu_seq_lens_q.to(query.device, torch.int32)
    output = varlen_attn(
        query, key, value, lengths, lengths, max_length_q, max_length_q, scale=scaling, window_size=window
    )
    return output.view(rows, seq, heads, -1), None


@torch.compiler.disable  # the split sizes are host lengths: torch.compile runs this eagerly (a graph break)
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
    """SDPA on each packed sequence alone: (rows, heads, seq, d) in, (rows, seq, heads, d) out.

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
    batch, heads, seq, head_dim = query.shape
    total = int(cu_seq_lens_q[-1])
    if batch * seq != total or key.shape[0] * key.shape[2] != total:
        raise ValueError(
            f"per_sequence_sdpa takes packed rows of {total} tokens in all (cu_seq_lens_q[-1]) as query, key and "
            f"value; got query {tuple(query.shape)} and key {tuple(key.shape)} (batch, heads, seq, head_dim). "
            "Pass an ordinary batch with an attention mask to the backend's own attention function instead."
        )
    query, key, value = (end_to_end(tensor, 2) for tensor in (query, key, value))  # (1, heads, total, head_dim)
    output = _split_sdpa(query, key, value, torch.diff(cu_seq_lens_q).tolist(), dropout, is_causal, scaling)
    return output.view(batch, seq, heads, value.shape[-1]), None  # rows back from end to end


def _split_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    lengths: list[int],
    dropout: float,
    is_causal: bool,
    scale: float | None,
) -> torch.Tensor:
    """(1, heads, total, d) -> (1, total, heads, d): SDPA on each `lengths` piece of the row."""
    pieces = zip(*(tensor.split(lengths, dim=2) for tensor in (query, key, value)))
    outputs = [
        F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=is_causal, scale=scale).transpose(1, 2)
        for q, k, v in pieces
    ]
    return torch.cat(outputs, dim=1)


__all__ = [
    "PackedBatch",
    "describe_packed_batch",
    "end_to_end",
    "per_sequence_sdpa",
    "unpack",
    "varlen_attention",
]
