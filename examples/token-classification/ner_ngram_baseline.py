#!/usr/bin/env python
"""The n-gram baseline for the bundled NER corpus: a linear classifier on each character's n-gram window.

Why: a transformer fine-tuned on MSRA NER should beat what a linear model on the characters around each character
gets on the very same split. Each character is one example. Its features are the characters at offsets -2..+2 and
the character bigrams and trigram around it, hashed. A logistic regression (`SGDClassifier(loss="log_loss")`, one
pass of several epochs) predicts its BMES tag. Tags are predicted independently, so an entity counts only when
every tag of it is right: the same strict entity-level F1 as `run_ner.py` (`common.utils.entity_f1`). The
regularisation strength is chosen on the validation split only; the test split is scored once.

    python examples/token-classification/ner_ngram_baseline.py --output benchmarks/results/msra_ner/ngram_baseline.json

Needs scikit-learn and the `msra-ner` extra.
"""

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/

from common import corpora  # noqa: E402
from common.utils import entity_f1  # noqa: E402

#: The regularisation strengths tried on validation (SGD's alpha: larger is stronger).
ALPHA_GRID = (1e-8, 1e-7, 1e-6, 1e-5)
#: Hashed feature space (2^20 columns: collisions are rare for a few hundred thousand distinct n-grams).
N_FEATURES = 2**20
PAD = "␀"


def char_features(chars: Sequence[str], index: int) -> Iterator[str]:
    """The window features of `chars[index]`: unigrams at -2..+2, bigrams over (-2..+2), the trigram (-1, 0, +1)."""
    window = [chars[i] if 0 <= i < len(chars) else PAD for i in range(index - 2, index + 3)]
    for offset, char in zip(range(-2, 3), window):
        yield f"u{offset}={char}"
    for offset in range(4):
        yield f"b{offset - 2}={window[offset]}{window[offset + 1]}"
    yield f"t={window[1]}{window[2]}{window[3]}"


def sentence_features(sentences: Sequence[Sequence[str]]) -> Iterator[list[str]]:
    for chars in sentences:
        for index in range(len(chars)):
            yield list(char_features(chars, index))


def run_baseline(alpha_grid: tuple[float, ...] = ALPHA_GRID, epochs: int = 5, limit: int | None = None) -> dict:
    """Fit on train for each alpha, keep the best entity F1 on validation, score test once; returns the figures.
    `limit`: use only the first `limit` sentences of each split (a quick check)."""
    try:
        from sklearn.feature_extraction import FeatureHasher
        from sklearn.linear_model import SGDClassifier
    except ImportError as error:
        raise ImportError("The n-gram baseline needs scikit-learn: pip install scikit-learn") from error
    if not alpha_grid:
        raise ValueError("alpha_grid is empty: give at least one alpha to try.")
    start = time.perf_counter()
    raw = corpora.load_example_dataset("msra_ner")
    names = raw["train"].features["ner_tags"].feature.names
    splits = {}
    for split in ("train", "validation", "test"):
        rows = raw[split] if limit is None else raw[split].select(range(min(limit, len(raw[split]))))
        splits[split] = (list(rows["tokens"]), [[names[t] for t in tags] for tags in rows["ner_tags"]])
    hasher = FeatureHasher(n_features=N_FEATURES, input_type="string", alternate_sign=False)
    features = {split: hasher.transform(sentence_features(chars)) for split, (chars, _) in splits.items()}
    y_train = [tag for tags in splits["train"][1] for tag in tags]

    def tag_sentences(model, split: str) -> list[list[str]]:
        flat, out, position = model.predict(features[split]), [], 0
        for chars in splits[split][0]:
            out.append(list(flat[position : position + len(chars)]))
            position += len(chars)
        return out

    by_alpha, models = {}, {}
    for alpha in alpha_grid:
        model = SGDClassifier(loss="log_loss", alpha=alpha, max_iter=epochs, tol=None, random_state=0)
        models[alpha] = model.fit(features["train"], y_train)
        by_alpha[alpha] = entity_f1(tag_sentences(model, "validation"), splits["validation"][1])["f1"]
    best = max(by_alpha, key=lambda a: (by_alpha[a], a))  # ties: the stronger regularisation
    test = entity_f1(tag_sentences(models[best], "test"), splits["test"][1])
    return {
        "dataset": "msra_ner",
        "features": "hashed char unigrams at -2..+2, bigrams, the centre trigram (2^20 columns)",
        "model": f"SGDClassifier(loss='log_loss'), {epochs} epochs, one tag per character",
        "rows": {split: len(chars) for split, (chars, _) in splits.items()},
        "characters_train": len(y_train),
        "validation_entity_f1_by_alpha": by_alpha,
        "alpha": best,
        "eval_f1": by_alpha[best],
        "test_precision": test["precision"],
        "test_recall": test["recall"],
        "test_f1": test["f1"],
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=5, help="SGD passes over the training characters")
    parser.add_argument("--limit", type=int, help="only the first LIMIT sentences of each split (a quick check)")
    parser.add_argument("--output", type=Path, help="Also write the figures to this JSON file.")
    args = parser.parse_args()
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    result = run_baseline(epochs=args.epochs, limit=args.limit)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    print(
        f"validation entity F1 {result['eval_f1']:.4f} (alpha={result['alpha']}), test entity F1 {result['test_f1']:.4f}"
    )
    if args.output:
        args.output.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
