"""Where a multi-threaded element-wise op loses its time in training: its inputs or its output?

Trains a bundled workload (the device validation's transformer at 2 threads by default) and
times every call of one op inside the process (a ``TorchDispatchMode``), five ways:

* ``first``: the training's own call;
* ``again``: the same call at once, on the same inputs, its output allocated as usual;
* ``same_in_zeroed_out``: the same inputs into an output buffer both threads have just zeroed
  (``out=``, each thread's share of the buffer where it will write it);
* ``copied_in_zeroed_out``: fresh copies of the inputs into such a buffer;
* ``copied_in``: fresh copies, the output allocated as usual (after the copies' allocations).

Prints the core-to-core round trip before and after, and per way the median and the first
calls.  With the cores 323-336 ns apart (session 44) ``gelu_backward`` read 727-1130 / 441-562 /
140-180 / 139-173 / 148-154 us: the output's memory, a recycled chunk another core last wrote,
costs the time, not the inputs.

Usage (the validation's malloc settings, as ``daydream validate`` runs the workloads)::

    MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1099511627776 MALLOC_TOP_PAD_=67108864 \\
        python benchmarks/output_memory.py --op gelu_backward --steps 30
"""
from __future__ import annotations

import argparse
import statistics
import time

__all__ = ["main"]

WAYS = ("first", "again", "same_in_zeroed_out", "copied_in_zeroed_out", "copied_in")


def _ns(fn) -> int:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def _mode(op_name: str, rec: dict):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    packet = getattr(torch.ops.aten, op_name)
    op, out_op = packet.default, next((getattr(packet, o) for o in packet.overloads() if o != "default"), None)

    class Times(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is not op:
                return func(*args, **kwargs)
            got = {}
            rec["first"].append(_ns(lambda: got.setdefault("out", func(*args, **kwargs))))
            rec["again"].append(_ns(lambda: func(*args, **kwargs)))
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            copies = [a.clone() for a in tensors] + list(args[len(tensors):])
            if out_op is not None:
                for name, ins in (("same_in_zeroed_out", args), ("copied_in_zeroed_out", copies)):
                    buf = torch.empty_like(got["out"]).zero_()
                    rec[name].append(_ns(lambda: out_op(*ins, **kwargs, **{out_op._schema.arguments[-1].name: buf})))
            rec["copied_in"].append(_ns(lambda: func(*copies, **kwargs)))
            return got["out"]

    return Times()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", default="gelu_backward", help="aten op to time (its default overload)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip", type=int, default=10, help="calls left out of the medians (warm-up)")
    a = p.parse_args(argv)
    from daydream.corelink import core_to_core_ns
    from daydream.workloads import transformer
    from daydream.workloads.common import prepare

    w = prepare("transformer", transformer.build, ["--threads", str(a.threads), "--batch-size", "8",
                                                   "--dataset-batches", "64", "--steps", str(a.steps), "--quiet"],
                transformer.add_args, batch_size=8)
    rec = {k: [] for k in WAYS}
    before = core_to_core_ns()
    with _mode(a.op, rec):
        w.train(a.steps)
    print(f"core-to-core {before:.0f} ns before, {core_to_core_ns():.0f} after")
    for k, v in rec.items():
        if v[a.skip:]:
            print(f"{k:22s} {statistics.median(v[a.skip:]) / 1e3:7.0f} us  "
                  + " ".join(f"{x / 1e3:.0f}" for x in v[a.skip:a.skip + 14]))


if __name__ == "__main__":
    main()
