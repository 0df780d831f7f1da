"""The live panels: each chapter's trained model, run in headless Chromium by ONNX Runtime Web.

Serves the built site (``_build/html``; another folder with ``TFS_LIVE_HTML``) on 127.0.0.1 with
every other host unreachable, and for each page's ``<div class="tfs-live">``:

* before the panel is opened, the page has fetched none of its lazy files (runtime, model);
* opened, and text typed into its box, the panel's numbers equal PyTorch's on the same ids
  (``transformer_lib.export.load_pretrained`` on the published folder): probabilities and every
  layer's and head's attention within 1e-4; for the encoder-decoder also the greedy output; for a
  classifier (chapter 8's speakers) the class probabilities of the model's own forward pass on
  ``[CLS] line [SEP]``, its likeliest class named;
* seeded sampling gives the same text twice; a reloaded page opens and runs again, alike;
* off the happy path: a text longer than the context is cut with a note that says how many characters
  were read; an error replaces the result of the text before it; the timing line reports a forward
  pass, not the runtime's start-up; a new prompt clears the samples of the old one;
* the console stays clean;
* a comparison panel (``<div class="tfs-live tfs-live-compare" data-models="A B">``, chapter 10) runs
  every model on the one text typed: each model's numbers equal its own PyTorch model's, the models
  differ from each other, each column is labelled with its model's name and validation loss, and the
  columns sit side by side at 1280 px and stack at 390 px.

The runtime's size and the latencies go to ``_build/live_models_report.json`` (printed with -s);
screenshots of each open panel at 1280 and 390 px to ``_build/live/``. Skipped, with the reason,
when the book is not built or the browser is missing, unless TFS_REQUIRE_BROWSER=1 (as in
tests/test_browser.py).
"""

import base64
import json
import os
import re
import time
from html import unescape
from pathlib import Path

import pytest

from . import chromium

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("TFS_LIVE_HTML") or ROOT / "_build" / "html")
REPORT = HTML.parent / "live_models_report.json"
SHOTS = HTML.parent / "live"
REQUIRED = os.environ.get("TFS_REQUIRE_BROWSER") == "1"
EXPECTED = {"ch07-gpt": "causal-lm", "ch08-bert": "masked-lm", "ch08-speaker": "classifier", "ch09-reverse": "seq2seq",
            "ch10-llama": "causal-lm"}
LAZY = ("/_static/ort/", "/_static/models/", ".wasm", ".onnx", "browser.json")
MAX_PAGE_BYTES = 1_500_000  # as tests/test_browser.py: a chapter and its own files
TOLERANCE = 1e-4
TIMEOUT = 120  # seconds to open a panel: 2 shared cores compile 14 MB of WebAssembly
TEXTS = {  # what the test types, per kind (cut to the model's context)
    "causal-lm": "ROMEO:\nBut soft, what light",
    "masked-lm": "to b_, or not t_ be",
    "seq2seq": "2718281",
    "classifier": "Now, if you love me, stay.",
}
PANEL = re.compile(r'<div class="tfs-live"([^>]*)>')
COMPARE = re.compile(r'<div class="tfs-live tfs-live-compare"([^>]*)>')
COMPARED = {"book/10_putting_it_together.html": ["ch10-gpt2", "ch10-llama"]}  # page: its comparison's models
ATTRIBUTE = re.compile(r'\sdata-([a-z-]+)="([^"]*)"')


def _panels() -> list[dict]:
    """Each live panel of the built book's pages: page, model, kind, prompt."""
    found = []
    for page in sorted((HTML / "book").glob("*.html")):
        for match in PANEL.finditer(page.read_text(encoding="utf-8", errors="replace")):
            data = {k: unescape(v) for k, v in ATTRIBUTE.findall(match.group(1))}
            found.append({"page": f"book/{page.name}", "model": data.get("model"), "kind": data.get("kind"),
                          "prompt": data.get("prompt", "")})
    return found


def _compare_panels() -> list[dict]:
    """Each comparison panel of the built book's pages: page, models, labels, validation losses, prompt."""
    found = []
    for page in sorted((HTML / "book").glob("*.html")):
        for match in COMPARE.finditer(page.read_text(encoding="utf-8", errors="replace")):
            data = {k: unescape(v) for k, v in ATTRIBUTE.findall(match.group(1))}
            found.append({"page": f"book/{page.name}", "key": data.get("models", ""),
                          "models": data.get("models", "").split(), "labels": json.loads(data.get("labels", "[]")),
                          "val_losses": json.loads(data.get("val-losses", "[]")), "prompt": data.get("prompt", "")})
    return found


