"""Word mode's fast route (each text cut once, split by the Rust pre-tokenizer) gives what the Python pre-tokenizer
path gives: the same ids, offsets, word ids, sequence ids, overflow and padding, on People's Daily (the corpus and
vocabularies of test_tokenization.py) and on hostile inputs.

`word_fast_route = False` on an instance keeps the Python pre-tokenizer for every text: that is the reference.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tokenization import _long_text, lines, vocab_files  # noqa: F401  (module fixtures)

from roformer_ext import RoFormerExtTokenizerFast
from roformer_ext.tokenization_word_route import _FixedOnAccess, _Reencode, _route_plan, _WordMarker

ENCODING_FIELDS = (
    "ids", "type_ids", "tokens", "offsets", "word_ids", "sequence_ids", "attention_mask", "special_tokens_mask",
    "n_sequences",
)  # fmt: skip


def _same_encoding(new, old) -> None:
    for field in ENCODING_FIELDS:
        assert getattr(new, field) == getattr(old, field), field
    assert len(new.overflowing) == len(old.overflowing)
    for a, b in zip(new.overflowing, old.overflowing):
        _same_encoding(a, b)


def _same(new, old) -> None:
    assert type(new) is type(old) and list(new.keys()) == list(old.keys())
    for key in old:
        if isinstance(old[key], torch.Tensor):
            assert new[key].dtype == old[key].dtype and torch.equal(new[key], old[key]), key
        elif isinstance(old[key], np.ndarray):
            assert new[key].dtype == old[key].dtype and np.array_equal(new[key], old[key]), key
        else:
            assert new[key] == old[key], key
    if old.encodings is None:
        assert new.encodings is None
        return
    assert len(new.encodings) == len(old.encodings)
    for index, (a, b) in enumerate(zip(new.encodings, old.encodings)):
        _same_encoding(a, b)
        assert new.word_ids(index) == old.word_ids(index)


@pytest.fixture(scope="module")
def pair(vocab_files):  # noqa: F811
    """(fast route, Python pre-tokenizer) tokenizers of the word vocabulary."""
    new = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])
    old = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])
    old.word_fast_route = False
    assert new.segmenter == "jieba"
    return new, old


def _both(pair, *args, **kwargs) -> None:
    new, old = pair
    _same(new(*args, **kwargs), old(*args, **kwargs))


def test_corpus_lines_take_the_route_and_agree(pair, lines):  # noqa: F811
    new, old = pair
    marker = new._word_marker()
    routed = sum(marker(line) is not None for line in lines)
    assert routed == len(lines), routed  # full-width capitals too: the normaliser makes one char of each
    assert marker(HOSTILE[-2]) is not None and marker(HOSTILE[-1]) is None  # combining marks: Python route
    reference = old(lines, return_offsets_mapping=True)
    _same(new(lines, return_offsets_mapping=True), reference)  # offsets fixed at once
    lazy = new(lines)
    assert type(lazy._encodings) is _FixedOnAccess  # offsets fixed when .encodings is first read
    assert isinstance(lazy._encodings._pending[2], _Reencode)  # encoded without offsets, again when read
    assert lazy["input_ids"] == reference["input_ids"]
    assert [e.offsets for e in lazy.encodings] == reference["offset_mapping"]
    assert lazy.word_ids(7) == reference.word_ids(7)
    with_offsets = new(lines[:5], return_offsets_mapping=True)
    assert with_offsets._encodings._pending[2] is None  # encoded with offsets: nothing to encode again


def test_lazy_encodings_keep_their_call_settings(pair, lines):  # noqa: F811
    """A result's encodings, encoded again when first read, follow its own call, not the calls made since."""
    new, old = pair
    texts = [lines[10], "[MASK] 经济", lines[11] * 2, lines[12]]  # one on the Python route: padded together
    first = new(texts, padding=True, pad_to_multiple_of=8)
    second = new(texts[::-1], truncation=True, max_length=9, add_special_tokens=False)
    third = new(texts[1:], padding="max_length", max_length=400, padding_side="left")
    _same(third, old(texts[1:], padding="max_length", max_length=400, padding_side="left"))
    _same(second, old(texts[::-1], truncation=True, max_length=9, add_special_tokens=False))
    _same(first, old(texts, padding=True, pad_to_multiple_of=8))


