"""`SimilarSentenceGenerator` (bert4keras' `gen_synonyms`): ranking, scores, what is dropped, batched calls."""

from pathlib import Path
from unittest.mock import Mock

import pytest
import torch
from conftest import assert_position_sensitive, tiny_config
from test_convert_original import FIXTURES
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from roformer_ext import RoFormerExtForCausalLM, RoFormerExtModel
from roformer_ext.conversion.original import convert_original_checkpoint
from roformer_ext.similarity import SimilarSentence, SimilarSentenceGenerator, join_cjk


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("similar")
    return {name: convert_original_checkpoint(FIXTURES / f"roformer_{name}", root / name) for name in ("sim", "sim_ft")}


@pytest.fixture(scope="module")
def sim(folders) -> SimilarSentenceGenerator:
    return SimilarSentenceGenerator.from_pretrained(folders["sim"])


def cosine_to_source(folder: Path, source: str, sentences: list[str]) -> list[float]:
    """The reference scores: AutoModel's pooler_output, one sentence at a time (no padding), cosine."""
    tokenizer, encoder = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        embed = [encoder(**tokenizer(s, return_tensors="pt")).pooler_output[0] for s in [source, *sentences]]
    return [float(torch.nn.functional.cosine_similarity(embed[0], e, dim=0)) for e in embed[1:]]


@pytest.mark.parametrize("encoder", ["sim", "sim_ft"])  # sim_ft: the fine-tuned retrieval model (no MLM head)
def test_returns_the_k_best_with_their_cosine_scores(sim, folders, encoder):
    if encoder == "sim_ft":
        sim = SimilarSentenceGenerator.from_pretrained(folders["sim"], folders["sim_ft"])
        assert sim.encoder.config.architectures == ["RoFormerExtModel"]
    torch.manual_seed(0)
    result = sim("今天天气很好", n=20, k=5, max_new_tokens=8)
    assert len(result) == 5 and all(isinstance(r, SimilarSentence) for r in result)
    scores = [r.score for r in result]
    assert scores == sorted(scores, reverse=True)
    expected = cosine_to_source(folders[encoder], "今天天气很好", [r.text for r in result])
    torch.testing.assert_close(torch.tensor(scores), torch.tensor(expected), rtol=0, atol=1e-5)
    # they are the best of all candidates: rerun the same sampling and score every candidate
    torch.manual_seed(0)
    everything = sim.candidates("今天天气很好", 20, max_new_tokens=8)
    best = sorted(cosine_to_source(folders[encoder], "今天天气很好", everything), reverse=True)[:5]
    torch.testing.assert_close(torch.tensor(scores), torch.tensor(best), rtol=0, atol=1e-5)


def test_source_duplicates_and_empty_sentences_are_dropped(sim, monkeypatch):
    """Scripted generator output: the source itself, a repeat, an immediate [SEP] and two real candidates."""
    tokenizer = sim.tokenizer
    source = tokenizer("今天天气很好", return_tensors="pt")["input_ids"]
    rows = ["今天天气很好", "我想去公园玩", "我想去公园玩", "", "今天很好"]
    targets = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.sep_token_id] for r in rows]
    width = max(map(len, targets))
    padded = torch.tensor([t + [tokenizer.pad_token_id] * (width - len(t)) for t in targets])
    scripted = torch.cat([source.expand(len(rows), -1), padded], dim=1)
    generate = Mock(return_value=scripted)
    monkeypatch.setattr(sim.generator, "generate", generate)
    result = sim("今天天气很好", n=5, k=10)
    assert sorted(r.text for r in result) == ["今天很好", "我想去公园玩"]  # k larger than what is left
    assert generate.call_count == 1 and not generate.call_args.args  # one call, keywords only
    call = generate.call_args.kwargs
    assert call["num_return_sequences"] == 5 and call["do_sample"] is True and call["top_p"] == 0.95
    assert call["top_k"] == 0 and call["eos_token_id"] == tokenizer.sep_token_id and call["max_new_tokens"] == 64
    assert torch.equal(call["token_type_ids"], torch.zeros_like(source))  # the source is segment 0


