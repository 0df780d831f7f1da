"""A live panel: the chapter's trained model, running in the reader's browser.

Defined in chapter 7, *GPT-2* (section *The model in your browser*). The panel is an HTML
``<div class="tfs-live">`` that the book's ``_static/live-model.js`` turns into a text box,
bars and attention maps, computed by ONNX Runtime Web from the files that
:func:`transformer_lib.export.export_for_browser` wrote (``book/_ext/live_models.py``
publishes them). Jupyter has no such script, so there the panel says where the files are.
``live_compare`` (chapter 10) puts two or more such models side by side on the same text. A
classifier's panel (chapter 8's speaker classifier) shows the probability of each class of the line
typed.
"""

from __future__ import annotations

import html
import json
import math
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
        if e.labels:  # a classifier: its classes, named before the panel is opened
            attrs["classes"] = json.dumps(list(e.labels), ensure_ascii=False)
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


class LiveComparison:
    """Two or more exported language models side by side in one live panel: one text box for all.

    Defined in chapter 10, *Putting it together* (section *The two models in your browser*): the
    page's ``live-model.js`` runs every model on the same text and shows their next-character
    probabilities, attention maps and samples next to each other, each under its name and
    validation loss.
    """

    def __init__(self, exports: dict[str, BrowserExport], val_loss: dict[str, float],
                 prompt: str = "") -> None:
        if not isinstance(exports, dict) or not 2 <= len(exports) <= 4:
            got = f"{len(exports)} models" if isinstance(exports, dict) else type(exports).__name__
            raise ValueError(f"exports must be a dict of 2 to 4 models, {{name: export_for_browser(...)}}, "
                             f"got {got}")
        for name, export in exports.items():
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"exports' names must be non-empty strings (each model's label), "
                                 f"got {name!r}")
            if not isinstance(export, BrowserExport):
                raise TypeError(f"exports[{name!r}] must be what export_for_browser returned, "
                                f"got {type(export).__name__}")
            if export.kind != "causal-lm":
                raise ValueError(f"exports[{name!r}] is a {export.kind} model ({export.name!r}); a "
                                 "comparison runs causal-lm models (GPT2), which all read the same text")
        folders = [e.name for e in exports.values()]
        if len(set(folders)) < len(folders):
            raise ValueError(f"exports must be different models, got the folders {folders}")
        if not isinstance(val_loss, dict) or set(val_loss) != set(exports):
            got = sorted(val_loss) if isinstance(val_loss, dict) else type(val_loss).__name__
            raise ValueError(f"val_loss must give a validation loss for each of {sorted(exports)}, "
                             f"got {got}")
        for name, loss in val_loss.items():
            if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not math.isfinite(loss) \
                    or loss < 0:
                raise ValueError(f"val_loss[{name!r}] must be a finite loss >= 0 (nats), got {loss!r}")
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        self.exports, self.val_loss, self.prompt = exports, {k: float(v) for k, v in val_loss.items()}, prompt

    def __repr__(self) -> str:
        names = ", ".join(f"{n} ({e.name!r}, validation loss {self.val_loss[n]:.3f})"
                          for n, e in self.exports.items())
        return f"live comparison of {names}"

    def _repr_html_(self) -> str:
        exports = list(self.exports.items())
        attrs = {"models": " ".join(e.name for _, e in exports),
                 "labels": json.dumps([n for n, _ in exports], ensure_ascii=False),
                 "val-losses": json.dumps([round(self.val_loss[n], 4) for n, _ in exports]),
                 "onnx-bytes": " ".join(str(e.onnx_bytes) for _, e in exports),
                 "parameters": " ".join(str(e.parameters) for _, e in exports),
                 "kind": "causal-lm", "prompt": self.prompt}
        data = " ".join(f'data-{k}="{html.escape(str(v), quote=True)}"' for k, v in attrs.items())
        skipped = [e.skipped for _, e in exports if e.skipped]
        names = " and ".join(html.escape(n) for n, _ in exports)
        where = "the cells above" if not skipped else f"the cells above ({html.escape(skipped[0])})"
        fallback = (f"On the book's published page, this box runs {names} in your browser side by side, "
                    f"on the same text. In Jupyter the models are live in the kernel instead, in {where}.")
        return (f'<div class="tfs-live tfs-live-compare" {data}>\n'
                f'<p class="tfs-live-fallback">{fallback}</p>\n</div>')


def live_compare(exports: dict[str, BrowserExport], val_loss: dict[str, float],
                 prompt: str = "") -> LiveComparison:
    """One live panel that runs every model of ``exports`` (``{name: export}``) on the same text.

    ``val_loss``: each model's validation loss, shown beside its name; ``prompt``: the text box's
    first content.
    """
    return LiveComparison(exports, val_loss, prompt)
