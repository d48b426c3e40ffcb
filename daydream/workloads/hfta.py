"""N copies of the bundled MLP trained as one horizontally fused job (HFTA).

A hyper-parameter sweep over the learning rate: copy ``i`` trains with
``lr * 2**-i``.  Every layer holds the N copies' parameters stacked along a
leading model dimension: a linear layer is one ``baddbmm`` over the N
copies, ReLU and the loss run once over N times the elements, and one
optimizer (:class:`FusedSGD`, SGD with momentum and a learning rate per
copy) updates the stacked parameters.  All copies read the same batch.  The
copies are independent: the loss is the sum of the copies' losses, so each
copy's gradient is its own.

With ``--models 1`` it trains one copy in the fused layout; the baseline of
the ``hfta`` what-if is the plain ``daydream.workloads.mlp`` with the same
flags.

Examples
--------
``python -m daydream.workloads.hfta --models 4 --hidden 512 --batch-size 64 --steps 5 --threads 1``
"""
from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
from torch import nn

from .common import add_common_args, make_loader, resolve_device, train
from .mlp import MLP

__all__ = ["FusedLinear", "FusedMLP", "FusedSGD", "build", "main"]


class FusedLinear(nn.Module):
    """N linear layers as one ``baddbmm``: weight ``[N, in, out]``, bias ``[N, 1, out]``.

    Initialised from N ordinary ``nn.Linear`` layers, so each copy starts as the
    unfused model would.
    """

    def __init__(self, layers):
        super().__init__()
        self.weight = nn.Parameter(torch.stack([lin.weight.detach().t() for lin in layers]).contiguous())
        self.bias = nn.Parameter(torch.stack([lin.bias.detach().unsqueeze(0) for lin in layers]))

    def forward(self, x):   # x: [N, B, in]
        return torch.baddbmm(self.bias, x, self.weight)


class FusedMLP(nn.Module):
    """N copies of :class:`daydream.workloads.mlp.MLP` fused layer by layer."""

    def __init__(self, copies):
        super().__init__()
        self.models = len(copies)
        self.blocks = nn.ModuleList(FusedLinear([c.blocks[i][0] for c in copies]) for i in range(len(copies[0].blocks)))
        self.head = FusedLinear([c.head for c in copies])

    def forward(self, x):   # x: [B, in], shared by every copy
        x = x.unsqueeze(0).expand(self.models, -1, -1)
        for block in self.blocks:
            x = torch.relu_(block(x))
        return self.head(x)


class FusedSGD(torch.optim.Optimizer):
    """SGD with momentum over stacked parameters, one learning rate per copy (dimension 0)."""

    def __init__(self, params, lrs: torch.Tensor, momentum: float = 0.9):
        super().__init__(params, {"momentum": momentum})
        self.neg_lrs = -lrs.detach().clone()

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = torch.clone(p.grad).detach()
                else:
                    buf.mul_(group["momentum"]).add_(p.grad)
                p.addcmul_(buf, self.neg_lrs.view(-1, *([1] * (p.dim() - 1))))
        return None


def _loss(model, x, y):
    logits = model(x)                       # [N, B, classes]
    n, b, c = logits.shape
    return F.cross_entropy(logits.reshape(n * b, c), y.repeat(n), reduction="sum") / b


def add_args(parser) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--models", type=int, default=4, help="copies fused into one job (N)")
    g.add_argument("--model", choices=("mlp",), default="mlp", help="the model that is copied")
    g.add_argument("--in-features", type=int, default=512)
    g.add_argument("--hidden", type=int, default=1024)
    g.add_argument("--layers", type=int, default=4)
    g.add_argument("--classes", type=int, default=10)


def build(args):
    """Fused model, synthetic data and per-copy learning rates."""
    if args.models < 1:
        raise SystemExit(f"hfta: --models must be at least 1, got {args.models}")
    copies = [MLP(args.in_features, args.hidden, args.layers, args.classes) for _ in range(args.models)]
    n = args.batch_size * args.dataset_batches
    tensors = (torch.randn(n, args.in_features), torch.randint(0, args.classes, (n,)))
    lrs = args.lr * torch.pow(2.0, -torch.arange(args.models, dtype=torch.float32))
    return FusedMLP(copies), tensors, lrs


def main(argv=None):
    """Entry point: parse flags, train the fused job, print a summary."""
    parser = argparse.ArgumentParser(prog="python -m daydream.workloads.hfta", description=__doc__.split("\n")[0])
    add_args(parser)
    add_common_args(parser, batch_size=256)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    model, tensors, lrs = build(args)
    model = model.to(device)
    optimizer = FusedSGD(model.parameters(), lrs.to(device), args.momentum)
    times = train(model, make_loader(tensors, args), _loss, optimizer, args, device)
    if times:
        med = statistics.median(times[1:] or times) * 1e3
        print(f"hfta: {args.models} fused {args.model} models, {len(times)} steps, median step {med:.2f} ms",
              flush=True)
    return times


if __name__ == "__main__":
    main()
