"""Packed (padding-free) rows, as transformers' `DataCollatorWithFlattening` builds: boundaries from explicit inputs
only, never from a forward jump in positions. With SDPA each sequence attends alone (Σ len², not total², no mask):
torch's varlen flash kernel on CUDA, else one SDPA call per sequence."""

from dataclasses import dataclass

import torch
from torch.nn import functional as F
from torch.nn.attention.varlen import varlen_attn


@dataclass(frozen=True)
class PackedBatch:
    """Where each packed sequence lies, made once per forward by `describe_packed_batch`. The rows count end to end
    (flash attention's varlen convention): sequence indices and `cu_seq_lens` run over all rows."""

    sequence_ids: torch.Tensor  # (rows, seq) long: each token's sequence, 0 .. sequences - 1
    cu_seq_lens: torch.Tensor | None  # (sequences + 1,) int32: 0, len0, len0 + len1, ...; None when traced without
    lengths: tuple[int, ...] | None  # on the host; None when traced (torch.compile)

    @property
    def max_length(self) -> int | None:
        return max(self.lengths) if self.lengths is not None else None

    @property
    def num_sequences(self) -> int:  # from a shape where it can: no host round trip when traced
        return self.cu_seq_lens.numel() - 1 if self.cu_seq_lens is not None else int(self.sequence_ids.max()) + 1

    def attention_kwargs(self) -> dict:
        """What transformers' attention functions read for packed rows (flash varlen's names)."""
        given = dict(cu_seq_lens_q=self.cu_seq_lens, cu_seq_lens_k=self.cu_seq_lens)
        given.update(max_length_q=self.max_length, max_length_k=self.max_length)
        return {name: value for name, value in given.items() if value is not None}

    def first_tokens(self) -> torch.Tensor:
        """(sequences,) long: each sequence's first token in the rows laid end to end."""
        if self.cu_seq_lens is not None:
            return self.cu_seq_lens[:-1].long()
        return torch.nonzero(_run_starts(self.sequence_ids).reshape(-1)).squeeze(-1)

    def positions(self) -> torch.Tensor:
        """(rows, seq) positions restarting at 0 in each sequence (tensor ops only)."""
        index = torch.arange(self.sequence_ids.shape[1], device=self.sequence_ids.device).expand_as(self.sequence_ids)
        return index - torch.where(_run_starts(self.sequence_ids), index, 0).cummax(dim=1).values


def end_to_end(tensor: torch.Tensor, seq_dim: int) -> torch.Tensor:
    """(rows, ..., seq at `seq_dim`, ...) -> (1, ..., rows * seq, ...): the rows laid end to end."""
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
    """The packed rows, or None for an ordinary batch. Boundaries from, in this order: `cu_seq_lens_q` (over the rows
    end to end), `seq_idx` (per row), or text `position_ids` restarting at 0 (per row or once for all rows) with no
    mask and no cache. Traced (torch.compile), tensor ops only: the host checks run in eager calls, and a row with no
    restart is one sequence (attending as an ordinary row does)."""
    traced = torch.compiler.is_compiling()
    if not traced:
        _check_packing(batch, seq, attention_mask, past_length, cu_seq_lens_q, cu_seq_lens_k, seq_idx)
    cu_seq_lens = None
    if cu_seq_lens_q is not None:
        cu_seq_lens = cu_seq_lens_q.to(torch.int32)
        tokens = torch.arange(batch * seq, device=cu_seq_lens.device)
        sequence_ids = torch.searchsorted(cu_seq_lens[1:].long(), tokens, right=True).view(batch, seq)
    else:
        if seq_idx is not None:
            per_row = seq_idx.long().expand(batch, seq)
        elif (  # text positions (batch | 1, seq) with no mask and no cache; other shapes: as_axes_batch_seq's
            position_ids is not None
            and attention_mask is None
            and int(past_length) == 0
            and position_ids.dim() == 2
            and position_ids.shape[-1] == seq
            and position_ids.shape[0] in (1, batch)
        ):
            restarts = F.pad(position_ids[:, 1:] == 0, (1, 0))
            per_row = torch.cumsum(restarts.long(), dim=1).expand(batch, seq)
            if not traced and not bool(per_row[:, -1].any()):  # no row restarts: an ordinary batch
                return None
        else:
            return None
        sequence_ids = torch.cumsum(_run_starts(per_row).reshape(-1).long(), 0).view_as(per_row) - 1
    if traced:
        return PackedBatch(sequence_ids, cu_seq_lens, None)
    if cu_seq_lens is None:
        counts = torch.unique_consecutive(sequence_ids.reshape(-1), return_counts=True)[1]
        cu_seq_lens = F.pad(torch.cumsum(counts, 0), (1, 0)).to(torch.int32)
    return PackedBatch(sequence_ids, cu_seq_lens, tuple(torch.diff(cu_seq_lens).tolist()))


def _run_starts(per_row: torch.Tensor) -> torch.Tensor:
    """(rows, seq) bool: where a run of equal values begins in each row (every row's first token included)."""
    return F.pad(per_row[:, 1:] != per_row[:, :-1], (1, 0), value=True)


