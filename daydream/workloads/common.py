"""Shared flags and the training loop of the bundled workloads.

The workloads are ordinary training scripts (model, optimizer, DataLoader
over synthetic tensors, loop); nothing in them knows about daydream, so
``daydream trace -- python -m daydream.workloads.mlp`` traces them like any
user script.  Flags select the variants that what-if validation needs:
optimizer and its implementation (for-loop / foreach / fused), parameter
dtype and autocast, DataLoader workers, ``torch.compile``, activation
checkpointing, and DDP under ``torchrun``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

__all__ = [
    "add_common_args",
    "make_optimizer",
    "make_loader",
    "autocast_context",
    "setup_distributed",
    "shut_down_distributed",
    "train",
    "parse_args",
    "prepare",
    "Workload",
    "run",
]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def add_common_args(parser: argparse.ArgumentParser, batch_size: int, steps: int = 20) -> None:
    """Add the flags every workload shares."""
    g = parser.add_argument_group("training")
    g.add_argument("--batch-size", type=int, default=batch_size)
    g.add_argument("--steps", type=int, default=steps, help="optimizer steps to run")
    g.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="sgd")
    g.add_argument("--optimizer-impl", choices=("default", "for-loop", "foreach", "fused"), default="default",
                   help="torch.optim implementation (fused needs torch support for the device)")
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    g.add_argument("--dtype", choices=tuple(_DTYPES), default="float32", help="parameter dtype")
    g.add_argument("--autocast", choices=("none", "bfloat16", "float16"), default="none",
                   help="mixed precision via torch.autocast")
    g.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes")
    g.add_argument("--loader", choices=("batched", "per-sample"), default="batched",
                   help="index the synthetic dataset per batch, or per sample with collation")
    g.add_argument("--dataset-batches", type=int, default=8,
                   help="distinct synthetic batches (the loader cycles over them)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")
    g.add_argument("--checkpoint", action="store_true", help="activation checkpointing per block")
    g.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    g.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--quiet", action="store_true", help="print only the summary line")
    g.add_argument("--step-times", action="store_true",
                   help="also print every step's time (a 'step times ms:' line, for benchmarks)")


def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def make_optimizer(params, args) -> torch.optim.Optimizer:
    """The optimizer selected by ``--optimizer`` / ``--optimizer-impl``."""
    impl = {}
    if args.optimizer_impl == "for-loop":
        impl = {"foreach": False}
    elif args.optimizer_impl == "foreach":
        impl = {"foreach": True}
    elif args.optimizer_impl == "fused":
        impl = {"fused": True}
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum, **impl)
    cls = torch.optim.Adam if args.optimizer == "adam" else torch.optim.AdamW
    return cls(params, lr=args.lr, **impl)


def make_loader(tensors: tuple[torch.Tensor, ...], args) -> DataLoader:
    """A shuffling DataLoader over synthetic tensors (CPU; moved to the device in the loop).

    ``--loader batched`` (default) indexes the dataset once per batch with a
    ``BatchSampler``; ``--loader per-sample`` fetches and collates sample by
    sample, as image datasets do (many small CPU ops per batch).
    """
    dataset = TensorDataset(*tensors)
    common = dict(num_workers=args.num_workers, pin_memory=torch.cuda.is_available() and args.device != "cpu",
                  persistent_workers=args.num_workers > 0)
    if args.loader == "per-sample":
        return DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True, **common)
    sampler = BatchSampler(RandomSampler(dataset), args.batch_size, drop_last=True)
    return DataLoader(dataset, batch_size=None, sampler=sampler, **common)


def autocast_context(args, device: torch.device):
    """``torch.autocast`` for ``--autocast``, else a null context."""
    if args.autocast == "none":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_DTYPES[args.autocast])


def setup_distributed(model: torch.nn.Module, device: torch.device):
    """Wrap in DDP when launched by torchrun with ``WORLD_SIZE > 1`` (gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return model, 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank()
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids), rank, world


