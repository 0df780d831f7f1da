"""exercises.ch10: right answers pass, stubs are pending, each common mistake gets its own hint."""

import itertools
import math

import pytest
import torch.nn.functional as F
import torch

import transformer_lib as tl
from transformer_lib.exercises import ch10 as ex
from transformer_lib.exercises._checking import ExerciseFailed


def stub(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------------------- (a) llama_kwargs

LLAMA = dict(norm="rmsnorm", positional="rope", ffn="swiglu", bias=False, tie_weights=False)


def with_(**changes):
    """A reader's answer: the right dict with some settings changed (None: left out)."""
    kwargs = {**LLAMA, **changes}
    return lambda: {k: v for k, v in kwargs.items() if v is not None}


def test_llama_kwargs_correct(capsys):
    assert ex.check_llama_kwargs(lambda: dict(LLAMA)).passed is True
    out = capsys.readouterr().out
    assert "Correct" in out and "hidden size 128" in out  # 8/3 * 48 = 128 exactly


def test_llama_kwargs_accepts_a_config_and_harmless_extras():
    assert ex.check_llama_kwargs(lambda: tl.GPT2Config(**LLAMA)).passed is True
    assert ex.check_llama_kwargs(lambda: {**LLAMA, "norm_eps": 1e-6, "ffn_multiple_of": 256, "d_model": 4096}).passed is True
    assert ex.check_llama_kwargs(lambda: {**LLAMA, "dropout": 0.0}).passed is True  # LLaMA's (no dropout)


def test_llama_kwargs_config_with_dropout_is_diagnosed():
    with pytest.raises(ExerciseFailed, match=r"dropout=0.2: LLaMA's code has no dropout"):
        ex.check_llama_kwargs(lambda: tl.GPT2Config(**LLAMA, dropout=0.2))


def test_llama_kwargs_stub_is_pending(capsys):
    assert ex.check_llama_kwargs(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer, hint",
    [
        (with_(norm=None), r"Still LayerNorm: LLaMA normalises with RMSNorm"),
        (with_(norm="layernorm"), r"Still LayerNorm.*norm='rmsnorm'"),
        (with_(positional=None), r"Still learned positions .*positional='rope'"),
        (with_(positional="sinusoidal"), r"positional='sinusoidal' is the original Transformer's"),
        (with_(positional="none"), r"positional='none' leaves the decoder"),
        (with_(ffn=None), r"Still a plain gelu_tanh FFN \(GPT-2's\)"),
        (with_(ffn="gelu"), r"Still a plain gelu FFN"),
        (with_(ffn="silu"), r"ffn='silu' is a plain two-matrix FFN"),
        (with_(ffn="geglu"), r"ffn='geglu' gates with GELU"),
        (with_(bias=None), r"Biases are still on: .*bias=False"),
        (with_(bias=True), r"Biases are still on"),
        (with_(tie_weights=None), r"output head is still tied .*tie_weights=False"),
        (with_(norm_position="post"), r"norm_position='post' is the original Transformer's"),
        (with_(d_ff=256), r"Leave d_ff out \(None\)"),
        (with_(dropout=0.1), r"dropout=0.1: LLaMA's code has no dropout anywhere"),
    ],
)
def test_llama_kwargs_each_missing_swap(answer, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_llama_kwargs(answer)


def test_llama_kwargs_names_every_missing_swap_at_once():
    with pytest.raises(ExerciseFailed) as info:
        ex.check_llama_kwargs(lambda: {})  # GPT-2 itself
    message = str(info.value)
    assert "5 things to fix" in message
    for hint in ("Still LayerNorm", "Still learned positions", "Still a plain gelu_tanh FFN", "Biases are still on",
                 "still tied"):
        assert hint in message


@pytest.mark.parametrize(
    "answer, hint",
    [
        (lambda: {**LLAMA, "activation": "swiglu"}, r"'activation' \(the setting is called 'ffn'\)"),
        (lambda: {**LLAMA, "tie_word_embeddings": False}, r"'tie_word_embeddings' \(the setting is called 'tie_weights'\)"),
        (lambda: {**LLAMA, "flavour": "llama"}, r"GPT2Config has no setting 'flavour'"),
        (with_(norm="RMSNorm"), r"GPT2Config rejected these settings: .*norm"),
        (with_(bias="False"), r"GPT2Config rejected these settings: .*bias"),
    ],
)
def test_llama_kwargs_bad_names_and_values(answer, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_llama_kwargs(answer)


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda: list(LLAMA.items()), r"should return a dict of GPT2Config keyword arguments.*returned list"),
        (lambda: "llama", r"returned str"),
        (lambda: {1: "rmsnorm"}, r"string keys"),
    ],
)
def test_llama_kwargs_wrong_type(answer, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex.check_llama_kwargs(answer)


def test_llama_kwargs_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ex.check_llama_kwargs(lambda: dict(LLAMA))
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------------- (b) swiglu_param_count


def count(d_model, multiple_of, bias, *, matrices=3, hidden="up", bias_terms="right", always_bias=False):
    """A reader's count, right by default, with each mistake as a switch."""
    x = 8 * d_model / 3
    h = {
        "up": multiple_of * math.ceil(x / multiple_of),
        "4d": 4 * d_model,
        "exact": x,
        "int": int(x),
        "int_up": math.ceil(x),
        "nearest": multiple_of * round(x / multiple_of),
        "down": multiple_of * (int(x) // multiple_of),
        "64": 64 * math.ceil(x / 64),
    }[hidden]
    n = matrices * d_model * h
    if bias or always_bias:
        n += {"right": 2 * h + d_model, "none": 0, "3h": 3 * h, "2h": 2 * h, "h+d": h + d_model, "3d": 3 * d_model}[bias_terms]
    return int(n) if float(n).is_integer() else n


def test_swiglu_param_count_correct(capsys):
    assert ex.check_swiglu_param_count(count).passed is True
    out = capsys.readouterr().out
    assert "Correct" in out and "202,383,360" not in out and "135,266,304" in out  # 3 * 4096 * 11008


def test_swiglu_param_count_correct_with_the_library():
    def fn(d_model, multiple_of, bias):
        with torch.device("meta"):
            return tl.count_parameters(tl.GatedFeedForward(d_model, multiple_of=multiple_of, bias=bias))

    assert ex.check_swiglu_param_count(fn).passed is True
    assert ex.check_swiglu_param_count(lambda d, m, b: float(count(d, m, b))).passed is True  # a whole float is fine too
    assert ex.check_swiglu_param_count(lambda d, m, b: torch.tensor(count(d, m, b))).passed is True


def test_swiglu_param_count_stub_is_pending(capsys):
    assert ex.check_swiglu_param_count(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(matrices=2), r"You counted two weight matrices; SwiGLU has three"),
        (dict(hidden="exact"), r"Your count is 8 d_model\^2"),
        (dict(matrices=2, hidden="4d"), r"Your count is 8 d_model\^2: either you counted a plain FFN"),
        (dict(hidden="4d"), r"^(?!.*two weight).*The hidden size is 4 d_model: that is the plain FFN's"),
        (dict(hidden="int"), r"rounded to a whole number but not to a multiple of multiple_of: round"),
        (dict(hidden="int_up"), r"not to a multiple of multiple_of \(your int rounds up"),
        (dict(hidden="nearest"), r"rounded to the \*nearest\* multiple"),
        (dict(hidden="down"), r"rounded \*down\* to a multiple"),
        (dict(hidden="64"), r"ignores the multiple_of argument"),
        (dict(matrices=2, hidden="down"), r"two weight matrices.*rounded \*down\*"),
        (dict(matrices=2, hidden="exact"), r"two weight matrices.*The hidden size is not rounded"),
        (dict(always_bias=True), r"bias=False: there are no biases to count"),
        (dict(bias_terms="none"), r"bias=True but you counted no biases"),
        (dict(bias_terms="3h"), r"so its bias has d_model entries, not d_ff"),
        (dict(bias_terms="2h"), r"You forgot W_out's bias"),
        (dict(bias_terms="h+d"), r"biases of two layers only"),
        (dict(bias_terms="3d"), r"not d_model for all three"),
    ],
)
def test_swiglu_param_count_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_swiglu_param_count(lambda d, m, b: count(d, m, b, **mistake))