def _check_packing(batch, seq, attention_mask, past_length, cu_seq_lens_q, cu_seq_lens_k, seq_idx) -> None:
    """Inconsistent packing inputs, one clear error each (eager calls: the lengths go to the host)."""
    if int(past_length) != 0 and (cu_seq_lens_q is not None or seq_idx is not None):
        raise ValueError(
            "Packed sequences (cu_seq_lens_q / seq_idx) cannot continue a KV cache: a cached step extends one "
            "sequence per row. Decode each sequence in its own row, with an attention mask for the padding."
        )
    if cu_seq_lens_q is not None:
        cu = cu_seq_lens_q
        if cu.dtype.is_floating_point or cu.dtype == torch.bool or cu.dim() != 1:
            raise TypeError(
                "cu_seq_lens_q must be an integer tensor of shape (sequences + 1,), as DataCollatorWithFlattening "
                f"gives (int32); got {cu.dtype} of shape {tuple(cu.shape)}. Use cu_seq_lens_q.to(torch.int32)."
            )
        bounds = cu.tolist()
        if not bounds or bounds[0] != 0:
            raise ValueError(f"cu_seq_lens_q must start at 0 (0, len0, len0 + len1, ...); got {bounds}.")
        for index, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
            if end <= start:
                raise ValueError(
                    f"cu_seq_lens_q {bounds} gives sequence {index} length {end - start}: every packed sequence needs "
                    "at least one token (no [CLS] to read, no tokens to average). Drop empty sequences."
                )
        if bounds[-1] != batch * seq:
            raise ValueError(
                f"cu_seq_lens_q ends at {bounds[-1]} but the batch holds {batch * seq} tokens (batch x seq); the "
                "lengths must cover every token of the rows laid end to end."
            )
        if cu_seq_lens_k is not None and cu_seq_lens_k.tolist() != bounds:
            raise ValueError(
                f"cu_seq_lens_k {cu_seq_lens_k.tolist()} differs from cu_seq_lens_q {bounds}; in self-attention each "
                "packed sequence attends to itself: pass the same lengths (or cu_seq_lens_q alone)."
            )
        if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.bool().all()):
            raise ValueError(
                "attention_mask has padding inside a packed batch given by cu_seq_lens_q: a packed row holds only "
                "real tokens. Drop the padding (DataCollatorWithFlattening gives none), or pass seq_idx with the mask."
            )
        if any(row * seq not in bounds for row in range(1, batch)):
            raise ValueError(
                f"cu_seq_lens_q {bounds} has a sequence running from one row into the next (rows of {seq} tokens); "
                "each sequence must lie in one row."
            )
    elif seq_idx is not None:
        if seq_idx.shape not in ((batch, seq), (1, seq)):
            raise ValueError(
                f"seq_idx has shape {tuple(seq_idx.shape)}; it gives each token's sequence and must be (batch, seq) "
                f"= ({batch}, {seq})."
            )
        if seq_idx.dtype.is_floating_point:
            raise TypeError(f"seq_idx must hold integers (each token's sequence index); got {seq_idx.dtype}.")
        if bool((seq_idx[:, 1:] < seq_idx[:, :-1]).any()):
            raise ValueError(
                "seq_idx must not decrease along a row: each packed sequence is one contiguous run of tokens. Got "
                f"{seq_idx.tolist()}."
            )


def unpack(packed: torch.Tensor, cu_seq_lens: torch.Tensor, fill: float) -> torch.Tensor:
    """(1, total, ...) -> (sequences, longest, ...), padded with `fill`: the padded batch's layout."""
    pieces = torch.tensor_split(packed[0], cu_seq_lens[1:-1].tolist())
    return torch.nn.utils.rnn.pad_sequence(list(pieces), batch_first=True, padding_value=fill)


def varlen_kernel_takes(states: torch.Tensor, head_dim: int, packed: PackedBatch) -> bool:
    """Whether torch's varlen flash kernel takes this batch: CUDA of capability ≥ 8.0, fp16 / bf16 inputs (autocast's
    dtype where on), head_dim a multiple of 8 up to 256, host lengths (not traced). It has no dropout."""
    if not states.is_cuda or packed.lengths is None or head_dim % 8 or head_dim > 256:
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
    """Every packed sequence in one varlen flash call: (rows, heads, seq, d) in, (rows, seq, heads, d) out. Chosen
    by the attention plan where `varlen_kernel_takes` the batch and no attention dropout applies."""
    if dropout:
        raise ValueError("varlen_attention has no dropout: the attention plan runs such a step per sequence.")
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
    """SDPA on each packed sequence alone: (rows, heads, seq, d) in, (rows, seq, heads, d) out; `attention_mask` is
    ignored. One split of the row into 4D pieces: torch's fused CPU kernel takes only 4D (3D is 2x slower,
    benchmarks/bench_packed_attention.py), and backward is one concatenation."""
    batch, heads, seq, _ = query.shape
    if cu_seq_lens_q is None or not batch * seq == key.shape[0] * key.shape[2] == int(cu_seq_lens_q[-1]):
        raise ValueError(
            "per_sequence_sdpa needs cu_seq_lens_q (0, len0, len0 + len1, ...) covering the packed rows of query, key "
            f"and value end to end; got query {tuple(query.shape)} and key {tuple(key.shape)} (batch, heads, seq, "
            "head_dim). Pass an ordinary batch with an attention mask to the backend's own attention function."
        )
    lengths = torch.diff(cu_seq_lens_q).tolist()
    pieces = zip(*(end_to_end(t, 2).split(lengths, dim=2) for t in (query, key, value)))  # (1, heads, len, d) each
    outputs = [
        F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=is_causal, scale=scaling).transpose(1, 2)
        for q, k, v in pieces
    ]
    return torch.cat(outputs, dim=1).view(batch, seq, heads, value.shape[-1]), None  # rows back from end to end
