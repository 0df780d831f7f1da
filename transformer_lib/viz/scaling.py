"""Figures for chapter 12, *Scaling out*: the ring all-reduce step by step, where a distributed step's time
goes, and the memory each GPU needs. Every control works in the static book (sliders and dropdowns). Each
figure is one plot with its legend above it, so that it reads at a phone's width too."""

from __future__ import annotations

import plotly.graph_objects as go

from ..scaling import STRATEGIES, RingStep

LETTERS = "abcdefghijklmnopqrstuvwxyz"
STRATEGY_COLOURS = dict(zip(STRATEGIES, ("#e45756", "#f58518", "#54a24b", "#4c78a8")))
CHECKPOINTED = "ZeRO-3 + checkpointing"  # FSDP with activation checkpointing: drawn dashed, in FSDP's colour
STRATEGY_COLOURS[CHECKPOINTED] = STRATEGY_COLOURS["ZeRO-3 / FSDP"]
PART_COLOURS = {"weights": "#4c78a8", "gradients": "#f58518", "optimizer state": "#e45756",
                "activations": "#54a24b"}
PHASE_COLOURS = {"forward": "#4c78a8", "backward": "#f58518", "optimizer": "#e45756", "other compute": "#bab0ac",
                 "FSDP hooks": "#d8b5a5", "all-reduce": "#54a24b", "all-gather": "#72b7b2",
                 "reduce-scatter": "#b279a2", "other communication": "#9d755d"}


def ring_explorer(steps: list[RingStep], n_bytes: float | None = None, height: int = 430) -> go.Figure:
    """The ring all-reduce of :func:`transformer_lib.scaling.ring_all_reduce`, a slider step by step.

    Rows are the workers (GPUs), columns the chunks of each one's vector; a cell says whose chunks
    it has summed (worker 0's data is ``a``, worker 1's ``b``, ...). Arrows show what each worker
    sends to the next at that step; the caption counts the bytes each link has carried so far.
    """
    n = len(steps[0].holds)
    names = [f"GPU {i}" for i in range(n)]
    chunks = [f"chunk {c}" for c in range(n)]
    start = [[frozenset([i]) for _ in range(n)] for i in range(n)]
    states = [("start: each GPU holds its own gradient", None, start)]
    for k, step in enumerate(steps):
        within = k + 1 if step.phase == "reduce-scatter" else k + 2 - n
        states.append((f"{step.phase}, step {within} of {n - 1}", step, step.holds))

    def label(who: frozenset[int]) -> str:
        return "+".join(LETTERS[i] for i in sorted(who)) if len(who) < n else "sum"

    fig = go.Figure()
    for s, (_, _, holds) in enumerate(states):
        z = [[len(holds[i][c]) for c in range(n)] for i in range(n)]
        text = [[label(holds[i][c]) for c in range(n)] for i in range(n)]
        fig.add_heatmap(z=z, x=chunks, y=names, text=text, texttemplate="%{text}", zmin=1, zmax=n,
                        colorscale="Blues", visible=s == 0, showscale=False, xgap=3, ygap=3,
                        hovertemplate="%{y}, %{x}: %{text}<br>%{z} of " + str(n) + " gradients summed<extra></extra>")
    chunk_bytes = None if n_bytes is None else n_bytes / n

    def layout(s: int) -> dict:
        title, step, _ = states[s]
        arrows = []
        if step is not None:
            for i, c in enumerate(step.sent):
                j = (i + 1) % n
                if j > i:  # beside the cells' text, from the sender's cell to the receiver's
                    arrows.append(dict(x=c + 0.3, y=j - 0.1, ax=c + 0.3, ay=i + 0.1, xref="x", yref="y",
                                       axref="x", ayref="y", showarrow=True, arrowhead=3, arrowwidth=2,
                                       arrowcolor="#e45756", text=""))
                else:  # the ring closes: the last GPU sends to GPU 0
                    arrows.append(dict(x=c, y=i, yshift=-15, xref="x", yref="y", text="to GPU 0",
                                       showarrow=False, font=dict(color="#e45756", size=11)))
        sent = f"{s} of {2 * (n - 1)} chunks sent by each GPU: {s / n:.2f} x its gradient's size"
        if chunk_bytes is not None:
            sent = (f"each step, every link carries one chunk, {chunk_bytes / 2**20:,.1f} MiB; " + sent
                    + f" ({s * chunk_bytes / 2**20:,.1f} of {2 * (n - 1) * chunk_bytes / 2**20:,.1f} MiB)")
        return {"annotations": arrows, "title.text": f"ring all-reduce on {n} GPUs: {title}<br><sup>{sent}</sup>"}

    sliders = [dict(active=0, currentvalue=dict(prefix="step: "), pad=dict(t=40), steps=[
        dict(label=str(s), method="update",
             args=[{"visible": [t == s for t in range(len(states))]}, layout(s)]) for s in range(len(states))])]
    first = layout(0)
    fig.update_layout(height=height, sliders=sliders, margin=dict(t=90, b=40, r=20), annotations=first["annotations"],
                      title=dict(text=first["title.text"]), yaxis=dict(autorange="reversed", showgrid=False),
                      xaxis=dict(showgrid=False))
    return fig


