"""exercises.ch07: right answers pass, stubs are pending, each common mistake gets its own hint."""

import math

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.exercises import ch07 as ex
from transformer_lib.exercises._checking import ExerciseFailed


def stub(*args, **kwargs):
    raise NotImplementedError


# ----------------------------------------------------------------------------------------- lm_loss


def lm_loss(logits, input_ids, *, shift="right", flatten="right", reduction="mean", probs="log", returns="scalar"):
    """A reader's causal-LM loss, right by default, with each mistake as a switch."""
    vocab = logits.shape[-1]
    pred, target = {
        "right": (logits[:, :-1], input_ids[:, 1:]),
        "none": (logits, input_ids),
        "none_drop_last": (logits[:, :-1], input_ids[:, :-1]),
        "none_drop_first": (logits[:, 1:], input_ids[:, 1:]),
        "wrong_way": (logits[:, 1:], input_ids[:, :-1]),
    }[shift]
    if probs == "prob":
        p = pred.softmax(-1).gather(-1, target[..., None])[..., 0]
        return F.nll_loss(pred.softmax(-1).reshape(-1, vocab), target.reshape(-1)) if flatten == "right" else -p.mean()
    if probs == "double_softmax":
        pred = pred.softmax(-1)
    if probs == "raw_logits":
        return F.nll_loss(pred.reshape(-1, vocab), target.reshape(-1))
    if probs == "plus":
        return pred.log_softmax(-1).gather(-1, target[..., None]).mean()
    if flatten == "none":
        return F.cross_entropy(pred, target)  # dim 1 read as the classes
    if flatten == "mismatched":
        return F.cross_entropy(pred.transpose(0, 1).reshape(-1, vocab), target.reshape(-1))
    if flatten == "mismatched_targets":  # the targets transposed instead: target.T.reshape(-1)
        return F.cross_entropy(pred.reshape(-1, vocab), target.T.reshape(-1))
    if flatten == "both_transposed":  # both position-major: the same pairs, so the same mean
        return F.cross_entropy(pred.transpose(0, 1).reshape(-1, vocab), target.T.reshape(-1))
    if reduction == "per_sequence_sum":
        return F.cross_entropy(pred.transpose(1, 2), target, reduction="none").sum(-1).mean()
    out = F.cross_entropy(pred.reshape(-1, vocab), target.reshape(-1), reduction=reduction)
    if returns == "per_position":
        return F.cross_entropy(pred.transpose(1, 2), target, reduction="none")
    if returns == "float":
        return out.item()
    if returns == "one_element":
        return out.reshape(1)
    return out


def test_lm_loss_correct(capsys):
    assert ex.check_lm_loss(lm_loss).passed is True
    assert "Correct" in capsys.readouterr().out


def test_lm_loss_correct_via_library_and_by_hand():
    assert ex.check_lm_loss(lambda lg, ids: tl.causal_lm_loss(lg[:, :-1], ids[:, 1:])).passed is True

    def by_hand(logits, ids):
        logp = logits[:, :-1].log_softmax(-1)
        return -logp.gather(-1, ids[:, 1:, None]).mean()

    assert ex.check_lm_loss(by_hand).passed is True
    assert ex.check_lm_loss(lambda lg, ids: lm_loss(lg, ids, returns="one_element")).passed is True
    assert ex.check_lm_loss(lambda lg, ids: lm_loss(lg, ids, flatten="both_transposed")).passed is True


def test_lm_loss_stub_is_pending(capsys):
    assert ex.check_lm_loss(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(shift="none"), r"No shift: you compared the logits at position t with the token \*at\* t"),
        (dict(shift="none_drop_last"), r"No shift"),
        (dict(shift="none_drop_first"), r"No shift"),
        (dict(shift="wrong_way"), r"Shifted the wrong way"),
        (dict(flatten="none"), r"without flattening: it reads dim 1 as the classes"),
        (dict(flatten="mismatched"), r"flattened in different orders"),
        (dict(flatten="mismatched_targets"), r"flattened in different orders"),
        (dict(reduction="sum"), r"You summed the losses over all positions"),
        (dict(reduction="per_sequence_sum"), r"You summed over the positions and averaged over the batch"),
        (dict(probs="prob"), r"probability p instead of its log-probability"),
        (dict(probs="prob", flatten="by_hand"), r"probability p instead of its log-probability"),
        (dict(probs="double_softmax"), r"softmax twice"),
        (dict(probs="raw_logits"), r"raw logits as log-probabilities"),
        (dict(probs="plus"), r"Wrong sign"),
    ],
)
def test_lm_loss_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_lm_loss(lambda lg, ids: lm_loss(lg, ids, **mistake))


