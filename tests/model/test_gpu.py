"""GPU readiness: pair layouts and flash-attention on CUDA (without flash-attn: its refusal)."""

import pytest
import torch
from conftest import random_inputs, tiny_config
from transformers import DataCollatorWithFlattening
from transformers.utils import is_flash_attn_2_available

from roformer_ext import RoFormerExtModel
from roformer_ext.conversion.pair_layout import convert_pair_layout

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
def test_interleaved_checkpoint_through_half_layout_on_cuda():
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
    """DataCollatorWithFlattening's row on flash_attention_2 (varlen kernel) equals the padded batch per sequence."""
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
