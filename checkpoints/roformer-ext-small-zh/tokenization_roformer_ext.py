"""Tokenizers for RoFormer checkpoints: BERT char vocabularies and jieba word vocabularies.

Char mode is BERT's basic tokenizer (clean, lower-case, strip accents, split punctuation and every
CJK character) followed by WordPiece; it gives the same ids as `transformers.BertTokenizer`.

Word mode (`segmenter="jieba"`) is what WoBERT and the RoFormer v1 word models were trained with
(bert4keras' `Tokenizer(pre_tokenize=lambda s: jieba.cut(s, HMM=False))`): the normalised text is
cut by jieba without HMM; a word found in the vocabulary is one token, any other word falls back
to char mode. The mode is an `__init__` argument, so it is written to `tokenizer_config.json` and
rebuilt on load; `tokenizer.json` only ever holds a serialisable char-mode pipeline, because a
Python pre-tokenizer cannot be serialised (the cause of transformers issue #28164).

The words come from `rjieba` (jieba-rs, the `word` extra; what transformers' RoFormerTokenizer uses) when it is
installed, else from jieba: the same dictionary and, with HMM off, the same words and ids (tested on People's
Daily), several times faster. `ROFORMER_EXT_WORD_SEGMENTER=jieba` keeps jieba, e.g. after `jieba.add_word`, which
rjieba does not see.

The fast class does not call the Python pre-tokenizer once per text in word mode: `_encode_plus` normalises each
text char by char, cuts it with the segmenter, writes it with a space between pieces, encodes the batch with a second,
prepared Rust `Tokenizer` (no normaliser, a split at spaces, the same WordPiece and template), and moves the offsets
back into the input (`_WordModeBackend`, `_WordMarker`). Without offsets asked for it encodes without them, and
`.encodings` encodes again, with them, when first read (`_FixedOnAccess`). Texts where that could differ (the normaliser deletes a
character or makes several of one, they hold an added token, a piece holds punctuation) keep the Python
pre-tokenizer; the ids, offsets and word ids are the same either way (tests/tokenization/test_word_fast_route.py).
`word_fast_route = False` on an instance turns the route off.

A code point the running Python calls unassigned (category Cn) or a lone surrogate (Cs) becomes one `[UNK]` token
of its own in both classes: `mark_unknown_chars` puts a punctuation stand-in in its place before anything else
runs (tokenizers' Rust tables are of another Unicode version, and Rust strings cannot hold a surrogate).

This file is copied as Hub remote code: it imports no other file of the package.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import threading
import unicodedata
from collections.abc import Container, Iterable, Iterator
from types import ModuleType
from typing import Any, Self

from tokenizers import (
    Encoding,
    NormalizedString,
    PreTokenizedString,
    Tokenizer,
    decoders,
    normalizers,
    pre_tokenizers,
    processors,
)
from tokenizers.models import WordPiece
from transformers import BatchEncoding, PythonBackend, TokenizersBackend
from transformers.utils import logging

from .compat import (
    batch_encodings,
    parent_encode_plus,
    parent_encode_without_added_tokens,
    parent_save_pretrained_files,
    set_backend_tokenizer,
    set_batch_encodings,
    swapped_backend,
)
from .hub_code import SharedCodeMixin

logger = logging.get_logger(__name__)

VOCAB_FILES_NAMES = {"vocab_file": "vocab.txt", "tokenizer_file": "tokenizer.json"}
SEGMENTERS = ("jieba",)
# A char vocabulary (BERT-Chinese, RoFormer char models) has almost no multi-character CJK entries;
# a word vocabulary (WoBERT, RoFormer's word models) holds tens of thousands. 1% parts them widely.
WORD_VOCAB_MIN_FRACTION = 0.01
MAX_CHARS_PER_WORD = 100  # BERT's WordPiece limit: longer pieces become [UNK]
# Pieces up to this many chars are sliced word by word; longer ones are halved first (`_slice_spans`).
_DIRECT_SLICE_CHARS = 64


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
                f"{WORD_SEGMENTER_ENV}=rjieba needs rjieba: pip install rjieba (the roformer-ext[word] extra)."
            ) from error
        return "jieba"
    return "rjieba"


def _word_tokenize(library: str):
    """`text -> [(word, start, end), ...]` of `library` with HMM off (start / end are character offsets)."""
    if library == "rjieba":
        import rjieba

        return functools.partial(rjieba.tokenize, hmm=False)
    return functools.partial(_import_jieba().tokenize, HMM=False)


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


def word_spans(
    text: str, vocab: Container[str], split_cjk: bool = True, library: str | None = None
) -> list[tuple[int, int]]:
    """Spans of word mode: jieba words (HMM off) that are in `vocab`, else the basic split of the word.

    HMM off and the fallback for out-of-vocabulary words are what bert4keras did for WoBERT and
    RoFormer; the HMM would invent words the vocabulary never has. `library`: "rjieba" or "jieba"
    (default: `word_segmenter()`), which give the same words.
    """
    spans: list[tuple[int, int]] = []
    for word, start, end in _word_tokenize(library or word_segmenter())(text):
        if word in vocab:
            spans.append((start, end))
        else:
            spans.extend((start + a, start + b) for a, b in basic_spans(word, split_cjk))
    return spans


def _slice_spans(normalized: NormalizedString, length: int, spans: list[tuple[int, int]]) -> list[NormalizedString]:
    """`[normalized[a:b] for a, b in spans]` without quadratic time on long text.

    tokenizers turns a slice's char offsets into byte offsets by scanning the string from its start, so
    slicing each word out of the whole text costs O(length) per word. Halving at a span boundary first
    keeps every slice inside a short piece: each level of halving scans the text about twice, and there
    are log2(len(spans)) levels. (A `(start, end)` tuple slices like `start:end`, with less call overhead.)
    """
    pieces: list[NormalizedString] = []

    def cut(piece: NormalizedString, offset: int, size: int, lo: int, hi: int) -> None:
        """Slice `spans[lo:hi]` out of `piece`, which holds the text's chars `offset` to `offset + size`."""
        if size <= _DIRECT_SLICE_CHARS or hi - lo < 2:
            pieces.extend(piece[(a - offset, b - offset)] for a, b in spans[lo:hi])
            return
        middle = (lo + hi) // 2
        split = spans[middle][0] - offset
        cut(piece[(0, split)], offset, split, lo, middle)
        cut(piece[(split, size)], offset + split, size - split, middle, hi)

    cut(normalized, 0, length, 0, len(spans))
    return pieces


