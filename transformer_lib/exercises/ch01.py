"""Exercises of chapter 1, *Tokens, embeddings and logits*: one BPE merge, softmax, cross-entropy,
one-hot lookup.

Each check calls the reader's function on inputs where every common mistake gives a different
answer, compares with PyTorch's own ``softmax`` / ``cross_entropy`` and the library's
:class:`~transformer_lib.layers.embedding.TokenEmbedding`, and, when the answer is wrong, names
the mistake. Logits as large as 1000 catch the numerical-stability mistakes: ``exp(1000)`` is
``inf`` in float32 and float64 alike.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.bpe import merge_pair, most_frequent, pair_counts
from ..layers.embedding import TokenEmbedding
from ._checking import NOT_IMPLEMENTED, ExerciseFailed, attempt, close, correct, diagnose, expect_tensor, fail, pending, Verdict

__all__ = [
    "check_bpe_merge_step",
    "bpe_merge_step_inputs",
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
    """Two test inputs: moderate logits ``(2, 3, 5)`` and large ones ``(3, 5)``.

    The first has three dimensions of different sizes, so a softmax over the wrong one gives
    different numbers; the second has one row near +1000 and one near -1000, where ``exp``
    overflows (to inf) and underflows (to 0) unless each row's maximum is subtracted first, and a
    row from +1000 to -1000. That row's spread, 2000, is more than twice the float32 overflow point
    (about 88.7), so subtracting any shift but the maximum (the row's mean, its minimum) still
    overflows there.
    """
    g = torch.Generator().manual_seed(1)
    moderate = 2.0 * torch.randn(2, 3, 5, generator=g)
    large = torch.tensor([[1000.0, 999.0, 998.0, 990.0, 900.0], [-1000.0, -1001.0, -1003.0, -1010.0, -1100.0],
                          [1000.0, 500.0, 0.0, -500.0, -1000.0]])
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
        "You shifted the numerator but not the denominator: exp(x - m) / sum_j exp(x_j) is softmax times "
        "exp(-m). Subtract the maximum once, `e = (x - m).exp()`, and divide e by e's own sum.":
            e / x.exp().sum(dim=-1, keepdim=True),
        "You shifted the denominator but not the numerator: exp(x) / sum_j exp(x_j - m) is softmax times "
        "exp(m). Subtract the maximum once, `e = (x - m).exp()`, and divide e by e's own sum.":
            x.exp() / e.sum(dim=-1, keepdim=True),
    })
    return mistakes


def _shift_mistakes(x: Tensor) -> dict[str, Tensor]:
    """Softmax with the wrong shift: right for rows of small spread, nan/inf for a spread above 2 x 88.7."""
    mean = (x - x.mean(dim=-1, keepdim=True)).exp()
    low = (x - x.amin(dim=-1, keepdim=True)).exp()
    return {
        "You subtracted each row's *mean*, not its maximum. That is enough for rows of small spread, but in "
        "a row from +1000 to -1000 the largest logit is still 1000 above the mean, and exp(1000) overflows to "
        "inf (float32 overflows above about 88.7). Subtract the maximum, `x.amax(dim=-1, keepdim=True)`: then "
        "the largest exponent is exp(0) = 1 whatever the spread.": mean / mean.sum(-1, keepdim=True),
        "You subtracted each row's *minimum*, not its maximum: the largest exponent is then exp(max - min), "
        "which overflows as soon as a row spans more than about 88.7. Subtract the maximum, "
        "`x.amax(dim=-1, keepdim=True)`.": low / low.sum(-1, keepdim=True),
    }


OVERFLOW_HINT = (
    "Your softmax gives nan/inf for large logits such as 1000: exp(1000) overflows to inf "
    "(float32 overflows above about 88, float64 above 709) and inf / inf = nan; exp(-1000) underflows "
    "to 0 and 0 / 0 = nan. Subtract each row's maximum first, `x - x.max(dim=-1, keepdim=True).values`: "
    "softmax(x) = softmax(x - c) for any constant c, and then the largest exponent is exp(0) = 1."
)


VALUES_HINT = (
    "`x.max(dim=-1, keepdim=True)` returns a pair (values, indices), not a tensor: take its `.values`, "
    "or use `x.amax(dim=-1, keepdim=True)`, which returns the maxima only."
)
KEEPDIM_HINT = (
    "A reduction lost its dimension: `x.max(dim=-1).values`, `e.sum(dim=-1)` and `x.logsumexp(-1)` have "
    "shape (...,) without the vocabulary axis, which does not broadcast against (..., vocab). Pass "
    "keepdim=True, e.g. `e / e.sum(dim=-1, keepdim=True)`."
)


def _softmax_error_hint(e: Exception) -> str:
    msg = str(e)
    if "return_types" in msg:
        return VALUES_HINT
    if isinstance(e, IndexError) and "Dimension out of range" in msg:
        return ("A fixed dim such as dim=2 does not exist for every input: the logits may have any number "
                "of leading dimensions. Count from the end: dim=-1.")
    if "must match the size" in msg:
        return KEEPDIM_HINT
    return "Follow the steps: m = x.amax(dim=-1, keepdim=True), e = (x - m).exp(), e / e.sum(dim=-1, keepdim=True)."


def check_softmax(fn: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``fn(x)``: softmax along the last dimension, ``exp(x_i) / sum_j exp(x_j)``.

    ``fn`` takes float logits of any shape ``(..., vocab)`` and returns probabilities of the same
    shape that sum to 1 along the last dimension. It is called on moderate logits ``(2, 3, 5)``
    and then on logits near +1000 and -1000 and a row from +1000 to -1000. Diagnoses: softmax over
    the wrong dimension; ``exp`` without normalising; dividing by the sum of the whole tensor;
    returning log-softmax; the maximum subtracted in the numerator only, or in the denominator only;
    not subtracting the maximum (overflow to nan/inf for large logits); subtracting the maximum
    of the whole tensor instead of each row's, or each row's mean or minimum; changing the input
    in place; a result in another dtype than the logits (float64 for float32); and, when ``fn`` raises, ``x.max(dim=...)`` used without ``.values``, a reduction
    without ``keepdim=True``, a fixed ``dim`` that the input does not have.

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
                 + _softmax_error_hint(e))
        if got is NOT_IMPLEMENTED:
            return pending("softmax")
        if not torch.equal(x, x_before):
            fail("softmax changed its input in place (e.g. `x -= x.max(...)` or `x.exp_()`). "
                 "Write `x = x - ...` instead: the caller still needs its logits.")
        expected = torch.softmax(x, dim=-1)
        expect_tensor("softmax", got, expected.shape)
        if torch.allclose(got.double(), expected.double(), atol=1e-6, rtol=1e-5):
            if got.dtype != x.dtype:
                fail(f"softmax has the right values but returns {got.dtype} for {x.dtype} logits. Probabilities "
                     f"keep the dtype of the logits, as torch.softmax does: a float64 step (`.double()`, a "
                     f"`torch.tensor(..., dtype=torch.float64)` constant, NumPy) doubles the memory of a "
                     f"(batch, seq, vocab) tensor and promotes everything computed from it. Compute in the "
                     f"input's dtype, or convert back with `.to(x.dtype)`.")
            continue
        if x is large:
            m_all = (x - x.max()).exp()
            _first_match("softmax", got, {
                "You subtracted the maximum of the whole tensor, x.max(), instead of each row's maximum. "
                "A row whose logits all lie far below the global maximum (here about -1000 against +1000) "
                "underflows to 0 / 0 = nan. Use `x.max(dim=-1, keepdim=True).values`.": m_all / m_all.sum(-1, keepdim=True),
                **_shift_mistakes(x),
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
    """Three test cases ``(logits (batch, vocab), targets (batch,))``: moderate, shifted by +1000, extreme.

    ``batch = 4``, ``vocab = 6`` and the one-hot width ``max(targets) + 1 = 3`` all differ, so that
    mixing the axes changes the answer and a shape error names which sizes clashed; the targets are
    below 4 so that indexing with them along the wrong axis runs (and gives a wrong number rather
    than an IndexError). The second case is the first with 1000 added to every logit: the same
    probabilities and the same loss, but ``exp(logits)`` overflows, so a log-sum-exp without the
    maximum subtracted fails there while ``log(softmax(x))`` does not. In the third case a target's
    probability is about ``exp(-1000)``, which is 0 in floating point: ``log(softmax(x))`` is then
    ``-inf``, while the log-sum-exp form gives the right, finite loss.
    """
    g = torch.Generator().manual_seed(2)
    logits = 2.0 * torch.randn(4, 6, generator=g)
    targets = torch.tensor([2, 0, 2, 1])
    large = logits.clone()
    large[0, 5] = 1000.0  # row 0's target (2) gets probability ~exp(-1000)
    large[2, 2] = -1000.0  # row 2's target itself is hopeless
    return [(logits, targets), (logits + 1000.0, targets), (large, targets)]


EPSILONS = (1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-12, 1e-15, 1e-20)  # what readers add inside a log


def _ce_mistakes(logits: Tensor, targets: Tensor) -> dict[str, Tensor]:
    b = torch.arange(logits.shape[0])
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    ce = -logp[b, targets].mean()
    one_hot = F.one_hot(targets, logits.shape[-1]).to(logp.dtype)
    m = logits.amax(dim=-1)  # (batch,)
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
        "You subtracted each row's maximum m inside the log-sum-exp but not outside it: log p = z - m - "
        "log sum_j exp(z_j - m). Without the '- m' every log-probability is too large by its row's m, and "
        "the loss too small by the mean of m.": ce - m.mean(),
        "You took the logarithm in base 2 (log2): the loss is in nats, with the natural log "
        "(torch.log, torch.logsumexp).": ce / math.log(2),
        "You took the logarithm in base 10 (log10): the loss is in nats, with the natural log "
        "(torch.log, torch.logsumexp).": ce / math.log(10),
    }


def _ce_eps_mistakes(logits: Tensor, targets: Tensor) -> dict[str, Tensor]:
    """log(p + eps) for the usual epsilons: compared more tightly than the other mistakes, since a small
    eps is within the loose tolerance of the right answer on moderate logits, yet outside the pass tolerance."""
    logp = torch.log_softmax(logits, dim=-1)
    p_target = logp.exp()[torch.arange(logits.shape[0]), targets]
    return {
        f"You added a small epsilon inside the log, log(p + eps) (or clamped p at eps), here eps = {eps:g}. "
        f"That keeps the loss finite but wrong wherever a target's probability is not much larger than eps: a "
        f"probability of exp(-1000) counts as eps. Compute log-probabilities with the log-sum-exp "
        f"trick instead, log p = z - m - log sum_j exp(z_j - m), with no probability in between.":
            -(p_target + eps).log().mean()
        for eps in EPSILONS
    }


NO_MAX_HINT = (
    "With every logit near 1000 your loss is {got}: exp(1000) overflows to inf in float32 (above about 88.7), "
    "so a sum of exponentials is inf, its log is inf, and a softmax is inf / inf = nan. Subtract each row's "
    "maximum m inside the log-sum-exp and add it back outside: log sum_j exp(z_j) = m + log sum_j exp(z_j - m) "
    "(torch.logsumexp does this). These logits are those of the first test plus 1000, so the right loss is "
    "the same as there."
)
LOG_OF_SOFTMAX_HINT = (
    "Your loss is inf or nan when a target's probability is tiny: with logits like 1000, softmax "
    "gives that target exp(-1000), which is exactly 0 in floating point, and log(0) = -inf. Compute "
    "log-probabilities directly with the log-sum-exp trick, log p = x - m - log(sum(exp(x - m))), "
    "m = each row's max (torch.logsumexp does the last part stably); never take the log of a softmax."
)


def _ce_error_hint(e: Exception, logits: Tensor, targets: Tensor) -> str:
    """The likely cause of an exception raised by the reader's cross_entropy."""
    msg = str(e)
    batch, vocab = logits.shape
    width = int(targets.max()) + 1  # F.one_hot(targets) without num_classes
    if "return_types" in msg:
        return VALUES_HINT
    if isinstance(e, IndexError) and "shape mismatch" in msg:
        return (f"The two index tensors have different lengths. The rows are the batch: "
                f"`torch.arange(logits.shape[0])` ({batch} examples), paired with `targets` ({batch} ids). "
                f"`torch.arange(logits.shape[1])` counts the vocabulary ({vocab}) instead.")
    if "Index tensor must have the same number of dimensions" in msg:
        return ("`logp.gather(1, targets)` needs an index with as many dimensions as logp: "
                "`logp.gather(1, targets.unsqueeze(-1)).squeeze(-1)` (or index with "
                "`logp[torch.arange(batch), targets]`).")
    if "Class values must be smaller than num_classes" in msg:
        return f"num_classes is the vocabulary size, logits.shape[-1] = {vocab}."
    sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", msg)
    if sizes:
        pair = {int(sizes.group(1)), int(sizes.group(2))}
        if pair == {vocab, width}:
            return (f"A tensor {width} wide met the (batch, vocab = {vocab}) logits: F.one_hot(targets) without "
                    f"num_classes is only as wide as the largest target + 1 (here {width}), not the vocabulary. "
                    f"Pass `num_classes=logits.shape[-1]`.")
        if pair == {vocab, batch}:
            return (f"A (batch,) = ({batch},) tensor met the (batch, vocab) = ({batch}, {vocab}) logits. "
                    + KEEPDIM_HINT)
    if "must match the size" in msg or "shapes cannot be multiplied" in msg:
        return (KEEPDIM_HINT + f" Or, with a one-hot of the targets: F.one_hot(targets) without num_classes is only "
                f"{width} wide; pass `num_classes=logits.shape[-1]`.")
    return ("Follow the steps: m = logits.amax(-1, keepdim=True), log p = logits - m - "
            "(logits - m).exp().sum(-1, keepdim=True).log(), then -log p[torch.arange(batch), targets].mean().")


def check_cross_entropy(fn: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``fn(logits, targets)``: mean cross-entropy, ``-mean_n log softmax(logits[n])[targets[n]]``.

    ``logits`` is ``(batch, vocab)``, ``targets`` is ``(batch,)`` of ids; the answer is a 0-dim
    tensor (the mean over the batch), like ``F.cross_entropy(logits, targets)``. Called on
    moderate logits, on the same plus 1000, then on logits with entries of +-1000. Diagnoses: the
    missing minus sign; summing over the batch instead of averaging; using the probability instead
    of the log-probability; raw logits without log-softmax; log-softmax over the batch axis;
    indexing with ``logp[:, targets]``, ``logp[targets]`` or ``logp[targets, batch]``; averaging
    ``one_hot * log p`` over every entry or summing it over the wrong axis; returning per-example
    losses; the maximum subtracted inside the log-sum-exp but not outside; log base 2 or 10;
    ``log(p + eps)``; a log-sum-exp without the maximum (overflow near 1000); taking
    ``log(softmax(x))`` (``-inf`` when a probability underflows); and, when ``fn`` raises: a one-hot
    of the targets without ``num_classes``, a reduction without ``keepdim=True``, ``.max(dim=...)``
    without ``.values``, ``gather`` without ``unsqueeze``, ``torch.arange`` over the vocabulary
    instead of the batch.

    Returns True when right, False when ``fn`` still raises NotImplementedError; raises
    :class:`~transformer_lib.exercises._checking.ExerciseFailed` with a diagnosis otherwise.
    """
    moderate, shifted, large = cross_entropy_inputs()
    for logits, targets in (moderate, shifted, large):
        try:
            got = attempt(fn, logits.clone(), targets.clone())
        except ExerciseFailed:
            raise
        except Exception as e:  # the reader's bug: say what it was called with and the likely cause
            fail(f"cross_entropy raised {type(e).__name__}: {e}\n(called with logits {tuple(logits.shape)} and "
                 f"targets {tuple(targets.shape)}). " + _ce_error_hint(e, logits, targets))
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
            if logits is shifted[0]:
                fail("cross_entropy is not right yet. " + NO_MAX_HINT.format(got=got.item()))
            fail(f"cross_entropy is not right yet. {LOG_OF_SOFTMAX_HINT}")
        for hint, wrong in _ce_eps_mistakes(logits, targets).items():
            if torch.allclose(got.double(), wrong.double(), atol=1e-6, rtol=1e-6):
                fail(f"cross_entropy is not right yet. {hint}")
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
    except ExerciseFailed:
        raise
    except Exception as error:  # the reader's bug: name the likely cause
        fail(f"embed_one_hot raised {type(error).__name__}: {error}\n(called with ids {tuple(ids.shape)} and W "
             f"{tuple(W.shape)}). " + _embed_error_hint(str(error), ids, W))


def _embed_error_hint(msg: str, ids: Tensor, W: Tensor) -> str:
    vocab, d_model = W.shape
    width = int(ids.max()) + 1  # F.one_hot(ids) without num_classes
    if "dtype" in msg or "scalar type" in msg:
        return ("F.one_hot returns integers (torch.long), and a matmul needs both sides of the same "
                "floating type: convert the one-hot with `.to(W.dtype)` (or `.float()`) first.")
    if "Class values must be smaller than num_classes" in msg:
        return (f"num_classes is the vocabulary size, the number of *rows* of W: W.shape[0] = {vocab}, "
                f"not W.shape[1] = {d_model} (that is d_model).")
    shapes = re.search(r"\((\d+)x(\d+) and (\d+)x(\d+)\)", msg)
    if shapes:
        inner_left, inner_right = int(shapes.group(2)), int(shapes.group(3))
        if inner_left == vocab and inner_right == d_model:
            return (f"You multiplied by W.T: W is (vocab, d_model) = {(vocab, d_model)}, so the product is "
                    f"(batch, seq, vocab) @ (vocab, d_model): `one_hot @ W`, not W.T.")
        if inner_left == width and inner_right == vocab:
            return (f"Your one-hot vectors are {width} long, W has {vocab} rows: F.one_hot(ids) without "
                    f"num_classes makes vectors as long as the largest id + 1 (here {width}), not the "
                    f"vocabulary. Pass `num_classes=W.shape[0]`.")
    if "batch2 tensor" in msg or "batch1 tensor" in msg:
        return ("The one-hot goes on the left: (batch, seq, vocab) @ (vocab, d_model) = `one_hot @ W`; "
                "W.T @ one_hot tries to multiply (d_model, vocab) by a stack of (seq, vocab) matrices.")
    return (f"The product is (batch, seq, vocab) @ (vocab, d_model): "
            f"`F.one_hot(ids, num_classes=W.shape[0]).to(W.dtype) @ W`; if you did not pass num_classes, "
            f"F.one_hot(ids) is only as wide as the largest id + 1 (here {width}), not {vocab}.")


_PRODUCTS = ("MmBackward", "BmmBackward", "MulBackward", "MvBackward", "AddmmBackward", "DotBackward")
_LOOKUPS = ("IndexBackward", "EmbeddingBackward", "IndexSelectBackward", "GatherBackward")


def _graph_ops(out) -> set[str]:
    """The names of the autograd operations that made ``out`` (empty if it has no graph)."""
    names, seen, stack = set(), set(), [getattr(out, "grad_fn", None)]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


def _how_computed(fn: Callable, ids: Tensor, W: Tensor) -> str:
    """"product", "lookup" or "unknown": how ``fn`` used W, read from the autograd graph of a second call."""
    try:
        ops = _graph_ops(fn(ids.clone(), W.clone().requires_grad_(True)))
    except Exception:  # e.g. the reader's code calls .numpy() on W: say nothing about the method
        return "unknown"
    if any(name.startswith(_PRODUCTS) for name in ops):
        return "product"
    if any(name.startswith(_LOOKUPS) for name in ops):
        return "lookup"
    return "unknown"


def check_embed_one_hot(fn: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``fn(ids, W)``: the embedding lookup as a matrix product, ``one_hot(ids) @ W``.

    ``ids`` is ``(batch, seq)`` of token ids, ``W`` the ``(vocab, d_model)`` table; the answer is
    ``(batch, seq, d_model)`` and must equal ``W[ids]``, what
    :class:`~transformer_lib.layers.embedding.TokenEmbedding` computes. Diagnoses:
    ``F.one_hot`` without ``num_classes``, or with ``num_classes=W.shape[1]``; a product with
    ``W.T`` or ``W.T @ one_hot``; an integer one-hot in a float matmul; returning the one-hot
    itself; forgetting to reshape a flattened answer; a transposed (seq, batch) answer; scaling by
    sqrt(d_model); the right numbers by indexing (``W[ids]``, ``F.embedding``) instead of the
    product, read from the answer's autograd graph.

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
    expect_tensor("embed_one_hot", got, expected.shape)
    if not close(got, expected):
        diagnose("embed_one_hot", got, expected, {
            "Your rows are scaled by sqrt(d_model). The lookup is just the row W[id]; the original "
            "Transformer multiplies embeddings by sqrt(d_model) afterwards, in the model, not in the "
            "lookup.": expected * math.sqrt(d_model),
        })
    how = _how_computed(fn, ids, W)
    if how == "lookup":
        fail("embed_one_hot gives the right rows, but by indexing (W[ids], F.embedding or index_select), "
             "which is what TokenEmbedding does. This exercise is the other way to get them: build the "
             "one-hot vectors, `F.one_hot(ids, num_classes=W.shape[0]).to(W.dtype)`, and multiply them by W.")
    if how == "product":
        return correct("one_hot(ids) @ W picks exactly the rows W[ids]: a lookup is a matrix product with a one-hot.")
    return correct("Your embeddings equal W[ids], the rows that TokenEmbedding looks up.")


# --------------------------------------------------------------------------------------------
# (d) one BPE merge
# --------------------------------------------------------------------------------------------


def bpe_merge_step_inputs() -> list[tuple[list[int], int]]:
    """``(ids, new_id)`` pairs where each known mistake gives another answer.

    1. four pairs tied as most frequent: the first seen is (5, 3), the smallest (1, 2);
    2. one id repeated, so that the pair (7, 7) overlaps itself and ends the sequence;
    3. (9, 9) occurs 4 times counting overlaps, 2 without, against 3 for (1, 2);
    4. (1, 3) and (1, 2) tied, (1, 3) seen first: a tie broken on the first id alone is a coin flip.
    """
    return [([5, 3, 9, 5, 3, 1, 2, 7, 1, 2, 7, 7, 7, 4], 256),
            ([7, 7, 7, 7, 7, 1, 7, 7, 7], 300),
            ([9, 9, 9, 9, 9, 1, 2, 1, 2, 1, 2], 257),
            ([1, 3, 5, 1, 3, 6, 1, 2, 7, 1, 2, 8], 258)]


def _non_overlapping(ids: list[int]) -> Counter:
    """Each pair counted as often as a left-to-right merge would replace it (str.count's way)."""
    return Counter({p: len(ids) - len(merge_pair(ids, p, -1)) for p in set(zip(ids, ids[1:]))})


def _merge_step(ids: list[int], new_id: int, *, rank=None, count=None, skip=True, once=False,
                keep_last=True, backwards=False) -> tuple[tuple[int, int], list[int]]:
    """One merge step, with switches for the mistakes the check names."""
    counts = pair_counts([ids], [1]) if count is None else count(ids)
    pair = most_frequent(counts) if rank is None else rank(counts)
    if backwards:  # merged from the right end
        return pair, merge_pair(ids[::-1], pair[::-1], new_id)[::-1]
    if skip and not once and keep_last:
        return pair, merge_pair(ids, pair, new_id)
    out, i, done = [], 0, False
    while i < len(ids) - (0 if keep_last else 1):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair and not done:
            out.append(new_id)
            i += 2 if skip else 1
            done = once
        else:
            out.append(ids[i])
            i += 1
    return pair, out


_RULE = ("This exercise's rule is the smallest pair compared as tuples, (1, 2) before (1, 3) before (2, 0): "
         "`min(counts, key=lambda p: (-counts[p], p))`. It depends on the counts alone, not on the order "
         "they were counted in, which tl.train_bpe needs: it updates its counts after a merge instead of "
         "counting again.")
_MERGE_MISTAKES = {
    "You counted non-overlapping occurrences, as `str.count` does: BPE counts every adjacent pair, so "
    "[9, 9, 9] holds (9, 9) twice (the merge then replaces one).": dict(count=_non_overlapping),
    "You counted each distinct pair once (a set of pairs?), so every count is 1. Count every occurrence: "
    "`Counter(zip(ids, ids[1:]))`.": dict(count=lambda ids: Counter(set(zip(ids, ids[1:])))),
    "You merged the *least* frequent pair. BPE merges the pair that occurs most often.":
        dict(rank=lambda c: min(c, key=lambda p: (c[p], p))),
    "On a tie you compared the first ids only, so (1, 3) and (1, 2) tie again and the one seen first "
    "wins. " + _RULE: dict(rank=lambda c: min(c, key=lambda p: (-c[p], p[0]))),
    "On a tie you took the pair seen first (as `Counter.most_common(1)` does, and minbpe). " + _RULE:
        dict(rank=lambda c: max(c, key=c.get)),
    "On a tie you took the *largest* pair (subword-nmt's convention). " + _RULE:
        dict(rank=lambda c: max(c, key=lambda p: (c[p], p))),
    "After replacing a pair you did not skip its second id: it stays in the list, or is merged again "
    "with the id after it (in [7, 7, 7], (7, 7) merges once: [new, 7], not [new, new, 7]). Move on by "
    "two after a merge.": dict(skip=False),
    "You merged from the right end: [7, 7, 7] became [7, new]. Replace from the left: [new, 7] (the "
    "order matters when a pair overlaps itself).": dict(backwards=True),
    "Only the first occurrence of the pair was replaced. A merge replaces every occurrence, from left "
    "to right.": dict(once=True),
    "The last id of the sequence is missing: a loop over `range(len(ids) - 1)` (the positions that start "
    "a pair) must still append the last id when it was not merged.": dict(keep_last=False),
}


def check_bpe_merge_step(fn: Callable[[list[int], int], tuple]) -> Verdict:
    """Check ``fn(ids, new_id)``: one step of BPE training on one sequence of ids.

    It must return ``(pair, merged)``: the most frequent adjacent pair (ties: the smaller ids) and
    ``ids`` with each occurrence of it, left to right, replaced by ``new_id``, as
    :func:`~transformer_lib.data.bpe.most_frequent` and :func:`~transformer_lib.data.bpe.merge_pair`
    do. Diagnoses: the least frequent pair; each distinct pair counted once; non-overlapping
    counts; a tie broken by the first pair seen, by the first id alone or by the largest pair; no
    skip after a merge (overlapping pairs merged twice); merging from the right; only the first
    occurrence replaced; the last id dropped; the list changed in place; the two results in the
    other order; pairs counted as (next, current).
    """
    for ids, new_id in bpe_merge_step_inputs():
        original = list(ids)
        try:
            got = attempt(fn, ids, new_id)
        except ExerciseFailed:
            raise
        except Exception as error:
            fail(f"bpe_merge_step raised {type(error).__name__}: {error}\n(called with ids={original}, "
                 f"new_id={new_id}).")
        if got is NOT_IMPLEMENTED:
            return pending("bpe_merge_step")
        if ids != original:
            fail(f"bpe_merge_step changed its input list in place (ids is now {ids}). Build a new list: "
                 f"the training loop still needs the old one to update its pair counts.")
        expected = _merge_step(original, new_id)
        try:
            if not (isinstance(got, (tuple, list)) and len(got) == 2):
                raise TypeError
            pair, merged = tuple(got[0]), list(got[1])
        except TypeError:
            fail(f"bpe_merge_step should return (pair, merged_ids), got {got!r}.")
        if (tuple(merged), list(pair)) == expected:
            fail("The two results are in the other order: return (pair, merged_ids), the pair first.")
        if (pair, merged) == expected:
            continue
        for hint, switches in _MERGE_MISTAKES.items():
            if (pair, merged) == _merge_step(original, new_id, **switches):
                fail(f"bpe_merge_step is not right yet (ids={original}). {hint}")
        if pair != expected[0] and pair == expected[0][::-1]:
            fail(f"Your pair {pair} is the right one backwards: count pairs as (ids[i], ids[i + 1]), "
                 f"the current id and the next, `zip(ids, ids[1:])`.")
        if pair != expected[0]:
            fail(f"bpe_merge_step chose the pair {pair} for ids={original}; the most frequent adjacent "
                 f"pair is {expected[0]} ({pair_counts([original], [1])[expected[0]]} times).")
        fail(f"bpe_merge_step chose the right pair {pair}, but merging it in ids={original} gives "
             f"{expected[1]}, not {merged}.")
    return correct("One merge of BPE training. tl.train_bpe repeats it, counting the pairs again only in "
                   "the chunks the merge changed.")
