"""The paper's efficiency comparison: per-prompt runs, then the aggregate metrics.

Per prompt: one Best-of-N_max run and one Speculative Rejection run per alpha (N = N_max), on
the same engine, seed and memory budget. Best-of-k for every k in the N list is read off the
Best-of-N_max run (coupled randomness: Best-of-k = candidates 0..k-1), so the whole curve
costs one run. ``bok_compute`` says how a prefix is charged; ``aggregate`` turns the per-prompt
records (plain JSON data, so they can be gathered across processes) into the paper's metrics.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..config import RunConfig
from ..events import Finished, Round
from ..methods import best_of_n, speculative_rejection
from ..metrics import improvement_score, relative_compute, spearman, speedup

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


# ---------------------------------------------------------------------------------- one prompt
def run_prompt(lm, reward, row: dict, base: RunConfig, ns: list[int], alphas: list[float],
               tick: Callable[[str], None] = lambda label: None) -> dict:
    """Best-of-max(ns) and Speculative Rejection at each alpha on one prompt; JSON-ready record."""
    n_max = max(ns)
    cfg = replace(base, prompt=row["prompt"], n=n_max, progress_every=0)
    bon = _last(best_of_n(lm, reward, cfg))
    tick("bon")
    by_id = sorted(bon.candidates, key=lambda c: c.id)
    scores = [c.score for c in by_id]
    record = {
        **row, "prompt_tokens": bon.ledger.prompt_tokens,
        "bon": {"scores": scores, "tokens": [c.tokens for c in by_id], "winner": bon.winner.id,
                "winner_text": bon.winner.text, "passes": bon.rounds, "ledger": bon.ledger.to_dict()},
        "sr": [],
    }
    for alpha in alphas:
        rounds: list[Round] = []
        fin = None
        for ev in speculative_rejection(lm, reward, replace(cfg, alpha=alpha)):
            if isinstance(ev, Round):
                rounds.append(ev)
            elif isinstance(ev, Finished):
                fin = ev
        final_status = {c.id: c.status for c in fin.candidates}
        record["sr"].append({
            "alpha": alpha, "winner": fin.winner.id, "score": fin.winner.score, "winner_text": fin.winner.text,
            "rounds": fin.rounds, "ledger": fin.ledger.to_dict(),
            "kept_bon_winner": final_status[bon.winner.id] == "finished",
            "decisions": [decision_correlation(r, scores) for r in rounds],
        })
        tick(f"sr {alpha:g}")
    return record


def _last(events) -> Finished:
    fin = None
    for fin in events:
        pass
    assert isinstance(fin, Finished)
    return fin


def live_at_decision(r: Round) -> list:
    """Candidates that were decoding when decision ``r`` was taken (their score is partial)."""
    return [c for c in r.candidates if c.finish_reason is None
            and (c.status == "kept" or (c.status == "pruned" and c.round_pruned == r.index))]


def decision_correlation(r: Round, final_scores: list[float]) -> dict:
    """Spearman of the partial rewards at a decision against the same candidates' final rewards
    (from the Best-of-N run: coupled randomness makes them the same texts)."""
    live = live_at_decision(r)
    rho = spearman([c.score for c in live], [final_scores[c.id] for c in live]) if len(live) > 1 else None
    return {"index": r.index, "position": r.position, "n_live": len(live), "n_kept": r.n_kept,
            "forced": r.forced, "spearman": rho}


# ---------------------------------------------------------------------------------- accounting
def bok_compute(bon: dict, k: int) -> dict:
    """Compute charged to Best-of-k, read off a Best-of-N_max record.

    - generator FLOPs: 2 x params x (prompt tokens + tokens generated by candidates 0..k-1),
      exactly what a stand-alone Best-of-k would spend (it prefills the prompt once too);
    - reward FLOPs: the run's reward FLOPs x (candidates 0..k-1's share of generated tokens);
    - wall time: the run's wall time x Best-of-k's share of the run's FLOPs. This is the
      perfectly efficient Best-of-k: a real one at fewer rows is slower per token, so the
      speed-ups derived from it are conservative.
    At k = N_max this is the run's own ledger.
    """
    led, tokens = bon["ledger"], bon["tokens"]
    if not 1 <= k <= len(tokens):
        raise ValueError(f"k={k} is outside 1..{len(tokens)}")
    if k == len(tokens):
        return {"flops": led["flops"], "wall_s": led["wall_s"], "generated_tokens": led["generated_tokens"]}
    gen_total, gen_k = sum(tokens), sum(tokens[:k])
    assert gen_total == led["generated_tokens"], "tokens per candidate must add up to the ledger"
    per_token = led["generator_flops"] / (led["prompt_tokens"] + gen_total)     # = 2 x params
    share = gen_k / gen_total if gen_total else 0.0
    flops = per_token * (led["prompt_tokens"] + gen_k) + led["reward_flops"] * share
    return {"flops": flops, "wall_s": led["wall_s"] * flops / led["flops"], "generated_tokens": gen_k}


# ---------------------------------------------------------------------------------- aggregate
def aggregate(records: list[dict], ns: list[int], alphas: list[float]) -> dict:
    """The paper's metrics over prompts, against the reference Best-of-N_max.

    Relative compute is a ratio of totals over prompts (sum of the method's compute over the
    sum of the reference's), for FLOPs and wall time separately. The speed-up reads the compute
    Best-of-N needs for the method's improvement score off the Best-of-k curve (log-compute
    interpolation, ``metrics.speedup``); beyond the curve's top it is a lower bound."""
    if not records:
        raise ValueError("no prompt results to aggregate")
    n_max = max(ns)
    ref_best = [max(r["bon"]["scores"]) for r in records]
    ref_min = [min(r["bon"]["scores"]) for r in records]
    ref_flops = sum(r["bon"]["ledger"]["flops"] for r in records)
    ref_wall = sum(r["bon"]["ledger"]["wall_s"] for r in records)

    def score(best: list[float]) -> float:
        return improvement_score(best, ref_best, ref_best, ref_min)

    bon_rows = []
    for k in sorted(ns):
        comp = [bok_compute(r["bon"], k) for r in records]
        bon_rows.append({
            "method": f"Best-of-{k}" + (" (ref)" if k == n_max else ""), "kind": "bon", "n": k,
            "improvement_score": score([max(r["bon"]["scores"][:k]) for r in records]),
            "relative_flops": relative_compute(sum(c["flops"] for c in comp), ref_flops),
            "relative_wall": relative_compute(sum(c["wall_s"] for c in comp), ref_wall),
        })
    curve_flops = [(b["relative_flops"], b["improvement_score"]) for b in bon_rows]
    curve_wall = [(b["relative_wall"], b["improvement_score"]) for b in bon_rows]

    sr_rows = []
    for j, alpha in enumerate(alphas):
        runs = [r["sr"][j] for r in records]
        assert all(s["alpha"] == alpha for s in runs)
        imp = score([s["score"] for s in runs])
        rel_f = relative_compute(sum(s["ledger"]["flops"] for s in runs), ref_flops)
        rel_w = relative_compute(sum(s["ledger"]["wall_s"] for s in runs), ref_wall)
        sf, sw = speedup(curve_flops, imp, rel_f), speedup(curve_wall, imp, rel_w)
        sr_rows.append({
            "method": f"SR alpha={alpha:g}", "kind": "sr", "alpha": alpha, "n": n_max,
            "improvement_score": imp, "relative_flops": rel_f, "relative_wall": rel_w,
            "speedup_flops": {"value": sf.value, "lower_bound": sf.lower_bound},
            "speedup_wall": {"value": sw.value, "lower_bound": sw.lower_bound},
            "kept_bon_winner": sum(s["kept_bon_winner"] for s in runs) / len(runs),
            "same_winner": sum(s["winner"] == r["bon"]["winner"] for s, r in zip(runs, records)) / len(runs),
            "mean_rounds": sum(s["rounds"] for s in runs) / len(runs),
            "rank_correlation": _by_decision(runs),
        })
    return {"n_max": n_max, "prompts": len(records), "bon": bon_rows, "sr": sr_rows,
            "curve_flops": curve_flops, "curve_wall": curve_wall}


def _by_decision(runs: list[dict]) -> list[dict]:
    """Mean Spearman (partial vs final reward) at the 1st, 2nd, ... decision, over prompts."""
    out = []
    depth = max((len(s["decisions"]) for s in runs), default=0)
    for d in range(depth):
        at = [s["decisions"][d] for s in runs if len(s["decisions"]) > d]
        rhos = [x["spearman"] for x in at if x["spearman"] is not None and math.isfinite(x["spearman"])]
        out.append({"decision": d + 1, "mean_spearman": sum(rhos) / len(rhos) if rhos else None,
                    "prompts": len(rhos), "mean_position": sum(x["position"] for x in at) / len(at),
                    "mean_live": sum(x["n_live"] for x in at) / len(at)})
    return out
