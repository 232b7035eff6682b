"""Processor for the RoFormer-Ext vision-text models: tokenizer + `RoFormerExtImageProcessor`.

Token convention (shared with `positions.py` and the model):

* the user writes one "[IMAGE]" where each image goes and one "[VIDEO]" where each video goes;
* the processor expands each mark to ``"[IMG]" + n * mark + "[/IMG]"`` with ``n = t * h * w`` from the
  picture's grid row, so "[IMAGE]" (``config.image_token_id``) and "[VIDEO]" (``config.video_token_id``)
  are the per-patch placeholders the patch embedding overwrites. Videos reuse the "[IMG]" / "[/IMG]"
  wrapper: the placeholder token already says which kind of picture it is, and four special tokens are
  enough.

`add_vision_tokens(tokenizer)` adds the four tokens to any tokenizer and returns their ids.
"""

from __future__ import annotations

import re
from typing import Any

from transformers.feature_extraction_utils import BatchFeature
from transformers.processing_utils import ProcessorMixin

from .compat import merge_processor_kwargs
from .hub_code import SharedCodeMixin
from .image_processing_roformer_ext import flatten_images, flatten_videos, is_video

IMAGE_START_TOKEN = "[IMG]"
IMAGE_END_TOKEN = "[/IMG]"
IMAGE_TOKEN = "[IMAGE]"
VIDEO_TOKEN = "[VIDEO]"
VISION_TOKENS = (IMAGE_START_TOKEN, IMAGE_END_TOKEN, IMAGE_TOKEN, VIDEO_TOKEN)
_TOKEN_ID_NAMES = {
    IMAGE_START_TOKEN: "image_start_token_id",
    IMAGE_END_TOKEN: "image_end_token_id",
    IMAGE_TOKEN: "image_token_id",
    VIDEO_TOKEN: "video_token_id",
}


def _single_token_id(tokenizer: Any, token: str) -> int | None:
    """The id `token` encodes to, or None when the tokenizer splits it (e.g. '[', 'image', ']')."""
    ids = tokenizer.encode(token, add_special_tokens=False)
    return ids[0] if len(ids) == 1 and ids[0] != tokenizer.unk_token_id else None


def vision_token_ids(tokenizer: Any) -> dict[str, int]:
    """`{"image_start_token_id", "image_end_token_id", "image_token_id", "video_token_id"}` -> ids.

    Raises ValueError naming the tokens the tokenizer does not keep whole, since a split placeholder would
    silently misalign patches and tokens.
    """
    ids = {token: _single_token_id(tokenizer, token) for token in VISION_TOKENS}
    missing = [token for token, token_id in ids.items() if token_id is None]
    if missing:
        raise ValueError(
            f"The tokenizer does not encode {missing} as single tokens; call "
            "`roformer_ext.processing_roformer_ext.add_vision_tokens(tokenizer)` first (and resize the model's "
            "embeddings to the new vocabulary size)."
        )
    return {_TOKEN_ID_NAMES[token]: token_id for token, token_id in ids.items()}


def add_vision_tokens(tokenizer: Any) -> dict[str, int]:
    """Add "[IMG]", "[/IMG]", "[IMAGE]", "[VIDEO]" as special tokens (idempotent) and return their ids.

    Use the result to set `config.image_token_id` / `config.video_token_id`, and call
    `model.resize_token_embeddings(len(tokenizer))` when the vocabulary grew. Special tokens are matched
    before normalisation, so a lower-casing tokenizer keeps them whole and `decode(skip_special_tokens=True)`
    drops them.
    """
    missing = [token for token in VISION_TOKENS if _single_token_id(tokenizer, token) is None]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
    return vision_token_ids(tokenizer)