def test_swiglu_param_count_unknown_mistakes_report_the_numbers():
    with pytest.raises(ExerciseFailed, match=r"wrong counts without biases: .*right: 73,728"):
        ex.check_swiglu_param_count(lambda d, m, b: count(d, m, b) + 1)
    with pytest.raises(ExerciseFailed, match=r"the weights are right .*the biases add 2 \* d_ff \+ d_model"):
        ex.check_swiglu_param_count(lambda d, m, b: count(d, m, b) + (7 if b else 0))


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda d, m, b: [count(d, m, b)], r"should return one number \(an int\), but it returned list"),
        (lambda d, m, b: torch.tensor([count(d, m, b), 0]), r"returned a tensor of shape \(2,\)"),
        (lambda d, m, b: str(count(d, m, b)), r"returned str"),
        (lambda d, m, b: True, r"returned bool"),
    ],
)
def test_swiglu_param_count_wrong_type_or_shape(answer, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex.check_swiglu_param_count(answer)


def test_swiglu_cases_match_the_library_and_every_mistake_is_distinguishable():
    cases = [c for c in ex.SWIGLU_CASES if not c[2]]
    right = [3 * d * tl.gated_hidden_size(d, m) for d, m, _ in cases]
    for (d, m, b), n in zip(ex.SWIGLU_CASES, [ex._reference_count(*c) for c in ex.SWIGLU_CASES]):
        h = tl.gated_hidden_size(d, m)
        assert n == 3 * d * h + (2 * h + d if b else 0)
    answers = [right, *ex.swiglu_count_mistakes().values()]
    for a, b in itertools.combinations(answers, 2):
        assert any(abs(x - y) >= 0.5 for x, y in zip(a, b))
    assert tl.gated_hidden_size(4096, 256) == 11008  # LLaMA-7B's FFN width
    for d, m in ((160, 64), (100, 32)):  # up, nearest and down differ somewhere
        x = 8 * d / 3
        assert len({m * math.ceil(x / m), m * math.floor(x / m)}) == 2
    assert round(8 * 100 / 3 / 32) * 32 != math.ceil(8 * 100 / 3 / 32) * 32


# ---------------------------------------------------------------------------- (c) rms_norm in LLaMA's precision


def rms_norm(x, weight, eps, *, centre=None, eps_at="inside", dim=-1, gain=True, divisor="mean",
             stats="float32", out=None):
    """A reader's RMSNorm, right by default (LLaMA's: float32 statistics, cast back before the weight),
    with each mistake as a switch."""
    h = x if stats == "input" else x.float()
    if centre == "layernorm":  # centred, and divided by the standard deviation
        h = h - h.mean(-1, keepdim=True)
        scale = (h.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    else:
        total = h.pow(2).sum(dim, keepdim=True)  # the mean square of x itself
        if centre == "only":  # ... dividing the centred x
            h = h - h.mean(-1, keepdim=True)
        n = 1
        for d in ([dim] if isinstance(dim, int) else dim):
            n *= x.shape[d]
        ms = total if divisor == "sum" else total / n
        scale = {"inside": (ms + eps).sqrt(), "outside": ms.sqrt() + eps, "none": ms.sqrt()}[eps_at]
    y = (h / scale).to(x.dtype if out is None else out)
    return y * weight.to(y.dtype) if gain else y


def test_rms_norm_correct(capsys):
    assert ex.check_rms_norm(rms_norm).passed is True
    assert "Correct" in capsys.readouterr().out
    # other right ways: rsqrt, the weight multiplied in float32 before the cast, the library itself
    assert ex.check_rms_norm(
        lambda x, w, eps: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) * w.float())
        .to(x.dtype)).passed is True

    def library(x, w, eps):
        norm = tl.RMSNorm(x.shape[-1], eps).to(x.dtype)
        with torch.no_grad():
            norm.weight.copy_(w)
        return norm(x).detach()

    assert ex.check_rms_norm(library).passed is True


