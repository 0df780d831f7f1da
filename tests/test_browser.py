"""The published site in a real browser: Debian's Chromium driven by selenium, network off.

Serves ``_build/html`` on 127.0.0.1 and opens every page of ``_toc.yml`` in headless Chromium
with every other host unresolvable, as a reader without internet would. Each page is loaded
once (``visit``); the tests below check what that visit saw. Chapters, their figures and
controls come from ``_toc.yml`` and the executed notebooks, never from a list kept here.

Skipped, with the reason, when the book is not built or selenium, chromium or chromedriver is
missing (README: "Running the tests"). ``.ci/run`` installs them and sets TFS_REQUIRE_BROWSER=1,
which turns those skips into failures.
"""

import functools
import gzip
import json
import os
import threading
import time
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from . import chromium
from .test_book import CONFIG, ROOT, TOC, toc_files
from .test_site import HTML, shown_figures

PAGES = [f for f in [TOC["root"], *toc_files(TOC)] if (ROOT / f"{f}.ipynb").exists() or (ROOT / f"{f}.md").exists()]
CHAPTERS = [f for f in PAGES if (ROOT / f"{f}.ipynb").exists()]
MAX_CHAPTER_BYTES = 1_500_000  # the page and its own files; shared site assets are cached across pages
REQUIRED = os.environ.get("TFS_REQUIRE_BROWSER") == "1"
LOAD_TIMEOUT = 60  # seconds for a page's figures and math; 2 shared cores parse 4.8 MB of plotly.js


def _why_not() -> str | None:
    if not (HTML / "index.html").exists():
        return "the book is not built (run scripts/setup.sh, or jupyter-book build .)"
    return chromium.missing()


_reason = _why_not()
if _reason and (REQUIRED or (os.environ.get("CI") and "not built" in _reason)):
    raise RuntimeError(f"browser test required here, but {_reason}")  # a collection error, not a skip
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")


# ---- the site and the browser --------------------------------------------------------------------
class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(HTML)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    with chromium.chromium(script_timeout=LOAD_TIMEOUT) as driver:
        yield driver


@pytest.fixture(scope="module")
def visits(site, browser):
    """``visits(page)``: the page's one visit. What the visits saw goes to _build/browser-report.json."""
    seen: dict[str, dict] = {}

    def get(page: str) -> dict:
        if page not in seen:
            try:
                seen[page] = visit(browser, site, page)
            except Exception as error:  # fail each of the page's tests with it, without a retry each
                seen[page] = error
        if isinstance(seen[page], Exception):
            raise seen[page]
        return seen[page]

    yield get
    report = {page: {k: v for k, v in s.items() if k != "resources"} | {"weights": weights(s, site)}
              for page, s in seen.items() if isinstance(s, dict)}
    (HTML.parent / "browser-report.json").write_text(json.dumps(report, indent=1, default=str))


def weights(seen: dict, site: str) -> dict:
    """Bytes the page loaded: its own files; files every page shares (_static/, the site's root:
    the browser caches them), less plotly.js; plotly.js. Uncompressed, and gzipped as a server
    such as GitHub Pages sends them."""
    sizes = {"own": 0, "shared_without_plotly": 0, "plotly": 0}
    gzipped = dict.fromkeys(sizes, 0)
    for r in seen["resources"]:
        path = r["url"].removeprefix(site).split("?")[0].split("#")[0]
        kind = ("plotly" if path == "_static/plotly.min.js" else
                "shared_without_plotly" if path.startswith("_static/") or "/" not in path else "own")
        sizes[kind] += r["bytes"]
        if (HTML / path).is_file():
            gzipped[kind] += len(gzip.compress((HTML / path).read_bytes(), 6))
    return sizes | {"gzip": gzipped}


# ---- one visit of a page ---------------------------------------------------------------------------
JS = (Path(__file__).parent / "browser_helpers.js").read_text()


def visit(driver, base: str, page: str) -> dict:
    """Load ``page`` (a _toc.yml entry), wait for figures and math, work its controls, and report."""
    driver.get_log("browser")  # drop what earlier pages left
    start = time.monotonic()
    driver.get(f"{base}{page}.html")
    state = driver.execute_async_script(JS + "return tfs.settle(arguments[arguments.length - 1]);")
    seen = {"page": page, "load_seconds": time.monotonic() - start, **state}
    seen["controls"] = [work_control(driver, i, kind) for i, kind in state["controls"]]
    seen["hover"] = hover_any(driver, state["figures"])
    seen["resources"] = driver.execute_script(JS + "return tfs.resources();")
    seen["console"] = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    return seen


