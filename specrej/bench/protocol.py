"""The paper's protocol: Speculative Rejection opens with the batch that fills memory, and is
read against the whole Best-of-N curve.

Per prompt:

1. **The reference**: one coupled Best-of-N_ref run. It runs as one batch (faster than passes;
   its tokens do not depend on the batch), so its wall time is not a budgeted one. What the
   curve needs from it is every candidate's final score and length.
2. **The Best-of-N curve** for every k <= N_ref by order statistics (``specrej.curve``): the
   expected best of k random candidates, and the expected compute of Best-of-k *under the
   budget* (passes of the rows that fit at full length): tokens, FLOPs, decode steps, and wall
   time MODELLED from step times measured at the budgeted batch (``StepModel``: real passes of
   ``rows_per_pass`` rows and of 1 row, interpolated linearly in rows).
3. **Speculative Rejection** at each (alpha, first decision): its starting N fills the budget at
   the first decision (``n = auto``), measured for real: ledger, decode steps, wall time.

Decode steps track accelerator time where a step's cost hardly depends on the number of rows
(a GPU); FLOPs track total work; CPU wall time sits between.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable

import torch

from ..compare import decision_rank, live_at_decision
from ..config import AUTO, RunConfig
from ..curve import PromptRun, bon_curve, curves_by_measure, default_ks, improvement, speedups
from ..backends import backend_for
from ..events import Finished, Round
from ..methods import best_of_n, run_to_completion, speculative_rejection
from ..core.budget import KVBudget


# ---------------------------------------------------------------------------------- step times
@torch.inference_mode()
def measure_pass(lm, cfg: RunConfig, rows: int, stats: bool = True) -> dict:
    """One real Best-of-N pass of ``rows`` rows (candidates 0..rows-1) to the end: wall per step.
    ``stats``: keep the token statistics, as the arm does when its reward reads them."""
    ids = lm.render(cfg.prompt)
    engine = backend_for(lm).from_config(lm, ids, cfg, n_total=max(rows, cfg.n), stats=stats)
    r = engine.start(list(range(rows)))
    t0 = time.perf_counter()
    steps = 0
    while len(r):
        r.step()
        steps += 1
    wall = time.perf_counter() - t0
    r.release()
    engine.release()
    return {"rows": rows, "steps": steps, "wall_s": wall, "step_s": wall / steps}


@dataclass(frozen=True)
class StepModel:
    """Seconds per decoding step of a pass of ``rows`` rows, measured at a few batch sizes and
    interpolated linearly in rows (flat beyond the ends)."""

    points: tuple[tuple[int, float], ...]   # (rows, seconds per step), rows ascending

    def __call__(self, rows: int) -> float:
        pts = self.points
        if rows <= pts[0][0]:
            return pts[0][1]
        for (r0, s0), (r1, s1) in zip(pts, pts[1:]):
            if rows <= r1:
                return s0 + (s1 - s0) * (rows - r0) / (r1 - r0)
        return pts[-1][1]

    @classmethod
    def from_passes(cls, passes: list[dict]) -> "StepModel":
        by_rows: dict[int, list[float]] = {}
        for p in passes:
            by_rows.setdefault(p["rows"], []).append(p["step_s"])
        return cls(tuple(sorted((r, min(v)) for r, v in by_rows.items())))


# ---------------------------------------------------------------------------------- one prompt
def sr_rows(lm, budget: int, prompt_tokens: int, first_decision: int) -> int:
    """Speculative Rejection's first batch: the rows that fill the budget at the first decision."""
    return max(1, KVBudget(budget, prompt_tokens, lm.shares_prefix).auto_n(first_decision))


def run_prompt(lm, reward, row: dict, base: RunConfig, *, n_ref: int, points: list[tuple[float, int]],
               budget: int, tick: Callable[[str], None] = lambda label: None) -> dict:
    """The reference Best-of-N_ref (one batch) and Speculative Rejection at each (alpha, first
    decision) under ``budget``; a JSON-ready record with every number the metrics need."""
    P = len(lm.render(row["prompt"]))
    ref_cfg = replace(base, prompt=row["prompt"], n=n_ref, progress_every=0,
                      budget=max(n_ref * (P + base.max_new_tokens), base.budget or 0))
    bon = run_to_completion(best_of_n(lm, reward, ref_cfg))
    tick("reference")
    by_id = sorted(bon.candidates, key=lambda c: c.id)
    scores = [c.score for c in by_id]
    record = {**row, "prompt_tokens": P, "budget": budget,
              "rows_per_pass": KVBudget(budget, P, lm.shares_prefix).rows_per_pass(None, base.max_new_tokens),
              "bon": {"n": n_ref, "scores": scores, "tokens": [c.tokens for c in by_id], "winner": bon.winner.id,
                      "winner_text": bon.winner.text, "ledger": bon.ledger.to_dict(),
                      "note": "one batch of N_ref rows (not budgeted): its wall time is not used for the curve"},
              "sr": []}
    for alpha, first in points:
        cfg = replace(base, prompt=row["prompt"], n=AUTO, first_decision=first, alpha=alpha, budget=budget,
                      progress_every=0)
        rounds: list[Round] = []
        fin = None
        for ev in speculative_rejection(lm, reward, cfg):
            if isinstance(ev, Round):
                rounds.append(ev)
            elif isinstance(ev, Finished):
                fin = ev
        status = {c.id: c.status for c in fin.candidates}
        n0 = len(fin.candidates)
        finals = {i: s for i, s in enumerate(scores)}
        record["sr"].append({
            "alpha": alpha, "first_decision": first, "n": n0, "winner": fin.winner.id, "score": fin.winner.score,
            "winner_text": fin.winner.text, "rounds": fin.rounds, "ledger": fin.ledger.to_dict(),
            "steps": max(c.tokens for c in fin.candidates),
            "kept_bon_winner": status.get(bon.winner.id) == "finished",
            "decisions": [asdict(decision_rank(r, finals)) for r in rounds if live_at_decision(r)]})
        tick(f"sr a={alpha:g} T={first}")
    return record


