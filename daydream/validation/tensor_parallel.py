"""Validation of ``tensor-parallel``: the bundled transformer split over 2 gloo ranks for real.

The baseline is the unsplit model traced on one process
(``python -m daydream.workloads.tensor_parallel``); the variant is the same
workload under ``daydream trace --nproc 2``, split with torch's
tensor-parallel API (``ColwiseParallel``/``RowwiseParallel`` on a CPU
``DeviceMesh``).  Both use one intra-op thread per process, so the two ranks
get a core each on a 2-core machine; both are measured the same way (mean of
the ProfilerStep iterations after the first, rank 0), the fastest of
``repeat`` runs kept (baseline and split runs alternate).  torch's TP API
overhead, part of the prediction, is re-measured at the start.
"""
from __future__ import annotations

from pathlib import Path

from daydream.analysis import replay
from daydream.errors import DaydreamError
from daydream.validate import THREADS, ValidationRow, fastest_run, trace_workload
from daydream.whatif import predict

__all__ = ["validate_rows", "device_rows", "WORKLOAD", "ARGS", "DEGREE", "DEVICE_WORKLOADS"]

WORKLOAD = "tensor_parallel"
#: Model and batch of the validation run (heads divisible by the degree).
HEADS = 8
ARGS = ("--batch-size", "8", "--d-model", "256", "--heads", str(HEADS), "--seq-len", "128", "--layers", "2",
        "--threads", str(THREADS))
DEGREE = 2


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1, iterations: int = 5) -> list:
    """Trace the unsplit baseline, predict ``tensor-parallel:degree=2``, run it for real, compare."""
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    spec = f"tensor-parallel:degree={DEGREE},backend=gloo,heads={HEADS}"
    _fresh_api_overhead()
    try:
        base, measured = _interleaved(repeat, tdir, iterations, progress)
        report, _ = predict(base[0], [spec], profile_path=profile_path)
    except DaydreamError as exc:
        progress(f"tensor-parallel: skipped ({exc})")
        return []
    measured = measured[1]
    row = ValidationRow("transformer (torch TP)", spec, report.baseline_ms, report.predicted_ms, measured.measured_ms)
    progress(f"tensor-parallel: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
             f"error {row.error_pct:.1f}%")
    return [row]


def _interleaved(repeat, tdir, iterations, progress):
    """Baseline and split runs alternated ``repeat`` times (load that drifts hits both alike);
    the fastest of each is kept.  Returns ((path, report) of the baseline, of the split run)."""
    base, split = [], []
    for k in range(max(repeat, 1)):
        progress(f"tensor-parallel: run {k + 1}/{max(repeat, 1)}: unsplit transformer (1 process)")
        p = trace_workload(WORKLOAD, tdir / f"tp.base.r{k}.json.gz", ARGS, iterations=iterations)
        base.append((p, replay(p)[0]))
        progress(f"tensor-parallel: run {k + 1}/{max(repeat, 1)}: split over {DEGREE} gloo ranks")
        p = trace_workload(WORKLOAD, tdir / f"tp.t{DEGREE}.r{k}.json.gz", ARGS, iterations=iterations, nproc=DEGREE)
        split.append((p, replay(p)[0]))
    fastest = lambda runs: min(runs, key=lambda r: r[1].measured_ms)  # noqa: E731
    return fastest(base), fastest(split)


def _fresh_api_overhead():
    """Re-measure torch's TP API overhead now (it is part of the prediction being validated)."""
    from daydream.device import default_profile_path

    path = Path(default_profile_path("cpu", THREADS)).with_name(f"tp-api-overhead-{THREADS}t.json")
    path.unlink(missing_ok=True)


# ----------------------------------------------------------------- device
#: The ``device`` what-if's CPU check: a bundled workload traced at 1 intra-op
#: thread, predicted on this machine's 2-thread profile, run at 2 threads.
DEVICE_WORKLOADS = ("mlp", "transformer")


def device_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1, iterations: int = 5,
                target_profile: str | None = None) -> list:
    """``device:target=<2-thread profile>`` from 1-thread traces, against real 2-thread runs.

    The 2-thread profile is ``daydream calibrate --threads 2``'s cache file
    (measured now if missing, or ``target_profile``).  Meaningful only on a
    machine with two otherwise idle cores.
    """
    from daydream.calibrate import calibrate
    from daydream.device import default_profile_path, save_profile

    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    target = target_profile or default_profile_path("cpu", 2)
    if not Path(target).exists():
        progress("device: calibrating this machine at 2 threads (once) ...")
        save_profile(calibrate("cpu", threads=2, progress=lambda m: progress(f"calibrating: {m}")), target)
    rows = []
    for w in DEVICE_WORKLOADS:
        try:
            progress(f"device: {w}: tracing at 1 thread")
            base, _ = fastest_run(repeat, w, tdir / f"{w}.dev1t.json.gz", ("--threads", "1"), iterations)
            report, _ = predict(base, [f"device:target={target}"], profile_path=profile_path)
            progress(f"device: {w}: tracing at 2 threads for real")
            _, measured = fastest_run(repeat, w, tdir / f"{w}.dev2t.json.gz", ("--threads", "2"), iterations)
        except DaydreamError as exc:
            progress(f"device: {w}: skipped ({exc})")
            continue
        row = ValidationRow(f"{w} 1->2 threads", "device:target=cpu-2t", report.baseline_ms, report.predicted_ms,
                            measured.measured_ms)
        progress(f"device: {w}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                 f"error {row.error_pct:.1f}%")
        rows.append(row)
    return rows
