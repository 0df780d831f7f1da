"""ALiBi, attention with linear biases (Press et al., 2022): positions as a penalty on the scores.

Taught in chapter 5, *Positional encodings* (``book/05_positions.ipynb``).

No position vectors at all. Head ``h`` subtracts ``m_h`` times the distance between query and
key from their score, ``q_i . k_j / sqrt(d_head) - m_h |i - j|``, with fixed slopes that form a
geometric sequence, ``2^(-8/n), 2^(-16/n), ..., 2^(-8)`` for ``n`` heads: heads with a steep slope
look near, heads with a gentle one far. Nothing is learned and nothing depends on a maximum
length, which is why a model trained on short sequences can read longer ones.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import check_int
from .positions import PositionScheme


def alibi_slopes(n_heads: int) -> Tensor:
    """``(n_heads,)`` slopes ``2^(-8 h / n)``, ``h = 1 .. n``, for ``n`` a power of two.

    Otherwise, as the paper's code does: the slopes of the largest power of two at most
    ``n_heads``, then every other slope of twice that many. Defined in chapter 5.
    """
    check_int("n_heads", n_heads, low=1)

    def geometric(n: int) -> list[float]:
        return [2 ** (-8 * h / n) for h in range(1, n + 1)]

    n = 2 ** math.floor(math.log2(n_heads))
    return torch.tensor(geometric(n) + geometric(2 * n)[0::2][: n_heads - n])


class ALiBi(PositionScheme):
    """A bias ``-m_h |i - j|`` on the scores of head ``h``. Defined in chapter 5.

    ``|i - j|`` rather than the paper's ``j - i`` (written for causal models, where ``j <= i``):
    the same inside a causal mask. A bidirectional layer with it runs, but a symmetric penalty cannot
    tell left from right (a sentence and its mirror image look alike): the mask gives the direction.
    """

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        # fixed, not learned, and recomputed from the formula: not saved in checkpoints
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def check_fits(self, n_heads: int, d_head: int) -> None:
        if n_heads != self.n_heads:
            raise ValueError(f"ALiBi has one slope per head: built for n_heads={self.n_heads}, "
                             f"used with n_heads={n_heads}")

    def score_bias(self, q: Tensor, k: Tensor, offset: int = 0) -> Tensor:
        """``(1, n_heads, seq_q, seq_k)``: query ``i`` at position ``offset + i``, key ``j`` at ``j``."""
        i = torch.arange(offset, offset + q.shape[-2], device=q.device)
        j = torch.arange(k.shape[-2], device=q.device)
        distance = (i[:, None] - j[None, :]).abs()  # (seq_q, seq_k)
        return -(self.slopes.to(q.dtype)[:, None, None] * distance)[None]

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}"
