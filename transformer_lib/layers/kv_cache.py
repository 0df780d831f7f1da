"""The KV cache: keys and values of the tokens seen so far, kept between generation steps.

Taught in chapter 7, *GPT-2* (``book/07_gpt2.ipynb``), and measured in chapter 11,
*Making it fast*.

Without a cache, generating token ``t`` recomputes keys and values for all ``t`` earlier
tokens. Those never change in a causal model, so each layer stores them and the model
only runs the newest token through the network.
"""

from __future__ import annotations

import torch
from torch import Tensor


class LayerKVCache:
    """Keys and values of one attention layer: ``(batch, n_heads, seq_cached, head_dim)`` each."""

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    @property
    def seq_len(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append the new positions' ``k``, ``v`` and return all keys and values so far."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            if k.shape[0] != self.k.shape[0]:
                raise ValueError(f"batch size changed from {self.k.shape[0]} to {k.shape[0]} "
                                 "within one KVCache")
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class KVCache:
    """One :class:`LayerKVCache` per layer. ``len(cache)`` is the number of cached positions."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [LayerKVCache() for _ in range(n_layers)]

    def __len__(self) -> int:
        return self.layers[0].seq_len if self.layers else 0

    def __getitem__(self, i: int) -> LayerKVCache:
        return self.layers[i]
