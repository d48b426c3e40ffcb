"""What-if commands: ``daydream whatif``, ``daydream optimizations``, ``daydream calibrate``."""
from __future__ import annotations

import json
import statistics

import click

from ._cli_util import debugging, handle_errors, internal_error_exit, one_line
from .corelink import span_text
from .errors import DaydreamError
from .fileio import check_writable, provenance, save_figure, write_json

__all__ = ["COMMANDS"]


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@click.option("--opt", "opts", multiple=True, required=True, metavar="NAME[:k=v,...]",
              help="Optimization to apply (repeatable, applied in order). See `daydream optimizations`.")
@click.option("--device", help="Cost figures of a published device (V100, A100, H100, H200, RTX2080TI).")
@click.option("--profile", "profile_path", type=click.Path(), help="Device profile from `daydream calibrate -o`.")
@click.option("--iteration-marker", metavar="REGEX", help="Annotation spanning each iteration.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("-o", "--output", type=click.Path(), help="Write the predicted timeline (Chrome-trace JSON).")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@handle_errors
def whatif(traces, opts, device, profile_path, iteration_marker, as_json, output, force):
    """Predict the iteration time of TRACES with optimizations applied.

    \b
    Examples:
      daydream whatif run.json.gz --opt fused-adam
      daydream whatif run.json.gz --opt amp:dtype=bfloat16 --opt fused-adam --json
      daydream whatif run.json.gz --opt data-parallel:workers=8,backend=nccl --device A100 -o pred.json.gz
    """
    from .sim.export import to_chrome_trace
    from .whatif import predict

    if output:
        check_writable(output, force)
    report, result = predict(list(traces), list(opts), device=device, profile_path=profile_path,
                             iteration_marker=iteration_marker)
    if output:
        write_json(output, to_chrome_trace(result, provenance("whatif", optimizations=list(report.optimizations))))
    if as_json:
        click.echo(json.dumps(report.to_dict()))
        return
    click.echo(f"optimizations: {' + '.join(report.optimizations)}   (device: {report.device})")
    click.echo(f"measured  {report.measured_ms:10.3f} ms")
    click.echo(f"baseline  {report.baseline_ms:10.3f} ms   (simulated, before the optimizations)")
    click.echo(f"predicted {report.predicted_ms:10.3f} ms   speedup {report.speedup:.3f}x")
    click.echo(f"\n{'phase':<12}{'baseline ms':>12}{'predicted ms':>14}{'change':>10}   (task time per iteration)")
    for phase, (b, p) in report.phases.items():
        if b or p:
            ch = f"{(p - b) / b * 100:+.1f}%" if b else "new"
            click.echo(f"{phase:<12}{b:12.3f}{p:14.3f}{ch:>10}")
    for k, v in report.metrics.items():
        click.echo(f"{k:<32}{v:>14.6g}" if isinstance(v, (int, float)) else f"{k:<32}{v!s:>14}")
    for n in report.notes:
        click.echo(f"note: {n}")
    if output:
        click.echo(f"predicted timeline written to {output}")


@click.command()
def optimizations():
    """List every optimization with its parameters and defaults."""
    from .optimizations import registry

    for name, cls in registry().items():
        click.echo(f"{name}: {cls.summary}")
        for p in cls.params:
            choices = f" (one of {', '.join(map(str, p.choices))})" if p.choices else ""
            click.echo(f"    {p.name}={p.default}  {p.help}{choices}")


def _bandwidth_text(bytes_per_s: float) -> str:
    from .calibrate_procs import UNRESOLVED_BYTES_PER_S

    return "bandwidth not resolved" if bytes_per_s >= UNRESOLVED_BYTES_PER_S else f"{bytes_per_s / 1e9:.2f} GB/s"


def _sends_text(sends) -> str:
    """What a point-to-point latency is made of, for ``calibrate``'s summary line."""
    from .calibrate_p2p import P2P_STALL_FACTOR

    median_ns, stalled = sends
    return (f" (median send {median_ns / 1e3:.0f} us; {100 * stalled:.0f} % of sends took over "
            f"{P2P_STALL_FACTOR}x that, and their mean cost is in the latency)") if stalled else ""


@click.command()
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda[:N].")
@click.option("-o", "--output", type=click.Path(), help="Where to save the profile (default: the user cache).")
@click.option("--quick", is_flag=True, help="Fewer sizes, shorter timings.")
@click.option("--no-collectives", is_flag=True, help="Skip the two-process all-reduce and send measurements.")
@click.option("--threads", type=int, help="Intra-op threads to measure with (default: torch's default).")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@handle_errors
def calibrate(device, output, quick, no_collectives, threads, force):
    """Measure this machine once (matmul/conv/elementwise throughput per dtype, op
    overhead, gloo all-reduce and point-to-point send bandwidth and latency) into the
    profile that what-ifs use."""
    from .calibrate import calibrate as run
    from .device import save_profile

    if output:
        check_writable(output, force)     # before minutes of measuring

    prof = run(device, quick=quick, collectives=not no_collectives, threads=threads,
               progress=lambda m: click.echo(f"calibrating: {m} ...", err=True))
    path = save_profile(prof, output)
    links = "".join(f"; {what} {name} {_bandwidth_text(bw)} + {lat / 1e3:.0f} us"
                    + (_sends_text(prof.p2p_sends[name]) if what == "send" and name in prof.p2p_sends else "")
                    for what, figures in (("all-reduce", prof.collective), ("send", prof.p2p))
                    for name, (bw, lat) in figures.items())
    links += "".join(f"; posting a {name} send / receive {s / 1e3:.0f} / {r / 1e3:.0f} us"
                     for name, (s, r) in prof.p2p_post.items())
    links += "".join(f"; a {name} send to a receive posted ahead {ns / 1e3:.0f} us"
                     for name, ns in prof.p2p_preposted.items())
    links += "".join(f"; a {name} arrival learnt through a waiter thread +{prof.p2p_notify_ns(name) / 1e3:.0f} us"
                     for name in prof.p2p_notified)
    links += "".join(f"; a {name} pipeline hand-over {ns / 1e3:.0f} us" for name, ns in prof.p2p_handover.items())
    links += "".join(f"; a {name} all-reduce reached from compute +{ns / 1e3:.0f} us"
                     for name, ns in prof.collective_wake.items())
    if any(prof.ddp_tensor_ns):
        links += (f"; DDP's own time {sum(prof.ddp_call_ns) / 1e3:.0f} us an iteration"
                  f" + {sum(prof.ddp_tensor_ns) / 1e3:.1f} us a parameter tensor")
    if prof.cycle:
        links += ("; a training step with its model's copies in turn " + ", ".join(
            f"x{f:.2f} at {b / 2**20:.0f} MiB" for b, f in prof.cycle))
    if prof.core_to_core_ns:
        links += f"; cores {span_text(prof.core_to_core_ns)} apart (core-to-core round trip)"
    click.echo(f"{prof.name}: op overhead {prof.op_overhead_ns} ns; "
               f"fp32 matmul up to {max(p[1] for p in prof.matmul['float32'].points) / 1e9:.1f} GFLOP/s"
               f"{links}; saved to {path}")


@click.command()
@click.option("--workload", "workloads", default="mlp,cnn,transformer", show_default=True,
              help="Bundled workloads (comma separated).")
@click.option("--opt", "opts", default=",".join(["fused-adam", "amp", "checkpointing", "fusion", "data-parallel",
                                                  "dataloader"]), show_default=True,
              help="Optimizations to validate (comma separated).  Parallelism what-ifs with their own "
                   "multi-process runs: pipeline, tensor-parallel, hfta, hydra, tessel, device (1 -> 2 threads).")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(), help="Folder for results.csv, plots, traces.")
