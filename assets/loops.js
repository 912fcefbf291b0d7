// Gradio's leaked animation loops, slowed while no progress is shown.
//
// Gradio 6.31's page leaves two animation-frame loops running for as long as it is open, both from the status tracker
// shown while the app loads (removed while still "pending"): its timer (re-armed on every animation frame while its
// "pending" flag stays set) and its spinner's springs (in Svelte's animation loop, which runs while any spring is
// moving). A five-line Gradio app shows them too. Each asks for every animation frame, so the page never rests: on a
// page with its CPU throttled 4x (a slow projector laptop) they kept the main thread 13-16% busy while the page sat
// idle (0.7% once slowed), and as busy through every race (scripts/chart_load.py; docs/app.md).
//
// Here a frame asked for by Gradio's status tracker or by Svelte's animation loop, while no status tracker on the page
// shows progress (each tracker has the class "hide" then), is given SLOW_MS later instead of at the next frame. A
// tracker that shows progress (a visible timer, a spinner) animates as Gradio draws it; the plays' progress goes to a
// component never drawn (show_progress="hidden"), so a race shows none. Every other frame request (Plotly's,
// assets/charts.js's) is untouched. Gradio's modules keep the requestAnimationFrame they find when they load, so this
// must run before them: components/deploy/early.py puts it first in the page's head (a Blocks' head comes too late).
(() => {
  if (window.specrejLoops) { return; }
  const SLOW_MS = 1000;
  const raf = window.requestAnimationFrame.bind(window);
  const caf = window.cancelAnimationFrame.bind(window);
  const slowed = new Map();   // id given -> {timer, frame}
  let ids = 0;
  const count = {asked: 0, slowed: 0};

  const showing = () => document.querySelector('[data-testid="status-tracker"]:not(.hide)') !== null;
  // the caller, from the stack: Gradio's status tracker chunk, or Svelte's animation loop (its raf.tick)
  // (three frames are enough: the caller is the second; a whole stack on every frame request cost more than the loops)
  const leaky = () => {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 3;
    let stack;
    try { stack = new Error().stack || ''; } finally { Error.stackTraceLimit = limit; }
    return stack.includes('/statustracker-') || /\bat Object\.tick \(/.test(stack);
  };

  window.requestAnimationFrame = function (cb) {
    count.asked += 1;
    if (typeof cb !== 'function' || !leaky() || showing()) { return raf(cb); }   // (the page's query last: the dearer)
    count.slowed += 1;
    const id = -(++ids);   // never one of the browser's own (positive) ids
    const entry = {timer: 0, frame: 0};
    entry.timer = setTimeout(() => { entry.timer = 0; entry.frame = raf(t => { slowed.delete(id); cb(t); }); }, SLOW_MS);
    slowed.set(id, entry);
    return id;
  };

  window.cancelAnimationFrame = function (id) {
    const entry = slowed.get(id);
    if (!entry) { return caf(id); }
    slowed.delete(id);
    if (entry.timer) { clearTimeout(entry.timer); }
    if (entry.frame) { caf(entry.frame); }
  };

  // for the tests: how many frame requests this page made, and how many were slowed
  window.specrejLoops = {count: () => Object.assign({}, count)};
})();
