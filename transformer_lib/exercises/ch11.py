"""Exercises for chapter 11, *Making it fast* (``book/11_making_it_fast.ipynb``).

* :func:`check_flops_per_token`: ``flops_per_token(n_params, n_layers, n_heads, d_head, seq_len)``,
  the training FLOPs per token as PaLM counts them, ``6 N + 12 L H d_head T``
* :func:`check_tokens_per_second`: ``tokens_per_second(step_seconds, batch, seq_len)``, the
  throughput from a list of timed steps, through their median (robust to a slow outlier)
* :func:`check_kv_cache_bytes`: ``kv_cache_bytes(n_layers, batch, seq_len, d_model, bytes_per_value)``,
  the memory a KV cache takes
* :func:`check_preallocated_kv_cache`: ``PreallocatedKVCache(max_len)``, a layer's KV cache with
  ``LayerKVCache.update(k_new, v_new) -> (k_all, v_all)``, writing into buffers allocated once and
  returning views of their filled part; compared with ``LayerKVCache`` update by update, plugged into a
  GPT-2, and timed against it with the chapter's ``speed.time_interleaved``

The inputs are chosen so that each common mistake gives a different number: sizes that are all
different from each other (so swapping two of them shows), and timings with one slow outlier and
an even count (so the mean, the minimum, the middle element and the median all differ). For the
preallocated cache: batch 2, 3 heads of width 4, max_len 10 and updates of 4, 1, 1, 3 and 1
positions, every position's key and value different, so that a returned position says which
token it holds and a buffer on the wrong dimension fails with shapes that say which.
"""

from __future__ import annotations

import functools
import math
import os
import re
import statistics
from typing import Callable

import torch
from einops import rearrange
from torch import Tensor

from .. import speed
from ..layers.kv_cache import KVCache, LayerKVCache
from ..models.gpt2 import GPT2, GPT2Config
from ._checking import NOT_IMPLEMENTED, ExerciseFailed, Verdict, attempt, call, correct, fail, pending


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


# ------------------------------------------------------------------------------ a preallocated KV cache

# batch, n_heads, d_head, the updates' sizes and max_len all differ, so a buffer laid out on the wrong
# dimension fails with shapes that say which, and a count of updates is not a count of positions. The
# updates: a 4-token prompt, single tokens, a 3-token chunk, and a last one that fills max_len exactly.
PRE_BATCH, PRE_N_HEADS, PRE_D_HEAD, PRE_MAX_LEN = 2, 3, 4, 10
PRE_UPDATES = (4, 1, 1, 3, 1)
PRE_LAYERS = 2  # two caches updated in turn, as a model's layers are: each needs buffers of its own
# updates that must be refused: (sizes accepted first, the size refused, what it is)
PRE_OVERFLOWS = (
    ((4, 1, 1, 3, 1), 1, f"after all {PRE_MAX_LEN} positions are filled, an update of 1 more"),
    ((9,), 2, f"with 9 of {PRE_MAX_LEN} positions filled, an update of 2 (one of them would fit)"),
    ((), 12, f"a first update of 12 positions (a prompt longer than max_len {PRE_MAX_LEN})"),
)
# the model the cache is plugged into, and the generation the check times
PRE_MODEL = dict(vocab_size=50, n_ctx=16, d_model=24, n_layers=2, n_heads=3)
PRE_PROMPT = 4
PRE_TIMED = dict(n_layers=4, n_heads=4, d_head=32, prompt=16, max_len=128)  # the chapter's generation model
_TORCH_SHAPE_ERRORS = ("expanded size", "must match the size", "must match the existing size", "shape mismatch",
                       "out of bounds", "out of range")


def pre_cache_inputs(seed: int = 0) -> list[tuple[Tensor, Tensor]]:
    """Every layer's keys and values for all ``PRE_MAX_LEN`` positions, ``(batch, n_heads, max_len, d_head)``,
    float64 (a buffer of torch's default dtype shows), each position different from every other."""
    g = torch.Generator().manual_seed(200 + seed)
    shape = (PRE_BATCH, PRE_N_HEADS, PRE_MAX_LEN, PRE_D_HEAD)
    return [(torch.randn(shape, generator=g, dtype=torch.float64),
             torch.randn(shape, generator=g, dtype=torch.float64)) for _ in range(PRE_LAYERS)]