def test_lm_loss_each_hint_is_specific():
    """No mistake is taken for another: the first matching hint is its own."""
    logits, ids = ex.lm_loss_inputs(0)
    right = tl.causal_lm_loss(logits[:, :-1], ids[:, 1:])
    values = [w for _, w in ex.lm_loss_mistakes(logits, ids)]
    for i, a in enumerate(values):
        assert not torch.allclose(a, right, atol=1e-3)
        for b in values[i + 1 :]:
            assert not torch.allclose(a, b, atol=1e-3)


def test_lm_loss_per_position_answer_is_named():
    with pytest.raises(ExerciseFailed, match=r"one loss per prediction"):
        ex.check_lm_loss(lambda lg, ids: lm_loss(lg, ids, returns="per_position"))


def test_lm_loss_wrong_type_or_shape_raises():
    with pytest.raises(ExerciseFailed, match=r"should return a torch.Tensor"):
        ex.check_lm_loss(lambda lg, ids: lm_loss(lg, ids, returns="float"))
    with pytest.raises(ExerciseFailed, match=r"should return one number"):
        ex.check_lm_loss(lambda lg, ids: torch.zeros(2))


def test_lm_loss_unknown_error_says_where():
    def broken(logits, ids):
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))  # sizes differ

    with pytest.raises(ExerciseFailed, match=r"lm_loss raised (ValueError|RuntimeError)"):
        ex.check_lm_loss(broken)


def test_lm_loss_view_on_a_slice_is_explained():
    def with_view(logits, ids):
        return F.cross_entropy(logits[:, :-1].view(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))

    with pytest.raises(ExerciseFailed, match=r"not contiguous in memory.*use \.reshape\(\)"):
        ex.check_lm_loss(with_view)


def test_lm_loss_unrecognised_wrong_answer_gives_values():
    with pytest.raises(ExerciseFailed, match=r"gives the wrong loss: expected"):
        ex.check_lm_loss(lambda lg, ids: lm_loss(lg, ids) + 0.5)


# ------------------------------------------------------------------------------------ top-k / top-p


def top_k_probs(logits, k, *, n=None, renormalise=True, order="sorted", returns="probs"):
    """A reader's top-k filter, right by default, with each mistake as a switch."""
    n = k if n is None else n
    probs = logits.softmax(-1)
    if order == "sorted":
        idx = torch.argsort(logits, descending=True)[:n]
    elif order == "vocab":
        idx = torch.arange(n)
    else:  # ascending
        idx = torch.argsort(logits)[:n]
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep[idx] = True
    if returns == "logits":
        return logits.masked_fill(~keep, float("-inf"))
    if returns == "zero_fill":  # the dropped logits set to 0, not -inf, then the softmax
        return logits.masked_fill(~keep, 0.0).softmax(-1)
    if returns == "uniform":
        return keep.float() / keep.sum()
    if returns == "batched":
        return probs.masked_fill(~keep, 0)[None] / probs.masked_fill(~keep, 0).sum()
    out = probs.masked_fill(~keep, 0.0)
    return out / out.sum() if renormalise else out


def test_top_k_correct(capsys):
    assert ex.check_top_k_probs(top_k_probs).passed is True
    assert "Correct" in capsys.readouterr().out


def test_top_k_correct_via_topk():
    def via_topk(logits, k):
        kth = torch.topk(logits, k).values[-1]
        return logits.masked_fill(logits < kth, float("-inf")).softmax(-1)

    assert ex.check_top_k_probs(via_topk).passed is True


