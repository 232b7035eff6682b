"""Parity with transformers' own RoFormer: same weights, same inputs, every head within 1e-5 (fp32)."""

import json
import subprocess
import sys

import pytest
import torch
import transformers
from conftest import random_inputs
from test_convert_original import assert_no_local_paths

from roformer_ext.compat import SUPPORTED_RANGE, output_cache
from roformer_ext.conversion.cli import main
from roformer_ext.conversion.from_transformers import build_converted_model

ATOL = 1e-5
HEADS = "Model ForMaskedLM ForCausalLM ForSequenceClassification ForTokenClassification ForQuestionAnswering"
THEIR_HEADS = [f"RoFormer{head}" for head in [*HEADS.split(), "ForMultipleChoice"]]
VOCAB = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])


def their_model(class_name: str, folder, seed: int = 0, **overrides):
    values = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
    values.update(max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3)
    values.update(overrides, is_decoder=class_name == "RoFormerForCausalLM")
    torch.manual_seed(seed)
    model = getattr(transformers, class_name)(transformers.RoFormerConfig(**values)).eval()
    with torch.no_grad():  # non-trivial biases and norms, so a dropped mapping shows
        for name, param in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                param.add_(0.1 * torch.randn_like(param))
    model.save_pretrained(folder)
    return model


def outputs_of(model, class_name, implementation):
    model.set_attn_implementation(implementation)
    if class_name == "RoFormerForMultipleChoice":
        input_ids = torch.randint(5, 99, (2, 3, 9), generator=torch.Generator().manual_seed(1))
        kwargs = dict(attention_mask=torch.ones_like(input_ids), token_type_ids=torch.zeros_like(input_ids))
    else:
        input_ids, attention_mask, token_type_ids = random_inputs()
        kwargs = dict(attention_mask=attention_mask, token_type_ids=token_type_ids)
        if class_name == "RoFormerForCausalLM":
            kwargs["use_cache"] = False
    with torch.no_grad():
        out = model(input_ids, **kwargs)
    mask = kwargs["attention_mask"]
    names = ("last_hidden_state", "logits", "start_logits", "end_logits")
    result = {name: getattr(out, name) for name in names if getattr(out, name, None) is not None}
    for name, value in result.items():
        if value.dim() >= 2 and value.shape[:2] == mask.shape:  # per-token: compare real tokens only
            result[name] = value * mask.reshape(*mask.shape, *([1] * (value.dim() - 2)))
    return result


MLM_VARIANTS = [dict(rotary_value=True), dict(embedding_size=16), dict(rotary_value=True, embedding_size=16)]


@pytest.mark.parametrize(
    ("class_name", "overrides"),
    [(head, {}) for head in THEIR_HEADS] + [("RoFormerForMaskedLM", variant) for variant in MLM_VARIANTS],
)
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_every_head_matches_transformers(class_name, overrides, implementation, tmp_path):
    theirs = their_model(class_name, tmp_path, **overrides)
    ours = build_converted_model(tmp_path)
    expected = outputs_of(theirs, class_name, "eager")
    actual = outputs_of(ours, class_name, implementation)
    assert expected.keys() == actual.keys() and expected
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], atol=ATOL, rtol=0, msg=f"{class_name}.{name}")


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_decoder_with_cross_attention_matches_transformers(implementation, tmp_path):
    """EncoderDecoderModel's decoder: logits match theirs over a padded encoder output, also step by step (cache)."""
    theirs = their_model("RoFormerForCausalLM", tmp_path, add_cross_attention=True)
    ours = build_converted_model(tmp_path)
    ours.set_attn_implementation(implementation)
    generator = torch.Generator().manual_seed(2)
    input_ids = torch.randint(5, 99, (2, 7), generator=generator)
    encoder_states = torch.randn(2, 5, 32, generator=generator)
    encoder_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    kwargs = dict(encoder_hidden_states=encoder_states, encoder_attention_mask=encoder_mask)
    with torch.no_grad():
        expected = theirs(input_ids, use_cache=False, **kwargs).logits
        torch.testing.assert_close(ours(input_ids, use_cache=False, **kwargs).logits, expected, atol=ATOL, rtol=0)
        prefill = ours(input_ids[:, :4], use_cache=True, **kwargs)
        steps, cache = [prefill.logits], output_cache(prefill)
        for position in range(4, 7):
            step = ours(input_ids[:, position : position + 1], cache=cache, use_cache=True, **kwargs)
            steps.append(step.logits)
            cache = output_cache(step)
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, atol=ATOL, rtol=0)


def test_ours_runs_past_their_length_cap(tmp_path):
    theirs = their_model("RoFormerModel", tmp_path, max_position_embeddings=16)
    ours = build_converted_model(tmp_path)
    long_ids = torch.randint(5, 99, (1, 40))
    with pytest.raises(IndexError):
        theirs(long_ids)
    assert ours(long_ids).last_hidden_state.shape == (1, 40, 32)


def test_python_dash_m_writes_a_loadable_folder(tmp_path):
    src, out = tmp_path / "theirs", tmp_path / "ours"
    theirs = their_model("RoFormerForSequenceClassification", src)
    (src / "vocab.txt").write_text(VOCAB)
    command = [sys.executable, "-m", "roformer_ext.conversion", "transformers", str(src), str(out)]
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    line = "roformer-ext-convert: Detected transformers RoFormer -> RoFormerExtForSequenceClassification.\n"
    assert line in result.stderr
    assert "roformer-ext-convert transformers theirs ours\n" in (out / "README.md").read_text()
    assert_no_local_paths(out, tmp_path)  # the card records folder names only: it can be published as it is
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "roformer_ext" and "AutoModelForSequenceClassification" in config["auto_map"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert type(tokenizer).__name__ == "RoFormerExtTokenizerFast"
    assert tokenizer("a b")["input_ids"] == [2, 5, 6, 3]
    reloaded = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    expected = outputs_of(theirs, "RoFormerForSequenceClassification", "eager")["logits"]
    actual = outputs_of(reloaded, "RoFormerForSequenceClassification", "sdpa")["logits"]
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=0)


def test_code_repo_makes_a_folder_without_code_copies(tmp_path, capsys):
    """`--code-repo`: auto_maps name that repository, no code is copied, the card says so; a bad id writes nothing."""
    src, out = tmp_path / "theirs", tmp_path / "ours"
    their_model("RoFormerForMaskedLM", src)
    (src / "vocab.txt").write_text(VOCAB)
    assert main(["transformers", str(src), str(out), "--code-repo", "owner/roformer-ext"]) == 0
    assert not list(out.glob("*.py"))
    for name in ("config.json", "tokenizer_config.json"):
        refs = json.loads((out / name).read_text())["auto_map"].values()
        flat = [r for ref in refs for r in (ref if isinstance(ref, list) else [ref]) if r]
        assert flat and all(r.startswith("owner/roformer-ext--") for r in flat)
    card = (out / "README.md").read_text()
    assert SUPPORTED_RANGE in card and "push-code owner/roformer-ext" in card and "--code-repo" in card
    assert main(["transformers", str(src), str(tmp_path / "bad"), "--code-repo", "no-owner"]) == 1
    assert "code_repo must be a Hub model repository id" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
