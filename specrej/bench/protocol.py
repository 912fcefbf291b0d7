"""The paper's protocol: Speculative Rejection opens with the batch that fills memory, and is
read against the whole Best-of-N curve.

Per prompt:

1. **The reference**: one coupled Best-of-N_ref run. It runs as one batch (faster than passes;
   its tokens do not depend on the batch), so its wall time is not a budgeted one. What the
   curve needs from it is every candidate's final score and length.
2. **The Best-of-N curve** for every k <= N_ref by order statistics (``specrej.analysis.curve``): the
   expected best of k random candidates, and the expected compute of Best-of-k *under the
   budget*: tokens, FLOPs, decode steps in fixed passes of the rows that fit at full length,
   decode steps with those slots refilled as answers end (static refill), decode steps with a
   paged KV cache that reserves each answer's real length at its start (``steps_paged``), engine steps as
   vLLM v1 schedules Best-of-N (``steps_vllm``, ``analysis.paging``: blocks of 16 slots taken as tokens
   are written, preemption by recompute: the baseline the claims are priced against), and wall time MODELLED from step times measured at the budgeted batch
   (``core.cost.StepCost.from_passes``: real passes of ``rows_per_pass`` rows and of 1 row, linear in rows).
3. **Speculative Rejection** with each rejection rule (``specrej.core.rules``) at each (alpha, first
   decision): its starting N fills the budget at the first decision (``n = auto``). Grid points
   are replayed by the simulator from the coupled run (exact in fp32); the ``live`` points run
   for real: ledger, decode steps, wall time, checked against the simulator and the reference.
   Every point records what became of Best-of-N_ref's winner (kept, pruned at decision d, or never
   drawn by the first batch) and the oracle ceiling at its (alpha, first decision): the same loop
   with a rule that keeps the best final rewards (``core.oracle``).

Decode steps track accelerator time where a step's cost hardly depends on the number of rows
(a GPU); FLOPs track total work; CPU wall time sits between.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable

import numpy as np
import torch

from ..analysis.compare import decision_rank, live_at_decision, winner_fate
from ..core.config import AUTO, RunConfig
from ..core.budget import KVBudget, sharing
from ..core.cost import FlopModel, StepCost, flop_model_of, flops
from ..core.oracle import OracleRule
from ..analysis.curve import (MEASURES, PromptRun, bon_curve, bon_point, curves_by_measure, default_ks, improvement,
                              improvement_gains, prompt_curves, speedups)
from ..core.events import Finished, Round
from ..methods import speculative_rejection
from ..analysis.metrics import bootstrap_ci, speedup
from ..analysis import boot
from ..analysis.paging import BLOCK_SIZE
from .coupled import CoupledRun, PrefixScorer, collect
from .simulate import simulate_sr
from ..core.about import DEEPCONF, PASSES


# ---------------------------------------------------------------------------------- step times
@torch.inference_mode()
def measure_pass(lm, cfg: RunConfig, rows: int, stats: bool = True) -> dict:
    """One real Best-of-N pass of ``rows`` rows (candidates 0..rows-1) to the end: wall per step.
    ``stats``: keep the token statistics, as the arm does when its reward reads them."""
    ids = lm.render(cfg.prompt)
    engine = lm.backend.from_config(lm, ids, cfg, n_total=max(rows, cfg.n), stats=stats)
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


# ---------------------------------------------------------------------------------- one prompt
def opening_batch(lm, budget: int, prompt_tokens: int, first_decision: int) -> int:
    """Speculative Rejection's first batch: the rows that fill the budget at the first decision."""
    return max(1, KVBudget(budget, prompt_tokens, sharing(lm, lm.backend)).auto_n(first_decision))


