"""torch's TP API overhead and its in-line all-reduce, measured several times in a row.

``tensor-parallel`` (``api=torch``) inserts DTensor's host time per column/row pair and costs its
all-reduces at the in-line figure, both measured on this machine by
:func:`daydream.workloads.tensor_parallel.measure_api_overhead` (two processes, about 35 s) and
cached.  This forgets the cache and measures again ``--times`` times, printing per sitting the
clock, the figures and what they add to an iteration of the validation's transformer (``--pairs``
pairs, ``--allreduces`` all-reduces): how much one sitting, which the validation used for all its
rounds until session 83, can move a prediction.

The pair has the validation transformer's sizes (``--input-shape 8,128,256 --hidden 768``: its
first column linear's input and output features, as ``tensor-parallel`` measures it since session
88); ``--input-shape ""`` measures the tiny pair of 8 features used until then.

Usage::

    python benchmarks/tp_api_overhead.py --times 4
    python benchmarks/tp_api_overhead.py --times 4 --input-shape ""
"""
from __future__ import annotations

import argparse
import time

__all__ = ["main"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--times", type=int, default=4, help="sittings, one after the other")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--input-dims", type=int, default=3, help="the split linears' input rank (a transformer: 3)")
    p.add_argument("--allreduce-bytes", type=int, default=1 << 20, help="the in-line all-reduce's size")
    p.add_argument("--input-shape", default="8,128,256", help="the pair's input, every dimension ('': a tiny pair)")
    p.add_argument("--hidden", type=int, default=768, help="the column linear's output features")
    p.add_argument("--pairs", type=int, default=4, help="column/row pairs an iteration (the validation's: 4)")
    p.add_argument("--allreduces", type=int, default=8, help="all-reduces an iteration (the validation's: 8)")
    a = p.parse_args(argv)
    from daydream.optimizations.tensor_parallel import api_overhead_ns, forget_api_overhead

    per_iter = []
    for _ in range(a.times):
        forget_api_overhead(a.threads)
        t0 = time.time()
        shape = [int(d) for d in a.input_shape.split(",")] if a.input_shape.strip() else None
        o = api_overhead_ns(a.threads, len(shape) if shape else a.input_dims, a.allreduce_bytes, shape, a.hidden)
        if o is None:
            raise SystemExit("tp_api_overhead: the measurement could not run here (torch.distributed, gloo?)")
        ms = (a.pairs * (o["forward_ns"] + o["backward_ns"] + o["optimizer_ns"])
              + a.allreduces * o.get("allreduce_in_line_ns", 0.0)) / 1e6
        per_iter.append(ms)
        print(f"{time.strftime('%H:%M:%S')} ({time.time() - t0:.0f} s): per pair forward "
              f"{o['forward_ns'] / 1e3:.0f} us, backward {o['backward_ns'] / 1e3:.0f} us, step "
              f"{o['optimizer_ns'] / 1e3:.0f} us; all-reduce in line {o.get('allreduce_in_line_ns', 0) / 1e6:.2f} ms, "
              f"back to back {o.get('allreduce_calibrated_ns', 0) / 1e6:.2f} ms; an iteration {ms:.1f} ms", flush=True)
    print(f"an iteration's figures over {len(per_iter)} sittings: {min(per_iter):.1f}-{max(per_iter):.1f} ms")


if __name__ == "__main__":
    main()
