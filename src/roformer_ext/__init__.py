"""roformer-ext: RoFormer with a pluggable rotary position embedding, on transformers 5.

Importing the package registers every class with transformers' Auto classes, and marks them
`register_for_auto_class` so `save_pretrained` writes an `auto_map` that loads with `trust_remote_code=True`
where this package is not installed.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration_roformer_ext import RoFormerExtConfig
from .modeling_roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtForMultipleChoice,
    RoFormerExtForQuestionAnswering,
    RoFormerExtForSequenceClassification,
    RoFormerExtForTokenClassification,
    RoFormerExtModel,
    RoFormerExtPreTrainedModel,
)
from .positions import build_position_ids, register_position_scheme, registered_position_schemes
from .rope import RotaryEmbedding, apply_rotary, register_rotary_embedding, registered_rotary_kinds

__version__ = "0.1.0"

_TEXT_MODELS = {
    AutoModel: RoFormerExtModel,
    AutoModelForMaskedLM: RoFormerExtForMaskedLM,
    AutoModelForCausalLM: RoFormerExtForCausalLM,
    AutoModelForSequenceClassification: RoFormerExtForSequenceClassification,
    AutoModelForTokenClassification: RoFormerExtForTokenClassification,
    AutoModelForQuestionAnswering: RoFormerExtForQuestionAnswering,
    AutoModelForMultipleChoice: RoFormerExtForMultipleChoice,
}


def _register_auto_classes() -> None:
    AutoConfig.register(RoFormerExtConfig.model_type, RoFormerExtConfig, exist_ok=True)
    RoFormerExtConfig.register_for_auto_class("AutoConfig")
    for auto_class, model_class in _TEXT_MODELS.items():
        auto_class.register(RoFormerExtConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class.__name__)


_register_auto_classes()

__all__ = [
    "RoFormerExtConfig",
    "RoFormerExtForCausalLM",
    "RoFormerExtForMaskedLM",
    "RoFormerExtForMultipleChoice",
    "RoFormerExtForQuestionAnswering",
    "RoFormerExtForSequenceClassification",
    "RoFormerExtForTokenClassification",
    "RoFormerExtModel",
    "RoFormerExtPreTrainedModel",
    "RotaryEmbedding",
    "apply_rotary",
    "build_position_ids",
    "register_position_scheme",
    "register_rotary_embedding",
    "registered_position_schemes",
    "registered_rotary_kinds",
]
