"""The bundled transformer trained with Megatron-style tensor parallelism (torch's TP API).

Run on one process it trains the unsplit model (the baseline that
``tensor-parallel`` predicts from); under ``torchrun --nproc_per_node T`` (gloo
on CPU, NCCL on GPU) every block's attention and MLP are split with
``torch.distributed.tensor.parallel``: ``ColwiseParallel`` for the QKV
projection and the first MLP linear, ``RowwiseParallel`` for the output
projection and the second MLP linear, on a one-dimensional ``DeviceMesh``.
Embeddings, norms and the LM head stay replicated; every rank sees the same
batch (tensor parallelism splits the model, not the data).

The QKV projection's output features are grouped per head (``[q, k, v]`` of
head 0, then head 1, ...), so a column split hands each rank whole heads and
the attention runs on ``heads / T`` local heads, as in Megatron-LM.

Examples
--------
``python -m daydream.workloads.tensor_parallel --steps 5 --threads 1``
``torchrun --standalone --nproc_per_node 2 -m daydream.workloads.tensor_parallel --threads 1``
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch import nn

from ..calibrate_procs import first_result
from ..optimizations.tensor_parallel import API_MESH_RANKS
from .common import Workload, add_common_args, make_loader, make_optimizer, resolve_device, shut_down_distributed, train
from .transformer import TinyGPT, _loss

__all__ = ["HeadAttention", "MegatronPair", "build", "parallelize", "measure_api_overhead", "API_MESH_RANKS", "main"]


class HeadAttention(nn.Module):
    """Causal self-attention whose QKV output is laid out head by head (splittable by heads)."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.head_dim = d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, _ = x.shape
        qkv = self.qkv(x)
        h = qkv.shape[-1] // (3 * self.head_dim)   # local heads: all of them, or heads / T under TP
        q, k, v = qkv.view(b, t, h, 3, self.head_dim).permute(3, 0, 2, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, h * self.head_dim))


def add_args(parser) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--vocab", type=int, default=1024)
    g.add_argument("--d-model", type=int, default=256)
    g.add_argument("--heads", type=int, default=8)
    g.add_argument("--layers", type=int, default=2)
    g.add_argument("--seq-len", type=int, default=128)


def build(args, device):
    """TinyGPT with head-grouped attention over random token sequences."""
    n = args.batch_size * args.dataset_batches
    tokens = torch.randint(0, args.vocab, (n, args.seq_len + 1))
    model = TinyGPT(args.vocab, args.d_model, args.heads, args.layers, args.seq_len, args.checkpoint)
    for block in model.blocks:
        block.attn = HeadAttention(args.d_model, args.heads)
    return model, (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()), _loss


