"""The published site in a real browser: Debian's Chromium driven by selenium, network off.

Serves ``_build/html`` on 127.0.0.1 and opens every page of ``_toc.yml`` in headless Chromium
with every other host unresolvable, as a reader without internet would. Each page is loaded
once (``visit``); the tests below check what that visit saw. Chapters, their figures and
controls come from ``_toc.yml`` and the executed notebooks, never from a list kept here.

Skipped, with the reason, when the book is not built or selenium, chromium or chromedriver is
missing (README: "Running the tests"). ``.ci/run`` installs them and sets TFS_REQUIRE_BROWSER=1,
which turns those skips into failures.
"""

import base64
import gzip
import json
import os
import time
import urllib.request
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
pytestmark = [pytest.mark.browser, pytest.mark.skipif(_reason is not None, reason=_reason or "")]


# ---- the site and the browser --------------------------------------------------------------------
@pytest.fixture(scope="module")
def site():
    with chromium.serve(HTML) as url:
        yield url


PLOTLY2 = ROOT / ".venv" / "plotly.js-2" / "plotly.min.js"  # Colab's plotly.js (scripts/setup.sh fetches it)


@pytest.fixture(scope="module")
def site_with_plotly2():
    """The same site, but every page gets plotly.js 2 (as in Colab) instead of the site's own."""
    if not PLOTLY2.is_file():
        message = f"no plotly.js 2 at {PLOTLY2} (scripts/setup.sh downloads it)"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    with chromium.serve(HTML, replace={"/_static/plotly.min.js": PLOTLY2}) as url:
        yield url


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


WIDTHS = {1280: (900, False), 768: (1024, False), 390: (844, True)}  # desktop, tablet, phone
SHOTS = HTML.parent / "browser"  # full-page screenshots, one folder per width (a CI artifact)


def set_width(driver, width: int) -> None:
    """Lay the page out at ``width`` CSS pixels (a phone's width needs emulation: a window can't be that narrow)."""
    height, mobile = WIDTHS[width]
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})


def settle_layout(driver) -> None:
    """Wait until every figure has been laid out again at the new width (plotly resizes on a timer)."""
    driver.execute_async_script(JS + "tfs.resized(arguments[arguments.length - 1]);")


def screenshot(driver, page: str, width: int) -> None:
    size = driver.execute_script("return [document.documentElement.scrollWidth, document.documentElement.scrollHeight];")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "jpeg", "quality": 80, "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}})
    path = SHOTS / str(width) / f"{Path(page).name}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))


def looks(driver, page: str, width: int) -> dict:
    """What a reader sees at ``width``: clipped code, equations or page; overlapping figure parts."""
    if width != 1280:
        set_width(driver, width)
        settle_layout(driver)
    seen = driver.execute_script(JS + """return {clipped: tfs.clipped(), wide_equations: tfs.wideEquations().map(({box, ...e}) => e),
        overlaps: tfs.figures().map((_, i) => tfs.overlaps(i)), figure_widths: tfs.figureWidths(),
        screen: window.innerWidth};""")
    screenshot(driver, page, width)
    return seen


def visit(driver, base: str, page: str) -> dict:
    """Load ``page`` (a _toc.yml entry) at 1280 px, wait for figures and math, check what a reader
    sees at each width (with a full-page screenshot), then work its controls and report."""
    driver.get_log("browser")  # drop what earlier pages left
    set_width(driver, 1280)
    start = time.monotonic()
    driver.get(f"{base}{page}.html")
    state = driver.execute_async_script(JS + "return tfs.settle(arguments[arguments.length - 1]);")
    seen = {"page": page, "load_seconds": time.monotonic() - start, **state}
    seen |= driver.execute_script(JS + "return {raw: tfs.rawOutputs(), stray: tfs.strayOutputs(), "
                                  "cut_code: tfs.cutCode()};")
    seen["widths"] = {width: looks(driver, page, width) for width in WIDTHS}
    set_width(driver, 1280)
    settle_layout(driver)
    seen["controls"] = [work_control(driver, i, kind) for i, kind in state["controls"]]
    seen["hover"] = hover_any(driver, state["figures"])
    seen["titles"] = every_control(driver, state["figures"])
    seen["resources"] = driver.execute_script(JS + "return tfs.resources();")
    seen["console"] = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    return seen


def every_control(driver, figures: int) -> list[dict]:
    """Run every button and slider step of each figure; which of them left the figure without its title."""
    return [driver.execute_async_script(JS + "tfs.everyControl(arguments[0], arguments[arguments.length - 1]);", i)
            for i in range(figures)]


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


