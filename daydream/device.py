"""Device profiles: what cost models know about a device.

A profile is measured on the user's machine by ``daydream calibrate`` (see
:mod:`daydream.calibrate`) or taken from the table of published specs for
devices the user does not have (:mod:`daydream.published`).  Throughputs are *curves*: measured at a few
problem sizes and interpolated (log-log), because small operations run far
below peak on every device.

Examples
--------
>>> p = DeviceProfile(name="toy", kind="cpu", matmul={"float32": Curve(((1e6, 1e9), (1e9, 1e11)))},
...                   elementwise={"float32": Curve.flat(2e10)}, op_overhead_ns=1000)
>>> round(p.matmul_flops_per_s("float32", 1e9) / 1e9), p.mem_bw_bytes_per_s(1e9) / 1e9
(100, 20.0)
"""
from __future__ import annotations

import itertools
import json
import math
import os
import socket
from dataclasses import asdict, dataclass, field

from .errors import DaydreamError

__all__ = ["Curve", "DeviceProfile", "load_profile", "save_profile", "default_profile_path", "measured_on"]


@dataclass(frozen=True)
class Curve:
    """A throughput measured at several sizes; interpolated log-log, flat outside.

    >>> c = Curve(((1e3, 1e6), (1e6, 1e9)))
    >>> c(1e3), round(c(3.16e4)), c(1e9)
    (1000000.0, 31600000, 1000000000.0)
    """

    points: tuple  # ((size, per_second), ...) sorted by size

    def __call__(self, size: float) -> float:
        pts = self.points
        if not pts:
            raise DaydreamError("empty throughput curve")
        if size <= pts[0][0]:
            return float(pts[0][1])
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if size <= x1:
                w = (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
                return float(math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0))))
        return float(pts[-1][1])

    @classmethod
    def flat(cls, value: float) -> "Curve":
        return cls(((1.0, float(value)),))


#: Copies in the batched matmul and groups in the grouped convolution that
#: calibration measures (``DeviceProfile.bmm``, ``DeviceProfile.gconv``).
BMM_COPIES = 4
#: The throughput curves of a profile.
_CURVES = ("matmul", "conv", "bmm", "gconv", "elementwise", "inplace")
#: Profile fields holding, per backend, a curve as ``((x, y), ...)`` points.
_POINTS = ("p2p_collision", "p2p_hold", "p2p_late_hold", "p2p_land")


def _nearest_copies(curves: dict, dtype: str, copies: int):
    """The curve measured for ``dtype`` (else float32) with the copy count nearest ``copies``.

    Keys are ``"float32"`` (:data:`BMM_COPIES` copies) or ``"float32x8"``.

    >>> _nearest_copies({"float32x2": "two", "float32x8": "eight"}, "bfloat16", 6)
    'eight'
    """
    for dt in (dtype, "float32"):
        have = {}
        for key, curve in curves.items():
            name, _, n = key.partition("x")
            if name == dt:
                have[int(n) if n.isdigit() else BMM_COPIES] = curve
        if have:
            return have[min(have, key=lambda n: (abs(math.log(n / max(copies, 1))), n))]
    return None


