"""Bad config values fail at construction with an error naming the field, the value given and what is allowed."""

import math

import pytest
import torch
from conftest import random_inputs, tiny_config

from roformer_ext import RoFormerExtModel, RoFormerExtVisionTextConfig


@pytest.mark.parametrize(
    "value, error",
    [(math.inf, ValueError), (-math.inf, ValueError), (math.nan, ValueError), (0.0, ValueError), (-1.0, ValueError),
     (-1e4, ValueError), (True, TypeError), ("1", TypeError), ("1e4", TypeError)],
)  # fmt: skip
@pytest.mark.parametrize("field", ["sinusoidal_scale", "rope_theta"])
def test_scale_and_rope_theta_must_be_finite_positive_numbers(field, value, error):
    if field == "rope_theta":
        field, kwargs = r"rope_parameters\['rope_theta'\]", dict(rope_parameters={"rope_theta": value})
    else:
        kwargs = dict(position_encoding="sinusoidal", position_encoding_parameters={field: value})
    with pytest.raises(error, match=field + r" must be a positive number \(finite, > 0.*got"):
        tiny_config(**kwargs)


def test_finite_sinusoidal_scale_gives_finite_outputs():
    model = RoFormerExtModel(
        tiny_config(position_encoding="sinusoidal", position_encoding_parameters={"sinusoidal_scale": 1e3})
    ).eval()
    input_ids, attention_mask, _ = random_inputs()
    with torch.no_grad():
        assert model(input_ids, attention_mask=attention_mask).last_hidden_state.isfinite().all()


@pytest.mark.parametrize("axes", [2.0, "2", True, False, None, [2], 0, -1, 4, 7, 1, 2, 3])
def test_axes_must_be_1_2_or_3(axes):
    if axes in (1, 2, 3) and type(axes) is int:  # accepted
        assert tiny_config(rope_parameters={"axes": axes}).rope_parameters["axes"] == axes
        return
    wrong_type = not isinstance(axes, int) or isinstance(axes, bool)
    message = r"must be an int \(1, 2 or 3\); got" if wrong_type else rf"must be 1, 2 or 3 .*; got {axes}"
    with pytest.raises(TypeError if wrong_type else ValueError, match=r"rope_parameters\['axes'\] " + message):
        tiny_config(rope_parameters={"axes": axes})


# tiny_config: head_dim 8, so 4 frequency pairs
@pytest.mark.parametrize(
    "section, error, message",
    [
        ([5, -1], ValueError, r"entries must be positive.*got \[5, -1\]"),
        ([4, 0], ValueError, r"entries must be positive.*got \[4, 0\]"),
        ([2, 2.0], TypeError, r"entries must be ints.*got \[2, 2\.0\]"),
        ([True, 3], TypeError, r"entries must be ints.*got \[True, 3\]"),
        (["2", "2"], TypeError, r"entries must be ints"),
        ("22", TypeError, r"must be a list of ints.*got '22'"),
        (4, TypeError, r"must be a list of ints.*got 4"),
        ([1, 1, 2], ValueError, r"2 entries \(one per axis\).*got \[1, 1, 2\]"),
        ([1, 2], ValueError, r"sum to head_dim // 2 = 4.*got \[1, 2\]"),
        (None, ValueError, r"axis_allocation 'sections' needs rope_parameters\['mrope_section'\]"),
        ([2, 2], None, None),
        ((1, 3), None, None),
    ],
)
def test_mrope_section_is_checked(section, error, message):
    rope = {"axes": 2, "axis_allocation": "sections", "mrope_section": section}
    if error is None:  # accepted
        RoFormerExtModel(tiny_config(rope_parameters=rope))
        return
    for pattern in (r"rope_parameters\['mrope_section'\]", message):
        with pytest.raises(error, match=pattern):
            tiny_config(rope_parameters=rope)


def test_malformed_mrope_section_is_rejected_even_when_not_used():
    """Given but ignored (allocation 'interleaved'), a malformed one is still reported."""
    with pytest.raises(ValueError, match=r"mrope_section'\] entries must be positive"):
        tiny_config(rope_parameters={"axes": 2, "mrope_section": [5, -1]})


@pytest.mark.parametrize("key", ["rope_type", "pair_layout", "axis_allocation", "position_scheme"])
@pytest.mark.parametrize("value", [1, None, ["interleaved"]])
def test_named_rope_fields_must_be_registered_strings(key, value):
    with pytest.raises(ValueError, match=rf"rope_parameters\['{key}'\].*Registered choices"):
        tiny_config(rope_parameters={key: value})


@pytest.mark.parametrize(
    "extra", [{"factor": math.inf}, {"factor": math.nan}, {"factor": 2.0, "attention_factor": math.inf}]
)
def test_scaling_parameters_must_be_finite(extra):
    with pytest.raises(ValueError, match=r"rope_parameters\['(factor|attention_factor)'\] must be finite"):
        tiny_config(rope_parameters={"rope_type": "linear", **extra})


@pytest.mark.parametrize("value", [[1, 2], "default", 3])
def test_rope_parameters_must_be_a_dict(value):
    with pytest.raises(TypeError, match=r"rope_parameters must be a dict"):
        tiny_config(rope_parameters=value)


@pytest.mark.parametrize(
    "name, value, error, message",
    [("rope_parameters", {"axes": "2"}, TypeError, r"rope_parameters\['axes'\]"),
     ("norm_type", "batch_norm", ValueError, "norm_type")],
)  # fmt: skip
def test_fields_set_later_are_checked_when_a_model_is_built(name, value, error, message):
    config = tiny_config()
    setattr(config, name, value)
    with pytest.raises(error, match=message):
        RoFormerExtModel(config)


def test_vision_config_rejects_bad_axes_too():
    with pytest.raises(ValueError, match=r"rope_parameters\['axes'\] must be 1, 2 or 3"):
        RoFormerExtVisionTextConfig(hidden_size=32, num_attention_heads=4, rope_parameters={"axes": 4})


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bool, torch.complex64, torch.uint8, torch.int16, torch.int32, torch.int64]
)
def test_input_ids_must_be_int32_or_int64_and_the_error_names_the_fix(dtype):
    model = RoFormerExtModel(tiny_config()).eval()
    input_ids = torch.full((2, 3), 7, dtype=dtype)
    if dtype not in (torch.int32, torch.int64):
        with pytest.raises(
            TypeError, match=r"input_ids must hold integer token ids as torch.long .*; got dtype .*input_ids\.long\(\)"
        ):
            model(input_ids)
        return
    with torch.no_grad():
        assert torch.equal(model(input_ids).last_hidden_state, model(input_ids.long()).last_hidden_state)


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "256"])
def test_v2pe_visual_stride_tokens_is_checked_with_the_config(value):
    with pytest.raises(
        ValueError, match=r"rope_parameters\['visual_stride_tokens'\] must be None or a positive integer"
    ):
        RoFormerExtVisionTextConfig(rope_parameters={"position_scheme": "v2pe", "visual_stride_tokens": value})
