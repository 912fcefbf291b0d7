"""The instructions reward (issue 40): IFEval's checkers on the project's own prompts, offline."""
import pytest

from specrej import instructions as I
from specrej.rewards import RewardError, load_reward, own_prompt


def test_the_prompt_set_loads_and_uses_only_checks_that_run_here():
    tasks = I.bundled()
    assert len(tasks) == 39
    assert len(I.offline_ids()) == 23      # IFEval's 25 less the two that need NLTK's punkt data
    used = {iid for t in tasks.values() for iid in t.instruction_ids}
    assert not used & set(I.NEEDS_DOWNLOAD) and used <= set(I.offline_ids())


def test_a_check_that_needs_a_download_is_refused_with_its_reason():
    with pytest.raises(I.InstructionError, match="punkt"):
        I.Task("x", "p", ("length_constraints:number_sentences",), ({"num_sentences": 2, "relation": "at least"},))
    with pytest.raises(I.InstructionError, match="unknown instruction"):
        I.Task("x", "p", ("no:such",), ({},))


def test_the_score_is_the_fraction_of_instructions_followed():
    task = I.task_for("Describe a cat sleeping in the sun in fewer than 30 words, and do not use any commas.")
    assert task.followed("A cat naps in warm light.") == [True, True]
    assert task.score("A cat naps, warm and still.") == 0.5                      # a comma
    assert task.score(" ".join(["cat"] * 40) + ", done") == 0.0                  # too long, and a comma
    assert I.task_for(own_prompt("instructions")).id == I.DEMO_TASK
    lower = I.task_for("Describe a rainy afternoon in a small town. Write only in lowercase letters, no capitals at all.")
    assert lower.score("all lowercase here.") == 1.0 and lower.score("Not lowercase.") == 0.0
    assert lower.score("") == 0.0                                                # nothing written follows nothing


def test_the_reward_scores_its_own_prompts_and_refuses_others_clearly():
    r = load_reward("instructions")
    assert (r.n_params, r.uses_token_stats) == (0, False)
    prompt = "Explain what a volcano is. Include the keywords \"magma\" and \"pressure\" in your answer."
    assert r.score(prompt, ["magma under pressure", "just magma"]).scores == [1.0, 0.0]
    with pytest.raises(RewardError, match="own prompt set"):
        r.score("What is the capital of Australia?", ["Canberra"])
    assert own_prompt("sentiment") is None


def test_the_cli_refuses_a_prompt_the_instructions_reward_cannot_score_before_any_model_loads(monkeypatch, capsys):
    from specrej import cli

    monkeypatch.setattr(cli, "load_lm", lambda *a, **k: pytest.fail("a model loaded for a prompt it cannot score"))
    assert cli.main(["--arms", "bon", "sr", "deepconf", "stbon", "--reward", "instructions",
                     "--prompt", "Write a poem."]) != 0
    assert "own prompt set only" in capsys.readouterr().err


def test_the_graded_set_holds_24_prompts_each_with_two_or_three_instructions():
    """``--prompts instructions-graded`` (issue 48): a score is a fraction of 2 or 3 checks, never only 0 or 1."""
    from specrej.bench.prompts import bundled_sets, load_prompts

    rows = load_prompts("instructions-graded")
    assert "instructions-graded" in bundled_sets() and len(rows) == 24
    tasks = {t.id: t for t in I.bundled().values()}
    assert all(len(tasks[r["id"]].instruction_ids) in (2, 3) for r in rows)
    assert all(I.task_for(r["prompt"]).id == r["id"] for r in rows)   # the judge finds each by its text
