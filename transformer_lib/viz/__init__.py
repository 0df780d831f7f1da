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
import json
import sys
import uuid
from pathlib import Path

import plotly.io as pio
from plotly.io._base_renderers import ColabRenderer, MimetypeRenderer

from .layout import WIDE, narrow_patch, tidy

PLOTLY_MIME = "application/vnd.plotly.v1+json"


# Switches a figure of the static book between its wide and its narrow (phone) layout as the width of
# its column crosses WIDE; after a switch, each menu's and slider's current choice is applied again,
# so that a title the reader chose is shown wrapped for the new width.
_FIT_JS = """<script>(function (id, wide, narrow, limit) {
  var gd = document.getElementById(id), shown = "wide";
  if (!gd || !window.Plotly) return;
  function again(items, pick) {
    (items || []).forEach(function (m) {
      var b = pick(m);
      if (b && b.method === "update") Plotly.update(gd, (b.args || [])[0] || {}, (b.args || [])[1] || {});
      else if (b && b.method === "relayout") Plotly.relayout(gd, (b.args || [])[0] || {});
    });
  }
  function fit() {
    if (!gd._fullLayout) return;
    var want = gd.parentElement.getBoundingClientRect().width < limit ? "narrow" : "wide";
    if (want === shown) return;
    var first = !gd._tfsSwitched;
    shown = want;
    gd._tfsSwitched = true;
    gd._tfsLayout = want;
    var layout = want === "narrow" ? narrow : wide;
    // menus that change type (buttons to a dropdown) are drawn afresh: plotly.js keeps the old buttons
    var clear = "updatemenus" in layout ? Plotly.relayout(gd, {updatemenus: []}) : Promise.resolve();
    clear.then(function () { return Plotly.relayout(gd, layout); }).then(function () {
      if (first) return;
      again(gd.layout.updatemenus, function (m) { return (m.buttons || [])[m.active]; });
      again(gd.layout.sliders, function (s) { return (s.steps || [])[s.active]; });
    });
  }
  gd._tfsLayout = "wide";
  setTimeout(fit, 0);
  if (window.ResizeObserver) new ResizeObserver(fit).observe(gd.parentElement);
  else window.addEventListener("resize", fit);
})(%s, %s, %s, %d);</script>"""


class BookRenderer(MimetypeRenderer):
    """Plotly JSON for live frontends plus kernel-free HTML for the static book.

    The HTML draws the figure with its wide layout and carries its narrow one (``layout.tidy``):
    on a page whose column is narrower than ``layout.WIDE`` (a phone) the figure switches to it.
    """

    def to_mimebundle(self, fig_dict):
        wide, narrow = narrow_patch(fig_dict)
        fig_dict = tidy(copy.deepcopy(fig_dict))
        div_id = f"tfs-figure-{uuid.uuid4().hex[:12]}"
        # no toolbar on the page: it covered titles; drag zooms, a double click resets
        html = pio.to_html(fig_dict, full_html=False, include_plotlyjs=False, validate=False, div_id=div_id,
                           config={"responsive": True, "displayModeBar": False})
        if narrow:
            html += _FIT_JS % (json.dumps(div_id), _json(wide), _json(narrow), WIDE)
        return {PLOTLY_MIME: {"data": fig_dict.get("data", []), "layout": fig_dict.get("layout", {})}, "text/html": html}


def _json(value) -> str:
    """JSON for an inline script: plotly's encoder (numpy values), and no "</" that would end the script."""
    return pio.to_json(value, validate=False).replace("</", "<\\/")


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
from .live import live_panel  # noqa: E402  (the trained models in the reader's browser: chapters 7-10)
