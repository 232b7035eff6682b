"""Tokenizers for RoFormer checkpoints: BERT char vocabularies and jieba word vocabularies.

Char mode is BERT's basic tokenizer (clean, lower-case, strip accents, split punctuation and every
CJK character) followed by WordPiece; it gives the same ids as `transformers.BertTokenizer`.

Word mode (`segmenter="jieba"`) is what WoBERT and the RoFormer v1 word models were trained with
(bert4keras' `Tokenizer(pre_tokenize=lambda s: jieba.cut(s, HMM=False))`): the normalised text is
cut by jieba without HMM; a word found in the vocabulary is one token, any other word falls back
to char mode. The mode is an `__init__` argument, so it is written to `tokenizer_config.json` and
rebuilt on load; `tokenizer.json` only ever holds a serialisable char-mode pipeline, because a
Python pre-tokenizer cannot be serialised (the cause of transformers issue #28164).

The fast class does not call the Python pre-tokenizer once per text in word mode: it cuts a call's texts in one pass
and encodes them with an all-Rust pipeline (tokenization_word_route.py); the ids, offsets and word ids are the same
either way. `word_fast_route = False` on an instance turns the route off.

Unknown code points (unassigned in the running Python, lone surrogates) become one `[UNK]` token each in both classes
(`mark_unknown_chars`). The splitting itself (vocabulary files, unknown code points, BERT's basic split, jieba's words
and the choice between rjieba and jieba) is in tokenization_words.py; its names are importable from here too.

This file is copied as Hub remote code with the package files it imports (relative imports only).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import unicodedata
from collections.abc import Iterator
from typing import Any, Self

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece
from transformers import PythonBackend, TokenizersBackend
from transformers.utils import logging

from .compat import (
    parent_encode_plus,
    parent_encode_without_added_tokens,
    parent_save_pretrained_files,
    set_backend_tokenizer,
)
from .hub_code import SharedCodeMixin
from .tokenization_word_route import (
    WordRoute,
    _WordMarker,
)
from .tokenization_words import (
    _check_segmenter,
    _import_jieba,
    _JiebaPreTokenizer,
    basic_spans,
    detect_segmenter,
    load_vocab,
    mark_unknown_chars,
    unknown_char_marker,
    word_segmenter,
    word_spans,
)

logger = logging.get_logger(__name__)

VOCAB_FILES_NAMES = {"vocab_file": "vocab.txt", "tokenizer_file": "tokenizer.json"}
MAX_CHARS_PER_WORD = 100  # BERT's WordPiece limit: longer pieces become [UNK]


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
        self.__dict__["_word_route"] = WordRoute()
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
            "_word_route",
            "_added_tokens_cache",
            "_word_marker_cache",
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

    #: Word mode's fast route (`WordRoute`); False keeps the Python pre-tokenizer for every text.
    word_fast_route = True

    def _encode_plus(self, text: Any, text_pair: Any = None, **kwargs: Any) -> Any:
        text, text_pair = self._mark_unknown(text), self._mark_unknown(text_pair)
        if self.segmenter == "jieba" and self.word_fast_route:
            # The route encodes on pipelines of its own and gives what transformers would (None: a call it does not
            # map, e.g. pre-split words: transformers' own path).
            result = self.__dict__["_word_route"].encode(self, text, text_pair, kwargs)
            if result is not None:
                return result
        return parent_encode_plus(super(), text, text_pair=text_pair, **kwargs)

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