@click.option("--iterations", default=20, show_default=True,
              help="Iterations traced (pipeline and tessel: steps measured) per run, the parallelism runners' "
                   "too (on a shared machine, fewer than ~20 fall within one of its fast or slow spells).")
@click.option("--repeat", default=1, show_default=True,
              help="Rounds per case.  In a round the baseline and the real variant run at the same time, "
                   "iterations in turns; multi-process variants (and device's 2 threads) run after the "
                   "baseline instead, in twice as many rounds; a row is the mean over "
                   "its rounds (hfta, device and tensor-parallel too).  Of the other parallelism runners, "
                   "pipeline, tessel and hydra take the median round's prediction over its measurement, "
                   "at the measured rounds' median.  Their 2-process runs "
                   "move by up to 40 % from one run to the next on a shared VM: docs/parallel.md's figures "
                   "use 5 rounds.")
@click.option("--interleave/--no-interleave", default=True, show_default=True,
              help="Run the parallelism runners' rounds in turns, a round of each at a time, so that each "
                   "runner's rounds spread over the whole validation: a shared machine's slow spells last "
                   "minutes and otherwise fall on all of one row's rounds.  --no-interleave: each runner's "
                   "rounds back to back, one runner after the other.")
@click.option("--public/--no-public", default=True, help="Also the public ResNet-50 DataLoader pair.")
@click.option("--shared", type=click.Path(), default=None, help="Folder of the public traces.")
@click.option("--profile", "profile_path", type=click.Path(), help="Device profile (default: calibrated now, see "
              "--calibrate).")
