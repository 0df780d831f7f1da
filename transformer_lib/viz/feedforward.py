"""Figures of chapter 3, *Feed-forward networks*.

Every control here works in the static book, without a kernel: dropdowns (``updatemenus``) and
sliders restyle or relayout the figure in the browser, and hover shows the numbers.

* :func:`activation_explorer`: activation curves and their derivatives, a dropdown of comparisons
  and a zoom slider.
* :func:`memory_explorer`: the key-value-memory view of a trained FFN, as heatmaps.
* :func:`training_explorer`: fits of a 1-D function during training (a slider over steps) and the
  loss curves.
* :func:`contributions_explorer`: a 1-D FFN's output taken apart into one term per hidden unit.
"""

from __future__ import annotations

from typing import Callable, Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
DASHES = ("solid", "solid", "dot", "dash", "dashdot", "longdash")


def _np(t: Tensor):
    """A tensor as a NumPy array for plotly (detached, on the CPU)."""
    return t.detach().cpu().float().numpy()  # float32 keeps the pages small


def _padded_range(values: Tensor, pad: float = 0.06) -> list[float]:
    lo, hi = float(values.min()), float(values.max())
    margin = pad * max(hi - lo, 1e-6)
    return [lo - margin, hi + margin]


def activation_explorer(
    activations: dict[str, Callable[[Tensor], Tensor]],
    *,
    x_max: float = 5.0,
    zooms: Sequence[float] = (5.0, 3.0, 1.5, 0.5),
    presets: dict[str, Sequence[str]] | None = None,
    n_points: int = 801,
) -> go.Figure:
    """Activations (left) and their derivatives (right, by autograd) on ``[-x_max, x_max]``.

    Controls: a dropdown of ``presets`` (label -> names of the activations to show; default: all,
    and each one alone), the legend (click a name to hide or show it in both panels), a slider
    that zooms both panels to ``[-z, z]`` for ``z`` in ``zooms`` (the y-ranges follow the curves
    inside the window), and hover.
    """
    names = list(activations)
    x = torch.linspace(-x_max, x_max, n_points, dtype=torch.float64, requires_grad=True)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("activation  f(x)", "derivative  f'(x)"), horizontal_spacing=0.08)
    curves, slopes = {}, {}
    for i, name in enumerate(names):
        y = activations[name](x)
        (dy,) = torch.autograd.grad(y.sum(), x)
        curves[name], slopes[name] = y.detach(), dy.detach()
        # later curves thinner and dashed, so a curve drawn over a near-identical one leaves it visible
        style = dict(color=COLORS[i % len(COLORS)], width=max(4.0 - 0.7 * i, 1.5), dash=DASHES[i % len(DASHES)])
        xs = _np(x)
        fig.add_trace(go.Scatter(x=xs, y=_np(curves[name]), name=name, legendgroup=name, line=style,
                                 hovertemplate=f"{name}(%{{x:.3f}}) = %{{y:.4f}}<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=xs, y=_np(slopes[name]), name=name, legendgroup=name, line=style, showlegend=False,
                                 hovertemplate=f"{name}'(%{{x:.3f}}) = %{{y:.4f}}<extra></extra>"), row=1, col=2)

    presets = presets or {"all": names, **{name: [name] for name in names}}
    buttons = []
    for label, shown in presets.items():
        unknown = set(shown) - set(names)
        if unknown:
            raise ValueError(f"preset {label!r} names unknown activations {sorted(unknown)}; known: {names}")
        visible = [name in shown for name in names for _ in range(2)]  # two traces per activation
        buttons.append(dict(label=label, method="restyle", args=[{"visible": visible}]))

    xd = x.detach()
    steps = []
    for z in zooms:
        window = (xd >= -z) & (xd <= z)
        f_range = _padded_range(torch.cat([curves[n][window] for n in names]))
        d_range = _padded_range(torch.cat([slopes[n][window] for n in names]))
        steps.append(dict(label=f"±{z:g}", method="relayout", args=[{
            "xaxis.range": [-z, z], "xaxis2.range": [-z, z], "yaxis.range": f_range, "yaxis2.range": d_range,
        }]))
    fig.update_layout(steps[0]["args"][0])
    fig.update_layout(
        height=520,
        margin=dict(t=90, b=130),
        hovermode="x",
        updatemenus=[dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=1.1, yanchor="bottom",
                          showactive=True)],
        sliders=[dict(steps=steps, active=0, currentvalue=dict(prefix="x-range: "), pad=dict(t=55))],
    )
    fig.update_xaxes(title_text="x", zeroline=True)
    return fig


def memory_explorer(
    coefficients: Tensor,
    contributions: Tensor,
    value_tokens: Tensor,
    targets: Tensor,
) -> go.Figure:
    """Key-value memories of a trained FFN on a lookup task, as two heatmaps chosen by a dropdown.

    Args:
        coefficients: ``(n_inputs, d_ff)`` memory coefficients ``act(k_i . x + b_i)``.
        contributions: ``(n_inputs, d_ff)`` each memory's contribution to the right answer's logit.
        value_tokens: ``(d_ff,)`` the token each value vector promotes most.
        targets: ``(n_inputs,)`` the right output token of each input.

    Columns (memories) are sorted by the input that excites them most, so each key's favourite
    inputs line up along the diagonal.
    """
    n_inputs, d_ff = coefficients.shape
    # sort by strength, then (stable) by favourite input: ties keep the strongest first
    order = torch.argsort(-coefficients.max(0).values, stable=True)
    order = order[torch.argsort(coefficients.argmax(0)[order], stable=True)]
    coef, contrib = coefficients[:, order], contributions[:, order]
    # the labels carry what hover should say: memory i and the token its value promotes; input t and its answer
    common = dict(x=[f"m{int(j)} (value promotes token {int(value_tokens[j])})" for j in order],
                  y=[f"token {t} (answer {int(targets[t])})" for t in range(n_inputs)])
    limit = float(contrib.abs().max())
    fig = go.Figure([
        go.Heatmap(z=_np(coef), colorscale="Viridis", colorbar=dict(title="m_i(x)"), **common,
                   hovertemplate="input %{y}<br>memory %{x}<br>coefficient %{z:.3f}<extra></extra>"),
        go.Heatmap(z=_np(contrib), colorscale="RdBu", zmid=0, zmin=-limit, zmax=limit, visible=False,
                   colorbar=dict(title="logit"), **common,
                   hovertemplate="input %{y}<br>memory %{x}<br>adds %{z:.3f} to the answer's logit<extra></extra>"),
    ])
    fig.update_layout(
        height=520,
        margin=dict(t=60),
        xaxis=dict(title="memory (hidden unit), sorted by favourite input", showticklabels=False),
        yaxis=dict(title="input token", autorange="reversed", showticklabels=False),
        updatemenus=[dict(buttons=[
            dict(label="key activations m_i(x)", method="restyle", args=[{"visible": [True, False]}]),
            dict(label="contribution to the right answer's logit, m_i(x) (v_i · e_answer)", method="restyle",
                 args=[{"visible": [False, True]}]),
        ], direction="down", x=0.0, xanchor="left", y=1.02, yanchor="bottom")],
    )
    return fig


