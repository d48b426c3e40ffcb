"""What a message landing on a busy, pinned receiver costs its compute, by how it is measured.

Two gloo processes, each pinned to a core of its own (as ``daydream calibrate`` runs them),
idle CPUs polling.  Prints ``daydream calibrate``'s own figure (``p2p_land``:
``calibrate_p2p._p2p_land_pts``, one message a try landing on forward and backward passes
of a stack of linear layers), then variants: four messages a try (the calibration before
session 35) or one, landing on matmuls in a Python loop (``mm``) or on the passes
(``passes``).  Each figure is the median, over pairs of tries (one quiet, the next with the
messages), of the difference of the receiver's compute time, per message, in us.

Usage::

    python benchmarks/landing_cost.py
"""
from __future__ import annotations

import statistics
import sys
import threading
import time

__all__ = ["main"]

#: Variants: (messages a try, compute).
VARIANTS = ((4, "mm"), (1, "mm"), (4, "passes"), (1, "passes"))


def _variant(torch, dist, rank, messages: int, compute: str) -> list:
    from daydream import calibrate_gloo as cg, calibrate_p2p as cp

    a, b = torch.randn(64, 512), torch.randn(512, 512)
    net = torch.nn.Sequential(*[torch.nn.Linear(cp.P2P_LAND_FEATURES, cp.P2P_LAND_FEATURES)
                                for _ in range(cp.P2P_LAND_LAYERS)])
    x = torch.randn(cp.P2P_LAND_ROWS, cp.P2P_LAND_FEATURES)

    def work(reps):
        for _ in range(reps):
            if compute == "mm":
                torch.mm(a, b)
            else:
                net(x).sum().backward()

    work(2)
    t0 = time.perf_counter()
    work(5)
    reps = torch.tensor([max(1, int(cp.P2P_LAND_WORK_S / ((time.perf_counter() - t0) / 5)))])
    dist.broadcast(reps, 1)
    out = []
    for nbytes in cp.P2P_LAND_SIZES:
        buf, got = torch.zeros(nbytes // 4), ([], [])
        for k in range(2 * cp.P2P_LAND_TRIES + 2):
            landing = k % 2
            dist.barrier()
            if rank == 0:
                if landing:
                    cg.spin(1e-3)
                    for w in [dist.isend(buf, 1, tag=m) for m in range(messages)]:
                        w.wait()
                continue
            waiters = [threading.Thread(target=dist.irecv(torch.empty_like(buf), 0, tag=m).wait)
                       for m in range(messages)] if landing else []
            for w in waiters:
                w.start()
            s = time.perf_counter_ns()
            work(int(reps))
            e = time.perf_counter_ns()
            for w in waiters:
                w.join()
            if k >= 2:
                got[landing].append(e - s)
        if rank == 1:
            out.append(max(statistics.median(l - q for q, l in zip(*got)), 0) / messages / 1e3)
    return out


def _worker(rank, port):
    from daydream import calibrate_gloo as cg, calibrate_p2p as cp

    torch, dist = cg.pinned_gloo_rank(rank, port)
    own = cp._p2p_land_pts(torch, dist, rank)
    sizes = " / ".join(f"{n // 1024}" for n in cp.P2P_LAND_SIZES)
    if rank == 0:
        print(f"per message of {sizes} KiB, us", flush=True)
        print("calibration (p2p_land):  " + " / ".join(f"{x / 1e3:.0f}" for _, x in own), flush=True)
    for messages, compute in VARIANTS:
        got = _variant(torch, dist, rank, messages, compute)
        if rank == 1:
            print(f"{messages} a try, on {compute:6s}:   " + " / ".join(f"{x:.0f}" for x in got), flush=True)
        dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    import subprocess

    if sys.argv[1:] == ["--child"]:
        import torch.multiprocessing as mp

        from daydream.calibrate_procs import free_port

        mp.start_processes(_worker, args=(free_port(),), nprocs=2, join=True, start_method="fork")
        return
    from daydream.cpuidle import polling_idle
    from daydream.validate import run_env

    with polling_idle():      # as daydream calibrate and validate run
        raise SystemExit(subprocess.run([sys.executable, __file__, "--child"], env=run_env()).returncode)


if __name__ == "__main__":
    main()
