"""`SimilarSentenceGenerator`: bert4keras' `gen_synonyms` (generate n, embed with the pooler, cosine-rank, top k).

The models are the tiny random Sim fixtures converted, so the sentences are gibberish: what is checked is the
mechanics — ranking order and scores against an independent computation, shapes, what is dropped (the source,
duplicates, empty sentences), and that several texts at once give what one-by-one calls give. The embeddings of those
comparisons are padded differently in each: the converted encoder reads positions strongly, and a position error moves
the scores ≥ 100x the 1e-5 tolerance (`assert_position_sensitive`).
"""

from pathlib import Path

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


def test_returns_the_k_best_with_their_cosine_scores(sim, folders):
    torch.manual_seed(0)
    result = sim("今天天气很好", n=20, k=5, max_new_tokens=8)
    assert len(result) == 5 and all(isinstance(r, SimilarSentence) for r in result)
    scores = [r.score for r in result]
    assert scores == sorted(scores, reverse=True)
    expected = cosine_to_source(folders["sim"], "今天天气很好", [r.text for r in result])
    torch.testing.assert_close(torch.tensor(scores), torch.tensor(expected), rtol=0, atol=1e-5)
    # they are the best of all candidates: rerun the same sampling and score every candidate
    torch.manual_seed(0)
    everything = sim.candidates("今天天气很好", 20, max_new_tokens=8)
    best = sorted(cosine_to_source(folders["sim"], "今天天气很好", everything), reverse=True)[:5]
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
    calls = []

    def generate(**kwargs):
        calls.append(kwargs)
        return scripted

    monkeypatch.setattr(sim.generator, "generate", generate)
    result = sim("今天天气很好", n=5, k=10)
    assert sorted(r.text for r in result) == ["今天很好", "我想去公园玩"]  # k larger than what is left
    (call,) = calls
    assert call["num_return_sequences"] == 5 and call["do_sample"] is True and call["top_p"] == 0.95
    assert call["top_k"] == 0 and call["eos_token_id"] == tokenizer.sep_token_id and call["max_new_tokens"] == 64
    assert torch.equal(call["token_type_ids"], torch.zeros_like(source))  # the source is segment 0


def seeded_scores(sim, texts: list[str], seed: int, **kwargs) -> torch.Tensor:
    """Every score of one seeded call, flattened (a position error in the encoder moves the scores, not the samples)."""
    torch.manual_seed(seed)
    return torch.tensor([r.score for rows in sim(texts, **kwargs) for r in rows])


def test_several_texts_equal_one_by_one(sim):
    texts = ["今天天气很好", "我想去公园玩", "你好"]
    torch.manual_seed(3)
    together = sim(texts, n=8, k=3, max_new_tokens=10)
    torch.manual_seed(3)
    alone = [sim(text, n=8, k=3, max_new_tokens=10) for text in texts]
    assert [[r.text for r in rows] for rows in together] == [[r.text for r in rows] for rows in alone]
    for rows, single in zip(together, alone):
        torch.testing.assert_close(torch.tensor([r.score for r in rows]), torch.tensor([r.score for r in single]),
                                   rtol=0, atol=1e-5)  # fmt: skip
    assert_position_sensitive(sim.encoder, lambda _: seeded_scores(sim, texts, 3, n=8, k=3, max_new_tokens=10), 1e-5)


def test_embedding_batches_do_not_change_scores(sim):
    torch.manual_seed(1)
    small = sim(["今天天气很好", "我想去公园玩"], n=10, k=4, max_new_tokens=6, batch_size=3)
    torch.manual_seed(1)
    large = sim(["今天天气很好", "我想去公园玩"], n=10, k=4, max_new_tokens=6, batch_size=64)
    assert [[r.text for r in rows] for rows in small] == [[r.text for r in rows] for rows in large]
    for a, b in zip(small, large):
        torch.testing.assert_close(torch.tensor([r.score for r in a]), torch.tensor([r.score for r in b]),
                                   rtol=0, atol=1e-5)  # fmt: skip
    texts = ["今天天气很好", "我想去公园玩"]
    run = lambda _: seeded_scores(sim, texts, 1, n=10, k=4, max_new_tokens=6, batch_size=3)  # noqa: E731
    assert_position_sensitive(sim.encoder, run, 1e-5)


def test_beam_search_through_generate_kwargs(sim):
    result = sim("今天天气很好", n=4, k=4, do_sample=False, num_beams=4, max_new_tokens=6)
    assert 1 <= len(result) <= 4
    assert result == sim("今天天气很好", n=4, k=4, do_sample=False, num_beams=4, max_new_tokens=6)  # deterministic


def test_the_sim_ft_encoder_ranks(folders):
    """The fine-tuned retrieval model (no MLM head) as the encoder of the Sim generator."""
    sim = SimilarSentenceGenerator.from_pretrained(folders["sim"], folders["sim_ft"])
    assert sim.encoder.config.architectures == ["RoFormerExtModel"]
    torch.manual_seed(0)
    result = sim("今天天气很好", n=10, k=3, max_new_tokens=6)
    expected = cosine_to_source(folders["sim_ft"], "今天天气很好", [r.text for r in result])
    torch.testing.assert_close(torch.tensor([r.score for r in result]), torch.tensor(expected), rtol=0, atol=1e-5)


def test_wrong_models_and_arguments_are_named(folders, sim):
    tokenizer = sim.tokenizer
    causal = AutoModelForCausalLM.from_pretrained(folders["sim"], decoder_attention="causal")
    with pytest.raises(ValueError, match="decoder_attention='unilm'"):
        SimilarSentenceGenerator(causal, sim.encoder, tokenizer)
    with pytest.raises(ValueError, match="decoder_attention='unilm'"):
        SimilarSentenceGenerator(sim.encoder, sim.encoder, tokenizer)  # an encoder is no generator
    with pytest.raises(ValueError, match="no pooler"):
        SimilarSentenceGenerator(sim.generator, RoFormerExtModel(tiny_config()), tokenizer)
    with pytest.raises(ValueError, match="no pooler"):
        unilm_without_pooler = RoFormerExtForCausalLM(tiny_config(decoder_attention="unilm"))
        SimilarSentenceGenerator(sim.generator, unilm_without_pooler, tokenizer)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        sim("今天", n=0)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        sim("今天", k=2.5)
    with pytest.raises(TypeError, match="list of strings"):
        sim(["今天", 3])
    with pytest.raises(TypeError, match="list of strings"):
        sim([])


@pytest.mark.parametrize(
    ("decoded", "expected"),
    [
        ("今 天 天 气 很 好", "今天天气很好"),
        ("广 州 和 深 圳 哪 个 好 ？", "广州和深圳哪个好？"),
        ("我 用 python 写 代 码", "我用python写代码"),  # bert4keras' decode joins Latin words to Chinese too
        ("hello world", "hello world"),
        ("「 好 」 ， 对", "「好」，对"),
    ],
)
def test_join_cjk(decoded, expected):
    assert join_cjk(decoded) == expected


def test_an_encoder_loaded_with_return_dict_false_embeds_the_same(sim):
    """A model loaded with `return_dict=False` (as TorchScript set-ups do) still gives the pooler's embeddings."""
    expected = sim.embed(["今天天气很好", "我想去公园玩"])
    sim.encoder.config.return_dict = False
    try:
        torch.testing.assert_close(sim.embed(["今天天气很好", "我想去公园玩"]), expected, rtol=0, atol=0)
    finally:
        sim.encoder.config.return_dict = True
