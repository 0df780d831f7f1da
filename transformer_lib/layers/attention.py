"""Scaled dot-product attention and multi-head attention (bidirectional, causal, cross).

Taught in chapter 2, *Attention* (``book/02_attention.ipynb``).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + mask) V

``MultiHeadAttention.forward`` is that equation for every head. The pieces other chapters teach
live in their own modules: input checks (``attention_checks.py``), position schemes such as RoPE
(``positions.py``, chapter 5), the KV cache (``kv_cache.py``, chapter 7) and the fused kernel of
the fast path, ``use_sdpa=True`` (``fused_attention.py``, chapter 11).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from .attention_checks import (check_attention_inputs, check_attention_settings, check_qkv,
                               checked_score_bias)
from .fused_attention import fused_self_attention, sdpa_attention
from .kv_cache import LayerKVCache
from .masks import causal_mask, combine_masks
from .positions import PositionScheme


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention written out step by step.

    Args:
        q: ``(..., seq_q, d_k)`` queries.
        k: ``(..., seq_k, d_k)`` keys.
        v: ``(..., seq_k, d_v)`` values.
        mask: bool, broadcastable to ``(..., seq_q, seq_k)``; True = may attend.
        dropout_p: dropout on the attention weights (pass 0.0 in eval mode).
        bias: added to the scores, broadcastable to ``(..., seq_q, seq_k)``: a position scheme's
            (chapter 5), or None.

    Returns:
        ``(output, weights)``: ``(..., seq_q, d_v)`` and the softmax weights ``(..., seq_q, seq_k)``
        (before dropout). A query whose keys are all masked gets zero weights and a zero output,
        as in ``F.scaled_dot_product_attention``, instead of NaN.
    """
    check_qkv(q, k, v, mask)
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., seq_q, seq_k)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        # softmax over a row of -inf is NaN; a query with nothing to attend to reads nothing
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return dropped @ v, weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention: ``n_heads`` attentions of width ``d_head = d_model / n_heads`` in parallel.

    Defined in chapter 2, *Attention*.

    ``kind`` selects the flavour:

    * ``"bidirectional"``: every position sees every other (BERT, the encoder);
    * ``"causal"``: position ``i`` sees positions ``<= i`` (GPT, the decoder);
    * ``"cross"``: queries come from ``x``, keys and values from ``context`` (the encoder output).

    ``W_Q``, ``W_K``, ``W_V`` project all heads at once (``d_model -> n_heads * d_head``);
    ``W_O`` mixes the concatenated heads back to ``d_model``. ``positions``: a
    :class:`PositionScheme` that acts inside attention (RoPE, chapter 5), shared by the layers.
    ``use_sdpa``: attend with ``F.scaled_dot_product_attention`` (chapter 11), the same numbers.
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
        positions: PositionScheme | None = None,
        use_sdpa: bool = False,
    ) -> None:
        super().__init__()
        check_attention_settings(d_model, n_heads, kind, d_context, dropout, positions)
        d_context = d_model if d_context is None else d_context  # the width of cross-attention's context
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.kind, self.dropout, self.use_sdpa = kind, dropout, use_sdpa
        self.W_Q = nn.Linear(d_model, d_model, bias=bias)
        self.W_K = nn.Linear(d_context, d_model, bias=bias)
        self.W_V = nn.Linear(d_context, d_model, bias=bias)
        self.W_O = nn.Linear(d_model, d_model, bias=bias)
        self.positions = PositionScheme() if positions is None else positions  # the base does nothing
        self._capture: tuple[dict, str] | None = None  # set by capture_attention()

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None,
                kv_cache: LayerKVCache | None = None) -> Tensor:
        """``(batch, seq_q, d_model) -> (batch, seq_q, d_model)``.

        ``context``: ``(batch, seq_k, d_context)``, the keys' and values' source (``kind="cross"`` only).
        ``mask``: bool, True = may attend, broadcastable to ``(batch, n_heads, seq_q, seq_k)``; the
        causal mask is added for ``kind="causal"``. ``kv_cache``: the keys and values of earlier
        positions (causal only, chapter 7), extended in place.
        """
        check_attention_inputs(self, x, context, mask, kv_cache)  # before the cache is touched
        kernel = self.kernel(context, kv_cache)
        if kernel == "fused":  # chapter 11: the same function in fewer steps
            return fused_self_attention(self, x, mask)
        source = x if context is None else context  # cross-attention: keys and values from the context
        # (batch, seq, n_heads * d_head) -> (batch, n_heads, seq, d_head): split into heads
        q = rearrange(self.W_Q(x), "b s (h d) -> b h s d", h=self.n_heads)
        k = rearrange(self.W_K(source), "b s (h d) -> b h s d", h=self.n_heads)
        v = rearrange(self.W_V(source), "b s (h d) -> b h s d", h=self.n_heads)
        offset = 0 if kv_cache is None else kv_cache.seq_len  # positions already cached
        q, k = self.positions.rotate(q, k, offset)  # RoPE turns q and k (chapter 5); else unchanged
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # the new keys and values join the cached ones
        out = self.attend(q, k, v, mask, offset, kernel)  # (batch, n_heads, seq_q, d_head)
        return self.W_O(rearrange(out, "b h s d -> b s (h d)"))  # merge the heads; W_O mixes them

    def kernel(self, context: Tensor | None, kv_cache: LayerKVCache | None) -> str:
        """How this call attends, chosen here only.

        ``"explicit"``: :func:`scaled_dot_product_attention`, which forms the weights (chapter 2;
        always while :func:`capture_attention` records them). With ``use_sdpa``: ``"fused"`` for
        self-attention without a cache (Q, K, V in one product, chapter 11), else ``"sdpa"``.
        """
        if not self.use_sdpa or self._capture is not None:
            return "explicit"
        return "fused" if context is None and kv_cache is None else "sdpa"

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, offset: int,
               kernel: str) -> Tensor:
        """Every head's attention, ``(batch, n_heads, seq_q, d_head)``, with the position scheme's
        score bias, the causal mask and dropout; the explicit kernel hands its weights to a capture."""
        bias = checked_score_bias(self.positions, q, k, offset)  # None unless the scheme biases the scores
        dropout_p = self.dropout if self.training else 0.0
        if kernel == "sdpa":
            return sdpa_attention(q, k, v, mask, bias, self.kind == "causal", dropout_p)
        causal = causal_mask(q.shape[-2], k.shape[-2], q.device) if self.kind == "causal" else None
        out, weights = scaled_dot_product_attention(q, k, v, combine_masks(mask, causal), dropout_p, bias)
        if self._capture is not None:
            store, name = self._capture
            store[name] = weights.detach()
        return out


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
