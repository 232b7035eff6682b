"""Unassigned code points and lone surrogates: each its own [UNK] with its own offsets, slow and fast alike."""

import functools
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tokenization import _check_offsets
from tokenizers import normalizers, pre_tokenizers

from roformer_ext.tokenization_roformer_ext import RoFormerExtTokenizer, RoFormerExtTokenizerFast
from roformer_ext.tokenization_words import _UNKNOWN_MARKERS, _is_punctuation, mark_unknown_chars

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB_CHARS = list("中国经济发展我们的工作今天气很好公园") + list("abcdxyz0123456789,.!?-()。，：")
VOCAB_WORDS = ["中国", "经济", "发展", "我们", "工作", "今天", "天气", "很好", "公园", "ab", "cd", "xyz"]
VOCAB = SPECIALS + VOCAB_CHARS + ["##" + c for c in "abcdxyz0123456789"] + VOCAB_WORDS + ["##cd", "##xyz"]


def unassigned(*blocks: tuple[int, int], limit: int = 8) -> list[str]:
    """Up to `limit` code points of each block that the running Python calls unassigned (Cn)."""
    found = []
    for start, end in blocks:
        found += [chr(cp) for cp in range(start, end) if unicodedata.category(chr(cp)) == "Cn"][:limit]
    return found


# New-emoji blocks, CJK Extension H/I (Unicode 15 / 15.1), holes in the CJK compatibility block (split as CJK by the
# fast pipeline before the fix), Greek holes, noncharacters, and the never-assigned planes 3-13.
UNASSIGNED = unassigned((0x1FA70, 0x1FB00), (0x31350, 0x323B0), (0x2EBF0, 0x2EE60), (0xFA6E, 0xFB00))
UNASSIGNED += unassigned((0x0378, 0x0380), (0xFDD0, 0xFDF0), (0xFFFE, 0x10000), (0x40000, 0x40010))
SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d"]


@functools.cache
def tokenizers(segmenter: str | None) -> tuple[RoFormerExtTokenizerFast, RoFormerExtTokenizer]:
    vocab = {token: index for index, token in enumerate(VOCAB)}
    return tuple(cls(vocab=vocab, segmenter=segmenter) for cls in (RoFormerExtTokenizerFast, RoFormerExtTokenizer))


@pytest.mark.parametrize("segmenter", [None, "jieba"])
@pytest.mark.parametrize("odd", [*UNASSIGNED[:12], *SURROGATES[:2]], ids=lambda c: f"U+{ord(c):04X}")
def test_odd_code_point_is_its_own_unk_in_both(segmenter, odd):
    fast, slow = tokenizers(segmenter)
    text = f"ab{odd}cd 中{odd}国"
    expected = ["ab", "[UNK]", "cd", "中", "[UNK]", "国"]
    assert slow.tokenize(text) == expected
    encoding = fast(text, add_special_tokens=False, return_offsets_mapping=True)
    assert encoding.tokens() == expected
    assert encoding["input_ids"] == slow(text, add_special_tokens=False)["input_ids"]
    assert encoding["offset_mapping"][1] == (2, 3) and encoding["offset_mapping"][4] == (7, 8)  # the odd char itself


@pytest.mark.parametrize("segmenter", [None, "jieba"])
def test_surrogates_in_batches_pairs_and_words(segmenter):
    """Every input form reaches the backend cleaned: batches, pairs, pre-split words."""
    fast, slow = tokenizers(segmenter)
    batch = ["ab\ud800cd", "中国\udfff", "plain"]
    assert fast(batch)["input_ids"] == slow(batch)["input_ids"]
    assert fast("ab\ud800", "cd\udc00")["input_ids"] == slow("ab\ud800", "cd\udc00")["input_ids"]
    words = ["ab", "\ud800", "中国"]
    assert fast(words, is_split_into_words=True)["input_ids"] == slow(words, is_split_into_words=True)["input_ids"]
    assert fast.tokenize("x\ud800y") == slow.tokenize("x\ud800y") == ["x", "[UNK]", "y"]
    assert fast.encode("\ud800") == slow.encode("\ud800")


