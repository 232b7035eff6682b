"""PEFT LoRA: the documented target names, adapters reloaded on a fresh base, merged weights equal the adapter."""

import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config, random_inputs, tiny_config
from peft import LoraConfig, PeftModel, get_peft_model

from roformer_ext import RoFormerExtForCausalLM, RoFormerExtForMaskedLM, RoFormerExtForSequenceClassification
from roformer_ext.adapters import LORA_TARGET_MODULES, lora_config, lora_target_modules

LAYOUTS = ["interleaved", "half"]


def layout_config(layout: str, **overrides):
    return tiny_config(rope_parameters={"rope_type": "default", "pair_layout": layout}, **overrides)


def lora_model(model, task_type, seed: int = 1, **kwargs):
    """LoRA with random A *and* B (init_lora_weights=False), so the adapter changes the outputs from the start."""
    torch.manual_seed(seed)
    config = lora_config(task_type, r=4, lora_alpha=8, init_lora_weights=False, **kwargs)
    return get_peft_model(model, config)


def lora_layers(model) -> list[str]:
    return sorted(name for name, module in model.named_modules() if hasattr(module, "lora_A"))


def test_documented_names_pick_each_family_and_no_other():
    torch.manual_seed(0)
    config = LoraConfig(task_type="SEQ_CLS", target_modules=lora_target_modules("attention_output"))
    peft_model = get_peft_model(RoFormerExtForSequenceClassification(tiny_config()), config)
    # `attention.output` is the attention's output only, never the feed-forward output (the `output.dense` trap)
    names = [name.split("roformer.")[-1] for name in lora_layers(peft_model)]
    assert names == ["layers.0.attention.output", "layers.1.attention.output"]
    everything = get_peft_model(
        RoFormerExtForSequenceClassification(tiny_config()), lora_config("SEQ_CLS", families="all")
    )
    per_layer = {name.split("layers.0.")[-1] for name in lora_layers(everything) if "layers.0." in name}
    attention = {f"attention.{p}" for p in ("query", "key", "value", "output")}
    assert per_layer == attention | {"feed_forward.intermediate", "feed_forward.output"}
    assert sum(len(names) for names in LORA_TARGET_MODULES.values()) == len(per_layer) + 3  # + cross-attention q/k/v
    # PEFT's own "all-linear" works too and leaves the tied LM decoder out: 6 per layer + the LM transform
    names = lora_layers(get_peft_model(RoFormerExtForMaskedLM(tiny_config()), LoraConfig(target_modules="all-linear")))
    assert len(names) == 2 * 6 + 1 and not any("decoder" in name for name in names)


def test_attention_family_leaves_tupe_position_projections_out_and_takes_cross_attention():
    """Issue #31, 4: exactly the self- and cross-attention q, k, v; a bare `query` also caught TUPE's projections."""
    config = tiny_config(position_encoding="tupe", is_decoder=True, add_cross_attention=True)
    peft_model = get_peft_model(RoFormerExtForCausalLM(config), lora_config("CAUSAL_LM", families="attention"))
    names = [name.split("roformer.")[-1] for name in lora_layers(peft_model)]
    assert not any("position_encoding" in name for name in names)
    layers, kinds = range(config.num_hidden_layers), ("attention", "crossattention")
    expected = [f"layers.{i}.{k}.{p}" for i in layers for k in kinds for p in ("query", "key", "value")]
    assert sorted(names) == sorted(expected)


