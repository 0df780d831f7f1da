"""viz.positions: every control of the two explorers shows the right, precomputed data."""

import json
import math

import numpy as np
import plotly.io as pio
import pytest
import torch

import transformer_lib as tl
from transformer_lib.viz.positions import positional_waves_explorer, rope_rotation_explorer, wavelength

D_MODELS = (8, 16)
N = 20


@pytest.fixture(scope="module")
def fig():
    return positional_waves_explorer(n_positions=N, d_models=D_MODELS, d_model=16, decimals=4)


def apply(visible, args):
    """What plotly.js does with a method="update" step: restyle 'visible' (on the listed traces, or all)."""
    visible = list(visible)
    new = args[0]["visible"]
    indices = args[2] if len(args) > 2 else range(len(visible))
    for k, j in enumerate(indices):
        visible[j] = new[k]
    return visible


def shown(fig, visible):
    return [fig.data[j] for j, v in enumerate(visible) if v]


def test_initial_state_is_d16_pair0(fig):
    visible = [bool(t.visible) for t in fig.data]
    traces = shown(fig, visible)
    assert [t.type for t in traces] == ["heatmap", "scatter", "scatter"]
    assert traces[0].name == "d_model=16" and fig.layout.updatemenus[0].active == 1
    assert [t.name for t in traces[1:]] == ["sin: dim 0", "cos: dim 1"]


def test_every_button_then_every_step_shows_that_pair(fig):
    start = [bool(t.visible) for t in fig.data]
    for d, button in zip(D_MODELS, fig.layout.updatemenus[0].buttons):
        after_button = apply(start, button.args)
        (slider,) = button.args[1]["sliders"]  # the button swaps in this width's slider
        assert len(slider["steps"]) == d // 2
        for i, step in enumerate(slider["steps"]):
            traces = shown(fig, apply(after_button, step["args"]))
            heatmap, sin, cos = traces  # exactly one heatmap and one pair
            table = tl.sinusoidal_encoding(N, d).numpy()
            np.testing.assert_allclose(np.asarray(heatmap.z).T, table, atol=1e-4)
            np.testing.assert_allclose(sin.y, table[:, 2 * i], atol=1e-4)
            np.testing.assert_allclose(cos.y, table[:, 2 * i + 1], atol=1e-4)
            layout = step["args"][1]
            assert f"pair i = {i} " in layout["annotations[0].text"]
            assert f"{wavelength(i, d):,.1f} positions" in layout["annotations[0].text"]
            assert (layout["shapes[0].y0"], layout["shapes[0].y1"]) == (2 * i - 0.5, 2 * i + 1.5)


@pytest.mark.slow
def test_size_of_the_default_figure_is_reasonable():
    size = len(pio.to_json(positional_waves_explorer()))
    assert size < 1_000_000, size
    json.loads(pio.to_json(positional_waves_explorer(n_positions=4, d_models=(4,), d_model=4)))


def test_wavelength_and_bad_width():
    assert wavelength(0, 64) == pytest.approx(2 * np.pi)
    assert wavelength(16, 64) == pytest.approx(2 * np.pi * 100)
    with pytest.raises(ValueError, match="must be one of"):
        positional_waves_explorer(d_model=24)


def test_rope_explorer_steps_show_the_library_rotation():
    rope = tl.RotaryEmbedding(head_dim=8, n_positions=12, base=100.0)
    fig = rope_rotation_explorer(rope, pairs=(0, 2), distance=2, q_pair=(1.0, 0.0), k_pair=(0.0, 1.0))
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == [str(m) for m in range(2, 12)]
    q_all = rope(torch.tensor([1.0, 0.0] * 4).expand(12, 8))  # (n_positions, head_dim)
    k_all = rope(torch.tensor([0.0, 1.0] * 4).expand(12, 8))
    for s, m in zip(steps, range(2, 12)):
        data, layout, moved = s.args
        assert len(moved) == 6 and all(fig.data[j].type == "scatter" for j in moved)
        for panel, i in enumerate((0, 2)):
            trail_x, q_x, k_x = data["x"][3 * panel: 3 * panel + 3]
            trail_y, q_y, k_y = data["y"][3 * panel: 3 * panel + 3]
            assert len(trail_x) == m + 1  # positions 0..m
            np.testing.assert_allclose([q_x[1], q_y[1]], q_all[m, 2 * i: 2 * i + 2], atol=1e-4)
            np.testing.assert_allclose([k_x[1], k_y[1]], k_all[m - 2, 2 * i: 2 * i + 2], atol=1e-4)
            # query (1, 0) and key (0, 1), 2 positions behind: q.k = sin(2 theta_i) at every m
            dot = f"{math.sin(2 * 100.0 ** (-2 * i / 8)):.3f}"
            assert layout[f"annotations[{panel}].text"].endswith(dot), layout[f"annotations[{panel}].text"]
    with pytest.raises(ValueError, match="distance must be in"):
        rope_rotation_explorer(rope, distance=12)
