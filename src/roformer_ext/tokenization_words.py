"""How word and char mode cut text before WordPiece: BERT's basic split, and jieba's words (HMM off) from `rjieba`
when installed unless `ROFORMER_EXT_WORD_SEGMENTER=jieba` (e.g. after `jieba.add_word`)."""

import functools
import os
import re
import unicodedata
from collections.abc import Container, Iterable, Iterator
from types import ModuleType

from tokenizers import NormalizedString, PreTokenizedString

SEGMENTERS = ("jieba",)
# A char vocabulary has almost no multi-character CJK entries, a word vocabulary tens of thousands.
WORD_VOCAB_MIN_FRACTION = 0.01
_DIRECT_SLICE_CHARS = 64  # pieces up to this many chars are sliced word by word; longer ones are halved first
_MAX_KNOWN_WORDS = 1 << 19  # words whose pieces a `WordSplitter` remembers

#: Stand-ins put first for a code point Python calls unassigned (Cn) or a lone surrogate (Cs) (tokenizers' Unicode
#: tables differ; Rust strings hold no surrogate): old punctuation both pre-tokenizers split off and no normaliser changes.
_UNKNOWN_MARKERS = ("\u2e2e", "\u2e18", "\ua673", "\u1368", "\u1801", "\U00010100", "\u0f14", "\u17d8")
_UNKNOWN_CATEGORIES = ("Cn", "Cs")


@functools.cache
def _suspect_chars() -> re.Pattern[str]:
    """Every BMP code point of an unknown category here, and all astral ones (checked per match: faster)."""
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
    """`text` with each unassigned code point or lone surrogate replaced by `marker` (offsets stay valid)."""
    if text.isascii() or text.isprintable():
        return text
    suspects = _suspect_chars().finditer(text)  # BMP unknowns, and astral chars such as emoji to look up
    if not any(unicodedata.category(match.group()) in _UNKNOWN_CATEGORIES for match in suspects):
        return text
    return _suspect_chars().sub(
        lambda match: marker if unicodedata.category(match.group()) in _UNKNOWN_CATEGORIES else match.group(), text
    )


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
    """BERT's "Chinese character", with tokenizers' ranges (Extension E from 0x2B920), so both classes agree."""
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


def detect_segmenter(vocab: dict[str, int] | str | os.PathLike) -> str | None:
    """`"jieba"` for a word vocabulary (many multi-character CJK entries), `None` for a char one."""
    tokens = load_vocab(vocab) if not isinstance(vocab, dict) else vocab
    words = sum(1 for token in tokens if len(token) > 1 and all(map(_is_cjk, token)))
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


WORD_SEGMENTER_ENV = "ROFORMER_EXT_WORD_SEGMENTER"  # "rjieba" or "jieba"; unset: rjieba when installed


def word_segmenter() -> str:
    """ "rjieba" or "jieba": the library word mode uses now (read at each tokenizer's construction)."""
    choice = os.environ.get(WORD_SEGMENTER_ENV, "").strip().lower()
    if choice not in ("", "rjieba", "jieba"):
        raise ValueError(f"{WORD_SEGMENTER_ENV}={choice!r}: set it to 'rjieba' or 'jieba', or leave it unset.")
    if choice != "jieba":
        try:
            import rjieba  # noqa: F401

            return "rjieba"
        except ImportError as error:
            if choice == "rjieba":
                hint = "pip install rjieba (or, in the roformer-ext clone, pip install -e '.[word]')"
                raise ImportError(f"{WORD_SEGMENTER_ENV}=rjieba needs rjieba: {hint}.") from error
    return "jieba"


@functools.cache
def _word_cut(library: str):
    """`text -> [word, ...]` of `library` with HMM off; the words tile the text."""
    if library == "rjieba":
        import rjieba

        return functools.partial(rjieba.cut, hmm=False)
    return functools.partial(_import_jieba().lcut, HMM=False)


def basic_spans(text: str, split_cjk: bool = True) -> Iterator[tuple[int, int]]:
    """Character spans of BERT's basic split: whitespace separates, punctuation (and CJK) chars stand alone."""
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


class WordSplitter:
    """Word mode's cut (bert4keras'): jieba's words in `vocab` stay whole, others take BERT's basic split; also the
    fast class's pre-tokenizer."""

    def __init__(self, vocab: Container[str], split_cjk: bool = True, library: str | None = None) -> None:
        self.vocab, self.split_cjk = vocab, split_cjk
        self.library = library or word_segmenter()
        self._pieces: dict[str, tuple[tuple[int, int], ...]] = {}  # word -> its pieces' spans in the word
        self._joined: dict[str, str] = {}  # word -> its pieces joined by spaces

    def __reduce__(self) -> tuple:  # pickled without the per-word caches
        return type(self), (self.vocab, self.split_cjk, self.library)

    def _word_pieces(self, word: str) -> tuple[tuple[int, int], ...]:
        pieces = self._pieces.get(word)
        if pieces is None:
            pieces = ((0, len(word)),) if word in self.vocab else tuple(basic_spans(word, self.split_cjk))
            if len(self._pieces) < _MAX_KNOWN_WORDS:
                self._pieces[word] = pieces
                self._joined[word] = " ".join([word[a:b] for a, b in pieces])
        return pieces

    def joined(self, text: str) -> str:
        """`text` (normalised) with a space between every two pieces."""
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
        """The pieces as slices of `normalized`, halving the text first: tokenizers slices from the string's start."""
        text = str(normalized)
        spans, pieces = self.spans(text), []

        def cut(piece: NormalizedString, offset: int, size: int, lo: int, hi: int) -> None:
            if size <= _DIRECT_SLICE_CHARS or hi - lo < 2:
                pieces.extend(
                    piece[a - offset] if b - a == 1 else piece[(a - offset, b - offset)] for a, b in spans[lo:hi]
                )
                return
            middle = (lo + hi) // 2
            split = spans[middle][0] - offset
            cut(piece[(0, split)], offset, split, lo, middle)
            cut(piece[(split, size)], offset + split, size - split, middle, hi)

        cut(normalized, 0, len(text), 0, len(spans))
        return pieces

    def pre_tokenize(self, pretok: PreTokenizedString) -> None:
        pretok.split(self._split)
