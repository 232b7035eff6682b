"""The multimodal variants against fixtures from the authors' reference code: JJJYmmm/Multimodal-RoPEs (the ICLR 2026
paper's, for MRoPE-Interleave with and without spatial reset, MHRoPE (positions and head-wise cos / sin), VideoRoPE's
positions, HoPE, V2PE,
ILRoPE, OmniRoPE, MM-RoPE) and Wiselnn570/VideoRoPE (official VideoRoPE: positions of multi-frame videos and its
frequency allocation), hrlics/HoPE (official HoPE: positions with its temporal scale and its hybrid
frequency allocation), OpenGVLab/V2PE (official V2PE's positions),
alibaba-damo-academy/Lumos (Lumos-1's MM-RoPE: positions and cos / sin),
VectorSpaceLab/OmniGen2 (OmniRoPE's positions and per-axis frequency ladders), johncaged/VRoPE, lose4578/CircleRoPE (Circle-RoPE's positions) and model-architectures/GRAPE
(multiplicative GRAPE's learned-frequency rotation). Commits and commands in tests/fixtures/multimodal_rope/PROVENANCE.
The official MM-RoPE, V2PE and OmniRoPE fixtures hold single rows; their batch tests left-pad several rows (different
layouts) into one batch and compare ours at each row's real tokens with that row's official output.

Layout mapping. The reference lays tokens out as Qwen3-VL does: `<vision_start> image tokens <vision_end>` per image
and `<timestamp> <vision_start> frame tokens <vision_end>` per video frame, its video_grid_thw holding one (t, h, w) row
per video that it splits into t rows (1, h, w). Our placeholders are the same tokens (the markers and timestamps are
text to us), so our video_grid_thw gets those t rows (1, h, w), one per frame group. Compared on every real token:
positions exactly, deltas as ours = theirs + the row's padding (the reference subtracts the padded row length, we
the real tokens: with left padding, generation continues at the same position either way). Padding positions differ
by design (the reference writes 1, we 0) and are not compared. cos / sin: the reference's rotary module (half pair
layout, head_dim 32) against our `RotaryEmbedding` with the variant's allocation, on the reference's positions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from roformer_ext import RoFormerExtVisionTextConfig
from roformer_ext.axis_allocations import register_axis_allocation
from roformer_ext.positions import build_position_ids, patch_indices, register_position_scheme
from roformer_ext.registries import AXIS_ALLOCATIONS, POSITION_SCHEMES
from roformer_ext.rope import HeadwiseRotation, RotaryEmbedding, apply_rotary

FIXTURES = Path(__file__).parents[1] / "fixtures" / "multimodal_rope"
IMAGE, VIDEO = 90, 91

#: fixture -> our rope_parameters (the variant's default allocation unless named)
OURS = {
    "mrope_interleave": {"position_scheme": "mrope_interleave", "mrope_section": [6, 5, 5], "spatial_reset": True},
    "mrope_interleave_no_reset": {
        "position_scheme": "mrope_interleave",
        "mrope_section": [6, 5, 5],
        "spatial_reset": False,
    },
    # The ICLR reference re-implements VideoRoPE's allocation with Qwen3-VL's slicing (pair 0 reads t, then h on odd
    # and w on even pairs); the official code's (our "videorope") is checked below against the official repository.
    "mhrope": {"position_scheme": "mhrope", "mrope_section": [1, 2, 1]},  # heads per axis; the 4th head: NoPE
    "videorope": {
        "position_scheme": "videorope",
        "mrope_section": [4, 6, 6],
        "temporal_stride": 2.0,
        "axis_allocation": "videorope_multimodal_ropes",
    },
    # Likewise HoPE's: the reference lays h / w on pairs 1, 2, ... and NoPE on pair 0 as well; the official hybrid
    # allocation (our "hope", the first pairs h, w, ..., NoPE on the last section[0]) is checked against hrlics/HoPE.
    "hope": {
        "position_scheme": "hope",
        "mrope_section": [4, 6, 6],
        "temporal_stride": 2.0,
        "axis_allocation": "hope_multimodal_ropes",
    },
    "v2pe": {"position_scheme": "v2pe", "visual_stride": 16.0},
    "v2pe_stride5": {"position_scheme": "v2pe", "visual_stride": 5.0},
    "ilrope": {"position_scheme": "ilrope", "mrope_section": [6, 5, 5]},
    # OmniRoPE's: one ladder sliced into sections, where OmniGen2's code (our "omnirope") gives each axis its own
    "omnirope": {"position_scheme": "omnirope", "mrope_section": [4, 6, 6], "axis_allocation": "sections"},
    # and MM-RoPE: its allocation has 8-pair components T,T,H,W,H,W,H,W, where Lumos-1's code (our "mmrope") takes
    # 16-pair ones, and its design places M-RoPE blocks, where Lumos-1 (our "mmrope") keeps text at its token index
    "mmrope": {
        "position_scheme": "mmrope_multimodal_ropes",
        "axes": 3,
        "position_scale": [1.0, 2.0, 0.5],
        "axis_allocation": "mmrope_multimodal_ropes",
    },
}


@pytest.fixture(autouse=True, scope="module")
def reference_videorope_allocation():
    """The ICLR reference's VideoRoPE allocation, registered as a user would (`register_axis_allocation`): h on pairs
    1, 3, ... < 2·section[1], w on 2, 4, ... < 2·section[2], t elsewhere. Likewise its HoPE and MM-RoPE allocations
    and its MM-RoPE position design (`register_position_scheme`)."""

    @register_axis_allocation("videorope_multimodal_ropes")
    def allocation(num_pairs, axes, mrope_section):
        axis = [0] * num_pairs
        for a, offset in ((1, 1), (2, 2)):
            for pair in range(offset, min(2 * mrope_section[a], num_pairs), 2):
                axis[pair] = a
        return axis

    @register_axis_allocation("hope_multimodal_ropes")
    def hope_allocation(num_pairs, axes, mrope_section):
        """The ICLR reference's HoPE: the allocation above with the temporal pairs unrotated (NoPE)."""
        return [-1 if axis == 0 else axis for axis in allocation(num_pairs, axes, mrope_section)]

    @register_axis_allocation("mmrope_multimodal_ropes")
    def mmrope_allocation(num_pairs, axes, mrope_section):
        """The ICLR reference's MM-RoPE: components of 8 pairs T,T,H,W,H,W,H,W from the highest frequency."""
        return [(0, 0, 1, 2, 1, 2, 1, 2)[pair % 8] for pair in range(num_pairs)]

    @register_position_scheme("mmrope_multimodal_ropes")
    def mmrope_design(segments, axes, *, temporal_stride=1.0, position_scale=(1.0, 1.0, 1.0)):
        """The ICLR reference's MM-RoPE design: M-RoPE blocks scaled per axis, patch (k, i, j) at
        (st + k·s·σ_t, st + i·σ_h, st + j·σ_w), st the next text position, text after at max + 1. (Lumos-1's own
        design, our "mmrope", is checked against its code below.)"""
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
    AXIS_ALLOCATIONS.unregister("videorope_multimodal_ropes")
    AXIS_ALLOCATIONS.unregister("mmrope_multimodal_ropes")
    AXIS_ALLOCATIONS.unregister("hope_multimodal_ropes")


