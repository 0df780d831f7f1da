"""Input validation shared by every module: errors that name the argument and its allowed range."""

from __future__ import annotations

import numbers
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import torch
from torch import Tensor

_HOT_PATH: ContextVar[bool] = ContextVar("transformer_lib_hot_path", default=False)


@contextmanager
def hot_path() -> Iterator[None]:
    """Inside, value checks never make the CPU wait for a GPU (``tl.train`` runs its steps inside).

    Checking that token ids are in the vocabulary means reading two numbers back from the device.
    On the CPU that is free; on a GPU it is a *sync*: the CPU stops queueing work until the GPU
    has caught up, every forward pass. In the hot path such checks become asynchronous device-side
    asserts: bad ids still stop the program, with a less readable error. Outside it, and always on
    the CPU, the error names the argument and the offending id.
    """
    token = _HOT_PATH.set(True)
    try:
        yield
    finally:
        _HOT_PATH.reset(token)


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> None:
    """Raise unless ``low <= value <= high`` for an ``int`` (bools are rejected)."""
    # (a SymInt is the int that torch.export traces a dynamic length with)
    if not isinstance(value, (numbers.Integral, torch.SymInt)) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")


def is_real(value) -> bool:
    """A plain number (Python or NumPy), not a bool, a string or a tensor."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_prob(name: str, value: float) -> None:
    """A dropout-style probability in [0, 1)."""
    if not is_real(value):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} {value!r}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def check_positive(name: str, value: float) -> None:
    if not is_real(value):
        raise TypeError(f"{name} must be a number > 0, got {type(value).__name__} {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")


def check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")


def check_divisible(d_model: int, n_heads: int) -> None:
    if d_model % n_heads != 0:
        raise ValueError(
            f"d_model ({d_model}) must be divisible by n_heads ({n_heads}): "
            f"each head gets d_model / n_heads dimensions"
        )


def check_token_ids(
    name: str, ids: Tensor, vocab_size: int | None = None, n_ctx: int | None = None, offset: int = 0
) -> None:
    """``ids`` must be a ``(batch, seq)`` tensor of int64/int32 ids, in ``[0, vocab_size)`` if given.

    ``offset`` is the number of positions already in a KV cache; ``offset + seq`` must fit in ``n_ctx``.
    The vocabulary check reads the smallest and largest id back (free on the CPU, a sync on a GPU);
    models leave it to the embedding, which does it once. Under :func:`hot_path` on a GPU, and
    inside ``torch.compile`` (a graph cannot branch on tensor values), it is a device-side assert.
    """
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must hold integer token ids (torch.long or torch.int32), got dtype {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, seq), got shape {tuple(ids.shape)}")
    if ids.shape[1] == 0:
        raise ValueError(f"{name} must contain at least one token, got shape {tuple(ids.shape)}")
    if n_ctx is not None and offset + ids.shape[1] > n_ctx:
        where = f" ({offset} cached + {ids.shape[1]} new)" if offset else ""
        raise ValueError(
            f"sequence length {offset + ids.shape[1]}{where} is longer than the context: "
            f"{name} may have at most n_ctx={n_ctx} positions; crop the input to its last {n_ctx} tokens"
        )
    if vocab_size is not None and ids.numel():
        if torch.compiler.is_compiling() or torch.compiler.is_exporting() or (
                ids.device.type != "cpu" and _HOT_PATH.get()):
            in_range = ((ids >= 0) & (ids < vocab_size)).all()
            torch._assert_async(in_range, f"{name} contains a token id outside the vocabulary [0, {vocab_size - 1}]")
            return
        lo, hi = torch.aminmax(ids)
        lo, hi = int(lo), int(hi)
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{name} contains token id {bad}, outside the vocabulary [0, {vocab_size - 1}]")


def check_padding_mask(name: str, mask: Tensor | None, shape: tuple[int, int]) -> Tensor | None:
    """A ``(batch, seq)`` padding mask: bool, or integers 0/1 as Hugging Face tokenizers return.

    Returns it as bool (True = real token) or None.
    """
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.is_floating_point() or mask.is_complex():
        raise TypeError(f"{name} must be bool or integer (1 = token, 0 = padding), got dtype {mask.dtype}")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape (batch, seq) = {tuple(shape)}, got {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        if ((mask != 0) & (mask != 1)).any():
            raise ValueError(f"{name} must contain only 0 (padding) and 1 (token)")
        mask = mask.bool()
    return mask
