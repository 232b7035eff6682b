"""Stand-in for transformers' tests/exporters/test_export.py: only the name test_modeling_common.py imports.

`ModelTesterMixin` subclasses `ExportTesterMixin`. The real one (torch.export / ONNX / ExecuTorch / OpenVINO export
of every model class) lives only in transformers' repository and needs `transformers.exporters` backends that are
not part of this project; the empty base keeps `ModelTesterMixin` importable and adds no tests.
"""


class ExportTesterMixin:
    """Empty base class of `ModelTesterMixin` (export tests are not run here)."""
