"""The library's public API as docs/library.md states it (issue 51): a reward needs only ``score`` and a plain
function is one; loaders keyed by the resolved path and the files' modification times, with ``unload()``, that
refuse a model of the wrong kind with what to load instead; one error type for a reward's bad scores; the
version, ``py.typed`` and the provenance every written file carries."""
from __future__ import annotations

import json
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

import specrej
from specrej import (CallableReward, Finished, ModelSpecError, Reward, RewardError, RunConfig, best_of_n,
                     load_generator, load_reward, race_arms, run_to_completion, speculative_rejection)
from specrej.core.scoring import Scored, checked

from conftest import _llama_config, build_tokenizer

PROMPT = "Give me three tips for staying healthy."
CFG = RunConfig(prompt=PROMPT, n=4, max_new_tokens=6, budget=200, alpha=0.5)


# ------------------------------------------------------------------ the Reward protocol: only score is required
class OnlyScore:
    """A reward as docs/library.md describes one: an object with score(...), nothing else."""

    def __init__(self):
        self.calls = 0

    def score(self, prompt, responses, stats=None):
        self.calls += 1
        return Scored([len(set(r)) + 0.01 * len(r) for r in responses])


class TwoArgScore:
    """score(prompt, responses), no statistics parameter, returning a plain list (TRL's shape)."""

    def score(self, prompt, responses):
        return [float(len(r)) for r in responses]


class ReadsStats:
    """Only score and uses_token_stats: the engine must hand it the statistics."""

    uses_token_stats = True

    def __init__(self):
        self.seen = []

    def score(self, prompt, responses, stats=None):
        self.seen.append(stats)
        return Scored([s.mean_logprob for s in stats])


def variety(prompt, responses):
    return [len(set(r)) + 0.01 * len(r) for r in responses]


# ------------------------------------------------------------------ wall clocks: no arm pays the one-off build
def test_the_one_off_build_of_the_decoding_step_is_in_no_arms_wall_time(tiny_lm, monkeypatch):
    """Issue 51 (1): in a fresh process the first arm to step built the compiled step inside its own clock (sr
    42.1 s, bon 3.4 s; three identical races 8.84x, 2.73x, 2.03x). Here the build costs 1000 s on a fake clock:
    whichever arm goes first, no arm's wall time holds it, and ``warm_up`` reports it the one time it runs."""
    import time

    from specrej import race, warm_up
    from specrej.backends import hf

    fake = {"s": 0.0, "built": 0}
    real = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: real() + fake["s"])

    def build(cls, lm):   # the build, as slow as a first compile can be
        if not fake["built"]:
            fake["s"] += 1000.0
        fake["built"] += 1

    monkeypatch.setattr(hf.Engine, "warm_up", classmethod(build))
    assert tiny_lm.backend is hf.Engine
    for first in ("sr", "bon"):
        fake["built"] = 0
        arms = {"sr": speculative_rejection(tiny_lm, variety, CFG), "bon": best_of_n(tiny_lm, variety, CFG)}
        streams = {first: arms[first], **{k: v for k, v in arms.items() if k != first}}
        done = [e for e in race(streams, sequential=True) if isinstance(e, Finished)]
        assert len(done) == 2 and fake["built"] == 2   # each arm asked; the first built
        assert all(e.ledger.wall_s < 1000.0 for e in done), [(e.arm, e.ledger.wall_s) for e in done]
    fake["built"] = 0
    assert warm_up(tiny_lm) >= 1000.0 and warm_up(tiny_lm) < 1000.0   # the build's seconds, the first time only


@pytest.mark.parametrize("method", [best_of_n, speculative_rejection])
def test_an_object_with_only_score_runs_every_method(tiny_lm, method):
    reward = OnlyScore()
    fin = run_to_completion(method(tiny_lm, reward, CFG))
    assert reward.calls > 0 and fin.winner.score is not None
    assert fin.ledger.reward_flops == 0   # n_params defaults to 0


