"""Positional information: sinusoidal encodings, learned embeddings, rotary embeddings (RoPE).

Taught in chapter 5, *Positional encodings* (``book/05_positions.ipynb``).

Attention alone is permutation-equivariant: shuffle the tokens and the outputs shuffle the
same way. Sinusoidal and learned encodings *add* a position vector to each token embedding;
RoPE instead *rotates* queries and keys so that their dot product depends only on the
offset between positions. A scheme that acts inside attention is a :class:`PositionScheme`;
``position_registry.py`` maps ``config.positional``'s names to what each builds.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._checks import check_int, check_positive


def _check_positions(seq_len: int, offset: int, n_positions: int) -> None:
    check_int("seq_len", seq_len, low=1)
    check_int("offset", offset, low=0)
    if offset + seq_len > n_positions:
        raise ValueError(
            f"positions {offset}..{offset + seq_len - 1} are outside the table: "
            f"offset + seq_len must be at most n_positions={n_positions}"
        )


def sinusoidal_encoding(n_positions: int, d_model: int, base: float = 10000.0) -> Tensor:
    """``(n_positions, d_model)`` table of Vaswani et al. (2017):

    ``PE[pos, 2i] = sin(pos / base^(2i/d_model))``, ``PE[pos, 2i+1] = cos(pos / base^(2i/d_model))``.
    """
    check_int("n_positions", n_positions, low=1)
    check_int("d_model", d_model, low=2)
    check_positive("base", base)
    if d_model % 2:
        raise ValueError(f"d_model must be even for sinusoidal encodings (sin/cos pairs), got {d_model}")
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d_model/2,)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe.float()


class PositionScheme(nn.Module):
    """How positions act inside attention; this base class: not at all. Defined in chapter 5.

    Every attention kernel (chapter 2's written-out one, ``F.scaled_dot_product_attention``,
    chapter 11's fused one) calls both hooks, so a new scheme overrides them and nothing else:
    ``rotate`` turns the queries and keys before the scores (RoPE); ``score_bias`` returns a
    tensor added to the scores ``q k^T / sqrt(d_head)``, broadcastable to ``(batch, n_heads,
    seq_q, seq_k)``, or None. Query ``i`` sits at position ``offset + i`` (``offset``: positions
    already in a KV cache, chapter 7). Tables added to the token embeddings (learned, sinusoidal)
    act before attention, so inside it they are this base class.
    """

    def forward(self, *args, **kwargs):
        # a scheme acts through the two hooks inside attention; calling it is a learner's slip
        raise TypeError(f"{type(self).__name__} is not called on tensors: it acts inside attention, "
                        f"MultiHeadAttention(..., positions={type(self).__name__}(...)) or a config's "
                        f"positional=...; its hooks are .rotate(q, k, offset) and .score_bias(q, k, offset)")

    def check_fits(self, n_heads: int, d_head: int) -> None:
        """Raise a ValueError if attention with ``n_heads`` heads of width ``d_head`` cannot use it."""

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """``q``, ``k``: ``(batch, n_heads, seq, d_head)`` of the new positions ``offset ..``."""
        return q, k

    def score_bias(self, q: Tensor, k: Tensor, offset: int = 0) -> Tensor | None:
        """``k``: every key attended to (the cached ones first), key ``j`` at position ``j``."""
        return None


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sin/cos position vectors, added to token embeddings. Defined in chapter 5."""

    def __init__(self, n_positions: int, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        self.n_positions, self.d_model = n_positions, d_model
        # non-persistent: recomputed from the formula, not saved in checkpoints
        self.register_buffer("pe", sinusoidal_encoding(n_positions, d_model, base), persistent=False)

    def forward(self, seq_len: int, offset: int = 0) -> Tensor:
        """``(seq_len, d_model)`` encodings of positions ``offset .. offset + seq_len - 1``."""
        _check_positions(seq_len, offset, self.n_positions)
        return self.pe[offset : offset + seq_len]


class ScaledSinusoidalPositionalEncoding(SinusoidalPositionalEncoding):
    """Sinusoids times one learned scalar that starts at ``1 / sqrt(d_model)`` (Hua et al., 2022; Cramming).

    Sinusoid entries are of order 1 while token embeddings start at std 0.02: unscaled, the
    position would drown the token. Defined in chapter 8.
    """

    def __init__(self, n_positions: int, d_model: int, base: float = 10000.0) -> None:
        super().__init__(n_positions, d_model, base)
        self.scale = nn.Parameter(torch.tensor(d_model**-0.5))

    def forward(self, seq_len: int, offset: int = 0) -> Tensor:
        """``(seq_len, d_model)``: ``scale`` times the sinusoidal encodings."""
        return self.scale * super().forward(seq_len, offset)


class LearnedPositionalEmbedding(nn.Module):
    """One trained vector per position (GPT-2, BERT). Defined in chapter 5."""

    def __init__(self, n_positions: int, d_model: int) -> None:
        super().__init__()
        check_int("n_positions", n_positions, low=1)
        check_int("d_model", d_model, low=1)
        self.n_positions, self.d_model = n_positions, d_model
        self.weight = nn.Parameter(torch.randn(n_positions, d_model) * 0.02)

    def forward(self, seq_len: int, offset: int = 0) -> Tensor:
        """``(seq_len, d_model)`` embeddings of positions ``offset .. offset + seq_len - 1``."""
        _check_positions(seq_len, offset, self.n_positions)
        return self.weight[offset : offset + seq_len]


class RotaryEmbedding(PositionScheme):
    """Rotary position embedding (Su et al. 2021), applied to queries and keys. Defined in chapter 5.

    Each pair of features ``(x[2i], x[2i+1])`` at position ``m`` is rotated by the angle
    ``m * theta_i`` with ``theta_i = base^(-2i/head_dim)``. Rotating ``q`` by ``m`` and ``k`` by
    ``n`` makes ``q . k`` a function of ``m - n`` only. (Hugging Face's LLaMA pairs feature
    ``i`` with ``i + head_dim/2`` instead: the same rotation on permuted features.) As a
    :class:`PositionScheme` it rotates attention's queries and keys and adds no score bias.
    """

    def __init__(self, head_dim: int, n_positions: int, base: float = 10000.0) -> None:
        super().__init__()
        check_int("head_dim", head_dim, low=2)
        check_int("n_positions", n_positions, low=1)
        check_positive("base", base)
        if head_dim % 2:
            raise ValueError(f"RoPE rotates pairs of features, so head_dim must be even, got {head_dim}")
        self.head_dim, self.n_positions, self.base = head_dim, n_positions, base
        theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (head_dim/2,)
        positions = torch.arange(n_positions, dtype=torch.float64)
        angles = torch.outer(positions, theta)  # (n_positions, head_dim/2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Rotate ``x``: ``(..., seq, head_dim)``, whose positions are ``offset .. offset + seq - 1``."""
        if not isinstance(x, Tensor) or not x.is_floating_point():  # integers would round the rotation
            got = f"dtype {x.dtype}" if isinstance(x, Tensor) else type(x).__name__
            raise TypeError(f"x must be a floating-point torch.Tensor of queries or keys, got {got}")
        if x.dim() < 2 or x.shape[-1] != self.head_dim:
            raise ValueError(f"x must have last dimension head_dim={self.head_dim}, "
                             f"got shape {tuple(x.shape)}")
        seq_len = x.shape[-2]
        _check_positions(seq_len, offset, self.n_positions)
        cos = self.cos[offset : offset + seq_len].to(x.dtype)  # (seq, head_dim/2)
        sin = self.sin[offset : offset + seq_len].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # the two coordinates of each 2-D pair
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (..., seq, head_dim/2, 2)
        return rotated.flatten(-2)

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """The queries and keys of every head, each rotated by its position."""
        return self(q, offset), self(k, offset)

    def check_fits(self, n_heads: int, d_head: int) -> None:
        if self.head_dim != d_head:
            raise ValueError(f"the rotary embedding's head_dim ({self.head_dim}) must equal "
                             f"d_model / n_heads ({d_head})")
