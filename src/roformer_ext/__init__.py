"""roformer-ext: RoFormer with a pluggable rotary position embedding, on transformers 5. Importing it registers every
class with the Auto classes and for `auto_map` (remote code). Pillow is optional: only the image processor needs it."""

from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoProcessor,
    AutoTokenizer,
)
from transformers.utils import is_vision_available

from .axis_allocations import register_axis_allocation, registered_axis_allocations
from .configuration_roformer_ext import RoFormerExtConfig, RoFormerExtVisionTextConfig
from .data_collator import DataCollatorForPackedClassification, FlattenPaddedBatch
from .image_processing_roformer_ext import RoFormerExtImageProcessor
from .masking_roformer_ext import unilm_attention_mask
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
from .modeling_roformer_ext_vision import (
    RoFormerExtVisionTextForCausalLM,
    RoFormerExtVisionTextForMaskedLM,
    RoFormerExtVisionTextForSequenceClassification,
    RoFormerExtVisionTextModel,
)
from .position_encodings import PositionEncoding, register_position_encoding, registered_position_encodings
from .position_schemes import register_position_scheme, registered_position_schemes
from .processing_roformer_ext import RoFormerExtProcessor, add_vision_tokens
from .relative_position_encodings import RELATIVE_ENCODINGS as _RELATIVE_ENCODINGS  # noqa: F401  (registers them)
from .rope import RotaryEmbedding, register_rotary_embedding, registered_rotary_kinds
from .similarity import SimilarSentence, SimilarSentenceGenerator, save_for_sentence_transformers
from .tokenization_roformer_ext import RoFormerExtTokenizer, RoFormerExtTokenizerFast

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

_VISION_TEXT_MODELS = {
    AutoModel: RoFormerExtVisionTextModel,
    AutoModelForMaskedLM: RoFormerExtVisionTextForMaskedLM,
    AutoModelForSequenceClassification: RoFormerExtVisionTextForSequenceClassification,
    AutoModelForCausalLM: RoFormerExtVisionTextForCausalLM,
    AutoModelForImageTextToText: RoFormerExtVisionTextForCausalLM,
}


def _register_auto_classes() -> None:
    for config_class, models in ((RoFormerExtConfig, _TEXT_MODELS), (RoFormerExtVisionTextConfig, _VISION_TEXT_MODELS)):
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class("AutoConfig")
        for auto_class, model_class in models.items():
            auto_class.register(config_class, model_class, exist_ok=True)
            if auto_class is not AutoModelForImageTextToText:
                model_class.register_for_auto_class(auto_class.__name__)
        tokenizers = dict(slow_tokenizer_class=RoFormerExtTokenizer, fast_tokenizer_class=RoFormerExtTokenizerFast)
        AutoTokenizer.register(config_class, **tokenizers, exist_ok=True)
    if is_vision_available():  # without pillow, transformers' AutoImageProcessor is a placeholder that raises
        image_processors = {"pil": RoFormerExtImageProcessor, "torchvision": RoFormerExtImageProcessor}
        AutoImageProcessor.register(
            RoFormerExtVisionTextConfig, image_processor_classes=image_processors, exist_ok=True
        )
    AutoProcessor.register(RoFormerExtVisionTextConfig, RoFormerExtProcessor, exist_ok=True)
    RoFormerExtImageProcessor.register_for_auto_class("AutoImageProcessor")
    RoFormerExtProcessor.register_for_auto_class("AutoProcessor")


_register_auto_classes()

__all__ = [
    "DataCollatorForPackedClassification",
    "FlattenPaddedBatch",
    "RoFormerExtConfig",
    "RoFormerExtImageProcessor",
    "RoFormerExtProcessor",
    "RoFormerExtTokenizer",
    "RoFormerExtTokenizerFast",
    "RoFormerExtVisionTextConfig",
    "RoFormerExtVisionTextForCausalLM",
    "RoFormerExtVisionTextForMaskedLM",
    "RoFormerExtVisionTextForSequenceClassification",
    "RoFormerExtVisionTextModel",
    "add_vision_tokens",
    "unilm_attention_mask",
    "RoFormerExtForCausalLM",
    "RoFormerExtForMaskedLM",
    "RoFormerExtForMultipleChoice",
    "RoFormerExtForQuestionAnswering",
    "RoFormerExtForSequenceClassification",
    "RoFormerExtForTokenClassification",
    "RoFormerExtModel",
    "RoFormerExtPreTrainedModel",
    "PositionEncoding",
    "RotaryEmbedding",
    "SimilarSentence",
    "SimilarSentenceGenerator",
    "save_for_sentence_transformers",
    "register_axis_allocation",
    "register_position_encoding",
    "register_position_scheme",
    "register_rotary_embedding",
    "registered_position_encodings",
    "registered_axis_allocations",
    "registered_position_schemes",
    "registered_rotary_kinds",
]
