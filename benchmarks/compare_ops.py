"""Time per op name and phase: a baseline trace, its prediction, and a trace of the real variant.

Daydream's diagnosis of a missed prediction: which ops the prediction gets wrong.  Per (op
name, phase), the mean time per iteration on CPU threads (an op split by nested calls counts
its own slices; ``daydream.analysis.op_times_ms``) in the baseline, the prediction from it and
the real run, and the ratios to the baseline; then per phase the op time and the span from its
first start to its last end.

Usage::

    python benchmarks/compare_ops.py BASE.json.gz REAL.json.gz hfta:models=2 [--top 25]
    python benchmarks/compare_ops.py BASE.json.gz REAL.rank0.json.gz data-parallel:workers=2 --by miss
"""
from __future__ import annotations

import argparse
from collections import Counter

from daydream.analysis import op_times_ms, trace_and_graph
from daydream.model import LaneKind
from daydream.sim import simulate
from daydream.whatif import predict

__all__ = ["phase_spans", "main"]


def phase_spans(res) -> dict:
    """phase -> mean ms per iteration from the first start to the last end of its CPU-thread tasks
    in the schedule ``res`` (ops and the Python gaps between them: where a phase's wall time goes;
    phases that interleave overlap)."""
    g = res.graph
    T = g.tasks
    first, last = {}, {}
    for t in range(g.n_tasks):
        it = int(T["iteration"][t])
        if it < 0 or g.lanes[T["lane"][t]].kind != LaneKind.CPU_THREAD:
            continue
        key = (int(T["phase"][t]), it)
        first[key] = min(first.get(key, res.start_ns[t]), res.start_ns[t])
        last[key] = max(last.get(key, res.end_ns[t]), res.end_ns[t])
    iterations = {k[1] for k in first}
    total = Counter()
    for (ph, it), t0 in first.items():
        total[ph] += int(last[(ph, it)] - t0)
    return {ph: v / max(len(iterations), 1) / 1e6 for ph, v in total.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("baseline")
    p.add_argument("real")
    p.add_argument("opt", nargs="+", help="optimizations, as daydream whatif --opt")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--by", choices=("time", "miss"), default="time",
                   help="order ops by their larger time (time) or by |real - predicted| (miss)")
    p.add_argument("--profile", help="device profile (default: the cached CPU profile)")
    a = p.parse_args(argv)
    _, pred = predict(a.baseline, a.opt, profile_path=a.profile)
    cols, iters = [op_times_ms(pred)], [pred.mean_iteration_ns()[1] / 1e6]
    spans = [phase_spans(pred)]
    for path in (a.baseline, a.real):
        _, g = trace_and_graph(path)
        res = simulate(g)
        cols.append(op_times_ms(res))
        spans.append(phase_spans(res))
        iters.append(res.mean_iteration_ns()[1] / 1e6)
    pr, base, real = cols
    order = {"time": lambda k: -max(pr.get(k, 0.0), real.get(k, 0.0)),
             "miss": lambda k: -abs(real.get(k, 0.0) - pr.get(k, 0.0))}[a.by]
    keys = sorted(set(pr) | set(real), key=order)
    print(f"{'op':45s} {'phase':>5s} {'base':>8s} {'pred':>8s} {'real':>8s} {'p/b':>6s} {'r/b':>6s}")
    for k in keys[:a.top]:
        b = base.get(k, 0.0)
        ratio = (lambda x: f"{x / b:6.2f}") if b else (lambda x: f"{'-':>6s}")
        print(f"{k[0][:45]:45s} {k[1]:5d} {b:8.3f} {pr.get(k, 0.0):8.3f} {real.get(k, 0.0):8.3f} "
              f"{ratio(pr.get(k, 0.0))} {ratio(real.get(k, 0.0))}")
    for ph in sorted({k[1] for k in keys}):
        b, p_, r = (sum(v for k, v in c.items() if k[1] == ph) for c in (base, pr, real))
        print(f"{'(all ops of phase)':45s} {ph:5d} {b:8.3f} {p_:8.3f} {r:8.3f}")
    for ph in sorted(set(spans[0]) | set(spans[1]) | set(spans[2])):
        p_, b, r = (sp.get(ph, 0.0) for sp in spans)
        print(f"{'(phase span: first start to last end)':45s} {ph:5d} {b:8.3f} {p_:8.3f} {r:8.3f}")
    print(f"{'(mean iteration, simulated)':45s} {'':5s} {iters[1]:8.3f} {iters[0]:8.3f} {iters[2]:8.3f}")


if __name__ == "__main__":
    main()
