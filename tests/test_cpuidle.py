"""Idle CPUs held polling while measuring (PM QoS)."""
from __future__ import annotations

from daydream.cpuidle import no_polling_note, polling_idle


def test_polling_idle_holds_the_request_open_and_releases_it(tmp_path):
    qos, driver = tmp_path / "cpu_dma_latency", tmp_path / "current_driver"
    qos.write_bytes(b"")
    driver.write_text("acpi_idle\n")
    with polling_idle(path=str(qos), driver_path=str(driver)) as held:
        assert held and qos.read_bytes() == (0).to_bytes(4, "little", signed=True)
    with polling_idle(path=str(tmp_path / "absent"), driver_path=str(driver)) as held:   # not permitted: measure anyway
        assert held is False
    assert "needs root" in no_polling_note(str(driver))


def test_without_a_cpuidle_driver_the_request_is_made_but_said_to_have_no_effect(tmp_path):
    """A kernel without a cpuidle driver (a Firecracker guest) halts idle CPUs whatever PM QoS asks."""
    qos, driver = tmp_path / "cpu_dma_latency", tmp_path / "current_driver"
    qos.write_bytes(b"")
    driver.write_text("none\n")
    with polling_idle(path=str(qos), driver_path=str(driver)) as held:
        assert held is False and qos.read_bytes() == (0).to_bytes(4, "little", signed=True)
    assert no_polling_note(str(driver)).startswith("note: no cpuidle driver here") and ": none)" in no_polling_note(str(driver))
