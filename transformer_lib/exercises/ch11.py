"""Exercises for chapter 11, *Making it fast* (``book/11_making_it_fast.ipynb``).

* :func:`check_flops_per_token`: ``flops_per_token(n_params, n_layers, n_heads, d_head, seq_len)``,
  the training FLOPs per token as PaLM counts them, ``6 N + 12 L H d_head T``
* :func:`check_tokens_per_second`: ``tokens_per_second(step_seconds, batch, seq_len)``, the
  throughput from a list of timed steps, through their median (robust to a slow outlier)
* :func:`check_kv_cache_bytes`: ``kv_cache_bytes(n_layers, batch, seq_len, d_model, bytes_per_value)``,
  the memory a KV cache takes

The inputs are chosen so that each common mistake gives a different number: sizes that are all
different from each other (so swapping two of them shows), and timings with one slow outlier and
an even count (so the mean, the minimum, the middle element and the median all differ).
"""

from __future__ import annotations

import math
import statistics
from typing import Callable

from .. import speed
from ._checking import NOT_IMPLEMENTED, call, correct, fail, pending, Verdict


def _number(name: str, got) -> float:
    if hasattr(got, "item") and getattr(got, "numel", lambda: 2)() == 1:
        got = got.item()  # a 0-dim tensor is fine
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        fail(f"{name} should return a number, but it returned {type(got).__name__} {got!r}.")
    if not math.isfinite(got):
        fail(f"{name} returned {got}: the answer is a finite number.")
    return float(got)


def _diagnose(name: str, got: float, expected: float, mistakes: dict[str, float], what: str) -> None:
    for hint, wrong in mistakes.items():
        if math.isclose(got, wrong, rel_tol=1e-6):
            fail(f"{name} is not right yet. {hint}")
    fail(f"{name} gives the wrong {what}: expected {expected:,.6g}, got {got:,.6g}. Check the formula against the text.")


# ------------------------------------------------------------------------------- FLOPs per token

# first a case whose sizes all differ (so each mistake gives its own number), then the baby size with biases
# (the chapter's model has none) and GPT-2 small
FLOPS_CASES = ((1_000_003, 3, 8, 24, 200), (801_664, 4, 4, 32, 64), (123_653_376, 12, 12, 64, 1024))


def flops_mistakes(n_params: int, n_layers: int, n_heads: int, d_head: int, seq_len: int) -> dict[str, float]:
    """``{hint: the number that mistake gives}``."""
    N, L, H, d, T = n_params, n_layers, n_heads, d_head, seq_len
    attention = 12 * L * H * d * T
    return {
        "You left out attention's own work: the products Q K^T and (weights) V have no parameters, so 6N misses "
        "them. Add 12 * n_layers * n_heads * d_head * seq_len.": 6 * N,
        "You counted the forward pass only (2N + 4 L H d_head T): training also runs the backward pass, which "
        "costs about twice the forward, so multiply by 3: 6N + 12 L H d_head T.": 2 * N + 4 * L * H * d * T,
        "You counted a multiply-add as one operation (3N + 6 L H d_head T): it is two FLOPs, a multiply and an "
        "add.": 3 * N + 6 * L * H * d * T,
        "Your attention term grows with seq_len squared: per *token*, each query meets seq_len keys, so the term "
        "is 12 L H d_head T, linear in T (per sequence it is quadratic).": 6 * N + attention * T,
        "Your attention term is missing the heads: d_head is the width of one head; n_heads * d_head = d_model.":
            6 * N + 12 * L * d * T,
        "Your attention term is missing the layers: every layer attends.": 6 * N + 12 * H * d * T,
        "Your attention term is 6 L H d_head T, half of 12: that is the causal count (each query meets about half "
        "of the seq_len keys on average, and a causal kernel can skip the masked half), a valid way to count the "
        "work. This exercise asks for PaLM's count (Chowdhery et al., 2022, appendix B), which takes the full "
        "seq_len x seq_len products: 2 products x 2 T d_head FLOPs, times 3 with the backward pass, 12 L H d_head T.":
            6 * N + 6 * L * H * d * T,
        "You counted the causal products exactly: query t meets t keys, (T + 1) / 2 on average, so "
        "6 L H d_head (T + 1). That is the work a causal kernel does, a valid count; this exercise asks for "
        "PaLM's count, which takes the full seq_len x seq_len products: 12 L H d_head T.":
            6 * N + 6 * L * H * d * (T + 1),
    }


