"""A new position encoding, scheme and allocation in one file work on every backend, packed, cached and saved."""

import logging
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config
from transformers.utils import logging as hf_logging
from vision_sizes import IMAGE, PATCH_DIM, SIZES

from roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtModel,
    RoFormerExtVisionTextConfig,
    RoFormerExtVisionTextForCausalLM,
    register_position_encoding,
    register_position_scheme,
)
from roformer_ext.axis_allocations import axis_of_pair, register_axis_allocation
from roformer_ext.encoding_knobs import SCORE_TERM_CAPABILITIES, EncodingKnobs
from roformer_ext.position_encodings import RelativePositionEncoding, RelativeScores
from roformer_ext.positions import build_position_ids
from roformer_ext.registries import AXIS_ALLOCATIONS, POSITION_ENCODINGS, POSITION_SCHEMES
from roformer_ext.scheme_knobs import POSITIVE, Knob, SchemeKnobs

ATOL = 1e-5


class CappedPenaltyScores(RelativeScores):
    """−scale_h · min(|j − i|, window): ALiBi with a window."""

    def __init__(self, query_positions, key_positions, scales: torch.Tensor, window: int) -> None:
        super().__init__(query_positions, key_positions)
        self.scales, self.window = scales, window

    def shared_bias(self) -> torch.Tensor:
        capped = self.distances().abs().clamp(max=self.window)[:, None].to(self.scales.dtype)
        return -self.scales[None, :, None, None] * capped

    def score_mod(self, query, table):
        scales = self.scales.to(query.dtype)

        def capped_penalty(score, batch_idx, head_idx, q_idx, kv_idx):
            distance = self._position_at(batch_idx, q_idx, kv_idx).abs().clamp(max=self.window)
            return score - scales[head_idx] * distance

        return capped_penalty


@dataclass(frozen=True)
class CappedPenaltyKnobs(EncodingKnobs):
    """The window (in tokens) beyond which the penalty stops growing."""

    penalty_window: int = 4

    def __post_init__(self) -> None:
        if not isinstance(self.penalty_window, int) or self.penalty_window < 1:
            raise ValueError(f"penalty_window must be a positive int; got {self.penalty_window!r}.")


class CappedPenalty(RelativePositionEncoding):
    knobs = CappedPenaltyKnobs
    capabilities = SCORE_TERM_CAPABILITIES  # a term on the scores: no linear or flash attention

    def __init__(self, config) -> None:
        super().__init__(config)
        self.window = config.position_encoding_knobs.penalty_window
        self.register_buffer("scales", torch.empty(config.num_attention_heads), persistent=False)
        self.init_position_weights(config)

    def init_position_weights(self, config) -> None:  # also after from_pretrained / meta-device init
        with torch.no_grad():
            self.scales.copy_(torch.linspace(0.5, 2.0, self.scales.numel()))

    def relative_scores(self, query_positions, key_positions) -> CappedPenaltyScores:
        return CappedPenaltyScores(query_positions, key_positions, self.scales.float(), self.window)


@dataclass(frozen=True)
class SteppedDiagonalKnobs(SchemeKnobs):
    """The step between two patches on every axis; 3 axes and the reversed allocation unless rope_parameters say."""

    scheme: ClassVar[str] = "test_stepped_diagonal"
    default_axes: ClassVar[int] = 3
    default_allocation: ClassVar[str] = "test_reversed_interleaved"
    checks: ClassVar[dict[str, Knob]] = {"diagonal_step": POSITIVE}
    diagonal_step: float = 2.0


def reversed_interleaved(num_pairs, axes, mrope_section):
    """The last pair reads axis 0, the one before axis 1, ... (interleaved from the low-frequency end)."""
    return [(num_pairs - 1 - pair) % axes for pair in range(num_pairs)]


def stepped_diagonal(segments, axes, *, diagonal_step=2.0):
    """Text at (n, n, n); patch (k, i, j) of a vision segment at st + step·(k, i, j); next text after its last."""
    positions, next_position = [], 0.0
    for segment in segments:
        if segment.kind == "text":
            run = next_position + torch.arange(segment.length, dtype=torch.float32)
            positions.append(run.expand(axes, -1))
            next_position += segment.length
            continue
        t, h, w = segment.grid
        grid = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij"))
        block = next_position + diagonal_step * grid.reshape(3, -1).float()
        positions.append(block[:axes])
        next_position = float(block.max()) + 1
    return torch.cat(positions, dim=1), next_position


