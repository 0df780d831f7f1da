"""Exercises for chapter 7, *GPT-2* (``book/07_gpt2.ipynb``).

* :func:`check_lm_loss`: ``lm_loss(logits, input_ids)``, the causal-LM loss of a model's output
  on its own input (the shift happens inside, as in Hugging Face's ``labels=input_ids``)
* :func:`check_top_k_probs`: ``top_k_probs(logits, k)``, the next-token distribution restricted
  to the ``k`` most likely tokens
* :func:`check_top_p_probs`: ``top_p_probs(logits, p)``, nucleus sampling's distribution: the
  smallest set of most likely tokens whose probability reaches ``p``
* :func:`check_causal_attention`: ``causal_attention(scores)``, the causal attention weights of the
  last ``seq_q`` of ``seq_k`` positions (the others come from a KV cache)
* :func:`check_cached_attention_step`: ``cached_attention_step(attn, x_new, cache)``, one generation
  step of causal attention with a KV cache the reader writes (project the new token, append its key
  and value, attend over the cache)

The inputs are chosen so that every common mistake gives a different answer. For the loss:
``batch=3, seq=8, vocab=7`` (``seq - 1 == vocab``, so forgetting to flatten runs without error and
gives a recognisable wrong number), logits of a few units, and token ids whose next, current and
previous tokens differ. For the filters: 10 logits with distinct values, not in sorted order (so
"the first k tokens" is not "the k most likely"), and thresholds ``p`` that no partial sum of the
probabilities comes close to (so off-by-one sets differ clearly). For the KV cache: batch 2, 3 heads
of width 4 and 5 tokens, all different, so that a cache appended on the wrong dimension has a shape
that names it, and weights large enough that attention is far from uniform.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from ..generation import next_token_probs
from ..layers.attention import MultiHeadAttention
from ..layers.kv_cache import LayerKVCache
from ..layers.masks import causal_mask as _causal_mask
from ..layers.positions import RotaryEmbedding
from ..losses import causal_lm_loss
from ._checking import (NOT_IMPLEMENTED, ExerciseFailed, Verdict, attempt, call, close, correct, expect_tensor, fail,
                        pending)


def _match(name: str, got: Tensor, expected: Tensor, mistakes: list[tuple[str, Tensor]], what: str) -> None:
    """Fail with the hint of the first mistake whose answer ``got`` equals, or with the values."""
    for hint, wrong in mistakes:
        if close(got, wrong):
            fail(f"{name} is not right yet. {hint}")
    fail(f"{name} gives the wrong {what}: expected {_fmt(expected)}, got {_fmt(got)}. "
         f"Check each step against the text.")


def _flat(mistakes: dict) -> list[tuple[str, Tensor]]:
    """``{hint: answer or [answers]}`` as ``(hint, answer)`` pairs, one per answer."""
    return [(hint, w) for hint, wrong in mistakes.items() for w in (wrong if isinstance(wrong, list) else [wrong])]


def _fmt(t: Tensor) -> str:
    t = t.detach().float()
    return f"{t.item():.4f}" if t.numel() == 1 else "[" + ", ".join(f"{v:.3f}" for v in t.tolist()) + "]"


# ----------------------------------------------------------------------------------- the LM loss

BATCH, SEQ, VOCAB = 3, 8, 7  # SEQ - 1 == VOCAB: an unflattened F.cross_entropy runs (and is wrong)


def lm_loss_inputs(seed: int = 0) -> tuple[Tensor, Tensor]:
    """``logits (BATCH, SEQ, VOCAB)`` of a few units and ``input_ids (BATCH, SEQ)`` with no token repeated in a row."""
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(BATCH, SEQ, VOCAB, generator=g)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    for t in range(1, SEQ):  # next != current, so "no shift" and "shifted" differ at every position
        same = ids[:, t] == ids[:, t - 1]
        ids[same, t] = (ids[same, t] + 1) % VOCAB
    return logits, ids


def lm_loss_mistakes(logits: Tensor, ids: Tensor) -> list[tuple[str, Tensor]]:
    """``(hint, the loss that mistake gives)`` for the common mistakes."""
    vocab = logits.shape[-1]
    pred, target = logits[:, :-1], ids[:, 1:]  # the right pairing: position t predicts token t + 1

    def ce(lg: Tensor, tg: Tensor, **kw) -> Tensor:
        return F.cross_entropy(lg.reshape(-1, vocab), tg.reshape(-1), **kw)

    logp = pred.log_softmax(-1).gather(-1, target[..., None])[..., 0]  # (batch, seq - 1)
    p = logp.exp()
    no_shift = ("No shift: you compared the logits at position t with the token *at* t, so the model is scored "
                "on copying its input. The logits at position t predict the *next* token: pair "
                "logits[:, :-1] with input_ids[:, 1:].")
    mistakes = {
        no_shift: [ce(logits, ids), ce(logits[:, :-1], ids[:, :-1]), ce(logits[:, 1:], ids[:, 1:])],
        "Shifted the wrong way: you paired the logits at position t with the token at t - 1 (logits[:, 1:] with "
        "input_ids[:, :-1]), i.e. predicting the previous token. Position t predicts token t + 1: "
        "logits[:, :-1] with input_ids[:, 1:].": ce(logits[:, 1:], ids[:, :-1]),
        "You passed (batch, seq - 1, vocab) logits to F.cross_entropy without flattening: it reads dim 1 as the "
        "classes, so here it treated the *positions* as the vocabulary (it only ran because seq - 1 == vocab). "
        "Flatten both: F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1)).":
            F.cross_entropy(pred, target),
        "Your logits and targets are flattened in different orders (one batch-major, the other position-major), "
        "so each prediction is scored against another position's token. Slice both the same way and flatten "
        "both with .reshape(-1, ...), without transposing either.": [
            ce(pred.transpose(0, 1), target),   # logits position-major, targets batch-major
            ce(pred, target.transpose(0, 1)),   # logits batch-major, targets position-major (target.T)
        ],
        "You summed the losses over all positions: the loss is the *mean* over the batch x (seq - 1) "
        "predictions (F.cross_entropy's default reduction='mean').": ce(pred, target, reduction="sum"),
        "You summed over the positions and averaged over the batch: average over every prediction, batch and "
        "positions alike.": -logp.sum(-1).mean(),
        "You used the target's probability p instead of its log-probability (F.nll_loss on softmax outputs gives "
        "-mean(p)): the loss is -mean(log p). Use F.cross_entropy on the raw logits, or F.nll_loss on "
        "log_softmax.": -p.mean(),
        "You applied the softmax twice: F.cross_entropy takes raw *logits* (it applies log_softmax itself), "
        "not probabilities.": ce(pred.softmax(-1), target),
        "You used the raw logits as log-probabilities (F.nll_loss on logits): normalise first with "
        "log_softmax, or use F.cross_entropy, which does it for you.": -pred.gather(-1, target[..., None]).mean(),
        "Wrong sign: the loss is minus the mean log-probability of the targets, a positive number.": logp.mean(),
    }
    return _flat(mistakes)


def check_lm_loss(fn: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``fn(logits, input_ids) -> scalar`` causal-LM loss.

    ``logits`` is ``(batch, seq, vocab)``, the model's output for ``input_ids`` ``(batch, seq)``. The
    logits at position ``t`` predict token ``t + 1``, so the answer is the mean cross-entropy of
    ``logits[:, :-1]`` against ``input_ids[:, 1:]``: ``tl.causal_lm_loss(logits[:, :-1], input_ids[:, 1:])``.

    Two calls on different inputs (``batch=3, seq=8, vocab=7``). Prints ``Correct!`` and returns a true ``Verdict``
    when right; returns a false one while ``fn`` raises NotImplementedError; otherwise raises
    :class:`ExerciseFailed` naming the mistake: no shift (predicting the current token), the shift the
    wrong way (the previous token), the logits passed to ``F.cross_entropy`` unflattened, logits and
    targets flattened in different orders, a sum instead of a mean (over everything, or over the
    positions), probabilities instead of log-probabilities, a double softmax, raw logits as
    log-probabilities, or the wrong sign. A per-position ``(batch, seq - 1)`` answer is named too.
    """
    name = "lm_loss"
    for seed in (0, 1):
        logits, ids = lm_loss_inputs(seed)
        got = call(name, fn, logits, ids, hint="logits is (batch, seq, vocab), input_ids (batch, seq): slice "
                    "logits[:, :-1] and input_ids[:, 1:], flatten both, then F.cross_entropy.")
        if got is NOT_IMPLEMENTED:
            return pending(name)
        if isinstance(got, Tensor) and got.dim() > 0 and got.numel() > 1:
            fail(f"{name} should return one number (a 0-dim tensor), but it returned shape {tuple(got.shape)}: "
                 f"{'one loss per prediction' if got.numel() == BATCH * (SEQ - 1) else 'several numbers'}. "
                 f"Average over every prediction (F.cross_entropy's default reduction='mean').")
        if isinstance(got, Tensor) and got.shape == (1,):
            got = got.reshape(())
        expected = causal_lm_loss(logits[:, :-1], ids[:, 1:])
        expect_tensor(name, got, expected.shape)
        if not close(got, expected):
            _match(name, got, expected, lm_loss_mistakes(logits, ids), "loss")
    return correct("Your loss is tl.causal_lm_loss on logits[:, :-1] and input_ids[:, 1:]: every position is "
                   "scored on the token that follows it.")


