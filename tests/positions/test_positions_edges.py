"""positions.py's edges, unit by unit (found by the mutation check, docs/testing.md); expected values by hand."""

import re
from types import SimpleNamespace

import pytest
import torch

from roformer_ext import positions
from roformer_ext.positions import as_axes_batch_seq, build_position_ids, decoding_position_ids, text_position_ids


def vision_config(scheme: str = "mrope", video_token_id=8, **knobs):
    rope = {"position_scheme": scheme, "axes": 3, **knobs}
    return SimpleNamespace(rope_parameters=rope, image_token_id=9, video_token_id=video_token_id)


@pytest.mark.parametrize("past_length", [0, 3, torch.tensor(2)])
def test_text_positions_count_on_after_the_cache(past_length):
    result = text_position_ids(2, 4, past_length, 3, torch.device("cpu"))
    assert result.shape == (3, 2, 4) and result.tolist() == [[[int(past_length) + i for i in range(4)]] * 2] * 3
    assert text_position_ids(1, 3, 0, 2, torch.device("meta")).device.type == "meta"


@pytest.mark.parametrize("shape", [(2, 5), (1, 5), (3, 2, 5), (1, 2, 5), (3, 1, 5), (1, 1, 5)])
def test_accepted_position_shapes_go_on_every_axis(shape):
    position_ids = torch.arange(torch.Size(shape).numel()).view(shape)
    result = as_axes_batch_seq(position_ids, 3, 2, 5)
    full = position_ids if position_ids.dim() == 3 else position_ids[None]
    assert result.shape == (3, 2, 5)
    for axis in range(3):
        for row in range(2):
            assert result[axis, row].tolist() == full[axis % full.shape[0], row % full.shape[1]].tolist()


@pytest.mark.parametrize("shape", [(2, 4), (2, 2, 5), (3, 3, 5), (5,), (4,), (1, 3, 2, 5), (3, 2, 6)])
def test_other_position_shapes_are_refused(shape):
    expected = re.escape(f"position_ids has shape {shape}; expected (batch, seq) = (2, 5) or (axes, batch, seq)")
    with pytest.raises(ValueError, match=expected + ".*build them with roformer_ext.positions.build_position_ids"):
        as_axes_batch_seq(torch.zeros(shape), 3, 2, 5)


def test_packed_sequences_are_laid_out_alone_and_each_row_keeps_its_last_sequences_delta():
    """Row 0: image (1, 2, 2), text; row 1: text, image (1, 2, 2). mrope: patch (k, i, j) at st + (k, i, j)."""
    packing = dict(
        image_grid_thw=torch.tensor([[1, 2, 2]] * 2), cu_seq_lens=torch.tensor([0, 4, 5, 10], dtype=torch.int32)
    )
    ids = torch.tensor([[9, 9, 9, 9, 5], [5, 9, 9, 9, 9]])
    result, deltas = build_position_ids(ids, vision_config(video_token_id=None), **packing)
    assert result.shape == (3, 2, 5) and result.dtype == torch.float32
    assert result[0].tolist() == [[0, 0, 0, 0, 0], [0, 1, 1, 1, 1]]  # t
    assert result[1].tolist() == [[0, 0, 1, 1, 0], [0, 1, 1, 2, 2]]  # h
    assert result[2].tolist() == [[0, 1, 0, 1, 0], [0, 1, 2, 1, 2]]  # w
    # next text position − real tokens of each row's last sequence: the text token (1 − 1), the image (3 − 5)
    assert deltas.tolist() == [[0.0], [-2.0]]
    config = SimpleNamespace(rope_parameters={"position_scheme": "rope_1d", "axes": 2})
    mask = torch.tensor([[1, 1, 0, 1, 1, 1]])
    padded, _ = build_position_ids(mask * 5, config, attention_mask=mask, cu_seq_lens=torch.tensor([0, 3, 6]))
    assert padded.tolist() == [[[0, 1, 0, 0, 1, 2]]] * 2  # the pad sits at 0


