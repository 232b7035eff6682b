"""What each position encoding adds as a function of relative distance: the curves of the position lab's decay
figure (`run_extrapolation.py --decay_plot`, `benchmarks/bench_extrapolation.py --decay`) and the figure itself.

Analysis code of this example, not part of the `roformer_ext` library; RoPE's own bound, `long_range_decay`, is
in `roformer_ext.plotting` (the `roformer-ext plot` command draws it). Drawing needs matplotlib (the `plot` extra).
"""

from __future__ import annotations

from pathlib import Path

import torch

from roformer_ext.plotting import _pyplot, _save


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


@torch.no_grad()
def transformer_xl_position_bias(layer_parameters, max_distance: int = 256, scale: float | None = None) -> torch.Tensor:
    """Transformer-XL's query-free position term v·W_r r_k / √d per head for a key k tokens to the left (query − key =
    k): the global position bias v (`r_r_bias`) read through the layer's W_r. (heads, max_distance + 1). The term
    q_i·W_r r_k adds to it per query; this is the part every query shares."""
    from roformer_ext.relative_position_encodings import xlnet_relative_sinusoid

    projection = layer_parameters.r
    sinusoid = xlnet_relative_sinusoid(torch.arange(max_distance + 1), projection.in_features)
    rows = projection(sinusoid).view(max_distance + 1, -1, layer_parameters.head_dim)  # (k, heads, head_dim)
    scale = layer_parameters.head_dim**-0.5 if scale is None else scale
    return (rows * layer_parameters.r_r_bias[None]).sum(-1).T.double() * scale


@torch.no_grad()
def tupe_bias_by_distance(encoding, max_distance: int = 256) -> torch.Tensor:
    """TUPE's shared position bias (untied absolute correlation + relative bucket bias) averaged over the queries of a
    sequence of max_distance + 1 tokens, for a key k tokens to the left; the first token ([CLS] reset) left out.
    (heads, max_distance + 1): the bias depends on both absolute positions, so this is a mean, not a function of k."""
    positions = torch.arange(max_distance + 1)[None]
    bias = encoding.relative_scores(positions, positions).shared_bias()[0].double()  # (heads, q, k)
    curves = [bias[:, torch.arange(max(k, 1), max_distance + 1), torch.arange(max(k, 1), max_distance + 1) - k].mean(-1)
              for k in range(max_distance + 1)]  # fmt: skip
    return torch.stack(curves, dim=-1)


@torch.no_grad()
def deberta_embedding_by_distance(encoding, max_distance: int = 256) -> torch.Tensor:
    """DeBERTa's relative embedding row for a key k tokens to the left (LayerNorm'd as the layers read it, no dropout):
    the cosine between row δ(k) and row δ(0), (max_distance + 1,). Its terms q·K_r, k·Q_r depend on the content, so
    there is no query-free curve (as Shaw's); rows past the exact buckets are shared by growing ranges of k."""
    positions = torch.arange(max_distance + 1)[None]
    scores = encoding.relative_scores(positions[:, -1:], positions)  # the last query: keys 0…max_distance to its left
    rows = scores.rows[0, 0].flip(0)  # key k to the left
    table = encoding.rel_embeddings.weight
    table = (encoding.norm(table) if encoding.norm is not None else table).double()
    return torch.nn.functional.cosine_similarity(table[rows], table[rows[0]][None], dim=-1)


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