# --------------------------------------------------------------------------- top-k and top-p

# 10 distinct logits, deliberately not sorted; their softmax is (to 3 decimals), by token:
# 0.015 0.167 0.008 0.337 0.046 0.124 0.003 0.204 0.062 0.034
FILTER_LOGITS = torch.tensor([-0.4, 2.0, -1.0, 2.7, 0.7, 1.7, -2.0, 2.2, 1.0, 0.4])


def filter_inputs() -> Tensor:
    """The logits the top-k and top-p checks use: ``(vocab=10,)``, distinct, unsorted."""
    return FILTER_LOGITS.clone()


def _keep(probs: Tensor, keep: Tensor, renormalise: bool = True) -> Tensor:
    out = probs.masked_fill(~keep, 0.0)
    return out / out.sum() if renormalise else out


def _first(order: Tensor, n: int, size: int) -> Tensor:
    """A bool mask of the tokens ``order[:n]``."""
    keep = torch.zeros(size, dtype=torch.bool)
    keep[order[: max(n, 0)]] = True
    return keep


def top_k_mistakes(logits: Tensor, k: int) -> list[tuple[str, Tensor]]:
    """``(hint, the distribution that mistake gives)`` for the common top-k mistakes."""
    probs, n = logits.softmax(-1), logits.numel()
    desc = torch.argsort(logits, descending=True)
    vocab_order = torch.arange(n)
    return _flat({
        f"You kept {k - 1} tokens, one too few: keep the k = {k} most likely (torch.topk(logits, k), and keep "
        f"every token whose logit is >= the k-th largest, values[-1]).": _keep(probs, _first(desc, k - 1, n)),
        f"You kept {k + 1} tokens, one too many: the k-th largest logit is torch.topk(logits, k).values[-1] "
        f"(index k - 1), and tokens strictly below it go.": _keep(probs, _first(desc, k + 1, n)),
        "The right tokens, but you forgot to renormalise: after zeroing the others, divide by the sum of what "
        "is left (or take the softmax of the filtered logits, with -inf for the dropped ones), so the "
        "probabilities sum to 1.": _keep(probs, _first(desc, k, n), renormalise=False),
        "You kept the first k tokens of the vocabulary, not the k most likely: find them by sorting "
        "(torch.topk or torch.sort(..., descending=True)).": _keep(probs, _first(vocab_order, k, n)),
        "You kept the k *least* likely tokens: sort in descending order (torch.topk does).":
            _keep(probs, _first(desc.flip(0), k, n)),
        "You kept the k most likely tokens but gave them equal probability: keep their softmax probabilities, "
        "renormalised.": _first(desc, k, n).float() / k,
        "You filled the dropped logits with 0 instead of -inf before the softmax: a logit of 0 still gets "
        "weight exp(0) = 1, so every dropped token keeps a probability as large as a token scored 0. Fill "
        "them with float('-inf'): exp(-inf) = 0.": logits.masked_fill(~_first(desc, k, n), 0.0).softmax(-1),
    })


