"""Exercises of chapter 10, *Putting it together: a LLaMA-style decoder* (``book/10_putting_it_together.ipynb``).

* :func:`check_llama_kwargs`: ``llama_kwargs()`` returns the :class:`~transformer_lib.GPT2Config`
  keyword arguments that turn GPT-2 into a LLaMA-style decoder. Every swap that is missing (still
  LayerNorm, learned positions, a GELU FFN, biases, a tied head) is named, all at once; so is dropout,
  which LLaMA does not use.
* :func:`check_swiglu_param_count`: ``swiglu_param_count(d_model, multiple_of, bias)`` counts the
  parameters of a SwiGLU FFN whose hidden size is 8/3 d_model rounded up to a multiple of
  ``multiple_of``. The cases are chosen so that counting two matrices instead of three, a 4d hidden
  size, each wrong rounding and each wrong bias count give different answers.
* :func:`check_rms_norm`: ``rms_norm(x, weight, eps)`` as LLaMA computes it, the mean square in float32
  whatever x's dtype and the result in x's dtype (chapter 4's exercise has the formula in float32 only):
  checked in float32 and in float16, where a loud token's squares overflow.
* :func:`check_ffn_sublayer`: ``ffn_sublayer(x, norm_weight, W_gate, W_in, W_out, eps)``, the FFN half of
  a LLaMA block, ``x + SwiGLU(RMSNorm(x))``, compared with ``tl.GatedFeedForward`` and ``tl.RMSNorm``
  holding the same weights (chapter 3's exercise has SwiGLU alone).
* :func:`check_rope_qk`: ``rope_qk(q, k, offset, base)``, RoPE as attention applies it: every head's
  queries and keys ``(batch, n_heads, seq, d_head)``, after ``offset`` cached positions, with a base
  argument (chapter 5's exercise rotates one ``(seq, head_dim)`` tensor at base 10,000).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import fields
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..config import TransformerConfig
from ..layers.feedforward import GatedFeedForward
from ..layers.normalization import RMSNorm
from ..layers.positions import RotaryEmbedding
from ..models.gpt2 import GPT2, GPT2Config
from ..params import count_parameters
from ._checking import (NOT_IMPLEMENTED, ExerciseFailed, Verdict, attempt, call, check_against, close, correct,
                        diagnose, expect_tensor, fail, pending)

__all__ = ["check_llama_kwargs", "check_swiglu_param_count", "check_rms_norm", "check_ffn_sublayer", "check_rope_qk",
           "LLAMA_SWAPS", "SWIGLU_CASES", "swiglu_count_mistakes", "rms_norm_inputs", "rms_norm_mistakes",
           "ffn_sublayer_inputs", "ffn_sublayer_mistakes", "rope_qk_inputs", "rope_qk_mistakes"]


# --------------------------------------------------------------------------------------------
# (a) the LLaMA-style config
# --------------------------------------------------------------------------------------------

#: The five settings in which a LLaMA-style decoder differs from GPT-2, and the chapter teaching each.
LLAMA_SWAPS = {
    "norm": ("rmsnorm", 4),
    "positional": ("rope", 5),
    "ffn": ("swiglu", 3),
    "bias": (False, 4),
    "tie_weights": (False, 6),
}

# the sizes the check builds its model with (the reader's dict holds the architecture only)
_SIZES = dict(vocab_size=11, n_ctx=16, d_model=48, n_layers=2, n_heads=4)

# names a reader may reach for, and the setting they mean
_ALIASES = {
    "activation": "ffn", "ffn_type": "ffn", "ffn_kind": "ffn", "mlp": "ffn", "feedforward": "ffn",
    "norm_type": "norm", "normalization": "norm", "layer_norm": "norm", "rms_norm": "norm",
    "position": "positional", "positions": "positional", "pos_embedding": "positional",
    "position_embedding": "positional", "rope": "positional", "rotary": "positional",
    "tie_word_embeddings": "tie_weights", "tied": "tie_weights", "tie": "tie_weights", "tie_embeddings": "tie_weights",
    "use_bias": "bias", "biases": "bias", "linear_bias": "bias",
}

_NORM_HINT = ("Still LayerNorm: LLaMA normalises with RMSNorm, which rescales by the root mean square without "
              "centring and has no bias (chapter 4): norm='rmsnorm'.")
_POSITION_HINTS = {
    "learned": "Still learned positions (GPT-2's table of n_ctx vectors added to the embeddings, chapter 5): "
               "LLaMA rotates queries and keys instead: positional='rope'.",
    "sinusoidal": "positional='sinusoidal' is the original Transformer's fixed table, added to the embeddings. "
                  "LLaMA rotates queries and keys (chapter 5): positional='rope'.",
    "none": "positional='none' leaves the decoder with only the causal mask to tell positions apart. "
            "LLaMA rotates queries and keys (chapter 5): positional='rope'.",
    "scaled_sinusoidal": "positional='scaled_sinusoidal' is the Cramming BERT's scaled fixed table (chapter 8), "
                         "added to the embeddings. LLaMA rotates queries and keys (chapter 5): positional='rope'.",
}
_FFN_HINTS = {
    "silu": "ffn='silu' is a plain two-matrix FFN with a SiLU activation. SwiGLU is the *gated* FFN with three "
            "matrices, silu(W_gate x) * (W_in x) (chapter 3): ffn='swiglu'.",
    "geglu": "ffn='geglu' gates with GELU; LLaMA's gate is SiLU (chapter 3): ffn='swiglu'.",
}
_FFN_PLAIN_HINT = ("Still a plain {kind} FFN{whose}: LLaMA uses the gated SwiGLU FFN, "
                   "W_out(silu(W_gate x) * W_in x) (chapter 3): ffn='swiglu'.")
_BIAS_HINT = ("Biases are still on: LLaMA's linear layers have none (its RMSNorms have none either, chapter 4): "
              "bias=False.")
_TIE_HINT = ("The output head is still tied to the token embedding (one tensor, two uses, chapter 6): LLaMA "
             "has a separate output matrix: tie_weights=False.")
_POST_HINT = ("norm_position='post' is the original Transformer's and BERT's; GPT-2 and LLaMA are both pre-norm, "
              "so this is not one of the differences: leave norm_position='pre' (the default).")
_DROPOUT_HINT = ("dropout={p}: LLaMA's code has no dropout anywhere, and the GPT-2 of this chapter has none either "
                 "(dropout=0.0, the default), so dropout is not one of the differences: leave it out.")
_DFF_HINT = ("Leave d_ff out (None): the config then picks SwiGLU's hidden size itself, 8/3 d_model rounded up "
             "to a multiple of ffn_multiple_of (tl.gated_hidden_size), whatever d_model is.")


def _as_kwargs(got) -> dict:
    if isinstance(got, TransformerConfig):
        sizes_and_defaults = ({f.name for f in fields(TransformerConfig)} - set(LLAMA_SWAPS)
                              - {"norm_position", "d_ff", "dropout"})
        return {k: v for k, v in got.to_dict().items() if k not in sizes_and_defaults}
    if not isinstance(got, Mapping):
        fail(f"llama_kwargs should return a dict of GPT2Config keyword arguments, e.g. {{'norm': ..., ...}}, "
             f"but it returned {type(got).__name__}.")
    bad_keys = [k for k in got if not isinstance(k, str)]
    if bad_keys:
        fail(f"llama_kwargs should return a dict with string keys (setting names), got the key {bad_keys[0]!r}.")
    return dict(got)


def _build_config(kwargs: dict) -> GPT2Config:
    known = {f.name for f in fields(GPT2Config)}
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        hints = [f"{k!r} (the setting is called {_ALIASES[k.lower()]!r})" if k.lower() in _ALIASES else repr(k)
                 for k in unknown]
        fail(f"GPT2Config has no setting {', '.join(hints)}. Its settings are listed in tl.TransformerConfig; the "
             f"ones to change are {', '.join(LLAMA_SWAPS)}.")
    try:
        return GPT2Config(**{**kwargs, **_SIZES})  # the reader's architecture at the check's small sizes
    except (TypeError, ValueError) as error:
        fail(f"GPT2Config rejected these settings: {error}")


def check_llama_kwargs(fn: Callable[[], Mapping]) -> Verdict:
    """Check ``fn()``: the ``GPT2Config`` keyword arguments that make GPT-2 a LLaMA-style decoder.

    The answer is a dict such as ``{"norm": ..., ...}`` (a ``GPT2Config`` is accepted too) holding
    the architecture only: the check adds its own small sizes (vocabulary, width, depth). It must
    set ``norm="rmsnorm"``, ``positional="rope"``, ``ffn="swiglu"``, ``bias=False`` and
    ``tie_weights=False``. Diagnoses, all at once: still LayerNorm; learned (or sinusoidal, or no)
    positions; a plain GELU / ReLU / SiLU FFN or GEGLU; biases on; a tied head; also post-norm,
    a hard-coded ``d_ff`` and dropout (LLaMA has none); a misspelt setting name (``activation``, ``tie_word_embeddings``, ...);
    a value the config rejects. Then it builds the model and checks its parts.

    Returns True when right, False when ``fn`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    got = attempt(fn)
    if got is NOT_IMPLEMENTED:
        return pending("llama_kwargs")
    config = _build_config(_as_kwargs(got))

    problems = []
    if config.norm != "rmsnorm":
        problems.append(_NORM_HINT)
    if config.positional != "rope":
        problems.append(_POSITION_HINTS.get(config.positional, f"positional={config.positional!r}: LLaMA rotates "
                                            "queries and keys (chapter 5): positional='rope'."))
    if config.ffn != "swiglu":
        problems.append(_FFN_HINTS.get(config.ffn) or _FFN_PLAIN_HINT.format(
            kind=config.ffn, whose=" (GPT-2's)" if config.ffn in ("gelu_tanh", "gelu") else ""))
    if config.bias:
        problems.append(_BIAS_HINT)
    if config.tie_weights:
        problems.append(_TIE_HINT)
    if config.norm_position != "pre":
        problems.append(_POST_HINT)
    if config.d_ff is not None:
        problems.append(_DFF_HINT)
    if config.dropout > 0:
        problems.append(_DROPOUT_HINT.format(p=config.dropout))
    if problems:
        n = len(problems)
        fail(f"llama_kwargs is not right yet ({n} thing{'s' * (n > 1)} to fix):\n- " + "\n- ".join(problems))

    # the settings are right; the model they build must have LLaMA's parts
    with torch.random.fork_rng(devices=[]):
        model = GPT2(config)
        gpt2 = GPT2(GPT2Config(**_SIZES))
    block = model.blocks[0]
    assert model.position_embedding is None and model.rope is not None
    assert isinstance(block.norm_1, RMSNorm) and isinstance(model.norm_f, RMSNorm)
    assert isinstance(block.ffn, GatedFeedForward) and block.ffn.activation == "silu"
    assert all(not isinstance(m, nn.Linear) or m.bias is None for m in model.modules())
    assert model.lm_head.weight is not model.token_embedding.weight
    return correct(
        f"With the check's sizes (d_model={config.d_model}, {config.n_layers} layers, vocabulary "
        f"{config.vocab_size}) your settings build a LLaMA-style decoder of {model.num_parameters():,} parameters: "
        f"RMSNorm, RoPE, SwiGLU (hidden size {block.ffn.W_in.out_features}), no biases, an untied head. "
        f"GPT-2 at the same sizes has {gpt2.num_parameters():,}."
    )


# --------------------------------------------------------------------------------------------
# (b) SwiGLU's parameter count
# --------------------------------------------------------------------------------------------

#: ``(d_model, multiple_of, bias)`` cases: 8/3 d exact (96), rounding up, down and to the nearest
#: multiple all different (160 with 64; 100 with 32), a ``multiple_of`` other than 64 (32), biases
#: (100 and 160), and LLaMA-7B's FFN (4096 with 256: hidden size 11008).
SWIGLU_CASES = ((96, 64, False), (160, 64, False), (100, 32, False), (4096, 256, False), (100, 32, True), (160, 64, True))


def _reference_count(d_model: int, multiple_of: int, bias: bool) -> int:
    """The library's own count: a GatedFeedForward built on the meta device (shapes without memory)."""
    with torch.device("meta"):
        return count_parameters(GatedFeedForward(d_model, multiple_of=multiple_of, bias=bias))


def _hidden_sizes(d: int, m: int) -> dict[str, float]:
    """The right hidden size and the wrong ones readers compute, keyed by a hint."""
    x = 8 * d / 3
    return {
        "": m * math.ceil(x / m),
        "The hidden size is 4 d_model: that is the plain FFN's. SwiGLU shrinks it to 8/3 d_model so that its three "
        "matrices hold about as many parameters as the plain FFN's two, then rounds up to a multiple of multiple_of.": 4 * d,
        "The hidden size is not rounded: 8/3 d_model is usually not a whole number. Round it *up* to a multiple of "
        "multiple_of: multiple_of * ceil(8 d_model / 3 / multiple_of).": x,
        "The hidden size is rounded to a whole number but not to a multiple of multiple_of: round 8/3 d_model *up* "
        "to the next multiple, multiple_of * ceil(8 d_model / 3 / multiple_of).": math.floor(x),
        "The hidden size is rounded to a whole number but not to a multiple of multiple_of (your int rounds up to "
        "the next integer): round 8/3 d_model up to the next multiple of multiple_of, "
        "multiple_of * ceil(8 d_model / 3 / multiple_of).": math.ceil(x),
        "The hidden size is rounded to the *nearest* multiple of multiple_of: it is rounded *up* "
        "(math.ceil), so that it is never smaller than 8/3 d_model.": m * round(x / m),
        "The hidden size is rounded *down* to a multiple of multiple_of: it is rounded *up* (math.ceil, not "
        "floor or //), so that it is never smaller than 8/3 d_model.": m * math.floor(x / m),
        "The hidden size ignores the multiple_of argument (you rounded to a multiple of 64 every time): "
        "use multiple_of * ceil(8 d_model / 3 / multiple_of).": 64 * math.ceil(x / 64),
    }


def _weight_count(d: int, h: float, n_matrices: int) -> float:
    return n_matrices * d * h


def swiglu_count_mistakes(cases=SWIGLU_CASES) -> dict[str, list[float]]:
    """The weight-only counts (no biases) that each mistake gives on the bias-free ``cases``.

    Keys are hints; the right answer is not among them.
    """
    cases = [c for c in cases if not c[2]]
    keys = list(_hidden_sizes(96, 64))
    mistakes: dict[str, list[float]] = {
        "Your count is 8 d_model^2: either you counted a plain FFN (two matrices with hidden size 4 d_model), or "
        "three matrices with hidden size exactly 8/3 d_model. SwiGLU has three matrices (W_gate, W_in, W_out) and "
        "rounds the hidden size *up* to a multiple of multiple_of: 3 * d_model * d_ff.": [8 * d * d for d, _, _ in cases],
        "bias=False: there are no biases to count, only the three weight matrices, 3 * d_model * d_ff.": [
            3 * d * _hidden_sizes(d, m)[""] + 2 * _hidden_sizes(d, m)[""] + d for d, m, _ in cases
        ],
    }
    two = ("You counted two weight matrices; SwiGLU has three: W_gate and W_in (d_ff x d_model each) and W_out "
           "(d_model x d_ff).")
    for n_matrices in (3, 2):
        for key in keys:
            if n_matrices == 3 and key == "":
                continue  # the right answer
            hint = " ".join(h for h in (two if n_matrices == 2 else "", key) if h)
            counts = [_weight_count(d, _hidden_sizes(d, m)[key], n_matrices) for d, m, _ in cases]
            if counts not in mistakes.values():  # two matrices of 4d: already named (8 d_model^2)
                mistakes[hint] = counts
    return mistakes


def _bias_mistakes(d: int, h: int) -> dict[str, int]:
    """Bias counts readers give for a SwiGLU FFN with hidden size ``h``; the right one is ``2h + d``."""
    return {
        "bias=True but you counted no biases: W_gate and W_in have d_ff each, W_out has d_model.": 0,
        "Each linear layer's bias has as many entries as its *outputs*: W_gate and W_in have d_ff each, but W_out "
        "maps back to d_model, so its bias has d_model entries, not d_ff.": 3 * h,
        "You forgot W_out's bias (d_model entries): W_gate and W_in have d_ff each, W_out has d_model.": 2 * h,
        "You counted the biases of two layers only: W_gate has one too. 2 d_ff + d_model in all.": h + d,
        "Each linear layer's bias has as many entries as its *outputs*: d_ff for W_gate and W_in, d_model for "
        "W_out (not d_model for all three).": 3 * d,
    }


def _as_number(got, case) -> float:
    if isinstance(got, torch.Tensor):
        if got.numel() != 1:
            fail(f"swiglu_param_count{case} should return one number, but it returned a tensor of shape "
                 f"{tuple(got.shape)}.")
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        fail(f"swiglu_param_count{case} should return one number (an int), but it returned {type(got).__name__}.")
    return float(got)


def check_swiglu_param_count(fn: Callable[[int, int, bool], int]) -> Verdict:
    """Check ``fn(d_model, multiple_of, bias)``: the parameters of a SwiGLU FFN.

    The hidden size is ``d_ff = multiple_of * ceil(8 d_model / 3 / multiple_of)`` (as
    :func:`~transformer_lib.gated_hidden_size`), the weights are ``W_gate``, ``W_in`` (``d_ff x d_model``)
    and ``W_out`` (``d_model x d_ff``), and with ``bias=True`` the biases add ``2 d_ff + d_model``.
    Compared with ``tl.count_parameters(tl.GatedFeedForward(d_model, multiple_of=..., bias=...))``
    on the cases of :data:`SWIGLU_CASES`. Diagnoses: two matrices instead of three; a 4 d_model
    hidden size; no rounding (8 d_model^2, also a plain FFN's count); rounding to an integer only,
    to the nearest or down to a multiple, or always to 64; counting biases when ``bias=False``;
    with ``bias=True``, no biases, ``3 d_ff``, ``2 d_ff``, two layers' or ``3 d_model``; and
    combinations of a matrix-count and a hidden-size mistake. A non-number answer fails.

    Returns True when right, False when ``fn`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    answers = []
    for case in SWIGLU_CASES:
        got = attempt(fn, *case)
        if got is NOT_IMPLEMENTED:
            return pending("swiglu_param_count")
        answers.append(_as_number(got, case))
    expected = [_reference_count(*case) for case in SWIGLU_CASES]
    if all(abs(a - e) < 0.5 for a, e in zip(answers, expected)):
        d, m, _ = SWIGLU_CASES[3]
        return correct(f"Your counts match tl.GatedFeedForward's, e.g. LLaMA-7B's FFN (d_model={d}, "
                       f"multiple_of={m}): {expected[3]:,} parameters per layer.")

    # the weights: the bias-free cases
    no_bias = [(i, c) for i, c in enumerate(SWIGLU_CASES) if not c[2]]
    got_nb = [answers[i] for i, _ in no_bias]
    if any(abs(answers[i] - expected[i]) >= 0.5 for i, _ in no_bias):
        for hint, wrong in swiglu_count_mistakes().items():
            if all(abs(a - w) < 0.5 for a, w in zip(got_nb, wrong)):
                fail(f"swiglu_param_count is not right yet. {hint}")
        rows = ", ".join(f"{c}: {a:g} (right: {expected[i]:,})" for (i, c), a in zip(no_bias, got_nb))
        fail(f"swiglu_param_count gives wrong counts without biases: {rows}. The count is 3 * d_model * d_ff with "
             f"d_ff = multiple_of * ceil(8 * d_model / 3 / multiple_of).")

    # the weights are right; the biases
    for i, (d, m, bias) in enumerate(SWIGLU_CASES):
        if not bias or abs(answers[i] - expected[i]) < 0.5:
            continue
        h = _hidden_sizes(d, m)[""]
        for hint, n_bias in _bias_mistakes(d, h).items():
            if abs(answers[i] - (3 * d * h + n_bias)) < 0.5:
                fail(f"swiglu_param_count is not right yet for {(d, m, bias)}. {hint}")
        fail(f"swiglu_param_count{(d, m, bias)} = {answers[i]:g}, but the right count is {expected[i]:,}: the "
             f"weights are right (3 * d_model * d_ff = {3 * d * h:,}); the biases add 2 * d_ff + d_model = {2 * h + d}.")
    raise AssertionError("unreachable: some answer differed")  # pragma: no cover


