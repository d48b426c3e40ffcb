"""Idle CPUs held polling while measuring (PM QoS)."""
from __future__ import annotations

from daydream.cpuidle import polling_idle


def test_polling_idle_holds_the_request_open_and_releases_it(tmp_path):
    qos = tmp_path / "cpu_dma_latency"
    qos.write_bytes(b"")
    with polling_idle(path=str(qos)) as held:
        assert held and qos.read_bytes() == (0).to_bytes(4, "little", signed=True)
    with polling_idle(path=str(tmp_path / "absent")) as held:   # not permitted / not there: measure anyway
        assert held is False