def test_rms_norm_stub_is_pending(capsys):
    assert ex.check_rms_norm(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(centre="layernorm"), r"You subtracted the mean: that is LayerNorm"),
        (dict(centre="only"), r"subtracted the mean from x before dividing"),
        (dict(eps_at="outside"), r"epsilon inside the square root"),
        (dict(eps_at="none"), r"Where is eps\?"),
        (dict(dim=0), r"wrong dimension \(over the batch, dim 0\)"),
        (dict(dim=1), r"wrong dimension \(over the sequence, dim 1\)"),
        (dict(dim=(1, 2)), r"wrong dimension \(over the whole sequence"),
        (dict(gain=False), r"You forgot the weight"),
        (dict(divisor="sum"), r"divided by the norm of x, sqrt\(sum\(x\*\*2\)\).*by d_model"),
        (dict(stats="input"), r"x in float16\) is not right yet\. Your statistics are computed in float16.*overflow"),
        (dict(out=torch.float32), r"x in float16\) is not right yet\. For a float16 x, rms_norm returned "
                                  r"torch.float32.*\.to\(x\.dtype\)"),
        (dict(out=torch.float64), r"x in float32\) is not right yet\. rms_norm returned torch.float64 for a "
                                  r"torch.float32 x"),
        (dict(out=torch.int64), r"returned torch.int64: the normalised features are fractions"),
    ],
)
def test_rms_norm_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_rms_norm(lambda x, w, eps: rms_norm(x, w, eps, **mistake))


