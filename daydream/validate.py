"""``daydream validate``: predictions checked against the optimization really applied.

For each bundled workload and each optimization that can run on this
machine: trace the baseline, predict with ``whatif``, trace the variant that
really applies the optimization (workload flags), and compare mean iteration
times measured the same way (ProfilerStep ranges of both traces).  The
public ResNet-50 DataLoader pair (``num_workers=0`` -> ``4``) is checked too.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .analysis import op_times_ms, replay
from .corelink import CoreLinkLog, probed, span_text
from .errors import DaydreamError
from .heapmode import STEADY_MALLOC
from .loader import load_trace
from .model import Trace
from .whatif import predict

__all__ = ["CASES", "RUNNERS", "runner", "ValidationRow", "ensure_profile", "THREADS", "STEADY_MALLOC", "run_env", "with_placement", "placement_note", "fastest_run", "replay_rank0", "rank_files", "paired_rounds", "iter_paired_rounds", "rounds_count", "rounds_label", "SEQUENTIAL_ROUNDS", "REAL_PROCESSES", "rounds_row", "bracketed", "predict_now", "bracket_predictions", "median_row", "median_round", "untouched_ratio", "trace_in_turns", "trace_beside", "run_in_turns", "trace_workload", "held_on", "run_validation", "write_results", "public_dataloader_rows"]


@dataclass(frozen=True)
class Case:
    """An optimization, the workload flags of its baseline and of the real variant."""

    opt: str
    baseline: tuple
    variant: tuple
    nproc: int = 1


#: Validation matrix on CPU (optimization spec -> how to run baseline and variant).
CASES = {
    "fused-adam": Case("fused-adam", ("--optimizer", "adam", "--optimizer-impl", "for-loop"),
                       ("--optimizer", "adam", "--optimizer-impl", "fused")),
    "amp": Case("amp:dtype=bfloat16", (), ("--autocast", "bfloat16")),
    "checkpointing": Case("checkpointing", (), ("--checkpoint",)),
    "fusion": Case("fusion", (), ("--compile",)),
    "data-parallel": Case("data-parallel:workers=2,backend=gloo", (), (), nproc=2),
    "dataloader": Case("dataloader:workers=2", ("--num-workers", "0"), ("--num-workers", "2")),
}

#: Validations that need their own runner (several processes, several models):
#: name -> "module:function".  The function is called as
#: ``fn(out_dir: Path, profile_path: str, progress, repeat: int, iterations: int)``; a generator
#: function's generator yields between rounds and returns a list of :class:`ValidationRow`
#: (:mod:`daydream.validation.turns` runs several in turns), another function returns the list.
#: ``device`` keeps its rounds together, right after the profiles it calibrates for them.
#: Modules that are absent are skipped.
RUNNERS = {
    "pipeline": "daydream.validation.pipeline:validation_rounds",
    "tensor-parallel": "daydream.validation.tensor_parallel:validation_rounds",
    "hfta": "daydream.validation.hfta:validation_rounds",
    "hydra": "daydream.validation.hydra:validation_rounds",
    "tessel": "daydream.validation.tessel:validation_rounds",
    "device": "daydream.validation.device:validate_rows",
}


def runner(name: str):
    """The validation function registered for ``name`` in :data:`RUNNERS`, or None if absent."""
    import importlib

    mod, _, fn = RUNNERS[name].partition(":")
    try:
        return getattr(importlib.import_module(mod), fn)
    except ModuleNotFoundError as exc:
        if exc.name and mod.startswith(exc.name):
            return None
        raise


#: Small sizes so that each workload traces in seconds on 2 cores.  One
#: intra-op thread: measurements stay stable when other work shares the cores
#: (multi-threaded ops stall when a core is taken), and two data-parallel
#: workers get a core each.
THREADS = 1
#: ``--dataset-batches 64``: an epoch (a DataLoader iterator restarting, its
#: workers' queues empty) every 64 steps, not every 8: training runs see one
#: per thousands of steps, and the ``dataloader`` model is of the steady state.
WORKLOAD_ARGS = {
    "mlp": ("--hidden", "512", "--batch-size", "64", "--threads", str(THREADS), "--dataset-batches", "64"),
    "cnn": ("--batch-size", "16", "--threads", str(THREADS), "--dataset-batches", "64"),
    "transformer": ("--batch-size", "8", "--threads", str(THREADS), "--dataset-batches", "64"),
}


def ensure_profile(profile_path=None, progress=print) -> str:
    """Path of a CPU profile calibrated at :data:`THREADS` threads (measured now if missing).
    The default cache file, if from before point-to-point sends (or their host cost) were
    calibrated, gets them added; a profile given by path is used as it is (transfers then use
    the all-reduce figures, or no host cost)."""
    from .calibrate import calibrate, gloo_p2p
    from .device import default_profile_path, load_profile, save_profile

    path = profile_path or default_profile_path("cpu", THREADS)
    if not os.path.exists(path):
        progress(f"calibrating this machine at {THREADS} thread(s) (once, about 30 s) ...")
        save_profile(calibrate("cpu", threads=THREADS, progress=lambda m: progress(f"calibrating: {m}")), path)
        return path
    prof = None if profile_path else load_profile(path)
    if prof is not None and prof.kind == "cpu" and prof.collective and not (prof.p2p and prof.p2p_post
                                                                             and prof.p2p_handshake
                                                                             and prof.p2p_preposted
                                                                             and prof.p2p_notified
                                                                             and prof.p2p_handover
                                                                             and prof.p2p_collision
                                                                             and prof.p2p_hold
                                                                             and prof.p2p_late_hold
                                                                             and prof.p2p_land):
        progress(f"calibrating: point-to-point send (gloo, 2 processes), added to {path}")
        prof = dataclasses.replace(prof, **{k: {"gloo": v} for k, v in gloo_p2p().items()})
        save_profile(prof, path)
    if prof is not None and prof.kind == "cpu" and prof.collective and not (prof.collective_wake
                                                                             and any(prof.ddp_tensor_ns)):
        progress(f"calibrating: all-reduce after compute and DDP's own overhead, added to {path}")
        prof = _with_ddp_figures(prof)
        save_profile(prof, path)
    if prof is not None and prof.kind == "cpu" and not prof.cycle:
        progress(f"calibrating: training steps of several model copies in turn, added to {path}")
        save_profile(_with_cycle(prof), path)
    return path


def _with_cycle(prof):
    """``prof`` with ``cycle`` (:mod:`daydream.calibrate_cycle`) measured now, at its threads."""
    import torch

    from .calibrate_cycle import cycle_points

    torch.set_num_threads(prof.threads or THREADS)
    return dataclasses.replace(prof, cycle=cycle_points(torch))


def _with_ddp_figures(prof):
    """``prof`` with the data-parallel figures of newer calibrations measured now:
    ``collective_wake`` and ``ddp_call_ns`` / ``ddp_tensor_ns`` (at the profile's threads)."""
    import torch

    from .calibrate import ddp_ns
    from .calibrate_procs import gloo_wake_ns

    torch.set_num_threads(prof.threads or THREADS)
    call, tensor = ddp_ns(torch, torch.device("cpu"))
    return dataclasses.replace(prof, collective_wake={"gloo": gloo_wake_ns()}, ddp_call_ns=call, ddp_tensor_ns=tensor)


@dataclass(frozen=True)
class ValidationRow:
    workload: str
    optimization: str
    baseline_ms: float
    predicted_ms: float
    measured_ms: float
    #: the real run's time of the ops the prediction left unchanged over their baseline time
    #: (:func:`untouched_ratio`); NaN where not measured
    untouched_ratio: float = float("nan")
    #: the variant's time in each round that ``measured_ms`` summarises
    measured_rounds_ms: tuple = ()
    #: core-to-core round trips (ns) probed before and after the runs that made the row, in the
    #: order taken (:mod:`daydream.corelink`); empty where not probed
    core_to_core_ns: tuple = ()
    #: the prediction from each round's baseline that ``predicted_ms`` summarises (its mean, or
    #: for pipeline, tessel and hydra the median round's over its measurement, :func:`median_row`);
    #: empty where not recorded
    predicted_rounds_ms: tuple = ()
    #: where ``predicted_ms`` is made of the baseline traces' own predictions, not of the
    #: rounds' (:func:`median_row` ``per_trace``): those predictions, in the order traced
    predicted_traces_ms: tuple = ()

    @property
    def error_pct(self) -> float:
        return abs(self.predicted_ms - self.measured_ms) / self.measured_ms * 100.0

    @property
    def measured_spread_pct(self) -> float:
        """How far the rounds' measurements lie apart: ``(max - min) / mean``, in percent; NaN
        with fewer than two rounds.  An error well inside it is not told apart from the noise.

        >>> ValidationRow("w", "o", 10.0, 10.0, 11.0, measured_rounds_ms=(10.0, 12.0)).measured_spread_pct
        18.181818181818183
        """
        r = self.measured_rounds_ms
        return (max(r) - min(r)) / statistics.fmean(r) * 100.0 if len(r) >= 2 else float("nan")

    @property
    def core_to_core_range_ns(self) -> tuple:
        """(least, greatest) of :attr:`core_to_core_ns`; NaNs when not probed."""
        v = self.core_to_core_ns
        return (min(v), max(v)) if v else (float("nan"), float("nan"))


def with_placement(rows, log) -> list:
    """``rows`` with ``log``'s probes (:class:`daydream.corelink.CoreLinkLog`) where they have none."""
    return [r if r.core_to_core_ns else dataclasses.replace(r, core_to_core_ns=log.values_ns) for r in rows]


def placement_note(row) -> str:
    """The row's core-to-core probes for a progress line ('' when not probed).

    >>> placement_note(ValidationRow("w", "o", 1.0, 1.0, 1.0, core_to_core_ns=(330.0, 55.0)))
    '; core-to-core round trip 55-330 ns'
    """
    text = span_text(row.core_to_core_ns)
    return f"; core-to-core round trip {text}" if text else ""


def run_env(**extra) -> dict:
    """Environment for a measured run: this one, :data:`STEADY_MALLOC`, ``extra``."""
    return {**os.environ, **STEADY_MALLOC, **extra}


def _trace_cmd(name: str, path: Path, args=(), warmup: int = 2, iterations: int = 5, nproc: int = 1) -> list:
    cmd = [sys.executable, "-m", "daydream", "trace", "-o", str(path), "--force", "--warmup", str(warmup),
           "--iterations", str(iterations)]
    if nproc > 1:
        # A core per rank, as the models assume.  Unpinned, Linux ran both ranks' threads on
        # one core for stretches: the MLP's 2-rank data-parallel job measured 22.1 / 27.5 /
        # 34.6 ms in three runs in a row, pinned 20.3 - 22.5 ms in four.
        cmd += ["--nproc", str(nproc), "--pin-cores"]
    return cmd + ["--", sys.executable, "-m", f"daydream.workloads.{name}", "--steps", str(warmup + iterations + 2),
                  "--quiet", *WORKLOAD_ARGS.get(name, ()), *args]


def _traced(name: str, path: Path, args, nproc: int, returncode: int, stderr: str) -> Path:
    out = path if nproc == 1 else _rank0(path)
    if returncode != 0 or not out.exists():
        lines = [ln for ln in stderr.strip().splitlines() if not ln.startswith("daydream: wrote ")]
        why = f"exit status {returncode}" if returncode != 0 else f"no {out.name}"
        raise DaydreamError(f"tracing {name} {' '.join(args)} failed ({why}): {(lines or ['(no other output)'])[-1]}")
    return out


def trace_workload(name: str, path: Path, args=(), warmup: int = 2, iterations: int = 5, nproc: int = 1,
                   core_of: tuple | None = None) -> Path:
    """Trace a bundled workload with ``daydream trace``; returns the (rank 0) trace path.

    ``core_of``: ``(rank, ranks)``: the trace runs on the cores that rank ``rank`` of a
    ``ranks``-process run pinned with ``--pin-cores`` gets (``benchmarks/bracket_noise.py
    --cores``)."""
    with probed(), _on_cores(core_of):
        proc = subprocess.run(_trace_cmd(name, path, args, warmup, iterations, nproc), capture_output=True,
                              text=True, env=run_env())
    return _traced(name, path, args, nproc, proc.returncode, proc.stderr)


def _on_cores(core_of):
    """Processes started inside run on the cores of ``core_of`` (``(rank, ranks)``; None: as
    this thread may run): :func:`held_on` the share ``--pin-cores`` gives that rank."""
    if core_of is None or not hasattr(os, "sched_getaffinity"):
        return held_on(None)
    from .collect.runner import cores_for_rank

    return held_on(cores_for_rank(os.sched_getaffinity(0), *core_of))


@contextlib.contextmanager
def held_on(cores):
    """Processes started inside run on ``cores`` (None: as this thread may run): this thread
    holds them meanwhile, and a child inherits them."""
    if cores is None or not hasattr(os, "sched_setaffinity"):
        yield
        return
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


#: Least length of a turn (s): short against the machine's drift (spells of a
#: tenth of a second), and a few iterations of the validation MLP, so that
#: starting on caches the other process left cold stays a small share.  0.02 s
#: turns on one core halved the spread of an A/A pair against 0.1 s ones
#: (:mod:`daydream.collect.turns`).
TURN_S = 0.02


def trace_in_turns(configs, iterations: int = 5, warmup: int = 2, quantum_s: float = TURN_S,
                   one_core: bool = True) -> list:
    """Trace ``configs`` (``(workload, path, args, nproc)``) at once, iterations taken in turns.

    The processes run their recorded iterations alternately (one iteration of
    the first, one of the second, ...; the ranks of a multi-process config
    together), so all of them see the machine in the same state: on a shared
    machine whose speed drifts by 10-20 % from second to second, runs made
    one after the other are not comparable (:mod:`daydream.collect.turns`).
    With ``one_core`` and every config a single process, they also record on
    one and the same core (:func:`daydream.collect.turns.shared_core`; their
    DataLoader workers keep the other cores).  Returns the (rank 0) trace paths.
    """
    cmds = [(_trace_cmd(name, path, args, warmup, iterations, nproc), nproc) for name, path, args, nproc in configs]
    done = run_in_turns(cmds, quantum_s, one_core)
    return [_traced(name, path, args, nproc, code, err)
            for (name, path, args, nproc), (code, _, err) in zip(configs, done)]


def trace_beside(config, cmd, iterations: int = 5, warmup: int = 2, quantum_s: float = TURN_S) -> tuple:
    """Trace ``config`` (as :func:`trace_in_turns`) in turns with ``cmd``, one process that takes
    turns itself (the pipeline workload's steps): ``(trace path, (returncode, stdout, stderr) of
    cmd)``."""
    name, path, args, nproc = config
    (code, _, err), other = run_in_turns([(_trace_cmd(name, path, args, warmup, iterations, nproc), nproc),
                                          (cmd, 1)], quantum_s)
    return _traced(name, path, args, nproc, code, err), other


def run_in_turns(cmds, quantum_s: float = TURN_S, one_core: bool = True) -> list:
    """Run commands (``(argv, nproc)``) at once, their measured iterations taken in turns.

    Each command is a participant of :mod:`daydream.collect.turns` (a traced
    workload, or a workload that takes turns itself, as the pipeline workload's
    steps do) with ``nproc`` processes; see :func:`trace_in_turns`.  Returns
    ``(returncode, stdout, stderr)`` per command, in order.
    """
    import tempfile

    from .collect.turns import TurnTaker, shared_core

    cpu = shared_core() if one_core and all(n == 1 for _, n in cmds) else None
    with probed(), tempfile.TemporaryDirectory(prefix="daydream-turns-") as tmp, \
            TurnTaker(Path(tmp) / "turns", {f"c{i}": n for i, (_, n) in enumerate(cmds)}, quantum_s,
                      cpu=cpu) as turns:
        files = [[open(Path(tmp) / f"c{i}.{s}", "w+") for s in ("stdout", "stderr")]   # no pipe to fill up
                 for i in range(len(cmds))]
        procs = [subprocess.Popen(argv, text=True, stdout=out, stderr=err, env=run_env(**turns.env(f"c{i}")))
                 for i, ((argv, _), (out, err)) in enumerate(zip(cmds, files))]
        codes = [p.wait() for p in procs]
        texts = [[_read_back(f) for f in pair] for pair in files]
    return [(code, out, err) for code, (out, err) in zip(codes, texts)]


def _read_back(f) -> str:
    """All a run wrote to the file ``f``, which is then closed."""
    with f:
        f.seek(0)
        return f.read()


def _rank0(path: Path) -> Path:
    name = path.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return path.with_name(name[: -len(suffix)] + ".rank0" + suffix)
    return path


def replay_rank0(path: Path, nproc: int = 1) -> tuple:
    """:func:`daydream.analysis.replay` of a traced run's rank 0 (``path``, its file), the pauses of
    its ``nproc - 1`` other ranks (``.rankK`` beside it) cut from it too.

    A rank's heap top-up between iterations stalls the others inside theirs
    (:func:`daydream.loader.pauses.cut_peer_pauses`); rank 0's file alone does not show
    whose pause it waited for, so every rank of the run is loaded.
    """
    if nproc <= 1:
        return replay(path)
    return replay(Trace(load_trace(rank_files(path, nproc)).ranks[:1]))


def rank_files(path: Path, nproc: int) -> list:
    """The files of every rank of a traced run, from its rank 0's (``NAME.rank0.json.gz``).

    >>> [p.name for p in rank_files(Path("tp.t2.r3.rank0.json.gz"), 2)]
    ['tp.t2.r3.rank0.json.gz', 'tp.t2.r3.rank1.json.gz']
    """
    return [path.with_name(path.name.replace(".rank0.", f".rank{k}.")) for k in range(nproc)]


def _round_path(path: Path, k: int, repeat: int) -> Path:
    return path.with_name(path.name.replace(".json", f".r{k}.json")) if repeat > 1 else path


def fastest_run(repeat: int, name: str, path: Path, args=(), iterations: int = 5, nproc: int = 1):
    """Trace ``repeat`` times; keep the run with the lowest mean iteration time.

    For a single configuration with nothing to compare against in the same
    rounds.  Returns (path, report).
    """
    runs = [trace_workload(name, _round_path(path, k, repeat), args, iterations=iterations, nproc=nproc)
            for k in range(max(repeat, 1))]
    return min(((p, replay_rank0(p, nproc)[0]) for p in runs), key=lambda x: x[1].measured_ms)


#: Rounds of configs traced one after the other, per round asked for.  Runs in turns see the
#: machine's spells alike; runs one after the other do not, and a round's ratio then moves with
#: them: the data-parallel rows' rounds read 10-15 % apart (sd) in the runs of 2026-11-24, so
#: their means need more rounds for the same precision.
SEQUENTIAL_ROUNDS = 2


#: Fresh processes of a multi-process real job (the pipeline, Tessel and Hydra rows) per round;
#: the round measures their mean.  Such a job keeps much of its speed for its whole life: in 24
#: consecutive 2-process 1F1B runs of 30 steps, a run's three blocks of 10 steps correlated
#: 0.56-0.69; single runs spread 13.5 % (sd, first 10 steps), 10.2 % over all 30, and the mean of
#: three consecutive runs 8.5 % (``python benchmarks/real_processes.py --runs 24 --schedule 1f1b
#: --steps 30``; docs/validation-log.md, "Session 63").  Process start-up dominates a run's cost,
#: so more processes, not more steps.
REAL_PROCESSES = 3


def _in_turns(configs, turns: bool = True) -> bool:
    return turns and all(c[3] == 1 for c in configs)


def rounds_label(repeat: int, configs, turns: bool = True) -> str:
    """How :func:`paired_rounds` will run ``configs``, for progress lines.

    >>> rounds_label(3, [("mlp", None, (), 1), ("mlp", None, (), 2)])
    'one after the other, x6'
    >>> rounds_label(3, [("mlp", None, (), 1), ("mlp", None, (), 1)])
    'iterations in turns, x3'
    """
    how = "iterations in turns" if _in_turns(configs, turns) else "one after the other"
    return f"{how}, x{rounds_count(repeat, configs, turns)}"


def paired_rounds(repeat: int, configs, iterations: int = 5, turns: bool = True, after_round=None) -> list:
    """``repeat`` rounds of :func:`trace_in_turns` over ``configs`` (``turns=False``: each
    round traces them one after the other, and there are :data:`SEQUENTIAL_ROUNDS` times as many).

    A config of several processes (``nproc > 1``) is not run in turns: its
    ranks lose more at every turn than the drift costs (the MLP's 2-rank
    data-parallel job measured 23.6-29.6 ms in turns, 20.9-24.4 ms after its
    baseline, three rounds each), so each round traces the configs one after
    the other instead.  Returns one list per round of (path, report,
    simulated schedule), one per config, in order: the runs of a round are
    comparable.  Traced one after the other, every second round goes in reverse order, so
    that a drift of the machine's speed over the rounds weighs on each config alike.
    ``after_round(runs)``, where given, is called with each round's list as soon as it is done.
    :func:`iter_paired_rounds` gives the rounds one at a time.
    """
    rounds = []
    for runs in iter_paired_rounds(repeat, configs, iterations, turns):
        rounds.append(runs)
        if after_round is not None:
            after_round(runs)
    return rounds


def rounds_count(repeat: int, configs, turns: bool = True) -> int:
    """How many rounds :func:`paired_rounds` runs.

    >>> rounds_count(3, [("mlp", None, (), 1), ("mlp", None, (), 2)])
    6
    """
    return max(repeat, 1) * (1 if _in_turns(configs, turns) else SEQUENTIAL_ROUNDS)


def iter_paired_rounds(repeat: int, configs, iterations: int = 5, turns: bool = True):
    """The rounds of :func:`paired_rounds`, each yielded as soon as it is done (a round's
    traces are taken when the generator is advanced to it)."""
    together = _in_turns(configs, turns)
    n_rounds = rounds_count(repeat, configs, turns)
    for k in range(n_rounds):
        cfgs = [(n, _round_path(p, k, n_rounds), a, np_) for n, p, a, np_ in configs]
        if together:
            paths = trace_in_turns(cfgs, iterations)
        else:
            order = range(len(cfgs)) if k % 2 == 0 else reversed(range(len(cfgs)))
            done = {i: trace_workload(*cfgs[i][:3], iterations=iterations, nproc=cfgs[i][3]) for i in order}
            paths = [done[i] for i in range(len(cfgs))]
        yield [(p, *replay_rank0(p, c[3])) for p, c in zip(paths, cfgs)]


#: An op (name and phase) is untouched by a prediction when its predicted time per iteration is
#: within this fraction of its baseline time (:func:`untouched_ratio`).
UNTOUCHED_TOLERANCE = 0.005


def untouched_ratio(base, predicted, real) -> float:
    """A control for a validation row: the real run's time of the ops the prediction left
    unchanged, over their time in the baseline (simulated schedules, :class:`SimResult`).

    Near 1 when the variant process ran those ops as fast as the baseline's did; away from 1
    when it did not -- the machine or the process (run-to-run variation, which bounds how
    close any prediction can come) or an effect the model misses (e.g. ranks slowing each
    other).  It explains a row's error; it does not correct it.  NaN if no op is untouched.
    """
    b, p, r = (op_times_ms(x) for x in (base, predicted, real))
    keys = [k for k, v in b.items() if v > 0 and k in r and abs(p.get(k, 0.0) - v) <= UNTOUCHED_TOLERANCE * v]
    total = sum(b[k] for k in keys)
    return sum(r[k] for k in keys) / total if total > 0 else float("nan")


def rounds_row(workload: str, label: str, rounds, spec: str, profile_path, variant: int = 1,
               predicted=None) -> tuple:
    """A row from :func:`paired_rounds`: the means over the rounds of the prediction of ``spec``
    from each round's baseline (its first run) and of run ``variant`` measured in the same round,
    and of :func:`untouched_ratio` where the rounds carry their schedules.
    ``predicted``: the rounds' ``predict`` results made already (else they are made now).
    Returns (row, the rounds' what-if reports).

    Means, which take every round on both sides, so that rounds in different states of the
    machine stay compared with their own (unlike each side's median: :func:`median_round`).
    Over the 40 validation runs 2026-12-05s to 12-06zd, rows of five rounds drawn at random from
    all runs' rounds of a row missed the 10 % goal in 1.1 % (tensor-parallel) and 1.5 % (HFTA
    mlp x2) of draws with means, 2.0 % and 4.3 % with the median round's error
    (``python benchmarks/runner_spells.py FILE...`` with and without ``--paired``).
    """
    outs = predicted or [predict(r[0][0], [spec], profile_path=profile_path) for r in rounds]
    reports = [o[0] for o in outs]
    ratios = [untouched_ratio(r[0][2], o[1], r[variant][2]) for r, o in zip(rounds, outs)
              if r[0][2] is not None and o[1] is not None]
    row = ValidationRow(workload, label, statistics.fmean(r.baseline_ms for r in reports),
                        statistics.fmean(r.predicted_ms for r in reports),
                        statistics.fmean(r[variant][1].measured_ms for r in rounds),
                        statistics.fmean(ratios) if ratios else float("nan"),
                        tuple(r[variant][1].measured_ms for r in rounds),
                        predicted_rounds_ms=tuple(r.predicted_ms for r in reports))
    return row, reports


def median_round(predictions, measured_ms) -> tuple:
    """``(predicted_ms, measured_ms)`` of a row made of its rounds' own errors: the measured
    rounds' median, and that times the median over the rounds of each prediction over its
    round's measurement (``len(predictions) / len(measured_ms)`` predictions to a round, in
    order), so that the row's error is the median round's.

    A median of each side takes a middle round on each, and once the rounds lie in different
    states of the machine, as rounds spread over a validation do
    (:mod:`daydream.validation.turns`), those are different rounds: a prediction from one state
    compared with a measurement in another.  (A mean over the same rounds of each side has no
    such problem, but carries a round of a slow spell into the row.)

    >>> median_round([12.0, 9.0, 30.0], [10.0, 10.0, 20.0])
    (12.0, 10.0)
    """
    each = len(predictions) // len(measured_ms)
    ratios = [p / m for j, m in enumerate(measured_ms) for p in predictions[j * each:(j + 1) * each]]
    measured = statistics.median(measured_ms)
    return measured * statistics.median(ratios), measured


def bracketed(traces: list) -> list:
    """Each run's baseline traces where runs and traces alternate: ``traces[k]`` before run
    ``k`` and ``traces[k + 1]`` after it (one more trace than runs).

    >>> bracketed(["t0", "t1", "t2"])
    [('t0', 't1'), ('t1', 't2')]
    """
    return list(zip(traces[:-1], traces[1:]))


def predict_now(path, specs, profile_path) -> dict:
    """``{spec: report}``: each of ``specs`` predicted from the trace at ``path`` now, its co-run
    rates (``corun=trace``) measured afresh (:func:`optimizations._corun.forget_measured`).

    Called right after a baseline trace is taken, so that the rate is measured in the
    machine's state of the minute the trace and its bracketed real runs saw: on this
    project's VM the rate follows where the host places the two cores, which changes every
    few seconds (0.61 to 1.00 for the pipeline validation's micro-batch sequence); measured
    once at the end of a validation, with the op re-runs a prediction also measures, it moved
    all the pipeline and Tessel rows together (by -2 to -7 % when predicted again minutes later).
    """
    from .optimizations._corun import forget_measured

    forget_measured()
    return {spec: predict(path, [spec], profile_path=profile_path)[0] for spec in specs}


def bracket_predictions(rounds, spec: str, profile_path, done: dict | None = None) -> list:
    """Per round of :func:`bracketed` traces: ``(baseline_ms, predicted_ms, first report)`` of
    ``spec``, each the mean over the round's traces (a trace shared by two rounds is
    predicted once; ``done`` holds predictions made already, ``{path: {spec: report}}`` as
    :func:`predict_now` made them).

    A 1-process baseline traced right before a 2-process run and one traced
    right after it see the machine in states seconds apart: on this project's
    2-core VM the same MLP traced around one real Hydra run read 4.98 and 6.36
    ms an iteration (6.05 and 4.74 around the next), while the real runs of six
    such rounds spread over 10.3-11.9 ms.  Over those rounds the error's
    standard deviation was 6.5 / 6.9 % (model- / shard-parallel) from the
    trace before, 4.1 / 2.4 % from the mean of both
    (``python benchmarks/bracket_noise.py``; docs/validation-log.md, "Session 37").
    """
    return _round_means(rounds, trace_predictions(rounds, spec, profile_path, done))


def _round_means(rounds, reports: dict) -> list:
    """Per round: ``(baseline_ms, predicted_ms, first report)``, the means over its traces' ``reports``."""
    out = []
    for paths in rounds:
        reps = [reports[p] for p in paths]
        out.append((statistics.fmean(r.baseline_ms for r in reps), statistics.fmean(r.predicted_ms for r in reps),
                    reps[0]))
    return out


def trace_predictions(rounds, spec: str, profile_path, done: dict | None = None) -> dict:
    """``{path: report}`` of ``spec`` from each distinct baseline trace of ``rounds`` (as
    :func:`bracket_predictions` takes them), in the order the rounds list them: ``done[path][spec]``
    where made already (``done`` is left as it was), each other predicted now, once."""
    done = done or {}
    out = {}
    for p in dict.fromkeys(p for pair in rounds for p in pair):
        known = done.get(p, {})
        out[p] = known[spec] if spec in known else predict(p, [spec], profile_path=profile_path)[0]
    return out


def median_row(workload: str, label: str | None, rounds, spec: str, measured_ms, profile_path,
               done: dict | None = None, per_trace: bool = False) -> ValidationRow:
    """The row of ``spec``: the median of the measured rounds ``measured_ms``, and the median over
    the rounds of each round's prediction over its own measurement (the prediction the mean
    over the round's baseline traces in ``rounds``, :func:`bracket_predictions`, with the
    predictions ``done`` already); the row's ``predicted_ms`` is that median ratio times the
    measured median, so that its error is the median round's.  Each side's rounds are listed in
    the row; ``label`` ``None``: the what-if as its report describes it.

    Medians, not means: on this project's Zen 1 VM a 2-process run's time moves by up to 40 %
    from one run to the next (Hydra shard-parallel with 2 models: rounds of 26.9 / 28.5 / 37.8
    ms in session 46's run b; in three runs of ``benchmarks/hydra_timeline.py`` in a row both
    processes' backward passes took 20-25 % longer in two than in the first, their forward
    passes the same), and a mean carries one such round into the row.  Of each round's ratio,
    not of each side (until session 84): :func:`median_round`.

    With ``per_trace`` every baseline trace's own prediction (:func:`trace_predictions`) is a
    ratio of its own over the round it brackets, not the round's mean of two: a 1-process trace
    lasts a fraction of a second and falls whole into a slow spell of the host now and then
    (x1.2-1.6), and a mean of two carries one such trace into its round, so that once three in
    ten of the traces are slow, most rounds are; a median over the traces themselves passes over
    them while they are fewer than half, as the median over the real rounds passes over the real
    runs' spells.  Over the Hydra rows of eighteen validation runs of sessions 76-80 (predicted
    again, ``corun=off``; docs/validation-log.md, "Session 80") the rows' standard deviation over
    the runs fell from 4.4-7.0 to 3.3-4.2 points and their misses from 7 to 1 (the median over
    the traces' predictions and over the real rounds, each side's).  ``predicted_rounds_ms``
    keeps the rounds' means, ``predicted_traces_ms`` the traces' own predictions.
    """
    reports = trace_predictions(rounds, spec, profile_path, done)
    got = _round_means(rounds, reports)
    if per_trace:
        predictions = [reports[p].predicted_ms for paths in rounds for p in dict.fromkeys(paths)]
        baselines = [r.baseline_ms for r in reports.values()]
    else:
        predictions, baselines = [p for _, p, _ in got], [b for b, _, _ in got]
    return ValidationRow(workload, got[0][2].optimizations[0] if label is None else label,
                         statistics.median(baselines), *median_round(predictions, measured_ms),
                         measured_rounds_ms=tuple(measured_ms), predicted_rounds_ms=tuple(p for _, p, _ in got),
                         predicted_traces_ms=tuple(r.predicted_ms for r in reports.values()) if per_trace else ())


def run_validation(workloads, opts, out_dir: Path, iterations: int = 5, profile_path=None, progress=print,
                   repeat: int = 1):
    """Run the matrix; returns the rows (failed cases are reported and skipped).

    Each case traces its baseline and its real variant in turns
    (:func:`paired_rounds`), ``repeat`` rounds; a row's times are the means
    over the rounds of the prediction from each round's baseline and of the
    variant measured in the same round.
    """
    tdir = out_dir / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    profile_path = ensure_profile(profile_path, progress)
    rows = []
    for w in workloads:
        for key in opts:
            case = CASES[key]
            t0 = time.time()
            configs = [(w, tdir / f"{w}.{key}.base.json.gz", case.baseline, 1),
                       (w, tdir / f"{w}.{key}.json.gz", case.variant, case.nproc)]
            try:
                variant = " ".join([*case.variant, *([f"on {case.nproc} processes"] if case.nproc > 1 else [])])
                progress(f"{w}: {key}: tracing baseline {' '.join(case.baseline) or '(defaults)'} and the real "
                         f"variant {variant or '(defaults)'}, {rounds_label(repeat, configs)}")
                with CoreLinkLog() as log:
                    rounds = paired_rounds(repeat, configs, iterations)
                row, _ = rounds_row(w, case.opt, rounds, case.opt, profile_path)
                row = with_placement([row], log)[0]
            except DaydreamError as exc:
                progress(f"{w}: {key}: skipped ({exc})")
                continue
            rows.append(row)
            control = "" if row.untouched_ratio != row.untouched_ratio else (
                f"; ops the prediction left alone ran x{row.untouched_ratio:.2f} their baseline time in the real run")
            progress(f"{w}: {key}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                     f"error {row.error_pct:.1f}%{control}{placement_note(row)} ({time.time() - t0:.0f} s)")
    return rows


def public_dataloader_rows(shared: Path, profile_path=None):
    """ResNet-50 on V100: predict num_workers=4 from each num_workers=0 trace."""
    k = shared / "kineto"
    before = [k / "worker0.1623143089861.pt.trace.json.gz", k / "worker0.1623143566756.pt.trace.json.gz"]
    after = [k / "worker0.1623212756351.pt.trace.json.gz", k / "worker0.1623213129365.pt.trace.json.gz"]
    if not all(p.exists() for p in before + after):
        return []
    measured = statistics.fmean(replay(p)[0].measured_ms for p in after)
    rows = []
    for p in before:
        rep, _ = predict(p, ["dataloader:workers=4"], profile_path=profile_path)
        rows.append(ValidationRow(f"resnet50-v100 ({p.name.split('.')[1]})", "dataloader:workers=4",
                                  rep.baseline_ms, rep.predicted_ms, measured))
    return rows


def write_results(rows, out_dir: Path, force: bool = True) -> Path:
    """Write ``out_dir/results.csv`` atomically.

    Its first line is a comment, ``# daydream: {...}``, with the command and
    versions that made it (:func:`daydream.fileio.provenance`); readers skip
    lines starting with ``#`` (``pandas.read_csv(..., comment="#")``).
    """
    import io
    import json

    from .fileio import atomic_write_bytes, check_writable, provenance

    path = out_dir / "results.csv"
    check_writable(path, force)
    f = io.StringIO(newline="")
    f.write("# daydream: " + json.dumps(provenance("validate"), separators=(",", ":")) + "\n")
    w = csv.writer(f)
    w.writerow(["workload", "optimization", "baseline_ms", "predicted_ms", "measured_ms", "error_pct",
                "untouched_ratio", "measured_spread_pct", "measured_rounds_ms", "core_to_core_min_ns",
                "core_to_core_max_ns", "core_to_core_ns", "predicted_rounds_ms", "predicted_traces_ms"])
    blank = lambda x, fmt: "" if x != x else format(x, fmt)   # noqa: E731 - NaN: not measured
    for r in rows:
        w.writerow([r.workload, r.optimization, f"{r.baseline_ms:.4f}", f"{r.predicted_ms:.4f}",
                    f"{r.measured_ms:.4f}", f"{r.error_pct:.3f}", blank(r.untouched_ratio, ".4f"),
                    blank(r.measured_spread_pct, ".2f"), " ".join(f"{x:.4f}" for x in r.measured_rounds_ms),
                    *(blank(x, ".0f") for x in r.core_to_core_range_ns),
                    " ".join(f"{x:.0f}" for x in r.core_to_core_ns),
                    " ".join(f"{x:.4f}" for x in r.predicted_rounds_ms),
                    " ".join(f"{x:.4f}" for x in r.predicted_traces_ms)])
    atomic_write_bytes(path, f.getvalue().encode())
    return path
