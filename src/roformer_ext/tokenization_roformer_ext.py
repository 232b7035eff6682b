"""Tokenizers for BERT char vocabularies (`segmenter=None`) and jieba word ones (`segmenter="jieba"`, as bert4keras);
`tokenizer.json` holds only the char pipeline (a Python pre-tokenizer cannot be serialised, transformers #28164)."""

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

MAX_CHARS_PER_WORD = 100  # BERT's WordPiece limit: longer pieces become [UNK]
SPECIAL_TOKENS = dict(unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
OPTIONS = dict(do_lower_case=True, tokenize_chinese_chars=True, strip_accents=None)  # BertTokenizer's, and defaults


class _RoFormerExtTokenizerMixin(SharedCodeMixin):
    """What both classes share: their options, `from_vocab_file`, the unknown-code-point marker, `vocab.txt`."""

    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    @classmethod
    def from_vocab_file(cls, vocab_file: str | os.PathLike, segmenter: str | None = "auto", **kwargs: Any) -> Self:
        """Build from an original checkpoint's `vocab.txt`; `segmenter="auto"` picks the mode from the vocabulary."""
        vocab = load_vocab(vocab_file)
        return cls(vocab=vocab, segmenter=detect_segmenter(vocab) if segmenter == "auto" else segmenter, **kwargs)

    def _set_options(self, vocab: Any, segmenter: str | None, kwargs: dict[str, Any]) -> tuple[dict[str, int], dict]:
        """The vocabulary and the options (taken out of `kwargs`), set on the tokenizer."""
        _check_segmenter(segmenter)
        if vocab is None:
            raise ValueError(f"{type(self).__name__} needs `vocab` (path or dict) or `vocab_file`.")
        options = {name: kwargs.pop(name, default) for name, default in OPTIONS.items()}
        self.__dict__.update(options, segmenter=segmenter)
        return (dict(vocab) if isinstance(vocab, dict) else load_vocab(vocab)), options

    @property
    def unknown_char_marker(self) -> str:
        """What stands in for an unassigned code point or a lone surrogate (see `mark_unknown_chars`)."""
        if "_unknown_char_marker" not in self.__dict__:
            self.__dict__["_unknown_char_marker"] = unknown_char_marker(self._base_vocab())
        return self.__dict__["_unknown_char_marker"]

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        """`vocab.txt` in id order, which both classes and the original-checkpoint tools read."""
        vocab = self._base_vocab()
        path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "vocab.txt")
        tokens = sorted(vocab, key=vocab.__getitem__)
        if [vocab[token] for token in tokens] != list(range(len(tokens))):
            logger.warning(f"Vocabulary ids are not 0..{len(tokens) - 1} without gaps; {path} renumbers them.")
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(token + "\n" for token in tokens)
        return (path,)


class RoFormerExtTokenizer(_RoFormerExtTokenizerMixin, PythonBackend):
    r"""Pure-Python RoFormer tokenizer, same tokens as the fast one: `vocab` (a `vocab.txt` path or a token → id dict)
    or `vocab_file`, `segmenter` (None: chars, "jieba": words), and `BertTokenizer`'s `do_lower_case`,
    `tokenize_chinese_chars` and `strip_accents`."""

    vocab_files_names = {"vocab_file": "vocab.txt"}

    def __init__(
        self, vocab: str | dict | None = None, vocab_file: str | None = None, segmenter=None, **kwargs
    ) -> None:
        self.vocab, options = self._set_options(vocab if vocab is not None else vocab_file, segmenter, kwargs)
        self.ids_to_tokens = {index: token for token, index in self.vocab.items()}
        kwargs.pop("tokenizer_file", None)
        super().__init__(
            segmenter=segmenter,
            special_tokens_pattern="cls_sep",
            token_type_ids_pattern="bert_style",
            **options,
            **{**SPECIAL_TOKENS, **kwargs},
        )

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab, **self.added_tokens_encoder)

    def _base_vocab(self) -> dict[str, int]:
        return self.vocab

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