class RoFormerExtProcessor(SharedCodeMixin, ProcessorMixin):
    r"""Tokenizer + image processor: expands "[IMAGE]" / "[VIDEO]" marks into patch placeholders.

    Args:
        image_processor (`RoFormerExtImageProcessor`): cuts images / videos into patches.
        tokenizer (`PreTrainedTokenizerBase`): any tokenizer that keeps the four vision tokens whole
            (see `add_vision_tokens`).
        chat_template (`str`, *optional*).

    Call with `text` (a string or a list of strings), `images` (a flat list in text order, or a list per
    sample) and / or `videos` (one video, a flat list of videos, or a list per sample; a video is a list of
    frames or a 4-D array). Tokenizer options (`padding`, `truncation`, `max_length`, ...) and image
    processor options (`min_pixels`, `max_pixels`, `do_resize`, ...) can be passed as keyword arguments;
    image-processor options apply to images and videos alike. `return_tensors="pt"` applies to all outputs.
    """

    image_token = IMAGE_TOKEN
    video_token = VIDEO_TOKEN
    image_start_token = IMAGE_START_TOKEN
    image_end_token = IMAGE_END_TOKEN

    def __init__(self, image_processor=None, tokenizer=None, chat_template: str | None = None, **kwargs) -> None:
        super().__init__(image_processor, tokenizer, chat_template=chat_template)
        ids = vision_token_ids(tokenizer)
        self.image_token_id, self.video_token_id = ids["image_token_id"], ids["video_token_id"]

    def __call__(
        self, text: str | list[str] | None = None, images: Any = None, videos: Any = None, **kwargs: Any
    ) -> BatchFeature:
        """input_ids, attention_mask (+ token_type_ids if the tokenizer makes them), and for the pictures
        given pixel_values + image_grid_thw and / or pixel_values_videos + video_grid_thw.
        """
        if text is None and images is None and videos is None:
            raise ValueError("Pass at least one of `text`, `images` or `videos`.")
        texts = self._as_text_list(text)
        merged = merge_processor_kwargs(self, self.tokenizer.init_kwargs, kwargs)
        return_tensors = merged["text_kwargs"].get("return_tensors") or merged["images_kwargs"].get("return_tensors")

        flat_images = self._match_marks(texts, images, IMAGE_TOKEN, "image")
        flat_videos = self._match_marks(texts, videos, VIDEO_TOKEN, "video")
        vision: dict[str, Any] = {}
        if flat_images or flat_videos:
            vision = self.image_processor(
                images=flat_images or None, videos=flat_videos or None, **merged["images_kwargs"]
            )

        data: dict[str, Any] = dict(vision)
        if texts is not None:
            expanded = self._expand_marks(texts, vision.get("image_grid_thw"), vision.get("video_grid_thw"))
            text_inputs = self.tokenizer(expanded, **merged["text_kwargs"])
            self._check_placeholders_survived(expanded, text_inputs["input_ids"])
            data.update(text_inputs)
        return BatchFeature(data=data, tensor_type=return_tensors)

    # ------------------------------------------------------------------------------------------ checks
    @staticmethod
    def _as_text_list(text: str | list[str] | None) -> list[str] | None:
        if text is None:
            return None
        texts = [text] if isinstance(text, str) else list(text)
        if not all(isinstance(sample, str) for sample in texts):
            raise ValueError("`text` must be a string or a list of strings.")
        for index, sample in enumerate(texts):
            for wrapper in (IMAGE_START_TOKEN, IMAGE_END_TOKEN):
                if wrapper in sample:
                    raise ValueError(
                        f"Text {index} already contains {wrapper!r}: pass raw text with one {IMAGE_TOKEN} per image "
                        f"(one {VIDEO_TOKEN} per video); the processor adds the {IMAGE_START_TOKEN} ... "
                        f"{IMAGE_END_TOKEN} wrappers itself."
                    )
        return texts

    @staticmethod
    def _match_marks(texts: list[str] | None, pictures: Any, mark: str, kind: str) -> list[Any]:
        """Flatten `pictures` in text order, checking there is exactly one `mark` per picture.

        A list holding one list of pictures per text sample is checked sample by sample, so the error
        says which sample is wrong. (A video is itself a list of frames, so for videos a per-sample entry
        is a list of such lists.)
        """
        flatten = flatten_images if kind == "image" else flatten_videos
        is_one_picture = (lambda item: False) if kind == "image" else is_video
        if pictures is None:
            marks = sum(sample.count(mark) for sample in texts or [])
            if marks:
                raise ValueError(f"The text has {marks} {mark} mark(s) but no {kind}s were given.")
            return []
        per_sample = (
            texts is not None
            and isinstance(pictures, (list, tuple))
            and len(pictures) > 0
            and all(isinstance(item, (list, tuple)) and not is_one_picture(item) for item in pictures)
        )
        if per_sample:
            if len(pictures) != len(texts):
                raise ValueError(
                    f"Got {len(pictures)} per-sample {kind} lists for {len(texts)} texts; give one list per text "
                    f"(empty for a text without {kind}s) or one flat list in text order."
                )
            flat = []
            for index, (sample, item) in enumerate(zip(texts, pictures)):
                found = flatten(item)
                if sample.count(mark) != len(found):
                    raise ValueError(
                        f"Text {index} has {sample.count(mark)} {mark} mark(s) but {len(found)} {kind}(s) were given for it."
                    )
                flat.extend(found)
            return flat
        flat = flatten(pictures)
        if texts is None:
            return flat
        marks = sum(sample.count(mark) for sample in texts)
        if marks and not flat:
            raise ValueError(f"The text has {marks} {mark} mark(s) but the {kind} list is empty.")
        if flat and not marks:
            raise ValueError(
                f"{len(flat)} {kind}(s) were given but the text has no {mark} mark; put one {mark} where each {kind} goes."
            )
        if marks != len(flat):
            raise ValueError(f"The text has {marks} {mark} mark(s) but {len(flat)} {kind}(s) were given.")
        return flat

    def _check_placeholders_survived(self, expanded: list[str], input_ids: Any) -> None:
        """Truncation that cuts into a picture's placeholders would misalign patches and tokens: refuse it."""
        for index, (sample, ids) in enumerate(zip(expanded, input_ids)):
            ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
            for mark, token_id in ((IMAGE_TOKEN, self.image_token_id), (VIDEO_TOKEN, self.video_token_id)):
                wanted, got = sample.count(mark), ids.count(token_id)
                if wanted != got:
                    raise ValueError(
                        f"Text {index} should hold {wanted} {mark} placeholder tokens but the tokenizer output has {got} "
                        "(truncated?). Raise max_length or lower max_pixels."
                    )

    # -------------------------------------------------------------------------------------- expansion
    @staticmethod
    def _expand_marks(texts: list[str], image_grid_thw: Any, video_grid_thw: Any) -> list[str]:
        """Replace the k-th mark of each kind by "[IMG]" + t*h*w marks + "[/IMG]", in reading order."""
        counts = {
            IMAGE_TOKEN: iter(
                [] if image_grid_thw is None else [int(t * h * w) for t, h, w in image_grid_thw.tolist()]
            ),
            VIDEO_TOKEN: iter(
                [] if video_grid_thw is None else [int(t * h * w) for t, h, w in video_grid_thw.tolist()]
            ),
        }
        pattern = re.compile(f"{re.escape(IMAGE_TOKEN)}|{re.escape(VIDEO_TOKEN)}")

        def expand(match: re.Match) -> str:
            mark = match.group(0)
            return IMAGE_START_TOKEN + mark * next(counts[mark]) + IMAGE_END_TOKEN

        return [pattern.sub(expand, sample) for sample in texts]

    @property
    def model_input_names(self) -> list[str]:
        names = list(self.tokenizer.model_input_names) + list(self.image_processor.model_input_names)
        return list(dict.fromkeys(names))


__all__ = ["RoFormerExtProcessor", "add_vision_tokens", "vision_token_ids", "VISION_TOKENS"]
