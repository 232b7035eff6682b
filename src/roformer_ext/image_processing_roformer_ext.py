"""Image / video processor for the RoFormer-Ext vision-text models: pictures resized (aspect kept) to whole patches,
rescaled by their dtype's range (`pixel_peak`), normalised, cut ``temporal_patch_size`` frames deep (a video repeats its
last frame). ``pixel_values(_videos)``: float32 ``(patches, C * tp * p * p)`` in (t, row, column) order, features as a
``Conv3d`` kernel flattens; ``image_grid_thw`` / ``video_grid_thw``: int64 ``(n, 3)`` rows ``(t, h, w)`` in patches."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
from transformers.image_processing_backends import PilBackend
from transformers.image_processing_utils import BatchFeature
from transformers.image_utils import (
    IMAGENET_STANDARD_MEAN,
    IMAGENET_STANDARD_STD,
    ChannelDimension,
    SizeDict,
    is_pil_image,
    load_image,
)
from transformers.processing_utils import ImagesKwargs, Unpack
from transformers.utils import is_vision_available

from .compat import parent_standardize_kwargs, parent_validate_preprocess_kwargs
from .hub_code import SharedCodeMixin

if is_vision_available():
    from PIL import Image
    from transformers.image_utils import PILImageResampling

# PIL modes whose values do not fit 8 bits: PIL's own RGB conversion would clip them to 255.
WIDE_PIL_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")


def _is_frame(item: Any) -> bool:  # a PIL image, or an array / tensor of 2 (greyscale) or 3 dimensions
    return is_pil_image(item) or (hasattr(item, "ndim") and hasattr(item, "shape") and item.ndim in (2, 3))


def _is_stack(item: Any) -> bool:  # a 4-D array / tensor: an image batch or one video
    return hasattr(item, "ndim") and hasattr(item, "shape") and item.ndim == 4


def flatten_images(images: Any) -> list[Any]:
    """Images in reading order (the order "[IMAGE]" marks are filled) from one image, a 4-D batch or nested lists."""
    if isinstance(images, str):
        return [load_image(images)]
    if _is_frame(images):
        return [images]
    if _is_stack(images):
        return list(images)
    if isinstance(images, (list, tuple)):
        return [image for item in images for image in flatten_images(item)]
    raise ValueError(
        f"Unsupported image input of type {type(images).__name__}; pass PIL images, NumPy arrays or torch tensors "
        "(H x W, H x W x C or C x H x W), a 4-D batch, or (nested) lists of them."
    )


def is_video(item: Any) -> bool:
    """One video: a 4-D array of frames or a non-empty list of single frames."""
    return _is_stack(item) or (isinstance(item, (list, tuple)) and len(item) > 0 and all(map(_is_frame, item)))


def flatten_videos(videos: Any) -> list[list[Any]]:
    """Videos in reading order, each a list of frames, from one video, a 5-D batch or nested lists."""
    if is_video(videos):
        return [list(videos)]
    if hasattr(videos, "ndim") and videos.ndim == 5:
        return [list(video) for video in videos]
    if isinstance(videos, (list, tuple)):
        return [video for item in videos for video in flatten_videos(item)]
    raise ValueError(
        f"Unsupported video input of type {type(videos).__name__}; a video is a non-empty list of frames "
        "(PIL images or arrays) or a 4-D array of frames."
    )


def pixel_peak(image: np.ndarray) -> int:
    """Full intensity of `image` (255, 65535, or 1 for floats and bools), so 16-bit and [0, 1] pictures match uint8."""
    dtype = image.dtype
    if dtype == np.bool_:
        return 1
    if dtype == np.uint8:
        return 255
    if dtype == np.uint16:
        return 65535
    if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
        raise TypeError(f"Unsupported image dtype {dtype}; pass uint8 or uint16 pixels, or floats in [0, 1].")
    if image.size == 0:  # the size checks downstream say what is wrong
        return 255 if np.issubdtype(dtype, np.integer) else 1
    low, high = image.min(), image.max()
    unchanged = "or set do_rescale=False to feed the values unchanged."
    if np.issubdtype(dtype, np.floating):
        if not (0 <= low and high <= 1):  # NaN fails both comparisons
            raise ValueError(
                f"The {dtype} image has values in [{low}, {high}]: with do_rescale=True a float image must already be "
                f"in [0, 1]. Divide it by its full-scale value (255 for 8-bit data), pass it as uint8 / uint16, {unchanged}"
            )
        return 1
    if low < 0:
        raise ValueError(
            f"The {dtype} image has negative values (min {low}): pass uint8 / uint16 or [0, 1] floats, {unchanged}"
        )
    if high > 255:
        raise ValueError(
            f"The {dtype} image has values up to {high}, beyond 8 bits, and {dtype} does not say its full scale. Cast "
            f"16-bit data to uint16 (read as 0..65535), pass floats in [0, 1], {unchanged}"
        )
    return 255


def fit_to_patches(height: int, width: int, patch_size: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Target (height, width): whole patches, aspect kept, area <= max_pixels and >= min_pixels where possible."""
    if height < 1 or width < 1:
        raise ValueError(f"Image of size {height}x{width} has no pixels.")
    p, area = patch_size, height * width
    budget_scale = math.sqrt(max_pixels / area)
    scale = min(max(1.0, math.sqrt(min_pixels / area)), budget_scale)
    scale = max(scale, p / min(height, width))  # the short side must reach one patch
    rows, cols = round(height * scale / p), round(width * scale / p)
    if rows * cols * p * p > max_pixels:
        scale = min(scale, budget_scale)
        rows, cols = math.floor(height * scale / p), math.floor(width * scale / p)
    elif rows * cols * p * p < min_pixels:  # min_pixels is best effort, max_pixels is a hard bound
        up_rows, up_cols = math.ceil(height * scale / p), math.ceil(width * scale / p)
        if up_rows * up_cols * p * p <= max_pixels:
            rows, cols = up_rows, up_cols
    if rows < 1 or cols < 1:
        raise ValueError(
            f"Image of size {height}x{width} is smaller than one {p}x{p} patch on a side after resizing: at this "
            f"aspect ratio max_pixels={max_pixels} allows at most {height * budget_scale:.1f}x{width * budget_scale:.1f} "
            f"pixels. Crop the image, raise max_pixels or use a smaller patch_size."
        )
    return rows * p, cols * p


