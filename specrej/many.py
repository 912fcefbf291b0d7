"""Many prompts: race the same arms on every prompt of a set, one result row a prompt.

``race_many(prompts, lm, reward, cfg, arms, out="results.jsonl")`` races each prompt (``arms.race_arms``) and
appends its row to ``out`` as soon as it is done, so a long run can be stopped and started again: a rerun with
the same ``out`` skips the prompts whose rows are there (raced with the same settings) and races the rest. A
progress bar (tqdm, where installed) goes to stderr. The CLI's ``--prompts FILE.jsonl --out results.jsonl``
calls it.

A row (``result_row``) is plain JSON: the prompt; the settings it was raced with (model, reward, arms and every
RunConfig field but the prompt); each arm's winner (id, score, its tokens, finish reason, text) and ledger
(tokens generated, tokens the reward read, FLOPs, wall time, decoding steps, rounds, the engine's step kind); each
arm against the first (``analysis.compare.Comparison.to_dict``); and the provenance (``origin.provenance``: versions,
device, dtype, threads, time, command, the weights' content digests, the machine's load around the race). A resumed
run refuses rows made by other weights or another dtype. With ``candidates=True`` it also holds the race's flat per-candidate table
(``Tally.to_rows``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .analysis.compare import Tally
from .arms import DEFAULT_ARMS, ArmSpec, parse_arms, race_arms
from .core.config import RunConfig
from .core.events import Finished
from . import fingerprint
from .origin import Clock, busy_words, provenance, weights_of

__all__ = ["BusyMachineWarning", "read_prompts", "race_many", "race_one", "result_row", "read_rows", "row_table"]


def _prompt_of(item, where: str) -> str:
    """The prompt in one item of a prompt set: a string, or a mapping with a string ``prompt``."""
    if isinstance(item, Mapping):
        if "prompt" not in item:
            raise ValueError(f"{where}: an object without a \"prompt\" key (has {', '.join(map(str, item)) or 'none'})")
        item = item["prompt"]
    if not isinstance(item, str):
        raise ValueError(f"{where}: a prompt must be a string or an object {{\"prompt\": \"...\"}}, "
                         f"not {type(item).__name__}")
    return item


def read_prompts(path) -> list[str]:
    """The prompts of a JSONL file: each line ``{"prompt": "..."}`` (other keys are ignored) or a plain JSON
    string; blank lines are skipped. ValueError naming the file and line of a line that is neither, or of a
    file with no prompt."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot read the prompts file {str(path)!r}: {e.strerror or e}") from None
    prompts = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i}: not JSON ({e.msg}); write one {{\"prompt\": \"...\"}} or one JSON string "
                             "a line") from None
        prompts.append(_prompt_of(item, f"{path}:{i}"))
    if not prompts:
        raise ValueError(f"{path}: no prompts; write one {{\"prompt\": \"...\"}} or one JSON string a line")
    return prompts


def _prompts(prompts) -> list[str]:
    if isinstance(prompts, (str, os.PathLike)):   # a file of them (a lone prompt would be ambiguous: a list)
        return read_prompts(prompts)
    out = [_prompt_of(p, f"prompt {i}") for i, p in enumerate(prompts, 1)]
    if not out:
        raise ValueError("no prompts to race: give a list of prompts or a JSONL file of them")
    return list(dict.fromkeys(out))   # each prompt once, in order


def _config(cfg, prompt: str) -> RunConfig:
    """``cfg`` for one prompt: a RunConfig with its prompt replaced, or a mapping of RunConfig fields."""
    if cfg is None:
        return RunConfig(prompt=prompt)
    if isinstance(cfg, RunConfig):
        return dataclasses.replace(cfg, prompt=prompt)
    if isinstance(cfg, Mapping):
        return RunConfig(**{**cfg, "prompt": prompt})
    raise TypeError(f"cfg must be a RunConfig or a dict of its fields, not {type(cfg).__name__}")


def settings_of(cfg: RunConfig, arms: Sequence[ArmSpec], lm, reward) -> dict:
    """What a row was raced with, prompt aside: the rerun of a file compares these before skipping a prompt."""
    return {"model": str(getattr(lm, "name", lm)), "reward": str(getattr(reward, "name", reward)),
            "arms": [a.spec for a in arms],
            "config": {k: v for k, v in cfg.flat().items() if k != "prompt"}}


def race_one(lm, reward, cfg: RunConfig, arms: Sequence[ArmSpec]) -> Tally:
    """One prompt's race (``race_arms``), collected."""
    tally = Tally()
    for event in race_arms(lm, reward, cfg, arms):
        tally.add(event)
    return tally


def _arm_row(arm: ArmSpec, f: Finished) -> dict:
    led, w = f.ledger, f.winner
    return {"spec": arm.spec, "label": arm.label,
            "winner": w.id, "score": w.score, "winner_tokens": w.tokens, "finish_reason": w.finish_reason,
            "text": w.text, "generated_tokens": led.generated_tokens, "reward_tokens": led.reward_tokens,
            "prompt_tokens": led.prompt_tokens, "flops": led.flops, "wall_s": led.wall_s, "reward_s": led.reward_s,
            "steps": led.steps, "rounds": f.rounds, "candidates": len(f.candidates),
            "peak_kv_slots": led.peak_kv_slots, "budget": led.budget, "dtype": led.dtype, "step": led.step}


def result_row(prompt: str, arms: Sequence[ArmSpec], tally: Tally, settings: dict, origin: dict,
               candidates: bool = False) -> dict:
    """One prompt's row (see the module's docstring). ``candidates``: add the flat table (``Tally.to_rows``)."""
    base = arms[0].id
    row = {"prompt": prompt, "settings": settings, "baseline": base,
           "arms": {a.id: _arm_row(a, tally.finished[a.id]) for a in arms if a.id in tally.finished},
           "comparison": {k: c.to_dict() for k, c in tally.compare_all(base).items()},
           "provenance": origin}
    if candidates:
        row["candidates"] = tally.to_rows()
    return row


def read_rows(path) -> list[dict]:
    """The rows a results file holds (``race_many``'s ``out``), in order. A last line cut short (a run killed
    while writing it) is left out; a bad line elsewhere is a ValueError naming it."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines):   # no newline after it: the write was cut; the rerun writes it again
                break
            raise ValueError(f"{path}:{i}: not a result row (not JSON); is {str(path)!r} a race_many results "
                             "file?") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ValueError(f"{path}:{i}: not a result row (no prompt); is {str(path)!r} a race_many results file?")
        rows.append(row)
    return rows


def _cut_partial_line(path: Path) -> None:
    """Drop a last line cut short (no newline after it) so the next row starts on a line of its own."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[:data.rfind(b"\n") + 1])


def _differences(a: dict, b: dict) -> list[str]:
    """What differs between the settings ``a`` a row was raced with and ``b``, these (as JSON holds them)."""
    b = json.loads(json.dumps(b))   # tuples as lists, as the file has them
    out = []
    for key in ("model", "reward", "arms"):
        if a.get(key) != b.get(key):
            out.append(f"{key} {a.get(key)!r} there, {b.get(key)!r} here")
    ca, cb = a.get("config", {}), b.get("config", {})
    out += [f"{k}={ca.get(k)!r} there, {cb.get(k)!r} here" for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)]
    return out


