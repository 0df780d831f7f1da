"""Live training view: progress, a loss chart (train and validation) and samples, redrawn in place.

Defined in chapter 7, *GPT-2*; used by every training chapter.

While training runs, the chart is a light SVG drawing of the figure, sent as HTML and redrawn in
place (IPython ``display_id``). When training ends, the same output becomes the interactive plotly
figure. Why not plotly all along: JupyterLab's and Notebook 7's plotly renderer draws a figure
once and ignores later updates of the same output (plotly.py issue 3053), while every front-end
(JupyterLab, Notebook 7, VS Code, Colab) redraws updated HTML. The switch from HTML to plotly at
the end makes those front-ends build a fresh plotly view; the book's build keeps the last
drawing, so the static page shows the final, interactive chart.
"""

from __future__ import annotations

import html
import math
import time
from typing import Callable

import plotly.colors
import plotly.graph_objects as go
import plotly.io as pio
from torch import nn

from ..training import Callback, TrainState
from . import BookRenderer, in_colab
from .layout import tidy


def figure_bundle(fig: go.Figure) -> dict:
    """The MIME bundle the current environment displays a figure with (see :mod:`transformer_lib.viz`)."""
    if in_colab():
        return {"text/html": pio.to_html(tidy(fig.to_dict()), include_plotlyjs="cdn", full_html=False)}
    return BookRenderer().to_mimebundle(fig.to_dict())


def loss_figure(
    history: list[dict], title: str = "loss", target: float | None = None, height: int = 380
) -> go.Figure:
    """Train and validation loss against step, from ``TrainState.history``."""
    steps = [h["step"] for h in history]
    fig = go.Figure()
    fig.add_scatter(x=steps, y=[h["train_loss"] for h in history], mode="lines+markers", name="train")
    if any(h.get("val_loss") is not None for h in history):
        fig.add_scatter(x=steps, y=[h["val_loss"] for h in history], mode="lines+markers",
                        name="validation")
    if target is not None:
        fig.add_hline(y=target, line_dash="dot", annotation_text=f"target {target}",
                      annotation_position="top right")
    # title, then the legend in a row above the plot, the toolbar upright in the right margin:
    # nothing overlaps at a phone's width (the live drawing, figure_svg, has the same layout)
    fig.update_layout(title=dict(text=title, x=0.01, xanchor="left", font_size=15),
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom"),
                      xaxis_title="step", yaxis_title="cross-entropy loss (nats)", height=height,
                      margin=dict(t=80, b=40, l=60, r=40), modebar_orientation="v",
                      hovermode="x unified")
    return fig


# ---- the live drawing -------------------------------------------------------------------------

_DASHES = {"dot": "2,4", "dash": "8,5", "dashdot": "8,4,2,4", "longdash": "14,5"}


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (steps of 1, 2 or 5 times a power of ten) covering [lo, hi]."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 12) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _tick_label(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 or v == int(v) else f"{v:g}"


