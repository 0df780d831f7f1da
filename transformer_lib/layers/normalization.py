"""LayerNorm and RMSNorm, from scratch.

Taught in chapter 4, *Normalization and residuals* (``book/04_normalization.ipynb``).

    LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias
    RMSNorm(x)   =  x / sqrt(mean(x^2) + eps) * weight

Statistics are over the last (feature) dimension of each position; ``var`` is the biased
(divide by ``d``) variance, as in ``nn.LayerNorm``. ``eps`` sits *inside* the square root.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_choice, check_float_input, check_int, check_positive

NORMS = ("layernorm", "rmsnorm")


def _check_eps(eps: float) -> None:
    check_positive("eps", eps)


def _check_input(x: Tensor, d_model: int, weight: Tensor) -> None:
    check_float_input("x", x, weight)  # an integer x would come back rounded to integers
    if x.dim() == 0 or x.shape[-1] != d_model:
        raise ValueError(f"x must have last dimension d_model={d_model}, got shape {tuple(x.shape)}")


class LayerNorm(nn.Module):
    """Centre and scale each position's features, then apply a learned gain and bias. Defined in chapter 4."""

    def __init__(self, d_model: int, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        check_int("d_model", d_model, low=1)
        _check_eps(eps)
        self.d_model, self.eps = d_model, eps
        self.fused = False  # True: PyTorch's one-kernel F.layer_norm, the same function (chapter 11)
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """``(..., d_model) -> (..., d_model)``."""
        _check_input(x, self.d_model, self.weight)
        if self.fused:
            return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)
        h = x.float()  # statistics in float32: squares overflow float16 and lose bits in bfloat16
        mean = h.mean(dim=-1, keepdim=True)
        var = (h - mean).pow(2).mean(dim=-1, keepdim=True)
        x_hat = ((h - mean) / torch.sqrt(var + self.eps)).to(x.dtype)
        return x_hat * self.weight + self.bias if self.bias is not None else x_hat * self.weight


class RMSNorm(nn.Module):
    """Scale each position by its root mean square, no centring, no bias (Zhang & Sennrich 2019).

    Defined in chapter 4.
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        check_int("d_model", d_model, low=1)
        _check_eps(eps)
        self.d_model, self.eps = d_model, eps
        self.fused = False  # True: PyTorch's one-kernel F.rms_norm, the same function (chapter 11)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        """``(..., d_model) -> (..., d_model)``."""
        _check_input(x, self.d_model, self.weight)
        if self.fused:
            return F.rms_norm(x, (self.d_model,), self.weight, self.eps)
        h = x.float()  # statistics in float32, as in LayerNorm
        rms = torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (h / rms).to(x.dtype) * self.weight


def make_norm(kind: str, d_model: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """``kind``: ``"layernorm"`` or ``"rmsnorm"`` (RMSNorm has no bias)."""
    check_choice("norm", kind, NORMS)
    return LayerNorm(d_model, eps, bias) if kind == "layernorm" else RMSNorm(d_model, eps)
