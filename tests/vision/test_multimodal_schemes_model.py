"""Every multimodal variant in the model: cached decoding, packing, left padding, save / load and remote code."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config
from vision_sizes import IMAGE, PATCH_DIM, SIZES, VIDEO

from roformer_ext import (
    RoFormerExtVisionTextConfig,
    RoFormerExtVisionTextForCausalLM,
    RoFormerExtVisionTextForMaskedLM,
    RoFormerExtVisionTextForSequenceClassification,
    RoFormerExtVisionTextModel,
)
from roformer_ext.positions import build_position_ids

SECTION = [4, 4, 4]  # head_dim 24 -> 12 frequency pairs
# Each variant by name; its allocation (and axes) come with the name. Knobs away from their defaults where they exist.
SCHEMES = {
    "qwen2_5_vl": {"mrope_section": SECTION, "tokens_per_second": 4},
    "qwen3_vl": {"mrope_section": SECTION},
    "mrope_interleave": {"mrope_section": SECTION, "temporal_stride": 2.0},
    "ilrope": {"mrope_section": SECTION},
    "omnirope": {"mrope_section": SECTION},
    "videorope": {"mrope_section": SECTION, "temporal_stride": 3.0},
    "hope": {"mrope_section": SECTION, "temporal_stride": 0.5},
    "v2pe": {"visual_stride": 4.0},
    "mmrope": {"position_scale": [1.0, 2.0, 0.5]},
    "vrope": {},
    "mhrope": {"mrope_section": [1, 1, 1]},  # heads per axis: 4 heads, the 4th unrotated (head_dim 12)
    "circle_rope": {"mrope_section": SECTION, "circle_radius": 3.0, "circle_alpha": 0.3, "circle_dff_rate": 0.2},
}


def config(scheme: str, **overrides) -> RoFormerExtVisionTextConfig:
    sizes = {**SIZES, "num_attention_heads": 4 if scheme == "mhrope" else SIZES["num_attention_heads"]}
    rope = overrides.pop("rope_parameters", None) or {"position_scheme": scheme, **SCHEMES[scheme]}
    return position_sensitive_config(RoFormerExtVisionTextConfig, **{**sizes, **overrides}, rope_parameters=rope)


def sample(generator: torch.Generator, image: tuple, video: tuple) -> dict:
    """text, an image, text, a video, text: (ids, pixels, grids)."""
    a, b, c = (torch.randint(5, 90, (n,), generator=generator) for n in (3, 2, 2))
    ids = torch.cat([a, torch.full((math.prod(image),), IMAGE), b, torch.full((math.prod(video),), VIDEO), c])
    pixels, video_pixels = (torch.randn(math.prod(grid), PATCH_DIM, generator=generator) for grid in (image, video))
    return {"ids": ids, "pixels": pixels, "video_pixels": video_pixels, "image": image, "video": video}


def samples(seed: int = 0, scheme: str | None = None) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    if scheme == "circle_rope":  # places images only (grid t = 1): one-frame videos
        return [sample(generator, (1, 2, 3), (1, 2, 2)), sample(generator, (1, 3, 2), (1, 1, 2))]
    return [sample(generator, (1, 2, 3), (3, 2, 2)), sample(generator, (1, 3, 2), (2, 1, 2))]


def batch_of(parts: list[dict], left_pad: list[int]) -> dict:
    width = max(len(p["ids"]) + pad for p, pad in zip(parts, left_pad))
    rows, masks = [], []
    for part, pad in zip(parts, left_pad):
        right = width - pad - len(part["ids"])
        rows.append(torch.cat([torch.zeros(pad, dtype=torch.long), part["ids"], torch.zeros(right, dtype=torch.long)]))
        masks.append(torch.tensor([0] * pad + [1] * len(part["ids"]) + [0] * right))
    return {
        "input_ids": torch.stack(rows),
        "attention_mask": torch.stack(masks),
        "pixel_values": torch.cat([p["pixels"] for p in parts]),
        "image_grid_thw": torch.tensor([p["image"] for p in parts]),
        "pixel_values_videos": torch.cat([p["video_pixels"] for p in parts]),
        "video_grid_thw": torch.tensor([p["video"] for p in parts]),
        "second_per_grid_ts": torch.tensor([0.5] * len(parts)),
    }


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_config_names_the_variant_and_its_allocation(scheme):
    rope = config(scheme).rope_parameters
    assert rope["axes"] == (4 if scheme == "vrope" else 3) and rope["position_scheme"] == scheme
    expected = {
        "qwen2_5_vl": "sections",
        "omnirope": "omnirope",
        "videorope": "videorope",
        "hope": "hope",
        "mmrope": "mmrope",
        "v2pe": "interleaved",
        "mhrope": "headwise",
        "vrope": "interleaved",
        "circle_rope": "sections",
    }.get(scheme, "mrope_interleaved")
    assert rope["axis_allocation"] == expected


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_cached_decoding_equals_recomputation(scheme):
    """Greedy generation after an image + video prompt, both rows left-padded by different amounts."""
    torch.manual_seed(0)
    model = RoFormerExtVisionTextForCausalLM(config(scheme)).double().eval()
    parts = samples(scheme=scheme)
    batch = batch_of(parts, [3, 3 + len(parts[0]["ids"]) - len(parts[1]["ids"])])
    assert_cached_equals_recomputed(model, batch, max_new_tokens=4)


def assert_cached_equals_recomputed(model, batch: dict, max_new_tokens: int) -> None:
    """Greedy tokens and logits equal recomputation (float64: float32's summation orders differ by ~5e-5)."""
    batch.update({name: batch[name].double() for name in ("pixel_values", "pixel_values_videos")})
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=0,
        suppress_tokens=[IMAGE, VIDEO],
        return_dict_in_generate=True,
        output_logits=True,
    )
    cached = model.generate(**batch, use_cache=True, **kwargs)
    recomputed = model.generate(**batch, use_cache=False, **kwargs)
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(torch.stack(cached.logits), torch.stack(recomputed.logits), atol=1e-10, rtol=0)
    assert_position_sensitive(model, lambda m: torch.stack(m.generate(**batch, use_cache=True, **kwargs).logits), 1e-10)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_left_padding_leaves_real_tokens_unchanged(scheme):
    torch.manual_seed(0)
    model = RoFormerExtVisionTextModel(config(scheme)).eval()
    parts = samples(scheme=scheme)
    with torch.no_grad():
        padded = model(**batch_of(parts, [4, 0])).last_hidden_state[0, 4:]
        alone = model(**batch_of(parts[:1], [0])).last_hidden_state[0]
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=0)
    assert_position_sensitive(model, lambda m: m(**batch_of(parts, [4, 0])).last_hidden_state, 1e-5)


