"""examples/position-lab/decay_analysis.py: each encoding's position term against relative distance, and a figure."""

import sys
from pathlib import Path

import pytest
import torch

POSITION_LAB = Path(__file__).resolve().parents[2] / "examples" / "position-lab"
sys.path.insert(0, str(POSITION_LAB))

import decay_analysis as decay  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_sinusoidal_similarity_is_the_cosine_of_the_position_vectors():
    from roformer_ext.position_encodings import sinusoidal_table

    dim, curve = 64, decay.sinusoidal_similarity(100, 64)
    table = sinusoidal_table(torch.arange(300), dim).double()
    for start in (0, 3, 150):  # p_m · p_{m+k} / |p_m|² depends on k only
        dots = table[start : start + 101] @ table[start] / table[start].norm() ** 2
        assert torch.allclose(dots, curve, atol=1e-5)
    assert curve[0] == 1 and curve.shape == (101,)


def test_alibi_bias_is_minus_slope_times_distance():
    slopes = torch.tensor([0.5, 0.25, 0.125])
    bias = decay.alibi_bias(slopes, 10)
    assert bias.shape == (3, 11) and bias[1, 8].item() == -2.0 and (bias[:, 0] == 0).all()


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias_by_distance_looks_up_t5_buckets(bidirectional):
    from roformer_ext.relative_position_encodings import t5_relative_bucket

    table = torch.randn(32, 4)
    curves = decay.t5_bias_by_distance(table, 300, bidirectional, 32, 128, direction=-1)
    buckets = t5_relative_bucket(-torch.arange(301), bidirectional, 32, 128)
    assert curves.shape == (4, 301) and torch.equal(curves, table.double()[buckets].T)
    assert (curves[:, 128:] == curves[:, 300:]).all()  # one shared bucket past max_distance: a flat tail
    assert len(set(buckets[:8].tolist())) == 8  # exact buckets for the first distances


def test_relative_embedding_by_distance_is_flat_past_the_clip():
    table = torch.randn(2 * 5 + 1, 8)  # rows −5 … 5
    norm, cosine = decay.relative_embedding_by_distance(table, 12)
    assert norm.shape == cosine.shape == (13,) and cosine[0].item() == pytest.approx(1.0)
    assert norm[3].item() == pytest.approx(table[5 + 3].norm().item())
    assert cosine[2].item() == pytest.approx(torch.cosine_similarity(table[7], table[5], dim=0).item())
    assert (norm[5:] == norm[5]).all() and (cosine[5:] == cosine[5]).all()


def test_position_cosine_by_distance_averages_every_pair():
    table = torch.randn(20, 6)
    curve = decay.position_cosine_by_distance(table, 30)
    assert curve.shape == (20,)  # capped at the table's length
    for k in (0, 1, 7, 19):
        pairs = [torch.cosine_similarity(table[m], table[m + k], dim=0) for m in range(20 - k)]
        assert curve[k].item() == pytest.approx(torch.stack(pairs).mean().item(), abs=1e-6)


def test_decay_panels_figure(tmp_path):
    panel_a = {"curves": {"x": torch.linspace(1, 0, 20)}, "ylabel": "v", "note": "n"}
    panel_b = {"curves": {f"head {h}": torch.randn(20) for h in range(4)}, "ylabel": "v"}
    path = decay.plot_decay_panels(tmp_path / "d" / "decay.png", {"a": panel_a, "b": panel_b}, columns=3, title="t")
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_the_library_keeps_only_what_roformer_ext_plot_draws():
    from roformer_ext import plotting

    here = [decay.sinusoidal_similarity, decay.alibi_bias, decay.t5_bias_by_distance, decay.plot_decay_panels]
    here += [decay.relative_embedding_by_distance, decay.position_cosine_by_distance]
    assert not [f.__name__ for f in here if hasattr(plotting, f.__name__)]
    assert callable(plotting.long_range_decay) and callable(plotting.plot_long_range_decay)