def training_explorer(
    x: Tensor,
    target: Tensor,
    snapshots: dict[str, Sequence[Tensor]],
    snapshot_steps: Sequence[int],
    losses: dict[str, Sequence[float]],
) -> go.Figure:
    """Left: the target and each model's fit after ``snapshot_steps[k]`` steps (a slider picks ``k``).
    Right: the training loss of each model (log scale), with the slider's step marked.

    ``snapshots[name][k]`` is the model's output on ``x`` after ``snapshot_steps[k]`` steps.
    """
    names = list(snapshots)
    n_snap = len(snapshot_steps)
    xs = _np(x.flatten())
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], subplot_titles=("fit", "training loss (MSE)"))
    fig.add_trace(go.Scatter(x=xs, y=_np(target.flatten()), name="target", line=dict(color="black", width=5),
                             opacity=0.25, hovertemplate="target(%{x:.2f}) = %{y:.3f}<extra></extra>"), row=1, col=1)
    for k in range(n_snap):  # fit traces: snapshot-major, so snapshot k owns indices 1 + k*len(names) + i
        for i, name in enumerate(names):
            fig.add_trace(go.Scatter(x=xs, y=_np(snapshots[name][k].flatten()), name=name, legendgroup=name,
                                     line=dict(color=COLORS[i % len(COLORS)], width=2), visible=k == n_snap - 1,
                                     hovertemplate=f"{name}(%{{x:.2f}}) = %{{y:.3f}}<extra>step {snapshot_steps[k]}</extra>"),
                          row=1, col=1)
    for i, name in enumerate(names):
        fig.add_trace(go.Scatter(x=list(range(1, len(losses[name]) + 1)), y=_np(torch.as_tensor(losses[name])), name=name,
                                 legendgroup=name, showlegend=False, line=dict(color=COLORS[i % len(COLORS)], width=1.5),
                                 hovertemplate=f"{name}: step %{{x}}, loss %{{y:.4f}}<extra></extra>"), row=1, col=2)

    def marker(step: int) -> list[dict]:
        return [dict(type="line", xref="x2", yref="y2 domain", x0=step, x1=step, y0=0, y1=1,
                     line=dict(color="gray", dash="dot"))]

    steps = []
    for k, step in enumerate(snapshot_steps):
        visible = [True] + [kk == k for kk in range(n_snap) for _ in names] + [True] * len(names)
        steps.append(dict(label=str(step), method="update", args=[{"visible": visible}, {"shapes": marker(step)}]))
    y_all = torch.cat([target.flatten()] + [s.flatten() for name in names for s in snapshots[name]])
    lo, hi = float(target.min()), float(target.max())
    pad = 0.5 * (hi - lo)
    fig.update_layout(
        height=520,
        margin=dict(t=60, b=130),
        shapes=marker(snapshot_steps[-1]),
        sliders=[dict(steps=steps, active=n_snap - 1, currentvalue=dict(prefix="after step: "), pad=dict(t=55))],
        legend=dict(orientation="h", y=1.13, x=0.0),
        hovermode="closest",
    )
    fig.update_yaxes(range=[max(lo - pad, float(y_all.min())), min(hi + pad, float(y_all.max()))], row=1, col=1)
    fig.update_yaxes(type="log", dtick=1, row=1, col=2)  # label the powers of ten only
    fig.update_xaxes(title_text="x", row=1, col=1)
    fig.update_xaxes(title_text="step", row=1, col=2)
    return fig


def contributions_explorer(
    x: Tensor,
    target: Tensor,
    terms: dict[str, Tensor],
    bias: dict[str, float],
) -> go.Figure:
    """A 1-D FFN's output as a sum of one term per hidden unit; a dropdown picks the model.

    Args:
        x: ``(n,)`` inputs; ``target``: ``(n,)`` the function the models were fitted to.
        terms: model name -> ``(d_ff, n)`` the term ``act(k_i x + b_i) v_i`` of each hidden unit.
        bias: model name -> the output bias ``b_out``.
    """
    names = list(terms)
    xs = _np(x.flatten())
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=_np(target.flatten()), name="target", line=dict(color="black", width=5),
                             opacity=0.25, hoverinfo="skip"))
    owner = [None]  # which model each trace belongs to (None: always shown)
    for m, name in enumerate(names):
        color = COLORS[m % len(COLORS)]
        for i, term in enumerate(terms[name]):
            fig.add_trace(go.Scatter(x=xs, y=_np(term), name="one term per unit", legendgroup="units", showlegend=i == 0,
                                     line=dict(color=color, width=1), opacity=0.55, visible=m == 0,
                                     hovertemplate=f"unit {i}: %{{y:.3f}}<extra>{name}</extra>"))
            owner.append(name)
        total = terms[name].sum(0) + bias[name]
        fig.add_trace(go.Scatter(x=xs, y=_np(total), name="sum + b_out", line=dict(color=color, width=3),
                                 visible=m == 0, hovertemplate="sum: %{y:.3f}<extra>" + name + "</extra>"))
        owner.append(name)
    buttons = [dict(label=name, method="update",
                    args=[{"visible": [o is None or o == name for o in owner]},
                          {"title.text": f"{name}: output = sum over hidden units i of m_i(x) v_i, plus b_out"}])
               for name in names]
    fig.update_layout(
        height=440,
        title=dict(text=buttons[0]["args"][1]["title.text"], x=0.0, xref="paper", xanchor="left", y=0.97, yanchor="top"),
        margin=dict(t=100),
        xaxis_title="x",
        updatemenus=[dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=1.02, yanchor="bottom")],
        hovermode="closest",
    )
    return fig
