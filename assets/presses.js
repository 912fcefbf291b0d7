// A play pressed while the page still cancels the stopped one goes through once that cancel is done.
//
// Gradio's page (6.x) defers a press of an event whose last submission is still pending and presses it again
// when that submission ends; Stop's ``cancels=`` ends it another way (POST /cancel, then /reset, then the
// submission is cleared) and drops the deferred press. Those two requests go out some 60 ms after the click
// and come back after Stop's own handler has unlocked Run (quiet: 50-100 ms later; loaded, seconds: the cancel
// waits for the run's step), so a Run, Replay, Paper-scale or Shift+Enter pressed in that window used to start
// nothing. Here such a press is held from Stop's click until its cancel and reset are done (or, if none goes
// out, for at most GRACE_MS), then pressed again; the newest press wins, and Stop drops a held one.
(() => {
  const PLAYS = '#run, #replay, #paper-scale, #run-live';
  const ENDS = /\/gradio_api\/(cancel|reset)(\?|$)/;
  // Where a Stop sends no cancel (seen after a Stop of a replay in lecture mode, not yet traced), a press waits the
  // whole grace: 3 s made Run after such a Stop take 3.2 s under three spinners, 1 s 1.3 s (scripts/click_latency.py,
  // 2026-12-06). A cancel goes out some 0.1 s after the click.
  const GRACE_MS = 1000;
  let inFlight = 0;      // cancels and resets on their way
  let stopAt = 0;        // a Stop pressed while something played, its cancel not yet sent
  let held = null;       // the newest play pressed meanwhile
  const url = (input) => (typeof input === 'string' ? input : (input && input.url) || String(input));
  const live = () => { const st = document.querySelector('#status'); return !!st && st.classList.contains('status-live'); };
  const waiting = () => inFlight > 0 || (stopAt > 0 && Date.now() - stopAt < GRACE_MS);
  const release = () => {
    // the page clears the cancelled submission right after the reset's answer: a moment later, if nothing new
    // went out, the held press is pressed again (through the listener below, now open)
    setTimeout(() => {
      if (waiting() || !held) { return; }
      const el = held;
      held = null;
      if (el.isConnected && !el.disabled) { el.click(); }
    }, 30);
  };
  const fetch0 = window.fetch.bind(window);
  window.fetch = (input, init) => {
    if (!ENDS.test(url(input))) { return fetch0(input, init); }
    inFlight += 1;
    stopAt = 0;
    return fetch0(input, init).finally(() => { inFlight -= 1; if (inFlight === 0) { release(); } });
  };
  const hold = (e, el) => { e.preventDefault(); e.stopImmediatePropagation(); held = el; };
  document.addEventListener('click', (e) => {
    const t = e.target && e.target.closest ? e.target : null;
    if (!t) { return; }
    if (t.closest('#stop')) {
      held = null;
      if (live()) { stopAt = Date.now(); setTimeout(release, GRACE_MS); }
      return;
    }
    const play = t.closest(PLAYS);
    if (play && waiting()) { hold(e, play); }
  }, true);
  document.addEventListener('keydown', (e) => {
    // Shift+Enter in the prompt runs the race (its submit event; the box has two lines, so a plain Enter is a
    // new line): held the same way, as a press of Run
    if (!waiting() || e.key !== 'Enter' || !e.shiftKey || e.isComposing) { return; }
    const t = e.target;
    const run = document.querySelector('#run');
    if (run && t && t.closest && t.closest('#prompt textarea, #prompt input')) { hold(e, run); }
  }, true);
})();
