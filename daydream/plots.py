"""Plots (matplotlib).  Every function takes ``ax=None`` and returns the figure.

The core never imports this module; it only reads results.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AccuracyPoint", "plot_accuracy"]


@dataclass(frozen=True)
class AccuracyPoint:
    """One labelled (measured, predicted) pair in milliseconds."""

    label: str
    measured_ms: float
    predicted_ms: float

    @property
    def error_pct(self) -> float:
        return abs(self.predicted_ms - self.measured_ms) / self.measured_ms * 100.0


def plot_accuracy(points, ax=None, band_pct: float = 5.0, title: str = "predicted vs measured"):
    """Scatter predicted against measured iteration time with ``y = x`` and an error band.

    Parameters
    ----------
    points : iterable of AccuracyPoint
    ax : matplotlib.axes.Axes, optional
    band_pct : float
        Half-width of the shaded band around ``y = x``, in percent.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> fig = plot_accuracy([AccuracyPoint("a", 10.0, 10.5), AccuracyPoint("b", 20.0, 19.0)])
    >>> len(fig.axes)
    1
    """
    import matplotlib.pyplot as plt
    import numpy as np

    points = list(points)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 6))
    else:
        fig = ax.figure
    if not points:
        ax.set_title(f"{title} (no points)")
        return fig
    m = np.array([p.measured_ms for p in points])
    pr = np.array([p.predicted_ms for p in points])
    lo, hi = 0.0, max(m.max(), pr.max()) * 1.1
    xs = np.linspace(lo, hi, 50)
    ax.plot(xs, xs, "k-", lw=1, label="y = x")
    ax.fill_between(xs, xs * (1 - band_pct / 100), xs * (1 + band_pct / 100), color="0.85",
                    label=f"±{band_pct:g}%")
    ax.scatter(m, pr, zorder=3)
    for p in points:
        ax.annotate(f"{p.label} ({p.error_pct:.1f}%)", (p.measured_ms, p.predicted_ms), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured iteration time (ms)")
    ax.set_ylabel("predicted iteration time (ms)")
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig
