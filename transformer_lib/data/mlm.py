"""Masked-language-modelling batches (BERT's pre-training objective).

Taught in chapter 8, *BERT* (``book/08_bert.ipynb``).

Some of the positions that may be masked are *chosen*; of those, 80% become ``[MASK]``, 10% a
random token and 10% stay unchanged (Devlin et al. 2019, section 3.1). The labels hold the
original token at the chosen positions and ``IGNORE_INDEX`` everywhere else, so the loss sees only
them. Every call draws new masks (RoBERTa's "dynamic masking").

How the positions are chosen, and which random tokens may replace them:

* default: each maskable position independently with probability ``mask_prob`` (as Hugging
  Face's ``DataCollatorForLanguageModeling`` does), so the count per sequence varies, plus one rule
  of ours: a batch with a maskable position always has at least one chosen. Random replacements
  are drawn from the ids that are not special.
* ``fixed_count=True``: BERT's own code (``create_pretraining_data.py``): every sequence gets
  exactly ``min(max_predictions, max(1, round(mask_prob * n)))`` predictions, ``n`` its length
  without padding (special tokens included), chosen uniformly among its maskable positions (all
  of them when it has fewer).
* ``random_from_vocab=True``: random replacements drawn from the whole vocabulary, special ids
  included, as BERT's code and Hugging Face's collator do.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor

from .._checks import check_bool, check_int, check_real, check_token_ids
from ..losses import IGNORE_INDEX


class MLMCollator:
    """``collator(input_ids)`` -> ``dict(input_ids=corrupted, labels=..., attention_mask=...)``.

    Args:
        vocab_size: random replacements are drawn from ``[0, vocab_size)`` minus ``special_ids``
            (all of it with ``random_from_vocab``).
        mask_token_id: the ``[MASK]`` id.
        special_ids: ids never chosen for masking nor drawn as replacements (padding, [CLS], [SEP], [MASK]).
        pad_token_id: positions holding it get ``attention_mask`` 0.
        mask_prob, mask_fraction, random_fraction: 15% / 80% / 10% by default (the rest stay unchanged).
        seed: for a reproducible sequence of batches.
        fixed_count: BERT's choice: ``min(max_predictions, max(1, round(mask_prob * n)))`` positions
            per sequence of ``n`` non-padding tokens (Python's ``round``: halves to even), instead of each position
            independently with probability ``mask_prob``.
        max_predictions: BERT's ``max_predictions_per_seq`` (20 for 128 tokens); None: no cap.
            Only with ``fixed_count``.
        random_from_vocab: draw random replacements from the whole vocabulary, as BERT's code does.
    """

    def __init__(
        self,
        vocab_size: int,
        mask_token_id: int,
        special_ids: Iterable[int] = (),
        pad_token_id: int | None = None,
        mask_prob: float = 0.15,
        mask_fraction: float = 0.8,
        random_fraction: float = 0.1,
        seed: int = 0,
        *,
        fixed_count: bool = False,
        max_predictions: int | None = None,
        random_from_vocab: bool = False,
    ) -> None:
        _check_collator(vocab_size, mask_token_id, special_ids, pad_token_id, mask_prob, mask_fraction,
                        random_fraction, seed, fixed_count, max_predictions, random_from_vocab)
        self.fixed_count, self.max_predictions = bool(fixed_count), max_predictions
        self.random_from_vocab = bool(random_from_vocab)
        special = set(special_ids) | {mask_token_id} | ({pad_token_id} if pad_token_id is not None else set())
        self.vocab_size, self.mask_token_id, self.pad_token_id = vocab_size, mask_token_id, pad_token_id
        self.mask_prob, self.mask_fraction, self.random_fraction = mask_prob, mask_fraction, random_fraction
        self.special = torch.tensor(sorted(special), dtype=torch.long)
        allowed = torch.ones(vocab_size, dtype=torch.bool)
        allowed[self.special[self.special < vocab_size]] = False
        # ids a random replacement may take
        self.replacements = torch.arange(vocab_size) if random_from_vocab else allowed.nonzero().squeeze(1)
        if not len(self.replacements) and random_fraction > 0:
            raise ValueError(f"every id of the vocabulary (vocab_size={vocab_size}) is special, so no random "
                             "token can replace a chosen one: pass random_fraction=0.0 or fewer special_ids")
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, input_ids: Tensor) -> dict[str, Tensor]:
        check_token_ids("input_ids", input_ids, self.vocab_size)  # (batch, seq) ids of the vocabulary
        ids = input_ids.long()
        # random numbers from the (CPU) generator, the same whatever the batch's device, then moved to it
        on = dict(generator=self.generator, device=self.generator.device)
        maskable = ~torch.isin(ids, self.special.to(ids.device))
        if self.fixed_count:
            chosen = self._choose_fixed_count(ids, maskable, on)
        else:
            chosen = (torch.rand(ids.shape, **on).to(ids.device) < self.mask_prob) & maskable
        if maskable.any() and not chosen.any():  # never a batch with nothing to predict
            flat = maskable.flatten().nonzero().squeeze(1)
            chosen.view(-1)[flat[torch.randint(len(flat), (1,), **on)]] = True
        roll = torch.rand(ids.shape, **on).to(ids.device)
        to_mask = chosen & (roll < self.mask_fraction)
        to_random = chosen & (roll >= self.mask_fraction) & (roll < self.mask_fraction + self.random_fraction)
        corrupted = ids.clone()
        corrupted[to_mask] = self.mask_token_id
        random_ids = self.replacements[torch.randint(len(self.replacements), ids.shape, **on)].to(ids.device)
        corrupted[to_random] = random_ids[to_random]
        labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
        out = {"input_ids": corrupted, "labels": labels}
        if self.pad_token_id is not None:
            out["attention_mask"] = (ids != self.pad_token_id).long()
        return out

    def per_sequence(self, input_ids: Tensor) -> Tensor:
        """``(batch,)``: how many positions ``fixed_count`` chooses in each sequence of ``input_ids``."""
        check_token_ids("input_ids", input_ids, self.vocab_size)
        ids = input_ids.long()
        maskable = ~torch.isin(ids, self.special.to(ids.device))
        if self.pad_token_id is None:
            n = torch.full(ids.shape[:1], ids.shape[1], device=ids.device)
        else:
            n = (ids != self.pad_token_id).sum(1)  # (batch,) tokens before padding, [CLS] and [SEP] included
        # round(mask_prob * n) as BERT's Python code computes it: float64, halves to even (4.5 -> 4);
        # on the CPU, since some devices have no float64
        count = torch.round(n.cpu().double() * self.mask_prob).long().clamp(min=1).to(ids.device)
        if self.max_predictions is not None:
            count = count.clamp(max=self.max_predictions)
        return torch.minimum(count, maskable.sum(1))  # a sequence with fewer maskable tokens: all of them

    def _choose_fixed_count(self, ids: Tensor, maskable: Tensor, on: dict) -> Tensor:
        """BERT's choice: ``per_sequence`` positions of each row, uniformly among its maskable ones."""
        scores = torch.rand(ids.shape, **on).to(ids.device)
        scores = scores.masked_fill(~maskable, 2.0)  # not maskable: ranked after every maskable position
        rank = scores.argsort(dim=1).argsort(dim=1)  # (batch, seq): 0 for the smallest score of the row
        return rank < self.per_sequence(ids)[:, None]


def _check_collator(vocab_size, mask_token_id, special_ids, pad_token_id, mask_prob, mask_fraction,
                    random_fraction, seed, fixed_count, max_predictions, random_from_vocab) -> None:
    check_int("vocab_size", vocab_size, low=2)
    check_int("mask_token_id", mask_token_id, low=0, high=vocab_size - 1)
    if pad_token_id is not None:
        check_int("pad_token_id", pad_token_id, low=0, high=vocab_size - 1)
    if isinstance(special_ids, (str, bytes)) or not isinstance(special_ids, Iterable):
        raise TypeError(f"special_ids must be a list of token ids, got {type(special_ids).__name__}")
    for i in special_ids:
        check_int("each of special_ids", i, low=0, high=vocab_size - 1)
    check_real("mask_prob", mask_prob, low=0.0, high=1.0)
    if mask_prob in (0.0, 1.0):
        raise ValueError(f"mask_prob must be in (0, 1), got {mask_prob}")
    check_real("mask_fraction", mask_fraction, low=0.0, high=1.0)
    check_real("random_fraction", random_fraction, low=0.0, high=1.0)
    if mask_fraction + random_fraction > 1:
        raise ValueError("mask_fraction and random_fraction must be >= 0 with sum <= 1, "
                         f"got {mask_fraction} and {random_fraction}")
    check_int("seed", seed)
    check_bool("fixed_count", fixed_count)
    check_bool("random_from_vocab", random_from_vocab)
    if max_predictions is not None:
        if not fixed_count:
            raise ValueError("max_predictions caps BERT's fixed count per sequence: "
                             "pass fixed_count=True too")
        check_int("max_predictions", max_predictions, low=1)
