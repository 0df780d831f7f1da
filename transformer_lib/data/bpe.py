"""Byte-level byte-pair encoding (BPE): learn merges from a text, encode and decode with them.

Taught in chapter 1, *Tokens, embeddings and logits* (``book/01_tokens.ipynb``).

GPT-2's tokenizer (Radford et al., 2019) is BPE (Sennrich et al., 2016) on bytes:

1. a regular expression cuts the text into chunks (a word with the space before it, a number,
   a run of punctuation, whitespace), so that no token spans two words;
2. each chunk becomes its UTF-8 bytes, ids 0-255: every string has an encoding;
3. training counts the adjacent pairs of ids over all chunks, gives the most frequent pair a
   new id (256, 257, ...), replaces it everywhere, and repeats.

Encoding applies the learned merges to a new text, earliest merge first; decoding joins the
bytes. :meth:`BPETokenizer.from_tiktoken` reads GPT-2's own 50,000 merges into this class.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter, defaultdict
from typing import Sequence

import torch

from .._checks import check_int
from .tokenizers import _check_text, _id_list

# GPT-2's split pattern, as tiktoken writes it (needs the `regex` module for \p{L}, \p{N}, ++)
GPT2_SPLIT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""

Pair = tuple[int, int]


def pair_counts(chunks: Sequence[list[int]], freqs: Sequence[int]) -> Counter:
    """How often each adjacent pair of ids occurs; chunk ``k`` counts ``freqs[k]`` times."""
    counts = Counter()
    for ids, freq in zip(chunks, freqs):
        for pair in zip(ids, ids[1:]):
            counts[pair] += freq
    return counts


def most_frequent(counts: Counter) -> Pair:
    """The pair to merge next: the most frequent; on a tie the smallest, comparing pairs as tuples.

    The tie rule depends on the counts alone, not on the order they were counted in, so updating
    the counts after a merge gives the same merges as counting everything again (minbpe takes the
    first pair counted, subword-nmt the largest: conventions differ).
    """
    return min(counts, key=lambda pair: (-counts[pair], pair))


def merge_pair(ids: list[int], pair: Pair, new_id: int) -> list[int]:
    """``ids`` with each occurrence of ``pair``, from left to right, replaced by ``new_id``."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)  # "a a a" merges its first two: (aa) a
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_bpe(text: str, n_merges: int, pattern: str = GPT2_SPLIT) -> BPETokenizer:
    """Learn ``n_merges`` merges from ``text``: count the pairs, merge the most frequent, repeat.

    Defined in chapter 1. A chunk that occurs many times is stored once with its count. After a
    merge only the chunks that held the pair change, so only their pairs are counted again
    (recounting every chunk after every merge gives the same merges, many times slower).
    """
    _check_text(text)
    check_int("n_merges", n_merges, low=0)
    chunk_counts = Counter(_compile(pattern).findall(text))
    if not chunk_counts:
        raise ValueError("text is empty: BPE learns its merges from the pairs of bytes in a text")
    chunks = [list(chunk.encode("utf-8")) for chunk in chunk_counts]  # each distinct chunk once
    freqs = list(chunk_counts.values())
    counts = pair_counts(chunks, freqs)
    holding = defaultdict(set)  # pair -> the chunks it occurs in
    for k, ids in enumerate(chunks):
        for pair in zip(ids, ids[1:]):
            holding[pair].add(k)
    merges = []  # (a, b) at index i: the pair that token 256 + i joins
    for new_id in range(256, 256 + n_merges):
        counts = +counts  # drop the pairs counted down to zero
        if not counts:
            raise ValueError(f"n_merges={n_merges}, but after {len(merges)} merges every chunk of the text "
                             f"is one token and no pair is left to merge: use n_merges <= {len(merges)}")
        pair = most_frequent(counts)
        merges.append(pair)
        for k in holding.pop(pair):  # popped: once merged everywhere, the pair cannot come back
            old = chunks[k]  # a chunk listed here may have lost the pair since; then old == new below
            chunks[k] = new = merge_pair(old, pair, new_id)
            for p in zip(old, old[1:]):
                counts[p] -= freqs[k]
            for p in zip(new, new[1:]):
                counts[p] += freqs[k]
                holding[p].add(k)
    return BPETokenizer(merges, pattern)


