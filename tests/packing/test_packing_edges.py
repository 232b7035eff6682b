"""packing.py's edges, unit by unit (found by the mutation check, docs/testing.md): the packed-batch description from
each explicit input, its error checks one at a time, the description's own methods, and the end-to-end layout.

Each expected value is written out by hand or built by a plain Python loop over the lengths, independent of the code.
"""

import re

import pytest
import torch

from roformer_ext import packing
from roformer_ext.packing import PackedBatch, describe_packed_batch, end_to_end, per_sequence_sdpa, unpack


def cu(lengths: list[int], dtype: torch.dtype = torch.int32) -> torch.Tensor:
    bounds = [0]
    for length in lengths:
        bounds.append(bounds[-1] + length)
    return torch.tensor(bounds, dtype=dtype)


def ids_from_lengths(lengths: list[int], rows: int) -> list[list[int]]:
    flat = [index for index, length in enumerate(lengths) for _ in range(length)]
    seq = len(flat) // rows
    return [flat[row * seq : (row + 1) * seq] for row in range(rows)]


def describe(batch, seq, **given):
    given.setdefault("attention_mask", None)
    given.setdefault("position_ids", None)
    given.setdefault("past_length", 0)
    return describe_packed_batch(batch, seq, **given)


def assert_description(packed: PackedBatch, lengths: list[int], rows: int) -> None:
    assert packed.sequence_ids.dtype == torch.long
    assert packed.sequence_ids.tolist() == ids_from_lengths(lengths, rows)
    assert packed.cu_seq_lens.dtype == torch.int32
    assert packed.cu_seq_lens.tolist() == cu(lengths).tolist()
    assert packed.lengths == tuple(lengths) and packed.max_length == max(lengths)


@pytest.mark.parametrize("lengths", [[2, 3, 4, 1], [5, 5], [1, 4, 1, 4]])
def test_cu_seq_lens_give_each_sequence_over_the_rows(lengths):
    packed = describe(2, 5, cu_seq_lens_q=cu(lengths))
    assert_description(packed, lengths, 2)
    assert packed.rows == 2 and packed.num_sequences == len(lengths)


def test_cu_seq_lens_in_int64_and_the_same_k_are_accepted():
    packed = describe(1, 6, cu_seq_lens_q=cu([2, 4], torch.int64), cu_seq_lens_k=cu([2, 4], torch.int32))
    assert_description(packed, [2, 4], 1)


def test_cu_seq_lens_k_that_differ_are_refused():
    with pytest.raises(ValueError, match=r"cu_seq_lens_k \[0, 4, 6\] differs from cu_seq_lens_q \[0, 2, 6\]"):
        describe(1, 6, cu_seq_lens_q=cu([2, 4]), cu_seq_lens_k=cu([4, 2]))


def test_a_full_2d_mask_and_a_4d_mask_pass_with_cu_seq_lens():
    full = torch.ones(2, 5, dtype=torch.long)
    assert_description(describe(2, 5, cu_seq_lens_q=cu([2, 3, 5]), attention_mask=full), [2, 3, 5], 2)
    four_d = torch.zeros(2, 1, 5, 5)  # a 4D mask is the caller's own; only a 2D padding mask is checked here
    assert_description(describe(2, 5, cu_seq_lens_q=cu([2, 3, 5]), attention_mask=four_d), [2, 3, 5], 2)
    with pytest.raises(ValueError, match="padding inside a packed batch"):
        describe(2, 5, cu_seq_lens_q=cu([2, 3, 5]), attention_mask=torch.tensor([[1] * 5, [1] * 4 + [0]]))


@pytest.mark.parametrize(
    ("lengths", "crosses"),
    [
        ([5, 5, 5], False),
        ([3, 4, 8], True),
        ([3, 7, 5], True),
        ([5, 4, 6], True),
        ([2, 3, 4, 1, 5], False),
        ([2, 3, 6, 4], True),
    ],
)
def test_a_sequence_may_not_run_into_the_next_row(lengths, crosses):
    """Three rows of 5: each row boundary (5 and 10) must be a sequence end; the first or the second row crossed."""
    if crosses:
        with pytest.raises(ValueError, match=r"running from one row into the next \(rows of 5 tokens\)"):
            describe(3, 5, cu_seq_lens_q=cu(lengths))
    else:
        assert_description(describe(3, 5, cu_seq_lens_q=cu(lengths)), lengths, 3)


