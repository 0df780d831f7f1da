"""Screenshot the built book's pages in headless Chromium with no network but the local server.

    .venv/bin/python scripts/screenshot_pages.py OUTDIR [PAGE ...]   PAGE like book/02_attention
    .venv/bin/python scripts/screenshot_pages.py OUTDIR book/12_scaling_out --width 1280 --width 768 --width 390

Default: every page in _toc.yml. Once a page's figures are drawn and MathJax is done:
OUTDIR/NAME.png is the whole page (at --scale, default 0.5), NAME-top.png its first screen at
full size, and NAME-figK.png each of its figures (--no-figures to skip). Needs selenium and Debian's chromium + chromedriver
(scripts/install-browser.sh). A page that needs a CDN shows its failure here as it would offline.
"""

import argparse
import base64
import functools
import shutil
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
READY = """return document.readyState === "complete"
  && [...document.querySelectorAll(".plotly-graph-div")].every(d => d.querySelector("svg.main-svg"));"""
MATHJAX_DONE = """const done = arguments[arguments.length - 1];
  (window.MathJax && MathJax.startup && MathJax.startup.promise || Promise.resolve()).then(() => done(true));"""


def toc_pages(node) -> list[str]:
    if isinstance(node, dict):
        return ([node["file"]] if "file" in node else []) + [p for v in node.values() for p in toc_pages(v)]
    return [p for item in node for p in toc_pages(item)] if isinstance(node, list) else []


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def chromium(profile: str) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--hide-scrollbars",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # no network but ours
                 "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)


def full_page(driver, path: Path, scale: float) -> None:
    width, height = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight];")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": scale}})
    path.write_bytes(base64.b64decode(shot["data"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("pages", nargs="*", help="default: every page of _toc.yml")
    parser.add_argument("--scale", type=float, default=0.5, help="of the whole-page screenshot")
    parser.add_argument("--no-figures", dest="figures", action="store_false", help="no per-figure screenshots")
    parser.add_argument("--width", type=int, action="append", default=[],
                        help="window width in px (repeatable; NAME-WIDTH.png; below 500 a phone is emulated)")
    args = parser.parse_args()
    if not (HTML / "index.html").exists():
        sys.exit(f"no built book in {HTML}: run scripts/setup.sh first")
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [p.removesuffix(".html") for p in args.pages] or [toc["root"], *toc_pages(toc)]
    args.outdir.mkdir(parents=True, exist_ok=True)

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(HTML)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profile = tempfile.mkdtemp(prefix="tfs-shots-")
    driver = chromium(profile)
    try:
        for page, width in ((p, w) for p in pages for w in (args.width or [None])):
            if width:  # a phone: its own layout viewport and touch, as the browser test emulates it
                driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                    "width": width, "height": 844 if width < 500 else 1000, "deviceScaleFactor": 1,
                    "mobile": width < 500})
            driver.get(f"http://127.0.0.1:{server.server_port}/{page}.html")
            WebDriverWait(driver, 60).until(lambda d: d.execute_script(READY))
            driver.execute_async_script(MATHJAX_DONE)
            name = Path(page).name + (f"-{width}" if width else "")
            driver.save_screenshot(str(args.outdir / f"{name}-top.png"))  # title, goals, first math
            full_page(driver, args.outdir / f"{name}.png", args.scale)
            print(args.outdir / f"{name}.png")
            if args.figures:
                for k, figure in enumerate(driver.find_elements("css selector", ".plotly-graph-div"), start=1):
                    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", figure)
                    figure.screenshot(str(args.outdir / f"{name}-fig{k}.png"))
    finally:
        driver.quit()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
