"""The yardstick for the library's speed: nanoGPT's ``model.py`` (Karpathy, 2022), its code path op for op.

Written again here (nanoGPT is not a dependency), with nanoGPT's module names and structure, so
that ``python -m benchmarks`` compares the library with what nanoGPT actually runs on a training
step, ``logits, loss = model(X, Y)``:

- one ``c_attn`` linear layer for Q, K and V, split and viewed into heads;
- ``F.scaled_dot_product_attention(..., is_causal=True)`` (nanoGPT's "flash" branch);
- a ``LayerNorm`` module that calls ``F.layer_norm`` (with or without a bias);
- ``nn.GELU()``: the exact GELU, as nanoGPT (GPT-2 itself uses the tanh approximation;
  ``GPTConfig(gelu_approximate="tanh")`` selects it, the one setting nanoGPT does not have);
- ``nn.Dropout`` modules where nanoGPT has them, called even at ``p=0``;
- positions looked up with ``wpe(torch.arange(t))``, the head tied to ``wte``;
- the loss computed in ``forward``: ``F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)``.

Nothing in it reads a value back from the tensors (no ``.item()``, no range check). :func:`from_library`
copies a library ``tl.GPT2``'s weights into it, so the benchmark can check that the two compute the
same function before it compares their speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    gelu_approximate: str = "none"  # nanoGPT: nn.GELU(), exact; "tanh": GPT-2's approximation


class LayerNorm(nn.Module):
    """nanoGPT's LayerNorm: ``F.layer_norm`` with an optional bias."""

    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # Q, K, V in one product
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)  # nanoGPT's: used only by its non-flash branch
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        # (B, T, C) -> (B, n_head, T, head size): views, no copies
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # the heads side by side again
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU(approximate=config.gelu_approximate)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's ``GPT``; ``forward(idx, targets)`` returns ``(logits, loss)`` as nanoGPT's does."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, one tensor
        # nanoGPT's initialisation (from_library overwrites it with a library model's weights)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * config.n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            else:
                nn.init.zeros_(p) if name.endswith("bias") else nn.init.ones_(p)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        b, t = idx.size()
        assert t <= self.config.block_size, f"sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:  # nanoGPT's inference shortcut: the head on the last position only
            logits, loss = self.lm_head(x[:, [-1], :]), None
        return logits, loss

    def loss(self, idx: Tensor, targets: Tensor) -> Tensor:
        """What the benchmark's training step calls (``tl.TrainStep``'s default loss): nanoGPT's ``model(X, Y)``.

        nanoGPT's ``get_batch`` stacks its batches into new tensors; the library's samplers return
        views of one window tensor, which ``targets.view(-1)`` cannot flatten: copy them first."""
        return self(idx.contiguous(), targets.contiguous())[1]

    def full_logits(self, idx: Tensor) -> Tensor:
        """``(batch, seq, vocab)`` logits at every position, as ``forward`` computes them with targets."""
        return self(idx, torch.zeros_like(idx))[0]


def from_library(model: nn.Module) -> GPT:
    """A :class:`GPT` with the weights of a library ``tl.GPT2`` (pre-norm LayerNorm, GELU, learned positions, tied head)."""
    c = model.config
    if (c.ffn not in ("gelu", "gelu_tanh") or (c.norm, c.norm_position, c.positional, c.tie_weights)
            != ("layernorm", "pre", "learned", True) or c.d_ff not in (None, 4 * c.d_model) or c.norm_eps != 1e-5):
        raise ValueError("from_library copies GPT-2-style models only (GELU, pre-norm LayerNorm, learned positions, "
                         "tied head, d_ff = 4 d_model, norm_eps 1e-5)")
    config = GPTConfig(block_size=c.n_ctx, vocab_size=c.vocab_size, n_layer=c.n_layers, n_head=c.n_heads,
                       n_embd=c.d_model, dropout=c.dropout, bias=c.bias,
                       gelu_approximate="tanh" if c.ffn == "gelu_tanh" else "none")
    plain = GPT(config)
    tr = plain.transformer
    with torch.no_grad():
        tr.wte.weight.copy_(model.token_embedding.weight[: c.vocab_size])
        tr.wpe.weight.copy_(model.position_embedding.weight)
        tr.ln_f.load_state_dict(model.norm_f.state_dict())
        for ours, theirs in zip(model.blocks, tr.h):
            a = ours.attn
            theirs.attn.c_attn.weight.copy_(torch.cat([a.W_Q.weight, a.W_K.weight, a.W_V.weight]))
            if c.bias:
                theirs.attn.c_attn.bias.copy_(torch.cat([a.W_Q.bias, a.W_K.bias, a.W_V.bias]))
            theirs.attn.c_proj.load_state_dict(a.W_O.state_dict())
            theirs.mlp.c_fc.load_state_dict(ours.ffn.W_in.state_dict())
            theirs.mlp.c_proj.load_state_dict(ours.ffn.W_out.state_dict())
            theirs.ln_1.load_state_dict(ours.norm_1.state_dict())
            theirs.ln_2.load_state_dict(ours.norm_2.state_dict())
    return plain
