"""`ModelTesterMixin` decides per class (labels, base model...) from the `MODEL_*_MAPPING_NAMES` tables, which do not
list classes registered with `AutoModelFor*.register`: `AutoClassNamesMixin` adds ours while a test class runs."""

from unittest import mock

from transformers.models.auto import modeling_auto

from roformer_ext import RoFormerExtConfig, RoFormerExtVisionTextConfig


def _registered_names() -> dict[str, dict[str, str]]:
    """{name of a `MODEL_*_MAPPING_NAMES` table: {model_type: class name}} for every registration of ours."""
    additions: dict[str, dict[str, str]] = {}
    for table_name in dir(modeling_auto):
        if not table_name.endswith("_MAPPING_NAMES"):
            continue
        mapping = getattr(modeling_auto, table_name.removesuffix("_NAMES"), None)
        if not hasattr(mapping, "get"):
            continue
        for config_class in (RoFormerExtConfig, RoFormerExtVisionTextConfig):
            model_class = mapping.get(config_class, None)
            if model_class is not None:
                additions.setdefault(table_name, {})[config_class.model_type] = model_class.__name__
    return additions


class AutoClassNamesMixin:
    """For a test class: our registered classes are in transformers' name tables while it runs (restored after)."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        for table_name, entries in _registered_names().items():
            cls.enterClassContext(mock.patch.dict(getattr(modeling_auto, table_name), entries))
