"""run_symmetry.py: prompts, the video variant, the question read-out and a tiny end-to-end grid."""

import json
import sys
from dataclasses import replace
from operator import itemgetter
from pathlib import Path

import numpy as np
import pytest
import torch
from test_examples import load_script, run

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "position-lab" / "run_symmetry.py"
SIZES = ["--warmup_steps", "0", "--hidden_size", "32", "--intermediate_size", "64", "--num_hidden_layers", "1"]
LAYOUTS = ("before", "after")
run_key = itemgetter("scheme", "modality", "layout", "seed")


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def prepared(script):
    """Both modalities at a small size: 3x3 images, videos of 4 frames of 2x2 digits (sklearn 8x8 digits)."""
    args = script.SymmetryArguments(max_steps=2, batch_size=8, num_test=8, video_frames=4)
    model_args = script.SymmetryModelArguments(hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    return args, model_args, {modality: script.prepare(args, model_args, modality) for modality in ("image", "video")}


def _batch(script, data, layout, readout="question"):
    collator = script.SymmetryCollator(data.processor, data.digits, data.grid, layout, data.frames, readout)
    rows = [data.train[i] for i in range(3)]
    return rows, collator(rows)


@pytest.mark.parametrize("modality", ["image", "video"])
@pytest.mark.parametrize("layout", ["before", "after"])
def test_prompts_place_the_question_before_or_after_the_picture_on_its_grid(script, prepared, modality, layout):
    data = prepared[2][modality]
    rows, batch = _batch(script, data, layout)
    processor = data.processor
    placeholder = processor.image_token_id if modality == "image" else processor.video_token_id
    for b, row in enumerate(rows):
        ids = batch["input_ids"][b]
        patches = torch.nonzero(ids == placeholder).flatten()
        question = torch.nonzero(batch["readout_mask"][b]).flatten()
        assert len(patches) == data.frames * data.grid**2
        assert question.max() < patches.min() if layout == "before" else question.min() > patches.max()
        # the read-out tokens are exactly the question, nothing else ([CLS], [SEP], [IMG], pads are out)
        words = processor.tokenizer.decode(ids[question])
        assert words.replace(" ", "") == row["question"].replace(" ", "")
        assert processor.tokenizer.convert_ids_to_tokens(int(ids[0])) == "[CLS]"
    grid, other, thw = ("image", "video", [1, 3, 3]) if modality == "image" else ("video", "image", [4, 2, 2])
    assert batch[f"{grid}_grid_thw"].tolist() == [thw] * 3 and f"{other}_grid_thw" not in batch
    if modality == "video":
        assert batch["pixel_values_videos"].shape == (3 * 16, 64)  # one 8x8 greyscale patch per digit


def test_video_questions_are_answered_by_the_named_tile(script):
    labels = np.arange(200) % 10
    data = script.make_video_split(np.arange(200), labels, 50, 3, 2, np.random.default_rng(0))
    for row in data:
        words = row["question"].removeprefix("which digit is in frame ").rstrip("?")
        frame, r, c = (int(x) - 1 for x in words.replace(", row ", " ").replace(", column ", " ").split())
        assert row["label"] == labels[row["tiles"][frame * 4 + r * 2 + c]]
        assert row["kind"] == f"frame {frame + 1}"


def test_video_runs_get_a_frame_axis_for_every_scheme(script, prepared):
    _, model_args, data = prepared
    assert set(script.SCHEMES) >= set(script.FIRST_STUDY) and len(script.SCHEMES) == 18  # every built-in scheme
    for name, (scheme, allocation) in script.SCHEMES.items():
        if name in script.IMAGES_ONLY:
            continue
        run_args = replace(model_args, position_scheme=scheme, axis_allocation=allocation, frame_axis=True)
        config = script.build_config(run_args, data["video"].processor, 8)
        axes = {"rope_1d": 1, "v2pe": 1, "vrope": 4}.get(name, 3)
        assert config.rope_parameters["axes"] == axes, name
        _, batch = _batch(script, data["video"], "after")
        model = script.QuestionReadoutForSequenceClassification(config).eval()
        with torch.no_grad():
            assert model(**batch).logits.shape == (3, 10)


def test_question_readout_pools_the_question_and_cls_readout_is_the_library_head(script, prepared):
    _, model_args, data = prepared
    data = data["image"]
    run_args = replace(model_args, position_scheme="mrope", axis_allocation="sections")
    config = script.build_config(run_args, data.processor, 8)
    torch.manual_seed(0)
    model = script.QuestionReadoutForSequenceClassification(config).eval()
    _, batch = _batch(script, data, "after")
    mask, labels = batch.pop("readout_mask"), batch.pop("labels")
    with torch.no_grad():
        hidden = model.roformer(**batch).last_hidden_state
        expected = model.classifier((hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True))
        pooled = model(**batch, readout_mask=mask, labels=labels)
        cls = model(**batch)
        library = script.RoFormerExtVisionTextForSequenceClassification(config)
        library.load_state_dict(model.state_dict())
        reference = library.eval()(**batch).logits
    torch.testing.assert_close(pooled.logits, expected)
    torch.testing.assert_close(pooled.loss, torch.nn.functional.cross_entropy(expected, labels))
    torch.testing.assert_close(cls.logits, reference)
    assert not torch.allclose(pooled.logits, cls.logits)


@pytest.mark.parametrize("modality", ["image", "video"])
def test_encoded_split_and_shared_positions_give_the_collators_batch_and_the_models_outputs(script, prepared, modality):
    _, model_args, data = prepared
    data = data[modality]
    run_args = replace(model_args, position_scheme="rope_tie_v2", frame_axis=data.frames > 1)
    config = script.build_config(run_args, data.processor, 8)
    split = data.encode("before", "question")["train"]
    positions = split.shared_position_ids(config)
    assert positions is not None and positions.shape[:2] == (config.rope_parameters["axes"], 1)
    encoded = script.EncodedCollator(split.pixel_key, positions)([split[i] for i in range(3)])
    _, direct = _batch(script, data, "before")  # the collator on the same 3 rows
    assert set(encoded) == set(direct) | {"position_ids"}
    for key, value in direct.items():
        torch.testing.assert_close(encoded[key], value, msg=key)
    model = script.QuestionReadoutForSequenceClassification(config).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(**encoded).logits, model(**direct).logits)
    # a split whose rows differ in layout (padding) gets no shared positions: the model computes them per batch
    split.features["attention_mask"][0, -1] = 0
    assert split.shared_position_ids(config) is None
    data.encoded.clear()


