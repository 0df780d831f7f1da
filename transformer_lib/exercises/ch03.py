"""Exercises of chapter 3, *Feed-forward networks*: GELU's tanh approximation and SwiGLU.

Each check calls the reader's function on inputs where every common mistake gives a different
answer, compares with the library (:mod:`transformer_lib.layers.feedforward`) and, when the
answer is wrong, names the mistake.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..layers.feedforward import GatedFeedForward, gelu, gelu_tanh
from ._checking import NOT_IMPLEMENTED, attempt, check_against, close, expect_tensor, fail, pending, Verdict

__all__ = ["check_gelu_tanh", "check_swiglu", "gelu_tanh_inputs", "swiglu_inputs"]


# --------------------------------------------------------------------------------------------
# (a) gelu_tanh
# --------------------------------------------------------------------------------------------


def gelu_tanh_inputs() -> Tensor:
    """``(3, 11)`` points in ``[-4, 4]``: there exact GELU and its tanh approximation differ by up to 5e-4."""
    return torch.linspace(-4.0, 4.0, 33).reshape(3, 11)


def _tanh_form(x: Tensor, c: float = math.sqrt(2.0 / math.pi), cubic: float = 0.044715, half: float = 0.5) -> Tensor:
    return half * x * (1.0 + torch.tanh(c * (x + cubic * x**3)))


def _gelu_tanh_mistakes(x: Tensor) -> dict[str, Tensor]:
    wrong_constant = (
        "The constant in front of the bracket should be sqrt(2/pi) = 0.7979 "
        "(`math.sqrt(2 / math.pi)`), not {}."
    )
    return {
        "You computed the exact GELU, 0.5 x (1 + erf(x / sqrt 2)) (or F.gelu without approximate='tanh'). "
        "This exercise asks for the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).": gelu(x),
        "The cubic term is missing: the tanh's argument is sqrt(2/pi) * (x + 0.044715 * x**3), "
        "not sqrt(2/pi) * x.": _tanh_form(x, cubic=0.0),
        wrong_constant.format("sqrt(2*pi) = 2.5066"): _tanh_form(x, c=math.sqrt(2.0 * math.pi)),
        wrong_constant.format("2/pi = 0.6366 (the square root is missing)"): _tanh_form(x, c=2.0 / math.pi),
        wrong_constant.format("sqrt(pi/2) = 1.2533 (the fraction is upside down)"): _tanh_form(x, c=math.sqrt(math.pi / 2.0)),
        wrong_constant.format("sqrt(2)/pi = 0.4502"): _tanh_form(x, c=math.sqrt(2.0) / math.pi),
        "The factor 0.5 is missing: GELU(x) = 0.5 * x * (1 + tanh(...)); without it the result is twice "
        "too large (for large x, GELU(x) should approach x, not 2x).": _tanh_form(x, half=1.0),
        "You returned 0.5 * (1 + tanh(...)), the approximate normal CDF Phi(x), without multiplying by x: "
        "GELU(x) = x * Phi(x).": 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
        "That is the *sigmoid* approximation x * sigmoid(1.702 x). This exercise asks for the tanh one: "
        "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).": x * torch.sigmoid(1.702 * x),
        "sqrt(2/pi) multiplies only the x term: you wrote tanh(sqrt(2/pi) * x + 0.044715 * x**3). The constant "
        "multiplies the whole bracket: tanh(sqrt(2/pi) * (x + 0.044715 * x**3)).": 0.5 * x * (
            1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * x + 0.044715 * x**3)
        ),
        "The power is wrong: the correction term is 0.044715 * x**3 (cubed), not x**2.": 0.5 * x * (
            1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**2))
        ),
    }


def check_gelu_tanh(fn: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``fn(x)``, GELU's tanh approximation ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    ``fn`` takes a float tensor of any shape and returns a tensor of the same shape (elementwise).
    It is called on points of ``[-4, 4]`` where exact GELU and the approximation differ, so using
    the exact erf form is caught. Diagnoses: the exact (erf) GELU; the missing ``0.044715 x^3``
    term; a wrong constant instead of ``sqrt(2/pi)``, or one that multiplies only the ``x`` term;
    ``x^2`` instead of ``x^3``; the missing ``0.5``; forgetting the factor ``x``; the sigmoid
    approximation; changing the input in place.

    Returns True when right, False when ``fn`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    x = gelu_tanh_inputs()
    x_before = x.clone()
    got = attempt(fn, x)
    if got is NOT_IMPLEMENTED:
        return pending("gelu_tanh")
    if not torch.equal(x, x_before):
        fail("gelu_tanh changed its input in place (e.g. `x.mul_` or `x **= 3`). Build new tensors instead: "
             "the caller still needs x.")
    return check_against(
        "gelu_tanh",
        got,
        gelu_tanh(x),
        _gelu_tanh_mistakes(x),
        success="Your gelu_tanh matches GPT-2's activation (Hugging Face's 'gelu_new') and "
                "F.gelu(x, approximate='tanh').",
    )


# --------------------------------------------------------------------------------------------
# (b) swiglu
# --------------------------------------------------------------------------------------------


def swiglu_inputs(d_model: int, d_ff: int, seed: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``x (2, 3, d_model)``, ``W_gate (d_ff, d_model)``, ``W_in (d_ff, d_model)``, ``W_out (d_model, d_ff)``.

    Weights are stored like ``nn.Linear.weight``: ``(out_features, in_features)``.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, d_model, generator=g)
    W_gate = torch.randn(d_ff, d_model, generator=g) / math.sqrt(d_model)
    W_in = torch.randn(d_ff, d_model, generator=g) / math.sqrt(d_model)
    W_out = torch.randn(d_model, d_ff, generator=g) / math.sqrt(d_ff)
    return x, W_gate, W_in, W_out


def _swiglu_reference(x: Tensor, W_gate: Tensor, W_in: Tensor, W_out: Tensor) -> Tensor:
    """The library's :class:`GatedFeedForward` (no bias) carrying these weights."""
    d_ff, d_model = W_in.shape
    glu = GatedFeedForward(d_model, d_ff, activation="silu", bias=False)
    with torch.no_grad():
        glu.W_gate.weight.copy_(W_gate)
        glu.W_in.weight.copy_(W_in)
        glu.W_out.weight.copy_(W_out)
        return glu(x)


