"""``daydream plot``: accuracy, timeline and breakdown plots (PNG and SVG)."""
from __future__ import annotations

from pathlib import Path

import click

from ._cli_util import handle_errors
from .fileio import check_writable, provenance, save_figure

__all__ = ["COMMANDS"]


def _save(fig, output: str, force: bool) -> None:
    out = Path(output)
    targets = [out] if out.suffix in (".png", ".svg") else [out.with_suffix(".png"), out.with_suffix(".svg")]
    for t in targets:
        check_writable(str(t), force)
    prov = provenance("plot")
    for t in targets:
        save_figure(fig, t, prov, force=True, dpi=120)   # checked above, before drawing
        click.echo(f"wrote {t}")


def _agg():
    import matplotlib

    matplotlib.use("Agg")


_OUT = click.option("-o", "--output", required=True, type=click.Path(),
                    help="File to write (.png or .svg; no suffix writes both).")
_FORCE = click.option("--force", is_flag=True, help="Overwrite existing files.")


@click.group()
def plot():
    """Plots: predicted vs measured accuracy, timelines, time breakdowns."""


@plot.command()
@click.argument("results", type=click.Path())
@_OUT
@_FORCE
@click.option("--band", default=5.0, show_default=True, help="Error band around y = x, percent.")
@handle_errors
def accuracy(results, output, force, band):
    """Predicted against measured iteration time from a results.csv of `daydream validate`."""
    _agg()
    from .plots import plot_accuracy, read_accuracy_csv

    _save(plot_accuracy(read_accuracy_csv(results), band_pct=band), output, force)


@plot.command()
@click.argument("trace", type=click.Path())
@click.option("--vs", "vs", type=click.Path(), help="A second timeline (e.g. from whatif -o) drawn below.")
@click.option("--start-ms", type=float, help="Window start (ms from the first event).")
@click.option("--end-ms", type=float, help="Window end (ms from the first event).")
@_OUT
@_FORCE
@handle_errors
def timeline(trace, vs, start_ms, end_ms, output, force):
    """Lanes of TRACE as a Gantt chart; with --vs, the predicted timeline below it."""
    _agg()
    from .loader.io import read_documents
    from .plots import plot_timeline

    doc = next(iter(read_documents([trace])))[1]
    other = next(iter(read_documents([vs])))[1] if vs else None
    _save(plot_timeline(doc, other, start_ms=start_ms, end_ms=end_ms), output, force)


@plot.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@click.option("--opt", "opts", multiple=True, required=True, metavar="NAME[:k=v,...]", help="Optimization (repeatable).")
@click.option("--device", help="Published device for cost figures.")
@click.option("--profile", "profile_path", type=click.Path(), help="Device profile file.")
@click.option("--top", default=8, show_default=True, help="Layers to show.")
@_OUT
@_FORCE
@handle_errors
def breakdown(traces, opts, device, profile_path, top, output, force):
    """Time per phase and top layers, baseline vs predicted."""
    _agg()
    import matplotlib.pyplot as plt

    from .analysis import replay
    from .plots import plot_breakdown
    from .whatif import layer_busy_ms, predict

    report, pred = predict(list(traces), list(opts), device=device, profile_path=profile_path)
    _, base = replay(list(traces))
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.5))
    plot_breakdown({k: v[0] for k, v in report.phases.items()}, {k: v[1] for k, v in report.phases.items()},
                   ax=a, title="task time per iteration by phase (ms)")
    lb, lp = layer_busy_ms(base), layer_busy_ms(pred)
    keys = sorted(lb, key=lambda k: -lb[k])[:top]
    plot_breakdown({k: lb[k] for k in keys}, {k: lp.get(k, 0.0) for k in keys}, ax=b,
                   title=f"top {len(keys)} layers (ms per iteration)")
    fig.suptitle(" + ".join(report.optimizations))
    fig.tight_layout()
    _save(fig, output, force)


COMMANDS = [plot]
