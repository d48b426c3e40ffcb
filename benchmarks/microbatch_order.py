"""Does the order of micro-batch passes change their cost? The validation's MLP, one process, untraced.

Times one training step's forward and backward (no optimizer step) of the pipeline validation's MLP
(``daydream.validation.pipeline.MODEL_ARGS``) three ways, alternating round by round so that a
shared machine's drift falls on all of them:

* ``full``: the whole batch, one forward and one backward;
* ``gpipe``: ``M`` micro-batches, all forwards and then all backwards (a GPipe stage's order);
* ``fbfb``: ``M`` micro-batches, each one's forward and then its backward (the order in which
  ``batch-size:repeats=M`` re-runs one traced iteration's ops, ``daydream.opseq.sequence_ratios``).

Gradients accumulate into ``.grad`` across the micro-batches, as in training. Prints the median ms
of each and the ratios ``gpipe / full`` and ``fbfb / full`` (what one iteration of M micro-batches
costs against the whole batch), and ``gpipe / fbfb``.

Usage::

    python benchmarks/microbatch_order.py --rounds 40 --microbatches 4
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from daydream.validation.pipeline import MODEL_ARGS
from daydream.workloads.mlp import MLP


def _arg(name: str) -> int:
    return int(MODEL_ARGS[MODEL_ARGS.index(name) + 1])


def _step(model, xs, ys, order: str) -> float:
    model.zero_grad(set_to_none=True)
    t = time.perf_counter_ns()
    if order == "gpipe":
        losses = [F.cross_entropy(model(x), y) for x, y in zip(xs, ys)]
        for loss in losses:
            loss.backward()
    else:
        for x, y in zip(xs, ys):
            F.cross_entropy(model(x), y).backward()
    return (time.perf_counter_ns() - t) / 1e6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    batch = _arg("--batch-size")
    model = MLP(_arg("--in-features"), _arg("--hidden"), _arg("--layers"), 10)
    x, y = torch.randn(batch, _arg("--in-features")), torch.randint(0, 10, (batch,))
    xs, ys = x.chunk(a.microbatches), y.chunk(a.microbatches)
    ways = {"full": ([x], [y], "fbfb"), "gpipe": (xs, ys, "gpipe"), "fbfb": (xs, ys, "fbfb")}
    got = {k: [] for k in ways}
    for r in range(a.rounds + 3):
        names = list(ways) if r % 2 else list(reversed(ways))
        for k in names:
            ms = _step(model, *ways[k])
            if r >= 3:
                got[k].append(ms)
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"{a.rounds} rounds, batch {batch}, {a.microbatches} micro-batches, {a.threads} thread(s): "
          + ", ".join(f"{k} {v:.2f} ms" for k, v in med.items()))
    print(f"gpipe / full {med['gpipe'] / med['full']:.3f}, fbfb / full {med['fbfb'] / med['full']:.3f}, "
          f"gpipe / fbfb {med['gpipe'] / med['fbfb']:.3f}")


if __name__ == "__main__":
    main()
