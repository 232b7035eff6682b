"""RoFormerExtImageProcessor: resize bounds, exact normalisation, patch order, videos, bad input, save/load."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from transformers import AutoImageProcessor

from roformer_ext import RoFormerExtConfig
from roformer_ext.image_processing_roformer_ext import RoFormerExtImageProcessor, fit_to_patches

P, TP = 16, 2
MIN_PIXELS, MAX_PIXELS = 32 * 32, 384 * 384
FLOAT_128 = np.full((32, 32, 3), 128.0, np.float32)  # a [0, 255] float image


def random_image(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, channels), dtype=np.uint8)


def unpatchify(pixel_values: np.ndarray, grid: tuple[int, int, int], channels: int = 3) -> np.ndarray:
    """Inverse of the documented layout: (t*h*w, C*tp*p*p) in (t, row, col) order -> (t*tp, C, H, W)."""
    t, h, w = grid
    patches = np.asarray(pixel_values).reshape(t, h, w, channels, TP, P, P)
    return patches.transpose(0, 4, 3, 1, 5, 2, 6).reshape(t * TP, channels, h * P, w * P)


@pytest.fixture
def processor() -> RoFormerExtImageProcessor:
    return RoFormerExtImageProcessor()


def test_defaults_shapes_and_dtypes(processor):
    config = RoFormerExtConfig()
    assert (processor.patch_size, processor.temporal_patch_size) == (config.patch_size, config.temporal_patch_size)
    assert dict(processor.size) == {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS}
    out = processor(random_image(64, 96))  # already whole patches and inside the pixel budget: no resize
    assert out["pixel_values"].shape == (4 * 6, 3 * TP * P * P) and out["pixel_values"].dtype == np.float32
    assert out["image_grid_thw"].tolist() == [[1, 4, 6]] and out["image_grid_thw"].dtype == np.int64
    pt = processor([random_image(64, 96), random_image(32, 48)], return_tensors="pt")
    assert isinstance(pt["pixel_values"], torch.Tensor) and pt["pixel_values"].shape == (24 + 6, 1536)
    assert pt["image_grid_thw"].tolist() == [[1, 4, 6], [1, 2, 3]]


def test_normalisation_exact_and_patch_order_by_reconstruction():
    mean, std = [0.1, 0.2, 0.3], [0.5, 0.25, 0.125]
    processor = RoFormerExtImageProcessor(image_mean=mean, image_std=std)
    image = random_image(48, 80, seed=1)  # 3 x 5 patches: non-square, so a row/column swap shows
    out = processor(image)
    assert out["image_grid_thw"].tolist() == [[1, 3, 5]]
    expected = (image.astype(np.float64) / 255 - np.array(mean)) / np.array(std)  # (H, W, C)
    for frame in unpatchify(out["pixel_values"], (1, 3, 5)):  # the image fills both temporal slots
        np.testing.assert_allclose(frame.transpose(1, 2, 0), expected, rtol=0, atol=1e-5)


@settings(max_examples=300, deadline=None)
@given(height=st.integers(1, 5000), width=st.integers(1, 5000))
def test_fit_to_patches_bounds(height, width):
    ratio = max(height, width) / min(height, width)
    try:
        h, w = fit_to_patches(height, width, P, MIN_PIXELS, MAX_PIXELS)
    except ValueError as error:
        # only when even max_pixels cannot give the short side one patch at this aspect ratio
        assert ratio > MAX_PIXELS / (P * P)
        assert f"{height}x{width}" in str(error) and f"{P}x{P}" in str(error)
        return
    assert h % P == 0 and w % P == 0 and h >= P and w >= P
    assert MIN_PIXELS <= h * w <= MAX_PIXELS
    # one scale factor, each side rounded to a whole patch: aspect ratio within the rounding
    assert (h - P) / (w + P) <= height / width
    if w > P:
        assert height / width <= (h + P) / (w - P)


@pytest.mark.parametrize(
    "size, expected",
    [
        ((256, 512), (256, 512)),  # whole patches inside the budget: unchanged
        ((250, 500), (256, 496)),  # inside the budget: each side rounded to whole patches
        ((500, 1000), (256, 528)),  # over max_pixels: scaled down, rounded down when rounding overflows
        ((3000, 2000), (464, 304)),
        ((5, 5), (32, 32)),  # under min_pixels: scaled up
        ((4, 400), (16, 1600)),  # short side grown to one patch, the budget allows it
    ],
)
def test_fit_to_patches_examples(size, expected):
    assert fit_to_patches(*size, P, MIN_PIXELS, MAX_PIXELS) == expected


def test_min_and_max_pixels_at_call_and_init():
    image = random_image(100, 200)
    budget = 16 * 16 * 100
    grid = RoFormerExtImageProcessor()(image, min_pixels=budget, max_pixels=budget)["image_grid_thw"][0]
    assert int(np.prod(grid)) * P * P <= budget  # max_pixels is the hard bound when the two collide
    small = RoFormerExtImageProcessor(max_pixels=64 * 64)
    assert dict(small.size) == {"min_pixels": MIN_PIXELS, "max_pixels": 64 * 64}
    assert int(np.prod(small(image)["image_grid_thw"][0])) * P * P <= 64 * 64
    big = RoFormerExtImageProcessor(min_pixels=512 * 512, max_pixels=1024 * 1024)
    assert int(np.prod(big(image)["image_grid_thw"][0])) * P * P >= 512 * 512


def test_get_number_of_image_patches_agrees(processor):
    for height, width in [(100, 200), (17, 900), (1200, 700), (1080, 1920)]:  # (bounds: test_fit_to_patches_bounds)
        grid = processor(random_image(height, width))["image_grid_thw"][0]
        assert processor.get_number_of_image_patches(height, width) == int(np.prod(grid))


def test_input_kinds_become_rgb(processor):
    grey, colour = np.full((32, 32), 200, dtype=np.uint8), random_image(32, 32)
    rgba = np.zeros((32, 32, 4), dtype=np.uint8)  # fully transparent: composited onto white
    inputs = [grey, Image.fromarray(grey, mode="L"), Image.fromarray(rgba, mode="RGBA"), rgba]
    inputs += [colour.transpose(2, 0, 1), torch.from_numpy(colour), Image.fromarray(colour).convert("P")]
    for image in inputs:
        out = processor(image)
        assert out["pixel_values"].shape == (4, 3 * TP * P * P), type(image)
    for image in inputs[:2]:
        frames = unpatchify(processor(image)["pixel_values"], (1, 2, 2))
        np.testing.assert_allclose(frames, (200 / 255 - 0.5) / 0.5, atol=1e-6)
    for image in inputs[2:4]:
        np.testing.assert_allclose(processor(image)["pixel_values"], 1.0, atol=1e-6)


def test_video_temporal_grouping_repeats_last_frame():
    processor = RoFormerExtImageProcessor(do_rescale=False, do_normalize=False)
    frames = [np.full((32, 48, 3), value, dtype=np.uint8) for value in (10, 20, 30)]
    out = processor(videos=[frames])
    assert "pixel_values" not in out
    assert out["video_grid_thw"].tolist() == [[2, 2, 3]]  # 3 frames -> 2 groups of 2
    assert out["pixel_values_videos"].shape == (2 * 2 * 3, 1536)
    assert [float(frame.mean()) for frame in unpatchify(out["pixel_values_videos"], (2, 2, 3))] == [10, 20, 30, 30]
    # patch order: all patches of group 0 before those of group 1
    assert np.all(out["pixel_values_videos"][:6] <= 20) and np.all(out["pixel_values_videos"][6:] == 30)


def test_video_layouts(processor):
    stack = np.stack([random_image(40, 60, seed=s) for s in range(4)])  # (T, H, W, C)
    one = processor(videos=stack)
    assert one["video_grid_thw"].tolist() == [[2, 2, 4]]  # 40x60 rounds to 32x64
    as_list = processor(videos=list(stack))
    np.testing.assert_array_equal(one["pixel_values_videos"], as_list["pixel_values_videos"])
    two = processor(videos=[stack, list(stack[:1])])
    assert two["video_grid_thw"].tolist() == [[2, 2, 4], [1, 2, 4]]
    both = processor(images=random_image(32, 32), videos=stack)
    assert set(both) == {"pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"}


@pytest.mark.parametrize(
    "options, inputs, message",
    [
        ({"do_resize": False}, {"images": random_image(10, 12)}, r"10x12.*16x16"),
        ({"do_resize": False}, {"images": random_image(40, 48)}, r"multiple of patch_size=16.*40x48"),
        ({"max_pixels": 16 * 16 * 10}, {"images": random_image(2, 1000)}, r"2x1000 is smaller than one 16x16 patch"),
        ({"min_pixels": 10_000, "max_pixels": 5_000}, {}, "min_pixels <= max_pixels"),
        ({"min_pixels": 10, "max_pixels": 100}, {}, "smaller than one 16x16 patch"),
        ({}, {}, "images` and / or `videos"),
        ({}, {"images": [1, 2]}, "Unsupported image input"),
        ({}, {"videos": [[random_image(32, 32), random_image(48, 32)]]}, "same shape"),
        ({}, {"images": FLOAT_128}, r"values in \[128.0, 128.0\].*\[0, 1\].*do_rescale=False"),  # unreadable ranges
        ({}, {"images": np.full((32, 32, 3), np.nan, np.float32)}, r"float32 image has values in \[nan, nan\]"),
        ({}, {"images": np.full((32, 32, 3), -5, np.int64)}, r"int64 image has negative values"),
        ({}, {"images": np.full((32, 32, 3), 4095, np.int32)}, r"int32 image has values up to 4095.*uint16"),
    ],
)
def test_bad_options_and_inputs(options, inputs, message):
    with pytest.raises(ValueError, match=message):
        RoFormerExtImageProcessor(**options)(**inputs)
    if options.get("do_resize") is False:
        assert RoFormerExtImageProcessor(**options)(random_image(32, 48))["image_grid_thw"].tolist() == [[1, 2, 3]]


def test_save_load_round_trip(tmp_path, processors_for_text_config):
    processor = RoFormerExtImageProcessor(max_pixels=128 * 128, patch_size=P, image_mean=[0.1, 0.2, 0.3])
    processor.save_pretrained(tmp_path)
    saved = (tmp_path / "preprocessor_config.json").read_text()
    assert '"max_pixels": 16384' in saved and '"min_pixels": 1024' in saved
    assert saved.count("max_pixels") == 1  # the shortcut is folded into `size`, not stored twice
    loaded = RoFormerExtImageProcessor.from_pretrained(tmp_path)
    assert loaded.to_dict() == processor.to_dict()
    image = random_image(300, 200)
    np.testing.assert_array_equal(loaded(image)["pixel_values"], processor(image)["pixel_values"])
    auto = AutoImageProcessor.from_pretrained(tmp_path)
    assert type(auto).__name__ == "RoFormerExtImageProcessor" and auto.to_dict() == processor.to_dict()


#: `picture` (uint8, H x W x C or H x W) stored another way: the value it stands for is unchanged.
SAME_PICTURE_AS = {
    "uint16": lambda picture: picture.astype(np.uint16) * 257,  # 255 * 257 = 65535
    "pil_i16": lambda picture: Image.fromarray(picture.astype(np.uint16) * 257),  # mode I;16 (greyscale only)
    "float32": lambda picture: picture.astype(np.float32) / 255,
    "float64": lambda picture: picture.astype(np.float64) / 255,
    "torch_float_channels_first": lambda picture: torch.from_numpy(picture.astype(np.float32) / 255).permute(2, 0, 1),
    "int64": lambda picture: picture.astype(np.int64),
}


@pytest.mark.parametrize("kind", list(SAME_PICTURE_AS))
def test_value_range_follows_the_dtype(kind):
    """uint16 gave values up to 513, [0, 1] floats were divided by 255 again, PIL `I;16` was clipped to 255."""
    processor, same = RoFormerExtImageProcessor(), SAME_PICTURE_AS[kind]
    pictures = [random_image(32, 48, seed=3), random_image(40, 60, seed=3)]  # whole patches (no resize), and resized
    if kind in ("uint16", "pil_i16", "float32"):  # greyscale too, also as video frames
        pictures.append(random_image(40, 60, channels=1, seed=4)[..., 0])
        frames = [random_image(32, 32, seed=seed)[..., 0] for seed in (5, 6, 7)]
        got = processor(videos=[[same(frame) for frame in frames]])["pixel_values_videos"]
        np.testing.assert_allclose(got, processor(videos=[frames])["pixel_values_videos"], rtol=0, atol=1e-5)
    for picture in pictures[2:] if kind == "pil_i16" else pictures:  # I;16: greyscale only
        expected = processor(picture)["pixel_values"]
        np.testing.assert_allclose(processor(same(picture))["pixel_values"], expected, rtol=0, atol=1e-5)


def test_rescale_factor_is_per_8_bit_step_for_every_dtype():
    """A custom `rescale_factor` keeps its transformers meaning for uint8 and maps the other ranges alike."""
    processor = RoFormerExtImageProcessor(rescale_factor=2 / 255, do_normalize=False)
    for white in (np.full((32, 32), 255, np.uint8), np.full((32, 32), 65535, np.uint16), np.ones((32, 32), np.float32)):
        np.testing.assert_allclose(processor(white)["pixel_values"], 2.0, rtol=1e-6)


def test_complex_values_are_refused():
    with pytest.raises(TypeError, match="complex128"):
        RoFormerExtImageProcessor()(np.zeros((32, 32, 3), np.complex128))


def test_do_rescale_false_keeps_raw_values():
    raw = RoFormerExtImageProcessor(do_rescale=False, do_normalize=False)
    image = np.random.default_rng(0).random((32, 48, 3), dtype=np.float32)
    np.testing.assert_allclose(unpatchify(raw(image)["pixel_values"], (1, 2, 3))[0].transpose(1, 2, 0), image, atol=0)
    for image in (FLOAT_128, np.full((32, 32), 4095, np.uint16)):
        np.testing.assert_array_equal(raw(image)["pixel_values"], image.flat[0])
    np.testing.assert_array_equal(raw(Image.fromarray(np.full((32, 32), 4095, np.uint16)))["pixel_values"], 4095)
