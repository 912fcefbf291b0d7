"""Checks that the bundled prompt sets (package data), the bundled rules and the app's demo examples are well formed."""

import json
from collections import Counter
from importlib.resources import files
from pathlib import Path

import pytest

ASSETS = Path(__file__).resolve().parent.parent / "assets"   # the app's (examples.json)
DATA = files("specrej").joinpath("data")                     # the library's package data
PROMPTS = DATA / "prompts"
KINDS = {"advice", "explanation", "creative", "coding", "factual", "decline"}


def load_jsonl(path: Path) -> list[dict]:
    rows = []
    for line_number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        assert isinstance(row, dict), f"{path.name}:{line_number} is not an object"
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def default_rows():
    return load_jsonl(PROMPTS / "default.jsonl")


@pytest.fixture(scope="module")
def quick_rows():
    return load_jsonl(PROMPTS / "quick.jsonl")


@pytest.mark.parametrize("name", ["default.jsonl", "quick.jsonl"])
def test_rows_have_expected_fields(name):
    for row in load_jsonl(PROMPTS / name):
        assert set(row) == {"id", "kind", "prompt"}
        assert all(isinstance(row[key], str) for key in row)
        assert row["kind"] in KINDS
        assert row["id"].startswith(row["kind"] + "-")
        assert row["prompt"].strip()


@pytest.mark.parametrize("name", ["default.jsonl", "quick.jsonl"])
def test_ids_are_unique(name):
    ids = [row["id"] for row in load_jsonl(PROMPTS / name)]
    assert len(ids) == len(set(ids))


def test_default_set_size_and_kind_balance(default_rows):
    assert len(default_rows) >= 64
    counts = Counter(row["kind"] for row in default_rows)
    assert set(counts) == KINDS
    assert all(count >= 10 for count in counts.values()), counts


def test_quick_is_two_per_kind_subset_of_default(default_rows, quick_rows):
    assert len(quick_rows) == 2 * len(KINDS)            # at least 12 prompts: the floor
    assert Counter(row["kind"] for row in quick_rows) == {k: 2 for k in KINDS}
    default_by_id = {row["id"]: row for row in default_rows}
    for row in quick_rows:
        assert default_by_id.get(row["id"]) == row


def test_bundled_rules_were_fitted_outside_the_quick_set(quick_rows):
    quick = {row["id"] for row in quick_rows}
    rules = [p for p in (DATA / "rules").iterdir() if p.name.endswith(".json")]
    assert rules
    for path in rules:
        fitted = set(json.loads(path.read_text(encoding="utf-8"))["fitted_on"])
        assert fitted and not fitted & quick, (path.name, fitted & quick)


def test_examples_is_list_of_prompts():
    examples = json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))
    assert isinstance(examples, list)
    assert len(examples) == 6
    assert all(isinstance(text, str) and text.strip() for text in examples)
    assert len(set(examples)) == len(examples)
