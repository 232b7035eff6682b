"""Word mode's fast route in the fast tokenizer: the texts of one call cut by the segmenter in one pass, written with
a space between pieces, and encoded by an all-Rust pipeline instead of the Python pre-tokenizer once per text.

`RoFormerExtTokenizerFast._encode_plus` hands each call to a `WordRoute`, a plain object that encodes with
`tokenizers.Tokenizer`'s public API and gives the `BatchEncoding` transformers' `_encode_plus` would give (the
truncation and padding transformers would set on the backend: `_truncation`, `_padding`; its conversion to lists:
`encoding_lists`). It normalises each text char by char, cuts it with the segmenter, writes it with a space between
pieces (`_WordMarker`), encodes the batch with a prepared Rust `Tokenizer` of its own (no normaliser, a split at
spaces, the same WordPiece and template: `_route_tokenizer`), and moves the offsets back into the input
(`_fixed_offsets`). Without offsets asked for it encodes without them, and `.encodings` encodes again, with them, when
first read (`_FixedOnAccess`, `_Reencode`). Texts where that could differ (the normaliser deletes a character or makes
several of one, they hold an added token, a piece holds punctuation) keep the Python pre-tokenizer, on a pipeline of
the route's too (`_python_route_tokenizer`); the ids, offsets and word ids are the same either way
(tests/tokenization/test_word_fast_route.py). Each thread has its own pipelines, and the tokenizer's backend is only
read: no swap, no lock.
"""

from __future__ import annotations

import json
import re
import threading
import unicodedata
from collections.abc import Container, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tokenizers import AddedToken, Encoding, Tokenizer, pre_tokenizers
from transformers import BatchEncoding
from transformers.tokenization_utils_base import PaddingStrategy, TruncationStrategy

from .compat import warn_too_long_sequence
from .tokenization_words import _cjk_pattern, _word_cut, basic_spans

if TYPE_CHECKING:
    from .tokenization_roformer_ext import RoFormerExtTokenizerFast


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

    def _learn(self, words: list[str], tuples: dict, joined: dict) -> None:
        """Add `words` to `tuples` and `joined` (the caller's view of the caches: a full cache is replaced for later
        calls, never emptied under a call that reads it in another thread)."""
        if len(tuples) > 1_000_000:
            self.tuples, self.joined = {}, {}
        for word in words:
            if word not in tuples:
                elements = self._elements(word)
                tuples[word] = False if elements is None else elements
                if elements is not None:
                    joined[word] = " ".join(elements)

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
        tuples, known = self.tuples, self.joined  # one view of the caches for the whole call (threads share them)
        joined = [*map(known.get, words)]
        if None in joined:  # a word not seen yet, or one that cannot take the route
            self._learn(words, tuples, known)
            joined = [*map(known.get, words)]
            if None in joined:
                return None
        if sum(map(len, words)) != len(text):  # (the words do not tile the text)
            return None
        if " " not in text:  # no run of spaces between pieces: piece k has k spaces before it
            return " ".join(joined), None
        elements = [element for word in words for element in tuples[word]]
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


#: transformers' `_encode_plus` arguments the route maps (a call with any other keyword takes transformers' own path).
_CALL_ARGUMENTS = frozenset(
    {
        "add_special_tokens",
        "padding_strategy",
        "truncation_strategy",
        "max_length",
        "stride",
        "is_split_into_words",
        "pad_to_multiple_of",
        "padding_side",
        "return_tensors",
        "return_token_type_ids",
        "return_attention_mask",
        "return_overflowing_tokens",
        "return_special_tokens_mask",
        "return_offsets_mapping",
        "return_length",
        "verbose",
        "split_special_tokens",
    }
)


def _batch_inputs(text: Any, text_pair: Any) -> tuple[list, bool] | None:
    """`(inputs, is_batched)` as transformers' `_encode_plus` makes them (a text, or a `(text, pair)` tuple, per
    input), or None for anything but texts (pre-split words, an empty batch, mismatched pairs): transformers' own
    path then encodes it, or raises its own error."""
    if isinstance(text, str):
        if text_pair is not None and not isinstance(text_pair, str):
            return None
        return ([(text, text_pair)] if text_pair else [text]), False
    if not isinstance(text, (list, tuple)) or not text or not all(isinstance(t, str) for t in text):
        return None
    if text_pair is None:
        return list(text), True
    if not isinstance(text_pair, (list, tuple)) or len(text_pair) != len(text):
        return None
    if not all(isinstance(t, str) for t in text_pair):
        return None
    return list(zip(text, text_pair)), True


def _truncation(owner: Any, call: dict[str, Any]) -> dict[str, Any] | None:
    """The truncation transformers' `set_truncation_and_padding` gives the backend for `call` (None: none)."""
    strategy = call.get("truncation_strategy", TruncationStrategy.DO_NOT_TRUNCATE)
    if strategy == TruncationStrategy.DO_NOT_TRUNCATE:
        return None
    return {
        "max_length": call.get("max_length"),
        "stride": call.get("stride", 0),
        "strategy": TruncationStrategy(strategy).value,
        "direction": owner.truncation_side,
    }


