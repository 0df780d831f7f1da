"""viz.training: the live loss chart's figure and its callback outside IPython."""

import re

import pytest
import torch

import transformer_lib as tl
from transformer_lib.viz.training import (LiveLossPlot, figure_bundle, figure_svg, loss_figure, nice_ticks,
                                          progress_text)


def test_loss_figure_has_train_val_and_target():
    history = [{"step": 0, "train_loss": 4.0, "val_loss": 4.1}, {"step": 10, "train_loss": 2.0, "val_loss": 2.2}]
    fig = loss_figure(history, target=2.0)
    assert [t.name for t in fig.data] == ["train", "validation"]
    assert list(fig.data[1].y) == [4.1, 2.2] and fig.layout.shapes[0].y0 == 2.0
    bundle = figure_bundle(fig)
    assert "text/html" in bundle and "Plotly.newPlot" in bundle["text/html"]


@pytest.mark.slow
def test_live_plot_collects_history_and_samples_without_ipython():
    data = torch.arange(2000) % 7
    live = LiveLossPlot(sample=lambda model: "sample text", sample_interval=2)
    config = tl.TrainConfig(max_steps=4, eval_interval=2, eval_steps=1, progress=False, device="cpu")
    model = tl.GPT2(tl.GPT2Config(vocab_size=7, n_ctx=16, d_model=16, n_layers=1, n_heads=2))
    tl.train(model, tl.BatchSampler(data, 4, 16), None, config, callbacks=[live])
    assert [h["step"] for h in live.history] == [0, 2, 4]
    assert [s for s, _ in live.samples] == [2, 4]
    assert len(live.figure().data) == 1  # no validation batches: train curve only


def test_live_drawing_has_every_visible_trace_and_point():
    history = [{"step": s, "train_loss": 4.0 - s / 100, "val_loss": None if s == 0 else 4.2 - s / 100}
               for s in range(0, 301, 100)]
    fig = loss_figure(history, title="run <1>", target=2.0)
    svg = figure_svg(fig, x_range=(0, 1000))
    assert svg.startswith("<svg") and svg.endswith("</svg>") and "run &lt;1&gt;" in svg
    traces = re.findall(r'<g class="trace" data-name="(\w+)"><polyline points="([^"]*)"', svg)
    assert [name for name, _ in traces] == ["train", "validation"]
    assert [len(points.split()) for _, points in traces] == [4, 3]  # the missing validation loss is skipped
    # x from 0 to 1000 over the plot's width: step 300 lies 30 % of the way across
    x0, x300 = (float(p.split(",")[0]) for p in traces[0][1].split()[::3])
    left, width = 64, 720 - 64 - 18
    assert abs(x0 - left) < 0.1 and abs(x300 - (left + 0.3 * width)) < 0.1
    assert "target 2.0" in svg and svg.count('stroke-dasharray="2,4"') == 1  # the dotted target line
    fig.data[1].visible = "legendonly"
    assert len(re.findall(r'class="trace"', figure_svg(fig))) == 1


def test_nice_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 1000, 5) == [0, 200, 400, 600, 800, 1000]
    assert nice_ticks(1.62, 4.31) == [2, 3, 4]
    assert nice_ticks(1.62, 2.31) == [1.8, 2, 2.2]
    assert nice_ticks(3, 3) == [3]


def test_progress_text_counts_steps_and_time_left():
    state = tl.TrainState(step=300, max_steps=1000, train_loss=2.1234, val_loss=2.2, elapsed=30.0)
    assert progress_text(state) == ("step 300 / 1,000 (30 %) · train loss 2.123, validation 2.200 · "
                                    "30 s elapsed, about 1 min 10 s left")
    state.step, state.elapsed = 1000, 95.0
    assert progress_text(state, done=True) == (
        "trained 1,000 steps in 1 min 35 s (10.5 steps/s) · train loss 2.123, validation 2.200")


@pytest.mark.slow
def test_on_step_sees_every_step_and_the_time():
    class Steps(tl.Callback):
        def __init__(self):
            self.seen = []

        def on_step(self, state, model):
            self.seen.append((state.step, state.max_steps, state.elapsed))

    steps = Steps()
    config = tl.TrainConfig(max_steps=5, eval_interval=2, eval_steps=1, progress=False, device="cpu")
    model = tl.GPT2(tl.GPT2Config(vocab_size=7, n_ctx=16, d_model=16, n_layers=1, n_heads=2))
    tl.train(model, tl.BatchSampler(torch.arange(2000) % 7, 4, 16), None, config, callbacks=[steps])
    assert [s for s, _, _ in steps.seen] == [1, 2, 3, 4, 5] and {m for _, m, _ in steps.seen} == {5}
    elapsed = [e for _, _, e in steps.seen]
    assert elapsed == sorted(elapsed) and elapsed[0] > 0
