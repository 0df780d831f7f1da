"""Exercises for chapter 7, *GPT-2* (``book/07_gpt2.ipynb``).

* :func:`check_lm_loss`: ``lm_loss(logits, input_ids)``, the causal-LM loss of a model's output
  on its own input (the shift happens inside, as in Hugging Face's ``labels=input_ids``)
* :func:`check_top_k_probs`: ``top_k_probs(logits, k)``, the next-token distribution restricted
  to the ``k`` most likely tokens
* :func:`check_top_p_probs`: ``top_p_probs(logits, p)``, nucleus sampling's distribution: the
  smallest set of most likely tokens whose probability reaches ``p``
* :func:`check_causal_attention`: ``causal_attention(scores)``, the causal attention weights of the
  last ``seq_q`` of ``seq_k`` positions (the others come from a KV cache)

The inputs are chosen so that every common mistake gives a different answer. For the loss:
``batch=3, seq=8, vocab=7`` (``seq - 1 == vocab``, so forgetting to flatten runs without error and
gives a recognisable wrong number), logits of a few units, and token ids whose next, current and
previous tokens differ. For the filters: 10 logits with distinct values, not in sorted order (so
"the first k tokens" is not "the k most likely"), and thresholds ``p`` that no partial sum of the
probabilities comes close to (so off-by-one sets differ clearly).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..generation import next_token_probs
from ..layers.masks import causal_mask as _causal_mask
from ..losses import causal_lm_loss
from ._checking import NOT_IMPLEMENTED, ExerciseFailed, call, close, correct, expect_tensor, fail, pending, Verdict


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
