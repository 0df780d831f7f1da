"""Scaled dot-product attention and multi-head attention (bidirectional, causal, cross).

Taught in chapter 2, *Attention* (``book/02_attention.ipynb``).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + mask) V

Two code paths give the same numbers: the explicit one below, which the book reads and which
returns the attention weights, and PyTorch's fused ``F.scaled_dot_product_attention``
(``use_sdpa=True``), which is faster and never materialises the weights.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from .._checks import (check_choice, check_divisible, check_float_input, check_float_tensors, check_int,
                       check_prob, check_same_device)
from .kv_cache import LayerKVCache
from .masks import causal_mask, combine_masks

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
    try:
        ok = torch.broadcast_shapes(mask.shape, scores_shape) == torch.Size(scores_shape)
    except RuntimeError:
        ok = False
    if not ok or mask.dim() > len(scores_shape):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores' shape "
            f"{tuple(scores_shape)} = (batch, n_heads, seq_q, seq_k); allowed: (seq_q, seq_k), "
            f"(batch, 1, seq_q, seq_k), (batch, 1, 1, seq_k), ..."
        )


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Attention written out step by step.

    Args:
        q: ``(..., seq_q, d_k)`` queries.
        k: ``(..., seq_k, d_k)`` keys.
        v: ``(..., seq_k, d_v)`` values.
        mask: bool, broadcastable to ``(..., seq_q, seq_k)``; True = may attend.
        dropout_p: dropout on the attention weights (pass 0.0 in eval mode).

    Returns:
        ``(output, weights)``: ``(..., seq_q, d_v)`` and the softmax weights ``(..., seq_q, seq_k)``
        (before dropout). A query whose keys are all masked gets zero weights and a zero output,
        as in ``F.scaled_dot_product_attention``, instead of NaN.
    """
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
    check_attn_mask(mask, (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2]),
                    device=q.device)
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., seq_q, seq_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        # softmax over a row of -inf is NaN; a query with nothing to attend to reads nothing
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return dropped @ v, weights


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


