"""Stand-in for transformers' tests/generation/test_utils.py (repository only): the name test_modeling_common.py
imports. Generation is tested by tests/model/test_modeling.py and tests/vision/test_vision_models.py."""


class GenerationTesterMixin:
    """Marker base: a tester for classes that can `generate` (no generate tests of its own here)."""
