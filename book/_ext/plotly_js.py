"""Sphinx extension: serve plotly.js once from the site's ``_static`` folder.

Figures in the pages are rendered by ``transformer_lib.viz.BookRenderer`` without plotly.js;
every page loads ``_static/plotly.min.js`` (the version that ships with the installed plotly
package, so it matches the figures), which the browser caches across pages. No CDN, and no
4.8 MB of JavaScript inlined into each page. ``figure-fit.js`` (``static/``) comes right after it:
it sizes the figures to their column and lays them out again in a column narrower than 600 px.
"""

from pathlib import Path

FILENAME = "plotly.min.js"


def _add_script(app):
    if app.builder.format == "html":
        app.add_js_file(FILENAME, priority=100)  # before the pages' inline figure scripts
        app.add_js_file("figure-fit.js", priority=101)  # wraps Plotly.newPlot: also before them


def _write_plotly_js(app, exception):
    if exception is None and app.builder.format == "html":
        from plotly.offline import get_plotlyjs

        static = Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        (static / FILENAME).write_text(get_plotlyjs(), encoding="utf-8")


def setup(app):
    app.connect("builder-inited", _add_script)
    app.connect("build-finished", _write_plotly_js)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