def top_p_mistakes(logits: Tensor, p: float) -> list[tuple[str, Tensor]]:
    """``(hint, the distribution that mistake gives)`` for the common top-p mistakes."""
    probs, n = logits.softmax(-1), logits.numel()
    desc = torch.argsort(logits, descending=True)
    cum = probs[desc].cumsum(0)
    m = int((cum < p).sum()) + 1  # the right number of tokens: up to and including the one that crosses p
    vocab_cum = probs.cumsum(0)
    unsorted = vocab_cum - probs < p  # the nucleus rule applied in vocabulary order
    asc = desc.flip(0)
    return _flat({
        f"You left out the token that crosses the threshold: the nucleus is the *smallest* set whose probability "
        f"reaches p, so it includes the token that takes the running sum past p = {p} (here you kept {m - 1} "
        f"tokens instead of {m}). Keep a token while the probability of the tokens ranked above it is < p.":
            _keep(probs, _first(desc, m - 1, n)),
        f"You kept one token too many ({m + 1} instead of {m}): stop at the token whose probability takes the "
        f"running sum to p or beyond.": _keep(probs, _first(desc, m + 1, n)),
        "The right tokens, but you forgot to renormalise: divide the kept probabilities by their sum, so they "
        "sum to 1.": _keep(probs, _first(desc, m, n), renormalise=False),
        "You accumulated the probabilities in vocabulary order, without sorting: the nucleus is made of the "
        "*most likely* tokens, so sort them in descending order before the cumulative sum "
        "(torch.sort(probs, descending=True)), then map the kept ones back to their token ids.":
            _keep(probs, unsorted),
        "You accumulated the probabilities in vocabulary order, without sorting, and left out the crossing "
        "token: sort them in descending order before the cumulative sum, and keep the token that crosses p.":
            _keep(probs, vocab_cum < p),
        "You sorted in ascending order, so you kept the *least* likely tokens: sort with descending=True.":
            _keep(probs, _first(asc, int((probs[asc].cumsum(0) < p).sum()) + 1, n)),
        "You kept the tokens in sorted order but did not map them back: the answer must be indexed by token id, "
        "as the input was (scatter the sorted values back with the permutation torch.sort returned).":
            _keep(probs[desc], torch.arange(n) < m),
        "You mapped the sorted answer back by indexing with the permutation (keep_sorted[order], or "
        "kept_sorted[order]) instead of scattering: order[j] is the token at sorted position j, so indexing "
        "with it applies the permutation a second time. Scatter back: torch.zeros_like(keep_sorted)"
        ".scatter(0, order, keep_sorted), or index with the inverse permutation, order.argsort().":
            _gathered_back(probs, desc, m),
    })


def _gathered_back(probs: Tensor, desc: Tensor, m: int) -> list[Tensor]:
    """Top-p's right sorted answer, indexed with the permutation instead of scattered back (two ways)."""
    n = probs.numel()
    keep_sorted = torch.arange(n) < m
    kept_sorted = _keep(probs[desc], keep_sorted)
    return [_keep(probs, keep_sorted[desc]), kept_sorted[desc]]


def _check_filter(name: str, got, logits: Tensor, expected: Tensor, mistakes: list[tuple[str, Tensor]], case: str) -> None:
    if isinstance(got, Tensor) and got.dim() == 1 and got.shape == expected.shape and torch.isinf(got).any():
        fail(f"{name}({case}) returned values with -inf: these look like filtered *logits*. Return probabilities: "
             f"the softmax of the filtered logits (exactly 0 for the dropped tokens, summing to 1).")
    expect_tensor(f"{name}({case})", got, expected.shape)
    if not close(got, expected, atol=1e-6):
        if torch.isnan(got).any():
            fail(f"{name}({case}) returned NaN: did you take the softmax of a row whose logits are all -inf, "
                 f"i.e. drop every token?")
        _match(f"{name}({case})", got, expected, mistakes, "probabilities")


def check_top_k_probs(fn: Callable[[Tensor, int], Tensor]) -> Verdict:
    """Check ``fn(logits, k) -> probs``: the softmax of ``logits`` ``(vocab,)`` restricted to the ``k`` largest.

    The answer is ``(vocab,)``: the ``k`` most likely tokens keep their probabilities, renormalised to
    sum to 1, every other token gets exactly 0 (``tl.next_token_probs(logits[None], top_k=k)[0]``).
    Tried with ``k`` = 3, 1 and 10 on 10 distinct, unsorted logits. Prints ``Correct!`` and returns a true ``Verdict``
    when right; returns a false one while ``fn`` raises NotImplementedError; otherwise raises
    :class:`ExerciseFailed` naming the mistake: ``k - 1`` or ``k + 1`` tokens kept, no renormalisation,
    the first ``k`` tokens of the vocabulary (no sorting), the ``k`` least likely, equal probabilities,
    the dropped logits filled with 0 instead of ``-inf``, or filtered logits returned instead of
    probabilities.
    """
    name = "top_k_probs"
    for k in (3, 1, 10):
        logits = filter_inputs()
        got = call(name, fn, logits, k, hint="Find the k-th largest logit with torch.topk(logits, k), set the "
                    "logits below it to -inf, then softmax.")
        if got is NOT_IMPLEMENTED:
            return pending(name)
        expected = next_token_probs(logits[None], top_k=k)[0]
        _check_filter(name, got, logits, expected, top_k_mistakes(logits, k), f"logits, k={k}")
    return correct("Your top-k distribution matches tl.next_token_probs(logits, top_k=k): the k most likely tokens, "
                   "renormalised, and exactly 0 elsewhere.")


# partial sums of the probabilities, sorted: .337 .541 .709 .833 .894 ...; in vocabulary order:
# .015 .182 .191 .528 .573 .697 .700 .905 ...: every p below is at least 0.03 from all of them
TOP_P_CASES = (0.65, 0.8, 0.45)


