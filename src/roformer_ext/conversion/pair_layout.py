"""Switch a model between the interleaved and half RoPE pair layouts without changing what it computes, by permuting
each head's q/k rows (v rows and output columns too with `rotary_value`)."""

import torch
from torch import nn

from ..registries import PAIR_LAYOUTS
from ..rope import query_key_rotation


def _head_permutation(config, to_layout: str) -> torch.Tensor:
    """Index over all heads' output rows that moves each head's dims to `to_layout`."""
    forward = torch.cat((torch.arange(0, config.head_dim, 2), torch.arange(1, config.head_dim, 2)))  # (0,1) -> (0,d/2)
    per_head = forward if to_layout == "half" else torch.argsort(forward)
    offsets = torch.arange(config.num_attention_heads)[:, None] * config.head_dim
    return (offsets + per_head).reshape(-1)


@torch.no_grad()
def convert_pair_layout(model: nn.Module, to_layout: str) -> nn.Module:
    """In place: permute weights and set `config.rope_parameters["pair_layout"]`; returns the model."""
    if to_layout not in PAIR_LAYOUTS:
        raise ValueError(f"Unknown pair layout {to_layout!r}; choose one of {', '.join(PAIR_LAYOUTS)}.")
    config = model.config
    if config.rope_parameters["pair_layout"] == to_layout:
        return model
    if config.rope_parameters.get("axes", 1) != 1 and config.rope_parameters.get("axis_allocation") != "sections":
        raise ValueError("Only 1-axis or 'sections' rotaries keep their frequency order when the layout changes.")
    index = _head_permutation(config, to_layout)
    base = model.base_model
    for layer in base.layers:
        attention = layer.attention
        rotated = [attention.query, attention.key] + ([attention.value] if config.rotary_value else [])
        for linear in rotated:
            linear.weight.copy_(linear.weight[index])
            if linear.bias is not None:
                linear.bias.copy_(linear.bias[index])
        if config.rotary_value:
            attention.output.weight.copy_(attention.output.weight[:, index])
    config.rope_parameters["pair_layout"] = to_layout  # the one place the layout is kept
    for layer in base.layers:  # each attention chose its rotation for the old layout when it was built
        layer.attention.rotation = query_key_rotation(config)
    return model
