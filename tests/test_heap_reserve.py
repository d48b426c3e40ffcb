"""The heap reserve (daydream.collect.heap) and its place in the tracer."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, daydream_cmd
from daydream.collect import heap
from daydream.collect.heap import HeapReserve

glibc = pytest.mark.skipif(heap.heap_bytes() is None, reason="needs glibc's mallinfo2")
MiB = 1 << 20

# what happens to a reserve, in a fresh process (its malloc settings from the environment)
SCRIPT = r"""
import ctypes, json
from daydream.collect import heap
MiB = 1 << 20
libc, _ = heap._libc()
held = []
def take(n):   # a training step's buffers, kept: taken from holes, then the top
    held.extend(libc.malloc(heap.CHUNK_BYTES) for _ in range(n // heap.CHUNK_BYTES))
r = heap.HeapReserve(iterations=4, limit_bytes=256 * MiB)
r.start(16 * MiB)
out = {"start": r.reserved_bytes, "note": r.note, "top": libc.mallinfo2().keepcost}
take(MiB // 2)
out["small"] = r.boundary()
take(r.reserved_bytes + libc.mallinfo2().fordblks + 8 * MiB)   # more than the heap has free
out["large"] = r.boundary()
if out["large"]:
    r.top_up(out["large"])
out["after"] = r.as_metadata()
small = heap.HeapReserve(iterations=10, limit_bytes=2 * MiB)
small.start(64 * MiB)
small.top_up(64 * MiB)
out["limited"] = small.reserved_bytes
print(json.dumps(out))
"""


def _run(env_extra: dict, script: str = SCRIPT) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(env_extra, PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@glibc
def test_a_heap_that_keeps_its_top_keeps_the_reserve_resident_and_tops_it_up():
    from daydream.validate import STEADY_MALLOC

    got = _run(STEADY_MALLOC)
    assert 16 * MiB - heap.CHUNK_BYTES <= got["start"] <= 17 * MiB and got["note"] == ""
    assert got["top"] >= got["start"]          # freed, it is the heap's top: resident, not given back
    assert got["small"] == 0                   # growth well inside the reserve: nothing to add
    assert got["large"] > 0                    # growth beyond it: the rest of the iterations at that rate
    assert got["after"]["top_ups"] == 1 and got["after"]["reserved_bytes"] > got["start"]
    assert 0 < got["limited"] <= 2 * MiB       # the limit bounds the start and every top-up


@glibc
def test_a_heap_that_gives_its_top_back_turns_the_reserve_off():
    got = _run({})                             # glibc's defaults: a 128 KiB trim threshold
    assert got["start"] == 0 and "M_TRIM_THRESHOLD" in got["note"]
    assert got["small"] == 0 and got["large"] == 0
    assert got["after"]["reserved_bytes"] == 0 and "heap reserve off" in got["after"]["note"]


def test_without_glibc_it_does_nothing_and_says_why(monkeypatch):
    monkeypatch.setattr(heap, "_libc", lambda: (None, "no glibc with mallinfo2 (glibc 2.33+): heap reserve off"))
    r = HeapReserve(iterations=3, limit_bytes=MiB)
    r.start()
    assert r.boundary() == 0 and r.reserved_bytes == 0
    assert r.as_metadata()["note"].startswith("no glibc")


@glibc
@pytest.mark.parametrize("flag", [(), ("--no-heap-reserve",)])
def test_trace_records_the_reserve_and_the_flag_turns_it_off(tmp_path, train_script, flag):
    from daydream.validate import STEADY_MALLOC

    pytest.importorskip("torch")
    out = tmp_path / "t.json"
    env = dict(os.environ, **STEADY_MALLOC, PYTHONPATH=str(REPO))
    res = subprocess.run(daydream_cmd("trace", "-o", str(out), "--warmup", "1", "-n", "2", *flag, "--",
                                      sys.executable, str(train_script), "5"),
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    meta = json.loads(out.read_text())["daydream"]
    assert meta["iterations"]["recorded"] == 2
    faults = meta["iterations"]["minor_faults"]
    assert len(faults) == 2 and all(isinstance(n, int) and n >= 0 for n in faults)
    own = meta["iterations"]["thread_minor_faults"]     # the training thread's share of them
    assert len(own) == 2 and all(0 <= n <= m for n, m in zip(own, faults))
    if flag:
        assert "heap_reserve" not in meta
    else:
        assert meta["heap_reserve"]["reserved_bytes"] > 0 and "note" not in meta["heap_reserve"]
        # the heap's state at the end of each recorded iteration but the last
        for key in ("top_taken_bytes", "mmapped_bytes", "arena_bytes"):
            assert len(meta["heap_reserve"][key]) == 1
        assert meta["heap_reserve"]["arena_bytes"][0] > 0


class _FakeReserve:
    """Stands in for HeapReserve: records when the tracer calls it; asks for one top-up."""

    calls: list = []

    def __init__(self, iterations):
        self.asked = False

    def start(self):
        from daydream.collect.tracer import current_tracer

        _FakeReserve.calls.append(("start", current_tracer().boundaries))

    def boundary(self):
        if self.asked:
            return 0
        self.asked = True
        return 4096

    def top_up(self, nbytes):
        _FakeReserve.calls.append(("top_up", nbytes))

    def as_metadata(self):
        return {"reserved_bytes": 0, "top_ups": 1}


def test_tracer_reserves_during_warm_up_and_tops_up_inside_a_paused_range(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from daydream.collect import trace, tracer
    from daydream.loader.pauses import PAUSE_NAME

    monkeypatch.setattr(tracer, "HeapReserve", _FakeReserve)
    _FakeReserve.calls = []
    with trace(tmp_path / "t.json", warmup=2, iterations=3):
        import torch

        model = torch.nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(6):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
    # made at boundary 1, one warm-up iteration before recording starts at boundary 2 (that
    # iteration absorbs its cost, and ranks' differences in it), once; then one top-up
    assert _FakeReserve.calls == [("start", 1), ("top_up", 4096)]
    doc = json.loads((tmp_path / "t.json").read_text())
    names = [e["name"] for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert names.count(PAUSE_NAME) == 1          # the top-up, cut out of the timeline by the loader
    assert doc["daydream"]["heap_reserve"] == {"reserved_bytes": 0, "top_ups": 1}


def _faulting_iterations(growth_bytes: list, reserved_bytes: int) -> list:
    """Iterations whose growth went past the reserve, topped up after each by top_up_bytes."""
    taken, faulting = [], []
    for i, step in enumerate(growth_bytes):
        taken.append((taken[-1] if taken else 0) + step)
        if taken[-1] > reserved_bytes:
            faulting.append(i)
        reserved_bytes += heap.top_up_bytes(taken, reserved_bytes, len(growth_bytes))
    return faulting


def test_top_ups_follow_a_heap_that_starts_growing_by_a_whole_iteration():
    # the 8-copy HFTA MLP traced: 8 MiB an iteration, then its 32 MiB of buffers every iteration
    growth = [8 * MiB] * 8 + [32 * MiB] * 12
    assert _faulting_iterations(growth, 100 * MiB) == []
    assert _faulting_iterations([40 * MiB] * 20, 20 * MiB) == [0]   # only before any growth was seen


def test_no_top_up_while_the_reserve_covers_the_rest_at_the_rate_seen():
    assert heap.top_up_bytes([MiB, 2 * MiB], 100 * MiB, 20) == 0
    assert heap.top_up_bytes([0, 0], 0, 20) == 0
    assert heap.top_up_bytes([MiB], MiB, 3) == int(2 * MiB * heap.TOP_UP_MARGIN)


# a reserve, the program's growth into it, a top-up, and then growth up to what the reserve says
TOP_UP_SCRIPT = r"""
import ctypes, json, resource
from daydream.collect import heap
MiB = 1 << 20
libc, _ = heap._libc()
held = []
def grow(n):   # buffers the program keeps and writes: from holes, then from the top
    for _ in range(n // heap.CHUNK_BYTES):
        held.append(libc.malloc(heap.CHUNK_BYTES))
        ctypes.memset(held[-1], 1, heap.CHUNK_BYTES)
r = heap.HeapReserve(iterations=4, limit_bytes=1 << 30)
r.start(32 * MiB)
grow(libc.mallinfo2().fordblks - libc.mallinfo2().keepcost + 16 * MiB)   # the holes, then half the reserve
r.top_up(32 * MiB)
resident = r.reserved_bytes - (r._below_top() - r._below0)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
grow(resident - 2 * MiB)
print(json.dumps({"resident": resident, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}))
"""


@glibc
def test_growth_up_to_what_a_topped_up_reserve_says_it_holds_does_not_fault():
    from daydream.validate import STEADY_MALLOC

    got = _run(STEADY_MALLOC, TOP_UP_SCRIPT)
    # 16 MiB of the first reserve left and 32 more past its end: 48 MiB resident
    assert 46 * MiB <= got["resident"] <= 49 * MiB
    # a top-up that touched 32 MiB from the top's start (before session 62) held 32 MiB and
    # said 48: ~3,500 faults here
    assert got["faults"] < 100
