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
// animation frames: it draws nothing and catches up with one draw when it is shown again. A run's first and last
// frames come whole to Gradio's own gr.Plot, which draws them as it always did; the last line ("final") brings this
// copy to the same figures and cancels any draw still pending.
(() => {
  if (window.specrejCharts) { return; }
  const elemOf = key => (key === 'race' ? 'race-plot' : 'plot-' + key.slice(4));
  const charts = {};   // key -> {data, layout, config, token, react, traces: Map(index -> {attrs, whole, from}), paths}
  const BUDGET = 4;
  const st = {head: null, offset: 0, seq: -1, raf: 0, timer: 0, next: 0, draws: 0, final: false, tokens: 0};
  const cost = {feed_ms: 0, feeds: 0, draw_ms: 0, draw_max_ms: 0, by: {}};   // what this script took, for scripts/chart_load.py
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

  function setPath(obj, path, value) {
    const parts = path.split('.');
    let o = obj;
    for (const p of parts.slice(0, -1)) {
      if (o[p] === null || typeof o[p] !== 'object') { o[p] = {}; }
      o = o[p];
    }
    const last = parts[parts.length - 1];
    if (value === null) { delete o[last]; } else { o[last] = value; }
  }

  function getPath(obj, path) {
    let o = obj;
    for (const p of path.split('.')) { if (o === null || typeof o !== 'object') { return undefined; } o = o[p]; }
    return o;
  }

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

  function apply(line) {
    if (line.base) {
      for (const key of Object.keys(charts)) { delete charts[key]; }
      for (const [key, spec] of Object.entries(line.base)) { setBase(key, spec); }
      st.final = false;
    } else {
      for (const [key, ch] of Object.entries(line.charts || {})) { change(key, ch); }
    }
    st.seq = line.seq;
    if (line.final) {   // Gradio draws this frame whole: nothing left for this script to draw
      st.final = true;
      for (const m of Object.values(charts)) { m.react = false; m.traces.clear(); m.paths.clear(); }
    }
  }

  function dirty(m) { return m.react || m.traces.size > 0 || m.paths.size > 0; }

  function drawChart(key, m) {
    const P = window.Plotly, gd = document.querySelector('#' + elemOf(key) + ' .js-plotly-plot');
    if (!P || !gd) { return false; }
    if (m.react || gd._specrej !== m.token || gd.data !== m.drawn) {
      // the trace objects copied: Plotly keeps what it is given, and must never extend this script's copy
      P.react(gd, m.data.map(t => Object.assign({}, t)), clone(m.layout), m.config);
    } else {
      const idx = [...m.traces.keys()], ds = idx.map(i => m.traces.get(i));
      const attrs = [...new Set(ds.flatMap(d => [...d.attrs]))];
      const extend = m.paths.size === 0 && ds.every(d => d.whole.size === 0 && d.attrs.size === attrs.length);
      if (extend && idx.length) {
        const upd = {};
        for (const a of attrs) { upd[a] = idx.map((i, k) => m.data[i][a].slice(ds[k].from[a])); }
        P.extendTraces(gd, upd, idx);
      } else {
        const tu = {}, lu = {};
        for (const a of attrs) {
          tu[a] = idx.map(i => (m.data[i][a] === undefined ? null : (Array.isArray(m.data[i][a]) ? m.data[i][a]
                                                                     : clone(m.data[i][a]))));
        }
        for (const p of m.paths) { const v = getPath(m.layout, p); lu[p] = v === undefined ? null : clone(v); }
        P.update(gd, tu, lu, idx);
      }
    }
    gd._specrej = m.token;
    m.drawn = gd.data;
    m.react = false;
    m.traces.clear();
    m.paths.clear();
    return true;
  }

  // one chart per animation frame: the one that has waited longest
  function draw() {
    st.raf = 0;
    if (document.hidden) { return; }   // shown again: visibilitychange asks for one frame
    const t0 = performance.now();
    if (t0 < st.next) { later(st.next - t0); return; }
    const waiting = Object.entries(charts).filter(([, m]) => dirty(m)).sort((a, b) => a[1].since - b[1].since);
    for (const [key, m] of waiting) {
      if (!drawChart(key, m)) { continue; }   // not on the page yet: the next chart, this one again later
      const took = performance.now() - t0;
      cost.by[key] = (cost.by[key] || 0) + took;
      cost.draw_ms += took;
      cost.draw_max_ms = Math.max(cost.draw_max_ms, took);
      st.next = performance.now() + BUDGET * took;
      st.draws += 1;
      if (api.onDraw) { try { api.onDraw(st.seq, [key]); } catch (e) {} }
      break;
    }
    if (Object.values(charts).some(dirty)) { later(Math.max(st.next - performance.now(), 16)); }
  }

  function later(ms) {
    if (!st.timer) { st.timer = setTimeout(() => { st.timer = 0; schedule(); }, ms); }
  }

  function schedule() {
    if (!st.raf && !document.hidden) { st.raf = requestAnimationFrame(draw); }
  }

  document.addEventListener('visibilitychange', () => { if (!document.hidden) { schedule(); } });

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
      if (line) { apply(JSON.parse(line)); }
    }
    if (!st.final) { schedule(); }
  }

  Object.assign(api, {
    feed,
    seq: () => st.seq,
    draws: () => st.draws,
    cost: () => Object.assign({draws: st.draws}, cost),
    // this script's copy of a chart ("arm-0", "race"): its data and layout as drawn from the changes
    figure: key => (charts[key] ? {data: clone(charts[key].data), layout: clone(charts[key].layout)} : null),
  });
  window.specrejCharts = api;
})();