@dataclass(frozen=True)
class DeviceProfile:
    """Measured or published performance figures of one device.

    Attributes
    ----------
    matmul : dict of str to Curve
        Per dtype: achieved matmul FLOP/s as a function of the FLOPs of one op.
    conv : dict of str to Curve
        Per dtype: achieved convolution FLOP/s (falls back to ``matmul``).
    bmm : dict of str to Curve
        Per dtype and copy count (``"float32x2"``; a bare dtype: :data:`BMM_COPIES`):
        achieved FLOP/s of a batched matmul of equal products, by the FLOPs of the
        whole batch (horizontally fused linears, HFTA); falls back to ``matmul``.
    gconv : dict of str to Curve
        Per dtype and group count (keys as ``bmm``): achieved FLOP/s of a grouped
        convolution, by the FLOPs of all groups (horizontally fused
        convolutions); falls back to ``conv``.
    elementwise : dict of str to Curve
        Per dtype: bytes/s of a streaming elementwise op as a function of bytes moved.
    inplace : dict of str to Curve
        Per dtype: bytes/s of an in-place elementwise op (``x.div_(c)``: a read and a
        write of each byte, 2 bytes moved) by bytes moved; where absent, ``elementwise``.
        An out-of-place op also reads each line of its output before writing it (a
        write-allocating cache), which its bytes moved do not count: in-place passes
        over 4-268 MB ran 1.4-1.65x ``elementwise``'s rate here, 2.8x at 67 MB
        (``benchmarks/inplace_rate.py``).
    op_overhead_ns : int
        Per-op fixed cost: framework dispatch on CPU, kernel launch on GPU.
    collective : dict of str to (bytes_per_s, latency_ns)
        Per backend: ring all-reduce bus bandwidth and latency.
    p2p : dict of str to (bytes_per_s, latency_ns)
        Per backend: bandwidth and latency of one point-to-point send (pipeline
        and shard hand-overs); where absent, one step of the ring model.
    p2p_post : dict of str to (send_ns, recv_ns)
        Per backend: host time of posting a send and a receive (the calling
        thread's share of a hand-over, before the transfer); where absent, 0.
    p2p_sends : dict of str to (median_ns, stalled_share)
        Per backend, what the ``p2p`` latency is made of (reported by ``daydream calibrate``,
        used by no model): the median timed send of the sizes up to 256 KiB and the share of
        timed sends that took over ten times it (on a CPU host whose ranks are pinned, a send
        can wait for its rank's socket thread until the scheduler's tick; the fitted latency
        keeps their mean cost).
    p2p_preposted : dict of str to ns
        Per backend: the one-way time of a small send whose receive was posted before the
        synchronisation that starts it (a runtime that posts a step's receives up front), which
        does not wait so (:meth:`p2p_preposted_ns`); where absent, the ``p2p`` latency.
    p2p_notified : dict of str to ns
        Per backend: the ``p2p_preposted`` send when the receiver learns of its arrival through a
        waiter thread that wakes a scheduler waiting on a condition variable (the Hydra runtime's
        shard-parallel scheduler, which must not block on one receive); what that adds is
        :meth:`p2p_notify_ns`.
    p2p_handover : dict of str to ns
        Per backend: the latency of a pipeline's hand-overs (:meth:`p2p_handover_ns`): the mean
        time from a send's post to the end of its receiver's wait in a GPipe-like exchange
        between two computing ranks, less the data's time; where absent, the ``p2p`` latency.
    collective_wake : dict of str to ns
        Per backend: how much longer a small all-reduce takes when the ranks come to it from
        compute than back to back (CPU ranks pinned a core each, gloo's threads sharing it:
        they have slept and must wake), measured by calibration (:meth:`collective_wake_ns`).
    p2p_handshake : dict of str to ns
        Per backend: what a receive posted after its send waits beyond its post and
        the transfer (gloo moves data only once both sides have posted: the
        receiver's notice travels to the sender first); where absent, 0.
    p2p_collision : dict of str to tuple of (offset_ns, extra_ns)
        Per backend: the mean extra host time of posting a send or a receive when the
        peer posts one to this process at about the same moment, by the gap between
        the two posts' starts (increasing offsets; 0 past the last).  In gloo a
        post holds the pair's lock; the peer's notice arriving meanwhile wakes the
        receiving thread, which can preempt the poster on its core and spin for
        the lock for a scheduler slice.  Where absent, 0.
    p2p_hold : dict of str to tuple of (offset_ns, extra_ns)
        Per backend: the mean extra delay of a send's data, beyond both posts' ends,
        when its receive is posted about when the send is, by the gap between the two
        posts' starts (increasing offsets; 0 past the last), the sender computing on
        after its post.  Where absent, 0.
    p2p_late_hold : dict of str to tuple of (busy_ns, share)
        Per backend: the share (0 to 1) of the time from a receive's post, made after its
        send's, until the sender stops computing that the data waits on average (the
        sender's thread running torch ops), by how long the sender had computed when it
        posted the send (increasing; flat past both ends).  Where absent, 0.
    p2p_land : dict of str to tuple of (bytes, extra_ns)
        Per backend: how much longer a process's compute takes for each message that
        lands on its core meanwhile (its receive posted before, a thread waiting on
        it), by message size (increasing sizes; flat past both ends): the backend's
        threads and the waiter take the core to take the data in.  Where absent, 0.
    """

    name: str
    kind: str                      # "cpu" or "gpu"
    matmul: dict
    elementwise: dict
    op_overhead_ns: int
    conv: dict = field(default_factory=dict)
    bmm: dict = field(default_factory=dict)
    gconv: dict = field(default_factory=dict)
    inplace: dict = field(default_factory=dict)
    collective: dict = field(default_factory=dict)
    p2p: dict = field(default_factory=dict)
    p2p_post: dict = field(default_factory=dict)
    p2p_handshake: dict = field(default_factory=dict)
    p2p_sends: dict = field(default_factory=dict)
    p2p_preposted: dict = field(default_factory=dict)
    p2p_notified: dict = field(default_factory=dict)
    p2p_handover: dict = field(default_factory=dict)
    collective_wake: dict = field(default_factory=dict)
    p2p_collision: dict = field(default_factory=dict)
    p2p_hold: dict = field(default_factory=dict)
    p2p_late_hold: dict = field(default_factory=dict)
    p2p_land: dict = field(default_factory=dict)
    threads: int = 0
    source: str = "published"
    #: DataLoader: main-process cost of receiving one batch from a worker
    #: (fixed ns, ns per byte), measured by calibration.
    loader_fetch: tuple = (0.0, 0.0)
    #: torch.compile: host time of one compiled call outside its generated code (Dynamo's
    #: frame and guards, AOTAutograd's wrappers), (forward ns, backward ns), measured by
    #: calibration under the profiler as a trace is; (0, 0) if unknown.
    compiled_call_ns: tuple = (0, 0)
    #: ... and per parameter tensor of the compiled model (forward ns, backward ns): graph
    #: inputs the guards check and the wrappers handle.
    compiled_tensor_ns: tuple = (0, 0)
    #: Activation checkpointing: extra CPU time of one ``torch.utils.checkpoint``
    #: call over the plain call (forward ns, backward ns), measured by calibration.
    checkpoint_call_ns: tuple = (0, 0)
    #: ... and per op of the checkpointed forward (forward ns, backward ns): its saved-tensor
    #: hooks run per saved tensor, and the recompute's framework work grows with the segment.
    checkpoint_op_ns: tuple = (0, 0)
    #: ``DistributedDataParallel``'s own CPU time per iteration (forward ns, backward ns) in a
    #: one-rank group (wrapper, hooks, bucket copies, hand-overs to the collective's thread),
    #: measured by calibration; (0, 0) if unknown.
    ddp_call_ns: tuple = (0, 0)
    #: ... and per parameter tensor (forward ns, backward ns).
    ddp_tensor_ns: tuple = (0, 0)
    #: CPU: compute throughput of a process while a second one is busy on another core,
    #: relative to alone (1.0: no slow-down, or not measured); multi-process what-ifs on one
    #: host (data-parallel) run their ranks' work at this rate.
    corun: float = 1.0
    #: CPU: time of the same work in each of two one-thread processes started together on two
    #: cores, over the pair's mean, for a few such pairs (empty: not measured).  Processes of
    #: one job differ in speed for their whole run; a synchronous job goes at its slowest
    #: (:func:`optimizations._stragglers.slowest_of_factor`).
    process_spread: tuple = ()
    #: CPU: work resumed after its thread sat idle, ``((gap ns, factor), ...)`` with increasing
    #: gaps: a small training shard's backward and optimizer step after the thread slept that
    #: long, over their time right after its forward (caches and predictors gone cold while it
    #: waited); empty: not measured (see :meth:`resume_factor`).
    resume: tuple = ()
    #: CPU: a training step when N copies of a small model take turns on a core, over one copy
    #: alone, ``((state bytes, factor), ...)`` by the parameters and optimizer state the copies
    #: keep (:mod:`daydream.calibrate_cycle`); empty: not measured (see :meth:`cycle_factor`).
    cycle: tuple = ()
    #: CPU: core-to-core round trips (ns) probed before and after calibrating
    #: (:mod:`daydream.corelink`): on a VM whose host moves its cores, where they were while
    #: this was measured; empty: not probed.
    core_to_core_ns: tuple = ()

    @property
    def measured_here(self) -> bool:
        """Whether calibration measured this profile on this host (its ``source`` says so).

        >>> DeviceProfile("x", "cpu", {}, {}, 0, source=measured_on() + " 2026-11-22 09:22").measured_here
        True
        >>> DeviceProfile("x", "cpu", {}, {}, 0, source="published spec").measured_here
        False
        """
        return self.source.startswith(measured_on() + " ")

    def loader_fetch_ns(self, nbytes: float) -> float:
        """Main-process time to receive one batch of ``nbytes`` from a DataLoader worker."""
        fixed, per_byte = self.loader_fetch
        return fixed + per_byte * nbytes

    def matmul_flops_per_s(self, dtype: str, flops: float) -> float:
        curve = self.matmul.get(dtype) or self.matmul["float32"]
        return curve(flops)

    def conv_flops_per_s(self, dtype: str, flops: float) -> float:
        curve = self.conv.get(dtype) or self.conv.get("float32")
        return curve(flops) if curve else self.matmul_flops_per_s(dtype, flops)

    def bmm_flops_per_s(self, dtype: str, flops: float, copies: int = BMM_COPIES) -> float:
        """Batched-matmul FLOP/s of ``copies`` products, ``flops`` in all (the matmul curve if not calibrated)."""
        curve = _nearest_copies(self.bmm, dtype, copies)
        return curve(flops) if curve else self.matmul_flops_per_s(dtype, flops)

    def gconv_flops_per_s(self, dtype: str, flops: float, groups: int = BMM_COPIES) -> float:
        """Grouped-convolution FLOP/s of ``groups`` groups, ``flops`` in all (the convolution curve if not calibrated)."""
        curve = _nearest_copies(self.gconv, dtype, groups)
        return curve(flops) if curve else self.conv_flops_per_s(dtype, flops)

    def mem_bw_bytes_per_s(self, nbytes: float, dtype: str = "float32") -> float:
        """Bytes/s of an elementwise op moving ``nbytes`` again and again (warm caches where they fit)."""
        curve = self.elementwise.get(dtype) or self.elementwise["float32"]
        return curve(nbytes)

    def inplace_bw_bytes_per_s(self, nbytes: float, dtype: str = "float32") -> float:
        """Bytes/s of an in-place elementwise op moving ``nbytes`` again and again (the
        ``inplace`` curve, else :meth:`mem_bw_bytes_per_s`).

        >>> dev = DeviceProfile("x", "cpu", {}, {"float32": Curve.flat(2e10)}, 0)
        >>> dev.inplace_bw_bytes_per_s(1e6)
        20000000000.0
        >>> faster = {"float32": Curve.flat(3e10)}
        >>> DeviceProfile("x", "cpu", {}, dev.elementwise, 0, inplace=faster).inplace_bw_bytes_per_s(1e6)
        30000000000.0
        """
        curve = self.inplace.get(dtype) or self.inplace.get("float32")
        return curve(nbytes) if curve else self.mem_bw_bytes_per_s(nbytes, dtype)

    def stream_bw_bytes_per_s(self, dtype: str = "float32") -> float:
        """Bytes/s of an elementwise op over data that is not in cache: the elementwise
        curve at its largest measured size (calibration's largest is beyond any cache).

        For a buffer touched once an iteration (DDP's gradient buckets), whatever
        its size: the rest of the iteration has passed through the caches since.

        >>> DeviceProfile("x", "cpu", {}, {"float32": Curve(((1e3, 1e9), (1e6, 5e10), (1e8, 2e10)))},
        ...               0).stream_bw_bytes_per_s()
        20000000000.0
        """
        curve = self.elementwise.get(dtype) or self.elementwise["float32"]
        return float(curve.points[-1][1])

    def collective_backend(self, backend: str | None = None) -> str | None:
        """The backend whose figures :meth:`allreduce_ns` uses for ``backend`` (None: no figures).

        >>> DeviceProfile("x", "cpu", {}, {}, 0, collective={"gloo": (1e9, 0.0)}).collective_backend("nccl")
        'gloo'
        """
        return _backend_in(self.collective or {}, backend)

    def allreduce_ns(self, nbytes: float, workers: int, backend: str | None = None) -> float:
        """Ring all-reduce time: ``2 (n-1)/n * bytes / bw + latency * 2 (n-1)``."""
        if workers <= 1:
            return 0.0
        if not self.collective:
            raise DaydreamError(f"device profile {self.name!r} has no collective figures; run daydream calibrate")
        bw, lat = _for_backend(self.collective, backend)
        steps = 2 * (workers - 1)
        return steps / workers * nbytes / bw * 1e9 + steps * lat

    def p2p_ns(self, nbytes: float, backend: str | None = None) -> float:
        """One point-to-point transfer: ``latency + bytes / bandwidth`` with the calibrated
        ``p2p`` figures, else one step of the ring all-reduce model (the ``collective``
        figures: a gloo all-reduce's latency includes its worker-thread hand-offs, several
        times a direct send's).  0 for 0 bytes or a profile without either.

        >>> prof = DeviceProfile("x", "cpu", {}, {}, 0, collective={"gloo": (1e9, 800e3)})
        >>> prof.p2p_ns(1e6)
        1800000.0
        >>> DeviceProfile("x", "cpu", {}, {}, 0, p2p={"gloo": (2e9, 100e3)}).p2p_ns(1e6)
        600000.0
        """
        figures = self.p2p or self.collective
        if nbytes <= 0 or not figures:
            return 0.0
        bw, lat = _for_backend(figures, backend)
        return nbytes / bw * 1e9 + lat

    def collective_wake_ns(self, backend: str | None = None) -> float:
        """The calibrated extra time of a collective that ranks reach from compute, over a
        back-to-back one (``collective_wake``); 0 where not calibrated.

        >>> DeviceProfile("x", "cpu", {}, {}, 0, collective_wake={"gloo": 4e5}).collective_wake_ns("gloo")
        400000.0
        >>> DeviceProfile("x", "cpu", {}, {}, 0).collective_wake_ns()
        0.0
        """
        return float(_for_backend(self.collective_wake, backend)) if self.collective_wake else 0.0

    def p2p_preposted_ns(self, nbytes: float, backend: str | None = None) -> float:
        """One send to a receive posted before the sender's previous synchronisation (a runtime
        that posts a step's receives up front): :meth:`p2p_ns` with the latency lowered to the
        calibrated ``p2p_preposted`` time where that is lower.  The fitted latency carries the
        mean cost of sends that waited for their rank's socket thread until the scheduler's tick,
        which happened to 20-41 % of sends whose receive was posted after the barrier that
        started them and to 0-0.5 % of those whose receive was posted before it
        (``python benchmarks/p2p_start.py``; docs/validation-log.md, "Session 29").

        >>> prof = DeviceProfile("x", "cpu", {}, {}, 0, p2p={"gloo": (1e9, 300e3)},
        ...                      p2p_preposted={"gloo": 40e3})
        >>> prof.p2p_ns(1e6), prof.p2p_preposted_ns(1e6)
        (1300000.0, 1040000.0)
        >>> DeviceProfile("x", "cpu", {}, {}, 0, p2p={"gloo": (1e9, 300e3)}).p2p_preposted_ns(1e6)
        1300000.0
        """
        return self._p2p_latency_from(self.p2p_preposted, nbytes, backend, min)

    def p2p_notify_ns(self, backend: str | None = None) -> float:
        """What a waiter thread adds to a hand-over whose receiver learns of the arrival through
        it (``p2p_notified`` less ``p2p_preposted``; 0 where either is missing): the receive's
        end wakes the waiter, which needs the interpreter's lock to wake the scheduler, whose
        process's threads share a core.

        >>> prof = DeviceProfile("x", "cpu", {}, {}, 0, p2p_preposted={"gloo": 40e3}, p2p_notified={"gloo": 150e3})
        >>> prof.p2p_notify_ns(), DeviceProfile("x", "cpu", {}, {}, 0).p2p_notify_ns()
        (110000.0, 0.0)
        """
        if not (self.p2p_notified and self.p2p_preposted):
            return 0.0
        return max(0.0, _for_backend(self.p2p_notified, backend) - _for_backend(self.p2p_preposted, backend))

    def p2p_handover_ns(self, nbytes: float, backend: str | None = None) -> float:
        """One hand-over between pipeline stages: :meth:`p2p_ns` with the latency the calibrated
        ``p2p_handover`` (the mean of a GPipe-like exchange's hand-overs, stalls included) where
        there is one.  The fitted latency is from sends started by a barrier, of which 0-47 %
        stalled in one calibration or the next: it read 40-1231 us where the pipelining
        runtime's own hand-overs averaged 325 us (docs/validation-log.md, "Session 37").

        >>> prof = DeviceProfile("x", "cpu", {}, {}, 0, p2p={"gloo": (1e9, 600e3)}, p2p_handover={"gloo": 250e3})
        >>> prof.p2p_ns(1e6), prof.p2p_handover_ns(1e6)
        (1600000.0, 1250000.0)
        >>> DeviceProfile("x", "cpu", {}, {}, 0, p2p={"gloo": (1e9, 600e3)}).p2p_handover_ns(1e6)
        1600000.0
        """
        return self._p2p_latency_from(self.p2p_handover, nbytes, backend, lambda _, ns: ns)

    def _p2p_latency_from(self, figures: dict, nbytes: float, backend, pick) -> float:
        """:meth:`p2p_ns` with the latency ``pick(fitted latency, figures' ns)``; :meth:`p2p_ns`
        itself where ``figures`` or the ``p2p`` fit is missing."""
        if nbytes <= 0 or not self.p2p or not figures:
            return self.p2p_ns(nbytes, backend)
        bw, lat = _for_backend(self.p2p, backend)
        return nbytes / bw * 1e9 + pick(lat, float(_for_backend(figures, backend)))

    def p2p_post_ns(self, backend: str | None = None) -> tuple:
        """``(send, receive)``: host ns the sending and the receiving thread spend posting one
        transfer (``(0.0, 0.0)`` where not calibrated).  :meth:`p2p_ns` counts from the send's
        call, so it includes the send's share.

        >>> DeviceProfile("x", "cpu", {}, {}, 0, p2p_post={"gloo": (50e3, 40e3)}).p2p_post_ns()
        (50000.0, 40000.0)
        >>> DeviceProfile("x", "cpu", {}, {}, 0).p2p_post_ns("gloo")
        (0.0, 0.0)
        """
        if not self.p2p_post:
            return 0.0, 0.0
        send, recv = _for_backend(self.p2p_post, backend)
        return float(send), float(recv)

    def p2p_handshake_ns(self, backend: str | None = None) -> float:
        """Extra wait of a receive posted after its send (0.0 where not calibrated).

        >>> DeviceProfile("x", "cpu", {}, {}, 0, p2p_handshake={"gloo": 120e3}).p2p_handshake_ns()
        120000.0
        """
        return float(_for_backend(self.p2p_handshake, backend)) if self.p2p_handshake else 0.0

    def p2p_collision_ns(self, gap_ns: float, backend: str | None = None) -> float:
        """Mean extra ns of a post whose peer posts to it ``gap_ns`` before or after (0.0 where
        not calibrated, and past the last calibrated gap).

        >>> dev = DeviceProfile("x", "cpu", {}, {}, 0, p2p_collision={"gloo": ((0, 2e6), (100e3, 0))})
        >>> dev.p2p_collision_ns(0), dev.p2p_collision_ns(-50e3), dev.p2p_collision_ns(300e3)
        (2000000.0, 1000000.0, 0.0)
        """
        return _interp(_for_backend(self.p2p_collision, backend), abs(gap_ns)) if self.p2p_collision else 0.0

    def p2p_collision_window_ns(self, backend: str | None = None) -> float:
        """The largest gap between two posts at which :meth:`p2p_collision_ns` can be above 0."""
        if not self.p2p_collision:
            return 0.0
        return float(_for_backend(self.p2p_collision, backend)[-1][0])

    def p2p_hold_ns(self, gap_ns: float, backend: str | None = None) -> float:
        """Mean extra ns before a send's data leaves when its receive is posted ``gap_ns`` before or
        after it (0.0 where not calibrated, and past the last calibrated gap).

        >>> dev = DeviceProfile("x", "cpu", {}, {}, 0, p2p_hold={"gloo": ((0, 1e6), (10e3, 6e5), (800e3, 0))})
        >>> dev.p2p_hold_ns(5e3), dev.p2p_hold_ns(900e3), DeviceProfile("x", "cpu", {}, {}, 0).p2p_hold_ns(0)
        (800000.0, 0.0, 0.0)
        """
        return _interp(_for_backend(self.p2p_hold, backend), abs(gap_ns)) if self.p2p_hold else 0.0

    def p2p_hold_window_ns(self, backend: str | None = None) -> float:
        """The largest gap between two posts at which :meth:`p2p_hold_ns` can be above 0."""
        return float(_for_backend(self.p2p_hold, backend)[-1][0]) if self.p2p_hold else 0.0

    def p2p_late_hold_share(self, busy_ns: float, backend: str | None = None) -> float:
        """Share of a late receive's time until its sender stops computing that the data waits,
        the sender having computed ``busy_ns`` when it posted the send.

        >>> dev = DeviceProfile("x", "cpu", {}, {}, 0, p2p_late_hold={"gloo": ((1e6, 0.1), (3e6, 0.3))})
        >>> [round(dev.p2p_late_hold_share(b), 3) for b in (0, 2e6, 9e6)]
        [0.1, 0.2, 0.3]
        """
        return _interp(_for_backend(self.p2p_late_hold, backend), busy_ns, flat=True) if self.p2p_late_hold else 0.0

    def p2p_land_ns(self, nbytes: float, backend: str | None = None) -> float:
        """Extra compute time of a process for one message of ``nbytes`` landing on its core.

        >>> dev = DeviceProfile("x", "cpu", {}, {}, 0, p2p_land={"gloo": ((16e3, 2e4), (512e3, 2e5))})
        >>> [round(dev.p2p_land_ns(b)) for b in (1e3, 264e3, 4e6)], DeviceProfile("x", "cpu", {}, {}, 0).p2p_land_ns(1e6)
        ([20000, 110000, 200000], 0.0)
        """
        return _interp(_for_backend(self.p2p_land, backend), nbytes, flat=True) if self.p2p_land else 0.0

    def resume_factor(self, gap_ns: float) -> float:
        """How much longer work takes when its thread was idle ``gap_ns`` before it: 1.0 at no
        gap and where not calibrated, interpolated between the calibrated gaps (from 1.0 at 0),
        flat past the last.

        >>> dev = DeviceProfile("x", "cpu", {}, {}, 0, resume=((1e6, 1.04), (4e6, 1.16)))
        >>> [round(dev.resume_factor(g), 3) for g in (0, 5e5, 2.5e6, 9e6)]
        [1.0, 1.02, 1.1, 1.16]
        """
        return _interp(((0.0, 1.0), *self.resume), gap_ns, flat=True) if self.resume else 1.0

    def cycle_factor(self, state_bytes: float) -> float:
        """How much longer a training step takes when the steps that run between two of its
        model's keep ``state_bytes`` of parameters and optimizer state in all (its model's
        included), relative to the calibration's smallest: interpolated in log bytes, flat
        outside the calibrated range; 1.0 where not calibrated.

        Non-decreasing in ``state_bytes``: each calibrated point counts as the greatest up to
        it, since more state between two steps of a model cannot make them faster.  A dip is
        the calibration's noise (one read x1.12 at 8.4 MB, then x1.10 and x1.08 at 16.8 and
        33.6 MB, session 39), and the ratio of two points across it, which is what a K-model
        prediction takes, would make K models' steps faster than one's (x0.978 for Hydra's 2).

        >>> dev = DeviceProfile("x", "cpu", {}, {}, 0, cycle=((4e6, 1.0), (16e6, 1.2)))
        >>> [round(dev.cycle_factor(b), 3) for b in (1e6, 8e6, 16e6, 1e9)]
        [1.0, 1.1, 1.2, 1.2]
        >>> dip = DeviceProfile("x", "cpu", {}, {}, 0, cycle=((4e6, 1.0), (8e6, 1.12), (16e6, 1.1)))
        >>> [round(dip.cycle_factor(b), 3) for b in (8e6, 16e6)]
        [1.12, 1.12]
        """
        if not self.cycle:
            return 1.0
        rising = itertools.accumulate((f for _, f in self.cycle), max)
        pts = tuple(zip((math.log(b) for b, _ in self.cycle), rising))
        return _interp(pts, math.log(max(state_bytes, 1.0)), flat=True)

    # ------------------------------------------------------------ persistence
    def to_json(self) -> dict:
        d = asdict(self)
        for k in _CURVES:
            d[k] = {dt: [list(p) for p in c.points] for dt, c in getattr(self, k).items()}
        d["collective"] = {k: list(v) for k, v in self.collective.items()}
        d["p2p"] = {k: list(v) for k, v in self.p2p.items()}
        d["p2p_post"] = {k: list(v) for k, v in self.p2p_post.items()}
        d["p2p_sends"] = {k: list(v) for k, v in self.p2p_sends.items()}
        for k in _POINTS:
            d[k] = {b: [list(p) for p in v] for b, v in getattr(self, k).items()}
        d["loader_fetch"] = list(self.loader_fetch)
        d["compiled_call_ns"] = list(self.compiled_call_ns)
        d["compiled_tensor_ns"] = list(self.compiled_tensor_ns)
        d["checkpoint_call_ns"] = list(self.checkpoint_call_ns)
        d["checkpoint_op_ns"] = list(self.checkpoint_op_ns)
        d["ddp_call_ns"] = list(self.ddp_call_ns)
        d["ddp_tensor_ns"] = list(self.ddp_tensor_ns)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "DeviceProfile":
        curves = {k: {dt: Curve(tuple(tuple(p) for p in pts)) for dt, pts in d.get(k, {}).items()}
                  for k in _CURVES}
        points = {k: {b: tuple(tuple(float(x) for x in p) for p in v) for b, v in d.get(k, {}).items()}
                  for k in _POINTS}
        return cls(name=d["name"], kind=d["kind"], op_overhead_ns=int(d["op_overhead_ns"]),
                   collective={k: tuple(v) for k, v in d.get("collective", {}).items()},
                   p2p={k: tuple(v) for k, v in d.get("p2p", {}).items()},
                   p2p_post={k: tuple(v) for k, v in d.get("p2p_post", {}).items()},
                   p2p_handshake={k: float(v) for k, v in d.get("p2p_handshake", {}).items()},
                   p2p_preposted={k: float(v) for k, v in d.get("p2p_preposted", {}).items()},
                   p2p_notified={k: float(v) for k, v in d.get("p2p_notified", {}).items()},
                   p2p_handover={k: float(v) for k, v in d.get("p2p_handover", {}).items()},
                   collective_wake={k: float(v) for k, v in d.get("collective_wake", {}).items()},
                   p2p_sends={k: tuple(float(x) for x in v) for k, v in d.get("p2p_sends", {}).items()},
                   threads=int(d.get("threads", 0)), source=d.get("source", "file"),
                   loader_fetch=tuple(d.get("loader_fetch", (0.0, 0.0))),
                   compiled_call_ns=_fwd_bwd(d.get("compiled_call_ns", (0, 0))),
                   compiled_tensor_ns=tuple(int(x) for x in d.get("compiled_tensor_ns", (0, 0))),
                   checkpoint_call_ns=tuple(int(x) for x in d.get("checkpoint_call_ns", (0, 0))),
                   checkpoint_op_ns=tuple(int(x) for x in d.get("checkpoint_op_ns", (0, 0))),
                   ddp_call_ns=tuple(int(x) for x in d.get("ddp_call_ns", (0, 0))),
                   ddp_tensor_ns=tuple(int(x) for x in d.get("ddp_tensor_ns", (0, 0))),
                   corun=float(d.get("corun", 1.0)),
                   process_spread=tuple(float(x) for x in d.get("process_spread", ())),
                   resume=tuple(tuple(float(x) for x in p) for p in d.get("resume", ())),
                   cycle=tuple(tuple(float(x) for x in p) for p in d.get("cycle", ())),
                   core_to_core_ns=tuple(float(x) for x in d.get("core_to_core_ns", ())), **curves, **points)