def _why_not() -> str | None:
    if not (HTML / "index.html").exists():
        return f"the book is not built: no {HTML / 'index.html'} (run scripts/setup.sh, or jupyter-book build .)"
    return chromium.missing()


_reason = _why_not()
if _reason and (REQUIRED or (os.environ.get("CI") and "not built" in _reason)):
    raise RuntimeError(f"live-model browser test required here, but {_reason}")  # a collection error
pytestmark = [pytest.mark.browser, pytest.mark.skipif(_reason is not None, reason=_reason or "")]
PANELS = _panels() if _reason is None else []
COMPARES = _compare_panels() if _reason is None else []
RESULTS: dict[str, dict] = {}


# ---- the site and the browser --------------------------------------------------------------------
@pytest.fixture(scope="module")
def site():
    with chromium.serve(HTML) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with chromium.chromium(script_timeout=TIMEOUT) as driver:
        yield driver


@pytest.fixture(scope="module", autouse=True)
def report():
    yield RESULTS
    if not RESULTS:
        return
    runtime = {p.name: p.stat().st_size for p in sorted((HTML / "_static" / "ort").glob("*"))}
    summary = {"runtime_files": runtime, "runtime_bytes": sum(runtime.values()), "panels": RESULTS}
    REPORT.write_text(json.dumps(summary, indent=1))
    print(f"\nlive models ({REPORT}):\n" + json.dumps(summary, indent=1))


