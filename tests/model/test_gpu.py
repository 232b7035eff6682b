"""GPU readiness: flash-attention and the fused rotary kernel. CUDA-only checks skip without CUDA (the only skip).

Where an optional package (flash-attn, liger-kernel) is missing on a CUDA machine, the tests check the fallback
instead of skipping.
"""

import pytest
import torch
from conftest import random_inputs, tiny_config

from roformer_ext import RoFormerExtModel
from roformer_ext.conversion.pair_layout import convert_pair_layout
from roformer_ext.fused_rotary import fused_rotary_installed
from roformer_ext.rope import FusedHalfPairRotation, HalfPairRotation, apply_rotary, query_key_rotation

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def rotary_case(device: str, layout: str, dtype=torch.float32):
    config = tiny_config(rope_parameters={"pair_layout": layout})
    model = RoFormerExtModel(config).to(device)
    generator = torch.Generator().manual_seed(0)
    query, key = (torch.randn(2, 7, 4, 8, generator=generator).to(device, dtype).transpose(1, 2) for _ in range(2))
    positions = torch.arange(7, device=device).expand(2, 7)
    cos, sin = model.rotary_emb(query, positions)
    return query, key, cos, sin


def test_fused_rotation_takes_the_torch_path_on_cpu():
    """The fused rotation (chosen where CUDA and liger-kernel are present) rotates CPU tensors as the half layout."""
    query, key, cos, sin = rotary_case("cpu", "half")
    fused = FusedHalfPairRotation().query_key(query, key, cos, sin)
    plain = HalfPairRotation().query_key(query, key, cos, sin)
    for got, want in zip(fused, plain):
        torch.testing.assert_close(got, want, atol=0, rtol=0)
    chosen = query_key_rotation(tiny_config(rope_parameters={"pair_layout": "half"}))
    assert isinstance(chosen, FusedHalfPairRotation) == fused_rotary_installed()


@cuda
def test_fused_rotary_matches_apply_rotary():
    """The model's half-layout rotation on CUDA (liger-kernel's kernel when installed) against the formula."""
    query, key, cos, sin = rotary_case("cuda", "half")
    expected = apply_rotary(query, cos, sin, "half"), apply_rotary(key, cos, sin, "half")
    fused = FusedHalfPairRotation().query_key(query.clone(), key.clone(), cos, sin)
    for got, want in zip(fused, expected):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@cuda
def test_interleaved_checkpoint_through_half_layout_on_cuda():
    """convert_pair_layout makes an interleaved model use the half (fusable) layout with the same outputs."""
    torch.manual_seed(0)
    model = RoFormerExtModel(tiny_config()).cuda().eval()
    input_ids, attention_mask, _ = (t.cuda() for t in random_inputs())
    with torch.no_grad():
        before = model(input_ids, attention_mask=attention_mask).last_hidden_state
        convert_pair_layout(model, "half")
        after = model(input_ids, attention_mask=attention_mask).last_hidden_state
    torch.testing.assert_close(after, before, atol=1e-4, rtol=1e-4)


@cuda
def test_flash_attention_2_matches_sdpa():
    from transformers.utils import is_flash_attn_2_available

    torch.manual_seed(0)
    config = tiny_config(rope_parameters={"pair_layout": "half"})
    sdpa = RoFormerExtModel(config).cuda().to(torch.bfloat16).eval()
    input_ids, attention_mask, _ = (t.cuda() for t in random_inputs())
    if not is_flash_attn_2_available():
        with pytest.raises((ImportError, ValueError)):
            RoFormerExtModel._from_config(config, attn_implementation="flash_attention_2")
        return
    flash = RoFormerExtModel._from_config(config, attn_implementation="flash_attention_2", dtype=torch.bfloat16)
    flash.load_state_dict(sdpa.state_dict())
    flash = flash.cuda().eval()
    with torch.no_grad():
        want = sdpa(input_ids, attention_mask=attention_mask).last_hidden_state
        got = flash(input_ids, attention_mask=attention_mask).last_hidden_state
    real = attention_mask.bool()
    torch.testing.assert_close(got[real].float(), want[real].float(), atol=2e-2, rtol=2e-2)


@cuda
@pytest.mark.parametrize("decoder", [False, True])
def test_flash_attention_2_varlen_packed_equals_padded(decoder):
    """DataCollatorWithFlattening's row on flash_attention_2 (its varlen kernel reads cu_seq_lens) equals the padded
    batch per sequence, for the encoder and the causal decoder."""
    from transformers import DataCollatorWithFlattening
    from transformers.utils import is_flash_attn_2_available

    if not is_flash_attn_2_available():
        pytest.skip("flash-attn is not installed on this CUDA machine")
    torch.manual_seed(0)
    config = tiny_config(is_decoder=decoder)
    model = RoFormerExtModel._from_config(config, attn_implementation="flash_attention_2", dtype=torch.bfloat16)
    model = model.cuda().eval()
    generator = torch.Generator().manual_seed(1)
    lengths = (5, 9, 3, 8)
    seqs = [torch.randint(5, 99, (n,), generator=generator).tolist() for n in lengths]
    packed = DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": s} for s in seqs])
    packed.pop("labels")
    longest = max(lengths)
    input_ids = torch.tensor([s + [0] * (longest - len(s)) for s in seqs]).cuda()
    attention_mask = torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in seqs]).cuda()
    with torch.no_grad():
        padded = model(input_ids, attention_mask=attention_mask).last_hidden_state
        row = model(**{k: v.cuda() if torch.is_tensor(v) else v for k, v in packed.items()}).last_hidden_state
    for index, piece in enumerate(torch.split(row[0], lengths)):
        torch.testing.assert_close(piece.float(), padded[index, : lengths[index]].float(), atol=2e-2, rtol=2e-2)