@pytest.mark.parametrize("method", [best_of_n, speculative_rejection])
def test_a_plain_function_is_a_reward_and_scores_as_callable_reward_does(tiny_lm, method):
    plain = run_to_completion(method(tiny_lm, variety, CFG))
    wrapped = run_to_completion(method(tiny_lm, CallableReward(variety), CFG))
    assert [c.score for c in plain.candidates] == [c.score for c in wrapped.candidates]
    assert plain.winner.id == wrapped.winner.id


def test_race_arms_takes_a_score_only_object_and_a_two_argument_score(tiny_lm):
    for reward in (OnlyScore(), TwoArgScore()):
        finished = [e for e in race_arms(tiny_lm, reward, CFG, ["bon", "sr"]) if type(e).__name__ == "Finished"]
        assert {f.arm for f in finished} == {"bon", "sr"}


def test_a_reward_that_declares_it_reads_statistics_gets_them(tiny_lm):
    reward = ReadsStats()
    fin = run_to_completion(best_of_n(tiny_lm, reward, CFG))
    assert reward.seen and all(stats is not None and len(stats) > 0 for stats in reward.seen)
    assert all(c.score <= 0 for c in fin.candidates)   # mean log-probabilities


def test_as_reward_fills_the_optional_members_and_keeps_a_full_reward_as_is(length_reward):
    from specrej import as_reward

    assert isinstance(OnlyScore(), Reward)   # a runtime-checkable protocol whose one member is score
    seen = as_reward(OnlyScore())
    assert (seen.name, seen.n_params, seen.uses_token_stats) == ("OnlyScore", 0, False)
    assert seen.score(PROMPT, ["ab", "abc"]).scores == OnlyScore().score(PROMPT, ["ab", "abc"]).scores
    assert as_reward(length_reward) is length_reward
    fn = as_reward(variety)
    assert isinstance(fn, CallableReward) and fn.name == "variety"
    assert load_reward(variety).name == "variety" and load_reward(OnlyScore()).n_params == 0
    with pytest.raises(RewardError, match="is not a reward"):
        as_reward(42)


# ------------------------------------------------------------------ one error type for a reward's bad scores
@pytest.mark.parametrize("out", [["high", "low"], ["0.5", "0.7"], [b"1", 2.0], [None, 1.0], "0.5 0.7"])
def test_a_reward_returning_strings_or_non_numbers_is_a_reward_error(out):
    bad = CallableReward(lambda p, rs: out, name="words")
    with pytest.raises(RewardError, match="reward 'words' returned"):
        checked(bad, PROMPT, ["a", "b"])


def test_a_reward_returning_strings_mid_run_stops_it_with_a_reward_error(tiny_lm):
    with pytest.raises(RewardError, match="a string"):
        run_to_completion(best_of_n(tiny_lm, lambda p, rs: ["good"] * len(rs), CFG))


def test_numbers_of_any_numeric_type_still_score():
    assert checked(CallableReward(lambda p, rs: torch.tensor([1.0, 2.0])), PROMPT, ["a", "b"]).scores == [1.0, 2.0]
    assert checked(TwoArgScore(), PROMPT, ["a", "bb"]).scores == [1.0, 2.0]


# ------------------------------------------------------------------ load_generator's cache and unload()
@pytest.fixture
def own_lm_dir(tiny_lm_dir, tmp_path):
    """A copy of the tiny generator's folder that a test may save over."""
    return str(shutil.copytree(tiny_lm_dir, tmp_path / "own-lm"))


def test_one_folder_however_spelled_is_one_cached_generator(own_lm_dir, monkeypatch):
    lm = load_generator(own_lm_dir)
    assert load_generator(own_lm_dir + "/") is lm
    monkeypatch.chdir(Path(own_lm_dir).parent)
    assert load_generator("./own-lm") is lm
    link = Path(own_lm_dir).parent / "link-to-lm"
    link.symlink_to(own_lm_dir)
    assert load_generator(str(link)) is lm


