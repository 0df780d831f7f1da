"""Figures for chapter 4, *Normalization and residuals*."""

from __future__ import annotations

import plotly.graph_objects as go
import torch
from plotly.colors import qualitative
from torch import Tensor


def _step_histogram(values: Tensor, lo: float, hi: float, n_bins: int) -> tuple[list[float], list[float]]:
    """Bin centres and densities (area 1) of ``values`` on ``n_bins`` equal bins over ``[lo, hi]``."""
    counts = torch.histc(values.float(), bins=n_bins, min=lo, max=hi)
    width = (hi - lo) / n_bins
    centres = lo + width * (torch.arange(n_bins) + 0.5)
    return centres.tolist(), (counts / (counts.sum() * width)).tolist()


def token_histograms(
    views: dict[str, Tensor], token_labels: list[str], n_bins: int = 60, title: str = "Features of each token"
) -> go.Figure:
    """One histogram per token of its features, for several views of the same tokens, with a dropdown.

    Args:
        views: name -> ``(n_tokens, d)`` tensor, e.g. ``{"raw": x, "LayerNorm": ln(x), "RMSNorm": rms(x)}``.
            The dropdown shows one view at a time; the first is shown first.
        token_labels: one legend label per token.

    Each view has its own bins (``n_bins`` over the range of its values) and x-axis range; each
    trace's legend entry gives that token's mean and standard deviation in that view, so switching
    views shows how the statistics change. The figure works without a kernel (plotly ``update``).
    """
    if not views:
        raise ValueError("views must name at least one (n_tokens, d) tensor")
    n_tokens = len(token_labels)
    for name, v in views.items():
        if v.dim() != 2 or v.shape[0] != n_tokens:
            raise ValueError(f"view {name!r} must have shape (n_tokens={n_tokens}, d), got {tuple(v.shape)}")
    colours = qualitative.Plotly
    fig = go.Figure()
    ranges = []
    for k, (name, v) in enumerate(views.items()):
        v = v.detach().float()
        lo, hi = v.min().item(), v.max().item()
        pad = 0.05 * (hi - lo) + 1e-3
        lo, hi = lo - pad, hi + pad
        ranges.append([lo, hi])
        for t, label in enumerate(token_labels):
            x, density = _step_histogram(v[t], lo, hi, n_bins)
            colour = colours[t % len(colours)]
            mean, std = v[t].mean().item(), v[t].std(correction=0).item()
            fig.add_trace(go.Scatter(
                x=x, y=density, mode="lines", line=dict(shape="hvh", color=colour, width=1.5),
                fill="tozeroy", opacity=0.6, visible=k == 0,
                name=f"{label}: mean {mean:+.2f}, std {std:.2f}",
                hovertemplate=f"{label}<br>value %{{x:.2f}}<br>density %{{y:.3f}}<extra>{name}</extra>",
            ))
    buttons = []
    for k, name in enumerate(views):
        visible = [k * n_tokens <= i < (k + 1) * n_tokens for i in range(len(fig.data))]
        buttons.append(dict(
            label=name, method="update",
            args=[{"visible": visible},
                  {"xaxis.range": ranges[k], "yaxis.autorange": True, "title.text": f"{title}: {name}"}],
        ))
    fig.update_layout(
        title=f"{title}: {next(iter(views))}",
        xaxis=dict(title="feature value", range=ranges[0]),
        yaxis=dict(title="density"),
        updatemenus=[dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=1.15, yanchor="top")],
        legend=dict(x=1.0, xanchor="right", y=1.0, bgcolor="rgba(255,255,255,0.7)"),
        margin=dict(t=90),
        height=420,
    )
    return fig