def test_marker_search_follows_the_checked_characters(pair, lines):  # noqa: F811
    """The compiled search for characters the normaliser keeps is a shortcut only: a marker that has compiled it on
    the corpus marks every hostile text as a new marker does, and forgets it with the normaliser."""
    new, _ = pair
    marker = new._word_marker()
    for line in lines:
        marker(line)
    assert marker._unstable_search is not None
    fresh = _WordMarker(marker.vocab, marker.split_cjk, new.__dict__["_word_pre_tokenizer"].library, marker.normalize)
    for text in [*HOSTILE, "ＡＢＣ中国", "Ｅ-ｍａｉｌ 地址", "中国\t经济"]:
        assert marker(text) == fresh(text), text
    marker.forget_normaliser(marker.normalize)
    assert marker._unstable_search is None and not marker.stable_chars


HOSTILE = [
    "",
    " ",
    "   ",
    "\t\n\r",
    "\u3000",
    "中国人民银行今天发布消息",
    "我爱Python编程😀！很好",
    "学习C++语言， e-mail 地址 1998-01-01",
    "İstanbul 大学 ÉCOLE Ωμέγα ΣΑΣ",  # normalised one char for one: the fast route (İ is two chars unstripped)
    "[MASK]中国人民[mask]经济 [SEP]",  # added tokens: the Python route
    "a\x00b中国\u200b发展\ufffd",
    "１９９８年，中国经济发展。",
    "   前导和尾随空格   ",
    "😀😀😀 🇨🇳 👍🏽",
    "中" * 200,
    "ａｂｃ中国ＡＢＣ",
    "ＡＢＣ\t中国\u3000经济  Ｅ-ｍａｉｌ\u00a0地址",  # full-width capitals and odd spaces, each one char
    "cafe\u0301 中国 e\u0300\u0301",  # combining marks: the Python route
]


@pytest.fixture(scope="module")
def hostile(lines):  # noqa: F811
    return HOSTILE + [_long_text(lines, 6000), lines[0], lines[1]]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"return_offsets_mapping": True},
        {"add_special_tokens": False, "return_offsets_mapping": True},
        {"padding": True, "return_special_tokens_mask": True, "return_length": True},
        {"padding": "max_length", "max_length": 48, "truncation": True, "pad_to_multiple_of": 16},
        {"padding": True, "padding_side": "left", "return_offsets_mapping": True},
        {"truncation": True, "max_length": 12, "stride": 3, "return_overflowing_tokens": True},
        {"truncation": True, "max_length": 12, "stride": 3, "return_overflowing_tokens": True, "padding": True,
         "return_offsets_mapping": True},
        {"padding": True, "truncation": True, "max_length": 64, "return_tensors": "pt"},
        {"padding": True, "return_tensors": "pt", "return_offsets_mapping": True},
    ],
)  # fmt: skip
def test_hostile_batches_singles_and_pairs(pair, hostile, kwargs):
    _both(pair, hostile, **kwargs)
    _both(pair, hostile[5:6], **kwargs)  # a batch of one
    for text in (hostile[0], hostile[6], hostile[8], hostile[-3]):
        _both(pair, text, **kwargs)
    pair_kwargs = dict(kwargs)
    if pair_kwargs.get("return_overflowing_tokens"):
        pair_kwargs["truncation"] = "only_second"
        pair_kwargs["max_length"] = 40
    firsts = [text[:30] for text in hostile]
    _both(pair, firsts, hostile[::-1], **pair_kwargs)
    _both(pair, hostile[5], hostile[6], **pair_kwargs)


def test_mixed_batch_pads_as_one(pair, lines):  # noqa: F811
    """Texts of both routes in one padded batch: padded to the same length as the Python route pads them."""
    new, _ = pair
    batch = [lines[2], "ＡＢ\x00C 中国", lines[3] * 3, "[MASK] 经济", lines[4]]
    marker, added = new._word_marker(), new._added_tokens_pattern()
    # a control character (dropped: not one char for one) and an added token take the Python route
    assert [_route_plan(text, marker, added) is None for text in batch] == [False, True, False, True, False]
    for kwargs in ({"padding": True}, {"padding": True, "pad_to_multiple_of": 7, "padding_side": "left"},
                   {"padding": "max_length", "max_length": 300, "truncation": True, "return_tensors": "pt"}):  # fmt: skip
        _both(pair, batch, **kwargs)