def train(model, loader, loss_fn: Callable, optimizer, args, device, on_step: Callable | None = None) -> list[float]:
    """Run ``args.steps`` optimizer steps, cycling over ``loader``; return step times (s)."""
    model.train()
    times: list[float] = []
    step = 0
    t0 = time.perf_counter()
    while step < args.steps:
        for batch in loader:
            inputs = [t.to(device, non_blocking=True) for t in batch]
            optimizer.zero_grad(set_to_none=True)
            with autocast_context(args, device):
                loss = loss_fn(model, *inputs)
            loss.backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            now = time.perf_counter()
            times.append(now - t0)
            t0 = now
            step += 1
            if on_step is not None:
                on_step(step, loss)
            if not args.quiet and (step == 1 or step % 10 == 0 or step == args.steps):
                print(f"step {step:4d}  loss {loss.item():.4f}  {times[-1] * 1e3:8.2f} ms", flush=True)
            if step >= args.steps:
                break
    return times


def parse_args(name: str, argv, add_args, batch_size: int, description: str | None = None):
    """Parse a workload's own flags plus the common ones; seed torch, set its threads.

    Returns (args, device).
    """
    parser = argparse.ArgumentParser(prog=f"python -m daydream.workloads.{name}", description=description)
    if add_args is not None:
        add_args(parser)
    add_common_args(parser, batch_size=batch_size)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    return args, resolve_device(args.device)


def prepare(name: str, build: Callable, argv=None, add_args: Callable | None = None, batch_size: int = 32):
    """Parse flags and build everything a training run needs.

    Parameters
    ----------
    name : str
        Workload name for messages.
    build : callable
        ``build(args, device) -> (model, tensors, loss_fn)``.
    argv : list of str, optional
        Defaults to ``sys.argv[1:]``.
    add_args : callable, optional
        Adds the workload's own size flags to the parser.

    Returns
    -------
    Workload
        Model (moved, cast, DDP-wrapped, compiled as flagged), loader, loss,
        optimizer, parsed args, device, rank and world size.
    """
    args, device = parse_args(name, argv, add_args, batch_size, build.__doc__)
    model, tensors, loss_fn = build(args, device)
    model = model.to(device=device, dtype=_DTYPES[args.dtype])
    tensors = tuple(t.to(_DTYPES[args.dtype]) if t.is_floating_point() else t for t in tensors)
    model, rank, world = setup_distributed(model, device)
    optimizer = make_optimizer(model.parameters(), args)
    if args.compile:
        model = torch.compile(model)
    return Workload(model, make_loader(tensors, args), loss_fn, optimizer, args, device, rank, world)


@dataclass(frozen=True)
class Workload:
    """A built training run (see :func:`prepare`)."""

    model: torch.nn.Module
    loader: DataLoader
    loss_fn: Callable
    optimizer: torch.optim.Optimizer
    args: argparse.Namespace
    device: torch.device
    rank: int
    world_size: int

    def train(self, steps: int | None = None, on_step: Callable | None = None) -> list[float]:
        """Run ``steps`` (default ``--steps``) optimizer steps; return per-step seconds."""
        args = self.args if steps is None else argparse.Namespace(**{**vars(self.args), "steps": steps})
        return train(self.model, self.loader, self.loss_fn, self.optimizer, args, self.device, on_step)


def run(name: str, build: Callable, argv=None, add_args: Callable | None = None, batch_size: int = 32) -> list[float]:
    """Parse flags, build the workload, train, print a summary; return step times (s)."""
    w = prepare(name, build, argv, add_args, batch_size)
    times = w.train()
    if times:
        med = statistics.median(times[1:] or times) * 1e3
        print(f"{name}: {len(times)} steps, median step {med:.2f} ms (rank {w.rank}/{w.world_size}, {w.device})",
              file=sys.stdout, flush=True)
        if w.args.step_times:
            print("step times ms: " + " ".join(f"{t * 1e3:.3f}" for t in times), flush=True)
    if w.world_size > 1:
        del w
        shut_down_distributed()
    return times


def shut_down_distributed() -> None:
    """Destroy the process group while the interpreter is fully alive, after the objects that
    hold it (DDP, DTensor meshes, pipeline stages: drop your references first) are collected.

    Otherwise gloo's worker threads outlive ``main``: a thread releasing its last
    work object needs the GIL to drop the Python state the work captured, and if
    that happens while the interpreter finalizes the thread is unwound inside a
    destructor and the process aborts ("terminate called without an active
    exception", exit -6) after its work is done: 3 of 50 plain 2-rank DDP runs of
    the bundled MLP, 7 of 60 traced (torch 2.13, gloo, this VM).
    """
    import gc

    import torch.distributed as dist

    gc.collect()            # DDP and autograd state sit in reference cycles
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