class _JiebaPreTokenizer:
    """`tokenizers` custom pre-tokenizer running `word_spans`; slicing keeps the offset alignment."""

    def __init__(self, vocab: Container[str], split_cjk: bool) -> None:
        self.vocab = vocab
        self.split_cjk = split_cjk
        self.library = word_segmenter()

    def _split(self, index: int, normalized: NormalizedString) -> list[NormalizedString]:
        text = str(normalized)
        return _slice_spans(normalized, len(text), word_spans(text, self.vocab, self.split_cjk, self.library))

    def pre_tokenize(self, pretok: PreTokenizedString) -> None:
        pretok.split(self._split)


def _word_cut(library: str):
    """`text -> [word, ...]` of `library` with HMM off: the words of `_word_tokenize`, without their offsets."""
    if library == "rjieba":
        import rjieba

        return functools.partial(rjieba.cut, hmm=False)
    return functools.partial(_import_jieba().lcut, HMM=False)


@functools.cache
def _cjk_pattern() -> re.Pattern[str]:
    """One character of `_is_cjk`'s ranges."""
    return re.compile(
        "[\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b81f\U0002b920-\U0002ceaf"
        "\uf900-\ufaff\U0002f800-\U0002fa1f]"
    )


class _WordMarker:
    """Word mode's pieces of a text, written so that a split at spaces finds exactly them (the fast route).

    `marker(text)` returns `(marked, shifts)` or `None`. `marked` is the normalised `text` with one space between
    every two elements (an element is a piece of `word_spans`, or a run of spaces between pieces); an offset `o` in
    piece `k` of `marked` is `o - shifts[k]` in `text` (`shifts` is `None` when the text has no space: then
    `shifts[k]` is `k`). Split at spaces, `marked` gives the same pieces, in the same order, as the Python
    pre-tokenizer gives for `text`, so the same tokens and word ids.

    `None` when the result could differ (the caller then takes the Python pre-tokenizer): the normaliser does not
    make one character of each character (offsets would need its alignment; see `normalized`), a piece longer than
    one character holds a character that is not a letter or digit (kept from when BERT's pre-tokenizer split the
    marked text: its punctuation table may split such a piece where Python's does not), a piece is a whitespace
    character, or the text between pieces is anything but spaces.
    """

    def __init__(self, vocab: Container[str], split_cjk: bool, library: str, normalize) -> None:
        self.vocab = vocab
        self.split_cjk = split_cjk
        self.cut = _word_cut(library)
        self.forget_normaliser(normalize)  # again when the user replaces it: the characters were checked with it
        # word -> its elements as a tuple (False: the word cannot take the fast route), and joined by spaces
        self.tuples: dict[str, tuple[str, ...] | bool] = {}
        self.joined: dict[str, str] = {}  # only the words that can

    def _elements(self, word: str) -> tuple[str, ...] | None:
        if word in self.vocab:
            safe = word.isalnum() or (len(word) == 1 and not word.isspace())
            return (word,) if safe else None
        if word.isalnum() and (not self.split_cjk or len(word) == 1 or not _cjk_pattern().search(word)):
            return (word,)
        if word.isalnum() and not _cjk_pattern().sub("", word):  # an out-of-vocabulary CJK word: its characters
            return tuple(word)
        elements, end = [], 0
        for a, b in basic_spans(word, self.split_cjk):
            if a > end:  # what `basic_spans` dropped: whitespace
                elements.append(word[end:a])
            elements.append(word[a:b])
            end = b
        if end < len(word):
            elements.append(word[end:])
        for element in elements:
            if element.strip(" ") if element.isspace() else len(element) > 1 and not element.isalnum():
                return None
        return tuple(elements)

    def _learn(self, words: list[str]) -> None:
        if len(self.tuples) > 1_000_000:
            self.tuples.clear()
            self.joined.clear()
        for word in words:
            if word not in self.tuples:
                elements = self._elements(word)
                self.tuples[word] = False if elements is None else elements
                if elements is not None:
                    self.joined[word] = " ".join(elements)

    def forget_normaliser(self, normalize) -> None:
        """Start over with `normalize` (the user replaced the backend's normaliser)."""
        self.normalize = normalize
        self.stable_chars: set[str] = set()  # characters the normaliser leaves as they are
        self.images: dict[int, str | None] = {}  # ord(char) -> what the normaliser makes of it, None: not one char
        # A search for the first character outside `stable_chars` as it was `_compiled_size` characters ago (one C
        # pass per text, ~15x faster than `set(text)`), and how many characters the slower check has seen since.
        self._unstable_search = None
        self._compiled_size = 0
        self._checked_since = 0

    def normalized(self, text: str) -> str | None:
        """`text` through the normaliser when it makes one character of each character (so an offset into the result
        is the same offset into `text`), else None.

        The normaliser works char by char (clean-up, accent stripping, lower-casing; nothing that looks at a
        neighbour, except the reordering of combining marks, which do not count as one character here), so the text
        is its characters' images. Each distinct character is put through the Rust normaliser once. A text of
        characters it leaves as they are is one regular-expression search; else a set lookup, and a `str.translate`
        when a character changes (full-width or capital letters, tabs)."""
        search = self._unstable_search
        if search is not None and search(text) is None:
            return text
        stable = self.stable_chars
        self._checked_since += len(text)
        # Compile again once the set check has cost about what compiling costs (~1 us a character; the check ~65 ns).
        if len(stable) > self._compiled_size and self._checked_since > 16 * len(stable):
            self._unstable_search = re.compile("[^" + "".join(map(re.escape, sorted(stable))) + "]").search
            self._compiled_size, self._checked_since = len(stable), 0
        chars = set(text)
        if chars <= stable:
            return text
        images = self.images
        for char in chars - stable:
            code = ord(char)
            if code not in images:
                image = self.normalize(char)
                one = len(image) == 1 and not unicodedata.combining(char) and not unicodedata.combining(image)
                images[code] = image if one else None
                if image == char and one:
                    stable.add(char)
            if images[code] is None:
                return None
        return text.translate(images)

    def __call__(self, text: str) -> tuple[str, list[int] | None] | None:
        text = self.normalized(text)
        if text is None:
            return None
        words = self.cut(text)
        joined = [*map(self.joined.get, words)]
        if None in joined:  # a word not seen yet, or one that cannot take the route
            self._learn(words)
            joined = [*map(self.joined.get, words)]
            if None in joined:
                return None
        if sum(map(len, words)) != len(text):  # (the words do not tile the text)
            return None
        if " " not in text:  # no run of spaces between pieces: piece k has k spaces before it
            return " ".join(joined), None
        elements = [element for word in words for element in self.tuples[word]]
        return " ".join(elements), [index for index, element in enumerate(elements) if not element.isspace()]


