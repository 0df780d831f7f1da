"""Live training view: a loss chart (train and validation) and generated samples, updated in place.

Defined in chapter 7, *GPT-2*; used by every training chapter.

It redraws one output (IPython ``display_id``) instead of printing a new one per update, so the
notebook doesn't grow; that works in JupyterLab, VS Code, Colab and in the book's build, which
keeps the last drawing: the static book shows the final chart.
"""

from __future__ import annotations

import html
from typing import Callable

import plotly.graph_objects as go
import plotly.io as pio
from torch import nn

from ..training import Callback, TrainState
from . import BookRenderer, in_colab


def figure_bundle(fig: go.Figure) -> dict:
    """The MIME bundle the current environment displays a figure with (see :mod:`transformer_lib.viz`)."""
    if in_colab():
        return {"text/html": pio.to_html(fig, include_plotlyjs="cdn", full_html=False)}
    return BookRenderer().to_mimebundle(fig.to_dict())


def loss_figure(history: list[dict], title: str = "loss", target: float | None = None, height: int = 380) -> go.Figure:
    """Train and validation loss against step, from ``TrainState.history``."""
    steps = [h["step"] for h in history]
    fig = go.Figure()
    fig.add_scatter(x=steps, y=[h["train_loss"] for h in history], mode="lines+markers", name="train")
    if any(h.get("val_loss") is not None for h in history):
        fig.add_scatter(x=steps, y=[h["val_loss"] for h in history], mode="lines+markers", name="validation")
    if target is not None:
        fig.add_hline(y=target, line_dash="dot", annotation_text=f"target {target}", annotation_position="top right")
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="cross-entropy loss (nats)", height=height,
                      margin=dict(t=50, b=40), hovermode="x unified")
    return fig


class LiveLossPlot(Callback):
    """Callback for :func:`transformer_lib.training.train` that draws the losses as they come.

    Args:
        title: the chart's title.
        sample: ``sample(model) -> str``, called every ``sample_interval`` steps (and at the end);
            its text is shown under the chart, e.g. a few generated lines.
        target: draw a dotted line at this loss (the chapter's goal).
    """

    def __init__(
        self, title: str = "training", sample: Callable[[nn.Module], str] | None = None, sample_interval: int = 500,
        target: float | None = None,
    ) -> None:
        self.title, self.sample, self.sample_interval, self.target = title, sample, sample_interval, target
        self.history: list[dict] = []
        self.samples: list[tuple[int, str]] = []
        self._chart = self._text = None

    def figure(self) -> go.Figure:
        return loss_figure(self.history, self.title, self.target)

    def _sample_bundle(self) -> dict:
        if not self.samples:
            return {"text/plain": ""}
        step, text = self.samples[-1]
        return {
            "text/plain": f"sample at step {step}:\n{text}",
            "text/html": f"<b>sample at step {step}</b><pre style='white-space: pre-wrap'>{html.escape(text)}</pre>",
        }

    def _draw(self) -> None:
        if self._chart is not None:
            self._chart.update(figure_bundle(self.figure()), raw=True)
        if self._text is not None and self.samples:
            self._text.update(self._sample_bundle(), raw=True)

    def on_train_start(self, state: TrainState, model: nn.Module) -> None:
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        if get_ipython() is None:  # plain Python: nothing to draw on
            return
        self._chart = display(figure_bundle(self.figure()), raw=True, display_id=True)
        if self.sample is not None:
            self._text = display({"text/plain": ""}, raw=True, display_id=True)

    def on_eval(self, state: TrainState, model: nn.Module) -> None:
        self.history.append(dict(state.history[-1]))
        due = state.step % self.sample_interval == 0 and state.step > 0
        if self.sample is not None and due:
            self.samples.append((state.step, self.sample(model)))
        self._draw()

    def on_train_end(self, state: TrainState, model: nn.Module) -> None:
        if self.sample is not None and (not self.samples or self.samples[-1][0] != state.step):
            self.samples.append((state.step, self.sample(model)))
        self._draw()