def timeline_explorer(timelines: dict[str, list[dict]], title: str = "one training step on rank 0",
                      height: int = 380) -> go.Figure:
    """Bars for what rank 0 did during one step, on two lanes: compute and communication; a dropdown picks
    the run (e.g. one process, DDP, FSDP).

    ``timelines[name]``: dicts with ``lane``, ``phase`` (a key of ``PHASE_COLOURS``), ``start`` and
    ``end`` in milliseconds from the start of the step, and ``name`` (the operation, or a merged bar's
    summary, its parts separated by "; ").
    """
    names = list(timelines)
    fig = go.Figure()
    owner = []
    for k, run in enumerate(names):
        for phase, colour in PHASE_COLOURS.items():
            bars = [e for e in timelines[run] if e["phase"] == phase]
            if not bars:
                continue
            fig.add_bar(y=[e["lane"] for e in bars], x=[e["end"] - e["start"] for e in bars],
                        base=[e["start"] for e in bars], orientation="h", name=phase, marker_color=colour,
                        legendgroup=phase, visible=k == 0, customdata=[e["name"].replace("; ", "<br>") for e in bars],
                        hovertemplate="%{customdata}<br>from %{base:.2f} ms, for %{x:.2f} ms<extra>" + phase
                        + "</extra>")
            owner.append(k)
    buttons = [dict(label=run, method="update", args=[{"visible": [o == k for o in owner]},
                                                       {"title.text": f"{title}: {run}"}]) for k, run in enumerate(names)]
    fig.update_layout(title=dict(text=f"{title}: {names[0]}"), barmode="overlay", height=height,
                      xaxis_title="milliseconds since the step began", margin=dict(t=90, b=50, l=100, r=20),
                      updatemenus=[dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=1.12,
                                        yanchor="bottom")] if len(names) > 1 else [],
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom"))
    fig.update_yaxes(categoryorder="array", categoryarray=["communication", "compute"])
    return fig


