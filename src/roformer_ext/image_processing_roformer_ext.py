"""Image / video processor for the RoFormer-Ext vision-text models.

The vision-text model is one stream (ViLT / Fuyu style): a linear patch embedding reads flat patches and
writes them into the positions of the "[IMAGE]" / "[VIDEO]" placeholder tokens. So this processor's job is
only to turn pictures into a flat list of patches plus the grid each picture was cut into:

* resize, keeping the aspect ratio, so both sides are multiples of ``patch_size`` and the area lies in
  ``[size["min_pixels"], size["max_pixels"]]``;
* rescale to [0, 1] by the range the input's dtype holds (uint8 / 255, uint16 and PIL ``I;16`` / 65535,
  floats already in [0, 1] kept; see `pixel_peak`) and normalise with ``image_mean`` / ``image_std``;
* cut into ``patch_size`` squares and ``temporal_patch_size`` frames deep (an image is one frame repeated,
  a video's last frame is repeated to fill its last group), giving

  - ``pixel_values`` / ``pixel_values_videos``: float32 ``(total_patches, C * temporal_patch_size * p * p)``,
    patches in (t, row, column) order (row-major: all of row 0, then row 1, ...); inside a patch the
    features are ordered (channel, frame, y, x), i.e. the flattening of a ``Conv3d``-shaped kernel;
  - ``image_grid_thw`` / ``video_grid_thw``: int64 ``(n, 3)`` rows ``(t, h, w)`` counted in patches
    (``t = 1`` for images), which is what the position builders and the processor's placeholder
    expansion read.

It runs on the PIL / NumPy backend of transformers (no torchvision needed). Pillow is optional (the
``vision`` extra): this module imports without it, and the processor says how to install it when built.
"""

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

VISION_INSTALL_HINT = "pip install pillow (or, in the roformer-ext clone, pip install -e '.[vision]')"
# PIL modes whose values do not fit 8 bits: PIL's own RGB conversion would clip them to 255.
WIDE_PIL_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")


def _is_frame(item: Any) -> bool:
    """One still picture: a PIL image, or an array / tensor with 2 (greyscale) or 3 dimensions."""
    return is_pil_image(item) or (hasattr(item, "ndim") and hasattr(item, "shape") and item.ndim in (2, 3))


def _is_stack(item: Any) -> bool:
    """A 4-D array / tensor: several frames of the same size (an image batch or one video)."""
    return hasattr(item, "ndim") and hasattr(item, "shape") and item.ndim == 4


def flatten_images(images: Any) -> list[Any]:
    """Images in reading order from any of the accepted layouts.

    A single image, a 4-D batch, a flat list, or a list per sample all become one flat list, which is the
    order in which the "[IMAGE]" marks of a (batched) text are filled.
    """
    if isinstance(images, str):
        return [load_image(images)]
    if _is_frame(images):
        return [images]
    if _is_stack(images):
        return list(images)
    if isinstance(images, (list, tuple)):
        return [image for item in images for image in flatten_images(item)]
    raise ValueError(
        f"Unsupported image input of type {type(images).__name__}; pass PIL images, NumPy arrays or torch "
        "tensors (H x W greyscale, H x W x C or C x H x W), a 4-D batch, or (nested) lists of them."
    )


def is_video(item: Any) -> bool:
    """One video: a 4-D array of frames or a non-empty list of single frames."""
    return _is_stack(item) or (
        isinstance(item, (list, tuple)) and len(item) > 0 and all(_is_frame(frame) for frame in item)
    )


def flatten_videos(videos: Any) -> list[list[Any]]:
    """Videos in reading order, each as a list of frames.

    A video is a list of frames or a 4-D array (T, ...). Accepted: one video, a flat list of videos,
    or a list per sample of videos (a 5-D array is a batch of videos).
    """
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
    """The value that means full intensity in `image`: 255 (8-bit), 65535 (uint16) or 1 (floats, bools).

    transformers assumes 8-bit pixels (`rescale_factor=1/255`) and only warns when floats are already in
    [0, 1] ("It looks like you are trying to rescale already rescaled images"). Reading the range from
    the dtype instead lets a 16-bit or [0, 1] picture give the same values as the same picture in uint8.
    Integers other than uint8 / uint16 are read as 8-bit, as transformers does, when they fit [0, 255].
    Raises ValueError (values) or TypeError (dtype) for what has no such reading.
    """
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
    if np.issubdtype(dtype, np.floating):
        if not (0 <= low and high <= 1):  # NaN fails both comparisons
            raise ValueError(
                f"The {dtype} image has values in [{low}, {high}]: with do_rescale=True a float image must already be "
                "in [0, 1]. Divide it by its full-scale value (255 for 8-bit data), pass it as uint8 / uint16, or set "
                "do_rescale=False to feed the values unchanged."
            )
        return 1
    if low < 0:
        raise ValueError(
            f"The {dtype} image has negative values (min {low}): integer pixels count up from 0. Pass uint8 / uint16 "
            "pixels or floats in [0, 1], or set do_rescale=False to feed the values unchanged."
        )
    if high > 255:
        raise ValueError(
            f"The {dtype} image has values up to {high}, beyond 8 bits, and {dtype} does not say its full scale. Cast "
            "16-bit data to uint16 (read as 0..65535), pass floats in [0, 1], or set do_rescale=False to feed the "
            "values unchanged."
        )
    return 255


