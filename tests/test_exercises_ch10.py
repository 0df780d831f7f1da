"""exercises.ch10: right answers pass, stubs are pending, each common mistake gets its own hint."""

import itertools
import math

import pytest
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
