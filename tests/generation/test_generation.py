"""Generation as transformers' GenerationTesterMixin checks it, on our causal LMs (text and vision-text)."""

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config, tiny_config
from test_correctness import image_inputs, vision_lm  # tests/model: the same tiny vision-text decoder and prompt
from transformers import CompileConfig, DynamicCache, StaticCache

from roformer_ext import RoFormerExtForCausalLM
from roformer_ext.compat import CACHE, output_cache

GREEDY = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
WITH_LOGITS = dict(GREEDY, return_dict_in_generate=True, output_logits=True)


def causal_lm(**overrides) -> RoFormerExtForCausalLM:
    torch.manual_seed(0)
    return RoFormerExtForCausalLM(position_sensitive_config(is_decoder=True, **overrides)).eval()


def sensitive(model, **generate_kwargs) -> None:
    """A position error changes this generation's logits (a random model's greedy tokens soon repeat, so need not)."""
    kwargs = dict(generate_kwargs, return_dict_in_generate=True, output_logits=True)
    assert_position_sensitive(model, lambda m: torch.stack(m.generate(**kwargs).logits), 1e-5)


def assert_same(got, sequences, logits=None) -> None:
    """got's tokens and logits are `sequences` and `logits`, or those of the output `sequences`."""
    sequences, logits = (sequences.sequences, sequences.logits) if logits is None else (sequences, logits)
    assert torch.equal(got.sequences, sequences)
    torch.testing.assert_close(torch.stack(got.logits), torch.stack(tuple(logits)), rtol=1e-5, atol=1e-5)


def prompt(batch: int = 2, seq: int = 7, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, 99, (batch, seq), generator=torch.Generator().manual_seed(seed))


