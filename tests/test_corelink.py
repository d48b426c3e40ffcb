"""The core-to-core probe (daydream.corelink) and how validate carries its figures."""
import os
from types import SimpleNamespace

import numpy as np
import pytest

from daydream import corelink, validate
from daydream.cli_doctor import CheckState, core_link_check
from daydream.corelink import CoreLinkLog, CoreLinkUnavailable, core_to_core_ns, note_placement, probed

two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")


@pytest.fixture
def compiled():
    return pytest.importorskip("daydream._corelink")


@two_cpus
def test_probe_measures_a_round_trip_between_two_cpus(compiled):
    ns = core_to_core_ns(round_trips=2000)
    # a cache line cannot go there and back in under a nanosecond, and 2000 trips of
    # 0.25 s each would have hit the deadline long before
    assert 1.0 < ns < corelink.MAX_PROBE_S * 1e9


@two_cpus
def test_probe_stops_at_its_deadline(compiled):
    a, b = sorted(os.sched_getaffinity(0))[:2]
    done, seconds = compiled.round_trips(a, b, 10**12, 0.01)
    assert 256 <= done < 10**12 and 0.01 <= seconds < 5.0


@pytest.mark.parametrize("cpus, count, why", [((0, 0), 10, "must differ"), ((0, -1), 10, "must lie in"),
                                              ((0, 1), 0, "must be positive")])
def test_probe_refuses_bad_arguments_with_the_reason(compiled, cpus, count, why):
    with pytest.raises(CoreLinkUnavailable, match=why):
        core_to_core_ns(cpus, round_trips=count)


@two_cpus
def test_probe_names_a_cpu_this_process_may_not_use(compiled):
    allowed = sorted(os.sched_getaffinity(0))
    outside = max(allowed) + 1
    with pytest.raises(CoreLinkUnavailable, match=f"cannot run on CPU {outside}"):
        core_to_core_ns((allowed[0], outside))
    assert sorted(os.sched_getaffinity(0)) == allowed     # the caller's CPU set is given back


def test_without_the_extension_the_probe_is_unavailable_not_a_crash(monkeypatch):
    import sys

    import daydream

    monkeypatch.setitem(sys.modules, "daydream._corelink", None)
    monkeypatch.delattr(daydream, "_corelink", raising=False)
    with pytest.raises(CoreLinkUnavailable, match="not built"):
        core_to_core_ns((0, 1))
    log = CoreLinkLog()
    with log, probed():
        pass
    assert log.values_ns == ()


def test_probes_go_to_every_open_log_and_nowhere_without_one():
    def never():
        raise AssertionError("probed with no log open")

    note_placement(probe=never)
    values = iter([300.0, 60.0, 55.0])
    outer, inner = CoreLinkLog(), CoreLinkLog()
    with outer:
        note_placement(probe=lambda: next(values))
        with inner, probed(probe=lambda: next(values)):
            pass
    assert outer.values_ns == (300.0, 60.0, 55.0) and inner.values_ns == (60.0, 55.0)
    note_placement(probe=never)


def test_logs_that_saw_the_same_probes_close_in_any_order():
    """Two logs opened together see equal probes; closing the inner one must not close the outer."""
    outer, inner = CoreLinkLog(), CoreLinkLog()
    with outer:
        with inner:
            note_placement(probe=lambda: 70.0)
        note_placement(probe=lambda: 80.0)
    assert outer.values_ns == (70.0, 80.0) and inner.values_ns == (70.0,)


def test_rows_keep_their_own_probes_and_take_the_log_s_otherwise():
    own = validate.ValidationRow("a", "o", 1.0, 1.0, 1.0, core_to_core_ns=(70.0,))
    bare = validate.ValidationRow("b", "o", 1.0, 1.0, 1.0)
    got = validate.with_placement([own, bare], SimpleNamespace(values_ns=(320.0, 330.0)))
    assert [r.core_to_core_ns for r in got] == [(70.0,), (320.0, 330.0)]
    assert got[1].core_to_core_range_ns == (320.0, 330.0) and validate.placement_note(bare) == ""


def test_doctor_says_why_the_probe_cannot_run(monkeypatch):
    def unavailable(*a, **k):
        raise CoreLinkUnavailable("this process may run on 1 CPU(s); the probe needs two")

    monkeypatch.setattr(corelink, "core_to_core_ns", unavailable)
    check = core_link_check()
    assert check.state is CheckState.NO and "needs two" in check.detail
    monkeypatch.setattr(corelink, "core_to_core_ns", lambda: 88.4)
    check = core_link_check()
    assert check.state is CheckState.OK and check.detail.startswith("88 ns round trip")


def test_the_benchmark_splits_samples_at_their_widest_gap_and_counts_spells():
    import doctest
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "core_to_core.py"
    spec = importlib.util.spec_from_file_location("core_to_core_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.split_at_widest_gap([52.0, 330.0, 95.0, 340.0]) == pytest.approx(212.5)
    assert bench.spells([False, False, True, False]) == [2, 1, 1]
    assert doctest.testmod(bench).failed == 0


def test_a_cpu_calibration_records_where_the_cores_were_before_and_after(monkeypatch):
    from conftest import flat_profile

    from daydream import calibrate as cal

    monkeypatch.setattr(cal, "_calibrate", lambda *a: flat_profile())
    values = iter([92.0, 331.0])
    monkeypatch.setattr(corelink, "core_to_core_ns", lambda: next(values))
    assert cal.calibrate("cpu").core_to_core_ns == (92.0, 331.0)
    assert cal.calibrate("cuda").core_to_core_ns == ()           # a GPU profile is not probed

    def unavailable():
        raise CoreLinkUnavailable("one CPU")

    monkeypatch.setattr(corelink, "core_to_core_ns", unavailable)
    assert cal.calibrate("cpu").core_to_core_ns == ()            # no probe: calibrating goes on


def test_a_saved_profile_keeps_its_probes_and_the_device_what_if_names_both_placements(tmp_path, maker,
                                                                                        monkeypatch):
    import dataclasses

    from conftest import flat_profile

    from daydream.device import load_profile, save_profile
    from daydream.model import LaneKind
    from daydream.optimizations import WhatIfContext, get

    far = dataclasses.replace(flat_profile(matmul=2e10), core_to_core_ns=(330.0, 341.0))
    path = save_profile(far, str(tmp_path / "far.json"))
    assert load_profile(path).core_to_core_ns == (330.0, 341.0)
    maker.task(maker.lane(LaneKind.CPU_THREAD), 1000, name="aten::mm", flops=10**9)
    near = dataclasses.replace(flat_profile(), core_to_core_ns=(91.0, 95.0))
    cols = {k: np.zeros(0, np.int64) for k in ("kind", "start_ns", "dur_ns", "flops", "bytes", "lane")}
    trace = SimpleNamespace(ranks=[SimpleNamespace(rank=0, meta={}, cols=cols, signatures=[])])
    ctx = WhatIfContext(graph=maker.g, trace=trace, device=near)
    get(f"device:target={path}").apply(ctx)
    assert ctx.notes[-1].endswith("; cores 91-95 ns apart while the source profile was measured, "
                                  "330-341 ns apart while the target was")
