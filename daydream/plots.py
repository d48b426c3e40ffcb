"""Plots (matplotlib).  Every function takes ``ax=None`` and returns the figure.

The core never imports this module; it only reads results.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AccuracyPoint", "plot_accuracy", "read_accuracy_csv", "plot_timeline", "timeline_lanes", "plot_breakdown"]


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


def read_accuracy_csv(path) -> list:
    """Rows of a ``results.csv`` written by ``daydream validate`` as :class:`AccuracyPoint`."""
    import csv

    from .errors import DaydreamError

    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    except OSError as exc:
        raise DaydreamError(f"{path}: cannot read ({exc.strerror})") from None
    need = {"workload", "optimization", "predicted_ms", "measured_ms"}
    if not rows or not need <= rows[0].keys():
        raise DaydreamError(f"{path}: not a results.csv (needs columns {', '.join(sorted(need))})")
    try:
        return [AccuracyPoint(f"{r['workload']} {r['optimization'].split(':')[0]}", float(r["measured_ms"]),
                              float(r["predicted_ms"])) for r in rows]
    except ValueError as exc:
        raise DaydreamError(f"{path}: bad number ({exc})") from None


_CATEGORY_COLORS = {"cpu_op": "#4c72b0", "runtime": "#dd8452", "sync": "#c44e52", "kernel": "#55a868",
                    "memcpy": "#8172b3", "memset": "#937860", "collective": "#da8bc3"}


def timeline_lanes(doc: dict, start_ms: float | None = None, end_ms: float | None = None) -> dict:
    """Complete events of a Chrome-trace document grouped by (pid, tid): [(start_ms, dur_ms, category)]."""
    ev = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"
          and isinstance(e.get("ts"), (int, float)) and str(e.get("cat", "")).lower() not in
          ("trace", "user_annotation", "gpu_user_annotation", "python_function")]
    if not ev:
        return {}
    t0 = min(e["ts"] for e in ev)
    lanes = {}
    for e in ev:
        s = (e["ts"] - t0) / 1000.0
        d = float(e.get("dur", 0)) / 1000.0
        if (start_ms is not None and s + d < start_ms) or (end_ms is not None and s > end_ms):
            continue
        cat = str(e.get("cat", "")).lower()
        cat = {"operator": "cpu_op", "cuda_runtime": "runtime", "gpu_memcpy": "memcpy",
               "gpu_memset": "memset"}.get(cat, cat)
        lanes.setdefault((str(e.get("pid")), str(e.get("tid"))), []).append((s, d, cat))
    return lanes


def plot_timeline(doc: dict, vs: dict | None = None, ax=None, start_ms=None, end_ms=None,
                  labels=("traced", "predicted")):
    """Gantt chart of a timeline's lanes; with ``vs``, the second timeline below the first.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    parts = [(labels[0], timeline_lanes(doc, start_ms, end_ms))]
    if vs is not None:
        parts.append((labels[1], timeline_lanes(vs, start_ms, end_ms)))
    rows = [(name, lane, spans) for name, lanes in parts for lane, spans in sorted(lanes.items())]
    if ax is None:
        fig, ax = plt.subplots(figsize=(12, 0.4 * max(len(rows), 2) + 1.5))
    else:
        fig = ax.figure
    for y, (name, lane, spans) in enumerate(rows):
        by_cat = {}
        for s, d, c in spans:
            by_cat.setdefault(c, []).append((s, max(d, 1e-3)))
        for c, xs in by_cat.items():
            ax.broken_barh(xs, (y - 0.4, 0.8), color=_CATEGORY_COLORS.get(c, "0.6"))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{name}: {lane[0][:18]} / {lane[1][:18]}" for name, lane, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    used = {c for _, _, spans in rows for _, _, c in spans}
    ax.legend(handles=[Patch(color=_CATEGORY_COLORS.get(c, "0.6"), label=c) for c in sorted(used)],
              loc="upper right", fontsize=7)
    ax.set_title(" vs ".join(name for name, _ in parts))
    fig.tight_layout()
    return fig


def plot_breakdown(baseline: dict, predicted: dict, ax=None, title: str = "time per iteration"):
    """Grouped bars: ms per category (phases or layers), baseline vs predicted.

    Parameters
    ----------
    baseline, predicted : dict of str to float
        Milliseconds per category (e.g. :func:`daydream.whatif.phase_busy_ms`).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    keys = [k for k in baseline if baseline.get(k) or predicted.get(k)] or list(baseline)
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(keys) + 2), 4))
    else:
        fig = ax.figure
    x = np.arange(len(keys))
    ax.bar(x - 0.2, [baseline.get(k, 0) for k in keys], 0.4, label="baseline")
    ax.bar(x + 0.2, [predicted.get(k, 0) for k in keys], 0.4, label="predicted")
    ax.set_xticks(x)
    ax.set_xticklabels([k[-28:] for k in keys], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig
