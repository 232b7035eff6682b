"""The multimodal variants against the authors' reference code's fixtures (tests/fixtures/multimodal_rope/PROVENANCE):
on every real token positions exactly, deltas = theirs + the row's padding; padding positions differ by design."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_qwen_vl_positions import encode

from roformer_ext import RoFormerExtConfig, RoFormerExtVisionTextConfig
from roformer_ext.axis_allocations import register_axis_allocation
from roformer_ext.position_schemes import patch_indices, register_position_scheme
from roformer_ext.positions import build_position_ids
from roformer_ext.registries import AXIS_ALLOCATIONS, POSITION_SCHEMES
from roformer_ext.rope import HeadwiseRotation, RotaryEmbedding, apply_rotary, rotary_embedding_class

FIXTURES = Path(__file__).parents[1] / "fixtures" / "multimodal_rope"
IMAGE, VIDEO = 90, 91

#: fixture -> our rope_parameters; the ICLR reference's own VideoRoPE / HoPE / MM-RoPE allocations are registered below.
OURS = {
    "mrope_interleave": {"position_scheme": "mrope_interleave", "mrope_section": [6, 5, 5], "spatial_reset": True},
    "mrope_interleave_no_reset": {"position_scheme": "mrope_interleave", "mrope_section": [6, 5, 5],
                                  "spatial_reset": False},
    "mhrope": {"position_scheme": "mhrope", "mrope_section": [1, 2, 1]},  # heads per axis; the 4th head: NoPE
    "videorope": {"position_scheme": "videorope", "mrope_section": [4, 6, 6], "temporal_stride": 2.0,
                  "axis_allocation": "videorope_multimodal_ropes"},
    "hope": {"position_scheme": "hope", "mrope_section": [4, 6, 6], "temporal_stride": 2.0,
             "axis_allocation": "hope_multimodal_ropes"},
    "v2pe": {"position_scheme": "v2pe", "visual_stride": 16.0},
    "v2pe_stride5": {"position_scheme": "v2pe", "visual_stride": 5.0},
    "ilrope": {"position_scheme": "ilrope", "mrope_section": [6, 5, 5]},
    "omnirope": {"position_scheme": "omnirope", "mrope_section": [4, 6, 6], "axis_allocation": "sections"},
    "mmrope": {"position_scheme": "mmrope_multimodal_ropes", "axes": 3, "position_scale": [1.0, 2.0, 0.5],
               "axis_allocation": "mmrope_multimodal_ropes"},
    # official lose4578/CircleRoPE: its config.json's circle_rope (alpha 0.5, radius 10, centred) is our default
    "circle_rope": {"position_scheme": "circle_rope", "mrope_section": [4, 6, 6]},
    "circle_rope_auto": {"position_scheme": "circle_rope", "mrope_section": [4, 6, 6], "circle_alpha": 0.25,
                         "circle_radius": "auto-2", "circle_move_to_origin": False, "circle_dff_rate": 0.3,
                         "circle_move_to_positive": 1.5},
}  # fmt: skip
#: official VideoRoPE and hrlics/HoPE (one scale in `scale_factors`: its `random.choice` is fixed), Qwen2-VL's layout
VARIANTS = [("videorope", "", 2.0), ("videorope", "_scale05", 0.5), ("hope", "", 2.0), ("hope", "_scale05", 0.5)]
OFFICIAL = {
    f"{scheme}_official{suffix}": (scheme, scale) for scheme, suffix, scale in [*VARIANTS, ("hope", "_scale125", 1.25)]
}
for name, (scheme, scale) in OFFICIAL.items():
    OURS[name] = {"position_scheme": scheme, "mrope_section": [4, 6, 6], "temporal_stride": scale}


@pytest.fixture(autouse=True, scope="module")
def reference_allocations():
    """The ICLR reference's VideoRoPE / HoPE allocations (Qwen3-VL's slicing), MM-RoPE's (8-pair T,T,H,W,H,W,H,W) and
    its MM-RoPE positions (M-RoPE blocks scaled per axis, text after at max + 1)."""

    @register_axis_allocation("videorope_multimodal_ropes")
    def allocation(num_pairs, axes, mrope_section):
        axis = [0] * num_pairs
        for a, offset in ((1, 1), (2, 2)):
            for pair in range(offset, min(2 * mrope_section[a], num_pairs), 2):
                axis[pair] = a
        return axis

    @register_axis_allocation("hope_multimodal_ropes")
    def hope_allocation(num_pairs, axes, mrope_section):
        return [-1 if axis == 0 else axis for axis in allocation(num_pairs, axes, mrope_section)]

    @register_axis_allocation("mmrope_multimodal_ropes")
    def mmrope_allocation(num_pairs, axes, mrope_section):
        return [(0, 0, 1, 2, 1, 2, 1, 2)[pair % 8] for pair in range(num_pairs)]

    @register_position_scheme("mmrope_multimodal_ropes")
    def mmrope_design(segments, axes, *, temporal_stride=1.0, position_scale=(1.0, 1.0, 1.0)):
        blocks, next_pos, scale = [], 0.0, torch.tensor(position_scale, dtype=torch.float32)[:, None]
        for segment in segments:
            if segment.grid is None:
                blocks.append((next_pos + torch.arange(segment.length, dtype=torch.float32)).expand(axes, -1))
                next_pos += segment.length
            else:
                k, i, j = (index.float() for index in patch_indices(segment.grid))
                blocks.append(next_pos + torch.stack((k * temporal_stride, i, j)) * scale)
                next_pos = float(blocks[-1].max()) + 1
        return torch.cat(blocks, dim=1), next_pos

    yield
    POSITION_SCHEMES.unregister("mmrope_multimodal_ropes")
    for name in ("videorope", "mmrope", "hope"):
        AXIS_ALLOCATIONS.unregister(f"{name}_multimodal_ropes")


def load(name: str) -> dict:
    return torch.load(FIXTURES / f"{name}.pt", weights_only=True)


def vision_config(hidden_size: int = 64, heads: int = 2, image_token_id: int = IMAGE, **rope):
    ids = dict(image_token_id=image_token_id, video_token_id=VIDEO)
    return RoFormerExtVisionTextConfig(hidden_size=hidden_size, num_attention_heads=heads, rope_parameters=rope, **ids)


def grids_or_none(rows) -> torch.Tensor | None:
    return torch.tensor(rows) if len(rows) else None


def left_padded(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of different lengths left-padded into (ids, attention_mask)."""
    length = max(len(row) for row in rows)
    ids, mask = torch.zeros(len(rows), length, dtype=torch.long), torch.zeros(len(rows), length, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, length - len(row) :], mask[b, length - len(row) :] = row, 1
    return ids, mask


