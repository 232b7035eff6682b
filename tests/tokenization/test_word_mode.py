"""Word mode's plain call gives what a call with offsets gives: ids, masks, padding, truncation, pairs, encodings."""

import copy
import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tokenization import _check_offsets, _long_text, lines, vocab_files  # noqa: F401  (module fixtures)
from tokenizers import normalizers

from roformer_ext import RoFormerExtTokenizerFast

FIELDS = ("ids", "type_ids", "tokens", "offsets", "word_ids", "sequence_ids", "attention_mask", "special_tokens_mask")

HOSTILE = [
    "", " ", "\t\n\r", "\u3000", "中国人民银行今天发布消息", "我爱Python编程😀！很好", "学习C++语言， e-mail 地址 1998-01-01",
    "İstanbul 大学 ÉCOLE Ωμέγα ΣΑΣ",
    "İ\x00中国经济",  # without accent stripping: one character more and one less, at other places
    "[MASK]中国人民[mask]经济 [SEP]",  # added tokens: tokenizers' own pipeline for the whole call
    "a\x00b中国\u200b发展\ufffd",  # deleted characters
    "１９９８年，中国经济发展。", "   前导和尾随空格   ", "😀😀😀 🇨🇳 👍🏽", "中" * 200, "ＡＢＣ\t中国\u3000经济  Ｅ-ｍａｉｌ\u00a0地址",
    "cafe\u0301 中国 e\u0300\u0301",  # combining marks
    "ab\ud800cd 中\U000e0080国",  # a lone surrogate, an unassigned code point
    "x\u2028y\u0085z 中国",
]  # fmt: skip


def _same_encoding(new, old) -> None:
    for field in FIELDS:
        assert getattr(new, field) == getattr(old, field), field
    assert new.n_sequences == old.n_sequences and len(new.overflowing) == len(old.overflowing)


def _same_call(tokenizer, *args, **kwargs) -> None:
    """The call equals the one with offsets (but for their key), and those offsets are the encodings'."""
    plain, full = tokenizer(*args, **kwargs), tokenizer(*args, return_offsets_mapping=True, **kwargs)
    offsets = full["offset_mapping"]
    offsets = offsets.tolist() if hasattr(offsets, "tolist") else offsets
    if isinstance(args[0], str) and not (kwargs.get("return_tensors") or kwargs.get("return_overflowing_tokens")):
        offsets = [offsets]  # unbatched
    assert [[list(o) for o in row] for row in offsets] == [[list(o) for o in e.offsets] for e in full.encodings]
    assert list(plain.keys()) == [key for key in full.keys() if key != "offset_mapping"]
    for key in plain:  # lists, or tensors / arrays of the same type and dtype
        a, b = plain[key], full[key]
        assert type(a) is type(b) and getattr(a, "dtype", None) == getattr(b, "dtype", None), key
        assert np.array_equal(a, b) if hasattr(b, "dtype") else a == b, key
    assert plain.n_sequences == full.n_sequences and len(plain.encodings) == len(full.encodings)
    for index, (a, b) in enumerate(zip(plain.encodings, full.encodings)):
        _same_encoding(a, b)
        assert plain.word_ids(index) == full.word_ids(index)


@pytest.fixture(scope="module")
def tokenizer(vocab_files):  # noqa: F811  (segmenter "jieba": test_tokenization checks it)
    return RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])


@pytest.fixture(scope="module")
def hostile(lines):  # noqa: F811
    return HOSTILE + [_long_text(lines, 6000), lines[0], lines[1]]


@pytest.mark.parametrize("kwargs", [
    {}, {"add_special_tokens": False}, {"padding": True, "return_special_tokens_mask": True, "return_length": True},
    {"padding": "max_length", "max_length": 48, "truncation": True, "pad_to_multiple_of": 16},
    {"padding": True, "padding_side": "left", "return_tensors": "pt"},
    {"truncation": "longest_first", "max_length": 9, "return_tensors": "np", "padding": True},
    {"return_token_type_ids": False, "return_attention_mask": False}, {"split_special_tokens": True, "verbose": False},
    {"truncation": True, "max_length": 12, "stride": 3, "return_overflowing_tokens": True, "padding": True},
])  # fmt: skip
def test_plain_call_equals_call_with_offsets(tokenizer, lines, hostile, kwargs):  # noqa: F811
    _same_call(tokenizer, lines[:300], **kwargs)
    _same_call(tokenizer, hostile, **kwargs)
    _same_call(tokenizer, [text for text in hostile if "[" not in text], **kwargs)
    for text in (hostile[0], hostile[4], hostile[8], hostile[-3]):
        _same_call(tokenizer, text, **kwargs)
    pair_kwargs = dict(kwargs)
    if "truncation" in kwargs:
        pair_kwargs.update(truncation="only_second", max_length=48)
    else:
        _same_call(tokenizer, lines[20], "", **kwargs)  # an empty second text: transformers drops it
    _same_call(tokenizer, [text[:30] for text in hostile], hostile[::-1], **pair_kwargs)
    _same_call(tokenizer, hostile[4], hostile[5], **pair_kwargs)