def _chunk(t: Tensor, start: int, size: int) -> Tensor:
    """Positions ``start .. start + size`` of ``t``, a fresh copy laid out as attention makes it: split into heads
    from ``(batch, seq, d_model)``, so not contiguous (the reader's code gets its own copy)."""
    part = t[:, :, start:start + size]
    return rearrange(rearrange(part, "b h s d -> b s (h d)").clone(), "b s (h d) -> b h s d", h=t.shape[1])


def _describe(got) -> str:
    if isinstance(got, Tensor):
        return f"a tensor of shape {tuple(got.shape)}"
    if isinstance(got, (tuple, list)):
        return f"a {type(got).__name__} of {len(got)}: " + ", ".join(_describe(x) for x in got)
    return f"{type(got).__name__} {got!r}"[:120]


def _buffers(cache) -> list[tuple[str, Tensor]]:
    """The tensors the reader's cache object holds (its buffers, whatever they are called)."""
    try:
        return [(name, t) for name, t in vars(cache).items() if isinstance(t, Tensor)]
    except TypeError:  # an object without __dict__
        return []


def _layout_hint(cache) -> str:
    for attr, t in _buffers(cache):
        if t.dim() == 4 and PRE_MAX_LEN in t.shape and t.shape[2] != PRE_MAX_LEN:
            dim = list(t.shape).index(PRE_MAX_LEN)
            return (f"Your buffer self.{attr} has shape {tuple(t.shape)}: its max_len positions run along dim {dim}. "
                    f"The cache is (batch, n_heads, seq, d_head), like k_new: allocate (batch, n_heads, max_len, "
                    f"d_head), k_new's shape with max_len for dim 2, and write buf[:, :, pos:pos + s] = k_new.")
    return ""


def _update_hint(e: Exception, cache, cached: int, s: int, first: bool) -> str:
    text = str(e)
    shape_error = any(p in text for p in _TORCH_SHAPE_ERRORS)
    layout = _layout_hint(cache)
    if layout:
        return layout
    if re.search(rf"\b{PRE_MAX_LEN}\b", text) and not shape_error and cached + s <= PRE_MAX_LEN:
        return (f"It refused an update that fits: {cached} + {s} = {cached + s} positions, at most max_len "
                f"{PRE_MAX_LEN}. Filling the buffer exactly is allowed: refuse only pos + s > max_len (>, not >=).")
    if "NoneType" in text:
        return ("Allocate the buffers at the first update, when k_new's shape tells batch, n_heads and d_head "
                "(if self.k is None: self.k = k_new.new_empty(batch, n_heads, self.max_len, d_head), the same "
                "for v).")
    if shape_error and s > 1:
        what = (f"The first update brings the whole prompt, {s} positions at once" if first else
                f"This update brings {s} positions at once (a chunk of a prompt)")
        return (f"{what}: k_new is (batch, n_heads, {s}, d_head). Write all of them, "
                f"buf[:, :, pos:pos + s] = k_new with s = k_new.shape[2], and advance pos by s.")
    return ("Allocate (batch, n_heads, max_len, d_head) buffers once, at the first update; each update writes "
            "k_new at positions pos .. pos + k_new.shape[2] and returns the filled part, buf[:, :, :pos].")


def _construct(name: str, cls: Callable, max_len: int):
    try:
        return attempt(cls, max_len)
    except ExerciseFailed:
        raise
    except Exception as e:
        fail(f"{name}({max_len}) raised {type(e).__name__}: {e}\nThe cache is made as {name}(max_len); "
             f"its buffers can only be allocated at the first update, when k_new's shape is known.")


def _update(name: str, cache, k_new: Tensor, v_new: Tensor, cached: int, where: str, first: bool):
    try:
        return attempt(cache.update, k_new, v_new)
    except ExerciseFailed:
        raise
    except Exception as e:  # the reader's bug: report it with the call
        called = (f"(called with k_new and v_new {tuple(k_new.shape)} {k_new.dtype}, {cached} positions cached, "
                  f"max_len {PRE_MAX_LEN}; {where})")
        fail(f"{name}.update raised {type(e).__name__}: {e}\n{called}. "
             f"{_update_hint(e, cache, cached, k_new.shape[2], first)}")


