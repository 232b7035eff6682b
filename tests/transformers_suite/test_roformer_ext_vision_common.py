"""transformers' `ModelTesterMixin` and `ConfigTester` on every vision-text class: text only, and one image per sample
as transformers tests Qwen2-VL."""

import unittest

import torch
from transformers.testing_utils import torch_device

from roformer_ext import (
    RoFormerExtVisionTextConfig,
    RoFormerExtVisionTextForCausalLM,
    RoFormerExtVisionTextForMaskedLM,
    RoFormerExtVisionTextForSequenceClassification,
    RoFormerExtVisionTextModel,
)

from .auto_names import AutoClassNamesMixin
from .test_roformer_ext_common import DeclaredInputsMixin, RoFormerExtModelTester
from .upstream_mixins import ConfigTester, GenerationTesterMixin, ModelTesterMixin, floats_tensor

VISION_TEXT_CLASSES = (
    RoFormerExtVisionTextModel,
    RoFormerExtVisionTextForMaskedLM,
    RoFormerExtVisionTextForSequenceClassification,
    RoFormerExtVisionTextForCausalLM,
)


class RoFormerExtVisionTextModelTester(RoFormerExtModelTester):
    """The text tester on the vision-text config, text only: no placeholder ids, so every id the mixin draws is text."""

    config_class = RoFormerExtVisionTextConfig
    patch_size, temporal_patch_size, num_channels = 2, 2, 3
    image_token_id = video_token_id = None

    def config_kwargs(self) -> dict:
        names = ("patch_size", "temporal_patch_size", "num_channels", "image_token_id", "video_token_id")
        return {**super().config_kwargs(), **{name: getattr(self, name) for name in names}}


class RoFormerExtVisionTextPixelModelTester(RoFormerExtVisionTextModelTester):
    """One (1, 2, 2) image per sample at positions 1-4, as transformers' Qwen2-VL tester; placeholder ids low (they
    survive the mixin's resizes) and drawn nowhere else; no padding (the placeholders must be attended)."""

    batch_size, image_grid, num_image_tokens, pad_token_id = 3, (1, 2, 2), 4, 0
    seq_length = 7 + num_image_tokens
    image_token_id, video_token_id, use_input_mask = 4, 5, False

    def prepare_input_ids(self) -> torch.Tensor:
        input_ids = super().prepare_input_ids()
        for placeholder in (self.image_token_id, self.video_token_id):
            input_ids[input_ids == placeholder] = self.pad_token_id
        input_ids[:, 1 : 1 + self.num_image_tokens] = self.image_token_id
        return input_ids

    def prepare_pixel_inputs(self) -> dict[str, torch.Tensor]:
        patch_dim = self.num_channels * self.temporal_patch_size * self.patch_size**2
        return {
            "pixel_values": floats_tensor([self.batch_size * self.num_image_tokens, patch_dim]),
            "image_grid_thw": torch.tensor([list(self.image_grid)] * self.batch_size, device=torch_device),
        }

    def prepare_config_and_inputs_for_common(self) -> tuple[RoFormerExtVisionTextConfig, dict]:
        config, inputs_dict = super().prepare_config_and_inputs_for_common()
        inputs_dict = {key: value for key, value in inputs_dict.items() if value is not None}
        return config, {**inputs_dict, **self.prepare_pixel_inputs()}


class VisionTextTestBase(DeclaredInputsMixin, AutoClassNamesMixin, ModelTesterMixin, GenerationTesterMixin):
    all_model_classes = VISION_TEXT_CLASSES
    test_can_init_all_missing_weights_before_2023 = True  # see RoFormerExtModelTest

    def setUp(self) -> None:
        self.model_tester = self.model_tester_class(self)
        # hidden_size 48 / 4 heads: see RoFormerExtModelTest.setUp.
        self.config_tester = ConfigTester(
            self, config_class=RoFormerExtVisionTextConfig, hidden_size=48, num_attention_heads=4
        )

    def test_config(self) -> None:
        self.config_tester.run_common_tests()

    def test_model(self) -> None:
        config, inputs_dict = self.model_tester.prepare_config_and_inputs_for_common()
        result = RoFormerExtVisionTextModel(config).to(torch_device).eval()(**inputs_dict)
        tester = self.model_tester
        self.assertEqual(result.last_hidden_state.shape, (tester.batch_size, tester.seq_length, tester.hidden_size))


class RoFormerExtVisionTextModelTest(VisionTextTestBase, unittest.TestCase):
    """Vision-text classes on text-only input."""

    model_tester_class = RoFormerExtVisionTextModelTester
    test_all_params_have_gradient = False  # text never reaches the patch embedding (the pixel tester checks it)


class RoFormerExtVisionTextPixelModelTest(VisionTextTestBase, unittest.TestCase):
    """Vision-text classes on text with one image per sample."""

    model_tester_class = RoFormerExtVisionTextPixelModelTester

    _skip = unittest.skip(reason="VLMs cannot pass input_embeds without input_ids (as transformers' VLMModelTest)")
    test_inputs_embeds = test_inputs_embeds_matches_input_ids = _skip(lambda self: None)

    def test_mismatching_num_image_tokens(self) -> None:
        """Placeholders and patches that do not match raise a ValueError (as transformers' VLM tests require)."""
        config, inputs_dict = self.model_tester.prepare_config_and_inputs_for_common()
        per_image = self.model_tester.num_image_tokens
        for model_class in self.all_model_classes:
            model = model_class(config).to(torch_device).eval()
            model(**inputs_dict)
            fewer = dict(inputs_dict, pixel_values=inputs_dict["pixel_values"][per_image:])
            fewer["image_grid_thw"] = inputs_dict["image_grid_thw"][1:]
            with self.assertRaises(ValueError):
                model(**fewer)
            one_image = {
                "pixel_values": inputs_dict["pixel_values"][:per_image],
                "image_grid_thw": inputs_dict["image_grid_thw"][:1],
            }
            two_prompts = inputs_dict["input_ids"][:1].repeat(2, 1)
            with self.assertRaises(ValueError):
                model(input_ids=two_prompts, **one_image)
            two_images = {key: torch.cat([value, value]) for key, value in one_image.items()}
            model(input_ids=two_prompts, **two_images)
