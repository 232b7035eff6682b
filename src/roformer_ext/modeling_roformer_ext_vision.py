"""Vision-text RoFormerExt: one token stream (ViLT / Fuyu style), patches written into placeholder tokens, multi-axis
RoPE; positions are decided once, in `RoFormerExtVisionTextModel.compute_position_ids` (the heads never see them)."""

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, auto_docstring

from .attention_plan import BatchLayout
from .compat import (
    CACHE,
    accepts_old_cache_name,
    parent_expand_inputs_for_generation,
    parent_prepare_position_ids_for_generation,
)
from .configuration_roformer_ext import RoFormerExtVisionTextConfig
from .modeling_roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtForSequenceClassification,
    RoFormerExtModel,
    check_token_inputs,
)
from .positions import build_position_ids, decoding_position_ids
from .scheme_knobs import scheme_knobs_class


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


_VISION_ARGS_DOC = r"""
        position_ids (`torch.Tensor` of shape `(axes, batch_size, sequence_length)` or `(batch_size, sequence_length)`, *optional*):
            3D: every token's position, used as given. 2D: during cached generation, each new token's index among
            the real tokens (as `generate` passes it); a prompt's positions are always built from its placeholders.
        pixel_values (`torch.FloatTensor` of shape `(image_patches, channels * temporal_patch_size * patch_size**2)`, *optional*):
            Image patches from `RoFormerExtImageProcessor`, in placeholder order.
        image_grid_thw (`torch.LongTensor` of shape `(num_images, 3)`, *optional*):
            (t, h, w) patch grid of each image.
        pixel_values_videos (`torch.FloatTensor` of shape `(video_patches, channels * temporal_patch_size * patch_size**2)`, *optional*):
            Video patches from `RoFormerExtImageProcessor`.
        video_grid_thw (`torch.LongTensor` of shape `(num_videos, 3)`, *optional*):
            (t, h, w) patch grid of each video.
        second_per_grid_ts (`torch.Tensor` of shape `(num_videos,)`, *optional*):
            Seconds between two temporal patches of each video, for time-aligned position schemes (`qwen2_5_vl`).
"""


def _documented(func):
    func.__doc__ = (func.__doc__ or "") + _VISION_ARGS_DOC
    return func


