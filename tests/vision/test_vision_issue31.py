"""Vision-text defects of issue #31, each checked with a model whose output visibly depends on positions."""

import copy

import pytest
import torch
from conftest import assert_position_sensitive
from vision_sizes import IMAGE, PATCH_DIM, SIZES, VIDEO

from roformer_ext import (
    RoFormerExtVisionTextConfig,
    RoFormerExtVisionTextForCausalLM,
    RoFormerExtVisionTextForSequenceClassification,
    RoFormerExtVisionTextModel,
)
from roformer_ext.compat import CACHE, output_cache
from roformer_ext.modeling_roformer_ext_vision import expand_vision_inputs
from roformer_ext.positions import build_position_ids

#: ILRoPE resets an image's rows and columns to 0: a layout ignoring packed boundaries shifts text, not the image.
ILROPE = {"position_scheme": "ilrope", "mrope_section": [4, 4, 4]}


def sensitive_config(**overrides) -> RoFormerExtVisionTextConfig:
    """Large random weights: attention scores of order 10, so a moved position shows."""
    return RoFormerExtVisionTextConfig(**{**SIZES, "rope_parameters": ILROPE, "initializer_range": 1.0, **overrides})


def image_prompt(generator: torch.Generator, text: int, grid: tuple[int, int, int]) -> dict:
    """`text` words, one image of `grid`, two words: ids (seq,), pixels, grid."""
    before, after = torch.randint(5, 90, (text,), generator=generator), torch.randint(5, 90, (2,), generator=generator)
    ids = torch.cat([before, torch.full((grid[0] * grid[1] * grid[2],), IMAGE), after])
    pixels = torch.randn(grid[0] * grid[1] * grid[2], PATCH_DIM, generator=generator)
    return {"ids": ids, "pixels": pixels, "grid": grid}


def alone(part: dict) -> dict:
    return dict(input_ids=part["ids"][None], pixel_values=part["pixels"], image_grid_thw=torch.tensor([part["grid"]]))


def packed_row(parts: list[dict]) -> dict:
    lengths = [len(p["ids"]) for p in parts]
    bounds = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    row = alone(dict(ids=torch.cat([p["ids"] for p in parts]), pixels=torch.cat([p["pixels"] for p in parts]), grid=0))
    row["image_grid_thw"] = torch.tensor([p["grid"] for p in parts])
    return dict(row, cu_seq_lens_q=bounds, cu_seq_lens_k=bounds, max_length_q=max(lengths), max_length_k=max(lengths))


def test_packed_vision_classification_positions_equal_each_sequence_alone():
    """Issue #31, 0: the classification head's pooling hid cu_seq_lens_q, so the packed row was laid out as one."""
    torch.manual_seed(0)
    model = RoFormerExtVisionTextForSequenceClassification(sensitive_config(num_labels=3)).eval()
    generator = torch.Generator().manual_seed(1)
    parts = [image_prompt(generator, 3, (1, 2, 3)), image_prompt(generator, 2, (1, 2, 2))]
    positions, compute = [], model.roformer.compute_position_ids  # every position tensor computed from now on
    model.roformer.compute_position_ids = lambda *args, **kwargs: (
        positions.append(compute(*args, **kwargs)) or positions[-1]
    )
    with torch.no_grad():
        packed_logits = model(**packed_row(parts)).logits
        alone_logits = torch.cat([model(**alone(part)).logits for part in parts])
    packed_positions, *alone_positions = positions
    torch.testing.assert_close(packed_logits, alone_logits, atol=1e-4, rtol=0)
    assert torch.equal(packed_positions, torch.cat(alone_positions, dim=2))

    # the model sees the defect: the row laid out as one sequence moves the logits far (~30)
    row = packed_row(parts)
    wrong, _ = build_position_ids(row["input_ids"], model.config, row["image_grid_thw"])
    assert not torch.equal(wrong, packed_positions)
    with torch.no_grad():
        wrong_logits = model(**row, position_ids=wrong).logits
    assert (wrong_logits[1] - alone_logits[1]).abs().max() > 1e-2