def load(name: str) -> dict:
    return torch.load(FIXTURES / f"{name}.pt", weights_only=True)


def our_config(name: str) -> RoFormerExtVisionTextConfig:
    return RoFormerExtVisionTextConfig(
        hidden_size=128,
        num_attention_heads=4,
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        rope_parameters={**OURS[name], "pair_layout": "half"},
    )


def frame_groups(video_grid_thw: torch.Tensor | None) -> torch.Tensor | None:
    """The reference's split of (t, h, w) rows into t rows (1, h, w): one per frame group in the tokens."""
    if video_grid_thw is None:
        return None
    frames = torch.repeat_interleave(video_grid_thw, video_grid_thw[:, 0], dim=0)
    frames[:, 0] = 1
    return frames


@pytest.mark.parametrize("name", sorted(OURS))
def test_positions_and_deltas_match_the_reference(name):
    fixture, config = load(name), our_config(name)
    assert len(fixture["cases"]) == 40
    for case, record in enumerate(fixture["cases"]):
        mask = record["attention_mask"]
        ours, deltas = build_position_ids(
            record["input_ids"], config, record["image_grid_thw"], frame_groups(record["video_grid_thw"]), mask
        )
        real = mask.bool()
        message = f"{name} case {case}: {record['layouts']}"
        assert torch.equal(ours.permute(1, 0, 2)[real.unsqueeze(1).expand(-1, 3, -1)],
                           record["position_ids"].float().permute(1, 0, 2)[real.unsqueeze(1).expand(-1, 3, -1)]), message  # fmt: skip
        real_tokens = mask.sum(1, keepdim=True)
        padding = (mask.shape[1] - real_tokens).float()
        # Text-only batches take the reference's other branch, which writes 1 at padding before taking each row's
        # maximum: a padded row of one real token then counts that 1 as its last position. Not compared there.
        artefact = (record["image_grid_thw"] is None) & (record["video_grid_thw"] is None) & (real_tokens == 1)
        artefact &= padding > 0
        assert torch.equal(deltas[~artefact], (record["deltas"].float() + padding)[~artefact]), message