def test_rms_norm_other_mistakes():
    with pytest.raises(ExerciseFailed, match=r"norm of x \(torch.linalg.norm"):
        ex.check_rms_norm(lambda x, w, eps: (x.float() / x.float().norm(dim=-1, keepdim=True)).to(x.dtype) * w)
    with pytest.raises(ExerciseFailed, match=r"x in float32\) gives the wrong values \(largest difference"):
        ex.check_rms_norm(lambda x, w, eps: rms_norm(x, w, eps) + 0.1)
    with pytest.raises(ExerciseFailed, match=r"should return shape \(2, 3, 6\)"):
        ex.check_rms_norm(lambda x, w, eps: rms_norm(x, w, eps)[..., 0])
    with pytest.raises(ExerciseFailed, match=r"rms_norm raised RuntimeError"):
        ex.check_rms_norm(lambda x, w, eps: x / x.pow(2).mean(-1) * w)  # no keepdim: does not broadcast


def test_rms_norm_inputs_tell_the_mistakes_apart():
    x, w, eps = ex.rms_norm_inputs()
    assert torch.isinf(ex.rms_norm_inputs(torch.float16)[0].pow(2)).any()  # float16 statistics overflow
    ms = x.pow(2).mean(-1)
    assert (ms < eps).any() and (x.mean(-1).abs() > 0.5).sum() >= 4  # a quiet token; means far from 0
    answers = [rms_norm(x, w, eps), *ex.rms_norm_mistakes(x, w, eps).values()]
    for a, b in itertools.combinations(answers, 2):
        assert not torch.allclose(a, b, atol=1e-4)


# ---------------------------------------------------------------------------- (d) the FFN sublayer


def ffn_sublayer(x, norm_weight, W_gate, W_in, W_out, eps, *, act="silu", on="gate", gate=True, w_out=True,
                 residual="x", norm="pre", norm_gain=True, transpose=False):
    """A reader's x + SwiGLU(RMSNorm(x)), right by default, with each mistake as a switch."""
    def rms(t):
        t = t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps)
        return t * norm_weight if norm_gain else t

    def proj(t, W):
        return t @ W if transpose else t @ W.T

    f = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu, "sigmoid": torch.sigmoid, "none": lambda z: z}[act]

    def ffn(h):
        a, b = (proj(h, W_gate), proj(h, W_in)) if on == "gate" else (proj(h, W_in), proj(h, W_gate))
        hidden = f(a) * b if gate else f(b)
        if on == "both":
            hidden = F.silu(proj(h, W_gate)) * F.silu(proj(h, W_in))
        return proj(hidden, W_out) if w_out else hidden

    if norm == "post":
        return rms(x + ffn(x))
    h = rms(x) if norm == "pre" else x
    out = ffn(h)
    return out if residual == "none" else (h if residual == "h" else x) + out