def _holds(vec: Tensor, layer: int, inputs, given: int) -> tuple[str, int, int] | str | None:
    """What one returned position ``(batch, n_heads, d_head)`` holds: ``(kind, layer, token)`` of the inputs,
    ``"zeros"``, or None (none of them)."""
    order = [layer] + [other for other in range(PRE_LAYERS) if other != layer]
    for lay in order:
        for kind, t in zip(("key", "value"), inputs[lay]):
            for j in range(given if lay == layer else PRE_MAX_LEN):
                if torch.equal(vec, t[:, :, j]):
                    return kind, lay, j
    return "zeros" if not vec.any() else None


def _values_problem(got: Tensor, kind: str, layer: int, inputs, n: int, cached: int) -> str:
    """Why ``got`` (``k_all`` or ``v_all``, the right shape) is not the first ``n`` positions of the inputs."""
    held = [_holds(got[:, :, p], layer, inputs, n) for p in range(n)]
    mine = [h[2] if isinstance(h, tuple) and h[:2] == (kind, layer) else None for h in held]
    if cached > 0 and mine[0] == cached:
        return ("position 0 holds the first position of this update: every update writes at position 0. "
                "Write at the positions filled so far, buf[:, :, pos:pos + s] = k_new, then pos += s.")
    # position 0 is not looked at: never written, it holds zeros or whatever torch.empty found there
    if n > 1 and all(m == p - 1 for p, m in enumerate(mine) if p > 0 and m is not None) \
            and any(m is not None for m in mine[1:]):
        return ("every position holds the one before it (position p holds token p - 1): you write one position too "
                "far, so position 0 is never written. Write at pos, the number of positions filled before this "
                "update (0 at the first), and advance pos after writing.")
    # after the two above: a position never written (torch.empty) may hold another cache's freed keys
    if any(isinstance(h, tuple) and h[1] != layer for h in held):
        return ("it holds keys or values given to another cache: your caches share their buffers. Each layer "
                "has its own cache: keep the buffers on self, created in __init__ or at the first update, "
                "not in class attributes or default arguments.")
    p = next(p for p, m in enumerate(mine) if m != p)
    h = held[p]
    if h == "zeros":
        what = "zeros, a position never written (your buffer starts as zeros)"
    elif h is None:
        what = ("numbers that are none of the keys and values given so far: a position never written (torch.empty "
                "leaves whatever was in memory) or changed after it was written")
    elif h[0] != kind:
        what = f"the {h[0]} of token {h[2]}: keys go into the keys' buffer, values into the values' buffer"
    else:
        what = f"token {h[2]}'s {kind}"
    return (f"position {p} holds {what}, where it should hold token {p}'s {kind}. Write each update at the "
            f"positions filled so far, buf[:, :, pos:pos + s] = k_new (pos is 0 at the first update), then pos += s.")


def _shape_problem(got: Tensor, n: int, cached: int, s: int, updates: int) -> str:
    b, h, d = PRE_BATCH, PRE_N_HEADS, PRE_D_HEAD
    shape = tuple(got.shape)
    expected = (b, h, n, d)
    head = f"it has shape {shape}, where {expected}, (batch, n_heads, positions so far, d_head), is expected"
    if len(shape) == 4 and shape[:2] == (b, h) and shape[3] == d:
        m = shape[2]
        if m == PRE_MAX_LEN:
            return (f"{head}: you returned the whole buffer, {PRE_MAX_LEN - n} of its positions not written yet "
                    f"(zeros, or whatever torch.empty left there), and attention would attend to them. Return the "
                    f"filled part, buf[:, :, :pos]: a view, no copy.")
        if m == cached:
            return (f"{head}: you returned the cache as it was before this update, without its {s} new position(s). "
                    f"Return the filled part after writing: buf[:, :, :pos + s].")
        if m == updates:
            return (f"{head}: your position counter advances by one per update, but an update brings k_new.shape[2] "
                    f"positions (the first, the prompt, brings {PRE_UPDATES[0]}). Write them all and advance pos by "
                    f"k_new.shape[2].")
        if m == s and cached > 0:
            return (f"{head}: it holds only this update's position(s). The earlier ones stay in the buffer: return "
                    f"buf[:, :, :pos], pos counting every position written so far.")
        return f"{head}: it holds {m} positions after {n} were given. Return buf[:, :, :pos], the positions written."
    return (f"{head}. The positions run along dim 2, as in k_new: slice the filled part there, buf[:, :, :pos], "
            f"from a buffer of shape (batch, n_heads, max_len, d_head).")