@click.option("--calibrate/--no-calibrate", "fresh", default=True, show_default=True,
              help="Without --profile: measure this machine first (about 30 s) into OUTPUT/device-cpu-1t.json, so "
                   "that predictions use the device as it runs while the runs are measured (a shared machine's "
                   "speed moves by tens of percent within hours); --no-calibrate uses the cached profile of "
                   "`daydream calibrate`.")
@click.option("--force", is_flag=True, help="Overwrite an existing OUTPUT/results.csv, plots and profile.")
@handle_errors
def validate(workloads, opts, out_dir, iterations, repeat, interleave, public, shared, profile_path, fresh, force):
    """Predict each optimization, apply it for real, measure, and compare.

    Writes OUTPUT/results.csv (workload, optimization, predicted_ms,
    measured_ms, error_pct, untouched_ratio, measured_spread_pct,
    measured_rounds_ms, core_to_core_min_ns, core_to_core_max_ns,
    core_to_core_ns, predicted_rounds_ms, predicted_traces_ms),
    OUTPUT/accuracy.png/.svg and the device profile the predictions used.

    measured_spread_pct is how far the rounds' measurements of the variant
    lie apart ((max - min) / mean, with --repeat 2 or more): an error well
    inside it cannot be told from the machine's noise; measured_rounds_ms
    lists the rounds' measurements, and predicted_rounds_ms the predictions
    from each round's baseline, where the row makes one per round (the
    predictions re-run ops, so they move with the machine too);
    predicted_traces_ms the prediction from each baseline trace, where the
    row is made of them (the hydra rows).  A pipeline, tessel or hydra row's
    error is the median round's: each round's prediction over its own
    measurement.

    With --interleave (the default) the parallelism runners' rounds run in
    turns, so that each runner's rounds spread over the whole validation.

    untouched_ratio is a control: the real run's time of the ops the
    prediction left unchanged over their baseline time.  Away from 1 it
    shows how much of a row's error is the variant process running its
    other work slower or faster (run-to-run variation, or an effect the
    model misses), not the prediction of what the optimization changed.

    core_to_core_min_ns / core_to_core_max_ns are the least and greatest
    round trip of a cache line between two CPUs, probed before and after
    each measured run of the row (daydream.corelink); core_to_core_ns
    lists every probe, in the order taken.  Where they differ
    several-fold the machine moved its cores apart between runs: on a VM
    whose host does that, multi-core runs change speed with it.
    """
    from pathlib import Path

    from .calibrate import calibrate
    from .cpuidle import no_polling_note, polling_idle
    from .device import save_profile
    from .optimizations import OptionError
    from .validate import CASES, RUNNERS, THREADS, write_results

    wanted = [o for o in opts.split(",") if o]
    bad = [o for o in wanted if o not in CASES and o not in RUNNERS]
    if bad:
        raise OptionError(f"cannot validate {', '.join(bad)} here (valid: {', '.join([*CASES, *RUNNERS])})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fresh_name = f"device-cpu-{THREADS}t.json" if fresh and not profile_path else None
    for name in ("results.csv", "accuracy.png", "accuracy.svg", fresh_name):   # before hours of measuring
        if name:
            check_writable(out / name, force)
    progress = lambda m: click.echo(m, err=True)  # noqa: E731
    with polling_idle() as held:
        if not held:
            progress(no_polling_note())
        if fresh_name:
            progress(f"calibrating this machine at {THREADS} thread(s) for this run (about 30 s) ...")
            prof = calibrate("cpu", threads=THREADS, progress=lambda m: progress(f"calibrating: {m}"))
            profile_path = save_profile(prof, str(out / fresh_name))
        rows, failed = _measure(wanted, workloads, out, iterations, profile_path, progress, repeat, interleave, public,
                                shared)
    path = write_results(rows, out, force=force)
    import matplotlib

    matplotlib.use("Agg")
    from .plots import AccuracyPoint, plot_accuracy

    fig = plot_accuracy([AccuracyPoint(f"{r.workload} {r.optimization.split(':')[0]}", r.measured_ms, r.predicted_ms)
                         for r in rows], title="daydream what-if: predicted vs measured")
    for ext in ("png", "svg"):
        save_figure(fig, out / f"accuracy.{ext}", provenance("validate"), force=force, dpi=120)
    errs = sorted(r.error_pct for r in rows)
    for r in rows:
        untouched = "" if r.untouched_ratio != r.untouched_ratio else f"   untouched ops x{r.untouched_ratio:.2f}"
        spread = "" if r.measured_spread_pct != r.measured_spread_pct else f"   rounds {r.measured_spread_pct:.0f}% apart"
        cores = f"   cores {span_text(r.core_to_core_ns)}" if r.core_to_core_ns else ""
        click.echo(f"{r.workload:<28}{r.optimization:<40}{r.predicted_ms:10.2f}{r.measured_ms:10.2f}"
                   f"{r.error_pct:8.1f}%{untouched}{spread}{cores}")
    if errs:
        click.echo(f"{len(rows)} cases: median error {statistics.median(errs):.1f}%, worst {errs[-1]:.1f}%; {path}")
    if failed:
        internal_error_exit("; ".join(failed))


def _measure(wanted, workloads, out, iterations, profile_path, progress, repeat, interleave, public, shared) -> tuple:
    """The rows of ``daydream validate`` (the matrix, the parallelism runners, the public pair) and
    the runners that failed by a bug, each as ``'name: error'``."""
    from pathlib import Path

    from .corelink import CoreLinkLog
    from .validate import (CASES, RUNNERS, ensure_profile, public_dataloader_rows, run_validation, runner,
                           with_placement)
    from .validation.turns import run_rounds, started

    rows, failed = run_validation([w for w in workloads.split(",") if w], [o for o in wanted if o in CASES], out,
                                  iterations, profile_path, progress=progress, repeat=repeat), []
    runners = {}
    for name in (o for o in wanted if o in RUNNERS):
        fn = runner(name)
        if fn is None:
            progress(f"{name}: no validation runner installed; skipped")
            continue
        runners[name] = started(fn, out, ensure_profile(profile_path, progress), progress, repeat, iterations)
    if interleave and len(runners) > 1:
        progress(f"validate: the rounds of {', '.join(runners)} in turns, one round of each at a time "
                 "(--no-interleave: one after the other)")

    def on_error(name, exc):
        if isinstance(exc, DaydreamError):   # the other runners' rows are still written
            progress(f"{name}: skipped ({exc})")
            return
        if debugging():
            raise exc
        failed.append(f"{name}: {one_line(exc)}")   # a bug in one runner must not lose the others' rows
        progress(f"{name}: internal error ({one_line(exc)}); skipped, the other rows are still written")

    logs = {name: CoreLinkLog() for name in runners}
    got = run_rounds(runners, logs, on_error, interleave, progress=progress)
    for name in runners:
        rows += with_placement(got[name], logs[name])
    if public:
        from .demo import _DEFAULT_SHARED  # noqa: F811
        rows += public_dataloader_rows(Path(shared) if shared else _DEFAULT_SHARED, profile_path)
    return rows, failed


COMMANDS = [whatif, optimizations, calibrate, validate]
