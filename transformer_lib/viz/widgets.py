"""Live controls (ipywidgets) that behave the same in JupyterLab, Notebook 7, VS Code and Colab.

Used by the chapters' live extras (chapters 5 and 7).

Notebook 7 handles keyboard shortcuts before the page's controls see the keys (JupyterLab lets
them bubble up first), so in command mode a focused slider's arrow keys moved the notebook's
selection instead of the slider. Lumino, the toolkit under both, skips its shortcuts for a key
pressed in an element marked ``data-lm-suppress-shortcuts``; a small script marks a widget's
control at the moment an arrow, Page, Home or End key is pressed in it.
"""

from __future__ import annotations

from typing import Callable

KEEP_KEYS_IN_WIDGETS = """<script>
if (!window.tfsWidgetKeys) {
  window.tfsWidgetKeys = true;
  window.addEventListener("keydown", function (event) {
    var target = event.target;
    if (/^(Arrow|Page|Home|End)/.test(event.key) && target && target.closest &&
        target.closest(".jupyter-widgets")) {
      target.setAttribute("data-lm-suppress-shortcuts", "true");
    }
  }, true);
}
</script>"""


def interact(function: Callable, *, manual: bool = False, **controls):
    """``ipywidgets.interact`` (``interact_manual`` with ``manual=True``) whose sliders and
    dropdowns keep their arrow keys in every front-end (see the module's docstring)."""
    import ipywidgets
    from IPython.display import HTML, display

    display(HTML(KEEP_KEYS_IN_WIDGETS))
    return (ipywidgets.interact_manual if manual else ipywidgets.interact)(function, **controls)
