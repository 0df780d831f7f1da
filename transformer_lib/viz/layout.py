"""One header layout for every figure of the book, applied where figures are displayed.

Chapters build figures with titles, dropdowns, button rows and legends placed by hand, and at
some widths those landed on top of each other. :func:`tidy` stacks the parts above the plot,
top to bottom, each in a row of its own:

1. the title, left-aligned and wrapped to lines that fit the narrowest figure (``MIN_WIDTH``);
2. the menus (dropdowns, button rows) that sat above the plot;
3. a horizontal legend that sat above the plot, in as many rows as its entries take at ``MIN_WIDTH``;
4. the subplot titles of the top row.

It also makes every control set the title as ``{"title.text": ...}``: a bare ``title`` string
works in plotly.js 2 (Colab) but plotly.js 3 and later drop it, and with it the figure's title.
This is the layout for a column at least ``MIN_WIDTH`` wide. In a narrower one (a phone) the
published book lays each figure out again for the width it has, in the browser, where the parts'
drawn sizes can be measured (``book/_ext/static/figure-fit.js``).
"""

from __future__ import annotations

import re

MIN_WIDTH = 600     # px: the narrowest column this layout is for (narrower: figure-fit.js)
TITLE_SIZE = 15     # px
TITLE_CHARS = 70    # characters of a title line that fit MIN_WIDTH at TITLE_SIZE
LINE = 20           # px per title line
BASELINE = 14       # px from the top of a title's first line to its baseline
MENU_ROW = 32       # px: a dropdown's header or a row of buttons
LEGEND_ROW = 24     # px: a one-row horizontal legend
LEGEND_LINE = 29    # px per further row of a horizontal legend (measured in Chromium)
LEGEND_ITEM = 43    # px: a horizontal legend's entry beside its text: symbol and gaps (measured)
LEGEND_CHAR = 6.5   # px: a character of a 12-px legend entry, generous (capitals are wider)
SUBTITLE_ROW = 22   # px: the subplot titles above the top row of plots
SUBTITLE_SIZE = 13  # px
SUBTITLE_LINE = 17  # px per further line of a subplot title
GAP = 8             # px between rows
DEFAULT_HEIGHT = 450  # plotly's height when a figure sets none


