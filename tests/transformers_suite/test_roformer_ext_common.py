"""transformers' `ModelTesterMixin` and `ConfigTester` on every text class of roformer-ext.

The tester follows transformers' `RoFormerModelTester` (tests/models/roformer/test_modeling_roformer.py): a tiny
random config and the `create_and_check_*` shape checks per head, plus everything `ModelTesterMixin` runs.
"""

import inspect
import unittest

import torch
from conftest import POSITION_SENSITIVE, assert_position_sensitive
from transformers import PreTrainedConfig
from transformers.testing_utils import torch_device

from roformer_ext import (
    RoFormerExtConfig,
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtForMultipleChoice,
    RoFormerExtForQuestionAnswering,
    RoFormerExtForSequenceClassification,
    RoFormerExtForTokenClassification,
    RoFormerExtModel,
)
from roformer_ext.compat import output_cache

from .auto_names import AutoClassNamesMixin
from .upstream_mixins import (
    ConfigTester,
    GenerationTesterMixin,
    ModelTesterMixin,
    config_common_kwargs,
    floats_tensor,
    ids_tensor,
    random_attention_mask,
)


class RoFormerExtModelTester:
    """Tiny config (hidden 32, 2 layers, 4 heads, vocab 99, intermediate 37) and random inputs for the mixin."""

    config_class = RoFormerExtConfig

    def __init__(
        self,
        parent: unittest.TestCase,
        batch_size: int = 13,
        seq_length: int = 7,
        is_training: bool = True,
        use_input_mask: bool = True,
        use_token_type_ids: bool = True,
        use_labels: bool = True,
        vocab_size: int = 99,
        hidden_size: int = 32,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 4,
        intermediate_size: int = 37,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 16,
        type_sequence_label_size: int = 2,
        initializer_range: float = 0.02,
        num_labels: int = 3,
        num_choices: int = 4,
    ) -> None:
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.use_input_mask = use_input_mask
        self.use_token_type_ids = use_token_type_ids
        self.use_labels = use_labels
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.type_sequence_label_size = type_sequence_label_size
        self.initializer_range = initializer_range
        self.num_labels = num_labels
        self.num_choices = num_choices

    def config_kwargs(self) -> dict:
        return dict(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            hidden_act=self.hidden_act,
            hidden_dropout_prob=self.hidden_dropout_prob,
            attention_probs_dropout_prob=self.attention_probs_dropout_prob,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size,
            is_decoder=False,
            initializer_range=self.initializer_range,
        )

    def get_config(self) -> RoFormerExtConfig:
        return self.config_class(**self.config_kwargs())

    def prepare_input_ids(self) -> torch.Tensor:
        return ids_tensor([self.batch_size, self.seq_length], self.vocab_size)

    def prepare_config_and_inputs(self) -> tuple:
        input_ids = self.prepare_input_ids()
        input_mask = random_attention_mask([self.batch_size, self.seq_length]) if self.use_input_mask else None
        token_type_ids = None
        if self.use_token_type_ids:
            token_type_ids = ids_tensor([self.batch_size, self.seq_length], self.type_vocab_size)
        sequence_labels = token_labels = choice_labels = None
        if self.use_labels:
            sequence_labels = ids_tensor([self.batch_size], self.type_sequence_label_size)
            token_labels = ids_tensor([self.batch_size, self.seq_length], self.num_labels)
            choice_labels = ids_tensor([self.batch_size], self.num_choices)
        config = self.get_config()
        return config, input_ids, token_type_ids, input_mask, sequence_labels, token_labels, choice_labels

    def prepare_config_and_inputs_for_decoder(self) -> tuple:
        config, *inputs = self.prepare_config_and_inputs()
        config.is_decoder = True
        encoder_hidden_states = floats_tensor([self.batch_size, self.seq_length, self.hidden_size])
        encoder_attention_mask = ids_tensor([self.batch_size, self.seq_length], vocab_size=2)
        return (config, *inputs, encoder_hidden_states, encoder_attention_mask)

    def prepare_config_and_inputs_for_common(self) -> tuple[RoFormerExtConfig, dict]:
        config, input_ids, token_type_ids, input_mask, *_ = self.prepare_config_and_inputs()
        return config, {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": input_mask}

    def _model(self, model_class: type, config: RoFormerExtConfig):
        return model_class(config).to(torch_device).eval()

    def create_and_check_model(self, config, input_ids, token_type_ids, input_mask, *labels) -> None:
        model = self._model(RoFormerExtModel, config)
        model(input_ids, attention_mask=input_mask, token_type_ids=token_type_ids)
        model(input_ids, token_type_ids=token_type_ids)
        result = model(input_ids)
        self.parent.assertEqual(result.last_hidden_state.shape, (self.batch_size, self.seq_length, self.hidden_size))

    def create_and_check_model_as_decoder(
        self, config, input_ids, token_type_ids, input_mask, *labels, encoder_hidden_states, encoder_attention_mask
    ) -> None:
        config.add_cross_attention = True
        model = self._model(RoFormerExtModel, config)
        inputs = dict(attention_mask=input_mask, token_type_ids=token_type_ids)
        encoder = dict(encoder_hidden_states=encoder_hidden_states)
        with_mask = model(input_ids, **inputs, **encoder, encoder_attention_mask=encoder_attention_mask)
        no_mask = model(input_ids, **inputs, **encoder)
        text_only = model(input_ids, **inputs)
        expected_shape = (self.batch_size, self.seq_length, self.hidden_size)
        for result in (with_mask, no_mask, text_only):
            self.parent.assertEqual(result.last_hidden_state.shape, expected_shape)
        # The cross-attention must read the encoder states and their mask, not ignore them.
        self.parent.assertFalse(torch.allclose(no_mask.last_hidden_state, text_only.last_hidden_state))
        self.parent.assertFalse(torch.allclose(with_mask.last_hidden_state, no_mask.last_hidden_state))

    def create_and_check_for_causal_lm(self, config, input_ids, token_type_ids, input_mask, *labels) -> None:
        token_labels = labels[1]
        model = self._model(RoFormerExtForCausalLM, config)
        result = model(input_ids, attention_mask=input_mask, token_type_ids=token_type_ids, labels=token_labels)
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.seq_length, self.vocab_size))
        self.parent.assertTrue(torch.isfinite(result.loss))

    def create_and_check_for_masked_lm(self, config, input_ids, token_type_ids, input_mask, *labels) -> None:
        token_labels = labels[1]
        model = self._model(RoFormerExtForMaskedLM, config)
        result = model(input_ids, attention_mask=input_mask, token_type_ids=token_type_ids, labels=token_labels)
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.seq_length, self.vocab_size))
        self.parent.assertTrue(torch.isfinite(result.loss))

    def create_and_check_decoder_model_past_large_inputs(
        self, config, input_ids, token_type_ids, input_mask, *labels, encoder_hidden_states, encoder_attention_mask
    ) -> None:
        config.is_decoder = True
        config.add_cross_attention = True
        # position-sensitive weights (tests/conftest.py): the cached step's positions are the claim
        config.initializer_range = POSITION_SENSITIVE["initializer_range"]
        config.rope_parameters = {**config.rope_parameters, "rope_theta": POSITION_SENSITIVE["rope_theta"]}
        model = self._model(RoFormerExtForCausalLM, config)
        encoder = dict(encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_attention_mask)
        outputs = model(input_ids, attention_mask=input_mask, use_cache=True, **encoder)
        next_tokens = ids_tensor((self.batch_size, 3), config.vocab_size)
        next_mask = ids_tensor((self.batch_size, 3), vocab_size=2)
        next_input_ids = torch.cat([input_ids, next_tokens], dim=-1)
        next_attention_mask = torch.cat([input_mask, next_mask], dim=-1)
        from_no_past = model(next_input_ids, attention_mask=next_attention_mask, output_hidden_states=True, **encoder)
        from_past = model(
            next_tokens,
            attention_mask=next_attention_mask,
            cache=output_cache(outputs),
            output_hidden_states=True,
            **encoder,
        )
        from_no_past, from_past = from_no_past.hidden_states[-1], from_past.hidden_states[-1]
        self.parent.assertEqual(from_past.shape[1], next_tokens.shape[1])
        # Padded query rows have no defined output; compare the tokens the mask keeps.
        keep = next_mask.bool()[..., None]
        torch.testing.assert_close(from_past * keep, from_no_past[:, -3:] * keep, atol=1e-4, rtol=1e-4)

        def cached_step(m) -> torch.Tensor:
            past = output_cache(m(input_ids, attention_mask=input_mask, use_cache=True, **encoder))
            step = m(next_tokens, attention_mask=next_attention_mask, cache=past, output_hidden_states=True, **encoder)
            return step.hidden_states[-1] * keep

        assert_position_sensitive(model, cached_step, 1e-4)

    def create_and_check_for_question_answering(self, config, input_ids, token_type_ids, input_mask, *labels) -> None:
        sequence_labels = labels[0]
        model = self._model(RoFormerExtForQuestionAnswering, config)
        result = model(
            input_ids,
            attention_mask=input_mask,
            token_type_ids=token_type_ids,
            start_positions=sequence_labels,
            end_positions=sequence_labels,
        )
        self.parent.assertEqual(result.start_logits.shape, (self.batch_size, self.seq_length))
        self.parent.assertEqual(result.end_logits.shape, (self.batch_size, self.seq_length))

    def create_and_check_for_sequence_classification(
        self, config, input_ids, token_type_ids, input_mask, *labels
    ) -> None:
        config.num_labels = self.num_labels
        model = self._model(RoFormerExtForSequenceClassification, config)
        result = model(input_ids, attention_mask=input_mask, token_type_ids=token_type_ids, labels=labels[0])
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.num_labels))

    def create_and_check_for_token_classification(self, config, input_ids, token_type_ids, input_mask, *labels) -> None:
        config.num_labels = self.num_labels
        model = self._model(RoFormerExtForTokenClassification, config)
        result = model(input_ids, attention_mask=input_mask, token_type_ids=token_type_ids, labels=labels[1])
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.seq_length, self.num_labels))

    def create_and_check_for_multiple_choice(self, config, input_ids, token_type_ids, input_mask, *labels) -> None:
        model = self._model(RoFormerExtForMultipleChoice, config)

        def choices(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.unsqueeze(1).expand(-1, self.num_choices, -1).contiguous()

        result = model(
            choices(input_ids),
            attention_mask=choices(input_mask),
            token_type_ids=choices(token_type_ids),
            labels=labels[2],
        )
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.num_choices))


