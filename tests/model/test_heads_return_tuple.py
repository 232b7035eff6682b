"""Every registered class with the config's `return_dict=False` and under `torch.jit.trace`; GenerationMixin bases."""

import pytest
import torch
from conftest import random_inputs, tiny_config
from test_vision_models import mixed_batch  # tests/vision (tests/conftest.py puts each test folder on the path)
from transformers import GenerationMixin, PreTrainedModel
from transformers.models.auto import modeling_auto
from vision_sizes import SIZES

import roformer_ext
from roformer_ext import (
    RoFormerExtConfig,
    RoFormerExtForMaskedLM,
    RoFormerExtPreTrainedModel,
    RoFormerExtVisionTextConfig,
    RoFormerExtVisionTextForSequenceClassification,
)


def registered_classes() -> list[type]:
    """Every model class importing roformer_ext registers with transformers' Auto mappings, each once."""
    found = set()
    for name in dir(modeling_auto):
        mapping = getattr(modeling_auto, name)
        if name.endswith("_MAPPING") and hasattr(mapping, "get"):
            found.update(mapping.get(config, None) for config in (RoFormerExtConfig, RoFormerExtVisionTextConfig))
    found.discard(None)
    return sorted(found, key=lambda cls: cls.__name__)


CLASSES = registered_classes()


def build(model_class: type, **config_kwargs) -> tuple[torch.nn.Module, dict]:
    """A tiny model of `model_class` and inputs for it (images and video for vision-text, choices for multiple choice)."""
    torch.manual_seed(0)
    if issubclass(model_class.config_class, RoFormerExtVisionTextConfig):
        config, inputs = RoFormerExtVisionTextConfig(**SIZES, **config_kwargs), mixed_batch()
    else:
        input_ids, attention_mask, token_type_ids = random_inputs()
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        if "MultipleChoice" in model_class.__name__:
            inputs = {name: value[:, None].expand(-1, 2, -1) for name, value in inputs.items()}
        config = tiny_config(**config_kwargs)
    return model_class(config).eval(), inputs


def test_the_walk_finds_every_head() -> None:
    """The walk sees every model the package exports (all but the abstract base are registered)."""
    exported = {getattr(roformer_ext, name) for name in roformer_ext.__all__}
    models = {obj for obj in exported if isinstance(obj, type) and issubclass(obj, PreTrainedModel)}
    assert models - {RoFormerExtPreTrainedModel} == set(CLASSES)


@pytest.mark.parametrize("model_class", CLASSES, ids=lambda cls: cls.__name__)
def test_return_dict_false_gives_the_dict_outputs_as_a_tuple(model_class: type) -> None:
    model, inputs = build(model_class, return_dict=False)
    with torch.no_grad():
        as_tuple = model(**inputs)
        as_dict = model(**inputs, return_dict=True)
    assert isinstance(as_tuple, tuple)
    assert len(as_tuple) == len(as_dict.to_tuple())
    torch.testing.assert_close(as_tuple[0], as_dict.to_tuple()[0], rtol=0, atol=0)


@pytest.mark.parametrize("model_class", [RoFormerExtForMaskedLM, RoFormerExtVisionTextForSequenceClassification])
def test_jit_trace_with_return_dict_false(model_class: type) -> None:
    """transformers 5 has no `torchscript` switch: BERT traces with `return_dict=False` in its config, so must we."""
    model, inputs = build(model_class, return_dict=False)
    with torch.no_grad():
        traced = torch.jit.trace(model, example_kwarg_inputs=inputs)
        torch.testing.assert_close(traced(**inputs)[0], model(**inputs)[0], rtol=0, atol=1e-6)


def test_every_generative_class_lists_generation_mixin() -> None:
    generative = [cls for cls in CLASSES if cls.can_generate()]
    assert {cls.__name__ for cls in generative} == {"RoFormerExtForCausalLM", "RoFormerExtVisionTextForCausalLM"}
    for cls in generative:
        assert GenerationMixin in cls.__bases__, cls.__name__
