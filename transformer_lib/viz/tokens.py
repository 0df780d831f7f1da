"""Figures for tokens and next-token distributions.

Defined in chapter 1, *Tokens, embeddings and logits* (``book/01_tokens.ipynb``).

Both figures work in the static book, with no Python running:

* :func:`tokenization_explorer` draws each sentence as a row of coloured blocks, one per token,
  as wide as the characters it covers; a dropdown switches tokenizer (``Plotly.update``: one
  trace per tokenizer made visible, the title and the per-row token counts replaced); hovering a
  block shows its text and id.
* :func:`merges_explorer` shows BPE learning: a slider over the number of merges re-cuts a few
  sentences into tokens (top) and moves a marker along the curve of tokens per character against
  vocabulary size (bottom), beside the character tokenizer and GPT-2 (one trace per step made
  visible by the step).
* :func:`temperature_explorer` draws ``softmax(logits / T)`` as bars; a slider picks ``T`` from
  precomputed steps (one bar trace per step, made visible by the step) and retitles the figure
  with the top token and the entropy; two buttons set a linear or log probability axis.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import plotly.graph_objects as go
import torch
from torch import Tensor

# light, distinct colours: neighbouring tokens always differ
PALETTE = ("#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#fb9a99", "#ffff99", "#8dd3c7", "#d9d9d9")

VISIBLE_SPACE = {" ": "␣", "\n": "↵", "\t": "⇥"}


def show_whitespace(piece: str) -> str:
    """``piece`` with spaces, newlines and tabs drawn as visible symbols (␣ ↵ ⇥)."""
    return "".join(VISIBLE_SPACE.get(c, c) for c in piece)


def token_pieces(tokenizer, text: str) -> list[tuple[str, int]]:
    """``(piece, id)`` for each token of ``text``: the text a token stands for, and its id.

    Works for a tiktoken ``Encoding`` (GPT-2's BPE) and for a
    :class:`~transformer_lib.data.tokenizers.CharTokenizer`. A byte-level BPE token can be part
    of a multi-byte character (an emoji is several tokens); such pieces are shown as ``\\xNN``.
    """
    ids = tokenizer.encode(text)
    if hasattr(tokenizer, "decode_single_token_bytes"):  # tiktoken
        return [(tokenizer.decode_single_token_bytes(i).decode("utf-8", errors="backslashreplace"), i) for i in ids]
    return [(tokenizer.decode([i]), i) for i in ids]


def _token_blocks(rows: Sequence[Sequence[tuple[str, int]]], new: range = range(0)) -> dict:
    """Bar-trace arguments for rows of ``(piece, id)``: one block per token, as wide as its text;
    tokens whose id is in ``new`` get a dark outline."""
    xs, bases, ys, texts, hovers, colours, outlines = [], [], [], [], [], [], []
    for row, pieces in enumerate(rows):
        start = 0
        for j, (piece, token_id) in enumerate(pieces):
            width = max(len(piece), 1)
            xs.append(width)
            bases.append(start)
            ys.append(row)
            texts.append(show_whitespace(piece))
            hovers.append(f"{piece!r}<br>id {token_id}<br>token {j + 1} of {len(pieces)}<br>"
                          f"characters {start}–{start + width - 1}")
            colours.append(PALETTE[j % len(PALETTE)])
            outlines.append("#222" if token_id in new else "white")
            start += width
    return dict(x=xs, base=bases, y=ys, text=texts, hovertext=hovers, hoverinfo="text", orientation="h",
                textposition="inside", insidetextanchor="middle",
                textfont=dict(size=12, family="monospace"), width=0.8, showlegend=False, cliponaxis=False,
                marker=dict(color=colours, line=dict(color=outlines, width=[2.5 if c != "white" else 1.5
                                                                              for c in outlines])))


def tokenization_explorer(
    sentences: Sequence[str],
    tokenizers: dict[str, Callable[[str], list[tuple[str, int]]]],
    height_per_row: int = 70,
) -> go.Figure:
    """Each sentence as a row of token blocks; a dropdown chooses the tokenizer.

    Args:
        sentences: the texts, one row each (top to bottom).
        tokenizers: name -> function ``text -> [(piece, id), ...]`` (e.g. ``lambda s: token_pieces(enc, s)``).
            The first is shown first.
        height_per_row: pixels per sentence.

    A block spans the characters its token covers (x axis: character position), so the views of
    one sentence line up and merged characters are visible as wider blocks. Trace ``k`` holds
    every block of tokenizer ``k``; button ``k`` makes only it visible.
    """
    names = list(tokenizers)
    if not names or not sentences:
        raise ValueError("tokenization_explorer needs at least one sentence and one tokenizer")
    fig = go.Figure()
    titles, ticktexts = [], []
    for k, name in enumerate(names):
        rows = [tokenizers[name](sentence) for sentence in sentences]
        counts = [(len(pieces), len(sentence)) for pieces, sentence in zip(rows, sentences)]
        fig.add_trace(go.Bar(**_token_blocks(rows), name=name, visible=k == 0))
        n_tokens, n_chars = sum(c[0] for c in counts), sum(c[1] for c in counts)
        titles.append(f"{name}: {n_tokens} tokens for {n_chars} characters "
                      f"({n_chars / n_tokens:.2f} characters per token)")
        ticktexts.append([f"{n} tokens" for n, _ in counts])
    buttons = [
        dict(label=name, method="update",
             args=[{"visible": [j == k for j in range(len(names))]},
                   {"title.text": titles[k], "yaxis.ticktext": ticktexts[k]}])
        for k, name in enumerate(names)
    ]
    longest = max(len(s) for s in sentences)
    fig.update_layout(
        title=dict(text=titles[0], x=0.0, xanchor="left", y=0.97),
        updatemenus=[dict(buttons=buttons, direction="down", x=1.0, xanchor="right", y=1.0, yanchor="bottom",
                          showactive=True)],
        xaxis=dict(title="character position", range=[-0.5, longest + 0.5], showgrid=False, zeroline=False),
        yaxis=dict(tickmode="array", tickvals=list(range(len(sentences))), ticktext=ticktexts[0],
                   autorange="reversed", showgrid=False),
        bargap=0.2, height=130 + height_per_row * len(sentences), margin=dict(l=80, r=20, t=90, b=50),
        plot_bgcolor="white", uniformtext=dict(minsize=8, mode="show"),
    )
    return fig


def merges_explorer(
    segmentations: dict[int, Sequence[Sequence[tuple[str, int]]]],
    tokens_per_char: dict[int, float],
    references: dict[str, tuple[int, float]],
    active: int | None = None,
    row_names: Sequence[str] | None = None,
    captions: dict[int, str] | None = None,
) -> go.Figure:
    """BPE's merges one slider step at a time: the sentences re-cut, and what the vocabulary buys.

    Args:
        segmentations: number of merges -> for each sentence its tokens ``[(piece, id), ...]``
            (:func:`token_pieces` of a tokenizer with that many merges).
        tokens_per_char: number of merges -> tokens per character of a held-out text.
        references: name -> ``(vocabulary size, tokens per character)``, drawn as labelled points.
        active: the number of merges shown first (default: the largest).
        row_names: a label for each sentence, shown with its token count.
        captions: number of merges -> a line under the title (e.g. the merges new at that step).

    Tokens made by the merges since the previous step are outlined. Vocabulary size is
    ``256 + merges`` (the bytes and one token per merge), on a log axis so that GPT-2's 50,257 fits
    beside a few hundred. Traces: one bar trace per step, the curve, one
    marker per step, then the references; step ``k`` shows bar trace ``k`` and marker ``k``.
    """
    from plotly.subplots import make_subplots

    steps = sorted(segmentations)
    if not steps or set(steps) != set(tokens_per_char):
        raise ValueError("segmentations and tokens_per_char need the same, non-empty, numbers of merges")
    active = steps[-1] if active is None else active
    if active not in steps:
        raise ValueError(f"active={active} is not one of the steps {steps}")
    n_rows = len(segmentations[steps[0]])
    fig = make_subplots(rows=2, cols=1, row_heights=[0.5, 0.5], vertical_spacing=0.14, subplot_titles=(
        "the sentences cut into tokens (outlined: made by the merges of this step)",
        "held-out text: tokens per character (red: this step; lower: shorter sequences)"))
    names = list(row_names) if row_names is not None else [""] * n_rows
    titles, ticktexts = [], []
    for k, m in enumerate(steps):
        rows = segmentations[m]
        new = range(256 + (steps[k - 1] if k else m), 256 + m)
        fig.add_trace(go.Bar(**_token_blocks(rows, new), textangle=0, visible=m == active, name=f"{m} merges"),
                      row=1, col=1)
        n_tokens, n_chars = sum(len(r) for r in rows), sum(len("".join(p for p, _ in r)) for r in rows)
        caption = (captions or {}).get(m, "")
        titles.append(f"After {m} merges (vocabulary {256 + m:,}): {n_tokens} tokens for these {n_chars} "
                      f"characters; {tokens_per_char[m]:.3f} tokens per character on held-out text"
                      + (f"<br><sup>{caption}</sup>" if caption else ""))
        ticktexts.append([f"{name}: {len(r)} tokens" if name else f"{len(r)} tokens"
                          for name, r in zip(names, rows)])
    sizes = [256 + m for m in steps]
    fig.add_trace(go.Scatter(x=sizes, y=[tokens_per_char[m] for m in steps], mode="lines+markers",
                             line=dict(color="#1f77b4"), name="this BPE", showlegend=False,
                             hovertemplate="%{x} tokens in the vocabulary: %{y:.3f} tokens per character"
                                           "<extra></extra>"), row=2, col=1)
    for m in steps:
        fig.add_trace(go.Scatter(x=[256 + m], y=[tokens_per_char[m]], mode="markers", visible=m == active,
                                 marker=dict(size=14, color="#d62728"), showlegend=False, hoverinfo="skip"),
                      row=2, col=1)
    for name, (size, value) in references.items():
        side = "top right" if size < min(sizes) else "top left" if size > max(sizes) else "top center"
        fig.add_trace(go.Scatter(x=[size], y=[value], mode="markers+text", text=[name], textposition=side,
                                 marker=dict(size=10, color="gray", symbol="diamond"), showlegend=False,
                                 hovertemplate=f"{name}: vocabulary {size:,}, %{{y:.3f}} tokens per character"
                                               "<extra></extra>"), row=2, col=1)
    n = len(steps)
    visible = [[j == k for j in range(n)] + [True] + [j == k for j in range(n)] + [True] * len(references)
               for k in range(n)]
    slider = [dict(label=str(m), method="update",
                   args=[{"visible": visible[k]}, {"title.text": titles[k], "yaxis.ticktext": ticktexts[k]}])
              for k, m in enumerate(steps)]
    start = steps.index(active)
    values = list(tokens_per_char.values()) + [v for _, v in references.values()]
    longest = max(len("".join(p for p, _ in r)) for m in steps for r in segmentations[m])
    fig.update_layout(
        title=dict(text=titles[start], x=0.0, xanchor="left"),
        sliders=[dict(active=start, steps=slider, currentvalue=dict(prefix="merges: "), pad=dict(t=50))],
        height=260 + 60 * n_rows + 300, margin=dict(l=80, r=20, t=90, b=40), plot_bgcolor="white",
        bargap=0.2, uniformtext=dict(minsize=8, mode="hide"),  # a label too small to read: hover instead
    )
    fig.update_xaxes(range=[-0.5, longest + 0.5], showgrid=False, zeroline=False, showticklabels=False, row=1, col=1)
    fig.update_yaxes(tickmode="array", tickvals=list(range(n_rows)), ticktext=ticktexts[start],
                     autorange="reversed", showgrid=False, row=1, col=1)
    all_sizes = sizes + [size for size, _ in references.values()]
    ticks = sorted({*all_sizes[:1], sizes[-1], *[s for s, _ in references.values()], 10_000})
    fig.update_xaxes(type="log", title="vocabulary size (log scale)", gridcolor="#eee",
                     tickvals=ticks, ticktext=[f"{t:,}" for t in ticks],
                     range=[math.log10(min(all_sizes)) - 0.15, math.log10(max(all_sizes)) + 0.15], row=2, col=1)
    fig.update_yaxes(title="tokens per character", gridcolor="#eee",
                     range=[0, max(values) * 1.2], row=2, col=1)
    return fig


def entropy(probs: Tensor) -> float:
    """Entropy in nats, ``-sum p log p`` (terms with ``p = 0`` count 0)."""
    p = probs.double()
    return float(-(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum())


def temperature_explorer(
    logits: Tensor,
    labels: Sequence[str],
    temperatures: Sequence[float] = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0),
    active: float = 1.0,
    context: str = "",
) -> go.Figure:
    """Bars of ``softmax(logits / T)``, one slider step per temperature ``T``.

    Args:
        logits: ``(vocab,)`` scores of the next token.
        labels: ``vocab`` names for the bars (drawn with visible whitespace).
        temperatures: the slider's steps, each > 0.
        active: the temperature shown first (one of ``temperatures``).
        context: what came before, for the title.

    Bars are in order of decreasing logit, so the order is the same at every temperature; a
    dashed line marks the uniform distribution ``1 / vocab``. Trace ``k`` is temperature ``k``.
    Two buttons switch the probability axis between linear and log scale (the log scale shows the
    tail that a low temperature crushes).
    """
    if logits.dim() != 1 or len(labels) != logits.shape[0]:
        raise ValueError(f"logits must be (vocab,) with one label each, got {tuple(logits.shape)} and {len(labels)} labels")
    if any(t <= 0 for t in temperatures) or active not in temperatures:
        raise ValueError(f"temperatures must be > 0 and include active={active}")
    order = torch.argsort(logits, descending=True)
    shown = [show_whitespace(labels[i]) for i in order]
    vocab = logits.shape[0]
    fig = go.Figure()
    titles = []
    for k, t in enumerate(temperatures):
        p = torch.softmax(logits.double() / t, dim=-1)[order]
        fig.add_trace(go.Bar(
            x=list(range(vocab)), y=p.tolist(), visible=t == active, name=f"T = {t:g}", showlegend=False,
            customdata=[[shown[j], float(logits[order[j]])] for j in range(vocab)],
            hovertemplate="%{customdata[0]}<br>logit %{customdata[1]:.2f}<br>p = %{y:.4f}<extra></extra>",
            marker_color="#1f77b4",
        ))
        titles.append(f"{context}T = {t:g}: top token {shown[0]!r} p = {float(p[0]):.3f}, "
                      f"entropy {entropy(p):.2f} nats (uniform: ln {vocab} = {math.log(vocab):.2f})")
    steps = [
        dict(label=f"{t:g}", method="update",
             args=[{"visible": [j == k for j in range(len(temperatures))]}, {"title.text": titles[k]}])
        for k, t in enumerate(temperatures)
    ]
    start = list(temperatures).index(active)
    smallest = min(float(torch.softmax(logits.double() / t, dim=-1).min()) for t in temperatures)
    log_floor = max(math.log10(max(smallest, 1e-300)) - 0.2, -12.0)  # log axis: down to the smallest bar (at most 1e-12)
    fig.update_layout(
        title=dict(text=titles[start], x=0.0, xanchor="left"),
        sliders=[dict(active=start, steps=steps, currentvalue=dict(prefix="temperature T = "), pad=dict(t=60))],
        xaxis=dict(tickmode="array", tickvals=list(range(vocab)), ticktext=shown, tickangle=0, tickfont=dict(size=10),
                   title="next token (sorted by logit)"),
        yaxis=dict(range=[0, 1], title="probability", exponentformat="power"),
        updatemenus=[dict(type="buttons", direction="right", x=1.0, xanchor="right", y=1.0, yanchor="bottom",
                          showactive=True, active=0, buttons=[
                              dict(label="linear", method="relayout", args=[{"yaxis.type": "linear", "yaxis.range": [0, 1]}]),
                              dict(label="log scale", method="relayout",
                                   args=[{"yaxis.type": "log", "yaxis.range": [log_floor, 0]}]),
                          ])],
        shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=1 / vocab, y1=1 / vocab,
                     line=dict(dash="dash", color="gray", width=1))],
        height=480, margin=dict(t=60, b=40), bargap=0.15,
    )
    return fig