def test_weights_saved_again_in_place_load_anew(own_lm_dir):
    import transformers

    old = load_generator(own_lm_dir)
    old_head = old.model.lm_head.weight.detach().clone()
    torch.manual_seed(123)
    transformers.LlamaForCausalLM(_llama_config(build_tokenizer())).save_pretrained(own_lm_dir)
    later = max(f.stat().st_mtime for f in Path(own_lm_dir).iterdir()) + 10
    for f in Path(own_lm_dir).glob("*.safetensors"):   # a later modification time, whatever the clock's grain
        os.utime(f, (later, later))
    new = load_generator(own_lm_dir)
    assert new is not old
    assert not torch.equal(new.model.lm_head.weight, old_head)
    assert torch.equal(old.model.lm_head.weight, old_head)   # the caller's old object is left as it was
    assert load_generator(own_lm_dir) is new


def test_unload_forgets_every_loaded_generator_and_reward(own_lm_dir, tiny_reward_dir):
    lm, rm = load_generator(own_lm_dir), load_reward(f"hf:{tiny_reward_dir}")
    assert specrej.unload() >= 2
    assert load_generator(own_lm_dir) is not lm
    assert load_reward(f"hf:{tiny_reward_dir}") is not rm
    assert load_reward(f"hf:{tiny_reward_dir}/") is load_reward(f"hf:{tiny_reward_dir}")
    assert lm.decode(lm.render("hi")) is not None   # an object the caller holds still works


# ------------------------------------------------------------------ models of the wrong kind, refused with the fix
def _save(tmp_path, name: str, model) -> str:
    path = tmp_path / name
    model.save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return str(path)


def test_an_encoder_is_refused_as_a_generator_with_what_to_load_instead(tmp_path):
    import transformers

    tok = build_tokenizer()
    bert = transformers.BertLMHeadModel(transformers.BertConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        is_decoder=True, pad_token_id=tok.pad_token_id))
    folder = _save(tmp_path, "bert-lm-head", bert)
    with pytest.raises(ModelSpecError) as err:
        load_generator(folder)
    words = str(err.value)
    assert "bert" in words and "encoder" in words and "ForCausalLM" in words


def test_a_classification_head_is_refused_as_a_generator_and_pointed_at_load_reward(tiny_reward_dir):
    with pytest.raises(ModelSpecError) as err:
        load_generator(tiny_reward_dir)
    words = str(err.value)
    assert "LlamaForSequenceClassification" in words and f"load_reward('hf:{tiny_reward_dir}')" in words


def test_which_configs_may_generate():
    from transformers import BertConfig, GPT2Config, LlamaConfig, T5Config

    from specrej.engine.models import generator_refusal

    assert generator_refusal(LlamaConfig(architectures=["LlamaForCausalLM"]), "x") is None
    assert generator_refusal(GPT2Config(architectures=["GPT2LMHeadModel"]), "x") is None
    assert generator_refusal(LlamaConfig(), "x") is None   # no architecture listed: a llama is a decoder
    assert generator_refusal(LlamaConfig(architectures=["CustomModel"],
                                         auto_map={"AutoModelForCausalLM": "m.Custom"}), "x") is None
    assert "encoder-decoder" in generator_refusal(T5Config(), "x")
    assert "encoder" in generator_refusal(BertConfig(is_decoder=True, architectures=["BertLMHeadModel"]), "x")
    assert "no head at all" in generator_refusal(LlamaConfig(architectures=["LlamaModel"]), "x")


def test_a_causal_lm_is_refused_as_a_reward_model(tiny_lm_dir):
    with pytest.raises(RewardError) as err:
        load_reward(f"hf:{tiny_lm_dir}")
    words = str(err.value)
    assert "LlamaForCausalLM" in words and "no score head" in words and "load_generator" in words