@pytest.mark.parametrize("name", sorted(OURS))
def test_cos_sin_match_the_reference(name):
    fixture, config = load(name), our_config(name)
    rotary = RotaryEmbedding(config)
    with_cos = [record for record in fixture["cases"] if "cos" in record]
    assert len(with_cos) == 6
    for record in with_cos:
        real = record["attention_mask"].bool()
        cos, sin = rotary(torch.zeros(1), record["position_ids"].float())
        if cos.dim() == 4:  # head-wise (MHRoPE): (batch, heads, seq, head_dim) on both sides
            cos, sin, their_cos, their_sin = (t.transpose(1, 2) for t in (cos, sin, record["cos"], record["sin"]))
        else:
            their_cos, their_sin = record["cos"], record["sin"]
        torch.testing.assert_close(cos[real], their_cos[real], atol=1e-6, rtol=0)
        torch.testing.assert_close(sin[real], their_sin[real], atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------------------
# Official VideoRoPE: Qwen2-VL's layout, multi-frame videos in one group, so the temporal stride shows
# ------------------------------------------------------------------------------------------------


def check_official_qwen_layout_fixture(name: str, fixture: dict, config: RoFormerExtVisionTextConfig) -> None:
    """An official VideoRoPE / HoPE fixture (Qwen2-VL's token layout, left padding): positions of the real tokens
    exactly, deltas up to the padding, and (first 6 cases) queries / keys rotated with the fixture's positions,
    padding included, within 1e-5 (float32 products of values up to ~5)."""
    rotary, frames_above_one, rotated = RotaryEmbedding(config), 0, 0
    for case, record in enumerate(fixture["cases"]):
        mask = record["attention_mask"]
        real = mask.bool()
        ours, deltas = build_position_ids(
            record["input_ids"], config, record["image_grid_thw"], record["video_grid_thw"], mask
        )
        message = f"{name} case {case}: {record['layouts']}"
        for b in range(mask.shape[0]):
            assert torch.equal(ours[:, b, real[b]], record["position_ids"][:, b, real[b]].float()), message
        padding = (mask.shape[1] - mask.sum(1, keepdim=True)).float()
        assert torch.equal(deltas, record["deltas"].float() + padding), message
        videos = record["video_grid_thw"]
        frames_above_one += videos is not None and int(videos[:, 0].max()) > 1
        if "query" in record:
            cos, sin = rotary(torch.zeros(1), record["position_ids"].float())
            for x, expected in ((record["query"], record["rotated_query"]), (record["key"], record["rotated_key"])):
                # both rotate with the fixture's positions, padding included
                torch.testing.assert_close(apply_rotary(x, cos, sin, "half"), expected, atol=1e-5, rtol=0)
            rotated += 1
    assert frames_above_one >= 20 and rotated == 6, (frames_above_one, rotated)


@pytest.mark.parametrize("name, stride", [("videorope_official", 2.0), ("videorope_official_scale05", 0.5)])
def test_videorope_matches_the_official_code(name, stride):
    """Same tokens on both sides (the vision markers are text to us; one group and one grid row per video). Positions
    exactly, deltas as above; the allocation through the rotation: the official `apply_m_modify_multimodal_rotary_pos_emb`
    on random queries / keys against ours with allocation "videorope" (half layout) on the same positions."""
    fixture = load(name)
    config = RoFormerExtVisionTextConfig(
        hidden_size=64,
        num_attention_heads=2,
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        rope_parameters={"position_scheme": "videorope", "mrope_section": [4, 6, 6], "temporal_stride": stride,
                         "pair_layout": "half"},
    )  # fmt: skip
    assert config.rope_parameters["axis_allocation"] == "videorope"
    check_official_qwen_layout_fixture(name, fixture, config)


# ------------------------------------------------------------------------------------------------
# Official HoPE: VideoRoPE's layout with a temporal scale, NoPE on the lowest frequencies
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, scale", [("hope_official", 2.0), ("hope_official_scale05", 0.5), ("hope_official_scale125", 1.25)]
)
def test_hope_matches_the_official_code(name, scale):
    """Official hrlics/HoPE (`get_dynamic_rope_index` with one scale in `scale_factors`, so its `random.choice` is
    fixed; `apply_hybrid_multimodal_rotary_pos_emb`). Same tokens on both sides, as for official VideoRoPE (Qwen2-VL's
    layout; the vision markers are text to us; one group and one grid row per video). Positions exactly (float32 on
    both sides: t = st + k·δ, h / w offset from t), deltas as above; the allocation through the rotation: theirs on
    random queries / keys (head_dim 32, mrope_section [4, 6, 6]) against ours with the scheme's default allocation
    "hope" (half layout) on the same positions, within 1e-5 (float32 products of values up to ~5)."""
    fixture = load(name)
    config = RoFormerExtVisionTextConfig(
        hidden_size=64, num_attention_heads=2, image_token_id=IMAGE, video_token_id=VIDEO,
        rope_parameters={"position_scheme": "hope", "mrope_section": [4, 6, 6], "temporal_stride": scale,
                         "pair_layout": "half"},
    )  # fmt: skip
    assert config.rope_parameters["axis_allocation"] == "hope" and fixture["scale_factor"] == scale
    check_official_qwen_layout_fixture(name, fixture, config)


# ------------------------------------------------------------------------------------------------
# Official V2PE: InternVL's layout, a fixed step per visual token
# ------------------------------------------------------------------------------------------------


def v2pe_row(record: dict) -> tuple[torch.Tensor, list]:
    """A fixture row in our terms: `<img>`, `</img>` and the frame labels are text, each image's 256·n tile tokens one
    image group of grid (1, 16, 16·n)."""
    ids, grids = [], []
    for kind, value in record["layout"]:
        if kind == "text":
            ids += [1 + (len(ids) + k) % 50 for k in range(value)]
        else:
            ids += [1] + [IMAGE] * (256 * value) + [2]  # <img> tiles </img>
            grids.append([1, 16, 16 * value])
    return torch.tensor(ids), grids


def v2pe_config(stride: float, tokens: int | None = 256) -> RoFormerExtVisionTextConfig:
    return RoFormerExtVisionTextConfig(
        hidden_size=64, num_attention_heads=2, image_token_id=IMAGE, video_token_id=VIDEO,
        rope_parameters={"position_scheme": "v2pe", "visual_stride": float(stride), "visual_stride_tokens": tokens},
    )  # fmt: skip