def test_top_k_stub_is_pending(capsys):
    assert ex.check_top_k_probs(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(n="k-1"), r"You kept 2 tokens, one too few"),
        (dict(n="k+1"), r"You kept 4 tokens, one too many"),
        (dict(renormalise=False), r"forgot to renormalise"),
        (dict(order="vocab"), r"first k tokens of the vocabulary"),
        (dict(order="ascending"), r"\*least\* likely"),
        (dict(returns="uniform"), r"equal probability"),
        (dict(returns="logits"), r"look like filtered \*logits\*"),
        (dict(returns="zero_fill"), r"filled the dropped logits with 0 instead of -inf.*exp\(0\) = 1"),
    ],
)
def test_top_k_mistakes_are_named(mistake, hint):
    def reader(logits, k):
        kw = dict(mistake)
        if kw.get("n") in ("k-1", "k+1"):
            kw["n"] = k - 1 if kw["n"] == "k-1" else k + 1
        return top_k_probs(logits, k, **kw)

    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_top_k_probs(reader)


def test_top_k_wrong_shape_raises():
    with pytest.raises(ExerciseFailed, match=r"should return shape \(10,\)"):
        ex.check_top_k_probs(lambda lg, k: top_k_probs(lg, k, returns="batched"))


def top_p_probs(logits, p, *, crossing="in", extra=0, renormalise=True, order="desc", map_back="scatter"):
    """A reader's nucleus filter, right by default, with each mistake as a switch."""
    probs = logits.softmax(-1)
    if order == "vocab":
        cum = probs.cumsum(0)
        keep = (cum - probs < p) if crossing == "in" else (cum < p)
        out = probs.masked_fill(~keep, 0.0)
        return out / out.sum()
    sorted_p, idx = torch.sort(probs, descending=order == "desc")
    cum = sorted_p.cumsum(0)
    keep_sorted = (cum - sorted_p < p) if crossing == "in" else (cum < p)
    m = int(keep_sorted.sum()) + extra
    keep_sorted = torch.arange(len(probs)) < m
    if map_back in ("none", "gather_values"):
        out = sorted_p.masked_fill(~keep_sorted, 0.0)
        out = out / out.sum()
        return out if map_back == "none" else out[idx]  # gather_values: indexed with the permutation
    if map_back == "gather_mask":
        keep = keep_sorted[idx]  # indexed with the permutation instead of scattered back
    elif map_back == "inverse":
        keep = keep_sorted[idx.argsort()]  # the inverse permutation: right
    else:
        keep = torch.zeros_like(keep_sorted).scatter(0, idx, keep_sorted)
    out = probs.masked_fill(~keep, 0.0)
    return out / out.sum() if renormalise else out


def test_top_p_correct(capsys):
    assert ex.check_top_p_probs(top_p_probs).passed is True
    assert "Correct" in capsys.readouterr().out


def test_top_p_correct_via_library():
    assert ex.check_top_p_probs(lambda lg, p: tl.next_token_probs(lg[None], top_p=p)[0]).passed is True


def test_top_p_correct_with_the_inverse_permutation():
    assert ex.check_top_p_probs(lambda lg, p: top_p_probs(lg, p, map_back="inverse")).passed is True


def test_top_p_stub_is_pending(capsys):
    assert ex.check_top_p_probs(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(crossing="out"), r"You left out the token that crosses the threshold"),
        (dict(extra=1), r"one token too many"),
        (dict(renormalise=False), r"forgot to renormalise"),
        (dict(order="vocab"), r"vocabulary order, without sorting: the nucleus"),
        (dict(order="vocab", crossing="out"), r"without sorting, and left out the crossing token"),
        (dict(order="asc"), r"ascending order"),
        (dict(map_back="none"), r"did not map them back"),
        (dict(map_back="gather_mask"), r"mapped the sorted answer back by indexing with the permutation"),
        (dict(map_back="gather_values"), r"mapped the sorted answer back by indexing with the permutation"),
    ],
)
def test_top_p_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_top_p_probs(lambda lg, p: top_p_probs(lg, p, **mistake))


def test_filter_hints_are_specific():
    logits = ex.filter_inputs()
    cases = [(tl.next_token_probs(logits[None], top_k=3)[0], ex.top_k_mistakes(logits, 3))]
    cases += [(tl.next_token_probs(logits[None], top_p=p)[0], ex.top_p_mistakes(logits, p)) for p in ex.TOP_P_CASES]
    for right, mistakes in cases:
        values = [w for _, w in mistakes]
        for i, a in enumerate(values):
            assert not torch.allclose(a, right, atol=1e-3)
            for b in values[i + 1 :]:
                assert not torch.allclose(a, b, atol=1e-3)