def generation_prompts() -> tuple[list[dict], dict]:
    """Two prompts with different images of one size (a wrong assignment of patches raises nothing), and batched."""
    generator = torch.Generator().manual_seed(2)
    parts = [image_prompt(generator, 3, (1, 2, 3)), image_prompt(generator, 3, (1, 3, 2))]
    batch = {
        "input_ids": torch.stack([p["ids"] for p in parts]),
        "attention_mask": torch.ones(2, len(parts[0]["ids"]), dtype=torch.long),
        "pixel_values": torch.cat([p["pixels"] for p in parts]),
        "image_grid_thw": torch.tensor([p["grid"] for p in parts]),
    }
    return parts, batch


GENERATE = dict(max_new_tokens=3, pad_token_id=0, suppress_tokens=[IMAGE], return_dict_in_generate=True)


def test_generate_with_return_sequences_gives_each_copy_its_own_prompts_patches():
    """Issue #31, 1: num_return_sequences repeated pixel_values patch by patch, not prompt by prompt."""
    torch.manual_seed(0)
    model = RoFormerExtVisionTextForCausalLM(sensitive_config()).eval()
    parts, batch = generation_prompts()
    kwargs = dict(GENERATE, do_sample=True, top_k=1, output_logits=True)
    out = model.generate(**batch, num_return_sequences=2, **kwargs)
    expanded = lambda m: torch.stack(m.generate(**batch, num_return_sequences=2, **kwargs).logits)  # noqa: E731
    assert_position_sensitive(model, expanded, 1e-4)
    for row, part in enumerate(parts):
        single = model.generate(**alone(part), **kwargs)
        for index in (2 * row, 2 * row + 1):
            assert torch.equal(out.sequences[index], single.sequences[0])
            for step, step_alone in zip(out.logits, single.logits):
                torch.testing.assert_close(step[index], step_alone[0], atol=1e-4, rtol=0)

    # the model sees the defect: patches in the row-by-row order move the logits far
    wrong = dict(alone(parts[0]), pixel_values=batch["pixel_values"].repeat_interleave(2, dim=0)[:6])
    wrong_out = model.generate(**wrong, **kwargs)
    single = model.generate(**alone(parts[0]), **kwargs)
    assert (wrong_out.logits[0] - single.logits[0]).abs().max() > 1e-2


def test_beam_search_gives_each_beam_its_own_prompts_patches():
    """Issue #31, 1: num_beams > 1 too (a prompt alone as well, so the reference is a plain forward)."""
    torch.manual_seed(0)
    model = RoFormerExtVisionTextForCausalLM(sensitive_config()).eval()
    parts, batch = generation_prompts()
    beams = dict(GENERATE, do_sample=False, num_beams=2, length_penalty=0.0, output_scores=True)
    out = model.generate(**batch, **beams)
    assert_position_sensitive(model, lambda m: m.generate(**batch, **beams).sequences_scores, 1e-4)
    prompt = batch["input_ids"].shape[1]
    for row, part in enumerate(parts):
        with torch.no_grad():
            logits = model(**dict(alone(part), input_ids=out.sequences[row][None]), use_cache=False).logits[0]
        log_probs = logits[prompt - 1 : -1].log_softmax(-1)
        generated = out.sequences[row, prompt:]
        expected = log_probs.gather(-1, generated[:, None]).sum()
        torch.testing.assert_close(out.sequences_scores[row], expected, atol=1e-4, rtol=0)


def test_expand_vision_inputs_repeats_each_prompts_images_and_videos_as_a_group():
    """The expansion itself: prompt 0 holds image 0 and video 0, prompt 1 holds images 1, 2 and video 1."""
    config = sensitive_config()
    ids = torch.tensor([[5, IMAGE, IMAGE, VIDEO, VIDEO, 6, 6, 6], [IMAGE] * 6 + [VIDEO] * 2])
    inputs = {
        "pixel_values": torch.arange(8.0)[:, None].expand(8, PATCH_DIM),
        "image_grid_thw": torch.tensor([[1, 1, 2], [1, 2, 2], [1, 1, 2]]),
        "pixel_values_videos": torch.arange(4.0)[:, None].expand(4, PATCH_DIM),
        "video_grid_thw": torch.tensor([[2, 1, 1], [2, 1, 1]]),
        "second_per_grid_ts": torch.tensor([0.5, 2.0]),
    }
    out = expand_vision_inputs(ids, config, 2, inputs)
    assert out["pixel_values"][:, 0].tolist() == [0, 1, 0, 1, 2, 3, 4, 5, 6, 7, 2, 3, 4, 5, 6, 7]
    assert out["image_grid_thw"].tolist() == [[1, 1, 2], [1, 1, 2], [1, 2, 2], [1, 1, 2], [1, 2, 2], [1, 1, 2]]
    assert out["pixel_values_videos"][:, 0].tolist() == [0, 1, 0, 1, 2, 3, 2, 3]
    assert out["second_per_grid_ts"].tolist() == [0.5, 0.5, 2.0, 2.0]
    with pytest.raises(ValueError, match="do not match whole image_grid_thw entries"):
        expand_vision_inputs(ids[:, 1:], config, 2, inputs)


