"""exercises.ch01: each check accepts a right answer, waits for a stub, and names each known mistake."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.exercises import ch01 as ex
from transformer_lib.exercises._checking import ExerciseFailed


def stub(*args):
    raise NotImplementedError


# ---------------------------------------------------------------- (a) softmax, written independently


def softmax_variants(x, *, dim=-1, stable=True, global_max=False, normalise=True, whole=False, log=False, inplace=False):
    """A softmax from exp and sum, with switches for the mistakes the check should name."""
    if stable:
        m = x.max() if global_max else x.max(dim=dim, keepdim=True).values
        if inplace:
            x -= m
            z = x
        else:
            z = x - m
    else:
        z = x
    e = z.exp()
    if not normalise:
        return e
    total = e.sum() if whole else e.sum(dim=dim, keepdim=True)
    p = e / total
    return p.log() if log else p


def test_softmax_right_answer_passes(capsys):
    assert ex.check_softmax(softmax_variants).passed is True
    assert "Correct" in capsys.readouterr().out


def test_softmax_float64_answer_for_float32_logits_is_named():
    """The right values in float64 for float32 input: the check used to accept it."""
    with pytest.raises(ExerciseFailed, match=r"right values but returns torch\.float64 for torch\.float32 logits"):
        ex.check_softmax(lambda x: softmax_variants(x.double()))


def test_softmax_float64_converted_back_passes():
    assert ex.check_softmax(lambda x: softmax_variants(x.double()).to(x.dtype)).passed is True


def test_softmax_stub_is_pending(capsys):
    assert ex.check_softmax(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(dim=0), r"over dim=0 instead of the last dimension"),
        (dict(dim=1), r"over dim=1 instead of the last dimension"),
        (dict(stable=False), r"exp\(1000\) overflows to inf"),
        (dict(global_max=True), r"maximum of the whole tensor"),
        (dict(normalise=False), r"exp\(x - max\) without normalising"),
        (dict(stable=False, normalise=False), r"exp\(x\) without normalising"),
        (dict(whole=True), r"sum over the \*whole\* tensor"),
        (dict(log=True), r"log-probabilities \(log-softmax"),
        (dict(inplace=True), r"changed its input in place"),
    ],
)
def test_softmax_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_softmax(lambda x: softmax_variants(x, **mistake))


def test_softmax_without_keepdim_is_explained():
    """A missing keepdim=True makes the reader's code raise: the check names the shape and the fix."""
    def no_keepdim(x):
        e = (x - x.max(dim=-1).values).exp()  # (2, 3, 5) - (2, 3): a broadcasting error
        return e / e.sum(dim=-1)

    with pytest.raises(ExerciseFailed, match=r"(?s)softmax raised RuntimeError.*shape \(2, 3, 5\).*keepdim=True"):
        ex.check_softmax(no_keepdim)


def test_softmax_wrong_dim_also_fails_on_large_logits():
    """A 2-D-only solution (dim=1) passes nothing: the first input is 3-D."""
    with pytest.raises(ExerciseFailed, match="dim=-1"):
        ex.check_softmax(lambda x: torch.softmax(x, dim=1))


def test_softmax_wrong_shape_and_type():
    with pytest.raises(ExerciseFailed, match=r"shape \(2, 3, 5\).*\(2, 3, 1\)"):
        ex.check_softmax(lambda x: softmax_variants(x).sum(-1, keepdim=True))
    with pytest.raises(ExerciseFailed, match="torch.Tensor"):
        ex.check_softmax(lambda x: softmax_variants(x).tolist())


def test_softmax_unknown_error_reports_size():
    with pytest.raises(ExerciseFailed, match="largest difference"):
        ex.check_softmax(lambda x: softmax_variants(x) * 1.01)


def test_softmax_mistakes_are_distinguishable():
    """On the check's inputs every mistake differs from the answer and from every other mistake."""
    moderate, _ = ex.softmax_inputs()
    answers = [torch.softmax(moderate, -1)] + list(ex._softmax_mistakes(moderate).values())
    for a, b in itertools.combinations(answers, 2):
        assert not ex._same(a, b)


