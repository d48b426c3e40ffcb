"""What of a 2-process gloo job slows a shard's work?  Hydra's last shard, timed in modes taken in turns.

Two pinned gloo processes, one intra-op thread each, validate's malloc settings.  Rank 1 holds
the validation MLP's last shard (the layers after ``--cut``, the head, the loss) and runs its
forward and backward (then its SGD step, untimed) once per iteration, the mode cycling:

* ``plain``: the input made in place, nothing sent: the work alone in a gloo process (rank 0 waits
  in a receive for a 4-byte message sent after the step);
* ``landed``: the input received from rank 0 into a receive posted ahead, as the Hydra
  runtime's activations arrive;
* ``isend``: the input's gradient posted to rank 0 with ``isend`` inside the backward's time, as
  the runtime's backward task does;
* ``runtime``: both.

Prints per mode the median forward and backward (ms).  A 1-process reference is
``benchmarks/shard_backward.py`` (the same shard split in one process, no process group).

    python benchmarks/gloo_shard_work.py --iterations 400
"""
from __future__ import annotations

import argparse
import statistics
import time

from _bench import with_steady_malloc  # noqa: E402

__all__ = ["main", "MODES"]

MODES = ("plain", "landed", "isend", "runtime")


def _worker(rank, port, args, q):
    from daydream.calibrate_gloo import pinned_gloo_rank

    torch, dist = pinned_gloo_rank(rank, port)
    import torch.nn.functional as F
    from torch import nn

    from daydream.workloads.hydra import units_of
    from daydream.workloads.mlp import MLP

    torch.manual_seed(0)
    units = units_of(MLP(512, args.hidden, 4, 10))
    shard = nn.Sequential(*units[args.cut:])
    opt = torch.optim.SGD(shard.parameters(), lr=1e-3, momentum=0.9)
    shape = (args.batch_size, args.hidden)
    act, tiny, y = torch.randn(shape), torch.zeros(1), torch.randint(0, 10, (args.batch_size,))
    got = {m: ([], []) for m in MODES}
    for it in range(args.iterations):
        mode = MODES[it % len(MODES)]
        lands, sends = mode in ("landed", "runtime"), mode in ("isend", "runtime")
        if rank == 0:
            if lands:
                dist.send(act, 1)
            dist.recv(torch.empty(shape) if sends else tiny, 1)
            continue
        req = dist.irecv(act, 0) if lands else None
        if req is not None:
            req.wait()
        x = (act if lands else torch.randn(shape)).requires_grad_()
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter_ns()
        loss = F.cross_entropy(shard(x), y)
        t1 = time.perf_counter_ns()
        loss.backward()
        sent = dist.isend(x.grad, 0) if sends else None
        t2 = time.perf_counter_ns()
        opt.step()
        if sent is None:
            dist.send(tiny, 0)
        else:
            sent.wait()
        x.requires_grad_(False)
        got[mode][0].append(t1 - t0)
        got[mode][1].append(t2 - t1)
    if rank == 1:
        skip = args.iterations // len(MODES) // 10
        q.put({m: (statistics.median(f[skip:]) / 1e6, statistics.median(b[skip:]) / 1e6) for m, (f, b) in got.items()})
    dist.destroy_process_group()


def _forked(args) -> dict:
    """Rank 1's result, the two processes forked from this one as the Hydra runtime's are."""
    import multiprocessing as mp

    from daydream.calibrate_procs import free_port

    ctx = mp.get_context("fork")
    q, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, args, q)) for r in range(2)]
    for p in procs:
        p.start()
    res = q.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--cut", type=int, default=4, help="layers (leaf modules) before the shard, as --shard0-layers")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--start", choices=("spawn", "fork"), default="spawn",
                    help="how the two processes start (the Hydra runtime forks them)")
    args = ap.parse_args(argv)
    with_steady_malloc()
    from daydream.calibrate_procs import first_result
    from daydream.cpuidle import polling_idle

    with polling_idle():
        if args.start == "spawn":
            res = first_result(_worker, 2, (args,), timeout_s=600)
        else:
            res = _forked(args)
    for m, (f, b) in res.items():
        print(f"{m:8s} forward + loss {f:.3f} ms, backward {b:.3f} ms")


if __name__ == "__main__":
    main()
