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

import inspect
import sys
from pathlib import Path

import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer

PLOTLY_MIME = "application/vnd.plotly.v1+json"


class BookRenderer(MimetypeRenderer):
    """Plotly JSON for live frontends plus kernel-free HTML for the static book."""

    def to_mimebundle(self, fig_dict):
        html = pio.to_html(
            fig_dict, full_html=False, include_plotlyjs=False, validate=False, config={"responsive": True}
        )
        return {PLOTLY_MIME: {"data": fig_dict.get("data", []), "layout": fig_dict.get("layout", {})}, "text/html": html}


def in_colab() -> bool:
    return "google.colab" in sys.modules


def setup_plotly() -> str:
    """Register the ``book`` renderer and make the right one the default. Returns its name."""
    pio.renderers["book"] = BookRenderer()
    pio.renderers.default = "colab" if in_colab() else "book"
    return pio.renderers.default


def show_source(obj) -> "IPython.display.Code":  # noqa: F821
    """Display the library source of ``obj`` (a class or function), with where it lives.

    Chapters show the code they teach from the library itself, never a copy.
    """
    from IPython.display import Code

    import transformer_lib

    obj = inspect.unwrap(obj)  # a decorated function (e.g. @contextmanager): show the function itself
    lines, start = inspect.getsourcelines(obj)
    start = max(start, 1)  # a whole module reports line 0
    path = Path(inspect.getsourcefile(obj)).resolve()
    root = Path(transformer_lib.__file__).resolve().parent.parent
    where = path.relative_to(root) if path.is_relative_to(root) else path.name
    header = f"# {where}, lines {start}-{start + len(lines) - 1}\n"
    return Code(header + "".join(lines), language="python")


setup_plotly()

from .widgets import interact  # noqa: E402  (live controls: chapters 5 and 7)
