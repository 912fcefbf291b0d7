"""Issue 64 (5): the smaller items: a relative path that is not there is named at once, a wrong type is called a
wrong type, the docs' CPU budget is the code's, and an exception inside a reward names the reward."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_a_relative_path_that_is_not_there_says_no_such_folder_at_once(tmp_path, monkeypatch):
    from specrej import ModelSpecError, RewardError, load_generator, load_reward

    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    t0 = time.perf_counter()
    with pytest.raises(ModelSpecError, match=r"no such folder 'models/nope': 'models' is a folder here"):
        load_generator("models/nope")
    with pytest.raises(RewardError, match=r"no such folder 'models/nope'"):
        load_reward("hf:models/nope")
    with pytest.raises(RewardError, match=r"no such folder 'models/nope'"):
        load_reward("models/nope")
    assert time.perf_counter() - t0 < 5   # never the hub's retries (23 s before)
    from specrej.engine.models import missing_folder

    assert missing_folder("HuggingFaceTB/SmolLM2-135M-Instruct") is None   # no such folder here: a hub id


@pytest.mark.parametrize("field, value", [("alpha", "0.5"), ("alpha", None), ("temperature", "hot"),
                                          ("top_p", True)])
def test_a_wrong_type_is_called_a_wrong_type(field, value):
    from specrej import RunConfig

    with pytest.raises(ValueError, match=rf"{field}={value!r} is a {type(value).__name__}, not a number"):
        RunConfig(prompt="hi", **{field: value})
    with pytest.raises(ValueError, match=r"alpha=1.5 is outside \[0, 1\)"):
        RunConfig(prompt="hi", alpha=1.5)


def test_the_docs_cpu_budget_is_the_codes():
    from specrej.core.config import DEFAULT_CPU_BUDGET

    text = (ROOT / "docs/library.md").read_text()
    assert f"`SPECREJ_CPU_BUDGET` ({DEFAULT_CPU_BUDGET})" in text
    assert "`SPECREJ_CPU_BUDGET` (2048)" not in text


def test_an_exception_inside_a_reward_names_the_reward(tiny_lm):
    from specrej import CallableReward, RunConfig, race_arms
    from specrej.core.scoring import checked

    broken = CallableReward(lambda prompt, rs: [1 / 0 for _ in rs], name="my-divider")
    with pytest.raises(ZeroDivisionError) as info:   # its own type, so a caller can still catch it
        checked(broken, "Explain.", ["a", "b"])
    assert "raised inside the reward 'my-divider'" in "\n".join(info.value.__notes__)
    with pytest.raises(ZeroDivisionError) as info:
        list(race_arms(tiny_lm, broken, RunConfig(prompt="Explain.", n=2, max_new_tokens=4), ["bon", "sr"]))
    assert any("'my-divider'" in n for n in info.value.__notes__)