def check_deltas(deltas, record, mask, atol=0.0, every_row=False) -> None:
    """Ours = theirs + padding, except (unless every_row) text-only padded rows of one real token, where the ICLR
    reference counts a padding 1 as a position."""
    real_tokens = mask.sum(1, keepdim=True)
    padding = (mask.shape[1] - real_tokens).float()
    artefact = (record["image_grid_thw"] is None) & (record["video_grid_thw"] is None) & (real_tokens == 1)
    keep = ~(artefact & (padding > 0) & (not every_row))
    torch.testing.assert_close(deltas[keep], (record["deltas"].float() + padding)[keep], atol=atol, rtol=0)


@pytest.mark.parametrize("name", sorted(OURS))
def test_positions_deltas_and_cos_sin_match_the_reference(name):
    """Exactly, except Circle-RoPE's float ring points (1e-5: an ulp of the CPU's sin / cos; a wrong one is off by
    0.1); official VideoRoPE / HoPE: every delta and the official rotation of queries / keys within 1e-5."""
    fixture, config = load(name), vision_config(128, 4, **OURS[name], pair_layout="half")
    circle, official = name.startswith("circle"), name in OFFICIAL
    allocation = OFFICIAL[name][0] if official else "sections" if circle else config.rope_parameters["axis_allocation"]
    assert config.rope_parameters["axis_allocation"] == allocation
    assert not official or fixture["scale_factor"] == OFFICIAL[name][1]
    rotary, with_cos, images, frames_above_one = RotaryEmbedding(config), 0, 0, 0
    assert len(fixture["cases"]) == 40
    for case, record in enumerate(fixture["cases"]):
        mask = record["attention_mask"]
        frames, real = record["video_grid_thw"], mask.bool()
        if frames is not None and not official:  # the ICLR reference's split of (t, h, w) rows into t rows (1, h, w)
            frames = torch.repeat_interleave(frames, frames[:, 0], dim=0)
            frames[:, 0] = 1
        grids = (record["image_grid_thw"], frames, mask, record.get("second_per_grid_ts"))
        ours, deltas = build_position_ids(record["input_ids"], config, *grids)
        message = f"{name} case {case}: {record['layouts']}"
        for b in range(mask.shape[0]):
            theirs = record["position_ids"][:, b, real[b]].float()
            torch.testing.assert_close(ours[:, b, real[b]], theirs, atol=1e-5 if circle else 0, rtol=0, msg=message)
        check_deltas(deltas, record, mask, atol=1e-5 if circle else 0, every_row=official)
        images += 0 if record["image_grid_thw"] is None else len(record["image_grid_thw"])
        frames_above_one += frames is not None and int(frames[:, 0].max()) > 1
        cos, sin = rotary(torch.zeros(1), record["position_ids"].float())
        if "query" in record:
            for x, expected in ((record["query"], record["rotated_query"]), (record["key"], record["rotated_key"])):
                torch.testing.assert_close(apply_rotary(x, cos, sin, "half"), expected, atol=1e-5, rtol=0)
            with_cos += 1
        if "cos" in record:
            their_cos, their_sin = record["cos"], record["sin"]
            if cos.dim() == 4:  # head-wise (MHRoPE): (batch, heads, seq, head_dim) on both sides
                cos, sin, their_cos, their_sin = (t.transpose(1, 2) for t in (cos, sin, their_cos, their_sin))
            torch.testing.assert_close(cos[real], their_cos[real], atol=1e-6, rtol=0)
            torch.testing.assert_close(sin[real], their_sin[real], atol=1e-6, rtol=0)
            with_cos += 1
    assert with_cos == 6 and (images >= 40 or not circle) and (frames_above_one >= 20 or not official)


