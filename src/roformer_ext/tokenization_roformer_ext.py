"""Tokenizers for RoFormer checkpoints: BERT char vocabularies and jieba word vocabularies.

Char mode is BERT's basic tokenizer (clean, lower-case, strip accents, split punctuation and every
CJK character) followed by WordPiece; it gives the same ids as `transformers.BertTokenizer`.

Word mode (`segmenter="jieba"`) is what WoBERT and the RoFormer v1 word models were trained with
(bert4keras' `Tokenizer(pre_tokenize=lambda s: jieba.cut(s, HMM=False))`): the normalised text is
cut by jieba without HMM; a word found in the vocabulary is one token, any other word falls back
to char mode. The mode is an `__init__` argument, so it is written to `tokenizer_config.json` and
rebuilt on load; `tokenizer.json` only ever holds a serialisable char-mode pipeline, because a
Python pre-tokenizer cannot be serialised (the cause of transformers issue #28164). The fast class's word mode is
tokenizers' own pipeline with a custom pre-tokenizer (`WordSplitter`) in BERT's pre-tokenizer's place.

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
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Self

from tokenizers import Encoding, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece
from transformers import BatchEncoding, PythonBackend, TokenizersBackend
from transformers.tokenization_utils_base import PaddingStrategy, TruncationStrategy
from transformers.utils import logging

from .compat import (
    parent_encode_plus,
    parent_encode_without_added_tokens,
    parent_save_pretrained_files,
    set_backend_tokenizer,
)
from .hub_code import SharedCodeMixin
from .tokenization_words import (
    WordSplitter,
    _check_segmenter,
    _import_jieba,
    basic_spans,
    detect_segmenter,
    load_vocab,
    mark_unknown_chars,
    unknown_char_marker,
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
            if "_word_splitter" not in self.__dict__:  # the library is chosen once per tokenizer, as in the fast class
                self.__dict__["_word_splitter"] = WordSplitter(self.vocab, self.tokenize_chinese_chars)
            spans = self.__dict__["_word_splitter"].spans(text)
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
        splitter = WordSplitter(self.backend_tokenizer.get_vocab(with_added_tokens=False), self.tokenize_chinese_chars)
        self.__dict__["_word_splitter"] = splitter
        self.backend_tokenizer.pre_tokenizer = pre_tokenizers.PreTokenizer.custom(splitter)

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
        state.pop("_word_splitter", None)  # rebuilt by `_set_segmenter`
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

    def _encode_plus(self, text: Any, text_pair: Any = None, **kwargs: Any) -> Any:
        text, text_pair = self._mark_unknown(text), self._mark_unknown(text_pair)
        if self.segmenter == "jieba" and _ROUTE_CALLS.issuperset(kwargs):
            encoded = self._encode_words(text, text_pair, kwargs)
            if encoded is not None:
                return encoded
        return parent_encode_plus(super(), text, text_pair=text_pair, **kwargs)

    def _encode_words(self, text: Any, text_pair: Any, call: dict[str, Any]) -> BatchEncoding | None:
        """Word mode's fast route: what transformers' own path gives for `call`, or None for a call it does not take.

        The texts are normalised and cut here, written with a space between pieces, and encoded by a Rust pipeline
        that splits at spaces (no Python call per text). The `BatchEncoding` holds the same ids and masks, and the
        offsets moved back by the spaces written before each piece; its `.encodings` are those of transformers' own
        path for the same call, encoded when first read. Not taken: overflowing tokens or pre-split words, a text that
        holds an added token, a row longer than `model_max_length` without truncation (transformers warns), offsets
        of a text whose normaliser does not keep each character's place.
        """
        if call.get("return_overflowing_tokens") or call.get("is_split_into_words"):
            return None
        with_offsets = call.get("return_offsets_mapping", False)
        # The inputs as transformers' `_encode_plus` batches them (a single text drops an empty pair)
        texts, pairs = ([text], [text_pair] if text_pair else None) if isinstance(text, str) else (text, text_pair)
        if not _texts(texts) or not (pairs is None or (_texts(pairs) and len(pairs) == len(texts))):
            return None  # transformers' path gives its result or its error
        batch = list(texts) if pairs is None else list(zip(texts, pairs))
        marked = self._marked_words(batch, with_offsets)
        if marked is None:
            return None
        self.set_truncation_and_padding(  # transformers' settings for this call, copied onto the route's pipeline
            padding_strategy=call.get("padding_strategy", PaddingStrategy.DO_NOT_PAD),
            truncation_strategy=call.get("truncation_strategy", TruncationStrategy.DO_NOT_TRUNCATE),
            max_length=call.get("max_length"),
            stride=call.get("stride", 0),
            pad_to_multiple_of=call.get("pad_to_multiple_of"),
            padding_side=call.get("padding_side"),
        )
        backend = self.backend_tokenizer
        route = Tokenizer(backend.model)
        route.pre_tokenizer, route.post_processor = pre_tokenizers.WhitespaceSplit(), backend.post_processor
        if backend.truncation is not None:
            route.enable_truncation(**backend.truncation)
        if backend.padding is not None:
            route.enable_padding(**backend.padding)
        encode = route.encode_batch if with_offsets else route.encode_batch_fast  # (without offsets: ~40 % faster)
        encodings = encode(marked, add_special_tokens=call.get("add_special_tokens", True))
        # transformers' `_convert_encoding` of each row
        type_ids, attention_mask = call.get("return_token_type_ids"), call.get("return_attention_mask")
        data = {"input_ids": [e.ids for e in encodings]}
        if "token_type_ids" in self.model_input_names if type_ids is None else type_ids:
            data["token_type_ids"] = [e.type_ids for e in encodings]
        if "attention_mask" in self.model_input_names if attention_mask is None else attention_mask:
            data["attention_mask"] = [e.attention_mask for e in encodings]
        if call.get("return_special_tokens_mask"):
            data["special_tokens_mask"] = [e.special_tokens_mask for e in encodings]
        if with_offsets:  # piece w starts w characters later in the marked text (`_marked_words`)
            data["offset_mapping"] = [
                [(a, b) if w is None else (a - w, b - w) for (a, b), w in zip(e.offsets, e.word_ids)] for e in encodings
            ]
        if call.get("return_length"):
            data["length"] = [len(ids) for ids in data["input_ids"]]
        limit = self.model_max_length
        if call.get("max_length") is None and call.get("verbose", True) and limit:
            if any(len(ids) > limit for ids in data["input_ids"]):
                return None
        parent = super()  # `.encodings`: transformers' own path for the same call, when first read
        exact = _EncodingsOnDemand(lambda: parent_encode_plus(parent, text, text_pair, **call).encodings, len(batch))
        tensors = call.get("return_tensors")
        if isinstance(text, str) and tensors is None:  # a single input loses its batch axis
            data = {key: value[0] if value and isinstance(value[0], list) else value for key, value in data.items()}
        return BatchEncoding(data, exact, tensor_type=tensors, n_sequences=encodings[0].n_sequences)

    def _marked_words(self, batch: list, with_offsets: bool) -> list | None:
        """Each text of `batch` normalised, cut, and written with a space between pieces (None: a text holds an added
        token, which transformers' path splits off before the pre-tokenizer, or offsets are asked for and could not
        be moved back)."""
        backend = self.backend_tokenizer
        normalize, splitter = backend.normalizer.normalize_str, self.__dict__["_word_splitter"]
        contents = sorted({token.content for token in backend.get_added_tokens_decoder().values()})
        cached = self.__dict__.get("_added_tokens_search")
        if cached is None or cached[0] != contents:
            variants = sorted({v for c in contents for v in (c, normalize(c)) if v}, key=len, reverse=True)
            search = re.compile("|".join(map(re.escape, variants)), re.IGNORECASE).search if variants else None
            cached = self.__dict__["_added_tokens_search"] = (contents, search)
        search = cached[1]
        marked = []
        for item in batch:
            pieces = []
            for text in (item,) if isinstance(item, str) else item:
                normalized = normalize(text)
                if search is not None and (search(text) or search(normalized)):
                    return None
                joined = splitter.joined(normalized)
                # Offsets: piece w of `joined` starts w characters later than in the text when the normaliser keeps
                # each character's place and the pieces and single whitespace characters tile the text (then
                # `joined` is that much longer than the text).
                if with_offsets and not (
                    _same_places(text, normalized, self.do_lower_case)
                    and len(joined) == len(normalized) + len(joined.split()) - 1
                ):
                    return None
                pieces.append(joined)
            marked.append(pieces[0] if len(pieces) == 1 else tuple(pieces))
        return marked

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


#: transformers' `_encode_plus` arguments the word route maps (a call with any other keyword takes transformers' path).
_ROUTE_CALLS = frozenset(
    "add_special_tokens padding_strategy truncation_strategy max_length stride is_split_into_words pad_to_multiple_of "
    "padding_side return_tensors return_token_type_ids return_attention_mask return_overflowing_tokens "
    "return_special_tokens_mask return_offsets_mapping return_length verbose split_special_tokens".split()
)


_SPACES = {code: " " for code in range(0x3001) if chr(code).isspace()}  # what BERT's normaliser makes of them


def _same_places(text: str, normalized: str, lowercase: bool) -> bool:
    """Whether `normalized` is `text` with each character replaced by one character (lower-cased, spaces for other
    whitespace), so that an offset into one is the same offset into the other. Sufficient, not necessary: a text
    it refuses (accents stripped, characters deleted) takes transformers' path."""
    if len(normalized) != len(text):
        return False
    return normalized == text or normalized == (text.lower() if lowercase else text).translate(_SPACES)


def _texts(values: Any) -> bool:
    """A non-empty list or tuple of strings."""
    return isinstance(values, (list, tuple)) and bool(values) and all(isinstance(value, str) for value in values)


class _EncodingsOnDemand(Sequence):
    """`BatchEncoding.encodings` of the word route: `encode()`'s encodings, made when first read (a plain list once
    pickled or copied)."""

    def __init__(self, encode: Callable[[], list[Encoding]], length: int) -> None:
        self._encode, self._length, self._encodings = encode, length, None

    def _all(self) -> list[Encoding]:
        if self._encodings is None:
            self._encodings = self._encode()
        return self._encodings

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __reduce__(self) -> tuple:
        return list, (self._all(),)


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
