"""The README's main job: ``python -m daydream.demo -o demo_out``.

1. calibrates this machine once (cached) for the cost models;
2. traces a bundled workload on CPU with ``daydream trace`` and replays it;
3. predicts several what-ifs from that one trace;
4. validates two of them for real (runs the optimized variant, measures it);
5. replays the public GPU traces of ``../shared/traces/public`` if present;
6. writes plots: replay accuracy, what-if accuracy, a breakdown and a
   predicted timeline (open the ``.json.gz`` timelines in ui.perfetto.dev).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from ._cli_util import quiet_kineto
from .analysis import replay
from .errors import DaydreamError
from .fileio import provenance, save_figure, write_json
from .plots import AccuracyPoint, plot_accuracy, plot_breakdown, plot_timeline
from .sim.export import to_chrome_trace
from .validate import THREADS, ensure_profile, run_validation, trace_workload, write_results
from .whatif import layer_busy_ms, predict

__all__ = ["main", "WHATIFS"]

_DEFAULT_SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "public"

#: What-ifs the demo predicts from the one baseline trace.
WHATIFS = ["fused-adam", "amp:dtype=bfloat16", "checkpointing", "fusion", "data-parallel:workers=4",
           "dataloader:workers=2", "pipeline:stages=2,microbatches=4"]


def _say(step: str, msg: str) -> None:
    click.echo(f"[{step}] {msg}", err=True)


def _public_traces(shared: Path) -> list[Path]:
    if not shared.is_dir():
        return []
    return sorted(p for p in shared.rglob("*") if p.is_file() and "_et." not in p.name
                  and p.name.endswith((".json.gz", ".json", ".tar.gz")))


def _ensure_profile() -> str:
    from .device import default_profile_path

    if os.path.exists(default_profile_path("cpu", THREADS)):
        _say("1/6 calibrate", "using the cached device profile (rerun `daydream calibrate` to refresh)")
    return ensure_profile(progress=lambda m: _say("1/6 calibrate", m))


def _plots(out: Path, replay_pts, val_rows, base, pred, report):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {
        "replay_accuracy": plot_accuracy(replay_pts, title="replay: simulated vs measured iteration time"),
        "whatif_accuracy": plot_accuracy([AccuracyPoint(f"{r.workload} {r.optimization.split(':')[0]}",
                                                        r.measured_ms, r.predicted_ms) for r in val_rows],
                                         band_pct=10, title="what-if: predicted vs measured"),
    }
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.5))
    plot_breakdown({k: v[0] for k, v in report.phases.items()}, {k: v[1] for k, v in report.phases.items()}, ax=a,
                   title="task time per iteration by phase (ms)")
    lb, lp = layer_busy_ms(base), layer_busy_ms(pred)
    keys = sorted(lb, key=lambda k: -lb[k])[:8]
    plot_breakdown({k: lb[k] for k in keys}, {k: lp.get(k, 0.0) for k in keys}, ax=b, title="top layers (ms)")
    fig.suptitle(" + ".join(report.optimizations))
    figs["breakdown"] = fig
    figs["timeline"] = plot_timeline(to_chrome_trace(base), to_chrome_trace(pred), labels=("baseline", "predicted"))
    prov = provenance("demo")
    for name, f in figs.items():
        for ext in ("png", "svg"):
            save_figure(f, out / f"{name}.{ext}", prov, force=True, dpi=110)   # the demo's own folder
    return [out / f"{n}.png" for n in figs]


@click.command()
@click.option("-o", "--out", "out_dir", default="demo_out", show_default=True, type=click.Path(),
              help="Folder for traces, timelines and plots.")
@click.option("--workload", default="mlp", show_default=True, type=click.Choice(["mlp", "cnn", "transformer"]),
              help="Bundled workload to trace on CPU.")
@click.option("--validate", "to_validate", default="checkpointing,fused-adam", show_default=True,
              help="What-ifs to validate for real (comma separated; empty for none).")
@click.option("--shared", type=click.Path(), default=str(_DEFAULT_SHARED), show_default=True,
              help="Folder of public GPU traces to replay too (skipped if absent).")
def main(out_dir, workload, to_validate, shared):
    """Trace a bundled workload on CPU, predict what-ifs, validate two for real, plot."""
    quiet_kineto()        # before torch is imported: calibration's profiler sessions stay quiet
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    try:
        profile = _ensure_profile()
        _say("2/6 trace", f"{workload} on CPU with `daydream trace` ...")
        path = trace_workload(workload, out / f"{workload}.trace.json.gz")
        rep, base = replay(path)
        replay_pts = [AccuracyPoint(f"{workload} (CPU)", rep.measured_ms, rep.simulated_ms)]
        _say("2/6 trace", f"{path}: {rep.measured_ms:.2f} ms per iteration; replay error {rep.error_pct:.3f}%")
        _say("3/6 what-if", f"{'optimization':<34}{'predicted ms':>13}{'speedup':>9}")
        best = None
        for spec in WHATIFS:
            report, pred = predict(path, [spec], profile_path=profile)
            _say("3/6 what-if", f"{spec:<34}{report.predicted_ms:13.2f}{report.speedup:8.2f}x")
            if best is None or report.speedup > best[0].speedup:
                best = (report, pred)
        write_json(out / "predicted.timeline.json.gz", to_chrome_trace(best[1], provenance("whatif")))
        opts = [o for o in to_validate.split(",") if o]
        val_rows = []
        if opts:
            _say("4/6 validate", f"running {', '.join(opts)} for real on {workload} ...")
            val_rows = run_validation([workload], opts, out / "validate", profile_path=profile, iterations=20,
                                      progress=lambda m: _say("4/6 validate", m))
            write_results(val_rows, out)
        public = _public_traces(Path(shared))
        for i, p in enumerate(public, 1):
            r, _ = replay(p)
            replay_pts.append(AccuracyPoint(p.name.split(".")[0][:24], r.measured_ms, r.simulated_ms))
            _say(f"5/6 replay {i}/{len(public)}", f"{p.name[:40]}: error {r.error_pct:.3f}%")
        _say("6/6 plots", "writing ...")
        pngs = _plots(out, replay_pts, val_rows, base, best[1], best[0])
    except DaydreamError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(f"done in {time.time() - t0:.0f} s")
    for r in val_rows:
        click.echo(f"validated {r.optimization}: predicted {r.predicted_ms:.2f} ms, measured {r.measured_ms:.2f} ms "
                   f"({r.error_pct:.1f}% error)")
    click.echo("plots: " + ", ".join(str(p) for p in pngs) + " (and .svg)")
    click.echo(f"predicted timeline: {out / 'predicted.timeline.json.gz'} (open in https://ui.perfetto.dev)")


if __name__ == "__main__":  # pragma: no cover
    main()
