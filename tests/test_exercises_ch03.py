"""exercises.ch03: each check accepts a right answer, waits for a stub, and names each mistake."""

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.exercises import ch03 as ex
from transformer_lib.exercises._checking import ExerciseFailed

C = math.sqrt(2.0 / math.pi)


def stub(*args):
    raise NotImplementedError


# ---------------------------------------------------------------------------- (a) gelu_tanh


def gelu_tanh_ok(x):
    return 0.5 * x * (1.0 + torch.tanh(C * (x + 0.044715 * x**3)))


def test_gelu_tanh_right_answers_pass(capsys):
    assert ex.check_gelu_tanh(gelu_tanh_ok).passed is True
    assert ex.check_gelu_tanh(lambda x: F.gelu(x, approximate="tanh")).passed is True
    out = capsys.readouterr().out
    assert out.startswith("Correct") and "Hugging Face's 'gelu_new'" in out


def test_gelu_tanh_stub_is_pending(capsys):
    assert ex.check_gelu_tanh(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))), "exact GELU"),
        (F.gelu, "exact GELU"),
        (lambda x: 0.5 * x * (1 + torch.tanh(C * x)), "cubic term is missing"),
        (lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 * math.pi) * (x + 0.044715 * x**3))), r"not sqrt\(2\*pi\)"),
        (lambda x: 0.5 * x * (1 + torch.tanh(2 / math.pi * (x + 0.044715 * x**3))), r"not 2/pi"),
        (lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(math.pi / 2) * (x + 0.044715 * x**3))), r"not sqrt\(pi/2\)"),
        (lambda x: x * (1 + torch.tanh(C * (x + 0.044715 * x**3))), "factor 0.5 is missing"),
        (lambda x: 0.5 * (1 + torch.tanh(C * (x + 0.044715 * x**3))), "without multiplying by x"),
        (lambda x: x * torch.sigmoid(1.702 * x), "sigmoid"),
        # sqrt(2/pi) on the x term only, and x**2 for x**3
        (lambda x: 0.5 * x * (1 + torch.tanh(C * x + 0.044715 * x**3)), r"sqrt\(2/pi\) multiplies only the x term"),
        (lambda x: 0.5 * x * (1 + torch.tanh(C * (x + 0.044715 * x**2))), r"0\.044715 \* x\*\*3 \(cubed\), not x\*\*2"),
    ],
)
def test_gelu_tanh_mistakes_are_named(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_gelu_tanh(wrong)


def test_gelu_tanh_other_errors():
    with pytest.raises(ExerciseFailed, match=r"should return shape \(3, 11\)"):
        ex.check_gelu_tanh(lambda x: gelu_tanh_ok(x).flatten())
    with pytest.raises(ExerciseFailed, match="should return a torch.Tensor"):
        ex.check_gelu_tanh(lambda x: gelu_tanh_ok(x).tolist())
    with pytest.raises(ExerciseFailed, match="largest difference"):
        ex.check_gelu_tanh(lambda x: gelu_tanh_ok(x) + 0.01)

    def in_place(x):
        x.mul_(1.0)
        x.add_(1.0)
        return gelu_tanh_ok(x - 1.0)

    with pytest.raises(ExerciseFailed, match="in place"):
        ex.check_gelu_tanh(in_place)


def test_gelu_tanh_inputs_separate_the_mistakes():
    """Every diagnosed mistake differs from the right answer and from the others on the check's inputs."""
    from transformer_lib.exercises._checking import close

    x = ex.gelu_tanh_inputs()
    answers = [gelu_tanh_ok(x), *ex._gelu_tanh_mistakes(x).values()]
    for i in range(len(answers)):
        for j in range(i):
            assert not close(answers[i], answers[j]), (i, j)


# ---------------------------------------------------------------------------- (b) swiglu


def swiglu_ok(x, W_gate, W_in, W_out):
    return (F.silu(x @ W_gate.T) * (x @ W_in.T)) @ W_out.T


def test_swiglu_right_answers_pass(capsys):
    assert ex.check_swiglu(swiglu_ok).passed is True
    assert ex.check_swiglu(lambda x, g, i, o: F.linear(F.silu(F.linear(x, g)) * F.linear(x, i), o)).passed is True
    assert capsys.readouterr().out.startswith("Correct")


def test_swiglu_stub_is_pending(capsys):
    assert ex.check_swiglu(stub).passed is False
    assert "Not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda x, g, i, o: (F.silu(x @ i.T) * (x @ g.T)) @ o.T, "gate and the input are swapped"),
        (lambda x, g, i, o: (torch.sigmoid(x @ g.T) * (x @ i.T)) @ o.T, "original GLU"),
        (lambda x, g, i, o: (torch.sigmoid(x @ i.T) * (x @ g.T)) @ o.T, "sigmoid instead of SiLU, and the gate"),
        (lambda x, g, i, o: (F.gelu(x @ g.T) * (x @ i.T)) @ o.T, "GEGLU"),
        (lambda x, g, i, o: F.silu(x @ i.T) @ o.T, r"gate is missing.*W_out silu\(W_in x\)"),
        (lambda x, g, i, o: F.silu(x @ g.T) @ o.T, r"gate is missing.*W_out silu\(W_gate x\)"),
        (lambda x, g, i, o: ((x @ g.T) * (x @ i.T)) @ o.T, "SiLU is missing"),
        (lambda x, g, i, o: F.silu(x @ g.T) * (x @ i.T), "output projection W_out is missing"),
        (lambda x, g, i, o: F.silu((x @ g.T) * (x @ i.T)) @ o.T, "SiLU is applied after the product"),
        (lambda x, g, i, o: (F.silu(x @ g.T) * F.silu(x @ i.T)) @ o.T, "SiLU is applied to both projections"),
        (lambda x, g, i, o: (F.silu(x @ g.T) + x @ i.T) @ o.T, "You added the two projections"),
        # transposed weights: a shape error with d_ff != d_model ...
        (lambda x, g, i, o: (F.silu(x @ g) * (x @ i)) @ o, r"(?s)RuntimeError.*stored like nn.Linear.weight"),
        (lambda x, g, i, o: (F.silu(x @ g.T) * (x @ i.T)) @ o, r"(?s)RuntimeError.*stored like nn.Linear.weight"),
    ],
)
def test_swiglu_mistakes_are_named(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ex.check_swiglu(wrong)


def test_swiglu_operator_precedence_is_diagnosed_not_blamed_on_the_weights():
    """`silu(x @ W_gate.T) * x @ W_in.T` is `(silu(...) * x) @ W_in.T`: a precedence slip, the weights are fine."""

    def no_brackets(x, g, i, o):
        return F.silu(x @ g.T) * x @ i.T @ o.T

    with pytest.raises(ExerciseFailed) as info:
        ex.check_swiglu(no_brackets)
    message = str(info.value)
    assert "same precedence" in message and "group from the left" in message
    assert r"silu(x @ W_gate.T) * (x @ W_in.T)" in message
    assert "orientation of the weights" not in message and "Transposed weights" not in message

    def no_brackets_when_square(x, g, i, o):  # with d_ff == d_model the slip raises nothing: wrong values
        return no_brackets(x, g, i, o) if g.shape[0] == g.shape[1] else swiglu_ok(x, g, i, o)

    with pytest.raises(ExerciseFailed, match="same precedence"):
        ex.check_swiglu(no_brackets_when_square)


def test_swiglu_matmul_shape_errors_still_point_at_the_weights():
    with pytest.raises(ExerciseFailed) as info:
        ex.check_swiglu(lambda x, g, i, o: (F.silu(x @ g) * (x @ i)) @ o)
    assert "Transposed weights" in str(info.value) and "precedence" not in str(info.value)


def test_swiglu_transposed_square_weights_give_wrong_values():
    """With square weights a transposed matrix raises nothing; the check still names it."""

    def transposed_when_square(x, g, i, o):
        if g.shape[0] != g.shape[1]:
            return swiglu_ok(x, g, i, o)
        return (F.silu(x @ g) * (x @ i.T)) @ o.T

    with pytest.raises(ExerciseFailed, match=r"not right yet. Transposed weights"):
        ex.check_swiglu(transposed_when_square)


def test_swiglu_other_errors():
    with pytest.raises(ExerciseFailed, match=r"should return shape \(2, 3, 6\)"):
        ex.check_swiglu(lambda x, g, i, o: swiglu_ok(x, g, i, o)[0])
    with pytest.raises(ExerciseFailed, match="should return a torch.Tensor"):
        ex.check_swiglu(lambda x, g, i, o: swiglu_ok(x, g, i, o).numpy())
    with pytest.raises(ExerciseFailed, match="largest difference"):
        ex.check_swiglu(lambda x, g, i, o: swiglu_ok(x, g, i, o) * 1.01)


def test_swiglu_inputs_separate_the_mistakes():
    from transformer_lib.exercises._checking import close

    for d_model, d_ff, seed in ((6, 10, 0), (8, 8, 1)):
        args = ex.swiglu_inputs(d_model, d_ff, seed)
        answers = [swiglu_ok(*args), *ex._swiglu_mistakes(*args).values()]
        if d_model == d_ff:
            answers += ex._transposed_variants(*args)
        answers = [a for a in answers if a.shape == answers[0].shape]
        for i in range(len(answers)):
            for j in range(i):
                assert not close(answers[i], answers[j]), (d_model, i, j)


# ---------------------------------------------------------------------------- the chapter's figures
# (viz.feedforward: every static control shows the right, precomputed data)

import numpy as np  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib.viz import feedforward as ffviz  # noqa: E402


def apply(visible, args):
    """What plotly.js does with a method="restyle"/"update" control: set 'visible' on all traces."""
    new = args[0]["visible"]
    assert len(new) == len(visible)
    return list(new)


def shown(fig, visible):
    return [fig.data[j] for j, v in enumerate(visible) if v is True]


def test_activation_explorer_presets_and_zoom():
    acts = {"ReLU": tl.layers.relu, "GELU": tl.layers.gelu, "SiLU": tl.layers.silu}
    fig = ffviz.activation_explorer(acts, x_max=4.0, zooms=(4.0, 1.0), presets={"all": list(acts), "pair": ["GELU", "SiLU"]})
    assert len(fig.data) == 2 * len(acts)
    all_button, pair_button = fig.layout.updatemenus[0].buttons
    assert [t.name for t in shown(fig, apply([True] * 6, all_button.args))] == ["ReLU", "ReLU", "GELU", "GELU", "SiLU", "SiLU"]
    pair = shown(fig, apply([True] * 6, pair_button.args))
    assert [(t.name, t.xaxis) for t in pair] == [("GELU", "x"), ("GELU", "x2"), ("SiLU", "x"), ("SiLU", "x2")]
    # values: the function on the left axis, its derivative on the right
    x = torch.as_tensor(np.asarray(pair[2].x), dtype=torch.float64)
    s = torch.sigmoid(x)
    np.testing.assert_allclose(pair[2].y, F.silu(x).numpy(), atol=1e-5)
    np.testing.assert_allclose(pair[3].y, (s * (1 + x * (1 - s))).numpy(), atol=1e-5)
    # zoom steps: both x-axes to [-z, z], y-ranges covering every curve inside the window
    for z, step in zip((4.0, 1.0), fig.layout.sliders[0].steps):
        layout = step.args[0]
        assert layout["xaxis.range"] == [-z, z] and layout["xaxis2.range"] == [-z, z]
        for k, axis in ((0, "yaxis.range"), (1, "yaxis2.range")):
            lo, hi = layout[axis]
            for trace in fig.data[k::2]:
                inside = np.asarray(trace.y)[np.abs(np.asarray(trace.x)) <= z]
                assert lo <= inside.min() and inside.max() <= hi
    with pytest.raises(ValueError, match="unknown activations"):
        ffviz.activation_explorer(acts, presets={"bad": ["tanh"]})


def test_training_explorer_slider_shows_each_snapshot():
    x = torch.linspace(-1, 1, 5)
    steps = [0, 10, 20]
    snaps = {name: [torch.full((5,), 10.0 * k + i) for k in range(3)] for i, name in enumerate(["a", "b"])}
    losses = {"a": [1.0, 0.5], "b": [2.0, 1.0]}
    fig = ffviz.training_explorer(x, x**2, snaps, steps, losses)
    assert len(fig.data) == 1 + 3 * 2 + 2
    for k, step in enumerate(fig.layout.sliders[0].steps):
        traces = shown(fig, apply([t.visible for t in fig.data], step.args))
        target, fit_a, fit_b, loss_a, loss_b = traces
        np.testing.assert_allclose(target.y, (x**2).numpy())
        assert (fit_a.name, fit_b.name) == ("a", "b")
        np.testing.assert_allclose(fit_a.y, 10.0 * k)
        np.testing.assert_allclose(fit_b.y, 10.0 * k + 1)
        assert list(loss_a.y) == losses["a"] and loss_a.xaxis == "x2"
        assert step.args[1]["shapes"][0]["x0"] == steps[k]
    # the initial state is the last snapshot
    initial = shown(fig, [t.visible is not False for t in fig.data])
    np.testing.assert_allclose(initial[1].y, 20.0)


def test_memory_explorer_buttons_and_order():
    coef = torch.tensor([[0.0, 2.0, 0.5], [1.0, 0.0, 3.0]])  # favourite inputs: memory 0 -> 1, 1 -> 0, 2 -> 1
    contrib = -coef
    fig = ffviz.memory_explorer(coef, contrib, torch.tensor([7, 8, 9]), torch.tensor([4, 5]))
    first, second = fig.layout.updatemenus[0].buttons
    (heat,) = shown(fig, apply([True, True], first.args))
    np.testing.assert_allclose(heat.z, coef[:, [1, 2, 0]].numpy())  # sorted by favourite input, then strength
    assert list(heat.x) == ["m1 (value promotes token 8)", "m2 (value promotes token 9)", "m0 (value promotes token 7)"]
    assert list(heat.y) == ["token 0 (answer 4)", "token 1 (answer 5)"]
    (heat,) = shown(fig, apply([True, True], second.args))
    np.testing.assert_allclose(heat.z, contrib[:, [1, 2, 0]].numpy())


def test_contributions_explorer_buttons_show_one_model():
    x = torch.linspace(-1, 1, 4)
    terms = {"a": torch.ones(3, 4), "b": 2 * torch.ones(2, 4)}
    fig = ffviz.contributions_explorer(x, x, terms, {"a": 0.5, "b": -1.0})
    for name, button in zip(terms, fig.layout.updatemenus[0].buttons):
        traces = shown(fig, apply([t.visible for t in fig.data], button.args))
        target, *units, total = traces
        assert target.name == "target" and len(units) == len(terms[name])
        assert all(t.hovertemplate.endswith(f"<extra>{name}</extra>") for t in units)
        np.testing.assert_allclose(total.y, (terms[name].sum(0) + {"a": 0.5, "b": -1.0}[name]).numpy())
        assert name in button.args[1]["title.text"]
