"""Word mode cuts words with rjieba (jieba-rs) when it is installed, jieba otherwise: the same ids either way, on
People's Daily (the corpus and vocabularies of test_tokenization.py)."""

import pytest
from test_tokenization import SLOW_LINES, lines, vocab_files  # noqa: F401  (module fixtures)

from roformer_ext import RoFormerExtTokenizer, RoFormerExtTokenizerFast
from roformer_ext.tokenization_words import WORD_SEGMENTER_ENV, word_segmenter


def encode_with(library: str, cls, vocab_file, texts, monkeypatch) -> list[list[int]]:
    monkeypatch.setenv(WORD_SEGMENTER_ENV, library)
    tokenizer = cls.from_vocab_file(vocab_file)
    assert tokenizer.segmenter == "jieba" and word_segmenter() == library
    return tokenizer(texts)["input_ids"]


def test_rjieba_and_jieba_give_the_same_ids(lines, vocab_files, monkeypatch):  # noqa: F811
    fast = {lib: encode_with(lib, RoFormerExtTokenizerFast, vocab_files["word"], lines, monkeypatch)
            for lib in ("rjieba", "jieba")}  # fmt: skip
    assert len(lines) >= 1900 and fast["rjieba"] == fast["jieba"]
    slow = {lib: encode_with(lib, RoFormerExtTokenizer, vocab_files["word"], lines[:SLOW_LINES], monkeypatch)
            for lib in ("rjieba", "jieba")}  # fmt: skip
    assert slow["rjieba"] == slow["jieba"] == fast["jieba"][:SLOW_LINES]


def test_the_choice(monkeypatch):
    monkeypatch.delenv(WORD_SEGMENTER_ENV, raising=False)
    assert word_segmenter() == "rjieba"  # installed by the test extra
    monkeypatch.setenv(WORD_SEGMENTER_ENV, "jieba")
    assert word_segmenter() == "jieba"
    monkeypatch.setenv(WORD_SEGMENTER_ENV, "pkuseg")
    with pytest.raises(ValueError, match="set it to 'rjieba' or 'jieba'"):
        word_segmenter()
