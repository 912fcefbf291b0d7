"""The app in a real headless Chromium (Debian's ``/usr/bin/chromium`` driven by the ``playwright``
pip package; never ``playwright install``): type a prompt, press Run, wait for both charts and the
winners; race three arms (a second Speculative Rejection setting) in the light and the dark
theme; save screenshots under ``tests/artifacts/`` (the paths are printed). The app runs
in-process on the tiny test models.

Also a tool: ``python tests/test_browser.py URL [OUT_PREFIX]`` screenshots a running app mid-race
and at the end (how ``assets/screenshot.png`` was made, on the embedded models).
"""
from __future__ import annotations

import os
import re
import sys
import logging
import time
from pathlib import Path

import pytest
from conftest import ARGS, CHROMIUM, launch_local  # noqa: F401  (ARGS: the other browser modules import it here)

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
VIEWPORT = {"width": 1400, "height": 900}

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]


def serve_tiny(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    """Yield (url, context) of the app on the tiny models, served in-process; close it after."""
    import app
    from components.session.context import AppContext

    env = {"SPECREJ_MODEL": tiny_lm_dir, "SPECREJ_REWARD": f"hf:{tiny_reward_dir}"}
    ctx = AppContext.from_env(env, trace_dir=str(tmp_path_factory.mktemp("traces")))
    from components.session import startup

    startup.warm(ctx)
    demo = app.build_demo(ctx)
    url = launch_local(demo)
    yield url, ctx
    demo.close()


@pytest.fixture(scope="module")
def app_url(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    yield from serve_tiny(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


def open_page(browser, url):
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_selector("#run")
    return page


def plotted_traces(page, elem_id: str) -> int:
    """Traces with data in the Plotly chart inside ``#elem_id`` (0 if not drawn)."""
    return page.evaluate(
        """id => { const el = document.querySelector(`#${id} .js-plotly-plot`);
                   if (!el || !el.data) return 0;
                   return el.data.filter(t => (t.y || []).some(v => v !== null)).length; }""", elem_id)


def test_run_in_a_real_browser_shows_both_charts_and_the_winners(browser, app_url):
    url, ctx = app_url
    page = open_page(browser, url)
    page.fill("#prompt textarea", "Explain how a rainbow forms.")
    page.click("#run")
    page.wait_for_selector("#plot-0 [data-testid=plotly]")
    page.wait_for_selector("#plot-1 [data-testid=plotly]")
    page.wait_for_selector("#summary table", timeout=120_000)  # the winners, side by side
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Done')")
    page.wait_for_function("window.specrejCharts.idle()")   # every chart drawn, each in its turn (assets/charts.js)
    assert plotted_traces(page, "plot-0") >= 2       # Speculative Rejection: kept lines, pruned, finished, winner ...
    assert plotted_traces(page, "plot-1") >= 2       # Best-of-N: finished answers and the winner
    assert plotted_traces(page, "race-plot") >= 2     # one line per arm
    assert not page.is_visible("#slot-2")            # two arms: the third slot stays hidden
    summary = page.inner_text("#summary")
    assert "Speculative Rejection" in summary and "Best-of-N" in summary and "winner" in summary
    for leader, name in (("#leader-0", "Speculative Rejection"), ("#leader-1", "Best-of-N")):
        assert "winner #" in page.inner_text(leader) and name in page.inner_text(leader)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "browser-run.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"\nscreenshot: {path}")
    page.close()


# Every text the status line shows, recorded as it changes (a flash that a poll would miss included).
WATCH_STATUS = """() => { window.__statuses = [document.querySelector('#status [data-testid=markdown]').innerText];
    new MutationObserver(() => window.__statuses.push(document.querySelector('#status [data-testid=markdown]').innerText))
        .observe(document.querySelector('#status'), {subtree: true, childList: true, characterData: true}); }"""


def test_newcomer_details_in_a_real_browser(browser, app_url):
    """Paper scale answers visibly; a Run with nothing ahead never says "Waiting"; the action buttons are
    buttons; a chart's label sits above its plot; bold text has one typeface."""
    url, ctx = app_url
    page = open_page(browser, url)
    for sel in ("#paper-scale", "#replay"):   # a button's label may wrap at some font's metrics: at most two lines
        size, line, lines = page.eval_on_selector(sel, """b => { const s = getComputedStyle(b), r = document.createRange();
            r.selectNodeContents(b); const h = parseFloat(s.lineHeight) || 1.2 * parseFloat(s.fontSize);
            return [parseFloat(s.fontSize), h, Math.round(r.getBoundingClientRect().height / h)]; }""")
        assert page.eval_on_selector(sel, "b => b.tagName") == "BUTTON" and size >= 15 and lines <= 2, (sel, size, line, lines)
    # the bold face loads (awaited: check() alone reads False while a face is still in flight on a loaded machine)
    faces = page.evaluate("""() => document.fonts.load("600 16px 'Specrej Sans'", 'Best-of-N')
        .then(fs => fs.map(f => [f.family.replace(/["']/g, ''), f.status]))""")
    assert ["Specrej Sans", "loaded"] in faces, faces
    family = page.eval_on_selector("#header strong", "e => getComputedStyle(e).fontFamily")
    assert family.startswith('"Specrej Sans"') or family.startswith("'Specrej Sans'") or \
        family.startswith("Specrej Sans"), family
    page.click("#paper-scale")   # it measures this machine, then sets what fits (and may play a recording)
    page.wait_for_function("/Paper scale set [(]see|Paper scale live would take/.test(document.querySelector('#paper-note').innerText)",
                           timeout=120_000)
    assert page.is_visible("#sr_start") and page.is_visible("#n")        # Settings opened to show it
    note = page.inner_text("#paper-note")
    if "would take" in note:   # too long for the limit here: a recording plays, then ends as done
        page.wait_for_function("/Done|Replay done/.test(document.querySelector('#status [data-testid=markdown]').innerText)",
                               timeout=120_000)   # a replay ends as "Replay done in ..."
        assert "Playing the recorded paper-scale race" in note and "scaled down to fit" in note
    page.goto(url)
    page.wait_for_selector("#run")
    page.fill("#prompt textarea", "Explain how a rainbow forms.")
    page.evaluate(WATCH_STATUS)
    page.click("#run")
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Done')", timeout=120_000)
    seen = page.evaluate("window.__statuses")
    assert not any("Waiting" in t for t in seen), seen
    for plot in ("#plot-0", "#plot-1", "#race-plot"):   # the label ends above the plot's drawing
        label = page.locator(f"{plot} [data-testid=block-label], {plot} label.float").first.bounding_box()
        svg = page.locator(f"{plot} .main-svg").first.bounding_box()
        assert label["y"] + label["height"] <= svg["y"] + 1, (plot, label, svg)
    page.close()


def test_a_lone_surrogate_set_through_js_gets_cant_run_and_the_page_stays_usable(browser, app_url):
    url, ctx = app_url
    page = open_page(browser, url)
    # what a script can do that a keyboard cannot: put half of an emoji (a lone surrogate) in the prompt
    page.evaluate("""() => { const t = document.querySelector('#prompt textarea');
                             t.value = 'tips ' + String.fromCharCode(0xD83D) + ' please';
                             t.dispatchEvent(new Event('input', {bubbles: true})); }""")
    page.click("#run")
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes(\"Can't run\")")
    status = page.inner_text("#status [data-testid=markdown]")
    assert "prompt" in status and "not valid text" in status, status
    page.fill("#prompt textarea", "Explain how a rainbow forms.")   # and the page still runs
    page.click("#run")
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Done')", timeout=120_000)
    page.close()


def three_arms(page, *, n: int, budget: int, max_new_tokens: int, second_alpha: float) -> None:
    """Open the settings, set N, the budget and the length, and turn on a second setting."""
    page.click("#settings")
    page.wait_for_selector("#n input[type=number]", state="visible")
    time.sleep(0.5)  # the accordion's sliders settle after they mount
    for sel, value in (("#n input[type=number]", n), ("#budget input", budget),
                       ("#max_new_tokens input[type=number]", max_new_tokens)):
        for _ in range(5):  # a value typed while a slider mounts can be reset: type until it stays
            page.fill(sel, str(value))
            page.locator(sel).press("Enter")
            time.sleep(0.2)
            if page.input_value(sel) == str(value):
                break
        assert page.input_value(sel) == str(value), (sel, page.input_value(sel))
    page.check("#second input[type=checkbox]")
    page.wait_for_selector("#second_alpha", state="visible")
    page.fill("#second_alpha input[type=number]", str(second_alpha))
    page.locator("#second_alpha input[type=number]").press("Enter")


def verdict_points(page) -> list[str]:
    """Names of the verdict chart's points (one per Speculative Rejection setting, on Best-of-N's curve)."""
    return page.evaluate(
        """() => { const el = document.querySelector('#race-plot .js-plotly-plot');
                   return el.data.filter(t => t.mode === 'markers' && (t.y || []).length).map(t => t.name); }""")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_three_arms_race_in_a_real_browser(browser, app_url, theme):
    """Best-of-N against two Speculative Rejection settings: three charts, three race lines, a table
    column per arm; readable in the light and the dark theme (a screenshot of each)."""
    url, ctx = app_url
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = open_page(browser, url + ("?__theme=dark" if theme == "dark" else ""))
    if theme == "dark":
        assert page.evaluate("document.body.classList.contains('dark') || "
                             "!!document.querySelector('.gradio-container.dark, .dark')")
    page.fill("#prompt textarea", "Give me three tips for staying healthy.")
    three_arms(page, n=8, budget=420, max_new_tokens=24, second_alpha=0.8)  # 8 rows overflow 420 slots early
    page.click("#run")
    try:
        page.wait_for_selector("#summary table", timeout=120_000)
        page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Done')")
    except Exception:
        page.screenshot(path=str(ARTIFACTS / f"three-arms-{theme}-failed.png"), full_page=True)
        raise AssertionError(f"no result; status shows {page.inner_text('#status [data-testid=markdown]')!r}") from None
    page.wait_for_function("window.specrejCharts.idle()")   # every chart drawn, each in its turn (assets/charts.js)
    for i in range(3):
        assert page.is_visible(f"#slot-{i}") and plotted_traces(page, f"plot-{i}") >= 2, i
    points = verdict_points(page)
    assert len(points) == 2, points
    assert any("alpha=0.8" in n for n in points) and any("alpha=0.5" in n for n in points), points
    headers = page.eval_on_selector_all("#candidates thead th", "ths => ths.map(t => t.innerText)")
    assert sum("round pruned" in h for h in headers) == 2 and any("BoN rank" in h for h in headers), headers
    summary = page.inner_text("#summary")
    # one verdict in time per setting (a time to equal reward, or a bound when Best-of-N's N never reaches it)
    assert len(re.findall(r"took (?:at least )?(?:[\d.]+x (?:less|more)|about the same) time", summary)) == 2 \
        and "alpha=0.8" in summary, summary
    # the result table's last column (Best-of-N) is inside its box, not clipped at the right edge
    table, box = page.locator("#summary table").bounding_box(), page.locator("#summary").bounding_box()
    assert table["x"] + table["width"] <= box["x"] + box["width"] + 1, (table, box)
    # readable: the status box's text differs clearly from what is behind it, in either theme
    fg, layers = page.evaluate(BEHIND, "#status p")
    assert contrast(fg, layers) > 4.5, (theme, fg, layers)
    fg, layers = page.evaluate(BEHIND, "#summary td")
    assert contrast(fg, layers) > 4.5, (theme, fg, layers)
    path = ARTIFACTS / f"browser-three-arms-{theme}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"\nscreenshot: {path}")
    page.close()


# An element's text colour and the background colours from it up to the page (nearest first).
BEHIND = """sel => { let el = document.querySelector(sel); const fg = getComputedStyle(el).color; const layers = [];
                      for (; el; el = el.parentElement) { layers.push(getComputedStyle(el).backgroundColor); }
                      layers.push(document.documentElement.classList.contains('dark') ? 'rgb(0, 0, 0)'
                                  : 'rgb(255, 255, 255)');
                      return [fg, layers]; }"""


def contrast(fg: str, layers: list[str]) -> float:
    """WCAG contrast ratio of a CSS text colour against its (possibly translucent) backgrounds."""
    def rgba(c):
        nums = [float(x) for x in c[c.index("(") + 1:c.index(")")].replace("/", ",").replace(" ", ",").split(",") if x]
        return nums + [1.0] * (4 - len(nums))

    # composite the backgrounds from the page up to the element
    bg = [255.0, 255.0, 255.0]
    for layer in reversed(layers):
        c = rgba(layer)
        bg = [c[i] * c[3] + bg[i] * (1 - c[3]) for i in range(3)]

    def lum(c):
        def ch(v):
            v /= 255
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
        return 0.2126 * ch(c[0]) + 0.7152 * ch(c[1]) + 0.0722 * ch(c[2])

    hi, lo = sorted([lum(rgba(fg)), lum(bg)], reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_stop_in_a_real_browser_and_run_again(browser, app_url, caplog):
    caplog.set_level(logging.INFO, logger="specrej.app")   # a Stop that finds nothing says where the session was
    url, ctx = app_url
    # a long race (a link's settings: the most new tokens the page allows): at the defaults the tiny race shows
    # "Racing" for about 3 s, and on a loaded CI machine the page drew it late enough that the race had ended when
    # Stop reached the server, which then rightly said "Nothing to stop"; this one races for about 10 s quiet
    page = open_page(browser, url + "?max_new_tokens=256&budget=4096")
    page.evaluate(WATCH_STATUS)
    page.click("#run")
    try:
        page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Racing')")
    except Exception:
        raise AssertionError(f"no 'Racing'; it showed {page.evaluate('window.__statuses')!r}") from None
    # pressed at once (Playwright's click first waits for the button to hold still; under three spinners the
    # page's redraws kept it waiting until the race had ended, and Stop then rightly said "Nothing to stop")
    page.evaluate("document.querySelector('#stop').click()")
    try:
        page.wait_for_function("document.querySelector('#status [data-testid=markdown]').textContent.includes('Stopped')", timeout=30_000)
    except Exception:
        shown = page.evaluate("[document.querySelector('#status [data-testid=markdown]').innerText, "
                              "document.querySelector('#status [data-testid=markdown]').textContent]")
        page.screenshot(path=str(ARTIFACTS / "stop-failed.png"), full_page=True)
        seen = [t[:120] for t in page.evaluate("window.__statuses")]
        raise AssertionError(f"no 'Stopped' after Stop; status shows {shown!r}; it showed, in order: {seen!r} "
                             "(screenshot stop-failed.png)")
    t0 = time.monotonic()
    while ctx.active and time.monotonic() - t0 < 60:   # a hang guard, not a speed limit
        time.sleep(0.05)
    assert not ctx.active, "Stop did not close the race"
    page.click("#run")
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Racing') || "
                           "document.querySelector('#status [data-testid=markdown]').innerText.includes('Done')")
    page.click("#stop")
    page.close()


def test_run_it_live_after_a_replay_races_and_is_done(browser, app_url):
    """Replay a recording, then "Run it live": the recording's settings (scaled to fit) race here to "Done"
    (it once turned every output into a red "Error": it set a control its event did not list)."""
    url, ctx = app_url
    page = open_page(browser, url)
    page.fill("#prompt textarea", ctx.examples[0])
    page.click("#replay")
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Replay done')")
    assert page.is_visible("#run-live")
    play = "(() => { const c = [...document.querySelector('#status').classList].find(c => c.startsWith('play-')); " \
           "return c ? Number(c.slice(5)) : 0; })()"
    replayed = page.evaluate(play)
    page.click("#run-live")
    # it races (a busy machine may instead say plainly that the race would pass the limit, or, where the live race
    # falls behind, play the recording of the same race: never an "Error"); a play newer than the replay's
    page.wait_for_function(f"({play}) > {replayed} && /Done in|Done from|Replay done|time limit/.test("
                           "document.querySelector('#status [data-testid=markdown]').innerText)", timeout=300_000)
    status = page.inner_text("#status [data-testid=markdown]")
    assert page.locator(".error").count() == 0 and "went wrong" not in status, status
    if "Done in" not in status or "Replay done" in status:   # a machine too busy for the scaled setting: logged
        print(f"\nRun it live did not race here (busy machine): {status[:300]}")
    else:
        assert not page.is_visible("#badge") and "Recording" not in status
    page.click("#stop")   # nothing is running: Stop says so, and does not claim it stopped something
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Nothing to stop')")
    time.sleep(1.0)
    assert "Nothing to stop" in page.inner_text("#status [data-testid=markdown]") and "Stopped." not in page.inner_text("#status [data-testid=markdown]")
    page.close()


def test_the_step_panel_scrolls_into_view_when_a_race_ends_on_it(browser, app_url):
    """At 1280x720, a race in step mode ends on its first decision: the panel is brought into view."""
    url, ctx = app_url
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_selector("#run")
    page.fill("#prompt textarea", "Explain how a rainbow forms.")
    page.check("#step input")
    page.click("#run")
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Stepping')", timeout=120_000)
    page.wait_for_function("""() => { const r = document.querySelector('#step-panel').getBoundingClientRect();
                                      return r.top >= -1 && r.top < window.innerHeight / 2; }""")
    page.close()


def screenshots(url: str, prefix: str, mid_after_decision_s: float = 15.0, three: dict | None = None) -> None:
    """Screenshot a running app: before, mid-race (after the first decision) and at the end;
    ``three``: race three arms with these settings (``three_arms``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = b.new_page(viewport=VIEWPORT)
        page.set_default_timeout(900_000)
        page.goto(url)
        page.wait_for_selector("#run")
        if three:
            three_arms(page, **three)
            page.get_by_text("Settings: the defaults just work").click()  # close it: the race is the picture
            time.sleep(0.5)
        page.screenshot(path=f"{prefix}-start.png", full_page=True)
        t0 = time.monotonic()
        page.click("#run")
        page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('1 decision')")
        time.sleep(mid_after_decision_s)
        page.screenshot(path=f"{prefix}-mid.png", full_page=True)
        print(f"mid-race at {time.monotonic() - t0:.0f} s: {prefix}-mid.png", flush=True)
        page.wait_for_selector("#summary table")
        time.sleep(2)
        page.screenshot(path=f"{prefix}-end.png", full_page=True)
        page.screenshot(path=f"{prefix}-end-top.png", full_page=False, clip={"x": 0, "y": 0, "width": 1400,
                                                                              "height": 1500})
        top = page.locator("#status").bounding_box()
        bottom = page.locator("#summary").bounding_box()
        race = page.locator("#x-axis").bounding_box()
        y1 = max(bottom["y"] + bottom["height"], race["y"] + race["height"])
        page.screenshot(path=f"{prefix}-arena.png", full_page=True,
                        clip={"x": 0, "y": top["y"] - 12, "width": VIEWPORT["width"], "height": y1 - top["y"] + 24})
        print(f"done at {time.monotonic() - t0:.0f} s: {prefix}-end.png, {prefix}-arena.png", flush=True)
        b.close()


if __name__ == "__main__":
    # python tests/test_browser.py URL [OUT_PREFIX] [--three N BUDGET MAX_NEW_TOKENS SECOND_ALPHA]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    args = sys.argv[1:]
    three = None
    if "--three" in args:
        k = args.index("--three")
        n, budget, tokens, alpha2 = args[k + 1:k + 5]
        three = dict(n=int(n), budget=int(budget), max_new_tokens=int(tokens), second_alpha=float(alpha2))
        args = args[:k] + args[k + 5:]
    screenshots(args[0], args[1] if len(args) > 1 else str(ARTIFACTS / "app"), three=three)


def test_step_through_with_both_rivals_shows_each_rivals_own_decisions_in_its_own_words(browser, app_url):
    """Both rivals ticked, step mode (issue 40): a rival's decision is told in its own words (its signal, its
    threshold or truncation, no alpha, no 'keeps the top'), under its label as an adaptation; pressing Next walks
    the decisions in token order, and no step chart is empty."""
    url, ctx = app_url
    page = open_page(browser, url)
    page.fill("#prompt textarea", "Name two seas.")
    page.click("#settings")   # the rivals' ticks are under Settings
    page.wait_for_selector("#rivals input", state="visible")
    page.locator("#rivals label", has_text="DeepConf").locator("input").check()
    page.locator("#rivals label", has_text="ST-BoN").locator("input").check()
    page.check("#step input")
    page.click("#run")
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Stepping')", timeout=300_000)
    seen: dict[str, str] = {}
    tokens: list[int] = []
    # a decision's words (the box shows Gradio's loading timer, "0.8s", while a frame is on its way)
    told = "() => /at token \\d+/.test(document.querySelector('#step-text').innerText.trim().split('\\n')[0])"
    for _ in range(60):
        page.wait_for_function(told, timeout=120_000)
        text = page.inner_text("#step-text")
        head = text.strip().splitlines()[0]
        m = re.search(r"at token (\d+)", head)
        assert m, head
        tokens.append(int(m.group(1)))
        time.sleep(0.3)   # let Plotly draw this decision's chart
        bars = page.evaluate("""() => { const el = document.querySelector('#step-plot .js-plotly-plot');
                                      if (!el || !el.data) return -1;
                                      return el.data.filter(t => t.type === 'bar')
                                                    .reduce((n, t) => n + (t.x || []).length, 0); }""")
        assert bars > 0, f"an empty step chart at: {head}"
        for name in ("DeepConf-style", "ST-BoN-style"):
            if name in head:
                seen.setdefault(name, text)
        if not page.is_visible("#step-next") or not page.is_enabled("#step-next"):
            break
        page.click("#step-next")
        try:
            page.wait_for_function("h => { const t = document.querySelector('#step-text').innerText.trim();"
                                   "       return !t.includes(h) && /at token \\d+/.test(t.split('\\n')[0]); }",
                                   arg=head, timeout=120_000)
        except Exception:
            break   # the last decision: nothing further to step to
    assert tokens == sorted(tokens), tokens   # token order, whichever arm decided
    assert seen, "no rival decision came up in the step-through"
    for name, text in seen.items():
        assert "It keeps the top" not in text and "alpha" not in text, text
        assert "no reward read" in text or "threshold" in text, text
        assert "at token ?" not in text and " –" not in text, text
    page.close()
