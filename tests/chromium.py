"""Debian's Chromium and ChromeDriver, driven by selenium, with no network but 127.0.0.1.

Shared by the browser tests (``test_browser.py``: the built site; ``test_frontend.py``: the
notebooks in JupyterLab and Notebook 7).
"""

import functools
import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def tool(name: str) -> str | None:
    """Debian's chromium or chromedriver: on PATH, or where the packages put them."""
    return shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)


def missing() -> str | None:
    """Why no browser can be driven here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -r requirements.txt)"
    for name in ("chromium", "chromedriver"):
        if not tool(name):
            return f"no {name} on this machine (Debian: apt-get install chromium chromium-driver; .ci/run does)"
    return None


@contextmanager
def chromium(width: int = 1400, height: int = 1400, script_timeout: float = 60):
    """A headless Chromium (selenium driver) in a fresh profile; every host but 127.0.0.1 unreachable."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="tfs-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = tool("chromium")
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        # no network but the local server: a page that needs a CDN fails here as it would offline
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(tool("chromedriver")), options=options)
    driver.set_script_timeout(script_timeout)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


class _QuietHandler(SimpleHTTPRequestHandler):
    replace: dict[str, str] = {}

    def log_message(self, *args):
        pass

    def translate_path(self, path):
        for ending, file in self.replace.items():
            if path.split("?")[0].endswith(ending):
                return file
        return super().translate_path(path)


@contextmanager
def serve(directory: Path, replace: dict[str, Path] | None = None):
    """Serve ``directory`` on 127.0.0.1 (a free port, no log lines); yield its base URL, ending in /.

    ``replace``: URL paths ending in a key are answered with that file instead (e.g. another plotly.js).
    """
    handler = type("Handler", (_QuietHandler,), {"replace": {k: str(v) for k, v in (replace or {}).items()}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
