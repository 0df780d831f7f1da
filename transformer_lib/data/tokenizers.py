"""Tokenizers: text -> token ids -> text.

Taught in chapter 1, *Tokens, embeddings and logits* (``book/01_tokens.ipynb``).
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import torch


class CharTokenizer:
    """One token per distinct character of a corpus, ids in sorted character order."""

    def __init__(self, chars: Iterable[str]) -> None:
        self.chars = sorted(set(chars))
        if any(len(c) != 1 for c in self.chars):
            raise ValueError("CharTokenizer needs single characters")
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(text)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[c] for c in text]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in this tokenizer's vocabulary "
                             f"of {self.vocab_size}") from None

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < self.vocab_size]
        if bad:  # (a negative index would silently wrap around in Python)
            raise ValueError(f"token ids must be ints in [0, {self.vocab_size - 1}], got {bad[0]!r}")
        return "".join(self.chars[i] for i in ids)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def gpt2_tokenizer():
    """GPT-2's byte-pair encoding (50,257 tokens), through tiktoken.

    tiktoken downloads its two vocabulary files once and caches them; offline, point
    ``TIKTOKEN_CACHE_DIR`` at a folder holding them (see the README).
    """
    import tiktoken

    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken raises requests/OSError/ValueError depending on the failure
        where = os.environ.get("TIKTOKEN_CACHE_DIR", "tiktoken's default cache")
        raise RuntimeError(
            f"could not load tiktoken's GPT-2 encoding ({type(e).__name__}: {e}). It downloads two files once; "
            f"offline, set TIKTOKEN_CACHE_DIR to a folder that holds them (looked in: {where})."
        ) from e
