"""Where tracing overhead comes from: torch.profiler (Kineto) alone, shapes, daydream's layer markers.

One process per workload.  Each round runs every condition once, in alternating order, for
``--block`` iterations (the first of each block left out); a condition's overhead is the median
over rounds of its block time divided by the plain block of the same round (paired: slow drift
of a shared machine cancels), and the ratio of the least disturbed blocks.  Also reports the
layer markers' own cost per module call on a chain of 200 tiny linears (forward, backward; hooks
installed but disabled, and enabled without a profiler).

Usage::

    python benchmarks/trace_overhead_parts.py --workloads cnn,transformer --rounds 30
    python benchmarks/trace_overhead_parts.py --workloads cnn --rounds 20 --block 3 -- --batch-size 16
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import statistics
import sys
import time

__all__ = ["parts", "hook_cost_us", "main"]


def _conditions():
    from torch.profiler import ProfilerActivity, profile

    from daydream.collect.hooks import LayerMarkers

    @contextlib.contextmanager
    def markers():
        m = LayerMarkers()
        m.install()
        m.enabled = True
        try:
            yield
        finally:
            m.enabled = False
            m.remove()

    @contextlib.contextmanager
    def kineto(shapes=False, with_markers=False):
        with markers() if with_markers else contextlib.nullcontext():
            with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes):
                yield

    return {"plain": contextlib.nullcontext, "markers": markers, "kineto": kineto,
            "kineto+shapes": lambda: kineto(True), "kineto+shapes+markers": lambda: kineto(True, True)}


def parts(name: str, rounds: int, block: int, extra: tuple = ()) -> dict:
    """Per condition: (paired median overhead %, least-disturbed-block overhead %)."""
    from daydream.workloads.common import prepare

    mod = importlib.import_module(f"daydream.workloads.{name}")
    w = prepare(name, mod.build, ["--quiet", "--threads", "1", *extra], mod.add_args, mod.BATCH_SIZE)
    w.train(3)
    conds = _conditions()
    got = {k: [] for k in conds}
    for r in range(rounds):
        order = list(conds.items()) if r % 2 == 0 else list(conds.items())[::-1]
        for k, make in order:
            with make():
                times = w.train(block + 1)
            got[k].append(statistics.fmean(times[1:]))
    plain = got["plain"]
    return {k: (100 * (statistics.median(a / b for a, b in zip(v, plain)) - 1), 100 * (min(v) / min(plain) - 1))
            for k, v in got.items()}


def hook_cost_us(modules: int = 200, rounds: int = 60, profiler: bool = False) -> dict:
    """Per module call, us: forward and backward with no markers, markers installed but disabled,
    enabled, and -- for comparison -- two no-op global module hooks (what the markers used to be:
    any global hook sends every module call down ``nn.Module``'s slow path).

    ``profiler``: all conditions run inside one torch.profiler session (the enabled markers'
    ranges are then recorded, as while tracing).
    """
    import contextlib

    import torch
    from torch import nn
    from torch.nn.modules import module as nn_module
    from torch.profiler import ProfilerActivity, profile

    from daydream.collect.hooks import LayerMarkers

    torch.set_num_threads(1)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(modules)])
    x = torch.randn(4, 8)

    def once():
        t0 = time.perf_counter()
        y = model(x)
        t1 = time.perf_counter()
        y.sum().backward()
        return t1 - t0, time.perf_counter() - t1

    m = LayerMarkers()

    @contextlib.contextmanager
    def markers(enabled):
        m.install()
        m.enabled = enabled
        try:
            yield
        finally:
            m.remove()

    @contextlib.contextmanager
    def global_hooks():
        hs = [nn_module.register_module_forward_pre_hook(lambda mod, a: None),
              nn_module.register_module_forward_hook(lambda mod, a, o: None, always_call=True)]
        try:
            yield
        finally:
            for h in hs:
                h.remove()

    conds = {"none": contextlib.nullcontext, "disabled": lambda: markers(False),
             "enabled": lambda: markers(True), "global hooks": global_hooks}
    res = {k: [] for k in conds}
    with profile(activities=[ProfilerActivity.CPU]) if profiler else contextlib.nullcontext():
        for _ in range(rounds):
            for k, ctx in conds.items():
                with ctx():
                    once()
                    res[k].append(once())
    return {k: tuple(statistics.median(x[i] for x in v) * 1e6 / modules for i in (0, 1)) for k, v in res.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="cnn,transformer")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--block", type=int, default=2, help="iterations timed per condition and round")
    ap.add_argument("--hooks-only", action="store_true", help="only the layer markers' cost per module call")
    ap.add_argument("extra", nargs="*", help="workload flags, after --: -- --batch-size 16")
    a = ap.parse_args(argv)
    for prof in (False, True):
        for k, (fwd, bwd) in hook_cost_us(profiler=prof).items():
            print(f"layer markers, {'under torch.profiler' if prof else 'no profiler':20s} {k:12s}: "
                  f"forward {fwd:6.2f} us, backward {bwd:6.2f} us per module call (median)")
    if a.hooks_only:
        return 0
    for name in a.workloads.split(","):
        for k, (paired, best) in parts(name, a.rounds, a.block, tuple(a.extra)).items():
            print(f"{name:12s} {k:24s} paired median {paired:+6.1f} %   least disturbed {best:+6.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
