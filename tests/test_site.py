"""The built book (``_build/html``, made by ``scripts/setup.sh``), read as files: figures rendered,
plotly.js served once, MathJax and everything else from the site itself (no CDN), no repeated
inline scripts, and each chapter's own weight. tests/test_browser.py opens the same pages in Chromium.

Skipped when the book has not been built, except in CI, where the build always comes first.
"""

import json
import os
import re
from pathlib import Path

import pytest

from .test_book import CHAPTERS, ROOT, TOC, toc_files

BUILD = ROOT / "_build"
HTML = BUILD / "html"

pytestmark = [pytest.mark.notebooks, pytest.mark.skipif(
    not (HTML / "index.html").exists() and not os.environ.get("CI"),
    reason="the book is not built here (run scripts/setup.sh); CI always builds it",
)]


def page(chapter: Path) -> str:
    path = HTML / chapter.relative_to(ROOT).with_suffix(".html")
    assert path.exists(), f"{path} was not built"
    return path.read_text(encoding="utf-8")


def executed(chapter: Path) -> dict:
    """The chapter as the build executed it.

    With ``execute_notebooks: cache`` the outputs live in the build's jupyter-cache; myst-nb
    writes ``_build/jupyter_execute/*.ipynb`` *without* outputs for a notebook it took from
    the cache, so that copy counts only right after the notebook ran.
    """
    import nbformat
    from jupyter_cache import get_cache

    notebook = nbformat.read(chapter, as_version=4)
    try:
        _, merged = get_cache(BUILD / ".jupyter_cache").merge_match_into_notebook(notebook)
        return merged
    except KeyError:  # no cached run of this version of the notebook
        ran = json.loads((BUILD / "jupyter_execute" / chapter.relative_to(ROOT)).read_text())
        assert any(c.get("outputs") for c in ran["cells"]), f"{chapter.name} changed since the book was built: rebuild"
        return ran


def shown_figures(chapter: Path) -> int:
    """Plotly outputs of the executed notebook in cells the book shows."""
    count = 0
    for cell in executed(chapter)["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] != "code" or {"remove-output", "remove-cell"} & set(tags):
            continue
        count += sum("application/vnd.plotly.v1+json" in o.get("data", {}) for o in cell.get("outputs", []))
    return count


def test_plotly_js_is_served_from_the_site():
    js = HTML / "_static" / "plotly.min.js"
    assert js.exists() and js.stat().st_size > 1_000_000


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_figure_is_rendered_into_the_page(chapter):
    html = page(chapter)
    expected = shown_figures(chapter)
    assert expected >= 1, "the chapter shows no plotly figure"
    assert html.count("Plotly.newPlot(") == expected, "a figure of the notebook is missing from the page"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_page_loads_plotly_js_once_from_the_site_and_no_cdn(chapter):
    html = page(chapter)
    scripts = re.findall(r'<script[^>]+src="([^"?]*plotly[^"?]*)(?:\?[^"]*)?"', html)  # Sphinx may add ?v=hash
    assert scripts == ["../_static/plotly.min.js"]
    assert "cdn.plot.ly" not in html and "cdn.jsdelivr.net/npm/plotly" not in html
    assert "* plotly.js v" not in html, "plotly.js must not be inlined into the page"
    assert len(html.encode()) < 3_000_000


# ---- a site that works offline ----------------------------------------------------------------------
PAGES = [HTML / f"{f}.html" for f in [TOC["root"], *toc_files(TOC)]] + [HTML / "index.html"]
MAX_CHAPTER_BYTES = 1_500_000  # a chapter's page and its own files; shared _static/ files are cached


def assets(html: str) -> list[str]:
    """What a page loads: script sources, stylesheets, icons, images (not links to other pages)."""
    found = re.findall(r'<script[^>]+src="([^"]+)"', html) + re.findall(r'<img[^>]+src="([^"]+)"', html)
    for tag in re.findall(r"<link[^>]+>", html):
        if re.search(r'rel="(stylesheet|icon|preload|shortcut icon)"', tag):
            found += re.findall(r'href="([^"]+)"', tag)
    return found


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.stem)
def test_page_loads_nothing_from_other_sites(path):
    outside = [url for url in assets(path.read_text(encoding="utf-8")) if re.match(r"(https?:)?//", url)]
    assert not outside, f"{path.name} loads files from other sites (a CDN?), which fail offline: {outside}"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.stem)
def test_every_file_a_page_loads_is_in_the_site(path):
    missing = [url for url in assets(path.read_text(encoding="utf-8"))
               if not (path.parent / url.split("?")[0].split("#")[0]).resolve().is_file()]
    assert not missing, f"{path.name} refers to files that are not in _build/html: {missing}"


def test_mathjax_is_served_from_the_site():
    html = page(CHAPTERS[0])
    mathjax = re.findall(r'<script[^>]+src="([^"?]*mathjax[^"?]*)(?:\?[^"]*)?"', html)
    assert mathjax == ["../_static/mathjax/tex-mml-chtml.js"], mathjax
    fonts = HTML / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert len(list(fonts.glob("*.woff"))) > 10, "MathJax's fonts are missing"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.stem)
def test_no_inline_script_twice(path):
    """A repeated inline script redeclares its constants: a SyntaxError in the console (THEBE_JS_URL)."""
    inline = re.findall(r"<script>(.*?)</script>", path.read_text(encoding="utf-8"), flags=re.S)
    twice = {body[:80] for body in inline if inline.count(body) > 1}
    assert not twice, f"inline scripts repeated in {path.name}: {twice}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_weight(chapter):
    """The page and the files only it loads; not those every page shares (_static/, with plotly.js and
    MathJax, and the site's root, with the search index), which the browser keeps in its cache."""
    path = HTML / chapter.relative_to(ROOT).with_suffix(".html")
    files = {(path.parent / url.split("?")[0]).resolve() for url in assets(page(chapter))}
    shared = {f for f in files if f.parent == HTML.resolve() or HTML.resolve() / "_static" in f.parents}
    own = [path] + sorted(files - shared)
    weight = sum(f.stat().st_size for f in own)
    assert weight < MAX_CHAPTER_BYTES, f"{weight / 1e6:.2f} MB: {[(f.name, f.stat().st_size) for f in own]}"
