"""Validation of ``device`` on a CPU: a bundled workload traced at 1 intra-op thread,
predicted on this machine's 2-thread profile (``device:target=<profile>``), and run
at 2 threads for real, the two runs' iterations in turns
(:func:`daydream.validate.paired_rounds`; in its turn the 2-thread run has both
cores).  Meaningful only on a machine with two otherwise idle cores.
"""
from __future__ import annotations

from pathlib import Path

from daydream.errors import DaydreamError
from daydream.validate import paired_rounds, rounds_row

__all__ = ["validate_rows", "DEVICE_WORKLOADS"]

#: The ``device`` what-if's CPU check: a bundled workload traced at 1 intra-op
#: thread, predicted on this machine's 2-thread profile, run at 2 threads.
DEVICE_WORKLOADS = ("mlp", "transformer")


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1, iterations: int = 5,
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
            progress(f"device: {w}: tracing at 1 and at 2 threads, iterations in turns, x{max(repeat, 1)}")
            rounds = paired_rounds(repeat, [(w, tdir / f"{w}.dev1t.json.gz", ("--threads", "1"), 1),
                                            (w, tdir / f"{w}.dev2t.json.gz", ("--threads", "2"), 1)], iterations)
            row, _ = rounds_row(f"{w} 1->2 threads", "device:target=cpu-2t", rounds, f"device:target={target}",
                                profile_path)
        except DaydreamError as exc:
            progress(f"device: {w}: skipped ({exc})")
            continue
        progress(f"device: {w}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                 f"error {row.error_pct:.1f}%")
        rows.append(row)
    return rows
