"""How much the Hydra shard-parallel / model-parallel ratio depends on the shards' forward times.

Each trace is predicted as ``daydream validate`` predicts the Hydra rows (K = 2 and 4, its split;
:func:`daydream.validate.predict_now`, the co-run rate measured then), then again with every
shard's forward time multiplied by ``--factor`` (``hydra.shard_costs`` wrapped; the same co-run
rate).  Prints per trace the ratio of the two schedules' makespans before and after, and both
makespans at K = 4.  A trace whose forwards read longer than the real runtime's (the tracer's
per-module markers and per-op recording) predicts the ratio right if it barely moves.

Usage (a validation's Hydra baseline traces and profile)::

    python benchmarks/hydra_forward_scale.py --profile DIR/device-cpu-1t.json --factor 0.85 \\
        DIR/traces/hydra.mlp.base.r0.json.gz DIR/traces/hydra.mlp.base.r1.json.gz
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

__all__ = ["main"]


def main(argv=None) -> None:
    import daydream.optimizations.hydra as hydra
    from daydream.validate import predict_now
    from daydream.validation.hydra import _specs
    from daydream.whatif import predict

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--profile", required=True, help="device profile (a validation's DIR/device-cpu-1t.json)")
    p.add_argument("--factor", type=float, default=0.85, help="multiplies every shard's forward time")
    args = p.parse_args(argv)
    specs = _specs((4, 5))
    want = [specs[(k, s)] for k in (2, 4) for s in ("shard-parallel", "model-parallel")]
    plain = hydra.shard_costs

    def scaled(*a, **kw):
        c = plain(*a, **kw)
        return dataclasses.replace(c, fwd_ns=tuple(f * args.factor for f in c.fwd_ns))

    def ratios(rep):
        ms = [rep[s].predicted_ms for s in want]
        return ms[0] / ms[1], ms[2] / ms[3], ms[3], ms[2]

    for trace in args.traces:
        before = predict_now(Path(trace), want, args.profile)
        hydra.shard_costs = scaled
        try:
            after = {s: predict(Path(trace), [s], profile_path=args.profile)[0] for s in want}
        finally:
            hydra.shard_costs = plain
        (a2, a4, amp, asp), (b2, b4, bmp, bsp) = ratios(before), ratios(after)
        print(f"{Path(trace).name}: SP/MP K=2 {a2:.3f} -> {b2:.3f}, K=4 {a4:.3f} -> {b4:.3f}; "
              f"K=4 model-parallel {amp:.1f} -> {bmp:.1f} ms, shard-parallel {asp:.1f} -> {bsp:.1f} ms")


if __name__ == "__main__":
    main()
