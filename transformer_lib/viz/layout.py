"""One header layout for every figure of the book, applied where figures are displayed.

Chapters build figures with titles, dropdowns, button rows and legends placed by hand, and at
some widths those landed on top of each other. :func:`tidy` stacks the parts above the plot,
top to bottom, each in a row of its own:

1. the title, left-aligned and wrapped to lines that fit the figure's width;
2. the menus (dropdowns, button rows) that sat above the plot;
3. a horizontal legend that sat above the plot;
4. the subplot titles of the top row.

It also makes every control set the title as ``{"title.text": ...}``: a bare ``title`` string
works in plotly.js 2 (Colab) but plotly.js 3 and later drop it, and with it the figure's title.

A figure fills the width of its column. ``tidy(fig)`` lays it out for a column at least ``WIDE``
pixels wide; ``tidy(fig, width=NARROW)`` for a phone's, where it also rearranges what would not
fit: each menu in a row of its own, a row of buttons that is too wide as a dropdown, and the
legend as rows above the plot instead of a column beside it. The book's pages carry both layouts
and switch between them with the column's width (:func:`narrow_patch`, ``viz.BookRenderer``).
"""

from __future__ import annotations

import re

WIDE = 600          # px: from this width of its column on, a figure has its wide layout
NARROW = 340        # px: the width the phone layout is made for (a 390-px screen's column)
MIN_WIDTH = WIDE    # the narrowest figure the wide layout is made for
TITLE_SIZE = 15     # px
TITLE_CHARS = 70    # characters of a title line that fit WIDE at TITLE_SIZE
LINE = 20           # px per title line
BASELINE = 14       # px from the top of a title's first line to its baseline
MENU_ROW = 32       # px: a dropdown's header or a row of buttons
LEGEND_ROW = 24     # px: a one-row horizontal legend
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


def title_chars(width: int) -> int:
    """Characters of a title line that fit a figure ``width`` pixels wide (``TITLE_CHARS`` at ``WIDE``)."""
    return max(20, TITLE_CHARS * width // WIDE)


def _fix_args(args: list, chars: int = TITLE_CHARS) -> int:
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
            update["title.text"] = wrap(update["title.text"], chars)
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


def _fit_subplot_titles(layout: dict, figure_width: int = WIDE) -> int:
    """Subplot titles in a smaller font, wrapped to the width of their plot in a figure
    ``figure_width`` wide; the most lines among the top row's (0 when there are none)."""
    domains = [ax.get("domain", [0, 1]) for k, ax in layout.items() if re.fullmatch(r"xaxis\d*", k)]
    top = _top_subplot_titles(layout)
    most = 0
    for a in [a for a in layout.get("annotations") or [] if _is_subplot_title(a)]:
        width = min((d[1] - d[0] for d in domains if abs((d[0] + d[1]) / 2 - a.get("x", 0.5)) < 1e-3), default=1.0)
        a["font"] = (a.get("font") or {}) | {"size": SUBTITLE_SIZE}
        a["text"] = wrap(a.get("text") or "", max(12, int(width * (figure_width - 100) / (0.55 * a["font"]["size"]))))
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


LABEL_CHAR = 7      # px per character of a menu label or a legend entry (12-px font)
LEGEND_ITEM = 44    # px of a legend entry besides its text: the line or marker sample and the gap
MENU_PAD = 30       # px of a dropdown's header besides its label (the arrow and the padding)


def _legend_names(fig: dict) -> list[str]:
    """The entries a legend shows: one per trace that has a name and shows in the legend (one
    per legend group)."""
    seen, names = set(), []
    for t in fig.get("data") or []:
        if t.get("showlegend") is False or not t.get("name"):
            continue
        if t.get("showlegend") is None and len(fig.get("data") or []) == 1 and t.get("type") != "pie":
            continue  # plotly draws no legend for a single trace unless asked to
        key = t.get("legendgroup") or t["name"]
        if key not in seen:
            seen.add(key)
            names.append(re.sub(r"<[^>]*>", "", str(t["name"])))
    return names


def _legend_rows(names: list[str], width: int) -> int:
    """Rows a horizontal legend of these entries fills in a figure ``width`` pixels wide."""
    rows, used = 1, 0
    for name in names:
        item = LEGEND_ITEM + LABEL_CHAR * len(name)
        if used and used + item > width - 20:
            rows, used = rows + 1, 0
        used += item
    return rows


def _menu_width(menu: dict) -> int:
    labels = [str(b.get("label", "")) for b in menu.get("buttons") or []]
    if menu.get("type") == "buttons":
        horizontal = menu.get("direction", "left") in ("left", "right")
        sizes = [LABEL_CHAR * len(label) + 20 for label in labels]  # the label and the button's padding
        return sum(sizes) if horizontal else max(sizes, default=0)
    return LABEL_CHAR * max(map(len, labels), default=0) + MENU_PAD


def _rearrange(fig: dict, width: int) -> None:
    """What does not fit a narrow figure, rearranged: narrower side margins, a row of buttons wider
    than the figure becomes a dropdown, and a legend beside or below the plot becomes a horizontal
    legend above it."""
    layout = fig["layout"]
    margin = layout.setdefault("margin", {})  # plotly's 80-px sides would leave little for the plot;
    margin.update(l=min(margin.get("l", 80), 50), r=min(margin.get("r", 80), 20))  # axes grow them as needed
    left = margin["l"]  # a menu at x = 0 starts where the plot does
    for menu in layout.get("updatemenus") or []:
        if menu.get("type") == "buttons" and _menu_width(menu) > width - left - 10:
            menu.update(type="dropdown", direction="down")
    if layout.get("showlegend") is False or not _legend_names(fig):
        return
    legend = layout.setdefault("legend", {})
    if not (legend.get("orientation") == "h" and _above_plot(legend, 1.0)):
        legend.update(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom")


def tidy(fig: dict, width: int = WIDE) -> dict:
    """Stack ``fig``'s title, top menus, top legend and top subplot titles for a figure ``width`` pixels
    wide (narrower than ``WIDE``: also rearranged to fit, see the module's docstring); returns ``fig``
    (changed in place)."""
    layout = fig.setdefault("layout", {})
    narrow = width < WIDE
    if narrow:
        _rearrange(fig, width)
    chars = title_chars(width)
    _side_titles(fig)
    controls = [b for m in layout.get("updatemenus") or [] for b in m.get("buttons") or []]
    controls += [s for sl in layout.get("sliders") or [] for s in sl.get("steps") or []]
    lines = max([_fix_args(c.get("args"), chars) for c in controls]
                + [_fix_args(c.get("args2"), chars) for c in controls] + [0])

    title = layout.get("title")
    text = wrap(_title_text(title), chars)
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
    # menu rows: side by side as placed; on a phone each in a row of its own, from the left
    menu_rows = [[m] for m in menus] if narrow else [menus]
    menu_tops = []
    for group in menu_rows if menus else []:
        menu_tops += [row] * len(group)
        row += MENU_ROW + GAP
    legend = layout.get("legend") or {}
    legend_top = row
    top_legend = legend.get("orientation") == "h" and _above_plot(legend, 1.0)
    if top_legend:
        legend_rows = _legend_rows(_legend_names(fig), width) if narrow else 1
        row += LEGEND_ROW * legend_rows + GAP
    subtitle_lines = _fit_subplot_titles(layout, width)
    if subtitle_lines:
        row += SUBTITLE_ROW + (subtitle_lines - 1) * SUBTITLE_LINE
        _lower_colorbars(fig)
    if not (lines or menus or top_legend or subtitle_lines):
        return fig  # nothing stacked above the plot: the figure's own margin stays

    margin = layout.setdefault("margin", {})
    margin["t"] = max(row, margin.get("t", 0) if not (menus or top_legend) else 0, 30)
    plot = height - margin["t"] - margin.get("b", 80)
    for menu, top in zip([m for group in menu_rows for m in group], menu_tops):
        menu.update(y=1 + (margin["t"] - top) / plot, yanchor="top",
                    pad={**(menu.get("pad") or {}), "t": 0, "b": 0})
        if len(menu_rows) > 1:  # stacked: each from the left edge
            menu.update(x=0, xanchor="left")
    if top_legend:
        legend.update(y=1 + (margin["t"] - legend_top) / plot, yanchor="top", x=0, xanchor="left")
    return fig


# the layout keys that tidy(fig, width=NARROW) may change
_NARROW_KEYS = ("title", "margin", "updatemenus", "legend", "annotations", "coloraxis")


def narrow_patch(fig: dict) -> tuple[dict, dict]:
    """``(wide, narrow)``: the layout keys in which ``fig``'s narrow layout differs from its wide one,
    each with its value in either layout (None where a layout has none), for ``Plotly.relayout``.
    Both are empty when one layout fits every width."""
    import copy

    wide = tidy(copy.deepcopy(fig))["layout"]
    narrow = tidy(copy.deepcopy(fig), width=NARROW)["layout"]
    keys = [k for k in _NARROW_KEYS if wide.get(k) != narrow.get(k)]
    return {k: wide.get(k) for k in keys}, {k: narrow.get(k) for k in keys}