@pytest.mark.parametrize("past_length", [1, torch.tensor(2)])
@pytest.mark.parametrize("given", ["cu_seq_lens_q", "seq_idx"])
def test_packed_inputs_cannot_continue_a_cache(past_length, given):
    inputs = dict(cu_seq_lens_q=cu([2, 2])) if given == "cu_seq_lens_q" else dict(seq_idx=torch.tensor([[0, 0, 1, 1]]))
    with pytest.raises(ValueError, match="cannot continue a KV cache"):
        describe(1, 4, past_length=past_length, **inputs)


def test_a_tensor_past_length_of_zero_is_no_cache():
    assert_description(describe(1, 4, past_length=torch.tensor(0), cu_seq_lens_q=cu([1, 3])), [1, 3], 1)
    assert_description(describe(1, 4, past_length=torch.tensor(0), seq_idx=torch.tensor([[0, 1, 1, 1]])), [1, 3], 1)


@pytest.mark.parametrize(
    ("bounds", "error", "message"),
    [
        (torch.tensor([0.0, 2.0, 4.0]), TypeError, r"must be an integer tensor .* got torch.float32 of shape \(3,\)"),
        (torch.tensor([False, True]), TypeError, r"got torch.bool of shape \(2,\)"),
        (torch.tensor([[0, 2, 4]], dtype=torch.int32), TypeError, r"of shape \(1, 3\)\. Use cu_seq_lens_q"),
        (torch.tensor([], dtype=torch.int32), ValueError, r"must start at 0 .*; got \[\]"),
        (torch.tensor([1, 2, 4], dtype=torch.int32), ValueError, r"must start at 0 .*; got \[1, 2, 4\]"),
        (torch.tensor([0, 2, 2, 4], dtype=torch.int32), ValueError, r"gives sequence 1 length 0"),
        (torch.tensor([0, 0, 4], dtype=torch.int32), ValueError, r"gives sequence 0 length 0"),
        (torch.tensor([0, 3, 2, 4], dtype=torch.int32), ValueError, r"gives sequence 1 length -1"),
        (torch.tensor([0, 2, 3], dtype=torch.int32), ValueError, r"ends at 3 but the batch holds 4 tokens"),
        (torch.tensor([0, 2, 5], dtype=torch.int32), ValueError, r"ends at 5 but the batch holds 4 tokens"),
    ],
)
def test_cu_seq_lens_checks(bounds, error, message):
    with pytest.raises(error, match=message):
        describe(1, 4, cu_seq_lens_q=bounds)


def test_a_one_token_sequence_is_accepted():
    assert_description(describe(1, 4, cu_seq_lens_q=cu([1, 1, 2])), [1, 1, 2], 1)


def test_seq_idx_per_row_is_numbered_over_the_rows():
    seq_idx = torch.tensor([[0, 0, 1, 1, 1], [3, 4, 4, 4, 4]])  # any non-decreasing labels per row
    assert_description(describe(2, 5, seq_idx=seq_idx), [2, 3, 1, 4], 2)


def test_seq_idx_given_once_serves_every_row():
    packed = describe(3, 4, seq_idx=torch.tensor([[0, 0, 0, 5]], dtype=torch.int32))
    assert_description(packed, [3, 1, 3, 1, 3, 1], 3)


def test_seq_idx_checks():
    with pytest.raises(ValueError, match=r"seq_idx has shape \(2, 3\); .* must be \(batch, seq\) = \(2, 4\)"):
        describe(2, 4, seq_idx=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"seq_idx has shape \(4,\)"):
        describe(1, 4, seq_idx=torch.zeros(4, dtype=torch.long))
    with pytest.raises(TypeError, match=r"seq_idx must hold integers .*; got torch.float32"):
        describe(1, 4, seq_idx=torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"must not decrease along a row.*\[\[0, 0, 1, 1\], \[0, 1, 0, 1\]\]"):
        describe(2, 4, seq_idx=torch.tensor([[0, 0, 1, 1], [0, 1, 0, 1]]))
    assert_description(describe(1, 4, seq_idx=torch.tensor([[2, 2, 2, 2]])), [4], 1)  # equal labels: one sequence