def check_top_p_probs(fn: Callable[[Tensor, float], Tensor]) -> Verdict:
    """Check ``fn(logits, p) -> probs``: nucleus (top-p) filtering of the softmax of ``logits`` ``(vocab,)``.

    Keep the smallest set of most likely tokens whose probabilities sum to at least ``p`` (the token
    that takes the running sum to ``p`` or past it is in), renormalise, and give every other token
    exactly 0 (``tl.next_token_probs(logits[None], top_p=p)[0]``). Tried with ``p`` = 0.65, 0.8 and 0.45
    on 10 distinct, unsorted logits. Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one
    while ``fn`` raises NotImplementedError; otherwise raises :class:`ExerciseFailed` naming the
    mistake: the crossing token left out, one token too many, no renormalisation, the cumulative sum
    taken in vocabulary order (no sorting; with or without the crossing token), an ascending sort,
    the answer left in sorted order, the answer mapped back by indexing with the sort's permutation
    instead of scattering, or filtered logits returned instead of probabilities.
    """
    name = "top_p_probs"
    for p in TOP_P_CASES:
        logits = filter_inputs()
        got = call(name, fn, logits, p, hint="Sort the probabilities in descending order, take the cumulative "
                    "sum, keep a token while the sum of the tokens ranked above it is < p, then map back and "
                    "renormalise.")
        if got is NOT_IMPLEMENTED:
            return pending(name)
        expected = next_token_probs(logits[None], top_p=p)[0]
        _check_filter(name, got, logits, expected, top_p_mistakes(logits, p), f"logits, p={p}")
    return correct("Your nucleus matches tl.next_token_probs(logits, top_p=p): the fewest most likely tokens whose "
                   "probability reaches p, renormalised.")


# ------------------------------------------------------------------- causal attention, with a KV cache

# (seq_q, seq_k): a training pass (no cache), one generated token after 5 cached ones, and 3 new
# tokens after 4 cached ones. The first makes the usual masking mistakes visible, the last two a
# mask that ignores the cache.
CAUSAL_CASES = ((5, 5), (1, 6), (3, 7))


def causal_scores(seq_q: int, seq_k: int, seed: int = 0) -> Tensor:
    """``(batch=2, n_heads=3, seq_q, seq_k)`` attention scores of a few units, all distinct."""
    g = torch.Generator().manual_seed(seed + 10 * seq_q + seq_k)
    return 1.5 * torch.randn(2, 3, seq_q, seq_k, generator=g)


def causal_attention_mistakes(scores: Tensor) -> list[tuple[str, Tensor]]:
    """``(hint, the weights that mistake gives)`` for the common mistakes in causal attention weights.

    A wrong mask is tried with both fills a reader might use, ``-inf`` and a large finite number
    (``-1e9``, ``torch.finfo(...).min``): they differ only where a query is left with no key at all.
    """
    seq_q, seq_k = scores.shape[-2:]
    offset = seq_k - seq_q  # the number of cached keys before the first query
    ones = torch.ones(seq_q, seq_k, dtype=torch.bool)
    mask = ones.tril(offset)

    def attend(keep: Tensor) -> list[Tensor]:
        """The softmax with the keys outside ``keep`` hidden: filled with -inf, and with -1e9."""
        return [scores.masked_fill(~keep, fill).softmax(-1) for fill in (float("-inf"), -1e9)]

    mistakes = [
        ("You set the hidden scores to 0 instead of -inf (masked_fill(~mask, 0), or scores * mask): a score of 0 "
         "still gets weight exp(0) = 1 in the softmax, so every query still attends to the future keys, as much "
         "as to a key it scores 0. Fill the hidden scores with float('-inf'): exp(-inf) = 0.",
         [scores.masked_fill(~mask, 0.0).softmax(-1)]),
        ("You applied the mask after the softmax: zeroing the future weights leaves each row summing to less "
         "than 1 (the softmax had already spread probability over the future keys). Mask the *scores* with "
         "-inf, then take the softmax, so the visible keys share all of the weight.",
         [scores.softmax(-1).masked_fill(~mask, 0.0)]),
        ("Your mask is off by one: it hides the diagonal, so no position may attend to itself (tril with a "
         "diagonal one too low; the first query then sees no key at all, and its row is NaN with -inf or uniform "
         "with a finite fill). Query i sits at position seq_k - seq_q + i and may see keys 0 .. "
         "seq_k - seq_q + i, itself included: torch.tril(..., diagonal=seq_k - seq_q).",
         attend(ones.tril(offset - 1))),
        ("Your mask is off by one the other way: every query also sees the next key, one step into the future "
         "(tril with a diagonal one too high). Query i may see keys 0 .. seq_k - seq_q + i: "
         "torch.tril(..., diagonal=seq_k - seq_q).",
         attend(ones.tril(offset + 1))),
        ("Your mask is inverted: you hid the keys a query may see (masked_fill(mask, -inf)) and kept the "
         "future. With True = may attend, hide where the mask is False: scores.masked_fill(~mask, float('-inf')).",
         attend(~mask)),
        ("Your mask is the upper triangle: query i sees keys j >= i, the future. A causal mask is True on and "
         "below the diagonal (torch.tril).",
         attend(ones.triu(offset))),
        ("Your mask ignores the cache: with seq_q < seq_k the queries are the *last* seq_q positions, so query i "
         "is at position seq_k - seq_q + i and sees the cached keys too. torch.tril(ones(seq_q, seq_k)) lets "
         "query i see only keys 0 .. i; shift the diagonal: torch.tril(..., diagonal=seq_k - seq_q) "
         "(tl.causal_mask(seq_q, seq_k)).",
         attend(ones.tril(0))),
        ("You took the softmax over the queries (dim=-2): each key's weights sum to 1 instead of each query's. "
         "The softmax runs over the keys, the last dimension.",
         [scores.masked_fill(~mask, fill).softmax(-2) for fill in (float("-inf"), -1e9)]),
        ("You added the bool mask to the scores (True counts as +1, False as 0), which hides nothing. Use it to "
         "choose: scores.masked_fill(~mask, float('-inf')).", [(scores + mask).softmax(-1)]),
        ("You left out the mask: every query attends to every key, the future included.", [scores.softmax(-1)]),
    ]
    return [(hint, w) for hint, wrongs in mistakes for w in wrongs]


def _same_nan(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=1e-5, rtol=1e-4, equal_nan=True)