def check_flops_per_token(fn: Callable[[int, int, int, int, int], float]) -> Verdict:
    """Check ``fn(n_params, n_layers, n_heads, d_head, seq_len)``: training FLOPs per token as PaLM counts
    them, ``6 N + 12 L H d_head T`` (the full ``T x T`` attention products).

    Tried on ``FLOPS_CASES`` against ``tl.speed.flops_per_token``: an arbitrary size whose numbers all
    differ, the baby size (4 layers, 4 heads, d_head 32, context 64) with biases, and GPT-2 small.
    Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one while ``fn`` raises
    NotImplementedError; otherwise raises :class:`ExerciseFailed` naming the mistake: no attention
    term, the forward pass only, a multiply-add counted once, attention quadratic in the length,
    the heads or the layers missing from the attention term, or the causal half of the attention
    products (``6 L H d_head T``, or exactly ``6 L H d_head (T + 1)``): a valid count of what a causal
    kernel computes, named as such, but not PaLM's.
    """
    name = "flops_per_token"
    for case in FLOPS_CASES:
        got = call(name, fn, *case)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        got = _number(name, got)
        expected = speed.flops_per_token(*case)
        if not math.isclose(got, expected, rel_tol=1e-9):
            _diagnose(name, got, expected, flops_mistakes(*case), "FLOPs")
    n, L, H, d, T = FLOPS_CASES[-1]  # GPT-2 small at its full context
    share = 6 * n / speed.flops_per_token(n, L, H, d, T)
    causal = 6 * n / (6 * n + 6 * L * H * d * T)
    return correct(f"6N + 12 L H d_head T, PaLM's count, as tl.speed.flops_per_token: for GPT-2 small at {T} tokens, "
                   f"{share:.0%} of the work is in its parameters, the rest in attention's products ({causal:.0%} "
                   f"in its parameters if attention is counted causally, by the half a causal kernel computes).")


# ------------------------------------------------------------------------------ tokens per second

# an even number of steps and one slow outlier (the machine was busy): mean, min, the upper middle
# element, the median and the first step all give different answers
STEP_CASES = (((0.049, 0.051, 0.210, 0.050, 0.052, 0.048), 12, 64), ((2.0, 2.1, 1.9, 5.5), 64, 256))


def tokens_per_second_mistakes(step_seconds: list[float], batch: int, seq_len: int) -> dict[str, float]:
    tokens = batch * seq_len
    ordered = sorted(step_seconds)
    return {
        "You used the mean: one slow step (the machine was busy) pulls it up. The median ignores outliers: "
        "statistics.median(step_seconds).": tokens / statistics.mean(step_seconds),
        "You used the fastest step: optimistic, a figure the machine reaches only when nothing else runs. "
        "Use the median.": tokens / min(step_seconds),
        "You took the middle element of the sorted list; with an even number of steps the median is the mean of "
        "the two middle ones (statistics.median does it).": tokens / ordered[len(ordered) // 2],
        "You took the first timed step: use all of them, through their median.": tokens / step_seconds[0],
        "You counted sequences, not tokens: each step processes batch * seq_len tokens.": batch / statistics.median(step_seconds),
        "You forgot the batch: each step processes batch * seq_len tokens, not seq_len.": seq_len / statistics.median(step_seconds),
        "You returned seconds per token; the question asks for tokens per second (invert it).":
            statistics.median(step_seconds) / tokens,
    }


def check_tokens_per_second(fn: Callable[[list[float], int, int], float]) -> Verdict:
    """Check ``fn(step_seconds, batch, seq_len)``: tokens per second from the timed steps' median.

    Each step trains on ``batch * seq_len`` tokens. Prints ``Correct!`` and returns a true ``Verdict`` when right;
    returns a false one while ``fn`` raises NotImplementedError; otherwise raises :class:`ExerciseFailed`
    naming the mistake: the mean, the minimum, the middle element (not the median of an even
    count), the first step, sequences or positions instead of tokens, or seconds per token.
    """
    name = "tokens_per_second"
    for steps, batch, seq_len in STEP_CASES:
        got = call(name, fn, list(steps), batch, seq_len)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        got = _number(name, got)
        expected = batch * seq_len / statistics.median(steps)
        if not math.isclose(got, expected, rel_tol=1e-9):
            _diagnose(name, got, expected, tokens_per_second_mistakes(list(steps), batch, seq_len), "throughput")
    return correct("The median step time is what speed.median(speed.time_calls(...)) gives: a slow outlier does not "
                   "move it.")


# ---------------------------------------------------------------------------------- KV cache size

# the first case tells every mistake apart; the others are real sizes (baby-like, GPT-2 small, LLaMA-7B-like)
# the first case's sizes keep every mistake apart: batch x seq_len (3 x 200) is not n_layers x d_model
# (6 x 128), so the weights of W_K and W_V are not mistaken for a cache without its layers
KV_CASES = ((6, 3, 200, 128, 4), (12, 5, 1024, 768, 2), (32, 1, 4096, 4096, 2))


def kv_cache_mistakes(n_layers: int, batch: int, seq_len: int, d_model: int, bytes_per_value: int) -> dict[str, float]:
    per = batch * seq_len * d_model * bytes_per_value
    return {
        "You stored the keys only (or the values only): the cache holds both, a factor 2.": n_layers * per,
        "You left out the layers: every layer keeps its own keys and values.": 2 * per,
        "You left out the batch: each sequence in the batch has its own cache.": 2 * n_layers * seq_len * d_model * bytes_per_value,
        "You counted values, not bytes: multiply by bytes_per_value (4 for float32, 2 for bfloat16).": 2 * n_layers * per / bytes_per_value,
        "You counted bits, not bytes: bytes_per_value is already in bytes.": 2 * n_layers * per * 8,
        "You counted the weights of W_K and W_V (d_model x d_model per layer), which are the same for any "
        "text. The cache holds what they compute: a key and a value of d_model numbers for every position "
        "of every sequence in the batch, in every layer.": 2 * n_layers * d_model * d_model * bytes_per_value,
    }


def check_kv_cache_bytes(fn: Callable[[int, int, int, int, int], float]) -> Verdict:
    """Check ``fn(n_layers, batch, seq_len, d_model, bytes_per_value)``: bytes of a full KV cache.

    Every layer stores keys and values, each ``(batch, n_heads, seq_len, d_head)`` with
    ``n_heads * d_head = d_model``: ``2 * n_layers * batch * seq_len * d_model * bytes_per_value``.
    Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one while ``fn`` raises
    NotImplementedError; otherwise raises :class:`ExerciseFailed` naming the mistake: keys or values
    only, no layers, no batch, values instead of bytes, bits, or the weights of W_K and W_V counted.
    """
    name = "kv_cache_bytes"
    for case in KV_CASES:
        got = call(name, fn, *case)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        got = _number(name, got)
        n_layers, batch, seq_len, d_model, nbytes = case
        expected = 2 * n_layers * batch * seq_len * d_model * nbytes
        if not math.isclose(got, expected, rel_tol=1e-9):
            _diagnose(name, got, expected, kv_cache_mistakes(*case), "size")
    return correct("2 x layers x batch x positions x d_model values: a LLaMA-7B-sized model (32 layers, d_model 4096) "
                   "needs 0.5 MiB of bfloat16 cache per token.")
