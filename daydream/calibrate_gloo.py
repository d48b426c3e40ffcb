"""Two local processes for a calibration: a free port, spawning ranks and taking the first result,
joining a pinned 2-rank gloo group, and keeping a rank busy as training does (part of
``daydream calibrate``; the measurements are in :mod:`daydream.calibrate_procs`,
:mod:`daydream.calibrate_p2p` and :mod:`daydream.calibrate_handover`).
"""
from __future__ import annotations

import os
import socket
import time

from .errors import DaydreamError

__all__ = ["free_port", "first_result", "pinned_gloo_rank", "spin", "busy_matmuls"]


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now (a gloo rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_result(target, ranks: int, args=(), timeout_s: float = 120.0):
    """Spawn ``ranks`` processes ``target(rank, port, *args, q)`` (a free ``port`` for their
    rendezvous) and return the first object one of them puts on ``q``; all are joined.

    Raises
    ------
    DaydreamError
        If every process exits without a result, or none comes within ``timeout_s``.
    """
    import queue

    import torch.multiprocessing as mp

    port = free_port()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, port, *args, q)) for r in range(ranks)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            exited = not any(p.is_alive() for p in procs)     # read before the queue: a result put
            try:                                              # before exiting is there by then
                return q.get(timeout=0.5)
            except queue.Empty:
                if exited:
                    codes = ", ".join(str(p.exitcode) for p in procs)
                    raise DaydreamError(f"{_name(target)}: its {ranks} process(es) exited without a result "
                                        f"(exit codes {codes}; their errors are above)") from None
                if time.monotonic() > deadline:
                    raise DaydreamError(f"{_name(target)}: no result from its {ranks} process(es) within "
                                        f"{timeout_s:.0f} s") from None
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()


def _name(target) -> str:
    return f"calibration worker {getattr(target, '__name__', target)!s}"


def pinned_gloo_rank(rank: int, port: int):
    """Join a 2-rank gloo group as ``rank``, pinned to a core of its own where there are two (as
    the multi-process runs are with ``--pin-cores``), one intra-op thread; returns (torch, dist)."""
    import torch
    import torch.distributed as dist

    if len(os.sched_getaffinity(0)) >= 2:
        from .collect.runner import pin_rank

        pin_rank(rank, 2)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    return torch, dist


def busy_matmuls(torch):
    """``compute(seconds)``: keep this thread running torch matmuls (64 x 512 by 512 x 512) that long,
    as a rank between its posts computes."""
    a, b = torch.randn(64, 512), torch.randn(512, 512)
    return lambda seconds: spin(seconds, lambda: torch.mm(a, b))


def spin(seconds: float, work=None) -> None:
    """Keep this thread busy (not asleep) for ``seconds``: a sender that has been computing, in a
    Python loop or running ``work()`` (torch ops) again and again."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if work is not None:
            work()