def test_ffn_sublayer_correct(capsys):
    assert ex.check_ffn_sublayer(ffn_sublayer).passed is True
    assert "Correct" in capsys.readouterr().out
    assert ex.check_ffn_sublayer(  # F.linear and the library's own norm are right too
        lambda x, nw, Wg, Wi, Wo, eps: x + F.linear(F.silu(F.linear(F.rms_norm(x, (x.shape[-1],), nw, eps), Wg))
                                                    * F.linear(F.rms_norm(x, (x.shape[-1],), nw, eps), Wi), Wo)
    ).passed is True


def test_ffn_sublayer_stub_is_pending(capsys):
    assert ex.check_ffn_sublayer(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(on="in"), r"SiLU is on the wrong branch: it goes on the gate"),
        (dict(act="gelu"), r"You used GELU: that is GEGLU"),
        (dict(act="relu"), r"You used ReLU: that is ReGLU"),
        (dict(act="sigmoid"), r"sigmoid\(z\) where SwiGLU uses silu\(z\) = z \* sigmoid\(z\)"),
        (dict(act="none"), r"The SiLU is missing"),
        (dict(on="both"), r"SiLU is applied to both projections"),
        (dict(gate=False), r"The gate is missing: this is a plain SiLU FFN, W_out silu\(W_in h\)"),
        (dict(gate=False, on="in"), r"The gate is missing: this is a plain SiLU FFN, W_out silu\(W_gate h\)"),
        (dict(w_out=False, residual="none"), r"returned shape \(2, 3, 10\).*W_out is missing"),
        (dict(w_out=False), r"(?s)raised RuntimeError.*met a tensor of width d_ff=10.*is W_out missing"),
        (dict(transpose=True), r"(?s)raised RuntimeError.*stored as nn.Linear stores them"),
        (dict(residual="none"), r"You forgot the residual connection"),
        (dict(norm="post"), r"You wrote post-norm"),
        (dict(norm="none"), r"You forgot the norm: this is x \+ FFN\(x\)"),
        (dict(residual="h"), r"The residual path must carry x itself"),
        (dict(norm_gain=False), r"You forgot the norm's weight"),
    ],
)
def test_ffn_sublayer_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_ffn_sublayer(lambda *args: ffn_sublayer(*args, **mistake))


def test_ffn_sublayer_swapped_names_is_the_wrong_branch():
    # the reader swaps W_gate and W_in and puts SiLU on "the gate": the same answer as SiLU on W_in
    with pytest.raises(ExerciseFailed, match=r"SiLU is on the wrong branch.*Swapping W_gate and W_in"):
        ex.check_ffn_sublayer(lambda x, nw, Wg, Wi, Wo, eps: ffn_sublayer(x, nw, Wi, Wg, Wo, eps))


def test_ffn_sublayer_unknown_mistake_reports_the_error():
    with pytest.raises(ExerciseFailed, match=r"ffn_sublayer gives the wrong values \(largest difference"):
        ex.check_ffn_sublayer(lambda *args: ffn_sublayer(*args) * 1.01)


def test_ffn_sublayer_inputs_tell_the_mistakes_apart():
    args = ex.ffn_sublayer_inputs()
    x, _, W_gate, W_in, _, _ = args
    assert W_in.shape[0] != W_in.shape[1]  # transposed weights and a missing W_out change the shape
    pre = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + args[-1]) @ W_gate.T
    assert pre.min() < -2 and pre.max() > 2  # SiLU, GELU, ReLU and sigmoid all differ there
    answers = [ffn_sublayer(*args), *ex.ffn_sublayer_mistakes(*args).values()]
    for a, b in itertools.combinations(answers, 2):
        assert not torch.allclose(a, b, atol=1e-4)


# ---------------------------------------------------------------------------- (e) RoPE on every head