def test_top_p_wrong_shape_and_nan_raise():
    with pytest.raises(ExerciseFailed, match=r"should return shape \(10,\)"):
        ex.check_top_p_probs(lambda lg, p: top_p_probs(lg, p)[:5])
    with pytest.raises(ExerciseFailed, match=r"returned NaN"):
        ex.check_top_p_probs(lambda lg, p: torch.full_like(lg, float("nan")))


# ------------------------------------------------------------------------------- causal attention


def causal_attention(scores, *, fill="-inf", diagonal=0, when="before", order="tril", cache=True, dim=-1,
                     use="fill"):
    """A reader's causal attention weights, right by default, with each mistake as a switch."""
    seq_q, seq_k = scores.shape[-2:]
    offset = seq_k - seq_q if cache else 0
    ones = torch.ones(seq_q, seq_k, dtype=torch.bool)
    mask = ones.tril(offset + diagonal) if order == "tril" else ones.triu(offset + diagonal)
    value = {"-inf": float("-inf"), "0": 0.0, "-1e9": -1e9, "finfo": torch.finfo(scores.dtype).min}[fill]
    if use == "multiply":
        return (scores * mask).softmax(dim)
    if use == "add":
        return (scores + mask).softmax(dim)
    if use == "inverted":
        return scores.masked_fill(mask, value).softmax(dim)
    if use == "none":
        return scores.softmax(dim)
    if when == "after":
        return scores.softmax(dim).masked_fill(~mask, 0.0)
    if when == "after_renormalised":  # zero after the softmax, then renormalise: the same distribution
        w = scores.softmax(dim).masked_fill(~mask, 0.0)
        return w / w.sum(-1, keepdim=True)
    return scores.masked_fill(~mask, value).softmax(dim)


def test_causal_attention_correct(capsys):
    assert ex.check_causal_attention(causal_attention).passed is True
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize("kw", [dict(fill="-1e9"), dict(fill="finfo"), dict(when="after_renormalised")])
def test_causal_attention_equivalent_answers_pass(kw):
    assert ex.check_causal_attention(lambda s: causal_attention(s, **kw)).passed is True


def test_causal_attention_via_library():
    def via_library(scores):
        mask = tl.causal_mask(*scores.shape[-2:])
        return scores.masked_fill(~mask, float("-inf")).softmax(-1)

    assert ex.check_causal_attention(via_library).passed is True


def test_causal_attention_stub_is_pending(capsys):
    assert ex.check_causal_attention(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(fill="0"), r"hidden scores to 0 instead of -inf .*exp\(0\) = 1"),
        (dict(use="multiply"), r"hidden scores to 0 instead of -inf"),
        (dict(when="after"), r"applied the mask after the softmax"),
        (dict(diagonal=-1), r"off by one: it hides the diagonal"),
        (dict(diagonal=-1, fill="-1e9"), r"off by one: it hides the diagonal"),
        (dict(diagonal=1), r"off by one the other way"),
        (dict(use="inverted"), r"mask is inverted"),
        (dict(use="inverted", fill="-1e9"), r"mask is inverted"),
        (dict(order="triu"), r"upper triangle"),
        (dict(cache=False), r"ignores the cache"),
        (dict(cache=False, fill="finfo"), r"ignores the cache"),
        (dict(dim=-2), r"softmax over the queries"),
        (dict(use="add"), r"added the bool mask"),
        (dict(use="none"), r"left out the mask"),
    ],
)
def test_causal_attention_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_causal_attention(lambda s: causal_attention(s, **mistake))


def test_causal_attention_mask_with_zero_is_diagnosed_on_the_first_case():
    """Masking with 0 is named at once, on the training-time (no cache) scores, not as a generic error."""
    with pytest.raises(ExerciseFailed, match=r"^causal_attention \(seq_q=5, seq_k=5\) is not right yet\. You set"):
        ex.check_causal_attention(lambda s: causal_attention(s, fill="0"))