def forward_accepts(model_class: type, name: str) -> bool:
    """Whether `model_class.forward` takes `name`, by the rule the mixin uses before running a test on it: a named
    parameter, or a key of the TypedDict that annotates `**kwargs` (`Unpack[TransformersKwargs]`)."""
    parameters = inspect.signature(model_class.forward).parameters
    if name in parameters:
        return True
    kwargs = parameters.get("kwargs")
    try:
        return name in kwargs.annotation.__args__[0].__annotations__
    except (AttributeError, IndexError):  # no **kwargs, or a string annotation (`from __future__ import annotations`)
        return False


class DeclaredInputsMixin:
    """The mixin skips a test when a class does not appear to take an input (`output_attentions`, `inputs_embeds`);
    our classes take them all, so such a skip would hide a defect. Fail instead."""

    def test_forward_declares_what_the_mixin_looks_for(self) -> None:
        for model_class in self.all_model_classes:
            for name in ("inputs_embeds", "output_attentions", "output_hidden_states"):
                with self.subTest(model_class=model_class.__name__, input=name):
                    self.assertTrue(forward_accepts(model_class, name), f"{model_class.__name__}.forward: {name}")


class RoFormerExtModelTest(
    DeclaredInputsMixin, AutoClassNamesMixin, ModelTesterMixin, GenerationTesterMixin, unittest.TestCase
):
    all_model_classes = (
        RoFormerExtModel,
        RoFormerExtForMaskedLM,
        RoFormerExtForCausalLM,
        RoFormerExtForMultipleChoice,
        RoFormerExtForQuestionAnswering,
        RoFormerExtForSequenceClassification,
        RoFormerExtForTokenClassification,
    )
    # The mixin skips test_can_init_all_missing_weights for files without a copyright year >= 2023 (transformers'
    # pre-2023 models, whose _init_weights are not fixed yet). Ours is new and must pass it.
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self) -> None:
        self.model_tester = RoFormerExtModelTester(self)
        # Non-default values for ConfigTester's round trips. hidden_size 48 / 4 heads: our config rejects head dims
        # that are not an even integer at construction (RoPE rotates pairs), so RoFormer's 37 cannot be used.
        self.config_tester = ConfigTester(self, config_class=RoFormerExtConfig, hidden_size=48, num_attention_heads=4)

    def test_config(self) -> None:
        self.config_tester.run_common_tests()

    def test_config_common_kwargs_cover_pretrained_config(self) -> None:
        """Our stand-in `config_common_kwargs` sets every public PreTrainedConfig field to a non-default value."""
        base = PreTrainedConfig().to_dict()
        public = {key for key in base if not key.startswith("_")} - {"transformers_version", "model_type"}
        public -= {"is_encoder_decoder"}  # a class property of the model family, not a constructor argument
        self.assertEqual(sorted(public - set(config_common_kwargs)), [])
        defaults = [key for key, value in config_common_kwargs.items() if base.get(key) == value]
        self.assertEqual(defaults, [])

    def test_model(self) -> None:
        self.model_tester.create_and_check_model(*self.model_tester.prepare_config_and_inputs())

    def test_model_as_decoder(self) -> None:
        config, *inputs, encoder_hidden_states, encoder_attention_mask = (
            self.model_tester.prepare_config_and_inputs_for_decoder()
        )
        self.model_tester.create_and_check_model_as_decoder(
            config, *inputs, encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_attention_mask
        )

    def test_decoder_model_past_with_large_inputs(self) -> None:
        config, *inputs, encoder_hidden_states, encoder_attention_mask = (
            self.model_tester.prepare_config_and_inputs_for_decoder()
        )
        self.model_tester.create_and_check_decoder_model_past_large_inputs(
            config, *inputs, encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_attention_mask
        )

    def test_for_causal_lm(self) -> None:
        config, *inputs = self.model_tester.prepare_config_and_inputs_for_decoder()[:-2]
        self.model_tester.create_and_check_for_causal_lm(config, *inputs)

    def test_for_masked_lm(self) -> None:
        self.model_tester.create_and_check_for_masked_lm(*self.model_tester.prepare_config_and_inputs())

    def test_for_multiple_choice(self) -> None:
        self.model_tester.create_and_check_for_multiple_choice(*self.model_tester.prepare_config_and_inputs())

    def test_for_question_answering(self) -> None:
        self.model_tester.create_and_check_for_question_answering(*self.model_tester.prepare_config_and_inputs())

    def test_for_sequence_classification(self) -> None:
        self.model_tester.create_and_check_for_sequence_classification(*self.model_tester.prepare_config_and_inputs())

    def test_for_token_classification(self) -> None:
        self.model_tester.create_and_check_for_token_classification(*self.model_tester.prepare_config_and_inputs())


