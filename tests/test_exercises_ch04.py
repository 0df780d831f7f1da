"""exercises.ch04: right answers pass, stubs are pending, each common mistake gets its own hint."""

import itertools

import pytest
import torch

from transformer_lib.exercises import ch04 as ex
from transformer_lib.exercises._checking import ExerciseFailed, close


def stub(*args, **kwargs):
    raise NotImplementedError


# ------------------------------------------------------------------------------- layer_norm


def ln(x, weight, bias, eps, *, dim=-1, correction=0, eps_inside=True, centre=True, gain=True, add_bias=True):
    """A reader's LayerNorm, right by default, with each mistake as a switch."""
    mean = x.mean(dim=dim, keepdim=True)
    var = x.var(dim=dim, keepdim=True, correction=correction)
    denom = torch.sqrt(var + eps) if eps_inside else torch.sqrt(var) + eps
    out = ((x - mean) if centre else x) / denom
    if gain:
        out = out * weight
    return out + bias if add_bias else out


def test_layer_norm_correct(capsys):
    assert ex.check_layer_norm(ln).passed is True
    assert "Correct" in capsys.readouterr().out


def test_layer_norm_correct_with_torch_functional():
    fn = lambda x, w, b, eps: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps)  # noqa: E731
    assert ex.check_layer_norm(fn).passed is True


def test_layer_norm_stub_is_pending(capsys):
    assert ex.check_layer_norm(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(eps_inside=False), r"Is your epsilon inside the square root\?"),
        (dict(eps_inside=False, correction=1), r"You used x\.std\(\)"),
        (dict(correction=1), r"divides by d - 1 \(the unbiased estimate"),
        (dict(dim=0), r"wrong dimension \(over the batch, dim 0\)"),
        (dict(dim=1), r"wrong dimension \(over the sequence, dim 1\)"),
        (dict(dim=(1, 2)), r"wrong dimension \(over the whole sequence"),
        (dict(gain=False), r"You forgot the gain: multiply"),
        (dict(add_bias=False), r"You forgot the bias: add bias"),
        (dict(gain=False, add_bias=False), r"You forgot the gain and the bias"),
        (dict(centre=False), r"You forgot to subtract the mean: LayerNorm divides"),
    ],
)
def test_layer_norm_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_layer_norm(lambda x, w, b, eps: ln(x, w, b, eps, **mistake))


def test_layer_norm_mean_square_instead_of_variance():
    fn = lambda x, w, b, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w + b  # noqa: E731
    with pytest.raises(ExerciseFailed, match=r"your variance is mean\(x\*\*2\) \(that is RMSNorm\)"):
        ex.check_layer_norm(fn)


def test_layer_norm_ignored_eps():
    with pytest.raises(ExerciseFailed, match=r"Did you use the eps argument\?"):
        ex.check_layer_norm(lambda x, w, b, eps: ln(x, w, b, 1e-5))


def test_layer_norm_one_pass_variance_is_diagnosed_as_cancellation():
    """E[x^2] - E[x]^2 is the variance on paper; in float32 it loses the quiet token's digits. Not a wrong formula."""

    def one_pass(x, w, b, eps):
        mean = x.mean(-1, keepdim=True)
        var = x.pow(2).mean(-1, keepdim=True) - mean**2  # right on paper, cancels in float32
        return (x - mean) / torch.sqrt(var + eps) * w + b

    with pytest.raises(ExerciseFailed) as info:
        ex.check_layer_norm(one_pass)
    message = str(info.value)
    assert "catastrophic cancellation" in message and "right on paper" in message
    assert "mean((x - mean)**2)" in message and "Check the formula" not in message

    def one_pass_rsqrt(x, w, b, eps):  # the same idea written differently: the same diagnosis
        var = (x * x).mean(-1, keepdim=True) - x.mean(-1, keepdim=True).pow(2)
        return (x - x.mean(-1, keepdim=True)) * torch.rsqrt(var + eps) * w + b

    with pytest.raises(ExerciseFailed, match="catastrophic cancellation"):
        ex.check_layer_norm(one_pass_rsqrt)