def test_causal_attention_hints_are_specific():
    """In each case, no mistake gives another mistake's answer, except where the case cannot tell them apart."""
    for seq_q, seq_k in ex.CAUSAL_CASES:
        scores = ex.causal_scores(seq_q, seq_k)
        right = causal_attention(scores)
        for (hint, wrong) in ex.causal_attention_mistakes(scores):
            if seq_q == seq_k and "ignores the cache" in hint:
                continue  # without a cache, tril(0) is the right mask
            if seq_q == seq_k:  # the training-time case tells every other mistake from the right answer
                assert not torch.allclose(wrong, right, atol=1e-3, equal_nan=True), hint
    scores = ex.causal_scores(5, 5)
    firsts = {}
    for hint, wrong in ex.causal_attention_mistakes(scores):
        firsts.setdefault(hint, wrong)
    values = list(firsts.items())
    for i, (hint_a, a) in enumerate(values):
        for hint_b, b in values[i + 1 :]:
            if "ignores the cache" in hint_a + hint_b:
                continue
            assert not torch.allclose(a, b, atol=1e-3, equal_nan=True), (hint_a[:40], hint_b[:40])


@pytest.mark.parametrize(
    "reader, message",
    [
        (lambda s: torch.full_like(s, float("nan")), r"contain NaN"),
        (lambda s: causal_attention(s) * 0.9, r"must sum to 1"),
        (lambda s: torch.ones_like(s) / s.shape[-1], r"on a key after it"),  # uniform over every key
        (lambda s: causal_attention(s * 2), r"gives the wrong weights"),
    ],
)
def test_causal_attention_other_wrong_answers(reader, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex.check_causal_attention(reader)


def test_causal_attention_wrong_shape():
    with pytest.raises(ExerciseFailed, match=r"should return shape \(2, 3, 5, 5\)"):
        ex.check_causal_attention(lambda s: causal_attention(s)[0])


# ------------------------------------------------------------------------------------- the KV cache


def cached_attention_step(attn, x_new, cache, *, append_dim=2, store="append", attend="cache", twice=False,
                          swap=None, key_from="W_K", value_from="W_V", query_from="W_Q", offset="seq",
                          scale="d_head", softmax_dim=-1, w_o=True, first=True, layout="heads", keep_x=False,
                          returns="new", split="heads"):
    """A reader's cached attention step, right by default, with each mistake as a switch."""
    batch = x_new.shape[0]
    h, d = attn.n_heads, attn.d_head

    def heads(t):  # (batch, s, d_model) -> (batch, h, s, d)
        t = t.view(batch, t.shape[1], h, d)
        return t if layout == "seq_first" else t.transpose(1, 2)

    project = {"W_Q": attn.W_Q, "W_K": attn.W_K, "W_V": attn.W_V, "x": lambda t: t, "keys": attn.W_V}
    if keep_x or split == "none":  # cache x (or W_K x unsplit) and project/split the whole prefix each step
        key = x_new if keep_x else attn.W_K(x_new)
        value = x_new if keep_x else attn.W_V(x_new)
        cache.k = key if cache.k is None else torch.cat([cache.k, key], dim=1)
        cache.v = value if cache.v is None else torch.cat([cache.v, value], dim=1)
        k_all = heads(attn.W_K(cache.k) if keep_x else cache.k)
        v_all = heads(attn.W_V(cache.v) if keep_x else cache.v)
        q = heads(attn.W_Q(x_new))
        n = k_all.shape[2]
        q, _ = attn.positions.rotate(q, q, n - 1)
        k_all = torch.cat([attn.positions.rotate(k_all[:, :, j:j + 1], k_all[:, :, j:j + 1], j)[1]
                           for j in range(n)], dim=2)
        w = (q @ k_all.transpose(-2, -1) / math.sqrt(d)).softmax(-1)
        return attn.W_O((w @ v_all).transpose(1, 2).reshape(batch, 1, h * d))
    q = heads(project[query_from](x_new))
    k = heads(project[key_from](x_new))
    v = heads(project[value_from](x_new))
    if swap == "projected":
        k, v = heads(attn.W_V(x_new)), heads(attn.W_K(x_new))
    cached = 0 if cache.k is None else cache.k.shape[2]
    off = {"seq": cached, "zero": 0, "len": 0 if cache.k is None else len(cache.k),
           "heads": 0 if cache.k is None else cache.k.shape[1], "plus1": cached + 1}.get(offset)
    if offset == "dropped":
        attn.positions.rotate(q, k, cached)  # the result thrown away
    elif offset != "none":
        q, k = attn.positions.rotate(q, k, off)
    if swap == "stored":
        k, v = v, k
    if attend == "before":  # attend first, append after: the new token misses itself
        w = (q @ cache.k.transpose(-2, -1) / math.sqrt(d)).softmax(-1)
        out = w @ cache.v
    if cache.k is None:
        if not first:
            cache.k, cache.v = torch.cat([cache.k, k], dim=append_dim), None  # TypeError on None
        cache.k, cache.v = k, v
    elif store == "overwrite":
        cache.k, cache.v = k, v
    elif store == "append":
        cache.k = torch.cat([cache.k, k], dim=append_dim)
        cache.v = torch.cat([cache.v, v], dim=append_dim)
    if store == "none":  # keeps nothing: attends with what it just computed
        k_all, v_all = k, v
    else:
        k_all, v_all = cache.k, cache.v
    if attend == "new":
        k_all, v_all = k, v
    if twice:
        k_all, v_all = torch.cat([k_all, k], dim=2), torch.cat([v_all, v], dim=2)
    if swap == "read":
        k_all, v_all = v_all, k_all
    if value_from == "keys":
        v_all = k_all
    if attend != "before":
        div = {"d_head": math.sqrt(d), "d_model": math.sqrt(attn.d_model), "none": 1.0}[scale]
        scores = q @ k_all.transpose(-2, -1) / div
        if attend == "tril":  # a causal mask that forgets the offset: tril(ones(1, seq_k))
            mask = torch.ones(1, k_all.shape[2], dtype=torch.bool).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        out = scores.softmax(softmax_dim) @ v_all
    if returns == "heads":
        return out
    merged = out.transpose(1, 2).reshape(batch, 1, h * d) if layout == "heads" else out.reshape(batch, 1, h * d)
    return attn.W_O(merged) if w_o else merged


def test_cached_attention_step_correct(capsys):
    assert ex.check_cached_attention_step(cached_attention_step).passed is True
    assert "Correct" in capsys.readouterr().out


def test_cached_attention_step_with_the_library_layer_kv_cache_update():
    """A reader's step that keeps its cache with LayerKVCache's own update logic passes too."""
    def via_library(attn, x_new, cache):
        lib = tl.layers.kv_cache.LayerKVCache()
        lib.k, lib.v = cache.k, cache.v
        split = lambda t: t.view(t.shape[0], 1, attn.n_heads, attn.d_head).transpose(1, 2)  # noqa: E731
        q, k, v = split(attn.W_Q(x_new)), split(attn.W_K(x_new)), split(attn.W_V(x_new))
        q, k = attn.positions.rotate(q, k, lib.seq_len)
        k_all, v_all = lib.update(k, v)
        cache.k, cache.v = k_all, v_all
        out = F.scaled_dot_product_attention(q, k_all, v_all)
        return attn.W_O(out.transpose(1, 2).reshape(x_new.shape[0], 1, attn.d_model))

    assert ex.check_cached_attention_step(via_library).passed is True


def test_cached_attention_step_stub_is_pending(capsys):
    assert ex.check_cached_attention_step(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(append_dim=1), r"appended on dim 1 \(n_heads\), not on the sequence"),
        (dict(append_dim=-1), r"appended on dim 3 \(d_head\), not on the sequence"),
        (dict(append_dim=0), r"appended on dim 0 \(batch\), not on the sequence"),
        (dict(layout="seq_first", append_dim=1), r"laid out \(batch, seq, n_heads, d_head\).*transpose\(1, 2\)"),
        (dict(store="overwrite"), r"attends only to itself: the earlier positions are forgotten"),
        (dict(attend="new"), r"attends only to itself: the earlier positions are forgotten"),
        (dict(store="none"), r"attends only to itself: the earlier positions are forgotten"),
        (dict(attend="tril"), r"attends only to the first position: a causal mask"),
        (dict(attend="before", first=True), r"raised .*\n.*Before the first token cache\.k and cache\.v are None"),
        (dict(twice=True), r"key and value are counted twice"),
        (dict(swap="stored"), r"Keys and values are swapped"),
        (dict(swap="read"), r"Keys and values are swapped"),
        (dict(swap="projected"), r"Keys and values are swapped"),
        (dict(key_from="W_Q"), r"right output, but the cache.*After token 1, cache\.k holds the queries"),
        (dict(query_from="W_K"), r"projected the new query with W_K"),
        (dict(key_from="x", value_from="x"), r"holds the tokens' inputs x where it needs their projections"),
        (dict(key_from="x"), r"right output, but the cache.*cache\.k holds the tokens' inputs x split into heads"),
        (dict(value_from="x"), r"holds the tokens' inputs x where it needs their projections"),
        (dict(value_from="keys"), r"used the keys as the values"),
        (dict(scale="d_model"), r"scaled the scores by 1/sqrt\(d_model\)"),
        (dict(scale="none"), r"did not scale the scores"),
        (dict(softmax_dim=-2), r"softmax over the queries"),
        (dict(w_o=False), r"left out W_O"),
        (dict(offset="none"), r"with RoPE.*q and k are not turned by its position"),
        (dict(offset="zero"), r"with RoPE.*q and k are not turned by its position"),
        (dict(offset="dropped"), r"with RoPE.*q and k are not turned by its position"),
        (dict(offset="len"), r"with RoPE.*RoPE offset is not the number of cached positions.*len\(cache\.k\)"),
        (dict(offset="heads"), r"with RoPE.*RoPE offset is not the number of cached positions"),
        (dict(offset="plus1"), r"right output, but the cache is not right.*turned one position too far"),
        (dict(keep_x=True), r"right output, but the cache.*shape \(2, 1, 12\).*holds the tokens' inputs x"),
        (dict(split="none"), r"right output, but the cache.*shape \(2, 1, 12\).*Keep it split into heads"),
        (dict(returns="heads"), r"returned the heads unmerged"),
        (dict(first=False), r"raised TypeError.*\n.*cache BareKVCache\(k=None, v=None\).*Before the first token"),
    ],
)
def test_cached_attention_step_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_cached_attention_step(lambda attn, x_new, cache: cached_attention_step(attn, x_new, cache, **mistake))