def _fixed_offsets(encoding: Encoding, shifts: tuple[list[int] | None, ...]) -> list[tuple[int, int]]:
    """The offsets of `encoding` (of marked texts) moved back into the input texts (`_WordMarker`)."""
    if len(shifts) == 1 and shifts[0] is None:  # one text without spaces: shift = word index
        return [(s - w, e - w) if w else (s, e) for (s, e), w in zip(encoding.offsets, encoding.word_ids)]
    fixed = []
    for offset, word, sequence in zip(encoding.offsets, encoding.word_ids, encoding.sequence_ids):
        if word is None:
            fixed.append(offset)
        else:
            sequence_shifts = shifts[sequence]
            shift = word if sequence_shifts is None else sequence_shifts[word]
            fixed.append((offset[0] - shift, offset[1] - shift))
    return fixed


def _fixed_encoding(encoding: Encoding, shifts: tuple[list[int] | None, ...]) -> Encoding:
    """`encoding` with `_fixed_offsets` (tokenizers has no setter: through its serialised form)."""
    fixed = _fixed_offsets(encoding, shifts)
    state = encoding.__getstate__()
    start = state.index(b'"offsets":') + len(b'"offsets":')  # serde writes the fields in order: the first is ours
    end = state.index(b',"special_tokens_mask":', start)
    state = b"".join((state[:start], json.dumps(fixed).encode(), state[end:]))  # (tuples are written as arrays)
    overflowing = encoding.overflowing
    if overflowing:  # nested encodings (truncation with overflow): through the JSON
        parsed = json.loads(state)
        parsed["overflowing"] = [json.loads(_fixed_encoding(o, shifts).__getstate__()) for o in overflowing]
        state = json.dumps(parsed).encode()
    result = Encoding()
    result.__setstate__(state)
    return result