def figure_svg(
    fig: go.Figure, width: int = 720, height: int = 340, x_range: tuple[float, float] | None = None
) -> str:
    """A static SVG drawing of a line figure: its visible traces, horizontal lines, title and legend.

    What the live chart shows while training runs (see the module's docstring). It scales to its
    container's width (``viewBox``); each trace is a ``<g class="trace">`` holding a polyline.
    ``x_range``: the x axis's span (default: the data's), e.g. ``(0, max_steps)`` while training.
    """
    colors = plotly.colors.qualitative.Plotly
    series = []  # (name, points, color, dash)
    for i, trace in enumerate(fig.data):
        if trace.visible in (False, "legendonly") or trace.x is None or trace.y is None:
            continue
        points = [(float(x), float(y)) for x, y in zip(trace.x, trace.y)
                  if x is not None and y is not None and math.isfinite(y)]
        line = trace.line if hasattr(trace, "line") else None
        color = (line.color if line is not None and line.color else None) or colors[i % len(colors)]
        dash = _DASHES.get(line.dash if line is not None else None, "")
        series.append((trace.name or f"trace {i}", points, color, dash))
    labels = {a.y: a.text for a in fig.layout.annotations if a.y is not None and a.text}
    hlines = [(s.y0, s.line.dash) for s in fig.layout.shapes if s.y0 is not None and s.y0 == s.y1]
    title = fig.layout.title.text or ""
    xs = [x for _, pts, _, _ in series for x, _ in pts]
    ys = [y for _, pts, _, _ in series for _, y in pts] + [y for y, _ in hlines]
    x_lo, x_hi = x_range or ((min(xs), max(xs)) if xs else (0.0, 1.0))
    y_lo, y_hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if x_hi == x_lo:
        x_hi = x_lo + 1
    pad = (y_hi - y_lo) * 0.06 or 0.5
    y_lo, y_hi = y_lo - pad, y_hi + pad
    left, right, top, bottom = 64, 18, 58, 46
    plot_w, plot_h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * plot_w

    def sy(y: float) -> float:
        return top + (y_hi - y) / (y_hi - y_lo) * plot_h

    out = [f'<svg class="tfs-live-chart" viewBox="0 0 {width} {height}" width="100%" '
           f'style="max-width:{width}px;height:auto;font:12px sans-serif" role="img" '
           f'aria-label="{html.escape(title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#E5ECF6"/>']
    for v in nice_ticks(y_lo, y_hi):
        y = sy(v)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#fff"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#2a3f5f">'
                   f'{_tick_label(v)}</text>')
    for v in nice_ticks(x_lo, x_hi, 6):
        x = sx(v)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#fff"/>'
                   f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle" fill="#2a3f5f">'
                   f'{_tick_label(v)}</text>')
    for y, dash in hlines:
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" '
                   f'stroke="#444" stroke-dasharray="{_DASHES.get(dash, "")}"/>'
                   f'<text x="{left + plot_w - 4}" y="{sy(y) - 5:.1f}" text-anchor="end" '
                   f'fill="#444">{html.escape(labels.get(y, ""))}</text>')
    for name, points, color, dash in series:
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
        dots = "".join(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>'
                       for x, y in points) if len(points) <= 100 else ""
        out.append(f'<g class="trace" data-name="{html.escape(name)}"><polyline points="{coords}" '
                   f'fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>'
                   f'{dots}</g>')
    x_title = fig.layout.xaxis.title.text or ""
    y_title = fig.layout.yaxis.title.text or ""
    out.append(f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle" '
               f'fill="#2a3f5f">{html.escape(x_title)}</text>'
               f'<text transform="translate(14,{top + plot_h / 2}) rotate(-90)" '
               f'text-anchor="middle" fill="#2a3f5f">{html.escape(y_title)}</text>'
               f'<text x="{left}" y="20" font-size="15" fill="#2a3f5f">{html.escape(title)}</text>')
    x = left
    for name, _, color, dash in series:  # the legend, in one row under the title
        out.append(f'<line x1="{x}" x2="{x + 22}" y1="40" y2="40" stroke="{color}" stroke-width="2" '
                   f'stroke-dasharray="{dash}"/><text x="{x + 27}" y="44" fill="#2a3f5f">'
                   f'{html.escape(name)}</text>')
        x += 40 + 7 * len(name)
    out.append("</svg>")
    return "".join(out)


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def progress_text(state: TrainState, done: bool = False) -> str:
    """One line on where training stands: steps, losses of the last evaluation, time (left)."""
    losses = ""
    if state.train_loss is not None:
        losses = f" · train loss {state.train_loss:.3f}"
        if state.val_loss is not None:
            losses += f", validation {state.val_loss:.3f}"
    if done:
        rate = state.max_steps / state.elapsed if state.elapsed > 0 else float("inf")
        return (f"trained {state.max_steps:,} steps in {_duration(state.elapsed)} "
                f"({rate:,.1f} steps/s){losses}")
    left = ""
    if 0 < state.step < state.max_steps:
        left = f", about {_duration(state.elapsed / state.step * (state.max_steps - state.step))} left"
    percent = 100 * state.step / max(1, state.max_steps)
    return (f"step {state.step:,} / {state.max_steps:,} ({percent:.0f} %){losses} · "
            f"{_duration(state.elapsed)} elapsed{left}")