def _fwd_bwd(v) -> tuple:
    """(forward ns, backward ns); a single number (profiles before session 13: one forward +
    backward call) is split evenly.

    >>> _fwd_bwd(300), _fwd_bwd([100, 50])
    ((150, 150), (100, 50))
    """
    if isinstance(v, (int, float)):
        return (int(v) // 2, int(v) - int(v) // 2)
    return tuple(int(x) for x in v)


def _backend_in(figures: dict, backend: str | None):
    """The backend whose figures are used: ``backend`` if given, else the first (None: none)."""
    return backend if backend in figures else next(iter(figures), None)


def _for_backend(figures: dict, backend: str | None):
    """``figures[backend]``, or the first backend's figures where that one is not given."""
    return figures[_backend_in(figures, backend)]


def _interp(pts, x: float, flat: bool = False) -> float:
    """``y`` at ``x`` on the points ``((x, y), ...)`` (increasing x): linear between points, the
    first point's ``y`` below it; past the last, its ``y`` if ``flat``, else 0.0.  Never outside
    its two points' ``y``, which rounding could otherwise pass by a unit in the last place (a
    curve kept non-decreasing would then fall past its last point).

    >>> [_interp(((1, 10), (3, 30)), x) for x in (0, 2, 4)], _interp(((1, 10), (3, 30)), 4, flat=True)
    ([10.0, 20.0, 0.0], 30.0)
    >>> a, b = math.log(4e6), math.log(8e6)
    >>> _interp(((a, 1.0), (b, 1.9999999999999998)), b)
    1.9999999999999998
    """
    if x <= pts[0][0]:
        return float(pts[0][1])
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x <= x1:
            y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
            return float(min(max(y, min(y0, y1)), max(y0, y1)))
    return float(pts[-1][1]) if flat else 0.0


def default_profile_path(kind: str = "cpu", threads: int | None = None) -> str:
    """Where calibrated profiles are cached: one per device kind and CPU thread count.

    CPU throughput depends on the number of intra-op threads, so a trace is
    predicted with the profile measured at the thread count it ran with.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    name = f"device-cpu-{threads}t.json" if kind == "cpu" and threads else f"device-{kind}.json"
    return os.path.join(base, "daydream", name)


def measured_on(host: str | None = None) -> str:
    """The start of a calibrated profile's ``source``: ``"measured on HOST"`` (this host by default)."""
    return f"measured on {host or socket.gethostname()}"


def save_profile(profile: DeviceProfile, path: str | None = None) -> str:
    """Save ``profile`` (atomically) to ``path`` or its default cache file; returns the path.
    A profile that :func:`load_profile` would refuse is refused here, before anything is written."""
    from .fileio import atomic_write_bytes

    bad = _profile_problem(profile)
    if bad:
        raise DaydreamError(f"{path or 'device profile'}: not saved: {bad}")

    path = path or default_profile_path(profile.kind, profile.threads)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    from .fileio import provenance

    doc = {**profile.to_json(), "daydream": provenance("calibrate")}   # from_json ignores it
    atomic_write_bytes(path, json.dumps(doc, indent=1).encode())
    return path


def load_profile(path: str | None = None) -> DeviceProfile | None:
    """The saved profile at ``path`` (default: the CPU cache file), or None if there is none."""
    path = path or default_profile_path()
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            prof = DeviceProfile.from_json(json.load(f))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
        raise DaydreamError(f"{path}: not a device profile ({' '.join(str(exc).split())[:200]})") from None
    bad = _profile_problem(prof)
    if bad:
        raise DaydreamError(f"{path}: not a device profile ({bad})")
    return prof


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _profile_problem(prof: DeviceProfile) -> str | None:
    """Why a loaded profile cannot be used (None if it can): curves of positive finite points, float32 present."""
    for kind in _CURVES:
        for dt, curve in getattr(prof, kind).items():
            if not curve.points or not all(len(p) == 2 and _positive(p[0]) and _positive(p[1]) for p in curve.points):
                return f"{kind} {dt}: throughput points must be (size > 0, per second > 0)"
            if any(a[0] >= b[0] for a, b in zip(curve.points, curve.points[1:])):
                return f"{kind} {dt}: sizes must increase"
    for kind in ("matmul", "elementwise"):
        if "float32" not in getattr(prof, kind):
            return f"no float32 {kind} curve"
    for kind in ("collective", "p2p"):
        for name, v in getattr(prof, kind).items():
            if len(v) != 2 or not _positive(v[0]) or not (_positive(v[1]) or v[1] == 0):
                return f"{kind} {name}: needs (bytes per second > 0, latency ns >= 0)"
    for name, v in prof.p2p_post.items():
        if len(v) != 2 or not all(_positive(x) or x == 0 for x in v):
            return f"p2p_post {name}: needs (send ns >= 0, receive ns >= 0)"
    for kind in ("p2p_handshake", "p2p_preposted", "p2p_notified", "p2p_handover", "collective_wake"):
        for name, v in getattr(prof, kind).items():
            if not (_positive(v) or v == 0):
                return f"{kind} {name}: needs ns >= 0"
    for name, v in prof.p2p_sends.items():
        if len(v) != 2 or not (_positive(v[0]) or v[0] == 0) or not 0 <= v[1] <= 1:
            return f"p2p_sends {name}: needs (median ns >= 0, stalled share from 0 to 1)"
    for name, pts in prof.p2p_late_hold.items():
        if not pts or not all(len(p) == 2 and _positive(p[0]) and 0 <= p[1] <= 1 for p in pts):
            return f"p2p_late_hold {name}: needs (busy ns > 0, share from 0 to 1) points"
        if any(a[0] >= b[0] for a, b in zip(pts, pts[1:])):
            return f"p2p_late_hold {name}: busy times must increase"
    for kind, x in (("p2p_collision", "gap"), ("p2p_hold", "gap"), ("p2p_land", "bytes")):
        for name, pts in getattr(prof, kind).items():
            if not pts or not all(len(p) == 2 and (_positive(p[0]) or p[0] == 0) and (_positive(p[1]) or p[1] == 0)
                                  for p in pts):
                return f"{kind} {name}: needs ({x}{' ns' * (x == 'gap')} >= 0, extra ns >= 0) points"
            if any(a[0] >= b[0] for a, b in zip(pts, pts[1:])):
                return f"{kind} {name}: {x}{'s' * (x == 'gap')} must increase"
    if len(prof.loader_fetch) != 2 or not all(_positive(x) or x == 0 for x in prof.loader_fetch):
        return "loader_fetch needs two non-negative numbers"
    if not (isinstance(prof.corun, (int, float)) and 0 < prof.corun <= 1):
        return "corun must be in (0, 1]"
    if not all(_positive(x) for x in prof.process_spread):
        return "process_spread needs relative times > 0"
    if not all(len(p) == 2 and _positive(p[0]) and _positive(p[1]) and p[1] >= 1 for p in prof.resume):
        return "resume needs (gap ns > 0, factor >= 1) points"
    if any(a[0] >= b[0] for a, b in zip(prof.resume, prof.resume[1:])):
        return "resume: gaps must increase"
    if not all(len(p) == 2 and _positive(p[0]) and _positive(p[1]) and p[1] >= 1 for p in prof.cycle):
        return "cycle needs (state bytes > 0, factor >= 1) points"
    if any(a[0] >= b[0] for a, b in zip(prof.cycle, prof.cycle[1:])):
        return "cycle: state bytes must increase"
    if prof.op_overhead_ns < 0:
        return "op_overhead_ns must be >= 0"
    for name in ("checkpoint_call_ns", "checkpoint_op_ns", "compiled_call_ns", "compiled_tensor_ns", "ddp_call_ns",
                 "ddp_tensor_ns"):
        v = getattr(prof, name)
        if len(v) != 2 or any(x < 0 for x in v):
            return f"{name} needs two numbers >= 0"
    return None
