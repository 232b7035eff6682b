"""Let transformers' common tests see our classes' tasks the way they see an in-tree model's.

`ModelTesterMixin` decides per class what to do from its class name in transformers' `MODEL_*_MAPPING_NAMES`
tables: which labels `_prepare_for_class` builds, that multiple-choice inputs get a choices dimension, that a base
model is not trained, which classes load base weights, and so on. An in-tree model is listed in those tables; a model
registered with `AutoModelFor*.register` (as importing roformer_ext does) is listed only in the lazy Auto mappings
built over them. `auto_class_names()` adds each registered roformer-ext class to the table of every Auto mapping it is
registered in, for the duration of a test class, and restores the tables afterwards. It reads the package's own
registrations, so the tests see exactly the tasks the package declares.
"""

import contextlib
from collections.abc import Iterator
from unittest import mock

from transformers.models.auto import modeling_auto

from roformer_ext import RoFormerExtConfig, RoFormerExtVisionTextConfig

OUR_CONFIGS = (RoFormerExtConfig, RoFormerExtVisionTextConfig)


def _registered_names() -> dict[str, dict[str, str]]:
    """{name of a `MODEL_*_MAPPING_NAMES` table: {model_type: class name}} for every registration of ours."""
    additions: dict[str, dict[str, str]] = {}
    for table_name in dir(modeling_auto):
        if not table_name.endswith("_MAPPING_NAMES"):
            continue
        mapping = getattr(modeling_auto, table_name.removesuffix("_NAMES"), None)
        if not hasattr(mapping, "get"):
            continue
        for config_class in OUR_CONFIGS:
            model_class = mapping.get(config_class, None)
            if model_class is not None:
                additions.setdefault(table_name, {})[config_class.model_type] = model_class.__name__
    return additions


@contextlib.contextmanager
def auto_class_names() -> Iterator[None]:
    """Within the block, transformers' name tables list our registered classes (restored on exit)."""
    with contextlib.ExitStack() as stack:
        for table_name, entries in _registered_names().items():
            stack.enter_context(mock.patch.dict(getattr(modeling_auto, table_name), entries))
        yield


class AutoClassNamesMixin:
    """For a test class: our registered classes are in transformers' name tables while it runs."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.enterClassContext(auto_class_names())