# --- Official V2PE: InternVL's layout, a fixed step per visual token ---------------------------------------------------


def v2pe_row(record: dict) -> tuple[torch.Tensor, list]:
    """`<img>`, `</img>`, frame labels: text; an image's 256·n tile tokens: one group of grid (1, 16, 16·n)."""
    ids, grids = [], []
    for kind, value in record["layout"]:
        if kind == "text":
            ids += [1 + (len(ids) + k) % 50 for k in range(value)]
        else:
            ids += [1] + [IMAGE] * (256 * value) + [2]  # <img> tiles </img>
            grids.append([1, 16, 16 * value])
    return torch.tensor(ids), grids


def test_v2pe_matches_the_official_code():
    """Official `get_rope_pos_id` (strides 1, 16, 64) on 36 rows, batches of 4 of one stride: exactly with
    `visual_stride_tokens` 256; without it (the ICLR rule) one-tile images agree, multi-tile ones not."""
    fixture = load("v2pe_official")
    cases, batches, padded_rows, multi_tile = fixture["cases"], 0, 0, 0
    assert fixture["tokens_per_tile"] == 256
    for start in range(0, len(cases), 12):
        for offset in range(3):
            members = [start + offset + 3 * k for k in range(4)]
            stride = cases[members[0]]["stride"]
            assert len({cases[c]["stride"] for c in members}) == 1
            rows = [v2pe_row(cases[c]) for c in members]
            ids, mask = left_padded([row[0] for row in rows])
            grids = torch.tensor([grid for row in rows for grid in row[1]])
            configs = {
                n: vision_config(position_scheme="v2pe", visual_stride=float(stride), visual_stride_tokens=n)
                for n in (256, None)
            }
            ours = {n: build_position_ids(ids, config, grids, attention_mask=mask)[0] for n, config in configs.items()}
            for b, c in enumerate(members):
                real, message = mask[b].bool(), f"case {c}: stride {stride}, {cases[c]['layout']}"
                assert torch.equal(ours[256][:, b, real], cases[c]["position_ids"].expand(3, -1)), message
                tiles = max(g[2] for g in rows[b][1]) // 16
                multi_tile += tiles > 1
                assert torch.equal(ours[None][:, b, real], ours[256][:, b, real]) == (tiles == 1), message
                padded_rows += not real.all()
            batches += 1
    assert batches == 9 and padded_rows >= 20 and multi_tile >= 10, (batches, padded_rows, multi_tile)