def test_v2pe_matches_the_official_code():
    """Official OpenGVLab/V2PE `get_rope_pos_id` ("v2pe_fix", float32, strides 1, 16, 64) on InternVL rows: `<img>` 256·n
    tile tokens `</img>` per image of n tiles, a video as "Frame k:" text before each one-tile frame. Mapping: `<img>`,
    `</img>` and the frame labels are text to us, the 256·n tokens one image group of grid (1, 16, 16·n). Ours with
    `visual_stride_tokens` 256 (the official step, visual_stride / 256 per token): every position exactly. Without it
    (the ICLR reference's rule, a segment spans visual_stride) one-tile images agree and multi-tile ones do not."""
    fixture = load("v2pe_official")
    assert fixture["tokens_per_tile"] == 256
    multi_tile = 0
    for case, record in enumerate(fixture["cases"]):
        ids, grids = v2pe_row(record)
        positions = {}
        for tokens in (256, None):
            config = v2pe_config(record["stride"], tokens)
            ours, _ = build_position_ids(ids[None], config, torch.tensor(grids))
            positions[tokens] = ours[:, 0]
        message = f"case {case}: stride {record['stride']}, {record['layout']}"
        assert torch.equal(positions[256], record["position_ids"].expand(3, -1)), message
        tiles = max(g[2] for g in grids) // 16
        multi_tile += tiles > 1
        assert torch.equal(positions[None], positions[256]) == (tiles == 1), message
    assert multi_tile >= 10, multi_tile


def test_v2pe_batches_match_the_official_rows():
    """The official `get_rope_pos_id` takes one row (batch 1, no padding); ours takes a left-padded batch. A batch
    shares one config, so the fixture's 36 rows go in batches of 4 rows of one stride (rows c, c + 3, c + 6, c + 9: the
    fixture cycles strides 1, 16, 64), different layouts per row; our image grids are the rows' grids in row order
    (each row mapped as in `v2pe_row`), and row b's official positions must equal ours at row b's real tokens exactly,
    `visual_stride_tokens` 256 (padding is not compared)."""
    cases, batches, padded_rows = load("v2pe_official")["cases"], 0, 0
    for start in range(0, len(cases), 12):
        for offset in range(3):
            members = [start + offset + 3 * k for k in range(4)]
            assert len({cases[c]["stride"] for c in members}) == 1
            rows = [v2pe_row(cases[c]) for c in members]
            ids, mask = left_padded([row[0] for row in rows])
            grids = torch.tensor([grid for row in rows for grid in row[1]])
            ours, _ = build_position_ids(ids, v2pe_config(cases[members[0]]["stride"]), grids, attention_mask=mask)
            for b, c in enumerate(members):
                real = mask[b].bool()
                assert torch.equal(ours[:, b, real], cases[c]["position_ids"].expand(3, -1)), f"case {c}"
                padded_rows += not real.all()
            batches += 1
    assert batches == 9 and padded_rows >= 20, (batches, padded_rows)


def test_v2pe_refuses_bad_visual_stride_tokens():
    def config(value):
        return RoFormerExtVisionTextConfig(
            hidden_size=64, num_attention_heads=2, image_token_id=IMAGE, video_token_id=VIDEO,
            rope_parameters={"position_scheme": "v2pe", "visual_stride_tokens": value},
        )  # fmt: skip

    with pytest.raises(ValueError, match="visual_stride_tokens"):
        config(True)
    for value in (0, 2.5):  # the config's kind check lets these through; the scheme refuses them
        with pytest.raises(ValueError, match="visual_stride_tokens"):
            build_position_ids(torch.tensor([[1, IMAGE, IMAGE]]), config(value), torch.tensor([[1, 1, 2]]))


# ------------------------------------------------------------------------------------------------
# Official MM-RoPE (Lumos-1): positions and cos / sin, single rows and left-padded batches
# ------------------------------------------------------------------------------------------------

LUMOS_CONTENT = 5000  # the fixture's visual content token (new-line tokens, 8803, close every latent row)


def lumos_config() -> RoFormerExtVisionTextConfig:
    """Ours as Lumos-1 runs it: position_scale (4, 8, 8), Cosmos' strides; the default allocation "mmrope"."""
    config = RoFormerExtVisionTextConfig(
        hidden_size=64, num_attention_heads=2, image_token_id=LUMOS_CONTENT, video_token_id=VIDEO,
        rope_parameters={"position_scheme": "mmrope", "position_scale": [4.0, 8.0, 8.0], "pair_layout": "half"},
    )  # fmt: skip
    assert config.rope_parameters["axis_allocation"] == "mmrope"
    return config


def lumos_row(record: dict) -> tuple[torch.Tensor, list, torch.Tensor]:
    """A fixture row in our terms: its tokens (theirs: the content tokens, new-line tokens included, become our image
    placeholders, every other token is text to us), one image grid (1, h, w + 1) per frame (each frame's
    h·(w + 1) content tokens are one group, the markers and size tokens between frames part them), and the official
    positions (3, seq): the content tokens' (t, h, w), every other token's text index on all three axes."""
    flag = record["image_content_flag"][0].bool()
    ids = torch.where(flag, LUMOS_CONTENT, 1)
    frames = [value for kind, value in record["layout"] if kind == "frames"]
    grids = [[1, h, w + 1] for t, h, w in frames for _ in range(t)]
    theirs = torch.where(flag, record["position_ids_3d"][:, 0], record["text_position_ids"][0]).float()
    return ids, grids, theirs