def _padding(owner: Any, call: dict[str, Any]) -> dict[str, Any] | None:
    """The padding transformers' `set_truncation_and_padding` gives the backend for `call` (None: none)."""
    strategy = call.get("padding_strategy", PaddingStrategy.DO_NOT_PAD)
    if strategy == PaddingStrategy.DO_NOT_PAD:
        return None
    side = call.get("padding_side")
    return {
        "length": call.get("max_length") if strategy == PaddingStrategy.MAX_LENGTH else None,
        "direction": side if side is not None else owner.padding_side,
        "pad_id": owner.pad_token_id,
        "pad_token": owner.pad_token,
        "pad_type_id": owner.pad_token_type_id,
        "pad_to_multiple_of": call.get("pad_to_multiple_of"),
    }


def _added_tokens_key(added: dict[int, AddedToken]) -> tuple:
    return tuple(
        (i, t.content, t.single_word, t.lstrip, t.rstrip, t.normalized, t.special) for i, t in sorted(added.items())
    )


def _python_route_tokenizer(backend: Tokenizer) -> Tokenizer | None:
    """A pipeline of its own with `backend`'s normaliser, Python pre-tokenizer, model and added tokens (the route for
    texts the marker refuses), or None when the added tokens do not come back with their ids."""
    clone = Tokenizer(backend.model)
    clone.normalizer = backend.normalizer  # before the added tokens: their normalised forms are made with it
    added = backend.get_added_tokens_decoder()
    for index in sorted(added):
        token = added[index]
        (clone.add_special_tokens if token.special else clone.add_tokens)([token])
    if _added_tokens_key(clone.get_added_tokens_decoder()) != _added_tokens_key(added):
        return None
    return clone


def encoding_lists(
    rows: list[Encoding], fields: tuple[bool, bool, bool, bool, bool], offsets: list | None = None
) -> dict[str, list]:
    """transformers' `_convert_encoding` for every row at once: `input_ids`, then (as `fields` say) `token_type_ids`,
    `attention_mask`, `special_tokens_mask`, `offset_mapping` (`offsets` when given, else the rows'), `length`."""
    type_ids, attention_mask, special_tokens_mask, with_offsets, length = fields
    data = {"input_ids": [e.ids for e in rows]}
    if type_ids:
        data["token_type_ids"] = [e.type_ids for e in rows]
    if attention_mask:
        data["attention_mask"] = [e.attention_mask for e in rows]
    if special_tokens_mask:
        data["special_tokens_mask"] = [e.special_tokens_mask for e in rows]
    if with_offsets:
        data["offset_mapping"] = offsets if offsets is not None else [e.offsets for e in rows]
    if length:
        data["length"] = [len(ids) for ids in data["input_ids"]]
    return data


