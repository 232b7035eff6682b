"""On the classifier the example trained: LoRA through `--lora_r`, and the CPU serving paths' fidelity to fp32."""

import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from roformer_ext.export import OnnxModel, export_folder, quantize_dynamic_int8

CLASSIFY = Path(__file__).resolve().parents[2] / "examples" / "text-classification" / "run_classification.py"
TINY = (
    "--dataset chinese_sentiment --max_seq_length 64 --hidden_size 32 --num_hidden_layers 2 --num_attention_heads 4 "
    "--intermediate_size 64 --vocab_size 1500 --report_to none --save_strategy no --disable_tqdm true "
    "--per_device_train_batch_size 16 --seed 0 --max_eval_samples 256 --max_predict_samples 16"
)


def run_example(flags: str, out: Path) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(CLASSIFY.parent))
        patch.setattr(sys, "argv", [str(CLASSIFY), *TINY.split(), *flags.split(), "--output_dir", str(out)])
        runpy.run_path(str(CLASSIFY), run_name="__main__")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The example trained from scratch on 1,200 reviews for 2 epochs (~150 steps of a hidden-32 model)."""
    out = tmp_path_factory.mktemp("trained") / "sentiment"
    run_example("--max_train_samples 1200 --num_train_epochs 2 --learning_rate 2e-3", out)
    return out


def validation_batch(folder: Path, n: int = 256):
    sys.path.insert(0, str(CLASSIFY.parents[1]))
    from common import corpora

    validation = corpora.load_example_dataset("chinese_sentiment")["validation"].select(range(n))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    inputs = tokenizer(list(validation["text"]), padding=True, truncation=True, max_length=64, return_tensors="pt")
    return inputs, np.array(validation["label"])


def test_lora_flags_train_an_adapter_that_reloads_equal_to_the_merged_model(trained, tmp_path):
    out = tmp_path / "lora"
    flags = "--max_train_samples 64 --max_steps 6 --lora_r 4 --lora_targets attention,feed_forward --learning_rate 1e-2"
    run_example(f"--model_name_or_path {trained} {flags}", out)
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and adapter["lora_alpha"] == 8
    attention = [f"{kind}.{name}" for kind in ("attention", "crossattention") for name in ("query", "key", "value")]
    assert sorted(adapter["target_modules"]) == sorted([*attention, "feed_forward.intermediate", "feed_forward.output"])
    assert "classifier" in adapter["modules_to_save"]
    assert "LoRA (rank 4" in (out / "README.md").read_text()
    inputs, _ = validation_batch(out, 16)
    load = AutoModelForSequenceClassification.from_pretrained
    merged, base = load(out).eval(), load(trained).eval()
    reloaded = PeftModel.from_pretrained(load(trained), out / "adapter").eval()
    with torch.no_grad():
        merged_logits, adapter_logits = merged(**inputs).logits, reloaded(**inputs).logits
        base_logits = base(**inputs).logits
    torch.testing.assert_close(merged_logits, adapter_logits, atol=1e-5, rtol=1e-5)
    assert (merged_logits - base_logits).abs().max() > 1e-4  # the adapter was trained
    assert {name for name, _ in base.named_parameters()} == {name for name, _ in merged.named_parameters()}


def test_int8_fidelity_on_the_trained_classifier(trained, tmp_path):
    export_folder(trained, tmp_path / "onnx", int8=True, example_length=8)
    inputs, labels = validation_batch(trained)
    model = AutoModelForSequenceClassification.from_pretrained(trained).eval()
    with torch.no_grad():
        fp32 = model(**inputs).logits.numpy()
        torch_int8 = quantize_dynamic_int8(model)(**inputs).logits.numpy()
        cls_fp32 = model.roformer(**inputs).last_hidden_state[:, 0]
        cls_int8 = quantize_dynamic_int8(model).roformer(**inputs).last_hidden_state[:, 0]
    assert type(model.roformer.layers[0].attention.query) is torch.nn.Linear  # the int8 models were copies
    feeds = {name: inputs[name] for name in ("input_ids", "attention_mask", "token_type_ids")}
    fp32_file, int8_file = tmp_path / "onnx" / "model.onnx", tmp_path / "onnx" / "model_int8.onnx"
    assert int8_file.stat().st_size < fp32_file.stat().st_size
    onnx_fp32, onnx_int8 = OnnxModel(fp32_file)(**feeds)["logits"], OnnxModel(int8_file)(**feeds)["logits"]
    np.testing.assert_allclose(onnx_fp32, fp32, rtol=0, atol=1e-4)
    accuracy = (fp32.argmax(-1) == labels).mean()
    assert accuracy > 0.6  # trained: well above chance (0.5)
    for logits in (torch_int8, onnx_int8):
        assert (logits != fp32).any()  # quantized: near, not equal
        assert abs((logits.argmax(-1) == labels).mean() - accuracy) <= 0.03
        assert (logits.argmax(-1) == fp32.argmax(-1)).mean() >= 0.95
    assert torch.nn.functional.cosine_similarity(cls_int8, cls_fp32).min() > 0.99
