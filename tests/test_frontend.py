"""The notebooks where learners run them: JupyterLab 4 and Notebook 7, in headless Chromium.

nbval runs the chapters' Python; this runs them in a real front-end and checks what the page
shows. One Jupyter server (``jupyter lab``, which also serves Notebook 7) on 127.0.0.1 from this
venv, over copies of the chapters in a temporary folder (so nothing writes into ``book/``):

* the live training view (``LiveLossPlot``): its chart has points *while* ``tl.train`` runs and
  gains more as it goes, its progress line counts steps, and after training the chart is the
  interactive plotly figure with every evaluation: in a stand-in notebook and in chapter 7
  itself, each in JupyterLab and in Notebook 7;
* every chapter's live widget (ipywidgets, tagged ``skip-execution`` for the book and nbval):
  after the chapter ran up to its widget (the rest runs under nbval and in the build), real input (typing, dragging, arrow keys, dropdowns, buttons) changes
  what the widget shows.

Skipped with the reason when selenium, Chromium, JupyterLab or Notebook 7 is missing;
``TFS_REQUIRE_BROWSER=1`` (set by ``.ci/run``) turns that into a failure.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

from . import chromium
from .test_book import ROOT

REQUIRED = os.environ.get("TFS_REQUIRE_BROWSER") == "1"
JS = (Path(__file__).parent / "frontend_helpers.js").read_text()
BIN = Path(sys.executable).parent
OUT = ROOT / "_build" / "frontend"  # screenshots and the server's log


def _why_not() -> str | None:
    for module in ("jupyterlab", "notebook"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -r requirements.txt)"
    return chromium.missing()


_reason = _why_not()
if _reason and REQUIRED:
    raise RuntimeError(f"front-end test required here, but {_reason}")  # a collection error, not a skip
pytestmark = [pytest.mark.frontend, pytest.mark.skipif(_reason is not None, reason=_reason or "")]


# ---- a stand-in notebook: a small model that trains for about ten seconds ------------------------
STAND_IN_STEPS, STAND_IN_EVAL = 1200, 100
STAND_IN = f"""\
import torch
import transformer_lib as tl
from transformer_lib.viz.training import LiveLossPlot

torch.set_num_threads(1)
torch.manual_seed(0)
data = torch.randint(0, 13, (50_000,)) % 7 + torch.arange(50_000) % 6
model = tl.GPT2(tl.GPT2Config(vocab_size=13, n_ctx=32, d_model=64, n_layers=2, n_heads=4))
config = tl.TrainConfig(max_steps={STAND_IN_STEPS}, eval_interval={STAND_IN_EVAL}, eval_steps=2,
                        progress=False, device="cpu")
live = LiveLossPlot(title="stand-in run", sample=lambda m: "a sample", sample_interval=400)
state = tl.train(model, tl.BatchSampler(data, 16, 32), tl.BatchSampler(data, 16, 32, seed=1),
                 config, callbacks=[live])
"""


# ---- the server and the browser ------------------------------------------------------------------
def up_to_the_widget(nb):
    """The chapter as a learner runs it up to its live widget (``import ipywidgets``), the last cell
    these tests use: what follows runs under nbval and in the book's build, not three times."""
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "import ipywidgets" in c.source]
    if code:
        nb.cells = nb.cells[:code[-1] + 1]
    return nb