@pytest.mark.parametrize("bounds", [[1, 3, 6], [0, 3, 5], [0, 3, 7], [0, 3, 3, 6], [0, 4, 3, 6]])
def test_packed_positions_refuse_lengths_that_do_not_rise_over_the_batch(bounds):
    expected = re.escape("cu_seq_lens must rise from 0 to batch * seq = 6 (") + ".*" + re.escape(f"; got {bounds}.")
    with pytest.raises(ValueError, match=expected):
        build_position_ids(torch.zeros(2, 3, dtype=torch.long), vision_config(), cu_seq_lens=torch.tensor(bounds))


def test_build_position_ids_checks_its_shapes():
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, seq\); got \(4,\)"):
        build_position_ids(torch.zeros(4, dtype=torch.long), vision_config())
    with pytest.raises(ValueError, match=r"attention_mask must be 2D with the shape of input_ids \(1, 4\); got \(1, 3"):
        build_position_ids(torch.zeros(1, 4, dtype=torch.long), vision_config(), attention_mask=torch.ones(1, 3))


def test_decoding_continues_at_the_prompts_delta_on_every_axis():
    config, deltas = vision_config(), torch.tensor([[-2.0], [1.0]])
    plain = decoding_position_ids(torch.tensor([[4, 5]]), None, config)  # no deltas: 1D RoPE
    assert plain.dtype == torch.float32 and plain.tolist() == [[[4.0, 5.0]]] * 3
    assert decoding_position_ids(torch.tensor([[7], [7]]), deltas, config).tolist() == [[[5.0], [8.0]]] * 3
    # expanded for two beams per prompt: each prompt's delta serves its beams
    beams = decoding_position_ids(torch.tensor([[7, 8]] * 4), deltas, config)
    assert beams.tolist() == [[[5.0, 6.0], [5.0, 6.0], [8.0, 9.0], [8.0, 9.0]]] * 3


def test_cached_generation_is_refused_for_rope_2d_rows():
    """Its rows do not advance with each token: its registration says it takes no cache, and decoding is refused."""
    from vision_sizes import SIZES

    from roformer_ext import RoFormerExtVisionTextConfig, RoFormerExtVisionTextForCausalLM

    rope = {"position_scheme": "rope_2d_rows", "axes": 2}
    config = RoFormerExtVisionTextConfig(**SIZES, is_decoder=True, rope_parameters=rope)
    model = RoFormerExtVisionTextForCausalLM(config).eval()
    ids = torch.tensor([[5, 6, 7]])
    model(ids)  # a prompt with a cache runs; only the tokens after it are undefined
    with pytest.raises(ValueError, match="Cached generation is not defined for position_scheme 'rope_2d_rows'"):
        model.generate(ids, max_new_tokens=2, do_sample=False)
    assert model.generate(ids, max_new_tokens=2, do_sample=False, use_cache=False).shape == (1, 5)