def test_v2pe_refuses_bad_visual_stride_tokens():
    with pytest.raises(ValueError, match="visual_stride_tokens"):
        vision_config(position_scheme="v2pe", visual_stride_tokens=True)
    for value in (0, 2.5):  # the config's kind check lets these through; the scheme refuses them
        with pytest.raises(ValueError, match="visual_stride_tokens"):
            config = vision_config(position_scheme="v2pe", visual_stride_tokens=value)
            build_position_ids(torch.tensor([[1, IMAGE, IMAGE]]), config, torch.tensor([[1, 1, 2]]))


# --- Official MM-RoPE (Lumos-1) ------------------------------------------------------------------------------------

LUMOS_CONTENT = 5000  # the fixture's visual content token (new-line tokens, 8803, close every latent row)


def lumos_row(record: dict) -> tuple[torch.Tensor, list, torch.Tensor]:
    """Content tokens (new-lines included) are image placeholders, one grid (1, h, w + 1) per frame, the rest text."""
    flag = record["image_content_flag"][0].bool()
    frames = [value for kind, value in record["layout"] if kind == "frames"]
    grids = [[1, h, w + 1] for t, h, w in frames for _ in range(t)]
    theirs = torch.where(flag, record["position_ids_3d"][:, 0], record["text_position_ids"][0]).float()
    return torch.where(flag, LUMOS_CONTENT, 1), grids, theirs


def test_mmrope_matches_the_official_code():
    """Official Lumos-1 on 64 rows, left-padded in batches of 4: positions exactly, deltas 0, cos / sin within 1e-6."""
    rope = {"position_scheme": "mmrope", "position_scale": [4.0, 8.0, 8.0], "pair_layout": "half"}  # Cosmos' strides
    fixture, config = load("mmrope_official"), vision_config(image_token_id=LUMOS_CONTENT, **rope)
    assert config.rope_parameters["axis_allocation"] == "mmrope"
    rotary, cases, padded_rows, with_cos = RotaryEmbedding(config), fixture["cases"], 0, 0
    counts = {"text only": 0, "video": 0, "several items": 0}
    for first in range(0, len(cases), 4):
        rows = [lumos_row(record) for record in cases[first : first + 4]]
        ids, mask = left_padded([row[0] for row in rows])
        grids = grids_or_none([grid for row in rows for grid in row[1]])
        ours, deltas = build_position_ids(ids, config, grids, attention_mask=mask)
        cos, sin = rotary(torch.zeros(1), ours)
        assert torch.equal(deltas, torch.zeros_like(deltas))
        for b, (record, (_, _, theirs)) in enumerate(zip(cases[first : first + 4], rows)):
            real, message = mask[b].bool(), f"case {first + b}: {record['layout']}"
            assert torch.equal(ours[:, b, real], theirs), message
            padded_rows += not real.all()
            if "cos" in record:
                torch.testing.assert_close(cos[b, real], record["cos"][0], atol=1e-6, rtol=0, msg=message)
                torch.testing.assert_close(sin[b, real], record["sin"][0], atol=1e-6, rtol=0, msg=message)
                with_cos += 1
            frames = [value for kind, value in record["layout"] if kind == "frames"]
            counts["text only"] += not frames
            counts["video"] += any(t > 1 for t, _, _ in frames)
            counts["several items"] += len(frames) >= 2
    assert padded_rows >= 40 and with_cos == 12 and min(counts.values()) >= 8, (padded_rows, with_cos, counts)


# --- Official OmniRoPE (OmniGen2): caption, reference images, output image ----------------------------------------


def omnigen_row(record: dict) -> tuple[torch.Tensor, list, list]:
    """Caption text, then images back to back: alternating image and video placeholders keep them apart."""
    ids, grids = [1 + k % 50 for k in range(record["caption"])], ([], [])
    for n, (h, w) in enumerate([*record["references"], record["output"]]):
        ids += [(IMAGE, VIDEO)[n % 2]] * (h * w)
        grids[n % 2].append([1, h, w])
    return torch.tensor(ids), *grids


def omnirope_config(**rope) -> RoFormerExtVisionTextConfig:
    """OmniGen2's axes_dim (8, 12, 12): head_dim 32, mrope_section [4, 6, 6] pairs per axis."""
    return vision_config(position_scheme="omnirope", mrope_section=[4, 6, 6], **rope)


def test_omnirope_matches_the_official_code():
    """Official `OmniGen2RotaryPosEmbed` on 60 rows in batches of 4: positions exactly, cos / sin and rotated queries /
    keys within 1e-5; one sliced ladder ("sections") instead of per-axis ladders gives other frequencies."""
    fixture, config = load("omnirope_official"), omnirope_config()
    assert config.rope_parameters["axis_allocation"] == "omnirope" and fixture["axes_dim"] == (8, 12, 12)
    rotary, sliced = RotaryEmbedding(config), RotaryEmbedding(omnirope_config(axis_allocation="sections"))
    cases, padded_rows, with_references, with_freqs, rotated = fixture["cases"], 0, 0, 0, 0
    for first in range(0, len(cases), 4):
        rows = [omnigen_row(record) for record in cases[first : first + 4]]
        ids, mask = left_padded([row[0] for row in rows])
        images = grids_or_none([grid for row in rows for grid in row[1]])
        videos = grids_or_none([grid for row in rows for grid in row[2]])
        ours, _ = build_position_ids(ids, config, images, videos, attention_mask=mask)
        cos, sin = rotary(torch.zeros(1), ours)
        for b, record in enumerate(cases[first : first + 4]):
            real = mask[b].bool()
            message = f"case {first + b}: {record['caption']}, {record['references']}, {record['output']}"
            assert torch.equal(ours[:, b, real].T.double(), record["position_ids"]), message
            padded_rows += not real.all()
            with_references += len(record["references"]) >= 2
            row_cos, row_sin = cos[b : b + 1, real], sin[b : b + 1, real]
            if "cos" in record:
                torch.testing.assert_close(row_cos[0, :, 0::2].double(), record["cos"], atol=1e-5, rtol=0, msg=message)
                torch.testing.assert_close(row_sin[0, :, 0::2].double(), record["sin"], atol=1e-5, rtol=0, msg=message)
                other = sliced(torch.zeros(1), ours[:, b : b + 1, real])[0]
                assert not torch.allclose(other[0, :, 0::2].double(), record["cos"], atol=1e-3)
                with_freqs += 1
            if "query" in record:
                for name in ("query", "key"):  # theirs (batch, seq, heads, head_dim), ours (batch, heads, seq, ...)
                    x = record[name].transpose(1, 2)
                    rotated_x = apply_rotary(x, row_cos, row_sin, "interleaved").transpose(1, 2)
                    torch.testing.assert_close(rotated_x, record[f"rotated_{name}"], atol=1e-5, rtol=0, msg=message)
                rotated += 1
    assert padded_rows >= 30 and with_references >= 15 and with_freqs == 24 and rotated == 8


def test_omnirope_ladders_refuse_frequencies_recomputed_for_the_head():
    with pytest.raises(ValueError, match="its own frequency ladder"):
        RotaryEmbedding(omnirope_config(rope_type="dynamic", factor=2.0))
    plain, linear = RotaryEmbedding(omnirope_config()), RotaryEmbedding(omnirope_config(rope_type="linear", factor=4.0))
    torch.testing.assert_close(linear.inv_freq, plain.inv_freq / 4, atol=0, rtol=0)
    assert plain.inv_freq[[0, 4, 10]].tolist() == [1.0, 1.0, 1.0]  # each axis's ladder starts at θ^0


# --- Official VRoPE and Circle-RoPE's errors --------------------------------------------------------------------------------


def test_vrope_matches_the_official_code():
    """The official `VRoPE`'s position per frequency pair = ours on the pair's axis (p mod 4), and its next index."""
    fixture, config = load("vrope"), vision_config(32, position_scheme="vrope")
    axis = RotaryEmbedding(config).axis_of_pair
    assert axis.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    videos_with_frames = 0
    for case, record in enumerate(fixture["cases"]):
        ids, images, videos, _ = encode(record["layout"])
        videos_with_frames += sum(kind == "video" and value[0] > 1 for kind, value in record["layout"])
        ours, delta = build_position_ids(torch.tensor([ids]), config, grids_or_none(images), grids_or_none(videos))
        message = f"case {case}: {record['layout']}"
        assert torch.equal(ours[:, 0].T[:, axis], record["position_ids"].float()), message  # (tokens, pairs)
        assert delta.item() == record["next_index"] - len(ids), message
    assert videos_with_frames >= 20, videos_with_frames