class _FixedOnAccess(list):
    """`BatchEncoding.encodings` of the fast route (unless overflowing tokens were asked for): a list whose encodings
    of marked text get their offsets moved back into the input (`_fixed_encoding`) the first time anything reads it.
    `shifts[i]`: the shifts of encoding `i`'s texts, None for an encoding to leave as it is (the Python route).
    `reencode`: when the call encoded marked text without offsets (`Tokenizer.encode_batch_fast`, which leaves
    offsets, tokens and word ids empty), a function giving the full encodings of those texts, in order, encoded
    again as the call did; None when the list holds them already."""

    def __init__(self, encodings: list, shifts: list, reencode: Any = None) -> None:
        super().__init__(encodings)
        # What fixing starts from, one tuple read at once, so two threads reading at once fix the same way
        self._pending = (tuple(encodings), shifts, reencode)

    def _fix(self) -> None:
        pending = self._pending  # None once the list holds the fixed encodings
        if pending is not None:
            marked, shifts, reencode = pending
            if reencode is not None:
                full = iter(reencode())
                marked = tuple(e if s is None else next(full) for e, s in zip(marked, shifts))
            fixed = [e if s is None else _fixed_encoding(e, s) for e, s in zip(marked, shifts)]
            list.__setitem__(self, slice(None), fixed)
            self._pending = None

    def __getitem__(self, index: Any) -> Any:
        self._fix()
        return list.__getitem__(self, index)

    def __iter__(self) -> Iterator[Encoding]:
        self._fix()
        return list.__iter__(self)

    def __reversed__(self) -> Iterator[Encoding]:
        self._fix()
        return list.__reversed__(self)

    def __repr__(self) -> str:
        self._fix()
        return list.__repr__(self)

    def __eq__(self, other: object) -> bool:
        self._fix()
        return list.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __reduce_ex__(self, protocol: Any) -> Any:  # pickles, copies as a plain list of fixed encodings
        self._fix()
        return list, (list(list.__iter__(self)),)

    def copy(self) -> list:
        self._fix()
        return list(list.__iter__(self))

    def pop(self, *args: Any) -> Encoding:
        self._fix()
        return list.pop(self, *args)

    def index(self, *args: Any) -> int:
        self._fix()
        return list.index(self, *args)

    def count(self, value: Any) -> int:
        self._fix()
        return list.count(self, value)

    def __contains__(self, value: Any) -> bool:
        self._fix()
        return list.__contains__(self, value)


def _route_plan(item: Any, marker: _WordMarker, added: re.Pattern[str] | None) -> tuple[Any, tuple] | None:
    """`(marked input, shifts of each of its texts)` for a text or a pair that can take the fast route, else None."""
    texts = (item,) if isinstance(item, str) else item
    if not isinstance(texts, (tuple, list)) or not 1 <= len(texts) <= 2:
        return None
    marks = []
    for text in texts:
        mark = marker(text) if isinstance(text, str) and (added is None or not added.search(text)) else None
        if mark is None:
            return None
        marks.append(mark)
    if len(marks) == 1:
        return marks[0][0], (marks[0][1],)
    return (marks[0][0], marks[1][0]), (marks[0][1], marks[1][1])


def _route_tokenizer(model: Any) -> Tokenizer:
    """The fast route's pipeline for marked text: no normaliser (the marker only takes text the normaliser leaves as
    it is), a split at spaces (the marker isolates every piece), then `model` (the tokenizer's WordPiece)."""
    route = Tokenizer(model)
    route.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return route


def _set_call_settings(
    route: Tokenizer, model: Any, post_processor: Any, truncation: dict | None, padding: dict | None
) -> Tokenizer:
    """`route` with one call's model, template, truncation and padding (~1 µs)."""
    route.model, route.post_processor = model, post_processor
    if truncation is None:
        route.no_truncation()
    else:
        route.enable_truncation(**truncation)
    if padding is None:
        route.no_padding()
    else:
        route.enable_padding(**padding)
    return route


def _pad(encodings: Iterable[Encoding], length: int, padding: dict[str, Any]) -> None:
    """Pad each of `encodings` to `length` with the settings of `Tokenizer.padding`."""
    for encoding in encodings:
        encoding.pad(
            length,
            direction=padding["direction"],
            pad_id=padding["pad_id"],
            pad_type_id=padding["pad_type_id"],
            pad_token=padding["pad_token"],
        )


class _Reencode:
    """Encodes a call's marked texts again, with offsets, as the call did (`_FixedOnAccess`): the route's settings of
    that call, kept, on a pipeline of its own, so a later call that sets up the shared one changes nothing here."""

    def __init__(self, route: Tokenizer, marked: list, add_special_tokens: bool) -> None:
        self.model, self.post_processor = route.model, route.post_processor
        self.truncation, self.padding = route.truncation, route.padding
        self.marked, self.add_special_tokens = marked, add_special_tokens
        self.joint_padding = None  # (length, settings) when padded together with the Python route's encodings

    def __call__(self) -> list[Encoding]:
        route = _route_tokenizer(self.model)
        _set_call_settings(route, self.model, self.post_processor, self.truncation, self.padding)
        encodings = route.encode_batch(self.marked, add_special_tokens=self.add_special_tokens)
        if self.joint_padding is not None:
            _pad(encodings, *self.joint_padding)
        return encodings


