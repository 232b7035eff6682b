"""Packed CUDA rows take torch's varlen flash kernel, one call per layer (checked on a CPU with a stand-in kernel)."""

import pytest
import torch
from conftest import tiny_config
from test_packing import sequences
from torch.nn import functional as F
from transformers import DataCollatorWithFlattening

from roformer_ext import RoFormerExtModel, packing
from roformer_ext.attention_plan import BatchLayout, make_attention_plan
from roformer_ext.packing import describe_packed_batch


class ClaimsCuda(torch.Tensor):
    """A CPU tensor that says it is on CUDA (the tensors made from it do too)."""

    @property
    def is_cuda(self) -> bool:
        return True


class RecordingVarlen:
    """Stands in for `varlen_attn`: records each call and attends each sequence alone with SDPA."""

    def __init__(self) -> None:
        self.calls = []

    def __call__(self, query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):
        self.calls.append(dict(query=query, cu_seq_q=cu_seq_q, cu_seq_k=cu_seq_k, max_q=max_q, max_k=max_k))
        self.calls[-1].update(scale=scale, window_size=window_size)
        bounds = cu_seq_q.tolist()
        pieces = []
        for start, end in zip(bounds[:-1], bounds[1:]):
            q, k, v = (t.as_subclass(torch.Tensor)[start:end].transpose(0, 1) for t in (query, key, value))
            out = F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=window_size == (-1, 0))
            pieces.append(out.transpose(0, 1))
        return torch.cat(pieces)  # (total, heads, head_dim)


@pytest.fixture
def kernel(monkeypatch):
    recorder = RecordingVarlen()
    monkeypatch.setattr(packing, "varlen_attn", recorder)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    return recorder


def packed_inputs(model, cuda: bool) -> dict:
    batch = DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": s} for s in sequences()])
    embeds = model.get_input_embeddings()(batch.pop("input_ids")).detach()
    batch.pop("labels")
    return {**batch, "inputs_embeds": embeds.as_subclass(ClaimsCuda) if cuda else embeds}


def model_of(dtype=torch.bfloat16, **overrides) -> RoFormerExtModel:
    torch.manual_seed(0)
    config = tiny_config(attn_implementation="sdpa", **overrides)
    return RoFormerExtModel(config).to(dtype).eval()


