"""transformers' `ModelTesterMixin`, `GenerationTesterMixin` and `ConfigTester` on every text class of roformer-ext,
with the `create_and_check_*` checks of transformers' `RoFormerModelTester`."""

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
    """Tiny config and random inputs for the mixin; sizes are class attributes, overridden per instance by keyword."""

    config_class = RoFormerExtConfig
    batch_size, seq_length, is_training = 13, 7, True
    use_input_mask = use_token_type_ids = use_labels = True
    vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size = 99, 32, 2, 4, 37
    hidden_act, hidden_dropout_prob, attention_probs_dropout_prob = "gelu", 0.1, 0.1
    max_position_embeddings, type_vocab_size, type_sequence_label_size = 512, 16, 2
    initializer_range, num_labels, num_choices = 0.02, 3, 4

    def __init__(self, parent: unittest.TestCase, **overrides) -> None:
        self.parent = parent
        unknown = [name for name in overrides if not hasattr(self, name)]
        assert not unknown, f"not a tester setting: {unknown}"
        vars(self).update(overrides)

    def config_kwargs(self) -> dict:
        names = (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "hidden_act",
            "hidden_dropout_prob",
            "attention_probs_dropout_prob",
            "max_position_embeddings",
            "type_vocab_size",
            "initializer_range",
        )
        return {**{name: getattr(self, name) for name in names}, "is_decoder": False}

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
        self, config, input_ids, token_type_ids, input_mask, *labels_and_encoder
    ) -> None:
        encoder_hidden_states, encoder_attention_mask = labels_and_encoder[-2:]
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

    def create_and_check_head(self, model_class, config, input_ids, token_type_ids, input_mask, *labels) -> None:
        """A head's output shapes and its loss from labels."""
        sequence_labels, token_labels, choice_labels = labels
        batch, seq = self.batch_size, self.seq_length
        if model_class in (RoFormerExtForSequenceClassification, RoFormerExtForTokenClassification):
            config.num_labels = self.num_labels
        expected, targets = {
            RoFormerExtForCausalLM: ({"logits": (batch, seq, self.vocab_size)}, {"labels": token_labels}),
            RoFormerExtForMaskedLM: ({"logits": (batch, seq, self.vocab_size)}, {"labels": token_labels}),
            RoFormerExtForQuestionAnswering: (
                {"start_logits": (batch, seq), "end_logits": (batch, seq)},
                {"start_positions": sequence_labels, "end_positions": sequence_labels},
            ),
            RoFormerExtForSequenceClassification: ({"logits": (batch, self.num_labels)}, {"labels": sequence_labels}),
            RoFormerExtForTokenClassification: ({"logits": (batch, seq, self.num_labels)}, {"labels": token_labels}),
            RoFormerExtForMultipleChoice: ({"logits": (batch, self.num_choices)}, {"labels": choice_labels}),
        }[model_class]
        inputs = dict(input_ids=input_ids, attention_mask=input_mask, token_type_ids=token_type_ids)
        if model_class is RoFormerExtForMultipleChoice:
            inputs = {k: v.unsqueeze(1).expand(-1, self.num_choices, -1).contiguous() for k, v in inputs.items()}
        result = self._model(model_class, config)(**inputs, **targets)
        for name, shape in expected.items():
            self.parent.assertEqual(result[name].shape, shape)
        if model_class is not RoFormerExtForQuestionAnswering:  # its random positions may fall on masked tokens
            self.parent.assertTrue(torch.isfinite(result.loss))

    def create_and_check_decoder_model_past_large_inputs(
        self, config, input_ids, token_type_ids, input_mask, *labels_and_encoder
    ) -> None:
        encoder_hidden_states, encoder_attention_mask = labels_and_encoder[-2:]
        config.is_decoder = config.add_cross_attention = True
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
        step = dict(attention_mask=next_attention_mask, output_hidden_states=True, **encoder)
        from_no_past = model(next_input_ids, **step).hidden_states[-1]
        from_past = model(next_tokens, cache=output_cache(outputs), **step).hidden_states[-1]
        self.parent.assertEqual(from_past.shape[1], next_tokens.shape[1])
        keep = next_mask.bool()[..., None]  # padded query rows have no defined output
        torch.testing.assert_close(from_past * keep, from_no_past[:, -3:] * keep, atol=1e-4, rtol=1e-4)

        def cached_step(m) -> torch.Tensor:
            past = output_cache(m(input_ids, attention_mask=input_mask, use_cache=True, **encoder))
            return m(next_tokens, cache=past, **step).hidden_states[-1] * keep

        assert_position_sensitive(model, cached_step, 1e-4)