def work_control(driver, figure: int, kind: str) -> dict:
    """Move a slider or pick a dropdown item of figure ``figure`` with real mouse clicks."""
    from selenium.webdriver import ActionChains

    before = driver.execute_script(JS + "return tfs.signature(arguments[0]);", figure)
    if kind == "slider":
        rail, offset = driver.execute_script(JS + "return tfs.sliderTarget(arguments[0]);", figure)
        ActionChains(driver).move_to_element_with_offset(rail, int(offset), 0).click().perform()
    else:
        header = driver.execute_script(JS + "return tfs.menuHeader(arguments[0]);", figure)
        if header is not None:  # a dropdown opens first; "buttons" menus show their buttons at once
            ActionChains(driver).move_to_element(header).click().perform()
        button = driver.execute_script(JS + "return tfs.inactiveButton(arguments[0]);", figure)
        if button is None:
            return {"figure": figure, "kind": kind, "changed": False, "why": "no other item to pick"}
        ActionChains(driver).move_to_element(button).click().perform()
    changed = _poll(lambda: driver.execute_script(JS + "return tfs.signature(arguments[0]);", figure) != before)
    return {"figure": figure, "kind": kind, "changed": changed}


def hover_any(driver, figures: int) -> dict:
    """Move the mouse over drawn data of each figure until one shows a hover label."""
    from selenium.webdriver import ActionChains
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    for figure in range(figures):
        # start away from every figure (the page's top left corner), so a label can only come from this hover
        driver.execute_script("window.scrollTo(0, 0);")
        away = ActionBuilder(driver)
        away.pointer_action.move_to_location(5, 5)
        away.perform()
        if not _poll(lambda: not driver.execute_script(JS + "return tfs.hovering(arguments[0]);", figure), 1):
            continue
        for target in driver.execute_script(JS + "return tfs.hoverTargets(arguments[0]);", figure):
            ActionChains(driver).move_to_element(target).perform()
            if _poll(lambda: driver.execute_script(JS + "return tfs.hovering(arguments[0]);", figure), 0.5):
                return {"figure": figure, "label": True}
    return {"figure": None, "label": False}


def _poll(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


# ---- the checks ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES)
def test_no_console_errors(visits, page):
    errors = [f"{e['source']}: {e['message']}" for e in visits(page)["console"]]
    assert not errors, "the browser console shows errors:\n" + "\n".join(errors)


@pytest.mark.parametrize("page", PAGES)
def test_only_the_site_itself_is_contacted(visits, site, page):
    outside = [r["url"] for r in visits(page)["resources"] if not r["url"].startswith(site)]
    assert not outside, f"the page asks for files outside the site (a CDN?): {outside}"


@pytest.mark.parametrize("page", PAGES)
def test_math_is_typeset_locally(visits, page):
    seen = visits(page)
    assert seen["math"]["mathjax"] or seen["math"]["total"] == 0, "MathJax did not load (is it served from _static?)"
    assert seen["math"]["typeset"] == seen["math"]["total"], f"math left as raw TeX: {seen['math']}"
    assert seen["math"]["errors"] == 0, f"MathJax could not typeset some math: {seen['math']}"


@pytest.mark.parametrize("page", CHAPTERS)
def test_every_figure_renders(visits, page):
    seen = visits(page)
    expected = shown_figures(ROOT / f"{page}.ipynb")
    assert seen["figures"] == expected, f"{seen['figures']} plotly figures on the page, the notebook shows {expected}"
    empty = [i for i, ok in enumerate(seen["rendered"]) if not ok]
    assert not empty, f"figures {empty} (0-based) have no drawn SVG"


@pytest.mark.parametrize("page", CHAPTERS)
def test_sliders_and_dropdowns_change_their_figure(visits, page):
    controls = visits(page)["controls"]
    assert controls, "no figure on the page has a slider or dropdown"
    stuck = [c for c in controls if not c["changed"]]
    assert not stuck, f"clicking these controls did not change their figure: {stuck}"


@pytest.mark.parametrize("page", CHAPTERS)
def test_hover_shows_a_label(visits, page):
    assert visits(page)["hover"]["label"], "no figure showed a hover label under the mouse"


@pytest.mark.parametrize("page", CHAPTERS)
def test_colab_link_opens_this_notebook(visits, page):
    repo = CONFIG["repository"]
    owner_repo = repo["url"].removeprefix("https://github.com/").strip("/")
    notebook = "/".join(p for p in (repo.get("path_to_book", "").strip("/"), f"{page}.ipynb") if p)
    colab = CONFIG["launch_buttons"]["colab_url"].rstrip("/")
    expected = f"{colab}/github/{owner_repo}/blob/{repo['branch']}/{notebook}"
    assert visits(page)["links"]["colab"] == [expected]
    assert (ROOT / notebook).is_file(), f"the Colab link's notebook {notebook} is not in the repository"


@pytest.mark.parametrize("page", CHAPTERS)
def test_download_link_serves_the_notebook(visits, page):
    links = visits(page)["links"]["download"]
    assert len(links) == 1 and links[0].endswith(".ipynb"), f"want one .ipynb download link, got {links}"
    with urllib.request.urlopen(links[0], timeout=10) as response:
        notebook = json.load(response)
    source = json.loads((ROOT / f"{page}.ipynb").read_text())
    assert notebook["cells"][0]["source"] == source["cells"][0]["source"], "the download is another notebook"


@pytest.mark.parametrize("page", CHAPTERS)
def test_chapter_weight(visits, site, page):
    """What a chapter adds to a visit, as loaded: its HTML and files of its own (not the shared _static/)."""
    own = weights(visits(page), site)["own"]
    assert own < MAX_CHAPTER_BYTES, f"the chapter loads {own / 1e6:.2f} MB of its own"
