"""Regression tests for defects found by probing the models the way users (and transformers' tests) use them."""

import copy
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import transformers
from conftest import assert_position_sensitive, position_sensitive_config, random_inputs, tiny_config
from transformers import EncoderDecoderModel
from vision_sizes import SIZES  # tests/vision

from roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtModel,
    RoFormerExtVisionTextConfig,
    RoFormerExtVisionTextForCausalLM,
)
from roformer_ext.compat import output_cache
from roformer_ext.positions import build_position_ids


@pytest.mark.parametrize("model_class", [RoFormerExtForMaskedLM, RoFormerExtForCausalLM])
def test_resize_token_embeddings_resizes_lm_head_bias(model_class):
    torch.manual_seed(0)
    model = model_class(tiny_config()).eval()
    old_bias = model.lm_head.bias.detach().clone()
    model.resize_token_embeddings(120)
    assert model.lm_head.bias.shape == (120,)
    torch.testing.assert_close(model.lm_head.bias[:99], old_bias)
    assert model(torch.randint(0, 120, (2, 6))).logits.shape == (2, 6, 120)
    model.resize_token_embeddings(50)  # shrinking too
    assert model(torch.randint(0, 50, (1, 4))).logits.shape == (1, 4, 50)


def test_causal_lm_does_not_make_the_callers_config_causal():
    config = tiny_config()
    snapshot = config.to_dict()
    decoder = RoFormerExtForCausalLM(config)
    assert decoder.config.is_decoder and not config.is_decoder
    assert config.to_dict() == snapshot
    encoder = RoFormerExtModel(config).eval()  # built afterwards from the same object: still bidirectional
    input_ids, attention_mask, _ = random_inputs()
    ref = RoFormerExtModel(tiny_config()).eval()
    ref.load_state_dict(encoder.state_dict())
    with torch.no_grad():
        out, expected = (m(input_ids, attention_mask=attention_mask).last_hidden_state for m in (encoder, ref))
    torch.testing.assert_close(out, expected)


def test_cross_attention_reads_the_encoder_and_its_cache_equals_recomputation():
    torch.manual_seed(0)
    encoder = RoFormerExtModel(position_sensitive_config(attn_implementation="eager"))
    decoder = position_sensitive_config(is_decoder=True, add_cross_attention=True, attn_implementation="eager")
    model = EncoderDecoderModel(encoder=encoder, decoder=RoFormerExtForCausalLM(decoder)).eval()
    model.config.decoder_start_token_id, model.config.pad_token_id = 2, 0
    input_ids, attention_mask, _ = random_inputs(batch=2, seq=9)
    decoder_input_ids = torch.randint(5, 99, (2, 4))
    with torch.no_grad():
        out = model(input_ids, attention_mask, decoder_input_ids=decoder_input_ids, output_attentions=True)
        other = model(input_ids.flip(1), attention_mask, decoder_input_ids=decoder_input_ids)
    assert not torch.allclose(out.logits, other.logits)  # the encoder's input changes the decoder's output
    assert len(out.cross_attentions) == 2 and out.cross_attentions[0].shape == (2, 4, 4, 9)
    assert torch.all(out.cross_attentions[0][1, :, :, -2:] == 0)  # padded encoder tokens get no cross-attention
    settings = dict(
        max_new_tokens=5, do_sample=False, decoder_start_token_id=2, return_dict_in_generate=True, output_logits=True
    )
    cached, recomputed = (
        model.generate(input_ids, attention_mask=attention_mask, use_cache=use_cache, **settings)
        for use_cache in (True, False)
    )
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(torch.stack(cached.logits), torch.stack(recomputed.logits), rtol=1e-5, atol=1e-5)
    # the cached decoder's positions are the claim: a position error in the decoder moves the logits >= 100x 1e-5
    run = lambda _: torch.stack(model.generate(input_ids, attention_mask=attention_mask, **settings).logits)  # noqa: E731
    assert_position_sensitive(model.decoder, run, 1e-5)