def _wait(driver, script: str, timeout: float = TIMEOUT, *args):
    """Poll ``script`` (a JS expression) until it is truthy; return its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(f"return ({script});", *args)
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def _console(driver) -> list[str]:
    return [f"{e['level']} {e['message']}" for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def _css(model: str) -> str:
    """The panel of ``model``, or the comparison of the models ``model`` names (\"A B\", data-models)."""
    return f'div.tfs-live-compare[data-models="{model}"]' if " " in model else f'div.tfs-live[data-model="{model}"]'


def _panel_js(model: str) -> str:
    return f'document.querySelector(\'{_css(model)}\')'


def _call(model: str, method: str) -> str:
    """Async script: the panel's test hook ``method(arguments[0])``; its result, or {error}."""
    return (f"{_panel_js(model)}.tfsLive.{method}(arguments[0])"
            ".then(arguments[1], (e) => arguments[1]({error: String(e)}));")


def _message(driver, model: str) -> str:
    return driver.execute_script(f"return {_panel_js(model)}.querySelector('.tfs-live-message').innerText;")


def _shown_result(driver, model: str) -> dict:
    """What of a result the panel shows: drawn plots, filled-in text, samples."""
    return driver.execute_script(f"""const el = {_panel_js(model)};
        const text = (sel) => [...el.querySelectorAll(sel)].map((n) => n.textContent).join('');
        return {{plots: el.querySelectorAll('.tfs-live-plot .main-svg').length,
                 text: text('.tfs-live-filled, .tfs-live-fills'), samples: text('.tfs-live-generated'),
                 last: el.tfsLive.last, generated: el.tfsLive.generated}};""")


def _lazy_requests(driver) -> list[str]:
    names = driver.execute_script("return performance.getEntriesByType('resource').map((r) => r.name);")
    return [n for n in names if any(part in n for part in LAZY)]


def _load(driver, site: str, page: str, model: str) -> None:
    driver.get(site + page)
    state = _wait(driver, f"{_panel_js(model)} && {_panel_js(model)}.dataset.state", 60)
    assert state == "closed", f"the panel for {model} did not start closed (state {state!r})"


def _open(driver, model: str) -> float:
    """Click "Open the live model"; wait until ready; milliseconds it took."""
    from selenium.webdriver.common.by import By

    panel = driver.find_element(By.CSS_SELECTOR, _css(model))
    button = panel.find_element(By.CSS_SELECTOR, "button.tfs-live-open")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
    start = time.monotonic()
    button.click()
    el = _panel_js(model)
    state = _wait(driver, f"['ready', 'error'].includes({el}.dataset.state) && {el}.dataset.state")
    if state == "ready":  # and its first run, on the page's text, done (or its complaint shown)
        _wait(driver, f"Number({el}.dataset.runs) > 0 || {el}.querySelector('.tfs-live-message').textContent")
    if state != "ready":
        text = driver.execute_script(f"return {_panel_js(model)}.innerText;")
        pytest.fail(f"the panel for {model} did not open (state {state!r}):\n{text}")
    return 1000 * (time.monotonic() - start)


def _type(driver, model: str, text: str) -> dict:
    """Type ``text`` into the panel's box as a reader would; the run it triggers."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, f"{_css(model)} .tfs-live-input")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].focus();", box)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    box.send_keys(text)
    done = _wait(driver, f"(l => l && l.text === arguments[0] && l.input_to_result_ms !== undefined)"
                 f"({_panel_js(model)}.tfsLive.last)", TIMEOUT, text)
    assert done, f"typing {text!r} into the panel for {model} gave no run; the panel says: " + \
        driver.execute_script(f"return {_panel_js(model)}.querySelector('.tfs-live-message').innerText;")
    return driver.execute_script(f"return {_panel_js(model)}.tfsLive.last;")


def _encode(info: dict, text: str, blank: int | None = None) -> list[int]:
    """The tokenizer table's ids of ``text`` (one character a token; "_" / "[MASK]" a blank)."""
    ids, index, i = [], {t: k for k, t in enumerate(info["tokens"])}, 0
    while i < len(text):
        if blank is not None and text.startswith("[MASK]", i):
            ids.append(blank)
            i += 6
            continue
        ids.append(blank if blank is not None and text[i] == "_" else index[text[i]])
        i += 1
    return ids


def _max_diff(got, expected) -> float:
    import numpy as np

    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, f"shape {got.shape} in the browser, {expected.shape} in PyTorch"
    return float(np.abs(got - expected).max()) if got.size else 0.0


def _check_against_torch(model_dir: Path, info: dict, last: dict, text: str) -> dict:
    """The browser's numbers against PyTorch's on the same ids; the largest differences."""
    import torch

    from transformer_lib.export import WithAttention, load_pretrained

    net = WithAttention(load_pretrained(model_dir)).eval()
    kind, n_ctx = info["kind"], info["n_ctx"]
    diffs = {}
    with torch.no_grad():
        if kind == "causal-lm":
            expected_ids = _encode(info, text)[-n_ctx:]
            assert last["input_ids"] == expected_ids, "the browser's ids differ from the tokenizer table's"
            logits, attention = net(torch.tensor([expected_ids]))
            diffs["probs"] = _max_diff(last["probs"], torch.softmax(logits[0, -1], -1))
            diffs["attention"] = _max_diff(last["attention"], attention)
        elif kind == "masked-lm":
            mask = info["special"]["mask"]
            expected_ids = _encode(info, text, mask)[:n_ctx]
            assert last["input_ids"] == expected_ids, "the browser's ids differ from the tokenizer table's"
            positions = [i for i, t in enumerate(expected_ids) if t == mask]
            assert last["mask_positions"] == positions and positions
            logits, attention = net(torch.tensor([expected_ids]))
            diffs["probs"] = _max_diff(last["probs"], torch.softmax(logits[0, positions], -1))
            diffs["attention"] = _max_diff(last["attention"], attention)
        elif kind == "classifier":
            cls, sep = info["special"]["cls"], info["special"]["sep"]
            expected_ids = [cls] + _encode(info, text)[: n_ctx - 2] + [sep]  # the line's start, as encode_lines
            assert last["input_ids"] == expected_ids, "the browser's ids differ from [CLS] line [SEP]"
            ids = torch.tensor([expected_ids])
            # the classifier's own forward (pooled [CLS], its head), not the export's wrapper of it
            probs = torch.softmax(net.model(ids)[0], -1)  # (n_classes,)
            assert len(info["labels"]) == len(probs) and last["predicted"] == int(probs.argmax())
            diffs["probs"] = _max_diff(last["probs"], probs)
            diffs["attention"] = _max_diff(last["attention"], net(ids)[1])
        else:
            bos, eos = info["special"]["bos"], info["special"]["eos"]
            src = _encode(info, text)
            assert last["src_ids"] == src, "the browser's ids differ from the tokenizer table's"
            out = [bos]
            for _ in range(len(src) + 1):  # greedy, as the panel: the digits, then <eos>
                out.append(int(net(torch.tensor([src]), torch.tensor([out]))[0][0, -1].argmax()))
                if out[-1] == eos:
                    break
            assert last["output_ids"] == out, f"greedy output {last['output_ids']} in the browser, {out} in PyTorch"
            logits, enc, dec, cross = net(torch.tensor([src]), torch.tensor([out[:-1]]))
            diffs["probs"] = _max_diff(last["step_probs"], torch.softmax(logits[0], -1))
            diffs["encoder_attention"] = _max_diff(last["encoder_attention"], enc)
            diffs["decoder_attention"] = _max_diff(last["decoder_attention"], dec)
            diffs["cross_attention"] = _max_diff(last["cross_attention"], cross)
    return diffs


def _screenshot(driver, model: str, width: int, suffix: str = "") -> tuple[str, list[str]]:
    """The panel at ``width`` CSS pixels (a phone's width by emulation), as a PNG; what of it sticks out."""
    height, mobile = {1280: (900, False), 768: (1024, False), 390: (844, True)}[width]
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
    time.sleep(0.8)  # plotly relayouts on the resize
    driver.execute_script(f"{_panel_js(model)}.tfsLive.last && {_panel_js(model)}.querySelectorAll('.js-plotly-plot')"
                          ".forEach((gd) => Plotly.Plots.resize(gd));")
    driver.execute_script(f"{_panel_js(model)}.scrollIntoView({{block: 'start'}});")
    measure = (f"const r = {_panel_js(model)}.getBoundingClientRect(); "
               "return [r.left + scrollX, r.top + scrollY, r.width, r.height];")
    box = None
    for _ in range(20):  # until the layout stops moving (fonts, plotly's relayout): else a shifted crop
        time.sleep(0.25)
        box, previous = driver.execute_script(measure), box
        if box == previous:
            break
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": max(0, box[0] - 8), "y": max(0, box[1] - 8), "width": box[2] + 16, "height": box[3] + 16,
                 "scale": 1}})
    path = SHOTS / f"{model.replace(' ', '+')}{suffix}-{width}.png"  # a comparison: "A+B"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
    overflow = _overflow(driver, model)
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return str(path), overflow