def test_second_chat_turn_with_the_conversations_pixels_equals_the_turn_without_them():
    """Issue #31, 5: a second turn given the cache and the conversation's pixel_values raised "0 image placeholder"."""
    torch.manual_seed(0)
    model = RoFormerExtVisionTextForCausalLM(sensitive_config()).double().eval()
    part = image_prompt(torch.Generator().manual_seed(3), 3, (1, 2, 3))
    first_turn = dict(alone(part), pixel_values=part["pixels"].double())
    kwargs = dict(GENERATE, do_sample=False, output_logits=True)
    turn1 = model.generate(**first_turn, **kwargs)
    conversation = torch.cat([turn1.sequences, torch.tensor([[11, 12, 13]])], dim=1)
    pixels = {key: first_turn[key] for key in ("pixel_values", "image_grid_thw")}
    cache = output_cache(turn1)

    def second_turn(**extra):
        return model.generate(input_ids=conversation, **{CACHE: copy.deepcopy(cache)}, **extra, **kwargs)

    with_pixels, grids_only = second_turn(**pixels), second_turn(image_grid_thw=pixels["image_grid_thw"])
    with pytest.raises(ValueError, match="pass the conversation's grids again"):
        second_turn()
    recomputed = model.generate(input_ids=conversation, **pixels, use_cache=False, **kwargs)
    run = lambda m: torch.stack(m.generate(input_ids=conversation, **pixels, use_cache=False, **kwargs).logits)  # noqa: E731
    assert_position_sensitive(model, run, 1e-8)
    for other in (grids_only, recomputed):
        assert torch.equal(with_pixels.sequences, other.sequences)
        for step, step_other in zip(with_pixels.logits, other.logits):
            torch.testing.assert_close(step, step_other, atol=1e-8, rtol=0)


@pytest.mark.parametrize("grid", ["image_grid_thw", "video_grid_thw"])
def test_a_grid_without_input_ids_is_refused_with_the_fix(grid):
    model = RoFormerExtVisionTextModel(sensitive_config()).eval()
    embeds = model.get_input_embeddings()(torch.tensor([[5, 6, 7]]))
    with pytest.raises(ValueError, match="need input_ids.*pass 3D position_ids built by .*build_position_ids"):
        model(inputs_embeds=embeds, **{grid: torch.tensor([[1, 1, 1]])})


def test_decoding_without_position_ids_continues_after_the_cached_prompt():
    """From the cached length plus the prompt's rope_deltas; without them a model with placeholder ids refuses."""
    model = RoFormerExtVisionTextModel(sensitive_config(is_decoder=True)).eval()
    prompt, following = torch.tensor([[5, 6, 7, 8], [8, 7, 6, 5]]), torch.tensor([[9, 10, 11], [11, 10, 9]])
    deltas = torch.zeros(2, 1)
    with torch.no_grad():
        cache = output_cache(model(prompt, use_cache=True))
        with pytest.raises(ValueError, match="needs the prompt's rope_deltas"):
            model(following, **{CACHE: cache})
        implicit = model(following, **{CACHE: cache}, rope_deltas=deltas).last_hidden_state
        cache = output_cache(model(prompt, use_cache=True))
        explicit = model(following, **{CACHE: cache}, position_ids=torch.tensor([[4, 5, 6]] * 2), rope_deltas=deltas)
        cache = output_cache(model(prompt, use_cache=True))
        restarted = model(following, **{CACHE: cache}, position_ids=torch.tensor([[0, 1, 2]] * 2), rope_deltas=deltas)
    assert implicit.shape == (2, 3, SIZES["hidden_size"])  # batch 2, 3 tokens: neither size stands for the other
    assert torch.equal(implicit, explicit.last_hidden_state)
    assert not torch.allclose(implicit, restarted.last_hidden_state)  # the positions are seen
