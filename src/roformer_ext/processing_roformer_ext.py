"""Processor for the RoFormer-Ext vision-text models: tokenizer + `RoFormerExtImageProcessor`. Each "[IMAGE]" /
"[VIDEO]" mark becomes ``"[IMG]" + t * h * w * mark + "[/IMG]"``, the placeholders the patch embedding overwrites."""

from __future__ import annotations

import re
from typing import Any

from transformers.feature_extraction_utils import BatchFeature
from transformers.processing_utils import ProcessorMixin

from .compat import merge_processor_kwargs
from .hub_code import SharedCodeMixin
from .image_processing_roformer_ext import flatten_images, flatten_videos, is_video

VISION_TOKENS = IMAGE_START_TOKEN, IMAGE_END_TOKEN, IMAGE_TOKEN, VIDEO_TOKEN = ("[IMG]", "[/IMG]", "[IMAGE]", "[VIDEO]")
_TOKEN_ID_NAMES = ("image_start_token_id", "image_end_token_id", "image_token_id", "video_token_id")


def _single_token_id(tokenizer: Any, token: str) -> int | None:
    """The id `token` encodes to, or None when the tokenizer splits it (e.g. '[', 'image', ']')."""
    ids = tokenizer.encode(token, add_special_tokens=False)
    return ids[0] if len(ids) == 1 and ids[0] != tokenizer.unk_token_id else None


def vision_token_ids(tokenizer: Any) -> dict[str, int]:
    """The four vision token ids by config name; a split token is refused (it would misalign patches and tokens)."""
    ids = {token: _single_token_id(tokenizer, token) for token in VISION_TOKENS}
    missing = [token for token, token_id in ids.items() if token_id is None]
    if missing:
        raise ValueError(
            f"The tokenizer does not encode {missing} as single tokens; call "
            "`roformer_ext.processing_roformer_ext.add_vision_tokens(tokenizer)` first (and resize the model's "
            "embeddings to the new vocabulary size)."
        )
    return dict(zip(_TOKEN_ID_NAMES, ids.values()))


def add_vision_tokens(tokenizer: Any) -> dict[str, int]:
    """Add the four vision tokens as special tokens (idempotent) and return their ids (then resize the embeddings)."""
    missing = [token for token in VISION_TOKENS if _single_token_id(tokenizer, token) is None]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
    return vision_token_ids(tokenizer)


class RoFormerExtProcessor(SharedCodeMixin, ProcessorMixin):
    r"""Tokenizer (keeping the vision tokens whole: `add_vision_tokens`) + image processor; `images` / `videos` are a
    flat list in text order or a list per sample (a video: frames or a 4-D array)."""

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
        """Token inputs, and pixel_values + image_grid_thw / pixel_values_videos + video_grid_thw for the pictures."""
        if text is None and images is None and videos is None:
            raise ValueError("Pass at least one of `text`, `images` or `videos`.")
        texts = self._as_text_list(text)
        merged = merge_processor_kwargs(self, self.tokenizer.init_kwargs, kwargs)
        return_tensors = merged["text_kwargs"].get("return_tensors") or merged["images_kwargs"].get("return_tensors")

        flat_images = self._match_marks(texts, images, IMAGE_TOKEN, "image")
        flat_videos = self._match_marks(texts, videos, VIDEO_TOKEN, "video")
        vision = {}
        if flat_images or flat_videos:
            vision = self.image_processor(
                images=flat_images or None, videos=flat_videos or None, **merged["images_kwargs"]
            )
        data = dict(vision)
        if texts is not None:
            expanded = self._expand_marks(texts, vision.get("image_grid_thw"), vision.get("video_grid_thw"))
            text_inputs = self.tokenizer(expanded, **merged["text_kwargs"])
            self._check_placeholders_survived(expanded, text_inputs["input_ids"])
            data.update(text_inputs)
        return BatchFeature(data=data, tensor_type=return_tensors)

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
        """`pictures` flattened in text order, one `mark` per picture, a list per sample checked sample by sample."""
        flatten = flatten_images if kind == "image" else flatten_videos
        if pictures is None:
            if marks := sum(sample.count(mark) for sample in texts or []):
                raise ValueError(f"The text has {marks} {mark} mark(s) but no {kind}s were given.")
            return []
        one_picture = (lambda item: False) if kind == "image" else is_video
        per_sample = texts is not None and isinstance(pictures, (list, tuple)) and len(pictures) > 0
        if per_sample and all(isinstance(item, (list, tuple)) and not one_picture(item) for item in pictures):
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

    @staticmethod
    def _expand_marks(texts: list[str], image_grid_thw: Any, video_grid_thw: Any) -> list[str]:
        """Replace the k-th mark of each kind by "[IMG]" + t*h*w marks + "[/IMG]", in reading order."""
        counts = {
            mark: iter([] if grid is None else [int(t * h * w) for t, h, w in grid.tolist()])
            for mark, grid in ((IMAGE_TOKEN, image_grid_thw), (VIDEO_TOKEN, video_grid_thw))
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
