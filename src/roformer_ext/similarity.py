"""RoFormer-Sim: similar sentences in one call (bert4keras' `gen_synonyms`), folders sentence-transformers loads."""

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from .tokenization_words import _is_cjk

#: bert4keras' `maxlen` in RoFormer-Sim's generate.py: the source is cut to it, and so is each generated sentence.
SIM_MAX_LENGTH = 64

#: The sampler of `gen_synonyms` (bert4keras `random_sample(..., topp=0.95)`): nucleus sampling without top-k.
SIM_SAMPLING = {"do_sample": True, "top_p": 0.95, "top_k": 0}

#: sentence-transformers 6 reads these files; the Transformer module returns the model's own `pooler_output`.
SENTENCE_TRANSFORMERS_FILES = {
    "modules.json": [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"}
    ],
    "sentence_bert_config.json": {
        "transformer_task": "feature-extraction",
        "modality_config": {"text": {"method": "forward", "method_output_name": "pooler_output"}},
        "module_output_name": "sentence_embedding",
    },
    "config_sentence_transformers.json": {"model_type": "SentenceTransformer", "similarity_fn_name": "cosine"},
}


class SimilarSentence(NamedTuple):
    """One generated sentence and its cosine similarity to the source."""

    text: str
    score: float


def has_pooler(model: PreTrainedModel) -> bool:
    """Whether the model's encoder computes `pooler_output` (RoFormer-Sim's embedding)."""
    return getattr(model.base_model, "pooler", None) is not None


