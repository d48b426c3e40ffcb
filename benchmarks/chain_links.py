"""Which earlier op's output each op reads in the ``device`` what-if's chained re-run.

Where the trace recorded its data flow (``daydream trace`` since session 66: the shape
iteration's execution trace, :mod:`daydream.collect.flow`), each op reads the output that it
read in training (:func:`daydream.opseq.flow_calls`; only outputs of re-run calls count as
links: a weight read by several ops is one tensor, not a link).  Otherwise, or with
``--guess``, the re-run guesses it (:func:`daydream.opseq.chain_calls`: the latest output of
the argument's layout, a layer's weights by name, the optimizer's gradients by key).  This builds the re-run of one traced
iteration as the ``device`` what-if does (the ops it re-runs,
:func:`optimizations._sequence.iteration_sequence` with shared weights) and prints, per call in
order, the op and, per linked argument, the call whose output it reads.  Nothing is timed.

Usage::

    python benchmarks/chain_links.py DIR/traces/mlp.dev1t.r0.json.gz DIR/device-cpu-1t-nocomm.json

with the files of a ``daydream validate --opt device`` output directory ``DIR``.
"""
from __future__ import annotations

import argparse
import json

__all__ = ["main", "guessed_links", "device_sequence"]


def device_sequence(trace_path: str, profile_path: str) -> list:
    """The ``(signature, keys, grads, flow)`` tuples the ``device`` what-if re-runs for one iteration of
    the trace (:func:`optimizations._sequence.iteration_sequence` with shared weights)."""
    import numpy as np

    from daydream.analysis import trace_and_graph
    from daydream.optimizations import WhatIfContext
    from daydream.optimizations._sequence import iteration_sequence
    from daydream.optimizations.device import Boundness, Device
    from daydream.whatif import device_for

    trace, g = trace_and_graph(trace_path)
    ctx = WhatIfContext(graph=g.copy(), trace=trace, device=device_for(trace, None, profile_path))
    cls, _, _ = Device.classify(ctx)
    return iteration_sequence(ctx, np.flatnonzero(np.isin(cls, (Boundness.COMPUTE, Boundness.MEMORY))), shared=True)


def guessed_links(trace_path: str, profile_path: str, guess: bool = False) -> list:
    """``[(op name, [(argument position, producing call index), ...]), ...]`` per call of the
    chained re-run of one iteration of the trace, in order (calls that cannot be rebuilt left out):
    along the trace's recorded data flow where it has one, unless ``guess`` (then by layouts)."""
    from daydream import opseq

    seq = device_sequence(trace_path, profile_path)
    seen, real = [], opseq._chained

    def spy(op, pos, kw, links, box, slot):
        seen.append([(k, i) for k, i, *_ in links])
        return real(op, pos, kw, links, box, slot)

    opseq._chained = spy
    try:
        calls = opseq._side_calls([(s, k, gr, None if guess else fl, s) for s, k, gr, fl in seq],
                                  True)   # the variant: the op as traced
    finally:
        opseq._chained = real
    return [(json.loads(c[0])[0], links) for c, links in zip(calls, seen)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="a 1-thread CPU trace with shapes")
    ap.add_argument("profile", help="the 1-thread device profile it was predicted with")
    ap.add_argument("--guess", action="store_true", help="link by layouts even where the trace recorded its data flow")
    a = ap.parse_args(argv)
    links = guessed_links(a.trace, a.profile, a.guess)
    for j, (name, lk) in enumerate(links):
        reads = ", ".join(f"arg {k} <- {i} {links[i][0]}" for k, i in lk)
        print(f"{j:4d} {name:32s} {reads}")


if __name__ == "__main__":
    main()