def _memory_problem(got: Tensor, kind: str, first_ptr: int | None, n: int) -> str | None:
    """None when ``got`` is a view of a buffer of ``max_len`` positions, the same buffer as at the first update."""
    per_position = PRE_BATCH * PRE_N_HEADS * PRE_D_HEAD * got.element_size()
    storage = got.untyped_storage()
    room = storage.nbytes() // per_position
    if room < PRE_MAX_LEN:
        if room == n:
            return (f"{kind}_all is a tensor of its own holding just the {n} filled positions, not a view of a "
                    f"buffer of max_len {PRE_MAX_LEN} positions. A copy (torch.cat, .clone(), .contiguous() of the "
                    f"filled part) allocates a new tensor and copies the whole cache into it at every update, as "
                    f"LayerKVCache's torch.cat does: the work that preallocating saves. Return a view, "
                    f"buf[:, :, :pos]: slicing copies nothing, and attention reads a view as it reads any tensor.")
        return (f"{kind}_all lives in memory of {room} positions, fewer than max_len ({PRE_MAX_LEN}): allocate "
                f"the buffer for max_len positions, once, and return views of it.")
    if first_ptr is not None and storage.data_ptr() != first_ptr:
        return (f"{kind}_all is a view of another buffer than at the first update (its data_ptr() changed): your "
                f"update allocates a new buffer (torch.zeros, torch.empty) at every call, instead of writing into "
                f"the one it allocated at the first update. Allocate once (if self.k is None: ...), then only "
                f"write into it.")
    return None


def _steps(name: str, cls: Callable) -> bool:
    """Both caches, update by update, against LayerKVCache; False while the reader's code is a stub."""
    inputs = pre_cache_inputs()
    caches = []
    for _ in range(PRE_LAYERS):
        cache = _construct(name, cls, PRE_MAX_LEN)
        if cache is NOT_IMPLEMENTED:
            return False
        caches.append(cache)
    refs = [LayerKVCache() for _ in range(PRE_LAYERS)]
    first_ptrs: dict[tuple[int, str], int] = {}
    kept = []  # every returned tensor stays alive, so that no new tensor can reuse a returned one's memory
    cached = 0
    for i, s in enumerate(PRE_UPDATES):
        n = cached + s
        for layer, cache in enumerate(caches):
            k_new, v_new = (_chunk(t, cached, s) for t in inputs[layer])
            where = (f"update {i + 1} of {len(PRE_UPDATES)} ({s} position{'s' * (s > 1)}), the cache of layer "
                     f"{layer} of {PRE_LAYERS}, updated in turn")
            got = _update(name, cache, k_new, v_new, cached, where, i == 0)
            if got is NOT_IMPLEMENTED:
                return False
            kept.append(got)
            right = refs[layer].update(_chunk(inputs[layer][0], cached, s), _chunk(inputs[layer][1], cached, s))
            at = f"{name}.update, {where}, {cached} positions cached before it:"
            if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, Tensor) for t in got)):
                fail(f"{at} update should return (k_all, v_all), two tensors, as LayerKVCache.update does; it "
                     f"returned {_describe(got)}.")
            for kind, t in zip(("k", "v"), got):
                if t.dtype != k_new.dtype or t.device != k_new.device:
                    fail(f"{at} {kind}_all is {t.dtype} on {t.device}, the keys {k_new.dtype} on {k_new.device}: "
                         f"your buffer has torch's defaults. Allocate it like the keys, k_new.new_empty(...) or "
                         f"torch.empty(..., dtype=k_new.dtype, device=k_new.device), so that a bfloat16 model's "
                         f"cache is bfloat16 and a GPU model's is on the GPU.")
            for kind, t in zip(("k", "v"), got):
                if tuple(t.shape) != (PRE_BATCH, PRE_N_HEADS, n, PRE_D_HEAD):
                    fail(f"{at} {kind}_all is not right yet: {_shape_problem(t, n, cached, s, i + 1)}")
            for kind, t in zip(("k", "v"), got):
                problem = _memory_problem(t, kind, first_ptrs.get((layer, kind)), n)
                if problem:
                    fail(f"{at} {problem}")
                first_ptrs.setdefault((layer, kind), t.untyped_storage().data_ptr())
            if not (torch.equal(got[0], right[0]) and torch.equal(got[1], right[1])):
                if torch.equal(got[0], right[1]) and torch.equal(got[1], right[0]):
                    fail(f"{at} k_all holds the values and v_all the keys: write k_new into the keys' buffer and "
                         f"v_new into the values', and return (k_all, v_all) in that order.")
                for kind, t, r in zip(("key", "value"), got, right):
                    if not torch.equal(t, r):
                        fail(f"{at} {kind[0]}_all is not right yet: "
                             f"{_values_problem(t, kind, layer, inputs, n, cached)}")
        cached = n
    return True


