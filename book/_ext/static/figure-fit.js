// Figures on a phone. The chapters' figures are laid out for a column at least 600 px wide
// (transformer_lib/viz/layout.py: tidy stacks title, menus, legend and subplot titles above the
// plot). In a narrower column this script lays each figure out again for the width it has:
// the title and subplot titles wrapped shorter, side margins narrower, each menu in a row of its
// own (a row of buttons too wide for the screen becomes a dropdown), a legend from the right-hand
// side moved above the plot, the rows stacked by their drawn heights, and the figure made taller
// by what the header grew, so that the plot keeps its height. Widening the column puts the
// original layout back. book/_ext/figure_fit.py loads it after plotly.js, before the figures.
(function () {
  "use strict";
  var WIDE = 600;           // px: a narrower column gets the narrow layout (viz/layout.py: MIN_WIDTH)
  var TITLE_CHAR = 8.6;     // px: a character of the 15-px title, generous
  var SUBTITLE_CHAR = 7.4;  // px: a character of a 13-px subplot title
  var GAP = 8;              // px between header rows
  var SIDE = { l: 50, r: 16 };  // the widest side margins a narrow figure keeps
  // a menu's drawn group: a dropdown's header or a row of buttons
  var MENU_GROUPS = ".updatemenu-container > .updatemenu-header-group, .updatemenu-container > .updatemenu-button-group";

  var copy = function (x) { return x === undefined ? undefined : JSON.parse(JSON.stringify(x)); };
  var BR = /<br\s*\/?>/i;
  var strip = function (s) { return s.replace(/<[^>]*>/g, ""); };

  // Break each line of `text` at spaces so that none is longer than `width` characters (tags do not
  // count; a line that is a span keeps its span on every piece).
  function wrap(text, width) {
    return text.split(BR).map(function (line) {
      var span = line.match(/^\s*(<span[^>]*>)(.*)<\/span>\s*$/);
      var head = span ? span[1] : "", body = span ? span[2] : line;
      var protectedBody = body.replace(/<[^>]*>/g, function (tag) { return tag.replace(/ /g, "\0"); });
      var out = [], current = "", shown = 0;
      protectedBody.split(" ").forEach(function (word) {
        var size = strip(word.replace(/\0/g, " ")).length;
        if (current && shown + 1 + size > width) { out.push(current); current = word; shown = size; }
        else { current = current ? current + " " + word : word; shown += (shown ? 1 : 0) + size; }
      });
      out.push(current);
      return out.map(function (l) { l = l.replace(/\0/g, " "); return span ? head + l + "</span>" : l; }).join("<br>");
    }).join("<br>");
  }
  var lines = function (text) { return text ? text.split(BR).length : 0; };
  var titleText = function (t) { return typeof t === "string" ? t : (t && t.text) || ""; };

  function aboveThePlot(item, y0) {
    var y = item.y === undefined ? y0 : item.y;
    return y > 1 || (y >= 1 && item.yanchor === "bottom");
  }
  var isSubplotTitle = function (a) {
    return a.xref === "paper" && a.yref === "paper" && a.yanchor === "bottom" && a.showarrow === false &&
      typeof a.text === "string";
  };

  // The titles the figure's menus and slider steps may set, so that the header has room for the longest.
  function controlTitles(L) {
    var out = [];
    var scan = function (args) {
      (args || []).forEach(function (u) { if (u && typeof u["title.text"] === "string") out.push(u["title.text"]); });
    };
    (L.updatemenus || []).forEach(function (m) { (m.buttons || []).forEach(function (b) { scan(b.args); scan(b.args2); }); });
    (L.sliders || []).forEach(function (s) { (s.steps || []).forEach(function (b) { scan(b.args); }); });
    return out;
  }

  var height = function (el) { return el ? el.getBoundingClientRect().height : 0; };

  // The parts of the wide layout this script changes, to put back when the column widens again.
  function wideState(gd) {
    var L = gd.layout;
    return {
      title: copy(L.title), height: L.height, margin: copy(L.margin || {}), legend: copy(L.legend || {}),
      updatemenus: copy(L.updatemenus), annotations: copy(L.annotations), styleHeight: gd.style.height,
      domains: domains(gd), sliders: copy(L.sliders), wrapperHeight: gd.parentElement.style.height,
    };
  }

  // Every axis's domain as drawn ({"xaxis2.domain": [0.36, 0.64], ...}).
  function domains(gd) {
    var out = {};
    Object.keys(gd._fullLayout).forEach(function (k) {
      if (/^[xy]axis\d*$/.test(k) && gd._fullLayout[k].domain) out[k + ".domain"] = gd._fullLayout[k].domain.slice();
    });
    return out;
  }

  // The figure's subplots as [x axis, y axis] names.
  function subplots(gd) {
    var F = gd._fullLayout, pairs = [];
    (gd._fullData || []).forEach(function (t) {
      var x = "xaxis" + (t.xaxis || "x").slice(1), y = "yaxis" + (t.yaxis || "y").slice(1);
      if (F[x] && F[y] && !pairs.some(function (p) { return p[0] === x && p[1] === y; })) pairs.push([x, y]);
    });
    return pairs;
  }

  // How many columns of subplots the figure has.
  function columns(gd) {
    var seen = {};
    subplots(gd).forEach(function (p) { seen[gd._fullLayout[p[0]].domain.join()] = true; });
    return Object.keys(seen).length;
  }

  // Side-by-side subplots, one below the other: each keeps the height it had and gets the whole
  // width (a third of a phone is too narrow to read). Returns the axes' new domains, the subplot
  // titles moved along, and the plot area's height in px; null when the subplots stay as they are.
  function restack(gd, w, annotations) {
    var F = gd._fullLayout, pairs = subplots(gd);
    pairs.sort(function (a, b) { return (F[b[1]].domain[1] - F[a[1]].domain[1]) || (F[a[0]].domain[0] - F[b[0]].domain[0]); });
    var plot = F._size.h, gap = 0;
    var titleOf = function (p) {
      var xd = F[p[0]].domain, yd = F[p[1]].domain;
      return annotations.filter(function (a) {
        return isSubplotTitle(a) && Math.abs(a.x - (xd[0] + xd[1]) / 2) < 1e-3 && Math.abs(a.y - yd[1]) < 1e-3;
      })[0];
    };
    // room between panels for the x axis's labels and the next panel's title
    var below = Math.max(w.margin.b === undefined ? 80 : w.margin.b, 50);
    var heights = pairs.map(function (p) { var d = F[p[1]].domain; return Math.max(160, (d[1] - d[0]) * plot); });
    var found = pairs.map(titleOf);  // all found before any moves
    var titles = found.map(function (a) { return a ? 17 * lines(a.text) + 6 : 0; });
    var total = 0;
    pairs.forEach(function (p, i) { total += heights[i] + (i ? titles[i] + below : 0); });
    var update = {}, y = total;
    pairs.forEach(function (p, i) {
      if (i) y -= titles[i] + below;
      var top = y / total, bottom = (y - heights[i]) / total;
      update[p[0] + ".domain"] = [0, 1];
      update[p[1] + ".domain"] = [Math.max(0, bottom), Math.min(1, top)];
      var a = found[i];
      if (a) { a.x = 0.5; a.y = Math.min(1, top); }
      y -= heights[i];
    });
    return { domains: update, plot: total };
  }

  function restore(gd) {
    var s = gd._tfsFit, w = s.wide, update = {
      width: null, height: w.height === undefined ? null : w.height, margin: w.margin,
      legend: w.legend,
    };
    Object.assign(update, w.domains);
    if (w.sliders) update.sliders = w.sliders;
    // the title shown is the narrow wrapping of s.wideTitle (a menu or slider may have chosen it)
    if (s.title && titleText(gd.layout.title) === s.title) {
      update.title = Object.assign(copy(w.title) || {}, { text: s.wideTitle });
    }
    if (w.annotations) update.annotations = w.annotations;
    s.mode = "wide";
    s.busy = true;
    var menus = w.updatemenus ? keepActive(w.updatemenus, gd.layout.updatemenus) : null;
    return Plotly.relayout(gd, update)
      .then(function () { return menus ? Plotly.relayout(gd, { updatemenus: [] }) : null; })
      .then(function () { return menus ? Plotly.relayout(gd, { updatemenus: menus }) : null; })
      .then(function () {
        gd.style.height = w.styleHeight;
        gd.parentElement.style.height = w.wrapperHeight;
        s.busy = false;
      }, function () { s.busy = false; });
  }

  // The div's height and its wrapper's (pio.to_html sets both from the layout's) follow the figure's.
  function follow(gd) {
    gd.style.height = gd._fullLayout.height + "px";
    if (gd.parentElement.style.height) gd.parentElement.style.height = gd.style.height;
  }

  // `menus` with the reader's current choices (`active`) from `now`.
  function keepActive(menus, now) {
    return menus.map(function (m, i) {
      var n = (now || [])[i];
      return n && n.active !== undefined ? Object.assign({}, m, { active: n.active }) : m;
    });
  }

  // Lay gd out for a column `width` px wide, from its wide layout.
  function narrow(gd, width) {
    var s = gd._tfsFit, w = s.wide, L = gd.layout;
    s.mode = "narrow";
    s.width = width;
    s.busy = true;
    var chars = Math.max(16, Math.floor((width - 20) / TITLE_CHAR));
    var text = titleText(gd.layout.title) || titleText(w.title);
    var title = text ? wrap(text, chars) : "";
    s.wideTitle = text;
    var titleLines = Math.max.apply(null, [lines(title)].concat(controlTitles(L).map(function (t) {
      return lines(wrap(t, chars));
    })));
    var margin = Object.assign({}, w.margin);
    margin.l = Math.min(margin.l === undefined ? 80 : margin.l, SIDE.l);
    margin.r = Math.min(margin.r === undefined ? 80 : margin.r, SIDE.r);
    var menus = (w.updatemenus || []).map(function (m) { return Object.assign({}, m); });
    var top = menus.filter(function (m) { return aboveThePlot(m, 1); });
    // a row of buttons wider than the figure becomes a dropdown
    var groups = gd.querySelectorAll(MENU_GROUPS);
    top.forEach(function (m) {
      var i = menus.indexOf(m), tooWide = false;
      groups.forEach(function (g) {
        if (g.__data__ && g.__data__._index === i && g.getBoundingClientRect().width > width - 10) tooWide = true;
      });
      if ((m.type === "buttons") && tooWide) { m.type = "dropdown"; m.direction = "down"; }
      m.x = 0; m.xanchor = "left";
    });
    var legend = Object.assign({}, w.legend);
    var legendOnTop = legend.orientation === "h" && aboveThePlot(legend, 1);
    var rightLegend = legend.orientation !== "h" && (legend.x === undefined || legend.x >= 1) &&
      (gd._fullData || []).some(function (t) { return t.showlegend && t.visible !== false && !/heatmap|contour|surface/.test(t.type); });
    if (rightLegend) { legend.orientation = "h"; legendOnTop = true; }
    if (legendOnTop) Object.assign(legend, { x: 0, xanchor: "left" });
    var annotations = (w.annotations || []).map(function (a) { return Object.assign({}, a); });
    var plotWidth = width - margin.l - margin.r - 40;
    var stacking = columns(gd) > 1 && plotWidth / columns(gd) < 170;
    annotations.forEach(function (a) {
      if (!isSubplotTitle(a)) return;
      var dom = stacking ? 1 : plotWidthAt(gd, a.x);
      a.text = wrap(a.text.split(BR).join(" "), Math.max(10, Math.floor(dom * plotWidth / SUBTITLE_CHAR)));
    });
    var stacked = stacking ? restack(gd, w, annotations) : null;
    s.stacked = stacked;
    var update = { width: width, margin: margin, legend: legend };
    if (stacked) Object.assign(update, stacked.domains);
    if (title) update["title.text"] = title;
    if (annotations.length) update.annotations = annotations;
    return Plotly.relayout(gd, update).then(function () {
      return top.length ? Plotly.relayout(gd, { updatemenus: [] }) : null;
    }).then(function () {
      return top.length ? Plotly.relayout(gd, { updatemenus: keepActive(menus, gd._tfsMenusNow) }) : null;
    }).then(function () {
      return stack(gd, w, titleLines, menus, top, legend, legendOnTop, margin);
    }).then(function () {  // again, measured where the first pass put them
      return stack(gd, w, titleLines, menus, top, legend, legendOnTop, margin);
    }).then(function () { s.busy = false; s.title = titleText(gd.layout.title); },
            function () { s.busy = false; });
  }

  // The width (a fraction of the plot area) of the subplot whose middle is at paper x.
  function plotWidthAt(gd, x) {
    var best = 1;
    Object.keys(gd.layout).forEach(function (k) {
      if (!/^xaxis\d*$/.test(k)) return;
      var d = (gd._fullLayout[k] || {}).domain || [0, 1];
      if (Math.abs((d[0] + d[1]) / 2 - x) < 1e-3) best = Math.min(best, d[1] - d[0]);
    });
    return best;
  }

  // Stack the header's rows by their drawn heights: title, each menu, the legend, subplot titles.
  function stack(gd, w, titleLines, menus, top, legend, legendOnTop, margin) {
    var row = GAP;
    if (titleLines) row += titleLines * 20 + GAP;
    var room = gd.getBoundingClientRect().width - 8, shrink = {};
    var menuRows = top.map(function (m) {
      var at = row, i = menus.indexOf(m), h = 0, wide = 0;
      gd.querySelectorAll(MENU_GROUPS)
        .forEach(function (g) {
          var r = g.getBoundingClientRect();
          if (g.__data__ && g.__data__._index === i && r.width > 0) { h = Math.max(h, r.height); wide = Math.max(wide, r.width); }
        });
      if (wide > room) {  // a dropdown whose longest item is wider than the screen: a smaller font
        var size = (gd._fullLayout.updatemenus[i].font || {}).size || 12;
        shrink["updatemenus[" + i + "].font.size"] = Math.max(8, Math.floor(size * room / wide));
      }
      row += Math.max(h, 24) + GAP;
      return [m, at];
    });
    var legendAt = row;
    if (legendOnTop) row += height(gd.querySelector(".infolayer .legend .bg")) + GAP;
    var subtitles = 0;
    gd.querySelectorAll(".infolayer .annotation").forEach(function (el) {
      var a = (gd._fullLayout.annotations || [])[+el.getAttribute("data-index")];
      if (a && isSubplotTitle(a) && a.y > 0.999) subtitles = Math.max(subtitles, height(el));
    });
    if (!titleLines && !menuRows.length && !legendOnTop && !subtitles) return null;
    row += subtitles ? subtitles + 6 : 0;
    var wideTop = (w.margin && w.margin.t !== undefined) ? w.margin.t : 100;
    var t = Math.max(row, menuRows.length || legendOnTop ? 0 : wideTop, 30);
    var bottom = margin.b === undefined ? 80 : margin.b, widePlot = (w.height || 450) - wideTop - bottom;
    var stacked = gd._tfsFit.stacked;
    var H = stacked ? t + stacked.plot + bottom : (w.height || 450) + Math.max(0, t - wideTop);
    var plot = H - t - bottom, size = gd._fullLayout._size;
    var update = Object.assign({ "margin.t": t, height: H }, shrink);
    if (stacked) {  // what sat below the plot stays as many px below it
      if (legend.y < 0 && !legendOnTop) update["legend.y"] = legend.y * widePlot / plot;
      (w.sliders || []).forEach(function (sl, i) {
        if (sl.y < 0) update["sliders[" + i + "].y"] = sl.y * widePlot / plot;
      });
    }
    if (titleLines) {
      Object.assign(update, { "title.x": 0.01, "title.xref": "container", "title.xanchor": "left",
        "title.y": 1 - (GAP + 14) / H, "title.yref": "container", "title.yanchor": "bottom" });
    }
    menuRows.forEach(function (r) {
      var i = menus.indexOf(r[0]);
      update["updatemenus[" + i + "].y"] = 1 + (t - r[1]) / plot;
      update["updatemenus[" + i + "].yanchor"] = "top";
      update["updatemenus[" + i + "].x"] = Math.max(-2, (4 - size.l) / size.w);  // the figure's left edge
    });
    if (legendOnTop) {
      Object.assign(update, { "legend.y": 1 + (t - legendAt) / plot, "legend.yanchor": "top",
        "legend.x": Math.max(-2, (4 - size.l) / size.w) });
    }
    return Plotly.relayout(gd, update).then(function () { follow(gd); return settleBottom(gd); });
  }

  // A legend or slider below the plot that the narrow width pushed out of the figure: make it taller.
  function settleBottom(gd) {
    var legend = gd.querySelector(".infolayer .legend .bg"), F = gd._fullLayout, shift = {};
    var lb = legend ? legend.getBoundingClientRect() : null;
    gd.querySelectorAll(".slider-container .slider-group").forEach(function (el, i) {
      var r = el.getBoundingClientRect();
      if (lb && lb.height > 0 && r.top < lb.bottom && r.bottom > lb.top && r.top > lb.top) {
        shift["sliders[" + i + "].y"] = F.sliders[i].y - (lb.bottom - r.top + 6) / F._size.h;
      }
    });
    var moved = Object.keys(shift).length ? Plotly.relayout(gd, shift) : Promise.resolve();
    return moved.then(function () { return extendBottom(gd); });
  }

  function extendBottom(gd) {
    var box = gd.getBoundingClientRect(), low = box.bottom;
    gd.querySelectorAll(".infolayer .legend .bg, .slider-container .slider-group").forEach(function (el) {
      var r = el.getBoundingClientRect();
      if (r.height > 0) low = Math.max(low, r.bottom + 4);
    });
    if (low <= box.bottom + 1) return null;
    var extra = Math.ceil(low - box.bottom), L = gd._fullLayout;
    return Plotly.relayout(gd, { height: L.height + extra, "margin.b": L.margin.b + extra })
      .then(function () { follow(gd); });
  }

  function fit(gd) {
    if (!gd._fullLayout || !gd.layout || !gd.parentElement) return;
    var s = gd._tfsFit;
    if (s.busy) { s.again = true; return; }
    var width = gd.parentElement.getBoundingClientRect().width;
    if (width <= 0) return;
    var p = null;
    if (width < WIDE && (s.mode !== "narrow" || Math.abs(width - s.width) > 8)) {
      gd._tfsMenusNow = copy(gd.layout.updatemenus);
      p = s.mode === "narrow" ? restore(gd).then(function () { return narrow(gd, width); }) : narrow(gd, width);
    } else if (width >= WIDE && s.mode === "narrow") {
      p = restore(gd).then(function () { return Plotly.Plots.resize(gd); });
    } else if (width >= WIDE && Math.abs(gd._fullLayout.width - width) > 1) {
      p = Plotly.Plots.resize(gd);
    }
    if (p) p.then(function () { if (s.again) { s.again = false; fit(gd); } });
  }

  // A menu or slider of a narrow figure set a title wrapped for the wide layout: wrap it again.
  function rewrapTitle(gd) {
    var s = gd._tfsFit;
    if (s.mode !== "narrow" || s.busy) return;
    var text = titleText(gd.layout.title);
    if (!text || text === s.title) return;
    s.busy = true;
    var chars = Math.max(16, Math.floor((s.width - 20) / TITLE_CHAR));
    s.wideTitle = text;
    s.title = wrap(text, chars);
    Plotly.relayout(gd, { "title.text": s.title }).then(function () { s.busy = false; }, function () { s.busy = false; });
  }

  function watch(gd) {
    if (gd._tfsFit || !gd.on) return;
    gd._tfsFit = { mode: "wide", wide: wideState(gd), busy: false };
    ["plotly_relayout", "plotly_update", "plotly_animated"].forEach(function (e) {
      gd.on(e, function () { rewrapTitle(gd); });
    });
    var go = function () { fit(gd); };
    if (window.ResizeObserver) new ResizeObserver(go).observe(gd.parentElement);
    else window.addEventListener("resize", go);
    go();
  }

  // This script, not plotly.js (config.responsive), resizes the figures, so that a figure is never
  // drawn with its wide layout in a narrow column (its plot would have a negative width): a figure
  // in a narrow column is drawn WIDE px wide first, then laid out for its column.
  var newPlot = Plotly.newPlot;
  Plotly.newPlot = function (gd, data, layout, config) {
    var div = typeof gd === "string" ? document.getElementById(gd) : gd;
    config = Object.assign({}, config, { responsive: false });
    if (div && div.parentElement && div.parentElement.getBoundingClientRect().width < WIDE && layout && !layout.width) {
      layout = Object.assign({}, layout, { width: WIDE });
    }
    return newPlot.call(this, gd, data, layout, config).then(function (g) {
      if (layout && layout.width === WIDE) delete g.layout.width;  // the wide layout autosizes
      watch(g);
      return g;
    });
  };
})();