def test_ordinary_text_is_passed_through_unchanged():
    """The common case costs one C-level check per string: no copy, the same object goes to the backend."""
    assert len(UNASSIGNED) >= 20 and all(unicodedata.category(c) == "Cn" for c in UNASSIGNED)  # the probes
    for text in ["plain ascii", "中国经济发展\t很好\n", "emoji 😀 and\u3000ideographic space", ""]:
        assert mark_unknown_chars(text, "?") is text
    assert mark_unknown_chars("a\U000e0080b\ud800", "?") == "a?b?"  # U+E0080 is unassigned; offsets stay


def test_markers():
    """The stand-in for an unknown code point never spells a vocabulary token, so it can only become [UNK]."""
    fast, slow = tokenizers(None)
    assert fast.unknown_char_marker == slow.unknown_char_marker
    marker = slow.unknown_char_marker
    assert not any(marker in token for token in VOCAB)
    crowded = {token: index for index, token in enumerate([*VOCAB, marker, "x" + marker])}
    other = RoFormerExtTokenizer(vocab=crowded).unknown_char_marker
    assert other != marker and not any(other in token for token in crowded)
    assert RoFormerExtTokenizer(vocab=crowded).tokenize("a\ud800b") == ["a", "[UNK]", "b"]
    # Each candidate marker is punctuation to both BERT pre-tokenizers and survives both normalisers.
    for marker in _UNKNOWN_MARKERS:
        for lowercase in (True, False):
            normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
            assert normalizer.normalize_str(f"a{marker}b") == f"a{marker}b", marker
        split = [piece for piece, _ in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(f"a{marker}b")]
        assert split == ["a", marker, "b"] and _is_punctuation(marker), marker


_ASCII = list("abcdxyzABC019,.!?-() ") + list("ÉéΣ\x00\u200b")  # accents, a final-sigma case, controls
_CJK = [*VOCAB_CHARS[:18], *"１２：（）。", "龘", "鑫", "\u3400", "\U00020000"]  # vocabulary chars and rare ones
_SPACES = [" ", "\t", "\n", "\u3000", "\u00a0"]
_EMOJI = ["😀", "🙏", "❤", "\ufe0f", "\u200d", "🇨", "🇳"]  # assigned long ago: So, with VS16 / ZWJ / flags
_ODD = [*UNASSIGNED, *SURROGATES]
_TEXT = st.text(alphabet=st.sampled_from(_ASCII + _CJK + _SPACES + _EMOJI + _ODD), max_size=40)


@pytest.mark.parametrize("segmenter", [None, "jieba"])
@settings(max_examples=150, deadline=None)
@given(texts=st.lists(_TEXT, min_size=1, max_size=4), pair=_TEXT.filter(bool))
def test_slow_ids_equal_fast_ids(segmenter, texts, pair):
    """Alone (offsets spell tokens), batched, paired (no empty pair: transformers' fast and slow paths differ there)."""
    fast, slow = tokenizers(segmenter)
    text = texts[0]
    encoding = fast(text, return_offsets_mapping=True)
    assert encoding["input_ids"] == slow(text)["input_ids"], (segmenter, text)
    _check_offsets(text, encoding.tokens(), encoding["offset_mapping"])
    for token, (start, end) in zip(encoding.tokens(), encoding["offset_mapping"]):
        if start < end and text[start:end] in _ODD:
            assert token == "[UNK]"  # an odd code point is never part of a longer token
    assert fast(texts)["input_ids"] == slow(texts)["input_ids"]
    pair_encoding = fast(text, pair)
    assert pair_encoding.data == slow(text, pair).data  # ids, token types, mask
    assert pair_encoding["input_ids"][0] == fast.cls_token_id and pair_encoding["input_ids"][-1] == fast.sep_token_id
