"""The rivals' own settings (issue 40, item 1): DeepConfSettings and STBoNSettings are frozen dataclasses validated
with the messages RunConfig gave; RunConfig carries one in ``settings``; arm specs build them; the flat shape of
recordings and run metadata (``RunConfig.flat``/``from_flat``) holds."""
from __future__ import annotations

import dataclasses
import importlib
import json

import pytest

from specrej.arms import REGISTRY, ArmKind, ArmSpecError, parse_arms
from specrej.core.about import ABOUTS, settings_fields, settings_from_flat
from specrej.core.config import RunConfig
from specrej.core.settings import DeepConfSettings, STBoNSettings

deepconf = importlib.import_module("specrej.methods.deepconf")   # the modules (the package exports functions
stbon = importlib.import_module("specrej.methods.stbon")         # of these names)

OLD_FLAT = ("warmup", "conf_percentile", "window", "conf_topk", "consensus", "buffer", "pick")


def test_runconfig_has_none_of_the_rivals_flat_fields_and_one_settings_field():
    names = {f.name for f in dataclasses.fields(RunConfig)}
    assert not names & set(OLD_FLAT) and "settings" in names
    assert RunConfig(prompt="x").settings is None
    with pytest.raises(TypeError):
        RunConfig(prompt="x", warmup=2)
    with pytest.raises(ValueError, match="is not a method's settings"):
        RunConfig(prompt="x", settings=DeepConfSettings)   # the class, not an object


def test_the_settings_classes_keep_runconfigs_old_defaults_and_help():
    assert dataclasses.asdict(DeepConfSettings()) == dict(warmup=4, conf_percentile=90.0, window=8, conf_topk=20,
                                                          consensus=0.0, pick="reward")
    assert dataclasses.asdict(STBoNSettings()) == dict(buffer=1.0, pick="reward")
    assert DeepConfSettings.help()["warmup"].startswith("DeepConf: traces written to the end first")
    assert STBoNSettings.help()["buffer"].startswith("ST-BoN: after the earliest step c")


def test_the_settings_classes_are_frozen():
    s = DeepConfSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.warmup = 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        STBoNSettings().buffer = 2.0
    assert DeepConfSettings(warmup=8.0).warmup == 8 and isinstance(DeepConfSettings(warmup=8.0).warmup, int)