def _overflows(name: str, cls: Callable) -> None:
    """Each update in PRE_OVERFLOWS must be refused with an error that names max_len."""
    inputs = pre_cache_inputs(seed=1)[0]
    for sizes, extra, what in PRE_OVERFLOWS:
        cache = _construct(name, cls, PRE_MAX_LEN)
        cached = 0
        for s in sizes:
            _update(name, cache, *(_chunk(t, cached, s) for t in inputs), cached, what, cached == 0)
            cached += s
        k_new = torch.randn(PRE_BATCH, PRE_N_HEADS, extra, PRE_D_HEAD, dtype=torch.float64,
                            generator=torch.Generator().manual_seed(3))
        try:
            got = cache.update(k_new, k_new.clone())
        except Exception as e:
            text = str(e)
            if re.search(rf"\b{PRE_MAX_LEN}\b", text) and not any(p in text for p in _TORCH_SHAPE_ERRORS):
                continue  # a clear error: it names max_len
            whose = ("PyTorch's, from writing past the end of the buffer" if any(p in text for p in _TORCH_SHAPE_ERRORS)
                     else "yours, but it does not name max_len")
            fail(f"{name}.update, {what}: it raised {type(e).__name__}: {e}\nAn error is right, but this one is "
                 f"{whose}: it does not say what went wrong. Check before writing, if pos + s > self.max_len, and "
                 f"raise an error that names the limit and what was asked, e.g. ValueError(f\"{{s}} new positions do "
                 f"not fit: {{pos}} of max_len={{self.max_len}} are filled\").")
        fail(f"{name}.update, {what}: it returned {_describe(got)} without an error, so positions past max_len "
             f"were dropped, or the buffer grew. A preallocated cache holds at most max_len positions: check "
             f"before writing, if pos + s > self.max_len, raise ValueError naming max_len, so that a generation "
             f"longer than the buffer stops with a message that says why.")


class _ReaderLayer(LayerKVCache):
    """One layer's cache for the library's attention: the reader's object, counting positions itself (attention
    asks ``seq_len`` for the RoPE offset before it updates)."""

    def __init__(self, name: str, cache) -> None:
        super().__init__()
        self.name, self.cache, self.n = name, cache, 0

    @property
    def seq_len(self) -> int:
        return self.n

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        try:
            out = self.cache.update(k, v)
        except Exception as e:
            fail(f"{self.name}.update raised {type(e).__name__} inside a GPT-2 model ({PRE_MODEL['n_layers']} layers,"
                 f" k_new {tuple(k.shape)} {k.dtype}, {self.n} positions cached; each layer's cache made as "
                 f"{self.name}({PRE_MODEL['n_ctx']}), the model's n_ctx): {e}")
        self.n += k.shape[-2]
        return out


@functools.lru_cache(maxsize=1)
def _pre_model():
    with torch.random.fork_rng(devices=[]):  # the weights' init draws from the global RNG: leave the reader's alone
        torch.manual_seed(0)
        model = GPT2(GPT2Config(**PRE_MODEL)).eval()
    g = torch.Generator().manual_seed(4)
    prompt = torch.randint(0, PRE_MODEL["vocab_size"], (PRE_BATCH, PRE_PROMPT), generator=g)
    return model, prompt


