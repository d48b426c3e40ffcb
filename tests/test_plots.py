"""Plots render with a non-GUI backend and show what they claim."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from daydream.plots import AccuracyPoint, plot_accuracy  # noqa: E402


def test_accuracy_plot_points_and_labels(tmp_path):
    pts = [AccuracyPoint("mlp", 10.0, 11.0), AccuracyPoint("cnn", 30.0, 29.0)]
    fig = plot_accuracy(pts)
    ax = fig.axes[0]
    offsets = ax.collections[-1].get_offsets()
    assert [tuple(o) for o in offsets] == [(10.0, 11.0), (30.0, 29.0)]
    assert any("mlp (10.0%)" == t.get_text() for t in ax.texts)
    fig.savefig(tmp_path / "a.png")
    fig.savefig(tmp_path / "a.svg")
    assert (tmp_path / "a.png").stat().st_size > 0 and (tmp_path / "a.svg").stat().st_size > 0


def test_accuracy_plot_on_given_axes():
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2)
    assert plot_accuracy([AccuracyPoint("x", 1.0, 1.0)], ax=b) is fig
    assert len(b.collections) >= 1 and not a.collections
