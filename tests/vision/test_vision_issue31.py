"""Vision-text defects of issue #31, each checked with a model whose output visibly depends on positions.

The tests' usual tiny models (initializer_range 0.02) barely read positions: a wrong image offset moves their outputs
by ~1e-6, under the 1e-5 tolerances. These models use initializer_range 1.0, and each test first shows that the wrong
positions of its defect move the compared output far beyond its tolerance, so the test can see the defect.
"""

import torch
from vision_sizes import IMAGE, PATCH_DIM, SIZES

from roformer_ext import (
    RoFormerExtVisionTextConfig,
    RoFormerExtVisionTextForSequenceClassification,
)
from roformer_ext.positions import build_position_ids

#: ILRoPE resets an image's rows and columns to 0, so a sequence's image does not move with its text: a layout that
#: ignores the packed boundaries shifts the text and not the image, which relative attention sees.
ILROPE = {"position_scheme": "ilrope", "mrope_section": [4, 4, 4]}


def sensitive_config(**overrides) -> RoFormerExtVisionTextConfig:
    """Large random weights: attention scores of order 10, so a moved position changes which tokens are attended."""
    return RoFormerExtVisionTextConfig(**{**SIZES, "rope_parameters": ILROPE, "initializer_range": 1.0, **overrides})


def image_prompt(generator: torch.Generator, text: int, grid: tuple[int, int, int]) -> dict:
    """`text` words, one image of `grid`, two words: ids (seq,), pixels, grid."""
    ids = torch.cat(
        [
            torch.randint(5, 90, (text,), generator=generator),
            torch.full((grid[0] * grid[1] * grid[2],), IMAGE),
            torch.randint(5, 90, (2,), generator=generator),
        ]
    )
    pixels = torch.randn(grid[0] * grid[1] * grid[2], PATCH_DIM, generator=generator)
    return {"ids": ids, "pixels": pixels, "grid": grid}


def alone(part: dict) -> dict:
    return {
        "input_ids": part["ids"][None],
        "pixel_values": part["pixels"],
        "image_grid_thw": torch.tensor([part["grid"]]),
    }


def packed_row(parts: list[dict]) -> dict:
    """The parts end to end in one row, with cu_seq_lens_q as DataCollatorWithFlattening gives."""
    lengths = [len(p["ids"]) for p in parts]
    bounds = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return {
        "input_ids": torch.cat([p["ids"] for p in parts])[None],
        "pixel_values": torch.cat([p["pixels"] for p in parts]),
        "image_grid_thw": torch.tensor([p["grid"] for p in parts]),
        "cu_seq_lens_q": bounds,
        "cu_seq_lens_k": bounds,
        "max_length_q": max(lengths),
        "max_length_k": max(lengths),
    }


def recorded_positions(model) -> list[torch.Tensor]:
    """Every position tensor the vision-text base model computes from now on (a spy around compute_position_ids)."""
    seen, compute = [], model.roformer.compute_position_ids

    def spy(*args, **kwargs):
        seen.append(compute(*args, **kwargs))
        return seen[-1]

    model.roformer.compute_position_ids = spy
    return seen


def test_packed_vision_classification_positions_equal_each_sequence_alone():
    """Defect (issue #31, 0): the classification head took cu_seq_lens_q out of the inputs to pool per sequence, and
    the vision base model then laid the packed row out as one sequence: the second sequence's text sat at 23-27 while
    its image restarted at 3.... Packed, each sequence must get the positions and the logits it gets alone."""
    torch.manual_seed(0)
    model = RoFormerExtVisionTextForSequenceClassification(sensitive_config(num_labels=3)).eval()
    generator = torch.Generator().manual_seed(1)
    parts = [image_prompt(generator, 3, (1, 2, 3)), image_prompt(generator, 2, (1, 2, 2))]
    positions = recorded_positions(model)
    with torch.no_grad():
        packed_logits = model(**packed_row(parts)).logits
        alone_logits = torch.cat([model(**alone(part)).logits for part in parts])
    packed_positions, *alone_positions = positions
    torch.testing.assert_close(packed_logits, alone_logits, atol=1e-4, rtol=0)
    assert torch.equal(packed_positions, torch.cat(alone_positions, dim=2))

    # The model sees the defect: the row laid out as one sequence (the old positions) moves the logits by far more (~30).
    row = packed_row(parts)
    wrong, _ = build_position_ids(row["input_ids"], model.config, row["image_grid_thw"])
    assert not torch.equal(wrong, packed_positions)
    with torch.no_grad():
        wrong_logits = model(**row, position_ids=wrong).logits
    assert (wrong_logits[1] - alone_logits[1]).abs().max() > 1e-2