def _overflow(driver, model: str) -> list[str]:
    """Parts of the open panel that stick out of it, right or left (cut off or overflowing the page)."""
    return driver.execute_script(f"""const el = {_panel_js(model)}, box = el.getBoundingClientRect();
        const right = box.right + 1, left = box.left - 1;
        const out = (r) => (r.width || r.height) && (r.right > right || r.left < left);  // hidden: 0 x 0
        return [...el.querySelectorAll('*')].filter((n) => out(n.getBoundingClientRect())
          && !n.closest('.tfs-live-scroll, .tfs-live-fills, svg, .tfs-live-generated'))
          .map((n) => n.tagName + '.' + n.className);""")


# ---- the tests -----------------------------------------------------------------------------------
def test_every_chapter_model_has_a_panel():
    found = {p["model"]: p["kind"] for p in PANELS} | {m: "causal-lm" for c in COMPARES for m in c["models"]}
    compared = {c["page"]: c["models"] for c in COMPARES}
    assert compared == COMPARED, f"comparison panels {compared}, expected {COMPARED}"
    missing = {m: k for m, k in EXPECTED.items() if found.get(m) != k}
    assert not missing, f"no live panel (of that kind) for {missing} in {HTML / 'book'}; found {found}"
    for model in [p["model"] for p in PANELS] + [m for c in COMPARES for m in c["models"]]:
        assert (HTML / "_static" / "models" / model / "model.onnx").is_file(), f"{model} is not published"
    assert (HTML / "_static" / "ort" / "ort-wasm-simd-threaded.wasm").is_file(), "ONNX Runtime Web is not published"


def test_a_page_without_panels_loads_nothing_lazy(browser, site):
    browser.get_log("browser")
    # a chapter without a panel (the site's index.html is a redirect with no icon link, so Chrome may
    # ask for /favicon.ico, a 404 in the console that has nothing to do with the panels)
    browser.get(site + "book/01_tokens.html")
    assert _wait(browser, "document.readyState === 'complete'", 60)
    time.sleep(0.5)
    assert not _lazy_requests(browser), "a page without a live panel fetched the runtime or a model"
    console = _console(browser)
    assert not console, "the console shows errors or warnings:\n" + "\n".join(console)


