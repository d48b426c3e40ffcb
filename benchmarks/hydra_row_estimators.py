"""Hydra rows of past validation runs made again three ways from their traces: is a round's mean of
two traces, or the traces themselves, the better summary?

A Hydra validation (``daydream validate --opt hydra``, since session 76) traces the baseline before
each K's real runs of a round and once after the last (``traces/hydra.mlp.base.rR.json.gz``), so
round ``r`` of the K at index ``k`` (:data:`daydream.validation.hydra.MODELS`) lies between traces
``2 r + k`` and ``2 r + k + 1``.  This predicts every row's spec from every trace of each run
directory given (with ``corun=off``, so that nothing measured now enters; deterministic) and
prints, per run and row, the signed error (%) against the median of the row's real rounds of

* ``mean``: the median over the rounds of the mean of a round's two predictions (the rows until
  session 80, :func:`daydream.validate.bracket_predictions`),
* ``min``: the median over the rounds of the smaller of the two,
* ``traces``: the median over the traces' own predictions, each once (the rows since session 80,
  :func:`daydream.validate.median_row` ``per_trace``),

then per row over the runs each way's mean, standard deviation and misses (beyond 10 %).
Directories of other layouts (before session 76) are passed over.

Usage::

    python benchmarks/hydra_row_estimators.py /tmp/s7[6-9]/v? /tmp/s80/vb
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from hydra_specs import TRACES, hydra_rows, trace_before, with_options

__all__ = ["main", "row_errors", "WAYS"]

#: How a row sums up its rounds' two predictions (and the rounds' real times: their median).
WAYS = ("mean", "min", "traces")


def row_errors(pairs, real) -> tuple:
    """Signed errors (%) of the three :data:`WAYS` for a row from each round's predictions from
    the traces before and after its runs, ``pairs``, and the real rounds ``real``.

    >>> row_errors([(10.0, 10.0), (20.0, 10.0)], [10.0, 10.0])
    (25.0, 0.0, 0.0)
    """
    m = statistics.median(real)
    pct = lambda x: 100.0 * (x / m - 1.0)        # noqa: E731
    return (pct(statistics.median((a + b) / 2 for a, b in pairs)), pct(statistics.median(min(p) for p in pairs)),
            pct(statistics.median(x for p in pairs for x in p)))


def main(argv=None) -> None:
    from daydream.validation.hydra import MODELS
    from daydream.whatif import predict

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", help="validation output directories (results.csv, traces/, device-cpu-1t.json)")
    args = ap.parse_args(argv)
    table: dict = {}
    for d in map(Path, args.dirs):
        rows = hydra_rows(d / "results.csv", "hydra")
        n = min((len(r) for _, r in rows), default=0)
        traces = [d / "traces" / TRACES["hydra"].format(i) for i in range(n * len(MODELS) + 1)]
        extra = d / "traces" / TRACES["hydra"].format(len(traces))
        if not rows or not all(t.exists() for t in traces) or extra.exists():
            print(f"{d}: not a validation of one trace before each K (passed over)")
            continue
        for spec, real in rows:
            preds = [predict(str(t), [with_options(spec, "corun=off")], profile_path=str(d / "device-cpu-1t.json"))[0]
                     .predicted_ms for t in traces]
            pairs = [(preds[b], preds[b + 1]) for b in (trace_before(d, "hydra", spec, r, n) for r in range(n))]
            name = spec.split(",layers")[0]
            table.setdefault(name, []).append(row_errors(pairs, real))
            print(f"{d} {name}: " + " ".join(f"{w} {e:+.1f}" for w, e in zip(WAYS, table[name][-1])), flush=True)
    for name, runs in table.items():
        cols = [[e[i] for e in runs] for i in range(len(WAYS))]
        print(f"{name} ({len(runs)} runs): " + " | ".join(
            f"{w} {statistics.fmean(c):+.1f} sd {statistics.stdev(c) if len(c) > 1 else 0.0:.1f} "
            f"missed {sum(abs(x) > 10 for x in c)}" for w, c in zip(WAYS, cols)))


if __name__ == "__main__":
    main()
