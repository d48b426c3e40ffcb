"""Validation of ``device`` on a CPU: a bundled workload traced at 1 intra-op thread,
predicted on this machine's 2-thread profile (``device:target=<profile>``), and run
at 2 threads for real, one run after the other in each round
(:func:`daydream.validate.paired_rounds` with ``turns=False``).  Meaningful only on a
machine with two otherwise idle cores.

Not in turns: a 2-thread process stalls at the start of every turn.  Its OpenMP
worker sleeps through the other process's turn and, woken, shares the main
thread's core for milliseconds: in session 14's run the transformer's first
parallel ops after a pause (``index_select``, ``add``, ``layer_norm``) took 2.7,
7.9 and 7.8 ms against 0.05 ms, and its mean iteration read 32.5 ms against
23.5-23.9 ms for the iterations that followed no pause.  Binding the threads to
cores (``OMP_PROC_BIND=true``, in turns) made it worse: the MLP's 2-thread runs
measured 11.75 ms against 7.80 ms predicted.  A training run never pauses so.

Each round's prediction is made as soon as the round is done, so that its op
re-runs (at 1 and at 2 threads) see the machine as the round's runs did: on this
project's VM how two threads share an op follows where the host places the two
vCPUs, which moves every minute or so (session 41: the MLP's real 2-thread runs,
with the cores 311-1100 ns apart, ran ``mm`` x0.75 of its 1-thread time; re-run
minutes later, 80-100 ns apart, x0.57, and the row read -18 %).

Both profiles are measured afresh, one right after the other, just before the
runs: where the prediction does not re-run an op at both thread counts it scales
by the ratio of the two profiles, and on this VM a profile measured hours apart
reads 20-30 % faster or slower (matmul 90 against 71
GFLOP/s, op overhead 1.6 against 2.8 us for the 1-thread profile at 04:03 and at
06:32 of one day), which a cached 2-thread profile carried into every row.
"""
from __future__ import annotations

from pathlib import Path

from daydream.errors import DaydreamError
from daydream.corelink import CoreLinkLog
from daydream.whatif import predict
from daydream.validate import paired_rounds, rounds_label, rounds_row, with_placement, placement_note

__all__ = ["validate_rows", "DEVICE_WORKLOADS"]

#: The ``device`` what-if's CPU check: a bundled workload traced at 1 intra-op
#: thread, predicted on this machine's 2-thread profile, run at 2 threads.
DEVICE_WORKLOADS = ("mlp", "transformer")


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1, iterations: int = 5,
                target_profile: str | None = None) -> list:
    """``device:target=<2-thread profile>`` from 1-thread traces, against real 2-thread runs.

    The 1- and 2-thread profiles are measured now, back to back, into
    ``out_dir`` (collectives left out); ``target_profile`` (a path) is used as the
    2-thread one instead, with ``profile_path`` as the 1-thread one.  Meaningful
    only on a machine with two otherwise idle cores.
    """
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    if target_profile:
        target = target_profile
    else:
        profile_path, target = (_fresh_profile(Path(out_dir), t, progress) for t in (1, 2))
    rows = []
    for w in DEVICE_WORKLOADS:
        try:
            configs = [(w, tdir / f"{w}.dev1t.json.gz", ("--threads", "1"), 1),
                       (w, tdir / f"{w}.dev2t.json.gz", ("--threads", "2"), 1)]
            progress(f"device: {w}: tracing at 1 and then at 2 threads, {rounds_label(repeat, configs, False)}")
            spec, predicted = f"device:target={target}", []
            with CoreLinkLog() as log:
                rounds = paired_rounds(repeat, configs, iterations, False, lambda runs: predicted.append(
                    predict(runs[0][0], [spec], profile_path=profile_path)))
            row, _ = rounds_row(f"{w} 1->2 threads", "device:target=cpu-2t", rounds, spec, profile_path,
                                predicted=predicted)
            row = with_placement([row], log)[0]
        except DaydreamError as exc:
            progress(f"device: {w}: skipped ({exc})")
            continue
        progress(f"device: {w}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                 f"error {row.error_pct:.1f}%{placement_note(row)}")
        rows.append(row)
    return rows


def _fresh_profile(out_dir: Path, threads: int, progress) -> str:
    """This machine calibrated now at ``threads`` threads, without collectives, saved in ``out_dir``."""
    from daydream.calibrate import calibrate
    from daydream.device import save_profile

    path = out_dir / f"device-cpu-{threads}t-nocomm.json"
    progress(f"device: calibrating this machine at {threads} thread(s) ...")
    save_profile(calibrate("cpu", threads=threads, collectives=False,
                           progress=lambda m: progress(f"calibrating: {m}")), str(path))
    return str(path)