# ---------------------------------------------------------------- (b) cross_entropy, written independently


def ce_variants(logits, targets, *, sign=-1, reduce="mean", use="logp", index="pair", log_of_softmax=False, norm_dim=-1):
    """Cross-entropy by hand, with switches for the mistakes the check should name."""
    if log_of_softmax:
        e = (logits - logits.max(dim=-1, keepdim=True).values).exp()
        logp = (e / e.sum(dim=-1, keepdim=True)).log()
    else:
        m = logits.max(dim=norm_dim, keepdim=True).values
        logp = logits - m - (logits - m).exp().sum(dim=norm_dim, keepdim=True).log()
    values = {"logp": logp, "p": logp.exp(), "logits": logits}[use]
    rows = torch.arange(logits.shape[0])
    if index == "pair":
        picked = values[rows, targets]
    elif index == "columns":
        picked = values[:, targets]
    elif index == "rows":
        picked = values[targets]
    elif index == "swapped":
        picked = values[targets, rows]
    elif index == "one_hot_all":
        return sign * (F.one_hot(targets, logits.shape[-1]) * values).mean()
    elif index == "one_hot_dim0":
        return sign * (F.one_hot(targets, logits.shape[-1]) * values).sum(0).mean()
    if reduce == "none":
        return sign * picked
    return sign * (picked.sum() if reduce == "sum" else picked.mean())


def test_cross_entropy_right_answer_passes(capsys):
    assert ex.check_cross_entropy(ce_variants).passed is True
    assert "Correct" in capsys.readouterr().out


def test_cross_entropy_logsumexp_and_float64_pass():
    assert ex.check_cross_entropy(lambda z, t: (torch.logsumexp(z, -1) - z[torch.arange(len(t)), t]).mean()).passed is True
    assert ex.check_cross_entropy(lambda z, t: ce_variants(z.double(), t)).passed is True


def test_cross_entropy_stub_is_pending(capsys):
    assert ex.check_cross_entropy(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(sign=1), r"The sign is wrong"),
        (dict(reduce="sum"), r"summed over the batch instead of averaging"),
        (dict(reduce="sum", sign=1), r"summed over the batch and the sign is wrong"),
        (dict(use="p"), r"target's probability p"),
        (dict(use="logits"), r"raw logit without normalising"),
        (dict(norm_dim=0), r"normalised over the batch \(dim=0\)"),
        (dict(index="columns"), r"logp\[:, targets\]` is a \(batch, batch\) matrix"),
        (dict(index="rows"), r"logp\[targets\]` indexes the \*batch\* axis"),
        (dict(index="swapped"), r"indexed \[targets, batch\]"),
        (dict(index="one_hot_all"), r"averaged over all batch x vocab entries"),
        (dict(index="one_hot_dim0"), r"summed one_hot \* log p over the batch \(dim=0\)"),
        (dict(reduce="none"), r"one loss per example"),
        (dict(log_of_softmax=True), r"log\(0\) = -inf"),
    ],
)
def test_cross_entropy_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_cross_entropy(lambda z, t: ce_variants(z, t, **mistake))


def test_cross_entropy_naive_exp_is_caught():
    def naive(z, t):
        e = z.exp()
        return -(e / e.sum(-1, keepdim=True))[torch.arange(len(t)), t].log().mean()

    with pytest.raises(ExerciseFailed, match="log-sum-exp"):
        ex.check_cross_entropy(naive)


def test_cross_entropy_narrow_one_hot_is_named():
    def narrow(z, t):
        logp = z - torch.logsumexp(z, dim=-1, keepdim=True)
        return -(F.one_hot(t) * logp).sum(-1).mean()  # one_hot(t) is (batch, max(t) + 1), not (batch, vocab)

    with pytest.raises(ExerciseFailed, match=r"num_classes=logits.shape\[-1\]"):
        ex.check_cross_entropy(narrow)


