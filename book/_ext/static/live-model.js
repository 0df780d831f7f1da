/* The book's live panels: a chapter's trained model, running in the reader's browser.
 *
 * A chapter displays <div class="tfs-live" data-model="ch07-gpt" data-kind="causal-lm" ...>
 * (transformer_lib/viz/live.py). This script turns each such div into a panel. Nothing is
 * downloaded until the reader presses "Open the live model"; then the panel fetches
 *   _static/ort/ort.wasm.bundle.min.js       ONNX Runtime Web (an ES module, loaded with import())
 *   _static/ort/ort-wasm-simd-threaded.wasm  the runtime itself, once for all panels (browser cache)
 *   _static/models/NAME/browser.json         tokens, shapes and sizes (export_for_browser wrote it)
 *   _static/models/NAME/model.onnx           the forward pass, with every layer's attention weights
 * and runs the model with ONNX Runtime's single-threaded WebAssembly backend (a static site such
 * as GitHub Pages cannot send the headers that threads need). book/_ext/live_models.py copies
 * these files into the site. Plotly (on every page of the book) draws the bars and heatmaps.
 *
 * Four kinds of model, as export_for_browser names them:
 *   causal-lm   GPT-2 / LLaMA-style: next-character probabilities, attention, sampling
 *   masked-lm   BERT: the likeliest characters for each blank "_" (or "[MASK]"), attention
 *   seq2seq     the encoder-decoder that reverses digits: greedy decoding, cross-attention
 *   classifier  BERT fine-tuned to classify a line (chapter 8): [CLS] line [SEP] -> one logit per
 *               class (browser.json's labels), their softmax as bars, attention
 * and, in its own class (ComparePanel), <div class="tfs-live tfs-live-compare" data-models="A B">:
 * several causal-lm models side by side on one text box (chapter 10's GPT-2 and LLaMA-style).
 *
 * For tests, each panel element gets el.tfsLive = {state, last, run(text), generate(opts)} and
 * the attributes data-state and data-runs (tests/test_live_models.py).
 */
