"""Best-of-N and Speculative Rejection as iterators of typed events.

Both take the same arguments ``(lm, reward, cfg)`` and are looked up by name in ``METHODS``.
Both score a candidate the step it finishes (so finished ones keep the score they ended with)
and yield ``Progress`` every ``cfg.progress_every`` steps, a ``Round`` per decision (Speculative
Rejection) or per pass (Best-of-N), and one ``Finished``. Closing an iterator early releases
its KV cache at once (``finally``).

Speculative Rejection, as the reference code runs it: start with all N rows; decode until the
next token would overflow the memory budget (the decision token) or, with
``decision="interval"``, every ``interval`` tokens; score every live partial response; rank
them together with finished candidates still in contention; keep the top
``max(1, round((1 - alpha) * n))``; free the rejected rows; repeat. If the kept live rows still
cannot fit the next token, memory forces more pruning (the round says ``forced``).
``keep_finished=True`` keeps finished candidates out of the ranking: they always stay.
Which candidates are kept is the rule's (``cfg.rule``, ``specrej.rules``): the paper's keeps the
highest partial rewards; the method decides only how many.

Both take an optional ``engine`` factory (default ``Engine``): the public seam through which the
bench runs the same method on a differently built engine (``bench/reference.py``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from .budget import check_fits, resolve_budget, resolve_n, rows_per_pass
from .config import AUTO, RunConfig
from .engine import Done, Engine, Rows, Sampling
from .events import Arm, Candidate, Event, Finished, Ledger, Progress, Round
from . import precision
from .models import LM
from .rewards import Reward, TokenStats, checked
from .rules import Contender, get_rule

EngineFactory = Callable[..., Engine]


@dataclass
class _Rec:
    id: int
    status: str = "waiting"
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    score: float | None = None
    history: list[tuple[int, float]] = field(default_factory=list)
    round_pruned: int | None = None
    finish_reason: str | None = None
    stats: TokenStats | None = None   # the engine's statistics at its last score (what a rule may read)

    def view(self) -> Candidate:
        return Candidate(self.id, self.text, len(self.tokens), self.status, self.score,
                         tuple(self.history), self.round_pruned, self.finish_reason)


class _Run:
    """State of one arm: candidates, the engine, the ledger and its clock."""

    def __init__(self, arm: Arm, lm: LM, reward: Reward, cfg: RunConfig, engine: EngineFactory = Engine,
                 auto_n: bool = False):
        self.arm, self.lm, self.reward, self.cfg, self.engine_factory = arm, lm, reward, cfg, engine
        self.auto_n = auto_n   # n='auto' allowed: the first batch fills the budget at cfg.first_decision
        # rewards that never read the engine's token statistics spare it computing them
        self.stats = bool(getattr(reward, "uses_token_stats", True))
        self.prompt_ids = lm.render(cfg.prompt)
        self.budget = resolve_budget(cfg, lm)
        # an engine that re-prefills (the bench's reference style) keeps a copy of the prompt per row
        self.shared = bool(lm.shares_prefix and getattr(engine, "allow_sharing", True))
        if cfg.n == AUTO and not self.auto_n:
            raise ValueError(f"n='auto' is for Speculative Rejection (its first batch fills memory); give {arm} a "
                             "number of candidates, e.g. bon:n=128.")
        cfg = self.cfg = resolve_n(cfg, len(self.prompt_ids), self.budget, self.shared)
        check_fits(cfg, len(self.prompt_ids), self.budget, lm.max_positions, self.shared)
        self.recs = [_Rec(i) for i in range(cfg.n)]
        self.prompt_tokens = self.generated = self.reward_tokens = 0
        self.peak_slots = 0
        self.wall = 0.0
        self._resumed = time.perf_counter()
        self.engine: Engine | None = None
        self.rows: Rows | None = None
        self.steps = 0

    # -- clock: only time spent inside this arm counts, so two arms can be interleaved
    def resume(self) -> None:
        self._resumed = time.perf_counter()

    def pause(self) -> None:
        self.wall += time.perf_counter() - self._resumed
        self._resumed = time.perf_counter()

    def ledger(self) -> Ledger:
        n_gen = self.lm.n_params
        if self.lm.device.type == "cuda":
            peak_bytes = torch.cuda.max_memory_allocated(self.lm.device)
        else:
            peak_bytes = self.peak_slots * self.lm.kv_bytes_per_slot
        prompt = self.prompt_tokens + (self.engine.extra_prefill_tokens if self.engine is not None else 0)
        return Ledger(
            prompt_tokens=prompt, generated_tokens=self.generated, reward_tokens=self.reward_tokens,
            generator_flops=2.0 * n_gen * (prompt + self.generated),
            reward_flops=2.0 * self.reward.n_params * self.reward_tokens,
            wall_s=self.wall + time.perf_counter() - self._resumed,
            peak_kv_slots=self.peak_slots, peak_memory_bytes=int(peak_bytes), budget=self.budget,
            dtype=precision.short_name(self.lm.dtype), kv_sharing="shared" if self.shared else "copied",
        )

    def candidates(self) -> tuple[Candidate, ...]:
        return tuple(r.view() for r in self.recs)

    # -- engine
    def prefill(self) -> None:
        cfg = self.cfg
        self.engine = self.engine_factory(self.lm, self.prompt_ids, sampling=Sampling(cfg.temperature, cfg.top_p,
                                                                                      cfg.top_k),
                                          seed=cfg.seed, n_total=cfg.n, max_new_tokens=cfg.max_new_tokens,
                                          stop=cfg.stop, share_prefix=self.shared,
                                          stats=self.stats)
        self.prompt_tokens += len(self.prompt_ids)

    def start(self, ids: list[int]) -> Rows:
        self.rows = self.engine.start(ids)
        for i in ids:
            self.recs[i].status = "live"
        return self.rows

    def step(self) -> list[Done]:
        rows = self.rows
        generated_before = len(rows)
        done = rows.step()
        self.generated += generated_before
        self.steps += 1
        self.peak_slots = max(self.peak_slots, rows.slots())
        if done:
            self._score(done_list=done)
        return done

    def refresh_texts(self) -> None:
        for i, cid in enumerate(self.rows.ids):
            rec = self.recs[cid]
            rec.tokens = list(self.rows.tokens[i])
            rec.text = self.lm.decode(rec.tokens)

    def score_live(self) -> list[float]:
        """Score every live row's partial response; returns scores in row order."""
        self.refresh_texts()
        rows = self.rows
        stats = [TokenStats(*rows.stats(i)) for i in range(len(rows))] if self.stats else None
        recs = [self.recs[c] for c in rows.ids]
        return self._apply_scores(recs, stats)

    def _score(self, done_list: list[Done]) -> None:
        recs = []
        for d in done_list:
            rec = self.recs[d.cand]
            rec.tokens, rec.text = list(d.tokens), self.lm.decode(d.tokens)
            rec.status, rec.finish_reason = "finished", d.reason
            recs.append(rec)
        stats = [TokenStats(d.mean_logprob, d.mean_self_certainty) for d in done_list] if self.stats else None
        self._apply_scores(recs, stats)

    def _apply_scores(self, recs: list[_Rec], stats: list[TokenStats] | None) -> list[float]:
        out = checked(self.reward, self.cfg.prompt, [r.text for r in recs], stats)
        self.reward_tokens += out.tokens_read
        for i, (rec, s) in enumerate(zip(recs, out.scores)):
            rec.score = s
            rec.stats = stats[i] if stats else None
            rec.history.append((len(rec.tokens), s))
        return out.scores

    def progress(self) -> Progress | None:
        every = self.cfg.progress_every
        if not every or self.steps % every or not self.rows or not len(self.rows):
            return None
        self.refresh_texts()
        return Progress(self.arm, self.rows.generated, len(self.rows), self.candidates(), self.ledger())

    def finished(self, rounds: int) -> Finished:
        contenders = [r for r in self.recs if r.status == "finished"]
        winner = max(contenders, key=lambda r: (r.score, -r.id))
        return Finished(self.arm, winner.view(), self.candidates(), rounds, self.ledger())

    def release(self) -> None:
        if self.rows is not None:
            self.rows.release()
        if self.engine is not None:
            self.engine.release()
        self.rows = self.engine = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _timed(run_factory: Callable[[], _Run], body: Callable[[_Run], Iterator[Event]]) -> Iterator[Event]:
    """Run ``body``, counting only the time spent inside it, and always release memory."""
    run = None
    try:
        run = run_factory()
        run.resume()
        for event in body(run):
            run.pause()
            yield event
            run.resume()
    finally:
        if run is not None:
            run.release()