# --------------------------------------------------------------------------------------------
# (c) RMSNorm as LLaMA computes it: statistics in float32, the result in x's dtype
# --------------------------------------------------------------------------------------------

NORM_EPS = 1e-3  # as large as the quiet token's mean square, so that where eps goes shows
HALF_TOL = 4e-3  # float16 keeps 11 bits: a different order of the same float32 steps may round 1-2 ulp apart


def rms_norm_inputs(dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor, float]:
    """``x (batch=2, seq=3, d=6)``, ``weight (6,)`` and eps, in ``dtype``.

    Every token has a mean far from 0 (centring shows), token ``(0, 2)`` is quiet (mean square below
    ``NORM_EPS``: where eps goes shows) and token ``(1, 0)`` is loud, features of a few hundred as in
    the residual stream of a trained LLaMA: their squares overflow float16 (largest 65,504).
    """
    g = torch.Generator().manual_seed(10)
    shifts = torch.tensor([[1.5, -2.0, 0.02], [300.0, 0.8, -1.2]]).unsqueeze(-1)  # (batch, seq, 1)
    scales = torch.tensor([[1.0, 2.5, 0.02], [150.0, 0.5, 1.0]]).unsqueeze(-1)
    x = shifts + scales * torch.randn(2, 3, 6, generator=g)
    weight = 1.0 + 0.5 * torch.randn(6, generator=g)
    return x.to(dtype), weight.to(dtype), NORM_EPS


