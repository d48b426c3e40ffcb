"""Per-action timeline of the real pipeline runtime (``daydream.workloads.pipeline``).

Runs the pipeline workload (2 processes, torch's pipelining API over gloo) with torch's
schedule helpers wrapped, so that each rank logs its forward and backward chunks
(``F<mb>`` / ``B<mb>``), each batch of point-to-point posts (``post:<what>``) and each wait
for them (``wait <what>``), on one monotonic clock, idle CPUs polling (as ``daydream validate`` runs).  Prints one step's actions of both
ranks in time order, then per rank the median chunk times over the measured steps and the
hand-over times: from the later of a send's post ending and the peer starting to wait for it,
to the end of that wait (what the receiver waited beyond its own lateness), apart for sends
whose receiver was already waiting and those it waited for later.

The wrapped helpers (``schedules._batch_p2p``, ``schedules._wait_batch_p2p``,
``stage._PipelineStageBase.forward_one_chunk`` / ``backward_one_chunk``) are private to torch
(2.13 here): a benchmark, not part of the product.

Usage (the validation's sizes)::

    python benchmarks/pipeline_timeline.py [--step 10] [--demote] -- --schedule gpipe --microbatches 4 \\
        --steps 14 --warmup 4 --threads 1 --pin-cores --hidden 1024 --batch-size 64 --layers 4 \\
        --in-features 512
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "report"]

_LOG, _DESC, _RANK = [], {}, [None]
_DIR_ENV, _DEMOTE_ENV = "DAYDREAM_PIPELINE_TIMELINE_DIR", "DAYDREAM_PIPELINE_TIMELINE_DEMOTE"


def _install() -> None:
    """Wrap torch's pipelining helpers to log into ``_LOG`` (in every process that imports this)."""
    import torch.distributed as dist
    from torch.distributed.pipelining import schedules
    from torch.distributed.pipelining import stage as stage_mod

    batch, wait = schedules._batch_p2p, schedules._wait_batch_p2p

    def logged_batch(ops, desc=None):
        if os.environ.get(_DEMOTE_ENV) and _RANK[0] is None:    # the first post: gloo's threads exist
            from p2p_start import _demote_gloo_threads

            _demote_gloo_threads()
        t0 = time.perf_counter_ns()
        works = batch(ops, desc)
        if ops:
            _LOG.append((f"post:{desc}", t0, time.perf_counter_ns()))
        _DESC.update((id(w), desc) for w in works)
        _RANK[0] = dist.get_rank()
        return works

    def logged_wait(works):
        t0 = time.perf_counter_ns()
        wait(works)
        if works:
            _LOG.append((f"wait {','.join(str(_DESC.get(id(w))) for w in works)}", t0, time.perf_counter_ns()))

    schedules._batch_p2p, schedules._wait_batch_p2p = logged_batch, logged_wait
    for name in ("forward_one_chunk", "backward_one_chunk"):
        orig = getattr(stage_mod._PipelineStageBase, name)

        def chunk(self, i, *args, _orig=orig, _tag=name[0].upper(), **kwargs):
            t0 = time.perf_counter_ns()
            out = _orig(self, i, *args, **kwargs)
            _LOG.append((f"{_tag}{i}", t0, time.perf_counter_ns()))
            return out

        setattr(stage_mod._PipelineStageBase, name, chunk)
    atexit.register(lambda: _LOG and Path(os.environ[_DIR_ENV], f"rank{_RANK[0] or 0}.json").write_text(json.dumps(_LOG)))


if os.environ.get(_DIR_ENV):      # the spawned ranks re-import this file as their main module
    _install()


def _steps(log) -> list:
    """The log cut into steps, each starting at its first ``F0`` (the receive before it on rank 1)."""
    starts = [max(i - 2, 0) if i >= 2 and log[i - 1][0].startswith("wait") else i
              for i, row in enumerate(log) if row[0] == "F0"]
    return [log[a:b] for a, b in zip(starts, starts[1:] + [len(log)])]


def report(logs: dict, step: int, warmup: int) -> None:
    """Print one step's actions of every rank, then per-rank medians and hand-over times."""
    steps = {r: _steps(log) for r, log in logs.items()}
    rows = sorted((a, b, r, what) for r, s in steps.items() for what, a, b in s[min(step, len(s) - 1)])
    t0 = rows[0][0]
    print(f"step {step}:")
    for a, b, r, what in rows:
        print(f"  rank {r} {(a - t0) / 1e6:8.3f} {(b - t0) / 1e6:8.3f} ms  {(b - a) / 1e3:8.1f} us  {what}")
    for r, s in sorted(steps.items()):
        kinds = {}
        for st in s[warmup:]:
            for what, a, b in st:
                kinds.setdefault(what, []).append((b - a) / 1e3)
        chunks = {k: v for k, v in kinds.items() if k[0] in "FB" and k[1:].isdigit()}
        print(f"rank {r}: median us per action over {len(s[warmup:])} steps: "
              + ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in sorted(chunks.items())))
    for src, dst in ((0, 1), (1, 0)) if len(steps) > 1 else ():
        got = {True: [], False: []}     # by whether the peer was already waiting when the send was posted
        for a_step, b_step in zip(steps[src][warmup:], steps[dst][warmup:]):
            sends = [b for what, _, b in a_step if what.startswith("post:") and "send" in what]
            waits = [(a, b) for what, a, b in b_step if what.startswith("wait") and "recv" in what]
            for s in sends:
                a, b = min(((a, b) for a, b in waits if b >= s), key=lambda w: w[1], default=(0, None))
                if b is not None:
                    got[a <= s].append((b - max(a, s)) / 1e3)
        for waiting, us in got.items():
            if us:
                print(f"rank {src} -> {dst}, peer {'already waiting' if waiting else 'waiting later'}: hand-over "
                      f"median {statistics.median(us):.0f} us, mean {statistics.fmean(us):.0f} us, over 1 ms "
                      f"{sum(x > 1000 for x in us)} of {len(us)}, largest {max(us):.0f} us")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, workload = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--step", type=int, default=10, help="the step whose actions are printed")
    p.add_argument("--demote", action="store_true", help="gloo's socket thread at nice 19 in each rank "
                   "(as benchmarks/p2p_start.py --demote)")
    args = p.parse_args(own)
    if args.demote:
        os.environ[_DEMOTE_ENV] = "1"
    warmup = int(workload[workload.index("--warmup") + 1]) if "--warmup" in workload else 3
    from daydream.cpuidle import polling_idle

    with tempfile.TemporaryDirectory() as tmp, polling_idle() as held:
        print(f"idle CPUs polling: {held} (as daydream validate runs)")
        os.environ[_DIR_ENV] = tmp
        _install()
        from daydream.workloads import pipeline

        pipeline.main(workload)
        logs = {int(f.stem.removeprefix("rank")): json.loads(f.read_text()) for f in Path(tmp).glob("rank*.json")}
    if not logs:
        raise SystemExit("pipeline_timeline: the ranks wrote no logs")
    report(logs, args.step, warmup)


if __name__ == "__main__":
    main()