# ---- what a reader sees ---------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES)
def test_outputs_are_rendered_not_raw(visits, page):
    """Markdown and math that cells display (tables, sentences with $x$) reach the page rendered."""
    raw = visits(page)["raw"]
    assert not raw, "cell outputs show raw Markdown or TeX:\n" + "\n".join(raw)


@pytest.mark.parametrize("page", PAGES)
def test_no_stray_values_under_cells(visits, page):
    """A cell ending in a check or a call shows its message, not a bare True, False or None under it."""
    stray = visits(page)["stray"]
    assert not stray, "bare values shown as cell outputs:\n" + "\n".join(stray)


@pytest.mark.parametrize("page", PAGES)
def test_code_fits_the_column_at_1280(visits, page):
    """Every line of every code block fits the column on a desktop, without scrolling or wrapping."""
    cut = visits(page)["cut_code"]
    assert not cut, f"{len(cut)} code blocks are wider than the column at 1280 px (px over, where):\n" + "\n".join(
        f"{c['over']:4d}  {c['where']}" for c in cut)


@pytest.mark.parametrize("width", [1280, 768])
@pytest.mark.parametrize("page", PAGES)
def test_equations_fit_the_column(visits, page, width):
    """On a desktop and a tablet every display equation is seen whole (on a phone a wide one scrolls)."""
    wide = visits(page)["widths"][width]["wide_equations"]
    assert not wide, f"display equations wider than the column at {width} px:\n" + "\n".join(
        f"{e['over']:.0f} px  {e['where']}" for e in wide)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_nothing_is_cut_off(visits, page, width):
    """At a desktop's, a tablet's and a phone's width, a reader sees every code line (long lines wrap
    on narrow screens), every figure, and an equation too wide for a phone scrolls inside its box."""
    clipped = visits(page)["widths"][width]["clipped"]
    assert not clipped, f"cut off at {width} px:\n" + "\n".join(str(c) for c in clipped)


@pytest.mark.parametrize("page", CHAPTERS)
def test_no_figure_is_wider_than_a_phone(visits, page):
    """At 390 px every figure is drawn within the screen, in the layout figure-fit.js makes for its
    column (not the desktop one squeezed, nor 600 px scrolled sideways); at 1280 px in its own."""
    seen = visits(page)["widths"]
    phone = seen[390]
    wide = [f for f in phone["figure_widths"] if f["width"] > phone["screen"] - 16]  # the page's margins
    assert not wide, f"figures wider than the {phone['screen']}-px screen:\n" + "\n".join(map(str, wide))
    assert all(f["layout"] == "narrow" for f in phone["figure_widths"]), phone["figure_widths"]
    assert all(f["layout"] == "wide" for f in seen[1280]["figure_widths"]), seen[1280]["figure_widths"]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", CHAPTERS)
def test_figure_parts_do_not_overlap(visits, page, width):
    """A figure's title, subplot titles, legend, colour bars, menus, sliders and toolbar each in a place of their own."""
    overlaps = {i: o for i, o in enumerate(visits(page)["widths"][width]["overlaps"]) if o}
    assert not overlaps, f"at {width} px, figure (0-based): overlapping parts\n" + "\n".join(
        f"{i}: {', '.join(o)}" for i, o in overlaps.items())


@pytest.mark.parametrize("page", CHAPTERS)
def test_every_control_keeps_the_title(visits, page):
    """Each button and slider step, run as a click runs it, leaves the figure its title (plotly.js 4 rejects
    a ``title`` given as a string, which plotly.js 2 accepted)."""
    bad = [(i, t) for i, t in enumerate(visits(page)["titles"]) if t["lost"] or t["errors"]]
    assert not bad, "\n".join(f"figure {i} ({t['title']!r}): lost its title after {t['lost']}; errors {t['errors']}"
                              for i, t in bad)


@pytest.mark.parametrize("page", CHAPTERS)
def test_figures_work_in_plotly_js_2(browser, site_with_plotly2, page):
    """Colab draws the chapters' figures with plotly.js 2: there too every control keeps the title,
    and the parts above the plot do not overlap."""
    set_width(browser, 1280)
    browser.get(f"{site_with_plotly2}{page}.html")
    state = browser.execute_async_script(JS + "return tfs.settle(arguments[arguments.length - 1]);")
    version = browser.execute_script("return Plotly.version;")
    assert version.startswith("2."), f"the page loaded plotly.js {version}, not 2.x"
    assert all(state["rendered"]), f"figures not drawn with plotly.js {version}: {state['rendered']}"
    overlaps = {i: o for i in range(state["figures"])
                if (o := browser.execute_script(JS + "return tfs.overlaps(arguments[0]);", i))}
    titles = [t for t in every_control(browser, state["figures"]) if t["lost"] or t["errors"]]
    assert not overlaps and not titles, f"with plotly.js {version}: overlaps {overlaps}; controls {titles}"
