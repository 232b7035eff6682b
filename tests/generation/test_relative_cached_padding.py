"""Cached generation of left-padded prompts with a relative score encoding numbers keys as it numbers queries."""

import pytest
import torch
from conftest import assert_position_sensitive, tiny_config

from roformer_ext import RoFormerExtForCausalLM

ENCODINGS = ["t5_bias", "alibi", "shaw", "tupe", "transformer_xl"]
GREEDY = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, return_dict_in_generate=True, output_logits=True)
PADS = 3


def sensitive_lm(encoding: str, **overrides) -> RoFormerExtForCausalLM:
    torch.manual_seed(0)
    config = tiny_config(is_decoder=True, position_encoding=encoding, initializer_range=1.0, **overrides)
    return RoFormerExtForCausalLM(config).eval()


def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(4)
    return torch.randint(5, 99, (1, 4), generator=generator), torch.randint(5, 99, (1, 4 + PADS), generator=generator)


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_left_padded_cached_generate_equals_each_prompt_alone(encoding, cache_implementation):
    model = sensitive_lm(encoding)
    short, long = prompts()
    batch = torch.cat([torch.cat([torch.zeros(1, PADS, dtype=torch.long), short], dim=1), long])
    mask = (torch.arange(batch.shape[1]) >= torch.tensor([[PADS], [0]])).long()
    kwargs = dict(GREEDY, cache_implementation=cache_implementation)
    together = model.generate(batch, attention_mask=mask, **kwargs)
    for row, alone_prompt in enumerate((short, long)):
        alone = model.generate(alone_prompt, **kwargs)
        assert torch.equal(together.sequences[row, batch.shape[1] :], alone.sequences[0, alone_prompt.shape[1] :])
        for step, step_alone in zip(together.logits, alone.logits):
            torch.testing.assert_close(step[row], step_alone[0], atol=1e-4, rtol=0)
    run = lambda m: torch.stack(m.generate(batch, attention_mask=mask, **kwargs).logits)  # noqa: E731
    assert_position_sensitive(model, run, 1e-4)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_shift_of_the_earlier_keys_is_visible(encoding):
    """The model sees the defect: earlier keys numbered PADS further on (by slot) move the last token's logits far."""
    model = sensitive_lm(encoding)
    short, _ = prompts()
    tokens = torch.cat([short, torch.tensor([[7]])], dim=1)
    right = torch.arange(tokens.shape[1])[None]
    shifted = torch.cat([right[:, :-1] + PADS, right[:, -1:]], dim=1)
    with torch.no_grad():
        logits = [model(tokens, position_ids=p, use_cache=False).logits[0, -1] for p in (right, shifted)]
    assert (logits[1] - logits[0]).abs().max() > 1e-2
