"""viz.training: the live loss chart's figure and its callback outside IPython."""

import torch

import transformer_lib as tl
from transformer_lib.viz.training import LiveLossPlot, figure_bundle, loss_figure


def test_loss_figure_has_train_val_and_target():
    history = [{"step": 0, "train_loss": 4.0, "val_loss": 4.1}, {"step": 10, "train_loss": 2.0, "val_loss": 2.2}]
    fig = loss_figure(history, target=2.0)
    assert [t.name for t in fig.data] == ["train", "validation"]
    assert list(fig.data[1].y) == [4.1, 2.2] and fig.layout.shapes[0].y0 == 2.0
    bundle = figure_bundle(fig)
    assert "text/html" in bundle and "Plotly.newPlot" in bundle["text/html"]


def test_live_plot_collects_history_and_samples_without_ipython():
    data = torch.arange(2000) % 7
    live = LiveLossPlot(sample=lambda model: "sample text", sample_interval=2)
    config = tl.TrainConfig(max_steps=4, eval_interval=2, eval_steps=1, progress=False, device="cpu")
    model = tl.GPT2(tl.GPT2Config(vocab_size=7, n_ctx=16, d_model=16, n_layers=1, n_heads=2))
    tl.train(model, tl.BatchSampler(data, 4, 16), None, config, callbacks=[live])
    assert [h["step"] for h in live.history] == [0, 2, 4]
    assert [s for s, _ in live.samples] == [2, 4]
    assert len(live.figure().data) == 1  # no validation batches: train curve only