(function () {
  "use strict";

  const SCRIPT = document.currentScript;
  const STATIC = SCRIPT ? new URL(".", SCRIPT.src).href : new URL("_static/", document.baseURI).href;
  // the size of the runtime's WebAssembly (live_models.py sets it), stated before anything is downloaded
  const RUNTIME_BYTES = Number(SCRIPT && SCRIPT.dataset.ortBytes) || 14.2e6;
  const DEBOUNCE_MS = 300;

  // ---- small helpers ---------------------------------------------------------------------------
  function megabytes(bytes) {
    return bytes < 1e6 ? `${(bytes / 1e6).toFixed(2)} MB` : `${(bytes / 1e6).toFixed(1)} MB`;
  }

  function make(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    node.append(...children.filter((c) => c !== null && c !== undefined));
    return node;
  }

  /** Fetch a file as bytes, reporting (received, total) as they arrive. */
  async function fetchBytes(url, onProgress) {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`could not load ${url} (HTTP ${response.status})`);
    const total = Number(response.headers.get("content-length")) || 0;
    if (!response.body || !response.body.getReader) {
      const bytes = new Uint8Array(await response.arrayBuffer());
      onProgress(bytes.length, bytes.length);
      return bytes;
    }
    const reader = response.body.getReader();
    const chunks = [];
    let received = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      received += value.length;
      onProgress(received, total);
    }
    const bytes = new Uint8Array(received);
    let offset = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, offset);
      offset += chunk.length;
    }
    onProgress(received, received);
    return bytes;
  }

  function softmax(values) {
    let max = -Infinity;
    for (const v of values) if (v > max) max = v;
    const exps = Array.from(values, (v) => Math.exp(v - max));
    const sum = exps.reduce((a, b) => a + b, 0);
    return exps.map((e) => e / sum);
  }

  function argmax(values) {
    let best = 0;
    for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
    return best;
  }

  /** Rows [from, to) of a (1, T, V) tensor's data, as plain arrays. */
  function rows(tensor, from, to) {
    const width = tensor.dims[tensor.dims.length - 1];
    const out = [];
    for (let t = from; t < to; t++) out.push(Array.from(tensor.data.subarray(t * width, (t + 1) * width)));
    return out;
  }

  /** A (layers, heads, q, k) tensor as nested arrays [layer][head][q][k]. */
  function nested(tensor) {
    const [layers, heads, q, k] = tensor.dims;
    const data = tensor.data;
    const out = [];
    for (let l = 0; l < layers; l++) {
      const layer = [];
      for (let h = 0; h < heads; h++) {
        const map = [];
        for (let i = 0; i < q; i++) {
          const start = ((l * heads + h) * q + i) * k;
          map.push(Array.from(data.subarray(start, start + k)));
        }
        layer.push(map);
      }
      out.push(layer);
    }
    return out;
  }

  // ---- sampling: seeded, so the same seed and settings give the same text -----------------------
  /** mulberry32: a small seeded generator of uniform numbers in [0, 1). */
  function mulberry32(seed) {
    let a = seed >>> 0;
    return function () {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  /** The next token: temperature, then top-k, then top-p (nucleus), then one uniform draw. */
  function sample(logits, { temperature, topK, topP }, random) {
    if (!(temperature > 0)) return argmax(logits); // temperature 0: greedy
    const probs = softmax(Array.from(logits, (v) => v / temperature));
    let order = probs.map((_, i) => i).sort((a, b) => probs[b] - probs[a] || a - b);
    // top-k keeps every token tied with the k-th, as tl.next_token_probs does
    if (topK > 0 && topK < order.length) order = order.filter((i) => probs[i] >= probs[order[topK - 1]]);
    if (topP < 1) { // top-p <= 0 keeps only the likeliest token (the loop stops after one)
      const kept = order.reduce((sum, i) => sum + probs[i], 0);
      let cumulative = 0;
      let n = 0;
      while (n < order.length) {
        cumulative += probs[order[n++]] / kept;
        if (cumulative >= topP) break; // the smallest set whose probability reaches top-p
      }
      order = order.slice(0, n);
    }
    const total = order.reduce((sum, i) => sum + probs[i], 0);
    const u = random() * total; // inverse CDF over the kept tokens, likeliest first
    let cumulative = 0;
    for (const i of order) {
      cumulative += probs[i];
      if (u < cumulative) return i;
    }
    return order[order.length - 1];
  }

  // ---- ONNX Runtime Web: loaded once per page, shared by its panels ------------------------------
  let runtime = null;
  const runtimeListeners = new Set();
  let runtimeProgress = [0, RUNTIME_BYTES];

  function loadRuntime(onProgress) {
    runtimeListeners.add(onProgress);
    onProgress(...runtimeProgress); // a later panel starts where the download is
    if (!runtime) {
      runtime = (async () => {
        const report = (received, total) => {
          runtimeProgress = [received, total || RUNTIME_BYTES];
          runtimeListeners.forEach((f) => f(...runtimeProgress));
        };
        const [ort, wasm] = await Promise.all([
          import(STATIC + "ort/ort.wasm.bundle.min.js"),
          fetchBytes(STATIC + "ort/ort-wasm-simd-threaded.wasm", report),
        ]);
        ort.env.logLevel = "error";
        ort.env.wasm.numThreads = 1; // threads need cross-origin isolation, which a static site lacks
        ort.env.wasm.proxy = false;
        ort.env.wasm.wasmBinary = wasm; // already fetched (with progress): ort fetches nothing more
        runtimeListeners.clear();
        return ort;
      })();
      runtime.catch(() => {
        runtime = null; // a later click tries again
        runtimeListeners.clear();
        runtimeProgress = [0, RUNTIME_BYTES];
      });
    }
    return runtime;
  }

  // ---- tokens: one character each, plus named special tokens -------------------------------------
  function shown(token) {
    if (token === "\n") return "↵";
    if (token === " ") return "␣";
    if (token === "\t") return "⇥";
    return token;
  }

  /** Ids of `text`; `blank` (masked-lm) turns "_" and "[MASK]" into that id. */
  function encode(info, text, blank) {
    const ids = [];
    const unknown = new Set();
    for (let i = 0; i < text.length; ) {
      if (blank !== undefined && text.startsWith("[MASK]", i)) {
        ids.push(blank);
        i += 6;
        continue;
      }
      const c = String.fromCodePoint(text.codePointAt(i));
      i += c.length;
      if (blank !== undefined && c === "_") ids.push(blank);
      else if (info.ids.has(c)) ids.push(info.ids.get(c));
      else unknown.add(c);
    }
    return { ids, unknown: [...unknown] };
  }

  function unknownMessage(unknown) {
    const list = unknown.map((c) => `“${shown(c)}”`).join(", ");
    return `The model has no token for ${list} (it knows only the characters of its training text): ` +
      "change or remove " + (unknown.length > 1 ? "them" : "it") + " to run it.";
  }

  // ---- plots -------------------------------------------------------------------------------------
  function themeColors() {
    const style = getComputedStyle(document.documentElement);
    const get = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
    return {
      text: get("--pst-color-text-base", "#222"),
      muted: get("--pst-color-text-muted", "#666"),
      primary: get("--pst-color-primary", "#0a7d91"),
      grid: get("--pst-color-border", "#ddd"),
    };
  }

  const PLOT_CONFIG = { responsive: true, displayModeBar: false };
  const BLUES = [[0, "rgb(247,251,255)"], [0.25, "rgb(198,219,239)"], [0.5, "rgb(107,174,214)"],
    [0.75, "rgb(33,113,181)"], [1, "rgb(8,48,107)"]];

  /** A div for a plot, with a caption above it (HTML, so that a long one wraps on a phone). */
  function plotArea() {
    const div = make("div", { class: "tfs-live-plot" });
    div.caption = make("p", { class: "tfs-live-caption" });
    return div;
  }

  function baseLayout(div, title, height) {
    if (div.caption) div.caption.textContent = title;
    const colors = themeColors();
    return {
      height,
      autosize: true,
      margin: { l: 56, r: 16, t: 8, b: 48 },
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: colors.text, size: 12 },
    };
  }

  /** Top-n bars of a probability vector, likeliest on top; `names[i]` labels entry i (default: the tokens). */
  function drawBars(div, probs, info, n, title, names) {
    const label = names || info.tokens.map(shown);
    const order = probs.map((_, i) => i).sort((a, b) => probs[b] - probs[a]).slice(0, n);
    const colors = themeColors();
    const height = 40 + 24 * Math.min(n, probs.length);
    div.style.height = `${height}px`; // plotly's responsive mode sizes the figure to its div
    const layout = baseLayout(div, title, height);
    // room for the longest label (a class name is longer than a character), within reason on a phone
    // (a class name is mostly capitals, about 10 px each at 13 px: "DUKE VINCENTIO" was cut at 9)
    const perChar = names ? 10 : 9;
    layout.margin.l = Math.min(170, Math.max(40, perChar * Math.max(...order.map((i) => label[i].length)) + 20));
    layout.margin.r = 48; // room for the last bar's percentage
    layout.xaxis = { range: [0, Math.min(1, Math.max(0.1, 1.15 * probs[order[0]]))], tickformat: ".0%",
      gridcolor: colors.grid, fixedrange: true, zeroline: false };
    layout.yaxis = { autorange: "reversed", fixedrange: true, tickfont: { size: names ? 13 : 14 },
      tickvals: order.map((_, k) => k), ticktext: order.map((i) => label[i]) };
    Plotly.react(div, [{
      type: "bar", orientation: "h", x: order.map((i) => probs[i]), y: order.map((_, k) => k),
      marker: { color: colors.primary },
      text: order.map((i) => `${(100 * probs[i]).toFixed(1)}%`), textposition: "outside", cliponaxis: false,
      customdata: order.map((i) => label[i]),
      hovertemplate: "“%{customdata}”: %{x:.2%}<extra></extra>",
    }], layout, PLOT_CONFIG);
  }

  /** An attention map: rows (queries) x columns (keys), each labelled by its token. */
  function drawHeatmap(div, map, rowLabels, colLabels, title, axisTitles) {
    const colors = themeColors();
    const width = div.clientWidth || 400;
    const cell = Math.max(8, Math.min(22, (width - 90) / Math.max(colLabels.length, 1)));
    const height = Math.round(Math.min(520, Math.max(200, cell * rowLabels.length + 70)));
    div.style.height = `${height}px`; // plotly's responsive mode sizes the figure to its div
    const ticks = (labels, room, across = false) => {
      // a label is "position token": across the x axis it needs its width, not a line's height
      const size = across ? 7 * Math.max(...labels.map((t, i) => `${i} ${t}`.length)) + 10 : 13;
      const step = Math.max(1, Math.ceil(labels.length / Math.max(1, Math.floor(room / size))));
      const values = labels.map((_, i) => i).filter((i) => i % step === 0);
      // "position token", as the chapters' attention explorer: a skipped label can't pass for the text
      return { tickvals: values, ticktext: values.map((i) => `${i} ${labels[i]}`) };
    };
    const layout = baseLayout(div, title, height);
    layout.margin = { l: 64, r: 8, t: 8, b: 56 };
    layout.xaxis = { ...ticks(colLabels, width - 140, true), title: { text: axisTitles[1], font: { size: 12 } },
      tickangle: 0, fixedrange: true, side: "bottom", color: colors.text, zeroline: false, showgrid: false };
    layout.yaxis = { ...ticks(rowLabels, height - 100), title: { text: axisTitles[0], font: { size: 12 } },
      autorange: "reversed", fixedrange: true, color: colors.text, zeroline: false, showgrid: false };
    const text = map.map((row, i) => row.map((p, j) =>
      `${axisTitles[0]} ${i} “${rowLabels[i]}” → ${axisTitles[1]} ${j} “${colLabels[j]}”: ${p.toFixed(3)}`));
    Plotly.react(div, [{
      // white (no attention) to dark blue at weight 1, the same scale for every map
      type: "heatmap", z: map, zmin: 0, zmax: 1, colorscale: BLUES,
      text, hovertemplate: "%{text}<extra></extra>", xgap: 0, ygap: 0,
      colorbar: { thickness: 10, len: 0.9, tickformat: ".2f", outlinewidth: 0 },
    }], layout, PLOT_CONFIG);
  }

  // ---- one panel ---------------------------------------------------------------------------------
  class Panel {
    constructor(el) {
      this.el = el;
      this.name = el.dataset.model;
      this.kind = el.dataset.kind;
      this.onnxBytes = Number(el.dataset.onnxBytes) || 0;
      this.parameters = Number(el.dataset.parameters) || 0;
      this.classes = this.kind === "classifier" ? JSON.parse(el.dataset.classes || "[]") : [];
      this.folder = `${STATIC}models/${encodeURIComponent(this.name)}/`;
      this.runs = 0;
      this.queue = Promise.resolve();
      this.timer = null;
      this.typedAt = null;
      this.api = {
        state: "closed", last: null, generated: null,
        run: (text) => this.runText(text),
        generate: (options) => this.generate(options || {}),
        open: () => this.open(),
      };
      el.tfsLive = this.api;
      el.dataset.runs = "0";
      this.setState("closed");
      this.buildClosed();
    }

    setState(state) {
      this.api.state = state;
      this.el.dataset.state = state;
    }

    buildClosed() {
      const fallback = this.el.querySelector(".tfs-live-fallback");
      if (fallback) fallback.hidden = true;
      const what = { "causal-lm": "It predicts the next character of the text you type, and writes on.",
        "masked-lm": "It fills in the blanks (_) of the text you type.",
        "seq2seq": "It reverses the digits you type, one output digit at a time.",
        "classifier": `It reads the line you type and gives the probability of each of its classes` +
          `${this.classes.length ? ` (${this.classes.join(", ")})` : ""}.` }[this.kind] || "";
      this.openButton = make("button", { type: "button", class: "tfs-live-open", onclick: () => this.open() },
        "Open the live model");
      this.status = make("div", { class: "tfs-live-status", role: "status", "aria-live": "polite" });
      this.closed = make("div", { class: "tfs-live-closed" },
        make("p", { class: "tfs-live-title", text: "Try the model trained above, in your browser" }),
        make("p", { class: "tfs-live-intro", text:
          `This is this chapter's trained model${this.parameters ? ` (${this.parameters.toLocaleString("en-US")} parameters)` : ""}. ${what} ` +
          `Opening it downloads the model (${megabytes(this.onnxBytes)}) and, once for the whole book, ` +
          `ONNX Runtime Web, which runs it (${megabytes(RUNTIME_BYTES)}).` }),
        this.openButton);
      this.el.append(this.closed, this.status);
    }

    showError(error) {
      const message = error && error.message ? error.message : String(error);
      this.message.textContent = message;
      this.message.className = "tfs-live-message tfs-live-error";
    }

    async open() {
      if (this.api.state === "loading" || this.api.state === "ready") return this.opening;
      this.setState("loading");
      this.openButton.disabled = true;
      const progress = make("progress", { max: "1", value: "0" });
      const line = make("span", { class: "tfs-live-progress-text" });
      this.status.replaceChildren(progress, line);
      const seen = { runtime: [0, RUNTIME_BYTES], model: [0, this.onnxBytes] };
      const update = () => {
        const [r, rt] = seen.runtime;
        const [m, mt] = seen.model;
        const pct = (a, b) => `${Math.min(100, Math.round((100 * a) / Math.max(b, 1)))}%`;
        progress.value = Math.min(1, (r + m) / Math.max(rt + mt, 1));
        line.textContent = `Downloading ONNX Runtime ${megabytes(r)} of ${megabytes(rt)} (${pct(r, rt)}), ` +
          `the model ${megabytes(m)} of ${megabytes(mt)} (${pct(m, mt)})`;
      };
      update();
      this.opening = (async () => {
        try {
          const [ort, info, model] = await Promise.all([
            loadRuntime((received, total) => { seen.runtime = [received, Math.max(total, received)]; update(); }),
            fetch(this.folder + "browser.json").then((r) => {
              if (!r.ok) throw new Error(`could not load ${this.folder}browser.json (HTTP ${r.status})`);
              return r.json();
            }),
            fetchBytes(this.folder + "model.onnx", (received, total) => {
              seen.model = [received, Math.max(total, received)]; update();
            }),
          ]);
          line.textContent = "Starting the model…";
          this.ort = ort;
          this.info = { ...info, ids: new Map(info.tokens.map((t, i) => [t, i])) };
          this.session = await ort.InferenceSession.create(model, {
            executionProviders: ["wasm"], graphOptimizationLevel: "all" });
          // one untimed run: the runtime's first call prepares its kernels and memory (about a second),
          // which the timing line would otherwise report as the model's forward pass
          await this.warmUp();
          this.status.replaceChildren();
          this.buildOpen();
          this.setState("ready");
          await this.runNow().catch(() => {}); // a bad first text is shown in the panel, which stays ready
        } catch (error) {
          this.setState("error");
          this.openButton.disabled = false;
          this.openButton.textContent = "Try again";
          this.status.replaceChildren(make("span", { class: "tfs-live-error",
            text: `The live model could not start: ${error && error.message ? error.message : error}` }));
        }
      })();
      return this.opening;
    }

    buildOpen() {
      const info = this.info;
      this.closed.querySelector(".tfs-live-intro").remove();
      this.openButton.remove();
      this.infoLine = make("p", { class: "tfs-live-info" });
      const multiline = this.kind === "causal-lm";
      this.box = make(multiline ? "textarea" : "input", {
        class: "tfs-live-input", spellcheck: "false", autocomplete: "off", autocapitalize: "off",
        "aria-label": "Text for the model",
        ...(multiline ? { rows: "3" } : { type: "text" }),
        ...(this.kind === "seq2seq" ? { inputmode: "numeric" } : {}),
      });
      this.box.value = this.el.dataset.prompt || {
        "causal-lm": "", "masked-lm": "to be, or not to b_", "seq2seq": "31415",
        "classifier": "Now, if you love me, stay." }[this.kind] || "";
      this.box.addEventListener("input", () => {
        this.typedAt = performance.now();
        if (this.api.generated && this.api.generated.prompt !== this.box.value) this.clearSamples();
        clearTimeout(this.timer);
        this.timer = setTimeout(() => this.runNow().catch(() => {}), DEBOUNCE_MS);
      });
      const runButton = make("button", { type: "button", class: "tfs-live-run",
        onclick: () => this.runNow().catch(() => {}) }, "Run");
      const hint = {
        "causal-lm": `Type any text made of the training text's characters; the model reads the last ${info.n_ctx}.`,
        "masked-lm": `Write _ (or [MASK]) for each character the model should guess; at most ${info.n_ctx} characters.`,
        "seq2seq": `Type 1 to ${info.n_ctx - 1} digits.`,
        "classifier": `Type a line; the model reads its first ${info.n_ctx - 2} characters, between [CLS] and [SEP].`,
      }[this.kind];
      this.message = make("p", { class: "tfs-live-message", "aria-live": "polite" });
      this.body = make("div", { class: "tfs-live-body" },
        this.infoLine,
        make("label", { class: "tfs-live-label" }, make("span", { text: hint }), this.box),
        make("div", { class: "tfs-live-actions" }, runButton),
        this.message);
      this.el.append(this.body);
      if (this.kind === "causal-lm") this.buildCausal();
      else if (this.kind === "masked-lm") this.buildMasked();
      else if (this.kind === "seq2seq") this.buildSeq2seq();
      else if (this.kind === "classifier") this.buildClassifier();
      this.buildDownloads();
      this.updateInfo(null);
      // the attention map's tick labels depend on its width: redraw when the width changes
      if (window.ResizeObserver && this.heat) {
        let width = 0;
        let timer = null;
        new ResizeObserver(() => {
          const now = this.heat.clientWidth;
          if (Math.abs(now - width) < 8) return;
          width = now;
          clearTimeout(timer);
          timer = setTimeout(() => this.drawAttention(), 150);
        }).observe(this.heat);
      }
    }

    updateInfo(ms) {
      const p = (this.info.parameters || this.parameters).toLocaleString("en-US");
      const size = megabytes((this.info.files && this.info.files["model.onnx"]) || this.onnxBytes);
      this.infoLine.textContent = `This is the model trained above, running in your browser: ${p} parameters, ` +
        `${size} (ONNX)` + (ms === null ? "." : `, one forward pass took ${ms.toFixed(1)} ms.`);
    }

    /** Layer and head selects (plus extra choices) that redraw the attention map. */
    attentionControls(extra) {
      const info = this.info;
      const select = (label, options, cls) => {
        const s = make("select", { class: cls, onchange: () => this.drawAttention() },
          ...options.map(([value, text]) => make("option", { value: String(value), text })));
        return [make("label", {}, make("span", { text: label }), s), s];
      };
      const controls = make("div", { class: "tfs-live-controls" });
      if (extra) {
        const [label, s] = select("Attention", extra, "tfs-live-stack");
        this.stackSelect = s;
        s.addEventListener("change", () => this.fillLayers());
        controls.append(label);
      }
      const [layerLabel, layer] = select("Layer", [], "tfs-live-layer");
      const [headLabel, head] = select("Head", [...Array(info.n_heads).keys()].map((h) => [h, String(h)]), "tfs-live-head");
      this.layerSelect = layer;
      this.headSelect = head;
      controls.append(layerLabel, headLabel);
      this.fillLayers();
      return controls;
    }

    fillLayers() {
      const stack = this.stackSelect ? this.stackSelect.value : "attention";
      const n = stack === "encoder_attention" || stack === "attention" ? this.info.n_layers
        : (this.info.n_decoder_layers || this.info.n_layers);
      // counted from 0, as the chapters' module names (blocks.0.attn); the last layer first, where
      // the trained patterns are clearest (the encoder-decoder's alignment, for one)
      const keep = this.layerSelect.value === "" ? n - 1 : Math.min(Number(this.layerSelect.value), n - 1);
      this.layerSelect.replaceChildren(...[...Array(n).keys()].map((l) => make("option", { value: String(l), text: String(l) })));
      this.layerSelect.value = String(keep);
    }

    buildDownloads() {
      const link = (file) => make("a", { href: this.folder + file, download: `${this.name}-${file}` }, file);
      this.body.append(make("p", { class: "tfs-live-downloads" },
        "Download ", link("model.safetensors"), " and ", link("config.json"),
        ": in one folder, ", make("code", { text: "transformer_lib.export.load_pretrained(folder)" }),
        " loads them as the PyTorch model."));
    }

    // ---- running ---------------------------------------------------------------------------------
    /** Run the model once on the ids of `feeds` ({input name: ids}); times the forward pass. */
    async forward(feeds) {
      const ort = this.ort;
      const tensors = {};
      for (const [name, ids] of Object.entries(feeds)) {
        tensors[name] = new ort.Tensor("int64", BigInt64Array.from(ids, (i) => BigInt(i)), [1, ids.length]);
      }
      const start = performance.now();
      const outputs = await this.session.run(tensors);
      const ms = performance.now() - start;
      this.lastForwardMs = ms;
      return outputs;
    }

    /** One untimed run on the shortest input: start-up work that no timed pass should carry. */
    async warmUp() {
      const feeds = this.kind === "seq2seq" ? { src_ids: [0], tgt_ids: [this.info.special.bos || 0] }
        : { input_ids: [0] };
      await this.forward(feeds);
      this.lastForwardMs = null;
    }

    /** Queue `job` after the runs before it (one session runs one thing at a time). */
    enqueue(job) {
      const result = this.queue.then(job);
      this.queue = result.catch(() => {});
      return result;
    }

    runText(text) {
      if (this.api.state !== "ready") return Promise.reject(new Error(`the panel is ${this.api.state}, not ready`));
      if (text !== undefined) this.box.value = text;
      return this.runNow();
    }

    runNow() {
      clearTimeout(this.timer);
      return this.enqueue(async () => {
        const text = this.box.value;
        const typedAt = this.typedAt;
        this.message.textContent = "";
        this.message.className = "tfs-live-message";
        this.note = "";
        if (this.api.generated && this.api.generated.prompt !== text) this.clearSamples();
        try {
          const last = await { "causal-lm": () => this.runCausal(text), "masked-lm": () => this.runMasked(text),
            "seq2seq": () => this.runSeq2seq(text), "classifier": () => this.runClassifier(text) }[this.kind]();
          if (typedAt !== null && this.typedAt === typedAt) last.input_to_result_ms = performance.now() - typedAt;
          last.text = text;
          this.api.last = last;
          if (this.note) this.message.textContent = this.note;
          this.updateInfo(last.forward_ms);
          this.runs += 1;
          this.el.dataset.runs = String(this.runs);
          return last;
        } catch (error) {
          this.clearResult(); // the error replaces the result of an earlier text, not sits above it
          this.showError(error);
          throw error;
        }
      });
    }

    /** Empty what shows a result: plots, filled text, tables; the test hook's `last` too. */
    clearResult() {
      for (const div of [this.bars, this.heat]) {
        if (!div) continue;
        if (window.Plotly && div.classList.contains("js-plotly-plot")) Plotly.purge(div);
        div.replaceChildren();
        div.style.height = "";
        if (div.caption) div.caption.textContent = "";
      }
      for (const node of [this.filled, this.fills, this.output, this.steps]) if (node) node.replaceChildren();
      this.current = null;
      this.api.last = null;
    }

    /** Forget the samples of an earlier prompt. */
    clearSamples() {
      if (this.generatedText) this.generatedText.replaceChildren();
      this.api.generated = null;
    }

    /** "The model reads at most N characters: it read the first/last N of the M you typed." */
    cutNote(n, total, which) {
      return `The model reads at most ${n} characters: it read the ${which} ${n} of the ${total} you typed.`;
    }

    // ---- causal-lm: next-character probabilities, attention, sampling ------------------------
    buildCausal() {
      this.bars = plotArea();
      this.heat = plotArea();
      this.body.append(make("div", { class: "tfs-live-plots" },
        make("div", {}, this.bars.caption, this.bars),
        make("div", {}, this.attentionControls(null), this.heat.caption, this.heat)));
      const number = (label, value, attrs) => {
        const input = make("input", { type: "number", value: String(value), ...attrs });
        return [make("label", {}, make("span", { text: label }), input), input];
      };
      const [t, temperature] = number("Temperature (0: greedy)", 0.8, { min: "0", max: "5", step: "0.1" });
      const [k, topK] = number("Top-k (0: all)", 0, { min: "0", max: String(this.info.vocab_size), step: "1" });
      const [p, topP] = number("Top-p (1: off)", 0.95, { min: "0", max: "1", step: "0.05" });
      const [s, seed] = number("Seed", 1, { min: "0", step: "1" });
      const [n, length] = number("Characters", 200, { min: "1", max: "2000", step: "1" });
      this.sampling = { temperature, topK, topP, seed, length };
      this.generateButton = make("button", { type: "button", class: "tfs-live-generate",
        onclick: () => this.generate({}).catch(() => {}) }, "Generate");
      this.generatedText = make("pre", { class: "tfs-live-generated", "aria-live": "polite" });
      this.body.append(make("fieldset", { class: "tfs-live-sampling" },
        make("legend", { text: "Write on: sample one character at a time" }),
        make("div", { class: "tfs-live-controls" }, t, k, p, s, n, this.generateButton),
        this.generatedText));
    }

    async runCausal(text) {
      const info = this.info;
      const { ids: all, unknown } = encode(info, text);
      if (unknown.length) throw new Error(unknownMessage(unknown));
      if (!all.length) throw new Error("Type at least one character.");
      const ids = all.slice(-info.n_ctx);
      if (all.length > ids.length) this.note = this.cutNote(info.n_ctx, all.length, "last");
      const out = await this.forward({ input_ids: ids });
      const logits = rows(out.logits, ids.length - 1, ids.length)[0];
      const last = { input_ids: ids, probs: softmax(logits), attention: nested(out.attention),
        forward_ms: this.lastForwardMs };
      this.labels = ids.map((i) => shown(info.tokens[i]));
      drawBars(this.bars, last.probs, info, 10,
        `Next character after “${this.labels.slice(-12).join("")}” (the model's own probabilities, temperature 1)`);
      this.current = last;
      this.drawAttention();
      return last;
    }

    drawAttention() {
      const last = this.current;
      if (!last) return;
      const l = Number(this.layerSelect.value);
      const h = Number(this.headSelect.value);
      if (this.kind === "seq2seq") {
        const stack = this.stackSelect.value;
        const src = last.src_ids.map((i) => shown(this.info.tokens[i]));
        const dec = last.output_ids.slice(0, -1).map((i) => shown(this.info.tokens[i]));
        const made = last.output_ids.slice(1).map((i) => `→${shown(this.info.tokens[i])}`);
        const [rowsL, colsL, axes, name] = {
          cross_attention: [made, src, ["output", "source"], "Cross-attention: each output digit's look at the source"],
          encoder_attention: [src, src, ["query", "key"], "Encoder self-attention"],
          decoder_attention: [dec, dec, ["query", "key"], "Decoder self-attention (decoder inputs)"],
        }[stack];
        drawHeatmap(this.heat, last[stack][l][h], rowsL, colsL, `${name}, layer ${l}, head ${h}`, axes);
      } else {
        drawHeatmap(this.heat, last.attention[l][h], this.labels, this.labels,
          `Attention, layer ${l}, head ${h}`, ["query", "key"]);
      }
    }

    /** Sample `length` characters after the prompt (seeded: the same settings give the same text). */
    generate(options) {
      if (this.kind !== "causal-lm") return Promise.reject(new Error("only a causal-lm panel generates"));
      if (this.api.state !== "ready") return Promise.reject(new Error(`the panel is ${this.api.state}, not ready`));
      const s = this.sampling;
      const names = { temperature: s.temperature, top_k: s.topK, top_p: s.topP, seed: s.seed, length: s.length };
      for (const [key, input] of Object.entries(names)) if (options[key] !== undefined) input.value = String(options[key]);
      if (options.prompt !== undefined) this.box.value = options.prompt;
      const settings = { temperature: Number(s.temperature.value), topK: Math.max(0, Math.floor(Number(s.topK.value))),
        topP: Number(s.topP.value) };
      const seed = Math.floor(Number(s.seed.value)) || 0;
      const length = Math.max(1, Math.min(2000, Math.floor(Number(s.length.value)) || 1));
      return this.enqueue(async () => {
        const info = this.info;
        const prompt = this.box.value;
        const { ids: start, unknown } = encode(info, prompt);
        try {
          if (unknown.length) throw new Error(unknownMessage(unknown));
          if (!start.length) throw new Error("Type at least one character to start from.");
        } catch (error) {
          this.clearSamples();
          this.showError(error);
          throw error;
        }
        this.message.className = "tfs-live-message";
        this.message.textContent = start.length > info.n_ctx
          ? `${this.cutNote(info.n_ctx, start.length, "last")} It writes on from there.` : "";
        this.generateButton.disabled = true;
        const random = mulberry32(seed);
        const ids = [];
        const promptSpan = make("span", { text: prompt });
        const continuation = make("mark", {});
        this.generatedText.replaceChildren(promptSpan, continuation);
        try {
          for (let n = 0; n < length; n++) {
            const context = start.concat(ids).slice(-info.n_ctx);
            const out = await this.forward({ input_ids: context });
            const logits = out.logits.data.subarray((context.length - 1) * info.vocab_size, context.length * info.vocab_size);
            ids.push(sample(logits, settings, random));
            continuation.textContent = ids.map((i) => info.tokens[i]).join("");
          }
        } finally {
          this.generateButton.disabled = false;
        }
        this.updateInfo(this.lastForwardMs);
        const result = { text: ids.map((i) => info.tokens[i]).join(""), ids, prompt, seed, length, ...settings };
        this.api.generated = result;
        return result;
      });
    }

    // ---- masked-lm: fill in the blanks -------------------------------------------------------
    buildMasked() {
      this.filled = make("p", { class: "tfs-live-filled" });
      this.fills = make("div", { class: "tfs-live-fills" });
      this.heat = plotArea();
      this.body.append(this.filled, this.fills, make("div", { class: "tfs-live-plots tfs-live-one" },
        make("div", {}, this.attentionControls(null), this.heat.caption, this.heat)));
    }

    async runMasked(text) {
      const info = this.info;
      const mask = info.special.mask;
      let { ids, unknown } = encode(info, text, mask);
      if (unknown.length) throw new Error(unknownMessage(unknown));
      if (!ids.length) throw new Error("Type some text, with _ for each character to guess.");
      if (ids.length > info.n_ctx) {
        this.note = this.cutNote(info.n_ctx, ids.length, "first");
        ids = ids.slice(0, info.n_ctx);
      }
      const out = await this.forward({ input_ids: ids });
      const positions = ids.map((id, i) => (id === mask ? i : -1)).filter((i) => i >= 0);
      const allLogits = rows(out.logits, 0, ids.length);
      const probs = positions.map((i) => softmax(allLogits[i]));
      const last = { input_ids: ids, mask_positions: positions, probs, attention: nested(out.attention),
        forward_ms: this.lastForwardMs };
      // the text with each blank filled by its likeliest character, and the top 5 of each blank
      this.filled.replaceChildren(...ids.map((id, i) => {
        const k = positions.indexOf(i);
        return k < 0 ? document.createTextNode(info.tokens[id])
          : make("mark", { title: `blank ${k + 1}` }, info.tokens[argmax(probs[k].map((v, j) => (j === mask ? -1 : v)))]);
      }));
      const list = make("ol", { class: "tfs-live-guesses" });
      probs.forEach((p, k) => {
        // [MASK] itself is not a character the blank could be (the chapter's fill_in skips it too)
        const top = p.map((_, i) => i).filter((i) => i !== mask).sort((a, b) => p[b] - p[a]).slice(0, 5);
        list.append(make("li", {}, make("span", { class: "tfs-live-guess-label", text: `blank ${k + 1} (position ${positions[k]}):` }),
          ...top.map((i) => make("span", { class: "tfs-live-guess", style: `--p: ${(100 * p[i]).toFixed(1)}%` },
            make("code", { text: shown(info.tokens[i]) }), ` ${(100 * p[i]).toFixed(1)}%`))));
      });
      this.fills.replaceChildren(positions.length ? list
        : make("p", { text: "No blank in the text: write _ where the model should guess a character." }));
      this.labels = ids.map((i) => (i === mask ? "▮" : shown(info.tokens[i])));
      this.current = last;
      this.drawAttention();
      return last;
    }

    // ---- classifier: [CLS] line [SEP] -> the probability of each class -----------------------
    buildClassifier() {
      this.filled = make("p", { class: "tfs-live-filled tfs-live-verdict" });
      this.bars = plotArea();
      this.heat = plotArea();
      this.body.append(this.filled, make("div", { class: "tfs-live-plots" },
        make("div", {}, this.bars.caption, this.bars),
        make("div", {}, this.attentionControls(null), this.heat.caption, this.heat)));
    }

    async runClassifier(text) {
      const info = this.info;
      const { cls, sep } = info.special;
      const { ids: chars, unknown } = encode(info, text);
      if (unknown.length) throw new Error(unknownMessage(unknown));
      if (!chars.length) throw new Error("Type a line for the model to classify.");
      const room = info.n_ctx - 2; // [CLS] and [SEP] take two of the model's positions
      // as the chapter's encode_lines: a long line keeps its start
      if (chars.length > room) this.note = this.cutNote(room, chars.length, "first") + " Its end is left out.";
      const ids = [cls, ...chars.slice(0, room), sep];
      const out = await this.forward({ input_ids: ids });
      const logits = Array.from(out.logits.data); // (1, n_classes): one row for the whole line
      const probs = softmax(logits);
      const predicted = argmax(probs);
      const last = { input_ids: ids, logits, probs, predicted, attention: nested(out.attention),
        forward_ms: this.lastForwardMs };
      const names = info.labels;
      this.filled.replaceChildren("Likeliest: ", make("mark", { text: names[predicted] }),
        ` (${(100 * probs[predicted]).toFixed(1)}%)`);
      drawBars(this.bars, probs, info, names.length, "The model's probability of each class for this line",
        names);
      this.labels = ids.map((i) => shown(info.tokens[i]));
      this.current = last;
      this.drawAttention();
      return last;
    }

    // ---- seq2seq: greedy decoding, cross-attention -------------------------------------------
    buildSeq2seq() {
      this.output = make("p", { class: "tfs-live-filled" });
      this.steps = make("div", { class: "tfs-live-fills" });
      this.heat = plotArea();
      this.body.append(this.output, this.steps, make("div", { class: "tfs-live-plots tfs-live-one" },
        make("div", {}, this.attentionControls([["cross_attention", "cross (output → source)"],
          ["encoder_attention", "encoder self-attention"], ["decoder_attention", "decoder self-attention"]]),
        this.heat.caption, this.heat)));
    }

    async runSeq2seq(text) {
      const info = this.info;
      const { bos, eos } = info.special;
      const digits = text.trim();
      const { ids: src, unknown } = encode(info, digits);
      if (unknown.length) throw new Error(unknownMessage(unknown));
      if (!src.length || src.length > info.n_ctx - 1) {
        throw new Error(`Type 1 to ${info.n_ctx - 1} digits` + (src.length ? `: you typed ${src.length}.` : "."));
      }
      const output = [bos];
      let out = null;
      let total = 0;
      for (let step = 0; step <= src.length; step++) { // at most S + 1 tokens: the digits, then <eos>
        out = await this.forward({ src_ids: src, tgt_ids: output });
        total += this.lastForwardMs;
        const next = argmax(rows(out.logits, output.length - 1, output.length)[0]);
        output.push(next);
        if (next === eos) break;
      }
      // `out` is the final run, on every output token but the last: its rows give each step
      const stepProbs = rows(out.logits, 0, output.length - 1).map(softmax);
      const last = { src_ids: src, output_ids: output, step_probs: stepProbs,
        encoder_attention: nested(out.encoder_attention), decoder_attention: nested(out.decoder_attention),
        cross_attention: nested(out.cross_attention), forward_ms: this.lastForwardMs, decode_ms: total };
      const made = output.slice(1).filter((i) => i !== eos).map((i) => info.tokens[i]).join("");
      const expected = [...digits].reverse().join("");
      this.output.replaceChildren("Output: ", make("mark", { text: made || "(nothing)" }),
        made === expected ? " — the digits reversed." : ` — the digits reversed would be ${expected}.`,
        output[output.length - 1] === eos ? "" : ` The model never produced ${info.tokens[eos]}: decoding stopped after ${src.length + 1} tokens.`);
      const table = make("table", { class: "tfs-live-table" },
        make("thead", {}, make("tr", {}, make("th", { text: "Step" }),
          ...output.slice(1).map((_, k) => make("th", { text: String(k + 1) })))),
        make("tbody", {},
          make("tr", {}, make("th", { text: "token" }),
            ...output.slice(1).map((i) => make("td", {}, make("code", { text: info.tokens[i] })))),
          make("tr", {}, make("th", { text: "probability" }),
            ...output.slice(1).map((i, k) => make("td", { style: `--p: ${(100 * stepProbs[k][i]).toFixed(1)}%`,
              text: `${(100 * stepProbs[k][i]).toFixed(1)}%` })))));
      this.steps.replaceChildren(make("div", { class: "tfs-live-scroll" }, table));
      this.current = last;
      this.drawAttention();
      return last;
    }
  }

  // ---- compare: two or more causal-lm models side by side on the same text (chapter 10) ----------
  /* <div class="tfs-live tfs-live-compare" data-models="ch10-gpt2 ch10-llama" data-labels='["GPT-2", ...]'
   * data-val-losses="[1.61, 1.55]" data-onnx-bytes="..." data-parameters="..." data-prompt="...">
   * (transformer_lib/viz/live.py, live_compare). One text box and one set of sampling controls for
   * all; each model's column shows its name and validation loss, its timing line, its next-character
   * bars, its attention map (one layer and head select for all) and its samples. Columns sit side by
   * side and stack on a phone (CSS grid). Test hook: el.tfsLive = {state, last, generated, run(text),
   * generate(opts), open()}, where last.models[i] and generated.models[i] follow data-models' order. */
  class ComparePanel {
    constructor(el) {
      this.el = el;
      const list = (key) => (el.dataset[key] || "").split(/\s+/).filter(Boolean);
      this.names = list("models");
      this.labels = JSON.parse(el.dataset.labels || "[]");
      this.losses = JSON.parse(el.dataset.valLosses || "[]");
      this.onnxBytes = list("onnxBytes").map(Number);
      this.parameters = list("parameters").map(Number);
      if (this.names.length < 2 || this.labels.length !== this.names.length) {
        throw new Error(`a comparison needs 2 or more models, each with a label (got ${this.names.length})`);
      }
      this.models = this.names.map((name, i) => ({ name, label: this.labels[i], loss: this.losses[i],
        folder: `${STATIC}models/${encodeURIComponent(name)}/` }));
      this.runs = 0;
      this.queue = Promise.resolve();
      this.timer = null;
      this.typedAt = null;
      this.api = { state: "closed", last: null, generated: null,
        run: (text) => this.runText(text), generate: (options) => this.generate(options || {}),
        open: () => this.open() };
      el.tfsLive = this.api;
      el.dataset.runs = "0";
      this.setState("closed");
      this.buildClosed();
    }

    setState(state) {
      this.api.state = state;
      this.el.dataset.state = state;
    }

    modelLabel(m) {
      return `${m.label}` + (Number.isFinite(m.loss) ? ` · validation loss ${m.loss.toFixed(3)}` : "");
    }

    buildClosed() {
      const fallback = this.el.querySelector(".tfs-live-fallback");
      if (fallback) fallback.hidden = true;
      const total = this.onnxBytes.reduce((a, b) => a + b, 0);
      const each = this.models.map((m, i) => `${m.label}` +
        (this.parameters[i] ? ` (${this.parameters[i].toLocaleString("en-US")} parameters)` : "")).join(" and ");
      this.openButton = make("button", { type: "button", class: "tfs-live-open", onclick: () => this.open() },
        "Open the live models");
      this.status = make("div", { class: "tfs-live-status", role: "status", "aria-live": "polite" });
      this.closed = make("div", { class: "tfs-live-closed" },
        make("p", { class: "tfs-live-title", text: "Try the models trained above, side by side, in your browser" }),
        make("p", { class: "tfs-live-intro", text:
          `These are this chapter's trained models: ${each}. Both read the text you type and predict the ` +
          "next character, and write on from it with the same random draws. " +
          `Opening them downloads the models (${megabytes(total)} together) and, once for the whole book, ` +
          `ONNX Runtime Web, which runs them (${megabytes(RUNTIME_BYTES)}).` }),
        this.openButton);
      this.el.append(this.closed, this.status);
    }

    showError(error) {
      this.message.textContent = error && error.message ? error.message : String(error);
      this.message.className = "tfs-live-message tfs-live-error";
    }

    async open() {
      if (this.api.state === "loading" || this.api.state === "ready") return this.opening;
      this.setState("loading");
      this.openButton.disabled = true;
      const progress = make("progress", { max: "1", value: "0" });
      const line = make("span", { class: "tfs-live-progress-text" });
      this.status.replaceChildren(progress, line);
      const total = this.onnxBytes.reduce((a, b) => a + b, 0);
      const seen = { runtime: [0, RUNTIME_BYTES], models: this.models.map((_, i) => [0, this.onnxBytes[i] || 0]) };
      const update = () => {
        const [r, rt] = seen.runtime;
        const m = seen.models.reduce((a, x) => a + x[0], 0);
        const mt = Math.max(total, seen.models.reduce((a, x) => a + x[1], 0));
        const pct = (a, b) => `${Math.min(100, Math.round((100 * a) / Math.max(b, 1)))}%`;
        progress.value = Math.min(1, (r + m) / Math.max(rt + mt, 1));
        line.textContent = `Downloading ONNX Runtime ${megabytes(r)} of ${megabytes(rt)} (${pct(r, rt)}), ` +
          `the models ${megabytes(m)} of ${megabytes(mt)} (${pct(m, mt)})`;
      };
      update();
      this.opening = (async () => {
        try {
          const loads = this.models.map((m, i) => Promise.all([
            fetch(m.folder + "browser.json").then((r) => {
              if (!r.ok) throw new Error(`could not load ${m.folder}browser.json (HTTP ${r.status})`);
              return r.json();
            }),
            fetchBytes(m.folder + "model.onnx", (received, size) => {
              seen.models[i] = [received, Math.max(size, received)]; update();
            }),
          ]));
          const [ort, ...loaded] = await Promise.all([
            loadRuntime((received, size) => { seen.runtime = [received, Math.max(size, received)]; update(); }),
            ...loads]);
          line.textContent = "Starting the models…";
          this.ort = ort;
          for (const [i, [info, bytes]] of loaded.entries()) {
            const m = this.models[i];
            if (info.kind !== "causal-lm") throw new Error(`${m.name} is a ${info.kind} model, not causal-lm`);
            m.info = { ...info, ids: new Map(info.tokens.map((t, k) => [t, k])) };
            m.session = await ort.InferenceSession.create(bytes, {
              executionProviders: ["wasm"], graphOptimizationLevel: "all" });
            await m.session.run({ input_ids: new ort.Tensor("int64", BigInt64Array.from([0n]), [1, 1]) });
          } // (that untimed run prepares the runtime's kernels, so no timing line reports start-up)
          this.status.replaceChildren();
          this.buildOpen();
          this.setState("ready");
          await this.runNow().catch(() => {});
        } catch (error) {
          this.setState("error");
          this.openButton.disabled = false;
          this.openButton.textContent = "Try again";
          this.status.replaceChildren(make("span", { class: "tfs-live-error",
            text: `The live models could not start: ${error && error.message ? error.message : error}` }));
        }
      })();
      return this.opening;
    }

    buildOpen() {
      this.closed.querySelector(".tfs-live-intro").remove();
      this.openButton.remove();
      const n = Math.min(...this.models.map((m) => m.info.n_ctx));
      this.box = make("textarea", { class: "tfs-live-input", spellcheck: "false", autocomplete: "off",
        autocapitalize: "off", "aria-label": "Text for the models", rows: "3" });
      this.box.value = this.el.dataset.prompt || "";
      this.box.addEventListener("input", () => {
        this.typedAt = performance.now();
        if (this.api.generated && this.api.generated.prompt !== this.box.value) this.clearSamples();
        clearTimeout(this.timer);
        this.timer = setTimeout(() => this.runNow().catch(() => {}), DEBOUNCE_MS);
      });
      this.message = make("p", { class: "tfs-live-message", "aria-live": "polite" });
      const select = (label, count, cls, value) => {
        const s = make("select", { class: cls, onchange: () => this.drawAttention() },
          ...[...Array(count).keys()].map((k) => make("option", { value: String(k), text: String(k) })));
        s.value = String(value);
        return [make("label", {}, make("span", { text: label }), s), s];
      };
      const layers = Math.min(...this.models.map((m) => m.info.n_layers));
      const heads = Math.min(...this.models.map((m) => m.info.n_heads));
      const [layerLabel, layer] = select("Layer", layers, "tfs-live-layer", layers - 1);
      const [headLabel, head] = select("Head", heads, "tfs-live-head", 0);
      this.layerSelect = layer;
      this.headSelect = head;
      const columns = make("div", { class: "tfs-live-columns" });
      for (const m of this.models) {
        m.bars = plotArea();
        m.heat = plotArea();
        m.infoLine = make("p", { class: "tfs-live-info" });
        m.generatedText = make("pre", { class: "tfs-live-generated", "aria-live": "polite" });
        const link = (file) => make("a", { href: m.folder + file, download: `${m.name}-${file}` }, file);
        m.column = make("section", { class: "tfs-live-column", "data-model": m.name },
          make("p", { class: "tfs-live-model-name", text: this.modelLabel(m) }), m.infoLine,
          m.bars.caption, m.bars, m.heat.caption, m.heat, m.generatedText,
          make("p", { class: "tfs-live-downloads" }, "Download ", link("model.safetensors"), " and ",
            link("config.json"), " (", make("code", { text: "transformer_lib.export.load_pretrained" }), ")."));
        columns.append(m.column);
        this.updateInfo(m, null);
      }
      const number = (label, value, attrs) => {
        const input = make("input", { type: "number", value: String(value), ...attrs });
        return [make("label", {}, make("span", { text: label }), input), input];
      };
      const vocab = Math.min(...this.models.map((m) => m.info.vocab_size));
      const [t, temperature] = number("Temperature (0: greedy)", 0.8, { min: "0", max: "5", step: "0.1" });
      const [k, topK] = number("Top-k (0: all)", 0, { min: "0", max: String(vocab), step: "1" });
      const [p, topP] = number("Top-p (1: off)", 0.95, { min: "0", max: "1", step: "0.05" });
      const [s, seed] = number("Seed", 1, { min: "0", step: "1" });
      const [c, length] = number("Characters", 200, { min: "1", max: "2000", step: "1" });
      this.sampling = { temperature, topK, topP, seed, length };
      this.generateButton = make("button", { type: "button", class: "tfs-live-generate",
        onclick: () => this.generate({}).catch(() => {}) }, "Generate with each model");
      this.body = make("div", { class: "tfs-live-body" },
        make("label", { class: "tfs-live-label" }, make("span", { text:
          `Type any text made of the training text's characters; each model reads the last ${n}.` }), this.box),
        make("div", { class: "tfs-live-actions" }, make("button", { type: "button", class: "tfs-live-run",
          onclick: () => this.runNow().catch(() => {}) }, "Run both")),
        this.message,
        make("fieldset", { class: "tfs-live-sampling" },
          make("legend", { text: "Write on: each model samples one character at a time, with the same random draws" }),
          make("div", { class: "tfs-live-controls" }, t, k, p, s, c, this.generateButton)),
        make("div", { class: "tfs-live-controls" }, make("span", { class: "tfs-live-controls-note",
          text: "Attention map of each model:" }), layerLabel, headLabel),
        columns);
      this.el.append(this.body);
      if (window.ResizeObserver) {
        let width = 0;
        let timer = null;
        new ResizeObserver(() => {
          const now = this.models[0].heat.clientWidth;
          if (Math.abs(now - width) < 8) return;
          width = now;
          clearTimeout(timer);
          timer = setTimeout(() => this.drawAttention(), 150);
        }).observe(this.models[0].heat);
      }
    }

    updateInfo(m, ms) {
      const size = megabytes((m.info.files && m.info.files["model.onnx"]) || 0);
      m.infoLine.textContent = `Running in your browser: ${m.info.parameters.toLocaleString("en-US")} ` +
        `parameters, ${size} (ONNX)` + (ms === null ? "." : `, one forward pass took ${ms.toFixed(1)} ms.`);
    }

    async forward(m, ids) {
      const tensor = new this.ort.Tensor("int64", BigInt64Array.from(ids, (i) => BigInt(i)), [1, ids.length]);
      const start = performance.now();
      const out = await m.session.run({ input_ids: tensor });
      m.lastForwardMs = performance.now() - start;
      return out;
    }

    enqueue(job) {
      const result = this.queue.then(job);
      this.queue = result.catch(() => {});
      return result;
    }

    /** Every model's ids of `text`, or an error that names what no model can read. */
    encodeAll(text, empty) {
      const encoded = this.models.map((m) => encode(m.info, text));
      const unknown = [...new Set(encoded.flatMap((e) => e.unknown))];
      if (unknown.length) throw new Error(unknownMessage(unknown));
      if (!encoded[0].ids.length) throw new Error(empty);
      return encoded.map((e) => e.ids);
    }

    cutNote(total) {
      const sizes = [...new Set(this.models.map((m) => m.info.n_ctx))];
      if (total <= Math.min(...sizes)) return "";
      if (sizes.length === 1) {
        return `The models read at most ${sizes[0]} characters: each read the last ${sizes[0]} of the ` +
          `${total} you typed.`;
      }
      return this.models.filter((m) => total > m.info.n_ctx).map((m) =>
        `${m.label} reads at most ${m.info.n_ctx} characters: it read the last ${m.info.n_ctx} of the ${total} you typed.`)
        .join(" ");
    }

    runText(text) {
      if (this.api.state !== "ready") return Promise.reject(new Error(`the panel is ${this.api.state}, not ready`));
      if (text !== undefined) this.box.value = text;
      return this.runNow();
    }

    runNow() {
      clearTimeout(this.timer);
      return this.enqueue(async () => {
        const text = this.box.value;
        const typedAt = this.typedAt;
        this.message.textContent = "";
        this.message.className = "tfs-live-message";
        if (this.api.generated && this.api.generated.prompt !== text) this.clearSamples();
        try {
          const all = this.encodeAll(text, "Type at least one character.");
          const models = [];
          for (const [i, m] of this.models.entries()) {
            const ids = all[i].slice(-m.info.n_ctx);
            const out = await this.forward(m, ids);
            const logits = rows(out.logits, ids.length - 1, ids.length)[0];
            m.current = { name: m.name, label: m.label, input_ids: ids, probs: softmax(logits),
              attention: nested(out.attention), forward_ms: m.lastForwardMs };
            m.tokens = ids.map((id) => shown(m.info.tokens[id]));
            drawBars(m.bars, m.current.probs, m.info, 10,
              `Next character after “${m.tokens.slice(-12).join("")}” (temperature 1)`);
            this.updateInfo(m, m.lastForwardMs);
            models.push(m.current);
          }
          this.drawAttention();
          this.message.textContent = this.cutNote(all[0].length);
          const last = { text, models };
          if (typedAt !== null && this.typedAt === typedAt) last.input_to_result_ms = performance.now() - typedAt;
          this.api.last = last;
          this.runs += 1;
          this.el.dataset.runs = String(this.runs);
          return last;
        } catch (error) {
          this.clearResult(); // the error replaces every model's result for the text before
          this.showError(error);
          throw error;
        }
      });
    }

    drawAttention() {
      const l = Number(this.layerSelect.value);
      const h = Number(this.headSelect.value);
      for (const m of this.models) {
        if (!m.current) continue;
        drawHeatmap(m.heat, m.current.attention[l][h], m.tokens, m.tokens,
          `${m.label}: attention, layer ${l}, head ${h}`, ["query", "key"]);
      }
    }

    clearResult() {
      for (const m of this.models) {
        for (const div of [m.bars, m.heat]) {
          if (window.Plotly && div.classList.contains("js-plotly-plot")) Plotly.purge(div);
          div.replaceChildren();
          div.style.height = "";
          div.caption.textContent = "";
        }
        m.current = null;
      }
      this.api.last = null;
    }

    clearSamples() {
      for (const m of this.models) m.generatedText.replaceChildren();
      this.api.generated = null;
    }

    /** Each model samples `length` characters after the prompt, each with the same seeded draws. */
    generate(options) {
      if (this.api.state !== "ready") return Promise.reject(new Error(`the panel is ${this.api.state}, not ready`));
      const s = this.sampling;
      const names = { temperature: s.temperature, top_k: s.topK, top_p: s.topP, seed: s.seed, length: s.length };
      for (const [key, input] of Object.entries(names)) if (options[key] !== undefined) input.value = String(options[key]);
      if (options.prompt !== undefined) this.box.value = options.prompt;
      const settings = { temperature: Number(s.temperature.value), topK: Math.max(0, Math.floor(Number(s.topK.value))),
        topP: Number(s.topP.value) };
      const seed = Math.floor(Number(s.seed.value)) || 0;
      const length = Math.max(1, Math.min(2000, Math.floor(Number(s.length.value)) || 1));
      return this.enqueue(async () => {
        const prompt = this.box.value;
        let starts;
        try {
          starts = this.encodeAll(prompt, "Type at least one character to start from.");
        } catch (error) {
          this.clearSamples();
          this.showError(error);
          throw error;
        }
        this.message.className = "tfs-live-message";
        const cut = this.cutNote(starts[0].length);
        this.message.textContent = cut ? `${cut} They write on from there.` : "";
        this.generateButton.disabled = true;
        const runs = this.models.map((m, i) => {
          const continuation = make("mark", {});
          m.generatedText.replaceChildren(make("span", { text: prompt }), continuation);
          return { m, start: starts[i], ids: [], random: mulberry32(seed), continuation };
        });
        try {
          for (let n = 0; n < length; n++) { // one character of each model in turn: they fill in together
            for (const r of runs) {
              const context = r.start.concat(r.ids).slice(-r.m.info.n_ctx);
              const out = await this.forward(r.m, context);
              const V = r.m.info.vocab_size;
              r.ids.push(sample(out.logits.data.subarray((context.length - 1) * V, context.length * V), settings, r.random));
              r.continuation.textContent = r.ids.map((i) => r.m.info.tokens[i]).join("");
            }
          }
        } finally {
          this.generateButton.disabled = false;
        }
        for (const r of runs) this.updateInfo(r.m, r.m.lastForwardMs);
        const result = { prompt, seed, length, ...settings, models: runs.map((r) => ({ name: r.m.name,
          label: r.m.label, ids: r.ids, text: r.ids.map((i) => r.m.info.tokens[i]).join("") })) };
        this.api.generated = result;
        return result;
      });
    }
  }

  function initCompare() {
    for (const el of document.querySelectorAll("div.tfs-live-compare[data-models]")) {
      if (el.tfsLive) continue;
      try {
        new ComparePanel(el);
      } catch (error) {
        el.append(make("p", { class: "tfs-live-error", text: `The live panel failed: ${error.message}` }));
      }
    }
  }

  function init() {
    for (const el of document.querySelectorAll("div.tfs-live[data-model]")) {
      if (el.tfsLive) continue;
      try {
        new Panel(el);
      } catch (error) {
        el.append(make("p", { class: "tfs-live-error", text: `The live panel failed: ${error.message}` }));
      }
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", initCompare);
  else initCompare();
})();