def test_mmrope_matches_the_official_code():
    """Official alibaba-damo-academy/Lumos (Lumos-1): `generate_mm_position_ids` + `set_3d_global_offset` and
    `mm_rotary_emb` on 64 single rows: text only, or text with 1-4 images and videos of 2-5 frames, mixed
    (`<image_start> <h> <w> h·(w+1) tokens <image_end>` per frame). Mapping in `lumos_row`. Ours ("mmrope",
    position_scale [4, 8, 8]): every position exactly (text at its token index, every visual token of the row at
    o + (4f, 8i, 8j), o the row's first visual token, f its frame counted over the row), delta 0; cos / sin (first 12
    rows) from our positions with our default allocation "mmrope" (half layout, head_dim 32) within 1e-6 of theirs."""
    fixture, config = load("mmrope_official"), lumos_config()
    rotary, with_cos, counts = RotaryEmbedding(config), 0, {"text only": 0, "video": 0, "several items": 0}
    for case, record in enumerate(fixture["cases"]):
        ids, grids, theirs = lumos_row(record)
        ours, delta = build_position_ids(ids[None], config, torch.tensor(grids) if grids else None)
        message = f"case {case}: {record['layout']}"
        assert torch.equal(ours[:, 0], theirs), message
        assert delta.item() == 0, message
        if "cos" in record:
            cos, sin = rotary(torch.zeros(1), ours)
            torch.testing.assert_close(cos, record["cos"], atol=1e-6, rtol=0, msg=message)
            torch.testing.assert_close(sin, record["sin"], atol=1e-6, rtol=0, msg=message)
            with_cos += 1
        frames = [value for kind, value in record["layout"] if kind == "frames"]
        counts["text only"] += not frames
        counts["video"] += any(t > 1 for t, _, _ in frames)
        counts["several items"] += len(frames) >= 2
    assert with_cos == 12 and min(counts.values()) >= 8, (with_cos, counts)