def check_causal_attention(fn: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``fn(scores) -> weights``: causal attention weights, with or without a KV cache.

    ``scores`` is ``(batch, n_heads, seq_q, seq_k)`` (already scaled by ``1/sqrt(d_head)``); the queries
    are the *last* ``seq_q`` of ``seq_k`` positions (the first ``seq_k - seq_q`` keys come from the
    cache), so query ``i`` may attend to keys ``0 .. seq_k - seq_q + i``. The answer is the softmax over
    the keys of the scores with every other key set to ``-inf``:
    ``scores.masked_fill(~tl.causal_mask(seq_q, seq_k), float('-inf')).softmax(-1)``.

    Tried with ``(seq_q, seq_k)`` = (5, 5), (1, 6) and (3, 7). Prints ``Correct!`` and returns a true
    ``Verdict`` when right; returns a false one while ``fn`` raises NotImplementedError; otherwise raises
    :class:`ExerciseFailed` naming the mistake: hidden scores set to 0 instead of -inf (or multiplied
    by the mask), the mask applied after the softmax, the mask off by one (diagonal hidden, or one key
    of the future shown), inverted, the upper triangle, the cache ignored (``tril`` without the
    offset), the softmax over the queries, the mask added, or no mask; and, for other wrong answers,
    NaN rows (a query that sees no key), rows that do not sum to 1, or weight left on a future key.
    """
    name = "causal_attention"
    for seq_q, seq_k in CAUSAL_CASES:
        scores = causal_scores(seq_q, seq_k)
        case = f"seq_q={seq_q}, seq_k={seq_k}" + ("" if seq_q == seq_k else f", {seq_k - seq_q} cached keys")
        got = call(name, fn, scores, hint="Build the mask with torch.tril(torch.ones(seq_q, seq_k, "
                   "dtype=torch.bool), diagonal=seq_k - seq_q), fill the hidden scores with float('-inf'), then "
                   "softmax over the last dim.")
        if got is NOT_IMPLEMENTED:
            return pending(name)
        mask = _causal_mask(seq_q, seq_k)
        expected = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        expect_tensor(f"{name} ({case})", got, expected.shape)
        if close(got, expected):
            continue
        for hint, wrong in causal_attention_mistakes(scores):
            if _same_nan(got, wrong):
                fail(f"{name} ({case}) is not right yet. {hint}")
        got = got.detach().float()
        if got.isnan().any():
            fail(f"{name} ({case}): your weights contain NaN. A softmax row of all -inf gives NaN: some query sees "
                 f"no key at all. Every query must see at least itself (key seq_k - seq_q + i for query i).")
        rows = got.sum(-1)
        if not torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
            fail(f"{name} ({case}): each query's weights must sum to 1 over the keys, but yours sum to "
                 f"{[round(v, 3) for v in rows.flatten()[:4].tolist()]}... Mask the scores with -inf *before* a "
                 f"softmax over the last dimension.")
        leak = got.masked_select(~mask.expand_as(got))
        if leak.numel() and leak.abs().max() > 1e-6:
            fail(f"{name} ({case}): some query puts weight {leak.abs().max().item():.3g} on a key after it. Query i "
                 f"may see keys 0 .. seq_k - seq_q + i only: fill the scores of the others with float('-inf').")
        err = (got - expected).abs().max().item()
        fail(f"{name} ({case}) gives the wrong weights (largest difference from the right answer: {err:.3g}), "
             f"though each row sums to 1 and no future key gets weight. Check that you take the softmax of the "
             f"scores you were given, unchanged apart from the mask.")
    return correct("Your weights match tl.causal_mask + softmax: every query sees itself and the keys before it, "
                   "cached ones included, and no key after it.")


# ------------------------------------------------------------------------------ the KV cache itself

# batch, n_heads, d_head and the number of tokens all differ, so a cache appended on the wrong
# dimension has a shape that says which one.
KV_BATCH, KV_N_HEADS, KV_D_HEAD, KV_TOKENS = 2, 3, 4, 5
KV_D_MODEL = KV_N_HEADS * KV_D_HEAD
# GPT-2 adds its positions to the embeddings, so its attention's rotate changes nothing; RoPE (chapter 5)
# turns q and k by their positions, which only the offset gives.
KV_CASES = ("GPT-2's attention", "attention with RoPE")
_DIMS = {0: "dim 0 (batch)", 1: "dim 1 (n_heads)", 3: "dim 3 (d_head)"}


class BareKVCache:
    """The state of a :class:`~transformer_lib.layers.kv_cache.LayerKVCache` without its ``update``.

    ``k``, ``v``: None before the first token, then ``(batch, n_heads, seq_cached, d_head)``. The
    reader's ``cached_attention_step`` extends them; writing that is the exercise.
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def __repr__(self) -> str:
        return f"BareKVCache(k={_shape(self.k)}, v={_shape(self.v)})"


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, Tensor) else repr(t) if t is None else type(t).__name__


def kv_cache_parts(rope: bool, seed: int = 0) -> tuple[MultiHeadAttention, Tensor]:
    """A causal ``MultiHeadAttention(d_model=12, n_heads=3)`` in eval mode, with RoPE or without, and
    ``x (batch=2, tokens=5, d_model=12)``. The weights are larger than PyTorch's default so that the
    attention weights are far from uniform and every mistake moves the output clearly."""
    g = torch.Generator().manual_seed(100 + seed + 10 * rope)
    with torch.random.fork_rng(devices=[]):  # nn.Linear's init draws from the global RNG: leave the reader's alone
        positions = RotaryEmbedding(KV_D_HEAD, n_positions=32) if rope else None
        attn = MultiHeadAttention(KV_D_MODEL, KV_N_HEADS, kind="causal", positions=positions).eval()
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    x = torch.randn(KV_BATCH, KV_TOKENS, KV_D_MODEL, generator=g)
    return attn, x


def _heads(attn: MultiHeadAttention, t: Tensor) -> Tensor:
    """``(batch, seq, n_heads * d_head) -> (batch, n_heads, seq, d_head)``."""
    return rearrange(t, "b s (h d) -> b h s d", h=attn.n_heads)


def _kv_parts(attn: MultiHeadAttention, x: Tensor, positions: list[int], query=None, key=None,
              value=None) -> tuple[Tensor, Tensor, Tensor]:
    """Every token's ``q, k, v`` ``(batch, n_heads, seq, d_head)``, token ``j``'s ``q`` and ``k`` turned as
    position ``positions[j]``; ``query``, ``key``, ``value``: the projections (W_Q, W_K, W_V unless given)."""
    same = lambda t: t  # noqa: E731 (a projection that leaves x as it is)
    project = {None: None, "x": same}
    q = _heads(attn, (project.get(query, query) or attn.W_Q)(x))
    k = _heads(attn, (project.get(key, key) or attn.W_K)(x))
    v = _heads(attn, (project.get(value, value) or attn.W_V)(x))
    turned = [attn.positions.rotate(q[:, :, j:j + 1], k[:, :, j:j + 1], p) for j, p in enumerate(positions)]
    return torch.cat([a for a, _ in turned], dim=2), torch.cat([b for _, b in turned], dim=2), v


