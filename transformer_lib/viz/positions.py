"""Figures of positions: the positional-waves explorer and the RoPE rotation explorer.

Defined in chapter 5, *Positional encodings* (``book/05_positions.ipynb``).

Both work in the static book, with no Python running: every state is precomputed. In the waves
explorer, buttons choose ``d_model`` and a slider chooses the pair ``i`` of dimensions
``(2i, 2i+1)``. A ``d_model`` button shows that width's heatmap and swaps in that width's pair
slider (``Plotly.update`` with a new ``layout.sliders``); a slider step shows the two waves of one
pair, moves the box that marks the pair on the heatmap and retitles the wave panel. The RoPE
explorer's slider moves a query and a key along the positions and redraws their rotated pairs.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from ..layers.positions import RotaryEmbedding, sinusoidal_encoding


def wavelength(i: int, d_model: int, base: float = 10000.0) -> float:
    """Wavelength, in positions, of pair ``i``: ``2 pi * base^(2i / d_model)``."""
    return 2 * math.pi * base ** (2 * i / d_model)


def _wave_title(i: int, d_model: int, base: float) -> str:
    return (f"d_model = {d_model}, feature pair i = {i} (dims {2 * i}, {2 * i + 1}): "
            f"wavelength 2π·{base:g}^({2 * i}/{d_model}) = {wavelength(i, d_model, base):,.1f} positions")


def positional_waves_explorer(
    n_positions: int = 128,
    d_models: tuple[int, ...] = (16, 32, 64, 128),
    d_model: int = 64,
    base: float = 10000.0,
    decimals: int = 3,
) -> go.Figure:
    """Waves of one sin/cos pair over position (top) and the whole encoding table (bottom).

    Args:
        n_positions: positions ``0 .. n_positions - 1`` on the x axis of both panels.
        d_models: the widths the buttons offer (each even).
        d_model: the width shown first (one of ``d_models``); the slider starts at pair 0.
        base: the ``10000`` of Vaswani et al.
        decimals: values are rounded to this many decimals to keep the page small (the default
            figure is about 0.6 MB of JSON).

    Traces: first one heatmap per width (``len(d_models)``), then for each width its pairs
    ``i = 0 .. d/2 - 1`` as two traces each, ``sin`` (dimension ``2i``) then ``cos`` (``2i + 1``).
    """
    if d_model not in d_models:
        raise ValueError(f"d_model={d_model} must be one of d_models={d_models}")
    # plain lists of short decimals: the same compact JSON with every plotly version (5.x writes arrays
    # as lists, where a float32's repr is 17 digits long; 6+ would write binary otherwise)
    tables = {d: sinusoidal_encoding(n_positions, d, base).double().round(decimals=decimals) for d in d_models}
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12, row_heights=[0.4, 0.6],
                        subplot_titles=(_wave_title(0, d_model, base), "the table PE[position, dimension]"))
    for d in d_models:  # traces 0 .. len(d_models)-1: the heatmaps, one shared colour axis
        fig.add_trace(go.Heatmap(z=tables[d].T.tolist(), x0=0, dx=1, y0=0, dy=1, coloraxis="coloraxis",
                                 name=f"d_model={d}", visible=d == d_model,
                                 hovertemplate="position %{x}<br>dimension %{y}<br>PE = %{z:.3f}<extra></extra>"),
                      row=2, col=1)
    first_wave = {}  # d -> index of its first wave trace
    for d in d_models:
        first_wave[d] = len(fig.data)
        for i in range(d // 2):
            for dim, fn, colour in ((2 * i, "sin", "#1f77b4"), (2 * i + 1, "cos", "#ff7f0e")):
                fig.add_trace(go.Scatter(
                    y=tables[d][:, dim].tolist(), x0=0, dx=1, mode="lines+markers", marker_size=3, line_color=colour,
                    name=f"{fn}: dim {dim}", legendgroup=fn, visible=d == d_model and i == 0,
                    hovertemplate=f"position %{{x}}<br>PE[·, {dim}] = %{{y:.3f}}<extra>{fn}</extra>"),
                    row=1, col=1)
    n_traces = len(fig.data)

    def box(i: int) -> dict:  # the heatmap rows 2i and 2i+1
        return {"shapes[0].y0": 2 * i - 0.5, "shapes[0].y1": 2 * i + 1.5}

    def slider(d: int) -> dict:
        waves = list(range(first_wave[d], first_wave[d] + d))
        steps = [dict(method="update", label=str(i),
                      # only this width's wave traces are touched: the heatmap stays as the button left it
                      args=[{"visible": [j // 2 == i for j in range(d)]},
                            {"annotations[0].text": _wave_title(i, d, base), **box(i)},
                            waves])
                 for i in range(d // 2)]
        return dict(active=0, steps=steps, currentvalue=dict(prefix="feature pair i = "), pad=dict(t=30), len=0.9, x=0.05)

    def button(d: int) -> dict:
        visible = [False] * n_traces
        visible[d_models.index(d)] = True
        visible[first_wave[d]] = visible[first_wave[d] + 1] = True  # pair 0
        return dict(label=f"d_model = {d}", method="update",
                    args=[{"visible": visible},
                          {"sliders": [slider(d)], "annotations[0].text": _wave_title(0, d, base), **box(0),
                           "yaxis2.range": [d - 0.5, -0.5]}])

    fig.add_shape(type="rect", xref="x2", yref="y2", x0=-0.5, x1=n_positions - 0.5, y0=-0.5, y1=1.5,
                  line=dict(color="gold", width=3))
    fig.update_layout(
        height=640, margin=dict(t=110, b=40, l=60, r=90),
        coloraxis=dict(colorscale="RdBu", cmin=-1, cmax=1, colorbar=dict(title="PE", len=0.55, y=0.3)),
        legend=dict(x=1.02, xanchor="left", y=1.0, yanchor="top"),  # beside the waves, above the colour bar
        sliders=[slider(d_model)],
        updatemenus=[dict(type="buttons", direction="right", active=d_models.index(d_model), x=0, xanchor="left",
                          y=1.2, yanchor="top", buttons=[button(d) for d in d_models])],
    )
    fig.layout.annotations[0].font.size = 13
    fig.update_yaxes(title_text="value", range=[-1.1, 1.1], row=1, col=1)
    fig.update_yaxes(title_text="dimension", range=[d_model - 0.5, -0.5], row=2, col=1)  # dimension 0 on top
    fig.update_xaxes(title_text="position", row=2, col=1)
    return fig


def rope_rotation_explorer(
    rope: RotaryEmbedding,
    pairs: tuple[int, ...] = (0, 1, 2),
    distance: int = 3,
    q_pair: tuple[float, float] = (1.0, 0.0),
    k_pair: tuple[float, float] = (0.5, 0.5),
) -> go.Figure:
    """RoPE drawn: one 2-D pair of a query at position m and of a key at position m - distance.

    One panel per pair ``i`` in ``pairs``; a slider moves ``m`` over ``distance .. rope.n_positions - 1``.
    Every query pair starts as ``q_pair`` and every key pair as ``k_pair``; ``rope`` (the library's
    module) rotates them by ``m * theta_i`` and ``(m - distance) * theta_i``. Both arrows turn by the
    same angle per step, so the angle between them, and their dot product, never changes.
    """
    d, n = rope.head_dim, rope.n_positions
    if not 0 <= distance < n:
        raise ValueError(f"distance must be in [0, n_positions={n}), got {distance}")
    q = rope(torch.tensor(q_pair).repeat(d // 2).expand(n, d))  # (n_positions, head_dim): q at every position
    k = rope(torch.tensor(k_pair).repeat(d // 2).expand(n, d))
    theta = [rope.base ** (-2 * i / d) for i in pairs]
    qs = [q[:, 2 * i:2 * i + 2].tolist() for i in pairs]  # per panel: n_positions points (x, y)
    ks = [k[:, 2 * i:2 * i + 2].tolist() for i in pairs]

    def title(j: int, m: int) -> str:
        (qx, qy), (kx, ky) = qs[j][m], ks[j][m - distance]
        return (f"feature pair {pairs[j]}: θ = {theta[j]:.3g}, angle mθ = {m * theta[j]:.2f} rad"
                f"<br>q·k in this feature pair = {qx * kx + qy * ky:.3f}")

    def traces(j: int, m: int) -> dict:  # x and y of (trail, query arrow, key arrow) in panel j
        trail = [(round(x, 4), round(y, 4)) for x, y in qs[j][: m + 1]]  # 4 decimals: a smaller page
        (qx, qy), (kx, ky) = trail[m], (round(v, 4) for v in ks[j][m - distance])
        return dict(x=[[p[0] for p in trail], [0, qx], [0, kx]], y=[[p[1] for p in trail], [0, qy], [0, ky]])

    fig = make_subplots(rows=1, cols=len(pairs), subplot_titles=[title(j, distance) for j in range(len(pairs))],
                        horizontal_spacing=0.06)
    angle = torch.linspace(0, 2 * math.pi, 73)
    radius = math.hypot(*q_pair)  # the query's circle
    arrow = dict(symbol="arrow", angleref="previous", size=[0, 13])  # a head at the end, none at the origin
    moving = []  # indices of the traces that the slider moves
    for j in range(len(pairs)):
        start, cell = traces(j, distance), dict(row=1, col=j + 1)
        fig.add_trace(go.Scatter(x=(radius * angle.cos()).tolist(), y=(radius * angle.sin()).tolist(), mode="lines",
                                 line=dict(color="lightgrey", width=1), hoverinfo="skip", showlegend=False), **cell)
        moving += list(range(len(fig.data), len(fig.data) + 3))
        fig.add_trace(go.Scatter(x=start["x"][0], y=start["y"][0], mode="markers", marker=dict(size=5, color="#9ecae1"),
                                 name="query at positions 0..m", legendgroup="trail", showlegend=j == 0,
                                 hovertemplate="(%{x:.2f}, %{y:.2f})<extra>query</extra>"), **cell)
        fig.add_trace(go.Scatter(x=start["x"][1], y=start["y"][1], mode="lines+markers", name="query at m",
                                 marker=dict(color="#1f77b4", **arrow), line=dict(color="#1f77b4", width=3),
                                 legendgroup="q", showlegend=j == 0, hoverinfo="skip"), **cell)
        fig.add_trace(go.Scatter(x=start["x"][2], y=start["y"][2], mode="lines+markers", name=f"key at m - {distance}",
                                 marker=dict(color="#d62728", **arrow), line=dict(color="#d62728", width=3, dash="dot"),
                                 legendgroup="k", showlegend=j == 0, hoverinfo="skip"), **cell)
        fig.update_xaxes(range=[-1.25, 1.25], showticklabels=False, **cell)
        fig.update_yaxes(range=[-1.25, 1.25], showticklabels=False, scaleanchor=f"x{j + 1 if j else ''}", **cell)

    def step(m: int) -> dict:
        data = [traces(j, m) for j in range(len(pairs))]
        return dict(method="update", label=str(m),
                    args=[{"x": [xs for t in data for xs in t["x"]], "y": [ys for t in data for ys in t["y"]]},
                          {f"annotations[{j}].text": title(j, m) for j in range(len(pairs))}, moving])

    fig.update_layout(
        height=430, margin=dict(t=90, b=20, l=20, r=20),
        legend=dict(orientation="h", x=0.5, xanchor="center", y=-0.02, yanchor="top"),
        sliders=[dict(active=0, steps=[step(m) for m in range(distance, n)], pad=dict(t=50),
                      currentvalue=dict(prefix="query position m = "))],
    )
    return fig