def left_padded(rows: list[torch.Tensor], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of different lengths left-padded into (ids, attention_mask)."""
    length = max(len(row) for row in rows)
    ids = torch.full((len(rows), length), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), length, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, length - len(row) :], mask[b, length - len(row) :] = row, 1
    return ids, mask


def test_mmrope_batches_match_the_official_rows():
    """The official functions take one row; ours takes a left-padded batch. The fixture's 64 rows in batches of 4
    consecutive rows (different layouts per row, text-only rows among them): our batch's image grids are the rows'
    grids in row order (each row mapped as in `lumos_row`), and row b's official positions must equal ours at row b's
    real tokens exactly (padding is not compared), the deltas 0, and where the row has cos / sin, ours at its real
    tokens within 1e-6."""
    fixture, config = load("mmrope_official"), lumos_config()
    rotary, padded_rows = RotaryEmbedding(config), 0
    cases = fixture["cases"]
    for first in range(0, len(cases), 4):
        rows = [lumos_row(record) for record in cases[first : first + 4]]
        ids, mask = left_padded([row[0] for row in rows])
        grids = [grid for row in rows for grid in row[1]]
        ours, deltas = build_position_ids(ids, config, torch.tensor(grids) if grids else None, attention_mask=mask)
        cos, sin = rotary(torch.zeros(1), ours)
        assert torch.equal(deltas, torch.zeros_like(deltas))
        for b, (record, (_, _, theirs)) in enumerate(zip(cases[first : first + 4], rows)):
            real, message = mask[b].bool(), f"case {first + b}: {record['layout']}"
            assert torch.equal(ours[:, b, real], theirs), message
            padded_rows += not real.all()
            if "cos" in record:
                torch.testing.assert_close(cos[b, real], record["cos"][0], atol=1e-6, rtol=0, msg=message)
                torch.testing.assert_close(sin[b, real], record["sin"][0], atol=1e-6, rtol=0, msg=message)
    assert padded_rows >= 40, padded_rows


# ------------------------------------------------------------------------------------------------
# Official OmniRoPE (OmniGen2): caption, reference images, output image
# ------------------------------------------------------------------------------------------------


def omnigen_row(record: dict) -> tuple[torch.Tensor, list, list]:
    """A fixture row in our terms: the caption is text, each image one group of grid (1, h, w). OmniGen2 puts images
    back to back, so consecutive images alternate our image and video placeholders (two runs, two groups; a one-frame
    group is placed as an image): (ids, image grids, video grids)."""
    ids, grids = [1 + k % 50 for k in range(record["caption"])], ([], [])
    for n, (h, w) in enumerate([*record["references"], record["output"]]):
        ids += [(IMAGE, VIDEO)[n % 2]] * (h * w)
        grids[n % 2].append([1, h, w])
    return torch.tensor(ids), *grids


def omnirope_config(**rope) -> RoFormerExtVisionTextConfig:
    """Ours for OmniGen2's axes_dim (8, 12, 12): head_dim 32, mrope_section [4, 6, 6] pairs per axis."""
    return RoFormerExtVisionTextConfig(
        hidden_size=64, num_attention_heads=2, image_token_id=IMAGE, video_token_id=VIDEO,
        rope_parameters={"position_scheme": "omnirope", "mrope_section": [4, 6, 6], **rope},
    )  # fmt: skip


def grids_or_none(rows: list) -> torch.Tensor | None:
    return torch.tensor(rows) if rows else None


def test_omnirope_matches_the_official_code():
    """Official VectorSpaceLab/OmniGen2 `OmniGen2RotaryPosEmbed` (diffusers 0.33.1's `get_1d_rotary_pos_embed` per
    axis, axes_dim (8, 12, 12)) and `apply_rotary_emb(use_real=False)` on 60 single rows: a caption at 0, 1, ..., then
    each reference image and the output image at (s, i, j), s advancing by max(h, w). Mapping in `omnigen_row`. Ours
    ("omnirope", temporal_stride 1, its default allocation "omnirope": each axis its own ladder θ^(−2k/d_a) on its
    mrope_section pairs, interleaved pairs): every position exactly; cos / sin (24 rows) from our positions within
    1e-5 of the official complex128 tables (ours float32); random queries / keys (8 rows) rotated by ours within 1e-5.
    Without the per-axis ladders ("sections", one ladder sliced over the head) the h / w frequencies differ."""
    fixture, config = load("omnirope_official"), omnirope_config()
    assert config.rope_parameters["axis_allocation"] == "omnirope" and fixture["axes_dim"] == (8, 12, 12)
    rotary, sliced = RotaryEmbedding(config), RotaryEmbedding(omnirope_config(axis_allocation="sections"))
    with_references, with_freqs, rotated = 0, 0, 0
    for case, record in enumerate(fixture["cases"]):
        ids, images, videos = omnigen_row(record)
        ours, _ = build_position_ids(ids[None], config, grids_or_none(images), grids_or_none(videos))
        message = f"case {case}: {record['caption']}, {record['references']}, {record['output']}"
        assert torch.equal(ours[:, 0].T.double(), record["position_ids"]), message
        with_references += len(record["references"]) >= 2
        if "cos" in record:
            cos, sin = rotary(torch.zeros(1), ours)
            torch.testing.assert_close(cos[0, :, 0::2].double(), record["cos"], atol=1e-5, rtol=0, msg=message)
            torch.testing.assert_close(sin[0, :, 0::2].double(), record["sin"], atol=1e-5, rtol=0, msg=message)
            assert not torch.allclose(sliced(torch.zeros(1), ours)[0][0, :, 0::2].double(), record["cos"], atol=1e-3)
            with_freqs += 1
        if "query" in record:
            for name in ("query", "key"):  # theirs (batch, seq, heads, head_dim), ours (batch, heads, seq, head_dim)
                x = record[name].transpose(1, 2)
                ours_rotated = apply_rotary(x, cos, sin, "interleaved").transpose(1, 2)
                torch.testing.assert_close(ours_rotated, record[f"rotated_{name}"], atol=1e-5, rtol=0, msg=message)
            rotated += 1
    assert with_references >= 15 and with_freqs == 24 and rotated == 8, (with_references, with_freqs, rotated)


def test_omnirope_batches_match_the_official_rows():
    """OmniGen2's forward takes a batch (captions right-padded, sequences padded at the end); its generator checked
    that each row's batched output equals its single-row output, which the fixture records. Ours takes left-padded
    batches: the 60 rows in batches of 4 consecutive rows (different captions and image counts per row), our grids the
    rows' grids in row order (each row mapped as in `omnigen_row`); row b's official positions must equal ours at row
    b's real tokens exactly, and where recorded, its cos / sin ours there within 1e-5 (padding is not compared)."""
    fixture, config = load("omnirope_official"), omnirope_config()
    rotary, cases, padded_rows = RotaryEmbedding(config), fixture["cases"], 0
    for first in range(0, len(cases), 4):
        rows = [omnigen_row(record) for record in cases[first : first + 4]]
        ids, mask = left_padded([row[0] for row in rows])
        images = grids_or_none([grid for row in rows for grid in row[1]])
        videos = grids_or_none([grid for row in rows for grid in row[2]])
        ours, _ = build_position_ids(ids, config, images, videos, attention_mask=mask)
        cos, sin = rotary(torch.zeros(1), ours)
        for b, record in enumerate(cases[first : first + 4]):
            real, message = mask[b].bool(), f"case {first + b}"
            assert torch.equal(ours[:, b, real].T.double(), record["position_ids"]), message
            padded_rows += not real.all()
            if "cos" in record:
                torch.testing.assert_close(cos[b, real][:, 0::2].double(), record["cos"], atol=1e-5, rtol=0)
                torch.testing.assert_close(sin[b, real][:, 0::2].double(), record["sin"], atol=1e-5, rtol=0)
    assert padded_rows >= 30, padded_rows


def test_omnirope_ladders_refuse_frequencies_recomputed_for_the_head():
    """dynamic / longrope recompute one ladder for the whole head while running: refused with the per-axis ladders;
    a scaling fixed at build time (linear) scales each axis's ladder."""
    with pytest.raises(ValueError, match="its own frequency ladder"):
        RotaryEmbedding(omnirope_config(rope_type="dynamic", factor=2.0))
    plain, linear = RotaryEmbedding(omnirope_config()), RotaryEmbedding(omnirope_config(rope_type="linear", factor=4.0))
    torch.testing.assert_close(linear.inv_freq, plain.inv_freq / 4, atol=0, rtol=0)
    assert plain.inv_freq[[0, 4, 10]].tolist() == [1.0, 1.0, 1.0]  # each axis's ladder starts at θ^0


# ------------------------------------------------------------------------------------------------
# Official VRoPE: per-pair position ids of text / image / video sequences
# ------------------------------------------------------------------------------------------------


def test_vrope_matches_the_official_code():
    """The official `VRoPE` takes the shapes themselves (no tokens): each text / image / video shape becomes a run of
    our tokens (placeholders with their grid). It gives every token one position per frequency pair (head_dim 16:
    8 pairs); ours is the position on the axis the allocation gives that pair (4 axes, pair p -> axis p mod 4).
    Compared exactly, with the next text position (its `current_index`)."""
    fixture = load("vrope")
    config = RoFormerExtVisionTextConfig(
        hidden_size=32, num_attention_heads=2, image_token_id=IMAGE, video_token_id=VIDEO,
        rope_parameters={"position_scheme": "vrope"},
    )  # fmt: skip
    axis = RotaryEmbedding(config).axis_of_pair
    assert axis.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    videos_with_frames = 0
    for case, record in enumerate(fixture["cases"]):
        ids, images, videos = [], [], []
        for kind, value in record["layout"]:
            if kind == "text":
                ids += [1 + (len(ids) + k) % 50 for k in range(value)]
            else:
                ids += [IMAGE if kind == "image" else VIDEO] * (value[0] * value[1] * value[2])
                (images if kind == "image" else videos).append(list(value))
                videos_with_frames += kind == "video" and value[0] > 1
        grid = lambda rows: torch.tensor(rows) if rows else None  # noqa: E731
        ours, delta = build_position_ids(torch.tensor([ids]), config, grid(images), grid(videos))
        per_pair = ours[:, 0].T[:, axis]  # (tokens, pairs)
        assert torch.equal(per_pair, record["position_ids"].float()), f"case {case}: {record['layout']}"
        assert delta.item() == record["next_index"] - len(ids), f"case {case}: {record['layout']}"
    assert videos_with_frames >= 20, videos_with_frames


# ------------------------------------------------------------------------------------------------
# Official Circle-RoPE: Qwen2.5-VL's layout, images (and one-frame videos) on a ring
# ------------------------------------------------------------------------------------------------

CIRCLE = {
    "circle_rope": {},  # the official code/config.json's circle_rope (alpha 0.5, radius 10, centred): our defaults
    "circle_rope_auto": {"circle_alpha": 0.25, "circle_radius": "auto-2", "circle_move_to_origin": False,
                         "circle_dff_rate": 0.3, "circle_move_to_positive": 1.5},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CIRCLE))