def seeded(sim, texts, seed: int, **kwargs) -> list:
    torch.manual_seed(seed)
    return [sim(text, **kwargs) for text in texts] if isinstance(texts, tuple) else sim(texts, **kwargs)


@pytest.mark.parametrize(
    "together, alone",
    [
        (dict(texts=["今天天气很好", "我想去公园玩", "你好"]), dict(texts=("今天天气很好", "我想去公园玩", "你好"))),
        (dict(texts=["今天天气很好", "我想去公园玩"], batch_size=3), dict(texts=["今天天气很好", "我想去公园玩"], batch_size=64)),
    ],
    ids=["several_texts_equal_one_by_one", "embedding_batches_do_not_change_scores"],
)  # fmt: skip
def test_batched_calls_equal_single_ones(sim, together, alone):
    options = dict(n=8, k=3, max_new_tokens=10)
    a, b = seeded(sim, seed=3, **options, **together), seeded(sim, seed=3, **options, **alone)
    assert [[r.text for r in rows] for rows in a] == [[r.text for r in rows] for rows in b]
    scores = lambda result: torch.tensor([r.score for rows in result for r in rows])  # noqa: E731
    torch.testing.assert_close(scores(a), scores(b), rtol=0, atol=1e-5)
    assert_position_sensitive(sim.encoder, lambda _: scores(seeded(sim, seed=3, **options, **together)), 1e-5)


def test_beam_search_through_generate_kwargs(sim):
    result = sim("今天天气很好", n=4, k=4, do_sample=False, num_beams=4, max_new_tokens=6)
    assert 1 <= len(result) <= 4
    assert result == sim("今天天气很好", n=4, k=4, do_sample=False, num_beams=4, max_new_tokens=6)  # deterministic


def test_wrong_models_and_arguments_are_named(folders, sim):
    causal = AutoModelForCausalLM.from_pretrained(folders["sim"], decoder_attention="causal")
    unilm_without_pooler = RoFormerExtForCausalLM(tiny_config(decoder_attention="unilm"))
    for generator, encoder, message in [
        (causal, sim.encoder, "decoder_attention='unilm'"),
        (sim.encoder, sim.encoder, "decoder_attention='unilm'"),  # an encoder is no generator
        (sim.generator, RoFormerExtModel(tiny_config()), "no pooler"),
        (sim.generator, unilm_without_pooler, "no pooler"),
    ]:
        with pytest.raises(ValueError, match=message):
            SimilarSentenceGenerator(generator, encoder, sim.tokenizer)
    for call, error, message in [
        (lambda: sim("今天", n=0), ValueError, "n must be a positive integer"),
        (lambda: sim("今天", k=2.5), ValueError, "k must be a positive integer"),
        (lambda: sim(["今天", 3]), TypeError, "list of strings"),
        (lambda: sim([]), TypeError, "list of strings"),
    ]:
        with pytest.raises(error, match=message):
            call()


@pytest.mark.parametrize(
    ("decoded", "expected"),
    [
        ("今 天 天 气 很 好", "今天天气很好"), ("广 州 和 深 圳 哪 个 好 ？", "广州和深圳哪个好？"), ("hello world", "hello world"),
        ("我 用 python 写 代 码", "我用python写代码"),  # bert4keras' decode joins Latin words to Chinese too
        ("「 好 」 ， 对", "「好」，对"),
    ],
)  # fmt: skip
def test_join_cjk(decoded, expected):
    assert join_cjk(decoded) == expected


def test_an_encoder_loaded_with_return_dict_false_embeds_the_same(sim, monkeypatch):
    """A model loaded with `return_dict=False` (as TorchScript set-ups do) still gives the pooler's embeddings."""
    expected = sim.embed(["今天天气很好", "我想去公园玩"])
    monkeypatch.setattr(sim.encoder.config, "return_dict", False)
    torch.testing.assert_close(sim.embed(["今天天气很好", "我想去公园玩"]), expected, rtol=0, atol=0)
