"""Transformer blocks: attention and FFN sublayers, each inside a residual connection and a norm.

Taught in chapter 4, *Normalization and residuals* (``book/04_normalization.ipynb``); the
decoder block with cross-attention in chapter 9, *The full Transformer*.

    pre-norm  (GPT-2, LLaMA):     x = x + Sublayer(Norm(x))
    post-norm (Vaswani, BERT):    x = Norm(x + Sublayer(x))
"""

from __future__ import annotations

from torch import Tensor, nn

from .._checks import check_choice, check_prob
from .attention import MultiHeadAttention
from .feedforward import make_ffn
from .kv_cache import LayerKVCache
from .normalization import make_norm
from .positions import PositionScheme

NORM_POSITIONS = ("pre", "post")


class _Residual(nn.Module):
    """Base for blocks: applies one sublayer with the chosen norm placement."""

    norm_position: str

    def _sublayer(self, x: Tensor, norm: nn.Module, fn) -> Tensor:
        if self.norm_position == "pre":
            return x + self.drop(fn(norm(x)))
        return norm(x + self.drop(fn(x)))


class TransformerBlock(_Residual):
    """Self-attention + FFN. Defined in chapter 4.

    Args:
        d_model, n_heads: width and number of heads (``d_model % n_heads == 0``).
        d_ff: FFN hidden size (default ``4 * d_model``, or 8/3 d_model for gated FFNs).
        attn_kind: ``"causal"`` (decoder-only) or ``"bidirectional"`` (encoder).
        norm: ``"layernorm"`` or ``"rmsnorm"``; ``norm_position``: ``"pre"`` or ``"post"``.
        ffn: ``"relu" | "gelu" | "gelu_tanh" | "silu" | "swiglu" | "geglu"``.
        dropout: on attention weights and on each sublayer's output before the residual add.
        positions: a :class:`PositionScheme` shared by every attention layer (RoPE), or None.
        use_sdpa: use the fused ``F.scaled_dot_product_attention`` path.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        *,
        attn_kind: str = "causal",
        norm: str = "layernorm",
        norm_position: str = "pre",
        norm_eps: float = 1e-5,
        ffn: str = "gelu",
        ffn_multiple_of: int = 64,
        dropout: float = 0.0,
        bias: bool = True,
        positions: PositionScheme | None = None,
        use_sdpa: bool = False,
    ) -> None:
        super().__init__()
        check_choice("attn_kind", attn_kind, ("causal", "bidirectional"))
        check_choice("norm_position", norm_position, NORM_POSITIONS)
        check_prob("dropout", dropout)
        self.norm_position = norm_position
        self.norm_1 = make_norm(norm, d_model, norm_eps, bias)
        self.attn = MultiHeadAttention(d_model, n_heads, kind=attn_kind, dropout=dropout, bias=bias,
                                       positions=positions, use_sdpa=use_sdpa)
        self.norm_2 = make_norm(norm, d_model, norm_eps, bias)
        self.ffn = make_ffn(ffn, d_model, d_ff, multiple_of=ffn_multiple_of, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None, kv_cache: LayerKVCache | None = None) -> Tensor:
        """``(batch, seq, d_model) -> (batch, seq, d_model)``; ``mask`` as in :class:`MultiHeadAttention`."""
        x = self._sublayer(x, self.norm_1, lambda h: self.attn(h, mask=mask, kv_cache=kv_cache))
        return self._sublayer(x, self.norm_2, self.ffn)


class DecoderBlock(_Residual):
    """Causal self-attention, cross-attention to the encoder output, FFN. Defined in chapter 9.

    Same arguments as :class:`TransformerBlock` (the self-attention is always causal).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        *,
        norm: str = "layernorm",
        norm_position: str = "post",
        norm_eps: float = 1e-5,
        ffn: str = "relu",
        ffn_multiple_of: int = 64,
        dropout: float = 0.0,
        bias: bool = True,
        positions: PositionScheme | None = None,
        use_sdpa: bool = False,
    ) -> None:
        super().__init__()
        check_choice("norm_position", norm_position, NORM_POSITIONS)
        check_prob("dropout", dropout)
        self.norm_position = norm_position
        self.norm_1 = make_norm(norm, d_model, norm_eps, bias)
        self.self_attn = MultiHeadAttention(d_model, n_heads, kind="causal", dropout=dropout, bias=bias,
                                            positions=positions, use_sdpa=use_sdpa)
        self.norm_2 = make_norm(norm, d_model, norm_eps, bias)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, kind="cross", dropout=dropout,
                                             bias=bias, use_sdpa=use_sdpa)
        self.norm_3 = make_norm(norm, d_model, norm_eps, bias)
        self.ffn = make_ffn(ffn, d_model, d_ff, multiple_of=ffn_multiple_of, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        kv_cache: LayerKVCache | None = None,
    ) -> Tensor:
        """
        Args:
            x: ``(batch, seq_tgt, d_model)`` decoder stream.
            memory: ``(batch, seq_src, d_model)`` encoder output.
            self_mask: extra mask for the (causal) self-attention, e.g. target padding.
            memory_mask: mask over source positions, e.g. ``padding_mask(src_attention_mask)``.
        """
        x = self._sublayer(x, self.norm_1, lambda h: self.self_attn(h, mask=self_mask, kv_cache=kv_cache))
        x = self._sublayer(x, self.norm_2, lambda h: self.cross_attn(h, context=memory, mask=memory_mask))
        return self._sublayer(x, self.norm_3, self.ffn)