def test_cached_attention_step_not_itself_is_told_from_first_only():
    """Attending before appending and a mask without the offset give the same output at the second token
    (both see key 0 only); the check waits for the third token to tell which."""
    def before(attn, x_new, cache):
        if cache.k is None:  # the first token: nothing cached yet, so it attends to itself
            return cached_attention_step(attn, x_new, cache)
        return cached_attention_step(attn, x_new, cache, attend="before")

    with pytest.raises(ExerciseFailed, match=r"token 3 of 5.*attends to the earlier positions but not to itself"):
        ex.check_cached_attention_step(before)
    with pytest.raises(ExerciseFailed, match=r"token 3 of 5.*attends only to the first position"):
        ex.check_cached_attention_step(lambda a, x, c: cached_attention_step(a, x, c, attend="tril"))


def test_cached_attention_step_exception_names_the_shapes():
    """A wrong-dimension append fails inside the reader's attention: the message names the call's shapes
    and, from the cache the step left, the dimension."""
    with pytest.raises(ExerciseFailed) as info:
        ex.check_cached_attention_step(lambda a, x, c: cached_attention_step(a, x, c, append_dim=1))
    message = str(info.value)
    assert "raised RuntimeError" in message
    assert "x_new (2, 1, 12), cache BareKVCache(k=(2, 3, 1, 4), v=(2, 3, 1, 4))" in message
    assert "token 2 of 5" in message
    assert "cache.k has shape (2, 6, 1, 4) after it, (2, 3, 2, 4) expected" in message