@pytest.fixture(scope="module", autouse=True)
def plugins():
    register_position_encoding("test_capped_penalty")(CappedPenalty)
    register_axis_allocation("test_reversed_interleaved")(reversed_interleaved)
    register_position_scheme("test_stepped_diagonal", knobs=SteppedDiagonalKnobs)(stepped_diagonal)
    yield
    POSITION_ENCODINGS.unregister("test_capped_penalty")
    POSITION_SCHEMES.unregister("test_stepped_diagonal")
    AXIS_ALLOCATIONS.unregister("test_reversed_interleaved")


def encoding_config(window: int = 3, **overrides):
    return position_sensitive_config(
        position_encoding="test_capped_penalty", position_encoding_parameters={"penalty_window": window}, **overrides
    )


@pytest.mark.parametrize("is_decoder", [False, True])
def test_new_encoding_on_every_backend_and_packed_rows(is_decoder):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    rows = [torch.randint(4, 95, (1, n), generator=generator) for n in (5, 4, 6)]
    packed = torch.cat(rows, dim=1)
    cu = torch.tensor([0, 5, 9, 15], dtype=torch.int32)
    outputs = {}
    for implementation in ("eager", "sdpa", "flex_attention"):
        torch.manual_seed(0)
        model = RoFormerExtModel(encoding_config(is_decoder=is_decoder, attn_implementation=implementation)).eval()
        assert model.position_encoding.scales.tolist() == pytest.approx(torch.linspace(0.5, 2.0, 4).tolist())
        with torch.no_grad():
            outputs[implementation] = model(packed, cu_seq_lens_q=cu, cu_seq_lens_k=cu).last_hidden_state
            alone = torch.cat([model(row).last_hidden_state for row in rows], dim=1)
        torch.testing.assert_close(outputs[implementation], alone, atol=ATOL, rtol=0)  # packed = each alone
        torch.testing.assert_close(outputs[implementation], outputs["eager"], atol=ATOL, rtol=0)
    run = lambda m: m(packed, cu_seq_lens_q=cu, cu_seq_lens_k=cu).last_hidden_state  # noqa: E731
    assert_position_sensitive(model, run, ATOL)
    wide = RoFormerExtModel(encoding_config(50, is_decoder=is_decoder, attn_implementation="eager"))
    wide.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert (wide.eval()(packed).last_hidden_state - model(packed).last_hidden_state).abs().max() > 100 * ATOL


def test_new_encoding_caches_and_saves(tmp_path):
    torch.manual_seed(0)
    model = RoFormerExtForCausalLM(encoding_config(is_decoder=True, attn_implementation="sdpa")).eval()
    prompt = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    settings = dict(max_new_tokens=4, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    cached = model.generate(prompt, attention_mask=mask, **settings)
    recomputed = model.generate(prompt, attention_mask=mask, use_cache=False, **settings)
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(recomputed.scores), atol=1e-4, rtol=0)
    alone = model.generate(prompt[:1, 2:], **settings)  # the left-padded row as a prompt of its own
    torch.testing.assert_close(torch.stack(cached.scores)[:, 0], torch.stack(alone.scores)[:, 0], atol=1e-4, rtol=0)
    run = lambda m: torch.stack(m.generate(prompt, attention_mask=mask, **settings).scores)  # noqa: E731
    assert_position_sensitive(model, run, 1e-4)
    model.save_pretrained(tmp_path)
    reloaded = RoFormerExtForCausalLM.from_pretrained(tmp_path).eval()
    assert reloaded.config.position_encoding == "test_capped_penalty"
    assert reloaded.config.position_encoding_parameters == {"penalty_window": 3}
    assert torch.equal(reloaded.base_model.position_encoding.scales, model.base_model.position_encoding.scales)
    again = reloaded.generate(prompt, attention_mask=mask, **settings)
    assert torch.equal(again.sequences, cached.sequences)


def scheme_model(step: float = 2.0, implementation: str = "sdpa"):
    rope = {"position_scheme": "test_stepped_diagonal", "diagonal_step": step}  # axes, allocation: the knob class's
    config = position_sensitive_config(
        RoFormerExtVisionTextConfig, **SIZES, is_decoder=True, attn_implementation=implementation, rope_parameters=rope
    )
    torch.manual_seed(0)
    return RoFormerExtVisionTextForCausalLM(config).eval()


