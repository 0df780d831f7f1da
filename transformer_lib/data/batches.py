"""Turning a long token sequence into training batches for a language model.

Taught in chapter 7, *GPT-2* (``book/07_gpt2.ipynb``).

Each example is a random window of ``block_size + 1`` consecutive tokens: the first
``block_size`` are the input, the last ``block_size`` (shifted by one) the targets, so every
position learns to predict its next token.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_id_sequence, check_int, is_real


def train_val_split(ids: Tensor, val_fraction: float = 0.1) -> tuple[Tensor, Tensor]:
    """Split a 1-D token sequence into a leading training part and a trailing validation part.

    The split is contiguous (not shuffled): validation text is text the model has never seen,
    not sentences interleaved with training ones.
    """
    check_id_sequence("ids", ids)
    if not is_real(val_fraction) or not 0.0 < val_fraction < 0.5:
        hint = (f": it is the held-out share, so {val_fraction!r} would validate on "
                f"{val_fraction:.0%} and train on {1 - val_fraction:.0%}. nanoGPT writes the training "
                f"share (0.9); here pass val_fraction={1 - val_fraction:.2g}"
                if is_real(val_fraction) and 0.5 <= val_fraction < 1 else "")
        raise ValueError(f"val_fraction must be in (0, 0.5), got {val_fraction!r}{hint}")
    n_train = int(len(ids) * (1 - val_fraction))
    return ids[:n_train], ids[n_train:]


def get_batch(
    data: Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
    device: str | torch.device | None = None,
) -> tuple[Tensor, Tensor]:
    """Sample ``(inputs, targets)``, each ``(batch_size, block_size)``, from the 1-D ``data``.

    ``targets[b, t] == inputs[b, t + 1]`` within the window: the next token at every position.
    """
    check_int("batch_size", batch_size, low=1)
    check_int("block_size", block_size, low=1)
    check_id_sequence("data", data)  # one long sequence of integer ids
    if len(data) < block_size + 1:
        raise ValueError(f"data has {len(data)} tokens; block_size={block_size} "
                         f"needs at least {block_size + 1}")
    # positions drawn on the generator's device (the CPU unless given another), whatever the default device
    on = generator.device if generator is not None else torch.device("cpu")
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator, device=on)
    offsets = torch.arange(block_size + 1, device=on)
    windows = data[starts[:, None] + offsets]  # (batch, block_size + 1)
    x, y = windows[:, :-1].long(), windows[:, 1:].long()
    if device is not None:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    return x, y


class BatchSampler:
    """``sampler()`` -> a fresh random ``(inputs, targets)`` batch; seeded, so runs repeat.

    Defined in chapter 7. ``BatchSampler(train_ids, batch_size=32, block_size=64, seed=0)``.
    """

    def __init__(self, data: Tensor, batch_size: int, block_size: int, seed: int = 0, device=None) -> None:
        get_batch(data, 1, block_size)  # validates the arguments once, here
        check_int("batch_size", batch_size, low=1)
        check_int("seed", seed)
        self.data, self.batch_size, self.block_size, self.device = data, batch_size, block_size, device
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self) -> tuple[Tensor, Tensor]:
        return get_batch(self.data, self.batch_size, self.block_size, self.generator, self.device)