def test_a_rerun_with_another_setup_is_refused(script, tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"setup": {"max_steps": 1}, "runs": [{"scheme": "rope_1d"}]}))
    assert script.load_previous(path, {"max_steps": 1}, overwrite=False) == [{"scheme": "rope_1d"}]
    assert script.load_previous(path, {"max_steps": 2}, overwrite=True) == []
    with pytest.raises(ValueError, match="--overwrite"):
        script.load_previous(path, {"max_steps": 2}, overwrite=False)


@pytest.mark.parametrize("flag, value", [("schemes", "rope_3d"), ("layouts", "middle"), ("readout", "mean"), ("seeds", "a")])  # fmt: skip
def test_bad_arguments_name_the_flag(script, flag, value):
    with pytest.raises(ValueError, match=f"--{flag}"):
        script.SymmetryArguments(**{flag: value})


def test_tiny_grid_end_to_end(tmp_path):
    output, other = tmp_path / "symmetry.json", tmp_path / "other.json"
    tiny = ["--long_video_frames", "5", "--max_steps", "2", "--batch_size", "8", "--num_test", "16", "--video_frames",
            "3", *SIZES]  # fmt: skip
    args = ["--schemes", "rope_tie_v2,mrope,circle_rope", "--seeds", "0", *tiny, "--output", output]
    run([sys.executable, SCRIPT, *args], tmp_path)
    results = json.loads(output.read_text())
    schemes = [(s, m) for s in ("rope_tie_v2", "mrope", "circle_rope") for m in ("image", "video")]
    expected = {(s, m, layout, 0) for s, m in schemes if (s, m) != ("circle_rope", "video") for layout in LAYOUTS}
    assert {run_key(r) for r in results["runs"]} == expected  # circle_rope: images only
    cells = {(c["scheme"], c["modality"], c["layout"]): c for c in results["cells"]}
    long_cells = {key: cells.pop(key) for key in list(cells) if key[1] == "long_video"}
    assert set(cells) == {(s, m, layout) for s, m, _, _ in expected for layout in (*LAYOUTS, "after-before")}
    # the long-video test: 5-frame videos asking about the first 3 frames, as a difference to the 3-frame accuracy
    assert set(long_cells) == {(s, "long_video", side) for s in ("rope_tie_v2", "mrope") for side in LAYOUTS}
    frames = [f"accuracy_frame {n}" for n in (1, 2, 3)]
    for run_ in results["runs"]:
        if run_["modality"] == "video":
            assert run_["long_video_frames"] == 5 and 0.0 <= run_["long_test_accuracy"] <= 1.0
            assert set(run_["long_test_accuracy_by_kind"]) <= set(frames)
            cell = long_cells[run_["scheme"], "long_video", run_["layout"]]
            assert cell["mean"] == round(run_["long_test_accuracy"] - run_["test_accuracy"], 4)
        else:
            assert "long_test_accuracy" not in run_
    by_cell = {(r["scheme"], r["modality"], r["layout"]): r for r in results["runs"]}
    for (scheme, modality, layout), cell in cells.items():
        assert cell["n"] == 1 and cell["std"] is None
        if layout != "after-before":
            accuracy = by_cell[scheme, modality, layout]["test_accuracy"]
            assert 0.0 <= cell["mean"] <= 1.0 and cell["mean"] == round(accuracy, 4)
    mrope_video = by_cell["mrope", "video", "after"]
    assert mrope_video["rope_parameters"]["mrope_section"] == [1, 1, 2]  # head_dim 8: 4 pairs
    assert sorted(mrope_video["test_accuracy_by_kind"]) == frames
    assert results["sizes"]["video"]["grid_thw"] == [3, 2, 2] and set(results["floors"]) == {"image", "video"}
    table = output.with_suffix(".md").read_text()
    assert "| `rope_tie_v2` |" in table and "| `mrope` |" in table and "video: after − before" in table
    assert "Long videos: accuracy on 5-frame videos minus accuracy on the 3-frame videos" in table

    # the same call again resumes: every run is already there, nothing is retrained
    again = run([sys.executable, SCRIPT, *args], tmp_path)
    assert json.loads(output.read_text())["runs"] == results["runs"] and "test accuracy" not in again.stderr

    # another process's seed joins with --merge, without training anything again
    one_seed = ["--schemes", "rope_tie_v2", "--seeds", "1", *tiny, "--output", other, "--modalities", "image",
                "--layouts", "after"]  # fmt: skip
    run([sys.executable, SCRIPT, *one_seed], tmp_path)
    merged = run([sys.executable, SCRIPT, *args, "--merge", other], tmp_path)
    assert "test accuracy" not in merged.stderr
    runs = json.loads(output.read_text())["runs"]
    assert runs[: len(results["runs"])] == results["runs"]
    assert [run_key(r) for r in runs[len(results["runs"]) :]] == [("rope_tie_v2", "image", "after", 1)]

    run([sys.executable, SCRIPT.with_name("plot_symmetry.py"), output, "--out", tmp_path / "figures"], tmp_path)
    figures = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert figures == ["symmetry_before_after.png", "symmetry_long_video.png"], figures
    assert all((tmp_path / "figures" / name).stat().st_size > 10_000 for name in figures)