def _warm(lm, arms: Sequence[ArmSpec]) -> None:
    """Build the decoding step before the first race (as the CLI does), so that no arm's wall time pays for it."""
    from .backends.steptime import RIVAL_READS, measure

    measure(lm, rows=(2,), steps=1, reads=RIVAL_READS if any(a.kind.about.rival for a in arms) else ())


class _Lines:
    """The progress bar's stand-in where tqdm is not installed: a line per prompt on stderr."""

    def __init__(self, total: int, initial: int, disable: bool, unit: str = "prompt"):
        self.n, self.total, self.disable, self.unit = initial, total, disable, unit

    def update(self, k: int = 1) -> None:
        self.n += k

    def set_postfix_str(self, text: str) -> None:
        if not self.disable:
            print(f"[specrej] {self.unit} {self.n + 1}/{self.total}: {text}", file=sys.stderr)

    def close(self) -> None:
        pass


def _bar(total: int, initial: int, progress: bool, unit: str = "prompt"):
    if not progress:
        return _Lines(total, initial, True, unit)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Lines(total, initial, False, unit)
    return tqdm(total=total, initial=initial, desc=f"{unit}s", unit=unit, file=sys.stderr, dynamic_ncols=True)


def _postfix(row: dict) -> str:
    """A few words on the last row for the bar: each arm's winning score."""
    return ", ".join(f"{k} {v['score']:.3g}" for k, v in row["arms"].items() if v["score"] is not None)


