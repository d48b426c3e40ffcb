"""The pre-faulted heap reserve (daydream.collect.heap) and its place in the tracer."""
from __future__ import annotations

import ctypes
import json

import pytest

torch = pytest.importorskip("torch")

from daydream.collect import heap, trace  # noqa: E402
from daydream.collect.heap import CHUNK_BYTES, HeapReserve  # noqa: E402

glibc = pytest.mark.skipif(heap.heap_bytes() is None, reason="needs glibc's mallinfo2")
MiB = 1 << 20


class _Held:
    """Heap chunks held until closed (what a training step's buffers do)."""

    def __init__(self):
        self.libc, _ = heap._libc()
        self.chunks = []

    def take(self, nbytes):
        self.chunks += [self.libc.malloc(CHUNK_BYTES) for _ in range(nbytes // CHUNK_BYTES)]
        for c in self.chunks:
            ctypes.memset(c, 1, 8)

    def close(self):
        for c in self.chunks:
            self.libc.free(c)


@glibc
def test_growth_within_the_reserve_needs_no_top_up_and_growth_beyond_it_asks_for_one():
    r = HeapReserve(iterations=4, limit_bytes=256 * MiB)
    r.start(16 * MiB)
    held = _Held()
    try:
        assert 16 * MiB - CHUNK_BYTES <= r.reserved_bytes <= 17 * MiB
        held.take(8 * MiB)                  # fits in the reserve (or in older holes): no growth
        assert r.boundary() == 0
        info = held.libc.mallinfo2()
        held.take(r.reserved_bytes + int(info.fordblks) + 8 * MiB)   # more than all free memory
        need = r.boundary()
        assert need > 0                      # 2 iterations left at the rate seen, with margin
        before = r.reserved_bytes
        r.top_up(need)
        assert r.top_ups == 1 and before < r.reserved_bytes <= 256 * MiB
        assert r.as_metadata() == {"reserved_bytes": r.reserved_bytes, "top_ups": 1}
    finally:
        held.close()
        r.release()
        r.release()                          # idempotent
    assert r._fences == []


@glibc
def test_the_limit_bounds_every_reserve():
    r = HeapReserve(iterations=10, limit_bytes=4 * MiB)
    r.start(64 * MiB)
    try:
        assert 0 < r.reserved_bytes <= 4 * MiB
        r.top_up(64 * MiB)
        assert r.reserved_bytes <= 4 * MiB
    finally:
        r.release()


def test_without_glibc_it_does_nothing_and_says_why(monkeypatch):
    monkeypatch.setattr(heap, "_libc", lambda: (None, "no glibc with mallinfo2 (glibc 2.33+): heap reserve off"))
    r = HeapReserve(iterations=3, limit_bytes=MiB)
    r.start()
    assert r.boundary() == 0 and r.reserved_bytes == 0
    r.release()
    assert r.as_metadata()["note"].startswith("no glibc")


def _loop(n):
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(n):
        opt.zero_grad()
        model(torch.randn(32, 64)).sum().backward()
        opt.step()


@glibc
def test_the_trace_says_what_was_reserved_and_the_option_turns_it_off(tmp_path):
    with trace(tmp_path / "on.json", warmup=1, iterations=2):
        _loop(4)
    with trace(tmp_path / "off.json", warmup=1, iterations=2, heap_reserve=False):
        _loop(4)
    on = json.loads((tmp_path / "on.json").read_text())["daydream"]
    off = json.loads((tmp_path / "off.json").read_text())["daydream"]
    assert on["heap_reserve"]["reserved_bytes"] > 0 and on["iterations"]["recorded"] == 2
    assert "heap_reserve" not in off and off["iterations"]["recorded"] == 2
