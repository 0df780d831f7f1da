"""Exercises of chapter 10, *Putting it together: a LLaMA-style decoder* (``book/10_putting_it_together.ipynb``).

* :func:`check_llama_kwargs`: ``llama_kwargs()`` returns the :class:`~transformer_lib.GPT2Config`
  keyword arguments that turn GPT-2 into a LLaMA-style decoder. Every swap that is missing (still
  LayerNorm, learned positions, a GELU FFN, biases, a tied head) is named, all at once; so is dropout,
  which LLaMA does not use.
* :func:`check_swiglu_param_count`: ``swiglu_param_count(d_model, multiple_of, bias)`` counts the
  parameters of a SwiGLU FFN whose hidden size is 8/3 d_model rounded up to a multiple of
  ``multiple_of``. The cases are chosen so that counting two matrices instead of three, a 4d hidden
  size, each wrong rounding and each wrong bias count give different answers.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import fields
from typing import Callable, Mapping

import torch
from torch import nn

from ..config import TransformerConfig
from ..layers.feedforward import GatedFeedForward
from ..layers.normalization import RMSNorm
from ..models.gpt2 import GPT2, GPT2Config
from ..params import count_parameters
from ._checking import NOT_IMPLEMENTED, attempt, correct, fail, pending, Verdict

__all__ = ["check_llama_kwargs", "check_swiglu_param_count", "LLAMA_SWAPS", "SWIGLU_CASES", "swiglu_count_mistakes"]


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