def _check_dtype(lm, dtype) -> None:
    """A generator given loaded with a ``dtype=`` that is not its own: refused (convert it, or load by path)."""
    if dtype is None or not hasattr(lm, "dtype"):
        return
    import torch

    from .engine import precision

    want = precision.resolve(dtype, getattr(lm, "device", None) or torch.device("cpu"))
    if want != lm.dtype:
        raise ValueError(f"dtype={dtype!r} asks for {precision.short_name(want)}, but the generator given is loaded in "
                         f"{precision.short_name(lm.dtype)}: give its spec (a folder, a hub id) to load it in "
                         f"{dtype}, or leave out dtype=")


def _same_weights(path: Path, row: dict, weights: dict) -> None:
    """ValueError where a row of ``path`` was made by other weights, tokenizer, reward code or dtype than these."""
    diff = fingerprint.differences((row.get("provenance") or {}).get("weights"), weights)
    if diff:
        raise ValueError(f"{path} holds rows made by other weights or another dtype than these (the row for "
                         f"{row['prompt'][:40]!r}: {'; '.join(diff[:4])}): resuming would mix their results; give "
                         "another out file, or delete this one to race them again")


def _run(jobs: list[tuple[tuple, str, RunConfig]], lm, reward, arm_specs: Sequence[ArmSpec], path: Path | None, *,
         progress: bool, warm_up: bool, candidates: bool, command, key_of, unit: str = "prompt",
         extra=None) -> dict[tuple, dict]:
    """Race each job (``(key, prompt, config)``) not already in ``path`` (a row whose ``key_of(row)`` is a job's
    key, made with the same settings, weights and dtype), appending each new row as it is done; every job's row by
    key. ``extra(key) -> dict``: fields added to a new row (a sweep's setting)."""
    weights = weights_of(lm, reward)
    by_key = {k: (t, c) for k, t, c in jobs}
    done: dict[tuple, dict] = {}
    if path is not None:
        for row in read_rows(path):
            key = key_of(row)
            if key not in by_key:
                continue
            diff = _differences(row.get("settings", {}), settings_of(by_key[key][1], arm_specs, lm, reward))
            if diff:
                raise ValueError(f"{path} holds rows raced with other settings ({'; '.join(diff[:4])}): give "
                                 "another out file, or delete this one to race them again")
            _same_weights(path, row, weights)
            done[key] = row
        _cut_partial_line(path)
        path.parent.mkdir(parents=True, exist_ok=True)
    todo = [(k, t, c) for k, t, c in jobs if k not in done]
    rows: dict[tuple, dict] = dict(done)
    loads = []
    bar = _bar(len(jobs), len(jobs) - len(todo), progress, unit)
    try:
        if todo and warm_up:
            _warm(lm, arm_specs)
        sink = open(path, "a", encoding="utf-8") if path is not None and todo else None
        try:
            for i, (key, text, c) in enumerate(todo):
                clock = Clock()
                try:
                    tally = race_one(lm, reward, c, arm_specs)
                except Exception as e:
                    at = [k for k, _, _ in jobs].index(key) + 1
                    e.add_note(f"{'while racing' if unit == 'prompt' else 'in'} {unit} {at} of {len(jobs)}: "
                               f"{text[:80]!r}")
                    raise
                load = clock.stop()
                loads.append(load)
                origin = provenance(dtype=getattr(lm, "dtype", None), device=getattr(lm, "device", None),
                                    command=command, weights=weights, load=load)
                row = result_row(text, arm_specs, tally, settings_of(c, arm_specs, lm, reward), origin, candidates)
                if extra is not None:
                    row.update(extra(key))
                if sink is not None:
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                rows[key] = row
                bar.set_postfix_str(_postfix(row) + (" (machine busy)" if load["busy"] else ""))
                bar.update(1)
        finally:
            if sink is not None:
                sink.close()
    finally:
        bar.close()
    words = busy_words(loads, unit)
    if words:
        warnings.warn(f"specrej: {words}", BusyMachineWarning, stacklevel=3)
    return rows


class BusyMachineWarning(RuntimeWarning):
    """Rows raced while the machine had more runnable work than cores: their wall clocks are not reliable."""


