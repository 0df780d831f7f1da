"""A live panel: the chapter's trained model, running in the reader's browser.

Defined in chapter 7, *GPT-2* (section *The model in your browser*). The panel is an HTML
``<div class="tfs-live">`` that the book's ``_static/live-model.js`` turns into a text box,
bars and attention maps, computed by ONNX Runtime Web from the files that
:func:`transformer_lib.export.export_for_browser` wrote (``book/_ext/live_models.py``
publishes them). Jupyter has no such script, so there the panel says where the files are.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from ..export import BrowserExport


class LivePanel:
    """What a chapter displays after ``export_for_browser``: the page's live panel."""

    def __init__(self, export: BrowserExport, prompt: str = "") -> None:
        if not isinstance(export, BrowserExport):
            raise TypeError(f"export must be what export_for_browser returned, got {type(export).__name__}")
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        self.export, self.prompt = export, prompt

    def __repr__(self) -> str:
        e = self.export
        if e.skipped:
            return f"live panel for {e.name!r} ({e.kind}): {e.skipped}"
        return (f"live panel for {e.name!r} ({e.kind}): on the book's page it runs {e.directory / 'model.onnx'} "
                f"({e.onnx_bytes / 1e6:.2f} MB) in the browser")

    def _repr_html_(self) -> str:
        e = self.export
        attrs = {"model": e.name, "kind": e.kind, "prompt": self.prompt, "onnx-bytes": e.onnx_bytes,
                 "parameters": e.parameters}
        data = " ".join(f'data-{k}="{html.escape(str(v), quote=True)}"' for k, v in attrs.items())
        folder = Path(os.path.relpath(e.directory)) if e.directory.is_absolute() else e.directory
        if folder.parts[:1] == ("..",):  # the book's build exports outside the notebook's folder
            folder = Path(e.directory.name)
        if e.skipped:  # a learner's install has no ONNX packages: the weights alone were saved
            fallback = (f"On the book's published page, this box runs the model trained above in your "
                        f"browser. In Jupyter the model is live in the kernel instead, in the cells above; "
                        f"its weights are in the folder <code>{html.escape(folder.as_posix())}</code> "
                        f"(<code>tl.load_pretrained</code> loads them). {html.escape(e.skipped)}.")
        else:
            fallback = (f"On the book's published page, this box runs the model trained above in your "
                        f"browser (ONNX Runtime Web, {e.onnx_bytes / 1e6:.1f} MB). In Jupyter the model is "
                        f"live in the kernel instead, in the cells above; the exported files are "
                        f"in the folder <code>{html.escape(folder.as_posix())}</code>.")
        return f'<div class="tfs-live" {data}>\n<p class="tfs-live-fallback">{fallback}</p>\n</div>'


def live_panel(export: BrowserExport, prompt: str = "") -> LivePanel:
    """The live panel for an exported model; ``prompt`` is the text box's first content."""
    return LivePanel(export, prompt)
