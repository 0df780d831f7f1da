"""exercises.ch02: right answers pass, stubs are pending, each common mistake gets its own hint."""

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.exercises import ch02 as ex
from transformer_lib.exercises._checking import ExerciseFailed


def stub(*args, **kwargs):
    raise NotImplementedError


# ------------------------------------------------------------------- scaled_dot_product_attention


def sdpa(q, k, v, mask=None, *, scale="sqrt", axis=-1, transpose=False, fill=float("-inf"), mask_mode="before",
         invert=False, out_mode="right", returns="pair", zero_empty_rows=True, scale_after=False):
    """A reader's attention, right by default, with each mistake as a switch."""
    d_k = q.shape[-1]
    raw = k @ q.transpose(-2, -1) if transpose else q @ k.transpose(-2, -1)
    scores = {"sqrt": raw / math.sqrt(d_k), "none": raw, "d_k": raw / d_k, "times": raw * math.sqrt(d_k),
              "d_v": raw / math.sqrt(v.shape[-1]), "seq": raw / math.sqrt(q.shape[-2])}[scale]
    if scale_after:
        scores = raw
    if mask is not None:
        hide = mask if invert else ~mask
        if mask_mode == "before":
            scores = scores.masked_fill(hide, fill)
        elif mask_mode == "add":
            scores = scores + mask
        elif mask_mode == "multiply":
            scores = scores * mask
    weights = scores.softmax(dim=axis)
    if scale_after:
        weights = weights / math.sqrt(d_k)
    if mask is not None and zero_empty_rows:  # a query that may see no key reads nothing
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    if mask is not None and mask_mode == "after":
        weights = weights.masked_fill(~mask, 0.0)
    if mask is not None and mask_mode == "after_inf":
        weights = weights.masked_fill(~mask, float("-inf"))
    out = {"right": lambda: weights @ v, "transposed": lambda: weights.transpose(-2, -1) @ v,
           "scores": lambda: scores @ v}[out_mode]()
    if returns == "output":
        return out
    if returns == "swapped":
        return weights, out
    return out, weights


def test_sdpa_correct(capsys):
    assert ex.check_scaled_dot_product_attention(sdpa).passed is True
    assert "Correct" in capsys.readouterr().out


def test_sdpa_correct_with_large_negative_fill_is_accepted():
    # -1e9 underflows to exactly 0 after exp, so it is a right answer too (with the empty rows zeroed)
    assert ex.check_scaled_dot_product_attention(lambda q, k, v, mask=None: sdpa(q, k, v, mask, fill=-1e9)).passed is True


def test_sdpa_correct_with_torch_weights():
    def via_torch(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        w = scores.softmax(-1).nan_to_num(0.0)  # a query with no visible key: NaN -> 0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), w

    assert ex.check_scaled_dot_product_attention(via_torch).passed is True


def test_sdpa_stub_is_pending(capsys):
    assert ex.check_scaled_dot_product_attention(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(scale="none"), r"You forgot the scale: divide"),
        (dict(scale="d_k"), r"You divided the scores by d_k"),
        (dict(scale="times"), r"You multiplied the scores by sqrt\(d_k\)"),
        (dict(axis=-2), r"softmax runs over the wrong axis \(the queries"),
        (dict(axis=-2, scale="none"), r"You forgot the scale and your softmax runs over the queries"),
        (dict(transpose=True), r"Your scores are transposed: you computed K Q\^T"),
        (dict(mask_mode="ignore"), r"You ignored the mask"),
        (dict(mask_mode="after"), r"You applied the mask after the softmax: the weights you zeroed no longer sum to 1"),
        (dict(mask_mode="after_inf"), r"You applied the mask after the softmax \(filled the weights with -inf\)"),
        (dict(fill=0.0), r"You set the hidden scores to 0"),
        (dict(invert=True), r"Your mask is inverted: True means the query MAY attend"),
        (dict(mask_mode="add"), r"You added the bool mask to the scores"),
        (dict(mask_mode="multiply"), r"You set the hidden scores to 0 \(filled them with 0, or multiplied"),
        (dict(fill=-30.0), r"the weights of hidden keys must be exactly 0"),
        (dict(out_mode="transposed"), r"not the weights transposed times v"),
        (dict(out_mode="scores"), r"not scores @ v"),
    ],
)
def test_sdpa_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_scaled_dot_product_attention(lambda q, k, v, mask=None: sdpa(q, k, v, mask, **mistake))


