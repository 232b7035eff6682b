"""Vision-text RoFormerExt: one token stream (ViLT / Fuyu style) with multi-axis RoPE.

A linear patch embedding writes each image (video) patch into the position of its placeholder token; the
encoder is the text model's, unchanged, and positions come from `positions.build_position_ids` under the
configured scheme (rope_1d, rope_2d_rows, rope_tie, rope_tie_v2, mrope). Each class subclasses its text
counterpart and keeps its parameter names, so `from_pretrained` on a text checkpoint loads every text weight
and reports only `patch_embed.*` as new.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, auto_docstring, can_return_tuple

from .configuration_roformer_ext import RoFormerExtVisionTextConfig
from .modeling_roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtForSequenceClassification,
    RoFormerExtModel,
    RoFormerExtPreTrainedModel,
)
from .positions import build_position_ids


class RoFormerExtPatchEmbedding(nn.Module):
    """Linear map of a flattened (C × temporal_patch × p × p) patch to one token embedding."""

    def __init__(self, config: RoFormerExtVisionTextConfig) -> None:
        super().__init__()
        self.patch_dim = config.num_channels * config.temporal_patch_size * config.patch_size**2
        self.proj = nn.Linear(self.patch_dim, config.embedding_size)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        if pixel_values.dim() != 2 or pixel_values.shape[-1] != self.patch_dim:
            raise ValueError(
                f"pixel_values must be (patches, {self.patch_dim}) = (patches, channels*temporal_patch*patch^2), "
                f"as RoFormerExtImageProcessor returns; got {tuple(pixel_values.shape)}."
            )
        return self.proj(pixel_values.to(self.proj.weight.dtype))


class VisionTextInputsMixin:
    """Shared by every vision-text head: embeds placeholders and builds multi-axis position ids."""

    config: RoFormerExtVisionTextConfig
    config_class = RoFormerExtVisionTextConfig
    auto_map_family = {
        "AutoModel": "modeling_roformer_ext_vision.RoFormerExtVisionTextModel",
        "AutoModelForMaskedLM": "modeling_roformer_ext_vision.RoFormerExtVisionTextForMaskedLM",
        "AutoModelForSequenceClassification": "modeling_roformer_ext_vision.RoFormerExtVisionTextForSequenceClassification",
        "AutoModelForCausalLM": "modeling_roformer_ext_vision.RoFormerExtVisionTextForCausalLM",
    }

    def _write_patches(
        self, embeds: torch.Tensor, input_ids: torch.Tensor, token_id: int | None, pixels: torch.Tensor | None, kind: str
    ) -> torch.Tensor:
        placeholders = input_ids == token_id if token_id is not None else torch.zeros_like(input_ids, dtype=torch.bool)
        count = int(placeholders.sum())
        rows = 0 if pixels is None else pixels.shape[0]
        if count != rows:
            raise ValueError(
                f"The text has {count} {kind} placeholder tokens but {rows} {kind} patches were given "
                f"(pixel_values{'_videos' if kind == 'video' else ''} rows); build inputs with RoFormerExtProcessor "
                f"so each {kind} gets t*h*w placeholders."
            )
        if count == 0:
            return embeds
        patches = self.patch_embed(pixels).to(embeds.dtype)
        return embeds.masked_scatter(placeholders[..., None].expand_as(embeds), patches)

    def vision_text_inputs(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None,
        pixel_values: torch.Tensor | None,
        image_grid_thw: torch.LongTensor | None,
        pixel_values_videos: torch.Tensor | None,
        video_grid_thw: torch.LongTensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(inputs_embeds, position_ids (axes, batch, seq), deltas (batch, 1)) for one prompt."""
        if input_ids is None:
            raise ValueError("Vision-text models need input_ids: the placeholders say where the patches go.")
        embeds = self.get_input_embeddings()(input_ids)
        embeds = self._write_patches(embeds, input_ids, self.config.image_token_id, pixel_values, "image")
        embeds = self._write_patches(embeds, input_ids, self.config.video_token_id, pixel_values_videos, "video")
        mask_2d = attention_mask if attention_mask is not None and attention_mask.dim() == 2 else None
        position_ids, deltas = build_position_ids(input_ids, self.config, image_grid_thw, video_grid_thw, mask_2d)
        return embeds, position_ids, deltas


_VISION_ARGS_DOC = r"""
        pixel_values (`torch.FloatTensor` of shape `(image_patches, channels * temporal_patch_size * patch_size**2)`, *optional*):
            Image patches from `RoFormerExtImageProcessor`, in placeholder order.
        image_grid_thw (`torch.LongTensor` of shape `(num_images, 3)`, *optional*):
            (t, h, w) patch grid of each image.
        pixel_values_videos (`torch.FloatTensor` of shape `(video_patches, channels * temporal_patch_size * patch_size**2)`, *optional*):
            Video patches from `RoFormerExtImageProcessor`.
        video_grid_thw (`torch.LongTensor` of shape `(num_videos, 3)`, *optional*):
            (t, h, w) patch grid of each video.
"""


