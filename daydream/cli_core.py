"""Core commands: ``daydream replay`` and ``daydream info``."""
from __future__ import annotations

import dataclasses
import json
import sys

import click

from .analysis import replay as run_replay, summarize
from ._cli_util import handle_errors
from .fileio import check_writable, provenance, write_json
from .graph import build_graph
from .graph.stalls import settle_stalls
from .loader import load_trace
from .overhead import describe
from .sim.export import to_chrome_trace

__all__ = ["COMMANDS", "replay", "info"]

_TRACES = click.argument("traces", nargs=-1, required=True, type=click.Path())
_MARKER = click.option("--iteration-marker", metavar="REGEX",
                       help="Annotation spanning each iteration, for traces without ProfilerStep#N.")


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        click.echo(msg, err=True)


def _warn_repairs(repairs: dict) -> None:
    for what, n in sorted(repairs.items()):
        click.echo(f"warning: repaired {n} x {what}", err=True)


@click.command()
@_TRACES
@_MARKER
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("-o", "--output", type=click.Path(), help="Write the simulated timeline (Chrome-trace JSON, .gz ok).")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@handle_errors
def replay(traces, iteration_marker, as_json, output, force):
    """Replay TRACES unedited and compare simulated with measured iteration times.

    TRACES are Kineto/Chrome-trace files (.json or .json.gz), one per rank,
    directories of them, or a .tar.gz of ranks.  The error of the mean
    iteration (iterations after the first) measures how faithfully the
    dependency graph and simulator reproduce the run.

    \b
    Examples:
      daydream replay run.pt.trace.json.gz
      daydream replay --json rank0.json rank1.json
      daydream replay trace.json -o simulated.json.gz   # open in ui.perfetto.dev
    """
    if output:
        check_writable(output, force)
    _progress(f"loading {len(traces)} path(s)...")
    report, result = run_replay(list(traces), iteration_marker)
    _warn_repairs(report.repairs)
    if output:
        write_json(output, to_chrome_trace(result, provenance("replay")))
    if as_json:
        click.echo(json.dumps(report.to_dict()))
        return
    click.echo(f"{'iteration':>9}  {'measured ms':>12}  {'simulated ms':>12}  {'error':>8}")
    for k, it in enumerate(report.iterations):
        err = abs(it.simulated_ms - it.measured_ms) / it.measured_ms * 100 if it.measured_ms else 0.0
        click.echo(f"{k:>9}  {it.measured_ms:12.3f}  {it.simulated_ms:12.3f}  {err:7.3f}%")
    click.echo(f"mean iteration (after the first): measured {report.measured_ms:.3f} ms, "
               f"simulated {report.simulated_ms:.3f} ms, error {report.error_pct:.3f}%")
    if output:
        click.echo(f"simulated timeline written to {output}")


@click.command()
@_TRACES
@_MARKER
@click.option("--top", default=10, show_default=True, help="How many layers and kernels to list.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@handle_errors
def info(traces, iteration_marker, top, as_json):
    """Summarise TRACES: ranks, devices, iterations, time by phase, top layers and kernels.

    Times are per iteration (mean over traced iterations and ranks).  Phase
    time is split into CPU (top-level ops) and GPU (kernels, copies).

    What recording cost is shown for traces taken with ``daydream trace
    --warmup 6`` or more: the recorded iterations' median wall time and page
    faults against those of the warm-up iterations that ran before any
    profiler session (the first two left out).

    Stalls are ops that ran over 3x their time in the other iterations (the
    machine took the CPU from them): a trace with many was taken on a busy
    machine; what-ifs keep that time but do not rescale it.

    \b
    Example:
      daydream info run.pt.trace.json.gz --top 5
    """
    _progress(f"loading {len(traces)} path(s)...")
    trace = load_trace(list(traces), iteration_marker)
    s = summarize(trace, top)
    stalls = settle_stalls(build_graph(trace))
    n_it = max(sum(r.n_iterations for r in trace) / max(len(trace.ranks), 1), 1)
    _warn_repairs(s.repairs)
    if as_json:
        click.echo(json.dumps({"ranks": [dict(zip(("rank", "source", "events", "iterations",
                                                   "mean_iteration_ms"), r)) for r in s.ranks],
                               "devices": list(s.devices),
                               "phase_ms": {k: {"cpu": v[0], "gpu": v[1]} for k, v in s.phase_ms.items()},
                               "top_layers": [{"layer": l, "ms": ms} for l, ms in s.top_layers],
                               "top_kernels": [{"name": n, "count": c, "ms": ms} for n, c, ms in s.top_kernels],
                               "tracing_overhead": [{"rank": rank, "pct": o.pct, **dataclasses.asdict(o)}
                                                    for rank, o in s.overhead],
                               "stalls": {"ops": stalls.tasks, "ms_per_iteration": stalls.excess_ns / n_it / 1e6,
                                          "worst": list(stalls.worst)}}))
        return
    click.echo(f"devices: {', '.join(s.devices)}")
    click.echo(f"{'rank':>4}  {'events':>8}  {'iterations':>10}  {'mean iteration ms':>17}  source")
    for rank, src, n, its, ms in s.ranks:
        click.echo(f"{rank:>4}  {n:>8}  {its:>10}  {ms:17.3f}  {src}")
    for rank, o in s.overhead:
        click.echo(f"rank {rank}: {describe(o)}")
    if stalls.tasks:
        click.echo(f"stalls: {stalls.note(n_it)}")
    click.echo("\ntime per iteration by phase (ms):")
    click.echo(f"  {'phase':<12}{'CPU':>10}{'GPU':>10}")
    for p, (cpu, gpu) in s.phase_ms.items():
        click.echo(f"  {p:<12}{cpu:10.3f}{gpu:10.3f}")
    click.echo(f"\ntop {len(s.top_layers)} layers (ms per iteration):")
    for lay, ms in s.top_layers:
        click.echo(f"  {ms:10.3f}  {lay}")
    if s.top_kernels:
        click.echo(f"\ntop {len(s.top_kernels)} GPU kernels and copies (ms per iteration, count):")
        for name, cnt, ms in s.top_kernels:
            click.echo(f"  {ms:10.3f}  {cnt:6.1f}  {name[:100]}")


COMMANDS = [replay, info]