def test_circle_rope_matches_the_official_code(name):
    """Same tokens on both sides (`<vision_start> h·w placeholders <vision_end>`, the markers text to us, one group and
    one grid row per image or one-frame video). Positions to 1e-5 (they are float: ring points plus the start), deltas
    as above to 1e-5 (the reference rounds max + 1 − padded length in float32; text-only padded rows of one token
    aside, as above); cos / sin: transformers' `Qwen2_5_VLRotaryEmbedding` (mrope_section [4, 6, 6], head_dim 32) on
    the fixture's positions against ours with the scheme's default allocation ("sections"), to 1e-6."""
    fixture = load(name)
    config = RoFormerExtVisionTextConfig(
        hidden_size=128, num_attention_heads=4, image_token_id=IMAGE, video_token_id=VIDEO,
        rope_parameters={"position_scheme": "circle_rope", "mrope_section": [4, 6, 6], "pair_layout": "half",
                         **CIRCLE[name]},
    )  # fmt: skip
    assert config.rope_parameters["axis_allocation"] == "sections"
    rotary, images, with_cos = RotaryEmbedding(config), 0, 0
    for case, record in enumerate(fixture["cases"]):
        mask = record["attention_mask"]
        real = mask.bool()
        ours, deltas = build_position_ids(
            record["input_ids"], config, record["image_grid_thw"], record["video_grid_thw"], mask,
            record["second_per_grid_ts"],
        )  # fmt: skip
        message = f"{name} case {case}: {record['layouts']}"
        for b in range(mask.shape[0]):
            # float ring points: the CPU's vectorised sin / cos may differ from the fixture's machine by an ulp
            # (3.8e-6 at these magnitudes on an AMD EPYC); a wrong position is off by 0.1 or more
            torch.testing.assert_close(
                ours[:, b, real[b]],
                record["position_ids"][:, b, real[b]],
                atol=1e-5,
                rtol=0,
                check_dtype=False,
                msg=message,
            )
        real_tokens = mask.sum(1, keepdim=True)
        padding = (mask.shape[1] - real_tokens).float()
        artefact = (record["image_grid_thw"] is None) & (record["video_grid_thw"] is None) & (real_tokens == 1)
        artefact &= padding > 0
        torch.testing.assert_close(deltas[~artefact], (record["deltas"] + padding)[~artefact], atol=1e-5, rtol=0)
        images += 0 if record["image_grid_thw"] is None else len(record["image_grid_thw"])
        if "cos" in record:
            cos, sin = rotary(torch.zeros(1), record["position_ids"])
            torch.testing.assert_close(cos[real], record["cos"][real], atol=1e-6, rtol=0)
            torch.testing.assert_close(sin[real], record["sin"][real], atol=1e-6, rtol=0)
            with_cos += 1
    assert images >= 40 and with_cos == 6, (images, with_cos)


