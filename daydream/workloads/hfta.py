"""N copies of the bundled MLP trained as one horizontally fused job (HFTA).

A hyper-parameter sweep over the learning rate: copy ``i`` trains with
``lr * 2**-i``.  Every layer holds the N copies' parameters stacked along a
leading model dimension: a linear layer is one ``baddbmm`` over the N
copies (``--model cnn``: a convolution is one grouped convolution over the
copies' channels side by side, BatchNorm one op over all of them), ReLU
and the loss run once over N times the elements, and one
optimizer (:class:`FusedSGD`, SGD with momentum and a learning rate per
copy) updates the stacked parameters.  All copies read the same batch.  The
copies are independent: the loss is the sum of the copies' losses, so each
copy's gradient is its own.

With ``--models 1`` it trains one copy in the fused layout; the baseline of
the ``hfta`` what-if is the plain ``daydream.workloads.mlp`` (``cnn``) with
the same flags.

Examples
--------
``python -m daydream.workloads.hfta --models 4 --hidden 512 --batch-size 64 --steps 5 --threads 1``
"""
from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F
from torch import nn

import copy

from .cnn import SmallResNet
from .common import make_loader, parse_args, train
from .mlp import MLP

__all__ = ["FusedLinear", "FusedMLP", "FusedCNN", "FusedSGD", "build", "main"]


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


class _FusedHead(FusedLinear):
    """The classifier of N fused CNNs: input ``[B, N * C]`` (copies' channels side by side)."""

    def forward(self, x):
        n = self.weight.shape[0]
        return super().forward(x.view(x.shape[0], n, -1).transpose(0, 1))


def _fused_conv(convs) -> nn.Conv2d:
    c, n = convs[0], len(convs)
    f = nn.Conv2d(c.in_channels * n, c.out_channels * n, c.kernel_size, c.stride, c.padding,
                  groups=c.groups * n, bias=c.bias is not None)
    with torch.no_grad():
        f.weight.copy_(torch.cat([x.weight for x in convs]))
        if c.bias is not None:
            f.bias.copy_(torch.cat([x.bias for x in convs]))
    return f


def _fused_bn(bns) -> nn.BatchNorm2d:
    f = nn.BatchNorm2d(bns[0].num_features * len(bns), bns[0].eps, bns[0].momentum)
    with torch.no_grad():
        for name in ("weight", "bias", "running_mean", "running_var"):
            getattr(f, name).copy_(torch.cat([getattr(b, name) for b in bns]))
    return f


class FusedCNN(nn.Module):
    """N copies of :class:`daydream.workloads.cnn.SmallResNet` as one network: every
    convolution a grouped convolution (``groups = N``), every BatchNorm over the N copies'
    channels, the classifier a batched GEMM."""

    def __init__(self, copies):
        super().__init__()
        self.models = len(copies)
        self.net = copy.deepcopy(copies[0])
        parts = [dict(c.named_modules()) for c in copies]
        for name, mod in list(self.net.named_modules()):
            same = [p[name] for p in parts]
            if isinstance(mod, nn.Conv2d):
                new = _fused_conv(same)
            elif isinstance(mod, nn.BatchNorm2d):
                new = _fused_bn(same)
            elif isinstance(mod, nn.Linear):
                new = _FusedHead(same)
            else:
                continue
            parent, _, attr = name.rpartition(".")
            setattr(self.net.get_submodule(parent) if parent else self.net, attr, new)

    def forward(self, x):   # x: [B, 3, H, W], shared by every copy
        return self.net(x.repeat(1, self.models, 1, 1))


class FusedSGD(torch.optim.Optimizer):
    """SGD with momentum over stacked parameters, one learning rate per copy (dimension 0)."""

    def __init__(self, params, lrs: torch.Tensor, momentum: float = 0.9):
        super().__init__(params, {"momentum": momentum})
        self.neg_lrs = -lrs.detach().clone()

    def _lr_of(self, p):
        """Per-copy learning rates shaped to broadcast over ``p``: stacked parameters
        (``[N, ...]``) or copies concatenated along dimension 0 (grouped conv, BatchNorm)."""
        lr = self.neg_lrs
        if p.shape[0] != len(lr):
            lr = lr.repeat_interleave(p.shape[0] // len(lr))
        return lr.view(-1, *([1] * (p.dim() - 1)))

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
                p.addcmul_(buf, self._lr_of(p))
        return None


def _loss(model, x, y):
    logits = model(x)                       # [N, B, classes]
    n, b, c = logits.shape
    return F.cross_entropy(logits.reshape(n * b, c), y.repeat(n), reduction="sum") / b


def add_args(parser) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--models", type=int, default=4, help="copies fused into one job (N)")
    g.add_argument("--model", choices=("mlp", "cnn"), default="mlp", help="the model that is copied")
    g.add_argument("--in-features", type=int, default=512)
    g.add_argument("--hidden", type=int, default=1024)
    g.add_argument("--layers", type=int, default=4)
    g.add_argument("--classes", type=int, default=10)
    g.add_argument("--channels", type=int, default=16, help="cnn: stem channels")
    g.add_argument("--stages", type=int, default=3, help="cnn: stages")
    g.add_argument("--blocks", type=int, default=1, help="cnn: BasicBlocks per stage")
    g.add_argument("--image-size", type=int, default=32, help="cnn: image side")


def build(args):
    """Fused model, synthetic data and per-copy learning rates."""
    if args.models < 1:
        raise SystemExit(f"hfta: --models must be at least 1, got {args.models}")
    n = args.batch_size * args.dataset_batches
    if args.model == "cnn":
        copies = [SmallResNet(args.channels, args.stages, args.blocks, args.classes) for _ in range(args.models)]
        fused = FusedCNN(copies)
        x = torch.randn(n, 3, args.image_size, args.image_size)
    else:
        copies = [MLP(args.in_features, args.hidden, args.layers, args.classes) for _ in range(args.models)]
        fused = FusedMLP(copies)
        x = torch.randn(n, args.in_features)
    tensors = (x, torch.randint(0, args.classes, (n,)))
    lrs = args.lr * torch.pow(2.0, -torch.arange(args.models, dtype=torch.float32))
    return fused, tensors, lrs


def main(argv=None):
    """Entry point: parse flags, train the fused job, print a summary."""
    args, device = parse_args("hfta", argv, add_args, 256, __doc__.split("\n")[0])
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
