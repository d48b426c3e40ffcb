"""A small decoder-only transformer language model on synthetic tokens.

Run ``python -m daydream.workloads.transformer --help`` for the flags.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .common import run

#: default --batch-size
BATCH_SIZE = 32

__all__ = ["BATCH_SIZE", "add_args", "Block", "TinyGPT", "build", "main"]


class Attention(nn.Module):
    """Causal multi-head self-attention (``scaled_dot_product_attention``)."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block: attention and a GELU MLP, each residual."""

    def __init__(self, d_model: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, mlp_ratio * d_model), nn.GELU(),
                                 nn.Linear(mlp_ratio * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token + position embeddings, ``layers`` blocks, final norm, LM head."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, seq_len: int, use_checkpoint=False):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.use_checkpoint = use_checkpoint

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return self.head(self.ln_f(x))


def add_args(parser) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--vocab", type=int, default=1024)
    g.add_argument("--d-model", type=int, default=128)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--layers", type=int, default=2)
    g.add_argument("--seq-len", type=int, default=64)


def _loss(model, idx, targets):
    logits = model(idx)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def build(args, device):
    """Decoder-only LM over random token sequences (next-token targets)."""
    n = args.batch_size * args.dataset_batches
    tokens = torch.randint(0, args.vocab, (n, args.seq_len + 1))
    model = TinyGPT(args.vocab, args.d_model, args.heads, args.layers, args.seq_len, args.checkpoint)
    return model, (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()), _loss


def main(argv=None):
    """Entry point: parse flags and train."""
    return run("transformer", build, argv, add_args, batch_size=BATCH_SIZE)


if __name__ == "__main__":
    main()