class PositionEncodingModelTester(RoFormerExtModelTester):
    """The same tiny models with another `position_encoding` (set by the test class)."""

    position_encoding = "rope"

    def config_kwargs(self) -> dict:
        knobs = {"max_relative_position": 4} if self.position_encoding == "shaw" else None
        return {
            **super().config_kwargs(),
            "position_encoding": self.position_encoding,
            "position_encoding_parameters": knobs,
        }


def _position_encoding_test(name: str) -> type:
    """transformers' common tests on every text class built with `position_encoding=name`."""

    class Tester(PositionEncodingModelTester):
        position_encoding = name

    class PositionEncodingModelTest(RoFormerExtModelTest):
        def setUp(self) -> None:
            super().setUp()
            self.model_tester = Tester(self)
            if "rope_scaling" in self._testMethodName:  # the mixin's RoPE frequency-scaling checks
                self.skipTest(f"RoPE scaling does not apply to position_encoding={name!r}")

    PositionEncodingModelTest.__name__ = PositionEncodingModelTest.__qualname__ = f"RoFormerExt_{name}_ModelTest"
    return PositionEncodingModelTest


# An absolute table (its init, resizing, loading), a term on the scores shared by the layers, and one per layer.
RoFormerExtLearnedModelTest = _position_encoding_test("learned")
RoFormerExtT5BiasModelTest = _position_encoding_test("t5_bias")
RoFormerExtShawModelTest = _position_encoding_test("shaw")
# The RoFormer paper's other alternatives: per-layer W_r, u, v (Transformer-XL), a shared untied table (TUPE), a shared
# relative table projected by each layer (DeBERTa).
RoFormerExtTransformerXLModelTest = _position_encoding_test("transformer_xl")
RoFormerExtTupeModelTest = _position_encoding_test("tupe")
RoFormerExtDebertaModelTest = _position_encoding_test("deberta")


class HalfPairLayoutModelTester(RoFormerExtModelTester):
    """The same tiny models with the half pair layout. 13 × 7 rows exceed the 32 projection outputs, so attention
    projects queries and keys with reordered weight rows (`rope.HalfPairRotation.project_query_key`); decoding steps do not."""

    def config_kwargs(self) -> dict:
        return {**super().config_kwargs(), "rope_parameters": {"pair_layout": "half"}}


class RoFormerExtHalfPairLayoutModelTest(RoFormerExtModelTest):
    """transformers' common tests on every text class with pairs (i, i + d/2), as most RoPE code lays them out."""

    def setUp(self) -> None:
        super().setUp()
        self.model_tester = HalfPairLayoutModelTester(self)
