"""Where ``hfta``'s in-sequence re-run sits against training: one op, occurrence by occurrence.

Predicts ``hfta:models=N`` from a baseline trace (re-running its compute ops in
sequence, :func:`daydream.opseq.sequence_ratios`, whose rounds are read on the
way), and prints for each occurrence of ``--op`` in one iteration: its time in
the baseline trace and in the real fused job's trace (medians over their
iterations after the first; an op's own slices), the real ratio, the re-run's
ratio for that occurrence and for its signature (what the prediction takes),
and the re-run's own time of the traced (single-model) call.  A re-run whose
single-model side runs slower than training while its fused side does not
reads the ratio low.

Usage (a validation's traces and profile)::

    python benchmarks/hfta_rerun.py DIR/traces/hfta.cnn.n0.r0.json.gz DIR/traces/hfta.cnn.n4.r0.json.gz 4 \\
        --profile DIR/device-cpu-1t.json --op aten::convolution_backward

Reads :mod:`daydream.opseq`'s private ``_per_signature`` on the way: a benchmark, not part
of the product.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

__all__ = ["main", "occurrence_times_us", "FUSED_NAME"]

#: The name a traced op takes in the fused job, where it changes (``opbench.fused_signature``).
FUSED_NAME = {"aten::addmm": "aten::baddbmm", "aten::mm": "aten::bmm"}


def occurrence_times_us(path: str, op: str) -> list:
    """Per occurrence of ``op`` in an iteration (in traced order): the median over iterations
    after the first of its own slices' time (us)."""
    from daydream.analysis import trace_and_graph

    _, g = trace_and_graph(path)
    T, names = g.tasks, g.names.strings
    per, first = defaultdict(lambda: defaultdict(int)), {}
    for t in range(g.n_tasks):
        if T["name"][t] < 0 or names[T["name"][t]] != op or T["iteration"][t] < 1:
            continue
        it, ev = int(T["iteration"][t]), int(T["event"][t])
        per[it][ev] += int(T["dur_ns"][t])
        first[(it, ev)] = min(first.get((it, ev), 1 << 62), int(T["traced_start_ns"][t]))
    rows = [[per[i][e] for e in sorted(per[i], key=lambda e, i=i: first[(i, e)])] for i in sorted(per)]
    if not rows:
        raise SystemExit(f"hfta_rerun: no {op} in the iterations of {path}")
    return [statistics.median(r[k] for r in rows) / 1e3 for k in range(min(len(r) for r in rows))]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("baseline")
    ap.add_argument("real", help="a trace of the real N-fold fused job")
    ap.add_argument("models", type=int)
    ap.add_argument("--profile", help="device profile (default: the cached CPU profile)")
    ap.add_argument("--op", default="aten::convolution_backward")
    ap.add_argument("--real-op", help="the op's name in the fused job (default: --op; "
                    "aten::baddbmm for aten::addmm, aten::bmm for aten::mm)")
    a = ap.parse_args(argv)
    real_op = a.real_op or FUSED_NAME.get(a.op, a.op)

    import daydream.opseq as opseq
    from daydream.whatif import predict

    seen = {}
    per_signature = opseq._per_signature

    def spy(calls, got, by_time):
        seen["calls"], seen["got"] = calls, got
        seen["ratios"] = per_signature(calls, got, by_time)
        return seen["ratios"]

    opseq._per_signature = spy
    try:
        _, pred = predict(a.baseline, [f"hfta:models={a.models}"], profile_path=a.profile)
    finally:
        opseq._per_signature = per_signature
    if "calls" not in seen:
        raise SystemExit("hfta_rerun: the prediction re-ran no sequence (a trace without shapes?)")
    base, real = occurrence_times_us(a.baseline, a.op), occurrence_times_us(a.real, real_op)
    reruns = [(sig, rows) for (sig, _, _, _), rows in zip(seen["calls"], seen["got"]) if json.loads(sig)[0] == a.op]
    print(f"{'k':>2} {'base us':>9} {'real us':>9} {'real/base':>9} {'re-run':>7} {'its sig':>7} {'re-run 1 us':>11} {'re-run N us':>11}")
    for k, (b, r) in enumerate(zip(base, real)):
        sig, rows = reruns[k] if k < len(reruns) else (None, [])
        occ = statistics.median(y / x for x, y in rows) if rows else float("nan")
        one = statistics.median(x for x, _ in rows) / 1e3 if rows else float("nan")
        fused = statistics.median(y for _, y in rows) / 1e3 if rows else float("nan")
        print(f"{k:2d} {b:9.1f} {r:9.1f} {r / b:9.2f} {occ:7.2f} {seen['ratios'].get(sig, float('nan')):7.2f} "
              f"{one:11.1f} {fused:11.1f}")
    print(f"sum: base {sum(base) / 1e3:.2f} ms, real {sum(real) / 1e3:.2f} ms (x{sum(real) / sum(base):.2f}); "
          f"re-run of the traced calls {sum(statistics.median(x for x, _ in rows) for _, rows in reruns) / 1e6:.2f} "
          f"ms, of the fused {sum(statistics.median(y for _, y in rows) for _, rows in reruns) / 1e6:.2f} ms; "
          f"predicted iteration {pred.mean_iteration_ns()[1] / 1e6:.2f} ms")


if __name__ == "__main__":
    main()