@pytest.mark.parametrize("make,message", [
    (lambda: DeepConfSettings(warmup=0), "warmup=0 is not allowed: warmup is a positive number of DeepConf warm-up"),
    (lambda: DeepConfSettings(conf_percentile=0), r"conf_percentile=0 must be in \(0, 100\]"),
    (lambda: DeepConfSettings(window=0), r"window=0 is not allowed: window is a positive number of tokens"),
    (lambda: DeepConfSettings(conf_topk=0), "conf_topk=0 is not allowed"),
    (lambda: DeepConfSettings(consensus=1.5), r"consensus=1.5 must be in \[0, 1\]"),
    (lambda: DeepConfSettings(pick="best"), "pick='best' is unknown; choose one of reward, paper"),
    (lambda: STBoNSettings(buffer=-1), "buffer=-1 must be a number >= 0"),
    (lambda: STBoNSettings(pick="best"), "pick='best' is unknown; choose one of reward, paper"),
])
def test_the_settings_classes_validate_with_runconfigs_old_messages(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_each_method_names_its_settings_and_reads_them_from_a_config():
    assert deepconf.SETTINGS is DeepConfSettings is ABOUTS["deepconf"].settings
    assert stbon.SETTINGS is STBoNSettings is ABOUTS["stbon"].settings
    assert ABOUTS["bon"].settings is None and ABOUTS["sr"].settings is None
    mine = DeepConfSettings(warmup=2)
    cfg = RunConfig(prompt="x", settings=mine)
    assert ABOUTS["deepconf"].settings_for(cfg) is mine
    assert ABOUTS["stbon"].settings_for(cfg) == STBoNSettings()   # another method's: its own defaults
    assert ABOUTS["deepconf"].settings_for(RunConfig(prompt="x")) == DeepConfSettings()
    assert ABOUTS["sr"].settings_for(cfg) is None


def test_an_arm_spec_with_a_settings_key_builds_the_settings_object():
    base = RunConfig(prompt="x", n=8)
    dc, st, sr = parse_arms(["deepconf:warmup=2,window=4,n=12", "stbon:buffer=0.5,pick=paper", "sr:alpha=0.9"])
    cfg = dc.config(base)
    assert cfg.n == 12 and cfg.settings == DeepConfSettings(warmup=2, window=4)
    assert dc.overrides == (("warmup", 2), ("window", 4), ("n", 12)) and isinstance(dict(dc.overrides)["warmup"], int)
    assert dc.spec == "deepconf:warmup=2,window=4,n=12" and dc.short == "DeepConf-style warmup=2 window=4 n=12"
    assert st.config(base).settings == STBoNSettings(buffer=0.5, pick="paper")
    assert sr.config(base).settings is None and sr.config(base).alpha == 0.9
    # the base's settings are the method's unless the arm changes them; another method's are not its
    warm = RunConfig(prompt="x", n=8, settings=DeepConfSettings(warmup=3))
    assert parse_arms(["deepconf:window=2"])[0].config(warm).settings == DeepConfSettings(warmup=3, window=2)
    assert parse_arms(["stbon"])[0].config(warm).settings == STBoNSettings()


def test_a_bad_settings_value_raises_an_arm_spec_error_naming_the_arm():
    base = RunConfig(prompt="x")
    with pytest.raises(ArmSpecError, match=r"arm 'deepconf:warmup=0': warmup=0 is not allowed"):
        parse_arms(["deepconf:warmup=0"])[0].config(base)
    with pytest.raises(ArmSpecError, match=r"arm 'stbon:buffer=-0.5': buffer=-0.5 must be a number >= 0"):
        parse_arms(["stbon:buffer=-0.5"])[0].config(base)
    with pytest.raises(ArmSpecError, match="arm 'deepconf:window=wide': window='wide' is not an integer"):
        parse_arms(["deepconf:window=wide"])
    with pytest.raises(ArmSpecError, match="does not take 'buffer'"):
        parse_arms(["deepconf:buffer=1"])
    with pytest.raises(ArmSpecError, match="does not take 'settings'"):
        parse_arms(["deepconf:settings=x"])


def test_an_arm_kinds_options_are_runconfig_fields_or_its_settings_fields():
    assert REGISTRY["deepconf"].setting_names == tuple(f.name for f in dataclasses.fields(DeepConfSettings))
    with pytest.raises(ValueError, match="neither RunConfig fields nor fields of"):
        ArmKind("bon", "Best-of-N", ("n", "warmup"))   # Best-of-N has no settings class


def test_the_flat_shape_is_the_old_one_and_round_trips():
    flat = RunConfig(prompt="x").flat()
    assert "settings" not in flat and set(OLD_FLAT) <= set(flat)
    assert {k: flat[k] for k in OLD_FLAT} == dict(warmup=4, conf_percentile=90.0, window=8, conf_topk=20,
                                                  consensus=0.0, buffer=1.0, pick="reward") == settings_fields()
    json.dumps(flat)
    cfg = RunConfig(prompt="x", stop=("\n",), settings=DeepConfSettings(warmup=2, pick="paper"))
    flat = cfg.flat()
    assert (flat["warmup"], flat["pick"], flat["buffer"], flat["stop"]) == (2, "paper", 1.0, ("\n",))
    assert RunConfig.from_flat(json.loads(json.dumps(flat))) == cfg
    assert RunConfig.from_flat(RunConfig(prompt="x").flat()).settings is None
    assert RunConfig.from_flat({"prompt": "x", "buffer": 0.5, "pick": "paper"}).settings == STBoNSettings(0.5, "paper")
    assert RunConfig.from_flat({"prompt": "x", "unknown": 1}) == RunConfig(prompt="x")
    assert settings_from_flat({"pick": "paper"}) == DeepConfSettings(pick="paper")   # the first method that takes it
    with pytest.raises(ValueError, match="belong to no one method"):
        settings_from_flat({"warmup": 2, "buffer": 0.5})


def test_a_recorded_flat_config_finds_its_recording_and_a_changed_setting_does_not(tmp_path):
    from components.session import recordings
    from specrej.record import Recorder, make_meta

    cfg = RunConfig(prompt="Say hi.", n=4, max_new_tokens=8, budget=100)
    arms = parse_arms(["bon", "deepconf:warmup=2"])
    key = recordings.race_key("embedded", "embedded", cfg, arms, False, "float32")
    assert {k: key["config"][k] for k in OLD_FLAT} == settings_fields()   # flat, defaults filled, as before
    old = {**key, "config": {k: v for k, v in key["config"].items() if k not in OLD_FLAT}}   # a recording older
    rec = Recorder().recording(make_meta("embedded", "embedded", {}, prompt=cfg.prompt,   # than the rivals
                                         arms=[{"id": a.id, "spec": a.spec} for a in arms], race=old))
    rec.save(tmp_path / "race.json.gz")
    assert recordings.find_race(key, tmp_path) == tmp_path / "race.json.gz"
    changed = recordings.race_key("embedded", "embedded", dataclasses.replace(cfg, settings=STBoNSettings(buffer=2.0)),
                                  arms, False, "float32")
    assert recordings.find_race(changed, tmp_path) is None
    view = recordings.view_for(recordings.load(tmp_path / "race.json.gz"))
    assert view.cfg == cfg and [a.spec for a in view.specs] == ["bon", "deepconf:warmup=2"]


def test_the_cli_has_a_flag_per_setting_and_gives_it_to_the_arms_that_take_it(capsys):
    from specrej.cli import build_parser, main, with_settings

    helped = " ".join(build_parser().format_help().split())
    assert all(f"--{name.replace('_', '-')}" in helped for name in OLD_FLAT) and "--settings" not in helped
    arms = with_settings(parse_arms(["bon", "deepconf", "deepconf:warmup=2", "stbon"]), {"warmup": 8, "pick": "paper"})
    assert [a.spec for a in arms] == ["bon", "deepconf:warmup=8,pick=paper", "deepconf:warmup=2,pick=paper",
                                      "stbon:pick=paper"]   # the spec's own value wins; ids kept
    assert [a.id for a in arms] == ["bon", "deepconf", "deepconf2", "stbon"]
    assert arms[1].config(RunConfig(prompt="x", n=16)).settings == DeepConfSettings(warmup=8, pick="paper")
    assert main(["--prompt", "Say hi.", "--arms", "bon", "deepconf", "--warmup", "0"]) == 2   # before any model
    assert "arm 'deepconf:warmup=0': warmup=0 is not allowed" in capsys.readouterr().err


def test_the_cli_trace_writes_each_arms_settings_flat(tiny_lm_dir, tiny_reward_dir, tmp_path):
    from specrej.cli import main

    out = tmp_path / "trace.json"
    rc = main(["--model", tiny_lm_dir, "--reward", f"hf:{tiny_reward_dir}", "--prompt", "Say hi.", "--n", "6",
               "--max-new-tokens", "8", "--budget", "300", "--arms", "bon", "deepconf:warmup=2", "--window", "4",
               "--json", str(out), "--quiet"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert "settings" not in data["config"] and data["config"]["warmup"] == 4   # the base: the defaults, by name
    bon, dc = (a["config"] for a in data["arms"])
    assert (bon["warmup"], bon["window"]) == (4, 8) and (dc["warmup"], dc["window"]) == (2, 4)
    assert RunConfig.from_flat(dc).settings == DeepConfSettings(warmup=2, window=4)