def test_a_missing_reward_folder_is_an_unknown_model_as_for_the_generator(tmp_path):
    missing = str(tmp_path / "missing")
    with pytest.raises(ModelSpecError, match="unknown model"):
        load_generator(missing)
    with pytest.raises(RewardError, match="unknown reward model"):
        load_reward(f"hf:{missing}")
    with pytest.raises(RewardError, match="unknown reward model"):
        load_reward("hf:/missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RewardError, match="no config.json"):
        load_reward(f"hf:{tmp_path / 'empty'}")


# ------------------------------------------------------------------ version, py.typed, provenance
def test_version_and_py_typed():
    assert specrej.__version__ == metadata.version("specrej")
    package = Path(specrej.__file__).parent
    assert (package / "py.typed").is_file()
    import tomllib

    pyproject = tomllib.loads((package.parent / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["specrej"]


def test_the_version_falls_back_to_the_checkouts_pyproject(monkeypatch):
    from specrej import origin as prov

    monkeypatch.setattr(prov, "package_version", lambda name: None)   # a clone that was never installed
    assert prov.specrej_version() == metadata.version("specrej")


def test_provenance_names_versions_machine_dtype_threads_time_and_command():
    rec = specrej.provenance(dtype=torch.float32, command=["python", "-m", "specrej", "--n", "4"])
    assert rec["specrej"] == specrej.__version__ and rec["torch"] == torch.__version__
    assert rec["transformers"] == metadata.version("transformers")
    assert rec["python"] == ".".join(map(str, sys.version_info[:3]))
    assert rec["device"] == ("cuda" if torch.cuda.is_available() else "cpu") and rec["device_name"]
    assert rec["dtype"] == "float32" and rec["torch_threads"] == torch.get_num_threads()
    assert rec["time_utc"].endswith("+00:00") and rec["command"] == "python -m specrej --n 4"
    json.dumps(rec)   # plain JSON values


def test_the_cli_trace_carries_its_provenance(tiny_lm_dir, tiny_reward_dir, tmp_path):
    from specrej.cli import main

    out = tmp_path / "trace.json"
    argv = ["--model", tiny_lm_dir, "--reward", f"hf:{tiny_reward_dir}", "--prompt", PROMPT, "--n", "4",
            "--max-new-tokens", "6", "--budget", "200", "--dtype", "fp32", "--json", str(out), "--quiet"]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    prov = data["provenance"]
    assert prov["transformers"] == metadata.version("transformers") and prov["specrej"] == specrej.__version__
    assert prov["dtype"] == "float32" and prov["device"] == "cpu" and prov["time_utc"]
    assert prov["command"].startswith("python -m specrej --model ")
    assert {"config", "model", "reward", "dtype", "arms", "comparison", "events"} <= set(data)   # kept


def test_the_bench_meta_carries_its_provenance(tiny_lm_dir, tiny_reward_dir, tmp_path):
    from specrej.bench.run import main

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "a", "kind": "advice", "prompt": PROMPT}) + "\n")
    result = main(["--model", tiny_lm_dir, "--reward", tiny_reward_dir, "--prompts", str(prompts), "--n-ref", "4",
                   "--points", "0.5@4", "--rules", "paper", "--rivals", "none", "--rivals-live", "none",
                   "--max-new-tokens", "6", "--budget", "100", "--no-engine", "--threads", str(torch.get_num_threads()),
                   "--out", str(tmp_path)])
    meta = json.loads((tmp_path / "bench.json").read_text())["meta"]
    assert meta == json.loads(json.dumps(result["meta"]))
    assert meta["transformers"] == metadata.version("transformers") and meta["torch"] == torch.__version__
    prov = meta["provenance"]
    assert prov["specrej"] == specrej.__version__ and prov["dtype"] == "float32" and prov["torch_threads"] == torch.get_num_threads()
    assert prov["command"].startswith("python -m specrej.bench --model ")


