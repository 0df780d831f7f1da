"""The built book (``_build/html``, made by ``scripts/setup.sh``): figures rendered, plotly.js served once.

Skipped when the book has not been built, except in CI, where the build always comes first.
"""

import json
import os
import re
from pathlib import Path

import pytest

from .test_book import CHAPTERS, ROOT

BUILD = ROOT / "_build"
HTML = BUILD / "html"

pytestmark = pytest.mark.skipif(
    not (HTML / "index.html").exists() and not os.environ.get("CI"),
    reason="the book is not built here (run scripts/setup.sh); CI always builds it",
)


def page(chapter: Path) -> str:
    path = HTML / chapter.relative_to(ROOT).with_suffix(".html")
    assert path.exists(), f"{path} was not built"
    return path.read_text(encoding="utf-8")


def shown_figures(chapter: Path) -> int:
    """Plotly outputs of the executed notebook in cells the book shows."""
    executed = json.loads((BUILD / "jupyter_execute" / chapter.relative_to(ROOT)).read_text())
    count = 0
    for cell in executed["cells"]:
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
    scripts = re.findall(r'<script[^>]+src="([^"]*plotly[^"]*)"', html)
    assert scripts == ["../_static/plotly.min.js"]
    assert "cdn.plot.ly" not in html and "cdn.jsdelivr.net/npm/plotly" not in html
    assert "* plotly.js v" not in html, "plotly.js must not be inlined into the page"
    assert len(html.encode()) < 3_000_000
