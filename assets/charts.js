// The live charts drawn from changes (components/frames.py ChartChanges), on the browser's own clock.
//
// The server streams a run's chart changes as lines of JSON appended to one hidden textbox (#chart-changes; Gradio
// sends only what was appended). Each line is applied at once to this script's copy of each chart (plain arrays:
// cheap), and the charts are drawn one per animation frame, on a budget, with Plotly's incremental calls:
// extendTraces where traces only grew, update (restyle + relayout of the few attributes that changed) otherwise,
// react only where a chart's shape changed or its div was drawn by someone else. A chart's redraw is Plotly's whole
// replot of it (some 50 ms on a laptop, 200 ms on one four times slower): after each, the next waits BUDGET times as
// long, so drawing keeps at most a fifth of the main thread and a slow page draws fewer, larger steps (the chart
// waiting longest first); the lines keep coming and nothing queues up. A tab in the background gets no
// animation frames: it draws nothing and catches up with one draw when it is shown again; a chart scrolled out of
// the window does the same while a play streams.
//
// A run's first and last frames also come whole to Gradio's own gr.Plot, which would draw all of them in one task
// (three whole replots: the page's longest task). Gradio's Plotly.react on these charts' divs is taken into the same
// queue: one chart per animation frame, and none at all where the figure Gradio brings is the one this script has
// (drawn, or about to be drawn from the same frame's line). Any other figure (step mode, the x-axis switch) is
// drawn as Gradio gave it, in its turn. The last line ("final") replaces the box's text (Gradio then sends a short
// value, and its closing message repeats only that); a line that does not follow the one before (a value the page
// never saw) leaves the copy behind, and Gradio's whole figures are drawn instead.
(() => {
  if (window.specrejCharts) { return; }
  const elemOf = key => (key === 'race' ? 'race-plot' : 'plot-' + key.slice(4));
  // the chart a box's id names ("plot-0" -> "arm-0", "race-plot" -> "race"), or null
  const keyOfId = id => (id === 'race-plot' ? 'race' : /^plot-\d+$/.test(id) ? 'arm-' + id.slice(5) : null);
  const keyOf = gd => {   // the chart a plot div belongs to, or null
    const host = gd && gd.closest ? gd.closest('#race-plot, [id^="plot-"]') : null;
    return host ? keyOfId(host.id) : null;
  };
  const charts = {};   // key -> {data, layout, config, token, react, traces: Map(index -> {attrs, whole, from}), paths}
  const wholes = {};   // key -> a figure Gradio asked Plotly to draw ({gd, data, layout, config, since}), drawn in turn
  const BUDGET = 4;
  const st = {head: null, offset: 0, seq: -1, raf: 0, timer: 0, next: 0, draws: 0, tokens: 0, log: [], real: null,
              skipResize: null, busy: false, drawing: null, way: null};
  // what this script took, for scripts/chart_load.py: in all, by chart, and by the way a draw went (its count, time,
  // longest), a way named with what it changed ("animate+relayout xaxis.range", "update x,y | shapes[1]")
  // and how late each draw showed its chart's changes (lags: ms from the oldest change not yet drawn to the draw)
  const cost = {feed_ms: 0, feeds: 0, draw_ms: 0, draw_max_ms: 0, by: {}, ways: {}, lags: []};
  const api = {onDraw: null};

  const clone = v => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

  function rebuild(old, ops) {
    const out = [];
    for (const op of ops) {
      if (op[0] === 'c') { for (let i = op[1], end = op[1] + op[2]; i < end; i++) { out.push(old[i]); } }
      else if (op[0] === 'v') { for (const v of op[1]) { out.push(v); } }
      else { for (let i = 0; i < op[2]; i++) { out.push(op[1]); } }
    }
    return out;
  }

  // a relayout path ("xaxis.range", "annotations[0].x", "shapes[3]") as keys
  const partsOf = path => path.replace(/\[(\d+)\]/g, '.$1').split('.');

  function setPath(obj, path, value) {
    const parts = partsOf(path);
    let o = obj;
    parts.slice(0, -1).forEach((p, k) => {
      if (o[p] === null || typeof o[p] !== 'object') { o[p] = /^\d+$/.test(parts[k + 1]) ? [] : {}; }
      o = o[p];
    });
    const last = parts[parts.length - 1];
    if (value !== null) { o[last] = value; } else if (Array.isArray(o)) { o.splice(Number(last), 1); } else { delete o[last]; }
  }

  function getPath(obj, path) {
    let o = obj;
    for (const p of partsOf(path)) { if (o === null || typeof o !== 'object') { return undefined; } o = o[p]; }
    return o;
  }

  // a figure as text with its objects' keys sorted: two figures are the same drawing when these are equal
  const canon = v => JSON.stringify(v, (k, x) => (x && typeof x === 'object' && !Array.isArray(x)
    ? Object.keys(x).sort().reduce((o, key) => { o[key] = x[key]; return o; }, {}) : x));

  function setBase(key, spec) {
    // as Gradio's gr.Plot draws a figure: sized by its box, margins that grow to fit
    const layout = Object.assign({}, spec.layout, {autosize: true});
    layout.margin = Object.assign({}, layout.margin || {}, {autoexpand: true});
    charts[key] = {data: spec.data, layout, config: Object.assign({}, spec.config || {}, {responsive: true}),
                   token: ++st.tokens, react: true, traces: new Map(), paths: new Set(), drawn: null,
                   since: performance.now()};
  }

  function dirtyTrace(m, i) {
    let d = m.traces.get(i);
    if (!d) { d = {attrs: new Set(), whole: new Set(), from: {}}; m.traces.set(i, d); }
    return d;
  }

  function change(key, ch) {
    const m = charts[key];
    if (ch.react) { setBase(key, ch.react); return; }
    if (!m) { return; }
    if (!dirty(m)) { m.since = performance.now(); }
    for (const [index, t] of Object.entries(ch.traces || {})) {
      const i = Number(index), tr = m.data[i], d = dirtyTrace(m, i);
      for (const [attr, ops] of Object.entries(t.ops || {})) {
        const old = tr[attr] || [];
        const grew = ops.every((op, k) => op[0] !== 'c' || (k === 0 && op[1] === 0 && op[2] === old.length));
        tr[attr] = rebuild(old, ops);
        d.attrs.add(attr);
        if (!grew) { d.whole.add(attr); } else if (!(attr in d.from)) { d.from[attr] = old.length; }
      }
      for (const [attr, value] of Object.entries(t.set || {})) {
        if (value === null) { delete tr[attr]; } else { tr[attr] = value; }
        d.attrs.add(attr);
        d.whole.add(attr);
      }
    }
    for (const [path, value] of Object.entries(ch.layout || {})) {
      setPath(m.layout, path, value);
      m.paths.add(path);
    }
  }

  function apply(line, raw) {
    if (line.base) {
      for (const key of Object.keys(charts)) { delete charts[key]; }
      for (const [key, spec] of Object.entries(line.base)) { setBase(key, spec); }
      st.log = [];
    } else if (line.seq !== st.seq + 1) {
      // a line that does not follow the last one applied (the final line replaced a value this page never read):
      // the copy is behind; Gradio's whole figures of the same frame are drawn instead
      for (const key of Object.keys(charts)) { delete charts[key]; }
    } else {
      for (const [key, ch] of Object.entries(line.charts || {})) { change(key, ch); }
    }
    st.seq = line.seq;
    st.log.push(raw);   // as sent: the copy's arrays are the line's own, changed in place
  }

  function dirty(m) { return m.react || m.traces.size > 0 || m.paths.size > 0; }

  function plotDiv(key) {
    return document.querySelector('#' + elemOf(key) + ' [data-testid=plotly]')
      || document.querySelector('#' + elemOf(key) + ' .js-plotly-plot');
  }

  function react(gd, data, layout, config) {
    const P = window.Plotly;
    return (st.real || P.react).call(P, gd, data, roomy(gd, fitted(gd, layout)), config);
  }

  // A chart's margins grow to fit its legend and tick labels (autoexpand): each time they change, Plotly draws the
  // whole chart a second time. At a run's start the legend has few items and the labels are narrow, so a Run's
  // charts grew 2-4 times each (bottom 96 -> 103 -> 120 px as the legend filled, left 84 -> 91 -> 84 px with the
  // reward axis' labels), each a second whole draw, and the plot area jumped. Each chart starts its whole draws with
  // the margins it has needed so far at its width: they grow once, never shrink, and a draw needs one pass.
  const room = {};   // key -> {w, l, r, t, b}: the largest margins Plotly laid the chart out with at width w
  function keepRoom(key) {
    // (the width Plotly laid the chart out at: reading the div's own would force a layout of the page after each draw)
    const gd = plotDiv(key), full = gd && gd._fullLayout, size = full && full._size;
    if (!size) { return; }
    const w = Math.round(full.width);
    const had = room[key] && room[key].w === w ? room[key] : {w, l: 0, r: 0, t: 0, b: 0};
    const now = room[key] = {w: had.w, l: Math.max(had.l, size.l), r: Math.max(had.r, size.r),
                             t: Math.max(had.t, size.t), b: Math.max(had.b, size.b)};
    // and the div's own layout, as meta is (nothing drawn now): its next relayout or restyle starts from them too
    if (gd.layout) { gd.layout.margin = Object.assign({}, gd.layout.margin || {}, {l: now.l, r: now.r, t: now.t, b: now.b}); }
  }
  function roomy(gd, layout) {
    // (the div's width read here costs nothing more: Plotly sizes the chart by its box as it draws it, next)
    const had = room[keyOf(gd)];
    if (!had || !layout || had.w !== Math.max(gd.clientWidth, 10)) { return layout; }
    const margin = Object.assign({}, layout.margin || {});
    for (const side of ['l', 'r', 't', 'b']) { margin[side] = Math.max(margin[side] ?? 80, had[side]); }
    return Object.assign({}, layout, {margin});
  }

  // On a narrow screen (a phone) an x-axis title wider than the chart was cut ("... (s, log sca"): drawn smaller
  // until it fits, on that screen alone (the figure itself, and every wider screen, keep its size)
  const measure = document.createElement('canvas').getContext('2d');
  function fitted(gd, layout) {
    const title = layout && layout.xaxis && layout.xaxis.title;
    const text = title && (typeof title === 'string' ? title : title.text);
    const width = gd.clientWidth || (gd.parentNode && gd.parentNode.clientWidth) || 0;
    if (!text || !width || !measure) { return layout; }
    const size = (title.font && title.font.size) || (layout.font && layout.font.size) || 14;
    const family = (title.font && title.font.family) || (layout.font && layout.font.family) || 'sans-serif';
    const margin = layout.margin || {};
    // the title is centred on the plot area: it fits within the chart while no wider than the plot and both margins
    // of its narrower side
    const room = 0.95 * (width - (margin.l ?? 80) + (margin.r ?? 80)) - 8;
    measure.font = size + 'px ' + family;
    const wide = measure.measureText(String(text).replace(/<[^>]*>/g, '')).width;
    if (wide <= room) { return layout; }
    const out = Object.assign({}, layout, {xaxis: Object.assign({}, layout.xaxis)});
    const small = Math.max(9, Math.floor(size * room / wide));
    out.xaxis.title = Object.assign({}, typeof title === 'string' ? {text: title} : title,
                                    {font: Object.assign({}, title.font || {}, {size: small})});
    return out;
  }

  // the layout's paths changed since the last draw, as relayout takes them; a path under another one goes with it
  // (Plotly refuses "annotations[0]" and "annotations[0].x" in one call)
  function layoutUpdate(m) {
    const lu = {}, all = [...m.paths];
    for (const p of all.filter(p => !all.some(q => q !== p && (p.startsWith(q + '.') || p.startsWith(q + '['))))) {
      const v = getPath(m.layout, p);
      lu[p] = v === undefined ? null : clone(v);
    }
    return lu;
  }

  // the script's copy drawn on the chart's div; false where it is not on the page yet
  function drawChart(key, m) {
    const P = window.Plotly, gd = plotDiv(key);
    if (!P || !gd) { return false; }
    if (m.react || gd._specrej !== m.token || gd.data !== m.drawn) {
      // the trace objects copied: Plotly keeps what it is given, and must never extend this script's copy
      st.way = m.react ? 'react' : gd._specrej !== m.token ? 'react:token' : 'react:data';
      st.drawing = react(gd, m.data.map(t => Object.assign({}, t)), clone(m.layout), m.config);
    } else {
      setMeta(gd, m);
      setHidden(gd, m);
      const idx = [...m.traces.keys()], ds = idx.map(i => m.traces.get(i));
      const attrs = [...new Set(ds.flatMap(d => [...d.attrs]))];
      // only data arrays changed (points added, moved or dropped): Plotly's animation path with no transition and
      // no redraw replots those traces alone; extendTraces, restyle and react replot the whole chart (its axes,
      // tick labels, legend and margins too: two thirds of a redraw here)
      const arraysOnly = idx.length > 0 && ds.every((d, k) => [...d.attrs].every(a => Array.isArray(m.data[idx[k]][a])));
      if (arraysOnly) {
        const frame = idx.map((i, k) => Object.fromEntries([...ds[k].attrs].map(a => [a, m.data[i][a].slice()])));
        const lu = layoutUpdate(m);
        st.way = Object.keys(lu).length ? 'animate+relayout ' + Object.keys(lu).sort().join(',') : 'animate';
        // Plotly's animation of some lone traces (a pruning chart's "had it continued" or "now" line alone) removes
        // every trace's drawing, the data kept: a chart left empty is drawn whole again
        const copy = m.data, layout = m.layout;
        st.drawing = P.animate(gd, {data: frame, traces: idx, layout: {}},
                               {transition: {duration: 0}, frame: {duration: 0, redraw: false}, mode: 'immediate'})
          .then(() => (Object.keys(lu).length ? P.relayout(gd, lu) : gd))
          .then(() => (wiped(gd, copy) ? react(gd, copy.map(t => Object.assign({}, t)), clone(layout), m.config)
            .then(() => { if (gd._specrej === m.token) { m.drawn = gd.data; } }) : gd));   // (the div's data anew)
      } else if (!idx.length && !m.paths.size) {
        st.way = 'meta';   // nothing else changed: nothing to draw
        st.drawing = null;
      } else if (!idx.length) {
        const lu = layoutUpdate(m);
        st.way = 'relayout ' + Object.keys(lu).sort().join(',');
        st.drawing = P.relayout(gd, lu);
      } else {
        const tu = {};
        for (const a of attrs) {
          tu[a] = idx.map(i => (m.data[i][a] === undefined ? null : (Array.isArray(m.data[i][a]) ? m.data[i][a].slice()
                                                                     : clone(m.data[i][a]))));
        }
        const lu = layoutUpdate(m);
        st.way = 'update ' + [...attrs].sort().join(',') + ' | ' + Object.keys(lu).sort().join(',');
        st.drawing = P.update(gd, tu, lu, idx);
      }
    }
    gd._specrej = m.token;
    m.drawn = gd.data;
    m.react = false;
    m.traces.clear();
    m.paths.clear();
    return true;
  }

  // layout.meta (the downloads' title, prompt and settings: ui._DOWNLOAD_JS reads the div's layout) draws nothing: set
  // on the div's layout as it is, never relayout (Plotly replots a whole chart for a change of meta)
  function setMeta(gd, m) {
    for (const p of [...m.paths].filter(p => p === 'meta' || p.startsWith('meta.') || p.startsWith('meta['))) {
      const v = getPath(m.layout, p);
      if (gd.layout) { setPath(gd.layout, p, v === undefined ? null : clone(v)); }
      m.paths.delete(p);
    }
  }

  // a trace the legend hides ("had it continued", off until clicked; one a watcher clicked off) draws nothing: its
  // changed arrays are set on the div's data as they are, where Plotly reads them as the legend shows it again (a
  // change of visible recalculates the trace). Animated alone, such a trace made Plotly remove every trace's drawing,
  // so each of its changes cost two whole draws (the animation's repair, then the next draw's).
  function setHidden(gd, m) {
    for (const [i, d] of [...m.traces]) {
      const t = gd.data && gd.data[i];
      if (!t || (t.visible !== 'legendonly' && t.visible !== false)) { continue; }
      if (![...d.attrs].every(a => Array.isArray(m.data[i][a]))) { continue; }   // (a style: drawn as it comes)
      for (const a of d.attrs) { t[a] = m.data[i][a].slice(); }
      m.traces.delete(i);
    }
  }

  // a chart whose traces have points but none of them is drawn
  const wiped = (gd, data) => gd.querySelectorAll('.scatterlayer .trace').length === 0
    && data.some(t => Array.isArray(t.x) && t.x.some(v => v !== null && v !== undefined));

  // one chart's turn: Gradio's figure for it where it brought one that is not this script's copy, else the copy's
  // changes; returns what was drawn ("copy", "gradio") or null where nothing was (not on the page, or nothing new)
  function drawKey(key) {
    const w = wholes[key], m = charts[key];
    if (w) {
      const gd = w.gd.isConnected ? w.gd : plotDiv(key);   // (Gradio may have drawn its component anew since)
      if (!gd) { return null; }
      delete wholes[key];
      if (!(m && canon(w.data) === canon(m.data) && canon(w.layout) === canon(m.layout))) {
        st.way = 'gradio';
        st.drawing = react(gd, w.data, w.layout, w.config);
        // not this script's copy: its next change redraws the chart whole (drawChart reacts where the div's token
        // is not the copy's); until then the chart stays as Gradio drew it (the x-axis switch, step mode)
        gd._specrej = 0;
        if (m) { m.react = false; m.traces.clear(); m.paths.clear(); }
        return 'gradio';
      }
      // the same figure as the copy: drawn where the div does not show the copy already
      if (gd._specrej !== m.token || gd.data !== m.drawn) { m.react = true; }
    }
    return m && dirty(m) && drawChart(key, m) ? 'copy' : null;
  }

  // one chart per animation frame: the one that has waited longest. Plotly finishes some draws later (an animation
  // frame's traces are drawn in a task of their own): the next draw waits for it, then BUDGET times the whole time
  function draw() {
    st.raf = 0;
    if (document.hidden || st.busy) { return; }   // shown again: visibilitychange asks; a draw in flight: it asks
    const t0 = performance.now();
    if (t0 < st.next) { later(st.next - t0); return; }
    const since = key => Math.min(charts[key] && dirty(charts[key]) ? charts[key].since : Infinity,
                                  wholes[key] ? wholes[key].since : Infinity);
    const waiting = [...new Set([...Object.keys(charts), ...Object.keys(wholes)])]
      .filter(key => since(key) < Infinity && drawable(key)).sort((a, b) => since(a) - since(b));
    for (const key of waiting) {
      st.drawing = null;
      const lag = t0 - since(key), whole = !!wholes[key];
      const what = drawKey(key);
      if (!what) { continue; }   // not on the page yet, or nothing to draw: the next chart
      const seq = st.seq, sync = performance.now() - t0, way = st.way;
      st.busy = true;
      const done = () => {
        const took = Math.max(sync, performance.now() - t0);
        st.busy = false;
        keepRoom(key);
        if (!charts[key] || !dirty(charts[key])) { wanted.delete(key); }
        cost.by[key] = (cost.by[key] || 0) + took;
        cost.draw_ms += took;
        cost.draw_max_ms = Math.max(cost.draw_max_ms, took);
        const w = cost.ways[way] || (cost.ways[way] = [0, 0, 0, 0]);   // draws, ms, longest, longest in sync
        w[0] += 1; w[1] += took; w[2] = Math.max(w[2], took); w[3] = Math.max(w[3], sync);
        if (cost.lags.length < 5000) { cost.lags.push(Math.round(lag)); }
        st.next = performance.now() + BUDGET * took;
        st.draws += 1;
        if (what === 'copy' && api.onDraw) { try { api.onDraw(seq, [key], whole, way); } catch (e) {} }
        if (pending()) { later(Math.max(st.next - performance.now(), 16)); }
      };
      Promise.resolve(st.drawing).then(done, done);
      return;
    }
    if (pending()) { later(Math.max(st.next - performance.now(), 16)); }
  }

  function pending() {
    return st.busy || Object.keys(wholes).length > 0
      || Object.entries(charts).some(([key, m]) => dirty(m) && drawable(key));
  }

  // A chart scrolled out of the window is not drawn while a play streams (a watcher sees two charts at most on a
  // laptop's screen, one on a phone): its changes wait in the copy and it is drawn once, at the latest, as it comes
  // into view, as a tab in the background catches up. Gradio's whole figures (a run's first and last frames, step
  // mode) are drawn wherever the chart is, and a download asks for its chart (want) before it reads it.
  const onScreen = {}, hosts = {}, wanted = new Set();
  const seen = window.IntersectionObserver ? new IntersectionObserver(entries => {
    for (const e of entries) {
      const key = keyOfId(e.target.id);
      onScreen[key] = e.isIntersecting;
      if (e.isIntersecting) { schedule(); }
    }
  }) : null;
  function drawable(key) {
    if (wholes[key] || wanted.has(key) || !seen) { return true; }
    const host = document.getElementById(elemOf(key));
    if (!host) { return true; }
    if (hosts[key] !== host) {   // (Gradio may make a chart's box anew): watched; drawn once the watch first says
      if (hosts[key]) { seen.unobserve(hosts[key]); }   // it is in view (at the next frame)
      hosts[key] = host;
      onScreen[key] = false;
      seen.observe(host);
    }
    return onScreen[key] !== false;
  }

  function later(ms) {
    if (!st.timer) { st.timer = setTimeout(() => { st.timer = 0; schedule(); }, ms); }
  }

  function schedule() {
    if (!st.raf && !document.hidden) { st.raf = requestAnimationFrame(draw); }
  }

  document.addEventListener('visibilitychange', () => { if (!document.hidden) { schedule(); } });

  // Gradio's gr.Plot draws with Plotly.react(div, data, layout, config) then Plots.resize(div): on this script's
  // charts both wait for the chart's turn (the resize too: the react in turn sizes the chart to its box)
  function hook(P) {
    if (!P || typeof P.react !== 'function' || P.react.specrej) { return; }
    const real = P.react, resize = P.Plots && P.Plots.resize;
    st.real = real;
    P.react = function (gd, data, layout, config) {
      const key = Array.isArray(data) ? keyOf(gd) : null;
      if (!key) { return real.apply(this, arguments); }
      wholes[key] = {gd, data, layout, config, since: performance.now()};
      st.skipResize = gd;
      queueMicrotask(() => { st.skipResize = null; });
      schedule();
      return Promise.resolve(gd);
    };
    P.react.specrej = true;
    if (resize) {
      P.Plots.resize = function (gd) {
        if (gd && gd === st.skipResize) { return Promise.resolve(gd); }
        return resize.apply(this, arguments);
      };
    }
  }

  // plotly.js sets window.Plotly when it loads (with the first chart): hooked then
  let plotly = window.Plotly;
  Object.defineProperty(window, 'Plotly', {configurable: true, enumerable: true, get: () => plotly,
                                            set: v => { plotly = v; hook(v); }});
  hook(plotly);

  // the textbox's whole value: its first line names the stream; read on from where the last call stopped
  function feed(value) {
    const t0 = performance.now();
    try { feedOn(value); } finally { cost.feed_ms += performance.now() - t0; cost.feeds += 1; }
  }

  function feedOn(value) {
    if (typeof value !== 'string' || !value) { return; }
    const nl = value.indexOf('\n');
    const head = nl < 0 ? value : value.slice(0, nl);
    if (head !== st.head || value.length < st.offset) { st.head = head; st.offset = 0; }
    const end = value.lastIndexOf('\n') + 1;
    if (end <= st.offset) { return; }
    const text = value.slice(st.offset, end);
    st.offset = end;
    for (const line of text.split('\n')) {
      if (line) { apply(JSON.parse(line), line); }
    }
    schedule();
  }

  Object.assign(api, {
    feed,
    seq: () => st.seq,
    draws: () => st.draws,
    // nothing waits to be drawn (scripts/chart_load.py waits for this before it stops counting)
    idle: () => !pending(),
    // a chart drawn up to date wherever it is (a download reads it next): by its element's id ("plot-0", "race-plot")
    want: elem => {
      const key = keyOfId(elem);
      if (key && charts[key] && dirty(charts[key])) { wanted.add(key); schedule(); }
    },
    // the lines applied since the run's first ("base"): the tests rebuild the charts meant at each seq from them
    lines: () => st.log.map(raw => JSON.parse(raw)),
    cost: () => Object.assign({draws: st.draws}, cost),
    // this script's copy of a chart ("arm-0", "race"): its data and layout as drawn from the changes
    figure: key => (charts[key] ? {data: clone(charts[key].data), layout: clone(charts[key].layout)} : null),
  });
  window.specrejCharts = api;

  // plotly.js (4.6 MB of script) loads with a page's first chart: a lecturer's first Run waited ~3 s for it before
  // anything was drawn. Imported here while the page is idle (the same module Gradio's gr.Plot imports, resolved
  // beside Gradio's own index script, so the browser evaluates it once); nothing is lost if it fails.
  function preloadPlotly() {
    const chunk = window.specrejPlotlyChunk;
    const index = [...document.scripts].find(s => /\/assets\/index-[^/]*\.js/.test(s.src || ''));
    if (!chunk || !index || window.Plotly) { return; }
    import(new URL(chunk, index.src).href).catch(() => {});
  }
  const idle = () => (window.requestIdleCallback ? requestIdleCallback(preloadPlotly, {timeout: 4000})
                                                  : setTimeout(preloadPlotly, 1500));
  if (document.readyState === 'complete') { idle(); } else { window.addEventListener('load', idle, {once: true}); }
})();
