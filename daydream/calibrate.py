"""``daydream calibrate``: measure this machine once into a :class:`DeviceProfile`.

Micro-benchmarks with torch on the local device: matmul and convolution
throughput per dtype at several sizes, streaming elementwise bandwidth per
dtype at several sizes (caches show up as a curve, not a constant), and of an
in-place one (float32), the fixed
cost of one op (dispatch on CPU, launch on GPU), and all-reduce bandwidth and
latency (gloo between two local processes; NCCL on a GPU machine).
The measurements that start other processes (gloo, co-running, the spread of
processes' speeds) are in :mod:`daydream.calibrate_procs`.
"""
from __future__ import annotations

import os
import statistics
import time

from .calibrate_corun import CORUN_SITTINGS, PROCESS_SPREAD_PAIRS, corun_factor, corun_sitting, process_spread
from .calibrate_cycle import CYCLE_ROUNDS, RESUME_TRIES, cycle_curve, cycle_times, resume_curve, resume_times
from .calibrate_handover import P2P_HANDOVER_STEPS, handover_latency_ns, handover_sitting, pipeline_post_ns
from .calibrate_procs import GLOO_SIZES, gloo_fit, gloo_p2p, gloo_wake_ns, p2p_handshake_ns, pool_p2p
from .device import BMM_COPIES, Curve, DeviceProfile, measured_on
from .errors import DaydreamError

__all__ = ["calibrate", "ddp_ns", "gloo_p2p", "p2p_handshake_ns", "time_call_ns", "SIZES", "QUICK_SIZES"]

#: Problem sizes (matmul m=n=k-ish shapes, elementwise element counts, all-reduce bytes).
SIZES = {
    "matmul": [(64, 256, 256), (64, 512, 512), (256, 512, 1024), (512, 1024, 1024), (1024, 1024, 2048)],
    "conv": [(4, 16, 16, 32), (8, 32, 32, 32), (16, 64, 64, 16), (16, 128, 128, 16)],  # N, Cin, Cout, HW
    "elementwise": [2 ** 10, 2 ** 13, 2 ** 16, 2 ** 19, 2 ** 22, 2 ** 24],
    "allreduce": GLOO_SIZES,
}
#: Quick sizes span both ends of each curve: a GPU's small ops time its launches, and only its
#: large ones its arithmetic and bandwidth (an H200's quick profile topped out at 0.84 TFLOP/s and
#: 103 GB/s with the small sizes alone, and ``fused-adam`` charged a 103 MB step 746 us).
QUICK_SIZES = {"matmul": SIZES["matmul"][:2] + SIZES["matmul"][-1:], "conv": SIZES["conv"][:1],
               "elementwise": SIZES["elementwise"][:3:2] + SIZES["elementwise"][-1:],
               "allreduce": SIZES["allreduce"][::3]}
_DTYPES = ("float32", "bfloat16", "float16")


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call_ns(fn, device, min_time_s: float = 0.05, repeats: int = 7, typical: bool = False) -> float:
    """Time of one call of ``fn`` in ns: the best of up to ``repeats`` batches.

    Calls are batched to last about ``min_time_s / repeats``; the best batch is
    the figure least disturbed by other load on the machine (what the device
    can do).  ``typical``: the median batch instead (what a call costs inside
    a run on this machine, for predicting a run's mean time).  Slow calls get
    fewer repeats (at least 3) so that calibration stays quick.
    """
    t0 = time.perf_counter()
    fn()
    _sync(device)
    single = time.perf_counter() - t0
    n = max(1, int(min_time_s / repeats / max(single, 1e-9)))
    repeats = max(3, min(repeats, int(4 * min_time_s / max(single * n, 1e-9))))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        _sync(device)
        samples.append((time.perf_counter() - t0) / n * 1e9)
    return statistics.median(samples) if typical else min(samples)