@pytest.mark.parametrize("attention", ["eager", "sdpa", "flex_attention"])
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_packed_row_equals_each_sequence_alone(scheme, attention):
    torch.manual_seed(0)
    model = RoFormerExtVisionTextModel(config(scheme, attn_implementation=attention)).eval()
    parts = samples(scheme=scheme)
    packed = packed_row(parts)
    with torch.no_grad():
        row = model(**packed).last_hidden_state[0]
        alone = [model(**batch_of([part], [0])).last_hidden_state[0] for part in parts]
    torch.testing.assert_close(row, torch.cat(alone), atol=1e-5, rtol=0)
    assert_position_sensitive(model, lambda m: m(**packed).last_hidden_state, 1e-5)


def packed_row(parts: list[dict]) -> dict:
    """The parts end to end in one row with cu_seq_lens (as DataCollatorWithFlattening gives), no attention mask."""
    packed = batch_of(parts, [0, 0])
    lengths = [len(p["ids"]) for p in parts]
    packed["input_ids"] = torch.cat([p["ids"] for p in parts])[None]
    packed.pop("attention_mask")
    packed["cu_seq_lens_q"] = packed["cu_seq_lens_k"] = torch.tensor([0, lengths[0], sum(lengths)], dtype=torch.int32)
    packed["max_length_q"] = packed["max_length_k"] = max(lengths)
    return packed


@pytest.mark.parametrize("model_class", [RoFormerExtVisionTextForMaskedLM, RoFormerExtVisionTextForCausalLM,
                                         RoFormerExtVisionTextForSequenceClassification])  # fmt: skip
def test_every_head_packed_row_equals_each_sequence_alone(model_class):
    torch.manual_seed(0)
    model = model_class(config("ilrope", num_labels=3)).eval()
    parts = samples(scheme="ilrope")
    packed = packed_row(parts)
    with torch.no_grad():
        logits = model(**packed).logits
        alone = [model(**batch_of([part], [0])).logits for part in parts]
    if model_class is RoFormerExtVisionTextForSequenceClassification:
        torch.testing.assert_close(logits, torch.cat(alone), atol=1e-5, rtol=0)
    else:
        torch.testing.assert_close(logits[0], torch.cat([a[0] for a in alone]), atol=1e-5, rtol=0)
    assert_position_sensitive(model, lambda m: m(**packed).logits, 1e-5)