@torch.inference_mode()
def _bon_body(run: _Run) -> Iterator[Event]:
    cfg = run.cfg
    run.prefill()
    b = rows_per_pass(cfg, len(run.prompt_ids), run.budget, run.shared)
    for index, first in enumerate(range(0, cfg.n, b)):
        ids = list(range(first, min(cfg.n, first + b)))
        rows = run.start(ids)
        while len(rows):
            run.step()
            if (p := run.progress()) is not None:
                yield p
        yield Round(run.arm, index, max(len(run.recs[i].tokens) for i in ids),
                    run.candidates(), None, len(ids), 0, False, run.ledger())
    yield run.finished(rounds=index + 1)


@torch.inference_mode()
def _sr_body(run: _Run) -> Iterator[Event]:
    cfg = run.cfg
    run.prefill()
    rows = run.start(list(range(cfg.n)))
    index, last_decision = 0, 0
    while len(rows):
        per_row = rows.slots_per_row_after_step()   # a row's own slots; the shared prompt is extra
        full = rows.shared_slots + len(rows) * per_row > run.budget
        due = cfg.decision == "interval" and rows.generated - last_decision >= cfg.interval
        if rows.generated > 0 and (full or due):
            yield _decide(run, index, per_row)
            index, last_decision = index + 1, rows.generated
            if not len(rows):  # every kept slot went to a finished candidate
                break
        run.step()
        if (p := run.progress()) is not None:
            yield p
    yield run.finished(rounds=index)


