"""Attention's input checks: errors that name the argument, what it got and what is allowed.

Chapter 2, *Attention*, shows them where it discusses errors; ``MultiHeadAttention`` calls them
once, before any arithmetic (and before a KV cache is touched), so its ``forward`` reads as the
equations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .._checks import (check_choice, check_divisible, check_float_input, check_float_tensors, check_int,
                       check_prob, check_same_device)
from .kv_cache import LayerKVCache
from .positions import PositionScheme

if TYPE_CHECKING:  # for the annotation only: attention.py imports this module
    from .attention import MultiHeadAttention

ATTENTION_KINDS = ("bidirectional", "causal", "cross")


def check_attn_mask(mask: Tensor | None, scores_shape: tuple[int, ...], name: str = "mask",
                    device: torch.device | None = None) -> None:
    """``mask``: bool, on ``device`` if given, broadcasting to ``scores_shape`` = ``(..., seq_q, seq_k)``."""
    if mask is None:
        return
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a bool torch.Tensor, got {type(mask).__name__}")
    check_same_device(name, mask, mask.device if device is None else device)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must have dtype torch.bool (True = may attend), got {mask.dtype}; "
            f"for a 0/1 padding mask use padding_mask(attention_mask)"
        )
    # broadcasting to scores_shape: each of the mask's sizes, from the right, is 1 or the score's
    # (plain Python: torch.broadcast_shapes costs more than the check, on every forward pass)
    fits = all(m in (1, s) for m, s in zip(mask.shape[::-1], scores_shape[::-1]))
    if mask.dim() > len(scores_shape) or not fits:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores' shape "
            f"{tuple(scores_shape)} = (batch, n_heads, seq_q, seq_k); allowed: (seq_q, seq_k), "
            f"(batch, 1, seq_q, seq_k), (batch, 1, 1, seq_k), ..."
        )


def check_qkv(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> None:
    """The arguments of ``scaled_dot_product_attention(q, k, v, mask)``."""
    check_float_tensors("q, k, v", q, k, v)
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(f"q, k, v must be (..., seq, d); got shapes {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("q and k must have the same last dimension d_k, "
                         f"got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError("k and v must have the same number of positions, "
                         f"got {k.shape[-2]} and {v.shape[-2]}")
    if mask is not None:
        q_lead, k_lead = q.shape[:-2], k.shape[:-2]  # (...): batch, heads
        lead = q_lead if q_lead == k_lead else torch.broadcast_shapes(q_lead, k_lead)
        check_attn_mask(mask, (*lead, q.shape[-2], k.shape[-2]), device=q.device)


def check_attention_settings(d_model: int, n_heads: int, kind: str, d_context: int | None, dropout: float,
                             positions: PositionScheme | None) -> None:
    """The arguments of ``MultiHeadAttention(...)``."""
    check_int("d_model", d_model, low=1)
    check_int("n_heads", n_heads, low=1)
    check_divisible(d_model, n_heads)
    check_choice("kind", kind, ATTENTION_KINDS)
    check_prob("dropout", dropout)
    if d_context is not None:
        if kind != "cross":
            raise ValueError(f"d_context is only used by kind='cross', got kind={kind!r}")
        check_int("d_context", d_context, low=1)
    if positions is not None:
        if not isinstance(positions, PositionScheme):
            raise TypeError("positions must be a PositionScheme (e.g. tl.RotaryEmbedding) or None, "
                            f"got {type(positions).__name__}")
        if kind == "cross":
            raise ValueError("positions are not applied in cross-attention: "
                             "queries and keys come from different sequences")
        positions.check_fits(n_heads, d_model // n_heads)


def check_attention_inputs(attn: MultiHeadAttention, x: Tensor, context: Tensor | None, mask: Tensor | None,
                           kv_cache: LayerKVCache | None) -> None:
    """The arguments of ``attn.forward(x, context, mask, kv_cache)``."""
    check_float_input("x", x, attn.W_Q.weight)
    if x.dim() != 3 or x.shape[-1] != attn.d_model:
        raise ValueError(f"x must have shape (batch, seq, d_model={attn.d_model}), got {tuple(x.shape)}")
    if attn.kind == "cross":
        if context is None:
            raise ValueError("cross-attention needs a context: pass context=(batch, seq_k, d_context)")
        check_float_input("context", context, attn.W_K.weight)
        d_context = attn.W_K.in_features
        if context.dim() != 3 or context.shape[0] != x.shape[0] or context.shape[-1] != d_context:
            raise ValueError(f"context must have shape (batch={x.shape[0]}, seq_k, d_context={d_context}), "
                             f"got {tuple(context.shape)}")
    elif context is not None:
        raise ValueError(f"context is only used by kind='cross', got kind={attn.kind!r}")
    if kv_cache is not None:
        if attn.kind != "causal":
            raise ValueError(f"a KV cache only makes sense for kind='causal', got kind={attn.kind!r}")
        if not isinstance(kv_cache, LayerKVCache):
            raise TypeError("kv_cache must be a LayerKVCache (one layer of a KVCache), "
                            f"got {type(kv_cache).__name__}")
    if mask is not None:
        cached = 0 if kv_cache is None else kv_cache.seq_len
        seq_k = x.shape[1] + cached if context is None else context.shape[1]
        check_attn_mask(mask, (x.shape[0], attn.n_heads, x.shape[1], seq_k), device=x.device)


def checked_score_bias(positions: PositionScheme, q: Tensor, k: Tensor, offset: int) -> Tensor | None:
    """``positions.score_bias(q, k, offset)``, refused with the scheme's name unless it broadcasts to the
    scores ``(batch, n_heads, seq_q, seq_k)`` (a new scheme's mistake would else fail inside torch)."""
    bias = positions.score_bias(q, k, offset)
    if bias is None:
        return None
    scores = (*q.shape[:-1], k.shape[-2])
    if not isinstance(bias, Tensor) or bias.dim() > len(scores) or not all(
            b in (1, s) for b, s in zip(bias.shape[::-1], scores[::-1])):
        got = tuple(bias.shape) if isinstance(bias, Tensor) else type(bias).__name__
        raise ValueError(f"{type(positions).__name__}.score_bias returned {got}, which does not broadcast to "
                         f"the scores {scores} = (batch, n_heads, seq_q, seq_k); query i is at position "
                         f"offset + i = {offset} + i, key j at position j")
    return bias