def race_many(prompts, lm, reward, cfg: RunConfig | Mapping | None = None,
              arms: Sequence[str | ArmSpec] = DEFAULT_ARMS, out=None, *, progress: bool = True,
              warm_up: bool = True, candidates: bool = False, command: list[str] | None = None,
              dtype: str | None = None) -> list[dict]:
    """Race ``arms`` on every prompt; return one row per prompt (``result_row``), in the prompts' order.

    ``prompts``: a list of prompts (strings, or dicts with a ``prompt``; a prompt given twice is raced once), or
    the path of a JSONL file of them (``read_prompts``). ``lm``: a loaded generator (``load_generator``) or
    anything ``backends.load_lm`` takes (a spec such as "embedded" or a folder, a text-generation pipeline);
    ``reward``: a reward, a plain function or a spec (``load_reward``). ``cfg``: the settings of every race, a
    ``RunConfig`` (its prompt is replaced by each prompt) or a dict of RunConfig fields (default: RunConfig's
    defaults). ``arms``: arm specs, the first the baseline (``specrej.arms``). ``dtype``: the generator's, as
    ``load_generator`` takes it ("auto", "fp32", "bf16"); for a generator given loaded, it must be its own.

    ``out``: a JSONL file each row is appended to as soon as its prompt is raced. Resumable: the prompts whose
    rows the file already holds are not raced again (their rows are read back and returned); the file must hold
    rows raced with the same settings (model, reward, arms, config) and made by the same weights, tokenizers and
    dtype (their content digests, ``fingerprint``), else ValueError saying which differ (give another file). A
    last line cut short by a killed run is dropped and raced again.

    ``progress``: a progress bar on stderr (tqdm where installed, else a line per prompt). ``warm_up``: build
    the decoding step once before the first race, so that the first arm of the first prompt does not pay for it
    in its wall time. ``candidates``: each row also holds the race's flat per-candidate table (``Tally.to_rows``).
    ``command``: the command line each row's provenance records (default: this process's).

    Each row's provenance holds the weights' digests and the machine's load around its race (``origin.Clock``);
    where the machine was busy (load above its cores), a ``BusyMachineWarning`` says the wall clocks are not
    reliable.

    Every prompt and the arms are checked before any model work (ValueError naming the prompt's number); an error
    while racing a prompt leaves the rows written so far and carries a note naming the prompt."""
    from .backends import load_lm
    from .rewards import load_reward

    texts = _prompts(prompts)
    arm_specs = parse_arms(arms)
    configs = {}
    for i, text in enumerate(texts, 1):
        try:
            configs[text] = _config(cfg, text)
        except ValueError as e:   # RunConfig's checks: the prompt's number and its start, then what is wrong
            raise ValueError(f"prompt {i} ({text[:60]!r}): {e}") from None
    for arm in arm_specs:
        arm.config(configs[texts[0]])   # ArmSpecError naming the arm, before any model loads
    given = lm
    lm = load_lm(lm, dtype=dtype)
    if lm is given:
        _check_dtype(lm, dtype)
    reward = load_reward(reward)
    path = Path(out) if out is not None else None
    rows = _run([((t,), t, c) for t, c in configs.items()], lm, reward, arm_specs, path, progress=progress,
                warm_up=warm_up, candidates=candidates, command=command, key_of=lambda row: (row["prompt"],))
    return [rows[(t,)] for t in texts]


def row_table(rows: Iterable[dict]) -> str:
    """A plain-text table of result rows: a line per prompt with each arm's winning score, and each challenger's
    tokens and FLOPs against the baseline (the CLI prints it after ``--prompts``)."""
    lines = []
    for i, row in enumerate(rows, 1):
        arms = row["arms"]
        scores = "  ".join(f"{k} {v['score']:.4f}" for k, v in arms.items())
        cmp = "; ".join(f"{k}: {c['tokens']['words'].replace('less', 'fewer')} tokens, {c['flops']['words']} FLOPs"
                        for k, c in row["comparison"].items())
        prompt = row["prompt"].replace("\n", " ")
        lines.append(f"{i:>3}. {prompt[:60]!r}{'...' if len(prompt) > 60 else ''}")
        lines.append(f"     {scores}" + (f"   ({cmp})" if cmp else ""))
    return "\n".join(lines)
