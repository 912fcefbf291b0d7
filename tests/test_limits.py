"""Deployment limits and the model-loading policy."""
from __future__ import annotations

import pytest

from specrej import RunConfig
from components.deploy.limits import LimitError, Limits, ModelPolicy, PolicyError, smaller_budget


def test_defaults_and_env_overrides():
    assert Limits.from_env({}) == Limits()
    lim = Limits.from_env({"SPECREJ_MAX_N": "8", "SPECREJ_MAX_PROMPT_CHARS": "10"})
    assert lim.max_n == 8 and lim.max_prompt_chars == 10 and lim.max_new_tokens == Limits().max_new_tokens
    with pytest.raises(LimitError, match="SPECREJ_MAX_N"):
        Limits.from_env({"SPECREJ_MAX_N": "lots"})
    with pytest.raises(LimitError, match="SPECREJ_MAX_N"):
        Limits.from_env({"SPECREJ_MAX_N": "0"})


@pytest.mark.parametrize("kw,env", [
    (dict(prompt="x" * 11), "SPECREJ_MAX_PROMPT_CHARS"),
    (dict(n=9), "SPECREJ_MAX_N"),
    (dict(max_new_tokens=65), "SPECREJ_MAX_NEW_TOKENS"),
    (dict(budget=1001), "SPECREJ_MAX_BUDGET"),
])
def test_over_limit_names_the_limit(kw, env):
    lim = Limits(max_prompt_chars=10, max_n=8, max_new_tokens=64, max_budget=1000)
    cfg = RunConfig(**{"prompt": "hi", "n": 4, "max_new_tokens": 32, **kw})
    with pytest.raises(LimitError, match=env):
        lim.check(cfg)
    lim.check(RunConfig(prompt="hi", n=8, max_new_tokens=64, budget=1000))  # at the limit is fine


def test_only_offered_or_allowlisted_models_load():
    pol = ModelPolicy.from_env({"SPECREJ_ALLOWED_MODELS": "org/extra, other/one"}, offered=("embedded",))
    assert pol.check("embedded") == "embedded" and pol.check("org/extra") == "org/extra"
    for bad in ["evil/model", "/etc/passwd", "../../x", "", "embedded; rm -rf /"]:
        with pytest.raises(PolicyError):
            pol.check(bad)
    assert ModelPolicy.from_env({"SPECREJ_ALLOW_CUSTOM_MODELS": "1"}).check("any/model") == "any/model"


def test_remote_code_is_refused_unless_enabled():
    pol = ModelPolicy.from_env({}, offered=("org/m",))
    with pytest.raises(PolicyError, match="SPECREJ_ALLOW_REMOTE_CODE"):
        pol.check("org/m", trust_remote_code=True)
    ok = ModelPolicy.from_env({"SPECREJ_ALLOW_REMOTE_CODE": "1"}, offered=("org/m",))
    assert ok.check("org/m", trust_remote_code=True) == "org/m"


def test_smaller_budget_halves():
    assert smaller_budget(RunConfig(prompt="hi", budget=None), 1000).budget == 500
    assert smaller_budget(RunConfig(prompt="hi", budget=3), 3).budget == 1


def test_frames_are_paced_by_the_deployment(monkeypatch):
    """One live frame a second on a CPU (the browser's redraws share its cores), four on a GPU;
    SPECREJ_FRAME_MS sets it, and a bad value is refused naming the variable."""
    from components.session import context
    from components.session.context import AppContext

    monkeypatch.setattr(context, "_cuda", lambda: False)
    assert AppContext.from_env({}).min_frame_interval == context.FRAME_MS_CPU / 1000 == 1.0
    monkeypatch.setattr(context, "_cuda", lambda: True)
    assert AppContext.from_env({}).min_frame_interval == context.FRAME_MS_GPU / 1000 == 0.25
    assert AppContext.from_env({"SPECREJ_FRAME_MS": "500"}).min_frame_interval == 0.5
    with pytest.raises(ValueError, match="SPECREJ_FRAME_MS"):
        AppContext.from_env({"SPECREJ_FRAME_MS": "10"})


def test_one_place_checks_a_deployment_limit(monkeypatch):
    """The request's fields (state/fields.Spec.check) and each arm's config (Limits.check) both ask
    Limits.over; no other code compares a value with a deployment limit's message."""
    from pathlib import Path

    from components.state.request import RunRequest

    asked = []
    real = Limits.over
    monkeypatch.setattr(Limits, "over", lambda self, name, value, said: asked.append(name) or real(self, name, value, said))
    lim = Limits(max_prompt_chars=10, max_n=8)
    with pytest.raises(ValueError, match="SPECREJ_MAX_N"):
        RunRequest.parse({"prompt": "hi", "n": 9}, lim)
    with pytest.raises(ValueError, match="SPECREJ_MAX_PROMPT_CHARS"):
        RunRequest.parse({"prompt": "x" * 11}, lim)
    with pytest.raises(LimitError, match="SPECREJ_MAX_N"):
        lim.check(RunConfig(prompt="hi", n=9))
    assert asked.count("max_n") == 2 and "max_prompt_chars" in asked
    root = Path(__file__).resolve().parents[1]
    said = [str(p.relative_to(root)) for d in ("components", "specrej") for p in (root / d).rglob("*.py")
            if "allows at most" in p.read_text(encoding="utf-8")]
    assert said == ["components/deploy/limits.py"]