class RoFormerExtImageProcessorKwargs(ImagesKwargs, total=False):
    r"""
    patch_size (`int`, *optional*, defaults to 16): side of the square patches the model embeds.
    temporal_patch_size (`int`, *optional*, defaults to 2): frames per patch (images repeated, videos' last frame).
    min_pixels / max_pixels (`int`, *optional*): shortcuts for `size["min_pixels"]` / `size["max_pixels"]`.
    """

    patch_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int


class RoFormerExtImageProcessor(SharedCodeMixin, PilBackend):
    r"""Images and videos to patches (module docstring); 4 to 576 16x16 patches by default (384x384 is ViLT's); patch
    sizes must match the model config's."""

    do_resize = True
    size = {"min_pixels": 32 * 32, "max_pixels": 384 * 384}
    resample = PILImageResampling.BICUBIC if is_vision_available() else None  # without pillow __init__ refuses
    do_rescale = True
    rescale_factor = 1 / 255
    do_normalize = True
    image_mean = IMAGENET_STANDARD_MEAN
    image_std = IMAGENET_STANDARD_STD
    do_convert_rgb = True
    patch_size = 16
    temporal_patch_size = 2
    valid_kwargs = RoFormerExtImageProcessorKwargs
    model_input_names = ["pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"]

    def __init__(self, **kwargs: Unpack[RoFormerExtImageProcessorKwargs]) -> None:
        if not is_vision_available():
            raise ImportError(
                "RoFormerExtImageProcessor needs pillow, which the `vision` extra installs: pip install pillow (or, in "
                "the roformer-ext clone, pip install -e '.[vision]')"
            )
        # fold the shortcuts first: the base __init__ would otherwise also store them as loose attributes
        min_pixels, max_pixels = kwargs.pop("min_pixels", None), kwargs.pop("max_pixels", None)
        if min_pixels is not None or max_pixels is not None:
            kwargs["size"] = self._fold_pixel_bounds(kwargs.get("size"), min_pixels, max_pixels)
        super().__init__(**kwargs)
        self._check_options(self.size, self.patch_size, self.temporal_patch_size)

    def _fold_pixel_bounds(self, size: Any, min_pixels: int | None, max_pixels: int | None) -> Any:
        """`size` with the `min_pixels` / `max_pixels` shortcuts merged in, so only `size` is ever saved."""
        bounds = {k: v for k, v in dict(min_pixels=min_pixels, max_pixels=max_pixels).items() if v is not None}
        return {**dict(size if size is not None else self.size), **bounds} if bounds else size

    def _standardize_kwargs(self, size=None, min_pixels: int | None = None, max_pixels: int | None = None, **kwargs):
        return parent_standardize_kwargs(super(), size=self._fold_pixel_bounds(size, min_pixels, max_pixels), **kwargs)

    @staticmethod
    def _check_options(size: SizeDict | dict | None, patch_size: int, temporal_patch_size: int) -> None:
        """Reject settings that would only fail later, deep inside resizing or patchifying."""
        if patch_size is None or patch_size < 1 or temporal_patch_size is None or temporal_patch_size < 1:
            raise ValueError(
                f"patch_size and temporal_patch_size must be positive, got {patch_size} and {temporal_patch_size}."
            )
        min_pixels, max_pixels = (size or {}).get("min_pixels"), (size or {}).get("max_pixels")
        if min_pixels is None or max_pixels is None:
            raise ValueError(f"size must be {{'min_pixels': int, 'max_pixels': int}}, got {dict(size or {})}.")
        if not 0 < min_pixels <= max_pixels:
            raise ValueError(f"Need 0 < min_pixels <= max_pixels, got {min_pixels} and {max_pixels}.")
        if max_pixels < patch_size * patch_size:
            raise ValueError(f"max_pixels={max_pixels} is smaller than one {patch_size}x{patch_size} patch.")

    def _validate_preprocess_kwargs(self, **kwargs) -> None:
        parent_validate_preprocess_kwargs(super(), **kwargs)
        self._check_options(kwargs.get("size"), kwargs.get("patch_size"), kwargs.get("temporal_patch_size"))

    def __call__(self, images: Any = None, videos: Any = None, **kwargs) -> BatchFeature:
        return self.preprocess(images, videos=videos, **kwargs)

    def preprocess(
        self, images: Any = None, videos: Any = None, **kwargs: Unpack[RoFormerExtImageProcessorKwargs]
    ) -> BatchFeature:
        """Patchify `images` and / or `videos` (see the module docstring for the accepted layouts)."""
        if images is None and videos is None:
            raise ValueError("Pass `images` and / or `videos` to the image processor.")
        return super().preprocess(images, image_like_kwargs={"videos": videos}, **kwargs)

    def _preprocess_image_like_inputs(self, images: Any, videos: Any = None, **kwargs) -> BatchFeature:
        """Every picture to a channels-first array, then images cut as videos of one frame (one path for both)."""
        options = {key: kwargs.get(key) for key in ("do_convert_rgb", "input_data_format", "do_rescale")}
        to_array = partial(self.process_image, **options)
        data: dict[str, np.ndarray] = {}
        if images is not None:
            clips = [[to_array(image)] for image in flatten_images(images)]
            if not clips:
                raise ValueError("The image list is empty.")
            data["pixel_values"], data["image_grid_thw"] = self._patchify_clips(clips, **kwargs)
        if videos is not None:
            clips = [[to_array(frame) for frame in video] for video in flatten_videos(videos)]
            if not clips:
                raise ValueError("The video list is empty.")
            data["pixel_values_videos"], data["video_grid_thw"] = self._patchify_clips(clips, **kwargs)
        return BatchFeature(data=data, tensor_type=kwargs.get("return_tensors"))

    def process_image(
        self, image: Any, do_convert_rgb=None, input_data_format=None, do_rescale=None, **kwargs
    ) -> np.ndarray:
        """Channels-first array; with `do_rescale` non-8-bit pixels become [0, 1] floats first (RGBA compositing)."""
        if hasattr(image, "detach"):  # torch tensor
            image = image.detach().cpu().numpy()
        if is_pil_image(image) and image.mode in WIDE_PIL_MODES:
            image = np.array(image)  # PIL's RGB conversion would clip 16-bit / float values to 0..255
        if isinstance(image, np.ndarray) and do_rescale:
            peak = pixel_peak(image)
            if peak != 255 and not np.issubdtype(image.dtype, np.floating):
                image = image.astype(np.float32) / np.float32(peak)
        if isinstance(image, np.ndarray) and image.ndim == 2:
            image, input_data_format = image[..., None], ChannelDimension.LAST
        return super().process_image(image, do_convert_rgb=do_convert_rgb, input_data_format=input_data_format)

    def resize(
        self, image: np.ndarray, size: SizeDict, resample: PILImageResampling | int | None = None, **kwargs
    ) -> np.ndarray:
        """(C, H, W) resized channel by channel in float32 PIL ("F" mode: never quantised to uint8)."""
        if image.shape[-2:] == (size.height, size.width):
            return image
        resample = PILImageResampling.BICUBIC if resample is None else resample
        channels = [
            np.asarray(Image.fromarray(channel.astype(np.float32)).resize((size.width, size.height), resample))
            for channel in image
        ]
        return np.stack(channels)

    def _patchify_clips(
        self,
        clips: list[list[np.ndarray]],
        do_resize: bool,
        size: SizeDict,
        resample: PILImageResampling | int | None,
        do_rescale: bool,
        rescale_factor: float,
        do_normalize: bool,
        image_mean: float | Sequence[float],
        image_std: float | Sequence[float],
        patch_size: int,
        temporal_patch_size: int,
        **kwargs,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(total_patches, C * tp * p * p) patches and the (n, 3) grid of a list of frame lists."""
        p, tp = patch_size, temporal_patch_size
        all_patches, grids = [], []
        for frames in clips:
            height, width = frames[0].shape[-2:]
            if any(frame.shape != frames[0].shape for frame in frames):
                shapes = sorted({tuple(frame.shape) for frame in frames})
                raise ValueError(f"All frames of a video must have the same shape, got {shapes}.")
            if do_resize:
                height, width = fit_to_patches(height, width, p, size.min_pixels, size.max_pixels)
            elif height < p or width < p:
                raise ValueError(
                    f"Image of size {height}x{width} is smaller than one {p}x{p} patch (do_resize=False). "
                    "Enable do_resize or pass a larger image."
                )
            elif height % p or width % p:
                raise ValueError(
                    f"With do_resize=False the image size must be a multiple of patch_size={p}, got {height}x{width}. "
                    "Enable do_resize or crop the image."
                )
            processed = []
            for frame in frames:
                # `rescale_factor` is per 8-bit step (transformers' 1/255); `process_image` left other pixels in [0, 1]
                scale = rescale_factor if np.issubdtype(frame.dtype, np.integer) else rescale_factor * 255
                frame = self.resize(frame, SizeDict(height=height, width=width), resample) if do_resize else frame
                if do_rescale:
                    frame = self.rescale(frame, scale)
                if do_normalize:
                    frame = self.normalize(frame, image_mean, image_std)
                processed.append(np.asarray(frame, dtype=np.float32))
            video = np.stack(processed)  # (T, C, H, W); the last frame repeated to fill the last temporal group
            video = np.concatenate([video, np.repeat(video[-1:], -len(video) % tp, axis=0)])
            t, channels, h, w = len(video) // tp, video.shape[1], height // p, width // p
            # (t, h, w, C, tp, p, p)
            patches = video.reshape(t, tp, channels, h, p, w, p).transpose(0, 3, 5, 2, 1, 4, 6)
            all_patches.append(patches.reshape(t * h * w, channels * tp * p * p))
            grids.append((t, h, w))
        return np.concatenate(all_patches), np.array(grids, dtype=np.int64)

    def get_number_of_image_patches(self, height: int, width: int, images_kwargs: dict | None = None) -> int:
        """Placeholder count for an image of this size, without the pixels (as vLLM-style callers need)."""
        options = {"patch_size": self.patch_size, **dict(self.size), **(images_kwargs or {})}
        p = options["patch_size"]
        rows, cols = fit_to_patches(height, width, p, options["min_pixels"], options["max_pixels"])
        return (rows // p) * (cols // p)
