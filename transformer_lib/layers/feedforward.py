"""Position-wise feed-forward networks: the two-layer FFN and the gated SwiGLU / GEGLU.

Taught in chapter 3, *Feed-forward networks* (``book/03_feedforward.ipynb``).

    FFN(x)    = W_out act(W_in x)                      (d_model -> d_ff -> d_model)
    GLU(x)    = W_out (act(W_gate x) * W_in x)         (SwiGLU: act = SiLU, GEGLU: act = GELU)
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_choice, check_float_input, check_int, check_prob


def relu(x: Tensor) -> Tensor:
    return torch.clamp(x, min=0.0)


def gelu(x: Tensor) -> Tensor:
    """Exact GELU, ``x * Phi(x)`` with ``Phi`` the standard normal CDF (BERT's ``"gelu"``)."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU's tanh approximation, GPT-2's activation (Hugging Face's ``"gelu_new"``)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def silu(x: Tensor) -> Tensor:
    """SiLU (swish), ``x * sigmoid(x)``: the gate of SwiGLU."""
    return x * torch.sigmoid(x)


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh, "silu": silu}
# PyTorch's one-kernel versions of the same functions (the fast path of chapter 11): the formulas
# above run one operation at a time, each reading and writing the whole tensor
FUSED_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": partial(F.gelu, approximate="tanh"), "silu": F.silu}
GATED = {"swiglu": "silu", "geglu": "gelu"}
FFN_KINDS = tuple(ACTIVATIONS) + tuple(GATED)


def gated_hidden_size(d_model: int, multiple_of: int = 64) -> int:
    """``8/3 * d_model`` rounded up to a multiple of ``multiple_of``.

    Three matrices of ``d_model x 8/3 d`` hold as many parameters as the two ``d_model x 4 d``
    of a plain FFN; the rounding keeps matrix shapes friendly to the hardware.
    """
    check_int("d_model", d_model, low=1)
    check_int("multiple_of", multiple_of, low=1)
    return multiple_of * math.ceil(8 * d_model / 3 / multiple_of)


def _check_width(x: Tensor, W_in: nn.Linear) -> None:
    check_float_input("x", x, W_in.weight)
    d_model = W_in.in_features
    if x.dim() == 0 or x.shape[-1] != d_model:
        raise ValueError(f"x must have last dimension d_model={d_model}, got shape {tuple(x.shape)}")


class FeedForward(nn.Module):
    """Two-layer FFN applied to every position independently. Defined in chapter 3."""

    def __init__(
        self, d_model: int, d_ff: int | None = None, *, activation: str = "gelu",
        dropout: float = 0.0, bias: bool = True,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model, low=1)
        d_ff = 4 * d_model if d_ff is None else d_ff
        check_int("d_ff", d_ff, low=1)
        check_choice("activation", activation, ACTIVATIONS)
        check_prob("dropout", dropout)
        self.activation = activation
        self.fused = False  # True: FUSED_ACTIVATIONS (chapter 11)
        self.W_in = nn.Linear(d_model, d_ff, bias=bias)
        self.W_out = nn.Linear(d_ff, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(batch, seq, d_model) -> (batch, seq, d_model)``."""
        _check_width(x, self.W_in)
        act = (FUSED_ACTIVATIONS if self.fused else ACTIVATIONS)[self.activation]
        return self.drop(self.W_out(act(self.W_in(x))))


class GatedFeedForward(nn.Module):
    """Gated FFN (Shazeer 2020): SwiGLU (``activation="silu"``) or GEGLU (``"gelu"``). Defined in chapter 3.

    ``d_ff`` defaults to :func:`gated_hidden_size` (8/3 d_model rounded up to ``multiple_of``).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        *,
        activation: str = "silu",
        multiple_of: int = 64,
        dropout: float = 0.0,
        bias: bool = False,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model, low=1)
        d_ff = gated_hidden_size(d_model, multiple_of) if d_ff is None else d_ff
        check_int("d_ff", d_ff, low=1)
        check_choice("activation", activation, ("silu", "gelu"))
        check_prob("dropout", dropout)
        self.activation = activation
        self.fused = False  # True: FUSED_ACTIVATIONS (chapter 11)
        self.W_gate = nn.Linear(d_model, d_ff, bias=bias)
        self.W_in = nn.Linear(d_model, d_ff, bias=bias)
        self.W_out = nn.Linear(d_ff, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(batch, seq, d_model) -> (batch, seq, d_model)``."""
        _check_width(x, self.W_in)
        gate = (FUSED_ACTIVATIONS if self.fused else ACTIVATIONS)[self.activation](self.W_gate(x))
        return self.drop(self.W_out(gate * self.W_in(x)))


def make_ffn(
    kind: str,
    d_model: int,
    d_ff: int | None = None,
    *,
    multiple_of: int = 64,
    dropout: float = 0.0,
    bias: bool | None = None,
) -> nn.Module:
    """``kind``: ``"relu" | "gelu" | "gelu_tanh" | "silu"`` (plain FFN) or ``"swiglu" | "geglu"`` (gated).

    ``bias=None`` keeps each kind's usual choice: biases in the plain FFN (GPT-2, BERT), none in
    the gated ones (LLaMA, PaLM).
    """
    check_choice("ffn", kind, FFN_KINDS)
    if bias is None:
        bias = kind not in GATED
    if kind in GATED:
        return GatedFeedForward(d_model, d_ff, activation=GATED[kind], multiple_of=multiple_of, dropout=dropout, bias=bias)
    return FeedForward(d_model, d_ff, activation=kind, dropout=dropout, bias=bias)