@pytest.mark.parametrize("options", [{"do_lower_case": False}, {"strip_accents": False}, {"strip_accents": True}])
def test_normaliser_options(vocab_files, hostile, options):  # noqa: F811
    """Each normaliser makes other characters change (or grow): the route follows the one it has."""
    new = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"], **options)
    old = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"], **options)
    old.word_fast_route = False
    _both((new, old), hostile, return_offsets_mapping=True)
    _both((new, old), hostile[::-1], padding=True)


def test_other_entry_points(pair, hostile):
    new, old = pair
    for text in hostile[5:9]:
        assert new.tokenize(text) == old.tokenize(text)
        assert new.encode(text) == old.encode(text)
        assert new.tokenize(text, text[::-1], add_special_tokens=True) == old.tokenize(
            text, text[::-1], add_special_tokens=True
        )
    words = [["中国", "人民"], ["经济", "发展", "很好"]]
    _both(pair, words, is_split_into_words=True, return_offsets_mapping=True)  # the Python route


def test_encodings_are_fixed_on_access(pair, lines):  # noqa: F811
    new, old = pair
    texts = lines[:4]
    reference = old(texts)
    for read in (
        lambda e: e.encodings[1].offsets,
        lambda e: [x.offsets for x in e.encodings],
        lambda e: e.token_to_chars(2, 3),
        lambda e: e.char_to_token(3, 10),
        lambda e: [x.offsets for x in pickle.loads(pickle.dumps(e)).encodings],
        lambda e: [x.offsets for x in e.encodings.copy()],
        lambda e: e.encodings[-1].offsets,
    ):
        assert read(new(texts)) == read(reference)
    encoding = new(texts[0])
    assert encoding.word_ids() == old(texts[0]).word_ids()


def test_overflow_offsets_are_moved_back(pair, lines):  # noqa: F811
    """Overflowing encodings (nested in the serialised Encoding) are moved back too."""
    new, old = pair
    kwargs = {"truncation": True, "max_length": 10, "stride": 2, "return_overflowing_tokens": True}
    a, b = new(lines[3], **kwargs), old(lines[3], **kwargs)
    _same(a, b)
    assert len(b.encodings) > 2


def test_added_tokens_after_construction(vocab_files, lines):  # noqa: F811
    new = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])
    old = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])
    old.word_fast_route = False
    for tokenizer in (new, old):
        tokenizer.add_tokens(["人民银行", "Café"])
        tokenizer.add_special_tokens({"additional_special_tokens": ["<ent>"]})
    texts = [lines[4], "中国人民银行行长", "cafe 和 CAFÉ 中国", "<ent>中国<ent>", lines[5]]
    _same(new(texts, return_offsets_mapping=True), old(texts, return_offsets_mapping=True))


def test_save_pickle_and_reload_keep_the_route(pair, lines, tmp_path):  # noqa: F811
    new, old = pair
    reference = old(lines[:20], return_offsets_mapping=True)
    new.save_pretrained(tmp_path)
    assert '"Custom"' not in (tmp_path / "tokenizer.json").read_text(encoding="utf-8")
    for reloaded in (RoFormerExtTokenizerFast.from_pretrained(tmp_path), pickle.loads(pickle.dumps(new))):
        assert reloaded.segmenter == "jieba" and reloaded.word_fast_route
        _same(reloaded(lines[:20], return_offsets_mapping=True), reference)
    _same(new(lines[:20], return_offsets_mapping=True), reference)  # saving left the route in place


