"""positions.py's edges, unit by unit (found by the mutation check, docs/testing.md): text positions after a cache,
the accepted position shapes, decoding after a prompt, and packed sequences laid out alone.

Each expected value is written out by hand or built by a plain loop, independent of the code.
"""

import re
from types import SimpleNamespace

import pytest
import torch

from roformer_ext.positions import (
    as_axes_batch_seq,
    build_position_ids,
    decoding_position_ids,
    remember_position_deltas,
    text_position_ids,
)


@pytest.mark.parametrize("past_length", [0, 3, torch.tensor(2)])
def test_text_positions_count_on_after_the_cache(past_length):
    positions = text_position_ids(2, 4, past_length, 3, torch.device("cpu"))
    start = int(past_length)
    assert positions.shape == (3, 2, 4)
    assert positions.tolist() == [[[start + i for i in range(4)]] * 2] * 3


@pytest.mark.parametrize("shape", [(2, 5), (1, 5), (3, 2, 5), (1, 2, 5), (3, 1, 5), (1, 1, 5)])
def test_accepted_position_shapes_go_on_every_axis(shape):
    position_ids = torch.arange(torch.Size(shape).numel()).view(shape)
    result = as_axes_batch_seq(position_ids, 3, 2, 5)
    assert result.shape == (3, 2, 5)
    full = position_ids if position_ids.dim() == 3 else position_ids[None]
    for axis in range(3):
        for row in range(2):
            assert result[axis, row].tolist() == full[axis % full.shape[0], row % full.shape[1]].tolist()


@pytest.mark.parametrize("shape", [(2, 4), (2, 2, 5), (3, 3, 5), (5,), (1, 3, 2, 5), (3, 2, 6)])
def test_other_position_shapes_are_refused(shape):
    expected = f"position_ids has shape {shape}; expected (batch, seq) = (2, 5) or (axes, batch, seq) = (3, 2, 5)."
    with pytest.raises(ValueError, match=re.escape(expected)):
        as_axes_batch_seq(torch.zeros(shape), 3, 2, 5)


def mrope_config():
    return SimpleNamespace(
        rope_parameters={"position_scheme": "mrope", "axes": 3}, image_token_id=9, video_token_id=None
    )


def test_packed_sequences_are_laid_out_alone_and_each_row_keeps_its_last_sequences_delta():
    """Row 0: an image (1, 2, 2) then one text token; row 1: a text token then an image (1, 2, 2). mrope by hand:
    text n on every axis, patch (k, i, j) at st + (k, i, j), next text at st + max(t, h, w)."""
    input_ids = torch.tensor([[9, 9, 9, 9, 5], [5, 9, 9, 9, 9]])
    cu_seq_lens = torch.tensor([0, 4, 5, 10], dtype=torch.int32)
    positions, deltas = build_position_ids(
        input_ids, mrope_config(), image_grid_thw=torch.tensor([[1, 2, 2], [1, 2, 2]]), cu_seq_lens=cu_seq_lens
    )
    assert positions.shape == (3, 2, 5) and positions.dtype == torch.float32
    assert positions[0].tolist() == [[0, 0, 0, 0, 0], [0, 1, 1, 1, 1]]  # t
    assert positions[1].tolist() == [[0, 0, 1, 1, 0], [0, 1, 1, 2, 2]]  # h
    assert positions[2].tolist() == [[0, 1, 0, 1, 0], [0, 1, 2, 1, 2]]  # w
    # deltas = next text position - real tokens: row 0's last sequence is the text token (1 - 1), row 1's holds the
    # image (3 - 5); the row's first sequence (the image alone: 2 - 4) is not the one that generation continues
    assert deltas.tolist() == [[0.0], [-2.0]]


def test_packed_sequences_with_padding_give_pads_position_zero():
    config = SimpleNamespace(rope_parameters={"position_scheme": "rope_1d", "axes": 2})
    input_ids = torch.tensor([[5, 6, 0, 7, 8, 9]])
    attention_mask = torch.tensor([[1, 1, 0, 1, 1, 1]])
    positions, _ = build_position_ids(
        input_ids, config, attention_mask=attention_mask, cu_seq_lens=torch.tensor([0, 3, 6])
    )
    assert positions.tolist() == [[[0, 1, 0, 0, 1, 2]]] * 2


@pytest.mark.parametrize("bounds", [[1, 3, 6], [0, 3, 5], [0, 3, 7], [0, 3, 3, 6], [0, 4, 3, 6]])
def test_packed_positions_refuse_lengths_that_do_not_rise_over_the_batch(bounds):
    expected = re.escape("cu_seq_lens must rise from 0 to batch * seq = 6 (") + ".*" + re.escape(f"; got {bounds}.")
    with pytest.raises(ValueError, match=expected):
        build_position_ids(torch.zeros(2, 3, dtype=torch.long), mrope_config(), cu_seq_lens=torch.tensor(bounds))


def test_build_position_ids_checks_its_shapes():
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, seq\); got \(4,\)"):
        build_position_ids(torch.zeros(4, dtype=torch.long), mrope_config())
    with pytest.raises(
        ValueError, match=r"attention_mask must be 2D with the shape of input_ids \(1, 4\); got \(1, 3\)"
    ):
        build_position_ids(torch.zeros(1, 4, dtype=torch.long), mrope_config(), attention_mask=torch.ones(1, 3))


def test_decoding_continues_at_the_prompts_delta_on_every_axis():
    config = mrope_config()
    cache = SimpleNamespace()
    plain = decoding_position_ids(torch.tensor([[4, 5]]), cache, config)  # no deltas: 1D RoPE
    assert plain.dtype == torch.float32 and plain.tolist() == [[[4.0, 5.0]]] * 3
    remember_position_deltas(cache, torch.tensor([[-2.0], [1.0]]))
    assert decoding_position_ids(torch.tensor([[7], [7]]), cache, config).tolist() == [[[5.0], [8.0]]] * 3
    # a cache expanded for two beams per prompt: each prompt's delta serves its beams
    beams = decoding_position_ids(torch.tensor([[7], [7], [7], [7]]), cache, config)
    assert beams.tolist() == [[[5.0], [5.0], [8.0], [8.0]]] * 3
    remember_position_deltas(None, torch.zeros(1, 1))  # no cache: nothing to keep


def test_decoding_is_refused_for_rope_2d_rows():
    config = SimpleNamespace(rope_parameters={"position_scheme": "rope_2d_rows", "axes": 2})
    with pytest.raises(ValueError, match="Cached generation is not defined for position_scheme 'rope_2d_rows'"):
        decoding_position_ids(torch.tensor([[1]]), SimpleNamespace(), config)
