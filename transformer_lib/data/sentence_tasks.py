"""Sentence-level data for BERT: pairs for next-sentence prediction, and a classification task.

Taught in chapter 8, *BERT* (``book/08_bert.ipynb``).

* :func:`speeches` splits a play's text (Tiny Shakespeare's layout: a line ``NAME:``, then the
  speech, then a blank line) into ``(speaker, speech lines)``.
* :func:`nsp_pairs`: BERT's next-sentence prediction from consecutive lines of the speeches: half
  the pairs are a line and the line after it (label 0, "is next"), half a line and a random
  other line (label 1), as Hugging Face's ``BertForPreTraining`` labels them.
* :func:`speaker_lines`: which of the ``n_speakers`` most frequent speakers says a line, the
  speaker-name lines left out of the inputs, with a fixed train/test split by whole speeches.
* :func:`encode_lines` / :func:`encode_pairs`: ``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``
  with segment ids 0 / 1, padded, and the attention mask.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Callable, Sequence

import torch
from torch import Tensor

from .._checks import check_int


def speeches(text: str) -> list[tuple[str, list[str]]]:
    """``(speaker, lines)`` for every block of the text that starts with a line ``NAME:``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    out = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line.strip()]
        if len(lines) >= 2 and lines[0].endswith(":") and not lines[0][:-1].endswith(":"):
            out.append((lines[0][:-1].strip(), lines[1:]))
    return out


def nsp_pairs(text: str, n_pairs: int, seed: int = 0) -> list[tuple[str, str, int]]:
    """``n_pairs`` of ``(A, B, label)`` from consecutive lines of a speech: label 0 when B is the
    line after A (half the pairs, rounded up), 1 when B is a random line from anywhere else."""
    check_int("n_pairs", n_pairs, low=1)
    consecutive = [(a, b) for _, lines in speeches(text) for a, b in zip(lines, lines[1:])]
    every_line = [line for _, lines in speeches(text) for line in lines]
    if not consecutive:
        raise ValueError("text has no speech with two lines: nothing to pair")
    rng = random.Random(seed)
    pairs = []
    for k in range(n_pairs):
        a, b = rng.choice(consecutive)
        if k % 2:  # a random line instead of the true next one (never the next line itself)
            while (other := rng.choice(every_line)) == b:
                pass
            pairs.append((a, other, 1))
        else:
            pairs.append((a, b, 0))
    rng.shuffle(pairs)
    return pairs


def speaker_lines(text: str, n_speakers: int, test_every: int = 5) -> dict:
    """Lines labelled with who says them, for the ``n_speakers`` speakers with the most lines.

    Returns ``dict(speakers=[names, most lines first], train=[(line, class)], test=[(line, class)])``.
    The split is fixed and by whole speeches (every ``test_every``-th speech of each speaker goes to
    the test set), so no speech has lines on both sides; a test line whose text also occurs in
    training is dropped. The speaker-name lines are never inputs.
    """
    check_int("n_speakers", n_speakers, low=2)
    check_int("test_every", test_every, low=2)
    blocks = speeches(text)
    counts = Counter()
    for speaker, lines in blocks:
        counts[speaker] += len(lines)
    if len(counts) < n_speakers:
        raise ValueError(f"n_speakers must be at most the {len(counts)} speakers in the text, "
                         f"got {n_speakers}")
    speakers = [name for name, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n_speakers]]
    label = {name: k for k, name in enumerate(speakers)}
    seen, train, test = Counter(), [], []
    for speaker, lines in blocks:
        if speaker in label:
            seen[speaker] += 1
            split = test if seen[speaker] % test_every == 0 else train  # whole speeches, never split
            split.extend((line, label[speaker]) for line in lines)
    seen_in_training = {line for line, _ in train}  # a line repeated elsewhere ("My lord!") is no test
    return dict(speakers=speakers, train=train, test=[e for e in test if e[0] not in seen_in_training])


def balanced(examples: Sequence[tuple[str, int]], per_class: int, seed: int = 0) -> list[tuple[str, int]]:
    """``per_class`` examples of every class, drawn without replacement (seeded), shuffled."""
    check_int("per_class", per_class, low=1)
    by_class: dict[int, list] = {}
    for example in examples:
        by_class.setdefault(example[1], []).append(example)
    fewest = min(len(v) for v in by_class.values())
    if per_class > fewest:
        raise ValueError(f"per_class must be at most {fewest}, the smallest class's size, got {per_class}")
    rng = random.Random(seed)
    chosen = [e for c in sorted(by_class) for e in rng.sample(by_class[c], per_class)]
    rng.shuffle(chosen)
    return chosen


def encode_lines(lines: Sequence[str], encode: Callable[[str], list[int]], cls_id: int, sep_id: int,
                 seq_len: int, pad_id: int = 0) -> dict[str, Tensor]:
    """``[CLS] line [SEP]``, cut to ``seq_len`` (the line's end goes) and padded ->
    ``input_ids``, ``attention_mask``, ``token_type_ids`` (all 0), each ``(len(lines), seq_len)``."""
    check_int("seq_len", seq_len, low=3)
    rows = [[cls_id] + list(encode(line))[: seq_len - 2] + [sep_id] for line in lines]
    return _pad(rows, [[0] * len(r) for r in rows], seq_len, pad_id)


def encode_pairs(pairs: Sequence[tuple[str, str]], encode: Callable[[str], list[int]], cls_id: int,
                 sep_id: int, seq_len: int, pad_id: int = 0) -> dict[str, Tensor]:
    """``[CLS] A [SEP] B [SEP]`` with segment ids 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``.

    Each sentence gets half the room: A keeps its *end* and B its *start*, the characters on either
    side of the seam that next-sentence prediction judges. Each tensor ``(len(pairs), seq_len)``.
    """
    check_int("seq_len", seq_len, low=5)
    room_a = (seq_len - 3) // 2
    room_b = seq_len - 3 - room_a
    rows, types = [], []
    for a, b in pairs:
        ids_a, ids_b = list(encode(a))[-room_a:], list(encode(b))[:room_b]
        rows.append([cls_id] + ids_a + [sep_id] + ids_b + [sep_id])
        types.append([0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1))
    return _pad(rows, types, seq_len, pad_id)


def _pad(rows: list[list[int]], types: list[list[int]], seq_len: int, pad_id: int) -> dict[str, Tensor]:
    n = len(rows)
    input_ids = torch.full((n, seq_len), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros(n, seq_len, dtype=torch.long)
    attention_mask = torch.zeros(n, seq_len, dtype=torch.long)
    for i, (row, typ) in enumerate(zip(rows, types)):
        input_ids[i, : len(row)] = torch.tensor(row)
        token_type_ids[i, : len(typ)] = torch.tensor(typ)
        attention_mask[i, : len(row)] = 1
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)


def majority_share(examples: Sequence[tuple[str, int]]) -> float:
    """The accuracy of always guessing the most frequent class: the baseline a classifier must beat."""
    if not examples:
        raise ValueError("examples is empty")
    return Counter(c for _, c in examples).most_common(1)[0][1] / len(examples)


__all__ = ["speeches", "nsp_pairs", "speaker_lines", "balanced", "encode_lines", "encode_pairs",
           "majority_share"]