def log_ticks(low: float, high: float) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... from below ``low`` to above ``high``: every tick of a log axis labelled in
    full (plotly's own minor ticks read "2" and "5" for 20 and 50)."""
    import math

    ticks, decade = [], 10.0 ** math.floor(math.log10(low))
    while not ticks or ticks[-1] < high:
        ticks += [decade * m for m in (1, 2, 5)]
        decade *= 10
    first = max(i for i, t in enumerate(ticks) if t <= low)
    last = min(i for i, t in enumerate(ticks) if t >= high)
    return ticks[first:last + 1]


def _tick_text(value: float) -> str:
    return f"{value:g}"


def memory_explorer(table: dict[str, dict], gpus: list[int], capacities: dict[str, float],
                    height: int = 460) -> go.Figure:
    """The memory calculator: GiB per GPU against the number of GPUs, one line per strategy (log axes);
    a dropdown picks the model and precision. :func:`memory_breakdown` shows what one GPU holds.

    ``table[label] = {"memory": {strategy: [memory_per_gpu(...) dict for each count in gpus]}}``;
    strategies are keys of ``STRATEGY_COLOURS``. ``capacities``: ``{"T4: 16 GB": bytes, ...}``, dotted lines.
    """
    labels = list(table)
    fig = go.Figure()
    owner, totals_all = [], []
    for k, label in enumerate(labels):
        for strategy, parts in table[label]["memory"].items():
            totals = [sum(p.values()) / 2**30 for p in parts]
            totals_all += totals
            detail = ["<br>".join(f"{name} {v / 2**30:,.1f}" for name, v in p.items()) for p in parts]
            fig.add_scatter(x=gpus, y=totals, mode="lines+markers", name=strategy, legendgroup=strategy,
                            line=dict(color=STRATEGY_COLOURS[strategy], dash="dash" if strategy == CHECKPOINTED
                                      else "solid"), visible=k == 0, customdata=detail,
                            hovertemplate="%{x} GPUs: %{y:,.1f} GiB<br>%{customdata}<extra>" + strategy + "</extra>")
            owner.append(k)
    for name, capacity in capacities.items():  # traces, not shapes: shown whatever the menu picks
        fig.add_scatter(x=[gpus[0], gpus[-1]], y=[capacity / 2**30] * 2, mode="lines+text", name=name,
                        text=[name, ""], textposition="bottom right", line=dict(color="gray", dash="dot", width=1),
                        showlegend=False, hovertemplate=f"{name}: {capacity / 2**30:,.1f} GiB<extra></extra>")
        owner.append(None)
        totals_all.append(capacity / 2**30)
    buttons = [dict(label=label, method="update", args=[{"visible": [o is None or o == k for o in owner]}])
               for k, label in enumerate(labels)]
    ticks = log_ticks(min(totals_all), max(totals_all))
    fig.update_layout(height=height, margin=dict(t=110, b=60, r=20),
                      title=dict(text="GiB per GPU for training with AdamW (log scales): model and precision "
                                      "in the menu"),
                      updatemenus=[dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=1.16,
                                        yanchor="bottom")],
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom"))
    fig.update_xaxes(type="log", tickvals=gpus, ticktext=[str(g) for g in gpus], title_text="GPUs")
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=[_tick_text(t) for t in ticks], title_text="GiB per GPU")
    return fig


def _two_lines(strategy: str) -> str:
    """A strategy's name as a bar's label in two short lines ("ZeRO-3<br>FSDP")."""
    for cut in (" / ", " + "):
        if cut in strategy:
            head, tail = strategy.split(cut, 1)
            return f"{head}{cut.rstrip() if cut == ' + ' else ''}<br>{tail}"
    return strategy


def memory_breakdown(table: dict[str, dict], gpus: list[int], at: int, height: int = 420) -> go.Figure:
    """What one GPU holds at ``at`` GPUs, stacked by kind (weights, gradients, optimizer state, activations),
    one bar per strategy; a dropdown picks the model and precision. ``table`` as for :func:`memory_explorer`."""
    labels, i = list(table), gpus.index(at)
    fig = go.Figure()
    owner = []
    for k, label in enumerate(labels):
        memory = table[label]["memory"]
        names = [_two_lines(s) for s in memory]
        for part, colour in PART_COLOURS.items():
            fig.add_bar(x=names, y=[memory[s][i][part] / 2**30 for s in memory], name=part, marker_color=colour,
                        legendgroup=part, visible=k == 0, customdata=list(memory),
                        hovertemplate="%{customdata}: " + part + " %{y:,.2f} GiB<extra>" + f"{at} GPUs</extra>")
            owner.append(k)
    buttons = [dict(label=label, method="update", args=[{"visible": [o == k for o in owner]}])
               for k, label in enumerate(labels)]
    fig.update_layout(barmode="stack", height=height, margin=dict(t=110, b=60, r=20),
                      title=dict(text=f"what one GPU holds with {at} GPUs, in GiB: model and precision in the menu"),
                      updatemenus=[dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=1.16,
                                        yanchor="bottom")],
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom"))
    fig.update_xaxes(tickangle=0)
    fig.update_yaxes(title_text="GiB per GPU")
    return fig
