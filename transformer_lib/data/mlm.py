"""Masked-language-modelling batches (BERT's pre-training objective).

Taught in chapter 8, *BERT* (``book/08_bert.ipynb``).

Of the tokens that may be masked, 15% are chosen; of those, 80% become ``[MASK]``, 10% a random
token and 10% stay unchanged (Devlin et al. 2019, section 3.1). The labels hold the original token
at the chosen positions and ``IGNORE_INDEX`` everywhere else, so the loss sees only them.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor

from .._checks import check_int
from ..losses import IGNORE_INDEX


class MLMCollator:
    """``collator(input_ids)`` -> ``dict(input_ids=corrupted, labels=..., attention_mask=...)``.

    Args:
        vocab_size: random replacements are drawn from ``[0, vocab_size)`` minus ``special_ids``.
        mask_token_id: the ``[MASK]`` id.
        special_ids: ids never chosen for masking nor drawn as replacements (padding, [CLS], [SEP], [MASK]).
        pad_token_id: positions holding it get ``attention_mask`` 0.
        mask_prob, mask_fraction, random_fraction: 15% / 80% / 10% by default (the rest stay unchanged).
        seed: for a reproducible sequence of batches.
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
    ) -> None:
        check_int("vocab_size", vocab_size, low=2)
        check_int("mask_token_id", mask_token_id, low=0, high=vocab_size - 1)
        if not 0 < mask_prob < 1:
            raise ValueError(f"mask_prob must be in (0, 1), got {mask_prob}")
        if not (0 <= mask_fraction and 0 <= random_fraction and mask_fraction + random_fraction <= 1):
            raise ValueError(
                "mask_fraction and random_fraction must be >= 0 with sum <= 1, "
                f"got {mask_fraction} and {random_fraction}"
            )
        special = set(special_ids) | {mask_token_id} | ({pad_token_id} if pad_token_id is not None else set())
        self.vocab_size, self.mask_token_id, self.pad_token_id = vocab_size, mask_token_id, pad_token_id
        self.mask_prob, self.mask_fraction, self.random_fraction = mask_prob, mask_fraction, random_fraction
        self.special = torch.tensor(sorted(special), dtype=torch.long)
        allowed = torch.ones(vocab_size, dtype=torch.bool)
        allowed[self.special[self.special < vocab_size]] = False
        self.replacements = allowed.nonzero().squeeze(1)  # ids a random replacement may take
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, input_ids: Tensor) -> dict[str, Tensor]:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape (batch, seq), got {tuple(input_ids.shape)}")
        ids = input_ids.long()
        # random numbers from the (CPU) generator, the same whatever the batch's device, then moved to it
        on = dict(generator=self.generator, device=self.generator.device)
        maskable = ~torch.isin(ids, self.special.to(ids.device))
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