#: Sizes whose single call would take longer than this are skipped (the curve
#: stays flat beyond the last size measured), so slow dtypes calibrate quickly.
MAX_CALL_S = 0.3


def _too_slow(pts, next_work):
    return bool(pts) and next_work / pts[-1][1] > MAX_CALL_S


def _matmul_curve(torch, device, dtype, shapes, min_time_s):
    pts = []
    for m, n, k in shapes:
        if _too_slow(pts, 2.0 * m * n * k):
            break
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        ns = time_call_ns(lambda: torch.mm(a, b), device, min_time_s)
        flops = 2.0 * m * n * k
        pts.append((flops, flops / ns * 1e9))
    return Curve(tuple(sorted(pts)))


#: Copy counts whose batched matmul / grouped convolution curves are measured (float32).
FUSED_COPIES = (2, 4, 8)


def _bmm_curve(torch, device, dtype, shapes, min_time_s, copies: int = BMM_COPIES):
    """``copies`` equal products in one ``torch.bmm``: FLOP/s by the batch's FLOPs."""
    pts = []
    for m, n, k in shapes:
        flops = 2.0 * m * n * k * copies
        if _too_slow(pts, flops):
            break
        a = torch.randn(copies, m, k, device=device).to(dtype)
        b = torch.randn(copies, k, n, device=device).to(dtype)
        ns = time_call_ns(lambda: torch.bmm(a, b), device, min_time_s)
        pts.append((flops, flops / ns * 1e9))
    return Curve(tuple(sorted(pts)))


def _conv_curve(torch, device, dtype, shapes, min_time_s, groups: int = 1):
    """3x3 convolutions (``groups`` independent ones in one grouped call): FLOP/s by FLOPs."""
    pts = []
    for n, cin, cout, hw in shapes:
        flops = 2.0 * n * cout * hw * hw * cin * 9 * groups
        if _too_slow(pts, flops):
            break
        x = torch.randn(n, cin * groups, hw, hw, device=device).to(dtype)
        w = torch.randn(cout * groups, cin, 3, 3, device=device).to(dtype)
        ns = time_call_ns(lambda: torch.nn.functional.conv2d(x, w, padding=1, groups=groups), device, min_time_s)
        pts.append((flops, flops / ns * 1e9))
    return Curve(tuple(sorted(pts)))


def _elementwise_curve(torch, device, dtype, sizes, min_time_s):
    pts = []
    for numel in sizes:
        a = torch.randn(numel, device=device).to(dtype)
        b = torch.randn(numel, device=device).to(dtype)
        c = torch.empty_like(a)
        ns = time_call_ns(lambda: torch.add(a, b, out=c), device, min_time_s)
        nbytes = 3.0 * numel * a.element_size()
        pts.append((nbytes, nbytes / ns * 1e9))
    return Curve(tuple(sorted(pts)))


def _inplace_curve(torch, device, sizes, min_time_s):
    """float32 bytes/s of ``x.div_(c)`` over one tensor again and again, by bytes moved (a read
    and a write of each): :attr:`~daydream.device.DeviceProfile.inplace`."""
    pts = []
    for numel in sizes:
        a = torch.randn(numel, device=device)
        ns = time_call_ns(lambda: a.div_(1.0), device, min_time_s)
        nbytes = 2.0 * numel * a.element_size()
        pts.append((nbytes, nbytes / ns * 1e9))
    return Curve(tuple(sorted(pts)))


def _op_overhead_ns(torch, device, min_time_s):
    a = torch.zeros(1, device=device)
    return int(time_call_ns(lambda: torch.add(a, a), device, min_time_s))


