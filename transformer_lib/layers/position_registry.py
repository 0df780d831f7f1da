"""The position schemes by name: what ``config.positional`` builds (chapters 5 and 10).

A scheme is up to two modules: a table added to the token embeddings (learned, sinusoidal) and a
:class:`~transformer_lib.layers.positions.PositionScheme` that every attention layer applies (RoPE
rotates queries and keys; a scheme may also add a bias to the scores). A new scheme is its own
module plus one line here; attention and the models read it through the interface.
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from .alibi import ALiBi
from .positions import (
    LearnedPositionalEmbedding,
    PositionScheme,
    RotaryEmbedding,
    ScaledSinusoidalPositionalEncoding,
    SinusoidalPositionalEncoding,
)

# name -> config -> (the table added to the embeddings or None, the scheme inside attention or None)
POSITIONALS: dict[str, Callable[..., tuple[nn.Module | None, PositionScheme | None]]] = {
    "learned": lambda c: (LearnedPositionalEmbedding(c.n_ctx, c.d_model), None),
    "sinusoidal": lambda c: (SinusoidalPositionalEncoding(c.n_ctx, c.d_model), None),
    "scaled_sinusoidal": lambda c: (ScaledSinusoidalPositionalEncoding(c.n_ctx, c.d_model), None),
    "rope": lambda c: (None, RotaryEmbedding(c.d_head, c.n_ctx, c.rope_base)),
    "alibi": lambda c: (None, ALiBi(c.n_heads)),
    "none": lambda c: (None, None),
}


def make_positions(config) -> tuple[nn.Module | None, PositionScheme | None]:
    """``config.positional`` looked up in ``POSITIONALS``: the table added to the token embeddings
    and the scheme shared by every attention layer (each None where the scheme has no such part)."""
    return POSITIONALS[config.positional](config)