def vision_prompt():
    ids = torch.tensor([[5, 6, IMAGE, IMAGE, IMAGE, IMAGE, 7, 8]])
    return ids, torch.randn(4, PATCH_DIM, generator=torch.Generator().manual_seed(2)), torch.tensor([[1, 2, 2]])


def test_new_scheme_places_tokens_by_its_knob(tmp_path, caplog):
    hf_logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING):
            model = scheme_model(step=3.0)
            model.config.save_pretrained(tmp_path)  # validates rope_parameters again
            RoFormerExtVisionTextConfig.from_pretrained(tmp_path)
    finally:
        hf_logging.disable_propagation()
    assert not caplog.records  # its knob is known to the config: no "Unrecognized keys in rope_parameters"
    ids, pixels, grid = vision_prompt()
    positions, _ = build_position_ids(ids, model.config, image_grid_thw=grid)
    # text 0, 1; the 2x2 image at 2 + 3·(0, i, j); text after at 2 + 3 + 1 = 6
    assert positions[:, 0].tolist() == [[0, 1, 2, 2, 2, 2, 6, 7], [0, 1, 2, 2, 5, 5, 6, 7], [0, 1, 2, 5, 2, 5, 6, 7]]


@pytest.mark.parametrize("implementation", ["eager", "sdpa", "flex_attention"])
def test_new_scheme_caches_packs_and_saves(implementation, tmp_path):
    model = scheme_model(implementation=implementation)
    ids, pixels, grid = vision_prompt()
    settings = dict(max_new_tokens=3, do_sample=False, output_scores=True, return_dict_in_generate=True)
    cached = model.generate(ids, pixel_values=pixels, image_grid_thw=grid, **settings)
    recomputed = model.generate(ids, pixel_values=pixels, image_grid_thw=grid, use_cache=False, **settings)
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(recomputed.scores), atol=1e-4, rtol=0)
    # packed: the prompt twice in one row, each laid out alone
    both = torch.cat([ids, ids], dim=1)
    cu = torch.tensor([0, 8, 16], dtype=torch.int32)
    with torch.no_grad():
        single = model(ids, pixel_values=pixels, image_grid_thw=grid).logits
        twice = dict(pixel_values=torch.cat([pixels, pixels]), image_grid_thw=torch.cat([grid, grid]))
        packed = model(both, **twice, cu_seq_lens_q=cu, cu_seq_lens_k=cu).logits
    torch.testing.assert_close(packed, torch.cat([single, single], dim=1), atol=ATOL, rtol=0)
    run = lambda m: m(ids, pixel_values=pixels, image_grid_thw=grid).logits  # noqa: E731
    assert_position_sensitive(model, run, ATOL)
    model.save_pretrained(tmp_path)
    reloaded = RoFormerExtVisionTextForCausalLM.from_pretrained(tmp_path, attn_implementation=implementation).eval()
    assert reloaded.config.rope_parameters["diagonal_step"] == 2.0
    with torch.no_grad():
        again = reloaded(ids, pixel_values=pixels, image_grid_thw=grid).logits
    torch.testing.assert_close(again, single, atol=0, rtol=0)


def test_new_plugins_knobs_default_check_and_refuse_strangers():
    """Each plugin's knob dataclass fills in defaults, checks its values and refuses unknown keys."""
    config = position_sensitive_config(position_encoding="test_capped_penalty")
    assert config.position_encoding_parameters == {"penalty_window": 4}
    assert config.position_encoding_knobs == CappedPenaltyKnobs(4)
    with pytest.raises(ValueError, match="penalty_window must be a positive int; got 0"):
        encoding_config(0)
    with pytest.raises(ValueError, match=r"'window'.*does not take; it takes 'penalty_window'"):
        position_sensitive_config(position_encoding="test_capped_penalty", position_encoding_parameters={"window": 2})
    rope = scheme_model().config.rope_parameters
    assert (rope["axes"], rope["axis_allocation"]) == (3, "test_reversed_interleaved")
    with pytest.raises(ValueError, match=r"'test_stepped_diagonal': rope_parameters\['diagonal_step'\] must be a pos"):
        scheme_model(step=-1.0)
    assert axis_of_pair(4, 3, "test_reversed_interleaved").tolist() == [0, 2, 1, 0]
