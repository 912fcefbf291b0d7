"""The two lecture-mode pictures of docs/app.md, taken in Chromium at 1280x720 from the app as ``python app.py``
builds it (the embedded models, the page's defaults):

    python scripts/lecture_shots.py [--out assets]

- ``lecture-mid-race-1280x720.png``: a live Run of the first example at real pace, taken once Speculative
  Rejection has made its first decision (the status says "1 decision taken");
- ``lecture-step-1280x720.png``: the same race's recording replayed in step mode, at its second decision.

Prints what each status said when its picture was taken. Pictures, not figures: nothing here is timed."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from lecture_load import ARGS, CHROMIUM, serve  # noqa: E402  (the same server and browser flags)

STATUS = "document.querySelector('#status [data-testid=markdown]').innerText"
WAIT_MS = 300_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "assets")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    demo, url = serve()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.set_default_timeout(WAIT_MS)
            page.goto(url + "?lecture=1")
            page.wait_for_selector("#run")
            page.locator("#pace label", has_text="real pace").locator("input").check()
            page.click("#run")
            page.wait_for_function(f"/Racing.*decision.? taken/.test({STATUS})", polling="raf")
            page.wait_for_timeout(600)   # the frame of that decision drawn
            shot = a.out / "lecture-mid-race-1280x720.png"
            print(shot.name, "|", page.evaluate(STATUS)[:200].replace("\n", " "))
            page.screenshot(path=str(shot))
            page.click("#stop")
            page.wait_for_function(f"/Stopped/.test({STATUS})")
            page.wait_for_function("!document.querySelector('#replay').disabled")
            page.check("#step input")
            page.locator("#pace label", has_text="instant").locator("input").check()
            page.click("#replay")
            page.wait_for_function(f"/decision 1 of/.test({STATUS})")
            page.keyboard.press("ArrowRight")
            page.wait_for_function(f"/decision 2 of/.test({STATUS})")
            page.wait_for_timeout(600)
            shot = a.out / "lecture-step-1280x720.png"
            print(shot.name, "|", page.evaluate(STATUS)[:200].replace("\n", " "),
                  "| scrollY", page.evaluate("window.scrollY"))
            page.screenshot(path=str(shot))
            browser.close()
    finally:
        demo.close()


if __name__ == "__main__":
    main()
