// Helpers that tests/test_browser.py runs in the page (prepended to each script it executes).
// Figures are the page's plotly graph divs, in document order, addressed by their index.
var tfs = {
  figures: () => [...document.querySelectorAll(".plotly-graph-div")],

  // Drawn data in a figure: traces (scatter, bar), heatmap images, and a non-empty SVG.
  rendered: (gd) => {
    const svg = gd.querySelector("svg.main-svg");
    return !!(svg && svg.getBoundingClientRect().width > 0 && gd._fullData && gd._fullData.length > 0 &&
              gd.querySelectorAll("svg.main-svg .trace, svg.main-svg g.hm, svg.main-svg image").length > 0);
  },

  // Wait until the page has loaded, its figures are drawn and MathJax has typeset it; report.
  settle: async (done) => {
    const deadline = Date.now() + 45000, sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    while (document.readyState !== "complete" && Date.now() < deadline) await sleep(100);
    while (!tfs.figures().every(tfs.rendered) && Date.now() < deadline) await sleep(100);
    const mathjax = !!(window.MathJax && MathJax.startup && MathJax.startup.promise);
    if (mathjax) await Promise.race([MathJax.startup.promise, sleep(Math.max(0, deadline - Date.now()))]);
    const figures = tfs.figures(), controls = [];
    figures.forEach((gd, i) => {
      const L = gd._fullLayout || {};
      if ((L.sliders || []).some((s) => s.visible)) controls.push([i, "slider"]);
      if ((L.updatemenus || []).some((m) => m.visible)) controls.push([i, "menu"]);
    });
    const math = [...document.querySelectorAll(".math")];
    done({
      figures: figures.length,
      rendered: figures.map(tfs.rendered),
      controls,
      math: {
        mathjax,
        total: math.length,
        typeset: math.filter((m) => m.querySelector("mjx-container")).length,
        errors: document.querySelectorAll("mjx-merror").length,
      },
      links: {
        colab: [...document.querySelectorAll('a[href*="colab.research.google.com"]')].map((a) => a.href),
        download: [...document.querySelectorAll("a.btn-download-source-button")].map((a) => a.href),
      },
    });
  },

  // What the figure draws, less its own controls and hover labels (which change on any touch).
  signature: (i) => {
    return [...tfs.figures()[i].querySelectorAll("svg.main-svg")].map((svg) => {
      const copy = svg.cloneNode(true);
      // hover draws its labels in .hoverlayer, spike lines, and clip paths with ids "hover..."
      copy.querySelectorAll(".menulayer, .slider-container, .hoverlayer, .spikeline, [id^='hover']")
        .forEach((n) => n.remove());
      return copy.innerHTML;
    }).join("\n");
  },

  // The first element matching `selector` in figure i, scrolled to the middle of the window.
  element: (i, selector) => {
    const gd = tfs.figures()[i];
    gd.scrollIntoView({ block: "center" });
    return gd.querySelector(selector);
  },

  // Where to click on figure i's first slider rail so that its step changes: right end unless
  // the active step is already in the right half. Returns [rail, offset from its centre].
  sliderTarget: (i) => {
    const rail = tfs.element(i, ".slider-rail-touch-rect");
    const s = tfs.figures()[i]._fullLayout.sliders.find((x) => x.visible);
    const half = rail.getBoundingClientRect().width / 2 - 4;
    return [rail, s.active < (s.steps.length - 1) / 2 ? half : -half];
  },

  // The header of figure i's first menu if it is a dropdown (a click opens it), else null.
  menuHeader: (i) => {
    const group = tfs.element(i, ".updatemenu-header-group");
    return group && group.__data__.type === "dropdown" ? group.querySelector(".updatemenu-header") : null;
  },

  // A button of figure i's first menu other than the active one (after a dropdown was opened).
  inactiveButton: (i) => {
    const gd = tfs.figures()[i];
    const group = gd.querySelector(".updatemenu-header-group");
    const menu = group && group.__data__;
    if (!menu) return null;
    const buttons = menu.type === "dropdown"
      ? [...gd.querySelectorAll(".updatemenu-dropdown-button-group .updatemenu-dropdown-button")]
      : [...group.querySelectorAll(".updatemenu-button")];
    return buttons.find((b) => b.__data__ && b.__data__._index !== menu.active) || null;
  },

  // Elements of figure i to put the mouse on: a few bars or markers, a heatmap, the plot area.
  hoverTargets: (i) => {
    const gd = tfs.figures()[i];
    gd.scrollIntoView({ block: "center" });
    const points = [...gd.querySelectorAll(".point")];
    const some = [points[0], points[Math.floor(points.length / 2)]].filter(Boolean);
    return [...some, ...gd.querySelectorAll("g.hm image, .nsewdrag")].slice(0, 4);
  },

  hovering: (i) => {
    const layer = tfs.figures()[i].querySelector(".hoverlayer");
    return !!(layer && layer.childElementCount > 0);
  },

  // ---- what a reader sees: raw Markdown, cut-off code and equations, overlapping figure parts ----

  // Text of cell outputs that is Markdown or TeX left unrendered: a table's |---| row (Sphinx turns
  // --- into an em dash), $...$ or \(...\) never typeset, **bold** markers. Code listings and
  // printed text (<pre>) are skipped for Markdown, but TeX commands between dollars count there too.
  rawOutputs: () => {
    const found = [];
    const markdown = [/\|\s*:?[-\u2013\u2014]{1,3}:?\s*\|/, /(^|[^\w$])\$[^$\s][^$]*[^$\s\\]\$(?!\w)/,
                      /\\\(|\\\[/, /\*\*\S[^*]*\*\*/];
    const texInPre = /\$[^$\n]*\\[a-zA-Z]+[^$\n]*\$/;
    for (const out of document.querySelectorAll(".cell_output")) {
      const walker = document.createTreeWalker(out, NodeFilter.SHOW_TEXT);
      let text = "", pre = "";
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        const p = n.parentElement;
        if (p.closest("mjx-container, script, style, .plotly-graph-div, .MathJax")) continue;
        if (p.closest("pre, code")) pre += n.textContent; else text += n.textContent;
      }
      const hit = markdown.find((r) => r.test(text)) || (texInPre.test(pre) ? texInPre : null);
      if (hit) {
        const m = (hit.test(text) ? text : pre).match(hit);
        const at = Math.max(0, m.index - 40);
        found.push((hit.test(text) ? text : pre).slice(at, at + 120).replace(/\s+/g, " "));
      }
    }
    return found;
  },

  // Outputs that are only a bare value a reader has no use for: a check's True/False, a None.
  strayOutputs: () => [...document.querySelectorAll(".cell_output .output.text_plain")]
    .filter((o) => /^(True|False|None)$/.test(o.textContent.trim())).map(tfs.where),

  // Where an element is, for reports: the id of its section and its first characters.
  where: (el) => {
    const section = el.closest("section[id]");
    return `${section ? "#" + section.id : "page"}: ${el.textContent.trim().slice(0, 60).replace(/\s+/g, " ")}`;
  },

  // After a change of width: wait until plotly has laid every resizable figure out again.
  resized: async (done) => {
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms)), deadline = Date.now() + 8000;
    await sleep(300);
    // figure-fit.js lays a figure out again in a column narrower than 600 px (gd._tfsFit)
    const fits = (gd) => {
      if (!gd._fullLayout) return true;
      if (gd._tfsFit && gd._tfsFit.busy) return false;
      return (!gd._fullLayout.autosize && !gd._tfsFit) ||
        Math.abs(gd._fullLayout.width - gd.parentElement.getBoundingClientRect().width) < 2;
    };
    while (!tfs.figures().every(fits) && Date.now() < deadline) await sleep(100);
    await sleep(300);
    done();
  },

  // Code a reader reads as code: cells' source, code in the prose, library listings (show_source).
  // Printed output is text and may wrap at any width.
  codeBlocks: () => [...document.querySelectorAll("article div.highlight pre")]
    .filter((pre) => !pre.closest(".cell_output") || pre.closest(".tfs-listing")),

  // Code blocks whose longest line is wider than the block, laid out without wrapping: each line
  // must fit the column as it is (the book's CSS wraps long lines only on narrow screens).
  cutCode: () => {
    const cut = [];
    for (const pre of tfs.codeBlocks()) {
      const old = pre.style.whiteSpace;
      pre.style.whiteSpace = "pre";
      const over = pre.scrollWidth - pre.clientWidth;
      pre.style.whiteSpace = old;
      if (over > 1) cut.push({ over, where: tfs.where(pre) });
    }
    return cut;
  },

  // Anything that a reader cannot see all of, with the book's own CSS, at this width: code blocks
  // that scroll or clip, display equations wider than their box that cannot be scrolled, and a page
  // wider than the window.
  clipped: () => {
    const out = [];
    // printed output may scroll (columns) or wraps; a diagram (.tfs-columns) scrolls; code wraps
    for (const pre of tfs.codeBlocks().filter((p) => !p.closest(".tfs-columns")))
      if (pre.scrollWidth - pre.clientWidth > 1) out.push({ kind: "code", where: tfs.where(pre) });
    for (const eq of tfs.wideEquations()) {  // wider than its box: it must scroll
      const scrolls = ["auto", "scroll"].includes(getComputedStyle(eq.box).overflowX) ||
        ["auto", "scroll"].includes(getComputedStyle(eq.box.parentElement).overflowX);
      if (!scrolls) out.push({ kind: "equation", over: eq.over, where: eq.where });
    }
    // a figure fits its column at every width (figure-fit.js lays it out again on a phone), and the
    // boxes around it are as tall as it is
    for (const gd of tfs.figures()) {
      const box = gd.getBoundingClientRect(), column = gd.closest("article").getBoundingClientRect();
      if (box.right - column.right > 1 || column.left - box.left > 1)
        out.push({ kind: "figure", over: Math.max(box.right - column.right, column.left - box.left), where: tfs.where(gd.closest(".cell") || gd) });
      const svg = gd.querySelector("svg.main-svg"), drawn = svg ? svg.getBoundingClientRect() : box;
      for (let p = gd; p && p.tagName !== "ARTICLE"; p = p.parentElement) {
        const r = p.getBoundingClientRect();
        if (drawn.bottom - r.bottom > 1 && getComputedStyle(p).overflowY !== "visible") {
          out.push({ kind: "figure", over: drawn.bottom - r.bottom, where: tfs.where(gd.closest(".cell") || gd) + " (its bottom hidden)" });
          break;
        }
      }
      if (drawn.bottom - box.bottom > 1)  // drawn below its own box: the text after it runs over it
        out.push({ kind: "figure", over: drawn.bottom - box.bottom, where: tfs.where(gd.closest(".cell") || gd) + " (taller than its box)" });
    }
    // clientWidth, not innerWidth: on a phone the layout viewport grows to fit content that overflows
    const page = document.documentElement.scrollWidth - document.documentElement.clientWidth;
    if (page > 1) out.push({ kind: "page", over: page, where: "the page scrolls sideways" });
    return out;
  },

  // Each figure's drawn width and the layout it shows (figure-fit.js: "narrow" in a column under 600 px).
  figureWidths: () => tfs.figures().map((gd) => {
    const svg = gd.querySelector("svg.main-svg");
    return { width: Math.max(gd.getBoundingClientRect().width, svg ? svg.getBoundingClientRect().width : 0),
             layout: gd._tfsFit ? gd._tfsFit.mode : "none", where: tfs.where(gd.closest(".cell") || gd) };
  }),

  // Display equations wider than the column (at a desktop width none may need scrolling).
  wideEquations: () => [...document.querySelectorAll('article mjx-container[display="true"]')]
    .map((eq) => ({ box: eq, over: (eq.querySelector("mjx-math") || eq).getBoundingClientRect().width - eq.clientWidth,
                    where: tfs.where(eq.closest(".math") || eq) }))
    .filter((e) => e.over > 1),

  // The parts of figure i a reader must see whole, with their boxes: title, subplot titles (paper
  // annotations), legend, colour bars, each menu, each slider and the toolbar.
  parts: (i) => {
    const gd = tfs.figures()[i], L = gd._fullLayout, parts = [];
    const box = (name, el) => {
      if (!el) return;
      const r = el.getBoundingClientRect();
      if (r.width > 0 && r.height > 0) parts.push({ name, r: [r.left, r.top, r.right, r.bottom] });
    };
    gd.querySelectorAll(".g-gtitle .gtitle").forEach((el) => box("title", el));
    gd.querySelectorAll(".infolayer .annotation").forEach((el) => {
      const a = (L.annotations || [])[+el.getAttribute("data-index")];
      if (a && a.xref === "paper" && a.yref === "paper" && a.text) box(`annotation "${a.text.slice(0, 30)}"`, el);
    });
    gd.querySelectorAll(".infolayer .legend").forEach((el) => box("legend", el.querySelector(".bg") || el));
    gd.querySelectorAll(".infolayer .colorbar").forEach((el, k) => box(`colour bar ${k}`, el));
    gd.querySelectorAll(".updatemenu-header-group, .updatemenu-button-group").forEach((g, k) => {
      if (g.getBoundingClientRect().width > 0) box(`menu ${k}`, g);
    });
    gd.querySelectorAll(".slider-container .slider-group").forEach((el, k) => box(`slider ${k}`, el));
    gd.querySelectorAll(".modebar").forEach((el) => box("toolbar", el));
    return parts;
  },

  // Pairs of parts of figure i whose boxes overlap (by more than 2 px each way), and parts that
  // stick out of the figure.
  overlaps: (i) => {
    const parts = tfs.parts(i), found = [];
    const g = tfs.figures()[i].getBoundingClientRect();
    for (let a = 0; a < parts.length; a++) {
      const [l, t, r, b] = parts[a].r;
      if (l < g.left - 4 || r > g.right + 4 || t < g.top - 4 || b > g.bottom + 4)  // a glyph may overhang
        found.push(`${parts[a].name} sticks out of the figure`);
      for (let c = a + 1; c < parts.length; c++) {
        const [l2, t2, r2, b2] = parts[c].r;
        const w = Math.min(r, r2) - Math.max(l, l2), h = Math.min(b, b2) - Math.max(t, t2);
        if (w > 2 && h > 2) found.push(`${parts[a].name} overlaps ${parts[c].name}`);
      }
    }
    return found;
  },

  // The figure's title as drawn (empty when it has none).
  title: (i) => {
    const gd = tfs.figures()[i], el = gd.querySelector(".g-gtitle .gtitle");
    return el ? el.textContent.trim() : "";
  },

  // What clicking a button or slider step runs: plotly's public call for its method and args.
  command: (gd, method, args) => {
    const a = args || [];
    if (method === "restyle") return Plotly.restyle(gd, a[0], a[1], a[2]);
    if (method === "relayout") return Plotly.relayout(gd, a[0]);
    if (method === "update") return Plotly.update(gd, a[0], a[1], a[2]);
    if (method === "animate") return Plotly.animate(gd, a[0], a[1]);
    throw new Error(`unknown method ${method}`);
  },

  // Press every button of every menu and every step of every slider of figure i through plotly's
  // own command runner (what a click runs), and list those after which the figure lost its title.
  everyControl: async (i, done) => {
    const gd = tfs.figures()[i], L = gd._fullLayout, lost = [], errors = [];
    const title = tfs.title(i);
    const items = [];
    (L.updatemenus || []).forEach((m, k) => m.visible && m.buttons.forEach((b, j) => items.push([`menu ${k} button ${j} "${b.label}"`, b])));
    (L.sliders || []).forEach((s, k) => s.visible && s.steps.forEach((b, j) => items.push([`slider ${k} step ${j} "${b.label}"`, b])));
    for (const [name, b] of items) {
      if (!b.method || b.method === "skip") continue;
      try {
        await tfs.command(gd, b.method, b.args);
      } catch (e) {
        errors.push(`${name}: ${e}`);
      }
      if (title && !tfs.title(i)) lost.push(name);
    }
    done({ title, controls: items.length, lost, errors });
  },

  // Every file the page loaded, with its size (uncompressed; from the cache or not).
  resources: () => performance.getEntriesByType("navigation").concat(performance.getEntriesByType("resource"))
    .map((e) => ({ url: e.name, bytes: e.decodedBodySize })),
};
