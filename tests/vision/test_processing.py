"""RoFormerExtProcessor: placeholder expansion, batching, every bad-input error, save / load."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoProcessor, BertTokenizer

from roformer_ext.image_processing_roformer_ext import RoFormerExtImageProcessor
from roformer_ext.processing_roformer_ext import RoFormerExtProcessor, add_vision_tokens, vision_token_ids
from roformer_ext.tokenization_roformer_ext import RoFormerExtTokenizerFast

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog", "the", "on", "mat", "."]


def image(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def write_vocab(folder) -> str:
    path = os.path.join(folder, "vocab.txt")
    Path(path).write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return path


@pytest.fixture(params=[BertTokenizer, RoFormerExtTokenizerFast])
def tokenizer(tmp_path, request):
    write_vocab(tmp_path)
    tokenizer = request.param.from_pretrained(tmp_path)
    add_vision_tokens(tokenizer)
    return tokenizer


@pytest.fixture
def processor(tokenizer) -> RoFormerExtProcessor:
    return RoFormerExtProcessor(image_processor=RoFormerExtImageProcessor(), tokenizer=tokenizer)


def runs(input_ids: list[int], ids: dict[str, int]) -> list[tuple[str, int]]:
    """The wrapped placeholder runs in a token sequence: [("image", n), ("video", m), ...]."""
    names = ("image_start_token_id", "image_end_token_id", "image_token_id", "video_token_id")
    marks = {ids[name]: mark for name, mark in zip(names, "<>iv")}
    found = re.findall(r"<([^>]*)>", "".join(marks.get(i, ".") for i in input_ids))
    assert all(len(set(run)) == 1 and run[0] in "iv" for run in found), found  # one kind of placeholder per run
    return [("image" if run[0] == "i" else "video", len(run)) for run in found]


def test_add_vision_tokens_is_idempotent_and_keeps_tokens_whole(tmp_path):
    write_vocab(tmp_path)
    tokenizer = BertTokenizer.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="add_vision_tokens"):
        vision_token_ids(tokenizer)
    with pytest.raises(ValueError, match="add_vision_tokens"):
        RoFormerExtProcessor(RoFormerExtImageProcessor(), tokenizer)
    ids = add_vision_tokens(tokenizer)
    assert set(ids) == {"image_start_token_id", "image_end_token_id", "image_token_id", "video_token_id"}
    assert sorted(ids.values()) == list(range(len(VOCAB), len(VOCAB) + 4))
    assert add_vision_tokens(tokenizer) == ids and len(tokenizer) == len(VOCAB) + 4
    encoded = tokenizer("the cat [IMG][IMAGE][VIDEO][/IMG]", add_special_tokens=False)["input_ids"]
    names = ("image_start_token_id", "image_token_id", "video_token_id", "image_end_token_id")
    assert encoded[-4:] == [ids[name] for name in names]
    assert tokenizer.decode(encoded, skip_special_tokens=True) == "the cat"


def test_expansion_counts_match_the_grids(processor, tokenizer):
    ids = vision_token_ids(tokenizer)
    out = processor(text="the [IMAGE] cat [IMAGE] .", images=[image(32, 48), image(64, 64)])
    assert out["image_grid_thw"].tolist() == [[1, 2, 3], [1, 4, 4]]
    input_ids = out["input_ids"][0]
    assert runs(input_ids, ids) == [("image", 6), ("image", 16)]
    assert input_ids.count(ids["image_token_id"]) == out["pixel_values"].shape[0] == 22
    assert tokenizer.convert_ids_to_tokens(input_ids[:3]) == ["[CLS]", "the", "[IMG]"]
    assert set(out) == {"input_ids", "token_type_ids", "attention_mask", "pixel_values", "image_grid_thw"}


def test_batched_flat_and_per_sample_lists_agree(processor, tokenizer):
    ids = vision_token_ids(tokenizer)
    texts = ["a [IMAGE] cat [IMAGE]", "the dog", "[IMAGE] on the mat"]
    pictures = [image(32, 32), image(48, 32), image(32, 64)]
    flat = processor(text=texts, images=pictures, padding=True, return_tensors="pt")
    nested = processor(text=texts, images=[pictures[:2], [], pictures[2:]], padding=True, return_tensors="pt")
    for key in flat:
        torch.testing.assert_close(flat[key], nested[key])
    assert isinstance(flat["pixel_values"], torch.Tensor) and flat["input_ids"].shape[0] == 3
    per_row = [runs([i for i in row.tolist() if i != 0], ids) for row in flat["input_ids"]]
    assert per_row == [[("image", 4), ("image", 6)], [], [("image", 8)]]


def test_batched_videos_flat_and_per_sample(processor, tokenizer):
    ids = vision_token_ids(tokenizer)
    clip_a, clip_b = [image(32, 32)] * 2, [image(32, 48)] * 3  # a video is a list of frames
    texts = ["[VIDEO] the cat", "a dog", "[VIDEO] [IMAGE]"]
    flat = processor(text=texts, videos=[clip_a, clip_b], images=[image(32, 32)])
    nested = processor(text=texts, videos=[[clip_a], [], [clip_b]], images=[[], [], [image(32, 32)]])
    assert flat["input_ids"] == nested["input_ids"]
    np.testing.assert_array_equal(flat["pixel_values_videos"], nested["pixel_values_videos"])
    assert flat["video_grid_thw"].tolist() == [[1, 2, 2], [2, 2, 3]]  # 3 frames: t = 2 with temporal_patch_size 2
    assert flat["pixel_values_videos"].shape == (4 + 12, 1536) and flat["pixel_values"].shape == (4, 1536)
    assert [runs(row, ids) for row in flat["input_ids"]] == [[("video", 4)], [], [("video", 12), ("image", 4)]]
    with pytest.raises(ValueError, match=r"Text 0 has 1 \[VIDEO\] mark\(s\) but 2 video\(s\)"):
        processor(text=texts, videos=[[clip_a, clip_a], [], [clip_b]], images=[image(32, 32)])


def test_text_only_images_only_and_image_options(processor):
    text_only = processor(text=["the cat", "a dog ."], padding=True)
    assert set(text_only) == {"input_ids", "token_type_ids", "attention_mask"}
    assert set(processor(images=[image(32, 32), image(32, 48)])) == {"pixel_values", "image_grid_thw"}
    out = processor(text="[IMAGE]", images=image(100, 200), max_pixels=64 * 64)
    assert int(np.prod(out["image_grid_thw"][0])) * 16 * 16 <= 64 * 64
    assert processor.image_processor.size["max_pixels"] == 384 * 384  # the call did not change the default


TWO = ["a [IMAGE]", "the [IMAGE] [IMAGE]"]


@pytest.mark.parametrize(
    "text, kwargs, message",
    [
        ("a [IMAGE] [IMAGE]", {"images": [image(32, 32)] * 3}, r"2 \[IMAGE\] mark\(s\) but 3 image\(s\)"),
        ("a [IMAGE] [IMAGE]", {"images": [image(32, 32)]}, r"2 \[IMAGE\] mark\(s\) but 1 image\(s\)"),
        ("a [IMAGE]", {"images": []}, r"1 \[IMAGE\] mark\(s\) but the image list is empty"),
        ("a [IMAGE]", {}, r"1 \[IMAGE\] mark\(s\) but no images were given"),
        ("the cat", {"images": [image(32, 32)]}, r"1 image\(s\) were given but the text has no \[IMAGE\] mark"),
        ("the cat", {"videos": [[image(32, 32)]]}, r"1 video\(s\) were given but the text has no \[VIDEO\] mark"),
        ("[VIDEO] [VIDEO]", {"videos": [[image(32, 32)]]}, r"2 \[VIDEO\] mark\(s\) but 1 video\(s\)"),
        ("[VIDEO]", {"videos": []}, r"the video list is empty"),
        ("[IMG][IMAGE][/IMG]", {"images": [image(32, 32)]}, r"already contains '\[IMG\]'"),
        (TWO, {"images": [[image(32, 32)], [image(32, 32)]]}, r"Text 1 has 2 \[IMAGE\] mark\(s\) but 1 image\(s\)"),
        (TWO, {"images": [[image(32, 32)], [image(32, 32)], []]}, "3 per-sample image lists for 2 texts"),
        ([1, 2], {}, "string or a list of strings"),
        (None, {}, "at least one"),
        ("a [IMAGE] cat", {"images": image(64, 64), "truncation": True, "max_length": 8}, "should hold 16 .* has 4"),
    ],
)
def test_bad_input_errors(processor, text, kwargs, message):
    with pytest.raises(ValueError, match=message):
        processor(text=text, **kwargs)


def test_save_load_round_trip(processor, tmp_path, processors_for_text_config):
    processor.image_processor.size["max_pixels"] = 128 * 128
    processor.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "processor_config.json").read_text())
    assert saved["processor_class"] == "RoFormerExtProcessor"
    assert saved["image_processor"]["size"] == {"min_pixels": 1024, "max_pixels": 16384}
    inputs = dict(text=["a [IMAGE] cat", "[IMAGE] [VIDEO]"], images=[image(300, 200), image(40, 40)])
    inputs.update(videos=[[image(32, 32)] * 3], padding=True, return_tensors="pt")
    expected = processor(**inputs)
    saved = tmp_path / "saved"
    for loaded in (RoFormerExtProcessor.from_pretrained(saved), AutoProcessor.from_pretrained(saved)):
        assert type(loaded).__name__ == "RoFormerExtProcessor"
        assert loaded.image_processor.to_dict() == processor.image_processor.to_dict()
        assert loaded.image_token_id == processor.image_token_id
        got = loaded(**inputs)
        for key in expected:
            torch.testing.assert_close(got[key], expected[key])


def test_remote_code_round_trip_in_a_fresh_process(processor, tmp_path, monkeypatch):
    """With `register_for_auto_class`, the saved folder loads where roformer_ext is not importable."""
    monkeypatch.setattr(RoFormerExtProcessor, "_auto_class", "AutoProcessor")
    monkeypatch.setattr(RoFormerExtImageProcessor, "_auto_class", "AutoImageProcessor")
    folder = tmp_path / "remote"
    processor.save_pretrained(folder)
    auto_map = json.loads((folder / "processor_config.json").read_text())["auto_map"]
    assert auto_map["AutoProcessor"].endswith("processing_roformer_ext.RoFormerExtProcessor")
    assert (folder / "processing_roformer_ext.py").exists() and (folder / "image_processing_roformer_ext.py").exists()
    expected = processor(text="a [IMAGE]", images=image(48, 64))["input_ids"]
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["roformer_ext"] = None  # the package must not be importable here
        import numpy as np
        from transformers import AutoProcessor
        processor = AutoProcessor.from_pretrained({str(folder)!r}, trust_remote_code=True)
        assert type(processor).__module__.startswith("transformers_modules"), type(processor).__module__
        pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
        print(processor(text="a [IMAGE]", images=pixels)["input_ids"])
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    run = dict(env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    result = subprocess.run([sys.executable, "-c", script], **run)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == str(expected)