def _decide(run: _Run, index: int, per_row: int) -> Round:
    cfg, rows = run.cfg, run.rows
    live_scores = run.score_live()
    live = [run.recs[c] for c in rows.ids]
    pool = list(live)
    if not cfg.keep_finished:
        pool += [r for r in run.recs if r.status == "finished"]
    n_keep = max(1, round((1 - cfg.alpha) * len(pool)))
    by_id = {r.id: r for r in pool}
    ranked = [by_id[i] for i in get_rule(cfg.rule).rank([contender(r) for r in pool], rows.generated)]
    kept, pruned = ranked[:n_keep], ranked[n_keep:]
    kept_ids = {r.id for r in kept}
    kept_live = [r for r in kept if r.status == "live"]
    cap = (run.budget - rows.shared_slots) // per_row
    forced = len(kept_live) > cap
    if forced:  # memory forces more pruning than alpha asked for: drop the lowest kept live rows
        dropped = kept_live[cap:]
        kept_live = kept_live[:cap]
        kept = [r for r in kept if r not in dropped]
        pruned = pruned + dropped
        kept_ids = {r.id for r in kept}
    for r in pruned:
        r.status, r.round_pruned = "pruned", index
    for r in kept_live:
        r.status = "kept"
    position = {c: i for i, c in enumerate(rows.ids)}
    rows.keep([position[r.id] for r in sorted(kept_live, key=lambda r: r.id)])
    event = Round(run.arm, index, rows.generated, run.candidates(),
                  min(r.score for r in kept) if kept else None, len(kept_ids), len(pruned), forced, run.ledger())
    for r in kept_live:
        r.status = "live"
    assert len(live_scores) == len(live)
    return event


def contender(r: _Rec) -> Contender:
    """What the decision rule sees of a candidate."""
    st = r.stats
    return Contender(r.id, r.score, len(r.tokens), r.status == "finished",
                     st.mean_logprob if st else None, st.mean_self_certainty if st else None)


def best_of_n(lm: LM, reward: Reward, cfg: RunConfig, *, engine: EngineFactory = Engine) -> Iterator[Event]:
    """Sample N full responses (in passes of the rows that fit), score each, return the best."""
    return _timed(lambda: _Run("bon", lm, reward, cfg, engine), _bon_body)


def speculative_rejection(lm: LM, reward: Reward, cfg: RunConfig, *,
                          engine: EngineFactory = Engine) -> Iterator[Event]:
    """Start with N rows (n='auto': the rows that fill the budget at cfg.first_decision tokens); at each
    decision keep the top round((1 - alpha) * n) by partial reward."""
    return _timed(lambda: _Run("sr", lm, reward, cfg, engine, auto_n=True), _sr_body)


METHODS: dict[str, Callable[[LM, Reward, RunConfig], Iterator[Event]]] = {
    "bon": best_of_n,
    "sr": speculative_rejection,
}


def run_to_completion(events: Iterator[Event]) -> Finished:
    """Drain an event stream and return its Finished event."""
    last = None
    for last in events:
        pass
    if not isinstance(last, Finished):
        raise RuntimeError("the method ended without a Finished event")
    return last


def race(streams: dict[str, Iterator[Event]],
         referee: Callable[[Event], list[Event]] | None = None) -> Iterator[Event]:
    """Interleave arms so they advance at equal compute: step whichever has spent fewer FLOPs.

    ``referee`` (e.g. ``match.StopWhenMatched``) sees every event and returns the events to
    yield in its place; a ``Finished`` it returns for another arm still running ends that arm
    there. Closing the race closes every arm (and so frees their memory)."""
    spent = {name: 0.0 for name in streams}
    alive = dict(streams)
    try:
        while alive:
            name = min(alive, key=lambda k: spent[k])
            try:
                event = next(alive[name])
            except StopIteration:
                del alive[name]
                continue
            spent[name] = event.ledger.flops
            for out in (referee(event) if referee else (event,)):
                if isinstance(out, Finished) and out is not event and out.arm in alive:
                    alive.pop(out.arm).close()   # the referee ended this arm: free its memory now
                yield out
    finally:
        for it in streams.values():
            it.close()
