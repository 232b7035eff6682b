"""longrope under the 'split' allocation: one ladder of head_dim / axes dims repeats on every axis, so its factors
count that ladder's frequencies (head_dim / (2 * axes)), not the head's, which transformers' own check assumes."""

import logging

import pytest
import torch
from transformers.utils import logging as hf_logging

from roformer_ext import RoFormerExtConfig, RoFormerExtModel

HEAD_DIM = 32  # hidden 128, 4 heads


def longrope_config(factors: int, allocation: str = "split", axes: int = 2) -> RoFormerExtConfig:
    short = [1.0 + i for i in range(factors)]  # distinct, to see which frequency each one scales
    rope = dict(
        rope_type="longrope", rope_theta=10000.0, axes=axes, axis_allocation=allocation, position_scheme="rope_tie"
    )
    rope.update(short_factor=short, long_factor=[2.0] * factors, original_max_position_embeddings=32, factor=2.0)
    sizes = dict(vocab_size=50, hidden_size=128, num_attention_heads=4, num_hidden_layers=1, intermediate_size=64)
    return RoFormerExtConfig(**sizes, max_position_embeddings=64, rope_parameters=rope)


def test_split_longrope_takes_one_factor_per_frequency_of_the_axis_ladder(caplog):
    hf_logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING, logger="transformers"):
            config = longrope_config(HEAD_DIM // 4)
        assert not [r for r in caplog.records if "factor field must have length" in r.getMessage()]
    finally:
        hf_logging.disable_propagation()
    model = RoFormerExtModel(config).eval()
    # the ladder of 16 dims, each frequency divided by its short factor, repeated on both axes
    ladder = 1.0 / (torch.tensor([1.0 + i for i in range(8)]) * 10000.0 ** (torch.arange(0, 16, 2).float() / 16))
    torch.testing.assert_close(model.rotary_emb.inv_freq, ladder)
    torch.testing.assert_close(model.rotary_emb.pair_frequencies(), ladder.repeat(2))
    assert model(torch.randint(5, 50, (1, 80))).last_hidden_state.isfinite().all()  # past 32: the long factors


@pytest.mark.parametrize(
    ("factors", "allocation", "axes", "message"),
    [
        (HEAD_DIM // 2, "split", 2, "has 16 factors.*'split' repeats one ladder of head_dim / axes = 16 dims.*give 8"),
        (HEAD_DIM // 4, "interleaved", 2, "has 8 factors.*head_dim 32 gives 16 rotary frequencies: give 16 factors"),
        (HEAD_DIM // 4, "split", 1, "give 16 factors"),
    ],
)
def test_a_wrong_factor_count_is_refused_when_the_config_is_built(factors, allocation, axes, message):
    with pytest.raises(ValueError, match=message):
        longrope_config(factors, allocation, axes)


def test_the_head_count_still_serves_every_other_allocation():
    for allocation, axes in (("interleaved", 2), ("interleaved", 1), ("split", 1)):
        model = RoFormerExtModel(longrope_config(HEAD_DIM // 2, allocation, axes)).eval()
        assert model.rotary_emb.inv_freq.shape == (HEAD_DIM // 2,)
