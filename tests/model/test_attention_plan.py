"""One attention plan per forward, read by every layer; it alone chooses the attention function."""

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config, random_inputs, tiny_config
from vision_sizes import IMAGE, PATCH_DIM, SIZES

from roformer_ext import (
    RoFormerExtConfig,
    RoFormerExtForCausalLM,
    RoFormerExtForQuestionAnswering,
    RoFormerExtForSequenceClassification,
    RoFormerExtModel,
    RoFormerExtVisionTextConfig,
    RoFormerExtVisionTextForSequenceClassification,
    modeling_roformer_ext,
)
from roformer_ext.attention_plan import (
    AttentionPlan,
    check_backend_takes,
    eager_attention_forward,
    flex_attention_with_score_mod,
    make_attention_plan,
)
from roformer_ext.modeling_roformer_ext import RoFormerExtModel as BaseModel
from roformer_ext.packing import per_sequence_sdpa


class PlanRecorder:
    """Counts `model`'s plans and layouts and records the plan each self-attention layer receives."""

    def __init__(self, model: torch.nn.Module, monkeypatch) -> None:
        self.plans, self.layouts, self.seen = [], 0, []
        make_layout = BaseModel.batch_layout

        def attention_plan(config, position_encoding, *args, **kwargs):
            plan = make_attention_plan(config, position_encoding, *args, **kwargs)
            if position_encoding is model.base_model.position_encoding:
                self.plans.append(plan)
            return plan

        def batch_layout(base, *args, **kwargs):
            if base is model.base_model and "batch_layout" not in args[-1]:  # made here, not handed down
                self.layouts += 1
            return make_layout(base, *args, **kwargs)

        monkeypatch.setattr(modeling_roformer_ext, "make_attention_plan", attention_plan)
        monkeypatch.setattr(BaseModel, "batch_layout", batch_layout)
        for layer in model.base_model.layers:
            layer.attention.register_forward_pre_hook(lambda module, args: self.seen.append(args[2]))


def packed_rows(lengths=(5, 3, 4), vocab=99, seed=0):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, vocab - 3, (1, sum(lengths)), generator=generator)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return input_ids, cu


HEADS = [RoFormerExtModel, RoFormerExtForSequenceClassification, RoFormerExtForQuestionAnswering]


@pytest.mark.parametrize("model_class", HEADS)
@pytest.mark.parametrize("packed", [False, True])
def test_one_plan_per_forward_reaches_every_layer(model_class, packed, monkeypatch):
    torch.manual_seed(0)
    model = model_class(tiny_config(num_labels=2)).eval()
    recorder = PlanRecorder(model, monkeypatch)
    if packed:
        input_ids, cu = packed_rows()
        inputs = dict(input_ids=input_ids, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=5, max_length_k=5)
    else:
        input_ids, attention_mask, _ = random_inputs()
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask)
    with torch.no_grad():
        model(**inputs)
    assert len(recorder.plans) == 1 and recorder.layouts == 1
    plan = recorder.plans[0]
    assert isinstance(plan, AttentionPlan) and len(recorder.seen) == model.config.num_hidden_layers
    assert all(seen is plan for seen in recorder.seen)
    assert (plan.layout.packed is not None) == packed
    if packed:  # the packed rows' positions restart at each sequence, and the lengths reach every backend
        expected = torch.cat([torch.arange(n) for n in (5, 3, 4)])[None, None]
        assert torch.equal(plan.position_ids, expected)
        assert torch.equal(plan.attention_kwargs["cu_seq_lens_q"], plan.layout.packed.cu_seq_lens)


def test_cached_generation_makes_one_plan_per_step_with_its_positions(monkeypatch):
    """Left-padded cached greedy decoding: every step's plan numbers its queries among the real tokens."""
    torch.manual_seed(0)
    model = RoFormerExtForCausalLM(position_sensitive_config(is_decoder=True)).eval()
    recorder = PlanRecorder(model, monkeypatch)
    input_ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert len(recorder.plans) == 3 == recorder.layouts
    assert len(recorder.seen) == 3 * model.config.num_hidden_layers
    first, *steps = recorder.plans
    # the prompt: the padded row counts from its first real token (generate's position_ids, padding clamped to 1)
    assert torch.equal(first.position_ids[0, 1], torch.arange(5))
    assert first.position_ids[0, 0, 2:].tolist() == [0, 1, 2]
    for step, plan in enumerate(steps, start=1):
        assert plan.layout.past_length == 4 + step
        assert plan.position_ids[0, :, 0].tolist() == [2 + step, 4 + step]