def test_sdpa_each_mistake_has_its_own_answer():
    """No two diagnosed mistakes coincide on the check's inputs (else a hint could name the wrong one)."""
    q, k, v = ex.sdpa_inputs(seed=2)
    unmasked = list(ex.sdpa_weight_mistakes(q, k, None).values())
    q, k, v = ex.sdpa_inputs(seed=7, seq_q=3, seq_k=5)
    masked = list(ex.sdpa_weight_mistakes(q, k, ex.sdpa_mask()).values())
    for group in (unmasked, masked):
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                assert not torch.allclose(group[i], group[j], atol=1e-3, equal_nan=True), (i, j)


def test_sdpa_transposed_scores_with_rectangular_inputs_named_by_shape():
    def kq(q, k, v, mask=None):  # runs on square inputs, gives (seq_k, seq_q) weights on rectangular ones
        w = (k @ q.transpose(-2, -1) / 2).softmax(-1)
        return torch.zeros(*q.shape[:-1], v.shape[-1]), w

    def sq_ok_then_kq(q, k, v, mask=None):
        return sdpa(q, k, v, mask) if mask is None else kq(q, k, v, mask)

    with pytest.raises(ExerciseFailed, match=r"\(\.\.\., seq_k, seq_q\): you computed K Q\^T"):
        ex.check_scaled_dot_product_attention(sq_ok_then_kq)


def test_sdpa_wrong_return_and_shapes_raise():
    with pytest.raises(ExerciseFailed, match=r"should return a tuple \(output, weights\)"):
        ex.check_scaled_dot_product_attention(lambda q, k, v, mask=None: sdpa(q, k, v, mask, returns="output"))
    with pytest.raises(ExerciseFailed, match=r"returned \(weights, output\).*Return them in the order \(output, weights\)"):
        ex.check_scaled_dot_product_attention(lambda q, k, v, mask=None: sdpa(q, k, v, mask, returns="swapped"))
    with pytest.raises(ExerciseFailed, match=r"output should return shape"):
        ex.check_scaled_dot_product_attention(lambda q, k, v, mask=None: (sdpa(q, k, v, mask)[0][..., :1], sdpa(q, k, v, mask)[1]))


def test_sdpa_exception_in_readers_code_is_reported_with_shapes():
    def broken(q, k, v, mask=None):
        return q @ k, None  # (…, 5, 4) @ (…, 5, 4): a shape error

    with pytest.raises(ExerciseFailed, match=r"(?s)raised RuntimeError.*called with arguments of shapes \(2, 5, 4\)"):
        ex.check_scaled_dot_product_attention(broken)


def test_sdpa_unrecognised_mistake_gets_generic_message():
    with pytest.raises(ExerciseFailed, match=r"largest difference from the right answer"):
        ex.check_scaled_dot_product_attention(lambda q, k, v, mask=None: sdpa(1.1 * q, k, v, mask))


# ------------------------------------------------------------------------------------ causal_mask


def test_causal_mask_correct(capsys):
    assert ex.check_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool).tril()).passed is True
    assert "Correct" in capsys.readouterr().out
    assert ex.check_causal_mask(lambda n: torch.arange(n)[:, None] >= torch.arange(n)[None, :]).passed is True