def test_layer_norm_wrong_formula_is_not_called_cancellation():
    with pytest.raises(ExerciseFailed) as info:
        ex.check_layer_norm(lambda x, w, b, eps: ln(x, w, b, eps) * 1.01)
    assert "cancellation" not in str(info.value)


def test_layer_norm_no_eps_and_uncentred_variance():
    with pytest.raises(ExerciseFailed, match=r"Where is eps\? LayerNorm divides by sqrt\(var \+ eps\)"):
        ex.check_layer_norm(lambda x, w, b, eps: ln(x, w, b, 0.0))
    centred_over_mean_square = lambda x, w, b, eps: (  # noqa: E731
        (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w + b)
    with pytest.raises(ExerciseFailed, match=r"Your variance is mean\(x\*\*2\), the mean square of x before centring"):
        ex.check_layer_norm(centred_over_mean_square)


@pytest.mark.parametrize("check, missing_keepdim", [
    (ex.check_layer_norm, lambda x, w, b, eps: (x - x.mean(-1)) / torch.sqrt(x.var(-1, correction=0) + eps) * w + b),
    (ex.check_rms_norm, lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1) + eps) * w),
])
def test_missing_keepdim_gets_a_diagnosis(check, missing_keepdim):
    with pytest.raises(ExerciseFailed) as info:
        check(missing_keepdim)
    message = str(info.value)
    assert "raised RuntimeError" in message and "called with arguments (2, 3, 5)" in message
    assert "keepdim=True" in message and "(batch, seq, 1)" in message


def test_other_exceptions_are_reported_without_the_keepdim_hint():
    def broken(x, w, b, eps):
        raise ValueError("oops")

    with pytest.raises(ExerciseFailed) as info:
        ex.check_layer_norm(broken)
    assert "raised ValueError: oops" in str(info.value) and "keepdim" not in str(info.value)


def test_layer_norm_unknown_mistake_reports_the_error():
    with pytest.raises(ExerciseFailed, match=r"wrong values \(largest difference"):
        ex.check_layer_norm(lambda x, w, b, eps: ln(x, w, b, eps) + 0.1)


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda x, w, b, eps: ln(x, w, b, eps)[..., :-1], r"should return shape \(2, 3, 5\), but it returned \(2, 3, 4\)"),
        (lambda x, w, b, eps: ln(x, w, b, eps).tolist(), r"should return a torch\.Tensor, but it returned list"),
    ],
)
def test_layer_norm_wrong_type_or_shape(answer, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex.check_layer_norm(answer)


# --------------------------------------------------------------------------------- rms_norm


def rms(x, weight, eps, *, centre=False, eps_inside=True, use_var=False, sqrt=True, gain=True, dim=-1):
    """A reader's RMSNorm, right by default, with each mistake as a switch."""
    h = x - x.mean(dim, keepdim=True) if centre else x
    ms = x.var(dim, keepdim=True, correction=0) if use_var else h.pow(2).mean(dim, keepdim=True)
    if not sqrt:
        denom = ms + eps
    else:
        denom = torch.sqrt(ms + eps) if eps_inside else torch.sqrt(ms) + eps
    out = h / denom
    return out * weight if gain else out


def test_rms_norm_correct(capsys):
    assert ex.check_rms_norm(rms).passed is True
    assert "Correct" in capsys.readouterr().out


def test_rms_norm_correct_with_torch_module():
    def fn(x, w, eps):
        m = torch.nn.RMSNorm(x.shape[-1], eps=eps)
        with torch.no_grad():
            m.weight.copy_(w)
        return m(x)

    assert ex.check_rms_norm(fn).passed is True


def test_rms_norm_stub_is_pending(capsys):
    assert ex.check_rms_norm(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(centre=True), r"You subtracted the mean: that is LayerNorm"),
        (dict(centre=True, use_var=True), r"You subtracted the mean: that is LayerNorm"),
        (dict(eps_inside=False), r"Is your epsilon inside the square root\?"),
        (dict(use_var=True), r"You divided by the standard deviation"),
        (dict(sqrt=False), r"You forgot the square root"),
        (dict(gain=False), r"You forgot the gain"),
        (dict(dim=0), r"wrong dimension \(over the batch, dim 0\)"),
    ],
)
def test_rms_norm_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_rms_norm(lambda x, w, eps: rms(x, w, eps, **mistake))