# ---------------------------------------------------------------------------------- aggregate
def prompt_run(rec: dict, flops_per_token: float) -> PromptRun:
    led = rec["bon"]["ledger"]
    return PromptRun(rec["bon"]["scores"], rec["bon"]["tokens"], rec["prompt_tokens"], flops_per_token,
                     reward_flops=led["reward_flops"])


def aggregate(records: list[dict], *, gen_params: int, step_model: StepModel | None) -> dict:
    """The paper's metrics over prompts against Best-of-N_ref under the same budget.

    Relative compute = sum over prompts of the method's / Best-of-N_ref's (budgeted, expected);
    speed-up = compute Best-of-N needs for the method's improvement score (log-interpolated on
    the order-statistics curve) over the method's, per measure; a lower bound when the method
    beats Best-of-N_ref. Best-of-N's wall time is modelled (``StepModel``); SR's is measured."""
    if not records:
        raise ValueError("no prompt results to aggregate")
    n_ref = records[0]["bon"]["n"]
    runs = [prompt_run(r, 2.0 * gen_params) for r in records]
    curve = bon_curve(runs, default_ks(n_ref), [r["rows_per_pass"] for r in records], step_model)
    ref = curve[-1]
    by = curves_by_measure(curve)
    points = []
    for j, first in enumerate(records[0]["sr"]):
        runs_j = [r["sr"][j] for r in records]
        imp = improvement([s["score"] for s in runs_j], runs)
        method = {"flops": sum(s["ledger"]["flops"] for s in runs_j), "steps": sum(s["steps"] for s in runs_j),
                  "wall": sum(s["ledger"]["wall_s"] for s in runs_j),
                  "tokens": sum(s["ledger"]["generated_tokens"] for s in runs_j)}
        sp = speedups(by, imp, method)
        rhos = _by_decision(runs_j)
        points.append({
            "method": "sr", "alpha": first["alpha"], "first_decision": first["first_decision"],
            "n": sum(s["n"] for s in runs_j) / len(runs_j), "improvement": imp,
            **{f"rel_{m}": method[m] / ref[m] for m in method if m in ref},
            **{f"speedup_{m}": {"value": v.value, "lower_bound": v.lower_bound} for m, v in sp.items()},
            "kept_bon_winner": sum(s["kept_bon_winner"] for s in runs_j) / len(runs_j),
            "mean_rounds": sum(s["rounds"] for s in runs_j) / len(runs_j), "rank_correlation": rhos})
    bon_rows = [{"method": "bon", "k": row["k"], "improvement": row["improvement"],
                 **{f"rel_{m}": row[m] / ref[m] for m in ("flops", "steps", "wall", "tokens") if m in row}}
                for row in curve]
    return {"n_ref": n_ref, "prompts": len(records), "bon": bon_rows, "sr": points,
            "step_model": [list(p) for p in step_model.points] if step_model else None}


def _by_decision(runs: list[dict]) -> list[dict]:
    out = []
    for d in range(max((len(s["decisions"]) for s in runs), default=0)):
        at = [s["decisions"][d] for s in runs if len(s["decisions"]) > d]
        rhos = [x["spearman"] for x in at if x["spearman"] is not None and math.isfinite(x["spearman"])]
        out.append({"decision": d + 1, "mean_position": sum(x["position"] for x in at) / len(at),
                    "mean_spearman": sum(rhos) / len(rhos) if rhos else None, "prompts": len(rhos)})
    return out


SUMMARY_KEYS = ("method", "alpha", "first_decision", "improvement", "rel_flops", "rel_wall",
                "speedup_flops", "speedup_steps", "speedup_wall")


def summary(agg: dict) -> list[dict]:
    """One row per Speculative Rejection point (plus the reference), the issue's columns."""
    rows = [{"method": "bon", "alpha": None, "first_decision": None, "improvement": 100.0, "rel_flops": 1.0,
             "rel_wall": 1.0 if agg["bon"][-1].get("rel_wall") else None, "speedup_flops": 1.0,
             "speedup_steps": 1.0, "speedup_wall": 1.0 if agg["bon"][-1].get("rel_wall") else None,
             "n": agg["n_ref"]}]
    for p in agg["sr"]:
        row = {k: p.get(k) for k in SUMMARY_KEYS}
        for m in ("flops", "steps", "wall"):
            s = p.get(f"speedup_{m}")
            row[f"speedup_{m}"] = s["value"] if s else None
            row[f"speedup_{m}_lower_bound"] = s["lower_bound"] if s else None
        row["n"] = p["n"]
        rows.append(row)
    return rows
