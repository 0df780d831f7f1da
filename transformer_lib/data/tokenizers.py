"""Tokenizers: text -> token ids -> text.

Taught in chapter 1, *Tokens, embeddings and logits* (``book/01_tokens.ipynb``).
"""

from __future__ import annotations

import numbers
import os
from typing import Iterable, Sequence

import torch


class CharTokenizer:
    """One token per distinct character of a corpus, ids in sorted character order."""

    def __init__(self, chars: Iterable[str]) -> None:
        self.chars = sorted(_character_set(chars))
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        _check_text(text)
        return cls(text)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        _check_text(text)
        try:
            return [self.stoi[c] for c in text]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in this tokenizer's vocabulary "
                             f"of {self.vocab_size}") from None

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        ids = _id_list(ids)
        bad = [i for i in ids if not isinstance(i, numbers.Integral) or not 0 <= i < self.vocab_size]
        if bad:  # (a negative index would silently wrap around in Python)
            raise ValueError(f"token ids must be ints in [0, {self.vocab_size - 1}], got {bad[0]!r}")
        return "".join(self.chars[int(i)] for i in ids)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def _character_set(chars) -> set[str]:
    if isinstance(chars, bytes) or not isinstance(chars, Iterable):
        raise TypeError(f"chars must be a str (a text) or single characters, got {type(chars).__name__}")
    found = set(chars)
    if not found:
        raise ValueError("the text is empty: a CharTokenizer needs at least one character "
                         "(was the file read?)")
    bad = [c for c in found if not isinstance(c, str) or len(c) != 1]
    if bad:
        raise ValueError(f"CharTokenizer needs single characters, got {bad[0]!r}: for a list of lines, "
                         "pass the text, CharTokenizer.from_text(''.join(lines))")
    return found


def _check_text(text) -> None:
    if not isinstance(text, str):
        hint = (": encode one string at a time, [tok.encode(t) for t in texts]"
                if isinstance(text, (list, tuple)) else
                f": tok.encode(str({text!r}))" if isinstance(text, (int, float)) else "")
        raise TypeError(f"text must be a str, got {type(text).__name__}{hint}")


def _id_list(ids) -> list:
    """``ids`` as a list of Python ints: a tensor, a NumPy array or a sequence of one sequence's ids."""
    if isinstance(ids, torch.Tensor) or type(ids).__module__ == "numpy":
        if ids.ndim != 1:
            raise ValueError(f"ids must be one sequence (1-D), got shape {tuple(ids.shape)}: "
                             "decode each row, tok.decode(ids[0])")
        return ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise TypeError(f"ids must be a sequence of token ids, got {type(ids).__name__} {ids!r}")
    return list(ids)


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