class _WordModeBackend:
    """Stands in for the word-mode `tokenizers.Tokenizer` during one `_encode_plus` call: `encode_batch` cuts every
    text with the segmenter in one pass and encodes the marked texts with the fast route's all-Rust pipeline
    (`RoFormerExtTokenizerFast._word_route`), instead of calling the Python pre-tokenizer once per text.
    Everything else goes to the real backend.

    `offsets`, what the call needs of the encodings' offsets: "now" (moved back into the input at once: overflowing
    encodings, which are nested), "later" (the caller moves them back, `shifts`), or "none" (no offsets asked for:
    encoded without them, `Tokenizer.encode_batch_fast`, ~40 % less time; `.encodings` encodes again when first read,
    `reencode`)."""

    def __init__(self, backend: Tokenizer, owner: RoFormerExtTokenizerFast, offsets: str) -> None:
        object.__setattr__(self, "_backend", backend)
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_offsets", offsets)
        # After `encode_batch` unless offsets are moved back at once: per input, the shifts of its texts (None: the
        # Python route), and the `_Reencode` of the marked texts when they were encoded without offsets.
        object.__setattr__(self, "shifts", None)
        object.__setattr__(self, "reencode", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._backend, name, value)

    def encode_batch(self, inputs: Any, add_special_tokens: bool = True, is_pretokenized: bool = False) -> list:
        backend = self._backend
        if is_pretokenized or not isinstance(inputs, (list, tuple)):
            return backend.encode_batch(inputs, add_special_tokens=add_special_tokens, is_pretokenized=is_pretokenized)
        owner = self._owner
        marker, added = owner._word_marker(), owner._added_tokens_pattern()
        plans = [_route_plan(item, marker, added) for item in inputs]
        fast = [index for index, plan in enumerate(plans) if plan is not None]
        if not fast:
            return backend.encode_batch(inputs, add_special_tokens=add_special_tokens)
        slow = [index for index, plan in enumerate(plans) if plan is None]
        padding = backend.padding
        if slow and padding is not None:  # two calls, padded together afterwards as one batch
            backend.no_padding()
        encodings: list[Any] = [None] * len(inputs)
        marked = [plans[i][0] for i in fast]
        try:
            if slow:
                slow_encodings = backend.encode_batch([inputs[i] for i in slow], add_special_tokens=add_special_tokens)
                for index, encoding in zip(slow, slow_encodings):
                    encodings[index] = encoding
            route = owner._word_route(backend)
            if self._offsets == "none":
                fast_encodings = route.encode_batch_fast(marked, add_special_tokens=add_special_tokens)
                reencode = _Reencode(route, marked, add_special_tokens)
                object.__setattr__(self, "reencode", reencode)
            else:
                fast_encodings = route.encode_batch(marked, add_special_tokens=add_special_tokens)
        finally:
            if slow and padding is not None:
                backend.enable_padding(**padding)
        if self._offsets == "now":
            for index, encoding in zip(fast, fast_encodings):
                encodings[index] = _fixed_encoding(encoding, plans[index][1])
        else:
            object.__setattr__(self, "shifts", [None if plan is None else plan[1] for plan in plans])
            for index, encoding in zip(fast, fast_encodings):
                encodings[index] = encoding
        if slow and padding is not None:  # tokenizers' `pad_encodings`
            length = padding["length"] or max(len(encoding.ids) for encoding in encodings)
            multiple = padding["pad_to_multiple_of"]
            if multiple and length % multiple:
                length += multiple - length % multiple
            _pad(encodings, length, padding)
            if self.reencode is not None:
                self.reencode.joint_padding = (length, padding)
        return encodings


class _FromVocabFileMixin:
    @classmethod
    def from_vocab_file(cls, vocab_file: str | os.PathLike, segmenter: str | None = "auto", **kwargs: Any) -> Self:
        """Build from an original checkpoint's `vocab.txt`; `segmenter="auto"` picks the mode from the vocabulary."""
        vocab = load_vocab(vocab_file)
        if segmenter == "auto":
            segmenter = detect_segmenter(vocab)
        return cls(vocab=vocab, segmenter=segmenter, **kwargs)


