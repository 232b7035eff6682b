"""Common model checks (our stand-in for transformers' ModelTesterMixin, which is not in the wheel)."""

import copy

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config, random_inputs
from safetensors import safe_open

from roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtForQuestionAnswering,
    RoFormerExtForSequenceClassification,
    RoFormerExtForTokenClassification,
    RoFormerExtModel,
)

ATOL = 1e-5
HEADS = [
    RoFormerExtModel,
    RoFormerExtForMaskedLM,
    RoFormerExtForCausalLM,
    RoFormerExtForSequenceClassification,
    RoFormerExtForTokenClassification,
    RoFormerExtForQuestionAnswering,
]


def build(model_class, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    if model_class is RoFormerExtForCausalLM:
        overrides.setdefault("is_decoder", True)
    return model_class(position_sensitive_config(**overrides)).eval()


def main_output(output) -> torch.Tensor:
    for name in ("logits", "start_logits", "last_hidden_state"):
        if getattr(output, name, None) is not None:
            return getattr(output, name)
    raise AssertionError(output)


@pytest.mark.parametrize("model_class", HEADS)
def test_save_load_round_trip_is_exact(model_class, tmp_path):
    model = build(model_class, pooler_activation="tanh")
    input_ids, attention_mask, token_type_ids = random_inputs()
    with torch.no_grad():
        before = main_output(model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids))
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:  # nothing position-related is saved
        assert not [k for k in f.keys() if "freq" in k or "position" in k or "rotary" in k]
    reloaded = model_class.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        after = main_output(reloaded(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids))
    assert torch.equal(before, after)


def test_meta_device_init_restores_rotary_buffers(tmp_path):
    model = build(RoFormerExtModel)
    model.save_pretrained(tmp_path)
    rotary = RoFormerExtModel.from_pretrained(tmp_path).rotary_emb  # loaded on meta, then its buffers rebuilt
    theta = model.config.rope_parameters["rope_theta"]  # not the default: the saved value comes back
    expected = 1.0 / (theta ** (torch.arange(0, 8, 2).float() / 8))
    assert torch.allclose(rotary.inv_freq, expected)
    assert torch.equal(rotary.original_inv_freq, rotary.inv_freq)
    assert torch.equal(rotary.axis_of_pair, torch.zeros(4, dtype=torch.long))


@pytest.mark.parametrize("padded", [False, True])
def test_eager_sdpa_flex_agree(padded):
    input_ids, attention_mask, token_type_ids = random_inputs(pad_last=padded)
    outputs = {}
    four_d = attention_mask[:, None, None, :].bool().expand(-1, 1, input_ids.shape[1], -1)
    for implementation in ("eager", "sdpa", "flex_attention"):
        model = build(RoFormerExtModel)
        model.set_attn_implementation(implementation)
        for name, mask in (("", attention_mask), (" 4D", four_d)):  # a 4D mask equals the 2D one
            if name and implementation == "flex_attention":
                continue
            with torch.no_grad():
                out = model(input_ids, attention_mask=mask, token_type_ids=token_type_ids).last_hidden_state
            outputs[implementation + name] = out * attention_mask[..., None]
    for name in ("sdpa", "flex_attention", "eager 4D", "sdpa 4D"):
        torch.testing.assert_close(outputs[name], outputs["eager"], atol=ATOL, rtol=0)
    run = lambda m: m(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state  # noqa: E731
    assert_position_sensitive(model, run, ATOL)


@pytest.mark.parametrize("model_class", [RoFormerExtModel, RoFormerExtForCausalLM])
def test_only_the_decoder_is_causal(model_class):
    model = build(model_class)
    input_ids, _, _ = random_inputs(batch=1, pad_last=False)
    changed = input_ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 99
    with torch.no_grad():
        first, second = (main_output(model(ids))[0, :-1] for ids in (input_ids, changed))
    assert torch.equal(first, second) == (model_class is RoFormerExtForCausalLM)  # does token 0 see the last token?


@pytest.mark.parametrize(
    "model_class, attention_type", [(head, "softmax") for head in HEADS] + [(RoFormerExtModel, "linear")]
)
def test_batched_equals_one_by_one(model_class, attention_type):
    model = build(model_class, attention_type=attention_type)
    input_ids, attention_mask, token_type_ids = random_inputs()
    with torch.no_grad():
        batched = main_output(model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids))
        for row in range(input_ids.shape[0]):
            length = int(attention_mask[row].sum())
            single = main_output(
                model(input_ids[row : row + 1, :length], token_type_ids=token_type_ids[row : row + 1, :length])
            )
            if batched.dim() >= 3 or model_class is RoFormerExtForQuestionAnswering:
                torch.testing.assert_close(batched[row : row + 1, :length], single, atol=ATOL, rtol=0)
            else:
                torch.testing.assert_close(batched[row : row + 1], single, atol=ATOL, rtol=0)
    run = lambda m: main_output(m(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids))  # noqa: E731
    assert_position_sensitive(model, run, ATOL)


