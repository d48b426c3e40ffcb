"""What-if optimizations, one module each, installed as ``daydream.optimizations``.

>>> from daydream.optimizations import get, names
>>> "fused-adam" in names()
True
>>> get("amp:dtype=bfloat16").describe()
'amp:dtype=bfloat16,cast_overhead=True,remeasure=True'
"""
from __future__ import annotations

import importlib

from .base import NotApplicable, Optimization, OptionError, Param, WhatIfContext

__all__ = ["get", "names", "registry", "Optimization", "Param", "WhatIfContext", "NotApplicable",
           "OptionError", "MODULES"]

#: Optimization name -> module (each defines ``OPTIMIZATION``).
MODULES = {
    "amp": "amp",
    "fused-adam": "fused_adam",
    "fusion": "fusion",
    "batchnorm": "batchnorm",
    "data-parallel": "data_parallel",
    "priority-comm": "priority_comm",
    "blueconnect": "blueconnect",
    "vdnn": "vdnn",
    "gist": "gist",
    "checkpointing": "checkpointing",
    "dataloader": "dataloader",
    "batch-size": "batch_size",
    # parallelism and multi-job what-ifs
    "pipeline": "pipeline",
    "tensor-parallel": "tensor_parallel",
    "ptd-p": "ptdp",
    "hfta": "hfta",
    "hydra": "hydra",
    "tessel": "tessel",
    "device": "device",
}


def registry() -> dict:
    """Name -> Optimization class of every module that is present."""
    out = {}
    for name, mod in MODULES.items():
        try:
            m = importlib.import_module(f"{__name__}.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{mod}":
                continue
            raise
        out[name] = m.OPTIMIZATION
    return out


def names() -> list:
    return list(registry())


def get(spec: str) -> Optimization:
    """``"NAME[:k=v,...]"`` to a configured optimization.

    Raises
    ------
    OptionError
        Listing the valid names or parameters.
    """
    name, _, args = spec.partition(":")
    reg = registry()
    cls = reg.get(name.strip())
    if cls is None:
        raise OptionError(f"unknown optimization {name!r} (valid: {', '.join(reg)})")
    return cls.from_spec(args)
