"""Exercises for chapter 2, *Attention* (``book/02_attention.ipynb``).

* :func:`check_scaled_dot_product_attention`: ``scaled_dot_product_attention(q, k, v, mask=None)``
  returning ``(output, weights)``
* :func:`check_causal_mask`: ``causal_mask(seq_len)``, bool, True = may attend
* :func:`check_split_heads`, :func:`check_merge_heads`: the reshapes of multi-head attention,
  ``(batch, seq, d_model) <-> (batch, n_heads, seq, d_head)``

The inputs are chosen so that every common mistake gives a different answer: ``d_k = 4``, so the
scales ``1``, ``1/sqrt(d_k) = 1/2`` and ``1/d_k = 1/4`` differ; scores large enough that they
matter; a first case with as many queries as keys (so ``K Q^T`` and a softmax over the queries
run without error and can be named), then a case with 3 queries and 5 keys and a mask whose every
row has both visible and hidden keys (so an inverted mask gives finite, recognisable weights), then
4-D inputs ``(batch, heads, seq, d)`` as in multi-head attention, with a padding-style mask that
hides every key from one query (which must get zero weights and a zero output, as in
``tl.scaled_dot_product_attention``); ``batch=2, seq=3, n_heads=4, d_head=5`` for the head
reshapes, all different.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from einops import rearrange
from torch import Tensor

from ..layers.attention import scaled_dot_product_attention as _sdpa
from ..layers.masks import causal_mask as _causal_mask
from ._checking import NOT_IMPLEMENTED, ExerciseFailed, attempt, close, correct, diagnose, expect_tensor, fail, pending, Verdict

D_K = 4  # sqrt(d_k) = 2 and d_k = 4: the three scales differ


def _shapes(*tensors) -> str:
    return ", ".join(str(tuple(t.shape)) if isinstance(t, Tensor) else repr(t) for t in tensors)


def _call(name: str, fn: Callable, *args, hint: str = "", hint_for: Tensor | None = None, **kwargs):
    """``attempt(fn, ...)``, but an exception in the reader's code becomes an ExerciseFailed that says where.

    ``hint_for``: the queries of an attention call, whose shape picks a more specific hint."""
    try:
        return attempt(fn, *(a.clone() if isinstance(a, Tensor) else a for a in args), **kwargs)
    except ExerciseFailed:
        raise
    except Exception as e:  # the reader's bug: report it with the shapes it was called with
        if hint_for is not None:
            hint = _sdpa_error_hint(e, hint_for) or hint
        raise ExerciseFailed(
            f"{name} raised {type(e).__name__}: {e}\n(called with arguments of shapes {_shapes(*args)}). {hint}".rstrip()
        ) from e


# ---------------------------------------------------------------------- scaled dot-product attention


def sdpa_inputs(seed: int = 2, seq_q: int = 5, seq_k: int = 5, batch: int | tuple[int, ...] = 2,
                d_v: int = 3) -> tuple[Tensor, Tensor, Tensor]:
    """``q (*batch, seq_q, d_k=4)``, ``k (*batch, seq_k, 4)``, ``v (*batch, seq_k, d_v)``; scores of a few units."""
    g = torch.Generator().manual_seed(seed)
    lead = (batch,) if isinstance(batch, int) else tuple(batch)
    q = 1.5 * torch.randn(*lead, seq_q, D_K, generator=g)
    k = 1.5 * torch.randn(*lead, seq_k, D_K, generator=g)
    v = torch.randn(*lead, seq_k, d_v, generator=g)
    return q, k, v


HEADS_4D = 3  # (batch=2, heads=3, seq_q=4, seq_k=6): heads differs from both sequence lengths


def sdpa_inputs_4d() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``q (2, 3, 4, 4)``, ``k (2, 3, 6, 4)``, ``v (2, 3, 6, 5)`` and a bool mask ``(2, 1, 4, 6)`` shared by the heads.

    Every query row has visible and hidden keys, except query 3 of batch element 1, which sees no key
    at all (as a padded query does once a padding mask and a causal mask hide everything from it).
    """
    q, k, v = sdpa_inputs(seed=13, seq_q=4, seq_k=6, batch=(2, HEADS_4D), d_v=5)
    g = torch.Generator().manual_seed(14)
    mask = torch.rand(2, 1, 4, 6, generator=g) > 0.5
    mask[..., 0], mask[..., -1] = True, False
    mask[1, 0, 3] = False  # a query with no key to attend to
    return q, k, v, mask