def test_default_config_names_the_targets_and_peft_alone_asks_for_them():
    """PEFT alone needs the targets of a custom model; `lora_config` names them and trains the head in full."""
    with pytest.raises(ValueError, match="target_modules"):
        get_peft_model(RoFormerExtForSequenceClassification(tiny_config()), LoraConfig(task_type="SEQ_CLS"))
    peft_model = get_peft_model(RoFormerExtForSequenceClassification(tiny_config()), lora_config("SEQ_CLS"))
    targets = sorted(peft_model.peft_config["default"].target_modules)
    assert targets == sorted(["attention.output", *LORA_TARGET_MODULES["attention"]])
    trainable = {name for name, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name or "classifier" in name for name in trainable)
    assert any("classifier.modules_to_save" in name for name in trainable)
    with pytest.raises(ValueError, match="Unknown LoRA target families"):
        lora_target_modules("ffn")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_adapter_reloads_equal_on_a_fresh_base(tmp_path, layout):
    torch.manual_seed(0)
    base = RoFormerExtForSequenceClassification(layout_config(layout, num_labels=3)).eval()
    base.save_pretrained(tmp_path / "base")
    input_ids, attention_mask, token_type_ids = random_inputs()
    peft_model = lora_model(base, "SEQ_CLS", families="all").eval()
    run = lambda m: m(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits  # noqa: E731
    fresh = lambda: RoFormerExtForSequenceClassification.from_pretrained(tmp_path / "base").eval()  # noqa: E731
    with torch.no_grad():
        expected = run(peft_model)
        assert (expected - run(fresh())).abs().max() > 1e-3  # the adapter (and the trained head) matter
        peft_model.save_pretrained(tmp_path / "adapter")
        again = run(PeftModel.from_pretrained(fresh(), tmp_path / "adapter").eval())
    torch.testing.assert_close(again, expected, atol=0, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_merged_equals_unmerged_padded_and_packed(layout):
    torch.manual_seed(0)
    config = position_sensitive_config(rope_parameters={"rope_type": "default", "pair_layout": layout})
    peft_model = lora_model(RoFormerExtForMaskedLM(config), None, families="all").eval()
    input_ids, attention_mask, _ = random_inputs()
    pieces = [row[mask.bool()] for row, mask in zip(input_ids, attention_mask)]  # one packed row of the real tokens
    packed_ids, positions = torch.cat(pieces)[None], torch.cat([torch.arange(len(p)) for p in pieces])[None]
    with torch.no_grad():
        padded = peft_model(input_ids=input_ids, attention_mask=attention_mask).logits
        packed = peft_model(input_ids=packed_ids, position_ids=positions).logits
        torch.testing.assert_close(packed[0], padded[attention_mask.bool()], atol=1e-5, rtol=1e-5)
    run = lambda _: peft_model(input_ids=packed_ids, position_ids=positions).logits  # noqa: E731
    assert_position_sensitive(peft_model.get_base_model(), run, 1e-5)
    with torch.no_grad():
        merged = peft_model.merge_and_unload()
        assert not lora_layers(merged) and type(merged) is RoFormerExtForMaskedLM
        merged_padded = merged(input_ids=input_ids, attention_mask=attention_mask).logits
        merged_packed = merged(input_ids=packed_ids, position_ids=positions).logits
    mask = attention_mask.bool()
    torch.testing.assert_close(merged_padded[mask], padded[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(merged_packed, packed, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("decoder_attention", ["causal", "unilm"])
def test_generation_merged_equals_unmerged(layout, decoder_attention):
    torch.manual_seed(0)
    decoder = RoFormerExtForCausalLM(layout_config(layout, is_decoder=True, decoder_attention=decoder_attention))
    peft_model = lora_model(decoder, "CAUSAL_LM").eval()
    prompt = torch.tensor([[2, 17, 33, 41, 8], [0, 0, 2, 55, 61]])  # the second row left-padded
    inputs = dict(input_ids=prompt, attention_mask=(prompt != 0).long())
    options = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        with peft_model.disable_adapter():
            without = peft_model.generate(**inputs, **options)
        unmerged = peft_model.generate(**inputs, **options)
        logits = peft_model(**inputs).logits
        merged_model = peft_model.merge_and_unload()
        merged = merged_model.generate(**inputs, **options)
        merged_logits = merged_model(**inputs).logits
    torch.testing.assert_close(merged_logits, logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(merged, unmerged)
    assert not torch.equal(without, unmerged)  # the adapter changes what is generated
