"""Converted Sim folders generate as bert4keras' UniLM model (its logits) and as the README's old hand loop."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import assert_position_sensitive
from test_convert_junnyu import write_junnyu_folder
from test_convert_original import FIXTURES, compare, inputs_of
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer, pipeline

from roformer_ext.conversion.cli import main
from roformer_ext.masking_roformer_ext import unilm_attention_mask


@pytest.fixture(scope="module")
def sim_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sim")
    assert main(["original", str(FIXTURES / "roformer_sim"), str(root / "original")]) == 0
    hub = write_junnyu_folder("roformer_sim", root / "hub")
    assert main(["transformers", str(hub), str(root / "junnyu")]) == 0
    assert main(["original", str(FIXTURES / "roformer_v1"), str(root / "v1")]) == 0
    return {"original": root / "original", "junnyu": root / "junnyu", "v1": root / "v1"}


def load(folder: Path, **kwargs):
    return AutoTokenizer.from_pretrained(folder, **kwargs), AutoModelForCausalLM.from_pretrained(folder).eval()


def hand_loop(folder: Path, source: dict[str, torch.Tensor], steps: int, sep_id: int):
    """The README's old greedy loop under the UniLM mask: (token ids, each step's last logits)."""
    mlm = AutoModelForMaskedLM.from_pretrained(folder).eval()
    input_ids, token_type_ids = source["input_ids"], source["token_type_ids"]
    generated, logits = [], []
    for _ in range(steps):
        mask = unilm_attention_mask(token_type_ids, torch.ones_like(input_ids))
        with torch.no_grad():
            last = mlm(input_ids, attention_mask=mask, token_type_ids=token_type_ids).logits[0, -1]
        next_id = int(last.argmax())
        generated.append(next_id)
        logits.append(last)
        if next_id == sep_id:
            break
        input_ids = torch.cat([input_ids, torch.tensor([[next_id]])], dim=1)
        token_type_ids = torch.cat([token_type_ids, torch.ones(1, 1, dtype=torch.long)], dim=1)
    return generated, logits


@pytest.mark.parametrize("layout", ["original", "junnyu"])
@pytest.mark.parametrize("input_name", ["pair", "batch_padded"])
def test_causal_lm_reproduces_bert4keras_unilm(sim_folders, layout, input_name):
    """AutoModelForCausalLM on the folder, given the segment ids, is bert4keras' `application='unilm'` model."""
    reference = np.load(FIXTURES / "roformer_sim" / "reference_outputs.npz")
    batch = inputs_of(reference, input_name)
    model = AutoModelForCausalLM.from_pretrained(sim_folders[layout]).eval()
    with torch.no_grad():
        output = model(**batch, use_cache=False, output_hidden_states=True)
    compare(reference, f"{input_name}/unilm_mlm_logits", output.logits)
    compare(reference, f"{input_name}/unilm_sequence_output", output.hidden_states[-1])


@pytest.mark.parametrize("layout", ["original", "junnyu"])
def test_folder_declares_the_unilm_generator_and_greedy_generate_equals_the_hand_loop(sim_folders, layout):
    folder = sim_folders[layout]
    config = json.loads((folder / "config.json").read_text())
    assert config["decoder_attention"] == "unilm" and config["is_decoder"] is False  # AutoModel stays an encoder
    generation = json.loads((folder / "generation_config.json").read_text())
    tokenizer, model = load(folder)
    assert [generation[key] for key in ("eos_token_id", "pad_token_id", "max_new_tokens")] == [3, 0, 64]
    assert (tokenizer.sep_token_id, tokenizer.pad_token_id) == (3, 0)  # 64: bert4keras' maxlen in Sim's generate.py
    assert model.config.is_decoder and model.config.decoder_attention == "unilm"
    source = tokenizer("今天天气很好", return_tensors="pt")
    settings = dict(do_sample=False, max_new_tokens=12, return_dict_in_generate=True, output_logits=True)
    out = model.generate(**source, **settings)
    expected, expected_logits = hand_loop(folder, source, 12, tokenizer.sep_token_id)
    assert out.sequences[0, source["input_ids"].shape[1] :].tolist()[: len(expected)] == expected
    for step, step_expected in zip(out.logits, expected_logits):  # cached steps against the recomputed ones
        torch.testing.assert_close(step[0], step_expected, rtol=1e-5, atol=1e-5)
    assert_position_sensitive(model, lambda m: torch.stack(m.generate(**source, **settings).logits), 1e-5)