REMOTE_LOADER = textwrap.dedent(
    """
    import sys
    sys.modules["roformer_ext"] = None  # the package must not be importable here
    import torch, transformers
    for folder in sys.argv[1:]:
        model = transformers.AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
        assert not type(model).__module__.startswith("roformer_ext"), type(model).__module__
        inputs = torch.load(folder + "/inputs.pt")
        with torch.no_grad():
            torch.save(model(**inputs).logits, folder + "/remote_output.pt")
    """
)


def test_save_load_and_remote_code_keep_every_variant(tmp_path):
    """Reloaded here and, through trust_remote_code, in a fresh process without roformer_ext: the same logits."""
    folders, expected = [], {}
    for scheme in sorted(SCHEMES):
        inputs = batch_of(samples(scheme=scheme), [0, 3])
        torch.manual_seed(0)
        model = RoFormerExtVisionTextForMaskedLM(config(scheme)).eval()
        folder = tmp_path / scheme
        model.save_pretrained(folder)
        torch.save(inputs, folder / "inputs.pt")
        reloaded = RoFormerExtVisionTextForMaskedLM.from_pretrained(folder).eval()
        assert reloaded.config.rope_parameters == model.config.rope_parameters
        with torch.no_grad():
            expected[scheme] = model(**inputs).logits
            torch.testing.assert_close(reloaded(**inputs).logits, expected[scheme], atol=0, rtol=0)
        folders.append(str(folder))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run([sys.executable, "-c", REMOTE_LOADER, *folders], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    for scheme in sorted(SCHEMES):
        remote = torch.load(tmp_path / scheme / "remote_output.pt")
        torch.testing.assert_close(remote, expected[scheme], atol=1e-6, rtol=0)


def test_packed_positions_restart_per_sequence():
    """build_position_ids with cu_seq_lens: each sequence's positions are those it gets alone."""
    parts, cfg = samples(), config("videorope")
    packed = packed_row(parts)
    grids = (packed["image_grid_thw"], packed["video_grid_thw"])
    positions, deltas = build_position_ids(packed["input_ids"], cfg, *grids, cu_seq_lens=packed["cu_seq_lens_q"])
    (first, _), (second, second_delta) = (
        build_position_ids(p["ids"][None], cfg, *(g[i : i + 1] for g in grids)) for i, p in enumerate(parts)
    )
    assert torch.equal(positions, torch.cat([first, second], dim=2)) and torch.equal(deltas, second_delta)
    with pytest.raises(ValueError, match="cu_seq_lens must rise from 0 to batch \\* seq"):
        build_position_ids(packed["input_ids"], cfg, *grids, cu_seq_lens=torch.tensor([0, 5]))


def _video_positions(cfg, parts, training: bool) -> torch.Tensor:
    batch = batch_of(parts, [0, 2])
    grids = (batch["image_grid_thw"], batch["video_grid_thw"], batch["attention_mask"])
    return build_position_ids(batch["input_ids"], cfg, *grids, training=training)[0]


HOPE_SCALES = [0.5, 1.5, 3.0]


def hope_config(stride: float = 2.0, **rope) -> RoFormerExtVisionTextConfig:
    rope = {"position_scheme": "hope", "mrope_section": SECTION, "temporal_stride": stride, **rope}
    return config("hope", rope_parameters=rope)


def test_hope_dynamic_temporal_scaling():
    """`temporal_scales`: eval uses `temporal_stride`; training draws one scale of the set per video (each row equals
    one fixed scale's positions, every scale shows over 12 seeds), the same seed the same draw."""
    parts, dynamic = samples(), hope_config(temporal_scales=HOPE_SCALES)
    expected = {scale: _video_positions(hope_config(scale), parts, False) for scale in [2.0, *HOPE_SCALES]}
    assert torch.equal(_video_positions(dynamic, parts, False), expected[2.0])
    seen = set()
    for seed in range(12):
        torch.manual_seed(seed)
        drawn = _video_positions(dynamic, parts, True)
        torch.manual_seed(seed)
        assert torch.equal(_video_positions(dynamic, parts, True), drawn)
        for row in range(len(parts)):
            matches = [scale for scale in HOPE_SCALES if torch.equal(drawn[:, row], expected[scale][:, row])]
            assert matches, (seed, row)
            seen.update(matches)
    assert seen == set(HOPE_SCALES)


def test_hope_model_draws_in_training_only():
    """A training forward equals an eval forward given the positions drawn under the same seed, and repeats."""
    torch.manual_seed(0)
    model = RoFormerExtVisionTextModel(hope_config(temporal_scales=HOPE_SCALES))
    batch = batch_of(samples(), [0, 2])
    with torch.no_grad():
        model.eval()
        first, second = model(**batch).last_hidden_state, model(**batch).last_hidden_state
        assert torch.equal(first, second)
        torch.manual_seed(5)
        drawn = _video_positions(model.config, samples(), True)
        given = model(**batch, position_ids=drawn).last_hidden_state
        model.train()
        torch.manual_seed(5)
        trained = model(**batch).last_hidden_state
        torch.manual_seed(5)
        assert torch.equal(model(**batch).last_hidden_state, trained)
    torch.testing.assert_close(trained, given, atol=1e-6, rtol=0)
    assert not torch.allclose(trained, first)  # no scale of the set is the fixed 2.0


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "per-head"])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_grape_m_learns_saves_and_decodes_in_the_model(tmp_path, shared, attn_implementation):
    """GRAPE's learned frequencies (shared or per head), moved off RoPE's: save / load, cached decoding, gradients."""
    rope = {"rope_type": "grape_m", "position_scheme": "mrope_interleave", "mrope_section": SECTION,
            "grape_share_across_heads": shared}  # fmt: skip
    torch.manual_seed(0)
    vision_config = config("mrope_interleave", rope_parameters=rope, attn_implementation=attn_implementation)
    model = RoFormerExtVisionTextForCausalLM(vision_config).eval()
    rotary = model.base_model.rotary_emb
    assert rotary.log_freq.dim() == (1 if shared else 2)
    with torch.no_grad():
        rotary.log_freq.add_(torch.randn_like(rotary.log_freq) * 4)
    parts = samples()
    batch = batch_of(parts, [3, 3 + len(parts[0]["ids"]) - len(parts[1]["ids"])])
    model.save_pretrained(tmp_path)
    reloaded = RoFormerExtVisionTextForCausalLM.from_pretrained(tmp_path, attn_implementation=attn_implementation)
    assert torch.equal(reloaded.base_model.rotary_emb.log_freq, rotary.log_freq)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits, atol=0, rtol=0)
    model.train()
    model(**batch, labels=batch["input_ids"]).loss.backward()
    assert rotary.log_freq.grad is not None and rotary.log_freq.grad.abs().sum() > 0
    assert_cached_equals_recomputed(model.double().eval(), batch, max_new_tokens=3)