class BPETokenizer:
    """Byte-level BPE: ids 0-255 are the bytes, id ``256 + i`` joins the pair ``merges[i]``.

    Defined in chapter 1. Learn one with :func:`train_bpe`; :meth:`from_tiktoken` loads GPT-2's.
    Decoding a piece of a multi-byte character shows it as U+FFFD (tiktoken does the same).
    """

    def __init__(self, merges: Sequence[Pair], pattern: str = GPT2_SPLIT) -> None:
        self.merges = _checked_merges(merges)
        self.ranks = {pair: 256 + i for i, pair in enumerate(self.merges)}  # pair -> its new id
        self.vocab = [bytes([b]) for b in range(256)]  # id -> the bytes it stands for
        for a, b in self.merges:
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self.pattern = pattern
        self._split = _compile(pattern)
        self._cache: dict[str, list[int]] = {}  # chunk -> ids: text repeats its words

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        _check_text(text)  # the same chunks as in training, each encoded on its own
        return [i for chunk in self._split.findall(text) for i in self._encode_chunk(chunk)]

    def _encode_chunk(self, chunk: str) -> list[int]:
        if chunk not in self._cache:  # a text repeats its words: each distinct chunk is encoded once
            ids = list(chunk.encode("utf-8"))
            # the earliest learned merge first, as training made them: a chunk gets training's tokens
            while len(ids) > 1:
                pair = min(zip(ids, ids[1:]), key=lambda p: self.ranks.get(p, math.inf))
                if pair not in self.ranks:
                    break
                ids = merge_pair(ids, pair, self.ranks[pair])
            self._cache[chunk] = ids
        return self._cache[chunk]

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        data = b"".join(self.decode_single_token_bytes(i) for i in _id_list(ids))
        # a token cut out of a multi-byte character is not valid UTF-8: U+FFFD stands in for it
        return data.decode("utf-8", errors="replace")

    def decode_single_token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token (tiktoken's name, so the book's figures take either)."""
        if isinstance(token_id, bool) or not isinstance(token_id, numbers.Integral) \
                or not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token ids must be ints in [0, {self.vocab_size - 1}], got {token_id!r}")
        return self.vocab[int(token_id)]

    @classmethod
    def from_tiktoken(cls, encoding) -> BPETokenizer:
        """A tiktoken byte-level ``Encoding`` (e.g. GPT-2's) as merges: the same tokens, other ids.

        tiktoken stores each token's bytes with a rank, not the pair it was made from. A token of
        rank ``r`` splits into the two tokens that BPE forms from its bytes with the merges ranked
        below ``r``. The ids of the single bytes differ from tiktoken's (its ranks 0-255 are the
        bytes in another order); ``decode_single_token_bytes`` compares the two.
        """
        ranks = encoding._mergeable_ranks  # bytes -> rank, without the special tokens
        by_rank = sorted(ranks, key=ranks.get)
        bytes_first = sorted(by_rank[:256]) == [bytes([b]) for b in range(256)]
        if not bytes_first or any(len(t) < 2 for t in by_rank[256:]):
            raise ValueError(f"{encoding.name!r} is not a byte-level BPE whose first 256 ranks are the bytes")
        ids = {bytes([b]): b for b in range(256)}
        merges = []
        for token in by_rank[256:]:
            left, right = _last_merge(token, ranks)
            merges.append((ids[left], ids[right]))
            ids[token] = 256 + len(merges) - 1
        return cls(merges, encoding._pat_str)

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)})"


def _last_merge(token: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The two tokens that BPE with the merges ranked below ``token``'s joins into ``token``."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        i = min(range(len(parts) - 1), key=lambda j: ranks.get(parts[j] + parts[j + 1], math.inf))
        if ranks.get(parts[i] + parts[i + 1], math.inf) >= ranks[token]:
            raise ValueError(f"token {token!r} cannot be built from the tokens ranked below it")
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts[0], parts[1]


def _checked_merges(merges) -> list[Pair]:
    if isinstance(merges, (str, bytes, dict)) or not isinstance(merges, Sequence):
        raise TypeError(f"merges must be a list of (id, id) pairs, got {type(merges).__name__}")
    out, seen = [], {}
    for i, pair in enumerate(merges):
        ok = isinstance(pair, (tuple, list)) and len(pair) == 2 and all(
            isinstance(t, numbers.Integral) and not isinstance(t, bool) and 0 <= t < 256 + i for t in pair)
        if not ok:
            raise ValueError(f"merges[{i}] must be a pair of ids in [0, {256 + i - 1}] (the bytes and the "
                             f"merges before it), got {pair!r}")
        pair = (int(pair[0]), int(pair[1]))
        if pair in seen:
            raise ValueError(f"merges[{i}] = {pair} repeats merges[{seen[pair]}]: each pair is merged once")
        seen[pair] = i
        out.append(pair)
    return out


def _compile(pattern: str):
    import regex  # GPT-2's pattern uses \p{L} and possessive quantifiers, which `re` lacks

    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a regular expression (str), got {type(pattern).__name__}")
    return regex.compile(pattern)