def test_jieba_library_takes_the_route_too(vocab_files, lines, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ROFORMER_EXT_WORD_SEGMENTER", "jieba")
    new = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])
    old = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])
    old.word_fast_route = False
    _same(new(lines[:200], return_offsets_mapping=True), old(lines[:200], return_offsets_mapping=True))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"return_token_type_ids": False, "return_attention_mask": False, "return_offsets_mapping": True},
        {"return_token_type_ids": True, "return_attention_mask": True, "return_special_tokens_mask": True},
        {"split_special_tokens": True, "return_offsets_mapping": True},
        {"verbose": False, "padding": "longest", "pad_to_multiple_of": 5, "return_length": True},
        {"truncation": "only_first", "max_length": 30, "padding": "max_length", "return_tensors": "np"},
        {"truncation": True, "max_length": 7, "stride": 2, "return_overflowing_tokens": True, "padding": True,
         "padding_side": "left", "return_length": True, "return_special_tokens_mask": True},
        {"truncation": "longest_first", "max_length": 9, "return_tensors": "pt", "padding": True},
    ],
)  # fmt: skip
def test_call_settings_as_transformers_sets_them(pair, hostile, kwargs):
    """Every setting of transformers' `_encode_plus` that the route maps itself (no backend set-up to copy)."""
    mixed = [*hostile[5:12], "[MASK] 经济"]
    _both(pair, mixed, **kwargs)
    _both(pair, mixed[0], **kwargs)
    pair_kwargs = {**kwargs, "truncation": "only_second"} if kwargs.get("return_overflowing_tokens") else kwargs
    if pair_kwargs.get("truncation") == "only_second":
        pair_kwargs["max_length"] = 40
    _both(pair, mixed, mixed[::-1], **pair_kwargs)
    _both(pair, mixed[1], mixed[2], **pair_kwargs)


def test_tokenizer_sides_and_empty_pair(pair, lines):  # noqa: F811
    """`truncation_side` / `padding_side` set on the tokenizers, and an empty second text (transformers drops it)."""
    texts = [lines[20], "[MASK] 经济", lines[21][:5]]
    for tokenizer in pair:
        tokenizer.truncation_side, tokenizer.padding_side = "left", "left"
    try:
        _both(pair, texts, truncation=True, max_length=6, padding=True, return_offsets_mapping=True)
    finally:
        for tokenizer in pair:
            tokenizer.truncation_side, tokenizer.padding_side = "right", "right"
    _both(pair, lines[20], "", return_offsets_mapping=True)


def test_calls_the_route_does_not_map_take_transformers_path(pair, lines):  # noqa: F811
    """Other keywords, pre-split words and invalid inputs: transformers' own path, its results and its errors."""
    new, old = pair
    _same(new(lines[:3], unknown_option=1), old(lines[:3], unknown_option=1))
    _both(pair, [["中国", "经济"], ["发展"]], is_split_into_words=True, padding=True)
    for args in (([],), (lines[:2], lines[:3]), (lines[:2], "中国"), ([1, 2],)):
        with pytest.raises(Exception) as expected:
            old(*args)
        with pytest.raises(expected.type):
            new(*args)


def test_too_long_rows_warn_as_transformers_does(vocab_files, lines):  # noqa: F811
    flag = "sequence-length-is-longer-than-the-specified-maximum"
    new = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"], model_max_length=8)
    old = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"], model_max_length=8)
    old.word_fast_route = False
    _same(new(lines[:2], truncation=True), old(lines[:2], truncation=True))
    assert not new.deprecation_warnings.get(flag) and not old.deprecation_warnings.get(flag)
    _same(new(lines[:2], verbose=False), old(lines[:2], verbose=False))
    assert not new.deprecation_warnings.get(flag)
    _same(new(lines[:2]), old(lines[:2]))
    assert new.deprecation_warnings.get(flag) and old.deprecation_warnings.get(flag)


def test_the_backend_is_only_read(pair, lines):  # noqa: F811
    """The route sets nothing on the tokenizer's backend: its truncation, padding and pipeline stay as they were."""
    new, _ = pair
    backend = new.backend_tokenizer
    before = (backend.truncation, backend.padding, backend.encode_special_tokens, type(backend.pre_tokenizer))
    new([lines[0], "[MASK] 经济"], truncation=True, max_length=5, padding="max_length", split_special_tokens=True)
    new(lines[:3], padding=True, return_offsets_mapping=True)
    assert new.backend_tokenizer is backend
    assert (backend.truncation, backend.padding, backend.encode_special_tokens, type(backend.pre_tokenizer)) == before