class LiveLossPlot(Callback):
    """Callback for :func:`transformer_lib.training.train`: progress, losses and samples as they come.

    In Jupyter (JupyterLab, Notebook 7, VS Code, Colab) it shows a progress line, updated about
    every ``refresh`` seconds, the loss chart, redrawn at every evaluation, and the latest sample;
    outside IPython it only collects ``history`` and ``samples``.

    Args:
        title: the chart's title.
        sample: ``sample(model) -> str``, called every ``sample_interval`` steps (and at the end);
            its text is shown under the chart, e.g. a few generated lines.
        target: draw a dotted line at this loss (the chapter's goal).
        refresh: seconds between progress updates.
    """

    def __init__(
        self, title: str = "training", sample: Callable[[nn.Module], str] | None = None,
        sample_interval: int = 500, target: float | None = None, refresh: float = 0.5,
    ) -> None:
        self.title, self.sample, self.sample_interval, self.target = title, sample, sample_interval, target
        self.refresh = refresh
        self.history: list[dict] = []
        self.samples: list[tuple[int, str]] = []
        self._progress = self._chart = self._text = None
        self._shown = 0.0  # when the progress line was last redrawn (time.monotonic)
        self._x_range: tuple[float, float] | None = None  # the live chart spans the whole run

    def figure(self) -> go.Figure:
        """The chart (a plotly figure); subclasses may draw something else from ``history``."""
        return loss_figure(self.history, self.title, self.target)

    def _sample_bundle(self) -> dict:
        if not self.samples:
            return {"text/plain": ""}
        step, text = self.samples[-1]
        return {
            "text/plain": f"sample at step {step}:\n{text}",
            "text/html": f"<b>sample at step {step}</b>"
                         f"<pre style='white-space: pre-wrap'>{html.escape(text)}</pre>",
        }

    def _show_progress(self, state: TrainState, done: bool = False) -> None:
        if self._progress is None:
            return
        text = progress_text(state, done)
        bar = f"<progress value='{state.step}' max='{max(1, state.max_steps)}' style='width:12em'></progress> "
        self._progress.update({"text/plain": text, "text/html": f"<div class='tfs-progress'>{bar}"
                               f"{html.escape(text)}</div>"}, raw=True)
        self._shown = time.monotonic()

    def _draw(self, final: bool) -> None:
        if self._chart is not None:
            fig = self.figure()
            if final:  # the interactive figure: a new output type, so front-ends draw it afresh
                self._chart.update(figure_bundle(fig), raw=True)
            else:
                last = self.history[-1] if self.history else {}
                plain = ", ".join(f"{k} {last[k]:.3f}" for k in ("train_loss", "val_loss")
                                  if last.get(k) is not None)
                self._chart.update({"text/plain": f"{fig.layout.title.text}: {plain}",
                                    "text/html": figure_svg(fig, x_range=self._x_range)}, raw=True)
        if self._text is not None and self.samples:
            self._text.update(self._sample_bundle(), raw=True)

    def on_train_start(self, state: TrainState, model: nn.Module) -> None:
        if not self.history:  # a run resumed from a checkpoint: its evaluations so far
            self.history = [dict(h) for h in state.history]
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        if get_ipython() is None:  # plain Python: nothing to draw on
            return
        if self._progress is None:
            self._progress = display({"text/plain": ""}, raw=True, display_id=True)
            self._chart = display({"text/plain": ""}, raw=True, display_id=True)
            if self.sample is not None:
                self._text = display({"text/plain": ""}, raw=True, display_id=True)
        self._x_range = (0, state.max_steps)
        self._show_progress(state)
        self._draw(final=False)

    def on_step(self, state: TrainState, model: nn.Module) -> None:
        if self._progress is not None and time.monotonic() - self._shown >= self.refresh:
            self._show_progress(state)

    def on_eval(self, state: TrainState, model: nn.Module) -> None:
        self.history.append(dict(state.history[-1]))
        due = state.step % self.sample_interval == 0 and state.step > 0
        if self.sample is not None and due:
            self.samples.append((state.step, self.sample(model)))
        self._show_progress(state)
        self._draw(final=False)

    def on_train_end(self, state: TrainState, model: nn.Module) -> None:
        if self.sample is not None and (not self.samples or self.samples[-1][0] != state.step):
            self.samples.append((state.step, self.sample(model)))
        self._show_progress(state, done=True)
        self._draw(final=True)
