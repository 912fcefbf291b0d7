"""Text that is not valid Unicode (a lone UTF-16 surrogate, as a raw API call or a script can
send) is refused with a message before any model work, and a trace holding one still writes."""
from __future__ import annotations

import json

import pytest

from specrej import RewardError, RunConfig, load_reward
from specrej.core.config import check_text
from specrej.rewards import PreferenceReward

LONE = ["\ud800", "a\udfffb", "tips \udc80 for", "🙂\ud83d"]   # the last: an emoji's high half, alone


@pytest.mark.parametrize("bad", LONE)
def test_a_lone_surrogate_in_the_prompt_or_a_stop_string_is_a_clear_value_error(bad):
    with pytest.raises(ValueError, match="prompt contains a character that is not valid text") as e:
        RunConfig(prompt=bad)
    assert f"position {bad.index(next(ch for ch in bad if 0xD800 <= ord(ch) <= 0xDFFF))}" in str(e.value)
    str(e.value).encode("utf-8")   # the message itself can be shown and serialised
    with pytest.raises(ValueError, match="stop string contains a character"):
        RunConfig(prompt="hi", stop=("ok", bad))


@pytest.mark.parametrize("bad", LONE)
def test_a_lone_surrogate_in_the_preference_is_a_reward_error_before_loading_a_model(bad, monkeypatch):
    from specrej import rewards

    monkeypatch.setattr(rewards._Embedder, "get", lambda *a, **k: pytest.fail("no model should load"))
    with pytest.raises(RewardError, match="preference contains a character that is not valid text"):
        PreferenceReward(bad)
    with pytest.raises(RewardError, match="not valid text"):
        load_reward(f"preference:{bad}")


@pytest.mark.parametrize("good", ["", "plain", "naïve café", "🙂 emoji", "\x00\x1b[31m", "\u202e\ufeff",
                                  "𝔘𝔫𝔦"])
def test_valid_text_passes(good):
    check_text("prompt", good)


def test_a_trace_holding_a_lone_surrogate_is_written_and_reads_back(tmp_path):
    from components.session.trace import write_trace
    from components.state.view import RunView

    view = RunView(RunConfig(prompt="hi", n=2, max_new_tokens=4), model_label="m\ud800", reward_label="r\udfff")
    path = write_trace(view, tmp_path)     # never UnicodeEncodeError
    data = json.loads(open(path, encoding="utf-8").read())
    assert data["generator"] == "m\ud800" and data["reward"] == "r\udfff"