@pytest.mark.parametrize("panel", PANELS, ids=[p["model"] for p in PANELS])
def test_live_panel(browser, site, panel):
    driver, model, page = browser, panel["model"], panel["page"]
    info = json.loads((HTML / "_static" / "models" / model / "browser.json").read_text(encoding="utf-8"))
    text = TEXTS[panel["kind"]][: info["n_ctx"] - (1 if panel["kind"] == "seq2seq" else 0)]
    driver.get_log("browser")
    driver.set_window_size(1400, 1400)
    _load(driver, site, page, model)
    result = {"page": page, "kind": panel["kind"], "onnx_bytes": info["files"]["model.onnx"],
              "parameters": info["parameters"]}

    # closed: nothing lazy fetched, and the page stays light
    assert _wait(driver, "document.readyState === 'complete'", 60)
    assert not _lazy_requests(driver), f"fetched before the panel was opened: {_lazy_requests(driver)}"
    own = (HTML / page).stat().st_size + driver.execute_script(
        "return performance.getEntriesByType('resource').filter((r) => !r.name.includes('/_static/'))"
        ".reduce((s, r) => s + (r.decodedBodySize || 0), 0);")
    assert own < MAX_PAGE_BYTES, f"{page} weighs {own} bytes of its own"
    result["page_own_bytes"] = own
    result["screenshot_closed"], _ = _screenshot(driver, model, 1280, "-closed")
    text_closed = driver.execute_script(f"return {_panel_js(model)}.innerText;")
    assert "Try the model trained above" in text_closed and "Open the live model" in text_closed, text_closed

    # open, type, compare with PyTorch
    result["open_ms"] = _open(driver, model)
    assert _lazy_requests(driver), "the panel opened without fetching its files?"
    # the first timing is a forward pass, not the runtime's start-up (which took about a second)
    opened = driver.execute_script(f"return {_panel_js(model)}.tfsLive.last;")
    assert opened, f"the panel's first run, on its prompt, failed: {_message(driver, model)}"
    again = [driver.execute_async_script(_call(model, "run"), opened["text"])["forward_ms"] for _ in range(3)]
    later = sorted(again)[1]
    result["first_forward_ms"], result["later_forward_ms"] = opened["forward_ms"], later
    assert opened["forward_ms"] <= 4 * later + 50, \
        f"the first run reports {opened['forward_ms']:.0f} ms, later ones {later:.1f} ms: start-up, not a pass"
    last = _type(driver, model, text)
    result["typing_to_result_ms"] = last["input_to_result_ms"]
    result["forward_ms"] = last["forward_ms"]
    info_line = driver.execute_script(f"return {_panel_js(model)}.querySelector('.tfs-live-info').innerText;")
    assert "running in your browser" in info_line and "forward pass took" in info_line, info_line
    diffs = _check_against_torch(HTML / "_static" / "models" / model, info, last, text)
    result["max_abs_diff"] = diffs
    assert max(diffs.values()) <= TOLERANCE, f"browser vs PyTorch: {diffs}"
    first = last

    # sampling: the same seed and settings give the same text
    if panel["kind"] == "causal-lm":
        settings = {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 7, "length": 40}
        generate = _call(model, "generate")
        start = time.monotonic()
        a = driver.execute_async_script(generate, settings)
        result["generate_40_chars_ms"] = 1000 * (time.monotonic() - start)
        b = driver.execute_async_script(generate, settings)
        c = driver.execute_async_script(generate, settings | {"seed": 8})
        for g in (a, b, c):
            assert "error" not in g, g
            assert len(g["ids"]) == 40 and all(0 <= i < info["vocab_size"] for i in g["ids"])
        assert a["text"] == b["text"] and a["ids"] == b["ids"], "the same seed gave different text"
        assert c["ids"] != a["ids"], "another seed gave the same 40 characters: is the seed used?"
        result["generated"] = a["text"]

        # temperature 0 is greedy: the same characters as the library's greedy generation
        import torch

        import transformer_lib as tl

        greedy = driver.execute_async_script(generate, settings | {"temperature": 0, "length": 20})
        assert "error" not in greedy, greedy
        lm = tl.load_pretrained(HTML / "_static" / "models" / model)
        prompt = torch.tensor([_encode(info, greedy["prompt"])])
        expected = tl.generate(lm, prompt, 20, do_sample=False)[0, prompt.shape[1]:].tolist()
        assert greedy["ids"] == expected, f"greedy in the browser {greedy['ids']}, in PyTorch {expected}"

        # a text longer than the context: the model reads its last n_ctx characters, and says so
        long = (text + " ") * (info["n_ctx"] // len(text) + 2)
        got = driver.execute_async_script(_call(model, "run"), long)
        assert got.get("input_ids") == _encode(info, long)[-info["n_ctx"]:], "a long text is not cut to its last n_ctx"
        note = f"it read the last {info['n_ctx']} of the {len(long)} you typed"
        assert note in _message(driver, model), _message(driver, model)

        # a new prompt clears the samples of the old one (they belonged to another text)
        assert driver.execute_async_script(generate, settings | {"prompt": text})["text"] == a["text"]
        assert _shown_result(driver, model)["samples"].endswith(a["text"])
        shown = _type(driver, model, text[: len(text) // 2])
        assert shown["text"] == text[: len(text) // 2]
        seen = _shown_result(driver, model)
        assert seen["samples"] == "" and seen["generated"] is None, "the old prompt's samples stayed"
        bad = driver.execute_async_script(generate, settings | {"prompt": "to €"})
        assert "error" in bad and _shown_result(driver, model)["samples"] == ""
    elif panel["kind"] == "masked-lm":
        long = (text + " ") * (info["n_ctx"] // len(text) + 2)
        got = driver.execute_async_script(_call(model, "run"), long)
        assert got.get("input_ids") == _encode(info, long, info["special"]["mask"])[: info["n_ctx"]]
        note = f"it read the first {info['n_ctx']} of the {len(long)} you typed"
        assert note in _message(driver, model), _message(driver, model)
    elif panel["kind"] == "classifier":
        # the class names, likeliest first, on the bars and the line above them
        seen = _shown_result(driver, model)
        likeliest = info["labels"][first["predicted"]]
        assert seen["plots"] >= 2 and seen["text"].startswith(f"Likeliest: {likeliest} ("), seen["text"]
        bars = driver.execute_script(f"return [...{_panel_js(model)}.querySelectorAll('.tfs-live-plot .ytick text')]"
                                     ".map((t) => t.textContent);")
        assert sorted(info["labels"]) == sorted(set(bars) & set(info["labels"])), bars
        # a long line: the first n_ctx - 2 characters between [CLS] and [SEP], and the panel says so
        long = (text + " ") * (info["n_ctx"] // len(text) + 2)
        got = driver.execute_async_script(_call(model, "run"), long)
        room = info["n_ctx"] - 2
        assert got.get("input_ids") == [info["special"]["cls"]] + _encode(info, long)[:room] + [info["special"]["sep"]]
        note = f"it read the first {room} of the {len(long)} you typed"
        assert note in _message(driver, model), _message(driver, model)
        # an empty line is not classified: said, and the earlier result goes
        got = driver.execute_async_script(_call(model, "run"), "")
        assert "error" in got and "Type a line" in _message(driver, model), (got, _message(driver, model))
        assert _shown_result(driver, model)["last"] is None
    else:  # seq2seq: more digits than the context holds are refused, saying how many were typed
        long = "1234567890" * (info["n_ctx"] // 10 + 1)
        driver.execute_async_script(_call(model, "run"), text)
        got = driver.execute_async_script(_call(model, "run"), long)
        assert "error" in got and f"Type 1 to {info['n_ctx'] - 1} digits: you typed {len(long)}." in \
            _message(driver, model), _message(driver, model)
        seen = _shown_result(driver, model)
        assert seen["plots"] == 0 and seen["text"] == "" and seen["last"] is None, f"a stale result stayed: {seen}"

    # a character the model has no token for: said, and not run; the error replaces the earlier result
    driver.execute_async_script(_call(model, "run"), text)
    before = _shown_result(driver, model)
    assert before["plots"] >= 1 and before["last"], "no result shown for the typed text"
    runs = driver.execute_script(f"return {_panel_js(model)}.dataset.runs;")
    got = driver.execute_async_script(_call(model, "run"), "12€" if panel["kind"] == "seq2seq" else "to €")
    message = _message(driver, model)
    assert "error" in got and "€" in message, (got, message)
    assert driver.execute_script(f"return {_panel_js(model)}.dataset.runs;") == runs
    seen = _shown_result(driver, model)
    assert seen["plots"] == 0 and seen["text"] == "" and seen["last"] is None, f"a stale result stayed: {seen}"
    driver.execute_async_script(_call(model, "run"), text)  # back to the typed text, for the screenshots

    for width in (1280, 768, 390):
        result[f"screenshot_{width}"], overflow = _screenshot(driver, model, width)
        assert not overflow, f"parts of the panel stick out at {width} px: {overflow}"
    console = _console(driver)
    assert not console, "the console shows errors or warnings:\n" + "\n".join(console)

    # reload: open and run again, same numbers
    driver.refresh()
    _wait(driver, f"{_panel_js(model)} && {_panel_js(model)}.dataset.state === 'closed'", 60)
    result["reopen_ms"] = _open(driver, model)
    again = _type(driver, model, text)
    keys = [k for k in first if k not in ("forward_ms", "input_to_result_ms", "decode_ms")]
    for k in keys:
        assert again[k] == first[k] or _max_diff(again[k], first[k]) <= 1e-6, f"{k} differs after a reload"
    console = _console(driver)
    assert not console, "the console shows errors or warnings:\n" + "\n".join(console)
    RESULTS[model] = result


def _columns(driver, key: str) -> list[dict]:
    """Each model's column of a comparison: its data-model, label, info line, samples and where it sits."""
    return driver.execute_script(f"""return [...{_panel_js(key)}.querySelectorAll('.tfs-live-column')].map((c) => {{
        const r = c.getBoundingClientRect();
        return {{model: c.dataset.model, name: c.querySelector('.tfs-live-model-name').innerText,
                 info: c.querySelector('.tfs-live-info').innerText,
                 samples: c.querySelector('.tfs-live-generated').textContent,
                 plots: c.querySelectorAll('.tfs-live-plot.js-plotly-plot').length,
                 left: r.left, top: r.top, bottom: r.bottom}};
    }});""")


@pytest.mark.parametrize("panel", COMPARES, ids=[c["key"] for c in COMPARES])
def test_compare_panel(browser, site, panel):
    """One text box, every model: each answers the same text as its own PyTorch model does, and they differ."""
    import numpy as np
    import torch

    import transformer_lib as tl

    driver, key, page, models = browser, panel["key"], panel["page"], panel["models"]
    folders = [HTML / "_static" / "models" / m for m in models]
    infos = [json.loads((f / "browser.json").read_text(encoding="utf-8")) for f in folders]
    assert all(i["kind"] == "causal-lm" for i in infos) and len({tuple(i["tokens"]) for i in infos}) == 1
    n_ctx = min(i["n_ctx"] for i in infos)
    text = TEXTS["causal-lm"][:n_ctx]
    driver.get_log("browser")
    driver.set_window_size(1400, 1400)
    driver.get(site + page)
    assert _wait(driver, f"{_panel_js(key)} && {_panel_js(key)}.dataset.state", 60) == "closed"
    assert _wait(driver, "document.readyState === 'complete'", 60)
    assert not _lazy_requests(driver), f"fetched before the panel was opened: {_lazy_requests(driver)}"
    own = (HTML / page).stat().st_size + driver.execute_script(
        "return performance.getEntriesByType('resource').filter((r) => !r.name.includes('/_static/'))"
        ".reduce((s, r) => s + (r.decodedBodySize || 0), 0);")
    assert own < MAX_PAGE_BYTES, f"{page} weighs {own} bytes of its own"
    result = {"page": page, "models": models, "page_own_bytes": own,
              "onnx_bytes": [i["files"]["model.onnx"] for i in infos]}
    result["screenshot_closed"], _ = _screenshot(driver, key, 1280, "-closed")
    closed = driver.execute_script(f"return {_panel_js(key)}.innerText;")
    assert "Try the models trained above" in closed and "Open the live models" in closed, closed
    assert all(label in closed for label in panel["labels"]), closed

    # open: the page's prompt runs in both; the first timing is a forward pass, not the start-up
    result["open_ms"] = _open(driver, key)
    assert all(any(f"/_static/models/{m}/model.onnx" in r for r in _lazy_requests(driver)) for m in models)
    opened = driver.execute_script(f"return {_panel_js(key)}.tfsLive.last;")
    assert opened and len(opened["models"]) == len(models), f"the first run failed: {_message(driver, key)}"
    again = [driver.execute_async_script(_call(key, "run"), opened["text"]) for _ in range(3)]
    for k, first_run in enumerate(opened["models"]):
        later = sorted(a["models"][k]["forward_ms"] for a in again)[1]
        assert first_run["forward_ms"] <= 4 * later + 50, (models[k], first_run["forward_ms"], later)

    # each column: the model's name and validation loss, its timing line
    columns = _columns(driver, key)
    assert [c["model"] for c in columns] == models
    for c, label, loss, info in zip(columns, panel["labels"], panel["val_losses"], infos):
        assert c["name"] == f"{label} · validation loss {loss:.3f}", c["name"]
        assert 0 < loss < np.log(info["vocab_size"]), f"{label}'s validation loss {loss} is not a trained model's"
        assert "forward pass took" in c["info"] and f"{info['parameters']:,}" in c["info"], c["info"]
        assert c["plots"] == 2, f"{label}: {c['plots']} plots drawn (bars and attention expected)"

    # typed once, read by both: each equals its own PyTorch model, and the two differ
    last = _type(driver, key, text)
    result["typing_to_result_ms"] = last["input_to_result_ms"]
    result["forward_ms"] = [m["forward_ms"] for m in last["models"]]
    assert [m["name"] for m in last["models"]] == models
    diffs = [_check_against_torch(f, info, m, text) for f, info, m in zip(folders, infos, last["models"])]
    result["max_abs_diff"] = dict(zip(models, diffs))
    assert max(max(d.values()) for d in diffs) <= TOLERANCE, f"browser vs PyTorch: {diffs}"
    assert all(m["input_ids"] == last["models"][0]["input_ids"] for m in last["models"]), "not the same text"
    apart = {"probs": _max_diff(last["models"][0]["probs"], last["models"][1]["probs"]),
             "attention": _max_diff(last["models"][0]["attention"], last["models"][1]["attention"])}
    result["between_models"] = apart
    assert apart["probs"] > 1e-3 and apart["attention"] > 1e-3, f"the two columns show the same model: {apart}"

    # samples: each model with the same seeded draws; the same seed twice gives the same text
    settings = {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 7, "length": 40}
    generate = _call(key, "generate")
    start = time.monotonic()
    a = driver.execute_async_script(generate, settings)
    result["generate_40_chars_each_ms"] = 1000 * (time.monotonic() - start)
    b = driver.execute_async_script(generate, settings)
    c = driver.execute_async_script(generate, settings | {"seed": 8})
    for g in (a, b, c):
        assert "error" not in g, g
        assert [m["name"] for m in g["models"]] == models and all(len(m["ids"]) == 40 for m in g["models"])
    assert a == b, "the same seed gave different text"
    assert all(x["ids"] != y["ids"] for x, y in zip(a["models"], c["models"])), "another seed, the same text?"
    result["generated"] = {m["name"]: m["text"] for m in a["models"]}
    shown = _columns(driver, key)
    assert all(col["samples"] == text + m["text"] for col, m in zip(shown, c["models"])), shown

    # temperature 0: each model's greedy characters are its own PyTorch model's
    greedy = driver.execute_async_script(generate, settings | {"temperature": 0, "length": 20})
    assert "error" not in greedy, greedy
    prompt = torch.tensor([_encode(infos[0], greedy["prompt"])])
    for folder, m in zip(folders, greedy["models"]):
        expected = tl.generate(tl.load_pretrained(folder), prompt, 20, do_sample=False)[0, prompt.shape[1]:]
        assert m["ids"] == expected.tolist(), f"{m['name']}: greedy {m['ids']} in the browser, {expected.tolist()}"

    # a text longer than the context: each model reads its last n_ctx characters, and the panel says so
    long = (text + " ") * (n_ctx // len(text) + 2)
    got = driver.execute_async_script(_call(key, "run"), long)
    assert all(m["input_ids"] == _encode(infos[0], long)[-n_ctx:] for m in got["models"])
    assert f"each read the last {n_ctx} of the {len(long)} you typed" in _message(driver, key), _message(driver, key)

    # a new prompt clears the samples of the old one, in every column
    driver.execute_async_script(generate, settings | {"prompt": text})
    assert all(col["samples"] for col in _columns(driver, key))
    _type(driver, key, text[: len(text) // 2])
    seen = _shown_result(driver, key)
    assert seen["samples"] == "" and seen["generated"] is None, "the old prompt's samples stayed"
    bad = driver.execute_async_script(generate, settings | {"prompt": "to €"})
    assert "error" in bad and _shown_result(driver, key)["samples"] == ""

    # an unknown character: said, not run, and every column's earlier result goes
    driver.execute_async_script(_call(key, "run"), text)
    assert [col["plots"] for col in _columns(driver, key)] == [2] * len(models), "not every model's result shown"
    runs = driver.execute_script(f"return {_panel_js(key)}.dataset.runs;")
    got = driver.execute_async_script(_call(key, "run"), "to €")
    assert "error" in got and "€" in _message(driver, key), (got, _message(driver, key))
    assert driver.execute_script(f"return {_panel_js(key)}.dataset.runs;") == runs
    seen = _shown_result(driver, key)
    assert seen["plots"] == 0 and seen["last"] is None, f"a stale result stayed: {seen}"
    driver.execute_async_script(_call(key, "run"), text)  # back to the typed text, for the screenshots
    driver.execute_async_script(generate, settings | {"prompt": text, "length": 80})  # with samples in them

    # side by side on a desktop, stacked on a phone; nothing sticks out
    for width in (1280, 768, 390):
        result[f"screenshot_{width}"], overflow = _screenshot(driver, key, width)
        assert not overflow, f"parts of the panel stick out at {width} px: {overflow}"
        if width in (1280, 390):
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900,
                                                                         "deviceScaleFactor": 1, "mobile": width < 500})
            time.sleep(0.5)
            cols = _columns(driver, key)
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            first, second = cols[0], cols[1]
            if width == 1280:
                assert abs(first["top"] - second["top"]) < 2 and second["left"] > first["left"] + 100, cols
            else:
                assert second["top"] >= first["bottom"] - 1 and abs(second["left"] - first["left"]) < 2, cols
    console = _console(driver)
    assert not console, "the console shows errors or warnings:\n" + "\n".join(console)

    # reload: open and run again, the same numbers
    driver.refresh()
    _wait(driver, f"{_panel_js(key)} && {_panel_js(key)}.dataset.state === 'closed'", 60)
    result["reopen_ms"] = _open(driver, key)
    again = _type(driver, key, text)
    for before, after in zip(last["models"], again["models"]):
        for k in ("input_ids", "probs", "attention"):
            assert before[k] == after[k] or _max_diff(after[k], before[k]) <= 1e-6, f"{k} differs after a reload"
    console = _console(driver)
    assert not console, "the console shows errors or warnings:\n" + "\n".join(console)
    RESULTS[key] = result
