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


def test_plot_commands_write_png_and_svg(tmp_path, own_trace):
    from click.testing import CliRunner

    from daydream.cli import main
    from daydream.device import save_profile

    from conftest import flat_profile

    trace = str(own_trace("cnn").ranks[0].source)
    csv = tmp_path / "results.csv"
    csv.write_text("workload,optimization,predicted_ms,measured_ms,error_pct\nmlp,fused-adam,10,11,9.1\n")
    r = CliRunner().invoke(main, ["plot", "accuracy", str(csv), "-o", str(tmp_path / "acc")])
    assert r.exit_code == 0 and (tmp_path / "acc.png").exists() and (tmp_path / "acc.svg").exists()
    prof = tmp_path / "dev.json"
    save_profile(flat_profile(), str(prof))
    pred = tmp_path / "pred.json"
    assert CliRunner().invoke(main, ["whatif", trace, "--opt", "checkpointing", "--profile", str(prof),
                                     "-o", str(pred)]).exit_code == 0
    r = CliRunner().invoke(main, ["plot", "timeline", trace, "--vs", str(pred), "--end-ms", "300",
                                  "-o", str(tmp_path / "tl.png")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["plot", "breakdown", trace, "--opt", "checkpointing", "--profile", str(prof),
                                  "-o", str(tmp_path / "bd.svg")])
    assert r.exit_code == 0, r.output
    assert "<svg" in (tmp_path / "bd.svg").read_text()[:500]
    r = CliRunner().invoke(main, ["plot", "accuracy", str(csv), "-o", str(tmp_path / "acc.png")])
    assert r.exit_code == 2 and "exists" in r.stderr          # never overwrites without --force
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    r = CliRunner().invoke(main, ["plot", "accuracy", str(bad), "-o", str(tmp_path / "x.png")])
    assert r.exit_code == 2 and "not a results.csv" in r.stderr


def test_timeline_lanes_and_breakdown_bars():
    from daydream.plots import plot_breakdown, timeline_lanes

    doc = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1000, "dur": 500},
                           {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1200, "dur": 100}]}
    lanes = timeline_lanes(doc)
    assert lanes == {("0", "7"): [(0.0, 0.5, "kernel")], ("1", "1"): [(0.2, 0.1, "cpu_op")]}
    fig = plot_breakdown({"forward": 2.0, "backward": 4.0}, {"forward": 1.0, "backward": 4.0})
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == [2.0, 4.0, 1.0, 4.0]
