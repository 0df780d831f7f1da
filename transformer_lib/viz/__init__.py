"""Figures for the book: plotly rendering that works everywhere, and showing library source.

Importing this module chooses how plotly figures are displayed:

* in **Colab**, plotly's ``colab`` renderer (plotly.js from its CDN; Colab is online);
* everywhere else, the ``book`` renderer below, whose output carries two formats: the plotly
  JSON that JupyterLab and VS Code render natively, and an HTML ``<div>`` + ``<script>`` *without*
  plotly.js, which is what the published book shows. The book loads plotly.js once per site
  from ``_static/plotly.min.js`` (``book/_ext/plotly_js.py``), so pages stay small and render
  with no network.
"""

from __future__ import annotations

import copy
import html
import inspect
import sys
from pathlib import Path

import plotly.io as pio
from plotly.io._base_renderers import ColabRenderer, MimetypeRenderer

from .layout import tidy

PLOTLY_MIME = "application/vnd.plotly.v1+json"


class BookRenderer(MimetypeRenderer):
    """Plotly JSON for live frontends plus kernel-free HTML for the static book."""

    def to_mimebundle(self, fig_dict):
        fig_dict = tidy(copy.deepcopy(fig_dict))
        # no toolbar on the page: it covered titles; drag zooms, a double click resets
        html = pio.to_html(fig_dict, full_html=False, include_plotlyjs=False, validate=False,
                           config={"responsive": True, "displayModeBar": False})
        return {PLOTLY_MIME: {"data": fig_dict.get("data", []), "layout": fig_dict.get("layout", {})}, "text/html": html}


def in_colab() -> bool:
    return "google.colab" in sys.modules


class TidyColabRenderer(ColabRenderer):
    """Colab's renderer, with the book's header layout (:func:`tidy`)."""

    def to_mimebundle(self, fig_dict):
        return super().to_mimebundle(tidy(copy.deepcopy(fig_dict)))


def setup_plotly() -> str:
    """Register the ``book`` renderer and make the right one the default. Returns its name."""
    pio.renderers["book"] = BookRenderer()
    pio.renderers["book_colab"] = TidyColabRenderer()
    pio.renderers.default = "book_colab" if in_colab() else "book"
    return pio.renderers.default


FOLD_LINES = 30  # a longer listing is folded: the prose stays readable, the code one click away


class SourceListing:
    """Library source as a notebook and the book show it: highlighted, headed by its file and
    lines, and folded (an HTML ``<details>``) when it is longer than ``FOLD_LINES``."""

    def __init__(self, code: str, where: str, start: int, name: str):
        self.code, self.where, self.start, self.name = code, where, start, name
        self.lines = code.count("\n") + 1

    @property
    def header(self) -> str:
        return f"# {self.where}, lines {self.start}-{self.start + self.lines - 1}"

    def __repr__(self) -> str:  # text/plain: a terminal or a plain front-end
        return f"{self.header}\n{self.code}"

    def _repr_html_(self) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        # colours scoped to the listing (IPython's Code would also restyle every <pre> on the page)
        formatter = HtmlFormatter(cssclass="highlight tfs-listing")
        style = "\n".join(r for r in formatter.get_style_defs(".tfs-listing").splitlines()
                          if r.startswith(".tfs-listing"))
        code = highlight(f"{self.header}\n{self.code}", PythonLexer(), formatter)
        listing = f"<style>{style}</style>\n{code}"
        if self.lines <= FOLD_LINES:
            return listing
        summary = (f"<code>{html.escape(self.name)}</code> in <code>{html.escape(self.where)}</code>: "
                   f"{self.lines} lines of library source (click to show)")
        return f'<details class="tfs-source"><summary>{summary}</summary>\n{listing}\n</details>'


def show_source(obj) -> SourceListing:
    """Display the library source of ``obj`` (a class or function), with where it lives.

    Chapters show the code they teach from the library itself, never a copy. Listings longer
    than ``FOLD_LINES`` lines are folded until the reader opens them.
    """
    import transformer_lib

    obj = inspect.unwrap(obj)  # a decorated function (e.g. @contextmanager): show the function itself
    lines, start = inspect.getsourcelines(obj)
    start = max(start, 1)  # a whole module reports line 0
    path = Path(inspect.getsourcefile(obj)).resolve()
    root = Path(transformer_lib.__file__).resolve().parent.parent
    where = path.relative_to(root) if path.is_relative_to(root) else path.name
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", str(where)))
    return SourceListing("".join(lines).rstrip("\n"), str(where), start, name)


setup_plotly()

from .widgets import interact  # noqa: E402  (live controls: chapters 5 and 7)
from .live import live_compare, live_panel  # noqa: E402  (the trained models in the reader's browser: chapters 7-10)