def test_sampling_fifty_candidates_as_the_issue_asks(sim_folders):
    tokenizer, model = load(sim_folders["original"])
    source = tokenizer("今天天气很好", return_tensors="pt")
    torch.manual_seed(0)
    output = model.generate(**source, do_sample=True, top_p=0.95, num_return_sequences=50, max_new_tokens=64)
    prompt = source["input_ids"].shape[1]
    assert output.shape[0] == 50 and prompt < output.shape[1] <= prompt + 64
    assert torch.equal(output[:, :prompt], source["input_ids"].expand(50, -1))
    targets = output[:, prompt:].tolist()
    assert len({tuple(row) for row in targets}) > 1  # sampled, not 50 copies
    for row in targets:  # after [SEP], only padding
        if tokenizer.sep_token_id in row:
            assert set(row[row.index(tokenizer.sep_token_id) + 1 :]) <= {tokenizer.pad_token_id}


def test_batched_sources_left_padded_equal_one_by_one(sim_folders):
    """Two sources of different lengths in one generate() call (left padding) decode as each alone (greedy)."""
    tokenizer, model = load(sim_folders["original"], padding_side="left")
    texts = ["今天天气很好", "我想去公园玩了吗"]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    settings = dict(do_sample=False, max_new_tokens=8, return_dict_in_generate=True, output_logits=True)
    together = model.generate(**batch, **settings)
    for row, text in enumerate(texts):
        alone = tokenizer(text, return_tensors="pt")
        single = model.generate(**alone, **settings)
        new = single.sequences[0, alone["input_ids"].shape[1] :]
        assert together.sequences[row, batch["input_ids"].shape[1] :][: len(new)].tolist() == new.tolist()
        for step, step_alone in zip(together.logits, single.logits):  # the steps the prompt alone generated
            torch.testing.assert_close(step[row], step_alone[0], rtol=1e-5, atol=1e-5)
    assert_position_sensitive(model, lambda m: torch.stack(m.generate(**batch, **settings).logits), 1e-5)


def test_v1_release_gets_the_same_option(sim_folders):
    """A converted v1 / char release is an MLM folder; `decoder_attention="unilm"` makes it the UniLM decoder."""
    folder = sim_folders["v1"]
    assert json.loads((folder / "config.json").read_text())["decoder_attention"] == "causal"
    assert not (folder / "generation_config.json").exists()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, decoder_attention="unilm").eval()
    source = tokenizer("今天天气很好", return_tensors="pt")
    generated = model.generate(
        **source, do_sample=False, max_new_tokens=6, eos_token_id=tokenizer.sep_token_id, pad_token_id=0
    )[0, source["input_ids"].shape[1] :]
    assert generated.tolist() == hand_loop(folder, source, 6, tokenizer.sep_token_id)[0]


@pytest.mark.parametrize("use_cache", [True, False])
def test_prompt_without_segment_ids_is_the_source(sim_folders, use_cache):
    """A prompt without token_type_ids is the source: logits, generate and pipeline equal the explicit ones."""
    folder = sim_folders["original"]
    tokenizer, model = load(folder)
    source = tokenizer("今天天气很好", return_tensors="pt")
    with torch.no_grad():
        explicit = model(**source, use_cache=False).logits
        implicit = model(source["input_ids"], attention_mask=source["attention_mask"], use_cache=use_cache).logits
    torch.testing.assert_close(implicit, explicit, rtol=0, atol=1e-6)
    settings = dict(do_sample=False, max_new_tokens=10, use_cache=use_cache)
    explicit = model.generate(**source, **settings)
    implicit = model.generate(source["input_ids"], attention_mask=source["attention_mask"], **settings)
    assert implicit.tolist() == explicit.tolist()
    prompt = source["input_ids"].shape[1]
    expected = hand_loop(folder, source, 8, tokenizer.sep_token_id)[0]
    assert explicit[0, prompt:].tolist()[: len(expected)] == expected
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    text = generator("今天天气很好", return_full_text=False, **settings)[0]["generated_text"]
    assert text == tokenizer.decode(explicit[0, prompt:], skip_special_tokens=True)
