"""Exercises for chapter 4, *Normalization and residuals* (``book/04_normalization.ipynb``).

* :func:`check_layer_norm`: ``layer_norm(x, weight, bias, eps)``
* :func:`check_rms_norm`: ``rms_norm(x, weight, eps)``
* :func:`check_pre_norm_residual`, :func:`check_post_norm_residual`: one residual step
  ``f(x, norm, fn)`` with the norm before the sublayer (pre-norm) or after the sum (post-norm)

The inputs are chosen so that every common mistake gives a different answer: a small feature
dimension (``d = 5``, so dividing by ``d - 1`` instead of ``d`` changes the result by 12 %), one
token whose features barely vary (variance below ``eps``, so where ``eps`` goes matters), tokens
with large means (so forgetting to centre, or centring when you should not, shows), and a
random gain and bias (so forgetting either shows).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from ..layers.block import TransformerBlock
from ..layers.feedforward import FeedForward
from ..layers.normalization import LayerNorm, RMSNorm
from ._checking import (
    NOT_IMPLEMENTED, ExerciseFailed, Verdict, attempt, call, check_against, close, correct, expect_tensor, fail, pending,
)

EPS = 1e-3  # the eps the checks pass: as large as the quiet token's variance, so its placement shows


def _norm_inputs(seed: int, quiet_shift: float) -> tuple[Tensor, Tensor, Tensor]:
    """``x`` of shape ``(batch=2, seq=3, d=5)``, a gain and a bias of shape ``(5,)``.

    Token ``(0, 2)`` is quiet: its features vary by about 0.02 around ``quiet_shift``, so its
    variance (LayerNorm) or, with ``quiet_shift=0``, its mean square (RMSNorm) is below ``EPS``.
    """
    g = torch.Generator().manual_seed(seed)
    d = 5
    shifts = torch.tensor([[2.0, -1.0, quiet_shift], [0.5, 4.0, -3.0]]).unsqueeze(-1)  # (batch, seq, 1)
    scales = torch.tensor([[1.0, 3.0, 0.02], [0.5, 2.0, 1.5]]).unsqueeze(-1)
    x = shifts + scales * torch.randn(2, 3, d, generator=g)
    weight = 1.0 + 0.5 * torch.randn(d, generator=g)
    bias = 0.5 * torch.randn(d, generator=g)
    return x, weight, bias


def _stats_norm(x: Tensor, dim=-1, correction: int = 0) -> tuple[Tensor, Tensor]:
    mean = x.mean(dim=dim, keepdim=True)
    var = x.var(dim=dim, keepdim=True, correction=correction)
    return mean, var


KEEPDIM_HINT = (
    "This looks like a reduction without keepdim=True: a per-token statistic such as x.mean(dim=-1) has shape "
    "(batch, seq), which no longer lines up with x's (batch, seq, d_model), so it cannot broadcast against x. "
    "Keep the reduced dimension: x.mean(dim=-1, keepdim=True) has shape (batch, seq, 1)."
)


def _call_norm(name: str, fn: Callable, *args):
    """The reader's norm through :func:`_checking.call` (an exception becomes a diagnosis naming the argument
    shapes); a broadcasting error, the usual sign of a missing ``keepdim=True``, also gets the keepdim hint."""
    try:
        return attempt(fn, *(a.clone() if isinstance(a, Tensor) else a for a in args))
    except ExerciseFailed:
        raise
    except Exception as error:  # run it again through call(), which reports it with the shapes
        broadcast = "must match the size of tensor" in str(error)
        return call(name, fn, *args, hint=KEEPDIM_HINT if broadcast else "")


# ---------------------------------------------------------------------------------- LayerNorm

CANCELLATION_HINT = (
    "Your formula is right on paper but not in float32: with the same inputs in float64 it gives the right answer. "
    "That is catastrophic cancellation. E[x^2] - E[x]^2 is the variance, but for a token with a large mean and a "
    "tiny variance (here the quiet token: mean about 5, variance about 2e-4) E[x^2] and E[x]^2 agree in almost all "
    "of float32's 7 significant digits, and their difference keeps mostly rounding error. Subtract the mean first "
    "and average the squares of what is left, mean((x - mean)**2), as nn.LayerNorm does."
)


def layer_norm_mistakes(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> dict[str, Tensor]:
    """The answers that common LayerNorm mistakes give, keyed by the hint that names each one."""
    mean, var = _stats_norm(x)
    centred = x - mean
    mean_u, var_u = _stats_norm(x, correction=1)
    mistakes = {
        "Is your epsilon inside the square root? LayerNorm divides by sqrt(var + eps), not sqrt(var) + eps.":
            centred / (var.sqrt() + eps) * weight + bias,
        "You used x.std(), which is the unbiased standard deviation (it divides by d - 1), and added eps outside "
        "the square root. Use torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + eps).":
            centred / (var_u.sqrt() + eps) * weight + bias,
        "Your variance divides by d - 1 (the unbiased estimate, torch.var's default). LayerNorm uses the biased "
        "variance, which divides by d: x.var(dim=-1, keepdim=True, unbiased=False).":
            centred / (var_u + eps).sqrt() * weight + bias,
        "Did you use the eps argument? Your answer matches eps=1e-5 instead of the eps passed in.":
            centred / (var + 1e-5).sqrt() * weight + bias,
        "You forgot the gain: multiply the normalised x by weight.": centred / (var + eps).sqrt() + bias,
        "You forgot the bias: add bias after multiplying by weight.": centred / (var + eps).sqrt() * weight,
        "You forgot the gain and the bias: the normalised x is multiplied by weight, then bias is added.":
            centred / (var + eps).sqrt(),
        "You forgot to subtract the mean: LayerNorm divides (x - mean) by the standard deviation.":
            x / (var + eps).sqrt() * weight + bias,
        "You forgot to subtract the mean, and your variance is mean(x**2) (that is RMSNorm). LayerNorm centres "
        "first: (x - mean) / sqrt(mean((x - mean)**2) + eps).":
            x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * weight + bias,
        "Your variance is mean(x**2), the mean square of x before centring: it includes the mean. LayerNorm's "
        "variance is taken after subtracting the mean: mean((x - mean)**2).":
            centred / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * weight + bias,
        "Where is eps? LayerNorm divides by sqrt(var + eps): without eps a token whose variance is tiny (the "
        "quiet token here) is blown up, and a constant token gives 0 / 0.":
            centred / var.sqrt() * weight + bias,
    }
    for dims, where in (((0,), "over the batch, dim 0"), ((1,), "over the sequence, dim 1"),
                        ((1, 2), "over the whole sequence, dims (1, 2)")):
        m, v = _stats_norm(x, dim=dims)
        mistakes[
            f"You normalised over the wrong dimension ({where}). LayerNorm's statistics are per token, over the "
            "last (feature) dimension: x.mean(dim=-1, keepdim=True)."
        ] = (x - m) / (v + eps).sqrt() * weight + bias
    return mistakes


def layer_norm_case(seed: int = 4) -> tuple[tuple, Tensor, dict[str, Tensor]]:
    """``(args, expected, mistakes)`` for :func:`check_layer_norm`; ``expected`` is the library's LayerNorm."""
    x, weight, bias = _norm_inputs(seed, quiet_shift=5.0)
    ref = LayerNorm(x.shape[-1], eps=EPS)
    with torch.no_grad():
        ref.weight.copy_(weight)
        ref.bias.copy_(bias)
        expected = ref(x)
    return (x, weight, bias, EPS), expected, layer_norm_mistakes(x, weight, bias, EPS)


