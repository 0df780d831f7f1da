"""Figures for chapter 12, *Scaling out*: the ring all-reduce step by step, where a distributed step's time
goes, and the memory each GPU needs. Every control works in the static book (sliders and dropdowns)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..scaling import STRATEGIES, RingStep

LETTERS = "abcdefghijklmnopqrstuvwxyz"
STRATEGY_COLOURS = dict(zip(STRATEGIES, ("#e45756", "#f58518", "#54a24b", "#4c78a8")))
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
                    arrows.append(dict(x=c, y=i, yshift=-15, xref="x", yref="y", text="sent to GPU 0",
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
    fig.update_layout(height=height, sliders=sliders, margin=dict(t=90, b=40, r=90), annotations=first["annotations"],
                      title=dict(text=first["title.text"]), yaxis=dict(autorange="reversed", showgrid=False),
                      xaxis=dict(showgrid=False))
    return fig


def timeline_explorer(timelines: dict[str, list[dict]], title: str = "one training step on rank 0",
                    height: int = 380) -> go.Figure:
    """Bars for what rank 0 did during one step, on two lanes: compute (the training thread) and
    communication (the backend's threads); a dropdown picks the run (e.g. DDP, FSDP).

    ``timelines[name]``: dicts with ``lane``, ``phase`` (a key of ``PHASE_COLOURS``), ``start`` and
    ``end`` in milliseconds from the start of the step, and ``name`` (the operation).
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
                        legendgroup=phase, visible=k == 0, customdata=[e["name"] for e in bars],
                        hovertemplate="%{customdata}<br>%{base:.1f} to %{x:.1f} ms later<extra>" + phase + "</extra>")
            owner.append(k)
    buttons = [dict(label=run, method="update", args=[{"visible": [o == k for o in owner]},
                                                       {"title.text": f"{title}: {run}"}]) for k, run in enumerate(names)]
    fig.update_layout(title=dict(text=f"{title}: {names[0]}"), barmode="overlay", height=height,
                      xaxis_title="milliseconds since the step began", margin=dict(t=90, b=50, l=120),
                      updatemenus=[dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=1.12,
                                        yanchor="bottom")] if len(names) > 1 else [],
                      legend=dict(orientation="h", y=-0.25))
    fig.update_yaxes(categoryorder="array", categoryarray=["communication", "compute"])
    return fig


def memory_explorer(table: dict[str, dict], gpus: list[int], capacities: dict[str, float],
                  height: int = 560) -> go.Figure:
    """The memory calculator: GiB per GPU against the number of GPUs, one line per strategy; right, what
    each strategy holds at ``gpus_for_bars`` GPUs. A dropdown picks the model and precision.

    ``table[label] = {"memory": {strategy: [memory_per_gpu(...) dict for each count in gpus]},
    "bars_at": index into gpus}``. ``capacities``: ``{"T4 (16 GB)": bytes, ...}``, dotted lines.
    """
    labels = list(table)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.1,
                        subplot_titles=("GiB per GPU (log scale)", "what one GPU holds"))
    owner = []
    for k, label in enumerate(labels):
        memory, at = table[label]["memory"], table[label]["bars_at"]
        for strategy in STRATEGIES:
            parts = memory[strategy]
            totals = [sum(p.values()) / 2**30 for p in parts]
            detail = [", ".join(f"{name} {v / 2**30:,.1f}" for name, v in p.items()) for p in parts]
            fig.add_scatter(x=gpus, y=totals, mode="lines+markers", name=strategy, legendgroup=strategy,
                            line=dict(color=STRATEGY_COLOURS[strategy]), visible=k == 0, customdata=detail,
                            hovertemplate="%{x} GPUs: %{y:,.1f} GiB<br>%{customdata}<extra>" + strategy + "</extra>",
                            row=1, col=1)
            owner.append(k)
        for part, colour in PART_COLOURS.items():
            fig.add_bar(x=list(STRATEGIES), y=[memory[s][at][part] / 2**30 for s in STRATEGIES], name=part,
                        marker_color=colour, legendgroup=part, visible=k == 0,
                        hovertemplate="%{x}: " + part + " %{y:,.2f} GiB<extra>" + f"{gpus[at]} GPUs</extra>",
                        row=1, col=2)
            owner.append(k)
    for name, capacity in capacities.items():  # traces, not shapes: shown whatever the menu picks
        fig.add_scatter(x=[gpus[0], gpus[-1]], y=[capacity / 2**30] * 2, mode="lines+text", name=name,
                        text=[name, ""], textposition="top right", line=dict(color="gray", dash="dot", width=1),
                        showlegend=False, hovertemplate=f"{name}: {capacity / 2**30:,.1f} GiB<extra></extra>",
                        row=1, col=1)
        owner.append(None)
    buttons = [dict(label=label, method="update", args=[{"visible": [o is None or o == k for o in owner]}])
               for k, label in enumerate(labels)]
    at = table[labels[0]]["bars_at"]
    fig.update_layout(barmode="stack", height=height, margin=dict(t=110, b=60),
                      title=dict(text="memory per GPU for training with AdamW: model and precision in the menu"),
                      updatemenus=[dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=1.16,
                                        yanchor="bottom")],
                      legend=dict(orientation="h", y=-0.18))
    fig.update_xaxes(type="log", tickvals=gpus, ticktext=[str(g) for g in gpus], title_text="GPUs", row=1, col=1)
    fig.update_yaxes(type="log", dtick="D2", row=1, col=1)  # 1, 2, 5, 10, 20, ...: fewer labels
    fig.update_xaxes(title_text=f"at {gpus[at]} GPUs", row=1, col=2)
    fig.update_yaxes(title_text="GiB", row=1, col=2)
    return fig