def sdpa_mask(seed: int = 3, batch: int = 2, seq_q: int = 3, seq_k: int = 5) -> Tensor:
    """A bool mask ``(batch, seq_q, seq_k)`` in which every row has visible *and* hidden keys."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, seq_q, seq_k, generator=g) > 0.5
    mask[..., 0], mask[..., -1] = True, False  # at least one of each per row
    return mask


def sdpa_weight_mistakes(q: Tensor, k: Tensor, mask: Tensor | None, d_v: int | None = None) -> dict[str, Tensor]:
    """The attention *weights* that common mistakes give, keyed by the hint that names each one.

    ``d_v`` (the values' width) adds the mistake of scaling by ``sqrt(d_v)``."""
    d_k, seq_q, seq_k = q.shape[-1], q.shape[-2], k.shape[-2]
    raw = q @ k.transpose(-2, -1)  # (..., seq_q, seq_k), unscaled
    scores = raw / math.sqrt(d_k)
    if mask is None:
        mistakes = {
            "You forgot the scale: divide the scores Q K^T by sqrt(d_k) before the softmax.": raw.softmax(-1),
            "You divided the scores by d_k; the scale is 1 / sqrt(d_k) (math.sqrt(q.shape[-1])).": (raw / d_k).softmax(-1),
            "You multiplied the scores by sqrt(d_k); divide by it instead.": (raw * math.sqrt(d_k)).softmax(-1),
            "Your softmax runs over the wrong axis (the queries, dim=-2): each query's weights over the keys must sum "
            "to 1, so use softmax(dim=-1).": scores.softmax(-2),
            "Your scores are transposed: you computed K Q^T. The score of query i for key j is q_i . k_j, so "
            "scores = q @ k.transpose(-2, -1), of shape (..., seq_q, seq_k).": scores.transpose(-2, -1).softmax(-1),
            "You forgot the scale and your softmax runs over the queries (dim=-2); divide by sqrt(d_k) and use "
            "softmax(dim=-1).": raw.softmax(-2),
            "You divided by sqrt(d_k) *after* the softmax, so each query's weights sum to 1/sqrt(d_k) instead of "
            "1. The order is: scores = q @ k.transpose(-2, -1) / sqrt(d_k), then the softmax.":
                raw.softmax(-1) / math.sqrt(d_k),
        }
        if d_v is not None and d_v != d_k:
            mistakes[f"You scaled by sqrt(d_v) = sqrt({d_v}), the width of the values (v.shape[-1]). The scale "
                     f"is 1 / sqrt(d_k), the width of the queries and keys: math.sqrt(q.shape[-1]) = "
                     f"sqrt({d_k})."] = (raw / math.sqrt(d_v)).softmax(-1)
        lengths = {seq_k: "keys"} if seq_q != seq_k else {seq_k: "positions"}
        if seq_q != seq_k:
            lengths[seq_q] = "queries"
        for n, what in lengths.items():
            if n not in (d_k, d_v):  # a length equal to a width would be the same mistake twice
                mistakes[f"You scaled by the square root of the number of {what}, sqrt({n}) (a shape[-2]). The "
                         f"scale is 1 / sqrt(d_k), the width of the queries and keys, their *last* dimension: "
                         f"math.sqrt(q.shape[-1]) = sqrt({d_k})."] = (raw / math.sqrt(n)).softmax(-1)
        return mistakes
    hidden = ~mask
    after = scores.softmax(-1)
    return {
        "You ignored the mask: hide the keys where mask is False by filling their scores with -inf before the "
        "softmax (scores.masked_fill(~mask, float('-inf'))).": after,
        "You applied the mask after the softmax: the weights you zeroed no longer sum to 1. Fill the hidden "
        "scores with -inf *before* the softmax, so the softmax shares the weight among the visible keys only.":
            after.masked_fill(hidden, 0.0),
        "You applied the mask after the softmax (filled the weights with -inf). Fill the hidden *scores* with "
        "-inf before the softmax, so that their weights come out exactly 0.": after.masked_fill(hidden, float("-inf")),
        "You set the hidden scores to 0 (filled them with 0, or multiplied the scores by the mask), but 0 is an "
        "ordinary score: those keys still get weight. Fill them with float('-inf'), whose exponential is exactly 0: "
        "scores.masked_fill(~mask, float('-inf')).": scores.masked_fill(hidden, 0.0).softmax(-1),
        "Your mask is inverted: True means the query MAY attend to that key (the convention of "
        "F.scaled_dot_product_attention), so hide the keys where mask is False: scores.masked_fill(~mask, "
        "float('-inf')).": scores.masked_fill(mask, float("-inf")).softmax(-1),
        "You added the bool mask to the scores (True counts as +1). Use it to choose: scores.masked_fill(~mask, "
        "float('-inf')).": (scores + mask).softmax(-1),
    }


def _same(a: Tensor, b: Tensor) -> bool:
    """Equal shapes and values, NaN and inf in the same places."""
    return a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=1e-5, rtol=1e-4, equal_nan=True)