def check_layer_norm(layer_norm: Callable[[Tensor, Tensor, Tensor, float], Tensor]) -> Verdict:
    """Check ``layer_norm(x, weight, bias, eps)`` against :class:`transformer_lib.LayerNorm`.

    ``x`` is ``(batch, seq, d_model)``; ``weight`` and ``bias`` are ``(d_model,)``. The answer must
    have the shape of ``x``. Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one (after
    saying so) while the function still raises NotImplementedError; otherwise raises
    :class:`ExerciseFailed` naming the mistake (eps outside the square root or missing, the unbiased
    variance, the mean square instead of the variance, the wrong dimension, a missing gain, bias or
    mean, an ignored eps argument, a reduction without ``keepdim=True``, and a variance computed as
    ``E[x^2] - E[x]^2``, right on paper but cancelling catastrophically in float32).
    """
    args, expected, mistakes = layer_norm_case()
    got = _call_norm("layer_norm", layer_norm, *args)
    if isinstance(got, Tensor) and got.shape == expected.shape and not close(got, expected):
        if not any(close(got, wrong) for wrong in mistakes.values()) and _right_in_float64(layer_norm, args):
            fail(f"layer_norm is not right yet. {CANCELLATION_HINT}")
    return check_against(
        "layer_norm", got, expected, mistakes,
        success="Your layer_norm matches transformer_lib.LayerNorm (and therefore nn.LayerNorm).",
    )


