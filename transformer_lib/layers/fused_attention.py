"""Attention on PyTorch's fused kernel: the fast path of ``MultiHeadAttention`` (``use_sdpa=True``).

Taught in chapter 11, *Making it fast* (``book/11_making_it_fast.ipynb``). The same function as
chapter 2's written-out attention (tested), in fewer steps: ``F.scaled_dot_product_attention``
never forms the attention weights, and self-attention computes Q, K and V in one matrix product.
A position scheme enters as in ``forward``: ``rotate`` turns q and k, and its score bias rides in
the kernel's ``attn_mask``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention_checks import checked_score_bias
from .masks import causal_mask, combine_masks

if TYPE_CHECKING:  # for the annotation only: attention.py imports this module
    from .attention import MultiHeadAttention


def causal_attention_with_dropout(q: Tensor, k: Tensor, v: Tensor, p: float) -> Tensor:
    """Causal attention with dropout ``p``: the fast path's on a CPU (chapter 11).

    The function of ``F.scaled_dot_product_attention(q, k, v, dropout_p=p,
    is_causal=True)``. PyTorch's fused CPU kernel has no dropout, so that call falls
    back to a composite that draws the mask with a double-precision Bernoulli sampler,
    about 2.5x the time of ``torch.rand``, for each of the ``batch x heads x seq x seq``
    weights. Here a weight is kept where ``rand >= p`` (probability ``1 - p``, as in
    ``F.dropout``), and the scores are scaled and masked in place, the mask added as
    0 or -inf (the backward pass of an addition is free).
    """
    T, d_k = q.shape[-2], q.shape[-1]
    scores = (q @ k.transpose(-2, -1)).mul_(1 / math.sqrt(d_k))  # (..., seq, seq)
    hide = torch.zeros(T, T, dtype=scores.dtype, device=q.device)
    scores.add_(hide.masked_fill_(~causal_mask(T, T, q.device), -math.inf))
    weights = scores.softmax(dim=-1)
    keep = torch.rand_like(weights).ge_(p).div_(1 - p)  # 0 or 1 / (1 - p)
    return (weights * keep) @ v


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None,
                   causal: bool, dropout_p: float) -> Tensor:
    """``F.scaled_dot_product_attention`` with the library's masks and a score bias.

    ``q`` ``(batch, n_heads, seq_q, d_head)``, ``k`` and ``v`` ``(batch, n_heads, seq_k, d_head)``;
    ``mask`` bool, True = may attend; ``bias`` added to the scores (a position scheme's);
    ``causal``: query ``i`` is position ``seq_k - seq_q + i`` and sees no later key.
    Returns ``(batch, n_heads, seq_q, d_head)``.
    """
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    if mask is None and bias is None and (not causal or seq_q == seq_k):
        if causal and dropout_p > 0 and q.device.type == "cpu":  # PyTorch's CPU dropout is slow
            return causal_attention_with_dropout(q, k, v, dropout_p)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal)
    keep = combine_masks(mask, causal_mask(seq_q, seq_k, q.device) if causal else None)
    if bias is not None:  # a float attn_mask is added to the scores: the bias, -inf where hidden
        bias = bias.to(q.dtype)
        keep = bias if keep is None else bias.masked_fill(~keep, -math.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout_p)


def fused_self_attention(attn: MultiHeadAttention, x: Tensor, mask: Tensor | None) -> Tensor:
    """``attn.forward(x, mask=mask)`` for self-attention without a KV cache, in fewer steps.

    Q, K and V come from one matrix product, ``W_Q``, ``W_K``, ``W_V`` stacked (as nanoGPT's
    ``c_attn``): one product three times as wide keeps the arithmetic units busier than three,
    and its backward has no three input gradients to add. The heads are split and merged by
    reshaping, and the fused kernel attends.
    """
    B, T, _ = x.shape
    Q, K, V, positions = attn.W_Q, attn.W_K, attn.W_V, attn.positions
    weight = torch.cat([Q.weight, K.weight, V.weight])  # (3 d_model, d_model)
    bias = None if Q.bias is None else torch.cat([Q.bias, K.bias, V.bias])
    q, k, v = F.linear(x, weight, bias).split(attn.d_model, dim=-1)  # (batch, seq, d_model) each
    # -> (batch, n_heads, seq, d_head) views; in the backward pass one copy joins their gradients
    # (a permute of all three: two)
    heads = (B, T, attn.n_heads, attn.d_head)
    q, k, v = q.view(heads).transpose(1, 2), k.view(heads).transpose(1, 2), v.view(heads).transpose(1, 2)
    q, k = positions.rotate(q, k, 0)
    dropout_p = attn.dropout if attn.training else 0.0
    bias = checked_score_bias(positions, q, k, 0)  # None unless the scheme biases the scores
    out = sdpa_attention(q, k, v, mask, bias, attn.kind == "causal", dropout_p)
    return attn.W_O(out.transpose(1, 2).reshape(B, T, attn.d_model))