def wrap(text: str, width: int = TITLE_CHARS) -> str:
    """Break ``text`` with ``<br>`` at spaces so that no line is longer than ``width`` characters.

    Existing ``<br>`` stay; spaces inside HTML tags (``<span style=...>``) never break; tags
    don't count towards the width.
    """
    out = []
    for k, line in enumerate(re.split(r"<br\s*/?>", text)):
        sub = re.fullmatch(r"\s*<su[pb]>((?:(?!<su[pb]>).)*)</su[pb]>\s*", line)
        if k and sub:  # a subtitle line: 12 px, not a superscript's 70 % (about 10 px)
            out += [f"<span style='font-size:12px'>{part}</span>"
                    for part in wrap(sub.group(1), width * 5 // 4).split("<br>")]
            continue
        protected = re.sub(r"<[^>]*>", lambda m: m.group(0).replace(" ", "\0"), line)
        words, current, shown = protected.split(" "), "", 0
        for word in words:
            size = len(re.sub(r"<[^>]*>", "", word.replace("\0", " ")))
            if current and shown + 1 + size > width:
                out.append(current)
                current, shown = word, size
            else:
                current, shown = (f"{current} {word}", shown + 1 + size) if current else (word, size)
        out.append(current)
    return "<br>".join(line.replace("\0", " ") for line in out)


def _lines(text: str) -> int:
    return len(re.split(r"<br\s*/?>", text)) if text else 0


def _title_text(title) -> str:
    if isinstance(title, str):
        return title
    return (title or {}).get("text") or ""


def _fix_args(args: list) -> int:
    """Title updates in a control's args as wrapped ``title.text``; the most lines among them."""
    most = 0
    for update in args or []:
        if not isinstance(update, dict):
            continue
        if "title" in update:  # plotly.js >= 3 ignores a bare string here
            title = update.pop("title")
            if isinstance(title, dict):
                update.update({f"title.{k}": v for k, v in title.items()})
            else:
                update["title.text"] = title
        if isinstance(update.get("title.text"), str):
            update["title.text"] = wrap(update["title.text"])
            most = max(most, _lines(update["title.text"]))
    return most


def _above_plot(item: dict, default_y: float) -> bool:
    y = item.get("y", default_y)
    return y > 1.0 or (y >= 1.0 and item.get("yanchor", "top") == "bottom")


def _is_subplot_title(a: dict) -> bool:
    """make_subplots' titles: paper annotations without an arrow, anchored at their bottom."""
    return (a.get("xref") == "paper" and a.get("yref") == "paper" and a.get("yanchor") == "bottom"
            and a.get("showarrow") is False and isinstance(a.get("text"), str))


def _top_subplot_titles(layout: dict) -> list[dict]:
    """Subplot titles above the top row of plots."""
    tops = [ax.get("domain", [0, 1])[1] for k, ax in layout.items() if re.fullmatch(r"yaxis\d*", k)]
    top = max(tops, default=1.0)
    return [a for a in layout.get("annotations") or []
            if _is_subplot_title(a) and abs(a.get("y", 0) - top) < 1e-6 and top > 0.999]


def _fit_subplot_titles(layout: dict) -> int:
    """Subplot titles in a smaller font, wrapped to the width of their plot at ``MIN_WIDTH``;
    the most lines among the top row's (0 when there are none)."""
    domains = [ax.get("domain", [0, 1]) for k, ax in layout.items() if re.fullmatch(r"xaxis\d*", k)]
    top = _top_subplot_titles(layout)
    most = 0
    for a in [a for a in layout.get("annotations") or [] if _is_subplot_title(a)]:
        width = min((d[1] - d[0] for d in domains if abs((d[0] + d[1]) / 2 - a.get("x", 0.5)) < 1e-3), default=1.0)
        a["font"] = (a.get("font") or {}) | {"size": SUBTITLE_SIZE}
        a["text"] = wrap(a.get("text") or "", max(12, int(width * (MIN_WIDTH - 100) / (0.55 * a["font"]["size"]))))
        if any(a is t for t in top):
            most = max(most, _lines(a["text"]))
    return most


def _lower_colorbars(fig: dict) -> None:
    """Colour bars that would reach up to the subplot titles end a little below the top of the plots."""
    for bar in _colorbars(fig):
        if "y" not in bar and "len" not in bar:
            bar.update(y=0, yanchor="bottom", len=0.9)


def _colorbars(fig: dict) -> list[dict]:
    layout = fig["layout"]
    bars = [v["colorbar"] for k, v in layout.items() if k.startswith("coloraxis") and isinstance(v, dict)
            and isinstance(v.get("colorbar"), dict)]
    return bars + [t["colorbar"] for t in fig.get("data") or [] if isinstance(t.get("colorbar"), dict)]


def _side_titles(fig: dict) -> None:
    """A colour bar's title along its right side: above the bar it ran into the top tick label."""
    for bar in _colorbars(fig):
        title = bar.get("title")
        if isinstance(title, str):
            bar["title"] = {"text": title, "side": "right"}
        elif isinstance(title, dict) and title.get("text") and "side" not in title:
            title["side"] = "right"


def legend_rows(fig: dict) -> int:
    """The rows a horizontal legend takes in a figure ``MIN_WIDTH`` wide: plotly.js wraps it at the plot's
    width. Counted over every name the figure's traces carry (a menu may show any of them), so that
    the widest legend a menu shows fits."""
    layout = fig.get("layout") or {}
    names = list(dict.fromkeys(
        t.get("name") for t in fig.get("data") or []
        if t.get("name") and t.get("showlegend") is not False
        and t.get("type", "scatter") not in ("heatmap", "contour", "surface", "table")))
    size = ((layout.get("legend") or {}).get("font") or {}).get("size") or 12
    margin = layout.get("margin") or {}
    room = MIN_WIDTH - margin.get("l", 80) - margin.get("r", 80)  # plotly's default margins: 80 px
    rows, x = 1, 0.0
    for name in names:
        width = LEGEND_ITEM + LEGEND_CHAR * size / 12 * len(re.sub(r"<[^>]*>", "", str(name)))
        if x and x + width > room:
            rows, x = rows + 1, width
        else:
            x += width
    return rows


def tidy(fig: dict) -> dict:
    """Stack ``fig``'s title, top menus, top legend and top subplot titles; returns ``fig`` (changed in place)."""
    layout = fig.setdefault("layout", {})
    _side_titles(fig)
    controls = [b for m in layout.get("updatemenus") or [] for b in m.get("buttons") or []]
    controls += [s for sl in layout.get("sliders") or [] for s in sl.get("steps") or []]
    lines = max([_fix_args(c.get("args")) for c in controls] + [_fix_args(c.get("args2")) for c in controls] + [0])

    title = layout.get("title")
    text = wrap(_title_text(title))
    lines = max(lines, _lines(text))
    height = layout.get("height") or DEFAULT_HEIGHT
    row = GAP
    if lines:
        font = {"size": TITLE_SIZE} | ((title or {}).get("font") or {} if isinstance(title, dict) else {})
        layout["title"] = {**(title if isinstance(title, dict) else {}), "text": text, "font": font,
                           "x": 0.01, "xref": "container", "xanchor": "left",
                           # plotly.js (2 and 4) puts the first line's baseline at y for any yanchor
                           # once a title has several lines; "bottom" does the same for one line
                           "y": 1 - (row + BASELINE) / height, "yref": "container",
                           "yanchor": "bottom"}
        row += lines * LINE + GAP

    menus = [m for m in layout.get("updatemenus") or [] if _above_plot(m, 1.0)]
    menu_top = row
    if menus:
        row += MENU_ROW + GAP
    legend = layout.get("legend") or {}
    legend_top = row
    top_legend = legend.get("orientation") == "h" and _above_plot(legend, 1.0)
    if top_legend:
        row += LEGEND_ROW + (legend_rows(fig) - 1) * LEGEND_LINE + GAP
    subtitle_lines = _fit_subplot_titles(layout)
    if subtitle_lines:
        row += SUBTITLE_ROW + (subtitle_lines - 1) * SUBTITLE_LINE
        _lower_colorbars(fig)
    if not (lines or menus or top_legend or subtitle_lines):
        return fig  # nothing stacked above the plot: the figure's own margin stays

    margin = layout.setdefault("margin", {})
    margin["t"] = max(row, margin.get("t", 0) if not (menus or top_legend) else 0, 30)
    plot = height - margin["t"] - margin.get("b", 80)
    for menu in menus:
        menu.update(y=1 + (margin["t"] - menu_top) / plot, yanchor="top",
                    pad={**(menu.get("pad") or {}), "t": 0, "b": 0})
    if top_legend:
        legend.update(y=1 + (margin["t"] - legend_top) / plot, yanchor="top", x=0, xanchor="left")
    return fig
