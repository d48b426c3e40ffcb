"""The pipeline hand-over figures measured when predicting (``handover=now``), as the co-run rate is.

A CPU profile's ``p2p_handover`` (the mean hand-over of a GPipe-like exchange between two
pinned gloo processes, stalls included) and ``p2p_post`` come from sittings of that exchange
during ``daydream calibrate`` (:mod:`daydream.calibrate_handover`).  The stalls (a send that waits
for its sender's core until the scheduler's tick, about 2.3 ms) come at a rate that moves with the
host's state from minute to minute: sittings of 80 steps a quarter-minute apart read 213-604 us
within four minutes on this project's VM, and the real Tessel V and GPipe runs between them
followed them (r +0.51 / +0.43 over 16 rounds, docs/validation-log.md, "Session 81"), while a
calibration's figure did not follow the real runs of its validation minutes later (r +0.03 over 23
runs) and its error grew with it (r +0.39 / +0.58).  ``handover=now`` runs one such sitting
(:data:`NOW_STEPS` steps, some 3-4 s with its two processes' start) when predicting, once per process until
:func:`forget_handover_now` (which :func:`optimizations._corun.forget_measured` calls), and
costs the hand-overs and posts with its figures instead of the profile's.
"""
from __future__ import annotations

import dataclasses

from daydream.errors import DaydreamError

__all__ = ["HANDOVER_SOURCES", "NOW_STEPS", "handover_now", "forget_handover_now"]

#: Where a pipeline's hand-over figures come from: the device profile, or a sitting measured now.
HANDOVER_SOURCES = ("profile", "now")
#: Steps of the exchange a ``handover=now`` sitting runs, about 2 s: twice a calibration sitting's
#: share of :data:`daydream.calibrate_handover.P2P_HANDOVER_STEPS`, since a prediction takes one
#: sitting where a calibration pools three (80 steps counted 168-189 hand-overs of a receiver
#: already waiting, 14 % of them stalls: a mean some 20 % uncertain).
NOW_STEPS = 160
_NOW: dict = {}


def forget_handover_now() -> None:
    """Forget the sitting ``handover=now`` measured in this process: the next prediction measures again."""
    _NOW.clear()


def _sitting():
    """The sitting measured now (once per process until :func:`forget_handover_now`), idle CPUs
    polling as in a calibration."""
    from daydream.calibrate_handover import handover_sitting
    from daydream.cpuidle import polling_idle

    if "sitting" not in _NOW:
        with polling_idle():
            _NOW["sitting"] = handover_sitting(NOW_STEPS)
    return _NOW["sitting"]


def handover_now(ctx, source: str, ranks: int) -> None:
    """With ``source`` ``"now"``, a CPU profile with a gloo point-to-point fit and ``ranks`` > 1:
    ``ctx.device`` with its gloo ``p2p_handover`` and ``p2p_post`` measured now (see the module
    docstring), and a note saying both figures; otherwise (or where the sitting fails or counts
    no hand-over) ``ctx.device`` as it was, with a note where ``"now"`` was asked for.

    >>> from types import SimpleNamespace
    >>> ctx = SimpleNamespace(device=SimpleNamespace(kind="gpu", p2p={}), notes=[])
    >>> ctx.note = ctx.notes.append
    >>> handover_now(ctx, "now", 2); ctx.notes
    ["handover=now: the profile's hand-over figures (not a CPU profile with a gloo point-to-point fit)"]
    """
    if source != "now" or ranks < 2:
        return
    dev = ctx.device
    if dev.kind != "cpu" or "gloo" not in (dev.p2p or {}):
        ctx.note("handover=now: the profile's hand-over figures (not a CPU profile with a gloo point-to-point fit)")
        return
    from daydream.calibrate_handover import handover_latency_ns, pipeline_post_ns

    try:
        sitting = _sitting()
    except (DaydreamError, ImportError, OSError) as exc:
        ctx.note(f"handover=now: the profile's hand-over figures (not measured: {exc})")
        return
    if not sitting.handovers_ns:
        ctx.note("handover=now: the profile's hand-over figures (the sitting counted no hand-over)")
        return
    ns = handover_latency_ns(sitting.handovers_ns, dev.p2p["gloo"][0])
    post = pipeline_post_ns([sitting])
    was = (dev.p2p_handover or {}).get("gloo")
    ctx.device = dataclasses.replace(dev, p2p_handover={**(dev.p2p_handover or {}), "gloo": ns},
                                     p2p_post={**(dev.p2p_post or {}), **({"gloo": post} if post else {})})
    ctx.note(f"handover=now: hand-overs {ns / 1e3:.0f} us measured now over {len(sitting.handovers_ns)} "
             f"(the profile's {'%.0f us' % (was / 1e3) if was is not None else 'none'})"
             + (f", posts {post[0] / 1e3:.0f} / {post[1] / 1e3:.0f} us" if post else ""))