@auto_docstring
class RoFormerExtVisionTextModel(RoFormerExtModel):
    """The text encoder behind a patch embedding."""

    config: RoFormerExtVisionTextConfig
    config_class = RoFormerExtVisionTextConfig
    _can_compile_fullgraph = False  # a prompt's positions depend on its placeholders
    auto_map_family = {
        "AutoModel": "modeling_roformer_ext_vision.RoFormerExtVisionTextModel",
        "AutoModelForMaskedLM": "modeling_roformer_ext_vision.RoFormerExtVisionTextForMaskedLM",
        "AutoModelForSequenceClassification": "modeling_roformer_ext_vision.RoFormerExtVisionTextForSequenceClassification",
        "AutoModelForCausalLM": "modeling_roformer_ext_vision.RoFormerExtVisionTextForCausalLM",
    }

    def __init__(self, config: RoFormerExtVisionTextConfig, add_pooling_layer: bool = True) -> None:
        r"""
        add_pooling_layer (`bool`, *optional*, defaults to `True`):
            Build the pooler when `config.pooler_activation` is set.
        """
        super().__init__(config, add_pooling_layer)
        self.patch_embed = RoFormerExtPatchEmbedding(config)
        self.post_init()

    def write_patches(
        self, embeds: torch.Tensor, input_ids: torch.Tensor, kind: str, pixels: torch.Tensor | None, grid_thw
    ) -> torch.Tensor:
        """Patch embeddings into the placeholders of `kind`; without pixels and grid the placeholders stay tokens."""
        suffix, token_id = "_videos" if kind == "video" else "", getattr(self.config, f"{kind}_token_id")
        if (pixels is None) != (grid_thw is None):
            raise ValueError(
                f"pixel_values{suffix} and {kind}_grid_thw go together (one gives the patches, the other their grid); "
                f"got only {'the grid' if pixels is None else 'the patches'}. Pass both, as RoFormerExtProcessor returns."
            )
        if pixels is None:
            return embeds
        placeholders = input_ids == token_id if token_id is not None else torch.zeros_like(input_ids, dtype=torch.bool)
        count = int(placeholders.sum())
        if count != pixels.shape[0]:
            raise ValueError(
                f"The text has {count} {kind} placeholder tokens but {pixels.shape[0]} {kind} patches were given "
                f"(pixel_values{suffix} rows); build inputs with RoFormerExtProcessor so each {kind} gets t*h*w "
                "placeholders."
            )
        if count == 0:
            return embeds
        patches = self.patch_embed(pixels).to(embeds.dtype)
        return embeds.masked_scatter(placeholders[..., None].expand_as(embeds), patches)

    def compute_position_ids(
        self,
        input_ids: torch.LongTensor | None,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        layout: BatchLayout,
        image_grid_thw: torch.LongTensor | None,
        video_grid_thw: torch.LongTensor | None,
        second_per_grid_ts: torch.Tensor | None = None,
        rope_deltas: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(axes, batch, seq): given 3D positions, a prompt's from its placeholders, or after a cache + `rope_deltas`."""
        if position_ids is not None and position_ids.dim() == 3:
            return position_ids
        scheme = self.config.rope_parameters["position_scheme"]
        if layout.packed is not None and not scheme_knobs_class(scheme).capabilities.packing:
            raise ValueError(
                f"Position scheme {scheme!r} does not lay out packed (padding-free) rows (its capabilities say so): "
                "pad the batch instead, without cu_seq_lens / seq_idx, or pass 3D position_ids."
            )
        batch, seq = inputs_embeds.shape[:2]
        if layout.decoding:
            if rope_deltas is None and (self.config.image_token_id, self.config.video_token_id) != (None, None):
                raise ValueError(
                    "A call after a cache needs the prompt's rope_deltas (batch, 1) to continue its layout; generate "
                    "passes them. By hand: rope_deltas = roformer_ext.positions.build_position_ids(prompt_ids, "
                    "model.config, image_grid_thw, video_grid_thw, attention_mask)[1], or pass 3D position_ids."
                )
            if position_ids is None:
                position_ids = torch.arange(seq, device=inputs_embeds.device) + layout.past_length
                position_ids = position_ids.expand(batch, seq)
            return decoding_position_ids(position_ids, rope_deltas, self.config)
        if input_ids is None:  # embeddings only: all text, laid out by the scheme as input_ids would be
            if image_grid_thw is not None or video_grid_thw is not None:
                raise ValueError(
                    "image_grid_thw / video_grid_thw need input_ids (their placeholders say where each image sits); "
                    "with inputs_embeds pass 3D position_ids built by roformer_ext.positions.build_position_ids."
                )
            input_ids = torch.full((batch, seq), -1, device=inputs_embeds.device)  # -1: never a placeholder
        mask_2d = attention_mask if attention_mask is not None and attention_mask.dim() == 2 else None
        cu_seq_lens = layout.packed.cu_seq_lens if layout.packed is not None else None
        return build_position_ids(
            input_ids,
            self.config,
            image_grid_thw,
            video_grid_thw,
            mask_2d,
            second_per_grid_ts,
            cu_seq_lens,
            training=self.training,
        )[0]

    @accepts_old_cache_name
    @auto_docstring
    @_documented
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.LongTensor | None = None,
        pixel_values_videos: torch.Tensor | None = None,
        video_grid_thw: torch.LongTensor | None = None,
        second_per_grid_ts: torch.Tensor | None = None,
        rope_deltas: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ):
        r"""
        rope_deltas (`torch.Tensor` of shape `(batch_size, 1)`, *optional*):
            A call after a cache: the prompt's delta (next text position − real tokens, Qwen2-VL's `rope_deltas`) from
            `roformer_ext.positions.build_position_ids`; `generate` passes it.
        cache (`Cache`, *optional*):
            A decoder's KV cache (transformers' `Cache`); `past_key_values`, its name before transformers 5.24, is
            accepted too.
        """
        check_token_inputs(input_ids, inputs_embeds)
        tokens = input_ids if input_ids is not None else inputs_embeds
        layout = self.batch_layout(
            tokens, attention_mask, position_ids, cache, use_cache, kwargs.get("encoder_hidden_states"), kwargs
        )
        if layout.decoding and input_ids is not None:
            # a later chat turn may bring the conversation's pixels, already in the cache: as Qwen2-VL, patches are
            # written only where the current tokens hold placeholders
            if pixel_values is not None and not bool((input_ids == self.config.image_token_id).any()):
                pixel_values, image_grid_thw = None, None
            if pixel_values_videos is not None and not bool((input_ids == self.config.video_token_id).any()):
                pixel_values_videos, video_grid_thw = None, None
        if inputs_embeds is None:
            inputs_embeds = self.get_input_embeddings()(input_ids)
            if not layout.decoding or pixel_values is not None or pixel_values_videos is not None:
                inputs_embeds = self.write_patches(inputs_embeds, input_ids, "image", pixel_values, image_grid_thw)
                inputs_embeds = self.write_patches(
                    inputs_embeds, input_ids, "video", pixel_values_videos, video_grid_thw
                )
        elif pixel_values is not None or pixel_values_videos is not None:
            raise ValueError(
                "pixel_values go with input_ids (their placeholders say where the patches go); with inputs_embeds, "
                "write the patch embeddings into the embeddings yourself."
            )
        position_ids = self.compute_position_ids(
            input_ids,
            inputs_embeds,
            attention_mask,
            position_ids,
            layout,
            image_grid_thw,
            video_grid_thw,
            second_per_grid_ts,
            rope_deltas,
        )
        return super().forward(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            cache=layout.cache,
            use_cache=use_cache,
            batch_layout=layout,
            **kwargs,
        )


