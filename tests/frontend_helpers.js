// What tests/test_frontend.py reads from a JupyterLab or Notebook 7 page (run by selenium).
var tfs = {
  panel: function () {  // the notebook on show
    var all = document.querySelectorAll(".jp-NotebookPanel");
    for (var i = 0; i < all.length; i++) {
      if (!all[i].classList.contains("lm-mod-hidden") && all[i].offsetParent !== null) return all[i];
    }
    return null;
  },
  cells: function () {
    var p = tfs.panel();
    return p ? Array.from(p.querySelectorAll(".jp-Cell.jp-CodeCell")) : [];
  },
  // the notebook's state: kernel, prompts ("[3]:", "[*]:", "[ ]:"), errors in outputs
  state: function () {
    var p = tfs.panel();
    if (!p) return null;
    var indicator = p.querySelector(".jp-Notebook-ExecutionIndicator");
    var prompts = tfs.cells().map(function (c) {
      var el = c.querySelector(".jp-InputPrompt");
      return el ? el.textContent.trim() : "";
    });
    var errors = Array.from(p.querySelectorAll(".jp-OutputArea-output"))
      .filter(function (o) { return /Traceback|Error:/.test(o.textContent) &&
        o.querySelector("[data-mime-type='application/vnd.jupyter.stderr']") !== null; })
      .map(function (o) { return o.textContent.slice(0, 2000); });
    var busy = document.querySelector(".jp-Notebook-ExecutionIndicator [data-status='busy'], " +
                                      "[data-status='busy']") !== null;
    return {prompts: prompts, errors: errors, busy: busy,
            kernel: indicator ? indicator.getAttribute("data-status") : null};
  },
  // the live training view in code cell i: progress text, the SVG's points, the plotly figure's
  liveView: function (i) {
    var cell = tfs.cells()[i];
    if (!cell) return null;
    var progress = cell.querySelector(".tfs-progress");
    var svg = cell.querySelector("svg.tfs-live-chart");
    var gd = cell.querySelector(".js-plotly-plot");
    // points drawn on screen, per curve: the live SVG's polylines, or plotly's markers
    var drawn = svg ? Array.from(svg.querySelectorAll("g.trace polyline")).map(function (l) {
      return l.points.numberOfItems; }) : gd ? Array.from(gd.querySelectorAll(".scatterlayer .trace"))
      .map(function (t) { return t.querySelectorAll("path.point").length; }) : [];
    return {
      progress: progress ? progress.textContent : null,
      drawnPoints: drawn,
      svgPoints: svg ? Array.from(svg.querySelectorAll("g.trace polyline")).map(function (l) {
        return l.points.numberOfItems; }) : null,
      svgHeight: svg ? svg.getBoundingClientRect().height : 0,
      plotlyPoints: gd && gd.data ? gd.data.map(function (t) { return t.x ? t.x.length : 0; }) : null,
      plotlyDrawn: gd ? gd.querySelectorAll(".scatterlayer .trace path.js-line").length : 0,
      title: gd && gd.layout && gd.layout.title ? (gd.layout.title.text || gd.layout.title) : null,
    };
  },
  // what a widget's output shows: its text and each figure's data, to tell a change
  widgetSignature: function (i) {
    var cell = tfs.cells()[i];
    if (!cell) return null;
    var out = cell.querySelector(".widget-output, .jupyter-widgets-output-area");
    if (!out) return null;
    var figures = Array.from(out.querySelectorAll(".js-plotly-plot")).map(function (gd) {
      return JSON.stringify((gd.data || []).map(function (t) {
        return [t.x, t.y, t.z && t.z.length, t.z && t.z[0]]; })).slice(0, 4000);
    });
    return {text: out.innerText.slice(0, 4000), figures: figures,
            drawn: out.querySelectorAll(".js-plotly-plot .main-svg").length};
  },
  // a widget control in code cell i: inputs, textareas, selects, slider handles, buttons
  controls: function (i) {
    var cell = tfs.cells()[i];
    if (!cell) return [];
    return Array.from(cell.querySelectorAll(".widget-text input, .widget-textarea textarea, " +
      ".widget-dropdown select, .widget-slider .noUi-handle, .widget-slider .ui-slider-handle, " +
      ".widget-button, .jupyter-button, .widget-inline-hbox label"));
  },
};
