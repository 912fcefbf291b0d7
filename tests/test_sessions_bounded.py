"""Made-up sessions cost a bounded amount (issue 50, item 1): every session hash Gradio sees keeps a copy of the
page's config (about 0.4 MB here); the app keeps at most SPECREJ_MAX_SESSIONS of them, the least recently used
dropped first, and a session in use keeps working through a flood of others."""
from __future__ import annotations

import httpx
import pytest
from conftest import HANG_GUARD_S, tiny_app_context


@pytest.fixture(scope="module")
def ctx(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    return tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


def test_a_flood_of_made_up_sessions_keeps_at_most_the_cap(ctx, monkeypatch):
    import app
    from conftest import launch_local

    monkeypatch.setenv("SPECREJ_MAX_SESSIONS", "5")
    demo = app.build_demo(ctx)
    url = launch_local(demo).rstrip("/")
    try:
        def visit(session: str) -> httpx.Response:   # what a page does as it loads: the link's settings read back
            return httpx.post(f"{url}/gradio_api/run/from_link", json={"data": [], "session_hash": session},
                              timeout=HANG_GUARD_S)

        assert visit("kept-session").status_code == 200
        for i in range(20):
            visit(f"made-up-{i}")
            if i % 3 == 0:
                assert visit("kept-session").status_code == 200   # in use: never the one dropped
        held = list(demo.state_holder.session_data)
        assert len(held) <= 5, len(held)
        assert "kept-session" in held and "made-up-0" not in held
    finally:
        demo.close()
