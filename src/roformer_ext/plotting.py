"""Figures for the README: where each position scheme puts a text–image–text layout, RoPE's long-range decay, and
what the other position encodings do with relative distance (the curves of the decay figure).

Needs matplotlib (the `plot` extra: `pip install 'roformer-ext[plot]'`). Figures are drawn with the Agg backend, so no display is needed.
"""

from __future__ import annotations

import types
from pathlib import Path

import torch

from .positions import build_position_ids

#: (scheme, axes of its config, the (row, col) axes drawn and their names, panel title)
PANELS = (
    ("rope_1d", 2, (0, 1), ("row", "col"), "rope_1d"),
    ("rope_2d_rows", 2, (0, 1), ("row", "col"), "rope_2d_rows"),
    ("rope_tie", 2, (0, 1), ("row", "col"), "rope_tie (v1)"),
    ("rope_tie_v2", 2, (0, 1), ("row", "col"), "rope_tie_v2"),
    ("mrope", 3, (1, 2), ("h", "w"), "mrope (h, w axes)"),
)
_TEXT, _IMAGE = 1, 2  # token ids of the example layout


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            "Plotting needs matplotlib, which is not installed: pip install 'roformer-ext[plot]' (or: pip install matplotlib)."
        ) from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def layout_positions(
    scheme: str, axes: int, text_before: int, rows: int, cols: int, text_after: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions (axes, tokens) of `text_before` text tokens, a rows×cols image and `text_after` text tokens,
    and a boolean mask of the image tokens."""
    tokens = [_TEXT] * text_before + [_IMAGE] * (rows * cols) + [_TEXT] * text_after
    config = types.SimpleNamespace(
        rope_parameters={"position_scheme": scheme, "axes": axes}, image_token_id=_IMAGE, video_token_id=None
    )
    input_ids = torch.tensor([tokens])
    position_ids, _ = build_position_ids(input_ids, config, image_grid_thw=torch.tensor([[1, rows, cols]]))
    return position_ids[:, 0], input_ids[0] == _IMAGE


def plot_positions(path: str | Path, text_before: int = 5, rows: int = 3, cols: int = 4, text_after: int = 4) -> Path:
    """One panel per scheme: every token at its (row, col) position, labelled with its index in the sequence.

    Row runs downwards and col to the right, as in Su's figures, so text reads along the diagonal.
    """
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    figure, grid = plt.subplots(2, 3, figsize=(14, 9.6))
    panels = grid.flatten()
    for panel, (scheme, axes, (row_axis, col_axis), names, title) in zip(panels, PANELS):
        positions, is_image = layout_positions(scheme, axes, text_before, rows, cols, text_after)
        row, col = positions[row_axis], positions[col_axis]
        for mask, colour, label in ((~is_image, "tab:blue", "text"), (is_image, "tab:orange", "image patch")):
            panel.scatter(col[mask], row[mask], s=90, c=colour, edgecolors="black", linewidths=0.5, label=label)
        for index, (y, x) in enumerate(zip(row.tolist(), col.tolist())):
            panel.annotate(str(index), (x, y), ha="center", va="center", fontsize=7)
        panel.set_title(title)
        panel.set_xlabel(f"axis {col_axis} ({names[1]})")
        panel.set_ylabel(f"axis {row_axis} ({names[0]})")
        panel.xaxis.set_major_locator(MaxNLocator(integer=True))
        panel.yaxis.set_major_locator(MaxNLocator(integer=True))
        panel.invert_yaxis()
        panel.set_aspect("equal", adjustable="datalim")
        panel.grid(alpha=0.3)
        panel.margins(0.12)
    legend = panels[len(PANELS)]
    legend.axis("off")
    legend.legend(*panels[0].get_legend_handles_labels(), loc="center", fontsize=12, markerscale=1.5)
    figure.suptitle(
        f"Positions of {text_before} text tokens, a {rows}×{cols} image and {text_after} text tokens "
        "(labels: order in the sequence)"
    )
    figure.tight_layout()
    return _save(figure, path, plt)


def long_range_decay(max_distance: int = 256, dim: int = 128, base: float = 10000.0) -> torch.Tensor:
    """RoFormer §3.4.3: (1/(d/2)) Σ_j |S_j| with S_j = Σ_{i<j} e^{i(m−n)θ_i}, θ_i = base^(−2i/d), j = 1…d/2.

    It bounds how much a relative distance m−n can contribute to the attention score; its decay is RoPE's
    long-term decay property. Returns one value per distance 0…max_distance.
    """
    theta = base ** (-2 * torch.arange(dim // 2, dtype=torch.float64) / dim)
    distance = torch.arange(max_distance + 1, dtype=torch.float64)
    angles = distance[:, None] * theta
    partial_sums = torch.polar(torch.ones_like(angles), angles).cumsum(dim=1)  # S_1 … S_{d/2}
    return partial_sums.abs().mean(dim=1)


def plot_long_range_decay(path: str | Path, max_distance: int = 256, dim: int = 128, base: float = 10000.0) -> Path:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    axis.plot(long_range_decay(max_distance, dim, base).numpy())
    axis.set_xlabel("relative distance m − n")
    axis.set_ylabel("relative upper bound  mean_j |S_j|")
    axis.set_title(f"Long-term decay of RoPE (d = {dim}, θ_i = {base:g}^(−2i/d))")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    return _save(figure, path, plt)


def sinusoidal_similarity(max_distance: int = 256, dim: int = 128, base: float = 10000.0) -> torch.Tensor:
    """Cosine between the Transformer's sinusoidal position vectors p_m and p_{m+k}, for k = 0…max_distance.

    p_m = (sin mθ_i, cos mθ_i)_i, θ_i = base^(−2i/d), so p_m·p_n = Σ_i cos((m−n)θ_i) depends only on m − n and
    |p_m|² = d/2: the cosine is (2/d) Σ_i cos(kθ_i). Its decay is the absolute encoding's analogue of RoPE's.
    """
    theta = base ** (-2 * torch.arange(dim // 2, dtype=torch.float64) / dim)
    distance = torch.arange(max_distance + 1, dtype=torch.float64)
    return torch.cos(distance[:, None] * theta).mean(dim=1)


def alibi_bias(slopes: torch.Tensor, max_distance: int = 256) -> torch.Tensor:
    """ALiBi's bias −slope·|k| per head: (heads, max_distance + 1). Linear in distance by construction."""
    distance = torch.arange(max_distance + 1, dtype=torch.float64)
    return -slopes.to(torch.float64)[:, None] * distance


def t5_bias_by_distance(
    bucket_bias: torch.Tensor,
    max_distance: int = 256,
    bidirectional: bool = True,
    num_buckets: int = 32,
    bucket_max_distance: int = 128,
    direction: int = 1,
) -> torch.Tensor:
    """T5's learned relative bias per head as a function of distance: (heads, max_distance + 1).

    `bucket_bias` is the (num_buckets, heads) embedding table; the bucket of each distance comes from transformers'
    own `T5Attention._relative_position_bucket` (memory − query = `direction`·k: +1 looks right, −1 left; a causal
    model only has the left side). Distances past `bucket_max_distance` share the last bucket: a flat tail.
    """
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = direction * torch.arange(max_distance + 1)
    buckets = T5Attention._relative_position_bucket(
        relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=bucket_max_distance
    )
    return bucket_bias.detach().to(torch.float64)[buckets].T


def relative_embedding_by_distance(table: torch.Tensor, max_distance: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Shaw et al.'s relative key embeddings a_k (table rows −K…K, clipped beyond K) against distance k ≥ 0.

    The score term q·a_k depends on the query, so there is no query-free curve; returned instead are the norm |a_k|
    and the cosine between a_k and a_0, each (max_distance + 1,). Both are flat beyond the clip K.
    """
    table = table.detach().to(torch.float64)
    clip = (len(table) - 1) // 2
    rows = table[clip + torch.arange(max_distance + 1).clamp(max=clip)]
    return rows.norm(dim=-1), torch.nn.functional.cosine_similarity(rows, table[clip][None], dim=-1)


def position_cosine_by_distance(table: torch.Tensor, max_distance: int | None = None) -> torch.Tensor:
    """Mean cosine between position vectors m and m + k over every m of `table` (positions, dim), k = 0…max_distance.

    For a learned absolute table this is the data's own version of `sinusoidal_similarity`.
    """
    unit = torch.nn.functional.normalize(table.detach().to(torch.float64), dim=-1)
    max_distance = len(unit) - 1 if max_distance is None else min(max_distance, len(unit) - 1)
    return torch.stack([(unit[: len(unit) - k] * unit[k:]).sum(-1).mean() for k in range(max_distance + 1)])


def plot_decay_panels(path: str | Path, panels: dict[str, dict], columns: int = 4, title: str | None = None) -> Path:
    """One small panel per encoding: its position term against relative distance.

    `panels` maps a title to {"curves": {label: 1-D values}, "ylabel": str, "note": str (optional)}; x is the
    distance 0, 1, 2, … of each curve. Many curves (one per head) are drawn thin.
    """
    plt = _pyplot()
    rows = -(-len(panels) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.3 * rows), squeeze=False)
    for axis, (name, panel) in zip(grid.flatten(), panels.items()):
        curves = panel["curves"]
        for label, values in curves.items():
            values = torch.as_tensor(values, dtype=torch.float64)
            axis.plot(values.numpy(), label=label, linewidth=1.6 if len(curves) <= 3 else 0.9)
        if 1 < len(curves) <= 8:
            axis.legend(fontsize=7)
        axis.set_title(name, fontsize=10)
        axis.set_xlabel("relative distance k")
        axis.set_ylabel(panel["ylabel"], fontsize=8)
        if panel.get("note"):
            axis.text(0.98, 0.97, panel["note"], transform=axis.transAxes, ha="right", va="top", fontsize=7)
        axis.grid(alpha=0.3)
    for axis in grid.flatten()[len(panels) :]:
        axis.axis("off")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return _save(figure, path, plt)


def _save(figure, path: str | Path, plt) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