class RoFormerExtTokenizer(SharedCodeMixin, _FromVocabFileMixin, PythonBackend):
    r"""Pure-Python RoFormer tokenizer (char or jieba-word vocabulary); same tokens as the fast one.

    Args:
        vocab (`str` or `dict[str, int]`, *optional*): a `vocab.txt` path or a token → id mapping.
        vocab_file (`str`, *optional*): the `vocab.txt` path (what `from_pretrained` passes).
        segmenter (`str`, *optional*): `None` for char vocabularies, `"jieba"` for word vocabularies.
        do_lower_case (`bool`, defaults to `True`), tokenize_chinese_chars (`bool`, defaults to `True`),
        strip_accents (`bool`, *optional*, follows `do_lower_case`): as in `BertTokenizer`.
    """

    vocab_files_names = {"vocab_file": "vocab.txt"}
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    def __init__(
        self,
        vocab: str | dict[str, int] | None = None,
        vocab_file: str | None = None,
        segmenter: str | None = None,
        do_lower_case: bool = True,
        unk_token: str = "[UNK]",
        sep_token: str = "[SEP]",
        pad_token: str = "[PAD]",
        cls_token: str = "[CLS]",
        mask_token: str = "[MASK]",
        tokenize_chinese_chars: bool = True,
        strip_accents: bool | None = None,
        **kwargs: Any,
    ) -> None:
        _check_segmenter(segmenter)
        vocab = vocab if vocab is not None else vocab_file
        if vocab is None:
            raise ValueError("RoFormerExtTokenizer needs `vocab` (path or dict) or `vocab_file`.")
        self.vocab = dict(vocab) if isinstance(vocab, dict) else load_vocab(vocab)
        self.ids_to_tokens = {index: token for token, index in self.vocab.items()}
        self.segmenter = segmenter
        self.do_lower_case = do_lower_case
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.strip_accents = strip_accents
        kwargs.pop("tokenizer_file", None)
        super().__init__(
            segmenter=segmenter,
            do_lower_case=do_lower_case,
            unk_token=unk_token,
            sep_token=sep_token,
            pad_token=pad_token,
            cls_token=cls_token,
            mask_token=mask_token,
            tokenize_chinese_chars=tokenize_chinese_chars,
            strip_accents=strip_accents,
            special_tokens_pattern="cls_sep",
            token_type_ids_pattern="bert_style",
            **kwargs,
        )

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab, **self.added_tokens_encoder)

    def _normalize(self, text: str) -> str:
        """The fast tokenizer's BertNormalizer in Python: clean, (space CJK), strip accents, lower-case."""
        cleaned = []
        for char in text:
            if char in "\t\n\r":
                cleaned.append(" ")
            elif char in "\x00\ufffd" or unicodedata.category(char).startswith("C"):
                continue  # controls go before the whitespace test: "\x1c" is both
            else:
                cleaned.append(" " if char.isspace() else char)
        text = "".join(cleaned)
        strip = self.strip_accents if self.strip_accents is not None else self.do_lower_case
        if strip:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        # Char by char as Rust does: `str.lower` would turn a word-final "Σ" into "ς".
        return "".join(c.lower() for c in text) if self.do_lower_case else text

    def _wordpiece(self, word: str) -> list[str]:
        """Greedy longest-match-first; a word with an unmatched piece is one `[UNK]`, as in BERT."""
        if len(word) > MAX_CHARS_PER_WORD:
            return [str(self.unk_token)]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            if end == start:
                return [str(self.unk_token)]
            pieces.append(piece)
            start = end
        return pieces

    @property
    def unknown_char_marker(self) -> str:
        """What stands in for an unassigned code point or a lone surrogate (see `mark_unknown_chars`)."""
        if "_unknown_char_marker" not in self.__dict__:
            self.__dict__["_unknown_char_marker"] = unknown_char_marker(self.vocab)
        return self.__dict__["_unknown_char_marker"]

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        if not (text.isascii() or text.isprintable()):  # the common case skips the marker's vocabulary scan
            text = mark_unknown_chars(text, self.unknown_char_marker)
        text = self._normalize(text)
        if self.segmenter == "jieba":
            if "_word_library" not in self.__dict__:  # chosen once per tokenizer, as the fast class does
                self.__dict__["_word_library"] = word_segmenter()
            spans = word_spans(text, self.vocab, self.tokenize_chinese_chars, self.__dict__["_word_library"])
        else:
            spans = basic_spans(text, self.tokenize_chinese_chars)
        return [piece for a, b in spans for piece in self._wordpiece(text[a:b])]

    def _convert_token_to_id(self, token: str) -> int:
        return self.vocab.get(token, self.vocab.get(str(self.unk_token)))

    def _convert_id_to_token(self, index: int) -> str:
        return self.ids_to_tokens.get(index, str(self.unk_token))

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return " ".join(tokens).replace(" ##", "").strip()

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        return (_write_vocab(self.vocab, save_directory, filename_prefix),)


def _write_vocab(vocab: dict[str, int], save_directory: str, filename_prefix: str | None) -> str:
    """Write `vocab.txt` in id order, so both classes and the original-checkpoint tools can read it."""
    path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "vocab.txt")
    tokens = sorted(vocab, key=vocab.__getitem__)
    if [vocab[token] for token in tokens] != list(range(len(tokens))):
        logger.warning(f"Vocabulary ids are not 0..{len(tokens) - 1} without gaps; {path} renumbers them.")
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(token + "\n" for token in tokens)
    return path