@pytest.mark.parametrize("decoder", [False, True])
def test_a_cuda_packed_batch_takes_one_varlen_call_per_layer(kernel, decoder):
    model = model_of(is_decoder=decoder)
    inputs = packed_inputs(model, cuda=True)
    output = model(**inputs).last_hidden_state.as_subclass(torch.Tensor)
    assert len(kernel.calls) == model.config.num_hidden_layers  # the whole row at once, every layer
    cu = torch.tensor([0, 5, 14, 17, 25], dtype=torch.int32)
    for call in kernel.calls:
        assert call["query"].shape == (25, 4, 8) and call["query"].dtype == torch.bfloat16  # (total, heads, head_dim)
        assert torch.equal(call["cu_seq_q"], cu) and torch.equal(call["cu_seq_k"], cu)
        assert call["cu_seq_q"].dtype == torch.int32 and call["max_q"] == call["max_k"] == 9
        assert call["window_size"] == ((-1, 0) if decoder else (-1, -1))  # causal for a decoder
        assert call["scale"] == pytest.approx(8**-0.5)
    # gradients flow through the call
    output.float().square().mean().backward()
    assert model.layers[0].attention.query.weight.grad.abs().sum() > 0
    # the same as the CPU path (one SDPA call per sequence), which the kernel never sees
    kernel.calls.clear()
    with torch.no_grad():
        expected = model(**packed_inputs(model, cuda=False)).last_hidden_state
    assert not kernel.calls
    torch.testing.assert_close(output, expected, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("case", ["cpu", "fp32", "head_dim", "capability", "dropout", "score_term", "padded"])
def test_what_the_kernel_cannot_take_runs_as_before(kernel, monkeypatch, case):
    """Inputs the varlen kernel cannot take make no varlen call and give the CPU path's output."""
    dtype = torch.float32 if case == "fp32" else torch.bfloat16
    overrides = {
        "head_dim": dict(hidden_size=48),
        "dropout": dict(attention_probs_dropout_prob=0.5),  # 4 heads of 12
        "score_term": dict(position_encoding="t5_bias"),
    }.get(case, {})
    model = model_of(dtype, **overrides)
    if case == "capability":
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    if case == "dropout":
        model.train()
    inputs = packed_inputs(model, cuda=case != "cpu")
    if case == "padded":
        inputs = {"inputs_embeds": inputs["inputs_embeds"].view(1, 25, -1)[:, :20]}
    plans = []
    model.layers[0].attention.register_forward_pre_hook(lambda module, args: plans.append(args[2]))
    torch.manual_seed(1)
    output = model(**inputs).last_hidden_state.as_subclass(torch.Tensor)
    assert not kernel.calls and plans[0].attention is not packing.varlen_attention
    if case == "dropout":  # decided by the plan, not inside the attention function
        assert plans[0].attention is packing.per_sequence_sdpa
    plain = {k: v.as_subclass(torch.Tensor) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    torch.manual_seed(1)
    torch.testing.assert_close(output, model(**plain).last_hidden_state, atol=0, rtol=0)


@pytest.mark.parametrize(("training", "dropout"), [(False, 0.5), (True, 0.5), (True, 0.0)])
def test_the_plan_takes_the_kernel_unless_attention_dropout_applies(kernel, training, dropout):
    """Evaluation, or training without attention dropout, takes the kernel; training with dropout runs per sequence."""
    model = model_of(attention_probs_dropout_prob=dropout)
    embeddings = packed_inputs(model, cuda=True)["inputs_embeds"]
    packed = describe_packed_batch(1, 25, None, None, 0, cu_seq_lens_q=torch.tensor([0, 5, 14, 17, 25]))
    plan = make_attention_plan(
        model.config,
        model.position_encoding,
        BatchLayout(None, None, 0, packed),
        embeddings,
        packed.positions()[None],
        None,
        None,
        training=training,
    )
    assert plan.attention is (packing.per_sequence_sdpa if training and dropout else packing.varlen_attention)
    query = torch.zeros(1, 4, 25, 8)
    with pytest.raises(ValueError, match="varlen_attention has no dropout"):
        packing.varlen_attention(None, query, query, query, None, dropout=0.5, **packed.attention_kwargs())


def test_an_evaluating_model_with_attention_dropout_configured_takes_the_kernel(kernel):
    """The model hands its training flag to the plan: in eval mode dropout does not apply, so the kernel runs."""
    model = model_of(attention_probs_dropout_prob=0.5)
    model(**packed_inputs(model, cuda=True))
    assert len(kernel.calls) == model.config.num_hidden_layers


def test_a_direct_call_takes_the_interface_defaults_and_casts_as_sdpa(kernel):
    """Called as transformers' attention interface calls it: int64 lengths, no dropout or causal flag, fp32 in."""
    torch.manual_seed(0)
    query, key, value = torch.randn(3, 2, 2, 4, 8).unbind(0)  # (rows, heads, seq, head_dim)
    cu = torch.tensor([0, 3, 4, 8])  # a row boundary at 4
    output, _ = packing.varlen_attention(None, query, key, value, None, cu_seq_lens_q=cu, max_length_q=4)
    call = kernel.calls[-1]
    assert call["cu_seq_q"].dtype == torch.int32 and call["window_size"] == (-1, -1)
    assert call["query"].dtype == output.dtype == torch.float32 and output.shape == (2, 4, 2, 8)
    expected, _ = packing.per_sequence_sdpa(None, query, key, value, None, cu_seq_lens_q=cu, max_length_q=4)
    torch.testing.assert_close(output, expected)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        packing.varlen_attention(None, query, key, value, None, cu_seq_lens_q=cu, max_length_q=4)
    assert kernel.calls[-1]["query"].dtype == torch.bfloat16  # the autocast dtype, as SDPA casts
    with pytest.raises(ValueError, match="^varlen_attention has no dropout"):
        packing.varlen_attention(None, query, key, value, None, dropout=0.1, cu_seq_lens_q=cu, max_length_q=4)