def test_vision_forward_describes_the_batch_once_and_the_layout_reaches_the_positions(monkeypatch):
    """The vision-text model's one layout gives both the positions and the layers' plan."""
    torch.manual_seed(0)
    rope = {"position_scheme": "mrope", "mrope_section": [4, 4, 4]}
    config = RoFormerExtVisionTextConfig(**SIZES, num_labels=2, rope_parameters=rope)
    model = RoFormerExtVisionTextForSequenceClassification(config).eval()
    recorder = PlanRecorder(model, monkeypatch)
    # two packed sequences, each: text, a 1x2x2 image (4 placeholders), text
    one = [5, 6, IMAGE, IMAGE, IMAGE, IMAGE, 7]
    input_ids = torch.tensor([one + one])
    cu = torch.tensor([0, 7, 14], dtype=torch.int32)
    grid = torch.tensor([[1, 2, 2], [1, 2, 2]])  # t*h*w placeholders each
    pixels = torch.randn(8, PATCH_DIM)
    with torch.no_grad():
        model(input_ids, pixel_values=pixels, image_grid_thw=grid, cu_seq_lens_q=cu, cu_seq_lens_k=cu)
    assert len(recorder.plans) == 1 and recorder.layouts == 1
    plan = recorder.plans[0]
    assert all(seen is plan for seen in recorder.seen)
    halves = plan.position_ids[:, 0, :7], plan.position_ids[:, 0, 7:]
    assert torch.equal(halves[0], halves[1])  # each packed sequence laid out alone


def configured(attn_implementation: str, **overrides) -> RoFormerExtConfig:
    config = tiny_config(**overrides)
    config._attn_implementation = attn_implementation
    return config


def plan_of(model, **inputs) -> AttentionPlan:
    captured = []
    handle = model.base_model.layers[0].attention.register_forward_pre_hook(lambda m, args: captured.append(args[2]))
    with torch.no_grad():
        model(**inputs)
    handle.remove()
    return captured[0]


def test_the_plan_chooses_the_attention_function():
    torch.manual_seed(0)
    input_ids, cu = packed_rows()
    packed = dict(input_ids=input_ids, cu_seq_lens_q=cu, cu_seq_lens_k=cu)
    sdpa = RoFormerExtModel(tiny_config(attn_implementation="sdpa")).eval()
    plan = plan_of(sdpa, **packed)
    assert plan.attention is per_sequence_sdpa and plan.mask is None  # each sequence alone, no mask built
    eager = RoFormerExtModel(tiny_config(attn_implementation="eager")).eval()
    plan = plan_of(eager, **packed)
    assert plan.attention is eager_attention_forward and plan.mask is not None
    linear = RoFormerExtModel(tiny_config(attention_type="linear")).eval()
    plan = plan_of(linear, **packed)
    assert plan.linear and plan.attention is None
    t5 = RoFormerExtModel(tiny_config(position_encoding="t5_bias", attn_implementation="sdpa")).eval()
    plan = plan_of(t5, **packed)  # a score term: the masked path, the shared bias joined into the mask
    assert plan.attention is not per_sequence_sdpa and plan.relative_scores is None and plan.mask.dim() == 4
    shaw = RoFormerExtModel(tiny_config(position_encoding="shaw", attn_implementation="flex_attention")).eval()
    plan = plan_of(shaw, input_ids=input_ids)
    query = key = torch.zeros(1, 4, input_ids.shape[1], 8)
    mask, function = plan.scores_for(shaw.layers[0].attention, query, key, plan.mask)
    assert plan.per_score and function.func is flex_attention_with_score_mod


@pytest.mark.parametrize("implementation", ["flash_attention_2", "flash_attention_3", "kernels-community/flash-attn3"])
def test_flash_is_refused_score_terms_and_dense_masks_in_one_place(implementation):
    mask_4d = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    fix = "attn_implementation='sdpa', 'eager' or 'flex_attention'"
    with pytest.raises(ValueError, match=f"does not run on '{implementation}': its capabilities exclude flash .*{fix}"):
        check_backend_takes(configured(implementation, position_encoding="alibi"), None, None, True)
    for self_mask, cross_mask in ((mask_4d, None), (None, mask_4d)):
        with pytest.raises(ValueError, match=f"4D attention_mask cannot be used with .*'{implementation}'.*{fix}"):
            check_backend_takes(configured(implementation), self_mask, cross_mask, False)
    check_backend_takes(configured(implementation), torch.ones(1, 3), None, False)  # a padding mask: its varlen path
    for other in ("sdpa", "eager", "flex_attention"):
        check_backend_takes(configured(other, position_encoding="alibi"), mask_4d, mask_4d, True)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_text_classifier_left_padded_row_equals_the_row_alone(pooling):
    """`cls` pooling reads each row's first real token: a left-padded row gives the sentence alone's logits."""
    torch.manual_seed(0)
    model = RoFormerExtForSequenceClassification(position_sensitive_config(num_labels=3, classifier_pooling=pooling))
    model.eval()
    input_ids = torch.tensor([[0, 0, 0, 2, 11, 12, 13, 3], [2, 21, 22, 23, 24, 25, 26, 3]])
    attention_mask = (torch.arange(8) >= torch.tensor([[3], [0]])).long()
    with torch.no_grad():
        padded = model(input_ids, attention_mask=attention_mask).logits
        alone = model(input_ids[:1, 3:]).logits
    torch.testing.assert_close(padded[:1], alone, atol=1e-5, rtol=0)
    assert_position_sensitive(model, lambda m: m(input_ids, attention_mask=attention_mask).logits, 1e-5)