@pytest.mark.parametrize(
    "reader, message",
    [
        (lambda a, x, c: a(x, kv_cache=c), r"would let the library cache for you"),
        (lambda a, x, c: c.update(x, x), r"This cache has no update method"),
        (lambda a, x, c: cached_attention_step(a, x, ex.BareKVCache()), r"cache\.k is None: your function must "
         r"extend the cache it is given"),
        (lambda a, x, c: cached_attention_step(a, x, c).item(), r"raised RuntimeError"),
        (lambda a, x, c: cached_attention_step(a, x, c)[:, 0], r"should return shape \(2, 1, 12\)"),
        (lambda a, x, c: cached_attention_step(a, x, c).tolist(), r"should return a torch.Tensor"),
        (lambda a, x, c: cached_attention_step(a, x, c) * 1.1, r"gives the wrong output \(largest difference"),
    ],
)
def test_cached_attention_step_other_wrong_answers(reader, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex.check_cached_attention_step(reader)


def test_cached_attention_step_cache_that_duplicates_positions():
    """A step that appends the new key twice to the cache (but attends right) is named by the cache's length."""
    def duplicating(attn, x_new, cache):
        out = cached_attention_step(attn, x_new, cache)
        cache.k = torch.cat([cache.k, cache.k[:, :, -1:]], dim=2)
        cache.v = torch.cat([cache.v, cache.v[:, :, -1:]], dim=2)
        return out

    with pytest.raises(ExerciseFailed, match=r"holds 2 positions after 1 tokens.*duplicates positions"):
        ex.check_cached_attention_step(duplicating)


def test_cached_attention_step_cache_of_keys_before_their_rotation():
    """Caching the keys unturned and turning the whole cache every step gives the right output, but the cache
    is not what LayerKVCache holds, and every step turns the earlier keys again."""
    def unturned(attn, x_new, cache):
        split = lambda t: t.view(t.shape[0], 1, attn.n_heads, attn.d_head).transpose(1, 2)  # noqa: E731
        q, k, v = split(attn.W_Q(x_new)), split(attn.W_K(x_new)), split(attn.W_V(x_new))
        cache.k = k if cache.k is None else torch.cat([cache.k, k], dim=2)
        cache.v = v if cache.v is None else torch.cat([cache.v, v], dim=2)
        n = cache.k.shape[2]
        q, _ = attn.positions.rotate(q, q, n - 1)
        keys = torch.cat([attn.positions.rotate(cache.k[:, :, j:j + 1], cache.k[:, :, j:j + 1], j)[1]
                          for j in range(n)], dim=2)
        out = ((q @ keys.transpose(-2, -1)) / math.sqrt(attn.d_head)).softmax(-1) @ cache.v
        return attn.W_O(out.transpose(1, 2).reshape(x_new.shape[0], 1, attn.d_model))

    with pytest.raises(ExerciseFailed, match=r"with RoPE, token 2 of 5.*right output, but the cache.*keys before "
                       r"their rotation"):
        ex.check_cached_attention_step(unturned)


def test_cached_attention_step_unsplit_queries_in_the_cache():
    def queries(attn, x_new, cache):
        out = cached_attention_step(attn, x_new, ex.BareKVCache())
        cache.k = attn.W_Q(x_new) if cache.k is None else torch.cat([cache.k, attn.W_Q(x_new)], dim=1)
        cache.v = attn.W_V(x_new) if cache.v is None else torch.cat([cache.v, attn.W_V(x_new)], dim=1)
        return out

    with pytest.raises(ExerciseFailed, match=r"token 1 of 5.*right output.*shape \(2, 1, 12\).*holds the queries"):
        ex.check_cached_attention_step(queries)


def test_cached_attention_step_hints_are_specific():
    """At the last token every recomputed mistake differs from the right output and from every other mistake."""
    for rope in (False, True):
        attn, x = ex.kv_cache_parts(rope)
        t = ex.KV_TOKENS - 1
        with torch.no_grad():
            right = attn(x)[:, -1:]
            firsts = {}
            for hint, wrong in ex.kv_cache_mistakes(attn, x, t):
                if not rope and ("RoPE" in hint or "with RoPE" in hint):
                    assert torch.allclose(wrong, right, atol=1e-5)  # positions outside attention: the same
                    continue
                assert not torch.allclose(wrong, right, atol=1e-3), hint[:60]
                firsts.setdefault(hint, wrong)
        values = list(firsts.items())
        for i, (hint_a, a) in enumerate(values):
            for hint_b, b in values[i + 1:]:
                assert not torch.allclose(a, b, atol=1e-3), (hint_a[:40], hint_b[:40])


def test_cached_attention_step_leaves_the_readers_state_alone():
    """The check draws its weights without touching the global RNG and never changes the attention layer."""
    torch.manual_seed(123)
    before = torch.get_rng_state()
    ex.check_cached_attention_step(cached_attention_step)
    assert torch.equal(torch.get_rng_state(), before)
    attn, x = ex.kv_cache_parts(True)
    snapshot = {k: v.clone() for k, v in attn.state_dict().items()}
    x0 = x.clone()
    ex.kv_cache_mistakes(attn, x, ex.KV_TOKENS - 1)
    assert all(torch.equal(v, snapshot[k]) for k, v in attn.state_dict().items()) and torch.equal(x, x0)