def _right_in_float64(layer_norm: Callable, args: tuple) -> bool:
    """Whether the reader's layer_norm gives the right answer on the same inputs in float64 (a formula that is
    right on paper but loses its digits in float32)."""
    x, weight, bias, eps = (a.double() if isinstance(a, Tensor) else a for a in args)
    mean = x.mean(-1, keepdim=True)
    expected = (x - mean) / ((x - mean).pow(2).mean(-1, keepdim=True) + eps).sqrt() * weight + bias
    try:
        got = attempt(layer_norm, x, weight, bias, eps)
    except Exception:
        return False
    return isinstance(got, Tensor) and got.shape == expected.shape and torch.allclose(
        got.double(), expected, atol=1e-6, rtol=1e-6)


# ------------------------------------------------------------------------------------ RMSNorm


def rms_norm_mistakes(x: Tensor, weight: Tensor, eps: float) -> dict[str, Tensor]:
    """The answers that common RMSNorm mistakes give, keyed by the hint that names each one."""
    ms = x.pow(2).mean(-1, keepdim=True)  # mean square
    mean, var = _stats_norm(x)
    _, var_u = _stats_norm(x, correction=1)
    rms_dim0 = (x.pow(2).mean(0, keepdim=True) + eps).sqrt()
    rms_dim1 = (x.pow(2).mean(1, keepdim=True) + eps).sqrt()
    sum_sq = x.pow(2).sum(-1, keepdim=True)
    return {
        "You subtracted the mean: that is LayerNorm. RMSNorm does not centre; it divides x itself by "
        "sqrt(mean(x**2) + eps).": (x - mean) / (var + eps).sqrt() * weight,
        "You subtracted the mean from x: RMSNorm does not centre, it only rescales x by 1 / RMS(x).":
            (x - mean) / (ms + eps).sqrt() * weight,
        "Is your epsilon inside the square root? RMSNorm divides by sqrt(mean(x**2) + eps), not "
        "sqrt(mean(x**2)) + eps.": x / (ms.sqrt() + eps) * weight,
        "You divided by the standard deviation (which subtracts the mean inside the square). RMSNorm divides by "
        "the root mean square, sqrt(mean(x**2) + eps), with no mean anywhere.": x / (var + eps).sqrt() * weight,
        "You divided by x.std() (the standard deviation, and unbiased too). RMSNorm divides by the root mean "
        "square, sqrt(mean(x**2) + eps), with no mean anywhere.": x / (var_u.sqrt() + eps) * weight,
        "You forgot the square root: divide by sqrt(mean(x**2) + eps), the root of the mean square.":
            x / (ms + eps) * weight,
        "You forgot the gain: multiply the normalised x by weight.": x / (ms + eps).sqrt(),
        "Did you use the eps argument? Your answer matches eps=1e-6 instead of the eps passed in.":
            x / (ms + 1e-6).sqrt() * weight,
        "You normalised over the wrong dimension (over the batch, dim 0). RMSNorm's statistic is per token, "
        "over the last (feature) dimension: x.pow(2).mean(dim=-1, keepdim=True).": x / rms_dim0 * weight,
        "You normalised over the wrong dimension (over the sequence, dim 1). RMSNorm's statistic is per token, "
        "over the last (feature) dimension: x.pow(2).mean(dim=-1, keepdim=True).": x / rms_dim1 * weight,
        "You summed the squares instead of averaging them: sqrt(sum(x**2)) is the vector's length, sqrt(d) times "
        "its RMS. RMSNorm divides by sqrt(mean(x**2) + eps).": x / (sum_sq + eps).sqrt() * weight,
        "You divided by the vector's length, x.norm(dim=-1), which is sqrt(d) times its RMS. RMSNorm divides by "
        "sqrt(mean(x**2) + eps).": x / sum_sq.sqrt() * weight,
        "Where is eps? You divided by the RMS itself, sqrt(mean(x**2)) (F.normalize(x) * sqrt(d) gives the same). "
        "RMSNorm divides by sqrt(mean(x**2) + eps), which stays away from 0 for a token whose mean square is tiny "
        "(the quiet token here).": x / ms.sqrt() * weight,
    }