def test_circle_rope_refuses_several_frames_and_bad_knobs():
    config = RoFormerExtVisionTextConfig(
        hidden_size=128, num_attention_heads=4, image_token_id=IMAGE, video_token_id=VIDEO,
        rope_parameters={"position_scheme": "circle_rope", "mrope_section": [4, 6, 6]},
    )  # fmt: skip
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
            RoFormerExtVisionTextConfig(
                hidden_size=128, num_attention_heads=4,
                rope_parameters={"position_scheme": "circle_rope", "mrope_section": [4, 6, 6], knob: value},
            )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# Official GRAPE (multiplicative, commuting): learned frequencies on RoPE's planes
# ------------------------------------------------------------------------------------------------


def grape_rotary(fixture: dict, **rope) -> torch.nn.Module:
    from roformer_ext import RoFormerExtConfig
    from roformer_ext.rope import rotary_embedding_class

    config = RoFormerExtConfig(
        hidden_size=fixture["heads"] * fixture["head_dim"], num_attention_heads=fixture["heads"],
        rope_parameters={"rope_type": "grape_m", "rope_theta": fixture["base"], "pair_layout": "half", **rope},
    )  # fmt: skip
    return rotary_embedding_class("grape_m")(config)


def test_grape_m_matches_the_official_code():
    """The official `MSGRAPECommuting` (its planes (i, i + d/2), our "half" layout) with log-frequencies moved off
    RoPE's (as training moves them): our initial log-frequencies equal its, and with its learned ones loaded, cos
    equal and sin negated (it turns by −n·ω) within 1e-6, the rotated queries and keys within 1e-6."""
    fixture = load("grape_m")
    rotary = grape_rotary(fixture)
    torch.testing.assert_close(rotary.log_freq.detach(), fixture["initial_log_freq"], atol=0, rtol=0)
    with torch.no_grad():
        rotary.log_freq.copy_(fixture["log_freq"])
    seq, pairs = fixture["query"].shape[1], fixture["head_dim"] // 2
    cos, sin = rotary(torch.zeros(1), torch.arange(seq)[None])
    torch.testing.assert_close(cos[0, :, :pairs], fixture["cos"][0, :, 0], atol=1e-6, rtol=0)
    torch.testing.assert_close(sin[0, :, :pairs], -fixture["sin"][0, :, 0], atol=1e-6, rtol=0)
    for name in ("query", "key"):
        ours = apply_rotary(fixture[name].transpose(1, 2), cos, sin, "half").transpose(1, 2)
        torch.testing.assert_close(ours, fixture[f"rotated_{name}"], atol=1e-6, rtol=0)


def test_grape_m_per_head_matches_the_official_code():
    """The official per-head option (`share_across_heads=False`, our `grape_share_across_heads` False): a (heads,
    pairs) set of log-frequencies, moved off RoPE's per head; cos / sin carry a heads axis, equal per head to the
    official ones (sin negated) within 1e-6, and the rotated queries and keys within 1e-6."""
    fixture = load("grape_m_per_head")
    assert not fixture["share_across_heads"]
    rotary = grape_rotary(fixture, grape_share_across_heads=False)
    torch.testing.assert_close(rotary.log_freq.detach(), fixture["initial_log_freq"], atol=0, rtol=0)
    with torch.no_grad():
        rotary.log_freq.copy_(fixture["log_freq"])
    seq, pairs = fixture["query"].shape[1], fixture["head_dim"] // 2
    cos, sin = rotary(torch.zeros(1), torch.arange(seq)[None])  # (1, heads, seq, head_dim)
    assert cos.shape == (1, fixture["heads"], seq, fixture["head_dim"])
    torch.testing.assert_close(cos[0, :, :, :pairs].transpose(0, 1), fixture["cos"][0], atol=1e-6, rtol=0)
    torch.testing.assert_close(sin[0, :, :, :pairs].transpose(0, 1), -fixture["sin"][0], atol=1e-6, rtol=0)
    for name in ("query", "key"):
        ours = HeadwiseRotation("half").values(fixture[name].transpose(1, 2), cos, sin).transpose(1, 2)
        torch.testing.assert_close(ours, fixture[f"rotated_{name}"], atol=1e-6, rtol=0)


def test_grape_m_frequencies_learn_or_stay_frozen():
    fixture = load("grape_m")
    rotary = grape_rotary(fixture)
    cos, sin = rotary(torch.zeros(1), torch.arange(8)[None])
    apply_rotary(fixture["query"][:, :8].transpose(1, 2), cos, sin, "half").square().sum().backward()
    assert rotary.log_freq.grad is not None and rotary.log_freq.grad.abs().sum() > 0
    assert not grape_rotary(fixture, grape_learnable_freq=False).log_freq.requires_grad
    with pytest.raises(ValueError, match="grape_log_freq_scale"):
        grape_rotary(fixture, grape_log_freq_scale=0)