def _generate(model, prompt: Tensor, layers: list) -> tuple[Tensor, Tensor]:
    """Greedy generation until the cache holds n_ctx positions: the tokens and every step's logits."""
    cache = KVCache(len(layers))
    cache.layers = layers
    ids, steps = prompt, []
    with torch.no_grad():
        logits = model(prompt, kv_cache=cache)[:, -1]
        while True:
            steps.append(logits)
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
            if len(cache) == PRE_MODEL["n_ctx"]:
                return ids, torch.stack(steps)
            logits = model(ids[:, -1:], kv_cache=cache)[:, -1]


def _model_problem(name: str, cls: Callable) -> tuple[int, bool]:
    """Generate with the reader's cache in every layer and with LayerKVCache: the same tokens, or fail."""
    model, prompt = _pre_model()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small: a second thread only waits (20x slower on a busy machine)
    try:
        ids, logits = _generate(model, prompt, [LayerKVCache() for _ in model.blocks])
        mine = [_ReaderLayer(name, cls(PRE_MODEL["n_ctx"])) for _ in model.blocks]
        got_ids, got_logits = _generate(model, prompt, mine)
    finally:
        torch.set_num_threads(threads)
    err = (got_logits - logits).abs().max().item()
    if not torch.equal(got_ids, ids) or err > 1e-5:  # float32 rounding: attention may read a view differently
        model_text = (f"{name} in every layer of a GPT-2 ({PRE_MODEL['n_layers']} layers, {PRE_MODEL['n_heads']} "
                      f"heads, float32, max_len = n_ctx = {PRE_MODEL['n_ctx']}, greedy after a {PRE_PROMPT}-token "
                      f"prompt)")
        if torch.equal(got_ids, ids):
            what = f"generates the same tokens as LayerKVCache, but other logits (largest difference {err:.3g})"
        else:
            first = int((got_ids != ids).any(0).nonzero()[0]) - PRE_PROMPT + 1
            what = f"generates other tokens than LayerKVCache from new token {first} on"
        fail(f"{model_text} {what}. Its updates were right on their own (float64, max_len {PRE_MAX_LEN}): look for "
             f"what differs here, the float32 keys, max_len, or state that one layer's cache shares with another.")
    return ids.shape[1] - PRE_PROMPT, torch.equal(got_logits, logits)


def _time(cls: Callable, device) -> str:
    """The chapter's method, speed.time_interleaved, on the cache updates of a small generation."""
    c = PRE_TIMED
    device = torch.device("cpu" if device is None else device)
    g = torch.Generator().manual_seed(5)
    prompt_kv = torch.randn(1, c["n_heads"], c["prompt"], c["d_head"], generator=g).to(device)
    token_kv = torch.randn(1, c["n_heads"], 1, c["d_head"], generator=g).to(device)
    new_tokens = c["max_len"] - c["prompt"]

    def generation(make):
        def run():  # a prompt, then one position per new token, in every layer, as generation updates them
            layers = [make() for _ in range(c["n_layers"])]
            for layer in layers:
                layer.update(prompt_kv, prompt_kv)
            for _ in range(new_tokens):
                for layer in layers:
                    layer.update(token_kv, token_kv)
        return run

    runs = speed.time_interleaved({"cat": generation(LayerKVCache), "mine": generation(lambda: cls(c["max_len"]))},
                                  warmup=1, repeats=5, min_run_seconds=0.01, device=device)
    cat, mine = speed.median(runs["cat"]), speed.median(runs["mine"])
    ratios = [a / b for a, b in zip(runs["cat"], runs["mine"])]
    faster = sum(r > 1 for r in ratios)
    rounds = len(ratios)
    verdict = (f"yours faster in all {rounds} rounds" if faster == rounds else
               f"yours slower in all {rounds} rounds" if faster == 0 else
               f"yours faster in {faster} of {rounds} rounds: no clear difference")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    where = (torch.cuda.get_device_name(device) if device.type == "cuda" else
             f"{speed.cpu_name()}, {torch.get_num_threads()} PyTorch thread(s)")
    text = (f"Timed with speed.time_interleaved, the chapter's method (a warm-up, then {rounds} rounds in which each "
            f"cache ran once, in turn), on this machine now ({where}, load average "
            f"{'unknown' if load is None else f'{load:.1f}'}): the cache updates alone, no model, of generating "
            f"{new_tokens} tokens after a {c['prompt']}-token prompt in {c['n_layers']} layers (batch 1, "
            f"{c['n_heads']} heads, d_head {c['d_head']}, max_len {c['max_len']}). LayerKVCache (torch.cat) "
            f"{cat * 1e3:.2f} ms (runs {min(runs['cat']) * 1e3:.2f}-{max(runs['cat']) * 1e3:.2f}), yours "
            f"{mine * 1e3:.2f} ms (runs {min(runs['mine']) * 1e3:.2f}-{max(runs['mine']) * 1e3:.2f}): yours "
            f"{cat / mine:.2f}x as fast (round by round {min(ratios):.2f}x-{max(ratios):.2f}x; {verdict}).")
    if faster < rounds:
        text += (f" {'Slower' if faster == 0 else 'No clear gain'} here: at this size the copying that torch.cat "
                 f"does is small, and each update's fixed cost decides (Python and PyTorch's dispatcher: a slice "
                 f"assignment and a view per tensor against one torch.cat). The copy grows with the cache, its "
                 f"length times the batch; the fixed cost does not.")
    return text