def test_rms_norm_centred_numerator_only():
    fn = lambda x, w, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w  # noqa: E731
    with pytest.raises(ExerciseFailed, match=r"You subtracted the mean from x: RMSNorm does not centre"):
        ex.check_rms_norm(fn)


@pytest.mark.parametrize(
    "answer, hint",
    [
        (lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w, r"summed the squares"),
        (lambda x, w, eps: x / x.norm(dim=-1, keepdim=True) * w, r"vector's length, x\.norm\(dim=-1\)"),
        (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True)) * w, r"Where is eps\?"),
        (lambda x, w, eps: torch.nn.functional.normalize(x, dim=-1) * x.shape[-1] ** 0.5 * w, r"F\.normalize"),
        (lambda x, w, eps: rms(x, w, eps, dim=1), r"wrong dimension \(over the sequence, dim 1\)"),
    ],
)
def test_rms_norm_more_mistakes(answer, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_rms_norm(answer)


def test_rms_norm_std_mistake():
    with pytest.raises(ExerciseFailed, match=r"You divided by x\.std\(\)"):
        ex.check_rms_norm(lambda x, w, eps: x / (x.std(-1, keepdim=True) + eps) * w)


def test_rms_norm_ignored_eps():
    with pytest.raises(ExerciseFailed, match=r"Did you use the eps argument\?"):
        ex.check_rms_norm(lambda x, w, eps: rms(x, w, 1e-6))


def test_rms_norm_wrong_shape():
    with pytest.raises(ExerciseFailed, match=r"should return shape \(2, 3, 5\), but it returned \(2, 3, 1\)"):
        ex.check_rms_norm(lambda x, w, eps: x.pow(2).mean(-1, keepdim=True).sqrt())


# ------------------------------------------------------------------------------ residuals

PRE = lambda x, norm, fn: x + fn(norm(x))  # noqa: E731
POST = lambda x, norm, fn: norm(x + fn(x))  # noqa: E731


def test_residuals_correct(capsys):
    assert ex.check_pre_norm_residual(PRE).passed is True
    assert ex.check_post_norm_residual(POST).passed is True
    out = capsys.readouterr().out
    assert "norm_position='pre'" in out and "norm_position='post'" in out


def test_residuals_stub_is_pending(capsys):
    assert ex.check_pre_norm_residual(stub).passed is False
    assert ex.check_post_norm_residual(stub).passed is False
    assert capsys.readouterr().out.count("Not implemented yet") == 2


@pytest.mark.parametrize(
    "answer, hint",
    [
        (POST, r"You wrote post-norm"),
        (lambda x, norm, fn: fn(norm(x)), r"You forgot the residual connection"),
        (lambda x, norm, fn: x + fn(x), r"You forgot the norm"),
        (lambda x, norm, fn: x + norm(fn(x)), r"Pre-norm normalises the sublayer's input"),
        (lambda x, norm, fn: norm(x) + fn(norm(x)), r"The residual path must carry x itself"),
        (lambda x, norm, fn: norm(x + fn(norm(x))), r"You normalised twice: pre-norm"),
    ],
)
def test_pre_norm_residual_mistakes(answer, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_pre_norm_residual(answer)


@pytest.mark.parametrize(
    "answer, hint",
    [
        (PRE, r"You wrote pre-norm"),
        (lambda x, norm, fn: norm(fn(x)), r"You forgot the residual connection"),
        (lambda x, norm, fn: x + fn(x), r"You forgot the norm"),
        (lambda x, norm, fn: x + norm(fn(x)), r"Post-norm normalises the sum"),
        (lambda x, norm, fn: norm(x + fn(norm(x))), r"You normalised twice: post-norm"),
        (lambda x, norm, fn: norm(norm(x) + fn(x)), r"The residual sum must use x"),
        (lambda x, norm, fn: norm(x) + fn(norm(x)), r"norm\(x\) \+ fn\(norm\(x\)\) normalises the stream before"),
    ],
)
def test_post_norm_residual_mistakes(answer, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_post_norm_residual(answer)


@pytest.mark.parametrize("check", [ex.check_pre_norm_residual, ex.check_post_norm_residual])
def test_residual_wrong_shape(check):
    with pytest.raises(ExerciseFailed, match=r"should return shape \(2, 4, 8\), but it returned \(2, 4\)"):
        check(lambda x, norm, fn: x.sum(-1))


@pytest.mark.parametrize("check", [ex.check_pre_norm_residual, ex.check_post_norm_residual])
def test_residual_exceptions_name_the_arguments(check):
    with pytest.raises(ExerciseFailed, match=r"(?s)_norm_residual raised RuntimeError: .*called with arguments \(2, 4, 8\)"):
        check(lambda x, norm, fn: x + fn(norm(x))[..., :3])


def test_residual_that_ignores_its_arguments_fails_the_block_check():
    x0, norm0, fn0 = ex._residual_parts()  # a step hard-wired to the check's own first norm and sublayer

    def sneaky(x, norm, fn):
        return x + fn0(norm0(x))

    with pytest.raises(ExerciseFailed, match=r"do not reproduce the block"):
        ex.check_pre_norm_residual(sneaky)


# ------------------------------------------------------------------------- the check inputs


@pytest.mark.parametrize(
    "case",
    [
        ex.layer_norm_case(),
        ex.rms_norm_case(),
        *[
            (None, (lambda x, n, f, p: (x + f(n(x)) if p == "pre" else n(x + f(x))).detach())(*ex._residual_parts(), pos),
             ex.residual_mistakes(*ex._residual_parts(), pos))
            for pos in ("pre", "post")
        ],
    ],
)
def test_every_mistake_is_distinguishable(case):
    """No mistake gives the right answer, and no two mistakes give the same one."""
    _, expected, mistakes = case
    answers = [expected, *mistakes.values()]
    for a, b in itertools.combinations(answers, 2):
        assert not close(a, b)


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ex.check_pre_norm_residual(PRE)
    assert torch.equal(torch.rand(3), expected)


# ------------------------------------------------------------- the chapter's figure builder


def test_token_histograms_dropdown_switches_views():
    from transformer_lib.viz.normalization import token_histograms

    x = torch.randn(3, 200)
    fig = token_histograms({"raw": x, "doubled": 2 * x}, ["t1", "t2", "t3"], n_bins=20)
    assert len(fig.data) == 6 and [t.visible for t in fig.data] == [True] * 3 + [False] * 3
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["raw", "doubled"]
    assert [list(b.args[0]["visible"]) for b in buttons] == [[True] * 3 + [False] * 3, [False] * 3 + [True] * 3]
    assert buttons[1].args[1]["xaxis.range"][1] > 1.9 * buttons[0].args[1]["xaxis.range"][1]  # each view its range
    for trace in fig.data:  # densities: area 1
        assert abs(sum(trace.y) * (trace.x[1] - trace.x[0]) - 1) < 1e-5
    assert fig.data[3].name.startswith("t1: mean") and "std" in fig.data[3].name


def test_token_histograms_rejects_bad_views():
    from transformer_lib.viz.normalization import token_histograms

    with pytest.raises(ValueError, match=r"view 'a' must have shape \(n_tokens=3, d\), got \(2, 5\)"):
        token_histograms({"a": torch.randn(2, 5)}, ["t1", "t2", "t3"])
    with pytest.raises(ValueError, match="at least one"):
        token_histograms({}, ["t1"])