_ALPHABET = (
    list("中国经济发展我们的工作今天气很好公园人民银行")
    + list("aBcÉé xyz Σ\t\n,.!-+#１２：（）。《》—…")
    + ["😀", "🇨", "\u3000", "\x00", "\u200b", "龘", "[MASK]", "ab", "  "]
)


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(st.lists(st.sampled_from(_ALPHABET), max_size=24).map("".join), min_size=1, max_size=4),
    pairs=st.booleans(),
    options=st.sampled_from(
        [
            {},
            {"padding": True},
            {"truncation": True, "max_length": 9, "padding": "max_length"},
            {"truncation": "longest_first", "max_length": 8, "stride": 2, "return_overflowing_tokens": True},
        ]
    ),  # fmt: skip
)
def test_property_fast_route_equals_python_route(pair, texts, pairs, options):
    if pairs:
        if options.get("return_overflowing_tokens"):
            options = {**options, "truncation": "only_second", "max_length": 20}
        try:
            expected = pair[1](texts, texts[::-1], return_offsets_mapping=True, **options)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:  # a pair too long to truncate (Rust panics): the same error either way
            with pytest.raises(type(error)):
                pair[0](texts, texts[::-1], return_offsets_mapping=True, **options)
            return
        _same(pair[0](texts, texts[::-1], return_offsets_mapping=True, **options), expected)
    else:
        _both(pair, texts, return_offsets_mapping=True, **options)
        _both(pair, texts, **options)


def test_threads_sharing_one_tokenizer(pair, lines):  # noqa: F811
    """Calls from several threads on one tokenizer: the same results as one by one, and the backend left in place."""
    from concurrent.futures import ThreadPoolExecutor

    from tokenizers import Tokenizer

    new, old = pair
    batches = [lines[i : i + 25] for i in range(0, 200, 25)]
    expected = [old(batch, padding=i % 2 == 0, return_offsets_mapping=True) for i, batch in enumerate(batches)]
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(lambda ib: new(ib[1], padding=ib[0] % 2 == 0, return_offsets_mapping=True), enumerate(batches))
        )
    for result, reference in zip(results, expected):
        _same(result, reference)
    assert type(new._tokenizer) is Tokenizer
    assert new._tokenizer.pre_tokenizer.__class__.__name__ == "PreTokenizer"


def test_threads_with_their_own_settings_and_mixed_batches(pair, lines):  # noqa: F811
    """Threads calling one tokenizer at once, each with other truncation, padding and offsets, on batches mixing the
    fast route and the Python pre-tokenizer: each gets what it gets alone (no lock: each thread's own pipelines)."""
    from concurrent.futures import ThreadPoolExecutor

    new, old = pair
    settings_list = [
        {},
        {"padding": True, "padding_side": "left", "return_offsets_mapping": True},
        {"truncation": True, "max_length": 9, "padding": "max_length"},
        {"truncation": True, "max_length": 12, "stride": 3, "return_overflowing_tokens": True},
        {"padding": True, "pad_to_multiple_of": 8, "return_tensors": "pt"},
        {"return_offsets_mapping": True, "split_special_tokens": True},
    ]
    jobs = []
    for index in range(48):
        batch = lines[index * 7 : index * 7 + 6] + (["[MASK] 经济", "ＡＢ\x00C 中国"] if index % 2 else [])
        jobs.append((batch, settings_list[index % len(settings_list)]))
    expected = [old(batch, **kwargs) for batch, kwargs in jobs]
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda job: new(job[0], **job[1]), jobs))
    for result, reference in zip(results, expected):
        _same(result, reference)


def test_threads_reading_lazy_encodings(pair, lines):  # noqa: F811
    """Several threads reading one result's `.encodings` for the first time at once all see the fixed offsets."""
    from concurrent.futures import ThreadPoolExecutor

    new, old = pair
    expected = old(lines[:200], return_offsets_mapping=True)["offset_mapping"]
    for _ in range(3):
        result = new(lines[:200])
        with ThreadPoolExecutor(4) as pool:
            seen = list(pool.map(lambda r: [e.offsets for e in r.encodings], [result] * 4))
        assert all(offsets == expected for offsets in seen)