def forward_accepts(model_class: type, name: str) -> bool:
    """Whether `model_class.forward` takes `name` by the mixin's rule: a parameter or a key of `**kwargs`' TypedDict."""
    parameters = inspect.signature(model_class.forward).parameters
    if name in parameters:
        return True
    kwargs = parameters.get("kwargs")
    try:
        return name in kwargs.annotation.__args__[0].__annotations__
    except (AttributeError, IndexError):  # no **kwargs, or a string annotation (`from __future__ import annotations`)
        return False


class DeclaredInputsMixin:
    """The mixin skips a test when a class seems not to take an input; ours take them all, so fail instead of skip."""

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
    # The mixin skips test_can_init_all_missing_weights for files without a copyright year >= 2023; ours must pass it.
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self) -> None:
        self.model_tester = RoFormerExtModelTester(self)
        # hidden_size 48 / 4 heads: our config rejects odd head dims (RoPE rotates pairs): RoFormer's 37 cannot be used
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
        self.model_tester.create_and_check_model_as_decoder(*self.model_tester.prepare_config_and_inputs_for_decoder())

    def test_decoder_model_past_with_large_inputs(self) -> None:
        tester = self.model_tester
        tester.create_and_check_decoder_model_past_large_inputs(*tester.prepare_config_and_inputs_for_decoder())

    def test_heads(self) -> None:
        for model_class in set(self.all_model_classes) - {RoFormerExtModel}:
            with self.subTest(model_class.__name__):
                config, *inputs = self.model_tester.prepare_config_and_inputs()
                config.is_decoder = model_class is RoFormerExtForCausalLM
                self.model_tester.create_and_check_head(model_class, config, *inputs)


def _variant(name: str, **config) -> type:
    """transformers' common tests on every text class built with `config` (another position encoding or layout)."""

    class Tester(RoFormerExtModelTester):
        def config_kwargs(self) -> dict:
            return {**super().config_kwargs(), **config}

    class VariantModelTest(RoFormerExtModelTest):
        def setUp(self) -> None:
            super().setUp()
            self.model_tester = Tester(self)
            if "position_encoding" in config and "rope_scaling" in self._testMethodName:  # the mixin's RoPE scaling
                self.skipTest(f"RoPE scaling does not apply to position_encoding={config['position_encoding']!r}")

    VariantModelTest.__name__ = VariantModelTest.__qualname__ = f"RoFormerExt{name}ModelTest"
    return VariantModelTest


# An absolute table (its init, resizing, loading), a term on the scores shared by the layers, and one per layer.
RoFormerExtLearnedModelTest = _variant("Learned", position_encoding="learned")
RoFormerExtT5BiasModelTest = _variant("T5Bias", position_encoding="t5_bias")
RoFormerExtShawModelTest = _variant(
    "Shaw", position_encoding="shaw", position_encoding_parameters={"max_relative_position": 4}
)
# The RoFormer paper's other alternatives: per-layer W_r, u, v; a shared untied table; a relative table per layer
RoFormerExtTransformerXLModelTest = _variant("TransformerXL", position_encoding="transformer_xl")
RoFormerExtTupeModelTest = _variant("Tupe", position_encoding="tupe")
RoFormerExtDebertaModelTest = _variant("Deberta", position_encoding="deberta")
# Pairs (i, i + d/2): 13 x 7 rows exceed the 32 projection outputs, so attention reorders weight rows (decoding not)
RoFormerExtHalfPairLayoutModelTest = _variant("HalfPairLayout", rope_parameters={"pair_layout": "half"})
