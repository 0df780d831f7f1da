"""Exercises of chapter 1, *Tokens, embeddings and logits*: softmax, cross-entropy, one-hot lookup.

Each check calls the reader's function on inputs where every common mistake gives a different
answer, compares with PyTorch's own ``softmax`` / ``cross_entropy`` and the library's
:class:`~transformer_lib.layers.embedding.TokenEmbedding`, and, when the answer is wrong, names
the mistake. Logits as large as 1000 catch the numerical-stability mistakes: ``exp(1000)`` is
``inf`` in float32 and float64 alike.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..layers.embedding import TokenEmbedding
from ._checking import NOT_IMPLEMENTED, ExerciseFailed, attempt, check_against, correct, diagnose, expect_tensor, fail, pending, Verdict

__all__ = [
    "check_cross_entropy",
    "check_embed_one_hot",
    "check_softmax",
    "cross_entropy_inputs",
    "embed_one_hot_inputs",
    "softmax_inputs",
]


def _same(got: Tensor, wrong: Tensor, atol: float = 1e-5) -> bool:
    """Equal shapes and values, NaNs in the same places counting as equal (for overflow mistakes)."""
    return (
        isinstance(got, Tensor)
        and got.shape == wrong.shape
        and torch.allclose(got.double(), wrong.double(), atol=atol, rtol=1e-4, equal_nan=True)
    )


def _first_match(name: str, got: Tensor, mistakes: dict[str, Tensor]) -> None:
    for hint, wrong in mistakes.items():
        if _same(got, wrong):
            fail(f"{name} is not right yet. {hint}")


# --------------------------------------------------------------------------------------------
# (a) softmax
# --------------------------------------------------------------------------------------------


def softmax_inputs() -> tuple[Tensor, Tensor]:
    """Two test inputs: moderate logits ``(2, 3, 5)`` and large ones ``(2, 5)``.

    The first has three dimensions of different sizes, so a softmax over the wrong one gives
    different numbers; the second has one row near +1000 and one near -1000, where ``exp``
    overflows (to inf) and underflows (to 0) unless each row's maximum is subtracted first.
    """
    g = torch.Generator().manual_seed(1)
    moderate = 2.0 * torch.randn(2, 3, 5, generator=g)
    large = torch.tensor([[1000.0, 999.0, 998.0, 990.0, 900.0], [-1000.0, -1001.0, -1003.0, -1010.0, -1100.0]])
    return moderate, large


WRONG_DIM = (
    "You normalised over dim={} instead of the last dimension: softmax runs along the vocabulary, "
    "dim=-1, so that x[..., :] sums to 1 for every position. (Write dim=-1, not a fixed number like 1: "
    "the input may have any number of leading dimensions.)"
)


def _softmax_mistakes(x: Tensor) -> dict[str, Tensor]:
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    mistakes = {WRONG_DIM.format(d): torch.softmax(x, dim=d) for d in range(x.dim() - 1)}
    mistakes.update({
        "You returned exp(x) without normalising: divide by the sum over the last dimension, "
        "`e / e.sum(dim=-1, keepdim=True)`, so that the probabilities sum to 1.": x.exp(),
        "You returned exp(x - max) without normalising: divide by the sum over the last dimension, "
        "`e / e.sum(dim=-1, keepdim=True)`, so that the probabilities sum to 1.": e,
        "You divided by the sum over the *whole* tensor: every row must be divided by its own sum, "
        "`e.sum(dim=-1, keepdim=True)`.": e / e.sum(),
        "These are log-probabilities (log-softmax, all <= 0). Softmax returns the probabilities "
        "themselves: exp(x_i) / sum_j exp(x_j), without a log.": torch.log_softmax(x, dim=-1),
    })
    return mistakes


OVERFLOW_HINT = (
    "Your softmax gives nan/inf for large logits such as 1000: exp(1000) overflows to inf "
    "(float32 overflows above about 88, float64 above 709) and inf / inf = nan; exp(-1000) underflows "
    "to 0 and 0 / 0 = nan. Subtract each row's maximum first, `x - x.max(dim=-1, keepdim=True).values`: "
    "softmax(x) = softmax(x - c) for any constant c, and then the largest exponent is exp(0) = 1."
)


def check_softmax(fn: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``fn(x)``: softmax along the last dimension, ``exp(x_i) / sum_j exp(x_j)``.

    ``fn`` takes float logits of any shape ``(..., vocab)`` and returns probabilities of the same
    shape that sum to 1 along the last dimension. It is called on moderate logits ``(2, 3, 5)``
    and then on logits near +1000 and -1000. Diagnoses: softmax over the wrong dimension;
    ``exp`` without normalising; dividing by the sum of the whole tensor; returning log-softmax;
    not subtracting the maximum (overflow to nan/inf for large logits); subtracting the maximum
    of the whole tensor instead of each row's; changing the input in place.

    Returns True when right, False when ``fn`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    moderate, large = softmax_inputs()
    for x in (moderate, large):
        x_before = x.clone()
        try:
            got = attempt(fn, x)
        except ExerciseFailed:
            raise
        except Exception as e:  # the reader's bug: say what it was called with and the likely cause
            fail(f"softmax raised {type(e).__name__}: {e}\n(called with logits of shape {tuple(x.shape)}). "
                 "A shape error usually means a reduction lost its dimension: `x.max(dim=-1)` and "
                 "`e.sum(dim=-1)` have shape (...,) without the vocabulary axis, which does not broadcast "
                 "against (..., vocab). Pass keepdim=True, e.g. `e / e.sum(dim=-1, keepdim=True)`.")
        if got is NOT_IMPLEMENTED:
            return pending("softmax")
        if not torch.equal(x, x_before):
            fail("softmax changed its input in place (e.g. `x -= x.max(...)` or `x.exp_()`). "
                 "Write `x = x - ...` instead: the caller still needs its logits.")
        expected = torch.softmax(x, dim=-1)
        expect_tensor("softmax", got, expected.shape)
        if torch.allclose(got.double(), expected.double(), atol=1e-6, rtol=1e-5):
            continue
        if x is large:
            m_all = (x - x.max()).exp()
            _first_match("softmax", got, {
                "You subtracted the maximum of the whole tensor, x.max(), instead of each row's maximum. "
                "A row whose logits all lie far below the global maximum (here about -1000 against +1000) "
                "underflows to 0 / 0 = nan. Use `x.max(dim=-1, keepdim=True).values`.": m_all / m_all.sum(-1, keepdim=True),
            })
            if not torch.isfinite(got).all():
                fail(f"softmax is not right yet. {OVERFLOW_HINT}")
        _first_match("softmax", got, _softmax_mistakes(x))
        diagnose("softmax", got, expected, {}, atol=1e-6)
    return correct("Your softmax matches torch.softmax(x, dim=-1), and it survives logits of +-1000.")


# --------------------------------------------------------------------------------------------
# (b) cross_entropy
# --------------------------------------------------------------------------------------------


def cross_entropy_inputs() -> list[tuple[Tensor, Tensor]]:
    """Two test cases ``(logits (batch, vocab), targets (batch,))``: moderate, then with a logit of 1000.

    ``batch = 4`` differs from ``vocab = 6`` so that mixing the two axes changes the answer; the
    targets are below 4 so that indexing with them along the wrong axis runs (and gives a wrong
    number rather than an IndexError). In the second case a target's probability is about
    ``exp(-1000)``, which is 0 in floating point: ``log(softmax(x))`` is then ``-inf``, while the
    log-sum-exp form gives the right, finite loss.
    """
    g = torch.Generator().manual_seed(2)
    logits = 2.0 * torch.randn(4, 6, generator=g)
    targets = torch.tensor([3, 0, 2, 1])
    large = logits.clone()
    large[0, 5] = 1000.0  # row 0's target (3) gets probability ~exp(-1000)
    large[2, 2] = -1000.0  # row 2's target itself is hopeless
    return [(logits, targets), (large, targets)]


def _ce_mistakes(logits: Tensor, targets: Tensor) -> dict[str, Tensor]:
    b = torch.arange(logits.shape[0])
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    ce = -logp[b, targets].mean()
    one_hot = F.one_hot(targets, logits.shape[-1]).to(logp.dtype)
    return {
        "The sign is wrong: log-probabilities are <= 0, so the loss is *minus* their mean "
        "(cross-entropy is >= 0, and 0 only for a perfect prediction).": -ce,
        "You summed over the batch instead of averaging: divide by the batch size (`.mean()`), so the "
        "loss does not grow with the batch.": ce * logits.shape[0],
        "You summed over the batch and the sign is wrong too: the loss is minus the *mean* "
        "log-probability.": -ce * logits.shape[0],
        "You used the target's probability p; cross-entropy uses its log-probability: "
        "-mean(log p[target]).": -p[b, targets].mean(),
        "You used the target's raw logit without normalising: log p = logit - logsumexp(logits over the "
        "vocabulary). Apply log-softmax over dim=-1 first.": -logits[b, targets].mean(),
        "You normalised over the batch (dim=0) instead of the vocabulary: take log-softmax over dim=-1, "
        "one distribution per example.": -torch.log_softmax(logits, dim=0)[b, targets].mean(),
        "`logp[:, targets]` is a (batch, batch) matrix: every example's log-probability of *every* "
        "example's target. Pair each row with its own target: `logp[torch.arange(batch), targets]`.": -logp[:, targets].mean(),
        "`logp[targets]` indexes the *batch* axis with vocabulary ids, picking whole rows. Index both axes: "
        "`logp[torch.arange(batch), targets]` (row n, column targets[n]).": -logp[targets].mean(),
        "You indexed [targets, batch] instead of [batch, targets]: the first index is the example, the "
        "second the vocabulary id, `logp[torch.arange(batch), targets]`.": -logp[targets, b].mean(),
        "You averaged over all batch x vocab entries of one_hot * log p: sum over the vocabulary "
        "(dim=-1, only the target's term is non-zero), then average over the batch.": -(one_hot * logp).mean(),
        "You summed one_hot * log p over the batch (dim=0) and averaged over the vocabulary: the axes are "
        "swapped. Sum over dim=-1 (the vocabulary), then average over the batch.": -(one_hot * logp).sum(0).mean(),
    }


LOG_OF_SOFTMAX_HINT = (
    "Your loss is inf or nan when a target's probability is tiny: with logits like 1000, softmax "
    "gives that target exp(-1000), which is exactly 0 in floating point, and log(0) = -inf. Compute "
    "log-probabilities directly with the log-sum-exp trick, log p = x - m - log(sum(exp(x - m))), "
    "m = each row's max (torch.logsumexp does the last part stably); never take the log of a softmax."
)


def check_cross_entropy(fn: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``fn(logits, targets)``: mean cross-entropy, ``-mean_n log softmax(logits[n])[targets[n]]``.

    ``logits`` is ``(batch, vocab)``, ``targets`` is ``(batch,)`` of ids; the answer is a 0-dim
    tensor (the mean over the batch), like ``F.cross_entropy(logits, targets)``. Called on
    moderate logits, then on logits with entries of +-1000. Diagnoses: the missing minus sign;
    summing over the batch instead of averaging; using the probability instead of the
    log-probability; raw logits without log-softmax; log-softmax over the batch axis; indexing with
    ``logp[:, targets]``, ``logp[targets]`` or ``logp[targets, batch]``; averaging ``one_hot * log p``
    over every entry or summing it over the wrong axis; returning per-example losses; taking
    ``log(softmax(x))`` (``-inf`` when a probability underflows); a one-hot of the targets
    without ``num_classes`` (a shape error).

    Returns True when right, False when ``fn`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    for logits, targets in cross_entropy_inputs():
        try:
            got = attempt(fn, logits.clone(), targets.clone())
        except RuntimeError as error:  # typically a one-hot of the wrong width
            fail(f"cross_entropy raised RuntimeError: {error}\nIf it is a shape mismatch with a one-hot of the "
                 f"targets: F.one_hot(targets) without num_classes is only as wide as the largest target + 1 "
                 f"(here {int(targets.max()) + 1}), not the vocabulary ({logits.shape[-1]}). Pass "
                 f"`num_classes=logits.shape[-1]`.")
        if got is NOT_IMPLEMENTED:
            return pending("cross_entropy")
        if isinstance(got, Tensor) and tuple(got.shape) == tuple(targets.shape):
            fail(f"cross_entropy returned shape {tuple(got.shape)}, one loss per example: average them "
                 f"(`.mean()`) into a single number, a 0-dim tensor.")
        expected = F.cross_entropy(logits, targets)
        expect_tensor("cross_entropy", got, expected.shape)
        if torch.allclose(got.double(), expected.double(), atol=1e-5, rtol=1e-5):
            continue
        if not torch.isfinite(got).all():
            fail(f"cross_entropy is not right yet. {LOG_OF_SOFTMAX_HINT}")
        _first_match("cross_entropy", got, _ce_mistakes(logits, targets))
        diagnose("cross_entropy", got, expected, {})
    return correct("Your cross_entropy matches F.cross_entropy(logits, targets), even with logits of +-1000.")


# --------------------------------------------------------------------------------------------
# (c) embed_one_hot
# --------------------------------------------------------------------------------------------


def embed_one_hot_inputs() -> tuple[Tensor, Tensor]:
    """``ids (batch=2, seq=3)`` and a table ``W (vocab=7, d_model=4)``.

    The largest id is 5, not 6 = vocab - 1, so ``F.one_hot(ids)`` without ``num_classes`` makes
    one-hot vectors of length 6 that do not fit ``W``; batch, seq, vocab and d_model all differ,
    so transposed or flattened answers have telltale shapes.
    """
    g = torch.Generator().manual_seed(3)
    ids = torch.tensor([[4, 0, 5], [2, 2, 1]])
    W = torch.randn(7, 4, generator=g)
    return ids, W


def _call_embed(fn: Callable, ids: Tensor, W: Tensor):
    try:
        return attempt(fn, ids, W)
    except RuntimeError as error:
        msg = str(error)
        if "dtype" in msg or "scalar type" in msg:
            hint = ("F.one_hot returns integers (torch.long), and a matmul needs both sides of the same "
                    "floating type: convert the one-hot with `.to(W.dtype)` (or `.float()`) first.")
        else:
            hint = (f"If it is a shape mismatch: F.one_hot(ids) without num_classes makes vectors as long as "
                    f"the largest id + 1 (here {int(ids.max()) + 1}), not the vocabulary size "
                    f"{W.shape[0]}. Pass `num_classes=W.shape[0]`, then multiply (batch, seq, vocab) "
                    f"@ (vocab, d_model).")
        fail(f"embed_one_hot raised RuntimeError: {msg}\n{hint}")


def check_embed_one_hot(fn: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``fn(ids, W)``: the embedding lookup as a matrix product, ``one_hot(ids) @ W``.

    ``ids`` is ``(batch, seq)`` of token ids, ``W`` the ``(vocab, d_model)`` table; the answer is
    ``(batch, seq, d_model)`` and must equal ``W[ids]``, what
    :class:`~transformer_lib.layers.embedding.TokenEmbedding` computes. Diagnoses:
    ``F.one_hot`` without ``num_classes`` (a shape error in the matmul); an integer one-hot in a
    float matmul; returning the one-hot itself; forgetting to reshape a flattened answer; a
    transposed (seq, batch) answer; scaling by sqrt(d_model).

    Returns True when right, False when ``fn`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    ids, W = embed_one_hot_inputs()
    got = _call_embed(fn, ids.clone(), W.clone())
    if got is NOT_IMPLEMENTED:
        return pending("embed_one_hot")
    (batch, seq), (vocab, d_model) = ids.shape, W.shape
    shape_hints = {
        (batch, seq, vocab): "That is the one-hot tensor (batch, seq, vocab) itself: multiply it by W to get "
                             "(batch, seq, d_model).",
        (batch * seq, d_model): "You flattened the ids to (batch * seq,) and did not reshape back: the answer "
                                "is (batch, seq, d_model).",
        (seq, batch, d_model): "The batch and sequence axes are swapped: keep ids' (batch, seq) order.",
    }
    if isinstance(got, Tensor) and tuple(got.shape) in shape_hints:
        fail(f"embed_one_hot returned shape {tuple(got.shape)}, expected {(batch, seq, d_model)}. "
             f"{shape_hints[tuple(got.shape)]}")
    emb = TokenEmbedding(vocab, d_model)
    with torch.no_grad():
        emb.weight.copy_(W)
        expected = emb(ids)
    return check_against(
        "embed_one_hot",
        got,
        expected,
        {
            "Your rows are scaled by sqrt(d_model). The lookup is just the row W[id]; the original "
            "Transformer multiplies embeddings by sqrt(d_model) afterwards, in the model, not in the "
            "lookup.": expected * math.sqrt(d_model),
        },
        success="one_hot(ids) @ W picks exactly the rows W[ids]: a lookup is a matrix product with a one-hot.",
    )