def test_variants_and_mixed_length_training_end_to_end(tmp_path):
    """hope_dynamic and mmrope_lumos_scale (not in 'all'), mixed-length training, --merge of this call's schemes."""
    output = tmp_path / "mixed.json"
    args = ["--schemes", "hope_dynamic,mmrope_lumos_scale", "--modalities", "video", "--seeds", "0", "--max_steps",
            "4", "--batch_size", "4", "--num_test", "8", "--video_frames", "2", "--long_video_frames", "4",
            "--train_video_frames", "1,2", *SIZES, "--output", str(output)]  # fmt: skip
    run([sys.executable, SCRIPT, *args], tmp_path)
    results = json.loads(output.read_text())
    assert results["setup"]["train_video_frames"] == "1,2" and results["sizes"]["video"]["train"] == 16
    by_scheme = {(r["scheme"], r["layout"]): r for r in results["runs"]}
    assert set(by_scheme) == {(s, side) for s in ("hope_dynamic", "mmrope_lumos_scale") for side in LAYOUTS}
    assert by_scheme["hope_dynamic", "after"]["rope_parameters"]["temporal_scales"] == [0.5, 0.75, 1.0, 1.25, 1.5]
    assert by_scheme["mmrope_lumos_scale", "after"]["rope_parameters"]["position_scale"] == [4.0, 8.0, 8.0]
    assert all(r["long_video_frames"] == 4 for r in results["runs"])
    table = output.with_suffix(".md").read_text()
    assert "Long videos, trained on 1,2-frame videos: accuracy on 4-frame videos" in table

    other = tmp_path / "other.json"
    merged = [*args[: args.index("--output")], "--output", str(other), "--merge", str(output)]
    merged[merged.index("--schemes") + 1] = "hope_dynamic"
    assert "test accuracy" not in run([sys.executable, SCRIPT, *merged], tmp_path).stderr
    assert {r["scheme"] for r in json.loads(other.read_text())["runs"]} == {"hope_dynamic"}


def test_temporal_scales_are_drawn_in_training_only(script, prepared, monkeypatch):
    """hope_dynamic draws a temporal scale per training video; test batches use the fixed scale."""
    import roformer_ext.positions as positions

    drawn = []
    original = positions._draw_temporal_scales
    draw = lambda samples, scales: drawn.append(len(samples)) or original(samples, scales)  # noqa: E731
    monkeypatch.setattr(positions, "_draw_temporal_scales", draw)
    args, model_args, data = prepared
    args = replace(args, schemes="hope_dynamic", batch_size=4, warmup_steps=0)
    run = script.train_and_test(args, model_args, data["video"], "hope_dynamic", "after", 0)
    assert drawn == [4, 4]  # two training steps of 4 videos; nothing drawn at test time
    assert run["rope_parameters"]["temporal_scales"] == [0.5, 0.75, 1.0, 1.25, 1.5]
    assert "hope_dynamic" not in script.SymmetryArguments(schemes="all").scheme_list