def _loader_fetch(torch, sizes=(2 ** 12, 2 ** 18), batches: int = 40, busy_s: float = 0.005):
    """Main-process cost of one batch from a DataLoader worker: fit fixed + per-byte.

    Between batches the main loop computes (matmuls for ``busy_s``), as a
    training loop does, so the workers are always ahead: what is timed is
    the hand-over (queue, unpickling, mapping the shared memory) and the
    first read of the batch, which faults its shared pages in.  The mean
    (without the slowest 5 %) is kept: a training loop pays every hand-over,
    and a low quantile under-predicted it by a third.
    """
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

    a, b = torch.randn(64, 256), torch.randn(256, 256)
    pts = []
    for numel in sizes:     # whole batches indexed at once: the worker's own work is negligible
        ds = TensorDataset(torch.randn(batches * 4, numel // 4), torch.zeros(batches * 4, dtype=torch.long))
        it = iter(DataLoader(ds, batch_size=None, sampler=BatchSampler(SequentialSampler(ds), 4, drop_last=True),
                             num_workers=2, prefetch_factor=2))
        next(it)
        samples = []
        for _ in range(batches - 2):
            end = time.perf_counter() + busy_s
            while time.perf_counter() < end:
                torch.mm(a, b)
            t0 = time.perf_counter()
            x, _ = next(it)
            float(x.sum())
            samples.append((time.perf_counter() - t0) * 1e9)
        del it
        kept = sorted(samples)[: max(int(len(samples) * 0.95), 1)]
        pts.append((numel * 4.0, sum(kept) / len(kept)))
    (x0, y0), (x1, y1) = pts[0], pts[-1]
    per_byte = max((y1 - y0) / (x1 - x0), 0.0)
    return (max(y0 - per_byte * x0, 0.0), per_byte)


#: Layers (a ``Linear`` and a ``ReLU`` each) of the larger module timed by :func:`_checkpoint_ns`.
CHECKPOINT_LAYERS = 8
#: Rounds of :func:`_checkpoint_extra_ns`: each times the five calls once, in turn, and the
#: differences are the medians over rounds (five calls timed 0.1 s apiece, one after another,
#: gave a forward/backward split of 111/221 us at one calibration and 287/0 at the next).
CHECKPOINT_ROUNDS = 9


def _checkpoint_ns(torch, device) -> tuple:
    """``torch.utils.checkpoint``'s extra CPU time: ((forward, backward) per call, (forward,
    backward) per op of the checkpointed forward), ns.

    Timed on tiny modules of 1 and :data:`CHECKPOINT_LAYERS` (Linear, ReLU) layers (their own
    work negligible; :func:`_checkpoint_extra_ns`); the difference gives the cost per op, the
    rest the cost per call.
    """
    return _call_and_per_layer_part(*(_checkpoint_extra_ns(torch, device, k) for k in (1, CHECKPOINT_LAYERS)),
                                    CHECKPOINT_LAYERS)


def _call_and_per_layer_part(small, large, layers: int) -> tuple:
    """(forward, backward) costs of tiny models of 1 and ``layers`` (Linear, ReLU) layers split
    into ((forward, backward) per call, (forward, backward) per unit), a layer being two units
    (two ops, or two parameter tensors), ns.

    >>> _call_and_per_layer_part((120.0, 60.0), (400.0, 200.0), 8)
    ((80, 40), (20, 10))
    """
    per_unit = tuple(max((b - a) / (2 * (layers - 1)), 0.0) for a, b in zip(small, large))
    call = tuple(max(a - 2 * p, 0.0) for a, p in zip(small, per_unit))
    return tuple(int(x) for x in call), tuple(int(x) for x in per_unit)


def _tiny_mlp(torch, layers: int, device):
    """``layers`` x (Linear(8, 8), ReLU): a model whose own work is negligible."""
    return torch.nn.Sequential(*[x for _ in range(layers)
                                 for x in (torch.nn.Linear(8, 8), torch.nn.ReLU())]).to(device)


def _checkpoint_extra_ns(torch, device, layers: int) -> tuple:
    """Extra CPU time of a checkpointed module of ``layers`` (Linear, ReLU) pairs over the plain
    one: (forward, backward) ns.  Forward with checkpoint minus plain forward; forward + backward
    with checkpoint minus plain forward + backward, minus the recomputed (no-grad) forward and
    the forward part; each the median over :data:`CHECKPOINT_ROUNDS` rounds.

    Timed under the profiler, as a trace's iterations run: the recompute's set-up records ops
    of its own (saved-tensor hooks, detaches, RNG state), each at the profiler's cost.  Timed
    without it, the backward part read 158 us a call and 31 us an op, 0.84 ms for the validation
    MLP's four checkpointed blocks, where its traced runs spent 1.57-1.75 ms a step in
    ``ReluBackward0`` outside the recomputed ops (session 14, run j)."""
    from torch.utils.checkpoint import checkpoint

    m = _tiny_mlp(torch, layers, device)
    x = torch.randn(4, 8, device=device, requires_grad=True)

    def no_grad():
        with torch.no_grad():
            m(x)

    calls = (lambda: m(x), lambda: checkpoint(m, x, use_reentrant=False), lambda: m(x).sum().backward(),
             lambda: checkpoint(m, x, use_reentrant=False).sum().backward(), no_grad)
    fwd, bwd = [], []
    for _ in range(CHECKPOINT_ROUNDS):     # the five timed together, the differences per round
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            plain_f, ckpt_f, plain, ckpt, recompute = [time_call_ns(c, device, 0.02) for c in calls]
        fwd.append(ckpt_f - plain_f)
        bwd.append(ckpt - plain - recompute - (ckpt_f - plain_f))
    return max(statistics.median(fwd), 0.0), max(statistics.median(bwd), 0.0)


def ddp_ns(torch, device) -> tuple:
    """``DistributedDataParallel``'s own CPU time: ((forward, backward) per iteration, (forward,
    backward) per parameter tensor), ns, from tiny models of 1 and :data:`CHECKPOINT_LAYERS`
    (Linear, ReLU) layers (:func:`_call_and_per_layer_part`); (0, 0) twice where no
    process group can be made here.

    In a process group of one rank (gloo): DDP's forward wrapper, its autograd hooks, the copies
    of gradients into and out of its buckets and the hand-over of each bucket's all-reduce to
    gloo's thread, with no peer to wait for.  What a real job adds to that, the collectives'
    time and the wait for the slowest rank, the what-if prices separately."""
    import torch.distributed as dist

    from .calibrate_procs import free_port

    if dist.is_initialized():
        return (0, 0), (0, 0)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    except (RuntimeError, ValueError, OSError):
        return (0, 0), (0, 0)
    try:
        return _call_and_per_layer_part(*(_ddp_extra_ns(torch, device, k) for k in (1, CHECKPOINT_LAYERS)),
                                        CHECKPOINT_LAYERS)
    finally:
        dist.destroy_process_group()


def _ddp_extra_ns(torch, device, layers: int) -> tuple:
    """Extra CPU time of a DDP-wrapped module of ``layers`` (Linear, ReLU) pairs over the plain
    one in a 1-rank group: (forward, backward) ns, medians over :data:`CHECKPOINT_ROUNDS` rounds,
    timed under the profiler as a trace's iterations run (DDP's copies are ops it records)."""
    from torch.nn.parallel import DistributedDataParallel

    m = _tiny_mlp(torch, layers, device)
    ddp = DistributedDataParallel(m)
    x = torch.randn(4, 8, device=device)
    calls = (lambda: m(x), lambda: ddp(x), lambda: m(x).sum().backward(), lambda: ddp(x).sum().backward())
    fwd, bwd = [], []
    for _ in range(CHECKPOINT_ROUNDS):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            plain_f, ddp_f, plain, both = [time_call_ns(c, device, 0.02) for c in calls]
        fwd.append(ddp_f - plain_f)
        bwd.append(both - plain - (ddp_f - plain_f))
    return max(statistics.median(fwd), 0.0), max(statistics.median(bwd), 0.0)


#: Rounds of :func:`_compiled_wrapper_ns` per model (the medians over rounds are kept).
COMPILED_ROUNDS = 7
#: Calls profiled per round.
COMPILED_CALLS = 20
#: Layers (a ``Linear`` and a ``ReLU`` each) of the larger compiled model: 2 parameter tensors
#: a layer; the smaller has one layer.
COMPILED_LAYERS = 8


#: Last-level cache assumed where the system does not tell its size.
DEFAULT_LLC_BYTES = 32 << 20


def host_cache_bytes(base: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """Size of the host's largest CPU cache (Linux sysfs ``base``; :data:`DEFAULT_LLC_BYTES`
    where it cannot be read).

    >>> host_cache_bytes() >= 1 << 20
    True
    """
    sizes = []
    try:
        for d in os.listdir(base):
            with open(os.path.join(base, d, "size")) as f:
                txt = f.read().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(txt[-1:], 1)
            sizes.append(int(txt.rstrip("KMG")) * mult)
    except (OSError, ValueError):
        return DEFAULT_LLC_BYTES
    return max(sizes) if sizes else DEFAULT_LLC_BYTES


def _compiled_call_ns(torch, device) -> tuple:
    """A torch.compile'd call's host time outside its generated code: ((forward, backward) per
    call, (forward, backward) per parameter tensor), ns; zeros where it cannot be measured.

    Tiny compiled models of 1 and :data:`COMPILED_LAYERS` (Linear, ReLU) layers (their own work
    negligible) are run under the profiler, as a trace's iterations are
    (:func:`_compiled_wrapper_ns`); the difference gives the cost per parameter tensor (graph
    inputs that Dynamo's guards check and AOTAutograd's wrappers handle), the rest the cost
    per call.  Before each forward and backward call the host's caches are swept
    (:func:`host_cache_bytes` written once): in training, the rest of a step passes through
    them between two calls, and the call's own code and data run cold.  On the validation
    MLP's host (10 parameter tensors) the real compiled calls spent 290-510 us forward and
    120-210 us backward outside their graphs; back to back, a tiny model's calls measured
    107-113 / 45-50 us, with a 32 MiB sweep (this host's L3) 328-389 / 130-147 us, with an
    8 MiB one 114-144 / 52-56 us.
    """
    small, large = (_compiled_wrapper_ns(torch, device, k) for k in (1, COMPILED_LAYERS))
    if not (all(small) and all(large)):
        return (0, 0), (0, 0)
    return _call_and_per_layer_part(small, large, COMPILED_LAYERS)


def _compiled_wrapper_ns(torch, device, layers: int) -> tuple:
    """(forward, backward) ns of a compiled model's call outside its generated graphs: the
    Python-timed forward call minus its ``## Call CompiledFxGraph`` range, and the
    ``CompiledFunctionBackward`` range minus the graph inside it; medians over the calls of a
    round, then over :data:`COMPILED_ROUNDS` rounds.  (0, 0) if it cannot compile here or the
    profiler shows no such ranges (another torch version)."""
    m = _tiny_mlp(torch, layers, device)
    x = torch.randn(4, 8, device=device)
    try:
        cm = torch.compile(m)
        for _ in range(3):
            cm(x).sum().backward()
    except Exception:  # noqa: BLE001 - no compiler toolchain: report 0 ("unknown")
        return 0, 0
    sweep = torch.zeros(host_cache_bytes() // 4)
    rounds = [_compiled_round(torch, device, cm, x, sweep) for _ in range(COMPILED_ROUNDS)]
    if not all(r[0] and r[1] for r in rounds):
        return 0, 0
    return tuple(statistics.median(r[i] for r in rounds) for i in (0, 1))


def _compiled_round(torch, device, cm, x, sweep) -> tuple:
    """One round of :func:`_compiled_wrapper_ns`: medians over :data:`COMPILED_CALLS` profiled
    calls (host time: a GPU's kernels are not waited for), each forward and backward after
    ``sweep`` (a host tensor) is written once."""
    forward = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(COMPILED_CALLS):
            sweep.add_(1.0)
            t0 = time.perf_counter_ns()
            y = cm(x)
            forward.append(time.perf_counter_ns() - t0)
            loss = y.sum()
            sweep.add_(1.0)
            loss.backward()
    spans = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()]   # us
    graphs = [(a, b) for n, a, b in spans if n.startswith("## Call CompiledFxGraph")]
    bwd_fns = [(a, b) for n, a, b in spans if n == "CompiledFunctionBackward"]
    inner = lambda a, b: sum(d - c for c, d in graphs if a <= c and d <= b)   # noqa: E731
    fwd_graphs = sorted((a, b) for a, b in graphs if not any(c <= a and b <= d for c, d in bwd_fns))
    if len(fwd_graphs) != len(forward) or len(bwd_fns) != len(forward):
        return 0, 0
    fwd = [t - (b - a) * 1e3 for t, (a, b) in zip(forward, fwd_graphs)]
    bwd = [(b - a - inner(a, b)) * 1e3 for a, b in bwd_fns]
    return max(statistics.median(fwd), 0.0), max(statistics.median(bwd), 0.0)


def calibrate(device: str = "cpu", quick: bool = False, collectives: bool = True, progress=None,
              threads: int | None = None) -> DeviceProfile:
    """Measure ``device`` (``"cpu"`` or ``"cuda[:N]"``) into a profile.

    Parameters
    ----------
    quick : bool
        Fewer sizes and shorter timings (for tests and smoke runs).
    collectives : bool
        Also measure all-reduce and point-to-point sends between two local
        processes (gloo).
    progress : callable, optional
        Called with a short message before each measurement.
    threads : int, optional
        Intra-op threads to measure with (``torch.set_num_threads``); CPU
        throughput depends on it, so calibrate with what the training uses.

    Idle CPUs poll instead of halting while it measures, where the system
    allows (:func:`daydream.cpuidle.polling_idle`); the profile's ``source``
    says so.  A CPU profile records where the cores were, probed before and
    after (``core_to_core_ns``, :mod:`daydream.corelink`).
    """
    import dataclasses

    from .corelink import try_probe
    from .cpuidle import polling_idle

    cpu = device == "cpu"
    with polling_idle() as held:
        before = try_probe() if cpu else ()
        prof = _calibrate(device, quick, collectives, progress, threads)
        after = try_probe() if cpu else ()
    return dataclasses.replace(prof, source=prof.source + (", idle CPUs polling" if held else ""),
                               core_to_core_ns=before + after)


#: Sittings of the figures that drift with the host's state (co-run, ``cycle``, ``resume``,
#: ``p2p_handover`` and, since session 79, the point-to-point send's figures), spread over a
#: calibration: one before its throughput curves, one after them, one before its two-process
#: steps (the co-run one there is the last of its three).
CALIBRATION_SITTINGS = CORUN_SITTINGS
#: Steps of the pipeline hand-over exchange in a ``--quick`` calibration's one sitting.
QUICK_HANDOVER_STEPS = 20


class _Sittings:
    """The sittings of the drifting figures (:data:`CALIBRATION_SITTINGS`), so that a spell of the
    host falls on one at most: the co-run measurement's (``corun``: where two processes are
    measured), the raw times of ``cycle`` and ``resume`` (``cold``: on a CPU), which
    :meth:`cycle` and :meth:`resume` pool, and the pipeline hand-overs (``handover``: where a CPU's
    point-to-point sends are measured), which :meth:`handover_ns` and :meth:`post_ns` pool, with
    the point-to-point send's figures at ``p2p_sizes`` (:func:`~daydream.calibrate_procs.gloo_fit`),
    which :meth:`p2p` pools."""

    def __init__(self, torch, say, corun: bool, cold: bool, quick: bool, handover: bool = False,
                 p2p_sizes=()):
        self.torch, self.say, self.corun, self.cold, self.quick = torch, say, corun, cold, quick
        self.handover, self.p2p_sizes = handover, p2p_sizes
        self.taken, self.cycles, self.resumes, self.handovers, self.p2ps = [], [], [], [], []

    def label(self) -> str:
        return f" (sitting {len(self.taken) + 1} of {CALIBRATION_SITTINGS})" if self.corun else ""

    def take(self, last: bool = False) -> None:
        """One sitting; the co-run one only before the last (which ``corun_factor`` takes)."""
        n = 1 if self.quick else CALIBRATION_SITTINGS
        if self.cold and len(self.cycles) < n:
            at = f" (sitting {len(self.cycles) + 1} of {n})" if n > 1 else ""
            self.say("work resumed after an idle gap" + at)
            self.resumes.append(resume_times(self.torch, 8 if self.quick else -(-RESUME_TRIES // n)))
            self.say("training steps of several model copies in turn" + at)
            self.cycles.append(cycle_times(self.torch, 3 if self.quick else -(-CYCLE_ROUNDS // n)))
            if self.handover:
                self.say("pipeline hand-overs (gloo, 2 processes)" + at)
                steps = QUICK_HANDOVER_STEPS if self.quick else -(-P2P_HANDOVER_STEPS // n)
                self.handovers.append(handover_sitting(steps))
                self.say("point-to-point send (gloo, 2 processes)" + at)
                self.p2ps.append(gloo_fit(self.p2p_sizes, "p2p"))
        if self.corun and not last and len(self.taken) < CORUN_SITTINGS - 1:
            self.say("compute beside a second busy process" + self.label())
            self.taken.append(corun_sitting(self.torch))

    def cycle(self) -> tuple:
        return cycle_curve(*self.cycles)

    def resume(self) -> tuple:
        return resume_curve(*self.resumes)

    def handover_ns(self, bandwidth: float) -> dict:
        """``p2p_handover`` of the pooled hand-overs (empty where none were measured)."""
        pooled = [x for s in self.handovers for x in s.handovers_ns]
        return {"gloo": handover_latency_ns(pooled, bandwidth)} if self.handover else {}

    def p2p(self) -> dict:
        """The point-to-point figures of the sittings pooled (:func:`~daydream.calibrate_procs.pool_p2p`),
        each as the profile keeps it (``{field: {"gloo": figure}}``; empty where none were measured)."""
        return {k: {"gloo": v} for k, v in pool_p2p(self.p2ps).items()} if self.p2ps else {}

    def post_ns(self) -> dict:
        """``p2p_post`` of the pooled hand-over sittings' posts (:func:`pipeline_post_ns`; empty
        where none were timed)."""
        post = pipeline_post_ns(self.handovers)
        return {"gloo": post} if post else {}


def _calibrate(device, quick, collectives, progress, threads) -> DeviceProfile:
    try:
        import torch
    except ImportError:
        raise DaydreamError("calibration needs torch (make install, or pip install torch)") from None
    dev = torch.device(device)
    if threads:
        torch.set_num_threads(threads)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DaydreamError("no CUDA device: calibrate the CPU with --device cpu")
    sizes = QUICK_SIZES if quick else SIZES
    min_time_s = 0.01 if quick else 0.1
    say = progress or (lambda msg: None)
    matmul, conv, bmm, gconv, ew = {}, {}, {}, {}, {}
    cpu = dev.type == "cpu"
    sittings = _Sittings(torch, say, collectives and cpu and not quick, cpu, quick, handover=collectives and cpu,
                         p2p_sizes=sizes["allreduce"])
    sittings.take()
    for dt in _DTYPES:
        tdt = getattr(torch, dt)
        say(f"matmul {dt}")
        matmul[dt] = _matmul_curve(torch, dev, tdt, sizes["matmul"], min_time_s)
        say(f"conv2d {dt}")
        conv[dt] = _conv_curve(torch, dev, tdt, sizes["conv"], min_time_s)
        for n in (FUSED_COPIES if dt == "float32" else (BMM_COPIES,)):
            say(f"batched matmul and grouped conv2d {dt}, {n} copies")
            # all but the largest size (n copies of it take long), at least one (--quick has one conv)
            bmm[f"{dt}x{n}"] = _bmm_curve(torch, dev, tdt, sizes["matmul"][:-1] or sizes["matmul"], min_time_s,
                                          copies=n)
            gconv[f"{dt}x{n}"] = _conv_curve(torch, dev, tdt, sizes["conv"][:-1] or sizes["conv"], min_time_s,
                                             groups=n)
        say(f"elementwise {dt}")
        ew[dt] = _elementwise_curve(torch, dev, tdt, sizes["elementwise"], min_time_s)
    say("in-place elementwise float32")
    inplace = {"float32": _inplace_curve(torch, dev, sizes["elementwise"], min_time_s)}
    sittings.take()
    say("op overhead")
    overhead = _op_overhead_ns(torch, dev, min_time_s)
    say("DataLoader worker hand-over")
    fetch = _loader_fetch(torch)
    say("activation checkpointing call overhead")
    ckpt, ckpt_op = _checkpoint_ns(torch, dev)
    say("DistributedDataParallel's own overhead (1-rank gloo group)")
    ddp_call, ddp_tensor = ddp_ns(torch, dev) if cpu else ((0, 0), (0, 0))
    compiled = compiled_tensor = (0, 0)
    if not quick:
        say("torch.compile call overhead (compiles two tiny models, ~20 s)")
        compiled, compiled_tensor = _compiled_call_ns(torch, dev)
    sittings.take(last=True)
    resume, cycle = sittings.resume(), sittings.cycle()
    coll, p2p, corun, spread, wake = {}, {}, 1.0, (), {}
    if collectives:
        say("compute beside a second busy process" + sittings.label())
        corun = corun_factor(torch, sittings.taken) if cpu else 1.0
        if cpu:
            say(f"speed of processes started together ({PROCESS_SPREAD_PAIRS} pairs)")
            spread = process_spread(warn=lambda m: say(f"warning: {m}"))
        say("all-reduce (gloo, 2 processes)")
        coll["gloo"] = gloo_fit(sizes["allreduce"])
        if cpu:
            say("all-reduce after compute (gloo, 2 processes)")
            wake["gloo"] = gloo_wake_ns()
        if not sittings.p2ps:       # no CPU sittings (a GPU's calibration): one sitting here
            say("point-to-point send (gloo, 2 processes)")
            sittings.p2ps.append(gloo_fit(sizes["allreduce"], "p2p"))
        p2p = sittings.p2p()
        p2p["p2p_handover"] = sittings.handover_ns(p2p["p2p"]["gloo"][0])
        p2p["p2p_post"] = sittings.post_ns()
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
    else:
        name = f"CPU {os.uname().machine} x{torch.get_num_threads()} threads"
    return DeviceProfile(name=name, kind="gpu" if dev.type == "cuda" else "cpu", matmul=matmul, conv=conv,
                         bmm=bmm, gconv=gconv, elementwise=ew, inplace=inplace, op_overhead_ns=overhead,
                         collective=coll, **p2p,
                         collective_wake=wake,
                         corun=corun, process_spread=spread, resume=resume, cycle=cycle,
                         threads=torch.get_num_threads(), loader_fetch=fetch, compiled_call_ns=compiled,
                         compiled_tensor_ns=compiled_tensor,
                         checkpoint_call_ns=ckpt, checkpoint_op_ns=ckpt_op, ddp_call_ns=ddp_call,
                         ddp_tensor_ns=ddp_tensor,
                         source=f"{measured_on()} {time.strftime('%Y-%m-%d %H:%M')}"
                                f" torch {torch.__version__}")