def rope_qk(q, k, offset, base, *, pairing="adjacent", sign=1.0, rotate="qk", q_offset=None, k_offset=None,
            use_base=True, start=0, d=None, seq_dim=-2, swap=False):
    """A reader's RoPE on (batch, n_heads, seq, d_head), right by default, with each mistake as a switch."""
    def turn(x, off):
        d_head = x.shape[-1]
        seq = x.shape[seq_dim]
        i = torch.arange(0, d_head, 2, dtype=torch.float32)
        theta = (base if use_base else 10000.0) ** (-i / (d or d_head))
        angle = torch.arange(off + start, off + start + seq, dtype=torch.float32)[:, None] * theta
        cos, s = angle.cos(), sign * angle.sin()
        if pairing == "halves":
            x1, x2 = x[..., : d_head // 2], x[..., d_head // 2:]
            return torch.cat([x1 * cos - x2 * s, x1 * s + x2 * cos], dim=-1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * s, x1 * s + x2 * cos], dim=-1).flatten(-2)

    def whole(x, off):  # the d_model features of a position as one vector
        b, h, s, dh = x.shape
        flat = x.transpose(1, 2).reshape(b, s, h * dh)
        return turn(flat, off).reshape(b, s, h, dh).transpose(1, 2)

    rot = whole if d == "d_model" else turn
    if d == "d_model":
        d = None
    qo = offset if q_offset is None else q_offset
    ko = offset if k_offset is None else k_offset
    q2 = rot(q, qo) if "q" in rotate else q
    k2 = rot(k, ko) if "k" in rotate else k
    return (k2, q2) if swap else (q2, k2)


def test_rope_qk_correct(capsys):
    assert ex.check_rope_qk(rope_qk).passed is True
    assert "Correct" in capsys.readouterr().out
    assert ex.check_rope_qk(lambda q, k, o, b: list(tl.RotaryEmbedding(q.shape[-1], o + q.shape[-2], b)
                                                    .rotate(q, k, o))).passed is True


def test_rope_qk_stub_is_pending(capsys):
    assert ex.check_rope_qk(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(swap=True), r"You returned \(k, q\)"),
        (dict(rotate="q"), r"Only the queries are rotated"),
        (dict(rotate="k"), r"Only the keys are rotated"),
        (dict(rotate=""), r"Nothing is rotated"),
        (dict(pairing="halves"), r"rotate_half"),
        (dict(sign=-1.0), r"wrong way"),
        (dict(d="d_model"), r"rotated the d_model = n_heads \* d_head features of a position as one vector"),
        (dict(use_base=False), r"offset=5, base=500000\) is not right yet\. You ignored the base argument"),
        (dict(q_offset=0, k_offset=0), r"You ignored the offset: with 5 positions already cached"),
        (dict(k_offset=0), r"Only the queries are turned by the offset"),
        (dict(q_offset=0), r"Only the keys are turned by the offset"),
        (dict(start=1), r"offset=0, base=10000\) is not right yet\. Your positions start one too late"),
        (dict(seq_dim=1), r"(?s)raised RuntimeError.*positions run along dim 2"),
    ],
)
def test_rope_qk_mistakes(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_rope_qk(lambda q, k, o, b: rope_qk(q, k, o, b, **mistake))


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda q, k, o, b: torch.stack(rope_qk(q, k, o, b)), r"should return two tensors, \(q_rot, k_rot\), but "
                                                              r"it returned Tensor"),
        (lambda q, k, o, b: rope_qk(q, k, o, b)[:1], r"returned tuple of length 1"),
        (lambda q, k, o, b: tuple(t[..., :4] for t in rope_qk(q, k, o, b)), r"q_rot should return shape"),
    ],
)
def test_rope_qk_wrong_type_or_shape(answer, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex.check_rope_qk(answer)


def test_rope_qk_inputs_tell_the_mistakes_apart():
    q, k = ex.rope_qk_inputs()
    assert q.shape[1] != q.shape[2]  # heads != seq: positions read off dim 1 do not broadcast
    for offset, base in ex.ROPE_CALLS:
        right = torch.stack(tl.RotaryEmbedding(q.shape[-1], offset + q.shape[-2], base).rotate(q, k, offset))
        answers = [right, *ex.rope_qk_mistakes(q, k, offset, base).values()]
        for a, b in itertools.combinations(answers, 2):
            assert not torch.allclose(a, b, atol=1e-4)


def test_new_checks_are_cheap():
    import time

    start = time.process_time()
    ex.check_rms_norm(rms_norm)
    ex.check_ffn_sublayer(ffn_sublayer)
    ex.check_rope_qk(rope_qk)
    assert time.process_time() - start < 0.5  # the chapter is near its CPU budget