def test_cross_entropy_wrong_shape_and_type():
    with pytest.raises(ExerciseFailed, match=r"shape \(\)"):
        ex.check_cross_entropy(lambda z, t: ce_variants(z, t, index="columns", reduce="none"))
    with pytest.raises(ExerciseFailed, match="torch.Tensor"):
        ex.check_cross_entropy(lambda z, t: ce_variants(z, t).item())


def test_cross_entropy_unknown_error_reports_size():
    with pytest.raises(ExerciseFailed, match="largest difference"):
        ex.check_cross_entropy(lambda z, t: ce_variants(z, t) + 0.1)


def test_cross_entropy_mistakes_are_distinguishable():
    for logits, targets in ex.cross_entropy_inputs():
        answers = [F.cross_entropy(logits, targets)] + list(ex._ce_mistakes(logits, targets).values())
        for a, b in itertools.combinations(answers, 2):
            assert not ex._same(a, b)


# ---------------------------------------------------------------- (c) embed_one_hot


def embed_variants(ids, W, *, num_classes=True, to_float=True, flatten=False, reshape=True, scale=False, transpose=False):
    if transpose:
        ids = ids.T
    flat = ids.reshape(-1) if flatten else ids
    one_hot = F.one_hot(flat, W.shape[0]) if num_classes else F.one_hot(flat)
    if to_float:
        one_hot = one_hot.to(W.dtype)
    out = one_hot @ W
    if flatten and reshape:
        out = out.reshape(*ids.shape, W.shape[1])
    return out * math.sqrt(W.shape[1]) if scale else out


def test_embed_right_answer_passes(capsys):
    assert ex.check_embed_one_hot(embed_variants).passed is True
    assert ex.check_embed_one_hot(lambda ids, W: embed_variants(ids, W, flatten=True)).passed is True
    assert "Correct" in capsys.readouterr().out


def test_embed_stub_is_pending(capsys):
    assert ex.check_embed_one_hot(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(num_classes=False), r"without num_classes.*num_classes=W.shape\[0\]"),
        (dict(to_float=False), r"F.one_hot returns integers"),
        (dict(flatten=True, reshape=False), r"did not reshape back"),
        (dict(transpose=True), r"batch and sequence axes are swapped"),
        (dict(scale=True), r"scaled by sqrt\(d_model\)"),
    ],
)
def test_embed_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_embed_one_hot(lambda ids, W: embed_variants(ids, W, **mistake))


def test_embed_returning_the_one_hot_is_named():
    with pytest.raises(ExerciseFailed, match="one-hot tensor"):
        ex.check_embed_one_hot(lambda ids, W: F.one_hot(ids, W.shape[0]).float())


def test_embed_wrong_shape_and_values():
    with pytest.raises(ExerciseFailed, match=r"shape \(2, 3, 4\)"):
        ex.check_embed_one_hot(lambda ids, W: embed_variants(ids, W)[..., :2])
    with pytest.raises(ExerciseFailed, match="largest difference"):
        ex.check_embed_one_hot(lambda ids, W: embed_variants(ids, W) + 0.01)


# ---------------------------------------------------------------- diagnoses added after the review of chapter 1


def test_softmax_max_without_values_is_explained():
    """`x.max(dim=-1, keepdim=True)` is a (values, indices) pair: the TypeError is named, not a shape error."""
    def no_values(x):
        e = (x - x.max(dim=-1, keepdim=True)).exp()
        return e / e.sum(dim=-1, keepdim=True)

    with pytest.raises(ExerciseFailed, match=r"(?s)softmax raised TypeError.*pair \(values, indices\).*\.values") as info:
        ex.check_softmax(no_values)
    assert "keepdim=True, e.g." not in str(info.value)  # not the shape-error hint: keepdim was passed