def _check_pair(name: str, got, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> None:
    """One call's answer ``(output, weights)`` against the library's, with the mistakes named."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{name} should return a tuple (output, weights), but it returned {type(got).__name__}"
             + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "") + ".")
    out, weights = got
    expected_out, expected_w = _sdpa(q, k, v, mask)
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    if (isinstance(out, Tensor) and isinstance(weights, Tensor) and out.shape == expected_w.shape
            and weights.shape == expected_out.shape and expected_w.shape != expected_out.shape):
        fail(f"{name} returned (weights, output): the first element has the weights' shape "
             f"{tuple(out.shape)} = (..., seq_q, seq_k), the second the output's {tuple(weights.shape)} = "
             f"(..., seq_q, d_v). Return them in the order (output, weights), like tl.scaled_dot_product_attention.")
    if isinstance(weights, Tensor) and weights.shape[-2:] == (seq_k, seq_q) and seq_q != seq_k:
        fail(f"{name}: your weights have shape {tuple(weights.shape)}, i.e. (..., seq_k, seq_q): you computed K Q^T. "
             f"The scores are q @ k.transpose(-2, -1), of shape (..., seq_q={seq_q}, seq_k={seq_k}).")
    expect_tensor(f"{name}'s weights", weights, expected_w.shape)
    expect_tensor(f"{name}'s output", out, expected_out.shape)
    where = "without a mask" if mask is None else "with a mask"
    # rows whose every key is hidden are checked on their own, after the others
    empty = torch.zeros(expected_w.shape[:-1], dtype=torch.bool) if mask is None else \
        (~mask.any(dim=-1)).expand(expected_w.shape[:-1])
    rows = ~empty  # (..., seq_q): the queries that may see at least one key

    def part(t: Tensor) -> Tensor:
        return t[rows]  # (n_rows, last dim)

    if not close(part(weights), part(expected_w)):
        for hint, wrong in sdpa_weight_mistakes(q, k, mask, d_v=v.shape[-1]).items():
            if _same(part(weights), part(wrong)):
                fail(f"{name} ({where}) is not right yet. {hint}")
        if part(weights).isnan().any():
            fail(f"{name} ({where}): your weights contain NaN. A NaN appears when a softmax row is all -inf, i.e. "
                 f"a query hides every key; check which keys your mask hides (True = may attend).")
        sums = part(weights).float().sum(-1)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            fail(f"{name} ({where}): each query's weights must sum to 1 over the keys, but yours sum to "
                 f"{sums.flatten()[:4].tolist()}... Is the softmax over the last dimension (the keys)?")
        diagnose(f"{name}'s weights ({where})", part(weights), part(expected_w), {})
    if mask is not None:
        hidden = ~mask.expand_as(weights) & rows[..., None]
        if (weights[hidden] != 0).any():
            fail(f"{name} (with a mask): the weights of hidden keys must be exactly 0, but the largest is "
                 f"{weights[hidden].abs().max().item():.3g}. Fill hidden scores with float('-inf'), "
                 f"not a large negative number.")
    if empty.any() and not (weights[empty] == 0).all():
        w_empty = weights[empty]
        if w_empty.isnan().any():
            seen = "NaN, since the softmax of a row of -inf is 0 / 0"
        elif torch.allclose(w_empty.float(), torch.full_like(w_empty.float(), 1 / seq_k), atol=1e-4):
            seen = (f"uniform, 1/{seq_k} on every key: a large negative fill gives every score of that row the "
                    f"same value, so the softmax spreads the weight over keys the query may not see")
        else:
            seen = f"not zero (the largest is {w_empty.abs().max().item():.3g})"
        fail(f"{name} (with a mask that hides every key from one query): that query's weights are {seen}. "
             f"A query with nothing to attend to gets zero weights, and so a zero output, as in "
             f"tl.scaled_dot_product_attention (and F.scaled_dot_product_attention on a CPU since PyTorch "
             f"2.5; earlier versions and some other backends, e.g. MPS in mid-2025, return NaN: do not rely "
             f"on it). "
             f"After the softmax: weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0).")
    if not close(out, expected_out):
        wrong_outputs = {
            "Your weights are right but the output is not: it is weights @ v (each query's weighted average of the "
            "values), not the weights transposed times v.": expected_w.transpose(-2, -1) @ v if seq_q == seq_k else None,
            "Your weights are right but the output is not: it is weights @ v, not scores @ v (use the weights after "
            "the softmax).": (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v,
        }
        diagnose(f"{name}'s output ({where})", out, expected_out, {h: w for h, w in wrong_outputs.items() if w is not None})


def _sdpa_error_hint(e: Exception, q: Tensor) -> str:
    """The likely cause of an exception in the reader's attention, given the inputs it was called with."""
    msg = str(e)
    if q.dim() > 3:
        return (f"These inputs are 4-D, (batch, heads, seq, d) = {tuple(q.shape)}, as multi-head attention passes "
                f"them: there may be more than one batch dimension. Count from the end: "
                f"k.transpose(-2, -1) (not transpose(1, 2)), softmax(dim=-1), and a mask that broadcasts "
                f"against the scores.")
    if isinstance(e, IndexError) and "Dimension out of range" in msg:
        return ("A fixed dimension such as transpose(2, 3) does not exist in every input: these are 3-D, "
                "(batch, seq, d), and multi-head attention passes 4-D ones. Count from the end: "
                "k.transpose(-2, -1).")
    return ""


def check_scaled_dot_product_attention(fn: Callable) -> Verdict:
    """Check ``fn(q, k, v, mask=None) -> (output, weights)`` against ``tl.scaled_dot_product_attention``.

    ``q`` is ``(..., seq_q, d_k)``, ``k`` is ``(..., seq_k, d_k)``, ``v`` is ``(..., seq_k, d_v)``;
    ``mask`` is bool, broadcastable to ``(..., seq_q, seq_k)``, True where a query may attend to a key.
    The answer is ``(output (..., seq_q, d_v), weights (..., seq_q, seq_k))``; a query whose keys are
    all hidden gets zero weights and a zero output (not the NaN of a softmax over a row of -inf).

    Three calls: without a mask on 5 queries and 5 keys; with a mask on 3 queries and 5 keys; and on
    4-D inputs ``(batch=2, heads=3, seq, d)`` with a mask ``(2, 1, 4, 6)`` that hides every key from
    one query. Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one while
    ``fn`` raises NotImplementedError; otherwise raises :class:`ExerciseFailed` naming the mistake: no
    scale, a scale of ``1/d_k``, ``1/sqrt(d_v)`` or ``1/sqrt(seq)``, the scale applied after the
    softmax, the softmax over the queries, ``K Q^T`` instead of ``Q K^T``, ``(weights, output)``
    returned in that order, the mask ignored, applied after the softmax, set to 0 instead of -inf,
    added, or inverted (True taken as hidden), hidden weights not exactly 0, NaN or uniform weights
    for a query that sees no key, ``scores @ v`` or transposed weights in the output, and a fixed
    dimension (``transpose(1, 2)``) that fails on 3-D or 4-D inputs.
    """
    name = "scaled_dot_product_attention"
    q, k, v = sdpa_inputs(seed=2, seq_q=5, seq_k=5)
    got = _call(name, fn, q, k, v, hint="Follow the steps: scores = q @ k.transpose(-2, -1) / sqrt(d_k), "
                "softmax over the last dim, then weights @ v.", hint_for=q)
    if got is NOT_IMPLEMENTED:
        return pending(name)
    _check_pair(name, got, q, k, v, None)

    q, k, v = sdpa_inputs(seed=7, seq_q=3, seq_k=5)
    mask = sdpa_mask()
    got = _call(name, fn, q, k, v, mask, hint="Here seq_q=3 and seq_k=5: the scores must be (..., seq_q, seq_k) = "
                "q @ k.transpose(-2, -1), and the mask (..., 3, 5) has the scores' shape.", hint_for=q)
    if got is NOT_IMPLEMENTED:
        return pending(name)
    _check_pair(name, got, q, k, v, mask)

    q, k, v, mask = sdpa_inputs_4d()
    got = _call(name, fn, q, k, v, mask, hint_for=q)
    if got is NOT_IMPLEMENTED:
        return pending(name)
    _check_pair(name, got, q, k, v, mask)
    return correct("Your attention matches tl.scaled_dot_product_attention (and so F.scaled_dot_product_attention), "
                   "with and without a mask, on 3-D and 4-D inputs, and with a query that sees no key.")


# ------------------------------------------------------------------------------------ causal mask


def causal_mask_mistakes(seq_len: int) -> dict[str, Tensor]:
    """The True/False patterns that common mistakes give, keyed by the hint that names each one."""
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return {
        "Your mask is the upper triangle: query i would see keys j >= i, the future. A causal mask is True on and "
        "below the diagonal (torch.tril).": ones.triu(),
        "Your mask excludes the diagonal: every position may also attend to itself, so keep the diagonal "
        "(torch.tril(..., diagonal=0), not diagonal=-1).": ones.tril(-1),
        "Your mask is inverted: True where a key is hidden (nn.MultiheadAttention's attn_mask convention). Here "
        "True means 'may attend': True on and below the diagonal.": ones.triu(1),
        "Your mask is all True: nothing is hidden. Query i may only see keys 0..i (torch.tril).": ones,
    }


def check_causal_mask(fn: Callable[[int], Tensor]) -> Verdict:
    """Check ``fn(seq_len) -> (seq_len, seq_len)`` bool mask, True where query i may attend to key j (j <= i).

    Tried with ``seq_len`` 5, 1 and 8. Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one
    while ``fn`` raises NotImplementedError; otherwise raises :class:`ExerciseFailed` naming the
    mistake: the additive float mask (0 where allowed, -inf where hidden), upright or inverted; the
    upper triangle, the diagonal left out, the inverted convention (True = hidden), all True, or a
    float/int dtype instead of ``torch.bool``.
    """
    name = "causal_mask"
    for seq_len in (5, 1, 8):
        got = _call(name, fn, seq_len)
        if got is NOT_IMPLEMENTED:
            return pending(name)
        expected = _causal_mask(seq_len)
        expect_tensor(f"{name}({seq_len})", got, expected.shape)
        if got.is_floating_point() and (got != 0).any() and bool((got[got != 0] <= -1e4).all()):
            # an additive mask M: 0 where allowed, -inf (or -1e9) where hidden; a bool reading would invert it
            allowed = got == 0
            if torch.equal(allowed, expected):
                fail(f"{name}({seq_len}) returned the additive mask M, 0 on and below the diagonal and -inf above "
                     f"it: the M of the formula softmax(QK^T / sqrt(d_k) + M), and the format of "
                     f"nn.Transformer.generate_square_subsequent_mask. Here the mask is bool, True = may attend "
                     f"(what masked_fill and tl.scaled_dot_product_attention take): "
                     f"torch.ones(seq_len, seq_len, dtype=torch.bool).tril(), which is M == 0.")
            fail(f"{name}({seq_len}) returned a float mask of 0 and -inf (or a large negative number), an additive "
                 f"mask M (0 = may attend, -inf = hidden), and its 0 entries are not the causal pattern. Here the mask is bool, True = "
                 f"may attend: True where j <= i, torch.ones(seq_len, seq_len, dtype=torch.bool).tril(). "
                 f"Yours, as may-attend (M == 0):\n{allowed.int()}")
        pattern = got != 0  # the True/False pattern, whatever the dtype
        if not torch.equal(pattern, expected):
            for hint, wrong in causal_mask_mistakes(seq_len).items():
                if torch.equal(pattern, wrong):
                    fail(f"{name}({seq_len}) is not right yet. {hint}")
            fail(f"{name}({seq_len}) gives the wrong pattern: entry [i, j] must be True exactly when j <= i. "
                 f"Yours:\n{pattern.int()}")
        if got.dtype != torch.bool:
            fail(f"{name}({seq_len}) has the right pattern but dtype {got.dtype}: masks are bool (True = may attend), "
                 f"as masked_fill and F.scaled_dot_product_attention expect. Create it with dtype=torch.bool, or "
                 f"call .bool().")
    return correct("Your causal mask is tl.causal_mask: True on and below the diagonal, dtype torch.bool.")


# --------------------------------------------------------------------------------- head reshapes

BATCH, SEQ, N_HEADS, D_HEAD = 2, 3, 4, 5  # all different, so every wrong layout has a wrong shape or order


def heads_input(seed: int = 11) -> Tensor:
    """``(batch=2, seq=3, d_model=20)``: each entry is distinct."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, SEQ, N_HEADS * D_HEAD, generator=g)


def split_heads_mistakes(x: Tensor, n_heads: int) -> dict[str, Tensor]:
    """What common mistakes in ``split_heads`` give, keyed by the hint that names each one."""
    b, s, d = x.shape
    d_head = d // n_heads
    return {
        "You reshaped (batch, seq, d_model) straight to (batch, n_heads, seq, d_head) without a transpose: that "
        "cuts the memory in the wrong place and mixes positions into heads. Reshape to (batch, seq, n_heads, "
        "d_head) first, then .transpose(1, 2).": x.reshape(b, n_heads, s, d_head),
        "You split d_model as (d_head, n_heads): each head then gets every n_heads-th feature. Head h owns the "
        "contiguous block of features h*d_head:(h+1)*d_head, so reshape to (batch, seq, n_heads, d_head).":
            x.reshape(b, s, d_head, n_heads).permute(0, 3, 1, 2),
    }


def check_split_heads(fn: Callable[[Tensor, int], Tensor]) -> Verdict:
    """Check ``fn(x, n_heads)``: ``(batch, seq, d_model) -> (batch, n_heads, seq, d_head)``.

    Head ``h`` gets features ``h*d_head : (h+1)*d_head`` of every position, as in
    ``tl.MultiHeadAttention`` (``rearrange(x, "b s (h d) -> b h s d")``). Prints ``Correct!`` and returns
    True when right; returns a false one while ``fn`` raises NotImplementedError; otherwise raises
    :class:`ExerciseFailed` naming the mistake: a reshape without the transpose, the transpose
    forgotten (shape ``(batch, seq, n_heads, d_head)``), or ``d_model`` split as ``(d_head, n_heads)``
    (recognised by its values after a permute, or by its shape ``(batch, d_head, seq, n_heads)`` or
    ``(batch, seq, d_head, n_heads)``).
    """
    name = "split_heads"
    x = heads_input()
    got = _call(name, fn, x, N_HEADS)
    if got is NOT_IMPLEMENTED:
        return pending(name)
    expected = rearrange(x, "b s (h d) -> b h s d", h=N_HEADS)
    if isinstance(got, Tensor) and tuple(got.shape) == (BATCH, SEQ, N_HEADS, D_HEAD):
        fail(f"{name} returned shape {tuple(got.shape)} = (batch, seq, n_heads, d_head): you still need to swap "
             f"the seq and head axes, .transpose(1, 2), to get (batch, n_heads, seq, d_head) = "
             f"{tuple(expected.shape)}.")
    order_hint = ("You split d_model as (d_head, n_heads): each head then gets every n_heads-th feature. Head h owns "
                  "the contiguous block of features h*d_head:(h+1)*d_head, so view as (batch, seq, n_heads, d_head), "
                  "then .transpose(1, 2).")
    wrong_order = {(BATCH, D_HEAD, SEQ, N_HEADS): "(batch, d_head, seq, n_heads)",
                   (BATCH, SEQ, D_HEAD, N_HEADS): "(batch, seq, d_head, n_heads)"}
    if isinstance(got, Tensor) and tuple(got.shape) in wrong_order:
        fail(f"{name} returned shape {tuple(got.shape)} = {wrong_order[tuple(got.shape)]}, expected (batch, n_heads, "
             f"seq, d_head) = {tuple(expected.shape)}. {order_hint}")
    expect_tensor(name, got, expected.shape)
    if not torch.equal(got, expected):
        diagnose(name, got, expected, split_heads_mistakes(x, N_HEADS))
    return correct("Your split_heads matches tl.MultiHeadAttention's rearrange(x, 'b s (h d) -> b h s d').")


def merge_heads_mistakes(x: Tensor) -> dict[str, Tensor]:
    """What common mistakes in ``merge_heads`` give, keyed by the hint that names each one."""
    b, h, s, d = x.shape
    return {
        "You reshaped (batch, n_heads, seq, d_head) straight to (batch, seq, d_model) without a transpose: the "
        "result mixes positions. Swap the head and seq axes first, .transpose(1, 2), then reshape.":
            x.reshape(b, s, h * d),
        "You concatenated in the order (d_head, n_heads): the features of the heads are interleaved. Head h must "
        "fill features h*d_head:(h+1)*d_head: transpose(1, 2) to (batch, seq, n_heads, d_head), then reshape.":
            x.permute(0, 2, 3, 1).reshape(b, s, d * h),
    }


def check_merge_heads(fn: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``fn(x)``: ``(batch, n_heads, seq, d_head) -> (batch, seq, n_heads * d_head)``, the inverse of split_heads.

    Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one while ``fn`` raises
    NotImplementedError; otherwise raises :class:`ExerciseFailed` naming the mistake: a reshape
    without the transpose, heads interleaved, or ``.view`` on the non-contiguous transposed tensor.
    """
    name = "merge_heads"
    # contiguous, like the output of weights @ v: so .transpose(1, 2).view(...) fails as it would in the model
    x = rearrange(heads_input(seed=12), "b s (h d) -> b h s d", h=N_HEADS).contiguous()
    try:
        got = _call(name, fn, x)
    except ExerciseFailed as e:
        if "view size is not compatible" in str(e) or "contiguous" in str(e):
            fail(f"{name}: .view() cannot reshape a transposed tensor, whose memory is no longer in row order. "
                 f"Use .reshape(...), or .contiguous().view(...).")
        raise
    if got is NOT_IMPLEMENTED:
        return pending(name)
    expected = rearrange(x, "b h s d -> b s (h d)")
    expect_tensor(name, got, expected.shape)
    if not torch.equal(got, expected):
        diagnose(name, got, expected, merge_heads_mistakes(x))
    return correct("Your merge_heads matches tl.MultiHeadAttention's rearrange(out, 'b h s d -> b s (h d)'), "
                   "and undoes split_heads.")
