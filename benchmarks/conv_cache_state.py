"""Convolutions re-run warm and cold, in NCHW and channels-last, beside a baseline trace and a real compiled run.

``fusion`` predicts a compiled CPU model's convolutions as ``traced + t(channels-last) - t(NCHW)``, both
re-run here warm (each call right after the last).  This prints, per distinct convolution of the
baseline (forward ``mkldnn_convolution`` and ``convolution_backward``), its traced time and that of
the real compiled run (each the op's own time over all its slices, mean over occurrences), and its
re-runs in NCHW and channels-last, warm and cold (the host's largest cache swept before each call),
so that each way of predicting can be compared with the real run (session 34: docs/whatif.md)::

    python benchmarks/conv_cache_state.py BASE.json.gz COMPILED.json.gz --profile device-cpu-1t.json
"""
from __future__ import annotations

import argparse
import collections
import json
import time

import numpy as np

__all__ = ["main"]

OPS = ("aten::mkldnn_convolution", "aten::convolution_backward")


def _timed_us(fn, sweep, cold: bool, calls: int = 30) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(calls):
        if cold:
            sweep.add_(1.0)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


def _per_signature(path, profile) -> dict:
    """(op, signature) -> mean own time (us) of the op over its occurrences after the first iteration."""
    from daydream.analysis import trace_and_graph
    from daydream.device import load_profile
    from daydream.optimizations import WhatIfContext
    from daydream.optimizations._layers import signatures_of

    trace, g = trace_and_graph(path)
    T = g.tasks
    ctx = WhatIfContext(graph=g, trace=trace, device=load_profile(profile))
    out = {}
    for name in OPS:
        tasks = np.flatnonzero((T["name"] == g.names.get(name)) & (T["iteration"] >= 1))
        own = collections.defaultdict(dict)
        for t, sig in signatures_of(ctx, tasks).items():
            key = (int(T["rank"][t]), int(T["event"][t]))
            m = (T["rank"] == key[0]) & (T["event"] == key[1])
            own[sig][key] = T["dur_ns"][m].sum() / 1e3
        out.update({(name, sig): float(np.mean(list(v.values()))) for sig, v in own.items()})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("compiled")
    ap.add_argument("--profile", required=True, help="the device profile the traces' validation used")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import torch

    from daydream.calibrate import host_cache_bytes
    from daydream.opbench import _bind, call_for

    torch.set_num_threads(args.threads)
    sweep = torch.zeros(host_cache_bytes() // 4)
    base, real = _per_signature(args.base, args.profile), _per_signature(args.compiled, args.profile)
    real_by_shape = {(op, json.dumps(json.loads(s)[1])): v for (op, s), v in real.items()}
    print(f"{'op':<20} {'input shapes':<44} {'traced':>7} {'real':>6} {'nchw warm':>10} {'cold':>6} {'cl warm':>8} {'cold':>6}")
    for (op, sig), traced in base.items():
        row = []
        for cl in (False, True):
            fn = _bind(*call_for(sig, None, cl))
            row += [_timed_us(fn, sweep, False), _timed_us(fn, sweep, True)]
        shapes = json.dumps(json.loads(sig)[1])
        print(f"{op[6:26]:<20} {json.dumps(json.loads(sig)[1][:3])[:44]:<44} {traced:7.0f} "
              f"{real_by_shape.get((op, shapes), float('nan')):6.0f} " + " ".join(f"{x:{w}.0f}" for x, w in zip(row, (10, 6, 8, 6))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