def test_encoder_hidden_states_without_cross_attention_raise():
    model = RoFormerExtForCausalLM(tiny_config())
    with pytest.raises(ValueError, match="add_cross_attention"):
        model(torch.randint(5, 99, (1, 4)), encoder_hidden_states=torch.randn(1, 3, 32))


def test_user_positions_that_jump_keep_full_causal_attention():
    torch.manual_seed(0)
    model = RoFormerExtForCausalLM(tiny_config(is_decoder=True)).eval()
    input_ids = torch.randint(5, 99, (1, 5))
    positions = torch.tensor([[0, 1, 2, 10, 11]])
    with torch.no_grad():
        actual = model(input_ids, position_ids=positions, use_cache=False).logits
        # an explicit 2D all-ones mask: nothing can be read as a packed boundary
        expected = model(input_ids, position_ids=positions, attention_mask=torch.ones_like(input_ids)).logits
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def vision_lm(scheme: str) -> RoFormerExtVisionTextForCausalLM:
    torch.manual_seed(0)
    sizes = {**SIZES, "temporal_patch_size": 1, "num_channels": 1}  # a patch is 4 values
    rope = {"position_scheme": scheme, "axes": 3 if scheme != "rope_2d_rows" else 2}
    config = position_sensitive_config(RoFormerExtVisionTextConfig, **sizes, rope_parameters=rope)
    return RoFormerExtVisionTextForCausalLM(config).eval()


def image_inputs(seed: int = 0, text_after: int = 3, grid: tuple[int, int, int] = (1, 2, 3)) -> dict:
    generator, patches = torch.Generator().manual_seed(seed), grid[0] * grid[1] * grid[2]
    before, after = (torch.randint(5, 90, (n,), generator=generator) for n in (3, text_after))
    ids = torch.cat([before, torch.full((patches,), 97), after])[None]
    pixels = torch.randn(patches, 4, generator=generator)
    return dict(input_ids=ids, pixel_values=pixels, image_grid_thw=torch.tensor([grid]))


@pytest.mark.parametrize("scheme", ["rope_tie", "rope_tie_v2", "mrope", "rope_2d_rows"])
def test_vision_schemes_without_mask_equal_explicit_masks(scheme):
    """Image positions jump: with no mask and no cache the decoder still attends to every earlier token."""
    model = vision_lm(scheme)
    inputs = image_inputs()
    seq = inputs["input_ids"].shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()[None, None]
    with torch.no_grad():
        without = model(**inputs, use_cache=False).logits
        for mask in (torch.ones(1, seq, dtype=torch.long), causal):
            actual = model(**inputs, attention_mask=mask, use_cache=False).logits
            torch.testing.assert_close(without, actual, rtol=1e-5, atol=1e-5)
    assert_position_sensitive(model, lambda m: m(**inputs, use_cache=False).logits, 1e-5)
    assert_position_sensitive(model, lambda m: m(**inputs, attention_mask=causal, use_cache=False).logits, 1e-5)


def test_interleaved_requests_do_not_share_position_offsets():
    """Prompt A, prompt B, then A's next step: A's continuation reads A's deltas, handed in; nothing is kept."""
    model = vision_lm("rope_tie")
    a, b = image_inputs(seed=1, text_after=2), image_inputs(seed=2, text_after=5)
    b["input_ids"] = torch.cat([b["input_ids"], torch.randint(5, 90, (1, 4))], dim=1)  # another length, another delta
    b.pop("pixel_values"), b.pop("image_grid_thw")
    b["input_ids"] = b["input_ids"].masked_fill(b["input_ids"] == 97, 7)  # text only: delta 0
    step = torch.tensor([[11]])
    deltas = build_position_ids(a["input_ids"], model.config, a["image_grid_thw"])[1]
    with torch.no_grad():
        out_a = model(**a, use_cache=True)
        alone = model(step, cache=copy.deepcopy(output_cache(out_a)), rope_deltas=deltas).logits
        model(**b, use_cache=True)
        interleaved = model(step, cache=output_cache(out_a), rope_deltas=deltas).logits
        with pytest.raises(ValueError, match="needs the prompt's rope_deltas"):
            model(step, cache=output_cache(out_a))
    torch.testing.assert_close(interleaved, alone)  # float32 defaults: atol 1e-5, rtol 1.3e-6
    step_a = lambda m: m(step, cache=output_cache(m(**a, use_cache=True)), rope_deltas=deltas).logits  # noqa: E731
    assert_position_sensitive(model, step_a, 1e-5)
    for owner in (model, output_cache(out_a)):  # no request state on the model nor on transformers' cache
        assert not any("delta" in name for name in vars(owner))