def rms_norm_case(seed: int = 5) -> tuple[tuple, Tensor, dict[str, Tensor]]:
    """``(args, expected, mistakes)`` for :func:`check_rms_norm`; ``expected`` is the library's RMSNorm."""
    x, weight, _ = _norm_inputs(seed, quiet_shift=0.0)
    ref = RMSNorm(x.shape[-1], eps=EPS)
    with torch.no_grad():
        ref.weight.copy_(weight)
        expected = ref(x)
    return (x, weight, EPS), expected, rms_norm_mistakes(x, weight, EPS)


def check_rms_norm(rms_norm: Callable[[Tensor, Tensor, float], Tensor]) -> Verdict:
    """Check ``rms_norm(x, weight, eps)`` against :class:`transformer_lib.RMSNorm`.

    ``x`` is ``(batch, seq, d_model)``; ``weight`` is ``(d_model,)``. Prints ``Correct!`` and
    returns a true ``Verdict`` when right; returns a false one while the function raises NotImplementedError;
    otherwise raises :class:`ExerciseFailed` naming the mistake (subtracting the mean, eps outside
    the square root or missing, the standard deviation instead of the RMS, no square root, the sum
    or the length instead of the mean square, a missing gain, the wrong dimension, an ignored eps
    argument, a reduction without ``keepdim=True``).
    """
    args, expected, mistakes = rms_norm_case()
    got = _call_norm("rms_norm", rms_norm, *args)
    return check_against(
        "rms_norm", got, expected, mistakes,
        success="Your rms_norm matches transformer_lib.RMSNorm (and therefore nn.RMSNorm).",
    )


# ------------------------------------------------------------------------------ residual steps

D_RES, N_HEADS_RES = 8, 2


def _residual_parts(seed: int = 6) -> tuple[Tensor, nn.Module, nn.Module]:
    """``x (batch=2, seq=4, d=8)`` with non-zero means, a LayerNorm with a random gain and bias, an FFN."""
    g = torch.Generator().manual_seed(seed)
    x = 3.0 * torch.randn(2, 4, 1, generator=g) + 2.0 * torch.randn(2, 4, D_RES, generator=g)
    with torch.random.fork_rng(devices=[]):  # nn.Linear's init draws from the global RNG: leave the reader's alone
        norm = LayerNorm(D_RES)
        fn = FeedForward(D_RES, 2 * D_RES, activation="gelu")
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.5 * torch.randn(D_RES, generator=g))
        norm.bias.copy_(0.5 * torch.randn(D_RES, generator=g))
        for p in fn.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return x, norm, fn