def run_prompt(lm, reward, row: dict, base: RunConfig, *, n_ref: int, points: list[tuple[float, int]],
               budget: int, rules: tuple = ("paper",), live: tuple[tuple[float, int], ...] | None = None,
               tick: Callable[[str], None] = lambda label: None, runs_out: list | None = None,
               coupled: CoupledRun | None = None, rivals: tuple[str, ...] = (),
               rivals_live: tuple[str, ...] = ()) -> dict:
    """One prompt: the coupled reference Best-of-N_ref (one batch) and Speculative Rejection with each
    rule at each (alpha, first decision) under ``budget``; a JSON-ready record.

    A point is replayed by the simulator from the coupled run (exact in fp32: the same tokens, the
    same rewards) unless it is in ``live`` (None: every point) or its first batch is larger than
    N_ref; those run for real, with their wall time, and are checked against the simulator and
    the reference (``drift``: candidates whose text or score differ, bf16 rounding). ``coupled``: a
    coupled run collected before (``reward_study collect``) instead of collecting one here; it may hold
    more than ``n_ref`` candidates (Best-of-N_ref is its first ``n_ref``; coupling makes them the same
    answers), so a first batch larger than N_ref is replayed too.

    ``rivals``: arm specs of DeepConf and ST-BoN (``specrej.arms``), each run on Best-of-N_ref's N candidates,
    replayed from the coupled run (which then records every token's confidence and chain feature): DeepConf
    once with its freed slots refilled (``refill``: a continuous-batching engine, vLLM's) and once in passes
    (``passes``: the transformers engine, which takes no rows into a running batch); those in ``rivals_live``
    also run for real (ST-BoN's run is cheap: N rows to the truncation, then one). ``rival_settings``."""
    P = len(lm.render(row["prompt"]))
    shared = sharing(lm, lm.backend)
    t0 = time.perf_counter()
    reads = (f"top-{DEEPCONF.settings_for(base).conf_topk}", "hidden") if rivals else ()
    run = coupled or collect(lm, replace(base, prompt=row["prompt"], n=n_ref, progress_every=0), reads=reads)
    if run.n < n_ref:
        raise ValueError(f"the coupled run holds {run.n} candidates, fewer than n_ref={n_ref}.")
    wall = None if coupled else time.perf_counter() - t0
    if runs_out is not None:
        runs_out.append(run)
    scorer = PrefixScorer(lm, reward, run)
    every_score = scorer.final()   # all the run's candidates; Best-of-N_ref is the first n_ref
    scores = every_score[:n_ref]
    lengths = run.lengths()[:n_ref]
    winner = max(range(n_ref), key=lambda c: (scores[c], -c))
    texts = [lm.decode(t) for t in run.tokens]
    tick("reference")
    record = {**row, "prompt_tokens": P, "budget": budget, "kv_shared": shared,
              "rows_per_pass": KVBudget(budget, P, shared).rows_per_pass(None, base.max_new_tokens),
              "bon": {"n": n_ref, "scores": scores, "tokens": lengths, "winner": winner,
                      "winner_text": texts[winner],
                      "ledger": {"generated_tokens": sum(lengths), "reward_tokens": scorer.tokens_read,
                                 # the reward's non-embedding weights (FlopModel), attention left out: the coupled
                                 # run keeps no per-read lengths; every arm's reward FLOPs in the bench count so
                                 "reward_flops": flop_model_of(reward).tokens(scorer.tokens_read), "wall_s": wall},
                      "note": "one coupled batch of N_ref rows (not budgeted): its wall time is not used for the curve"},
              "sr": []}
    oracles: dict[tuple[float, int], dict | None] = {}
    for rule in rules:   # names in core.rules.RULES, or rule objects (simulated only)
        name = getattr(rule, "name", rule)
        for alpha, first in points:
            n0 = opening_batch(lm, budget, P, first)
            entry = {"rule": name, "alpha": alpha, "first_decision": first, "n": n0}
            sim = None
            if n0 <= run.n:
                sim = simulate_sr(run, scorer, budget=budget, alpha=alpha, n0=n0, max_new_tokens=base.max_new_tokens,
                                  shared=shared, keep_finished=base.keep_finished, decision=base.decision,
                                  interval=base.interval, rule=rule, n_ref=n_ref)
            if (alpha, first) not in oracles:
                oracles[(alpha, first)] = (_oracle(run, scorer, n0, alpha, budget, base, shared, n_ref)
                                           if n0 <= run.n else None)
            entry["oracle"] = oracles[(alpha, first)]
            if sim is not None and live is not None and (alpha, first) not in live:
                entry.update(_from_sim(sim, P, lm.n_params, reward.n_params, texts))
                entry["reward_flops"] = flop_model_of(reward).tokens(sim.scored_tokens)
            else:
                entry.update(_live(lm, reward, row, base, budget, name, alpha, first, every_score, texts, winner,
                                   lambda c, t: lm.decode(run.tokens[c][:t])))
                if sim is not None:
                    entry["simulated"] = {"winner": sim.winner, "score": sim.score, "steps": sim.steps,
                                          "generated_tokens": sim.generated_tokens}
                    entry["simulator_agrees"] = (sim.winner == entry["winner"] and sim.steps == entry["steps"]
                                                 and sim.generated_tokens == entry["generated_tokens"])
            record["sr"].append(entry)
            tick(f"{name} a={alpha:g} T={first}")
    for spec in rivals:
        for entry in _rivals(lm, reward, run, scorer, row, base, spec, n_ref=n_ref, budget=budget, shared=shared,
                             live=spec in rivals_live, texts=texts, winner=winner):
            record["sr"].append(entry)
        tick(spec)
    return record