def test_softmax_fixed_dim_that_the_input_lacks_is_explained():
    def dim_two(x):  # right on the (2, 3, 5) input, an IndexError on the (3, 5) one
        e = (x - x.amax(dim=2, keepdim=True)).exp()
        return e / e.sum(dim=2, keepdim=True)

    with pytest.raises(ExerciseFailed, match=r"(?s)softmax raised IndexError.*Count from the end: dim=-1"):
        ex.check_softmax(dim_two)


@pytest.mark.parametrize(
    "shift, hint",
    [
        (lambda x: x.mean(dim=-1, keepdim=True), r"subtracted each row's \*mean\*, not its maximum"),
        (lambda x: x.amin(dim=-1, keepdim=True), r"subtracted each row's \*minimum\*, not its maximum"),
    ],
)
def test_softmax_wrong_shift_is_caught_by_the_wide_row(shift, hint):
    """Shifting by the mean survives rows of small spread: the row from +1000 to -1000 catches it."""
    def shifted(x):
        e = (x - shift(x)).exp()
        return e / e.sum(dim=-1, keepdim=True)

    moderate, _ = ex.softmax_inputs()
    assert torch.allclose(shifted(moderate), torch.softmax(moderate, -1), atol=1e-6)  # only the large input can tell
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_softmax(shifted)


def test_softmax_half_shifted_fractions_are_named():
    def shifted_numerator(x):
        return (x - x.amax(-1, keepdim=True)).exp() / x.exp().sum(-1, keepdim=True)

    def shifted_denominator(x):
        return x.exp() / (x - x.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True)

    with pytest.raises(ExerciseFailed, match=r"shifted the numerator but not the denominator"):
        ex.check_softmax(shifted_numerator)
    with pytest.raises(ExerciseFailed, match=r"shifted the denominator but not the numerator"):
        ex.check_softmax(shifted_denominator)


def _lse_ce(z, t, *, keepdim=True, use_max=True, minus_m=True, log=torch.log, eps=0.0, via_p=False):
    """Cross-entropy through log-sum-exp, with the slips the review found as switches."""
    m = z.amax(dim=-1, keepdim=keepdim) if use_max else torch.zeros(())
    if via_p:  # log(p + eps) of a stable softmax
        e = (z - z.amax(-1, keepdim=True)).exp()
        p = e / e.sum(-1, keepdim=True)
        return -log(p[torch.arange(len(t)), t] + eps).mean()
    logp = z - (m if minus_m else 0) - log((z - m).exp().sum(dim=-1, keepdim=keepdim))
    return -logp[torch.arange(len(t)), t].mean()


def test_cross_entropy_missing_keepdim_gets_the_keepdim_hint_not_the_one_hot_hint():
    for fn in (lambda z, t: _lse_ce(z, t, keepdim=False),
               lambda z, t: -(z - z.logsumexp(-1))[torch.arange(len(t)), t].mean()):
        with pytest.raises(ExerciseFailed, match=r"(?s)raised RuntimeError.*\(batch,\) = \(4,\) tensor.*keepdim=True") as info:
            ex.check_cross_entropy(fn)
        assert "num_classes" not in str(info.value)


def test_cross_entropy_narrow_one_hot_on_either_side_is_named():
    def narrow_right(z, t):
        return -(z.log_softmax(-1) * F.one_hot(t)).sum(-1).mean()

    with pytest.raises(ExerciseFailed, match=r"(?s)3 wide.*num_classes=logits.shape\[-1\]") as info:
        ex.check_cross_entropy(narrow_right)
    assert "keepdim" not in str(info.value)