# ------------------------------------------------------------------ py: rewards, a reward model's label and batch
REWARD_FILE = '''
from specrej import Scored

def words(prompt, responses):
    return [float(len(r.split())) for r in responses]

class Counter:
    name = "counter"
    def score(self, prompt, responses, stats=None):
        return Scored([float(len(r)) for r in responses], 0)

instance = Counter()
broken = 3
'''


def test_a_python_reward_by_module_or_file_and_name(tmp_path, monkeypatch, tiny_lm):
    (tmp_path / "my_rewards.py").write_text(REWARD_FILE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_rewards", raising=False)
    fn = load_reward("py:my_rewards:words")
    assert fn.name == "py:my_rewards:words" and fn.score(PROMPT, ["a b c", "a"]).scores == [3.0, 1.0]
    by_file = load_reward(f"py:{tmp_path / 'my_rewards.py'}:Counter")   # a class: built with no arguments
    assert by_file.name == "counter" and list(by_file.score(PROMPT, ["abc"]).scores) == [3.0]
    assert load_reward("py:my_rewards:instance").name == "counter"
    f = run_to_completion(best_of_n(tiny_lm, fn, CFG))
    assert f.winner.score == max(c.score for c in f.candidates)


@pytest.mark.parametrize("spec, words", [
    ("py:no_such_module_here:fn", "importing 'no_such_module_here' failed: ModuleNotFoundError"),
    ("py:my_rewards:nothing", "'my_rewards' has no 'nothing'"),
    ("py:my_rewards:broken", "is not a reward"),
    ("py:my_rewards", "py: needs a module or a .py file and a name"),
    ("py:missing/file.py:fn", "no such file 'missing/file.py'"),
])
def test_a_python_reward_that_cannot_load_says_why(tmp_path, monkeypatch, spec, words):
    (tmp_path / "my_rewards.py").write_text(REWARD_FILE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_rewards", raising=False)
    with pytest.raises(RewardError, match=words.replace("(", r"\(").replace(".", r"\.")):
        load_reward(spec)


def test_the_cli_races_a_python_reward(tiny_lm_dir, tmp_path, monkeypatch, capsys):
    from specrej.cli import main

    (tmp_path / "my_rewards.py").write_text(REWARD_FILE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_rewards", raising=False)
    assert main(["--model", tiny_lm_dir, "--reward", "py:my_rewards:words", "--prompt", PROMPT, "--n", "4",
                 "--max-new-tokens", "6", "--budget", "200", "--quiet"]) == 0
    assert "== Speculative Rejection against Best-of-N" in capsys.readouterr().out


@pytest.fixture(scope="module")
def three_label_dir(tmp_path_factory):
    """A 3-class sequence classifier with named labels, saved hub-style."""
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(3)
    tok = build_tokenizer()
    model = LlamaForSequenceClassification(_llama_config(tok, num_labels=3, id2label={0: "bad", 1: "ok", 2: "good"},
                                                         label2id={"bad": 0, "ok": 1, "good": 2}))
    path = tmp_path_factory.mktemp("three-labels")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path), model.eval(), tok


def test_a_reward_model_scores_the_output_its_label_names_in_batches(three_label_dir):
    path, model, tok = three_label_dir
    answers = ["Drink water.", "Sleep well and walk every day.", "Hello!"]
    logits = load_reward(f"hf:{path}", batch_size=3).model
    by_index = {i: load_reward(f"hf:{path}", label=i, batch_size=1) for i in range(3)}
    by_name = load_reward(f"hf:{path}", label="good", batch_size=2)
    assert by_name.name.endswith("#good") and by_index[0].name == f"hf:{path}"
    assert by_index[2] is not by_name and by_index[1] is not by_index[2]   # cached apart
    full = [load_reward(f"hf:{path}", batch_size=3)._text(PROMPT, a) for a in answers]
    with torch.inference_mode():
        enc = by_name.tokenizer(full, return_tensors="pt", padding=True, add_special_tokens=False)
        want = logits(**enc).logits.float()
    for i, reward in by_index.items():
        assert reward.score(PROMPT, answers).scores == pytest.approx(want[:, i].tolist(), abs=1e-5)
    assert by_name.score(PROMPT, answers).scores == pytest.approx(want[:, 2].tolist(), abs=1e-5)
    loaded = load_reward(model, tokenizer=tok, label="ok")
    assert loaded.score(PROMPT, answers).scores == pytest.approx(want[:, 1].tolist(), abs=1e-5)


@pytest.mark.parametrize("kw, words", [
    ({"label": 3}, "has 3 outputs: label must be 0 to 2 or a label name, not 3"),
    ({"label": "great"}, "has no label 'great': its labels are 0 ('bad'), 1 ('ok'), 2 ('good')"),
    ({"batch_size": 0}, "batch_size must be a whole number of answers >= 1, not 0"),
])
def test_a_wrong_label_or_batch_size_is_a_reward_error(three_label_dir, kw, words):
    with pytest.raises(RewardError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_reward(f"hf:{three_label_dir[0]}", **kw)


def test_label_and_batch_size_go_with_a_reward_model_only():
    with pytest.raises(RewardError, match="go with a reward model"):
        load_reward("confidence", label=1)


def test_the_three_failure_kinds_are_exported():
    assert specrej.ModelError is ModelSpecError and issubclass(specrej.BudgetError, ValueError)
    with pytest.raises(specrej.ModelError):
        load_generator("/no/such/folder")


# ------------------------------------------------------------------ the CLI repeats a race and prints its spread
def test_the_cli_repeats_a_race_and_prints_the_wall_ratios_spread(tiny_lm_dir, tiny_reward_dir, tmp_path, capsys):
    from specrej.cli import main

    out = tmp_path / "trace.json"
    argv = ["--model", tiny_lm_dir, "--reward", f"hf:{tiny_reward_dir}", "--prompt", PROMPT, "--n", "4",
            "--max-new-tokens", "6", "--budget", "200", "--dtype", "fp32", "--quiet", "--repeat", "3",
            "--json", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "== wall time over 3 races (the same settings and seed: each race wrote the same tokens)" in text
    line = next(x for x in text.splitlines() if "wall ratio bon/sr" in x)
    walls = json.loads(out.read_text())["wall_s_per_race"]
    ratios = sorted(w["bon"] / w["sr"] for w in walls)
    assert len(walls) == 3 and f"{ratios[1]:.2f} median, {ratios[0]:.2f} to {ratios[2]:.2f}" in line


@pytest.mark.parametrize("extra, words", [(["--repeat", "0"], "--repeat must be a whole number of races >= 1"),
                                          (["--repeat", "2", "--stop-when-matched"], "leave out --stop-when-matched")])
def test_the_cli_refuses_a_repeat_it_cannot_time(tiny_lm_dir, extra, words, capsys):
    from specrej.cli import main

    assert main(["--model", tiny_lm_dir, "--prompt", PROMPT, "--n", "4", "--quiet", *extra]) == 2
    assert words in capsys.readouterr().err


def test_a_repeat_that_writes_other_tokens_is_refused():
    from specrej.cli import repeat_walls
    from specrej import Tally
    from specrej.core.events import Candidate, Ledger

    def tally(tokens, winner):
        t = Tally()
        cands = (Candidate(id=winner, text="x", score=1.0, tokens=tokens, status="finished", finish_reason="length"),)
        t.add(Finished(arm="bon", winner=cands[0], candidates=cands, rounds=1,
                       ledger=Ledger(generated_tokens=tokens, wall_s=1.0)))
        return t

    first = tally(8, 0)
    assert repeat_walls(tally(8, 0), first) == {"bon": 1.0}
    with pytest.raises(ValueError, match="not the same"):
        repeat_walls(tally(9, 0), first)
