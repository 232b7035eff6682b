#!/usr/bin/env python
"""The n-gram baseline for the bundled classification corpora: character 1-3-gram TF-IDF + logistic regression.

Why: a transformer fine-tuned here should beat what a linear model on character n-grams gets on the very same
split, or it is not worth its cost. The regularisation strength C is chosen on the validation split only; the
test split is scored once, with the chosen C.

    python examples/text-classification/ngram_baseline.py                      # chinese_sentiment
    python examples/text-classification/ngram_baseline.py --dataset statutes

Needs scikit-learn (`pip install scikit-learn`).
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/

from common import corpora  # noqa: E402

#: The C values tried on validation (inverse regularisation strength of the logistic regression).
C_GRID = (0.3, 1.0, 3.0, 10.0, 30.0)
DEMO_SENTENCES = {
    "chinese_sentiment": ["这本书写得非常好，值得一读。", "质量太差了，非常失望。"],
    "rotten_tomatoes": ["A moving, beautifully acted film.", "Dull, predictable and far too long."],
    "statutes": ["犯前款罪的，处三年以下有期徒刑或者拘役。", "纳税人应当依照本法规定缴纳税款。"],
}


def run_baseline(dataset: str, c_grid: tuple[float, ...] = C_GRID, ngram_max: int = 3) -> dict:
    """Fit on train for each C, keep the best on validation, score test once; returns the figures."""
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
    except ImportError as error:
        raise ImportError("The n-gram baseline needs scikit-learn: pip install scikit-learn") from error
    if not c_grid:
        raise ValueError("c_grid is empty: give at least one C value to try.")
    start = time.perf_counter()
    raw = corpora.load_example_dataset(dataset)
    names = raw["train"].features["label"].names
    vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, ngram_max), sublinear_tf=True, min_df=1)
    x_train = vectorizer.fit_transform(raw["train"]["text"])  # fitted on train only
    x_val, x_test = (vectorizer.transform(raw[s]["text"]) for s in ("validation", "test"))
    y_train, y_val, y_test = (list(raw[s]["label"]) for s in ("train", "validation", "test"))
    by_c = {}
    for c in c_grid:
        model = LogisticRegression(C=c, max_iter=2000).fit(x_train, y_train)
        by_c[c] = float((model.predict(x_val) == y_val).mean())
    best_c = max(by_c, key=lambda c: (by_c[c], -c))  # ties: the stronger regularisation
    model = LogisticRegression(C=best_c, max_iter=2000).fit(x_train, y_train)
    demo = DEMO_SENTENCES.get(dataset, [])
    probabilities = model.predict_proba(vectorizer.transform(demo)) if demo else []
    return {
        "dataset": dataset,
        "features": f"char 1-{ngram_max}-gram TF-IDF (sublinear tf), {x_train.shape[1]} features",
        "rows": {s: len(raw[s]) for s in ("train", "validation", "test")},
        "validation_accuracy_by_C": by_c,
        "C": best_c,
        "eval_accuracy": by_c[best_c],
        "test_accuracy": float((model.predict(x_test) == y_test).mean()),
        "demo": [
            {"text": text, "label": names[int(p.argmax())], "score": round(float(p.max()), 3)}
            for text, p in zip(demo, probabilities)
        ],
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dataset", default="chinese_sentiment", choices=("chinese_sentiment", "rotten_tomatoes", "statutes")
    )
    parser.add_argument("--output", type=Path, help="Also write the figures to this JSON file.")
    args = parser.parse_args()
    result = run_baseline(args.dataset)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    print(
        f"validation accuracy {result['eval_accuracy']:.4f} (C={result['C']}), test accuracy {result['test_accuracy']:.4f}"
    )
    if args.output:
        args.output.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
