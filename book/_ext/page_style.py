"""Sphinx extension: the book's page design, one style sheet for every page (``static/book.css``).

The theme's article column (740 px at a 1280-px window, between two sidebars) cut off most code.
``book.css`` gives the article the width of the page's table of contents (which opens from the
header instead), keeps prose to a readable measure, wraps code and output on narrow screens, and
lets a wide equation scroll inside its own box. tests/test_browser.py checks the result at 1280,
768 and 390 px. Library and notebook code keep to ``CODE_COLUMNS`` characters, which fit whole at
1280 px (tests/test_book.py).
"""

from pathlib import Path

CODE_COLUMNS = 110  # the longest code line that the 1280-px column shows whole (13-px monospace)


def _add_static(app):
    app.config.html_static_path.append(str(Path(__file__).parent / "static"))
    app.add_css_file("book.css")


def setup(app):
    app.connect("builder-inited", _add_static)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