def test_two_threads_generate_as_sequential_runs():
    model = vision_lm("rope_tie")  # RoPE-Tie's delta is h + w: the two prompts' offsets differ (5 and 9)
    prompts = [image_inputs(seed=1, text_after=1, grid=(1, 2, 3)), image_inputs(seed=2, text_after=6, grid=(1, 1, 8))]
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, suppress_tokens=[97, 98], output_logits=True)

    def logits(prompt: dict) -> torch.Tensor:  # logits, not tokens: a wrong offset need not change a random argmax
        return torch.stack(model.generate(**prompt, **kwargs, return_dict_in_generate=True).logits)

    sequential = [logits(p) for p in prompts]
    start = threading.Barrier(2)

    def run(index: int) -> list[torch.Tensor]:
        start.wait()
        return [logits(prompts[index]) for _ in range(4)]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so the two requests really interleave
    try:
        with ThreadPoolExecutor(2) as pool:  # a thread's exception re-raised here
            results = list(pool.map(run, range(2)))
    finally:
        sys.setswitchinterval(interval)
    for got, expected in zip(results, sequential, strict=True):
        for g in got:
            torch.testing.assert_close(g, expected)  # float32 defaults: atol 1e-5, rtol 1.3e-6
    for prompt in prompts:  # each prompt's offset matters: a position error moves its logits >= 100x 1e-5
        assert_position_sensitive(model, lambda m, prompt=prompt: logits(prompt), 1e-5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(attention_type="performer"), "attention_type"),
        (dict(rope_parameters={"pair_layout": "zigzag"}), "pair_layout"),
        (dict(rope_parameters={"axes": 3, "axis_allocation": "sections", "mrope_section": [1, 1, 1]}), "mrope_section"),
    ],
)
def test_from_pretrained_overrides_are_validated(tmp_path, overrides, message):
    RoFormerExtModel(tiny_config()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=message):
        RoFormerExtModel.from_pretrained(tmp_path, **overrides)


def test_missing_scaling_factor_is_a_value_error():
    with pytest.raises(ValueError, match="factor"):
        tiny_config(rope_parameters={"rope_type": "linear"})


def test_legacy_rope_scaling_in_config_json_is_read(tmp_path):
    """Older code's `rope_scaling` with `type`, as transformers 5 reads it for its own models."""
    RoFormerExtModel(tiny_config()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data.pop("rope_parameters")
    data["rope_scaling"] = {"type": "linear", "factor": 4.0}
    (tmp_path / "config.json").write_text(json.dumps(data))
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    assert config.rope_parameters["rope_type"] == "linear" and config.rope_parameters["factor"] == 4.0
    model = RoFormerExtModel.from_pretrained(tmp_path)
    torch.testing.assert_close(model.rotary_emb.inv_freq, RoFormerExtModel(tiny_config()).rotary_emb.inv_freq / 4.0)


@pytest.mark.parametrize(
    "input_ids, message",
    [(torch.zeros(1, 0, dtype=torch.long), "seq >= 1"), (torch.tensor([5, 6, 7]), r"\(batch, seq\)")],
)
def test_empty_or_1d_input_ids_get_a_clear_error(input_ids, message):
    with pytest.raises(ValueError, match=message):
        RoFormerExtModel(tiny_config())(input_ids)


@pytest.mark.parametrize("attention_type", ["linear", "softmax"])
def test_attention_mask_longer_than_the_sequence_is_refused(attention_type):
    model = RoFormerExtModel(tiny_config(attention_type=attention_type))
    with pytest.raises(ValueError, match="attention_mask has shape"):
        model(torch.randint(5, 99, (2, 4)), attention_mask=torch.ones(2, 6, dtype=torch.long))