@pytest.mark.parametrize(
    ("positions", "lengths"),
    [
        ([[0, 1, 2, 0, 1], [0, 1, 0, 1, 2]], [3, 2, 2, 3]),
        ([[0, 1, 2, 3, 4], [0, 1, 0, 1, 2]], [5, 2, 3]),  # a row without a restart is one sequence
        ([[0, 1, 2, 3, 0], [0, 0, 0, 1, 2]], [4, 1, 1, 1, 3]),
        ([[3, 4, 0, 1, 2], [0, 7, 8, 0, 5]], [2, 3, 3, 2]),  # only a return to 0 starts a sequence, not a jump
    ],
)
def test_restarting_positions_mark_the_sequences(positions, lengths):
    position_ids = torch.tensor(positions)
    assert_description(describe(2, 5, position_ids=position_ids), lengths, 2)


def test_restarting_positions_given_once_serve_every_row():
    assert_description(describe(2, 4, position_ids=torch.tensor([[0, 1, 0, 1]])), [2, 2, 2, 2], 2)


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


def test_a_restart_in_the_last_column_of_one_row_counts():
    assert_description(describe(2, 3, position_ids=torch.tensor([[0, 1, 2], [0, 1, 0]])), [3, 2, 1], 2)


def lengths_batch(lengths: list[int], rows: int, with_host_lengths: bool, with_cu: bool) -> PackedBatch:
    ids = torch.tensor(ids_from_lengths(lengths, rows))
    return PackedBatch(
        ids,
        cu(lengths) if with_cu else None,
        tuple(lengths) if with_host_lengths else None,
        max(lengths) if with_host_lengths else None,
    )


@pytest.mark.parametrize("with_cu", [True, False])
@pytest.mark.parametrize("with_host_lengths", [True, False])
def test_the_description_methods_agree_whatever_it_holds(with_cu, with_host_lengths):
    lengths = [3, 2, 1, 4, 2]  # two rows of 6
    packed = lengths_batch(lengths, 2, with_host_lengths, with_cu)
    assert packed.rows == 2
    assert packed.num_sequences == 5
    assert packed.sequence_lengths() == (3, 2, 1, 4, 2)
    assert packed.starts().tolist() == [
        [True, False, False, True, False, True],
        [True, False, False, False, True, False],
    ]
    assert packed.first_tokens().dtype == torch.long
    assert packed.first_tokens().tolist() == [0, 3, 5, 6, 10]
    assert packed.positions().tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]]
    kwargs = packed.attention_kwargs()
    expected = set()
    if with_cu:
        expected |= {"cu_seq_lens_q", "cu_seq_lens_k"}
        assert kwargs["cu_seq_lens_q"] is packed.cu_seq_lens and kwargs["cu_seq_lens_k"] is packed.cu_seq_lens
    if with_host_lengths:
        expected |= {"max_length_q", "max_length_k"}
        assert kwargs["max_length_q"] == 4 and kwargs["max_length_k"] == 4
    assert set(kwargs) == expected


def test_a_row_that_starts_with_a_continuing_label_still_starts_a_sequence():
    """sequence_ids over rows: the first token of each row begins a run even if the label equals the previous row's
    last (a hand-made description); positions restart there too."""
    packed = PackedBatch(torch.tensor([[0, 0, 1], [1, 1, 2]]), None, None, None)
    assert packed.starts().tolist() == [[True, False, True], [True, False, True]]
    assert packed.positions().tolist() == [[0, 1, 0], [0, 1, 0]]
    assert packed.num_sequences == 3


@pytest.mark.parametrize("seq_dim", [1, 2, 3])
def test_end_to_end_lays_the_rows_along_the_sequence_dimension(seq_dim):
    shape = [3, 2, 2, 2]
    shape[seq_dim] = 4
    tensor = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).view(shape)
    expected = torch.cat([tensor[row : row + 1] for row in range(3)], dim=seq_dim)
    result = end_to_end(tensor, seq_dim)
    assert result.shape == expected.shape
    assert torch.equal(result, expected)


def test_end_to_end_keeps_one_row_as_it_is():
    tensor = torch.randn(1, 2, 5, 3)
    assert end_to_end(tensor, 2) is tensor