def residual_mistakes(x: Tensor, norm: nn.Module, fn: nn.Module, position: str) -> dict[str, Tensor]:
    """What common mistakes give for a pre-norm (``position="pre"``) or post-norm residual step."""
    with torch.no_grad():
        pre, post = x + fn(norm(x)), norm(x + fn(x))
        common = {
            "You forgot the residual connection: add x back.": fn(norm(x)) if position == "pre" else norm(fn(x)),
            "You forgot the norm: this is x + fn(x).": x + fn(x),
            "You normalised the sublayer's output only, x + norm(fn(x)). "
            + ("Pre-norm normalises the sublayer's input: x + fn(norm(x))." if position == "pre"
               else "Post-norm normalises the sum: norm(x + fn(x))."): x + norm(fn(x)),
        }
        if position == "pre":
            return {
                "You wrote post-norm, norm(x + fn(x)). Pre-norm puts the norm before the sublayer, on its input, "
                "and leaves the residual sum alone: x + fn(norm(x)).": post,
                **common,
                "The residual path must carry x itself, not norm(x): x + fn(norm(x)).": norm(x) + fn(norm(x)),
                "You normalised twice: pre-norm does not normalise the sum x + fn(norm(x)) again.": norm(pre),
            }
        return {
            "You wrote pre-norm, x + fn(norm(x)). Post-norm feeds x itself to the sublayer and normalises the "
            "sum: norm(x + fn(x)).": pre,
            **common,
            "You normalised twice: post-norm feeds x itself (not norm(x)) to the sublayer: norm(x + fn(x)).":
                norm(pre),
            "The residual sum must use x, not norm(x): norm(x + fn(x)).": norm(norm(x) + fn(x)),
            "norm(x) + fn(norm(x)) normalises the stream before the sublayer and leaves the sum unnormalised. "
            "Post-norm feeds x itself to the sublayer and normalises the sum: norm(x + fn(x)).":
                norm(x) + fn(norm(x)),
        }


def _check_residual(step: Callable, position: str) -> Verdict:
    name = f"{position}_norm_residual"
    x, norm, fn = _residual_parts()
    with torch.no_grad():
        got = call(name, step, x, norm, fn)  # an exception: a diagnosis naming the argument shapes
        if got is NOT_IMPLEMENTED:
            return pending(name)
        expected = x + fn(norm(x)) if position == "pre" else norm(x + fn(x))
        expect_tensor(name, got, expected.shape)
        if not close(got, expected):
            check_against(name, got, expected, residual_mistakes(x, norm, fn, position))

        # two of the reader's steps, with a real block's parts, must be that block
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(7)
            block = TransformerBlock(D_RES, N_HEADS_RES, norm_position=position).eval()
            for m in (block.norm_1, block.norm_2):
                m.weight.normal_(1.0, 0.5)
                m.bias.normal_(0.0, 0.5)
        h = call(name, step, x, block.norm_1, lambda t: block.attn(t))
        out = call(name, step, h, block.norm_2, block.ffn)
        expect_tensor(name, out, x.shape)
        if not close(out, block(x)):
            fail(f"{name} is right on the single step, but two steps with a TransformerBlock's norms, attention and "
                 f"FFN do not reproduce the block. Does your function use only its arguments (x, norm, fn)?")
    return correct(f"Two of your {position}-norm steps, with the attention and FFN of "
                   f"tl.TransformerBlock(norm_position='{position}'), reproduce the block.")


def check_pre_norm_residual(pre_norm_residual: Callable[[Tensor, nn.Module, Callable], Tensor]) -> Verdict:
    """Check ``pre_norm_residual(x, norm, fn)``, one pre-norm step: ``x + fn(norm(x))``.

    ``x`` is ``(batch, seq, d_model)``, ``norm`` a LayerNorm, ``fn`` a sublayer (here an FFN).
    Diagnoses post-norm written instead, a missing residual or norm, a norm on the sublayer's
    output, ``norm(x)`` on the residual path and a second norm on the sum. Then checks that two
    steps, with the parts of a pre-norm :class:`transformer_lib.TransformerBlock`, reproduce it.
    """
    return _check_residual(pre_norm_residual, "pre")


def check_post_norm_residual(post_norm_residual: Callable[[Tensor, nn.Module, Callable], Tensor]) -> Verdict:
    """Check ``post_norm_residual(x, norm, fn)``, one post-norm step: ``norm(x + fn(x))``.

    Diagnoses pre-norm written instead, a missing residual or norm, a norm on the sublayer's
    output only, a normalised input to the sublayer, ``norm(x)`` in the sum, and
    ``norm(x) + fn(norm(x))``. Then checks that
    two steps, with the parts of a post-norm :class:`transformer_lib.TransformerBlock`, reproduce it.
    """
    return _check_residual(post_norm_residual, "post")