class WordRoute:
    """Word mode's fast route as a plain object: `encode(tokenizer, text, text_pair, call)` gives the `BatchEncoding`
    transformers' `_encode_plus` would give for that call, encoding with `tokenizers.Tokenizer`'s public API.

    The texts the marker takes (`_WordMarker`, `_route_plan`) go through the route's pipeline (`_route_tokenizer`)
    as marked text; the others through a pipeline with the tokenizer's normaliser, Python pre-tokenizer and added
    tokens (`_python_route_tokenizer`). Each thread has its own two pipelines, set up for each call with the
    truncation and padding transformers would set on the backend (`_truncation`, `_padding`), so threads never share
    a pipeline whose settings change and the tokenizer's own backend is only read. None for a call the route does
    not map (pre-split words, other inputs or keywords): the caller takes transformers' own path.
    """

    def __init__(self) -> None:
        self._local = threading.local()  # .route: the marked-text pipeline; .python: (key, pipeline)

    def route_pipeline(self, backend: Tokenizer, truncation: dict | None, padding: dict | None) -> Tokenizer:
        """This thread's marked-text pipeline with `backend`'s model and template, `truncation` and `padding`."""
        route = getattr(self._local, "route", None)
        if route is None:
            route = self._local.route = _route_tokenizer(backend.model)
        return _set_call_settings(route, backend.model, backend.post_processor, truncation, padding)

    def python_pipeline(
        self, backend: Tokenizer, split_special_tokens: bool, truncation: dict | None, padding: dict | None
    ) -> Tokenizer | None:
        """This thread's Python pre-tokenizer pipeline, rebuilt when the added tokens or the normaliser changed."""
        key = (_added_tokens_key(backend.get_added_tokens_decoder()), backend.normalizer.__getstate__())
        cached = getattr(self._local, "python", None)
        if cached is None or cached[0] != key:
            cached = self._local.python = (key, _python_route_tokenizer(backend))
        python = cached[1]
        if python is None:
            return None
        python.pre_tokenizer = backend.pre_tokenizer
        python.encode_special_tokens = split_special_tokens
        return _set_call_settings(python, backend.model, backend.post_processor, truncation, padding)

    def encode(self, owner: RoFormerExtTokenizerFast, text: Any, text_pair: Any, call: dict[str, Any]) -> Any:
        if call.get("is_split_into_words") or not _CALL_ARGUMENTS.issuperset(call):
            return None
        batch = _batch_inputs(text, text_pair)
        if batch is None:
            return None
        inputs, is_batched = batch
        backend = owner.backend_tokenizer
        marker, added = owner._word_marker(), owner._added_tokens_pattern()
        plans = [_route_plan(item, marker, added) for item in inputs]
        fast = [index for index, plan in enumerate(plans) if plan is not None]
        slow = [index for index, plan in enumerate(plans) if plan is None]
        truncation, padding = _truncation(owner, call), _padding(owner, call)
        joint_padding = padding if fast and slow else None  # two calls, padded together afterwards as one batch
        each_padding = None if joint_padding else padding
        add_special_tokens = call.get("add_special_tokens", True)
        overflow = call.get("return_overflowing_tokens", False)
        with_offsets = call.get("return_offsets_mapping", False)
        encodings: list[Any] = [None] * len(inputs)
        if slow:
            split = call.get("split_special_tokens")
            split = owner.split_special_tokens if split is None else split
            python = self.python_pipeline(backend, split, truncation, each_padding)
            if python is None:
                return None
            slow_encodings = python.encode_batch([inputs[i] for i in slow], add_special_tokens=add_special_tokens)
            for index, encoding in zip(slow, slow_encodings):
                encodings[index] = encoding
        reencode = None
        if fast:
            route = self.route_pipeline(backend, truncation, each_padding)
            marked = [plans[i][0] for i in fast]
            if overflow or with_offsets:
                fast_encodings = route.encode_batch(marked, add_special_tokens=add_special_tokens)
            else:  # no offsets asked for: without them (~40 % less time); `.encodings` encodes again when first read
                fast_encodings = route.encode_batch_fast(marked, add_special_tokens=add_special_tokens)
                reencode = _Reencode(route, marked, add_special_tokens)
            for index, encoding in zip(fast, fast_encodings):
                # overflowing encodings are nested: their offsets are moved back at once
                encodings[index] = _fixed_encoding(encoding, plans[index][1]) if overflow else encoding
        if joint_padding is not None:  # tokenizers' `pad_encodings`
            length = joint_padding["length"] or max(len(encoding.ids) for encoding in encodings)
            multiple = joint_padding["pad_to_multiple_of"]
            if multiple and length % multiple:
                length += multiple - length % multiple
            _pad(encodings, length, joint_padding)
            if reencode is not None:
                reencode.joint_padding = (length, joint_padding)
        return self._batch_encoding(owner, encodings, plans, reencode, is_batched, call)

    @staticmethod
    def _batch_encoding(
        owner: RoFormerExtTokenizerFast, encodings: list, plans: list, reencode: Any, is_batched: bool, call: dict
    ) -> BatchEncoding:
        """transformers' conversion of a call's encodings: lists per field, overflow as extra rows with
        `overflow_to_sample_mapping`, the too-long warning, tensors, and a single input's batch axis removed."""
        overflow = call.get("return_overflowing_tokens", False)
        with_offsets = call.get("return_offsets_mapping", False)
        type_ids, attention_mask = call.get("return_token_type_ids"), call.get("return_attention_mask")
        fields = (
            "token_type_ids" in owner.model_input_names if type_ids is None else type_ids,
            "attention_mask" in owner.model_input_names if attention_mask is None else attention_mask,
            call.get("return_special_tokens_mask", False),
            with_offsets,
            call.get("return_length", False),
        )
        shifts = [None if plan is None else plan[1] for plan in plans]
        routed = any(shift is not None for shift in shifts)
        if overflow:
            rows, mapping = [], []
            for index, encoding in enumerate(encodings):
                group = [encoding, *encoding.overflowing]
                rows += group
                mapping += [index] * len(group)
            data = encoding_lists(rows, fields)
            data["overflow_to_sample_mapping"] = mapping
            kept = rows
        else:
            offsets = None
            if with_offsets and routed:
                offsets = [e.offsets if s is None else _fixed_offsets(e, s) for e, s in zip(encodings, shifts)]
            data = encoding_lists(encodings, fields, offsets)
            kept = _FixedOnAccess(encodings, shifts, reencode) if routed else encodings
        max_length, verbose = call.get("max_length"), call.get("verbose", True)
        limit = owner.model_max_length
        if max_length is None and verbose and limit:
            for ids in data["input_ids"]:
                if len(ids) > limit:
                    warn_too_long_sequence(owner, ids, max_length, verbose)
        n_sequences = encodings[0].n_sequences  # (from the list held, so reading it fixes nothing)
        tensors = call.get("return_tensors")
        if not is_batched and tensors is None and not overflow:
            data = {key: (value[0] if value and isinstance(value[0], list) else value) for key, value in data.items()}
        return BatchEncoding(data, kept, tensor_type=tensors, n_sequences=n_sequences)
