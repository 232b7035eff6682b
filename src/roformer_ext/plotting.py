"""`roformer-ext plot`'s figures (each scheme's text–image–text layout, RoPE's decay), drawn by Agg: no display."""

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
            "Plotting needs matplotlib, which is not installed: pip install matplotlib (or, in the roformer-ext clone, pip install -e '.[plot]')."
        ) from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def layout_positions(
    scheme: str, axes: int, text_before: int, rows: int, cols: int, text_after: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions (axes, tokens) of text, a rows×cols image and text, and a mask of the image tokens."""
    tokens = [_TEXT] * text_before + [_IMAGE] * (rows * cols) + [_TEXT] * text_after
    rope = {"position_scheme": scheme, "axes": axes}
    config = types.SimpleNamespace(rope_parameters=rope, image_token_id=_IMAGE, video_token_id=None)
    position_ids, _ = build_position_ids(torch.tensor([tokens]), config, image_grid_thw=torch.tensor([[1, rows, cols]]))
    return position_ids[:, 0], torch.tensor(tokens) == _IMAGE


def plot_positions(path: str | Path, text_before: int = 5, rows: int = 3, cols: int = 4, text_after: int = 4) -> Path:
    """One panel per scheme, each token at its (row, col) labelled with its index; rows run down, as in Su's figures."""
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
    """RoFormer §3.4.3's bound (1/(d/2)) Σ_j |S_j|, S_j = Σ_{i<j} e^{i(m−n)θ_i}, θ_i = base^(−2i/d), for each distance
    m − n in 0…max_distance: its decay is RoPE's long-term decay."""
    theta = base ** (-2 * torch.arange(dim // 2, dtype=torch.float64) / dim)
    angles = torch.arange(max_distance + 1, dtype=torch.float64)[:, None] * theta
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


def _save(figure, path: str | Path, plt) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