def rival_settings(base: RunConfig, n_ref: int) -> RunConfig:
    """The rivals' settings in the bench unless their spec names them: the paper's proportions. DeepConf warms
    up on 1/16 of its traces (the paper: 16 of 256) and groups 1/8 of the longest answer (the paper: 2048
    tokens of answers up to 16k-64k long; this window is proportionally longer, so a stop reads more tokens): the
    base's ``settings`` become DeepConf's (``DeepConfSettings``), which its arms read; other arms read their own
    defaults."""
    own = DEEPCONF.settings_for(base)
    return replace(base, n=n_ref, settings=replace(own, warmup=max(1, n_ref // 16),
                                                   window=max(1, base.max_new_tokens // 8)))


def _rivals(lm, reward, run: CoupledRun, scorer: PrefixScorer, row: dict, base: RunConfig, spec: str, *, n_ref: int,
            budget: int, shared: bool, live: bool, texts: list[str], winner: int) -> list[dict]:
    """One rival arm spec's entries: replayed from the coupled run (DeepConf refilled and in passes), and run
    for real when ``live`` (on the transformers engine: in passes), with the simulator checked against it."""
    from ..arms import parse_arm
    from ..methods import METHODS
    from ..backends.replay import Replay
    from .simulate import rerun

    arm = parse_arm(spec)
    cfg = arm.config(replace(rival_settings(base, n_ref), prompt=row["prompt"], budget=budget, progress_every=0))
    final = scorer.final()
    finals = dict(enumerate(final[:n_ref]))
    # a method in passes runs both ways (a freed slot refilled at once, and the transformers engine's passes)
    in_passes = arm.kind.about.schedule == PASSES
    ways = [("refill", True), ("passes", False)] if in_passes else [("", True)]
    out = []
    for way, refills in ways:
        engine = Replay(run, allow_sharing=shared)
        engine.refills = refills
        fin, rounds = _drain(rerun(METHODS[arm.method], run, scorer, cfg, shared=shared, engine=engine))
        entry = _rival_entry(arm.spec, way, fin, rounds, finals, winner, lm, reward, run.prompt_tokens, texts)
        entry["source"] = "simulated"
        if live and not refills or live and not in_passes:
            real, real_rounds = _drain(METHODS[arm.method](lm, reward, cfg))
            sim = entry
            entry = _rival_entry(arm.spec, way, real, real_rounds, finals, winner, lm, reward, run.prompt_tokens,
                                 texts)
            entry.update(source="run", wall_s=real.ledger.wall_s, ledger=real.ledger.to_dict(),
                         drift=drift(real, final, texts, lambda c, t: lm.decode(run.tokens[c][:t])),
                         simulated={k: sim[k] for k in ("winner", "score", "steps", "generated_tokens")},
                         simulator_agrees=(sim["winner"] == entry["winner"] and sim["steps"] == entry["steps"]
                                           and sim["generated_tokens"] == entry["generated_tokens"]))
        out.append(entry)
    return out


def _drain(events) -> tuple[Finished, list[Round]]:
    rounds, fin = [], None
    for ev in events:
        if isinstance(ev, Round):
            rounds.append(ev)
        elif isinstance(ev, Finished):
            fin = ev
    return fin, rounds


def _rival_entry(spec: str, way: str, fin: Finished, rounds: list[Round], finals: dict, bon_winner: int, lm, reward,
                 prompt_tokens: int, texts: list[str]) -> dict:
    """A rival's record, in the keys Speculative Rejection's points use. Its oracle ceiling is Best-of-N_ref's
    own winner: it starts all N_ref candidates, so a signal that saw the future would keep that one."""
    led = fin.ledger
    scored = sum(t for c in fin.candidates for t, _ in c.history)
    best = max(finals.values())
    return {"method": spec.split(":")[0], "rule": None, "alpha": None, "first_decision": None,
            "label": spec + (f" ({way})" if way else ""), "n": len(fin.candidates), "winner": fin.winner.id,
            "score": fin.winner.score, "winner_text": fin.winner.text, "rounds": fin.rounds, "steps": led.steps,
            "generated_tokens": led.generated_tokens,
            "flops": flops(lm.n_params, prompt_tokens + led.generated_tokens) + flops(reward.n_params, scored),
            "reward_flops": flop_model_of(reward).tokens(scored),
            "wall_s": None, "kept_bon_winner": any(c.id == bon_winner and c.status == "finished" for c in fin.candidates),
            "winner_fate": winner_fate(bon_winner, fin, rounds).to_dict(), "profile": rle(fin.rows_per_step),
            "oracle": {"score": best, "winner": bon_winner, "steps": led.steps, "rounds": fin.rounds,
                       "winner_fate": {"fate": "kept", "decision": None, "position": None}},
            "decisions": [{"position": d.position, "spearman": d.spearman}
                          for d in (decision_rank(r, finals) for r in rounds if live_at_decision(r))],
            # memory cut it short: a decision the budget forced before the method's own (ST-BoN's truncation before
            # c + tau); and ST-BoN's divergence step c where the Round marks it
            "forced": any(r.forced for r in rounds),
            "diverged": next((t for r in rounds for what, t in r.marks if what == "diverged"), None)}


def _oracle(run: CoupledRun, scorer: PrefixScorer, n0: int, alpha: float, budget: int, base: RunConfig,
            shared: bool, n_ref: int | None = None) -> dict:
    """The oracle ceiling at one point (``core.oracle``): the same loop, keeping the best final rewards."""
    final = dict(enumerate(scorer.score(list(range(run.n)), base.max_new_tokens)))
    sim = simulate_sr(run, scorer, budget=budget, alpha=alpha, n0=n0, max_new_tokens=base.max_new_tokens,
                      shared=shared, keep_finished=base.keep_finished, decision=base.decision,
                      interval=base.interval, rule=OracleRule(final), n_ref=n_ref)
    return {"score": sim.score, "winner": sim.winner, "steps": sim.steps, "rounds": sim.rounds,
            "winner_fate": sim.bon_winner_fate.to_dict()}


def _from_sim(sim, prompt_tokens: int, gen_params: int, reward_params: int, texts: list[str]) -> dict:
    return {"source": "simulated", "winner": sim.winner, "score": sim.score, "winner_text": texts[sim.winner],
            "rounds": sim.rounds, "steps": sim.steps, "generated_tokens": sim.generated_tokens,
            "flops": sim.flops(prompt_tokens, gen_params, reward_params), "wall_s": None,
            "kept_bon_winner": sim.kept_bon_winner, "winner_fate": sim.bon_winner_fate.to_dict(),
            "profile": rle(sim.rows_per_step),
            "decisions": [{"position": d["position"], "spearman": d["spearman"]} for d in sim.decisions]}


def _live(lm, reward, row, base, budget, rule, alpha, first, scores, texts, bon_winner, prefix) -> dict:
    cfg = replace(base, prompt=row["prompt"], n=AUTO, first_decision=first, alpha=alpha, budget=budget,
                  progress_every=0, rule=rule)
    rounds: list[Round] = []
    fin = None
    for ev in speculative_rejection(lm, reward, cfg):
        if isinstance(ev, Round):
            rounds.append(ev)
        elif isinstance(ev, Finished):
            fin = ev
    status = {c.id: c.status for c in fin.candidates}
    finals = {i: s for i, s in enumerate(scores)}
    led = fin.ledger.to_dict()
    return {"source": "run", "winner": fin.winner.id, "score": fin.winner.score, "winner_text": fin.winner.text,
            "rounds": fin.rounds, "steps": max(c.tokens for c in fin.candidates),
            "generated_tokens": led["generated_tokens"], "flops": led["flops"], "wall_s": led["wall_s"],
            "reward_flops": flop_model_of(reward).tokens(led["reward_tokens"]),
            "ledger": led, "kept_bon_winner": status.get(bon_winner) == "finished", "profile": rle(fin.rows_per_step),
            "winner_fate": winner_fate(bon_winner, fin, rounds).to_dict(),
            "drift": drift(fin, scores, texts, prefix),
            "decisions": [{"position": d.position, "spearman": d.spearman}
                          for d in (decision_rank(r, finals) for r in rounds if live_at_decision(r))]}


def drift(fin: Finished, scores: list[float], texts: list[str], prefix: Callable[[int, int], str]) -> dict:
    """Candidates of a real Speculative Rejection run that wrote another text than their coupled
    reference self (bf16 rounding can flip a sampled token), or finished with another score.
    ``prefix(c, t)``: the reference's text of candidate c's first t tokens (a pruned one's)."""
    compared = text = score = 0
    for c in fin.candidates:
        if c.id >= len(texts) or c.tokens == 0:
            continue
        compared += 1
        ref = texts[c.id] if c.finish_reason is not None else prefix(c.id, c.tokens)
        if c.text != ref:
            text += 1
        elif c.finish_reason is not None and c.score is not None and not math.isclose(c.score, scores[c.id],
                                                                                        rel_tol=1e-6, abs_tol=1e-9):
            score += 1
    return {"compared": compared, "text_differs": text, "score_differs": score}


# ---------------------------------------------------------------------------------- aggregate
def prompt_run(rec: dict, flops_per_token: float, gen_flops: FlopModel | None = None) -> PromptRun:
    """One prompt's Best-of-N_ref as the curve reads it; ``gen_flops``: its FLOPs counted by that FlopModel
    (the prompt once at positions 1..P, each answer at P+1..P+g), else ``flops_per_token`` x tokens."""
    led = rec["bon"]["ledger"]
    P, lengths = rec["prompt_tokens"], rec["bon"]["tokens"]
    counted = {}
    if gen_flops is not None:
        counted = {"prompt_flops": gen_flops.sequence(0, P),
                   "answer_flops": sum(gen_flops.sequence(P, g) for g in lengths) / len(lengths)}
    return PromptRun(rec["bon"]["scores"], lengths, P, flops_per_token, reward_flops=led["reward_flops"], **counted)


STARTS_TOGETHER = ("sr", "stbon")   # methods whose rows all start at step 1: a row's step is its token's position


def recount_flops(s: dict, rec: dict, gen_params: int, fm: FlopModel) -> tuple[float, bool]:
    """A method's FLOPs on one prompt recounted by ``fm`` from what its record holds, and whether the count is
    exact (False: a bound from above). The generator: the prompt once (and tokens prefilled again, from its
    ledger, at the prompt's length), each generated token at its position: exact from its rows per step
    (``profile``) where every row starts at step 1 (Speculative Rejection, ST-BoN); otherwise (no profile, or rows
    that start later: DeepConf's passes and refills) bounded from above by the highest positions Best-of-N_ref's
    answers hold (coupled: a method's tokens are prefixes of the same candidates' answers). The reward's FLOPs
    stay as recorded (the record's FLOPs less its generator's by the rule it was made with, 2 x ``gen_params`` x
    tokens): 0 in every committed table (rewards with no model); a record that keeps its own ``reward_flops`` (a bench
    run since issue 63: the reward's non-embedding weights x tokens read) gives them."""
    P, G = rec["prompt_tokens"], s["generated_tokens"]
    led = s.get("ledger") or {}
    prompt = led.get("prompt_tokens", P)
    reward = s["reward_flops"] if "reward_flops" in s else s["flops"] - flops(gen_params, prompt + G)
    profile = s.get("profile")
    if profile and s.get("method", "sr") in STARTS_TOGETHER:
        steps = unrle(profile)
        assert sum(steps) == G, f"profile of {sum(steps)} tokens against {G} generated"
        positions, exact = sum(rows * t for t, rows in enumerate(steps, 1)), True
    else:   # the G highest positions Best-of-N_ref's answers hold (each answer g holds positions 1..g)
        held = sorted((t for g in rec["bon"]["tokens"] for t in range(1, g + 1)), reverse=True)
        positions, exact = sum(held[:G]), G == 0
    gen = fm.sequence(0, P) + fm.tokens(prompt - P, (prompt - P) * P) + fm.tokens(G, G * P + positions)
    return gen + max(0.0, reward), exact


def rle(rows) -> list[list[int]]:
    """Rows per decoding step, run-length encoded: ``[[rows, steps], ...]`` (a record stays small)."""
    out: list[list[int]] = []
    for r in rows:
        if out and out[-1][0] == r:
            out[-1][1] += 1
        else:
            out.append([int(r), 1])
    return out


def unrle(runs) -> list[int]:
    """``rle``'s inverse."""
    return [r for r, n in runs for _ in range(n)]


def gpu_priced(records: list[dict], gpu, curve: list[dict], runs: list[PromptRun], points: list[dict]) -> dict | None:
    """Decode steps priced on a GPU's measured step (``specrej.analysis.gpu_steps.GpuStep``), as the page's second reading:
    Best-of-k's passes (``curve.bon_point``, the rows decoding at each step) and each point's own steps
    (``profile``: its rows at each step), each step at the GPU's time for its rows; the speed-up at equal
    improvement score by the same interpolation as the other measures. Adds ``speedup_gpu`` and ``gpu_s`` to each
    point with a profile on every prompt; None when no point has one."""
    memos: list[dict] = [{} for _ in runs]
    rows_per_pass = [r["rows_per_pass"] for r in records]
    bon = [(sum(bon_point(r, row["k"], b, gpu.cost.step, memo).wall_s
                for r, b, memo in zip(runs, rows_per_pass, memos)), row["improvement"]) for row in curve]
    priced = 0
    for j, point in enumerate(points):
        profiles = [r["sr"][j].get("profile") for r in records]
        if not all(profiles):
            continue
        seconds = sum(gpu.cost.total(unrle(p)) for p in profiles)
        sp = speedup(bon, point["improvement"], seconds)
        point.update(gpu_s=seconds, speedup_gpu={"value": sp.value, "lower_bound": sp.lower_bound})
        priced += 1
    if not priced:
        return None
    return {"on": gpu.on, "measured": gpu.describe(), "file": gpu.source, "bon_ref_s": bon[-1][0],
            "extrapolated_beyond": gpu.cost.measured_max}


def aggregate(records: list[dict], *, gen_params: int, step_model: StepCost | None, gpu=None,
              block_size: int = BLOCK_SIZE, gen_flops: FlopModel | None = None) -> dict:
    """The paper's metrics over prompts against Best-of-N_ref under the same budget.

    Relative compute = sum over prompts of the method's / Best-of-N_ref's (budgeted, expected);
    speed-up = compute Best-of-N needs for the method's improvement score (log-interpolated on
    the order-statistics curve, every k) over the method's, per measure: decode steps against
    fixed passes (``steps``), refilled slots (``steps_refill``), a paged KV cache reserving each answer's length
    at its start (``steps_paged``) and vLLM v1's schedule (``steps_vllm``, blocks of ``block_size`` slots), FLOPs,
    and wall time (only where every prompt's point ran for real). A lower bound when the method beats
    Best-of-N_ref; ``speedup_<m>_ci90``: the speed-up at each end of the improvement's 90% interval;
    ``speedup_<m>_boot90``: the speed-up's 90% bootstrap interval over prompts (``analysis.boot``: the curve and
    the point both resampled); ``speedup_<m>_less``: the speed-up had the method scored 0.1 and 1 point less. The improvement score comes raw and capped (each prompt's best at most
    Best-of-N_ref's), each with a 90% bootstrap interval over prompts; beside it the oracle ceiling and
    the gap to it, and Best-of-N_ref's winner's fate on each prompt. A prompt where every Best-of-N_ref answer
    scored the same decides nothing (any arm's answer is "the best" there): it is left out of every figure and
    listed apart (``flat_prompts``), never averaged in as 100. ``gpu``: a ``specrej.analysis.gpu_steps.GpuStep``
    for this generator: the decode steps priced on it as well (``gpu_priced``). ``gen_flops``: every FLOPs figure
    recounted by that ``core.cost.FlopModel`` (non-embedding weights and attention: ``prompt_run``,
    ``recount_flops``; ``flops_exact`` says where a method's count is a bound from above); None: the records' own
    FLOPs (2 x ``gen_params`` x tokens, the older rule)."""
    if not records:
        raise ValueError("no prompt results to aggregate")
    flat = [r.get("id", str(i)) for i, r in enumerate(records) if len(set(r["bon"]["scores"])) == 1]
    records = [r for r in records if len(set(r["bon"]["scores"])) > 1]
    if not records:
        raise ValueError(f"every Best-of-N answer scored the same on every prompt ({', '.join(flat)}): the reward "
                         "tells no answer from another, so no method can be compared")
    n_ref = records[0]["bon"]["n"]
    runs = [prompt_run(r, flops(gen_params, 1), gen_flops) for r in records]
    if gen_flops is not None:   # every method's FLOPs recounted (copies: the records stay as they were made)
        counted = [[recount_flops(s, r, gen_params, gen_flops) for s in r["sr"]] for r in records]
        records = [{**r, "sr": [{**s, "flops": c[0], "flops_exact": c[1]} for s, c in zip(r["sr"], cs)]}
                   for r, cs in zip(records, counted)]
    budgets = [KVBudget(r["budget"], r["prompt_tokens"], r.get("kv_shared", True)) for r in records]
    ks = default_ks(n_ref)
    per = prompt_curves(runs, ks, [r["rows_per_pass"] for r in records], step_model.step if step_model else None,
                        budgets, block_size)
    curve = bon_curve(runs, ks, [], per_prompt=per)
    ref = curve[-1]
    by = curves_by_measure(curve)
    # the bootstrap over prompts: each prompt's Best-of-k improvement term and compute, and the resamples
    bon_gains = np.array([improvement_gains([p["best"][j] for p in per], runs) for j in range(len(ks))]).T
    bon_compute = {m: np.array([p[m] for p in per]) for m in MEASURES if m in per[0]}
    weights = boot.resamples(len(records))
    points = []
    for j, first in enumerate(records[0]["sr"]):
        runs_j = [r["sr"][j] for r in records]
        bests = [s["score"] for s in runs_j]
        walls = [s.get("wall_s") for s in runs_j]
        method = {"flops": sum(s["flops"] for s in runs_j), "steps": sum(s["steps"] for s in runs_j),
                  "tokens": sum(s["generated_tokens"] for s in runs_j)}
        method["steps_refill"] = method["steps_paged"] = method["steps_vllm"] = method["steps"]
        own = {"flops": [s["flops"] for s in runs_j], "steps": [s["steps"] for s in runs_j]}
        own["steps_refill"] = own["steps_paged"] = own["steps_vllm"] = own["steps"]
        if all(w is not None for w in walls):
            method["wall"] = method["wall_vllm"] = sum(walls)
            own["wall"] = own["wall_vllm"] = walls
        imp = improvement(bests, runs)
        sp = speedups(by, imp, method)
        gains = improvement_gains(bests, runs)
        imp_ci = _ci(improvement_gains(bests, runs))
        sources = {s.get("source", "run") for s in runs_j}
        point = {
            "method": first.get("method", "sr"), "label": first.get("label"), "rule": first.get("rule", "paper"),
            "alpha": first["alpha"],
            "first_decision": first["first_decision"], "source": sources.pop() if len(sources) == 1 else "mixed",
            "n": sum(s["n"] for s in runs_j) / len(runs_j), "improvement": imp,
            "improvement_ci90": imp_ci,
            "improvement_capped": improvement(bests, runs, capped=True),
            "improvement_capped_ci90": _ci(improvement_gains(bests, runs, capped=True)),
            **{f"rel_{m}": method[m] / ref[m] for m in method if m in ref},
            **{f"speedup_{m}": {"value": v.value, "lower_bound": v.lower_bound} for m, v in sp.items()},
            **{f"speedup_{m}_ci90": _speedup_ci(by[m], imp_ci, method[m]) for m in sp},
            **{f"speedup_{m}_boot90": boot.bootstrap_speedup(bon_gains, bon_compute[m], gains, own[m], weights)
               for m in sp},
            **{f"speedup_{m}_less": boot.sensitivity(by[m], imp, method[m]) for m in sp},
            **({"flops_exact": all(s["flops_exact"] for s in runs_j)} if "flops_exact" in first else {}),
            **({"forced": [r.get("id", str(i)) for i, (r, s) in enumerate(zip(records, runs_j)) if s.get("forced")]}
               if any("forced" in s for s in runs_j) else {}),
            "kept_bon_winner": sum(s["kept_bon_winner"] for s in runs_j) / len(runs_j),
            "mean_rounds": sum(s["rounds"] for s in runs_j) / len(runs_j), "rank_correlation": _by_decision(runs_j),
            **_fates(records, runs_j), **_oracle_point(runs_j, runs, imp)}
        live = [s for s in runs_j if "drift" in s]
        if live:
            point["drift"] = {k: sum(s["drift"][k] for s in live) for k in ("compared", "text_differs", "score_differs")}
            checked = [s["simulator_agrees"] for s in live if "simulator_agrees" in s]
            point["simulator_agrees"] = f"{sum(checked)}/{len(checked)}"
        points.append(point)
    bon_rows = [{"method": "bon", "k": row["k"], "improvement": row["improvement"],
                 **{f"rel_{m}": row[m] / ref[m] for m in ("flops", "steps", "steps_refill", "steps_paged", "steps_vllm",
                                                          "wall", "wall_vllm", "tokens") if m in row}}
                for row in curve]
    return {"n_ref": n_ref, "prompts": len(records), "flat_prompts": flat, "bon": bon_rows, "sr": points,
            "bon_ref": {m: ref[m] for m in ("steps", "steps_refill", "steps_paged", "steps_vllm", "flops", "tokens",
                                            "wall", "wall_vllm") if m in ref},
            "vllm_block_size": block_size,
            "flop_model": ({"params": gen_flops.params, "layers": gen_flops.layers, "d_model": gen_flops.d_model,
                            "rule": "2 x non-embedding params x tokens + 2 x layers x context x d_model per token"}
                           if gen_flops is not None else {"rule": "2 x all params x tokens"}),
            "step_model": step_model.points if step_model else None,
            "gpu": gpu_priced(records, gpu, curve, runs, points) if gpu is not None else None}


def _ci(gains: list[float]) -> list[float]:
    lo, hi = bootstrap_ci(gains)
    return [100.0 * (1.0 + lo), 100.0 * (1.0 + hi)]


def _speedup_ci(curve: list[tuple[float, float]], imp_ci: list[float], compute: float) -> dict:
    """The speed-up at each end of the improvement's 90% bootstrap interval (over prompts): the compute
    Best-of-N needs for that score over the method's. ``high_lower_bound``: the interval's top is past
    Best-of-N_ref's score, so that end is a bound."""
    lo, hi = (speedup(curve, x, compute) for x in imp_ci)
    return {"low": lo.value, "high": hi.value, "high_lower_bound": hi.lower_bound}


FATES = ("kept", "pruned", "never_drawn")


def _fates(records: list[dict], runs_j: list[dict]) -> dict:
    """What became of Best-of-N_ref's winner on each prompt (kept to the end, pruned at decision d, never
    drawn by the first batch), and the counts: the share kept is ``kept_bon_winner``."""
    per = [{"id": r.get("id"), **s["winner_fate"]} for r, s in zip(records, runs_j) if "winner_fate" in s]
    if not per:
        return {}
    counts = {f: sum(p["fate"] == f for p in per) for f in FATES}
    at = {}
    for p in per:
        if p["fate"] == "pruned":
            at[str(p["decision"])] = at.get(str(p["decision"]), 0) + 1
    return {"winner_fates": per, "winner_fate_counts": {**counts, "pruned_at_decision": dict(sorted(at.items()))}}


def _oracle_point(runs_j: list[dict], runs: list[PromptRun], imp: float) -> dict:
    """The oracle ceiling at this point (``core.oracle``), raw and capped with 90% intervals, and the
    rule's gap to it; nothing where a prompt's first batch exceeds the coupled run (no replay there)."""
    oracle = [s.get("oracle") for s in runs_j]
    if not oracle or any(o is None for o in oracle):
        return {}
    bests = [o["score"] for o in oracle]
    ceiling = improvement(bests, runs)
    return {"oracle_improvement": ceiling, "oracle_improvement_ci90": _ci(improvement_gains(bests, runs)),
            "oracle_improvement_capped": improvement(bests, runs, capped=True),
            "oracle_steps": sum(o["steps"] for o in oracle), "gap_to_oracle": ceiling - imp}


def _by_decision(runs: list[dict]) -> list[dict]:
    out = []
    for d in range(max((len(s["decisions"]) for s in runs), default=0)):
        at = [s["decisions"][d] for s in runs if len(s["decisions"]) > d]
        rhos = [x["spearman"] for x in at if x["spearman"] is not None and math.isfinite(x["spearman"])]
        out.append({"decision": d + 1, "mean_position": sum(x["position"] for x in at) / len(at),
                    "mean_spearman": sum(rhos) / len(rhos) if rhos else None, "prompts": len(rhos)})
    return out


SUMMARY_KEYS = ("method", "label", "rule", "alpha", "first_decision", "source", "improvement", "improvement_ci90",
                "improvement_capped", "improvement_capped_ci90", "rel_flops", "rel_wall", "speedup_flops",
                "speedup_steps", "speedup_steps_refill", "speedup_steps_paged", "speedup_steps_vllm", "speedup_wall",
                "speedup_wall_vllm", "kept_bon_winner",
                "oracle_improvement", "gap_to_oracle", "winner_fate_counts")


def summary(agg: dict) -> list[dict]:
    """One row per Speculative Rejection point (plus the reference), the issue's columns."""
    rows = [{"method": "bon", "rule": None, "alpha": None, "first_decision": None, "source": "run",
             "improvement": 100.0, "improvement_ci90": [100.0, 100.0], "improvement_capped": 100.0,
             "improvement_capped_ci90": [100.0, 100.0], "rel_flops": 1.0,
             "rel_wall": 1.0 if agg["bon"][-1].get("rel_wall") else None, "speedup_flops": 1.0,
             "speedup_steps": 1.0, "speedup_steps_refill": agg["bon_ref"]["steps_refill"] / agg["bon_ref"]["steps"],
             "speedup_steps_paged": (agg["bon_ref"]["steps_paged"] / agg["bon_ref"]["steps"]
                                     if "steps_paged" in agg["bon_ref"] else None),
             "speedup_steps_vllm": (agg["bon_ref"]["steps_vllm"] / agg["bon_ref"]["steps"]
                                    if "steps_vllm" in agg["bon_ref"] else None),
             "speedup_wall": 1.0 if agg["bon"][-1].get("rel_wall") else None,
             "speedup_wall_vllm": (agg["bon_ref"]["wall_vllm"] / agg["bon_ref"]["wall"]
                                   if "wall_vllm" in agg["bon_ref"] else None),
             "speedup_gpu": 1.0 if agg.get("gpu") else None, "kept_bon_winner": 1.0,
             "n": agg["n_ref"]}]
    for p in agg["sr"]:
        row = {k: p.get(k) for k in SUMMARY_KEYS}
        for m in ("flops", "steps", "steps_refill", "steps_paged", "steps_vllm", "wall", "wall_vllm", "gpu"):
            s = p.get(f"speedup_{m}")
            row[f"speedup_{m}"] = s["value"] if s else None
            row[f"speedup_{m}_lower_bound"] = s["lower_bound"] if s else None
            ci = p.get(f"speedup_{m}_ci90")
            row[f"speedup_{m}_ci90"] = [ci["low"], ci["high"]] if ci else None
            b = p.get(f"speedup_{m}_boot90")
            row[f"speedup_{m}_boot90"] = [b["low"], b["high"]] if b else None
            less = p.get(f"speedup_{m}_less")
            row[f"speedup_{m}_less"] = {d: v["value"] for d, v in less.items()} if less else None
        row["n"] = p["n"]
        rows.append(row)
    return rows