class MultiHeadAttention(nn.Module):
    """Multi-head attention: ``n_heads`` attentions of width ``d_head = d_model / n_heads`` in parallel.

    Defined in chapter 2, *Attention*.

    ``kind`` selects the flavour:

    * ``"bidirectional"``: every position sees every other (BERT, the encoder);
    * ``"causal"``: position ``i`` sees positions ``<= i`` (GPT, the decoder);
    * ``"cross"``: queries come from ``x``, keys and values from ``context`` (the encoder output).

    ``W_Q``, ``W_K``, ``W_V`` project all heads at once (``d_model -> n_heads * d_head``);
    ``W_O`` mixes the concatenated heads back to ``d_model``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        kind: str = "bidirectional",
        d_context: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        rope: nn.Module | None = None,
        use_sdpa: bool = False,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model, low=1)
        check_int("n_heads", n_heads, low=1)
        check_divisible(d_model, n_heads)
        check_choice("kind", kind, ATTENTION_KINDS)
        check_prob("dropout", dropout)
        if d_context is not None and kind != "cross":
            raise ValueError(f"d_context is only used by kind='cross', got kind={kind!r}")
        if rope is not None and kind == "cross":
            raise ValueError("rope is not applied in cross-attention: "
                             "queries and keys come from different sequences")
        d_context = d_model if d_context is None else d_context
        check_int("d_context", d_context, low=1)
        if rope is not None and rope.head_dim != d_model // n_heads:
            raise ValueError(f"rope.head_dim ({rope.head_dim}) must equal "
                             f"d_model / n_heads ({d_model // n_heads})")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.kind, self.dropout, self.use_sdpa = kind, dropout, use_sdpa
        self.W_Q = nn.Linear(d_model, d_model, bias=bias)
        self.W_K = nn.Linear(d_context, d_model, bias=bias)
        self.W_V = nn.Linear(d_context, d_model, bias=bias)
        self.W_O = nn.Linear(d_model, d_model, bias=bias)
        self.rope = rope
        self._capture: tuple[dict, str] | None = None  # set by capture_attention()

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        kv_cache: LayerKVCache | None = None,
    ) -> Tensor:
        """
        Args:
            x: ``(batch, seq_q, d_model)``.
            context: ``(batch, seq_k, d_context)``; required for ``kind="cross"``, else must be None.
            mask: bool, broadcastable to ``(batch, n_heads, seq_q, seq_k)``; True = may attend.
                Combined with the causal mask for ``kind="causal"``.
            kv_cache: keys/values of earlier positions (causal only); updated in place.

        Returns:
            ``(batch, seq_q, d_model)``.
        """
        check_float_input("x", x, self.W_Q.weight)
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (batch, seq, d_model={self.d_model}), got {tuple(x.shape)}")
        if self.kind == "cross":
            if context is None:
                raise ValueError("cross-attention needs a context: pass context=(batch, seq_k, d_context)")
            check_float_input("context", context, self.W_K.weight)
            d_context = self.W_K.in_features
            if context.dim() != 3 or context.shape[0] != x.shape[0] or context.shape[-1] != d_context:
                raise ValueError(
                    f"context must have shape (batch={x.shape[0]}, seq_k, d_context={self.W_K.in_features}), "
                    f"got {tuple(context.shape)}"
                )
        elif context is not None:
            raise ValueError(f"context is only used by kind='cross', got kind={self.kind!r}")
        if kv_cache is not None and self.kind != "causal":
            raise ValueError(f"a KV cache only makes sense for kind='causal', got kind={self.kind!r}")
        if kv_cache is not None and not isinstance(kv_cache, LayerKVCache):
            raise TypeError("kv_cache must be a LayerKVCache (one layer of a KVCache), "
                            f"got {type(kv_cache).__name__}")
        offset = 0 if kv_cache is None else kv_cache.seq_len
        seq_q = x.shape[1]
        seq_k = offset + seq_q if context is None else context.shape[1]
        # (checked before the KV cache is touched)
        check_attn_mask(mask, (x.shape[0], self.n_heads, seq_q, seq_k), device=x.device)
        if self.use_sdpa and context is None and kv_cache is None and not self._capture:
            return self._fused_self_attention(x, mask)  # chapter 11: fewer steps

        source = x if context is None else context
        # (batch, seq, n_heads * d_head) -> (batch, n_heads, seq, d_head)
        q = rearrange(self.W_Q(x), "b s (h d) -> b h s d", h=self.n_heads)
        k = rearrange(self.W_K(source), "b s (h d) -> b h s d", h=self.n_heads)
        v = rearrange(self.W_V(source), "b s (h d) -> b h s d", h=self.n_heads)

        if self.rope is not None:
            q, k = self.rope(q, offset=offset), self.rope(k, offset=offset)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)

        dropout_p = self.dropout if self.training else 0.0
        if self.use_sdpa and self._capture is None:
            if self.kind == "causal" and mask is None and seq_q == seq_k:
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
            else:
                causal = causal_mask(seq_q, seq_k, x.device) if self.kind == "causal" else None
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=combine_masks(mask, causal),
                                                     dropout_p=dropout_p)
        else:
            causal = causal_mask(seq_q, seq_k, x.device) if self.kind == "causal" else None
            out, weights = scaled_dot_product_attention(q, k, v, combine_masks(mask, causal), dropout_p)
            if self._capture is not None:
                store, name = self._capture
                store[name] = weights.detach()
        return self.W_O(rearrange(out, "b h s d -> b s (h d)"))

    def _fused_self_attention(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """Self-attention on the fast path (chapter 11): ``forward``'s function.

        Q, K and V come from one matrix product, ``W_Q``, ``W_K``, ``W_V`` stacked (as
        nanoGPT's ``c_attn``): one product three times as wide keeps the arithmetic
        units busier than three, and its backward has no three input gradients to add.
        The heads are split and merged by reshaping, and the fused kernel attends.
        """
        B, T, _ = x.shape
        Q, K, V = self.W_Q, self.W_K, self.W_V
        weight = torch.cat([Q.weight, K.weight, V.weight])  # (3 d_model, d_model)
        bias = None if Q.bias is None else torch.cat([Q.bias, K.bias, V.bias])
        # (batch, seq, 3 d_model) -> three (batch, n_heads, seq, d_head) views; in the
        # backward pass one copy joins their gradients (a permute of all three: two)
        q, k, v = (t.view(B, T, self.n_heads, self.d_head).transpose(1, 2)
                   for t in F.linear(x, weight, bias).split(self.d_model, dim=-1))
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        dropout_p = self.dropout if self.training else 0.0
        causal = self.kind == "causal"
        if mask is None and causal and dropout_p > 0 and x.device.type == "cpu":
            out = causal_attention_with_dropout(q, k, v, dropout_p)
        elif mask is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p,
                                                 is_causal=causal)
        else:
            full = combine_masks(mask, causal_mask(T, T, x.device) if causal else None)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=full,
                                                 dropout_p=dropout_p)
        return self.W_O(out.transpose(1, 2).reshape(B, T, self.d_model))


@contextmanager
def capture_attention(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Record the attention weights of every :class:`MultiHeadAttention` in ``model``.

    Defined in chapter 2, *Attention*::

        with capture_attention(model) as maps:
            model(tokens)
        maps["blocks.0.attn"]  # (batch, n_heads, seq_q, seq_k)

    Keys are module names in forward order. While capturing, the explicit attention path runs
    (the fused one never forms the weights); outside the ``with`` nothing is stored.
    """
    modules = [(n, m) for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)]
    if not modules:
        raise ValueError(f"{type(model).__name__} contains no MultiHeadAttention module to capture")
    maps: dict[str, Tensor] = {}
    previous = [module._capture for _, module in modules]
    for name, module in modules:
        module._capture = (maps, name or type(module).__name__)  # the model itself is named ""
    try:
        yield maps
    finally:  # restore, so that nested captures work
        for (_, module), old in zip(modules, previous):
            module._capture = old
