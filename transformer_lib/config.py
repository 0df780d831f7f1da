"""The settings every model shares, validated once.

``GPT2Config``, ``BERTConfig`` and ``EncoderDecoderConfig`` extend :class:`TransformerConfig`
with their own defaults. Any of them can swap the parts taught in part I: ``norm="rmsnorm"``,
``positional="rope"``, ``ffn="swiglu"`` (chapter 10 builds a LLaMA-style decoder this way).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ._checks import check_bool, check_choice, check_divisible, check_int, check_positive, check_prob
from .layers.block import NORM_POSITIONS
from .layers.feedforward import FFN_KINDS
from .layers.normalization import NORMS
from .layers.position_registry import POSITIONALS


# Hugging Face's and nanoGPT's names for the settings -> ours (a config given theirs says so)
FOREIGN_NAMES = {
    "n_embd": "d_model", "hidden_size": "d_model", "n_layer": "n_layers", "num_hidden_layers": "n_layers",
    "n_head": "n_heads", "num_attention_heads": "n_heads", "n_positions": "n_ctx", "block_size": "n_ctx",
    "max_position_embeddings": "n_ctx", "n_inner": "d_ff", "intermediate_size": "d_ff",
    "layer_norm_epsilon": "norm_eps", "layer_norm_eps": "norm_eps", "rms_norm_eps": "norm_eps",
    "activation_function": "ffn", "hidden_act": "ffn", "tie_word_embeddings": "tie_weights",
    "initializer_range": "init_std", "rope_theta": "rope_base", "resid_pdrop": "dropout",
    "hidden_dropout_prob": "dropout", "num_decoder_layers": "n_decoder_layers",
}


def unknown_settings(cls: type, names) -> str | None:
    """The message for settings that ``cls`` (a config dataclass) does not have, or None."""
    known = {f.name for f in fields(cls)}
    unknown = [n for n in names if n not in known]
    if not unknown:
        return None
    ours = [f"{n} -> {FOREIGN_NAMES[n]}" for n in unknown if FOREIGN_NAMES.get(n) in known]
    hint = (f"; Hugging Face's and nanoGPT's names are spelled differently here: {', '.join(ours)}" if ours
            else "")
    return (f"{cls.__name__} has no setting {', '.join(map(repr, unknown))}{hint}. "
            f"Its settings: {', '.join(sorted(known))}")


@dataclass
class TransformerConfig:
    vocab_size: int = 50257
    n_ctx: int = 1024  # longest sequence the model accepts (the context window)
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    d_ff: int | None = None  # None: 4 * d_model, or 8/3 * d_model rounded up for swiglu/geglu
    ffn: str = "gelu_tanh"  # relu | gelu | gelu_tanh | silu | swiglu | geglu
    ffn_multiple_of: int = 64  # rounding of the gated FFN's hidden size
    norm: str = "layernorm"  # layernorm | rmsnorm
    norm_position: str = "pre"  # pre | post
    norm_eps: float = 1e-5
    positional: str = "learned"  # a name in layers/position_registry.py: learned, sinusoidal, rope, alibi, ...
    rope_base: float = 10000.0
    dropout: float = 0.0
    bias: bool = True  # biases in the linear layers and LayerNorms
    tie_weights: bool = True  # output head shares the token embedding's tensor
    init_std: float = 0.02
    use_sdpa: bool = False  # fused F.scaled_dot_product_attention instead of the explicit path

    def __new__(cls, *args, **kwargs):
        # before the dataclass's __init__, whose error would not say what the setting is called here
        message = unknown_settings(cls, kwargs)
        if message:
            raise TypeError(message)
        return super().__new__(cls)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "ffn_multiple_of"):
            check_int(name, getattr(self, name), low=1)
        if self.d_ff is not None:
            check_int("d_ff", self.d_ff, low=1)
        check_divisible(self.d_model, self.n_heads)
        check_choice("ffn", self.ffn, FFN_KINDS)
        check_choice("norm", self.norm, NORMS)
        check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        check_choice("positional", self.positional, POSITIONALS)
        check_prob("dropout", self.dropout)
        for name in ("norm_eps", "init_std", "rope_base"):
            check_positive(name, getattr(self, name))
        for name in ("bias", "tie_weights", "use_sdpa"):
            check_bool(name, getattr(self, name))
        if self.positional == "rope" and self.d_head % 2:
            raise ValueError(
                f"positional='rope' rotates pairs of features, so d_model / n_heads must be even, "
                f"got d_head={self.d_head} (d_model={self.d_model}, n_heads={self.n_heads})"
            )
        if self.positional in ("sinusoidal", "scaled_sinusoidal") and self.d_model % 2:
            raise ValueError(f"positional={self.positional!r} needs an even d_model, got {self.d_model}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def block_kwargs(self) -> dict:
        """Keyword arguments for :class:`~transformer_lib.layers.block.TransformerBlock`
        and ``DecoderBlock``."""
        return dict(
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            norm=self.norm,
            norm_position=self.norm_position,
            norm_eps=self.norm_eps,
            ffn=self.ffn,
            ffn_multiple_of=self.ffn_multiple_of,
            dropout=self.dropout,
            bias=self.bias,
            use_sdpa=self.use_sdpa,
        )

    def to_dict(self) -> dict:
        return asdict(self)


def check_config(config, expected: type, model: str, converter: str | None = None) -> None:
    """``config`` must be an ``expected`` (``tl.GPT2`` also takes a plain :class:`TransformerConfig`).

    Another model's config carries that model's defaults (``BERTConfig`` is post-norm with a
    token-type table), so accepting it would build a model other than the one named.
    """
    if isinstance(config, expected) or (model == "GPT2" and type(config) is TransformerConfig):
        return
    got = type(config).__name__
    if type(config).__module__.split(".")[0] == "transformers":
        convert = (f"Convert a Hugging Face model with tl.{converter}(hf_model), or write" if converter
                   else "Write")
        hint = (f": that is a Hugging Face config. {convert} tl.{expected.__name__}(...) with this library's "
                "names (d_model, n_layers, n_heads, n_ctx)")
    elif isinstance(config, TransformerConfig):
        hint = (f": a {got} carries another model's defaults (norm_position={config.norm_position!r}, "
                f"ffn={config.ffn!r}, ...), so tl.{model} would not be the model its name says. Build "
                f"tl.{expected.__name__}(...) with the settings you want")
    elif isinstance(config, dict):
        hint = f": build one from the dict with tl.{expected.__name__}(**settings)"
    else:
        hint = ""
    raise TypeError(f"config must be a {expected.__name__}, got {got}{hint}")