#: Vision inputs given per image or video (not per prompt): generate must repeat them per prompt.
_PER_ITEM_VISION_INPUTS = (
    "pixel_values",
    "image_grid_thw",
    "pixel_values_videos",
    "video_grid_thw",
    "second_per_grid_ts",
)


def expand_vision_inputs(
    input_ids: torch.Tensor, config: RoFormerExtVisionTextConfig, expand_size: int, inputs: dict
) -> dict:
    """Vision inputs repeated `expand_size` times per prompt (beams), each prompt's images (by placeholders) as a group."""
    expanded = dict(inputs)
    kinds = (
        ("image", config.image_token_id, "pixel_values", "image_grid_thw", ()),
        ("video", config.video_token_id, "pixel_values_videos", "video_grid_thw", ("second_per_grid_ts",)),
    )
    for kind, token_id, pixels_name, grid_name, per_item in kinds:
        grids = inputs.get(grid_name)
        if grids is None:
            continue
        sizes = [int(t * h * w) for t, h, w in torch.as_tensor(grids).reshape(-1, 3).tolist()]
        counts = (input_ids == token_id).sum(-1).tolist() if token_id is not None else [0] * input_ids.shape[0]
        owned, item = [], 0  # the range of grids that each prompt's placeholders hold
        for row, count in enumerate(counts):
            first, taken = item, 0
            while taken < count and item < len(sizes):
                taken, item = taken + sizes[item], item + 1
            if taken != count:
                raise ValueError(
                    f"Prompt {row} has {count} {kind} placeholder tokens, which do not match whole {grid_name} entries "
                    f"(patches per {kind}: {sizes}); build the inputs with RoFormerExtProcessor."
                )
            owned.append(range(first, item))
        if item != len(sizes):
            raise ValueError(
                f"{grid_name} gives {len(sizes)} {kind}s but the prompts' placeholders hold {item}; build the inputs "
                "with RoFormerExtProcessor."
            )
        order = [index for items in owned for _ in range(expand_size) for index in items]
        device = grids.device if isinstance(grids, torch.Tensor) else None
        index = torch.tensor(order, dtype=torch.long, device=device)
        expanded[grid_name] = torch.as_tensor(grids).reshape(-1, 3)[index]
        pixels = inputs.get(pixels_name)
        if pixels is not None:
            starts = [0, *torch.tensor(sizes).cumsum(0).tolist()]
            rows = [torch.arange(starts[i], starts[i + 1]) for i in order]
            expanded[pixels_name] = pixels[torch.cat(rows).to(pixels.device)] if rows else pixels[:0]
        for name in per_item:
            if inputs.get(name) is not None:
                values = torch.as_tensor(inputs[name]).flatten()
                expanded[name] = values[index.to(values.device)]
    return expanded


class VisionTextHeadMixin:
    """A text head around the vision-text base model: it hands the pixel inputs down and never touches positions."""

    config: RoFormerExtVisionTextConfig
    config_class = RoFormerExtVisionTextConfig
    auto_map_family = RoFormerExtVisionTextModel.auto_map_family
    _can_compile_fullgraph = False

    def build_base_model(self, config: RoFormerExtVisionTextConfig, add_pooling_layer: bool = True) -> nn.Module:
        return RoFormerExtVisionTextModel(config, add_pooling_layer=add_pooling_layer)

    @auto_docstring
    @_documented
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.LongTensor | None = None,
        pixel_values_videos: torch.Tensor | None = None,
        video_grid_thw: torch.LongTensor | None = None,
        second_per_grid_ts: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ):
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            labels=labels,
            pixel_values=pixel_values,
            image_grid_thw=image_grid_thw,
            pixel_values_videos=pixel_values_videos,
            video_grid_thw=video_grid_thw,
            second_per_grid_ts=second_per_grid_ts,
            **kwargs,
        )


