"""GPT-2: a decoder-only transformer with learned positions, pre-norm blocks and a tied head.

Taught in chapter 7, *GPT-2* (``book/07_gpt2.ipynb``); weight tying in chapter 6.

    tokens -> token embedding + position embedding -> n_layers x TransformerBlock(causal)
           -> final norm -> lm_head (weight = token embedding's weight) -> logits
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .._checks import check_int, check_padding_mask, check_token_ids
from ..config import TransformerConfig, check_config
from ..init import init_weights_
from ..layers.block import TransformerBlock
from ..layers.embedding import TokenEmbedding
from ..params import count_parameters
from ..layers.kv_cache import KVCache
from ..layers.masks import padding_mask
from ..layers.normalization import make_norm
from ..layers.position_registry import make_positions
from ..layers.positions import RotaryEmbedding
from ..losses import causal_lm_loss
from ._hub import hf_activation, load_hf_model


@dataclass
class GPT2Config(TransformerConfig):
    """GPT-2 small by default (124M parameters). Defined in chapter 7."""

    vocab_size: int = 50257
    n_ctx: int = 1024
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    ffn: str = "gelu_tanh"
    # rows of the embedding and the head rounded up to a multiple of this (64: GPU-friendly matrix
    # shapes, 50257 -> 50304); the extra rows are never looked up and their logits are cut off
    vocab_multiple_of: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("vocab_multiple_of", self.vocab_multiple_of, low=1)

    @property
    def padded_vocab_size(self) -> int:
        """``vocab_size`` rounded up to a multiple of ``vocab_multiple_of``."""
        return -(-self.vocab_size // self.vocab_multiple_of) * self.vocab_multiple_of


class GPT2(nn.Module):
    """Decoder-only language model. Defined in chapter 7.

    With ``norm="rmsnorm", positional="rope", ffn="swiglu", bias=False, tie_weights=False`` the
    same class is a LLaMA-style decoder (chapter 10).
    """

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        check_config(config, GPT2Config, "GPT2", "gpt2_from_hf")  # not another model's config
        self.config = config
        padded = getattr(config, "padded_vocab_size", config.vocab_size)
        self.token_embedding = TokenEmbedding(config.vocab_size, config.d_model, n_rows=padded)
        # a table added to the embeddings, or a scheme every attention layer applies (RoPE)
        self.position_embedding, self.positions = make_positions(config)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(**config.block_kwargs(), attn_kind="causal", positions=self.positions)
            for _ in range(config.n_layers)
        )
        # pre-norm leaves the residual stream unnormalised, so one last norm precedes the head
        pre_norm = config.norm_position == "pre"  # pre-norm blocks leave the stream unnormalised
        self.norm_f = (make_norm(config.norm, config.d_model, config.norm_eps, config.bias) if pre_norm
                       else nn.Identity())
        self.lm_head = nn.Linear(config.d_model, padded, bias=False)
        init_weights_(self, std=config.init_std, n_layers=config.n_layers)
        if config.tie_weights:
            self.lm_head.weight = self.token_embedding.weight  # one tensor, two uses

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, kv_cache: KVCache | None = None
    ) -> Tensor:
        """
        Args:
            input_ids: ``(batch, seq)`` token ids in ``[0, vocab_size)``; with a cache, only the new ones.
            attention_mask: ``(batch, seq)`` 1 = token, 0 = padding; padded keys are hidden.
            kv_cache: a :class:`KVCache` of ``n_layers`` layers, extended in place.

        Returns:
            ``(batch, seq, vocab_size)`` logits.
        """
        offset = 0 if kv_cache is None else len(kv_cache)
        check_token_ids("input_ids", input_ids, n_ctx=self.config.n_ctx, offset=offset)
        mask = check_padding_mask("attention_mask", attention_mask, tuple(input_ids.shape), input_ids.device)
        if mask is not None and kv_cache is not None:
            raise ValueError("attention_mask and kv_cache cannot be combined: generate from unpadded prompts")
        if kv_cache is not None and len(kv_cache.layers) != len(self.blocks):
            raise ValueError(f"kv_cache has {len(kv_cache.layers)} layers, "
                             f"the model has n_layers={len(self.blocks)}")
        mask = padding_mask(mask) if mask is not None else None

        x = self.token_embedding(input_ids)  # (batch, seq, d_model)
        if self.position_embedding is not None:
            x = x + self.position_embedding(input_ids.shape[1], offset)
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, mask=mask, kv_cache=None if kv_cache is None else kv_cache[i])
        logits = self.lm_head(self.norm_f(x))  # (batch, seq, padded vocabulary)
        if logits.shape[-1] != self.config.vocab_size:
            logits = logits[..., : self.config.vocab_size]  # padding rows are not tokens
        return logits

    def loss(self, input_ids: Tensor, targets: Tensor, attention_mask: Tensor | None = None,
             label_smoothing: float = 0.0) -> Tensor:
        """Causal-LM loss: ``targets`` are ``input_ids`` shifted left by one (see :func:`causal_lm_loss`)."""
        return causal_lm_loss(self(input_ids, attention_mask), targets, label_smoothing)

    def new_kv_cache(self) -> KVCache:
        return KVCache(len(self.blocks))

    @property
    def rope(self) -> RotaryEmbedding | None:
        """The rotary embedding that every attention layer applies, if ``positional="rope"`` (chapter 10)."""
        return self.positions if isinstance(self.positions, RotaryEmbedding) else None

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of distinct parameters (a tied head is counted once).

        ``exclude_embeddings``: leave out token and position embeddings, as in Kaplan et al.'s
        "non-embedding parameters" (a *tied* head is the token embedding, so it goes too).
        """
        embeddings = (self.token_embedding, self.position_embedding)
        return count_parameters(self, exclude=embeddings if exclude_embeddings else ())

    @classmethod
    def from_pretrained(cls, model_name: str = "gpt2") -> "GPT2":
        """Fetch ``gpt2`` / ``gpt2-medium`` / ``gpt2-large`` / ``gpt2-xl`` from the Hub and convert it."""
        return gpt2_from_hf(load_hf_model("GPT2LMHeadModel", model_name))


