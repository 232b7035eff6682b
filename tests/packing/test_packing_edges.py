"""packing.py unit by unit: the description from each input and its checks, end_to_end, unpack, per-sequence SDPA."""

import pytest
import torch
from torch import tensor
from torch.nn import functional as F

from roformer_ext.packing import PackedBatch, describe_packed_batch, end_to_end, per_sequence_sdpa, unpack

CROSSING = ([3, 4, 8], [3, 7, 5], [5, 4, 6], [2, 3, 6, 4], [5, 10])  # rows of 5: the first or second crossed


def cu(lengths: list[int], dtype: torch.dtype = torch.int32) -> torch.Tensor:
    bounds = [0]
    for length in lengths:
        bounds.append(bounds[-1] + length)
    return torch.tensor(bounds, dtype=dtype)


def ids_from_lengths(lengths: list[int], rows: int) -> list[list[int]]:
    flat = [index for index, length in enumerate(lengths) for _ in range(length)]
    seq = len(flat) // rows
    return [flat[row * seq : (row + 1) * seq] for row in range(rows)]


def describe(batch, seq, attention_mask=None, position_ids=None, past_length=0, **given):
    return describe_packed_batch(batch, seq, attention_mask, position_ids, past_length, **given)


def assert_description(packed: PackedBatch, lengths: list[int], rows: int) -> None:
    assert packed.sequence_ids.dtype == torch.long
    assert packed.sequence_ids.tolist() == ids_from_lengths(lengths, rows)
    assert packed.cu_seq_lens.dtype == torch.int32 and packed.cu_seq_lens.tolist() == cu(lengths).tolist()
    assert packed.lengths == tuple(lengths) and packed.max_length == max(lengths)
    assert packed.num_sequences == len(lengths)


@pytest.mark.parametrize(
    ("batch", "seq", "given", "lengths"),
    [
        (2, 5, dict(cu_seq_lens_q=cu([2, 3, 4, 1])), [2, 3, 4, 1]),
        (2, 5, dict(cu_seq_lens_q=cu([5, 5])), [5, 5]),
        (2, 5, dict(cu_seq_lens_q=cu([1, 4, 1, 4])), [1, 4, 1, 4]),
        (1, 4, dict(cu_seq_lens_q=cu([1, 1, 2])), [1, 1, 2]),  # one-token sequences
        (1, 6, dict(cu_seq_lens_q=cu([2, 4], torch.int64), cu_seq_lens_k=cu([2, 4])), [2, 4]),
        (2, 5, dict(cu_seq_lens_q=cu([2, 3, 5]), attention_mask=torch.ones(2, 5, dtype=torch.long)), [2, 3, 5]),
        (2, 5, dict(cu_seq_lens_q=cu([2, 3, 5]), attention_mask=torch.zeros(2, 1, 5, 5)), [2, 3, 5]),  # caller's 4D
        (3, 5, dict(cu_seq_lens_q=cu([5, 5, 5])), [5, 5, 5]),
        (3, 5, dict(cu_seq_lens_q=cu([2, 3, 4, 1, 5])), [2, 3, 4, 1, 5]),
        (1, 4, dict(cu_seq_lens_q=cu([1, 3]), past_length=torch.tensor(0)), [1, 3]),  # a tensor 0: no cache
        (1, 4, dict(seq_idx=torch.tensor([[0, 1, 1, 1]]), past_length=torch.tensor(0)), [1, 3]),
        (2, 5, dict(seq_idx=torch.tensor([[0, 0, 1, 1, 1], [3, 4, 4, 4, 4]])), [2, 3, 1, 4]),  # any labels per row
        (3, 4, dict(seq_idx=torch.tensor([[0, 0, 0, 5]], dtype=torch.int32)), [3, 1, 3, 1, 3, 1]),  # once for all
        (1, 4, dict(seq_idx=torch.tensor([[2, 2, 2, 2]])), [4]),
        (2, 5, dict(position_ids=torch.tensor([[0, 1, 2, 0, 1], [0, 1, 0, 1, 2]])), [3, 2, 2, 3]),
        (2, 5, dict(position_ids=torch.tensor([[0, 1, 2, 3, 4], [0, 1, 0, 1, 2]])), [5, 2, 3]),  # a row unpacked
        (2, 5, dict(position_ids=torch.tensor([[0, 1, 2, 3, 0], [0, 0, 0, 1, 2]])), [4, 1, 1, 1, 3]),
        (2, 5, dict(position_ids=torch.tensor([[3, 4, 0, 1, 2], [0, 7, 8, 0, 5]])), [2, 3, 3, 2]),  # a jump: no start
        (2, 4, dict(position_ids=torch.tensor([[0, 1, 0, 1]])), [2, 2, 2, 2]),  # once for every row
        (2, 3, dict(position_ids=torch.tensor([[0, 1, 2], [0, 1, 0]])), [3, 2, 1]),  # a restart in the last column
    ],
)
def test_each_explicit_input_describes_the_sequences(batch, seq, given, lengths):
    assert_description(describe(batch, seq, **given), lengths, batch)


@pytest.mark.parametrize(
    "given",
    [
        dict(position_ids=torch.tensor([[0, 1, 2, 3], [0, 1, 5, 6]])),  # no restart in any row: ordinary
        dict(position_ids=None),
        dict(position_ids=torch.tensor([[0, 1, 0, 1], [0, 1, 0, 1]]), attention_mask=torch.ones(2, 4)),
        dict(position_ids=torch.tensor([[0, 1, 0, 1], [0, 1, 0, 1]]), past_length=1),
        dict(position_ids=torch.tensor([[0, 1, 0, 1], [0, 1, 0, 1]]), past_length=torch.tensor(3)),
        dict(position_ids=torch.tensor([[[0, 1, 0, 1]], [[0, 1, 0, 1]]])),  # not (rows, seq): multi-axis / odd
        dict(position_ids=torch.tensor([0, 1, 0, 1])),
        dict(position_ids=torch.tensor([[0, 1, 0], [0, 1, 0]])),  # not this call's length
        dict(position_ids=torch.tensor([[0, 1, 0, 1]] * 3)),  # neither one row nor every row
    ],
)
def test_positions_that_cannot_mark_sequences_give_an_ordinary_batch(given):
    assert describe(2, 4, **given) is None


T, V = TypeError, ValueError


@pytest.mark.parametrize(
    ("shape", "given", "error", "message"),
    [
        ((1, 4), dict(cu_seq_lens_q=tensor([0.0, 2.0, 4.0])), T, r"integer tensor .* torch.float32 of shape \(3"),
        ((1, 4), dict(cu_seq_lens_q=tensor([False, True])), T, r"got torch.bool of shape \(2,\)"),
        ((1, 4), dict(cu_seq_lens_q=tensor([[0, 2, 4]])), T, r"of shape \(1, 3\)\. Use cu_seq_lens_q"),
        ((1, 4), dict(cu_seq_lens_q=tensor([], dtype=torch.int32)), V, r"must start at 0 .*; got \[\]"),
        ((1, 4), dict(cu_seq_lens_q=tensor([1, 2, 4])), V, r"must start at 0 .*; got \[1, 2, 4\]"),
        ((1, 4), dict(cu_seq_lens_q=tensor([0, 2, 2, 4])), V, r"\[0, 2, 2, 4\] gives sequence 1 length 0"),
        ((1, 4), dict(cu_seq_lens_q=tensor([0, 0, 4])), V, r"gives sequence 0 length 0"),
        ((1, 4), dict(cu_seq_lens_q=tensor([0, 4, 4])), V, r"gives sequence 1 length 0"),
        ((1, 4), dict(cu_seq_lens_q=tensor([0, 3, 2, 4])), V, r"gives sequence 1 length -1"),
        ((1, 4), dict(cu_seq_lens_q=tensor([0, 2, 3])), V, r"ends at 3 but the batch holds 4 tokens"),
        ((1, 4), dict(cu_seq_lens_q=tensor([0, 2, 5])), V, r"ends at 5 but the batch holds 4 tokens"),
        ((1, 6), dict(cu_seq_lens_q=cu([2, 4]), cu_seq_lens_k=cu([4, 2])), V, r"_k \[0, 4, 6\] differs .*\[0, 2, 6"),
        ((1, 4), dict(cu_seq_lens_q=cu([2, 2]), attention_mask=tensor([[1, 1, 1, 0]])), V, "padding inside"),
        ((1, 4), dict(cu_seq_lens_q=cu([2, 2]), past_length=1), V, "cannot continue a KV cache"),
        ((1, 4), dict(cu_seq_lens_q=cu([2, 2]), past_length=tensor(2)), V, "cannot continue a KV cache"),
        ((1, 4), dict(seq_idx=tensor([[0, 0, 1, 1]]), past_length=1), V, "cannot continue a KV cache"),
        ((1, 4), dict(seq_idx=torch.zeros(1, 3, dtype=torch.long)), V, r"shape \(1, 3\); .* = \(1, 4\)"),
        ((1, 4), dict(seq_idx=torch.zeros(4, dtype=torch.long)), V, r"seq_idx has shape \(4,\)"),
        ((1, 4), dict(seq_idx=torch.zeros(1, 4)), T, r"seq_idx must hold integers .*; got torch.float32"),
        ((2, 4), dict(seq_idx=tensor([[0, 0, 1, 1], [0, 1, 0, 1]])), V, r"not decrease.*\[0, 1, 0, 1\]\]"),
        # three rows of 5: each row boundary (5 and 10) must be a sequence end
        *[((3, 5), dict(cu_seq_lens_q=cu(n)), V, r"one row into the next \(rows of 5 tokens\)") for n in CROSSING],
    ],
)
def test_inconsistent_packing_inputs_are_refused(shape, given, error, message):
    with pytest.raises(error, match=message):
        describe(*shape, **given)


@pytest.mark.parametrize("with_cu", [True, False])
@pytest.mark.parametrize("with_host_lengths", [True, False])
def test_the_description_methods_agree_whatever_it_holds(with_cu, with_host_lengths):
    lengths = [3, 2, 1, 4, 2]  # two rows of 6
    packed = PackedBatch(
        torch.tensor(ids_from_lengths(lengths, 2)),
        cu(lengths) if with_cu else None,
        tuple(lengths) if with_host_lengths else None,
    )
    assert packed.num_sequences == 5
    assert packed.first_tokens().dtype == torch.long and packed.first_tokens().tolist() == [0, 3, 5, 6, 10]
    assert packed.positions().tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]]
    expected = {}
    if with_cu:
        expected.update(cu_seq_lens_q=packed.cu_seq_lens, cu_seq_lens_k=packed.cu_seq_lens)
    if with_host_lengths:
        expected.update(max_length_q=4, max_length_k=4)
    assert packed.attention_kwargs() == expected
    # a row whose first label continues the previous row's last still starts a sequence (a hand-made description)
    continuing = PackedBatch(torch.tensor([[0, 0, 1], [1, 1, 2]]), None, None)
    assert continuing.positions().tolist() == [[0, 1, 0], [0, 1, 0]] and continuing.num_sequences == 3
    assert continuing.first_tokens().tolist() == [0, 2, 3, 5] and continuing.max_length is None
    meta = PackedBatch(torch.tensor([[0, 0, 1], [2, 2, 2]]).to("meta"), None, None)  # built where the ids live
    assert meta.positions().device.type == "meta" and meta.positions().shape == (2, 3)


@pytest.mark.parametrize("seq_dim", [1, 2, 3])
def test_end_to_end_lays_the_rows_along_the_sequence_dimension(seq_dim):
    shape = [3, 2, 2, 2]
    shape[seq_dim] = 4
    tensor = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).view(shape)
    expected = torch.cat([tensor[row : row + 1] for row in range(3)], dim=seq_dim)
    assert torch.equal(end_to_end(tensor, seq_dim), expected)
    one_row = torch.randn(1, 2, 5, 3)
    assert end_to_end(one_row, 2) is one_row


def test_unpack_gives_the_padded_layout():
    lengths = [2, 4, 1]
    packed = torch.arange(7 * 2, dtype=torch.float32).view(1, 7, 2)
    expected = torch.full((3, 4, 2), -5.0)
    start = 0
    for index, length in enumerate(lengths):
        expected[index, :length] = packed[0, start : start + length]
        start += length
    assert torch.equal(unpack(packed, cu(lengths), fill=-5.0), expected)
    assert torch.equal(unpack(packed[..., 0], cu([7]), fill=0.0), packed[..., 0])


def traced(monkeypatch) -> None:
    """What torch.compile's tracing sees (`torch.compiler.is_compiling()` true), run eagerly."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)


@pytest.mark.parametrize("given", [
    dict(cu_seq_lens_q=cu([2, 3, 4, 1])), dict(seq_idx=tensor([[0, 0, 1, 1, 1], [3, 4, 4, 4, 4]])),
    dict(seq_idx=tensor([[0, 0, 1, 1, 1]])), dict(position_ids=tensor([[0, 1, 2, 0, 1], [0, 1, 0, 1, 2]])),
    dict(position_ids=tensor([[0, 1, 0, 1, 2]])),
])  # fmt: skip
def test_traced_description_gives_the_eager_sequences(given, monkeypatch):
    eager = describe(2, 5, **given)
    traced(monkeypatch)
    packed = describe(2, 5, **given)
    assert packed.sequence_ids.tolist() == eager.sequence_ids.tolist()
    assert packed.lengths is None and packed.max_length is None  # not on the host when traced
    if "cu_seq_lens_q" in given:
        assert packed.cu_seq_lens.tolist() == eager.cu_seq_lens.tolist()
    else:
        assert packed.cu_seq_lens is None
    assert packed.num_sequences == eager.num_sequences
    assert packed.positions().tolist() == eager.positions().tolist()


def test_traced_description_of_positions_without_a_restart(monkeypatch):
    """Traced: a row without a restart is one sequence; a mask or cache gives an ordinary batch; no host checks."""
    traced(monkeypatch)
    packed = describe(2, 4, position_ids=torch.tensor([[0, 1, 2, 3], [0, 1, 0, 1]]))
    assert packed.sequence_ids.tolist() == [[0, 0, 0, 0], [1, 1, 2, 2]]
    assert describe(2, 4, position_ids=torch.tensor([[0, 1, 2, 3]])).sequence_ids.tolist() == [[0] * 4, [1] * 4]
    positions = torch.tensor([[0, 1, 0, 1]])
    assert describe(2, 4, position_ids=positions, attention_mask=torch.ones(2, 4)) is None
    assert describe(2, 4, position_ids=positions, past_length=2) is None
    assert describe(2, 4) is None
    meta = describe(2, 5, cu_seq_lens_q=cu([2, 3, 4, 1]).to("meta"))  # no host checks; made on the lengths' device
    assert meta.sequence_ids.device.type == "meta" and meta.sequence_ids.shape == (2, 5)


# --- per_sequence_sdpa -------------------------------------------------------------------------------------------


def packed_qkv(lengths, heads: int = 4, dim: int = 8, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """q, k, v of one packed row, (1, heads, total, head_dim), and its cu_seq_lens."""
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, sum(lengths), dim, generator=generator) for _ in range(3))
    return q, k, v, cu(lengths)


@pytest.mark.parametrize(("is_causal", "scaling"), [(False, None), (True, None), (False, 0.3)])
@pytest.mark.parametrize("lengths", [(5, 9, 5, 3, 9, 5), (4, 4, 4, 7, 4)], ids=["apart", "side-by-side"])
def test_per_sequence_sdpa_runs_each_sequence_as_alone(lengths, is_causal, scaling, monkeypatch):
    """One SDPA call per sequence, each as alone (causal or not, default or given scale); dropout passed on."""
    q, k, v, cu_seq_lens = packed_qkv(lengths)
    bounds = cu_seq_lens.tolist()
    alone = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        scores = q[0, :, a:b] @ k[0, :, a:b].transpose(-1, -2) * (scaling or 8**-0.5)
        scores = scores.masked_fill(torch.ones(b - a, b - a).triu(1).bool(), -torch.inf) if is_causal else scores
        alone.append((scores.softmax(-1) @ v[0, :, a:b]).transpose(0, 1))
    sdpa, calls = F.scaled_dot_product_attention, []

    def counting_sdpa(query, *args, **kwargs):
        calls.append(query.shape[-2])
        return sdpa(query, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting_sdpa)
    given = dict(is_causal=is_causal, scaling=scaling, cu_seq_lens_q=cu_seq_lens)
    out, weights = per_sequence_sdpa(None, q, k, v, None, **given)
    assert weights is None and out.shape == (1, sum(lengths), 4, 8) and out.is_contiguous()
    assert calls == list(lengths)
    for piece, reference in zip(torch.split(out[0], lengths), alone):
        torch.testing.assert_close(piece, reference, rtol=1e-5, atol=1e-5)
    dropped, _ = per_sequence_sdpa(None, q, k, v, None, dropout=1.0, **given)
    assert torch.equal(dropped, torch.zeros_like(dropped))


def test_per_sequence_sdpa_lays_several_rows_end_to_end():
    """Two rows, each packed: cu_seq_lens counts over the rows end to end; the output comes back per row."""
    q, k, v, cu_seq_lens = packed_qkv((5, 7, 4, 8))  # rows of 12: (5, 7) and (4, 8)
    q2, k2, v2 = (t.transpose(1, 2).reshape(2, 12, 4, 8).transpose(1, 2) for t in (q, k, v))  # (2, heads, 12, d)
    out, _ = per_sequence_sdpa(None, q2, k2, v2, None, cu_seq_lens_q=cu_seq_lens)
    reference, _ = per_sequence_sdpa(None, q, k, v, None, cu_seq_lens_q=cu_seq_lens)
    assert out.shape == (2, 12, 4, 8)
    torch.testing.assert_close(out.reshape(1, 24, 4, 8), reference, rtol=0, atol=0)


def test_per_sequence_sdpa_rejects_what_is_not_one_packed_row_set():
    q, k, v, cu_seq_lens = packed_qkv((5, 9, 5, 3, 9, 5))
    with pytest.raises(ValueError, match=r"needs cu_seq_lens_q .* got query \(2, 4, 36, 8\)"):
        per_sequence_sdpa(None, q.expand(2, -1, -1, -1), k, v, None, cu_seq_lens_q=cu_seq_lens)
    with pytest.raises(ValueError, match=r"key \(1, 4, 72, 8\)"):
        per_sequence_sdpa(None, q, torch.cat([k, k], dim=2), v, None, cu_seq_lens_q=cu_seq_lens)
    with pytest.raises(ValueError, match="needs cu_seq_lens_q"):
        per_sequence_sdpa(None, q, k, v, None)
