"""A small ResNet-style CNN (conv, BatchNorm, in-place ReLU, residuals) on synthetic images.

Run ``python -m daydream.workloads.cnn --help`` for the flags.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .common import run

#: default --batch-size
BATCH_SIZE = 64

__all__ = ["BATCH_SIZE", "add_args", "BasicBlock", "SmallResNet", "build", "main"]


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and a residual connection."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class SmallResNet(nn.Module):
    """Stem, ``stages`` stages of ``blocks`` BasicBlocks (channels doubling), pooled head."""

    def __init__(self, channels: int, stages: int, blocks: int, classes: int, use_checkpoint: bool = False):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, 1, 1, bias=False), nn.BatchNorm2d(channels),
                                  nn.ReLU(inplace=True))
        layers, cin = [], channels
        for s in range(stages):
            cout = channels * 2**s
            layers.append(nn.Sequential(*(BasicBlock(cin if b == 0 else cout, cout, 2 if (b == 0 and s > 0) else 1)
                                          for b in range(blocks))))
            cin = cout
        self.stages = nn.ModuleList(layers)
        self.fc = nn.Linear(cin, classes)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        x = self.stem(x)
        for stage in self.stages:
            x = checkpoint(stage, x, use_reentrant=False) if self.use_checkpoint else stage(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def add_args(parser) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--channels", type=int, default=16)
    g.add_argument("--stages", type=int, default=3)
    g.add_argument("--blocks", type=int, default=1, help="BasicBlocks per stage")
    g.add_argument("--image-size", type=int, default=32)
    g.add_argument("--classes", type=int, default=10)


def _loss(model, x, y):
    return F.cross_entropy(model(x), y)


def build(args, device):
    """ResNet-style CNN classifier over synthetic images."""
    n = args.batch_size * args.dataset_batches
    model = SmallResNet(args.channels, args.stages, args.blocks, args.classes, args.checkpoint)
    tensors = (torch.randn(n, 3, args.image_size, args.image_size), torch.randint(0, args.classes, (n,)))
    return model, tensors, _loss


def main(argv=None):
    """Entry point: parse flags and train."""
    return run("cnn", build, argv, add_args, batch_size=BATCH_SIZE)


if __name__ == "__main__":
    main()