def test_circle_rope_refuses_several_frames_and_bad_knobs():
    config = vision_config(128, 4, position_scheme="circle_rope", mrope_section=[4, 6, 6])
    with pytest.raises(ValueError, match="places images \\(grid t = 1\\)"):
        build_position_ids(torch.tensor([[1] + [VIDEO] * 8]), config, video_grid_thw=torch.tensor([[2, 2, 2]]))
    for knob, value, message in [
        ("circle_radius", "auto-x", "'auto' or 'auto-<positive scale>'"),
        ("circle_radius", 0, "'auto' or 'auto-<positive scale>'"),
        ("circle_alpha", 1.5, "a number in \\[0, 1\\]"),
        ("circle_dff_rate", True, "a number in \\[0, 1\\]"),
        ("circle_move_to_origin", 1, "True or False"),
        ("circle_move_to_positive", -1.0, "None \\(off\\) or an offset >= 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            vision_config(128, 4, position_scheme="circle_rope", mrope_section=[4, 6, 6], **{knob: value})


# --- Official GRAPE (multiplicative, commuting): learned frequencies on RoPE's planes ---------------------------------


def grape_rotary(fixture: dict, **rope) -> torch.nn.Module:
    config = RoFormerExtConfig(
        hidden_size=fixture["heads"] * fixture["head_dim"],
        num_attention_heads=fixture["heads"],
        rope_parameters={"rope_type": "grape_m", "rope_theta": fixture["base"], "pair_layout": "half", **rope},
    )
    return rotary_embedding_class("grape_m")(config)


@pytest.mark.parametrize("shared", [True, False])
def test_grape_m_matches_the_official_code(shared):
    """The official `MSGRAPECommuting` ("half" planes), shared across heads or not: initial log-frequencies exactly;
    with its learned ones, cos equal and sin negated (it turns by −n·ω), rotated queries / keys, within 1e-6."""
    fixture = load("grape_m" if shared else "grape_m_per_head")
    assert fixture.get("share_across_heads", True) == shared
    rotary = grape_rotary(fixture, grape_share_across_heads=shared)
    torch.testing.assert_close(rotary.log_freq.detach(), fixture["initial_log_freq"], atol=0, rtol=0)
    with torch.no_grad():
        rotary.log_freq.copy_(fixture["log_freq"])
    seq, pairs = fixture["query"].shape[1], fixture["head_dim"] // 2
    cos, sin = rotary(torch.zeros(1), torch.arange(seq)[None])
    if shared:
        ours = cos[0, :, :pairs], sin[0, :, :pairs]
        theirs = fixture["cos"][0, :, 0], fixture["sin"][0, :, 0]
        rotate = lambda x: apply_rotary(x, cos, sin, "half")  # noqa: E731
    else:
        assert cos.shape == (1, fixture["heads"], seq, fixture["head_dim"])
        ours = tuple(t[0, :, :, :pairs].transpose(0, 1) for t in (cos, sin))
        theirs = fixture["cos"][0], fixture["sin"][0]
        rotate = lambda x: HeadwiseRotation("half").values(x, cos, sin)  # noqa: E731
    torch.testing.assert_close(ours[0], theirs[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(ours[1], -theirs[1], atol=1e-6, rtol=0)
    for name in ("query", "key"):
        rotated = rotate(fixture[name].transpose(1, 2)).transpose(1, 2)
        torch.testing.assert_close(rotated, fixture[f"rotated_{name}"], atol=1e-6, rtol=0)
    rotate(fixture["query"].transpose(1, 2)).square().sum().backward()  # the frequencies learn, or stay frozen
    assert rotary.log_freq.grad is not None and rotary.log_freq.grad.abs().sum() > 0
    assert not grape_rotary(fixture, grape_learnable_freq=False).log_freq.requires_grad
    with pytest.raises(ValueError, match="grape_log_freq_scale"):
        grape_rotary(fixture, grape_log_freq_scale=0)
