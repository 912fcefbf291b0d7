"""scripts/own_models.py, the script docs/library.md's "Your own model and reward" is written from (issue 51): a tiny
generator and reward model saved to folders, loaded by path and as objects, raced over a 3-prompt JSONL file with
the command line and race_many (which agree), the flat per-candidate table and the provenance printed."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("own_models", ROOT / "scripts" / "own_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_own_models_script_runs_end_to_end_and_its_two_paths_agree(tmp_path, capsys):
    script = _script()
    assert script.main(["--work", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for title in ("1. Loaded by path", "2. Raced over the prompts with race_many", "3. The same with the command line",
                  "4. Loaded as objects", "5. The flat per-candidate table", "6. Provenance"):
        assert f"## {title}" in out
    assert "the command line and race_many agree on 6 of 6 (prompt, arm) winners and token counts" in out
    for name in ("api.jsonl", "cli.jsonl"):
        rows = [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
        assert [r["prompt"] for r in rows] == script.PROMPTS
        assert all(set(r["arms"]) == {"bon", "sr"} for r in rows)
        assert all(r["provenance"]["transformers"] and r["provenance"]["torch"] for r in rows)
    cli = [json.loads(line) for line in (tmp_path / "cli.jsonl").read_text().splitlines()]
    assert cli[0]["provenance"]["command"].startswith("python -m specrej --model")
    table = out.split("## 5.")[1].split("## 6.")[0].splitlines()
    rows = [line for line in table if line.startswith(("sr ", "bon "))]
    assert len(rows) == 2 * script.SETTINGS["n"]
    assert sum(line.rstrip().endswith("yes") for line in rows) == 2   # one winner an arm
    assert any(" pruned " in line for line in rows if line.startswith("sr "))
    assert "transformers " in out.split("## 6.")[1]


def test_the_script_races_folders_it_is_given(tmp_path, capsys):
    """--lm/--reward/--prompts: a researcher's own folders and prompt file (here the tiny pair saved first)."""
    script = _script()
    lm, rm = script.save_tiny_pair(tmp_path / "mine")
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text('"Write a haiku about the sea."\n')
    assert script.main(["--work", str(tmp_path / "run"), "--lm", lm, "--reward", rm, "--prompts", str(prompts)]) == 0
    out = capsys.readouterr().out
    assert f"generator {lm}" in out and f"hf:{rm}" in out
    assert "agree on 2 of 2" in out
    assert not (tmp_path / "run" / "lm").exists()   # nothing built when both are given
