"""``daydream validate``: predictions checked against the optimization really applied.

For each bundled workload and each optimization that can run on this
machine: trace the baseline, predict with ``whatif``, trace the variant that
really applies the optimization (workload flags), and compare mean iteration
times measured the same way (ProfilerStep ranges of both traces).  The
public ResNet-50 DataLoader pair (``num_workers=0`` -> ``4``) is checked too.
"""
from __future__ import annotations

import csv
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .analysis import replay
from .errors import DaydreamError
from .whatif import predict

__all__ = ["CASES", "RUNNERS", "runner", "ValidationRow", "ensure_profile", "THREADS", "fastest_run", "fastest_pair", "trace_workload", "run_validation", "write_results", "public_dataloader_rows"]


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
#: ``fn(out_dir: Path, profile_path: str, progress, repeat: int)`` and returns a
#: list of :class:`ValidationRow`.  Modules that are absent are skipped.
RUNNERS = {
    "pipeline": "daydream.validation.pipeline:validate_rows",
    "tensor-parallel": "daydream.validation.tensor_parallel:validate_rows",
    "hfta": "daydream.validation.hfta:validate_rows",
    "hydra": "daydream.validation.hydra:validate_rows",
    "tessel": "daydream.validation.tessel:validate_rows",
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
WORKLOAD_ARGS = {
    "mlp": ("--hidden", "512", "--batch-size", "64", "--threads", str(THREADS)),
    "cnn": ("--batch-size", "16", "--threads", str(THREADS)),
    "transformer": ("--batch-size", "8", "--threads", str(THREADS)),
}


def ensure_profile(profile_path=None, progress=print) -> str:
    """Path of a CPU profile calibrated at :data:`THREADS` threads (measured now if missing)."""
    from .calibrate import calibrate
    from .device import default_profile_path, save_profile

    path = profile_path or default_profile_path("cpu", THREADS)
    if not os.path.exists(path):
        progress(f"calibrating this machine at {THREADS} thread(s) (once, about 30 s) ...")
        save_profile(calibrate("cpu", threads=THREADS, progress=lambda m: progress(f"calibrating: {m}")), path)
    return path


@dataclass(frozen=True)
class ValidationRow:
    workload: str
    optimization: str
    baseline_ms: float
    predicted_ms: float
    measured_ms: float

    @property
    def error_pct(self) -> float:
        return abs(self.predicted_ms - self.measured_ms) / self.measured_ms * 100.0


def trace_workload(name: str, path: Path, args=(), warmup: int = 2, iterations: int = 5, nproc: int = 1) -> Path:
    """Trace a bundled workload with ``daydream trace``; returns the (rank 0) trace path."""
    cmd = [sys.executable, "-m", "daydream", "trace", "-o", str(path), "--force", "--warmup", str(warmup),
           "--iterations", str(iterations)]
    if nproc > 1:
        cmd += ["--nproc", str(nproc)]
    cmd += ["--", sys.executable, "-m", f"daydream.workloads.{name}", "--steps", str(warmup + iterations + 2),
            "--quiet", *WORKLOAD_ARGS.get(name, ()), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out = path if nproc == 1 else _rank0(path)
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise DaydreamError(f"tracing {name} {' '.join(args)} failed: {tail}")
    return out


def _rank0(path: Path) -> Path:
    name = path.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return path.with_name(name[: -len(suffix)] + ".rank0" + suffix)
    return path


def fastest_run(repeat: int, name: str, path: Path, args=(), iterations: int = 5, nproc: int = 1):
    """Trace ``repeat`` times; keep the run with the lowest mean iteration time.

    Interference from other work on the machine (a VM here: iteration times of
    identical runs vary by up to 2x) only ever adds time, so the fastest run is
    the least disturbed.  Returns (path, report).
    """
    return fastest_pair(repeat, [(name, path, args, nproc)], iterations)[0]


def fastest_pair(repeat: int, configs, iterations: int = 5) -> list:
    """Trace each of ``configs`` (``(workload, path, args, nproc)``) ``repeat`` times, in turns.

    Baseline and variant alternate (A B A B ...) so that load which drifts over
    minutes hits both alike; each keeps its fastest run.  Returns one
    (path, report) per config.
    """
    runs = [[] for _ in configs]
    for k in range(max(repeat, 1)):
        for i, (name, path, args, nproc) in enumerate(configs):
            p = path.with_name(path.name.replace(".json", f".r{k}.json")) if repeat > 1 else path
            p = trace_workload(name, p, args, iterations=iterations, nproc=nproc)
            runs[i].append((p, replay(p)[0]))
    return [min(r, key=lambda x: x[1].measured_ms) for r in runs]


def run_validation(workloads, opts, out_dir: Path, iterations: int = 5, profile_path=None, progress=print,
                   repeat: int = 1):
    """Run the matrix; returns the rows (failed cases are reported and skipped).

    Each case traces its baseline and its real variant in turns (:func:`fastest_pair`).
    """
    tdir = out_dir / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    profile_path = ensure_profile(profile_path, progress)
    rows = []
    for w in workloads:
        for key in opts:
            case = CASES[key]
            t0 = time.time()
            try:
                progress(f"{w}: {key}: tracing baseline {' '.join(case.baseline) or '(defaults)'} and the real "
                         f"variant {' '.join(case.variant) or ''}{f' on {case.nproc} processes' if case.nproc > 1 else ''}"
                         f", in turns x{max(repeat, 1)}")
                (base, _), (_, measured) = fastest_pair(
                    repeat, [(w, tdir / f"{w}.{key}.base.json.gz", case.baseline, 1),
                             (w, tdir / f"{w}.{key}.json.gz", case.variant, case.nproc)], iterations)
                report, _ = predict(base, [case.opt], profile_path=profile_path)
            except DaydreamError as exc:
                progress(f"{w}: {key}: skipped ({exc})")
                continue
            row = ValidationRow(w, case.opt, report.baseline_ms, report.predicted_ms, measured.measured_ms)
            rows.append(row)
            progress(f"{w}: {key}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                     f"error {row.error_pct:.1f}% ({time.time() - t0:.0f} s)")
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
    w.writerow(["workload", "optimization", "baseline_ms", "predicted_ms", "measured_ms", "error_pct"])
    for r in rows:
        w.writerow([r.workload, r.optimization, f"{r.baseline_ms:.4f}", f"{r.predicted_ms:.4f}",
                    f"{r.measured_ms:.4f}", f"{r.error_pct:.3f}"])
    atomic_write_bytes(path, f.getvalue().encode())
    return path
