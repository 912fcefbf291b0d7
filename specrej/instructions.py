"""Verifiable instruction following: a judge no rival decides with (issue 40).

The prompts (``specrej/data/prompts/instructions.jsonl``, written for this project, 39 of them, 24 with two or three instructions: the bench set ``instructions-graded``) each carry
IFEval instructions by id with their arguments ("answer in lowercase", "no commas", "include the keyword
magma", "fewer than 40 words" ...). An answer's score is the fraction of its prompt's instructions it
follows, checked by IFEval's own checkers as the maintained PyPI package ``if-verifiable`` ships them
(``if_verifiable.ifeval``, Google's code). No model and no generator statistic reads into it, so it is
no rival's own signal: neither DeepConf's confidence nor ST-BoN's consistency. Speculative Rejection does
decide with it (it is the reward, read on partial answers at every decision, as the paper's protocol has the
reward model decide), and with ``pick=reward`` every arm picks its winner with it.

**Which checks run here.** 23 of IFEval's 25 checkers run offline. Two need NLTK's ``punkt`` tokenizer
data, which is a download this project cannot make: ``length_constraints:number_sentences`` and
``change_case:capital_word_frequency``; they are left out (``NEEDS_DOWNLOAD``), and a prompt that names one
is refused with that reason. ``if-verifiable``'s top-level package imports ``datasets`` (to download the
benchmarks); the checkers need none of it, so where ``datasets`` is not installed the checkers' subpackage
is imported on its own (``_registry``).

**Partial answers** (Speculative Rejection scores prefixes) are scored by the same checkers. Some checks
mean something on a prefix and some do not (docs/library.md, "The instruction-following judge"): a prefix
that breaks "no commas", "lowercase only", "capitals only", "do not use the word X" or "fewer than N words"
breaks it for good; a prefix that meets "include X", "at least N words", "X at least k times", "a title" or
"a placeholder" meets it for good; "wrap it in quotes", "end with ...", "a postscript", "exactly k bullets"
and the language are judged only on the whole answer.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import sys
import types
from dataclasses import dataclass
from importlib.resources import files
from typing import Sequence

NEEDS_DOWNLOAD = {
    "length_constraints:number_sentences": "counts sentences with NLTK's punkt data (a download)",
    "change_case:capital_word_frequency": "tokenizes words with NLTK's punkt data (a download)",
}
PROMPT_SET = "instructions"
DEMO_TASK = "if-03"   # the CLI's prompt when none is given: the embedded model follows its two instructions in
                      # about half its answers (assets/bench/rivals.json: mean 0.47 over Best-of-32), so the judge
                      # separates the arms (if-01, the set's first, is followed by none of them)


class InstructionError(ValueError):
    """A prompt with no instructions here, an unknown instruction id, or one that cannot run offline."""


@functools.lru_cache(maxsize=1)
def _registry() -> dict:
    """IFEval's checkers by instruction id (``if_verifiable.ifeval.instructions_registry.INSTRUCTION_DICT``)."""
    try:
        from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT
    except ModuleNotFoundError as e:
        if e.name == "if_verifiable" or e.name is None:
            raise InstructionError("the instructions reward needs if-verifiable: pip install --no-deps "
                                   "if-verifiable langdetect nltk immutabledict (requirements-embedded.txt)") from None
        if e.name != "datasets":
            raise
        # the package's __init__ imports datasets (to download benchmarks); the checkers need none of it
        for name in [m for m in sys.modules if m == "if_verifiable" or m.startswith("if_verifiable.")]:
            del sys.modules[name]
        spec = importlib.util.find_spec("if_verifiable")
        pkg = types.ModuleType("if_verifiable")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["if_verifiable"] = pkg
        from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT
    return dict(INSTRUCTION_DICT)


def offline_ids() -> list[str]:
    """The instruction ids that run here (every IFEval checker but those in ``NEEDS_DOWNLOAD``)."""
    return sorted(k for k in _registry() if k not in NEEDS_DOWNLOAD)


@dataclass(frozen=True)
class Task:
    """A prompt and the instructions it gives, with their arguments (IFEval's ``kwargs``)."""

    id: str
    prompt: str
    instruction_ids: tuple[str, ...]
    kwargs: tuple[dict, ...]

    def __post_init__(self) -> None:
        if not self.instruction_ids or len(self.instruction_ids) != len(self.kwargs):
            raise InstructionError(f"{self.id}: {len(self.instruction_ids)} instruction ids for "
                                   f"{len(self.kwargs)} argument sets (one each, at least one).")
        known = _registry()
        for iid in self.instruction_ids:
            if iid in NEEDS_DOWNLOAD:
                raise InstructionError(f"{self.id}: {iid} {NEEDS_DOWNLOAD[iid]}, which cannot run here.")
            if iid not in known:
                raise InstructionError(f"{self.id}: unknown instruction {iid!r}; known: {', '.join(offline_ids())}.")

    def followed(self, response: str) -> list[bool]:
        """Whether ``response`` follows each instruction (IFEval's strict check), in order."""
        out = []
        for iid, kw in zip(self.instruction_ids, self.kwargs):
            checker = _registry()[iid](iid)
            checker.build_description(**{k: v for k, v in kw.items() if v is not None})
            args = checker.get_instruction_args()
            if args and "prompt" in args:
                checker.build_description(prompt=self.prompt)
            out.append(bool(response.strip()) and bool(checker.check_following(response)))
        return out

    def score(self, response: str) -> float:
        """The fraction of the instructions ``response`` follows, 0..1."""
        ok = self.followed(response)
        return sum(ok) / len(ok)


def load_tasks(text: str | None = None) -> dict[str, Task]:
    """The bundled prompt set (or JSONL ``text``) as tasks, by prompt text."""
    if text is None:
        text = files("specrej").joinpath("data", "prompts", f"{PROMPT_SET}.jsonl").read_text(encoding="utf-8")
    tasks = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        try:
            task = Task(str(row["id"]), row["prompt"], tuple(row["instruction_id_list"]), tuple(row["kwargs"]))
        except KeyError as e:
            raise InstructionError(f"line {n}: no {e.args[0]!r} (each row: id, prompt, instruction_id_list, "
                                   "kwargs)") from None
        tasks[task.prompt.strip()] = task
    return tasks


@functools.lru_cache(maxsize=1)
def bundled() -> dict[str, Task]:
    return load_tasks()


def task_for(prompt: str, tasks: dict[str, Task] | None = None) -> Task:
    """The task whose prompt is ``prompt`` (whitespace at the ends ignored); a clear error otherwise."""
    tasks = bundled() if tasks is None else tasks
    task = tasks.get(str(prompt).strip())
    if task is None:
        raise InstructionError("the instructions reward knows the instructions of its own prompt set only "
                               f"(specrej/data/prompts/{PROMPT_SET}.jsonl, {len(tasks)} prompts; the bench: "
                               f"--prompts {PROMPT_SET}); this prompt is not one of them.")
    return task


def score_all(prompt: str, responses: Sequence[str]) -> list[float]:
    task = task_for(prompt)
    return [task.score(r) for r in responses]
