"""Validate ``pipeline`` against torch.distributed.pipelining on 2 CPU processes (gloo).

Baseline: the bundled MLP traced on one process with ``daydream trace``.
Prediction: ``pipeline:stages=2,microbatches=M,schedule=S,partition=MLP.blocks.2,
action_overhead_us=X`` (the split the workload makes: hidden blocks 0-1 on
stage 0, blocks 2-3 and the head on stage 1; ``X`` the pipelining runtime's
own cost per action, measured on this machine by :func:`action_overhead_us`).  Measurement: ``python -m daydream.workloads.pipeline
--schedule S`` (ScheduleGPipe / Schedule1F1B), mean step time after warm-up, and
a round's measurement the mean over :data:`daydream.validate.REAL_PROCESSES` such
runs, each in fresh processes (since session 63: a run's speed is partly its
processes' own).
A third row runs the whole model as one stage on one process with the same
micro-batches (``ScheduleGPipe``, ``--nproc 1``): the micro-batch cost model
checked without cross-process effects; each round runs the job alone between
two baseline traces of its own, all three on one core
(:func:`one_stage_alone`), and is predicted from them.
Baseline traces and 2-process runs are taken in turns, ``repeat`` rounds,
each round's runs between a trace before and one after them
(:func:`alternating`): on a shared machine they then see the same load.  A row
is the median over the rounds of the prediction from each round's two
baselines (their mean) and the median of the measured rounds; each trace is
predicted right after it is taken, with the co-run rate of two ranks measured
then (:func:`daydream.validate.predict_now`; until session 38, once after the
last round), and since session 81 the hand-over figures too (``handover=now``,
:mod:`optimizations._handover_now`: a calibration's figure did not follow the
real runs of its validation minutes later, and the rows' errors grew with it).
(Until session 36 it predicted once, from the round whose baseline iteration was the median: a prediction re-runs
the micro-batch ops, and five predictions from one trace and one profile
spread over 1.7 ms for the Tessel V.)
"""
from __future__ import annotations

import functools
import json
import statistics
import subprocess
import sys
from pathlib import Path

from ..corelink import probed
from ..errors import DaydreamError
from ..validate import REAL_PROCESSES, THREADS, median_row, predict_now, run_env
from .turns import drain

__all__ = ["validate_rows", "validation_rounds", "MODEL_ARGS", "MICROBATCHES", "measure_pipeline", "SCHEDULES",
           "action_overhead_us", "alternate", "alternating", "recording_us", "one_stage_in_turns", "one_stage_alone"]

#: Model sizes shared by the 1-process trace and the 2-process run (``mlp`` flags).
MODEL_ARGS = ("--hidden", "1024", "--batch-size", "64", "--layers", "4", "--in-features", "512")
MICROBATCHES = 4
SCHEDULES = ("gpipe", "1f1b")
#: The workload's split of 4 hidden blocks over 2 stages starts stage 1 at this module.
PARTITION = "MLP.blocks.2"


def _cmd(schedule: str, extra=(), steps: int = 14, warmup: int = 4, microbatches: int = MICROBATCHES,
         model=MODEL_ARGS) -> list:
    return [sys.executable, "-m", "daydream.workloads.pipeline", "--schedule", schedule, "--microbatches",
            str(microbatches), "--steps", str(steps), "--warmup", str(warmup), "--threads", str(THREADS),
            "--pin-cores", *model, *extra]   # a core per stage, as the model assumes


def _summary(schedule: str, stdout: str, stderr: str) -> dict:
    """The run's JSON summary line, or :class:`DaydreamError` with its last line of stderr."""
    for line in stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
    raise DaydreamError(f"pipeline run ({schedule}) failed: {tail}")


def _run(schedule: str, extra=(), steps: int = 14, warmup: int = 4, microbatches: int = MICROBATCHES,
         model=MODEL_ARGS) -> dict:
    with probed():
        proc = subprocess.run(_cmd(schedule, extra, steps, warmup, microbatches, model), capture_output=True,
                              text=True, timeout=600, env=run_env())
    return _summary(schedule, proc.stdout, proc.stderr)


#: Steps a pipeline run takes before it measures; and the steps it measures unless the caller says.
WARMUP_STEPS, STEPS = 4, 10


def measure_pipeline(schedule: str, extra=(), steps: int = STEPS, microbatches: int = MICROBATCHES,
                     processes: int = 1) -> float:
    """Mean time (ms) of ``steps`` steps of a run of the pipeline workload, after
    :data:`WARMUP_STEPS` (2 processes unless ``extra`` says); with ``processes`` > 1 the mean
    over that many runs, one after the other, each in fresh processes
    (:data:`daydream.validate.REAL_PROCESSES`)."""
    return statistics.fmean(float(_run(schedule, extra, WARMUP_STEPS + steps, WARMUP_STEPS, microbatches)["mean_ms"])
                            for _ in range(max(processes, 1)))