def _readout(attn: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, scale: float | None = None,
             dim: int = -1, w_o: bool = True) -> Tensor:
    """One new query ``q (batch, n_heads, 1, d_head)`` attending over ``k``, ``v``: ``(batch, 1, d_model)``."""
    scale = math.sqrt(attn.d_head) if scale is None else scale
    weights = (q @ k.transpose(-2, -1) / scale).softmax(dim)
    out = rearrange(weights @ v, "b h s d -> b s (h d)")
    return attn.W_O(out) if w_o else out


def kv_cache_mistakes(attn: MultiHeadAttention, x: Tensor, t: int) -> list[tuple[str, Tensor]]:
    """``(hint, the output that mistake gives)`` at step ``t`` (the new token is ``x[:, t]``), each mistake
    recomputed from the prefix ``x[:, :t + 1]``."""
    n = t + 1
    xs = x[:, :n]
    Q, K, V = _kv_parts(attn, xs, list(range(n)))
    q, new = Q[:, :, t:], slice(t, n)

    def read(*args, **kw) -> Tensor:
        return _readout(attn, *args, **kw)

    batch, n_heads, d_head = x.shape[0], attn.n_heads, attn.d_head
    wrong_offsets = [[0] + [bad] * t for bad in (batch, n_heads, d_head)]  # len(cache.k), shape[1], shape[-1]
    Q0, K0, _ = _kv_parts(attn, xs, [0] * n)  # every token turned as position 0: no rotation at all
    mistakes = {
        "Your new token attends only to itself: the earlier positions are forgotten. Either the cache is "
        "overwritten (cache.k = k) instead of extended, or you attended with the new k and v instead of "
        "everything in the cache. Append: cache.k = torch.cat([cache.k, k], dim=2) (the same for v), then "
        "attend over cache.k and cache.v.": read(q, K[:, :, new], V[:, :, new]),
        "Your new token attends only to the first position: a causal mask built as if the query were the "
        "first position (torch.tril(torch.ones(1, seq_k))) hides every cached key but one. The new token is "
        "the *last* position and may see every key, so one new query needs no mask (or "
        "tl.causal_mask(1, seq_k), whose diagonal is shifted by the cache, exercise (d)).":
            read(q, K[:, :, :1], V[:, :, :1]),
        "Your new token attends to the earlier positions but not to itself: you attended before appending its "
        "k and v. Append first, then attend over the whole cache, the new key included.":
            read(q, K[:, :, :t], V[:, :, :t]) if t else [],
        "The new token's key and value are counted twice: after appending them to the cache you added them "
        "again (torch.cat([cache.k, k]) with the k already inside), so it attends to itself with double "
        "weight. After the append, cache.k and cache.v already hold the new token.":
            read(q, torch.cat([K, K[:, :, new]], dim=2), torch.cat([V, V[:, :, new]], dim=2)),
        "Keys and values are swapped: the scores must use the keys (q @ k^T, W_K) and the weighted sum the "
        "values (W_V). Check the order in which you project, store and read them.": [
            read(q, V, K),  # swapped where they are stored or read
            read(q, *_kv_parts(attn, xs, list(range(n)), key=attn.W_V, value=attn.W_K)[1:]),  # projected
        ],
        "You projected the new query with W_K: the query is W_Q x_new; the keys are W_K x.":
            read(_kv_parts(attn, xs, list(range(n)), query=attn.W_K)[0][:, :, t:], K, V),
        "Your cache holds the tokens' inputs x where it needs their projections: keys are W_K x and values "
        "W_V x (split into heads), computed once per token and then cached.": [
            read(q, *_kv_parts(attn, xs, list(range(n)), key="x", value="x")[1:]),
            read(q, K, _heads(attn, xs)),  # keys cached as x are named by the cache check, after token 1
        ],
        "You used the keys as the values too: the weighted sum reads the values, W_V x.": read(q, K, K),
        "You scaled the scores by 1/sqrt(d_model): each head's scores are scaled by 1/sqrt(d_head) "
        "(attn.d_head).": read(q, K, V, scale=math.sqrt(attn.d_model)),
        "You did not scale the scores: divide q @ k^T by sqrt(d_head) before the softmax.": read(q, K, V, scale=1.0),
        "You took the softmax over the queries (dim=-2): with one new query every weight is then 1. The "
        "softmax runs over the keys, the last dimension.": read(q, K, V, dim=-2),
        "You left out W_O: after merging the heads, attention's output goes through attn.W_O.":
            read(q, K, V, w_o=False),
        "The new token's q and k are not turned by its position (with RoPE): either you did not call "
        "attn.positions.rotate, or not with the cached positions (offset 0 every step), or you dropped its "
        "result (it returns the turned pair: q, k = attn.positions.rotate(q, k, offset)). offset is the "
        "number of positions already cached, cache.k.shape[2] (0 before the first token).":
            read(Q0[:, :, t:], K0, V),
        "Your RoPE offset is not the number of cached positions: len(cache.k) is the batch size, "
        "cache.k.shape[1] the number of heads and cache.k.shape[-1] d_head. The cached positions are along "
        "dim 2: offset = cache.k.shape[2] (0 before the first token).": [
            read(Qw[:, :, t:], Kw, V) for Qw, Kw, _ in (_kv_parts(attn, xs, p) for p in wrong_offsets)],
    }
    return _flat(mistakes)


