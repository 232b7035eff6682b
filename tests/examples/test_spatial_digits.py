"""examples/vision-text/run_spatial_digits.py: question generator correctness, and a tiny end-to-end run per scheme."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, Features, Image
from test_examples import card_metadata, load_script, run
from transformers import AutoModelForSequenceClassification, AutoProcessor

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "vision-text" / "run_spatial_digits.py"


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


KNOWN = np.array([[7, 2, 7], [4, 0, 5], [1, 4, 9]])


def test_reference_solver_on_a_known_grid(script):
    expected = {
        "in row 1, column 1": {7}, "in row 2, column 3": {5}, "in row 3, column 2": {4}, "left of the 0": {4},
        "right of the 0": {5}, "above the 0": {2}, "below the 0": {4}, "below the 5": {9}, "above the 1": {4},
        "right of the 2": {7}, "left of the 1": set(),  # nothing there
        "below the 7": {4, 5},  # two 7s: ambiguous, so never generated
        "in row 4, column 1": set(),
    }  # fmt: skip
    assert {q: script.answers_to(f"which digit is {q}?", KNOWN) for q in expected} == expected


def test_generated_questions_are_correct_and_unique(script):
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(300):
        kind = script.KINDS[rng.integers(len(script.KINDS))]
        made = script.make_question(KNOWN, kind, rng)
        if made is None:
            continue
        question, answer = made
        seen.add(question)
        assert script.answers_to(question, KNOWN) == {answer}, question
        assert "the 7" not in question and "the 4" not in question  # 7 and 4 occur twice: never an anchor
    assert "which digit is below the 2?" in seen and "which digit is left of the 9?" in seen
    # the anchor must have a neighbour on the asked side: nothing is left of the 1 (column 1)
    assert "which digit is left of the 1?" not in seen and "which digit is below the 9?" not in seen
    # a grid where every digit repeats has no relational question
    assert script.make_question(np.array([[1, 1, 2], [2, 3, 3], [1, 2, 3]]), "left", rng) is None


def test_splits_use_disjoint_digits_and_grids_compose_row_major(script):
    labels = np.arange(100) % 10
    pools = script.split_digits(labels, seed=0)
    assert sorted(np.concatenate(list(pools.values())).tolist()) == list(range(100))
    assert not set(pools["train"]) & set(pools["test"])
    tiles = np.stack([np.full((4, 4), value, dtype=np.uint8) for value in range(9)])
    image = script.compose_grid(tiles, 3)
    assert image.shape == (12, 12) and image[0, 4] == 1 and image[4, 0] == 3 and image[11, 11] == 8
    dataset = script.make_split(pools["train"], labels, 50, 3, list(script.KINDS), np.random.default_rng(1))
    for row in dataset:
        assert set(row["tiles"]) <= set(pools["train"].tolist())
        assert script.answers_to(row["question"], labels[row["tiles"]].reshape(3, 3)) == {row["label"]}


def test_question_position_puts_the_question_before_or_after_the_mark(script):
    question = "which digit is in row 1, column 2?"
    assert script.place_question("[IMAGE]", question, "after") == "[IMAGE] " + question
    assert script.place_question("[VIDEO]", question, "before") == question + " [VIDEO]"
    assert script.DataArguments(dataset="sklearn_digits", question_position="before").question_position == "before"
    with pytest.raises(ValueError, match="--question_position"):
        script.DataArguments(dataset="sklearn_digits", question_position="middle")


@pytest.mark.parametrize("scheme", ["rope_tie_v2", "mrope"])
def test_tiny_run_writes_metrics_and_a_loadable_folder(scheme, tmp_path):
    """The bundled sklearn digits (rope_tie_v2) and your own images (mrope) train to a complete folder."""
    out = tmp_path / scheme
    data = ["--dataset", "sklearn_digits"]
    if scheme == "mrope":  # your own digit images, saved with `save_to_disk` under other column names
        from sklearn.datasets import load_digits

        digits = load_digits()
        features = Features({"picture": Image(), "digit": ClassLabel(names=[str(d) for d in range(10)])})
        pictures = zip(digits.images[:120], digits.target[:120])
        rows = [{"picture": (image * 255 / 16).astype("uint8"), "digit": int(label)} for image, label in pictures]
        Dataset.from_list(rows, features=features).save_to_disk(tmp_path / "digits")
        data = ["--dataset_name", tmp_path / "digits", "--image_column_name", "picture", "--label_column_name", "digit"]
    argv = [sys.executable, SCRIPT, *data, "--position_scheme", scheme, "--num_train", "96",
            "--num_eval", "32", "--max_steps", "3", "--per_device_train_batch_size", "16", "--per_device_eval_batch_size",
            "32", "--hidden_size", "32", "--num_hidden_layers", "1", "--num_attention_heads", "2", "--intermediate_size",
            "64", "--output_dir", out, "--save_strategy", "no", "--report_to", "none", "--torch_threads", "1",
            "--disable_tqdm", "true"]  # fmt: skip
    run(argv, tmp_path)
    metrics = json.loads((out / "all_results.json").read_text())
    assert {"eval_accuracy", "test_accuracy", "eval_accuracy_position", "train_runtime", "wall_time_s"} <= set(metrics)
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0
    card = (out / "README.md").read_text()
    assert "2104.09864" in card and "--position_scheme " + scheme in card and "eval_accuracy" in card
    assert card_metadata(out)["pipeline_tag"] == "visual-question-answering"
    if scheme == "mrope":
        assert "your digit images (the local dataset `digits`)" in card and "8x8 pixels" in card
    config = json.loads((out / "config.json").read_text())
    auto_map = config["auto_map"]["AutoModelForSequenceClassification"]
    assert auto_map.endswith("RoFormerExtVisionTextForSequenceClassification")
    assert config["rope_parameters"]["position_scheme"] == scheme
    assert (out / "modeling_roformer_ext_vision.py").is_file() and (out / "positions.py").is_file()

    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    processor = AutoProcessor.from_pretrained(out)
    assert type(model).__name__ == "RoFormerExtVisionTextForSequenceClassification"
    assert type(processor).__name__ == "RoFormerExtProcessor"
    image = np.zeros((24, 24), dtype=np.uint8)  # 3x3 grid of 8-pixel tiles: one patch each
    inputs = processor(text=["[IMAGE] which digit is in row 2, column 3?"], images=[image], return_tensors="pt")
    assert inputs["image_grid_thw"].tolist() == [[1, 3, 3]]
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (1, 10) and torch.isfinite(logits).all()
