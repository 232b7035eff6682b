"""PEFT adapters' target modules on roformer-ext models: never a bare `output` (PEFT matches by suffix, so it would
take the feed-forward's too) nor `query` / `key` (TUPE's position projections); `lora_config` fills them in."""

from typing import Any

#: The LoRA targets of each family of linear layers (PEFT suffix names).
LORA_TARGET_MODULES: dict[str, tuple[str, ...]] = {
    "attention": (
        "attention.query",
        "attention.key",
        "attention.value",
        "crossattention.query",
        "crossattention.key",
        "crossattention.value",
    ),
    "attention_output": ("attention.output",),
    "feed_forward": ("feed_forward.intermediate", "feed_forward.output"),
}

Families = str | tuple[str, ...] | list[str]
#: What `lora_config` targets when it is not told: the attention's q, k, v projections and its output.
DEFAULT_LORA_FAMILIES: tuple[str, ...] = ("attention", "attention_output")


def lora_target_modules(families: Families = DEFAULT_LORA_FAMILIES) -> list[str]:
    """The PEFT `target_modules` for the named families ("attention", "attention_output", "feed_forward", or "all")."""
    if isinstance(families, str):
        families = tuple(LORA_TARGET_MODULES) if families == "all" else (families,)
    unknown = [name for name in families if name not in LORA_TARGET_MODULES]
    if unknown or not families:
        raise ValueError(
            f"Unknown LoRA target families {unknown or list(families)}; choose from "
            f"{', '.join(LORA_TARGET_MODULES)} or 'all'."
        )
    return [module for name in families for module in LORA_TARGET_MODULES[name]]


def lora_config(task_type: Any = None, families: Families = DEFAULT_LORA_FAMILIES, **kwargs: Any):
    """A `peft.LoraConfig` (PEFT's `task_type`) with `target_modules` from `families` unless given in `kwargs`."""
    try:
        from peft import LoraConfig
    except ImportError as error:
        raise ImportError(
            "lora_config needs PEFT: pip install peft (in the clone: pip install -e '.[peft]')."
        ) from error
    if kwargs.get("target_modules") is None:
        kwargs["target_modules"] = lora_target_modules(families)
    return LoraConfig(task_type=task_type, **kwargs)
