"""Issue 61 (3): a page usable from its first second. While the server warms up (models loading, the step
compiling and being measured, all on the torch thread), no page event waits for it on a worker thread: a hostile
probe's 45 concurrent ``recorded_settings`` calls each held one (15 -> 54 threads) and ``/config`` timed out at
40 s for everyone. Here the warm-up holds the torch thread the whole time, as the real one does, and every call
answers at once with the warming words; ``/config`` still answers. No test asserts a speed: the bounds below only
guard against a hang (a handler that waited would wait until the gate opens, which is never before the checks)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import HANG_GUARD_S, launch_local

CALLS = 45


@pytest.fixture()
def warming(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    """An app whose warm-up is still running and holds the torch thread (never loaded: nothing measured)."""
    import app
    from components.session.context import AppContext
    from components.session.worker import torch_worker

    env = {"SPECREJ_MODEL": tiny_lm_dir, "SPECREJ_REWARD": f"hf:{tiny_reward_dir}", "SPECREJ_PROFILE_FILE": "off"}
    ctx = AppContext.from_env(env, trace_dir=str(tmp_path_factory.mktemp("traces")), min_frame_interval=0.0)
    gate, held = threading.Event(), threading.Event()
    torch_worker().submit(lambda: (held.set(), gate.wait(HANG_GUARD_S)))   # the warm-up's work on the torch thread
    assert held.wait(HANG_GUARD_S)
    ctx.loaded.warm_thread = threading.Thread(target=gate.wait, args=(HANG_GUARD_S,), daemon=True)
    ctx.loaded.warm_thread.start()
    demo = app.build_demo(ctx)
    url = launch_local(demo)
    try:
        yield ctx, demo, url, gate
    finally:
        gate.set()
        demo.close()


def test_45_concurrent_page_calls_during_the_warm_up_answer_at_once_and_config_still_answers(warming):
    ctx, demo, url, gate = warming
    base = url.rstrip("/") + "/gradio_api"
    prompt = ctx.examples[0]

    def call(i):
        r = httpx.post(f"{base}/run/recorded_settings", json={"data": [False, None, prompt, None], "session_hash": f"probe{i}"},
                       timeout=HANG_GUARD_S)
        return r.status_code, r.text

    with ThreadPoolExecutor(CALLS) as pool:
        answers = list(pool.map(call, range(CALLS)))
        config = httpx.get(url.rstrip("/") + "/config", timeout=HANG_GUARD_S)
    assert not gate.is_set() and ctx.warming            # all of it while the warm-up still held the torch thread
    assert config.status_code == 200 and "components" in config.json()
    assert all(code == 200 for code, _ in answers), answers[:3]
    assert all("Warming up" in text for _, text in answers), answers[0][1][:400]   # the warming answer, not a wait
    # a page call after them answers as promptly (no worker thread was left holding)
    again = httpx.get(url.rstrip("/") + "/config", timeout=HANG_GUARD_S)
    assert again.status_code == 200


def test_the_warming_words_say_how_long_from_the_last_start(warming):
    import time

    from components.session import pace

    ctx, *_ = warming
    assert "about a minute" in pace.warming_words(ctx)            # no start measured here yet
    ctx.loaded.warm_started, ctx.loaded.ready_s = time.monotonic() - 10.0, 42.0
    words = pace.warming_words(ctx)
    assert "Warming up" in words and "about 32 s more" in words and "42 s" in words
    ctx.loaded.warm_started = time.monotonic() - 100.0
    assert "any moment now" in pace.warming_words(ctx)