@pytest.mark.parametrize("backend, rtol", [("aot_eager", 0), ("inductor", 1e-5)])
def test_torch_compile_fullgraph_forward(backend, rtol):
    model = build(RoFormerExtModel)
    input_ids, attention_mask, _ = random_inputs()
    run = lambda m: m(input_ids, attention_mask=attention_mask).last_hidden_state  # noqa: E731
    with torch.no_grad():
        actual = run(torch.compile(model, fullgraph=True, backend=backend))
    torch.testing.assert_close(actual, run(model), atol=ATOL, rtol=rtol)
    assert_position_sensitive(model, run, ATOL)  # the eager reference


def test_float_position_ids_and_explicit_positions_match_default():
    model = build(RoFormerExtModel)
    input_ids, _, _ = random_inputs(batch=2, pad_last=False)
    positions = torch.arange(input_ids.shape[1]).expand(2, -1)
    with torch.no_grad():
        default = model(input_ids).last_hidden_state
        explicit = model(input_ids, position_ids=positions.float()).last_hidden_state
        shifted = model(input_ids, position_ids=positions.float() + 17.5).last_hidden_state
    torch.testing.assert_close(default, explicit, atol=ATOL, rtol=0)
    torch.testing.assert_close(default, shifted, atol=1e-4, rtol=0)  # RoPE: only differences matter
    assert_position_sensitive(model, lambda m: m(input_ids, position_ids=positions.float()).last_hidden_state, 1e-4)


def test_output_hidden_states_and_attentions():
    model = build(RoFormerExtModel)
    model.set_attn_implementation("eager")
    input_ids, attention_mask, _ = random_inputs()
    out = model(input_ids, attention_mask=attention_mask, output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == 3 and len(out.attentions) == 2
    assert out.attentions[0].shape == (3, 4, 11, 11)
    torch.testing.assert_close(out.attentions[0].sum(-1), torch.ones(3, 4, 11))
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)


def test_tied_weights_and_v2_head():
    model = build(RoFormerExtForMaskedLM, use_bias=False, norm_type="rms_scale_free")
    assert model.lm_head.decoder.weight is model.roformer.embeddings.word_embeddings.weight
    assert model.lm_head.transform is None and model.lm_head.bias is None
    assert not [n for n, _ in model.named_parameters() if n.endswith("bias") or "norm" in n]


def test_deepcopy_and_half_layout_model_runs():
    model = build(RoFormerExtModel, rope_parameters={"pair_layout": "half"})
    clone = copy.deepcopy(model)
    input_ids, attention_mask, _ = random_inputs()
    with torch.no_grad():
        torch.testing.assert_close(
            model(input_ids, attention_mask=attention_mask).last_hidden_state,
            clone(input_ids, attention_mask=attention_mask).last_hidden_state,
        )
    assert_position_sensitive(clone, lambda m: m(input_ids, attention_mask=attention_mask).last_hidden_state, 1e-5)


def test_sparse_prediction_equals_dense_loss_and_gradients():
    """sparse_prediction only projects the labelled positions: same loss, same gradients, those rows of logits."""
    dense = build(RoFormerExtForMaskedLM, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)
    sparse = copy.deepcopy(dense)
    sparse.config.sparse_prediction = True
    input_ids, attention_mask, token_type_ids = random_inputs(batch=3, seq=11)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
    labels = input_ids.clone()
    labels[:, ::3] = -100
    labels[1] = -100  # a row with nothing to predict
    out_dense, out_sparse = dense(**inputs, labels=labels), sparse(**inputs, labels=labels)
    predicted = labels != -100
    assert out_sparse.logits.shape == (int(predicted.sum()), dense.config.vocab_size)
    torch.testing.assert_close(out_sparse.logits, out_dense.logits[predicted], rtol=0, atol=1e-6)
    torch.testing.assert_close(out_sparse.loss, out_dense.loss, rtol=0, atol=1e-6)
    (out_dense.loss + out_sparse.loss).backward()
    for (name, a), b in zip(dense.named_parameters(), sparse.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-7, msg=name)
    assert sparse(**inputs).logits.shape == out_dense.logits.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eager_attention_on_a_left_padded_decoder_batch_equals_sdpa(dtype):
    """A left-padded row's first queries see no key: no NaN (it would reach real tokens through the next layer)."""
    input_ids = torch.randint(5, 99, (2, 7), generator=torch.Generator().manual_seed(0))
    attention_mask = torch.ones(2, 7, dtype=torch.long)
    attention_mask[1, :3] = 0
    logits = {}
    for attn_implementation in ("eager", "sdpa"):
        torch.manual_seed(0)
        config = position_sensitive_config(attn_implementation=attn_implementation, is_decoder=True)
        model = RoFormerExtForCausalLM(config).to(dtype).eval()
        with torch.no_grad():
            logits[attn_implementation] = model(input_ids=input_ids, attention_mask=attention_mask).logits
    assert not logits["eager"].isnan().any()
    real = attention_mask.bool()
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(logits["eager"][real], logits["sdpa"][real], atol=tolerance, rtol=0)
    assert_position_sensitive(model, lambda m: m(input_ids=input_ids, attention_mask=attention_mask).logits, tolerance)
