"""LoRA and other PEFT adapters on roformer-ext models: the module names to target, and a `LoraConfig` that has them.

Every roformer-ext text and vision-text model has the same `nn.Linear` names in each layer
(`roformer.layers.<i>.` ...):

| family | module names (PEFT `target_modules`) |
| --- | --- |
| attention q / k / v | `attention.query`, `attention.key`, `attention.value` and the cross-attention's `crossattention.query`, `crossattention.key`, `crossattention.value` (a decoder with `add_cross_attention`) |
| attention output | `attention.output` |
| feed-forward | `feed_forward.intermediate`, `feed_forward.output` |
| heads (trained in full, PEFT `modules_to_save`) | `classifier` (sequence / token classification), `qa_outputs` (question answering), `lm_head` (masked / causal LM), `pooler` (the Sim embedding) |

Never target a bare `output`: PEFT matches a name by suffix, and `output` is both the attention output and the
feed-forward output (BERT recipes that say `output.dense` catch both too). A bare `query` / `key` has the same trap:
TUPE's position projections are `roformer.position_encoding.query` / `.key`, which are no attention projections.

PEFT fills `target_modules` from its own table, keyed by `model_type`, when a `LoraConfig` leaves them out. It
offers no public way to add a model type to that table (peft 0.21: `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`
is a module-level dict that only PEFT's own entries fill; `register_peft_method` registers a new *method*, not a
model's defaults). Writing into that dict on import would change PEFT for every model in the process, so this
module does not: `lora_config(task_type=...)` returns a `LoraConfig` with the targets filled in, and
`target_modules="all-linear"` (a PEFT value) also works on these models.
"""

from __future__ import annotations

from typing import Any

#: The LoRA targets of each family of linear layers (PEFT suffix names, see the module docstring).
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

#: What `lora_config` targets when it is not told: the attention's q, k, v projections and its output.
DEFAULT_LORA_FAMILIES: tuple[str, ...] = ("attention", "attention_output")


def lora_target_modules(families: str | tuple[str, ...] | list[str] = DEFAULT_LORA_FAMILIES) -> list[str]:
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


def lora_config(
    task_type: Any = None,
    families: str | tuple[str, ...] | list[str] = DEFAULT_LORA_FAMILIES,
    **kwargs: Any,
):
    """A `peft.LoraConfig` for a roformer-ext model: `target_modules` from `families` unless given in `kwargs`.

    `task_type` is PEFT's (`"SEQ_CLS"`, `"TOKEN_CLS"`, `"QUESTION_ANS"`, `"CAUSAL_LM"`, `"FEATURE_EXTRACTION"`, or a
    `peft.TaskType`); for classification and question answering PEFT then also trains the head (`classifier`,
    `qa_outputs`) in full. Needs `pip install peft` (the `peft` extra).
    """
    try:
        from peft import LoraConfig
    except ImportError as error:
        raise ImportError(
            "lora_config needs PEFT: pip install peft (or, in the roformer-ext clone, pip install -e '.[peft]')."
        ) from error
    if kwargs.get("target_modules") is None:
        kwargs["target_modules"] = lora_target_modules(families)
    return LoraConfig(task_type=task_type, **kwargs)


__all__ = ["DEFAULT_LORA_FAMILIES", "LORA_TARGET_MODULES", "lora_config", "lora_target_modules"]
