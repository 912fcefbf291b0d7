"""Prompt sets for the benchmark: a bundled set by name (``specrej/data/prompts/<name>.jsonl``, package
data that a wheel carries), a set drawn from one (``DERIVED``), or a file."""
from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

PROMPT_DIR = files("specrej").joinpath("data", "prompts")   # found through the package, not the source tree


# name -> (the bundled set it is drawn from, which of its rows it keeps)
DERIVED = {
    # the instruction prompts with 2 or 3 instructions each: the judge's score is a graded fraction, not 0 or 1
    "instructions-graded": ("instructions", lambda row: len(row.get("instruction_id_list") or ()) >= 2),
}


def bundled_sets() -> list[str]:
    """The names of the bundled prompt sets."""
    return sorted([p.name[: -len(".jsonl")] for p in PROMPT_DIR.iterdir() if p.name.endswith(".jsonl")] + list(DERIVED))


# ---------------------------------------------------------------------------------- prompts
def load_prompts(spec: str) -> list[dict]:
    """A prompt set by name (``specrej/data/prompts/<name>.jsonl``) or a JSON / JSONL file.

    Rows are objects with a "prompt" (and optional "id", "kind") or bare strings."""
    path, keep = Path(spec), None
    if spec in DERIVED and not path.is_file():
        spec, keep = DERIVED[spec]
        path = Path(spec)
    if path.is_file():
        text, suffix = path.read_text(encoding="utf-8"), path.suffix
    else:
        named = PROMPT_DIR / f"{spec}.jsonl"
        if not named.is_file():
            raise ValueError(f"prompt set {spec!r} is neither a file nor a bundled set ({', '.join(bundled_sets())}).")
        path, text, suffix = f"{spec}.jsonl", named.read_text(encoding="utf-8"), ".jsonl"
    if suffix == ".json":
        raw = json.loads(text)
        if isinstance(raw, dict) and "prompts" in raw:
            raw = raw["prompts"]
        if not isinstance(raw, list):
            raise ValueError(f"{path}: a JSON prompt file holds a list (or {{\"prompts\": [...]}}).")
    else:
        raw = [json.loads(line) for line in text.splitlines() if line.strip()]
    if keep is not None:
        raw = [r for r in raw if isinstance(r, dict) and keep(r)]
    rows = []
    for i, r in enumerate(raw):
        r = {"prompt": r} if isinstance(r, str) else dict(r)
        if not isinstance(r.get("prompt"), str) or not r["prompt"].strip():
            raise ValueError(f"{path}: entry {i + 1} has no non-empty \"prompt\".")
        rows.append({"id": str(r.get("id", f"p{i + 1:03d}")), "kind": str(r.get("kind", "")), "prompt": r["prompt"]})
    if not rows:
        raise ValueError(f"{path} holds no prompts.")
    return rows
