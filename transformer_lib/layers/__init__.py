"""Building blocks (part I of the book): one module per concept."""

from .alibi import ALiBi, alibi_slopes
from .attention import MultiHeadAttention, capture_attention, scaled_dot_product_attention
from .block import DecoderBlock, TransformerBlock
from .embedding import TokenEmbedding
from .feedforward import FeedForward, GatedFeedForward, gated_hidden_size, gelu, gelu_tanh, make_ffn, relu, silu
from .kv_cache import KVCache, LayerKVCache
from .masks import causal_mask, combine_masks, padding_mask
from .normalization import LayerNorm, RMSNorm, make_norm
from .positions import (
    LearnedPositionalEmbedding,
    PositionScheme,
    RotaryEmbedding,
    ScaledSinusoidalPositionalEncoding,
    SinusoidalPositionalEncoding,
    sinusoidal_encoding,
)

__all__ = [
    "ALiBi", "DecoderBlock", "FeedForward", "GatedFeedForward", "KVCache", "LayerKVCache", "LayerNorm",
    "LearnedPositionalEmbedding", "MultiHeadAttention", "PositionScheme", "RMSNorm", "RotaryEmbedding",
    "ScaledSinusoidalPositionalEncoding", "SinusoidalPositionalEncoding", "TokenEmbedding", "TransformerBlock", "capture_attention",
    "causal_mask", "combine_masks", "gated_hidden_size", "gelu", "gelu_tanh", "make_ffn", "make_norm",
    "padding_mask", "relu", "scaled_dot_product_attention", "silu", "sinusoidal_encoding", "alibi_slopes",
]