def test_causal_mask_stub_is_pending(capsys):
    assert ex.check_causal_mask(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn, hint",
    [
        (lambda n: torch.ones(n, n, dtype=torch.bool).triu(), r"Your mask is the upper triangle"),
        (lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1), r"Your mask excludes the diagonal"),
        (lambda n: torch.ones(n, n, dtype=torch.bool).triu(1), r"Your mask is inverted: True where a key is hidden"),
        (lambda n: torch.ones(n, n, dtype=torch.bool), r"Your mask is all True"),
        (lambda n: torch.ones(n, n).tril(), r"right pattern but dtype torch\.float32"),
        (lambda n: torch.ones(n, n, dtype=torch.long).tril(), r"right pattern but dtype torch\.int64"),
        (lambda n: torch.ones(5, 5, dtype=torch.bool).tril()[:n, :n] if n <= 5 else torch.zeros(n, n, dtype=torch.bool),
         r"causal_mask\(8\) gives the wrong pattern"),
    ],
)
def test_causal_mask_mistakes(fn, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_causal_mask(fn)


def test_causal_mask_wrong_shape_raises():
    with pytest.raises(ExerciseFailed, match=r"should return shape \(5, 5\)"):
        ex.check_causal_mask(lambda n: torch.ones(n, n + 1, dtype=torch.bool).tril())
    with pytest.raises(ExerciseFailed, match=r"should return a torch.Tensor"):
        ex.check_causal_mask(lambda n: [[True]])


# ------------------------------------------------------------------------------- split / merge heads


def split_ok(x, n_heads):
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads).transpose(1, 2)


def merge_ok(x):
    b, h, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, h * d)


def test_split_and_merge_correct(capsys):
    assert ex.check_split_heads(split_ok).passed is True
    assert ex.check_merge_heads(merge_ok).passed is True
    assert capsys.readouterr().out.count("Correct") == 2
    assert ex.check_merge_heads(lambda x: x.transpose(1, 2).contiguous().view(x.shape[0], x.shape[2], -1)).passed is True


def test_split_and_merge_stubs_are_pending(capsys):
    assert ex.check_split_heads(stub).passed is False
    assert ex.check_merge_heads(stub).passed is False
    assert capsys.readouterr().out.count("Not implemented yet") == 2


@pytest.mark.parametrize(
    "fn, hint",
    [
        (lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1), r"without a transpose: that cuts the memory"),
        (lambda x, h: x.reshape(x.shape[0], x.shape[1], -1, h).permute(0, 3, 1, 2), r"split d_model as \(d_head, n_heads\)"),
        (lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1), r"you still need to swap the seq and head axes"),
        (lambda x, h: x.reshape(x.shape[0], x.shape[1], -1), r"should return shape \(2, 4, 3, 5\)"),
    ],
)
def test_split_heads_mistakes(fn, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_split_heads(fn)


@pytest.mark.parametrize(
    "fn, hint",
    [
        (lambda x: x.reshape(x.shape[0], x.shape[2], -1), r"straight to \(batch, seq, d_model\) without a transpose"),
        (lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1), r"order \(d_head, n_heads\)"),
        (lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1), r"\.view\(\) cannot reshape a transposed tensor"),
        (lambda x: x.reshape(x.shape[0], x.shape[1], -1), r"should return shape \(2, 3, 20\)"),
    ],
)
def test_merge_heads_mistakes(fn, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_merge_heads(fn)


# ------------------------------------------------------------------- diagnoses added after the review of chapter 2


def test_sdpa_fixed_transpose_fails_on_4d_inputs_with_a_hint():
    """transpose(1, 2) is right for 3-D inputs only: the 4-D case (batch, heads, seq, d) catches it."""
    def fixed_dims(q, k, v, mask=None):
        scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        w = scores.softmax(-1)
        if mask is not None:
            w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return w @ v, w

    with pytest.raises(ExerciseFailed, match=r"(?s)raised RuntimeError.*4-D.*k.transpose\(-2, -1\) \(not transpose\(1, 2\)\)"):
        ex.check_scaled_dot_product_attention(fixed_dims)


def test_sdpa_transpose_of_the_4d_axes_fails_on_3d_inputs_with_a_hint():
    def four_d_only(q, k, v, mask=None):  # transpose(2, 3) swaps the last two axes of 4-D inputs only
        w = (q @ k.transpose(2, 3) / math.sqrt(q.shape[-1])).softmax(-1)
        return w @ v, w

    with pytest.raises(ExerciseFailed, match=r"(?s)raised IndexError.*Count from the end: k.transpose\(-2, -1\)"):
        ex.check_scaled_dot_product_attention(four_d_only)


@pytest.mark.parametrize(
    "kwargs, hint",
    [
        (dict(scale_after=True), r"You divided by sqrt\(d_k\) \*after\* the softmax"),
        (dict(scale="d_v"), r"You scaled by sqrt\(d_v\) = sqrt\(3\)"),
        (dict(scale="seq"), r"square root of the number of positions, sqrt\(5\)"),
    ],
)
def test_sdpa_scale_slips_are_named(kwargs, hint):
    with pytest.raises(ExerciseFailed, match=hint) as info:
        ex.check_scaled_dot_product_attention(lambda q, k, v, mask=None: sdpa(q, k, v, mask, **kwargs))
    assert "Is the softmax over the last dimension" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs, hint",
    [
        (dict(zero_empty_rows=False), r"that query's weights are NaN, since the softmax of a row of -inf is 0 / 0"),
        (dict(zero_empty_rows=False, fill=-1e9), r"that query's weights are uniform, 1/6 on every key"),
    ],
)
def test_sdpa_query_that_sees_no_key_is_diagnosed(kwargs, hint):
    """The plain softmax gives NaN (or, with a finite fill, uniform weights) where the library gives zeros."""
    with pytest.raises(ExerciseFailed, match=rf"(?s){hint}.*zero weights.*masked_fill\(~mask.any\(dim=-1, keepdim=True\), 0.0\)"):
        ex.check_scaled_dot_product_attention(lambda q, k, v, mask=None: sdpa(q, k, v, mask, **kwargs))


