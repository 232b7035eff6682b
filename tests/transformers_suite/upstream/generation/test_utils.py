"""Stand-in for transformers' tests/generation/test_utils.py: only the name test_modeling_common.py imports.

The real `GenerationTesterMixin` (`generate` with every decoding strategy and cache type) lives only in
transformers' repository, not in its sdist, and pulls in much of the repository's test tree. Our
`ModelTesterMixin.test_generation_tester_mixin_inheritance` checks that a tester whose classes can `generate`
inherits this mixin; ours do, so that check holds, and generation itself is covered by the project's own tests
(tests/model/test_modeling.py, tests/vision/test_vision_models.py).
"""


class GenerationTesterMixin:
    """Marker base: a tester for classes that can `generate` (no generate tests of its own here)."""