@pytest.fixture(scope="module")
def workdir():
    folder = Path(tempfile.mkdtemp(prefix="tfs-frontend-"))
    for notebook in ROOT.glob("book/[0-9]*.ipynb"):
        nbformat.write(up_to_the_widget(nbformat.read(notebook, as_version=4)), folder / notebook.name)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(STAND_IN)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / "stand_in.ipynb")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def server(workdir):
    """``jupyter lab`` on 127.0.0.1 with a fresh configuration: yields its base URL (token ``tfs``)."""
    config = workdir / ".jupyter-config"
    settings = config / "lab-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # every cell in the page, on screen or not (JupyterLab 4 may otherwise leave far cells unrendered)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    (config / "labconfig").mkdir()
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config), JUPYTERLAB_SETTINGS_DIR=str(config / "lab-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(config / "workspaces"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    OUT.mkdir(parents=True, exist_ok=True)
    log = open(OUT / "server.log", "w")
    process = subprocess.Popen(
        [str(BIN / "jupyter"), "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--IdentityProvider.token=tfs", f"--ServerApp.root_dir={workdir}",
         "--LabApp.extension_manager=readonly"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token=tfs", timeout=2)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"jupyter lab did not start: {(OUT / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
    yield base
    process.terminate()
    process.wait(20)
    log.close()


@pytest.fixture(autouse=True)
def _shut_kernels_down(server):
    """Each test's kernels end with it: two cores are not shared with idle kernels of earlier tests."""
    yield
    for kernel in api(server, "kernels"):
        request = urllib.request.Request(f"{server}/api/kernels/{kernel['id']}?token=tfs", method="DELETE")
        urllib.request.urlopen(request, timeout=30).close()


@pytest.fixture(scope="module")
def browser():
    with chromium.chromium(1280, 1000) as driver:
        yield driver


def _poll(condition, seconds: float, every: float = 0.25):
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def js(driver, call: str, *args):
    return driver.execute_script(JS + f"return tfs.{call};", *args)


def api(base: str, what: str) -> list:
    """GET ``/api/<what>``; a 500 is asked again (CI saw one while a kernel was replaced)."""
    for attempt in range(5):
        try:
            with urllib.request.urlopen(f"{base}/api/{what}?token=tfs", timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            if error.code < 500 or attempt == 4:
                raise
            time.sleep(1)


def wait_ready(driver, name: str, app: str) -> dict:
    def ready():
        s = js(driver, "state()")
        return s if s and s["kernel"] == "idle" and s["prompts"] and all(s["prompts"]) else None

    state = _poll(ready, 90)
    assert state, f"{name} did not open with an idle kernel in {app}: {js(driver, 'state()')}"
    return state


def open_notebook(driver, base: str, name: str, app: str) -> None:
    """Open ``name`` in JupyterLab (``app="lab"``) or Notebook 7 (``"notebook"``); wait for an idle kernel.

    On a fresh server the first page may start a kernel and replace it at once (seen in CI), and
    stay attached to the one that is gone: wait until the server's session for the notebook keeps
    one idle kernel, then reload the page so that it talks to that kernel.
    """
    # ?reset: JupyterLab would otherwise reopen the earlier tests' notebooks (its saved workspace)
    path, reset = ("lab/tree", "reset&") if app == "lab" else ("notebooks", "")
    driver.get(f"{base}/{path}/{name}?{reset}token=tfs")
    wait_ready(driver, name, app)

    def kernel():
        ids = [x["kernel"]["id"] for x in api(base, "sessions") if x["path"].endswith(name)]
        states = {k["id"]: k["execution_state"] for k in api(base, "kernels")}
        return ids[0] if len(ids) == 1 and states.get(ids[0]) == "idle" else None

    stable = _poll(lambda: (k := kernel()) and (time.sleep(2) or kernel() == k), 60)
    assert stable, f"no steady kernel for {name}: {api(base, 'sessions')}"
    driver.refresh()
    wait_ready(driver, name, app)
    driver.execute_script("arguments[0].click();", js(driver, "cells()")[0])  # the notebook has focus


def run_all(driver, base: str, timeout: float, watch=None) -> dict:
    """Run > Run All Cells, as a learner clicks it; call ``watch()`` every 0.25 s until all cells ran."""
    from selenium.webdriver.common.by import By

    def started() -> bool:  # the server's word: a kernel is busy, or a cell has run
        prompts = js(driver, "state()")["prompts"]
        return (any(k["execution_state"] == "busy" for k in api(base, "kernels"))
                or any(re.fullmatch(r"\[\d+\]:", p) for p in prompts))

    def click_run_all() -> bool:
        menus = [m for m in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel") if m.text == "Run"]
        assert menus, "no Run menu on the page"
        menus[0].click()
        item = ".lm-Menu-item[data-command='runmenu:run-all']"
        _poll(lambda: any(e.is_displayed() for e in driver.find_elements(By.CSS_SELECTOR, item)), 10)
        time.sleep(0.5)  # the menu opens before it takes clicks
        driver.find_element(By.CSS_SELECTOR, item).click()
        return _poll(started, 15, every=0.5)

    for attempt in range(3):
        if click_run_all():
            break
        evidence(driver, f"run-all-started-nothing-{attempt}")
        driver.refresh()
        _poll(lambda: (s := js(driver, "state()")) and s["kernel"] == "idle" and s["prompts"], 90)
    else:
        raise AssertionError("Run All Cells started nothing, three times")

    def finished():
        if watch is not None:
            watch()
        s = js(driver, "state()")
        done = s["kernel"] == "idle" and all(re.fullmatch(r"\[\d+\]:", p) for p in s["prompts"])
        return s if done or s["errors"] else None

    state = _poll(finished, timeout)
    if not state:
        evidence(driver, "did-not-finish")
    assert state, f"the notebook did not finish in {timeout} s: {js(driver, 'state()')}"
    assert not state["errors"], f"a cell failed in the browser:\n{state['errors'][0]}"
    return state


def evidence(driver, what: str) -> Path:
    """A screenshot of the page, kept in _build/frontend/ (CI keeps _build as an artifact)."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{time.strftime('%H%M%S')}-{what}.png"
    driver.save_screenshot(str(path))
    return path


def code_cell_index(name: str, needle: str, workdir: Path) -> int:
    code = [c for c in nbformat.read(workdir / name, as_version=4).cells if c.cell_type == "code"]
    found = [i for i, c in enumerate(code) if needle in c.source]
    assert found, f"no code cell of {name} contains {needle!r}"
    return found[0]


# ---- the live training view ------------------------------------------------------------------------
def watch_training(driver, cell: int, seen: list, shot: str | None = None):
    """Record each distinct state of the live view in code cell ``cell`` while the notebook runs;
    with ``shot``, keep a screenshot of the chart half drawn (_build/frontend/)."""
    shots = [shot] if shot else []

    def watch():
        view = js(driver, "liveView(arguments[0])", cell)
        if view and (not seen or view != seen[-1]):
            seen.append(view)
            if shots and view["plotlyPoints"] is None and max(view["drawnPoints"] or [0]) >= 3:
                driver.execute_script("arguments[0].scrollIntoView();", js(driver, "cells()")[cell])
                evidence(driver, f"{shots.pop()}-while-training")
    return watch


def check_live_view(seen: list, steps: int, evaluations: int) -> None:
    points = sorted({max(v["drawnPoints"] or [0]) for v in seen if v["plotlyPoints"] is None} - {0})
    # the chart filled in while training ran: several states with points drawn, before the end
    assert len(points) >= 3 and points[-1] <= evaluations, (
        f"the live chart did not fill in during training: point counts drawn {points} of {evaluations}")
    during = [v for v in seen if v["progress"] and re.search(r"step [\d,]+ / ", v["progress"])]
    assert during, "no progress line while training ran"
    assert all(v["svgHeight"] > 200 for v in during if v["drawnPoints"]), "the live chart was too small to read"
    progress = [int(re.search(r"step ([\d,]+) /", v["progress"]).group(1).replace(",", "")) for v in during]
    assert len({p for p in progress if p < steps}) >= 3, f"the progress line did not move: {progress}"
    assert any("left" in v["progress"] for v in during), "the progress line gives no time left"
    final = seen[-1]
    assert final["plotlyPoints"] == [evaluations, evaluations], (
        f"after training the interactive chart should hold all {evaluations} evaluations: {final}")
    assert final["drawnPoints"] == [evaluations, evaluations], f"the final chart's points are not drawn: {final}"
    assert final["plotlyDrawn"] == 2, f"the final chart's two curves are not drawn: {final}"
    assert final["progress"].strip().startswith(f"trained {steps:,} steps"), final["progress"]


@pytest.mark.parametrize("app", ["lab", "notebook"])
def test_live_chart_fills_in_while_training(browser, server, workdir, app):
    open_notebook(browser, server, "stand_in.ipynb", app)
    seen: list = []
    run_all(browser, server, 180, watch_training(browser, 0, seen, shot=f"stand-in-{app}"))
    check_live_view(seen, STAND_IN_STEPS, STAND_IN_STEPS // STAND_IN_EVAL + 1)


# ---- the chapters in JupyterLab: chapter 7's training, and each chapter's widget ----------------------
def widget_output(driver, cell: int, before=None, seconds: float = 30):
    """The widget's output in code cell ``cell`` once it differs from ``before`` (and shows something)."""
    def changed():
        sig = js(driver, "widgetSignature(arguments[0])", cell)
        shown = sig and (sig["text"].strip() or sig["figures"]) and sig["drawn"] >= len(sig["figures"])
        return sig if shown and sig != before else None
    return _poll(changed, seconds)


def control(driver, cell: int, css: str, index: int = 0):
    from selenium.webdriver.common.by import By

    cells = js(driver, "cells()")
    found = cells[cell].find_elements(By.CSS_SELECTOR, css)
    assert len(found) > index, f"no control {css!r} in code cell {cell}"
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", found[index])
    return found[index]


def type_into(driver, cell: int, css: str, text: str, submit: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = control(driver, cell, css)
    box.click()
    box.send_keys(Keys.END, text)
    if submit == "enter":
        box.send_keys(Keys.ENTER)
    elif submit == "blur":
        driver.execute_script("arguments[0].blur();", box)


def readout(driver, cell: int, index: int) -> str:
    return control(driver, cell, ".widget-slider .widget-readout", index).text


def press_arrows(driver, cell: int, index: int, key: str, times: int) -> None:
    """Focus slider ``index`` of the cell by clicking its handle, then press an arrow key."""
    from selenium.webdriver import ActionChains

    handle = control(driver, cell, ".widget-slider .noUi-handle, .widget-slider .ui-slider-handle", index)
    ActionChains(driver).click(handle).perform()
    for _ in range(times):
        ActionChains(driver).send_keys(key).perform()


def drag(driver, cell: int, index: int, dx: int) -> None:
    from selenium.webdriver import ActionChains

    handle = control(driver, cell, ".widget-slider .noUi-handle, .widget-slider .ui-slider-handle", index)
    ActionChains(driver).click_and_hold(handle).move_by_offset(dx, 0).release().perform()


def choose(driver, cell: int, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(control(driver, cell, ".widget-dropdown select")).select_by_visible_text(value)


def click_button(driver, cell: int, label: str) -> None:
    from selenium.webdriver.common.by import By

    buttons = [b for b in js(driver, "cells()")[cell].find_elements(By.CSS_SELECTOR, "button") if b.text == label]
    assert buttons, f"no {label!r} button in code cell {cell}"
    buttons[0].click()


@pytest.mark.parametrize("app", ["lab", "notebook"])
def test_chapter7_trains_live_and_samples(browser, server, workdir, app):
    """The chapter a learner runs: the chart fills in while it trains; the sampling widget answers."""
    from selenium.webdriver.common.keys import Keys

    name = "07_gpt2.ipynb"
    train_cell = code_cell_index(name, "LiveLossPlot(", workdir)
    widget_cell = code_cell_index(name, "import ipywidgets", workdir)
    open_notebook(browser, server, name, app)
    seen: list = []
    run_all(browser, server, 420, watch_training(browser, train_cell, seen, shot=f"chapter7-{app}"))
    # the CPU branch of the chapter's settings cell (the else: branch comes last)
    settings = [c.source for c in nbformat.read(workdir / name, as_version=4).cells if "EVAL_INTERVAL," in c.source]
    steps, interval = (int(re.findall(pattern, settings[0])[-1]) for pattern in
                       (r"BATCH, STEPS, [^=]+= \d+, (\d+)", r"EVAL_INTERVAL, [^=]+= (\d+)"))
    check_live_view(seen, steps, steps // interval + 1)

    # interact_manual: nothing is drawn until "Run Interact"; arrow keys move the temperature
    click_button(browser, widget_cell, "Run Interact")
    first = widget_output(browser, widget_cell)
    assert first and first["figures"], "the sampling explorer drew nothing after Run Interact"
    temperature = readout(browser, widget_cell, 0)
    press_arrows(browser, widget_cell, 0, Keys.ARROW_RIGHT, 4)
    assert _poll(lambda: readout(browser, widget_cell, 0) != temperature, 5), "arrow keys did not move the slider"
    type_into(browser, widget_cell, ".widget-textarea textarea", "thee", submit="blur")
    click_button(browser, widget_cell, "Run Interact")
    assert widget_output(browser, widget_cell, first), "new settings and prompt did not change the samples"


# each chapter's widget: how a learner uses it (chapter 7's is above)
WIDGETS = {
    "01_tokens.ipynb": [("type", ".widget-text input", " and the Jedi", "enter")],
    "02_attention.ipynb": [("type", ".widget-textarea textarea", " JULIET: Ay me!", "blur")],
    "05_positions.ipynb": [("arrows", 0), ("drag", 0), ("choose", "16")],
    "08_bert.ipynb": [("type", ".widget-text input", " and th_ r_st", "enter")],
    "09_transformer.ipynb": [("type", ".widget-text input", "2718", "enter")],
}


@pytest.mark.parametrize("name", list(WIDGETS))
def test_chapter_widget_responds_in_jupyterlab(browser, server, workdir, name):
    from selenium.webdriver.common.keys import Keys

    cell = code_cell_index(name, "import ipywidgets", workdir)
    open_notebook(browser, server, name, "lab")
    run_all(browser, server, 300)
    shown = widget_output(browser, cell)
    assert shown, f"the widget of {name} shows nothing after the chapter ran"
    for action, *args in WIDGETS[name]:
        before = shown
        if action == "type":
            type_into(browser, cell, *args)
        elif action == "arrows":
            value = readout(browser, cell, args[0])
            press_arrows(browser, cell, args[0], Keys.ARROW_LEFT, 2)
            assert _poll(lambda: readout(browser, cell, args[0]) != value, 5), "arrow keys did not move the slider"
        elif action == "drag":
            drag(browser, cell, args[0], 60)
        elif action == "choose":
            choose(browser, cell, args[0])
        shown = widget_output(browser, cell, before)
        assert shown, f"{action} {args} did not change what the widget of {name} shows"


def test_slider_arrow_keys_in_notebook7(browser, server, workdir):
    """Notebook 7's command-mode shortcuts must not take the arrow keys from a focused slider."""
    from selenium.webdriver.common.keys import Keys

    name = "05_positions.ipynb"
    cell = code_cell_index(name, "import ipywidgets", workdir)
    open_notebook(browser, server, name, "notebook")
    run_all(browser, server, 300)
    before = widget_output(browser, cell)
    assert before, "the widget shows nothing in Notebook 7"
    value = readout(browser, cell, 0)
    press_arrows(browser, cell, 0, Keys.ARROW_RIGHT, 2)
    assert _poll(lambda: readout(browser, cell, 0) != value, 5), "arrow keys did not move the slider in Notebook 7"
    assert widget_output(browser, cell, before), "the figure did not follow the slider in Notebook 7"