@auto_docstring
class RoFormerExtVisionTextForMaskedLM(VisionTextHeadMixin, RoFormerExtForMaskedLM):
    """Masked LM over the mixed stream (patch positions carry no word to predict: label them -100)."""


@auto_docstring
class RoFormerExtVisionTextForSequenceClassification(VisionTextHeadMixin, RoFormerExtForSequenceClassification):
    """[CLS] classification of text with images / videos."""


@auto_docstring
class RoFormerExtVisionTextForCausalLM(VisionTextHeadMixin, RoFormerExtForCausalLM, GenerationMixin):
    """Generation with images in the prompt: new tokens sit at their text index + the prompt's `rope_deltas` (Qwen2-VL)."""

    # generate's row-by-row repeat (beams, return sequences) is wrong for inputs given per image (Qwen2-VL overrides
    # this private hook too; listed in compat.PRIVATE_NAMES)
    def _expand_inputs_for_generation(
        self, expand_size: int = 1, is_encoder_decoder: bool = False, input_ids: torch.Tensor | None = None, **kwargs
    ):
        vision = {}
        if expand_size > 1 and input_ids is not None:  # without input_ids the forward refuses pixels anyway
            vision = {name: kwargs.pop(name) for name in _PER_ITEM_VISION_INPUTS if kwargs.get(name) is not None}
        expanded_ids, kwargs = parent_expand_inputs_for_generation(
            super(), expand_size, is_encoder_decoder, input_ids, **kwargs
        )
        if vision:
            kwargs.update(expand_vision_inputs(input_ids, self.config, expand_size, vision))
        return expanded_ids, kwargs

    def _prepare_position_ids_for_generation(self, inputs_tensor: torch.Tensor, model_kwargs: dict) -> torch.Tensor:
        """Once per generate (as Qwen2-VL): the prompt's `rope_deltas` join the model kwargs for every step and copy."""
        positions = parent_prepare_position_ids_for_generation(super(), inputs_tensor, model_kwargs)
        mask = model_kwargs["attention_mask"]  # generate makes one first: the forward takes it
        input_ids = model_kwargs.get("input_ids")
        input_ids = input_ids if input_ids is not None and input_ids.shape[1] else inputs_tensor
        if input_ids.is_floating_point():  # a prompt of embeddings: all text, delta 0
            model_kwargs["rope_deltas"] = torch.zeros(input_ids.shape[0], 1, device=input_ids.device)
            return positions
        cache = model_kwargs.get(CACHE)
        cached = input_ids[:, : int(cache.get_seq_length()) if cache is not None else 0]
        for kind in ("image", "video"):
            token_id = getattr(self.config, f"{kind}_token_id")
            if model_kwargs.get(f"{kind}_grid_thw") is None and bool((cached == token_id).any()):
                raise ValueError(
                    f"The cached conversation holds {kind} placeholders but {kind}_grid_thw was not given: pass the "
                    "conversation's grids again (pixel_values are optional), so that the new tokens continue its layout."
                )
        grids = [model_kwargs.get(name) for name in ("image_grid_thw", "video_grid_thw")]
        seconds = model_kwargs.get("second_per_grid_ts")
        model_kwargs["rope_deltas"] = build_position_ids(input_ids, self.config, *grids, mask, seconds)[1]
        return positions

    @accepts_old_cache_name
    @auto_docstring
    @_documented
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.LongTensor | None = None,
        pixel_values_videos: torch.Tensor | None = None,
        video_grid_thw: torch.LongTensor | None = None,
        second_per_grid_ts: torch.Tensor | None = None,
        rope_deltas: torch.Tensor | None = None,
        cache: Cache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ):
        r"""
        rope_deltas (`torch.Tensor` of shape `(batch_size, 1)`, *optional*):
            A call after a cache: the prompt's delta (next text position − real tokens, Qwen2-VL's `rope_deltas`) from
            `roformer_ext.positions.build_position_ids`; `generate` passes it.
        cache (`Cache`, *optional*):
            The KV cache (transformers' `Cache`); `past_key_values`, its name before transformers 5.24, is accepted
            too.
        """
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            pixel_values=pixel_values,
            image_grid_thw=image_grid_thw,
            pixel_values_videos=pixel_values_videos,
            video_grid_thw=video_grid_thw,
            second_per_grid_ts=second_per_grid_ts,
            rope_deltas=rope_deltas,
            labels=labels,
            cache=cache,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )
