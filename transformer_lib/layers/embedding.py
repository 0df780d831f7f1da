"""Token embeddings: a lookup table from token id to vector.

Taught in chapter 1, *Tokens, embeddings and logits* (``book/01_tokens.ipynb``).

Looking up row ``i`` of ``weight`` is the same as multiplying a one-hot vector by it; the
output head does the reverse, ``logits = x @ weight.T``, which is why the two can share
one tensor (chapter 6, *Weight tying*).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int, check_token_ids


class TokenEmbedding(nn.Module):
    """Rows ``ids`` of ``weight``, with a clear error for ids out of range. Defined in chapter 1."""

    def __init__(self, vocab_size: int, d_model: int, n_rows: int | None = None) -> None:
        """``n_rows``: rows of the table, ``vocab_size`` by default; more pads it (chapter 11),
        ids stay below ``vocab_size``."""
        super().__init__()
        check_int("vocab_size", vocab_size, low=1)
        check_int("d_model", d_model, low=1)
        n_rows = vocab_size if n_rows is None else n_rows
        check_int("n_rows", n_rows, low=vocab_size)
        self.vocab_size, self.d_model = vocab_size, d_model
        self.weight = nn.Parameter(torch.randn(n_rows, d_model) * 0.02)

    def forward(self, ids: Tensor, name: str = "input_ids") -> Tensor:
        """``(batch, seq)`` token ids -> ``(batch, seq, d_model)`` vectors.

        ``name`` is used in error messages."""
        check_token_ids(name, ids, self.vocab_size)
        # F.embedding rather than weight[ids]: the same rows, a faster forward on a CPU (chapter 1)
        return F.embedding(ids, self.weight)