def _cache_shape_problem(got: Tensor, right: tuple[int, ...], attn: MultiHeadAttention) -> str | None:
    """Why a cache tensor of shape ``got`` is not ``right = (batch, n_heads, n, d_head)``, where its shape says."""
    batch, n_heads, n, d_head = right
    got = tuple(got.shape)
    for dim, label in _DIMS.items():
        wrong = [batch, n_heads, 1, d_head]
        wrong[dim] *= n
        if n > 1 and got == tuple(wrong):
            return (f"You appended on {label}, not on the sequence: the cache is (batch, n_heads, seq, d_head), so a "
                    f"new token goes at the end of dim 2: torch.cat([cache.k, k], dim=2) (or dim=-2).")
    if got in ((batch, n, n_heads, d_head), (batch, 1, n_heads * n, d_head)):
        return ("Your cache is laid out (batch, seq, n_heads, d_head): after view(batch, 1, n_heads, d_head), "
                "move the heads before the sequence with .transpose(1, 2) (or split with rearrange(t, "
                "'b s (h d) -> b h s d', h=attn.n_heads)), then append on dim 2.")
    if got == (batch, n, attn.d_model):
        return None  # x itself or the keys before the split into heads: the values say which
    if len(got) == 4 and got[:2] == (batch, n_heads) and got[3] == d_head and got[2] != n:
        m = got[2]
        if m == 1:
            return ("It holds only the newest token: the cache is overwritten (cache.k = k) instead of extended. "
                    "Append: cache.k = torch.cat([cache.k, k], dim=2) (the same for v).")
        if m > n:
            return (f"It holds {m} positions after {n} tokens: each step must append the new token's k and v "
                    f"once (appending them twice, or the keys of a whole prefix again, duplicates positions).")
        return f"It holds {m} positions after {n} tokens: every token's k and v must stay in the cache."
    return None


def _cache_problem(attn: MultiHeadAttention, x: Tensor, t: int, cache, ref: LayerKVCache) -> str | None:
    """What is wrong with the reader's cache after token ``t``, or None when it equals ``ref``, the cache
    :class:`LayerKVCache` holds after the same tokens."""
    n = t + 1
    xs = x[:, :n]
    right_k, right_v = ref.k, ref.v
    for what in ("k", "v"):
        got = getattr(cache, what, None)
        if not isinstance(got, Tensor):
            return (f"After token {n}, cache.{what} is {_shape(got)}: your function must extend the cache it is "
                    f"given, cache.k and cache.v, (batch, n_heads, seq, d_head), as LayerKVCache.update does "
                    f"(the next step reads them there).")
    k, v = cache.k.detach(), cache.v.detach()
    for what, got, right in (("k", k, right_k), ("v", v, right_v)):
        if got.shape != right.shape:
            why = _cache_shape_problem(got, tuple(right.shape), attn)
            if why is None and got.shape == xs.shape:  # (batch, n, d_model): what was cached, not split
                if close(got, xs):
                    why = ("It holds the tokens' inputs x: project each token once, k = W_K x and v = W_V x "
                           "split into heads, and cache those, so that no step projects the earlier tokens again.")
                elif close(got, attn.W_Q(xs)):
                    why = "It holds the queries W_Q x: cache each token's key, W_K x, split into heads."
                else:
                    why = ("Keep it split into heads, as LayerKVCache does: rearrange(t, 'b s (h d) -> b h s d', "
                           "h=attn.n_heads) before you append.")
            return (f"After token {n}, cache.{what} has shape {tuple(got.shape)}, and it should be "
                    f"{tuple(right.shape)}, (batch, n_heads, seq, d_head). {why or ''}").rstrip()
    if close(k, right_k) and close(v, right_v):
        return None
    positions = list(range(n))
    Q, _, _ = _kv_parts(attn, xs, positions)
    _, plain_k, _ = _kv_parts(attn, xs, [0] * n)  # no rotation
    _, k_late, _ = _kv_parts(attn, xs, [p + 1 for p in positions])
    X = _heads(attn, xs)
    about_k = [
        ("the keys before their rotation: store them turned by their positions (q, k = attn.positions.rotate("
         "q, k, offset) before the append), as LayerKVCache does, so that no step turns the earlier keys again",
         plain_k),
        ("keys turned one position too far: offset is the number of positions cached *before* this token, "
         "cache.k.shape[2], so the first token is at position 0", k_late),
        ("the queries: cache each token's key, W_K x, not W_Q x", Q),
        ("the tokens' inputs x split into heads: cache the keys W_K x", X),
    ]
    # a wrong cache.v changes the output at once, where the output's own hints name it
    for what, got, right, candidates in (("k", k, right_k, about_k), ("v", v, right_v, [])):
        if close(got, right):
            continue
        for why, wrong in candidates:
            if close(got, wrong):
                return f"After token {n}, cache.{what} holds {why}."
        err = (got.float() - right.float()).abs().max().item()
        kind, each = ("keys", "W_K x, turned by its position") if what == "k" else ("values", "W_V x")
        return (f"After token {n}, cache.{what} holds other numbers than the {kind} of the tokens so far "
                f"(largest difference: {err:.3g}): it should equal what LayerKVCache holds, every token's "
                f"{each}, split into heads, in order along dim 2.")
    return None


def _exception_hint(e: Exception, attn: MultiHeadAttention, t: int, cache) -> str:
    text = str(e)
    if isinstance(e, AttributeError) and "update" in text:
        return ("This cache has no update method: writing it is the exercise. Set cache.k and cache.v yourself "
                "(the first token's k and v as they are, later ones appended with torch.cat(..., dim=2)).")
    if "LayerKVCache" in text:
        return ("attn(x_new, kv_cache=...) would let the library cache for you: write the step yourself with "
                "attn.W_Q, attn.W_K, attn.W_V and attn.W_O.")
    if t == 0 and "NoneType" in text:
        return ("Before the first token cache.k and cache.v are None: store the first token's k and v as they are "
                "(if cache.k is None: cache.k, cache.v = k, v) and append from the second token on.")
    right = (KV_BATCH, attn.n_heads, t + 1, attn.d_head)
    for what in ("k", "v"):
        got = getattr(cache, what, None)
        if isinstance(got, Tensor) and tuple(got.shape) != right:
            why = _cache_shape_problem(got, right, attn)
            if why:
                return f"cache.{what} has shape {tuple(got.shape)} after it, {right} expected. {why}"
    if t > 0:
        return (f"The earlier tokens ran: the error comes once the cache holds {t} position{'s' * (t > 1)}. Append "
                f"on the sequence dimension, dim 2 of (batch, n_heads, seq, d_head): torch.cat([cache.k, k], dim=2).")
    return ("x_new is (batch, 1, d_model): project it with attn.W_Q, attn.W_K, attn.W_V and split each into heads, "
            "(batch, n_heads, 1, d_head), with rearrange(t, 'b s (h d) -> b h s d', h=attn.n_heads).")


