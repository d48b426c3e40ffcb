"""The top-level ``"daydream"`` object of a collected trace (schema in docs/trace_format.md)."""
from __future__ import annotations

import os
import platform
import sys
from collections import Counter

import torch

__all__ = [
    "SCHEMA_VERSION",
    "module_table",
    "optimizer_info",
    "parameter_dtype",
    "device_info",
    "distributed_info",
    "versions",
    "jsonable",
]

SCHEMA_VERSION = 1


def jsonable(value):
    """``value`` with tensors, dtypes, tuples and other oddities made JSON-safe."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def _param_bytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def module_table(roots, output_bytes: dict[str, int], input_shapes: dict | None = None) -> list[dict]:
    """One row per module reachable from ``roots``, parents before children.

    Parameters
    ----------
    roots : list of torch.nn.Module
        Root modules with their paths already assigned by the layer markers.
    output_bytes : dict
        Output size per module path, where the markers observed it.
    input_shapes : dict, optional
        Shapes of the tensor arguments of a root module's first call, per path
        (``input_shapes`` of the root rows: where the batch size shows).
    """
    rows: list[dict] = []
    seen: set[int] = set()
    for root in roots:
        root_path = root.__dict__.get("_daydream_names", (None, None, type(root).__name__))[2]
        for sub, mod in root.named_modules(prefix=root_path):
            if id(mod) in seen:
                continue
            seen.add(id(mod))
            own = list(mod.parameters(recurse=False))
            bufs = list(mod.buffers(recurse=False))
            rows.append(
                {
                    "path": sub,
                    "type": f"{type(mod).__module__}.{type(mod).__qualname__}",
                    "depth": sub.count("."),
                    "param_bytes": _param_bytes(own),
                    "param_bytes_total": _param_bytes(mod.parameters()),
                    "trainable_param_bytes": _param_bytes(p for p in own if p.requires_grad),
                    "buffer_bytes": _param_bytes(bufs),
                    **({"buffer_dtypes": sorted({str(b.dtype).replace("torch.", "") for b in bufs})} if bufs else {}),
                    "output_bytes": output_bytes.get(sub),
                    "param_shapes": [list(p.shape) for p in own],
                    **({"input_shapes": input_shapes[sub]} if input_shapes and sub in input_shapes else {}),
                }
            )
    return rows


def optimizer_info(optimizer) -> dict:
    """Class, hyper-parameters and parameter count of one optimizer."""
    cls = type(optimizer)
    groups = []
    n_params = n_bytes = 0
    for group in optimizer.param_groups:
        settings = {k: jsonable(v) for k, v in group.items() if k != "params"}
        groups.append(settings)
        n_params += len(group["params"])
        n_bytes += _param_bytes(group["params"])
    defaults = {k: jsonable(v) for k, v in getattr(optimizer, "defaults", {}).items()}
    return {
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "name": cls.__name__,
        "defaults": defaults,
        "param_groups": groups,
        "num_params": n_params,
        "param_bytes": n_bytes,
    }


def parameter_dtype(optimizers, roots) -> str | None:
    """The most common dtype of the trained parameters (by element count)."""
    counts: Counter = Counter()
    params = [p for opt in optimizers for g in opt.param_groups for p in g["params"]]
    if not params:
        params = [p for m in roots for p in m.parameters()]
    for p in params:
        counts[str(p.dtype).replace("torch.", "")] += p.numel()
    return counts.most_common(1)[0][0] if counts else None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info() -> dict:
    """Host CPU and, where present, CUDA device properties."""
    info = {
        "cpu": {
            "name": _cpu_name(),
            "logical_cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "machine": platform.machine(),
        },
        "cuda": [],
    }
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            info["cuda"].append(
                {
                    "index": i,
                    "name": p.name,
                    "total_memory_bytes": int(p.total_memory),
                    "multi_processor_count": int(p.multi_processor_count),
                    "compute_capability": f"{p.major}.{p.minor}",
                }
            )
        info["current_cuda_device"] = torch.cuda.current_device()
    return info


def distributed_info() -> tuple[int, int, dict]:
    """``(rank, world_size, details)`` from torch.distributed or the launcher's env."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        backend = str(dist.get_backend())
    else:
        rank = int(os.environ.get("RANK", "0") or 0)
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        backend = None
    details = {
        "rank": rank,
        "world_size": world,
        "local_rank": int(os.environ.get("LOCAL_RANK", rank) or 0),
        "backend": backend,
    }
    return rank, world, details


def versions() -> dict:
    """Tool, torch and Python versions."""
    try:
        from importlib.metadata import version

        tool = version("daydream")
    except Exception:  # not installed (PYTHONPATH checkout)
        tool = getattr(sys.modules.get("daydream"), "__version__", "unknown")
    return {
        "daydream": tool,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": sys.platform,
    }
