"""Vision-text models: text-checkpoint carry-over, every head under every scheme, generation, bad input."""

import pytest
import torch
import transformers
from conftest import assert_position_sensitive, position_sensitive_config, random_inputs
from vision_sizes import IMAGE, PATCH_DIM, SIZES, VIDEO

from roformer_ext import (
    RoFormerExtConfig,
    RoFormerExtForMaskedLM,
    RoFormerExtForSequenceClassification,
    RoFormerExtModel,
    RoFormerExtVisionTextConfig,
    RoFormerExtVisionTextForCausalLM,
    RoFormerExtVisionTextForMaskedLM,
    RoFormerExtVisionTextForSequenceClassification,
    RoFormerExtVisionTextModel,
)

SCHEMES = {
    s: {"axes": 3, "position_scheme": s} for s in ("rope_1d", "rope_2d_rows", "rope_tie", "rope_tie_v2", "mrope")
}
SCHEMES["mrope"].update(axis_allocation="sections", mrope_section=[4, 4, 4])  # head_dim 24: 12 pairs
HEADS = (
    RoFormerExtVisionTextModel,
    RoFormerExtVisionTextForMaskedLM,
    RoFormerExtVisionTextForSequenceClassification,
    RoFormerExtVisionTextForCausalLM,
)


def vision_config(scheme: str, **overrides) -> RoFormerExtVisionTextConfig:
    rope = {**SCHEMES[scheme], **overrides.pop("rope_parameters", {})}
    return position_sensitive_config(RoFormerExtVisionTextConfig, **{**SIZES, **overrides}, rope_parameters=rope)


def mixed_batch(seed: int = 0):
    """Two samples: text, a 2x3 image, text, a 2-frame 2x2 video, text; the second left-padded by 2."""
    generator = torch.Generator().manual_seed(seed)
    text = [torch.randint(5, 90, (n,), generator=generator) for n in (3, 2, 2)]
    row = torch.cat([text[0], torch.full((6,), IMAGE), text[1], torch.full((8,), VIDEO), text[2]])
    input_ids = torch.stack([row, torch.cat([torch.zeros(2, dtype=torch.long), row[:-2]])])
    pixels, video = (torch.randn(n, PATCH_DIM, generator=generator) for n in (12, 16))
    grids = dict(image_grid_thw=torch.tensor([[1, 2, 3]] * 2), video_grid_thw=torch.tensor([[2, 2, 2]] * 2))
    mask = (input_ids != 0).long()
    return dict(input_ids=input_ids, attention_mask=mask, pixel_values=pixels, pixel_values_videos=video, **grids)


@pytest.mark.parametrize("scheme", ["rope_tie", "rope_tie_v2", "mrope"])
@pytest.mark.parametrize(
    "text_class, vision_class",
    list(zip((RoFormerExtModel, RoFormerExtForMaskedLM, RoFormerExtForSequenceClassification), HEADS[:3])),
)
def test_text_checkpoint_carries_over_exactly(scheme, text_class, vision_class, tmp_path):
    torch.manual_seed(0)
    text_model = text_class(position_sensitive_config(RoFormerExtConfig, **SIZES)).eval()
    text_model.save_pretrained(tmp_path)
    rope = {**text_model.config.rope_parameters, **SCHEMES[scheme]}  # the text model's rope_theta (100) carries over
    vision_model, info = vision_class.from_pretrained(tmp_path, rope_parameters=rope, output_loading_info=True)
    prefix = "" if vision_class is RoFormerExtVisionTextModel else "roformer."  # the patch embedding is the base's
    assert sorted(info["missing_keys"]) == [f"{prefix}patch_embed.proj.bias", f"{prefix}patch_embed.proj.weight"]
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    input_ids, attention_mask, token_type_ids = random_inputs(vocab=90)

    def run(m) -> torch.Tensor:  # pads sit at another position (0) in the vision model; real tokens must agree
        out = m(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]
        return out * attention_mask[..., None] if out.dim() == 3 else out

    with torch.no_grad():
        torch.testing.assert_close(run(vision_model.eval()), run(text_model), atol=1e-6, rtol=0)
    assert_position_sensitive(vision_model, run, 1e-6)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_every_head_runs_on_images_and_video(scheme):
    batch = mixed_batch()
    for model_class in HEADS:
        torch.manual_seed(0)
        model = model_class(vision_config(scheme)).eval()
        with torch.no_grad():
            out = model(**batch)
        assert torch.isfinite(out[0]).all(), model_class.__name__