def check_preallocated_kv_cache(cls: Callable[[int], object], timing: bool = True, device=None) -> Verdict:
    """Check ``cls(max_len)``, a KV cache for one attention layer with ``LayerKVCache``'s
    ``update(k_new, v_new) -> (k_all, v_all)`` (each ``(batch, n_heads, seq, d_head)``) that writes into buffers
    of ``max_len`` positions allocated once, at the first update, and returns views of their filled part.

    Two caches, updated in turn as a model's layers are, get a 4-token prompt, single tokens, a 3-token chunk
    and a last token that fills ``max_len`` (10) exactly, in float64, batch 2, 3 heads of width 4. Every
    update's ``k_all`` and ``v_all`` must equal :class:`LayerKVCache`'s exactly (``torch.equal``), have the
    keys' dtype and device, and be views of one buffer of at least ``max_len`` positions, the same at every
    update (``untyped_storage().data_ptr()``). A copy of the filled part (``torch.cat``, ``.clone()``,
    ``.contiguous()``) is refused: it costs what ``torch.cat`` costs, which is what preallocating saves.
    An update past ``max_len`` (one more after the buffer is full, two when one fits, a prompt of 12) must
    raise an error that names ``max_len``; PyTorch's own shape error is not enough. Then the cache in
    every layer of a 2-layer GPT-2 must generate the same tokens as ``LayerKVCache``. With ``timing``, it
    then times both on the cache updates of a small generation with :func:`speed.time_interleaved`, on
    ``device`` (the CPU by default), and prints the ratio with its spread; it asserts no speed-up.

    Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one while ``cls`` or its
    ``update`` raises NotImplementedError; otherwise raises :class:`ExerciseFailed` naming the mistake: the
    whole buffer returned, unfilled positions included; writes at position 0 every update, or one position
    too far; the cache before this update returned; a counter that advances by one per update (the prompt
    not handled); only the new positions returned; a buffer laid out with the positions on another
    dimension; a buffer of torch's default dtype; a copy instead of a view; a new buffer every update;
    keys and values swapped; buffers shared between caches; an update that fits refused (``>=``); and
    an update past ``max_len`` accepted silently or refused with PyTorch's shape error or a message that
    does not name ``max_len``. An exception names the call and, from the buffers it finds, the dimension.
    """
    name = getattr(cls, "__name__", "your cache")
    if not _steps(name, cls):
        return pending(name)
    _overflows(name, cls)
    new_tokens, bitwise = _model_problem(name, cls)
    verdict = correct(
        f"Update by update, your cache returns exactly what LayerKVCache returns (a {PRE_UPDATES[0]}-token prompt, "
        f"single tokens, a 3-token chunk, up to max_len; two caches in turn), as views of buffers allocated once; "
        f"it refuses positions past max_len with an error that names it; and a {PRE_MODEL['n_layers']}-layer GPT-2 "
        f"with it generates the same {new_tokens} tokens as with LayerKVCache"
        + (", with bitwise the same logits." if bitwise else " (its logits differ in the last bits: attention "
           "reads a view of the buffer with other strides than torch.cat's tensor)."))
    if timing:
        print(_time(cls, device))
    return verdict