def _documented(func):
    func.__doc__ = (func.__doc__ or "") + _VISION_ARGS_DOC
    return func


@auto_docstring
class RoFormerExtVisionTextModel(VisionTextInputsMixin, RoFormerExtPreTrainedModel):
    """The text encoder behind a patch embedding; returns the encoder outputs of the mixed stream."""

    def __init__(self, config: RoFormerExtVisionTextConfig) -> None:
        super().__init__(config)
        self.roformer = RoFormerExtModel(config)
        self.patch_embed = RoFormerExtPatchEmbedding(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.roformer.get_input_embeddings()

    @can_return_tuple
    @auto_docstring
    @_documented
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.LongTensor | None = None,
        pixel_values_videos: torch.Tensor | None = None,
        video_grid_thw: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ):
        r""""""
        embeds, position_ids, _ = self.vision_text_inputs(
            input_ids, attention_mask, pixel_values, image_grid_thw, pixel_values_videos, video_grid_thw
        )
        return self.roformer(
            inputs_embeds=embeds,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            **kwargs,
        )


class VisionTextHeadMixin(VisionTextInputsMixin):
    """A text head behind the patch embedding: same parameters plus `patch_embed`, same outputs."""

    def __init__(self, config: RoFormerExtVisionTextConfig) -> None:
        super().__init__(config)
        self.patch_embed = RoFormerExtPatchEmbedding(config)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    @_documented
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.LongTensor | None = None,
        pixel_values_videos: torch.Tensor | None = None,
        video_grid_thw: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ):
        r""""""
        embeds, position_ids, _ = self.vision_text_inputs(
            input_ids, attention_mask, pixel_values, image_grid_thw, pixel_values_videos, video_grid_thw
        )
        return super().forward(
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=embeds,
            labels=labels,
            **kwargs,
        )


@auto_docstring
class RoFormerExtVisionTextForMaskedLM(VisionTextHeadMixin, RoFormerExtForMaskedLM):
    """Masked LM over the mixed stream (patch positions carry no word to predict: label them -100)."""


@auto_docstring
class RoFormerExtVisionTextForSequenceClassification(VisionTextHeadMixin, RoFormerExtForSequenceClassification):
    """[CLS] classification of text with images / videos."""


@auto_docstring
class RoFormerExtVisionTextForCausalLM(VisionTextInputsMixin, RoFormerExtForCausalLM):
    """Generation with images in the prompt: the prompt's positions come from the scheme, and each new token
    continues at (its index among real tokens) + delta on every axis, as Qwen2-VL's rope deltas."""

    def __init__(self, config: RoFormerExtVisionTextConfig) -> None:
        super().__init__(config)
        self.patch_embed = RoFormerExtPatchEmbedding(config)
        self.rope_deltas: torch.Tensor | None = None
        self.post_init()

    def decode_position_ids(
        self, input_ids: torch.LongTensor, position_ids: torch.Tensor | None, past_length: int
    ) -> torch.Tensor:
        """Positions of tokens generated after the prompt, on every axis."""
        if self.config.rope_parameters["position_scheme"] == "rope_2d_rows":
            raise ValueError(
                "Cached generation is not defined for position_scheme 'rope_2d_rows' (its rows do not advance "
                "with each token); use rope_tie, rope_tie_v2, mrope or rope_1d, or generate with use_cache=False."
            )
        if position_ids is None:
            steps = torch.arange(past_length, past_length + input_ids.shape[1], device=input_ids.device)
            position_ids = steps.expand(input_ids.shape[0], -1)
        text_positions = position_ids if position_ids.dim() == 2 else position_ids[0]
        positions = text_positions.float() + self.rope_deltas.to(text_positions.device)
        return positions.unsqueeze(0).expand(self.config.rope_parameters["axes"], -1, -1)

    @can_return_tuple
    @auto_docstring
    @_documented
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.LongTensor | None = None,
        pixel_values_videos: torch.Tensor | None = None,
        video_grid_thw: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ):
        r"""
        position_ids (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
            During cached generation, each token's index among the real tokens (as `generate` passes it); the
            prompt's own positions are always built from the placeholders and grids.
        """
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        if past_length == 0 or self.rope_deltas is None:
            embeds, position_ids, self.rope_deltas = self.vision_text_inputs(
                input_ids, attention_mask, pixel_values, image_grid_thw, pixel_values_videos, video_grid_thw
            )
        else:
            embeds = self.get_input_embeddings()(input_ids)
            position_ids = self.decode_position_ids(input_ids, position_ids, past_length)
        return super().forward(
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=embeds,
            past_key_values=past_key_values,
            labels=labels,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )


__all__ = [
    "RoFormerExtPatchEmbedding",
    "RoFormerExtVisionTextForCausalLM",
    "RoFormerExtVisionTextForMaskedLM",
    "RoFormerExtVisionTextForSequenceClassification",
    "RoFormerExtVisionTextModel",
]