def test_sdpa_4d_case_has_one_query_that_sees_no_key():
    q, k, v, mask = ex.sdpa_inputs_4d()
    assert q.shape == (2, 3, 4, 4) and k.shape == (2, 3, 6, 4) and v.shape == (2, 3, 6, 5)
    empty = ~mask.any(-1)  # (2, 1, 4)
    assert empty.sum() == 1 and empty[1, 0, 3]
    out, w = ex._sdpa(q, k, v, mask)
    assert (w[1, :, 3] == 0).all() and (out[1, :, 3] == 0).all()


def test_sdpa_new_mistakes_have_their_own_answers():
    q, k, v = ex.sdpa_inputs(seed=2)
    group = list(ex.sdpa_weight_mistakes(q, k, None, d_v=v.shape[-1]).values()) + [ex._sdpa(q, k, v)[1]]
    for i in range(len(group)):
        for j in range(i + 1, len(group)):
            assert not torch.allclose(group[i], group[j], atol=1e-3), (i, j)


@pytest.mark.parametrize(
    "fill, hint",
    [
        (float("-inf"), r"returned the additive mask M, 0 on and below the diagonal and -inf above"),
        (-1e9, r"returned the additive mask M, 0 on and below the diagonal and -inf above"),
    ],
)
def test_causal_mask_additive_float_mask_is_recognised(fill, hint):
    """nn.Transformer.generate_square_subsequent_mask's format: not 'inverted', but additive."""
    def additive(n):
        return torch.zeros(n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), fill)

    with pytest.raises(ExerciseFailed, match=hint) as info:
        ex.check_causal_mask(additive)
    assert "inverted" not in str(info.value) and "M == 0" in str(info.value)
    with pytest.raises(ExerciseFailed, match=r"additive mask M .* 0 entries are not the causal pattern"):
        ex.check_causal_mask(lambda n: torch.zeros(n, n).masked_fill(torch.ones(n, n, dtype=torch.bool).tril(), fill))


def test_causal_mask_generate_square_subsequent_mask_is_recognised():
    from torch import nn

    with pytest.raises(ExerciseFailed, match=r"additive mask M"):
        ex.check_causal_mask(lambda n: nn.Transformer.generate_square_subsequent_mask(n))


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x, h: x.view(x.shape[0], x.shape[1], -1, h).transpose(1, 2), r"\(2, 5, 3, 4\) = \(batch, d_head, seq, n_heads\)"),
        (lambda x, h: x.view(x.shape[0], x.shape[1], -1, h), r"\(2, 3, 5, 4\) = \(batch, seq, d_head, n_heads\)"),
    ],
)
def test_split_heads_d_head_first_is_named_by_shape(fn, shape):
    with pytest.raises(ExerciseFailed, match=rf"{shape}.*split d_model as \(d_head, n_heads\)"):
        ex.check_split_heads(fn)
