"""Attention masks: which keys each query may look at.

Taught in chapter 2, *Attention* (``book/02_attention.ipynb``).

Convention (the same as ``F.scaled_dot_product_attention``): a mask is a **bool** tensor,
``True`` where a query *may* attend to a key. Masks combine with ``&`` and broadcast over
``(batch, n_heads, seq_q, seq_k)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_int, check_padding_mask


def causal_mask(seq_q: int, seq_k: int | None = None, device=None) -> Tensor:
    """``(seq_q, seq_k)`` bool mask, True on and below the diagonal.

    With a KV cache the queries are the *last* ``seq_q`` of ``seq_k`` positions, so query ``i``
    sits at absolute position ``seq_k - seq_q + i`` and may see keys ``0 .. seq_k - seq_q + i``.
    A new tensor every call: nothing cached, so nothing can be mutated by accident.
    """
    seq_k = seq_q if seq_k is None else seq_k
    check_int("seq_q", seq_q, low=1)
    check_int("seq_k", seq_k, low=seq_q)
    return torch.ones(seq_q, seq_k, dtype=torch.bool, device=device).tril(diagonal=seq_k - seq_q)


def padding_mask(attention_mask: Tensor) -> Tensor:
    """``(batch, seq_k)`` of 1 = token / 0 = padding  ->  ``(batch, 1, 1, seq_k)`` bool key mask.

    The padded *keys* are hidden from every query of every head.
    """
    if not isinstance(attention_mask, Tensor) or attention_mask.dim() != 2:
        is_tensor = isinstance(attention_mask, Tensor)
        shape = tuple(attention_mask.shape) if is_tensor else type(attention_mask).__name__
        raise ValueError(f"attention_mask must have shape (batch, seq), got {shape}")
    mask = check_padding_mask("attention_mask", attention_mask, tuple(attention_mask.shape))
    return mask[:, None, None, :]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the masks that are not None (None if all are)."""
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out