def write_sentence_transformers_config(folder: str | os.PathLike) -> None:
    """Write the sentence-transformers files into a saved folder (no weights copied: both read the same pooler)."""
    folder = Path(folder)
    for name, content in SENTENCE_TRANSFORMERS_FILES.items():
        (folder / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")


def save_for_sentence_transformers(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: str | os.PathLike
) -> Path:
    """Save a roformer-ext model with a pooler and `tokenizer` so that `SentenceTransformer(folder)` gives its
    `pooler_output`."""
    if not isinstance(model, PreTrainedModel) or model.config.model_type not in ("roformer_ext", "roformer_ext_vision"):
        raise TypeError(f"model must be a roformer-ext model, got {type(model).__name__}.")
    if not has_pooler(model):
        raise ValueError(
            f"{type(model).__name__} has no pooler, so it has no Sim embedding: build it with "
            "pooler_activation='linear' (RoFormer-Sim) or 'tanh', or save the AutoModel / AutoModelForMaskedLM of a "
            "Sim folder (AutoModelForCausalLM drops the pooler)."
        )
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_sentence_transformers_config(folder)
    return folder


def _sim_generation_defaults(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """Stop at [SEP], pad with [PAD], at most 64 new tokens (bert4keras)."""
    return dict(eos_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id, max_new_tokens=SIM_MAX_LENGTH)


def sim_generation_config(tokenizer: PreTrainedTokenizerBase) -> GenerationConfig:
    """A converted Sim generator's defaults."""
    return GenerationConfig(**_sim_generation_defaults(tokenizer))


def join_cjk(text: str) -> str:
    """Drop the spaces `decode` puts next to CJK characters and punctuation ("今 天" -> "今天"), as bert4keras."""

    def cjk(char: str) -> bool:
        return bool(char) and (_is_cjk(char) or 0x3000 <= ord(char) <= 0x303F or 0xFF00 <= ord(char) <= 0xFFEF)

    return re.sub(r" (?=\S)", lambda m: "" if cjk(text[m.start() - 1 : m.start()]) or cjk(text[m.end()]) else " ", text)


class SimilarSentenceGenerator:
    """bert4keras' `gen_synonyms`: `generator` (UniLM) samples n sentences, `encoder`'s `pooler_output` keeps the k
    closest: `SimilarSentenceGenerator.from_pretrained("roformer-sim-base")("广州和深圳哪个好？", n=100, k=20)`."""

    def __init__(
        self, generator: PreTrainedModel, encoder: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
    ) -> None:
        config = generator.config
        if not getattr(config, "is_decoder", False) or getattr(config, "decoder_attention", None) != "unilm":
            raise ValueError(
                "generator must be a UniLM decoder: load it with AutoModelForCausalLM.from_pretrained(folder, "
                "decoder_attention='unilm') (a converted Sim folder sets decoder_attention='unilm' already)."
            )
        if not has_pooler(encoder):
            raise ValueError(
                "encoder has no pooler, so it gives no Sim embedding: load it with AutoModel.from_pretrained(folder) "
                "from a Sim or Sim-FT folder (their config sets pooler_activation='linear')."
            )
        if tokenizer.sep_token_id is None:
            raise ValueError(
                "tokenizer has no [SEP] token, which ends a generated sentence; use the Sim folder's tokenizer."
            )
        self.generator, self.encoder, self.tokenizer = generator, encoder, tokenizer

    @classmethod
    def from_pretrained(
        cls, generator_path: str | os.PathLike, encoder_path: str | os.PathLike | None = None, **kwargs: Any
    ) -> "SimilarSentenceGenerator":
        """Load generator and encoder (`encoder_path` defaults to `generator_path`); `kwargs` go to both."""
        from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

        generator = AutoModelForCausalLM.from_pretrained(generator_path, decoder_attention="unilm", **kwargs)
        encoder = AutoModel.from_pretrained(encoder_path or generator_path, **kwargs)
        return cls(generator.eval(), encoder.eval(), AutoTokenizer.from_pretrained(generator_path))

    def __call__(
        self,
        texts: str | Sequence[str],
        n: int = 100,
        k: int = 20,
        max_length: int = SIM_MAX_LENGTH,
        batch_size: int = 64,
        **generate_kwargs: Any,
    ) -> list[SimilarSentence] | list[list[SimilarSentence]]:
        """For each text the `k` of `n` sampled candidates most similar to it (cosine), best first; a list per text."""
        single = isinstance(texts, str)
        texts = [texts] if single else texts
        if not isinstance(texts, Sequence) or not texts or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a string or a non-empty list of strings.")
        for name, value in (("n", n), ("k", k), ("max_length", max_length), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        candidates = [self.candidates(text, n, max_length, **generate_kwargs) for text in texts]
        embeddings = self.embed(list(texts) + [c for found in candidates for c in found], max_length, batch_size)
        results, offset = [], len(texts)
        for index, found in enumerate(candidates):
            scores = embeddings[offset : offset + len(found)] @ embeddings[index]
            offset += len(found)
            order = torch.sort(scores, descending=True, stable=True).indices[:k]
            results.append([SimilarSentence(found[i], float(scores[i])) for i in order.tolist()])
        return results[0] if single else results

    def candidates(self, text: str, n: int, max_length: int = SIM_MAX_LENGTH, **generate_kwargs: Any) -> list[str]:
        """`n` sampled continuations of `text` as segment 1, decoded; without the source, duplicates or empties."""
        source = self.tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
        source = source.to(self.generator.device)
        settings = {**SIM_SAMPLING, **_sim_generation_defaults(self.tokenizer), "num_return_sequences": n}
        settings.update(generate_kwargs)
        output = self.generator.generate(**source, **settings)
        source_ids = source["input_ids"][0, 1:-1].tolist()  # without [CLS] and [SEP]
        seen = {text, join_cjk(self.tokenizer.decode(source_ids))}
        found = []
        for row in output[:, source["input_ids"].shape[1] :].tolist():
            if settings["eos_token_id"] in row:
                row = row[: row.index(settings["eos_token_id"])]
            sentence = join_cjk(self.tokenizer.decode(row, skip_special_tokens=True)).strip()
            if sentence and sentence not in seen:
                seen.add(sentence)
                found.append(sentence)
        return found

    @torch.no_grad()
    def embed(self, texts: Sequence[str], max_length: int = SIM_MAX_LENGTH, batch_size: int = 64) -> torch.Tensor:
        """L2-normalised Sim embeddings (`pooler_output`) of `texts`, (len(texts), hidden), in batches."""
        chunks = []
        for start in range(0, len(texts), batch_size):
            batch = list(texts[start : start + batch_size])
            batch = self.tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            chunks.append(self.encoder(**batch.to(self.encoder.device), return_dict=True).pooler_output.float())
        if not chunks:
            return torch.empty(0, self.encoder.config.hidden_size)
        return torch.nn.functional.normalize(torch.cat(chunks), dim=-1).cpu()
