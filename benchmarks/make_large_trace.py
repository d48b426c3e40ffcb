"""Generate large, realistic multi-rank Kineto traces by replicating a real one.

A real trace is repeated ``--repeat`` times along the time axis (iterations,
correlation/external/flow ids and ``ProfilerStep#N`` numbers shifted so each
copy is a new stretch of the same job) and written once per rank
(``--ranks``; ``distributedInfo.rank`` set, NCCL kernels line up across ranks).
Output goes to a folder (default under /tmp); never commit it.

Usage::

    python benchmarks/make_large_trace.py --ranks 8 --repeat 5 -o /tmp/daydream_large
    python benchmarks/make_large_trace.py --base a.json.gz,b.json.gz --ranks 128 -o /tmp/dd128

With several ``--base`` files, rank ``r`` is built from base ``r % len(bases)``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import time

__all__ = ["replicate", "main"]

DEFAULT_BASE = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces", "public",
                            "HolisticTraceAnalysis", "rank0.json.gz")
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

try:
    import orjson

    def _dumps(obj) -> bytes:
        return orjson.dumps(obj)

    _loads = orjson.loads
except ImportError:  # pragma: no cover
    def _dumps(obj) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads = json.loads


def _read(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return _loads(raw)


def _span_us(events):
    lo, hi = float("inf"), float("-inf")
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, (int, float)):
            lo = min(lo, ts)
            hi = max(hi, ts + (e.get("dur") or 0))
    return lo, hi


def _max_id(events):
    m = 0
    for e in events:
        a = e.get("args")
        if isinstance(a, dict):
            for k in ("correlation", "External id"):
                v = a.get(k)
                if isinstance(v, int) and v > m:
                    m = v
        v = e.get("id")
        if isinstance(v, int) and v > m:
            m = v
    return m


def _shifted(e, dt_us, did, dstep):
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = round(e["ts"] + dt_us, 3)
    if isinstance(e.get("id"), int):
        e["id"] += did
    a = e.get("args")
    if isinstance(a, dict):
        a = dict(a)
        for k in ("correlation", "External id"):
            if isinstance(a.get(k), int) and a[k] > 0:
                a[k] += did
        e["args"] = a
    m = _STEP_RE.match(e.get("name") or "") if isinstance(e.get("name"), str) else None
    if m:
        e["name"] = f"ProfilerStep#{int(m.group(1)) + dstep}"
    return e


def replicate(doc: dict, rank: int, world: int, repeat: int, out_path: str) -> int:
    """Write ``doc`` repeated ``repeat`` times in time as rank ``rank``; returns bytes written."""
    events = doc["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    lo, hi = _span_us(timed)
    span = (hi - lo) + 100.0
    did = _max_id(timed) + 1
    nstep = sum(1 for e in timed if isinstance(e.get("name"), str) and _STEP_RE.match(e["name"]))
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    info = dict(head.get("distributedInfo") or {})
    info.update(rank=rank, world_size=world)
    head["distributedInfo"] = info
    written = 0
    with open(out_path, "wb") as f:
        def w(b):
            nonlocal written
            f.write(b)
            written += len(b)
        w(_dumps(head)[:-1] + b',"traceEvents":[')
        first = True
        for e in meta:
            w((b"" if first else b",\n") + _dumps(e))
            first = False
        for k in range(repeat):
            for e in timed:
                w((b"" if first else b",\n") + _dumps(_shifted(e, k * span, k * did, k * nstep)))
                first = False
        w(b"]}\n")
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default=DEFAULT_BASE, help="trace(s) to replicate, comma-separated")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5, help="copies along the time axis")
    ap.add_argument("--world", type=int, default=None, help="world size to record (default: --ranks)")
    ap.add_argument("-o", "--out", default="/tmp/daydream_large")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    bases = [_read(p) for p in a.base.split(",")]
    t0, total = time.perf_counter(), 0
    for r in range(a.ranks):
        path = os.path.join(a.out, f"rank{r}.json")
        total += replicate(bases[r % len(bases)], r, a.world or a.ranks, a.repeat, path)
        print(f"\r{r + 1}/{a.ranks} ranks, {total / 1e6:.0f} MB", end="", file=sys.stderr, flush=True)
    print(f"\nwrote {a.ranks} files, {total / 1e6:.1f} MB of JSON to {a.out} "
          f"in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