def _rms_reference(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    ref = RMSNorm(x.shape[-1], eps=eps).to(x.dtype)
    with torch.no_grad():
        ref.weight.copy_(weight)
        return ref(x)


def rms_norm_mistakes(x: Tensor, weight: Tensor, eps: float) -> dict[str, Tensor]:
    """The answers that common RMSNorm mistakes give (in float32, then in x's dtype), keyed by their hints."""
    h, w = x.float(), weight.float()
    ms = h.pow(2).mean(-1, keepdim=True)
    mean = h.mean(-1, keepdim=True)
    var = (h - mean).pow(2).mean(-1, keepdim=True)
    total = h.pow(2).sum(-1, keepdim=True)
    mistakes = {
        "You subtracted the mean: that is LayerNorm. RMSNorm does not centre; it divides x itself by "
        "sqrt(mean(x**2) + eps).": (h - mean) / (var + eps).sqrt() * w,
        "You subtracted the mean from x before dividing: RMSNorm does not centre, it only rescales x by "
        "1 / sqrt(mean(x**2) + eps).": (h - mean) / (ms + eps).sqrt() * w,
        "Is your epsilon inside the square root? RMSNorm divides by sqrt(mean(x**2) + eps), not "
        "sqrt(mean(x**2)) + eps.": h / (ms.sqrt() + eps) * w,
        "Where is eps? RMSNorm divides by sqrt(mean(x**2) + eps): without it a quiet token (mean square "
        "below eps) is blown up, and a zero token gives 0 / 0.": h / ms.sqrt() * w,
        "You forgot the weight: multiply the normalised x by weight (LLaMA's learned gain).": h / (ms + eps).sqrt(),
        "You divided by the norm of x, sqrt(sum(x**2)), not by its root mean square: the mean divides the sum "
        "by d_model, sqrt(mean(x**2) + eps) = sqrt(sum(x**2) / d_model + eps).": h / (total + eps).sqrt() * w,
        "You divided by the norm of x (torch.linalg.norm or x.norm), not by its root mean square "
        "sqrt(mean(x**2) + eps): the 1/d_model is missing, and eps too.": h / total.sqrt() * w,
    }
    for dims, where in (((0,), "over the batch, dim 0"), ((1,), "over the sequence, dim 1"),
                        ((1, 2), "over the whole sequence, dims (1, 2)")):
        ms_wrong = h.pow(2).mean(dims, keepdim=True)
        mistakes[f"You took the mean square over the wrong dimension ({where}). RMSNorm's statistic is per token, "
                 "over the last (feature) dimension: x.pow(2).mean(dim=-1, keepdim=True)."] = \
            h / (ms_wrong + eps).sqrt() * w
    return {hint: wrong.to(x.dtype) for hint, wrong in mistakes.items()}


_HALF_STATS_HINT = (
    "Your statistics are computed in float16: the loud token's features are a few hundred, their squares "
    "overflow float16 (largest value 65,504) to inf, and the token comes out as zeros. Compute the mean square "
    "in float32, h = x.float(), as LLaMA's code and tl.RMSNorm do, and cast the normalised x back with "
    ".to(x.dtype) (LLaMA: .type_as(x)) before multiplying by weight."
)


def _dtype_problem(got: Tensor, x: Tensor) -> str | None:
    if got.dtype == x.dtype:
        return None
    if x.dtype == torch.float16 and got.dtype in (torch.float32, torch.float64):
        return (f"For a float16 x, rms_norm returned {got.dtype}: computing the statistics in higher precision "
                f"is right, but the result must come back in x's dtype, or every layer after the norm runs in "
                f"{got.dtype} and the model's memory doubles. Cast the normalised x back with .to(x.dtype) "
                f"(LLaMA: .type_as(x)) before multiplying by weight.")
    if not got.is_floating_point():
        return (f"rms_norm returned {got.dtype}: the normalised features are fractions, keep them floating point "
                f"(in x's dtype, {x.dtype}).")
    return (f"rms_norm returned {got.dtype} for a {x.dtype} x: the result keeps x's dtype. (A float64 result "
            f"usually comes from a tensor created without dtype=, such as torch.tensor(d, dtype=torch.float64), "
            f"or from .double(): use x.float() for the statistics and .to(x.dtype) at the end.)")


def check_rms_norm(rms_norm: Callable[[Tensor, Tensor, float], Tensor]) -> Verdict:
    """Check ``rms_norm(x, weight, eps) -> (batch, seq, d_model)`` as LLaMA computes it.

    ``x`` is ``(batch, seq, d_model)``, ``weight`` ``(d_model,)``. The mean square is taken in float32
    whatever x's dtype, and the normalised x is cast back to x's dtype before the weight multiplies it,
    as in LLaMA's code and :class:`~transformer_lib.RMSNorm`. Called on float32 inputs (chapter 4's
    formula) and on float16 ones whose loud token's squares overflow float16; compared with
    ``tl.RMSNorm`` in the same dtype with the same weight. Diagnoses: subtracting the mean (LayerNorm,
    or centring only), eps outside the square root or missing, the mean square over the wrong dimension,
    a forgotten weight, the norm instead of the RMS (the 1/d missing), statistics in float16 (an
    overflow), and a result in another dtype (float32 or float64 for float16, float64 for float32, an
    integer).

    Returns True when right, False when ``rms_norm`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    name = "rms_norm"
    for dtype in (torch.float32, torch.float16):
        x, weight, eps = rms_norm_inputs(dtype)
        got = call(name, rms_norm, x, weight, eps)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        expected = _rms_reference(x, weight, eps)
        where = f"{name} (x in {str(dtype).replace('torch.', '')})"
        expect_tensor(where, got, expected.shape)
        problem = _dtype_problem(got, x)
        if problem:
            fail(f"{where} is not right yet. {problem}")
        atol = 1e-5 if dtype == torch.float32 else HALF_TOL
        if not close(got, expected, atol=atol, rtol=max(atol, 1e-4)):
            mistakes = rms_norm_mistakes(x, weight, eps)
            if dtype == torch.float16:
                mistakes[_HALF_STATS_HINT] = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
            for hint, wrong in mistakes.items():
                if close(got, wrong, atol=atol, rtol=max(atol, 1e-4)):
                    fail(f"{where} is not right yet. {hint}")
            err = (got.float() - expected.float()).abs().max().item()
            fail(f"{where} gives the wrong values (largest difference from tl.RMSNorm: {err:.3g}). Check each "
                 f"step: h = x.float(); h / sqrt(mean(h**2 over the last dim) + eps); .to(x.dtype); * weight.")
    loudest = rms_norm_inputs()[0].pow(2).max().item()
    return correct(f"Your rms_norm matches tl.RMSNorm in float32 and in float16, where the loud token's squares "
                   f"(up to {loudest:,.0f}; float16 stops at 65,504) would overflow without float32 statistics.")


# --------------------------------------------------------------------------------------------
# (d) the FFN half of a LLaMA block: x + SwiGLU(RMSNorm(x))
# --------------------------------------------------------------------------------------------

FFN_D_MODEL, FFN_D_FF = 6, 10  # d_ff != d_model: a transposed weight or a missing W_out shows in the shapes


def ffn_sublayer_inputs() -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, float]:
    """``x (2, 3, 6)``, ``norm_weight (6,)``, ``W_gate, W_in (10, 6)``, ``W_out (6, 10)``, eps.

    The weights are large enough that the gate's pre-activations spread over [-4, 4], where SiLU, GELU,
    ReLU and sigmoid all differ; the tokens have large means, so a missing norm shows.
    """
    g = torch.Generator().manual_seed(11)
    d, h = FFN_D_MODEL, FFN_D_FF
    x = 3.0 * torch.randn(2, 3, 1, generator=g) + 2.0 * torch.randn(2, 3, d, generator=g)
    norm_weight = 1.0 + 0.5 * torch.randn(d, generator=g)
    W_gate = torch.randn(h, d, generator=g) / math.sqrt(d) * 1.5
    W_in = torch.randn(h, d, generator=g) / math.sqrt(d) * 1.5
    W_out = torch.randn(d, h, generator=g) / math.sqrt(h)
    return x, norm_weight, W_gate, W_in, W_out, NORM_EPS


def _ffn_reference(x, norm_weight, W_gate, W_in, W_out, eps) -> Tensor:
    """``x + GatedFeedForward(RMSNorm(x))``: the library's modules holding these weights."""
    d, h = W_in.shape[1], W_in.shape[0]
    with torch.random.fork_rng(devices=[]):  # nn.Linear's init draws from the global RNG: leave the reader's alone
        norm, ffn = RMSNorm(d, eps=eps), GatedFeedForward(d, h, activation="silu", bias=False)
    with torch.no_grad():
        norm.weight.copy_(norm_weight)
        for layer, W in ((ffn.W_gate, W_gate), (ffn.W_in, W_in), (ffn.W_out, W_out)):
            layer.weight.copy_(W)
        return x + ffn(norm(x))


def _rms(x: Tensor, weight: Tensor | None, eps: float) -> Tensor:
    h = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return h if weight is None else h * weight


def ffn_sublayer_mistakes(x, norm_weight, W_gate, W_in, W_out, eps) -> dict[str, Tensor]:
    """What common mistakes give, keyed by the hint that names each one."""
    def glu(h, act=F.silu, swap=False):
        gate, up = h @ W_gate.T, h @ W_in.T
        if swap:
            gate, up = up, gate
        return (act(gate) * up) @ W_out.T

    h = _rms(x, norm_weight, eps)
    swiglu_form = "W_out(silu(W_gate h) * (W_in h))"
    return {
        f"SiLU is on the wrong branch: it goes on the gate, silu(h @ W_gate.T), and multiplies the plain "
        f"projection h @ W_in.T ({swiglu_form}). (Swapping W_gate and W_in is the same mistake: the names "
        f"matter only through which one the SiLU is on.)": x + glu(h, swap=True),
        "You used GELU: that is GEGLU. SwiGLU's gate is SiLU, silu(z) = z * sigmoid(z) (F.silu).": x + glu(h, F.gelu),
        "You used ReLU: that is ReGLU. SwiGLU's gate is SiLU, silu(z) = z * sigmoid(z) (F.silu).": x + glu(h, F.relu),
        "You used sigmoid(z) where SwiGLU uses silu(z) = z * sigmoid(z): the multiplication by z is missing "
        "(sigmoid(W_gate h) * (W_in h) is Dauphin et al.'s GLU). Use F.silu.": x + glu(h, torch.sigmoid),
        "The SiLU is missing: (W_gate h) * (W_in h) is a bilinear layer. Apply F.silu to the gate projection "
        "before multiplying.": x + glu(h, lambda z: z),
        "SiLU is applied to both projections. Only the gate W_gate h goes through SiLU; W_in h stays linear.":
            x + (F.silu(h @ W_gate.T) * F.silu(h @ W_in.T)) @ W_out.T,
        "The gate is missing: this is a plain SiLU FFN, W_out silu(W_in h). SwiGLU multiplies silu(W_gate h) "
        "elementwise by W_in h, then applies W_out.": x + F.silu(h @ W_in.T) @ W_out.T,
        "The gate is missing: this is a plain SiLU FFN, W_out silu(W_gate h). SwiGLU multiplies silu(W_gate h) "
        "elementwise by W_in h, then applies W_out.": x + F.silu(h @ W_gate.T) @ W_out.T,
        "You forgot the residual connection: the sublayer returns x + FFN(RMSNorm(x)), x added back.": glu(h),
        "You wrote post-norm, RMSNorm(x + FFN(x)). LLaMA is pre-norm: the norm goes on the FFN's input and the "
        "residual sum is left alone, x + FFN(RMSNorm(x)).": _rms(x + glu(x), norm_weight, eps),
        "You forgot the norm: this is x + FFN(x). LLaMA normalises the FFN's input: x + FFN(RMSNorm(x)).":
            x + glu(x),
        "The residual path must carry x itself, not the normalised h: x + FFN(h), with h = RMSNorm(x).":
            h + glu(h),
        "You forgot the norm's weight: RMSNorm(x) = x / sqrt(mean(x**2) + eps) * norm_weight.":
            x + glu(_rms(x, None, eps)),
    }


_ORIENTATION_HINT = ("The weights are stored as nn.Linear stores them, (out_features, in_features): W_gate and "
                     "W_in are (d_ff, d_model), W_out is (d_model, d_ff), so a projection is h @ W.T "
                     "(or F.linear(h, W)), not h @ W.")


def _ffn_error_hint(e: Exception) -> str:
    text = str(e)
    if "cannot be multiplied" in text or "size mismatch" in text:  # a matmul whose inner sizes differ
        return _ORIENTATION_HINT
    if "size of tensor a" in text:  # an elementwise sum or product of widths d_model and d_ff
        return (f"An elementwise sum or product met a tensor of width d_ff={FFN_D_FF} and one of width "
                f"d_model={FFN_D_MODEL}: is W_out missing (x + hidden, where hidden has width d_ff)? Or a bracket "
                f"(`*` and `@` group from the left: silu(h @ W_gate.T) * h @ W_in.T multiplies the gate by h)?")
    return ""


def check_ffn_sublayer(fn: Callable[..., Tensor]) -> Verdict:
    """Check ``fn(x, norm_weight, W_gate, W_in, W_out, eps) -> (batch, seq, d_model)``: the FFN half of a
    LLaMA block, ``x + W_out(silu(W_gate h) * (W_in h))`` with ``h = RMSNorm(x)`` (no biases).

    ``x`` is ``(batch, seq, d_model)``, ``norm_weight`` ``(d_model,)``, the weights as in ``nn.Linear``:
    ``W_gate``, ``W_in`` ``(d_ff, d_model)``, ``W_out`` ``(d_model, d_ff)``, with ``d_ff != d_model``.
    Compared with ``x + tl.GatedFeedForward(tl.RMSNorm(x))`` holding the same weights. Diagnoses: SiLU
    on the wrong branch (the same as W_gate and W_in swapped), GELU, ReLU or sigmoid (no multiplication by
    z) instead of SiLU, no SiLU, SiLU on both projections, no gate, W_out missing (the answer has width
    d_ff), transposed weights (a shape error), no residual, post-norm, no norm, the residual taken from the
    normalised stream, and the norm's weight forgotten.

    Returns True when right, False when ``fn`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    name = "ffn_sublayer"
    args = ffn_sublayer_inputs()
    x, W_in = args[0], args[3]
    try:
        got = attempt(fn, *(a.clone() if isinstance(a, Tensor) else a for a in args))
    except ExerciseFailed:
        raise
    except Exception as e:  # the reader's bug: report it with the shapes, and the likely cause
        shapes = ", ".join(str(tuple(a.shape)) if isinstance(a, Tensor) else repr(a) for a in args)
        fail(f"{name} raised {type(e).__name__}: {e}\n(called with arguments {shapes}). " + _ffn_error_hint(e))
    if got is NOT_IMPLEMENTED:
        return pending(name)
    expected = _ffn_reference(*args)
    if isinstance(got, Tensor) and tuple(got.shape) == (*x.shape[:-1], W_in.shape[0]):
        fail(f"{name} returned shape {tuple(got.shape)}, the hidden size d_ff={W_in.shape[0]}: the output "
             f"projection W_out is missing. Map the hidden vector back to d_model={x.shape[-1]} with @ W_out.T, "
             f"then add x.")
    return check_against(name, got, expected, ffn_sublayer_mistakes(*args),
                         success="Your sublayer matches x + tl.GatedFeedForward(tl.RMSNorm(x)) with the same "
                                 "weights: the second half of every block of the LLaMA-style model.")


# --------------------------------------------------------------------------------------------
# (e) RoPE inside attention: every head's queries and keys, a cache offset, the base
# --------------------------------------------------------------------------------------------

ROPE_BATCH, ROPE_HEADS, ROPE_SEQ, ROPE_D_HEAD = 2, 3, 4, 8  # heads != seq: positions on the wrong dim show
#: ``(offset, base)`` of the calls: a prompt at base 10,000 (LLaMA 1 and 2), then new tokens after 5 cached
#: positions at base 500,000 (LLaMA 3's rope_theta)
ROPE_CALLS = ((0, 10000.0), (5, 500000.0))


def rope_qk_inputs(seed: int = 12) -> tuple[Tensor, Tensor]:
    """``q, k``: ``(batch, n_heads, seq, d_head)`` each, different in every head and position."""
    g = torch.Generator().manual_seed(seed)
    shape = (ROPE_BATCH, ROPE_HEADS, ROPE_SEQ, ROPE_D_HEAD)
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g)


def _rotate(x: Tensor, offset: int, base: float, *, d: int | None = None, halves: bool = False,
            sign: float = 1.0) -> Tensor:
    """Rotate the pairs of the last dim of ``x`` ``(..., seq, d_x)`` by ``(offset + m) theta_i``,
    ``theta_i = base^(-2i/d)`` (``d``: what the exponent divides by, ``d_x`` when None)."""
    seq, d_x = x.shape[-2], x.shape[-1]
    i = torch.arange(d_x // 2, dtype=torch.float64)
    theta = base ** (-2 * i / (d or d_x))
    angle = torch.arange(offset, offset + seq, dtype=torch.float64)[:, None] * theta  # (seq, d_x/2)
    cos, sin = angle.cos(), sign * angle.sin()
    x = x.double()
    if halves:  # Hugging Face's rotate_half: feature i with feature i + d/2
        x1, x2 = x[..., : d_x // 2], x[..., d_x // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).float()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2).float()


def _across_heads(x: Tensor, offset: int, base: float) -> Tensor:
    """The rotation of the (batch, seq, d_model) vectors before the split into heads."""
    flat = rearrange(x, "b h s d -> b s (h d)")
    return rearrange(_rotate(flat, offset, base), "b s (h d) -> b h s d", h=x.shape[1])


def rope_qk_mistakes(q: Tensor, k: Tensor, offset: int, base: float) -> dict[str, Tensor]:
    """``torch.stack([q_rot, k_rot])`` for each common mistake, keyed by its hint."""
    rq, rk = _rotate(q, offset, base), _rotate(k, offset, base)
    both = lambda **kw: torch.stack([_rotate(q, offset, base, **kw), _rotate(k, offset, base, **kw)])
    mistakes = {
        "You returned (k, q): the function returns the rotated queries first, then the rotated keys.":
            torch.stack([rk, rq]),
        "Only the queries are rotated: the keys must be turned by their positions too, or q . k does not "
        "depend on the offset between them.": torch.stack([rq, k]),
        "Only the keys are rotated: the queries must be turned by their positions too, or q . k does not "
        "depend on the offset between them.": torch.stack([q, rk]),
        "Nothing is rotated: each pair (x[2i], x[2i+1]) of every head at position offset + m turns by the angle "
        "(offset + m) theta_i.": torch.stack([q, k]),
        "You paired feature i with feature i + d_head/2 (Hugging Face LLaMA's rotate_half). The same rotation "
        "on permuted features, but this library (and the original RoPE) pairs adjacent features "
        "(x[2i], x[2i+1]).": both(halves=True),
        "Your rotation goes the wrong way (the sign of sin is flipped): (a, b) turned by t is "
        "(a cos t - b sin t, a sin t + b cos t).": both(sign=-1.0),
        "You rotated the d_model = n_heads * d_head features of a position as one vector (as if before the split "
        "into heads), with d_model/2 frequencies. RoPE rotates each head's d_head features with the same "
        "d_head/2 frequencies, theta_i = base^(-2i/d_head), d_head = q.shape[-1].":
            torch.stack([_across_heads(q, offset, base), _across_heads(k, offset, base)]),
    }
    if base != 10000.0:
        mistakes[f"You ignored the base argument and used 10000: theta_i = base^(-2i/d_head), and this call "
                 f"passes base={base:g}."] = \
            torch.stack([_rotate(q, offset, 10000.0), _rotate(k, offset, 10000.0)])
    if offset:
        mistakes[f"You ignored the offset: with {offset} positions already cached, the new tokens sit at "
                 f"positions offset + m = {offset}, {offset + 1}, ... (offset is cache.k.shape[2])."] = \
            torch.stack([_rotate(q, 0, base), _rotate(k, 0, base)])
        mistakes["Only the queries are turned by the offset: the new keys sit at the same positions as the new "
                 "queries, offset + m, and the cache keeps them turned that way."] = \
            torch.stack([rq, _rotate(k, 0, base)])
        mistakes["Only the keys are turned by the offset: the new queries sit at the same positions as the new "
                 "keys, offset + m."] = torch.stack([_rotate(q, 0, base), rk])
    mistakes["Your positions start one too late: the first token is at position offset (0 for a prompt, the "
             "number of cached positions after it), not offset + 1."] = torch.stack(
        [_rotate(q, offset + 1, base), _rotate(k, offset + 1, base)])
    return mistakes


_ROPE_SHAPE_HINT = ("q and k are (batch, n_heads, seq, d_head): the positions run along dim 2 (seq = q.shape[-2]), "
                    "not dim 1 (the heads); the angles (seq, d_head/2) broadcast against x[..., 0::2] "
                    "(batch, n_heads, seq, d_head/2) as they are.")


def check_rope_qk(fn: Callable[[Tensor, Tensor, int, float], tuple[Tensor, Tensor]]) -> Verdict:
    """Check ``fn(q, k, offset, base) -> (q_rot, k_rot)``: RoPE as attention applies it.

    ``q`` and ``k`` are ``(batch, n_heads, seq, d_head)``, the queries and keys of the new tokens, which sit
    at positions ``offset .. offset + seq - 1`` (``offset``: the positions already in a KV cache). In every
    head, pair ``(x[2i], x[2i+1])`` is turned by ``(offset + m) theta_i``, ``theta_i = base^(-2i/d_head)``.
    Compared with ``tl.RotaryEmbedding(d_head, offset + seq, base).rotate(q, k, offset)``, called with
    ``(offset, base)`` = ``(0, 10000)`` and ``(5, 500000)``. Diagnoses: q and k returned swapped, only one
    of them rotated, nothing rotated, Hugging Face's halves pairing, the wrong direction, a rotation of
    the whole d_model (before the head split), the base ignored, the offset ignored or applied to only one
    of q and k, positions one too late, and positions read from the heads dimension (a shape error).

    Returns True when right, False when ``fn`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    name = "rope_qk"
    q, k = rope_qk_inputs()
    for offset, base in ROPE_CALLS:
        where = f"{name}(q, k, offset={offset}, base={base:g})"
        got = call(where, fn, q, k, offset, base, hint=_ROPE_SHAPE_HINT)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            fail(f"{where} should return two tensors, (q_rot, k_rot), but it returned "
                 f"{type(got).__name__}{f' of length {len(got)}' if isinstance(got, (tuple, list)) else ''}.")
        for what, t in zip(("q_rot", "k_rot"), got):
            expect_tensor(f"{where}'s {what}", t, q.shape)
        rope = RotaryEmbedding(ROPE_D_HEAD, offset + ROPE_SEQ, base)
        expected = torch.stack(rope.rotate(q, k, offset))
        got = torch.stack([t.detach() for t in got])
        if not close(got, expected):
            diagnose(where, got, expected, rope_qk_mistakes(q, k, offset, base))
    return correct(f"Your rotation matches tl.RotaryEmbedding.rotate on {ROPE_HEADS} heads, with a cache offset "
                   f"and with LLaMA 3's base {ROPE_CALLS[-1][1]:,.0f}: every head turns its pairs by the same "
                   f"angles, so q . k depends only on the offset between the two tokens.")
