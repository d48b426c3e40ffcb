"""Co-run rates of several kinds of work, side by side: what ``corun=trace`` measures and what it stands for.

``corun=trace`` (``optimizations._corun``) re-runs a trace's compute ops (those with FLOPs) on one
core beside a twin replaying them on the other (:func:`daydream.opseq.sequence_corun`).  Per
round, on one core with the twin on the other, each the median over
:data:`daydream.opseq.CORUN_ROUNDS` of alone / beside (:func:`daydream.opseq.corun_rounds`):

* ``all|all``: the trace's sequence beside itself (what ``corun=trace`` measures);
* ``B|F``, ``F|B``, ``B|B``, ``F|F``: its backward ops (``aten::mm``) or forward ops
  (``aten::addmm``) beside a twin replaying the one or the other;
* ``step``: whole training steps of the bundled MLP at the validation sizes (forward, loss,
  backward, momentum SGD; Python and autograd included) beside a twin doing the same;
* ``step x4``: the same, each process stepping 4 copies in turn.

Usage (a validation's Hydra baseline trace)::

    python benchmarks/corun_kinds.py DIR/traces/hydra.mlp.base.r0.json.gz --profile DIR/device-cpu-1t.json --rounds 4
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

__all__ = ["main"]


def _sequence(trace, profile) -> list:
    """The signatures ``corun=trace`` re-runs for ``trace`` (its co-run measurement keys)."""
    from pathlib import Path

    from daydream.optimizations import _corun
    from daydream.validate import predict_now

    predict_now(Path(trace), ["hydra:models=2,devices=2"], profile)
    (seq, _threads), _rate = next(iter(_corun._MEASURED.items()))
    return list(seq)


def _step_fn(copies: int):
    """One training step of the next of ``copies`` bundled MLPs (the validation sizes) per call."""
    import torch
    import torch.nn.functional as F

    from daydream.workloads.mlp import MLP

    torch.manual_seed(0)
    models = [MLP(512, 512, 4, 10) for _ in range(copies)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in models]
    x, y, turn = torch.randn(64, 512), torch.randint(0, 10, (64,)), [0]

    def step():
        k = turn[0] % copies
        turn[0] += 1
        opts[k].zero_grad(set_to_none=True)
        F.cross_entropy(models[k](x), y).backward()
        opts[k].step()
    return step


def _twin(kind: str):
    """The other process, pinned to core 0, once it is ready: a replay of a sequence
    (``kind`` a JSON list) or training steps (``kind`` = ``"step:N"``)."""
    from daydream.opseq import STEADY_MALLOC

    env = {**os.environ, **STEADY_MALLOC, "DAYDREAM_TWIN_THREADS": "1"}
    if kind.startswith("step:"):
        cmd = [sys.executable, os.path.abspath(__file__), "--twin-steps", kind[5:]]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    else:
        cmd = [sys.executable, "-c", "from daydream.opseq import _twin_main; _twin_main()"]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, env=env)
        p.stdin.write(kind + "\n")
        p.stdin.flush()
    os.sched_setaffinity(p.pid, {0})
    if p.stdout.readline().strip() != "ready":
        raise SystemExit("corun_kinds: the twin did not start")
    return p


def _rate(one, twin_kind: str) -> float:
    """Median over rounds of alone / beside of ``one()`` (returns ns) with a twin of ``twin_kind``."""
    from daydream.opseq import CORUN_SIDE_S, corun_rounds

    os.sched_setaffinity(0, {1})
    passes = math.ceil(CORUN_SIDE_S * 1e9 / max(one(), 1))
    twin = _twin(twin_kind)
    try:
        def side():
            return sum(one() for _ in range(passes))

        def beside():
            one()                  # the twin back in its loop
            return side()
        return corun_rounds(twin.pid, side, beside)
    finally:
        os.sched_setaffinity(0, {0, 1})
        twin.kill()
        twin.wait()


def _timed(fn):
    def one():
        t0 = time.perf_counter_ns()
        fn()
        return time.perf_counter_ns() - t0
    return one


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    import torch

    torch.set_num_threads(1)
    if argv[:1] == ["--twin-steps"]:
        step = _step_fn(int(argv[1]))
        step()
        print("ready", flush=True)
        while True:
            step()
    from daydream.heapmode import steady_heap
    from daydream.opseq import _pass_ns, _sequence_calls

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", help="a CPU trace with shapes of the bundled MLP (a validation's Hydra baseline)")
    p.add_argument("--profile", required=True, help="device profile (a validation's DIR/device-cpu-1t.json)")
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args(argv)
    seq = _sequence(args.trace, args.profile)
    fwd = [s for s in seq if json.loads(s)[0] == "aten::addmm"]
    bwd = [s for s in seq if s not in fwd]
    print(f"{len(fwd)} forward and {len(bwd)} backward ops re-run")
    replays = {"all|all": (seq, seq), "B|F": (bwd, fwd), "F|B": (fwd, bwd), "B|B": (bwd, bwd), "F|F": (fwd, fwd)}
    for r in range(args.rounds):
        with steady_heap():
            got = {name: _rate(lambda c=_sequence_calls(mine): _pass_ns(c), json.dumps(twin))
                   for name, (mine, twin) in replays.items()}
            got["step"] = _rate(_timed(_step_fn(1)), "step:1")
            got["step x4"] = _rate(_timed(_step_fn(4)), "step:4")
        print(f"round {r}: " + "  ".join(f"{k} {v:.3f}" for k, v in got.items()), flush=True)


if __name__ == "__main__":
    main()