def parallelize(model: nn.Module, world: int, device: torch.device) -> nn.Module:
    """Split every block Megatron-style over a 1-D mesh of ``world`` ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device.type, (world,))
    plan = {"attn.qkv": ColwiseParallel(), "attn.proj": RowwiseParallel(),
            "mlp.0": ColwiseParallel(), "mlp.2": RowwiseParallel()}
    for block in model.blocks:
        parallelize_module(block, mesh, plan)
    return model


class _AllReduceInBackward(torch.autograd.Function):
    """Megatron's ``f``: identity in forward, all-reduce of the gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class _AllReduceInForward(torch.autograd.Function):
    """Megatron's ``g``: all-reduce in forward, identity in backward."""

    @staticmethod
    def forward(ctx, x):
        import torch.distributed as dist

        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class MegatronPair(nn.Module):
    """A column/row-parallel linear pair split by hand over ``world`` ranks, on plain tensors:
    the same arithmetic per rank and the same two all-reduces as torch's TP API's
    ``ColwiseParallel`` / ``RowwiseParallel`` pair, without DTensor."""

    def __init__(self, features: int, world: int, hidden: int = 0):
        super().__init__()
        hidden = hidden or features
        self.col = nn.Linear(features, hidden // world)
        self.row = nn.Linear(hidden // world, features, bias=False)
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        h = F.relu(self.col(_AllReduceInBackward.apply(x)))
        return _AllReduceInForward.apply(self.row(h)) + self.bias


#: Bytes rewritten between two timed calls of :func:`measure_api_overhead`: more than a core's
#: L2 (2 MiB on the development VM's EPYC), so each call starts with the caches that a training
#: step's other work left, as the traced pairs do (timed back to back, hot, DTensor's forward read
#: about half its cost in the real 2-rank run's trace).
EVICT_BYTES = 8 << 20


#: Rounds (``calls`` all-reduces each) in which :func:`measure_api_overhead` times the two
#: collective paths in turns.
ALLREDUCE_ROUNDS = (12, 20)


def measure_api_overhead(threads: int = 1, calls: int = 100, repeats: int = 9, profiled: bool = True,
                         input_dims: int = 2, evict_bytes: int = EVICT_BYTES, allreduce_bytes: int = 0,
                         input_shape=None, hidden: int = 0) -> dict:
    """Host time torch's TP API adds to one column/row pair: forward, backward and optimizer ns.

    On :data:`API_MESH_RANKS` gloo processes (a core each where there are
    enough), a tiny two-linear MLP (arithmetic negligible) is split with
    ``ColwiseParallel``/``RowwiseParallel`` on a mesh of them, and the same
    pair is split by hand on plain tensors with the same two all-reduces
    (:class:`MegatronPair`).  Each call is timed by the training thread's CPU
    time (a rank blocked in a collective's wait spends none, so the two
    variants' all-reduces and the ranks' skew drop out), after ``evict_bytes``
    of other data were rewritten (untimed; :data:`EVICT_BYTES`).  The input
    has ``input_dims`` dimensions, as the traced linears' input (a
    transformer's ``(batch, sequence, features)``: DTensor then dispatches the
    views that fold it into a matrix too, about 1.3x the cost of a matrix
    input).  With ``input_shape`` (the traced column linear's input, every
    dimension) and ``hidden`` (its output features) the pair has the traced
    sizes instead: DTensor copies whole activations and gradients where it
    wraps, redistributes and all-reduces them, which a pair of 8 features
    leaves out (on the validation transformer's input, 256 features on 8 x
    128 tokens, 16 to 256 hidden features read 0.85-1.00 / 0.96-1.23 ms
    forward / backward, against 0.71-0.74 / 0.78-0.81 for 8 features on
    ``(2, 4, 8)``; docs/validation-log.md, "Session 88").  The two variants take turns ``repeats`` times; the median of
    the paired differences (rank 0's) is DTensor's wrapping, sharding
    propagation, redistribution and functional-collective bookkeeping (and,
    for a momentum SGD step over the pair's parameters, DTensor's dispatch of
    the optimizer's foreach ops).  A one-rank mesh leaves out the
    redistributions.
    With ``profiled`` both run under ``torch.profiler`` with shapes recorded,
    as in a ``daydream trace`` (the many small ops of DTensor's dispatch each
    pay the profiler's per-op cost, as the traced baseline's ops did).

    With ``allreduce_bytes``, the same processes also time an all-reduce of
    that many bytes as torch's TP API runs it in training (functional
    collectives, right after the matmul that makes its input, its first use
    waiting; from the later rank's start to the later end, both ranks
    reading one clock: ``allreduce_in_line_ns``) and, in turns with it
    (:data:`ALLREDUCE_ROUNDS`), as ``daydream calibrate`` does (back to back
    on one buffer: ``allreduce_calibrated_ns``, for comparison).
    Starts its own processes.
    """
    if input_dims < 2:
        raise ValueError(f"input_dims must be at least 2, got {input_dims}")
    shape = tuple(int(d) for d in input_shape) if input_shape else (2,) * (input_dims - 2) + (4, 8)
    pairs, paths = first_result(_api_overhead_worker, API_MESH_RANKS,
                                (API_MESH_RANKS, threads, calls, repeats, profiled, shape, int(hidden or shape[-1]),
                                 evict_bytes, allreduce_bytes), 600)
    diff = [[s - p for s, p in zip(split, plain)] for plain, split in pairs]
    fwd, both, step = (max(0.0, statistics.median(d[k] for d in diff)) for k in range(3))
    out = {"forward_ns": fwd, "backward_ns": max(0.0, both - fwd), "optimizer_ns": step,
           "torch": torch.__version__, "threads": threads, "profiled": profiled, "mesh_ranks": API_MESH_RANKS,
           "input_dims": len(shape), "evict_bytes": evict_bytes, "allreduce_bytes": allreduce_bytes,
           "input_shape": list(shape) if input_shape else None, "hidden": int(hidden) if input_shape else 0}
    if paths:
        out.update({f"allreduce_{k}_ns": v for k, v in paths.items()})
    return out


def _api_overhead_worker(rank, port, world, threads, calls, repeats, profiled, shape, hidden, evict_bytes,
                         allreduce_bytes, q) -> None:
    """One rank of :func:`measure_api_overhead`: on rank 0's queue, per repeat ``(plain, split)``
    each ``(forward, forward+backward, step)`` ns a call, and :func:`_allreduce_paths`' means."""
    import contextlib
    import time

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if len(os.sched_getaffinity(0)) >= world:
        from ..collect.runner import pin_rank

        pin_rank(rank, world)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    split = nn.Sequential(nn.Linear(shape[-1], hidden), nn.ReLU(), nn.Linear(hidden, shape[-1]))
    parallelize_module(split, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    plain = MegatronPair(shape[-1], world, hidden)
    x = torch.randn(*shape, requires_grad=True)
    other = torch.zeros(max(1, evict_bytes // 4))

    def per_call(fn):    # this thread's CPU time: a rank blocked in a collective's wait spends none
        spent = 0
        for _ in range(calls):
            other.add_(1.0)
            t0 = time.thread_time_ns()
            fn()
            spent += time.thread_time_ns() - t0
        return spent / calls

    models = {"plain": plain, "split": split}
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9) for k, m in models.items()}
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) \
        if profiled else contextlib.nullcontext()
    out = []
    with prof:
        for k, m in models.items():           # warm-up (sharding propagation caches)
            per_call(lambda: m(x).sum().backward())
            per_call(opts[k].step)
        for _ in range(repeats):              # take turns: a spell of the machine falls on both
            out.append(tuple((per_call(lambda: m(x).sum()), per_call(lambda: m(x).sum().backward()),
                              per_call(opts[k].step)) for k, m in models.items()))
        paths = _allreduce_paths(rank, world, allreduce_bytes) if allreduce_bytes > 0 else None
    plain = split = mesh = m = models = opts = None     # noqa: F841 - dropped before the process group
    shut_down_distributed()
    if rank == 0:
        q.put((out, paths))


def _allreduce_paths(rank: int, world: int, nbytes: int) -> dict:
    """``{"calibrated": ns, "in_line": ns}``: the mean all-reduce of ``nbytes`` as ``daydream
    calibrate`` times it (``dist.all_reduce`` back to back on one buffer, after a barrier: the
    loop's time over its calls) and as torch's TP API runs it in training (functional
    collectives, right after the matmul that makes its input, its first use waiting; from the
    last rank's start to the last rank's end), in turns, :data:`ALLREDUCE_ROUNDS`."""
    import time

    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    rows = max(1, nbytes // 1024)                        # float32 [rows, 256]: nbytes
    a, w, buf = torch.randn(rows, 256), torch.randn(256, 256), torch.zeros(rows, 256)
    group = dist.group.WORLD
    for _ in range(3):                                   # warm-up
        dist.all_reduce(buf)
        funcol.all_reduce(a @ w, "sum", group).add_(0.0)
    loops, calls_in_line = [], []
    rounds, calls = ALLREDUCE_ROUNDS
    for _ in range(rounds):
        dist.barrier()
        t0 = time.monotonic_ns()
        for _ in range(calls):
            dist.all_reduce(buf)
        loops.append((time.monotonic_ns() - t0) / calls)
        for _ in range(calls):
            y = a @ w
            t0 = time.monotonic_ns()
            funcol.all_reduce(y, "sum", group).add_(0.0)     # the first use waits
            calls_in_line.append((t0, time.monotonic_ns()))
    every = [None] * world
    dist.all_gather_object(every, calls_in_line)
    return {"calibrated": statistics.fmean(loops),
            "in_line": statistics.fmean(max(c[1] for c in call) - max(c[0] for c in call) for call in zip(*every))}


def prepare(argv=None) -> Workload:
    parser = argparse.ArgumentParser(prog="python -m daydream.workloads.tensor_parallel", description=__doc__)
    add_args(parser)
    add_common_args(parser, batch_size=8)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if args.heads % world or args.d_model % args.heads:
        parser.error(f"--heads {args.heads} must divide --d-model {args.d_model} and be divisible by "
                     f"the {world} tensor-parallel ranks")
    model, tensors, loss_fn = build(args, device)
    model = model.to(device)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        model = parallelize(model, world, device)
    optimizer = make_optimizer(model.parameters(), args)
    return Workload(model, make_loader(tensors, args), loss_fn, optimizer, args, device, rank, world)


def main(argv=None):
    """Entry point: parse flags, split the model if launched with several ranks, train."""
    w = prepare(argv)
    times = train(w.model, w.loader, w.loss_fn, w.optimizer, w.args, w.device)
    if times:
        med = statistics.median(times[1:] or times) * 1e3
        print(f"tensor_parallel: {len(times)} steps, median step {med:.2f} ms "
              f"(rank {w.rank}/{w.world_size}, {w.device})", file=sys.stdout, flush=True)
    if w.world_size > 1:
        del w
        shut_down_distributed()
    return times


if __name__ == "__main__":
    main()
