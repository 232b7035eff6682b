"""How word and char mode cut text before WordPiece: vocabulary files, unknown code points, BERT's basic split and
jieba's words (the tokenizer classes are in tokenization_roformer_ext.py).

Word mode (`segmenter="jieba"`) cuts the normalised text with jieba without HMM; a word found in the vocabulary is one
piece, any other word falls back to BERT's basic split (`WordSplitter`). `detect_segmenter` tells a word vocabulary
from a char one.

The words come from `rjieba` (jieba-rs, the `word` extra; what transformers' RoFormerTokenizer uses) when it is
installed, else from jieba: the same dictionary and, with HMM off, the same words and ids (tested on People's
Daily), several times faster. `ROFORMER_EXT_WORD_SEGMENTER=jieba` keeps jieba, e.g. after `jieba.add_word`, which
rjieba does not see.

A code point the running Python calls unassigned (category Cn) or a lone surrogate (Cs) becomes one `[UNK]` token
of its own in both classes: `mark_unknown_chars` puts a punctuation stand-in in its place before anything else
runs (tokenizers' Rust tables are of another Unicode version, and Rust strings cannot hold a surrogate).
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from collections.abc import Container, Iterable, Iterator
from types import ModuleType

from tokenizers import NormalizedString, PreTokenizedString

SEGMENTERS = ("jieba",)
# A char vocabulary (BERT-Chinese, RoFormer char models) has almost no multi-character CJK entries;
# a word vocabulary (WoBERT, RoFormer's word models) holds tens of thousands. 1% parts them widely.
WORD_VOCAB_MIN_FRACTION = 0.01
# Pieces up to this many chars are sliced word by word; longer ones are halved first (`_slice_spans`).
_DIRECT_SLICE_CHARS = 64
_MAX_KNOWN_WORDS = 1 << 19  # words whose pieces a `WordSplitter` remembers


#: Stand-ins for an unknown code point: old punctuation (Po, Unicode <= 5.1) that Python's and tokenizers' tables
#: both split off as a token of its own and that no normaliser changes. A tokenizer takes the first one that no
#: vocabulary token contains, so the stand-in can only become [UNK] (tests/tokenization/test_tokenizer_unicode.py checks each).
_UNKNOWN_MARKERS = (
    "\u2e2e",  # REVERSED QUESTION MARK
    "\u2e18",  # INVERTED INTERROBANG
    "\ua673",  # SLAVONIC ASTERISK
    "\u1368",  # ETHIOPIC PARAGRAPH SEPARATOR
    "\u1801",  # MONGOLIAN ELLIPSIS
    "\U00010100",  # AEGEAN WORD SEPARATOR LINE
    "\u0f14",  # TIBETAN MARK GTER TSHEG
    "\u17d8",  # KHMER SIGN BEYYAL
)
_UNKNOWN_CATEGORIES = ("Cn", "Cs")  # unassigned in the running Python, surrogate


@functools.cache
def _suspect_chars() -> re.Pattern[str]:
    """Every BMP code point of an unknown category in the running Python, and every astral one (checked per match).

    Astral code points stay a single range: hundreds of astral ranges would make each search ~100x slower.
    Built on first use (a scan of the 65,536 BMP code points, ~20 ms).
    """
    ranges, start = [], None
    for cp in range(0x10001):  # 0x10000 (astral, never unknown here) closes a range that runs to U+FFFF
        unknown = cp < 0x10000 and unicodedata.category(chr(cp)) in _UNKNOWN_CATEGORIES
        if unknown and start is None:
            start = cp
        elif not unknown and start is not None:
            ranges.append(f"\\u{start:04x}-\\u{cp - 1:04x}")
            start = None
    return re.compile("[" + "".join(ranges) + "\\U00010000-\\U0010ffff]")


def mark_unknown_chars(text: str, marker: str) -> str:
    """`text` with each unassigned code point (category Cn in the running Python) or lone surrogate replaced by
    `marker`, one char for one, so offsets into `text` stay valid; `text` itself when there is none.

    Ordinary text costs one C-level check (`isprintable` is False for any Cn or Cs char).
    """
    if text.isascii() or text.isprintable():
        return text
    suspects = _suspect_chars().finditer(text)  # BMP unknowns, and astral chars such as emoji to look up
    if not any(unicodedata.category(match.group()) in _UNKNOWN_CATEGORIES for match in suspects):
        return text

    def replace(match: re.Match[str]) -> str:
        char = match.group()
        return marker if unicodedata.category(char) in _UNKNOWN_CATEGORIES else char

    return _suspect_chars().sub(replace, text)


def unknown_char_marker(vocab: Iterable[str]) -> str:
    """The first of `_UNKNOWN_MARKERS` that no token of `vocab` contains."""
    used = set("".join(vocab))
    for marker in _UNKNOWN_MARKERS:
        if marker not in used:
            return marker
    raise ValueError(
        "Every stand-in for unknown code points occurs in the vocabulary "
        f"({', '.join(f'U+{ord(m):04X}' for m in _UNKNOWN_MARKERS)}); remove one of them from vocab.txt."
    )


def load_vocab(vocab_file: str | os.PathLike) -> dict[str, int]:
    """Read a BERT `vocab.txt` (one token a line, the line number is the id)."""
    with open(vocab_file, encoding="utf-8") as handle:
        return {line.rstrip("\r\n"): index for index, line in enumerate(handle)}


def _is_cjk(char: str) -> bool:
    """BERT's "Chinese character", with the ranges of `tokenizers`' BertNormalizer (its Extension E
    starts at 0x2B920, not 0x2B820 as in BERT's Python), so slow and fast tokenizers agree."""
    cp = ord(char)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B81F
        or 0x2B920 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _is_punctuation(char: str) -> bool:
    """BERT counts all non-alphanumeric ASCII as punctuation, plus every Unicode P* category."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_multichar_cjk_word(token: str) -> bool:
    return len(token) > 1 and all(_is_cjk(char) for char in token)


def detect_segmenter(vocab: dict[str, int] | str | os.PathLike) -> str | None:
    """`"jieba"` for a word vocabulary (many multi-character CJK entries), `None` for a char one."""
    tokens = load_vocab(vocab) if not isinstance(vocab, dict) else vocab
    words = sum(1 for token in tokens if _is_multichar_cjk_word(token))
    return "jieba" if tokens and words >= WORD_VOCAB_MIN_FRACTION * len(tokens) else None


def _check_segmenter(segmenter: str | None) -> None:
    if segmenter is not None and segmenter not in SEGMENTERS:
        raise ValueError(f"Unknown segmenter {segmenter!r}; known: None (char mode), {', '.join(SEGMENTERS)}.")


def _import_jieba() -> ModuleType:
    """Import jieba only in word mode (inside `try`, so remote code does not make it a hard requirement)."""
    try:
        import jieba
    except ImportError as error:
        raise ImportError("Word mode (segmenter='jieba') needs jieba: `pip install jieba`.") from error
    return jieba


#: Which library cuts word mode's words: `ROFORMER_EXT_WORD_SEGMENTER` ("rjieba" or "jieba"), else rjieba when it
#: is installed, else jieba.
WORD_SEGMENTER_ENV = "ROFORMER_EXT_WORD_SEGMENTER"


def word_segmenter() -> str:
    """ "rjieba" or "jieba": the library word mode uses now (read at each tokenizer's construction)."""
    choice = os.environ.get(WORD_SEGMENTER_ENV, "").strip().lower()
    if choice not in ("", "rjieba", "jieba"):
        raise ValueError(f"{WORD_SEGMENTER_ENV}={choice!r}: set it to 'rjieba' or 'jieba', or leave it unset.")
    if choice == "jieba":
        return "jieba"
    try:
        import rjieba  # noqa: F401
    except ImportError as error:
        if choice == "rjieba":
            raise ImportError(
                f"{WORD_SEGMENTER_ENV}=rjieba needs rjieba: pip install rjieba (or, in the roformer-ext clone, pip install -e '.[word]')."
            ) from error
        return "jieba"
    return "rjieba"


@functools.cache
def _word_cut(library: str):
    """`text -> [word, ...]` of `library` with HMM off; the words tile the text."""
    if library == "rjieba":
        import rjieba

        return functools.partial(rjieba.cut, hmm=False)
    return functools.partial(_import_jieba().lcut, HMM=False)


def basic_spans(text: str, split_cjk: bool = True) -> Iterator[tuple[int, int]]:
    """Character spans of BERT's basic split of already normalised text.

    Whitespace separates; each punctuation mark (and each CJK character when `split_cjk`) is a span
    of its own. Spans, not strings, so that the fast tokenizer can keep offsets into the input.
    """
    start = None
    for index, char in enumerate(text):
        alone = _is_punctuation(char) or (split_cjk and _is_cjk(char))
        if char.isspace() or alone:
            if start is not None:
                yield start, index
                start = None
            if alone:
                yield index, index + 1
        elif start is None:
            start = index
    if start is not None:
        yield start, len(text)


def _slice_spans(normalized: NormalizedString, length: int, spans: list[tuple[int, int]]) -> list[NormalizedString]:
    """`[normalized[a:b] for a, b in spans]` without quadratic time on long text.

    tokenizers turns a slice's char offsets into byte offsets by scanning the string from its start, so
    slicing each word out of the whole text costs O(length) per word. Halving at a span boundary first
    keeps every slice inside a short piece: each level of halving scans the text about twice, and there
    are log2(len(spans)) levels. A one-character span is sliced by its index (`normalized[a]`, several
    times cheaper than a `(start, end)` tuple, which itself is cheaper than a `slice`).
    """
    pieces: list[NormalizedString] = []

    def cut(piece: NormalizedString, offset: int, size: int, lo: int, hi: int) -> None:
        """Slice `spans[lo:hi]` out of `piece`, which holds the text's chars `offset` to `offset + size`."""
        if size <= _DIRECT_SLICE_CHARS or hi - lo < 2:
            pieces.extend(piece[a - offset] if b - a == 1 else piece[(a - offset, b - offset)] for a, b in spans[lo:hi])
            return
        middle = (lo + hi) // 2
        split = spans[middle][0] - offset
        cut(piece[(0, split)], offset, split, lo, middle)
        cut(piece[(split, size)], offset + split, size - split, middle, hi)

    cut(normalized, 0, length, 0, len(spans))
    return pieces


class WordSplitter:
    """Word mode's cut of normalised text: jieba's words (HMM off) that are in `vocab` stay whole, any other word
    takes BERT's basic split (`basic_spans`).

    HMM off and the fallback for out-of-vocabulary words are what bert4keras did for WoBERT and RoFormer; the HMM
    would invent words the vocabulary never has. `library`: "rjieba" or "jieba" (default: `word_segmenter()`), which
    give the same words. Each distinct word is looked up once.

    It is also the fast class's pre-tokenizer, through tokenizers' documented custom-component protocol
    (`PreTokenizer.custom(splitter)` calls `pre_tokenize(pretok)`): the pieces are slices of the `NormalizedString`,
    so offsets stay those of the input. A custom pre-tokenizer cannot be serialised: `tokenizer.json` holds BERT's
    pre-tokenizer and the fast class attaches this one again when it is loaded.
    """

    def __init__(self, vocab: Container[str], split_cjk: bool = True, library: str | None = None) -> None:
        self.vocab, self.split_cjk = vocab, split_cjk
        self.library = library or word_segmenter()
        self._pieces: dict[str, tuple[tuple[int, int], ...]] = {}  # word -> its pieces' spans in the word
        self._joined: dict[str, str] = {}  # word -> its pieces joined by spaces

    def __reduce__(self) -> tuple:  # pickled without the per-word caches
        return type(self), (self.vocab, self.split_cjk, self.library)

    def _word_pieces(self, word: str) -> tuple[tuple[int, int], ...]:
        """The spans of `word`'s pieces in the word: the word itself when it is in the vocabulary."""
        pieces = self._pieces.get(word)
        if pieces is None:
            pieces = ((0, len(word)),) if word in self.vocab else tuple(basic_spans(word, self.split_cjk))
            if len(self._pieces) < _MAX_KNOWN_WORDS:
                self._pieces[word] = pieces
                self._joined[word] = " ".join([word[a:b] for a, b in pieces])
        return pieces

    def joined(self, text: str) -> str:
        """`text` (normalised) with a space between every two pieces: split at whitespace, it gives the pieces."""
        words = _word_cut(self.library)(text)
        joined = [*map(self._joined.get, words)]  # (a C loop: the common case, every word seen before)
        if None in joined:
            joined = [" ".join([word[a:b] for a, b in self._word_pieces(word)]) for word in words]
        return " ".join(joined)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the pieces of `text` (normalised)."""
        spans, start = [], 0
        for word in _word_cut(self.library)(text):
            spans.extend([(start + a, start + b) for a, b in self._word_pieces(word)])
            start += len(word)
        return spans

    def _split(self, index: int, normalized: NormalizedString) -> list[NormalizedString]:
        text = str(normalized)
        return _slice_spans(normalized, len(text), self.spans(text))

    def pre_tokenize(self, pretok: PreTokenizedString) -> None:
        pretok.split(self._split)


__all__ = [
    "SEGMENTERS",
    "WORD_SEGMENTER_ENV",
    "WordSplitter",
    "basic_spans",
    "detect_segmenter",
    "load_vocab",
    "mark_unknown_chars",
    "unknown_char_marker",
    "word_segmenter",
]