class RoFormerExtTokenizerFast(SharedCodeMixin, _FromVocabFileMixin, TokenizersBackend):
    r"""RoFormer tokenizer backed by 🤗 Tokenizers, for char (`segmenter=None`) or jieba-word vocabularies.

    Offsets (`return_offsets_mapping=True`) are character spans of the input in both modes.

    Args:
        vocab (`str` or `dict[str, int]`, *optional*): a `vocab.txt` path or a token → id mapping.
        vocab_file (`str`, *optional*): the `vocab.txt` path (what `from_pretrained` passes).
        segmenter (`str`, *optional*): `None` for char vocabularies, `"jieba"` for word vocabularies
            (saved in `tokenizer_config.json`).
        do_lower_case (`bool`, defaults to `True`), tokenize_chinese_chars (`bool`, defaults to `True`),
        strip_accents (`bool`, *optional*, follows `do_lower_case`): as in `BertTokenizer`.
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    model = WordPiece
    slow_tokenizer_class = RoFormerExtTokenizer

    def __init__(
        self,
        vocab: str | dict[str, int] | None = None,
        vocab_file: str | None = None,
        segmenter: str | None = None,
        do_lower_case: bool = True,
        unk_token: str = "[UNK]",
        sep_token: str = "[SEP]",
        pad_token: str = "[PAD]",
        cls_token: str = "[CLS]",
        mask_token: str = "[MASK]",
        tokenize_chinese_chars: bool = True,
        strip_accents: bool | None = None,
        **kwargs: Any,
    ) -> None:
        _check_segmenter(segmenter)
        # The pipeline is always rebuilt from the arguments: tokenizer.json's copy is char mode only.
        tokenizer_file = kwargs.pop("tokenizer_file", None)
        vocab = vocab if vocab is not None else vocab_file
        if vocab is None and tokenizer_file is not None:
            with open(tokenizer_file, encoding="utf-8") as handle:
                vocab = json.load(handle)["model"]["vocab"]
        if vocab is None:
            raise ValueError("RoFormerExtTokenizerFast needs `vocab` (path or dict), `vocab_file` or `tokenizer_file`")
        vocab = dict(vocab) if isinstance(vocab, dict) else load_vocab(vocab)
        self.segmenter = segmenter
        self.do_lower_case = do_lower_case
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.strip_accents = strip_accents
        model = WordPiece(vocab, unk_token=str(unk_token), max_input_chars_per_word=MAX_CHARS_PER_WORD)
        set_backend_tokenizer(self, Tokenizer(model))  # transformers 5's way for a tokenizer that builds its own
        self.backend_tokenizer.decoder = decoders.WordPiece(prefix="##")
        self._set_char_pipeline()
        self._set_segmenter()
        super().__init__(
            segmenter=segmenter,
            do_lower_case=do_lower_case,
            unk_token=unk_token,
            sep_token=sep_token,
            pad_token=pad_token,
            cls_token=cls_token,
            mask_token=mask_token,
            tokenize_chinese_chars=tokenize_chinese_chars,
            strip_accents=strip_accents,
            **kwargs,
        )
        cls, sep = str(self.cls_token), str(self.sep_token)
        self.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, self.cls_token_id), (sep, self.sep_token_id)],
        )

    def _set_char_pipeline(self) -> None:
        """BERT's normaliser and pre-tokenizer: char mode itself, and word mode's serialisable stand-in."""
        self.backend_tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True,
            handle_chinese_chars=self.tokenize_chinese_chars,
            strip_accents=self.strip_accents,
            lowercase=self.do_lower_case,
        )
        self.backend_tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()

    def _set_segmenter(self) -> None:
        """Word mode: leave CJK runs whole for jieba, and split them in the Python pre-tokenizer."""
        if self.segmenter != "jieba":
            return
        _import_jieba()
        self.backend_tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=False, strip_accents=self.strip_accents, lowercase=self.do_lower_case
        )
        vocab = self.backend_tokenizer.get_vocab(with_added_tokens=False)
        jieba_pre_tokenizer = _JiebaPreTokenizer(vocab, self.tokenize_chinese_chars)
        self.__dict__["_word_pre_tokenizer"] = jieba_pre_tokenizer
        self.__dict__.pop("_word_marker_cache", None)
        self.__dict__["_word_route_tokenizer"] = _route_tokenizer(self.backend_tokenizer.model)
        self.__dict__.setdefault("_word_route_lock", threading.RLock())
        self.backend_tokenizer.pre_tokenizer = pre_tokenizers.PreTokenizer.custom(jieba_pre_tokenizer)

    @contextlib.contextmanager
    def _serialisable(self) -> Iterator[None]:
        """Swap in the char pipeline while the backend is written out (tokenizer.json, pickle)."""
        self._set_char_pipeline()
        try:
            yield
        finally:
            self._set_segmenter()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for cached in (
            "_word_pre_tokenizer",
            "_word_route_tokenizer",
            "_added_tokens_cache",
            "_word_marker_cache",
            "_word_route_lock",
        ):
            state.pop(cached, None)  # rebuilt by `_set_segmenter` / on first use
        with self._serialisable():
            state["_tokenizer"] = Tokenizer.from_str(self.backend_tokenizer.to_str())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._set_segmenter()

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        return (
            _write_vocab(self.backend_tokenizer.get_vocab(with_added_tokens=False), save_directory, filename_prefix),
        )

    @property
    def unknown_char_marker(self) -> str:
        """What stands in for an unassigned code point or a lone surrogate (see `mark_unknown_chars`)."""
        if "_unknown_char_marker" not in self.__dict__:
            vocab = self.backend_tokenizer.get_vocab(with_added_tokens=False)
            self.__dict__["_unknown_char_marker"] = unknown_char_marker(vocab)
        return self.__dict__["_unknown_char_marker"]

    def _mark_unknown(self, value: Any) -> Any:
        """Texts (a str, a batch, pairs, pre-split words) with unknown code points marked, as the slow class does."""
        if isinstance(value, str):
            if value.isascii() or value.isprintable():  # ordinary text: no copy, no Python loop
                return value
            return mark_unknown_chars(value, self.unknown_char_marker)
        if isinstance(value, (list, tuple)):
            return type(value)(self._mark_unknown(item) for item in value)
        return value  # not text: transformers' checks report it

    #: Word mode's fast route (`_WordModeBackend`); False keeps the Python pre-tokenizer for every text.
    word_fast_route = True

    def _encode_plus(self, text: Any, text_pair: Any = None, **kwargs: Any) -> Any:
        text, text_pair = self._mark_unknown(text), self._mark_unknown(text_pair)
        if self.segmenter != "jieba" or not self.word_fast_route or kwargs.get("is_split_into_words"):
            return parent_encode_plus(super(), text, text_pair=text_pair, **kwargs)
        # Overflowing encodings are fixed at once (they are nested); else `.encodings` when first read, and without
        # offsets asked for, the marked texts are encoded without them (`_WordModeBackend`).
        if kwargs.get("return_overflowing_tokens"):
            offsets = "now"
        else:
            offsets = "later" if kwargs.get("return_offsets_mapping") else "none"
        # The route stands in for `_tokenizer` during the call (`_WordModeBackend`): one call at a time.
        with self.__dict__["_word_route_lock"]:
            route = _WordModeBackend(self.backend_tokenizer, self, offsets)
            with swapped_backend(self, route):
                result = parent_encode_plus(super(), text, text_pair=text_pair, **kwargs)
        encodings = batch_encodings(result)
        if route.shifts is None or encodings is None:
            return result
        if offsets == "later":  # as lists now: cheaper than new encodings
            rows = [e.offsets if s is None else _fixed_offsets(e, s) for e, s in zip(encodings, route.shifts)]
            tensors = kwargs.get("return_tensors")
            if tensors is None and not isinstance(text, (list, tuple)):  # transformers' single-input unbatching
                result["offset_mapping"] = rows[0]
            else:
                result["offset_mapping"] = BatchEncoding({"offset_mapping": rows}, tensor_type=tensors)[
                    "offset_mapping"
                ]
        set_batch_encodings(result, _FixedOnAccess(encodings, route.shifts, route.reencode))
        return result

    def _word_route(self, backend: Tokenizer) -> Tokenizer:
        """The fast route's pipeline (`_set_segmenter`) with `backend`'s model, template, truncation and padding of
        this call (transformers sets them on the backend just before it encodes; copying them costs ~1 µs)."""
        route = self.__dict__["_word_route_tokenizer"]
        return _set_call_settings(route, backend.model, backend.post_processor, backend.truncation, backend.padding)

    def _word_marker(self) -> _WordMarker:
        """The fast route's `_WordMarker` for this tokenizer's vocabulary, normaliser and segmenter."""
        marker = self.__dict__.get("_word_marker_cache")
        if marker is None:
            pre_tokenizer = self.__dict__["_word_pre_tokenizer"]
            normalize = self.backend_tokenizer.normalizer.normalize_str
            marker = _WordMarker(pre_tokenizer.vocab, pre_tokenizer.split_cjk, pre_tokenizer.library, normalize)
            self.__dict__["_word_marker_cache"] = marker
        normalize = self.backend_tokenizer.normalizer.normalize_str
        if marker.normalize.__self__.__getstate__() != normalize.__self__.__getstate__():  # replaced by the user
            marker.forget_normaliser(normalize)
        return marker

    def _added_tokens_pattern(self) -> re.Pattern[str] | None:
        """Any added token's text, as written or normalised, in any case: a text holding one takes the Python
        pre-tokenizer, which sees the pieces between added tokens one by one."""
        backend = self.backend_tokenizer
        contents = tuple(sorted({token.content for token in backend.get_added_tokens_decoder().values()}))
        cached = self.__dict__.get("_added_tokens_cache")
        if cached is None or cached[0] != contents:
            normalize = backend.normalizer.normalize_str
            variants = sorted({v for c in contents for v in (c, normalize(c)) if v}, key=len, reverse=True)
            pattern = re.compile("|".join(map(re.escape, variants)), re.IGNORECASE) if variants else None
            cached = self.__dict__["_added_tokens_cache"] = (contents, pattern)
        return cached[1]

    def _encode_without_added_tokens(self, text: str) -> list[int]:
        return parent_encode_without_added_tokens(super(), self._mark_unknown(text))

    def _save_pretrained(
        self,
        save_directory: str | os.PathLike,
        file_names: tuple[str, ...],
        legacy_format: bool | None = None,
        filename_prefix: str | None = None,
    ) -> tuple[str, ...]:
        with self._serialisable():
            file_names = parent_save_pretrained_files(
                super(), save_directory, file_names, legacy_format, filename_prefix
            )
        return file_names + self.save_vocabulary(str(save_directory), filename_prefix)


# `save_pretrained` then writes `auto_map`, so a saved folder reloads with `trust_remote_code=True`.
RoFormerExtTokenizer.register_for_auto_class("AutoTokenizer")
RoFormerExtTokenizerFast.register_for_auto_class("AutoTokenizer")

__all__ = [
    "RoFormerExtTokenizer",
    "RoFormerExtTokenizerFast",
    "detect_segmenter",
    "load_vocab",
    "mark_unknown_chars",
    "unknown_char_marker",
]
