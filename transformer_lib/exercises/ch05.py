"""Checks for the exercises of chapter 5, *Positional encodings* (``book/05_positions.ipynb``).

* :func:`check_sinusoidal`: the ``(n_positions, d_model)`` sin/cos table of Vaswani et al. (2017).
* :func:`check_apply_rope`: rotate each feature pair ``(x[2i], x[2i+1])`` by ``m * theta_i`` (RoPE).

Each check compares with the library (``tl.sinusoidal_encoding``, ``tl.RotaryEmbedding``) on inputs
chosen so that every common mistake gives a different answer, and names the mistake it sees. A
wrong base is recognised whatever it is: the check reads the angle of feature pair 1 at position 1
off the answer, turns it into the base it implies, and rebuilds the answer with that base.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ..layers.positions import RotaryEmbedding, sinusoidal_encoding
from ._checking import NOT_IMPLEMENTED, attempt, close, correct, diagnose, expect_tensor, pending, Verdict

BASE = 10000.0

# exponents of the frequency of feature pair i (dimensions 2i, 2i+1), as a multiple of 1/d
_EXPONENTS = {"2i": lambda i: 2 * i, "i": lambda i: i, "4i": lambda i: 4 * i}


def _base_from_angle(angle: float, d: int) -> float | None:
    """The base for which feature pair 1 turns by ``angle`` per position (``angle = base^(-2/d)``),
    or None when the angle fits no base other than 10000 (a different mistake, or none)."""
    if not 1e-6 < angle < 1 - 1e-6:  # base^(-2/d) is in (0, 1) for every base > 1
        return None
    base = angle ** (-d / 2)
    if not math.isfinite(base) or math.isclose(base, BASE, rel_tol=1e-3):
        return None
    return base


def _off_by_one(k: int, d: str, right: str) -> str:
    """The hint for an exponent divided by ``d - k`` instead of ``d`` (k = 1, or 2 from a linspace)."""
    how = ("e.g. torch.linspace(0, 1, d/2), whose last value is 1, gives 2i/(d - 2)" if k == 2 else
           f"e.g. dividing by {d} - 1, or a torch.linspace that ends at 1")
    return (f"Your exponent divides 2i by {d} - {k} instead of {d} ({how}): {right}. (Your numbers are also "
            f"the right ones for base 10000^({d}/({d} - {k})), so this is not a wrong base.)")


def _shown(base: float) -> str:
    """A base as the reader probably typed it: 4 significant digits (1000, 25000, 1e6, 0.5)."""
    rounded = float(f"{base:.4g}")
    if rounded.is_integer() and rounded < 1e6:
        return str(int(rounded))
    return f"{rounded:.4g}".replace("e+0", "e").replace("e+", "e")


# ---------------------------------------------------------------- (a) sinusoidal encodings

SIN_N_POSITIONS, SIN_D_MODEL = 16, 8


def _sinusoidal_variant(n_positions: int, d_model: int, *, swap: bool = False, exponent: str = "2i",
                        start: int = 0, layout: str = "interleaved", base: float = BASE,
                        divisor: int | None = None) -> Tensor:
    """The table with one deliberate mistake (for diagnosis). ``divisor``: what the exponent is
    divided by instead of ``d_model`` (an off-by-one: ``d_model - 1``)."""
    pos = torch.arange(start, start + n_positions, dtype=torch.float64)[:, None]  # (n, 1)
    i = torch.arange(d_model // 2, dtype=torch.float64)  # feature pair index
    divisor = divisor or d_model
    if exponent == "per-dimension":  # dimension j gets base^(j/d): the cos of a feature pair uses 2i+1
        sin_freq, cos_freq = base ** (-2 * i / divisor), base ** (-(2 * i + 1) / divisor)
    else:  # "2i" (right), "i" (the 2 forgotten) or "4i" (the 2 counted twice)
        sin_freq = cos_freq = base ** (-_EXPONENTS[exponent](i) / divisor)
    sin, cos = torch.sin(pos * sin_freq), torch.cos(pos * cos_freq)  # (n, d/2) each
    if swap:
        sin, cos = cos, sin
    if layout == "halves":
        return torch.cat([sin, cos], dim=-1).float()
    return torch.stack([sin, cos], dim=-1).flatten(-2).float()  # sin on even, cos on odd dimensions


def _sinusoidal_base(got: Tensor, d_model: int) -> float | None:
    """The base implied by PE[1, 2] = sin(w_1), PE[1, 3] = cos(w_1), if that is what ``got`` holds."""
    s, c = got[1, 2].item(), got[1, 3].item()
    return _base_from_angle(math.atan2(s, c), d_model)


def check_sinusoidal(sinusoidal: Callable[[int, int], Tensor]) -> Verdict:
    """Check ``sinusoidal(n_positions, d_model) -> (n_positions, d_model)`` (base 10000).

    Expected: ``PE[p, 2i] = sin(p / 10000^(2i/d_model))`` and ``PE[p, 2i+1] = cos(p / 10000^(2i/d_model))``
    for positions ``p = 0 .. n_positions - 1``. Diagnoses: sin and cos swapped, ``i`` instead of
    ``2i`` in the exponent, the 2 counted twice (``4i``), an exponent per dimension instead of per
    feature pair, positions starting at 1, sin/cos in two halves instead of interleaved, an exponent
    divided by ``d_model - 1`` (or ``d_model - 2``, a linspace) instead of ``d_model``, and a base
    other than 10000 (named).
    """
    name = "sinusoidal"
    n, d = SIN_N_POSITIONS, SIN_D_MODEL
    got = attempt(sinusoidal, n, d)
    if got is NOT_IMPLEMENTED:
        return pending(name)
    expected = sinusoidal_encoding(n, d, BASE)
    expect_tensor(name, got, expected.shape)
    if not close(got, expected):
        mistakes = {
            "You put cos on the even dimensions and sin on the odd ones: PE[p, 2i] is the sin, "
            "PE[p, 2i+1] the cos.": _sinusoidal_variant(n, d, swap=True),
            "The exponent uses the feature pair index i, but it should be 2i/d_model: feature pair i "
            "(dimensions 2i and 2i+1) has frequency 1 / 10000^(2i/d_model), falling from 1 towards 1/10000. "
            "(Your table is also the right one for base 100 = sqrt(10000): if you typed 100, type 10000.)":
                _sinusoidal_variant(n, d, exponent="i"),
            "You counted the 2 twice: your exponent is 4i/d_model instead of 2i/d_model. If your i comes "
            "from torch.arange(0, d_model, 2) it already is 2i (0, 2, 4, ...), so divide it by d_model "
            "without multiplying by 2 again. (Your table is also the right one for base 10000^2 = 1e8.)":
                _sinusoidal_variant(n, d, exponent="4i"),
            "You gave every dimension its own frequency (1 / 10000^(j/d_model) for dimension j), so the cos of a "
            "feature pair is slower than its sin. Both dimensions 2i and 2i+1 of a feature pair share "
            "10000^(2i/d_model).": _sinusoidal_variant(n, d, exponent="per-dimension"),
            "Your positions start at 1; they start at 0 (the first row is sin(0) = 0, cos(0) = 1, "
            "alternating).": _sinusoidal_variant(n, d, start=1),
            "You put all the sines in the first half and all the cosines in the second half. The "
            "convention here interleaves them: sin on even dimensions 2i, cos on odd dimensions 2i+1 "
            "(the same information in a different order, but not the same table).":
                _sinusoidal_variant(n, d, layout="halves"),
            # before the base: an exponent over d_model - k is the right table for base 10000^(d/(d-k))
            **{_off_by_one(k, "d_model", "the frequency of feature pair i is 1 / 10000^(2i/d_model)"):
               _sinusoidal_variant(n, d, divisor=d - k) for k in (1, 2)},
        }
        base = _sinusoidal_base(got, d)
        if base is not None:
            mistakes[f"Your table uses base {_shown(base)} instead of 10000: the frequency of feature pair i "
                     f"is 1 / 10000^(2i/d_model). Everything else (sin/cos, layout, positions) is right."] = \
                _sinusoidal_variant(n, d, base=base)
        diagnose(name, got, expected, mistakes)
    return correct(f"Your table matches tl.sinusoidal_encoding({n}, {d}).")


# ---------------------------------------------------------------- (b) rotary embeddings

ROPE_SEQ, ROPE_HEAD_DIM, ROPE_OFFSET = 6, 8, 5


def _rope_variant(x: Tensor, offset: int = 0, *, sign: float = 1.0, pairing: str = "adjacent",
                  exponent: str = "-2i/d", start: int = 0, base: float = BASE, in_place: str = "",
                  divisor: int | None = None) -> Tensor:
    """RoPE with one deliberate mistake (for diagnosis). ``x``: ``(seq, head_dim)``.

    ``in_place="even first"``: the even features are overwritten before the odd ones are computed
    from them; ``"odd first"``: the other way round.
    """
    seq, d = x.shape
    i = torch.arange(d // 2, dtype=torch.float64)
    n = divisor or d  # what the exponent is divided by (an off-by-one: d - 1)
    theta = {"-2i/d": base ** (-2 * i / n), "-i/d": base ** (-i / n), "-4i/d": base ** (-4 * i / n),
             "+2i/d": base ** (2 * i / n)}[exponent]
    m = torch.arange(offset + start, offset + start + seq, dtype=torch.float64)[:, None]
    angle = m * theta  # (seq, d/2)
    cos, sin = angle.cos(), sign * angle.sin()
    x = x.double()
    if pairing == "halves":  # Hugging Face LLaMA: feature i with feature i + d/2
        x1, x2 = x[:, : d // 2], x[:, d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).float()
    x1, x2 = x[:, 0::2], x[:, 1::2]
    if in_place == "even first":  # the odd coordinate computed from the already-rotated even one
        new1 = x1 * cos - x2 * sin
        new2 = new1 * sin + x2 * cos
    elif in_place == "odd first":
        new2 = x1 * sin + x2 * cos
        new1 = x1 * cos - new2 * sin
    else:
        new1, new2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    return torch.stack([new1, new2], dim=-1).flatten(-2).float()


def _rope_base(x: Tensor, got: Tensor, offset: int) -> float | None:
    """The base implied by the angle by which ``got`` turned feature pair 1 of the row at position 1."""
    row = 1 - offset
    if not 0 <= row < x.shape[0]:
        return None
    (a, b), (a2, b2) = x[row, 2:4].double().tolist(), got[row, 2:4].double().tolist()
    angle = math.atan2(a * b2 - b * a2, a * a2 + b * b2)  # from (a, b) to (a2, b2), counter-clockwise
    return _base_from_angle(angle, x.shape[1])


def _rope_mistakes(x: Tensor, offset: int, got: Tensor) -> dict[str, Tensor]:
    mistakes = {
        "You forgot the position: the output equals the input. Row m must be rotated by the angle "
        "m * theta_i in feature pair i (only row 0, angle 0, stays the same).": x.clone(),
        "Your rotation goes the wrong way (the sign of sin is flipped). Rotating (a, b) by the angle t "
        "gives (a cos t - b sin t, a sin t + b cos t).": _rope_variant(x, offset, sign=-1.0),
        "You overwrote the even features x[..., 0::2] in place and then computed the odd ones "
        "x[..., 1::2] from the already-rotated values (a view such as a = x[..., 0::2] changes with x): "
        "your second coordinate is a' sin t + b cos t instead of a sin t + b cos t. Write both "
        "coordinates into a new tensor (out = torch.empty_like(x)), or compute both from the old values "
        "before assigning either.": _rope_variant(x, offset, in_place="even first"),
        "You overwrote the odd features x[..., 1::2] in place and then computed the even ones "
        "x[..., 0::2] from the already-rotated values (a view such as b = x[..., 1::2] changes with x): "
        "your first coordinate is a cos t - b' sin t instead of a cos t - b sin t. Write both "
        "coordinates into a new tensor (out = torch.empty_like(x)), or compute both from the old values "
        "before assigning either.": _rope_variant(x, offset, in_place="odd first"),
        "You paired feature i with feature i + head_dim/2 (the 'rotate_half' convention of Hugging Face's "
        "LLaMA). That is the same rotation applied to permuted features, equivalent if the weights are "
        "permuted to match, but not equal: here each feature pair is adjacent, (x[2i], x[2i+1]).":
            _rope_variant(x, offset, pairing="halves"),
        "Your theta_i uses i/head_dim in the exponent; it should be theta_i = 10000^(-2i/head_dim) for "
        "feature pair i (the 2 is missing). (That is also the right answer for base 100 = sqrt(10000): "
        "if you typed 100, type 10000.)": _rope_variant(x, offset, exponent="-i/d"),
        "You counted the 2 twice: your theta_i = 10000^(-4i/head_dim) instead of 10000^(-2i/head_dim). "
        "If your i comes from torch.arange(0, head_dim, 2) it already is 2i (0, 2, 4, ...), so divide "
        "it by head_dim without multiplying by 2 again. (That is also the right answer for base "
        "10000^2 = 1e8.)": _rope_variant(x, offset, exponent="-4i/d"),
        "Your theta_i = 10000^(+2i/head_dim) has the wrong sign in the exponent: the frequencies must "
        "decrease, theta_i = 10000^(-2i/head_dim), from 1 for feature pair 0 towards 1/10000.":
            _rope_variant(x, offset, exponent="+2i/d"),
        "Your positions start at 1; the first row is position 0 + positions_offset (with no offset, not rotated at all).":
            _rope_variant(x, offset, start=1),
        # before the base: an exponent over head_dim - k is the right answer for base 10000^(d/(d-k))
        **{_off_by_one(k, "head_dim", "theta_i = 10000^(-2i/head_dim)"):
           _rope_variant(x, offset, divisor=x.shape[1] - k) for k in (1, 2)},
    }
    base = _rope_base(x, got, offset)
    if base is not None:
        mistakes[f"Your theta_i uses base {_shown(base)} instead of 10000: theta_i = 10000^(-2i/head_dim). "
                 f"Everything else (direction, feature pairs, positions) is right."] = \
            _rope_variant(x, offset, base=base)
    return mistakes


def check_apply_rope(apply_rope: Callable[..., Tensor]) -> Verdict:
    """Check ``apply_rope(x, positions_offset=0) -> (seq, head_dim)`` (base 10000).

    Row ``m`` of ``x`` sits at position ``positions_offset + m``; each feature pair
    ``(x[m, 2i], x[m, 2i+1])`` is rotated by the angle ``(positions_offset + m) * theta_i`` with
    ``theta_i = 10000^(-2i/head_dim)``. Called once with the default offset and once with
    ``positions_offset=5``. Diagnoses: no rotation, rotation in the wrong direction, an in-place
    overwrite (one coordinate computed from the other's rotated value), halves pairing (``i`` with
    ``i + head_dim/2``), a wrong theta exponent (``i`` or ``4i`` for ``2i``, the wrong sign, or divided
    by ``head_dim - 1`` or ``- 2``), a base other than 10000 (named), positions starting at 1, and an
    ignored ``positions_offset``.
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
        diagnose(name + "(x)", got, expected, _rope_mistakes(x, 0, got))

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
            **_rope_mistakes(x, ROPE_OFFSET, got),
        })
    return correct("Your rotation matches tl.RotaryEmbedding, with and without an offset. "
                   "q·k now depends only on the relative position (the signed offset between the two).")