def test_offsets_and_word_ids_of_a_plain_call(tokenizer, lines):  # noqa: F811
    """`.encodings` of a plain call hold the input's offsets, read every way a `BatchEncoding` offers."""
    texts = lines[:4]
    reference = tokenizer(texts, return_offsets_mapping=True)
    for read in (
        lambda e: [x.offsets for x in e.encodings],
        lambda e: e.encodings[-1].offsets,
        lambda e: [x.offsets for x in e.encodings[1:3]],
        lambda e: e.token_to_chars(2, 3),
        lambda e: e.char_to_token(3, 10),
        lambda e: e.word_ids(1),
        lambda e: e[0].tokens,
        lambda e: [x.offsets for x in pickle.loads(pickle.dumps(e)).encodings],
        lambda e: [x.offsets for x in copy.deepcopy(e).encodings],
    ):
        assert read(tokenizer(texts)) == read(reference)
    for index, text in enumerate(texts):
        _check_offsets(text, reference.tokens(index), reference["offset_mapping"][index])
    assert tokenizer(texts[0]).word_ids() == tokenizer(texts[0], return_offsets_mapping=True).word_ids()


def test_encodings_follow_their_own_call(tokenizer, lines):  # noqa: F811
    """Encodings first read after other calls (other padding, truncation, sides) are those of their own call."""
    texts = [lines[10], lines[11] * 2, lines[12]]
    calls = [
        {"padding": True, "pad_to_multiple_of": 8},
        {"truncation": True, "max_length": 9, "add_special_tokens": False},
        {"padding": "max_length", "max_length": 400, "padding_side": "left"},
    ]
    results = [tokenizer(texts, **call) for call in calls]
    for result, call in reversed(list(zip(results, calls))):
        expected = tokenizer(texts, return_offsets_mapping=True, **call)
        for a, b in zip(result.encodings, expected.encodings):
            _same_encoding(a, b)


@pytest.mark.parametrize("options", [{"do_lower_case": False}, {"strip_accents": False}, {"strip_accents": True}, {}])
def test_normaliser_options(vocab_files, hostile, options):  # noqa: F811
    """{}: a normaliser set by the user, keeping "\r\n" (one jieba word of two characters) and tabs, "İ" two chars."""
    tokenizer = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"], **options)
    if not options:
        tokenizer.backend_tokenizer.normalizer = normalizers.Lowercase()
    texts = [*hostile, "中国\r\n经济发展", "ＡＢ\t中国  经济", "İ中国经济", "中国经济"]
    _same_call(tokenizer, texts[::-1], padding=True)
    for text in texts:
        _same_call(tokenizer, text)


def test_added_tokens_after_construction(vocab_files, lines):  # noqa: F811
    tokenizer = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])
    tokenizer.add_tokens(["人民银行", "Café"])
    tokenizer.add_special_tokens({"additional_special_tokens": ["<ent>"]})
    texts = [lines[4], "中国人民银行行长", "cafe 和 CAFÉ 中国", "<ent>中国<ent>", lines[5]]
    _same_call(tokenizer, texts)
    for text in texts:
        _same_call(tokenizer, text)
    assert tokenizer.convert_tokens_to_ids("人民银行") in tokenizer(texts[1])["input_ids"]


def test_too_long_rows_warn_as_transformers_does(vocab_files, lines):  # noqa: F811
    flag = "sequence-length-is-longer-than-the-specified-maximum"
    tokenizer = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"], model_max_length=8)
    tokenizer(lines[:2], truncation=True)
    tokenizer(lines[:2], verbose=False)
    assert not tokenizer.deprecation_warnings.get(flag)
    tokenizer(lines[:2])
    assert tokenizer.deprecation_warnings.get(flag)
    _same_call(tokenizer, lines[:2])


def test_calls_transformers_refuses_fail_alike(tokenizer, lines):  # noqa: F811
    for args in (([],), (lines[:2], lines[:3]), (lines[:2], "中国"), ([1, 2],)):
        with pytest.raises(Exception) as expected:
            tokenizer(*args, return_offsets_mapping=True)
        with pytest.raises(expected.type):
            tokenizer(*args)
    _same_call(tokenizer, [["中国", "经济"], ["发展"]], is_split_into_words=True, padding=True)


def test_threads_sharing_one_tokenizer(tokenizer, lines):  # noqa: F811
    batches = [lines[i : i + 25] for i in range(0, 200, 25)]
    expected = [tokenizer(batch, return_offsets_mapping=True) for batch in batches]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(tokenizer, batches))
    for result, reference in zip(results, expected):
        assert result["input_ids"] == reference["input_ids"]
        assert [e.offsets for e in result.encodings] == reference["offset_mapping"]


_ALPHABET = list("中国经济发展我们的工作今天气很好公园人民银行") + list("aBcÉé xyz Σ\t\n,.!-+#１２：（）。《》—…")
_ALPHABET += ["😀", "🇨", "\u3000", "\x00", "\u200b", "龘", "[MASK]", "ab", "  "]


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(st.lists(st.sampled_from(_ALPHABET), max_size=24).map("".join), min_size=1, max_size=4),
    options=st.sampled_from([{}, {"padding": True}, {"truncation": True, "max_length": 9, "padding": "max_length"}]),
)
def test_property_plain_call_equals_call_with_offsets(tokenizer, texts, options):
    _same_call(tokenizer, texts, **options)
    _same_call(tokenizer, texts, texts[::-1], **options)
    for text, encoding in zip(texts, tokenizer(texts, return_offsets_mapping=True).encodings):
        if "[MASK]" not in text:  # (the check reads every token's text in the input, lower-cased)
            _check_offsets(text, encoding.tokens, encoding.offsets)
