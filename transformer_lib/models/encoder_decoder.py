"""The encoder-decoder Transformer of Vaswani et al. (2017), "Attention Is All You Need".

Taught in chapter 9, *The full Transformer* (``book/09_transformer.ipynb``).

    source -> Encoder (bidirectional self-attention)                    -> memory
    target -> Decoder (causal self-attention, cross-attention to memory) -> logits over the target vocabulary

Defaults follow the paper's base model: post-norm, sinusoidal positions, ReLU FFN, embeddings
scaled by sqrt(d_model), output head tied to the target embedding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .._checks import check_bool, check_finite_logits, check_int, check_padding_mask, check_token_ids
from ..config import TransformerConfig, check_config
from ..init import init_weights_
from ..layers.block import DecoderBlock, TransformerBlock
from ..layers.embedding import TokenEmbedding
from ..params import count_parameters
from ..layers.masks import padding_mask
from ..layers.normalization import make_norm
from ..layers.position_registry import make_positions
from ..generation import beam_search
from ..losses import causal_lm_loss


@dataclass
class EncoderDecoderConfig(TransformerConfig):
    """Transformer-base by default (Vaswani et al., table 3). Defined in chapter 9."""

    vocab_size: int = 37000  # target vocabulary
    src_vocab_size: int | None = None  # None: same as vocab_size
    n_ctx: int = 512
    d_model: int = 512
    n_layers: int = 6  # encoder layers
    n_decoder_layers: int | None = None  # None: same as n_layers
    n_heads: int = 8
    d_ff: int | None = 2048
    ffn: str = "relu"
    norm_position: str = "post"
    positional: str = "sinusoidal"
    dropout: float = 0.1
    # one table for source and target; None: share if one vocabulary (as the paper)
    share_embeddings: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.src_vocab_size is None:
            self.src_vocab_size = self.vocab_size
        if self.n_decoder_layers is None:
            self.n_decoder_layers = self.n_layers
        check_int("src_vocab_size", self.src_vocab_size, low=1)
        check_int("n_decoder_layers", self.n_decoder_layers, low=1)
        if self.share_embeddings is None:
            self.share_embeddings = self.src_vocab_size == self.vocab_size
        check_bool("share_embeddings", self.share_embeddings)
        if self.share_embeddings and self.src_vocab_size != self.vocab_size:
            raise ValueError(
                "share_embeddings needs src_vocab_size == vocab_size, "
                f"got {self.src_vocab_size} and {self.vocab_size}"
            )


class _Embed(nn.Module):
    """Token embedding * sqrt(d_model) + positions, then dropout."""

    def __init__(self, config: EncoderDecoderConfig, vocab_size: int, token_embedding: TokenEmbedding | None = None):
        super().__init__()
        self.token_embedding = token_embedding or TokenEmbedding(vocab_size, config.d_model)
        self.position_embedding, self.positions = make_positions(config)
        self.scale = math.sqrt(config.d_model)  # keeps token vectors on the scale of the positions (paper, 3.4)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, ids: Tensor, name: str) -> Tensor:
        x = self.token_embedding(ids, name=name) * self.scale
        if self.position_embedding is not None:
            x = x + self.position_embedding(ids.shape[1])
        return self.drop(x)


class EncoderDecoder(nn.Module):
    """Sequence-to-sequence Transformer. Defined in chapter 9."""

    def __init__(self, config: EncoderDecoderConfig) -> None:
        super().__init__()
        check_config(config, EncoderDecoderConfig, "EncoderDecoder")
        self.config = config
        final_norm = lambda: (  # noqa: E731
            make_norm(config.norm, config.d_model, config.norm_eps, config.bias)
            if config.norm_position == "pre" else nn.Identity()
        )
        self.src_embed = _Embed(config, config.src_vocab_size)
        self.encoder = nn.ModuleList(
            TransformerBlock(**config.block_kwargs(), attn_kind="bidirectional", positions=self.src_embed.positions)
            for _ in range(config.n_layers)
        )
        self.encoder_norm = final_norm()
        shared = self.src_embed.token_embedding if config.share_embeddings else None
        self.tgt_embed = _Embed(config, config.vocab_size, shared)
        self.decoder = nn.ModuleList(
            DecoderBlock(**config.block_kwargs(), positions=self.tgt_embed.positions)
            for _ in range(config.n_decoder_layers)
        )
        self.decoder_norm = final_norm()
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        init_weights_(self, std=config.init_std)
        if config.tie_weights:
            self.lm_head.weight = self.tgt_embed.token_embedding.weight

    def encode(self, src_ids: Tensor, src_attention_mask: Tensor | None = None) -> Tensor:
        """``(batch, seq_src)`` ids -> memory ``(batch, seq_src, d_model)``. Padded source keys are hidden."""
        check_token_ids("src_ids", src_ids, n_ctx=self.config.n_ctx)
        mask = check_padding_mask("src_attention_mask", src_attention_mask, tuple(src_ids.shape),
                                  src_ids.device)
        mask = padding_mask(mask) if mask is not None else None
        x = self.src_embed(src_ids, "src_ids")
        for block in self.encoder:
            x = block(x, mask=mask)
        return self.encoder_norm(x)

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_attention_mask: Tensor | None = None,
        tgt_attention_mask: Tensor | None = None,
    ) -> Tensor:
        """``(batch, seq_tgt)`` target ids (shifted right, starting with BOS) + memory
        -> ``(batch, seq_tgt, vocab)`` logits."""
        check_token_ids("tgt_ids", tgt_ids, n_ctx=self.config.n_ctx)
        batch, d_model = tgt_ids.shape[0], self.config.d_model
        if (not isinstance(memory, Tensor) or memory.dim() != 3 or memory.shape[0] != batch
                or memory.shape[-1] != d_model):
            got = tuple(memory.shape) if isinstance(memory, Tensor) else type(memory).__name__
            raise ValueError(f"memory must have shape (batch={batch}, seq_src, d_model={d_model}), got {got}")
        src_mask = check_padding_mask("src_attention_mask", src_attention_mask, tuple(memory.shape[:2]),
                                      memory.device)
        tgt_mask = check_padding_mask("tgt_attention_mask", tgt_attention_mask, tuple(tgt_ids.shape),
                                      tgt_ids.device)
        src_mask = padding_mask(src_mask) if src_mask is not None else None
        tgt_mask = padding_mask(tgt_mask) if tgt_mask is not None else None
        x = self.tgt_embed(tgt_ids, "tgt_ids")
        for block in self.decoder:
            x = block(x, memory, self_mask=tgt_mask, memory_mask=src_mask)
        return self.lm_head(self.decoder_norm(x))

    def forward(
        self,
        src_ids: Tensor,
        tgt_ids: Tensor,
        src_attention_mask: Tensor | None = None,
        tgt_attention_mask: Tensor | None = None,
    ) -> Tensor:
        """Teacher forcing: ``(batch, seq_src)``, ``(batch, seq_tgt)``
        -> ``(batch, seq_tgt, vocab)`` logits."""
        check_token_ids("src_ids", src_ids, n_ctx=self.config.n_ctx)  # (batch, seq) each: 1-D ids are
        check_token_ids("tgt_ids", tgt_ids, n_ctx=self.config.n_ctx)  # said so, not taken for batches
        if src_ids.shape[0] != tgt_ids.shape[0]:
            raise ValueError("src_ids and tgt_ids must have the same batch size, "
                             f"got {src_ids.shape[0]} and {tgt_ids.shape[0]}")
        memory = self.encode(src_ids, src_attention_mask)
        return self.decode(tgt_ids, memory, src_attention_mask, tgt_attention_mask)

    def loss(
        self,
        src_ids: Tensor,
        tgt_ids: Tensor,
        targets: Tensor,
        src_attention_mask: Tensor | None = None,
        tgt_attention_mask: Tensor | None = None,
        label_smoothing: float = 0.0,
    ) -> Tensor:
        """Teacher-forced loss: ``targets`` ``(batch, seq_tgt)`` are ``tgt_ids`` shifted left by one
        (``IGNORE_INDEX`` at padding). The batch order :func:`~transformer_lib.training.train` passes.
        ``label_smoothing``: the paper trains with 0.1 (see :func:`~transformer_lib.causal_lm_loss`)."""
        logits = self(src_ids, tgt_ids, src_attention_mask, tgt_attention_mask)
        return causal_lm_loss(logits, targets, label_smoothing)

    @torch.no_grad()
    def generate(
        self,
        src_ids: Tensor,
        bos_token_id: int,
        max_new_tokens: int,
        eos_token_id: int | None = None,
        src_attention_mask: Tensor | None = None,
        *,
        num_beams: int = 1,
        length_penalty: float = 1.0,
        pad_token_id: int | None = None,
        early_stopping: bool = False,
    ) -> Tensor:
        """Greedy decoding: ``(batch, 1 + max_new_tokens)`` target ids starting with ``bos_token_id``.

        After a sequence emits ``eos_token_id`` it keeps emitting it (so rows stay aligned).
        ``num_beams > 1``: beam search (:func:`~transformer_lib.generation.beam_search`, chapter 9)
        with ``length_penalty`` (the paper: 4 beams, 0.6); rows that end early are padded with
        ``pad_token_id`` (else ``eos_token_id``), up to the longest row.
        """
        check_int("bos_token_id", bos_token_id, low=0, high=self.config.vocab_size - 1)
        check_int("max_new_tokens", max_new_tokens, low=1, high=self.config.n_ctx - 1)
        check_int("num_beams", num_beams, low=1)
        for name, value in (("eos_token_id", eos_token_id), ("pad_token_id", pad_token_id)):
            if value is not None:
                check_int(name, value, low=0, high=self.config.vocab_size - 1)
        check_bool("early_stopping", early_stopping)
        was_training = self.training
        self.eval()  # decoding must not drop out
        try:
            if num_beams == 1:
                return self._greedy(src_ids, bos_token_id, max_new_tokens, eos_token_id, src_attention_mask)
            memory = self.encode(src_ids, src_attention_mask).repeat_interleave(num_beams, dim=0)
            mask = (None if src_attention_mask is None
                    else src_attention_mask.repeat_interleave(num_beams, dim=0))
            start = torch.full((src_ids.shape[0], 1), bos_token_id, dtype=torch.long, device=src_ids.device)
            def next_logits(ids: Tensor) -> Tensor:
                logits = self.decode(ids, memory, mask)[:, -1]
                check_finite_logits(logits, self)  # NaN weights would rank every beam alike
                return logits

            return beam_search(next_logits, start, max_new_tokens,
                               num_beams, vocab_size=self.config.vocab_size, length_penalty=length_penalty,
                               eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                               early_stopping=early_stopping)
        finally:
            self.train(was_training)

    def _greedy(self, src_ids, bos_token_id, max_new_tokens, eos_token_id, src_attention_mask) -> Tensor:
        memory = self.encode(src_ids, src_attention_mask)
        out = torch.full((src_ids.shape[0], 1), bos_token_id, dtype=torch.long, device=src_ids.device)
        done = torch.zeros(src_ids.shape[0], dtype=torch.bool, device=src_ids.device)
        for _ in range(max_new_tokens):
            logits = self.decode(out, memory, src_attention_mask)[:, -1]
            check_finite_logits(logits, self)  # NaN weights would make every token 0
            nxt = logits.argmax(dim=-1)
            if eos_token_id is not None:
                nxt = torch.where(done, eos_token_id, nxt)
                done |= nxt == eos_token_id
            out = torch.cat([out, nxt[:, None]], dim=1)
        return out

    def num_parameters(self) -> int:
        """Distinct parameters (shared or tied embeddings counted once)."""
        return count_parameters(self)