def _kv_step(name: str, fn: Callable, attn: MultiHeadAttention, x: Tensor, t: int, cache, case: str):
    """The reader's step on token ``t``; an exception becomes an ExerciseFailed naming the shapes it was called with."""
    x_new = x[:, t:t + 1].clone()  # a copy: the reader's code may change it in place
    called = (f"(called with attn=MultiHeadAttention(d_model={attn.d_model}, n_heads={attn.n_heads}, "
              f"d_head={attn.d_head}), x_new {tuple(x_new.shape)}, cache {cache!r}; {case}, token {t + 1} "
              f"of {KV_TOKENS})")
    try:
        return attempt(fn, attn, x_new, cache)
    except ExerciseFailed:
        raise
    except Exception as e:  # the reader's bug: report it with the shapes it was called with
        raise ExerciseFailed(f"{name} raised {type(e).__name__}: {e}\n{called}. "
                             f"{_exception_hint(e, attn, t, cache)}") from e


def check_cached_attention_step(fn: Callable[[MultiHeadAttention, Tensor, object], Tensor]) -> Verdict:
    """Check ``fn(attn, x_new, cache) -> (batch, 1, d_model)``: one generation step of causal attention with
    a KV cache the reader writes.

    ``attn`` is a causal :class:`~transformer_lib.MultiHeadAttention`, ``x_new`` the new token's input
    ``(batch, 1, d_model)``, ``cache`` a :class:`BareKVCache` (``cache.k``, ``cache.v``: None before the
    first token, then ``(batch, n_heads, seq_cached, d_head)``). The step projects ``x_new`` only, turns
    ``q`` and ``k`` with ``attn.positions.rotate(q, k, offset)`` (``offset``: the positions already cached),
    appends ``k`` and ``v`` on dim 2, attends with the new query over the whole cache and applies ``W_O``.

    A prompt of 5 tokens, batch 2, goes through token by token, twice: with GPT-2's attention (positions
    outside attention) and with RoPE. Every step's output is compared with ``attn`` run on the whole
    prefix without a cache, and the cache with what :class:`LayerKVCache` holds after the same tokens.
    Prints ``Correct!`` and returns a true ``Verdict`` when right; returns a false one while ``fn`` raises
    NotImplementedError; otherwise raises :class:`ExerciseFailed` naming the mistake: appended on the
    wrong dimension (batch, heads, d_head) or a (batch, seq, n_heads, d_head) layout, earlier positions
    forgotten (the cache overwritten, or only the new key used), a causal mask that lets the new token
    see only the first position, the new token left out of its own attention or counted twice, keys and
    values swapped, the query projected with ``W_K``, the queries or the inputs ``x`` cached instead of
    ``W_K x`` and ``W_V x`` (named from the output or from the cache), the values taken from the keys, a
    wrong scale, the softmax over the queries, ``W_O`` left out, no rotation or a RoPE offset read from
    the wrong dimension, keys turned one position too far, and a cache left empty, not split into heads,
    stored before its rotation, or holding duplicated positions. An exception names the shapes of the
    call and, where the cache it left says so, the dimension appended on.
    """
    name = "cached_attention_step"
    with torch.no_grad():
        for rope, case in zip((False, True), KV_CASES):
            attn, x = kv_cache_parts(rope)
            cache, unsure = BareKVCache(), []  # unsure: hints that matched together at an earlier step
            for t in range(KV_TOKENS):
                got = _kv_step(name, fn, attn, x, t, cache, case)
                if got is NOT_IMPLEMENTED:
                    return pending(name)
                n = t + 1
                where = f"{name} ({case}, token {n} of {KV_TOKENS}, batch {KV_BATCH})"
                expected = attn(x[:, :n])[:, -1:]  # the library without a cache: the whole prefix again
                ref = LayerKVCache()
                attn(x[:, :n], kv_cache=ref)  # the keys and values the library caches after these tokens
                if not isinstance(got, Tensor):
                    fail(f"{where} should return a torch.Tensor, but it returned {type(got).__name__}.")
                if got.shape != expected.shape:
                    shape = tuple(got.shape)
                    why = (" You returned the heads unmerged: merge them, rearrange(out, 'b h s d -> b s (h d)'), "
                           "and apply attn.W_O." if shape == (KV_BATCH, attn.n_heads, 1, attn.d_head) else
                           " You returned an output for every cached position: the step returns the new "
                           "token's only." if shape == (KV_BATCH, n, attn.d_model) and n > 1 else "")
                    problem = _cache_problem(attn, x, t, cache, ref)
                    fail(f"{where} should return shape {tuple(expected.shape)}, (batch, 1, d_model), but it "
                         f"returned {shape}.{why}" + (f" {problem}" if problem else ""))
                if not close(got, expected):
                    matches = list(dict.fromkeys(h for h, wrong in kv_cache_mistakes(attn, x, t) if close(got, wrong)))
                    narrowed = [h for h in matches if h in unsure] or matches
                    if len(narrowed) == 1 or (narrowed and t == KV_TOKENS - 1):
                        fail(f"{where} is not right yet. {narrowed[0]}")
                    if narrowed:  # two mistakes give this output at this step: the next token tells them apart
                        unsure = narrowed
                        continue
                    if unsure:
                        fail(f"{where} is not right yet. {unsure[0]}")
                    problem = _cache_problem(attn, x, t, cache, ref)
                    err = (got.float() - expected.float()).abs().max().item()
                    fail(f"{where} gives the wrong output (largest difference from attn on the whole prefix: "
                         f"{err:.3g}). " + (problem or "Check each step against MultiHeadAttention.forward: "
                         "project, split into heads, rotate, append, attend, merge, W_O."))
                if unsure:
                    fail(f"{where} is not right yet (at the token before this one). {unsure[0]}")
                problem = _cache_problem(attn, x, t, cache, ref)
                if problem:
                    fail(f"{where} gives the right output, but the cache is not right. {problem}")
    return correct(f"Token by token ({KV_TOKENS} tokens, batch {KV_BATCH}), your step gives what attention over "
                   f"the whole prefix gives, with GPT-2's attention and with RoPE, and your cache holds what "
                   f"LayerKVCache holds: each token projected once, its key turned by its position, appended on "
                   f"the sequence dimension.")
