"""The README's main job: ``python -m daydream.demo -o demo_out``.

Traces the bundled workloads on this machine's CPU with ``daydream trace``,
replays each recorded trace and every public GPU trace found in
``../shared/traces/public``, and writes the replay accuracy plot and a
simulated timeline (open it in https://ui.perfetto.dev).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import click

from .analysis import replay
from .errors import DaydreamError
from .fileio import write_json
from .plots import AccuracyPoint, plot_accuracy
from .sim.export import to_chrome_trace

__all__ = ["main", "WORKLOAD_ARGS"]

#: Small sizes so that each bundled workload traces in seconds on 2 cores.
WORKLOAD_ARGS = {
    "mlp": ["--hidden", "512", "--batch-size", "64"],
    "cnn": ["--batch-size", "16"],
    "transformer": ["--batch-size", "8"],
}
_DEFAULT_SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "public"


def _say(step: str, msg: str) -> None:
    click.echo(f"[{step}] {msg}", err=True)


def trace_workload(name: str, out: Path, warmup: int = 2, iterations: int = 5) -> Path:
    """Run ``daydream trace`` on a bundled workload; returns the trace path."""
    path = out / f"{name}.trace.json.gz"
    cmd = [sys.executable, "-m", "daydream", "trace", "-o", str(path), "--force",
           "--warmup", str(warmup), "--iterations", str(iterations), "--",
           sys.executable, "-m", f"daydream.workloads.{name}", "--steps", str(warmup + iterations + 1),
           "--quiet", *WORKLOAD_ARGS.get(name, [])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not path.exists():
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise DaydreamError(f"tracing {name} failed: {tail}")
    return path


def _public_traces(shared: Path) -> list[Path]:
    if not shared.is_dir():
        return []
    return sorted(p for p in shared.rglob("*") if p.is_file() and "_et." not in p.name
                  and p.name.endswith((".json.gz", ".json", ".tar.gz")))


@click.command()
@click.option("-o", "--out", "out_dir", default="demo_out", show_default=True, type=click.Path(),
              help="Folder for traces, timelines and plots.")
@click.option("--workloads", default="mlp,cnn,transformer", show_default=True,
              help="Bundled workloads to trace on CPU (comma separated, empty for none).")
@click.option("--shared", type=click.Path(), default=str(_DEFAULT_SHARED), show_default=True,
              help="Folder of public GPU traces to replay too (skipped if absent).")
def main(out_dir, workloads, shared):
    """Trace bundled workloads on CPU, replay them and the public GPU traces, plot."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [w for w in workloads.split(",") if w]
    points, t0 = [], time.time()
    try:
        for i, name in enumerate(names, 1):
            _say(f"trace {i}/{len(names)}", f"{name} on CPU ...")
            path = trace_workload(name, out)
            report, result = replay(path)
            timeline = out / f"{name}.simulated.json.gz"
            write_json(timeline, to_chrome_trace(result, {"kind": "replay", "source": str(path)}))
            points.append(AccuracyPoint(f"{name} (CPU)", report.measured_ms, report.simulated_ms))
            _say("replay", f"{name}: measured {report.measured_ms:.2f} ms, simulated "
                           f"{report.simulated_ms:.2f} ms, error {report.error_pct:.3f}%; timeline {timeline}")
        public = _public_traces(Path(shared))
        for i, path in enumerate(public, 1):
            report, _ = replay(path)
            label = path.name.split(".")[0][:24]
            points.append(AccuracyPoint(label, report.measured_ms, report.simulated_ms))
            _say(f"replay {i}/{len(public)}", f"{label}: error {report.error_pct:.3f}%")
    except DaydreamError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    import matplotlib

    matplotlib.use("Agg")
    fig = plot_accuracy(points, title="daydream replay: simulated vs measured iteration time")
    for ext in ("png", "svg"):
        fig.savefig(out / f"replay_accuracy.{ext}", dpi=120)
    errs = sorted(p.error_pct for p in points)
    if errs:
        click.echo(f"{len(points)} traces replayed in {time.time() - t0:.0f} s: median error "
                   f"{errs[len(errs) // 2]:.3f}%, worst {errs[-1]:.3f}%")
    click.echo(f"plot: {out / 'replay_accuracy.png'} (and .svg); timelines: {out}/*.simulated.json.gz "
               f"(open in https://ui.perfetto.dev)")


if __name__ == "__main__":  # pragma: no cover
    main()
