"""Weight initialisation.

Taught in chapter 7, *GPT-2* (``book/07_gpt2.ipynb``).

GPT-2 draws every weight from N(0, 0.02) and scales the two projections that write into the
residual stream (attention ``W_O``, FFN ``W_out``) by ``1/sqrt(2 * n_layers)``: each block adds
two such terms, so without the scaling the residual stream's variance grows with depth.
"""

from __future__ import annotations

import math

from torch import nn

from .layers.embedding import TokenEmbedding
from .layers.normalization import LayerNorm, RMSNorm
from .layers.positions import LearnedPositionalEmbedding

RESIDUAL_PROJECTIONS = ("W_O.weight", "W_out.weight")


def init_weights_(model: nn.Module, std: float = 0.02, n_layers: int | None = None) -> None:
    """Normal(0, ``std``) weights, zero biases, unit norm gains.

    With ``n_layers``, residual projections get ``std / sqrt(2 * n_layers)`` (GPT-2).
    """
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (TokenEmbedding, LearnedPositionalEmbedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, (LayerNorm, RMSNorm)):
            nn.init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
    if n_layers is not None:
        for name, p in model.named_parameters():
            if name.endswith(RESIDUAL_PROJECTIONS):
                nn.init.normal_(p, mean=0.0, std=std / math.sqrt(2 * n_layers))