def one_stage_in_turns(path: Path, iterations: int = STEPS) -> tuple:
    """The 1-stage job (``--nproc 1``) measured in turns with the baseline traced into ``path``:
    ``(trace path, mean step ms)`` (:func:`daydream.validate.trace_beside`).

    Both are single processes, so their measured iterations alternate on one core, as the
    ``hfta`` rows' traces do: the prediction from the trace and the real run then see the
    machine in the same state.  Run one after the other and on neither core in particular (until
    session 61), the row's per-round errors had a standard deviation of 13.7 % over 24 runs; in
    turns, 2.7 % over two (docs/validation-log.md, "Session 61").  Turns cost each side about
    the same there (0.7-0.9 ms an iteration of cold caches after the other's turn), and the job
    over its trace read the same in turns as alone on that core; not so on session 85's Intel
    host, where the row now runs :func:`one_stage_alone` (this stays for the benchmarks that
    compare the two).
    """
    from ..validate import trace_beside

    cmd = _cmd("gpipe", ("--nproc", "1"), WARMUP_STEPS + iterations, WARMUP_STEPS)
    trace, (_, out, err) = trace_beside(("mlp", path, MODEL_ARGS, 1), cmd, iterations)
    return trace, float(_summary("1-stage", out, err)["mean_ms"])


def one_stage_alone(tdir: Path, k: int, iterations: int = STEPS) -> tuple:
    """The 1-stage job (``--nproc 1``) measured alone between two baseline traces, all three
    alone on one core (:func:`daydream.collect.turns.shared_core`): ``((trace before, trace
    after), mean step ms)``; files ``mlp.pipeline-1stage.rK.{before,after}.json.gz``.

    Since session 89, in place of :func:`one_stage_in_turns`.  Turns of 0.02 s cost each side
    the caches the other left, which on session 85's Intel host (2 MiB of L2 a core) came to
    4-6 ms an iteration for the 20 ms baseline and 2-3 ms a step for the 36 ms job, where the
    Zen hosts paid 0.7-0.9 ms each; the prediction repeats the baseline's share per
    micro-batch.  In the same minutes (eight rounds, order rotated) the row's error read +2.4 %
    (-0.1 to +8.8) alone on one core and +17.7 % (+13.8 to +21.4) in turns
    (docs/validation-log.md, "Session 89").  Two traces bracket the job, as the 2-stage rows'
    rounds are bracketed, so that a drift of the machine falls on the prediction's side too.
    """
    from ..collect.turns import shared_core
    from ..validate import held_on, trace_workload

    core = shared_core()
    with held_on(None if core is None else {core}):
        before = trace_workload("mlp", tdir / f"mlp.pipeline-1stage.r{k}.before.json.gz", MODEL_ARGS,
                                iterations=iterations)
        ms = measure_pipeline("gpipe", ("--nproc", "1"), steps=iterations)
        after = trace_workload("mlp", tdir / f"mlp.pipeline-1stage.r{k}.after.json.gz", MODEL_ARGS,
                               iterations=iterations)
    return (before, after), ms


#: A model too small to compute much: step times are the framework's own costs.
TINY_ARGS = ("--hidden", "32", "--in-features", "32", "--batch-size", "64")
#: Micro-batch count compared with 1 by :func:`action_overhead_us`.
OVERHEAD_MB = 8


@functools.lru_cache(maxsize=None)
def action_overhead_us(repeat: int = 1, progress=print) -> float:
    """The pipelining runtime's own cost per F or B action on this machine, in us.

    One process, a tiny model (``--schedule probe`` of the pipeline
    workload): the growth of the median step from 1 to 8 micro-batches under
    torch's ``ScheduleGPipe``, minus the growth of a plain loop accumulating
    gradients over the same micro-batches (per-micro-batch framework work the
    trace-based model already has), over ``2 x 7`` extra actions.  The four
    configurations run interleaved step by step in one process, so the
    machine's drift falls on all of them; the median over ``2 x repeat``
    processes.  (Run as separate processes, the same difference of
    differences read 0 to 330 us on this VM; interleaved, 127-158 us in six
    runs.)  Measured once per process (the pipeline and Tessel validations
    share it).
    """
    got = []
    for _ in range(2 * max(repeat, 1)):
        out = _run("probe", steps=60, warmup=8, microbatches=OVERHEAD_MB, model=TINY_ARGS)
        extra_ms = (out["gpipe_M"] - out["gpipe_1"]) - (out["plain_M"] - out["plain_1"])
        got.append(max(extra_ms, 0.0) * 1e3 / (2 * (OVERHEAD_MB - 1)))
    us = statistics.median(got)
    progress(f"pipeline: runtime cost per action {us:.0f} us (tiny model, ScheduleGPipe against a plain loop at 1 and "
             f"{OVERHEAD_MB} micro-batches, interleaved; {' / '.join(f'{x:.0f}' for x in got)} us in "
             f"{len(got)} processes)")
    return us


@functools.lru_cache(maxsize=None)
def recording_us(progress=print) -> float:
    """The tracer's cost per recorded CPU op on this machine, in us
    (:func:`daydream.overhead.recording_us_here`, measured once per process), said once: the
    pipeline and Tessel rows take it out of every micro-batch pass (``recording_us=``), since their
    real runs are not traced."""
    from ..overhead import recording_us_here

    us = recording_us_here()
    progress(f"pipeline: the tracer's cost per recorded op {us:.2f} us (training steps of small layers with and "
             "without a profiler session and layer markers, paired)")
    return us


