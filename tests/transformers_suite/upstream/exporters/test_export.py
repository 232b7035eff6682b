"""Stand-in for transformers' tests/exporters/test_export.py (repository only; its export backends are not ours):
the empty base class `ModelTesterMixin` subclasses."""


class ExportTesterMixin:
    """Empty base class of `ModelTesterMixin` (export tests are not run here)."""