@pytest.mark.parametrize(
    "rope, fields, message",
    [
        ({"position_scheme": "mhrope", "mrope_section": [2, 2, 1]}, {}, "summing to at most num_attention_heads = 4"),
        ({"position_scheme": "mhrope"}, {"num_attention_heads": 2}, r"attention heads per axis.*got None"),
        ({"position_scheme": "mhrope", "mrope_section": [1, 1, 1]}, {"attention_type": "linear"}, "linear attention"),
        ({"position_scheme": "rope_tie", "axis_allocation": "videorope"}, {}, "'videorope' needs rope_parameters"),
        ({"position_scheme": "videorope", "mrope_section": SECTION, "temporal_stride": -1}, {}, "a positive number"),
        ({"position_scheme": "mrope_interleave", "mrope_section": SECTION, "spatial_reset": 1}, {}, "True or False"),
        ({"position_scheme": "mmrope", "position_scale": [1, 2]}, {}, "three positive numbers"),
        ({"position_scheme": "hope", "mrope_section": SECTION, "temporal_scales": []}, {}, "non-empty list of"),
        ({"position_scheme": "hope", "mrope_section": SECTION, "temporal_scales": [1, -2]}, {}, "non-empty list of"),
        ({"position_scheme": "qwen3_vl", "axis_allocation": "nope"}, {}, "Register a new one with .*register_axis_"),
    ],
)
def test_bad_variant_parameters_name_the_fix(rope, fields, message):
    with pytest.raises(ValueError, match=message):
        RoFormerExtVisionTextConfig(**{**SIZES, "num_attention_heads": 4, "rope_parameters": rope, **fields})