def test_cross_entropy_exceptions_are_diagnosed_not_raised():
    """TypeError and IndexError in the reader's code become diagnoses too (no raw traceback)."""
    def no_values(z, t):
        m = z.max(dim=-1, keepdim=True)
        return -(z - m - (z - m).exp().sum(-1, keepdim=True).log())[torch.arange(len(t)), t].mean()

    def arange_vocab(z, t):
        return -z.log_softmax(-1)[torch.arange(z.shape[1]), t].mean()

    def gather_2d(z, t):
        return -z.log_softmax(-1).gather(1, t).mean()

    with pytest.raises(ExerciseFailed, match=r"(?s)raised TypeError.*\.values"):
        ex.check_cross_entropy(no_values)
    with pytest.raises(ExerciseFailed, match=r"(?s)raised IndexError.*torch.arange\(logits.shape\[1\]\)` counts the vocabulary"):
        ex.check_cross_entropy(arange_vocab)
    with pytest.raises(ExerciseFailed, match=r"(?s)raised RuntimeError.*targets.unsqueeze\(-1\)"):
        ex.check_cross_entropy(gather_2d)


def test_cross_entropy_log_sum_exp_without_the_max_is_named():
    """exp(1000) overflows in the sum: named on the shifted logits, not as a log of a softmax."""
    with pytest.raises(ExerciseFailed, match=r"(?s)every logit near 1000.*exp\(1000\) overflows.*add it back") as info:
        ex.check_cross_entropy(lambda z, t: _lse_ce(z, t, use_max=False))
    assert "never take the log of a softmax" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs, hint",
    [
        (dict(minus_m=False), r"inside the log-sum-exp but not outside it"),
        (dict(via_p=True, log=torch.log2), r"base 2"),
        (dict(via_p=True, log=torch.log10), r"base 10"),
        (dict(via_p=True, eps=1e-9), r"small epsilon inside the log, log\(p \+ eps\).*eps = 1e-09"),
        (dict(via_p=True, eps=1e-6), r"small epsilon inside the log, log\(p \+ eps\).*eps = 1e-06"),
    ],
)
def test_cross_entropy_formula_slips_are_named(kwargs, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_cross_entropy(lambda z, t: _lse_ce(z, t, **kwargs))


def test_embed_indexing_is_named_not_called_a_one_hot_product():
    for fn in (lambda ids, W: W[ids], lambda ids, W: F.embedding(ids, W)):
        with pytest.raises(ExerciseFailed, match=r"right rows, but by indexing"):
            ex.check_embed_one_hot(fn)


def test_embed_other_products_pass_and_untraceable_answers_get_a_neutral_message(capsys):
    einsum = lambda ids, W: torch.einsum("bsv,vd->bsd", F.one_hot(ids, W.shape[0]).to(W.dtype), W)
    broadcast = lambda ids, W: (F.one_hot(ids, W.shape[0]).to(W.dtype)[..., None] * W).sum(-2)
    assert ex.check_embed_one_hot(einsum) and ex.check_embed_one_hot(broadcast)
    assert capsys.readouterr().out.count("Correct! one_hot(ids) @ W picks exactly the rows") == 2

    def without_graph(ids, W):
        with torch.no_grad():
            return W[ids]

    assert ex.check_embed_one_hot(without_graph)
    out = capsys.readouterr().out
    assert "equal W[ids]" in out and "one_hot(ids) @ W" not in out


@pytest.mark.parametrize(
    "fn, hint",
    [
        (lambda ids, W: F.one_hot(ids, W.shape[0]).to(W.dtype) @ W.T, r"You multiplied by W.T"),
        (lambda ids, W: F.one_hot(ids, W.shape[1]).to(W.dtype) @ W, r"number of \*rows\* of W: W.shape\[0\] = 7"),
        (lambda ids, W: W.T @ F.one_hot(ids, W.shape[0]).to(W.dtype), r"The one-hot goes on the left"),
    ],
)
def test_embed_shape_slips_other_than_num_classes_are_named(fn, hint):
    with pytest.raises(ExerciseFailed, match=hint) as info:
        ex.check_embed_one_hot(fn)
    assert "6 long" not in str(info.value)  # not the missing-num_classes hint


# ---------------------------------------------------------------- (d) one BPE merge, written independently


def merge_step_variants(ids, new_id, *, first_seen=False, least=False, larger=False, no_skip=False, once=False,
                        drop_last=False, in_place=False, swap=False, backwards=False, distinct=False,
                        non_overlapping=False, first_id_only=False, from_right=False):
    """One merge step from a Counter, with switches for the mistakes the check should name."""
    from collections import Counter
    counts = Counter(zip(ids[1:], ids) if backwards else zip(ids, ids[1:]))
    if distinct:
        counts = Counter(set(counts))
    if non_overlapping:  # scan left to right, a match uses up both ids
        counts = Counter()
        for p in set(zip(ids, ids[1:])):
            i = 0
            while i < len(ids) - 1:
                if (ids[i], ids[i + 1]) == p:
                    counts[p] += 1
                    i += 2
                else:
                    i += 1
    if first_id_only:
        pair = min(counts, key=lambda p: (-counts[p], p[0]))
    elif first_seen:
        pair = counts.most_common(1)[0][0]
    elif least:
        pair = min(counts, key=lambda p: (counts[p], p))
    elif larger:
        pair = max(counts, key=lambda p: (counts[p], p))
    else:
        pair = min(counts, key=lambda p: (-counts[p], p))
    if from_right:
        out, i = [], len(ids) - 1
        while i >= 0:
            if i >= 1 and (ids[i - 1], ids[i]) == pair:
                out.insert(0, new_id)
                i -= 2
            else:
                out.insert(0, ids[i])
                i -= 1
        return pair, out
    out, i, merged = [], 0, False
    while i < len(ids) - (1 if drop_last else 0):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair and not (once and merged):
            out.append(new_id)
            merged = True
            i += 1 if no_skip else 2
        else:
            out.append(ids[i])
            i += 1
    if in_place:
        ids[:] = out
        out = ids
    return (out, pair) if swap else (pair, out)


def test_merge_step_right_answer_passes(capsys):
    assert ex.check_bpe_merge_step(merge_step_variants).passed is True
    assert "Correct" in capsys.readouterr().out


def test_merge_step_with_the_library_passes():
    from transformer_lib.data.bpe import merge_pair, most_frequent, pair_counts

    def with_library(ids, new_id):
        pair = most_frequent(pair_counts([ids], [1]))
        return pair, merge_pair(ids, pair, new_id)
    assert ex.check_bpe_merge_step(with_library).passed is True


def test_merge_step_stub_is_pending(capsys):
    assert ex.check_bpe_merge_step(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    (dict(first_seen=True), r"the pair seen first \(as `Counter.most_common\(1\)`"),
    (dict(least=True), r"\*least\* frequent"),
    (dict(larger=True), r"\*largest\* pair"),
    (dict(no_skip=True), r"did not skip its second id"),
    (dict(once=True), r"Only the first occurrence"),
    (dict(drop_last=True), r"last id of the sequence is missing"),
    (dict(in_place=True), r"changed its input list in place"),
    (dict(swap=True), r"other order: return \(pair, merged_ids\)"),
    (dict(backwards=True), r"right one backwards"),
    (dict(distinct=True), r"counted each distinct pair once"),
    (dict(non_overlapping=True), r"non-overlapping occurrences"),
    (dict(first_id_only=True), r"compared the first ids only"),
    (dict(from_right=True), r"merged from the right end"),
])
def test_merge_step_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_bpe_merge_step(lambda ids, new_id: merge_step_variants(ids, new_id, **mistake))


def test_merge_step_that_raises_names_its_arguments():
    with pytest.raises(ExerciseFailed, match=r"(?s)raised ZeroDivisionError.*ids=\[5, 3"):
        ex.check_bpe_merge_step(lambda ids, new_id: 1 / 0)


def test_merge_step_that_returns_one_thing_is_told_the_shape():
    with pytest.raises(ExerciseFailed, match=r"should return \(pair, merged_ids\), got 3"):
        ex.check_bpe_merge_step(lambda ids, new_id: 3)
