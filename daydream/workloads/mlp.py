"""A multi-layer perceptron classifier on synthetic data.

Run ``python -m daydream.workloads.mlp --help`` for the flags.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .common import run

#: default --batch-size
BATCH_SIZE = 256

__all__ = ["BATCH_SIZE", "add_args", "MLP", "build", "main"]


class MLP(nn.Module):
    """``layers`` hidden Linear+ReLU blocks and a classifier head."""

    def __init__(self, in_features: int, hidden: int, layers: int, classes: int, use_checkpoint: bool = False):
        super().__init__()
        dims = [in_features] + [hidden] * layers
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(a, b), nn.ReLU(inplace=True)) for a, b in zip(dims[:-1], dims[1:])
        )
        self.head = nn.Linear(dims[-1], classes)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return self.head(x)


def add_args(parser) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--in-features", type=int, default=512)
    g.add_argument("--hidden", type=int, default=1024)
    g.add_argument("--layers", type=int, default=4)
    g.add_argument("--classes", type=int, default=10)


def _loss(model, x, y):
    return F.cross_entropy(model(x), y)


def build(args, device):
    """MLP classifier over synthetic Gaussian features."""
    n = args.batch_size * args.dataset_batches
    model = MLP(args.in_features, args.hidden, args.layers, args.classes, args.checkpoint)
    tensors = (torch.randn(n, args.in_features), torch.randint(0, args.classes, (n,)))
    return model, tensors, _loss


def main(argv=None):
    """Entry point: parse flags and train."""
    return run("mlp", build, argv, add_args, batch_size=BATCH_SIZE)


if __name__ == "__main__":
    main()