def alternating(repeat: int, tdir: Path, runs: dict, progress=print, tag: str = "pipeline", iterations: int = STEPS,
                on_trace=None):
    """Baseline traces and measurements of each run, taken in turns; each round's runs bracketed.

    A generator, a runner's part (:mod:`daydream.validation.turns`): ``repeat``
    rounds each call every run in ``runs`` (name -> callable returning ms) once;
    the 1-process baseline is traced (``iterations``; files
    ``mlp.TAG-base.rJ.json.gz``, ``J`` counting the traces) before the first
    round and after every round, so that every round has a trace right before
    and right after it; the trace after a round serves as the next one's trace
    before unless other work ran between them (the value sent back at the
    yield between them), and then a fresh one is taken.  Returns ``(median,
    rounds, {name: [ms of each round]})``: the baseline trace whose measured
    iteration is the median, each round's ``(before, after)`` traces, and
    every run's measurements.  Callers take medians (the fastest of each is
    biased here: a 1-process trace catches a quiet spell of this machine far
    more often than a 14-step 2-process run).  (Until session 37 each round
    traced once, before its runs.)  ``on_trace(path)``, if given, is called
    right after each baseline trace (to predict from it then:
    :func:`daydream.validate.predict_now`).  :func:`alternate` runs it alone.
    """
    from ..analysis import replay
    from ..validate import trace_workload

    n = max(repeat, 1)
    traces, got, rounds = [], {k: [] for k in runs}, []

    def trace(when):
        progress(f"{tag}: {when}: tracing the 1-process baseline (mlp)")
        path = Path(trace_workload("mlp", tdir / f"mlp.{tag}-base.r{len(traces)}.json.gz", MODEL_ARGS,
                                   iterations=iterations))
        traces.append((replay(path)[0].measured_ms, path))
        if on_trace is not None:
            on_trace(path)
        return path

    before = trace(f"round 1/{n}")
    for k in range(n):
        for name, fn in runs.items():
            progress(f"{tag}: round {k + 1}/{n}: running {name}")
            got[name].append(fn())
        after = trace("after the last round" if k == n - 1 else f"after round {k + 1}/{n}")
        rounds.append((before, after))
        if k < n - 1:
            stale = yield (k + 1) / n
            before = trace(f"round {k + 2}/{n}") if stale else after
    return sorted(traces)[(len(traces) - 1) // 2][1], rounds, got


def alternate(repeat: int, tdir: Path, runs: dict, progress=print, tag: str = "pipeline", iterations: int = STEPS,
              on_trace=None) -> tuple:
    """:func:`alternating` alone, its rounds back to back: ``repeat + 1`` traces, each round
    between the trace before it and the one after."""
    return drain(alternating(repeat, tdir, runs, progress, tag, iterations, on_trace))


def validation_rounds(out_dir: Path, profile_path, progress=print, repeat: int = 1, iterations: int = STEPS):
    """Rows for GPipe and 1F1B on 2 stages, and 1 stage x M micro-batches on one process
    (the micro-batch cost model without cross-process effects, measured alone between two
    baseline traces of its own on one core: :func:`one_stage_alone`; see the module docstring).
    A runner (:mod:`daydream.validation.turns`): yields between rounds; returns the rows."""
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    overhead, rec = action_overhead_us(repeat, progress), recording_us(progress)
    specs = {s: (f"pipeline:stages=2,microbatches={MICROBATCHES},schedule={s},partition={PARTITION},"
                 f"action_overhead_us={overhead:.0f},recording_us={rec:.2f},handover=now") for s in SCHEDULES}
    one = (f"pipeline:stages=1,microbatches={MICROBATCHES},schedule=gpipe,action_overhead_us={overhead:.0f},"
           f"recording_us={rec:.2f}")
    done, paired = {}, []

    def one_stage() -> float:
        paths, ms = one_stage_alone(tdir, len(paired), iterations)
        done.update({p: predict_now(p, [one], profile_path) for p in paths})
        paired.append(paths)
        return ms

    runs = {s: (lambda s=s: measure_pipeline(s, steps=iterations, processes=REAL_PROCESSES)) for s in SCHEDULES}
    runs["1-stage"] = one_stage
    _, rounds, got = yield from alternating(
        repeat, tdir, runs, progress, iterations=iterations,
        on_trace=lambda p: done.update({p: predict_now(p, specs.values(), profile_path)}))
    rows = []
    for s, spec, its_rounds in [*((s, specs[s], rounds) for s in SCHEDULES), ("1-stage", one, paired)]:
        row = median_row("mlp", spec, its_rounds, spec, got[s], profile_path, done)
        progress(f"pipeline: {s}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                 f"error {row.error_pct:.1f}%")
        rows.append(row)
    return rows


def validate_rows(out_dir: Path, profile_path, progress=print, repeat: int = 1, iterations: int = STEPS) -> list:
    """:func:`validation_rounds` alone, its rounds back to back."""
    return drain(validation_rounds(out_dir, profile_path, progress, repeat, iterations))
