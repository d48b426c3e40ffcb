"""Co-run rates of several kinds of work, side by side: what ``corun=trace`` measures and what it stands for.

``corun=trace`` (``optimizations._corun.corun_rate``) re-runs a trace's compute ops (those with FLOPs) on one
core beside a twin replaying them on the other (:func:`daydream.opcorun.sequence_corun`).  Per
round, on one core with the twin on the other, each the median over
:data:`daydream.opcorun.CORUN_ROUNDS` of alone / beside (:func:`daydream.opcorun.corun_rounds`):

* ``all|all``: the trace's sequence beside itself (what ``corun=trace`` measures);
* ``B|F``, ``F|B``, ``B|B``, ``F|F``: its backward ops (``aten::mm``) or forward ops
  (``aten::addmm``) beside a twin replaying the one or the other;
* ``step``: whole training steps of the bundled MLP at the validation sizes (forward, loss,
  backward, momentum SGD; Python and autograd included) beside a twin doing the same;
* ``step x4``: the same, each process stepping 4 copies in turn;
* ``phases``: what ``hydra``'s ``corun=trace`` measures since session 68
  (:func:`optimizations._corun.corun_rates`): the iteration's compute- and memory-bound ops
  re-run beside their twin, per phase (forward / backward / optimizer) and over the pass;
* ``step phases``: ``step``'s rounds timed per phase (forward and loss, backward, optimizer step)
  and over the step.

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


def _sequences(trace, profile) -> tuple:
    """``(compute ops, (all ops, their phases))``: the signatures ``corun=trace`` re-runs for
    ``trace`` (:func:`optimizations._corun.corun_rate`) and what ``hydra``'s re-runs, per phase
    (:func:`optimizations._corun.phase_sequence`)."""
    from daydream.optimizations import WhatIfContext
    from daydream.optimizations._corun import phase_sequence
    from daydream.optimizations.batch_size import sequence_at
    from daydream.whatif import device_for, trace_and_graph

    tr, g = trace_and_graph(trace, None)
    ctx = WhatIfContext(graph=g, trace=tr, device=device_for(tr, profile_path=profile))
    return sequence_at(ctx, 1.0), phase_sequence(ctx)


def _step_fn(copies: int, phases: bool = False):
    """One training step of the next of ``copies`` bundled MLPs (the validation sizes) per call;
    with ``phases`` it returns the ns of its forward and loss, backward, optimizer step and all."""
    import numpy as np
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
        t0 = time.perf_counter_ns()
        opts[k].zero_grad(set_to_none=True)
        loss = F.cross_entropy(models[k](x), y)
        t1 = time.perf_counter_ns()
        loss.backward()
        t2 = time.perf_counter_ns()
        opts[k].step()
        t3 = time.perf_counter_ns()
        return np.array([t1 - t0, t2 - t1, t3 - t2, t3 - t0], np.float64) if phases else None
    return step


def _twin(kind: str):
    """The other process, pinned to core 0, once it is ready: a replay of a sequence
    (``kind`` a JSON list) or training steps (``kind`` = ``"step:N"``)."""
    from daydream.heapmode import STEADY_MALLOC

    env = {**os.environ, **STEADY_MALLOC, "DAYDREAM_TWIN_THREADS": "1"}
    if kind.startswith("step:"):
        cmd = [sys.executable, os.path.abspath(__file__), "--twin-steps", kind[5:]]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    else:
        cmd = [sys.executable, "-c", "from daydream.opcorun import _twin_main; _twin_main()"]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, env=env)
        p.stdin.write(kind + "\n")
        p.stdin.flush()
    os.sched_setaffinity(p.pid, {0})
    if p.stdout.readline().strip() != "ready":
        raise SystemExit("corun_kinds: the twin did not start")
    return p


def _rate(one, twin_kind: str):
    """Median over rounds of alone / beside of ``one()`` (returns ns, or an array of them: then one
    median per element) with a twin of ``twin_kind``."""
    from daydream.opcorun import CORUN_SIDE_S, corun_ratios, pooled_rate

    os.sched_setaffinity(0, {1})
    first = one()                  # ns, or per phase with the whole step last
    passes = math.ceil(CORUN_SIDE_S * 1e9 / max(float(first[-1] if getattr(first, "shape", ()) else first), 1))
    twin = _twin(twin_kind)
    try:
        def side():
            return sum(one() for _ in range(passes))
        ratios = corun_ratios(twin.pid, side, side, warm=one)
        if getattr(ratios[0], "shape", ()):
            return [pooled_rate([float(r[i]) for r in ratios]) for i in range(len(ratios[0]))]
        return pooled_rate([float(r) for r in ratios])
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
    seq, (every, phases) = _sequences(args.trace, args.profile)
    from daydream.model import Phase
    from daydream.opcorun import sequence_corun

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
            by_phase = sequence_corun(every, 1, labels=phases) or {}
            got.update({f"phases {'all' if p is None else Phase(p).label}": v for p, v in by_phase.items()})
            fwd_, bwd_, opt_, all_ = _rate(_step_fn(1, phases=True), "step:1")
            got.update({"step phases forward": fwd_, "backward": bwd_, "optimizer": opt_, "all": all_})
        print(f"round {r}: " + "  ".join(f"{k} {v:.3f}" for k, v in got.items()), flush=True)


if __name__ == "__main__":
    main()