def test_patches_and_positions_change_the_output():
    torch.manual_seed(0)
    model = RoFormerExtVisionTextForSequenceClassification(vision_config("rope_tie_v2")).eval()
    batch = mixed_batch()
    with torch.no_grad():
        base = model(**batch).logits
        other_pixels = model(**{**batch, "pixel_values": batch["pixel_values"] + 1}).logits
        other_grid = model(**{**batch, "image_grid_thw": torch.tensor([[1, 3, 2], [1, 3, 2]])}).logits
    assert not torch.allclose(base, other_pixels) and not torch.allclose(base, other_grid)


@pytest.mark.parametrize(
    "model_class, pooling",
    [(head, None) for head in HEADS if head is not RoFormerExtVisionTextForSequenceClassification]
    + [(RoFormerExtVisionTextForSequenceClassification, pooling) for pooling in ("mean", "cls")],
)
def test_left_padding_does_not_change_real_tokens(model_class, pooling):
    """Sample 1 alone equals its left-padded row: per token, or pooled (mean: real tokens; cls: first real token)."""
    torch.manual_seed(0)
    model = model_class(vision_config("mrope", num_labels=3, classifier_pooling=pooling or "cls")).eval()
    batch = mixed_batch()
    alone = dict(batch, input_ids=batch["input_ids"][1:, 2:], attention_mask=batch["attention_mask"][1:, 2:])
    alone["image_grid_thw"], alone["video_grid_thw"] = batch["image_grid_thw"][1:], batch["video_grid_thw"][1:]
    alone["pixel_values"], alone["pixel_values_videos"] = batch["pixel_values"][6:], batch["pixel_values_videos"][8:]
    with torch.no_grad():
        padded, single = model(**batch)[0][1], model(**alone)[0][0]  # [0]: logits, or the base's last_hidden_state
    torch.testing.assert_close(padded if pooling else padded[2:], single, atol=1e-5, rtol=0)
    assert_position_sensitive(model, lambda m: m(**batch)[0], 1e-5)


@pytest.mark.parametrize("scheme", ["rope_tie", "rope_tie_v2", "mrope", "rope_1d"])
def test_generation_with_image_prompt_cached_equals_uncached(scheme):
    torch.manual_seed(0)
    model = RoFormerExtVisionTextForCausalLM(vision_config(scheme)).eval()
    batch = mixed_batch()
    # a random model might write placeholders, and uncached generation would then ask for patches
    kwargs = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, suppress_tokens=[IMAGE, VIDEO])
    kwargs.update(return_dict_in_generate=True, output_logits=True)
    cached = model.generate(**batch, use_cache=True, **kwargs)
    uncached = model.generate(**batch, use_cache=False, **kwargs)
    assert torch.equal(cached.sequences, uncached.sequences)
    assert cached.sequences.shape == (2, batch["input_ids"].shape[1] + 5)
    torch.testing.assert_close(torch.stack(cached.logits), torch.stack(uncached.logits), atol=1e-4, rtol=0)
    run = lambda m: torch.stack(m.generate(**batch, use_cache=True, **kwargs).logits)  # noqa: E731
    assert_position_sensitive(model, run, 1e-4)


def test_placeholder_count_mismatch_raises():
    model = RoFormerExtVisionTextModel(vision_config("rope_tie"))
    batch = mixed_batch()
    for change, message in [
        ({"pixel_values": batch["pixel_values"][:11]}, "12 image placeholder tokens but 11 image patches"),
        ({"pixel_values": None}, "pixel_values and image_grid_thw go together"),
        ({"video_grid_thw": None}, "pixel_values_videos and video_grid_thw go together"),
        ({"image_grid_thw": torch.tensor([[1, 2, 3]])}, ""),  # any ValueError
        ({"pixel_values": batch["pixel_values"][:, :5]}, "pixel_values must be"),
    ]:
        with pytest.raises(ValueError, match=message):
            model(**{**batch, **change})


def test_placeholders_without_pixel_inputs_are_text_tokens():
    """As Qwen2-VL: no pixel_values and no grid means a text-only call; placeholders are ordinary tokens."""
    model = RoFormerExtVisionTextModel(vision_config("rope_tie")).eval()
    input_ids = mixed_batch()["input_ids"][:1]
    with torch.no_grad():
        out = model(input_ids).last_hidden_state
        embeds = model.get_input_embeddings()(input_ids)
        torch.testing.assert_close(model(inputs_embeds=embeds).last_hidden_state, out)


def test_auto_classes_pick_vision_text_heads(tmp_path):
    torch.manual_seed(0)
    model = RoFormerExtVisionTextForSequenceClassification(vision_config("rope_tie_v2")).eval()
    model.save_pretrained(tmp_path)
    reloaded = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert isinstance(reloaded, RoFormerExtVisionTextForSequenceClassification)
    batch = mixed_batch()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits)