def test_unpack_gives_the_padded_layout():
    lengths = [2, 4, 1]
    packed = torch.arange(7 * 2, dtype=torch.float32).view(1, 7, 2)
    result = unpack(packed, cu(lengths), fill=-5.0)
    expected = torch.full((3, 4, 2), -5.0)
    start = 0
    for index, length in enumerate(lengths):
        expected[index, :length] = packed[0, start : start + length]
        start += length
    assert torch.equal(result, expected)


def test_unpack_of_one_sequence_is_the_sequence():
    packed = torch.arange(5, dtype=torch.float32).view(1, 5)
    assert torch.equal(unpack(packed, cu([5]), fill=0.0), packed)


def test_the_description_stays_on_the_ids_device():
    """On the meta device (no data): the positions and first tokens are built where the sequence ids live; a tensor
    made on the default device instead does not mix with them."""
    ids = torch.tensor([[0, 0, 1], [2, 2, 2]]).to("meta")
    packed = PackedBatch(ids, None, None, None)
    assert packed.positions().device.type == "meta" and packed.positions().shape == (2, 3)
    assert packed.starts().device.type == "meta"


def test_per_sequence_sdpa_is_bidirectional_unless_told():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=generator) for _ in range(3))
    out, _ = per_sequence_sdpa(None, q, k, v, None, cu_seq_lens_q=cu([2, 3]))
    for (a, b), piece in zip([(0, 2), (2, 5)], torch.split(out[0], [2, 3])):
        scores = q[0, :, a:b] @ k[0, :, a:b].transpose(-1, -2) / 2.0  # sqrt(head_dim 4)
        reference = (scores.softmax(-1) @ v[0, :, a:b]).transpose(0, 1)
        torch.testing.assert_close(piece, reference, rtol=1e-5, atol=1e-6)


def test_per_sequence_sdpa_without_lengths_says_what_it_needs():
    q = torch.zeros(1, 1, 2, 4)
    message = "per_sequence_sdpa needs cu_seq_lens_q (0, len0, len0 + len1, ...) to find the sequences."
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        per_sequence_sdpa(None, q, q, q, None)


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        (
            [0, 2, 2, 4],
            "cu_seq_lens_q [0, 2, 2, 4] gives sequence 1 length 0: every packed sequence needs at least one token (a "
            "zero-length sequence has no [CLS] to read and no tokens to average). Drop empty sequences.",
        ),
        (
            [0, 2, 3],
            "cu_seq_lens_q ends at 3 but the batch holds 4 tokens (batch x seq); the lengths must cover every token of "
            "the rows laid end to end.",
        ),
    ],
)
def test_cu_seq_lens_errors_in_full(bounds, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        describe(1, 4, cu_seq_lens_q=torch.tensor(bounds, dtype=torch.int32))


def test_decreasing_seq_idx_error_in_full():
    message = (
        "seq_idx must not decrease along a row: each packed sequence is one contiguous run of tokens. Got "
        "[[0, 1, 0, 1]]."
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        describe(1, 4, seq_idx=torch.tensor([[0, 1, 0, 1]]))


def traced(monkeypatch) -> None:
    """What torch.compile's tracing sees (`torch.compiler.is_compiling()` true), run eagerly: the tensor-only paths
    give the values the compiled step would compute."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)


@pytest.mark.parametrize(
    "given",
    [
        dict(cu_seq_lens_q=cu([2, 3, 4, 1])),
        dict(seq_idx=torch.tensor([[0, 0, 1, 1, 1], [3, 4, 4, 4, 4]])),
        dict(seq_idx=torch.tensor([[0, 0, 1, 1, 1]])),
        dict(position_ids=torch.tensor([[0, 1, 2, 0, 1], [0, 1, 0, 1, 2]])),
        dict(position_ids=torch.tensor([[0, 1, 0, 1, 2]])),
    ],
)
def test_traced_description_gives_the_eager_sequences(given, monkeypatch):
    eager = describe(2, 5, **given)
    traced(monkeypatch)
    packed = describe(2, 5, **given)
    assert packed.sequence_ids.tolist() == eager.sequence_ids.tolist()
    assert packed.lengths is None and packed.max_length is None  # not on the host when traced
    if "cu_seq_lens_q" in given:
        assert packed.cu_seq_lens is given["cu_seq_lens_q"]
    else:
        assert packed.cu_seq_lens is None
    assert packed.num_sequences == eager.num_sequences
    assert packed.positions().tolist() == eager.positions().tolist()


def test_traced_description_of_positions_without_a_restart(monkeypatch):
    """Traced, a row without a restart is one sequence (no host decision); positions that cannot mark sequences
    (a mask, a cache) give an ordinary batch as in eager calls."""
    traced(monkeypatch)
    packed = describe(2, 4, position_ids=torch.tensor([[0, 1, 2, 3], [0, 1, 0, 1]]))
    assert packed.sequence_ids.tolist() == [[0, 0, 0, 0], [1, 1, 2, 2]]
    positions = torch.tensor([[0, 1, 0, 1]])
    assert describe(2, 4, position_ids=positions, attention_mask=torch.ones(2, 4)) is None
    assert describe(2, 4, position_ids=positions, past_length=2) is None
    assert describe(2, 4) is None


def test_lengths_stay_on_the_ids_device():
    packed = packing._packed(torch.tensor([[0, 0, 1, 1, 1]]).to("meta"), [2, 3])
    assert packed.cu_seq_lens.device.type == "meta" and packed.cu_seq_lens.dtype == torch.int32


def test_eager_per_sequence_sdpa_passes_scale_and_dropout_on():
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=generator) for _ in range(3))
    out, _ = per_sequence_sdpa(None, q, k, v, None, scaling=0.3, cu_seq_lens_q=cu([2, 3]))
    for (a, b), piece in zip([(0, 2), (2, 5)], torch.split(out[0], [2, 3])):
        reference = (((q[0, :, a:b] @ k[0, :, a:b].transpose(-1, -2)) * 0.3).softmax(-1) @ v[0, :, a:b]).transpose(0, 1)
        torch.testing.assert_close(piece, reference, rtol=1e-5, atol=1e-6)
    dropped, _ = per_sequence_sdpa(None, q, k, v, None, dropout=1.0, cu_seq_lens_q=cu([2, 3]))
    assert torch.equal(dropped, torch.zeros_like(dropped))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            dict(cu_seq_lens_q=cu([2, 2]), past_length=1),
            "Packed sequences (cu_seq_lens_q / seq_idx) cannot continue a KV cache: a cached step extends one sequence "
            "per row. Decode each sequence in its own row, with an attention mask for the padding.",
        ),
        (
            dict(cu_seq_lens_q=cu([2, 2]), cu_seq_lens_k=cu([1, 3])),
            "cu_seq_lens_k [0, 1, 4] differs from cu_seq_lens_q [0, 2, 4]; in self-attention each packed sequence "
            "attends to itself: pass the same lengths (or cu_seq_lens_q alone).",
        ),
        (
            dict(cu_seq_lens_q=cu([2, 2]), attention_mask=torch.tensor([[1, 1, 1, 0]])),
            "attention_mask has padding inside a packed batch given by cu_seq_lens_q: a packed row holds only real "
            "tokens. Drop the padding (DataCollatorWithFlattening gives none), or pass seq_idx with the mask.",
        ),
    ],
)
def test_description_errors_in_full(given, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        describe(1, 4, **given)


def test_per_sequence_sdpa_shape_error_in_full():
    q = torch.zeros(2, 1, 3, 4)
    message = (
        "per_sequence_sdpa takes packed rows of 5 tokens in all (cu_seq_lens_q[-1]) as query, key and value; got "
        "query (2, 1, 3, 4) and key (2, 1, 3, 4) (batch, heads, seq, head_dim). Pass an ordinary batch with an "
        "attention mask to the backend's own attention function instead."
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        per_sequence_sdpa(None, q, q, q, None, cu_seq_lens_q=cu([2, 3]))


def test_traced_description_stays_on_the_lengths_device(monkeypatch):
    traced(monkeypatch)
    packed = describe(2, 5, cu_seq_lens_q=cu([2, 3, 4, 1]).to("meta"))
    assert packed.sequence_ids.device.type == "meta" and packed.sequence_ids.shape == (2, 5)