def gpt2_from_hf(hf_model, vocab_multiple_of: int = 1) -> GPT2:
    """Convert a Hugging Face ``GPT2LMHeadModel`` into a :class:`GPT2` with the same weights.

    ``vocab_multiple_of=64`` pads the embedding and head with zero rows (50257 -> 50304); the
    logits are the same.

    Hugging Face stores GPT-2's linear layers as ``Conv1D`` with weights ``(in, out)``: they are
    transposed into ``nn.Linear``'s ``(out, in)``. ``c_attn`` packs W_Q, W_K, W_V side by side.

    ==============================  ====================================
    Hugging Face                    transformer_lib
    ==============================  ====================================
    transformer.wte                 token_embedding
    transformer.wpe                 position_embedding
    transformer.h.{i}.ln_1          blocks.{i}.norm_1
    transformer.h.{i}.attn.c_attn   blocks.{i}.attn.W_Q / W_K / W_V
    transformer.h.{i}.attn.c_proj   blocks.{i}.attn.W_O
    transformer.h.{i}.ln_2          blocks.{i}.norm_2
    transformer.h.{i}.mlp.c_fc      blocks.{i}.ffn.W_in
    transformer.h.{i}.mlp.c_proj    blocks.{i}.ffn.W_out
    transformer.ln_f                norm_f
    lm_head                         lm_head (tied to token_embedding)
    ==============================  ====================================
    """
    hf = hf_model.config
    if not getattr(hf, "scale_attn_weights", True) or getattr(hf, "scale_attn_by_inverse_layer_idx", False):
        raise ValueError(
            "unsupported GPT-2 variant: scale_attn_weights=False or scale_attn_by_inverse_layer_idx=True "
            "(our attention always divides by sqrt(d_head))"
        )
    config = GPT2Config(
        vocab_size=hf.vocab_size,
        n_ctx=hf.n_positions,
        d_model=hf.n_embd,
        n_layers=hf.n_layer,
        n_heads=hf.n_head,
        d_ff=hf.n_inner,
        ffn=hf_activation(hf.activation_function),
        norm_eps=hf.layer_norm_epsilon,
        tie_weights=bool(getattr(hf, "tie_word_embeddings", True)),
        vocab_multiple_of=vocab_multiple_of,
    )
    model = GPT2(config)
    src = {k: v.detach() for k, v in hf_model.state_dict().items()}
    d = config.d_model
    state = {
        "token_embedding.weight": src["transformer.wte.weight"],
        "position_embedding.weight": src["transformer.wpe.weight"],
        "norm_f.weight": src["transformer.ln_f.weight"],
        "norm_f.bias": src["transformer.ln_f.bias"],
        "lm_head.weight": src["lm_head.weight"] if "lm_head.weight" in src else src["transformer.wte.weight"],
    }
    for i in range(config.n_layers):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        w_qkv, b_qkv = src[h + "attn.c_attn.weight"].T, src[h + "attn.c_attn.bias"]  # (3d, d), (3d,)
        for j, name in enumerate(("W_Q", "W_K", "W_V")):
            state[b + f"attn.{name}.weight"] = w_qkv[j * d : (j + 1) * d]
            state[b + f"attn.{name}.bias"] = b_qkv[j * d : (j + 1) * d]
        state[b + "attn.W_O.weight"] = src[h + "attn.c_proj.weight"].T
        state[b + "attn.W_O.bias"] = src[h + "attn.c_proj.bias"]
        state[b + "ffn.W_in.weight"] = src[h + "mlp.c_fc.weight"].T
        state[b + "ffn.W_in.bias"] = src[h + "mlp.c_fc.bias"]
        state[b + "ffn.W_out.weight"] = src[h + "mlp.c_proj.weight"].T
        state[b + "ffn.W_out.bias"] = src[h + "mlp.c_proj.bias"]
        for ours, theirs in (("norm_1", "ln_1"), ("norm_2", "ln_2")):
            state[b + f"{ours}.weight"] = src[h + f"{theirs}.weight"]
            state[b + f"{ours}.bias"] = src[h + f"{theirs}.bias"]
    extra = config.padded_vocab_size - config.vocab_size
    for name in ("token_embedding.weight", "lm_head.weight"):
        # (padded vocabulary, d_model)
        state[name] = torch.cat([state[name], state[name].new_zeros(extra, d)])
    with torch.no_grad():
        # copies into our tensors, so a tied head stays one tensor
        model.load_state_dict({k: v.contiguous() for k, v in state.items()}, strict=True)
    return model.eval()
