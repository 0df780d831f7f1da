"""Sphinx extension: the chapters' trained models, live in the reader's browser (ONNX Runtime Web).

A chapter that trains a model exports it with ``transformer_lib.export.export_for_browser`` and
displays ``transformer_lib.viz.live_panel(...)``: a ``<div class="tfs-live" data-model="NAME">``
(``viz.live_compare``: ``<div class="tfs-live tfs-live-compare" data-models="NAME NAME">``).
On the published page, ``static/live-model.js`` turns that div into the panel (text box, bars,
attention maps). Nothing is downloaded until the reader opens a panel.

1. ``config-inited``: the build's notebooks export into ``_build/browser_models`` (the kernels
   inherit ``$TFS_BROWSER_MODELS``), unless the variable is already set.
2. Every HTML page loads ``live-model.js`` and ``live-model.css`` (a few KB; without a panel the
   script does nothing).
3. ``build-finished``: copy ONNX Runtime Web (single-threaded WebAssembly, installed by
   ``scripts/setup.sh`` into ``.venv/onnxruntime-web``) to ``_static/ort/``, and each exported
   model folder to ``_static/models/NAME/``: served by the site itself, no CDN, offline too.
   A page whose panel names a model that was not exported, or a missing runtime, is a warning
   (so ``-W`` fails the build) that says what to do.
"""

import os
import re
import shutil
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

VARIABLE = "TFS_BROWSER_MODELS"  # transformer_lib.export.EXPORT_DIR_VARIABLE (not imported: no torch here)
RUNTIME_FILES = ("ort.wasm.bundle.min.js", "ort-wasm-simd-threaded.wasm", "LICENSE", "VERSION")
MODEL_FILES = ("model.onnx", "model.safetensors", "config.json", "browser.json")
PANEL = re.compile(r'<div class="tfs-live"[^>]*\sdata-model="([^"]+)"')
COMPARE = re.compile(r'<div class="tfs-live tfs-live-compare"[^>]*\sdata-models="([^"]+)"')  # live_compare: "A B"


def runtime_source(app) -> Path:
    """``.venv/onnxruntime-web`` of the repository (the folder that holds ``_config.yml``)."""
    return Path(app.confdir) / ".venv" / "onnxruntime-web"


def _export_dir(app, config):
    os.environ.setdefault(VARIABLE, str((Path(app.confdir) / "_build" / "browser_models").resolve()))


def _add_static(app):
    if app.builder.format == "html":
        static = str(Path(__file__).parent / "static")
        if static not in app.config.html_static_path:
            app.config.html_static_path.append(static)
        app.add_css_file("live-model.css")
        # the runtime's size (its WebAssembly; the 73-KB module aside), which a closed panel states
        # before anything is downloaded, and its progress bar counts
        wasm = runtime_source(app) / RUNTIME_FILES[1]
        size = wasm.stat().st_size if wasm.is_file() else 0
        app.add_js_file("live-model.js", loading_method="defer", **({"data-ort-bytes": str(size)} if size else {}))


def _panels(outdir: Path) -> dict[str, list[str]]:
    """Model name -> the built pages whose panels use it."""
    found: dict[str, list[str]] = {}
    for page in sorted(outdir.rglob("*.html")):
        if "_static" in page.relative_to(outdir).parts:
            continue
        html = page.read_text(encoding="utf-8", errors="replace")
        for name in PANEL.findall(html) + [n for names in COMPARE.findall(html) for n in names.split()]:
            found.setdefault(name, []).append(str(page.relative_to(outdir)))
    return found


def _publish(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    panels = _panels(Path(app.outdir))

    runtime, target = runtime_source(app), static / "ort"
    shutil.rmtree(target, ignore_errors=True)
    if all((runtime / f).is_file() for f in RUNTIME_FILES):
        target.mkdir(parents=True)
        for f in RUNTIME_FILES:
            shutil.copy2(runtime / f, target / f)
    elif panels:
        logger.warning(f"live models: ONNX Runtime Web is not in {runtime}, so the live panels of "
                       f"{', '.join(sorted({p for pages in panels.values() for p in pages}))} cannot run; "
                       "run scripts/setup.sh (or python scripts/install_onnxruntime_web.py) and build again")

    exported = Path(os.environ.get(VARIABLE, Path(app.confdir) / "_build" / "browser_models"))
    models = static / "models"
    shutil.rmtree(models, ignore_errors=True)
    if exported.is_dir():
        for folder in sorted(p for p in exported.iterdir() if p.is_dir()):
            if all((folder / f).is_file() for f in MODEL_FILES):
                (models / folder.name).mkdir(parents=True, exist_ok=True)
                for f in MODEL_FILES:
                    shutil.copy2(folder / f, models / folder.name / f)
    for name, pages in sorted(panels.items()):
        if not (models / name / "model.onnx").is_file():
            logger.warning(f"live models: {', '.join(pages)} has a live panel for model {name!r}, but "
                           f"{exported / name} holds no export (model.onnx, browser.json, ...). The chapter's "
                           "notebook was probably not executed in this build (its outputs came from the "
                           "cache): delete _build/.jupyter_cache and build again, so the chapter re-executes "
                           "and exports its model")


def setup(app):
    app.connect("config-inited", _export_dir)
    app.connect("builder-inited", _add_static)
    app.connect("build-finished", _publish)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