def greedy_without_cache(model, input_ids: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: every step recomputes the whole sequence. (tokens, (steps, batch, vocab) logits)."""
    steps_logits = []
    for _ in range(steps):
        with torch.no_grad():
            logits = model(input_ids, use_cache=False).logits[:, -1]
        steps_logits.append(logits)
        input_ids = torch.cat([input_ids, logits.argmax(-1, keepdim=True)], dim=1)
    return input_ids, torch.stack(steps_logits)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_dynamic_cache_equals_recomputation_and_static_cache_equals_dynamic(attn_implementation):
    model = causal_lm()
    model.set_attn_implementation(attn_implementation)
    input_ids = prompt()
    dynamic = model.generate(input_ids, **WITH_LOGITS)
    assert_same(dynamic, *greedy_without_cache(model, input_ids, GREEDY["max_new_tokens"]))
    assert_same(model.generate(input_ids, cache_implementation="static", **WITH_LOGITS), dynamic)
    sensitive(model, input_ids=input_ids, **GREEDY)
    sensitive(model, input_ids=input_ids, cache_implementation="static", **GREEDY)


def test_compiled_static_generation_equals_eager():
    model, input_ids = causal_lm(), prompt(batch=1)
    eager = model.generate(input_ids, **WITH_LOGITS)
    compile_config = CompileConfig(fullgraph=True, dynamic=False)
    compile_config._compile_all_devices = True  # transformers compiles on GPUs only unless asked
    compiled = model.generate(input_ids, cache_implementation="static", compile_config=compile_config, **WITH_LOGITS)
    assert_same(compiled, eager)
    sensitive(model, input_ids=input_ids, cache_implementation="static", **GREEDY)  # the eager reference


@pytest.mark.parametrize("vision", [False, True], ids=["text", "vision"])
def test_generate_from_inputs_embeds_continues_like_input_ids(vision):
    model, input_ids = (vision_lm("rope_tie_v2"), prompt(batch=1, seq=6)) if vision else (causal_lm(), prompt())
    embeds = model.get_input_embeddings()(input_ids)
    from_ids = model.generate(input_ids, **WITH_LOGITS)
    from_embeds = model.generate(inputs_embeds=embeds, **WITH_LOGITS)
    assert_same(from_embeds, from_ids.sequences[:, input_ids.shape[1] :], from_ids.logits)  # only the new tokens
    sensitive(model, inputs_embeds=embeds, **GREEDY)


def test_beam_search_one_beam_is_greedy_and_beams_are_sorted():
    model = causal_lm()
    input_ids = prompt(batch=1)
    assert torch.equal(model.generate(input_ids, num_beams=1, **GREEDY), model.generate(input_ids, **GREEDY))
    out = model.generate(
        input_ids, num_beams=3, num_return_sequences=3, output_scores=True, return_dict_in_generate=True, **GREEDY
    )
    assert out.sequences.shape == (3, input_ids.shape[1] + GREEDY["max_new_tokens"])
    assert torch.all(out.sequences_scores[:-1] >= out.sequences_scores[1:])
    sensitive(model, input_ids=input_ids, num_beams=3, **GREEDY)


def test_continue_from_cache_equals_one_call():
    model, input_ids = causal_lm(), prompt(batch=1)
    four, eight = dict(GREEDY, max_new_tokens=4), dict(GREEDY, max_new_tokens=8)
    first = model.generate(input_ids, **four, return_dict_in_generate=True)
    continued = model.generate(first.sequences, **{CACHE: output_cache(first)}, **four)
    assert torch.equal(continued, model.generate(input_ids, **eight))
    sensitive(model, input_ids=input_ids, **eight)


def test_sampling_is_reproducible_with_a_seed():
    model = causal_lm()
    input_ids = prompt()
    sample = dict(do_sample=True, top_p=0.9, max_new_tokens=5, pad_token_id=0)
    runs = [torch.manual_seed(3) and model.generate(input_ids, **sample) for _ in "ab"]  # seeded before each run
    assert torch.equal(*runs)


def test_4d_mask_with_cache_offset_equals_2d_mask():
    """A custom 4D mask for new tokens after a cache covers (new, cached + new) keys."""
    model = causal_lm()
    input_ids = prompt(batch=2, seq=9)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()[None, None, 6:].expand(2, 1, 3, 9)
    prefix = lambda m: output_cache(m(input_ids[:, :6], use_cache=True))  # noqa: E731
    run = lambda m: m(input_ids[:, 6:], attention_mask=causal, cache=prefix(m)).logits  # noqa: E731
    with torch.no_grad():
        expected = model(input_ids[:, 6:], cache=prefix(model)).logits
        torch.testing.assert_close(run(model), expected, rtol=1e-5, atol=1e-5)
    assert_position_sensitive(model, run, 1e-5)


def test_4d_mask_with_static_cache_is_padded_to_its_length():
    model = causal_lm()
    input_ids = prompt(batch=1, seq=5)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    run = lambda m: m(input_ids, attention_mask=causal, cache=StaticCache(config=m.config, max_cache_len=16)).logits  # noqa: E731
    with torch.no_grad():
        dynamic = model(input_ids, cache=DynamicCache(config=model.config)).logits
        torch.testing.assert_close(run(model), dynamic, rtol=1e-5, atol=1e-5)
    assert_position_sensitive(model, run, 1e-5)


@pytest.mark.parametrize("scheme", ["rope_tie", "rope_tie_v2", "mrope"])
def test_vision_static_cache_equals_dynamic(scheme):
    model = vision_lm(scheme)
    batch = image_inputs(text_after=2, grid=(1, 2, 2))
    kwargs = dict(GREEDY, suppress_tokens=[97, 98])
    with_logits = dict(kwargs, return_dict_in_generate=True, output_logits=True)
    dynamic = model.generate(**batch, **with_logits)
    assert_same(model.generate(**batch, cache_implementation="static", **with_logits), dynamic)
    sensitive(model, **batch, cache_implementation="static", **kwargs)


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
@pytest.mark.parametrize("encoding", ["t5_bias", "alibi", "shaw", "tupe", "transformer_xl"])
def test_left_padded_relative_scores_generate_each_prompt_alone(encoding, cache_implementation):
    """A relative score encoding numbers cached keys as it numbers queries: left padding changes nothing."""
    torch.manual_seed(0)
    config = tiny_config(is_decoder=True, position_encoding=encoding, initializer_range=1.0)
    model = RoFormerExtForCausalLM(config).eval()
    short, long = prompt(1, 4, seed=1), prompt(1, 7, seed=2)
    batch = torch.cat([torch.nn.functional.pad(short, (3, 0)), long])
    mask = (torch.arange(7) >= torch.tensor([[3], [0]])).long()
    kwargs = dict(WITH_LOGITS, max_new_tokens=5, cache_implementation=cache_implementation)
    together = model.generate(batch, attention_mask=mask, **kwargs)
    for row, alone_prompt in enumerate((short, long)):
        alone = model.generate(alone_prompt, **kwargs)
        assert torch.equal(together.sequences[row, 7:], alone.sequences[0, alone_prompt.shape[1] :])
        for step, step_alone in zip(together.logits, alone.logits, strict=True):
            torch.testing.assert_close(step[row], step_alone[0], atol=1e-4, rtol=0)
    run = lambda m: torch.stack(m.generate(batch, attention_mask=mask, **kwargs).logits)  # noqa: E731
    assert_position_sensitive(model, run, 1e-4)