def _glu(x: Tensor, W_gate: Tensor, W_in: Tensor, W_out: Tensor, act=F.silu, swap: bool = False) -> Tensor:
    gate, lin = x @ W_gate.T, x @ W_in.T
    if swap:
        gate, lin = lin, gate
    return (act(gate) * lin) @ W_out.T


TRANSPOSED_HINT = (
    "Transposed weights: they are stored like nn.Linear.weight, with shape (out_features, in_features), "
    "so W_gate and W_in are (d_ff, d_model) and W_out is (d_model, d_ff). Apply them as x @ W.T "
    "(or F.linear(x, W)), not x @ W."
)


PRECEDENCE_HINT = (
    "Check the brackets: `*` and `@` have the same precedence in Python and group from the left, so "
    "`silu(x @ W_gate.T) * x @ W_in.T` is `(silu(x @ W_gate.T) * x) @ W_in.T`: it multiplies the gate by x itself. "
    "Put brackets around each projection: silu(x @ W_gate.T) * (x @ W_in.T)."
)


def _swiglu_mistakes(x: Tensor, W_gate: Tensor, W_in: Tensor, W_out: Tensor) -> dict[str, Tensor]:
    args = (x, W_gate, W_in, W_out)
    mistakes = {
        "The gate and the input are swapped: SiLU goes on the gate W_gate x, and the result multiplies "
        "the plain projection W_in x: (silu(x @ W_gate.T) * (x @ W_in.T)) @ W_out.T.": _glu(*args, swap=True),
        "You used sigmoid where SwiGLU uses SiLU: sigmoid(W_gate x) * (W_in x) is the original GLU of "
        "Dauphin et al. SwiGLU's gate is silu(z) = z * sigmoid(z) (F.silu).": _glu(*args, act=torch.sigmoid),
        "You used sigmoid instead of SiLU, and the gate and the input are swapped too.": _glu(
            *args, act=torch.sigmoid, swap=True
        ),
        "You used GELU: that is GEGLU. SwiGLU's gate is SiLU, silu(z) = z * sigmoid(z) (F.silu).": _glu(*args, act=F.gelu),
        "The gate is missing: this is a plain SiLU FFN, W_out silu(W_in x). SwiGLU multiplies two "
        "projections elementwise: silu(x @ W_gate.T) * (x @ W_in.T), then applies W_out.": F.silu(x @ W_in.T) @ W_out.T,
        "The gate is missing: this is a plain SiLU FFN, W_out silu(W_gate x). SwiGLU multiplies "
        "silu(x @ W_gate.T) elementwise by the second projection x @ W_in.T, then applies W_out.": F.silu(
            x @ W_gate.T
        ) @ W_out.T,
        "The SiLU is missing: (W_gate x) * (W_in x) is a bilinear layer. Apply F.silu to the gate "
        "projection before multiplying.": _glu(*args, act=lambda z: z),
        "SiLU is applied after the product: silu((W_gate x) * (W_in x)). It goes on the gate projection "
        "alone, before multiplying: silu(x @ W_gate.T) * (x @ W_in.T).": F.silu((x @ W_gate.T) * (x @ W_in.T)) @ W_out.T,
        "SiLU is applied to both projections. Only the gate W_gate x goes through SiLU; W_in x stays linear: "
        "silu(x @ W_gate.T) * (x @ W_in.T).": (F.silu(x @ W_gate.T) * F.silu(x @ W_in.T)) @ W_out.T,
        "You added the two projections: the gate multiplies the plain projection elementwise, "
        "silu(x @ W_gate.T) * (x @ W_in.T), it is not added to it.": (F.silu(x @ W_gate.T) + x @ W_in.T) @ W_out.T,
    }
    if W_in.shape[0] == W_in.shape[1]:  # square: these slips raise nothing, they give wrong values
        mistakes[PRECEDENCE_HINT] = F.silu(x @ W_gate.T) * x @ W_in.T @ W_out.T
        mistakes["The output projection W_out is missing: the hidden vector silu(W_gate x) * (W_in x) "
                 "must be mapped back to d_model with W_out."] = F.silu(x @ W_gate.T) * (x @ W_in.T)
    return mistakes