def fit_to_patches(height: int, width: int, patch_size: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Target (height, width): multiples of ``patch_size``, area in [min_pixels, max_pixels], aspect kept.

    The image is scaled by one factor (so the aspect ratio only moves by the rounding of each side to a
    whole patch) and the short side is allowed to grow to one patch when the pixel budget leaves room.
    ``max_pixels`` is a hard bound (it is the memory budget); ``min_pixels`` is met whenever rounding up
    stays within it.
    Raises ValueError when even ``max_pixels`` cannot give both sides one patch at this aspect ratio.
    """
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
    patch_size (`int`, *optional*, defaults to 16):
        Side of the square patches the model embeds.
    temporal_patch_size (`int`, *optional*, defaults to 2):
        Frames per patch; images are repeated to fill it, videos repeat their last frame.
    min_pixels (`int`, *optional*):
        Shortcut for `size["min_pixels"]`.
    max_pixels (`int`, *optional*):
        Shortcut for `size["max_pixels"]`.
    """

    patch_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int


class RoFormerExtImageProcessor(SharedCodeMixin, PilBackend):
    r"""Resize to whole patches, normalise, and flatten images and videos into patches.

    Args:
        do_resize (`bool`, defaults to `True`): aspect-preserving resize to multiples of `patch_size`
            within the pixel budget; with `False` every side must already be a multiple of `patch_size`.
        size (`dict`, defaults to `{"min_pixels": 1024, "max_pixels": 147456}`): the pixel budget per
            image / frame (4 to 576 patches of 16x16; 147456 = 384x384, ViLT's resolution).
        min_pixels / max_pixels (`int`, *optional*): shortcuts that set `size`.
        resample (defaults to `PILImageResampling.BICUBIC`).
        do_rescale (`bool`, defaults to `True`), rescale_factor (`float`, defaults to `1/255`): the factor is
            per 8-bit step, and other inputs are read on their own range first (uint16 / 65535, floats
            already in [0, 1]), so every dtype of one picture gives the same values; `pixel_peak` lists what
            is refused. With `do_rescale=False` pixel values are used as they are.
        do_normalize (`bool`, defaults to `True`), image_mean / image_std (default 0.5 each: [0, 1] -> [-1, 1]).
        do_convert_rgb (`bool`, defaults to `True`): greyscale, RGBA (composited on white), palette -> RGB.
        patch_size (`int`, defaults to 16), temporal_patch_size (`int`, defaults to 2): must match the
            model config's `patch_size` / `temporal_patch_size`.

    Call it as `processor(images=..., videos=..., return_tensors="pt")`; see the module docstring for the
    output layout.
    """

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
                f"RoFormerExtImageProcessor needs pillow, which the `vision` extra installs: {VISION_INSTALL_HINT}"
            )
        # fold the shortcuts first: the base __init__ would otherwise also store them as loose attributes
        min_pixels, max_pixels = kwargs.pop("min_pixels", None), kwargs.pop("max_pixels", None)
        if min_pixels is not None or max_pixels is not None:
            kwargs["size"] = self._fold_pixel_bounds(kwargs.get("size"), min_pixels, max_pixels)
        super().__init__(**kwargs)
        self._check_options(self.size, self.patch_size, self.temporal_patch_size)

    # ----------------------------------------------------------------------------------------- options
    def _fold_pixel_bounds(self, size: Any, min_pixels: int | None, max_pixels: int | None) -> Any:
        """Merge the `min_pixels` / `max_pixels` shortcuts into `size`, so only `size` is ever saved."""
        if min_pixels is None and max_pixels is None:
            return size
        size = dict(size) if size is not None else dict(self.size)
        if min_pixels is not None:
            size["min_pixels"] = min_pixels
        if max_pixels is not None:
            size["max_pixels"] = max_pixels
        return size

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
            raise ValueError(
                f"Need 0 < min_pixels <= max_pixels, got min_pixels={min_pixels}, max_pixels={max_pixels}."
            )
        if max_pixels < patch_size * patch_size:
            raise ValueError(f"max_pixels={max_pixels} is smaller than one {patch_size}x{patch_size} patch.")

    def _validate_preprocess_kwargs(self, **kwargs) -> None:
        parent_validate_preprocess_kwargs(super(), **kwargs)
        self._check_options(kwargs.get("size"), kwargs.get("patch_size"), kwargs.get("temporal_patch_size"))

    # ------------------------------------------------------------------------------------------- entry
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
        """Convert every picture to a channels-first array, then cut images and videos alike.

        An image is handled as a video of one frame, so the two paths cannot drift apart.
        """
        to_array = partial(
            self.process_image,
            do_convert_rgb=kwargs.get("do_convert_rgb"),
            input_data_format=kwargs.get("input_data_format"),
            do_rescale=kwargs.get("do_rescale"),
        )
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
        self,
        image: Any,
        do_convert_rgb: bool | None = None,
        input_data_format: Any = None,
        do_rescale: bool | None = None,
        **kwargs,
    ) -> np.ndarray:
        """Channels-first NumPy array; also takes H x W greyscale arrays, which the base class rejects.

        With `do_rescale`, pixels that are not 8-bit become float32 in [0, 1] here (`pixel_peak`), before
        the RGB conversion, whose alpha compositing assumes 255 for white in every integer dtype.
        """
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

    # ---------------------------------------------------------------------------------------- the work
    def resize(
        self, image: np.ndarray, size: SizeDict, resample: PILImageResampling | int | None = None, **kwargs
    ) -> np.ndarray:
        """Resize a (C, H, W) array to `size.height` x `size.width`, channel by channel in float32.

        Float ("F" mode) PIL resampling keeps float inputs exact-range and never quantises to uint8; an
        image that already has the target size is returned untouched (no resampling blur).
        """
        if image.shape[-2:] == (size.height, size.width):
            return image
        resample = PILImageResampling.BICUBIC if resample is None else resample
        channels = [
            np.asarray(Image.fromarray(channel.astype(np.float32)).resize((size.width, size.height), resample))
            for channel in image
        ]
        return np.stack(channels)

    @staticmethod
    def _target_size(height: int, width: int, do_resize: bool, size: SizeDict, patch_size: int) -> tuple[int, int]:
        """The size to resize to, or a ValueError saying why an un-resized image cannot be cut into patches."""
        if do_resize:
            return fit_to_patches(height, width, patch_size, size.min_pixels, size.max_pixels)
        if height < patch_size or width < patch_size:
            raise ValueError(
                f"Image of size {height}x{width} is smaller than one {patch_size}x{patch_size} patch "
                "(do_resize=False). Enable do_resize or pass a larger image."
            )
        if height % patch_size or width % patch_size:
            raise ValueError(
                f"With do_resize=False the image size must be a multiple of patch_size={patch_size}, "
                f"got {height}x{width}. Enable do_resize or crop the image."
            )
        return height, width

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
        all_patches, grids = [], []
        for frames in clips:
            height, width = frames[0].shape[-2:]
            if any(frame.shape != frames[0].shape for frame in frames):
                shapes = sorted({tuple(frame.shape) for frame in frames})
                raise ValueError(f"All frames of a video must have the same shape, got {shapes}.")
            target_height, target_width = self._target_size(height, width, do_resize, size, patch_size)
            target = SizeDict(height=target_height, width=target_width)
            processed = []
            for frame in frames:
                # `rescale_factor` is per 8-bit step (transformers' 1/255); `process_image` left other pixels in [0, 1]
                scale = rescale_factor if np.issubdtype(frame.dtype, np.integer) else rescale_factor * 255
                frame = self.resize(frame, target, resample) if do_resize else frame
                if do_rescale:
                    frame = self.rescale(frame, scale)
                if do_normalize:
                    frame = self.normalize(frame, image_mean, image_std)
                processed.append(np.asarray(frame, dtype=np.float32))
            patches, grid = self._patchify(np.stack(processed), patch_size, temporal_patch_size)
            all_patches.append(patches)
            grids.append(grid)
        return np.concatenate(all_patches), np.array(grids, dtype=np.int64)

    @staticmethod
    def _patchify(video: np.ndarray, p: int, tp: int) -> tuple[np.ndarray, tuple[int, int, int]]:
        """(T, C, H, W) -> (t*h*w, C*tp*p*p) in (t, row, col) order, plus the grid (t, h, w)."""
        pad = -len(video) % tp
        if pad:  # repeat the last frame so the last temporal group is full
            video = np.concatenate([video, np.repeat(video[-1:], pad, axis=0)])
        frames, channels, height, width = video.shape
        t, h, w = frames // tp, height // p, width // p
        patches = video.reshape(t, tp, channels, h, p, w, p)
        patches = patches.transpose(0, 3, 5, 2, 1, 4, 6)  # (t, h, w, C, tp, p, p)
        return patches.reshape(t * h * w, channels * tp * p * p), (t, h, w)

    def get_number_of_image_patches(self, height: int, width: int, images_kwargs: dict | None = None) -> int:
        """Placeholder count for an image of this size, without the pixels (as vLLM-style callers need)."""
        options = images_kwargs or {}
        patch_size = options.get("patch_size", self.patch_size)
        min_pixels = options.get("min_pixels", self.size["min_pixels"])
        max_pixels = options.get("max_pixels", self.size["max_pixels"])
        rows, cols = fit_to_patches(height, width, patch_size, min_pixels, max_pixels)
        return (rows // patch_size) * (cols // patch_size)


__all__ = ["RoFormerExtImageProcessor", "fit_to_patches", "flatten_images", "flatten_videos", "is_video", "pixel_peak"]
