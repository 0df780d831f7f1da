"""Sphinx extension: the book's page design, one style sheet for every page (``static/book.css``).

The theme's article column (740 px at a 1280-px window, between two sidebars) cut off most code.
``book.css`` gives the article the width of the page's table of contents (which opens from the
header instead), keeps prose to a readable measure, wraps code and output on narrow screens, and
lets a wide equation scroll inside its own box. tests/test_browser.py checks the result at 1280,
768 and 390 px. Library and notebook code keep to ``CODE_COLUMNS`` characters, which fit whole at
1280 px (tests/test_book.py).
"""

import re
from pathlib import Path

from docutils import nodes

CODE_COLUMNS = 110  # the longest code line that the 1280-px column shows whole (13-px monospace)


def _add_static(app):
    app.config.html_static_path.append(str(Path(__file__).parent / "static"))
    app.add_css_file("book.css")


# printed columns: a run of two spaces between words, or box-drawing characters
_COLUMNS = re.compile(r"\S  +\S|[─│┌┐└┘├┤┬┴┼]")


def _mark_columns(app, doctree, docname):
    """Text laid out in columns or drawn (printed tables, diagrams in the prose) keeps its lines on
    a phone and scrolls sideways instead; other printed output and code wrap (book.css)."""
    for block in doctree.findall(nodes.literal_block):
        lines = block.astext().splitlines()
        output = "output" in block["classes"]
        drawing = block.get("language") in (None, "", "text", "none", "default") and not output
        if (output or drawing) and sum(bool(_COLUMNS.search(line)) for line in lines) >= (2 if output else 1):
            block["classes"].append("tfs-columns")


def setup(app):
    app.connect("builder-inited", _add_static)
    app.connect("doctree-resolved", _mark_columns)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