def _transposed_variants(x: Tensor, W_gate: Tensor, W_in: Tensor, W_out: Tensor) -> list[Tensor]:
    """SwiGLU with any non-empty subset of the three weights transposed (square weights only)."""
    variants = []
    for flags in itertools.product((False, True), repeat=3):
        if any(flags):
            variants.append(_glu(x, *(W.T if t else W for W, t in zip((W_gate, W_in, W_out), flags))))
    return variants


def _call_swiglu(fn: Callable, x: Tensor, W_gate: Tensor, W_in: Tensor, W_out: Tensor):
    try:
        return attempt(fn, x, W_gate, W_in, W_out)
    except RuntimeError as error:
        shapes = f"With x {tuple(x.shape)}, W_gate and W_in {tuple(W_in.shape)}, W_out {tuple(W_out.shape)}: "
        if "size of tensor a" in str(error):  # an elementwise product of tensors whose last sizes differ
            fail(f"swiglu raised RuntimeError: {error}\n{shapes}an elementwise product met a tensor of width "
                 f"d_ff={W_in.shape[0]} (such as the gate) and one of width d_model={W_in.shape[1]} (such as x itself). "
                 f"{PRECEDENCE_HINT}")
        fail(f"swiglu raised RuntimeError: {error}\n{shapes}"  # a matmul whose inner sizes differ
             f"if this is a shape mismatch, check the orientation of the weights. {TRANSPOSED_HINT}")


def check_swiglu(fn: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``fn(x, W_gate, W_in, W_out) = (silu(x @ W_gate.T) * (x @ W_in.T)) @ W_out.T`` (no biases).

    ``x`` is ``(batch, seq, d_model)``; the weights are stored like ``nn.Linear.weight``:
    ``W_gate``, ``W_in`` are ``(d_ff, d_model)``, ``W_out`` is ``(d_model, d_ff)``. The answer is
    ``(batch, seq, d_model)``. Called twice: with ``d_ff != d_model`` (transposed weights then fail
    on shapes), and with square weights (transposed weights then give wrong values). Diagnoses:
    gate and input swapped; sigmoid (GLU) or GELU (GEGLU) instead of SiLU; no gate (a plain SiLU
    FFN); no SiLU; SiLU after the product or on both projections; the projections added instead of
    multiplied; no output projection; transposed weights; missing brackets (``*`` and ``@`` group
    from the left).

    Returns True when right, False when ``fn`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    for d_model, d_ff, seed in ((6, 10, 0), (8, 8, 1)):
        args = swiglu_inputs(d_model, d_ff, seed)
        got = _call_swiglu(fn, *args)
        if got is NOT_IMPLEMENTED:
            return pending("swiglu")
        x = args[0]
        if isinstance(got, Tensor) and d_ff != d_model and tuple(got.shape) == (*x.shape[:-1], d_ff):
            fail(f"swiglu returned shape {tuple(got.shape)}, the hidden size d_ff={d_ff}: the output projection "
                 f"W_out is missing. Map the hidden vector back to d_model={d_model} with @ W_out.T.")
        expected = _swiglu_reference(*args)
        if isinstance(got, Tensor) and not close(got, expected):
            if d_model == d_ff and any(close(got, wrong) for wrong in _transposed_variants(*args)):
                fail(f"swiglu is not right yet. {TRANSPOSED_HINT}")
            check_against("swiglu", got, expected, _swiglu_mistakes(*args))  # fails with a diagnosis
        expect_tensor("swiglu", got, expected.shape)
    return check_against(
        "swiglu", got, expected,
        success="Your swiglu matches the library's GatedFeedForward(activation='silu', bias=False).",
    )
