"""Checks for the exercises of chapter 5, *Positional encodings* (``book/05_positions.ipynb``).

* :func:`check_sinusoidal`: the ``(n_positions, d_model)`` sin/cos table of Vaswani et al. (2017).
* :func:`check_apply_rope`: rotate adjacent feature pairs ``(x[2i], x[2i+1])`` by ``m * theta_i`` (RoPE).

Each check compares with the library (``tl.sinusoidal_encoding``, ``tl.RotaryEmbedding``) on inputs
chosen so that every common mistake gives a different answer, and names the mistake it sees.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..layers.positions import RotaryEmbedding, sinusoidal_encoding
from ._checking import NOT_IMPLEMENTED, attempt, close, correct, diagnose, expect_tensor, pending, Verdict

BASE = 10000.0

# ---------------------------------------------------------------- (a) sinusoidal encodings

SIN_N_POSITIONS, SIN_D_MODEL = 16, 8


def _sinusoidal_variant(n_positions: int, d_model: int, *, swap: bool = False, exponent: str = "2i",
                        start: int = 0, layout: str = "interleaved") -> Tensor:
    """The table with one deliberate mistake (for diagnosis)."""
    pos = torch.arange(start, start + n_positions, dtype=torch.float64)[:, None]  # (n, 1)
    i = torch.arange(d_model // 2, dtype=torch.float64)  # pair index
    if exponent == "2i":
        sin_freq = cos_freq = BASE ** (-2 * i / d_model)
    elif exponent == "i":  # pair i gets base^(i/d): the 2 forgotten
        sin_freq = cos_freq = BASE ** (-i / d_model)
    elif exponent == "per-dimension":  # dimension j gets base^(j/d): the cos of a pair uses 2i+1
        sin_freq, cos_freq = BASE ** (-2 * i / d_model), BASE ** (-(2 * i + 1) / d_model)
    else:
        raise ValueError(exponent)
    sin, cos = torch.sin(pos * sin_freq), torch.cos(pos * cos_freq)  # (n, d/2) each
    if swap:
        sin, cos = cos, sin
    if layout == "halves":
        return torch.cat([sin, cos], dim=-1).float()
    return torch.stack([sin, cos], dim=-1).flatten(-2).float()  # sin on even, cos on odd dimensions


def check_sinusoidal(sinusoidal: Callable[[int, int], Tensor]) -> Verdict:
    """Check ``sinusoidal(n_positions, d_model) -> (n_positions, d_model)`` (base 10000).

    Expected: ``PE[p, 2i] = sin(p / 10000^(2i/d_model))`` and ``PE[p, 2i+1] = cos(p / 10000^(2i/d_model))``
    for positions ``p = 0 .. n_positions - 1``. Diagnoses: sin and cos swapped, ``i`` instead of
    ``2i`` in the exponent, an exponent per dimension instead of per pair, positions starting at 1,
    and sin/cos in two halves instead of interleaved.
    """
    name = "sinusoidal"
    n, d = SIN_N_POSITIONS, SIN_D_MODEL
    got = attempt(sinusoidal, n, d)
    if got is NOT_IMPLEMENTED:
        return pending(name)
    expected = sinusoidal_encoding(n, d, BASE)
    expect_tensor(name, got, expected.shape)
    if not close(got, expected):
        diagnose(name, got, expected, {
            "You put cos on the even dimensions and sin on the odd ones: PE[p, 2i] is the sin, "
            "PE[p, 2i+1] the cos.": _sinusoidal_variant(n, d, swap=True),
            "The exponent uses the pair index i, but it should be 2i/d_model: pair i (dimensions 2i and "
            "2i+1) has frequency 1 / 10000^(2i/d_model), falling from 1 towards 1/10000 across the pairs.":
                _sinusoidal_variant(n, d, exponent="i"),
            "You gave every dimension its own frequency (10000^(j/d_model) for dimension j), so the cos of a "
            "pair is slower than its sin. Both dimensions 2i and 2i+1 of a pair share 10000^(2i/d_model).":
                _sinusoidal_variant(n, d, exponent="per-dimension"),
            "Your positions start at 1; they start at 0 (the first row is sin(0) = 0, cos(0) = 1, "
            "alternating).": _sinusoidal_variant(n, d, start=1),
            "You put all the sines in the first half and all the cosines in the second half. The "
            "convention here interleaves them: sin on even dimensions 2i, cos on odd dimensions 2i+1 "
            "(the same information in a different order, but not the same table).":
                _sinusoidal_variant(n, d, layout="halves"),
        })
    return correct(f"Your table matches tl.sinusoidal_encoding({n}, {d}).")


# ---------------------------------------------------------------- (b) rotary embeddings

ROPE_SEQ, ROPE_HEAD_DIM, ROPE_OFFSET = 6, 8, 5


def _rope_variant(x: Tensor, offset: int = 0, *, sign: float = 1.0, pairing: str = "adjacent",
                  exponent: str = "-2i/d", start: int = 0) -> Tensor:
    """RoPE with one deliberate mistake (for diagnosis). ``x``: ``(seq, head_dim)``."""
    seq, d = x.shape
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = {"-2i/d": BASE ** (-2 * i / d), "-i/d": BASE ** (-i / d), "+2i/d": BASE ** (2 * i / d)}[exponent]
    m = torch.arange(offset + start, offset + start + seq, dtype=torch.float64)[:, None]
    angle = m * theta  # (seq, d/2)
    cos, sin = angle.cos(), sign * angle.sin()
    x = x.double()
    if pairing == "halves":  # Hugging Face LLaMA: feature i with feature i + d/2
        x1, x2 = x[:, : d // 2], x[:, d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).float()
    x1, x2 = x[:, 0::2], x[:, 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2).float()


def _rope_mistakes(x: Tensor, offset: int) -> dict[str, Tensor]:
    return {
        "You forgot the position: the output equals the input. Row m must be rotated by the angle "
        "m * theta_i in pair i (only row 0, angle 0, stays the same).": x.clone(),
        "Your rotation goes the wrong way (the sign of sin is flipped). Rotating (a, b) by the angle t "
        "gives (a cos t - b sin t, a sin t + b cos t).": _rope_variant(x, offset, sign=-1.0),
        "You paired feature i with feature i + head_dim/2 (the 'rotate_half' convention of Hugging Face's "
        "LLaMA). That is the same rotation applied to permuted features, equivalent if the weights are "
        "permuted to match, but not equal: here the pairs are adjacent, (x[2i], x[2i+1]).":
            _rope_variant(x, offset, pairing="halves"),
        "Your theta_i uses i/head_dim in the exponent; it should be theta_i = 10000^(-2i/head_dim) for "
        "pair i (the 2 is missing).": _rope_variant(x, offset, exponent="-i/d"),
        "Your theta_i = 10000^(+2i/head_dim) has the wrong sign in the exponent: the frequencies must "
        "decrease, theta_i = 10000^(-2i/head_dim), from 1 for pair 0 towards 1/10000.":
            _rope_variant(x, offset, exponent="+2i/d"),
        "Your positions start at 1; the first row is position 0 (+ positions_offset) and is not rotated.":
            _rope_variant(x, offset, start=1),
    }


def check_apply_rope(apply_rope: Callable[..., Tensor]) -> Verdict:
    """Check ``apply_rope(x, positions_offset=0) -> (seq, head_dim)`` (base 10000).

    Row ``m`` of ``x`` sits at position ``positions_offset + m``; each adjacent pair
    ``(x[m, 2i], x[m, 2i+1])`` is rotated by the angle ``(positions_offset + m) * theta_i`` with
    ``theta_i = 10000^(-2i/head_dim)``. Called once with the default offset and once with
    ``positions_offset=5``. Diagnoses: no rotation, rotation in the wrong direction, halves pairing
    (``i`` with ``i + head_dim/2``), a wrong theta exponent, positions starting at 1, and an ignored
    ``positions_offset``.
    """
    name = "apply_rope"
    g = torch.Generator().manual_seed(5)
    x = torch.randn(ROPE_SEQ, ROPE_HEAD_DIM, generator=g)  # (seq, head_dim)
    rope = RotaryEmbedding(ROPE_HEAD_DIM, ROPE_SEQ + ROPE_OFFSET, BASE)

    got = attempt(apply_rope, x.clone())
    if got is NOT_IMPLEMENTED:
        return pending(name)
    expected = rope(x)
    expect_tensor(name, got, expected.shape)
    if not close(got, expected):
        diagnose(name + "(x)", got, expected, _rope_mistakes(x, 0))

    got = attempt(apply_rope, x.clone(), positions_offset=ROPE_OFFSET)
    if got is NOT_IMPLEMENTED:
        return pending(name)
    expected = rope(x, offset=ROPE_OFFSET)
    expect_tensor(name, got, expected.shape)
    if not close(got, expected):
        diagnose(f"{name}(x, positions_offset={ROPE_OFFSET})", got, expected, {
            f"You ignored positions_offset: row m is at position positions_offset + m, so with "
            f"positions_offset={ROPE_OFFSET} the first row is rotated by {ROPE_OFFSET} * theta_i.": rope(x),
            "You subtracted positions_offset instead of adding it: row m is at position positions_offset + m.":
                _rope_variant(x, -ROPE_OFFSET),
            **_rope_mistakes(x, ROPE_OFFSET),
        })
    return correct("Your rotation matches tl.RotaryEmbedding, with and without an offset. "
                   "q·k now depends only on the distance between positions.")
