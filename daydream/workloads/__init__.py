"""Bundled training workloads for demos, tests and validation.

Each is an ordinary training script, runnable as ``python -m daydream.workloads.NAME``
(``mlp``, ``cnn``, ``transformer``) with size, optimizer, precision, DataLoader,
compile and checkpointing flags (``--help`` lists them).  They import nothing
from daydream beyond :mod:`daydream.workloads.common`.
"""
__all__ = ["WORKLOADS"]

#: names accepted by ``python -m daydream.workloads.NAME``
WORKLOADS = ("mlp", "cnn", "transformer")