class RoFormerExtTokenizerFast(_RoFormerExtTokenizerMixin, TokenizersBackend):
    r"""RoFormer tokenizer backed by 🤗 Tokenizers (word mode: the `WordSplitter` pre-tokenizer); as the slow one."""

    vocab_files_names = {"vocab_file": "vocab.txt", "tokenizer_file": "tokenizer.json"}
    model = WordPiece
    slow_tokenizer_class = RoFormerExtTokenizer

    def __init__(
        self, vocab: str | dict | None = None, vocab_file: str | None = None, segmenter=None, **kwargs
    ) -> None:
        # The pipeline is always rebuilt from the arguments: tokenizer.json's copy is char mode only.
        tokenizer_file = kwargs.pop("tokenizer_file", None)
        vocab = vocab if vocab is not None else vocab_file
        if vocab is None and tokenizer_file is not None:
            with open(tokenizer_file, encoding="utf-8") as handle:
                vocab = json.load(handle)["model"]["vocab"]
        vocab, options = self._set_options(vocab, segmenter, kwargs)
        kwargs = {**SPECIAL_TOKENS, **kwargs}
        model = WordPiece(vocab, unk_token=str(kwargs["unk_token"]), max_input_chars_per_word=MAX_CHARS_PER_WORD)
        set_backend_tokenizer(self, Tokenizer(model))  # transformers 5's way for a tokenizer that builds its own
        self.backend_tokenizer.decoder = decoders.WordPiece(prefix="##")
        self._set_pipeline()
        super().__init__(segmenter=segmenter, **options, **kwargs)
        cls, sep = str(self.cls_token), str(self.sep_token)
        self.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, self.cls_token_id), (sep, self.sep_token_id)],
        )

    def _base_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=False)

    def _set_pipeline(self, words: bool = True) -> None:
        """Word mode's pipeline (CJK runs cut by `WordSplitter`), else BERT's (char mode, and `words=False`)."""
        words = words and self.segmenter == "jieba"
        backend = self.backend_tokenizer
        backend.normalizer = normalizers.BertNormalizer(
            clean_text=True,
            handle_chinese_chars=self.tokenize_chinese_chars and not words,
            strip_accents=self.strip_accents,
            lowercase=self.do_lower_case,
        )
        if not words:
            backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            return
        _import_jieba()
        splitter = self.__dict__["_word_splitter"] = WordSplitter(self._base_vocab(), self.tokenize_chinese_chars)
        backend.pre_tokenizer = pre_tokenizers.PreTokenizer.custom(splitter)

    @contextlib.contextmanager
    def _serialisable(self) -> Iterator[None]:
        """Swap in the char pipeline while the backend is written out (tokenizer.json, pickle)."""
        self._set_pipeline(words=False)
        try:
            yield
        finally:
            self._set_pipeline()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_word_splitter", None)  # rebuilt by `_set_pipeline`
        with self._serialisable():
            state["_tokenizer"] = Tokenizer.from_str(self.backend_tokenizer.to_str())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._set_pipeline()

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
        """Word mode's fast route (texts cut here, one Rust call per batch); None where transformers' path answers."""
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
        data = {"input_ids": [e.ids for e in encodings]}
        for key, field in (("token_type_ids", "type_ids"), ("attention_mask",) * 2, ("special_tokens_mask",) * 2):
            wanted = call.get(f"return_{key}")
            if key in self.model_input_names if wanted is None else wanted:
                data[key] = [getattr(e, field) for e in encodings]
        if with_offsets:  # piece w starts w characters later in the marked text (`_marked_words`)
            data["offset_mapping"] = [
                [(a, b) if w is None else (a - w, b - w) for (a, b), w in zip(e.offsets, e.word_ids)] for e in encodings
            ]
        if call.get("return_length"):
            data["length"] = [len(ids) for ids in data["input_ids"]]
        limit = self.model_max_length if call.get("max_length") is None and call.get("verbose", True) else None
        if limit and any(len(ids) > limit for ids in data["input_ids"]):
            return None  # transformers' path warns
        parent = super()  # `.encodings`: transformers' own path for the same call, when first read
        exact = _EncodingsOnDemand(lambda: parent_encode_plus(parent, text, text_pair, **call).encodings, len(batch))
        tensors = call.get("return_tensors")
        if isinstance(text, str) and tensors is None:  # a single input loses its batch axis
            data = {key: value[0] if value and isinstance(value[0], list) else value for key, value in data.items()}
        return BatchEncoding(data, exact, tensor_type=tensors, n_sequences=encodings[0].n_sequences)

    def _marked_words(self, batch: list, with_offsets: bool) -> list | None:
        """Each text normalised, cut and joined by spaces; None if one holds an added token or offsets would move."""
        backend = self.backend_tokenizer
        normalize, splitter = backend.normalizer.normalize_str, self.__dict__["_word_splitter"]
        contents = sorted({token.content for token in backend.get_added_tokens_decoder().values()})
        cached = self.__dict__.get("_added_tokens_search")
        if cached is None or cached[0] != contents:
            variants = sorted({v for c in contents for v in (c, normalize(c)) if v}, key=len, reverse=True)
            search = re.compile("|".join(map(re.escape, variants)), re.IGNORECASE).search if variants else None
            cached = self.__dict__["_added_tokens_search"] = (contents, search)
        search = cached[1]
        marked, lower = [], self.do_lower_case
        for item in batch:
            pieces = []
            for text in (item,) if isinstance(item, str) else item:
                normalized = normalize(text)
                if search is not None and (search(text) or search(normalized)):
                    return None
                joined = splitter.joined(normalized)
                # Offsets: piece w of `joined` starts w characters later when each character kept its place (lower-cased
                # or whitespace a space) and the pieces and single whitespace characters tile the text.
                if with_offsets and not (
                    len(normalized) == len(text)
                    and (normalized == text or normalized == (text.lower() if lower else text).translate(_SPACES))
                    and len(joined) == len(normalized) + len(joined.split()) - 1
                ):
                    return None
                pieces.append(joined)
            marked.append(pieces[0] if len(pieces) == 1 else tuple(pieces))
        return marked

    def _encode_without_added_tokens(self, text: str) -> list[int]:
        return parent_encode_without_added_tokens(super(), self._mark_unknown(text))

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None) -> tuple[str, ...]:
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


def _texts(values: Any) -> bool:
    return isinstance(values, (list, tuple)) and bool(values) and all(isinstance(value, str) for value in values)


class _EncodingsOnDemand(Sequence):
    """The word route's `BatchEncoding.encodings`: `encode()`'s, made when first read (a plain list once pickled)."""

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
