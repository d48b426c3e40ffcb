"""``gelu_backward`` at 2 threads over 1, block by block: in training, in one trained block, in a hand-made chain.

The ``device`` what-if's op re-run never runs the transformer's ``gelu_backward`` slower on
two threads than on one, while real training does in a quarter of its blocks or more
(``device_rerun_gap.py``).  Where does that start?  In one process, each block times
``gelu_backward``'s total over ``--steps`` profiled steps at 1 and then at 2 threads, for:

* ``train``: the bundled transformer's training step (the validation's sizes);
* ``block``: one pre-norm MLP block of its sizes (``LayerNorm``, ``Linear`` 128 -> 512,
  ``GELU``, ``Linear`` 512 -> 128, residual) trained with autograd and SGD with momentum;
* ``chain``: the same ops called by hand, without autograd (``addmm``, ``gelu``, ``mm``,
  ``gelu_backward`` reading the ``addmm`` output), on the same tensors every step.

and prints each one's 2-thread over 1-thread ratio; the summary counts the blocks over
``--slow`` and those where ``train`` and ``block`` were slow together (slow blocks that come
with the machine's minute coincide; ones that come with the process's own state do not).

Usage::

    python benchmarks/gelu_backward_blocks.py --seconds 240
"""
from __future__ import annotations

import argparse
import statistics
import time

from device_rerun_gap import op_times_us, training

__all__ = ["main"]

#: The op timed.
OP = "aten::gelu_backward"


def _subjects() -> dict:
    import torch
    from torch import nn

    w = training("transformer")
    blk = nn.Sequential(nn.LayerNorm(128), nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128))
    opt = torch.optim.SGD(blk.parameters(), lr=1e-3, momentum=0.9)
    xs = [torch.randn(8, 64, 128) for _ in range(8)]
    step = [0]

    def block():
        x = xs[step[0] % len(xs)]
        step[0] += 1
        opt.zero_grad(set_to_none=True)
        (blk(x) + x).square().mean().backward()
        opt.step()

    aten = torch.ops.aten
    x, w1, b1, w2, go = (torch.randn(*s) for s in ((512, 128), (512, 128), (512,), (128, 512), (512, 128)))

    def chain():
        pre = aten.addmm(b1, x, w1.t())
        aten.gelu(pre)
        aten.gelu_backward(aten.mm(go, w2), pre)

    return {"train": lambda: w.train(1), "block": block, "chain": chain}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=240.0)
    ap.add_argument("--steps", type=int, default=6, help="profiled steps per subject, block and thread count")
    ap.add_argument("--slow", type=float, default=1.1, help="a block is slow where 2t / 1t exceeds this")
    a = ap.parse_args(argv)
    from daydream.heapmode import steady_heap

    with steady_heap():
        subjects = _subjects()
        rows, end = [], time.time() + a.seconds
        while time.time() < end:
            r = {}
            for n, f in subjects.items():
                one = op_times_us(f, 1, a.steps, (OP,))[OP]
                r[n] = op_times_us(f, 2, a.steps, (OP,))[OP] / max(one, 1.0)
            rows.append(r)
            print(time.strftime("%H:%M:%S"), " ".join(f"{n} {v:.2f}" for n, v in r.items()), flush=True)
    print(f"{len(rows)} blocks; per subject: blocks with 2t/1t above {a.slow}, mean and largest ratio")
    for n in subjects:
        v = [r[n] for r in rows]
        print(f"  {n:6s} {sum(x > a.slow for x in v):4d}   {statistics.fmean(v):.2f} {max(v):.2f}")
    print(f"  train and block slow in the same block: {sum(r['train'] > a.slow and r['block'] > a.slow for r in rows)}")


if __name__ == "__main__":
    main()
