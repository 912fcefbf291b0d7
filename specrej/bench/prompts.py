"""Prompt sets for the benchmark: a bundled set by name (``assets/prompts/<name>.jsonl``) or a file."""
from __future__ import annotations

import json
from pathlib import Path

PROMPT_DIR = Path(__file__).resolve().parent.parent.parent / "assets" / "prompts"


# ---------------------------------------------------------------------------------- prompts
def load_prompts(spec: str) -> list[dict]:
    """A prompt set by name (``assets/prompts/<name>.jsonl``) or a JSON / JSONL file.

    Rows are objects with a "prompt" (and optional "id", "kind") or bare strings."""
    path = Path(spec)
    if not path.is_file():
        named = PROMPT_DIR / f"{spec}.jsonl"
        if not named.is_file():
            names = ", ".join(sorted(p.stem for p in PROMPT_DIR.glob("*.jsonl")))
            raise ValueError(f"prompt set {spec!r} is neither a file nor a bundled set ({names}).")
        path = named
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        raw = json.loads(text)
        if isinstance(raw, dict) and "prompts" in raw:
            raw = raw["prompts"]
        if not isinstance(raw, list):
            raise ValueError(f"{path}: a JSON prompt file holds a list (or {{\"prompts\": [...]}}).")
    else:
        raw = [json.loads(line) for line in text.splitlines() if line.strip()]
    rows = []
    for i, r in enumerate(raw):
        r = {"prompt": r} if isinstance(r, str) else dict(r)
        if not isinstance(r.get("prompt"), str) or not r["prompt"].strip():
            raise ValueError(f"{path}: entry {i + 1} has no non-empty \"prompt\".")
        rows.append({"id": str(r.get("id", f"p{i + 1:03d}")), "kind": str(r.get("kind", "")), "prompt": r["prompt"]})
    if not rows:
        raise ValueError(f"{path} holds no prompts.")
    return rows
