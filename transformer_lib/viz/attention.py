"""Figures of attention: the attention-map explorer, a step-through of attention's stages, heatmap grids.

Defined in chapter 2, *Attention* (``book/02_attention.ipynb``); chapter 7 reuses the explorer
on a trained GPT and chapter 9 on cross-attention.

All three work in the static book, with no Python running: every state is precomputed.

* :func:`attention_explorer` draws one token x token heatmap per head; a dropdown (or a slider)
  chooses the layer. Each layer has its own heatmap traces (one per head); a control step makes
  that layer's traces visible (``Plotly.update``) and sets each panel's axis tokens and the title.
  Hovering a cell shows the query token, the key token (with their positions) and the weight.
* :func:`matrix_steps` shows a sequence of matrices, one per slider step (e.g. attention's
  scores, scaled scores, masked scores, weights, output), with the values written in the cells.
* :func:`heatmap_grid` draws a few labelled matrices side by side (masks, weights).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor

from .tokens import show_whitespace

def display_token(token: str) -> str:
    """A token as a readable label: spaces, newlines and tabs drawn as ␣ ↵ ⇥, the empty string as ∅."""
    return "∅" if token == "" else show_whitespace(token)


def position_labels(tokens: Sequence[str]) -> list[str]:
    """Unique axis categories ``"<position> <token>"``: repeated tokens (two ``e``) stay apart."""
    return [f"{i} {display_token(str(t))}" for i, t in enumerate(tokens)]


def _as_layers(maps, batch_index: int) -> dict[str, Tensor]:
    """Normalise ``maps`` to ``{layer name: (n_heads, seq_q, seq_k) float tensor}``."""
    if isinstance(maps, Tensor):
        maps = {"attention": maps}
    elif isinstance(maps, (list, tuple)):
        maps = {f"layer {i}": m for i, m in enumerate(maps)}
    elif not isinstance(maps, Mapping):
        raise TypeError(f"maps must be a dict of tensors (as tl.capture_attention yields), a list or a tensor, got {type(maps).__name__}")
    if not maps:
        raise ValueError("maps is empty: run the model inside `with tl.capture_attention(model) as maps:` first")
    layers = {}
    for name, m in maps.items():
        if not isinstance(m, Tensor):
            raise TypeError(f"maps[{name!r}] must be a torch.Tensor, got {type(m).__name__}")
        if m.dim() == 4:  # (batch, n_heads, seq_q, seq_k): one example
            if not -m.shape[0] <= batch_index < m.shape[0]:
                raise ValueError(f"batch_index={batch_index} is out of range for maps[{name!r}] of batch size {m.shape[0]}")
            m = m[batch_index]
        elif m.dim() == 2:  # (seq_q, seq_k): a single head
            m = m[None]
        elif m.dim() != 3:
            raise ValueError(f"maps[{name!r}] must be (batch, n_heads, seq_q, seq_k), (n_heads, seq_q, seq_k) "
                             f"or (seq_q, seq_k), got shape {tuple(m.shape)}")
        layers[str(name)] = m.detach().float().cpu()
    return layers


def attention_explorer(
    maps: Mapping[str, Tensor] | Sequence[Tensor] | Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str] | Mapping[str, Sequence[str]] | None = None,
    title: str = "Attention weights",
    *,
    batch_index: int = 0,
    layer: int | str = 0,
    control: str = "dropdown",
    panels: str = "heads",
    max_cols: int = 4,
    panel_height: int = 300,
    zmax: float | None = 1.0,
    colorscale: str = "Blues",
    decimals: int = 3,
) -> go.Figure:
    """Token x token attention heatmaps, one panel per head; a dropdown or slider chooses the layer.

    Args:
        maps: ``{layer name: weights}`` as :func:`~transformer_lib.layers.attention.capture_attention`
            yields, each ``(batch, n_heads, seq_q, seq_k)`` (``batch_index`` picks the example);
            also a list of such tensors (named ``layer 0``, ``layer 1``, ...), or one tensor. Layers may
            have different numbers of heads and key lengths (self- and cross-attention of a decoder).
        query_tokens: the ``seq_q`` query tokens (rows, top to bottom).
        key_tokens: the ``seq_k`` key tokens (columns); None: the query tokens (self-attention); a dict
            ``{layer name: tokens}`` when layers attend to different sequences.
        title: the figure title; the layer's name is appended.
        layer: the layer shown first (index or name; with ``panels="one"`` also ``"<layer>, head <h>"``).
        control: ``"dropdown"`` or ``"slider"``: how the reader chooses the layer (none if one layer).
        panels: ``"heads"``: a panel per head, the control picks the layer; ``"one"``: a single large
            panel, the control picks layer and head together (long sequences stay legible).
        max_cols: panels per row.
        panel_height: pixels per row of panels.
        zmax: top of the colour scale (weights are probabilities: 1.0); None: the largest weight.
        colorscale: a plotly colour scale name.
        decimals: weights are rounded to this many decimals to keep the page small.

    Traces: layer by layer, one ``go.Heatmap`` per head, in subplot ``(h // cols + 1, h % cols + 1)``.
    Every control step is ``method="update"`` with ``args = [{"visible": [...]}, {layout changes}]``:
    the visible list shows exactly the chosen layer's heads; the layout sets the title and, for each
    panel, the axis categories and tick labels of that layer's tokens.
    """
    if control not in ("dropdown", "slider"):
        raise ValueError(f"control must be 'dropdown' or 'slider', got {control!r}")
    if not isinstance(max_cols, int) or max_cols < 1:
        raise ValueError(f"max_cols must be a positive int, got {max_cols!r}")
    if panels not in ("heads", "one"):
        raise ValueError(f"panels must be 'heads' or 'one', got {panels!r}")
    layers = _as_layers(maps, batch_index)
    if panels == "one":  # every (layer, head) becomes a "layer" of one head
        heads = [_head_name(n, h) for n, m in layers.items() for h in range(m.shape[0])]
        if not (isinstance(layer, str) and layer in heads):  # a layer: show its head 0 first
            layer = _head_name(list(layers)[layer] if isinstance(layer, int) and -len(layers) <= layer < len(layers)
                               else layer, 0)
        if isinstance(key_tokens, Mapping):
            key_tokens = {_head_name(n, h): key_tokens[n] for n, m in layers.items() for h in range(m.shape[0])
                          if n in key_tokens}
        layers = {_head_name(n, h): m[h:h + 1] for n, m in layers.items() for h in range(m.shape[0])}
        max_cols = 1
    names = list(layers)
    if isinstance(layer, str):
        if layer not in layers:
            raise ValueError(f"layer {layer!r} is not one of {names}")
        first = names.index(layer)
    else:
        if not -len(names) <= layer < len(names):
            raise ValueError(f"layer={layer} is out of range for {len(names)} layers")
        first = layer % len(names)

    queries = [str(t) for t in query_tokens]
    keys = {}
    for name, m in layers.items():
        if isinstance(key_tokens, Mapping):
            if name not in key_tokens:
                raise ValueError(f"key_tokens has no entry for layer {name!r}")
            keys[name] = [str(t) for t in key_tokens[name]]
        else:
            keys[name] = queries if key_tokens is None else [str(t) for t in key_tokens]
        if m.shape[1] != len(queries):
            raise ValueError(f"maps[{name!r}] has seq_q={m.shape[1]} rows but {len(queries)} query tokens were given")
        if m.shape[2] != len(keys[name]):
            raise ValueError(f"maps[{name!r}] has seq_k={m.shape[2]} columns but {len(keys[name])} key tokens were given"
                             + (" (pass key_tokens for cross-attention)" if key_tokens is None else ""))

    n_heads = max(m.shape[0] for m in layers.values())
    cols = min(n_heads, max_cols)
    rows = math.ceil(n_heads / cols)
    titles = [f"head {h}" for h in range(n_heads)] if panels == "heads" else None
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles,
                        horizontal_spacing=0.25 / cols, vertical_spacing=min(0.3 / rows, 0.12))
    q_labels = position_labels(queries)
    owner = []  # owner[j] = index of the layer that trace j belongs to
    for li, (name, m) in enumerate(layers.items()):
        k_labels = position_labels(keys[name])
        for h in range(m.shape[0]):
            label = name if panels == "one" else f"{name}, head {h}"  # "one": name holds the head
            fig.add_trace(
                go.Heatmap(
                    z=m[h].double().round(decimals=decimals).tolist(), x=k_labels, y=q_labels,
                    coloraxis="coloraxis", visible=li == first, name=label,
                    hovertemplate=f"query %{{y}}<br>key %{{x}}<br>weight %{{z:.{decimals}f}}<extra>{label}</extra>",
                ),
                row=h // cols + 1, col=h % cols + 1,
            )
            owner.append(li)

    def axes(li: int) -> dict:
        """Layout changes that label every panel's axes with layer ``li``'s tokens."""
        name = names[li]
        k_labels = position_labels(keys[name])
        k_ticks = [display_token(t) for t in keys[name]]
        q_ticks = [display_token(t) for t in queries]
        out = {"title.text": f"{title}: {name}"}
        for h in range(n_heads):
            sub = fig.get_subplot(h // cols + 1, h % cols + 1)
            x, y = sub.xaxis.plotly_name, sub.yaxis.plotly_name
            out.update({f"{x}.categoryarray": k_labels, f"{x}.tickvals": k_labels, f"{x}.ticktext": k_ticks,
                        f"{y}.categoryarray": q_labels, f"{y}.tickvals": q_labels, f"{y}.ticktext": q_ticks})
        return out

    def step_args(li: int) -> list:
        return [{"visible": [o == li for o in owner]}, axes(li)]

    for h in range(n_heads):
        fig.update_xaxes(type="category", categoryorder="array", tickmode="array", tickangle=0, tickfont_size=9,
                         row=h // cols + 1, col=h % cols + 1)
        fig.update_yaxes(type="category", categoryorder="array", tickmode="array", autorange="reversed", tickfont_size=9,
                         row=h // cols + 1, col=h % cols + 1)
    for h in range(cols):  # axis titles on the outer panels only
        fig.update_xaxes(title_text="key (attended to)", row=rows, col=h + 1)
    for r in range(rows):
        fig.update_yaxes(title_text="query (attending)", row=r + 1, col=1)
    top = zmax if zmax is not None else max(float(m.max()) for m in layers.values())
    fig.update_layout(
        **{k: v for k, v in axes(first).items() if k != "title.text"},
        title=dict(text=f"{title}: {names[first]}", x=0.5, xanchor="center"),
        coloraxis=dict(colorscale=colorscale, cmin=0.0, cmax=top, colorbar=dict(title="weight")),
        height=panel_height * rows + 150, margin=dict(t=110, b=50, l=60, r=90),
    )
    if len(names) > 1 and control == "dropdown":
        fig.update_layout(updatemenus=[dict(
            type="dropdown", active=first, x=0, xanchor="left", y=1.0, yanchor="bottom", pad=dict(b=30),
            buttons=[dict(label=name, method="update", args=step_args(li)) for li, name in enumerate(names)])])
    elif len(names) > 1:
        fig.update_layout(sliders=[dict(
            active=first, currentvalue=dict(prefix="layer: "), pad=dict(t=60),
            steps=[dict(label=name, method="update", args=step_args(li)) for li, name in enumerate(names)])])
    return fig


def _head_name(layer: str, head: int) -> str:
    return f"{layer}, head {head}"


def _fmt(v: float, decimals: int) -> str:
    if math.isinf(v):
        return "−∞" if v < 0 else "∞"
    return f"{v:.{decimals}f}"


def matrix_steps(
    stages: Mapping[str, Tensor],
    row_labels: Sequence[str],
    col_labels: Sequence[str] | Mapping[str, Sequence[str]],
    title: str = "",
    captions: Mapping[str, str] | None = None,
    decimals: int = 2,
    height: int = 480,
) -> go.Figure:
    """A slider that steps through matrices: one heatmap per stage, its values written in the cells.

    Args:
        stages: ``{stage name: (rows, cols) matrix}``, in slider order. ``-inf`` entries (masked
            scores) are left blank (the grey background) and written as ``−∞``.
        row_labels: the rows' labels (queries), shared by all stages.
        col_labels: the columns' labels, or ``{stage name: labels}`` when a stage has other columns
            (attention's output has ``d_v`` columns, not one per key).
        title: the figure title; the stage's caption follows it.
        captions: ``{stage name: one line}`` saying what the stage computes.
        decimals: digits written in the cells.

    A matrix with all values in [0, 1] (weights) is coloured white -> blue on [0, 1]; any other on a
    red-blue scale symmetric about 0. Step ``i`` shows trace ``i`` only (``visible``), retitles the
    figure and relabels the x axis.
    """
    if not stages:
        raise ValueError("stages is empty")
    names = list(stages)
    captions = dict(captions or {})
    mats = {}
    for name in names:
        m = stages[name]
        m = torch.as_tensor(m).detach().double().cpu()
        if m.dim() != 2:
            raise ValueError(f"stage {name!r} must be a 2-D matrix, got shape {tuple(m.shape)}")
        if m.shape[0] != len(row_labels):
            raise ValueError(f"stage {name!r} has {m.shape[0]} rows but {len(row_labels)} row labels")
        labels = col_labels[name] if isinstance(col_labels, Mapping) else col_labels
        if m.shape[1] != len(labels):
            raise ValueError(f"stage {name!r} has {m.shape[1]} columns but {len(labels)} column labels")
        mats[name] = (m, [str(c) for c in labels])

    def heading(name: str) -> str:
        cap = captions.get(name, "")
        return f"{title}<br><sub>{name}{': ' + cap if cap else ''}</sub>" if title else f"{name}{': ' + cap if cap else ''}"

    fig = go.Figure()
    for i, name in enumerate(names):
        m, labels = mats[name]
        finite = m[torch.isfinite(m)]
        z = [[None if math.isinf(v) else round(v, 4) for v in row] for row in m.tolist()]
        text = [[_fmt(v, decimals) for v in row] for row in m.tolist()]
        if finite.numel() and finite.min() >= 0 and finite.max() <= 1:
            colours = dict(colorscale="Blues", zmin=0.0, zmax=1.0)
        else:
            top = float(finite.abs().max()) if finite.numel() else 1.0
            colours = dict(colorscale="RdBu", reversescale=True, zmin=-top, zmax=top)
        fig.add_trace(go.Heatmap(
            z=z, x=labels, y=[str(r) for r in row_labels], text=text, texttemplate="%{text}", name=name,
            visible=i == 0, xgap=1, ygap=1, **colours, colorbar=dict(title=name[:12]),
            hovertemplate="row %{y}<br>column %{x}<br>value %{text}<extra>" + name + "</extra>",
        ))

    steps = [dict(method="update", label=name,
                  args=[{"visible": [j == i for j in range(len(names))]},
                        {"title.text": heading(name), "xaxis.categoryarray": mats[name][1]}])
             for i, name in enumerate(names)]
    fig.update_layout(
        title=dict(text=heading(names[0]), x=0.5, xanchor="center"), height=height,
        plot_bgcolor="#d9d9d9",  # masked (blank) cells show as grey
        margin=dict(t=100, b=40, l=60, r=90),
        sliders=[dict(active=0, steps=steps, currentvalue=dict(prefix="stage: "), pad=dict(t=40))],
    )
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=mats[names[0]][1], side="top", showgrid=False)
    fig.update_yaxes(type="category", autorange="reversed", showgrid=False)
    return fig


def heatmap_grid(
    panels: Mapping[str, Tensor],
    row_labels: Sequence[str] | Mapping[str, Sequence[str]],
    col_labels: Sequence[str] | Mapping[str, Sequence[str]],
    title: str = "",
    cols: int = 3,
    zmin: float = 0.0,
    zmax: float = 1.0,
    colorscale: str = "Blues",
    value_name: str = "weight",
    panel_height: int = 300,
    decimals: int = 3,
) -> go.Figure:
    """Matrices side by side (``cols`` per row), sharing one colour scale; hover names row, column, value.

    ``panels`` is ``{panel title: (rows, cols) matrix}`` (bool masks are drawn as 0/1);
    ``row_labels`` / ``col_labels`` are shared, or ``{panel title: labels}`` per panel.
    """
    if not panels:
        raise ValueError("panels is empty")
    titles = list(panels)
    boolean = all(torch.as_tensor(m).dtype == torch.bool for m in panels.values())
    cols = min(cols, len(titles))
    rows = math.ceil(len(titles) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.3 / cols,
                        vertical_spacing=min(0.3 / rows, 0.15))
    for i, name in enumerate(titles):
        m = torch.as_tensor(panels[name]).detach().cpu().double()
        if m.dim() != 2:
            raise ValueError(f"panel {name!r} must be a 2-D matrix, got shape {tuple(m.shape)}")
        rl = row_labels[name] if isinstance(row_labels, Mapping) else row_labels
        cl = col_labels[name] if isinstance(col_labels, Mapping) else col_labels
        if tuple(m.shape) != (len(rl), len(cl)):
            raise ValueError(f"panel {name!r} has shape {tuple(m.shape)} but {len(rl)} row and {len(cl)} column labels")
        r, c = i // cols + 1, i % cols + 1
        fig.add_trace(go.Heatmap(
            z=m.round(decimals=decimals).tolist(), x=position_labels(cl), y=position_labels(rl), coloraxis="coloraxis",
            xgap=1, ygap=1, name=name,
            hovertemplate=f"row %{{y}}<br>column %{{x}}<br>{value_name} %{{z}}<extra>{name}</extra>"), row=r, col=c)
        short = max(len(display_token(str(t))) for t in cl) <= 2  # long labels: plotly may turn them
        fig.update_xaxes(type="category", tickmode="array", tickvals=position_labels(cl),
                         ticktext=[display_token(str(t)) for t in cl], tickangle=0 if short else None,
                         row=r, col=c)
        fig.update_yaxes(type="category", tickmode="array", tickvals=position_labels(rl),
                         ticktext=[display_token(str(t)) for t in rl], autorange="reversed", row=r, col=c)
    fig.update_layout(
        title=dict(text=title, x=0.5, xanchor="center"), height=panel_height * rows + 120,
        coloraxis=dict(colorscale=colorscale, cmin=zmin, cmax=zmax, colorbar=dict(title=value_name)),
        margin=dict(t=90 if title else 60, b=40, l=60, r=90),
    )
    if boolean:  # a mask has two values: a two-step key, not a continuous scale
        two = [[0, "#f0f0f0"], [0.5, "#f0f0f0"], [0.5, "#2171b5"], [1, "#2171b5"]]
        key = dict(tickvals=[0.25, 0.75], ticktext=["no", "yes"], len=0.5, thickness=16)
        fig.update_layout(coloraxis=dict(colorscale=two, cmin=0, cmax=1, colorbar=key))
    return fig