def test_runs_of_each_row_never_cross_rows_and_skip_padding():
    kinds = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 0, 2, 2], [0, 0, 0, 0, 0]])
    real = torch.tensor([[1, 1, 1, 0, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    assert positions._runs_per_row(kinds, real) == [([0, 1], [2, 2]), ([1, 0, 2], [2, 1, 2]), ([], [])]
    assert positions._runs_per_row(kinds[:2, :3], torch.zeros(2, 3, dtype=torch.bool)) == [([], []), ([], [])]


@pytest.mark.parametrize(
    ("name", "grid"),
    [("image_grid_thw", grid) for grid in ([1, 2, 2], [[1, 2]], [[1, 0, 2]], [[-1, 2, 2]], [[[1, 2, 2]]])]
    + [("video_grid_thw", [[1, 2]])],
)
def test_grids_must_be_rows_of_three_positive_sizes(name, grid):
    message = re.escape(f"{name} must have shape (num, 3) with positive (t, h, w) rows; got {grid}.")
    with pytest.raises(ValueError, match=message):
        build_position_ids(torch.tensor([[5, 9, 8]]), vision_config(), **{name: grid})
    assert positions._grid_rows(torch.tensor([[1, 2, 3], [2, 1, 1]]), "x") == [(1, 2, 3), (2, 1, 1)]
    assert positions._grid_rows(None, "x") is None and positions._grid_rows(torch.zeros(0, 3), "x") == []


@pytest.mark.parametrize(
    ("input_ids", "given", "message"),
    [
        ([[5, 6]], dict(image_grid_thw=[[1, 1, 1]]), "1 row(s) but input_ids contain no image placeholders"),
        ([[5, 8, 8, 5]], dict(video_grid_thw=[[1, 1, 2], [1, 1, 1]]), "2 row(s) (videos) but input_ids contain 1"),
        (
            [[5, 9, 9, 9, 9, 5]],
            dict(image_grid_thw=[[1, 2, 2], [1, 1, 1]]),
            "2 row(s) (images) but input_ids contain 1",
        ),
        ([[5, 9, 9, 9]], dict(image_grid_thw=[[1, 1, 2]]), "3 placeholder tokens but its grid (t, h, w) = (1, 1, 2)"),
        ([[5, 8, 8]], dict(video_grid_thw=[[1, 1, 2]], second_per_grid_ts=[1.0, 2.0]), "2 entries but video_grid_thw"),
        ([[5, 9]], dict(second_per_grid_ts=[1.0]), "has 1 entries but video_grid_thw has 0 rows; give one time"),
    ],
)
def test_segment_errors_name_the_mismatch(input_ids, given, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_position_ids(torch.tensor(input_ids), vision_config(), **given)


@pytest.mark.parametrize("kind", ["image", "video"])
def test_a_grid_without_its_token_id_is_refused(kind):
    config = vision_config()
    setattr(config, f"{kind}_token_id", None)
    with pytest.raises(ValueError, match=f"{kind}_grid_thw was given but config.{kind}_token_id is None"):
        build_position_ids(torch.tensor([[5, 9, 8, 8]]), config, **{f"{kind}_grid_thw": [[1, 1, 1]]})


def test_each_grid_goes_to_its_own_group_in_token_order_over_the_batch():
    """Images (1, 1, 2) then (1, 2, 1), a video (2, 1, 1): mrope by hand (st + (t, h, w) per patch)."""
    input_ids = torch.tensor([[9, 9, 5, 8, 8], [5, 9, 9, 5, 5]])
    result, deltas = build_position_ids(
        input_ids, vision_config(), image_grid_thw=[[1, 1, 2], [1, 2, 1]], video_grid_thw=[[2, 1, 1]]
    )
    # row 0: image at st 0: (0,0,0), (0,0,1); next text 2; video at st 3: (3,3,3), (4,3,3); next 5
    # row 1: text 0; image at st 1: (1,1,1), (1,2,1); next 3: text 3, 4; next 5
    assert result.permute(1, 2, 0).tolist() == [
        [[0, 0, 0], [0, 0, 1], [2, 2, 2], [3, 3, 3], [4, 3, 3]],
        [[0, 0, 0], [1, 1, 1], [1, 2, 1], [3, 3, 3], [4, 4, 4]],
    ]
    assert deltas.tolist() == [[0.0], [0.0]]


def test_left_padding_moves_no_real_token_and_pads_sit_at_zero():
    input_ids = torch.tensor([[0, 0, 5, 9, 9, 9, 9, 5], [5, 6, 5, 9, 9, 9, 9, 5]])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]])
    result, deltas = build_position_ids(
        input_ids, vision_config(), image_grid_thw=[[1, 2, 2], [1, 2, 2]], attention_mask=attention_mask
    )
    # row 0: text 0; image at st 1 (h, w up to 2); next text 3 -> 6 real tokens, next 4: delta -2
    expected = [[0, 0, 0]] * 3 + [[1, 1, 1], [1, 1, 2], [1, 2, 1], [1, 2, 2], [3, 3, 3]]
    assert result[:, 0].T.tolist() == expected
    # row 1: text 0..2; image at st 3; next text 5 -> 8 real tokens, next 6: delta -2
    assert result[:, 1].T.tolist()[3:] == [[3, 3, 3], [3, 3, 4], [3, 4, 3], [3, 4, 4], [5, 5, 5]]
    assert deltas.tolist() == [[-2.0], [-2.0]]


def test_training_draws_one_temporal_scale_per_vision_segment_in_token_order():
    """HoPE: one torch.randint over the batch's vision segments; packed rows draw as each sequence alone does."""
    scales = (0.5, 2.0, 3.0)
    config = vision_config("hope", temporal_scales=list(scales))
    Segment = positions.Segment
    segments = [
        [Segment("text", 1), Segment("image", 4, (1, 2, 2))],
        [Segment("video", 2, (2, 1, 1)), Segment("text", 2), Segment("image", 1, (1, 1, 1))],
    ]
    torch.manual_seed(11)
    expected = [scales[k] for k in torch.randint(3, (3,)).tolist()]
    torch.manual_seed(11)
    drawn = positions._draw_temporal_scales(segments, scales)
    assert [s.temporal_scale for row in drawn for s in row] == [None, expected[0], expected[1], None, expected[2]]
    assert [s.length for row in drawn for s in row] == [1, 4, 2, 2, 1]
    # through build_position_ids: only while training, the same draw as above
    input_ids, video = torch.tensor([[5, 8, 8, 5]]), dict(video_grid_thw=[[2, 1, 1]])
    state = torch.get_rng_state()
    build_position_ids(input_ids, config, **video)  # eval: nothing drawn
    assert torch.equal(torch.get_rng_state(), state)
    runs = set()
    for seed in range(6):  # alone and packed before text (cu_seq_lens), as the same fixed-scale sequence
        torch.manual_seed(seed)
        trained, _ = build_position_ids(input_ids, config, training=True, **video)
        torch.manual_seed(seed)
        fixed = vision_config("hope", temporal_stride=scales[int(torch.randint(3, (1,)))], temporal_scales=None)
        assert torch.equal(trained, build_position_ids(input_ids, fixed, **video)[0])
        torch.manual_seed(seed)
        packed, _ = build_position_ids(
            torch.tensor([[5, 8, 8, 5, 5, 6]]), config, cu_seq_lens=[0, 4, 6], training=True, **video
        )
        assert torch.equal(packed[:, :, :4], trained)
        assert packed[:, 0, 4:].tolist() == [[0.0, 1.0]] * 3  # the text sequence after it starts again at 0
        runs.add(tuple(trained.flatten().tolist()))
    assert len(runs) > 1  # the draws differ between seeds


def test_packed_video_keeps_its_seconds_and_the_row_delta():
    """qwen2_5_vl, 2 tokens per second, 1.5 s per temporal patch: frame k at floor(3 k); the last sequence's delta."""
    video = dict(video_grid_thw=[[2, 1, 1]], second_per_grid_ts=[1.5], cu_seq_lens=torch.tensor([0, 2, 5]))
    result, deltas = build_position_ids(torch.tensor([[5, 6, 5, 8, 8]]), vision_config("qwen2_5_vl"), **video)
    assert result[:, 0].T.tolist() == [[0, 0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 1], [4, 1, 1]]
    assert deltas.tolist() == [[2.0]]  # next text 5 after 3 tokens


@pytest.mark.parametrize(
    "config", [SimpleNamespace(), SimpleNamespace(rope_parameters=None), SimpleNamespace(rope_parameters={})]
)
def test_a_config_without_rope_parameters_gets_1d_positions_on_one_axis(config):
    result, deltas = build_position_ids(torch.tensor([[5, 6, 7], [8, 9, 10]]), config)
    assert result.shape == (1, 2, 3) and result.tolist() == [[[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]]
    assert deltas.tolist() == [[0.0], [0.0]]


def test_training_with_bad_temporal_scales_names_the_scheme():
    config = vision_config("hope", temporal_scales=[1.0, -2.0])
    with pytest.raises(ValueError, match=r"^Position scheme 'hope': .*temporal_scales"):
        build_position_ids(torch.tensor([[5, 8, 8]]), config, video_grid_thw=[[2, 1, 1]], training=True)
