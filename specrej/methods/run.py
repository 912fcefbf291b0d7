"""One arm's state while a method runs: candidates, the backend, the ledger and its clock.

``_Run`` is the only place that drives a backend (``specrej.backends.Backend``): it prefills,
starts rows, steps them, scores the rows that end, and fills the ledger from what the backend
reports. The KV budget and its arithmetic come from ``specrej.core.budget.KVBudget``. No torch here:
with a backend that needs none (``backends.replay``), the methods run without it.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from ..backends import Backend, BackendFactory, Batch, Done, LanguageModel
from ..core.config import AUTO, RunConfig
from ..core.budget import Admission, admit, granted_budget, sharing
from ..core.cost import flop_model_of, read_key, reads_of
from ..core.decisions import Moment
from ..core.rules import Contender
from ..core.events import Arm, Candidate, Event, Finished, Ledger, Progress, Round, Status
from ..core.scoring import Reward, TokenStats, as_reward, checked



@dataclass
class _Rec:
    id: int
    status: Status = "waiting"   # the events' Literal: waiting | live | kept | pruned | finished
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    score: float | None = None
    history: list[tuple[int, float]] = field(default_factory=list)
    round_pruned: int | None = None
    finish_reason: str | None = None
    stats: TokenStats | None = None   # the generator's statistics at its last score (what a rule may read)
    signal: list[tuple[int, float]] = field(default_factory=list)   # a rival's own signal over its tokens
    conf: Sequence[float] = ()        # its token confidences once it left the batch (DeepConf's)
    coe: Sequence[float] = ()         # its chain features once it left the batch (ST-BoN's)

    def view(self) -> Candidate:
        return Candidate(self.id, self.text, len(self.tokens), self.status, self.score,
                         tuple(self.history), self.round_pruned, self.finish_reason, tuple(self.signal))

    def contender(self) -> Contender:
        """What a decision's rejection rule sees of this candidate."""
        st = self.stats
        return Contender(self.id, self.score, len(self.tokens), self.status == "finished",
                         st.mean_logprob if st else None, st.mean_self_certainty if st else None,
                         tuple(self.history))


def _admits(admission: Admission | None, cfg: RunConfig, prompt_len: int, shared: bool) -> bool:
    """``admission`` (a caller's ``admit``) answers this run: the same config (with n='auto', the number it resolved
    to), the same prompt length and prompt sharing. Anything else is admitted afresh."""
    if admission is None:
        return False
    import dataclasses

    same = admission.cfg == cfg or (cfg.n == AUTO and dataclasses.replace(admission.cfg, n=AUTO) == cfg)
    return same and admission.kv.prompt_len == prompt_len and admission.kv.shared == shared


def warm_up(lm: LanguageModel, engine: BackendFactory | None = None) -> float:
    """Build what ``lm``'s engine builds once per model (the transformers backend's compiled decoding step), now;
    returns the seconds it took (about 0 once built, or for an engine with nothing to build). Every method calls
    it with its arm's clock paused, so no arm's wall time pays for it, whichever arm steps first (the first arm
    of a fresh process was charged tens of seconds: 8.84x, 2.73x and 2.03x "less wall time" for three identical
    races). Call it yourself to build the step before timing anything else."""
    t0 = time.perf_counter()
    build = getattr(engine or lm.backend, "warm_up", None)
    if build is not None:
        build(lm)
    return time.perf_counter() - t0


class _Run:
    """State of one arm: candidates, the engine, the ledger and its clock."""

    def __init__(self, arm: Arm, lm: LanguageModel, reward: Reward, cfg: RunConfig,
                 engine: BackendFactory | None = None, auto_n: bool = False, refill: bool = False,
                 admission: Admission | None = None):
        engine = engine or lm.backend
        if refill and not engine.refills:
            raise ValueError(f"{arm}: continuous batching adds rows to a running batch, which the {engine.name} "
                             "backend cannot (its rows share one length); run it on the vLLM backend "
                             "(--backend vllm), or use bon (fixed passes) here.")
        reward = as_reward(reward)   # only score is required: the optional members get their defaults
        self.arm, self.lm, self.reward, self.cfg, self.engine_factory = arm, lm, reward, cfg, engine
        self.auto_n = auto_n   # n='auto' allowed: the first batch fills the budget at cfg.first_decision
        # rewards that never read the engine's token statistics spare it computing them
        self.stats = bool(reward.uses_token_stats)
        self.prompt_ids = lm.render(cfg.prompt)
        # an engine that re-prefills (the bench's reference style) keeps a copy of the prompt per row
        self.shared = sharing(lm, engine)
        if cfg.n == AUTO and not self.auto_n:
            raise ValueError(f"n='auto' is for Speculative Rejection (its first batch fills memory); give {arm} a "
                             "number of candidates, e.g. bon:n=128.")
        if _admits(admission, cfg, len(self.prompt_ids), self.shared):
            admitted = admission   # the caller's (the page's planner): one admission a race, never a second
        else:
            admitted = admit(cfg, budget=granted_budget(cfg.budget, lm=lm, engine=engine),
                             prompt_len=len(self.prompt_ids), shared=self.shared, max_positions=lm.max_positions)
        cfg = self.cfg = admitted.granted()
        self.kv, self.budget = admitted.kv, admitted.slots
        self.recs = [_Rec(i) for i in range(cfg.n)]
        self.prompt_tokens = self.generated = self.reward_tokens = 0
        # FLOPs as the field counts them (core.cost.FlopModel): each model's non-embedding weights and attention,
        # the attention over each token's context (a generated token at position P + g attends to P + g tokens; a
        # reward's read is priced per call at its mean sequence length, exact where the call's sequences are equal)
        self.gen_flops, self.reward_fm = flop_model_of(lm), flop_model_of(self.reward)
        self.gen_context = 0.0      # contexts of the generated tokens, summed
        self.reward_context = 0.0   # contexts of the tokens the reward read, summed
        self.reward_s, self.reward_calls, self.scored = 0.0, 0, 0   # the reward's own time, timed per call
        self.peak_slots = 0
        self.wall = 0.0
        self._resumed = time.perf_counter()
        self.engine: Backend | None = None
        self.rows: Batch | None = None
        self.steps = 0
        self.reads = ""   # what its steps read beyond the logits (``prefill``; ``core.cost.read_key``)
        self.rows_per_step: list[int] = []   # rows decoding at each step (what the verdict prices)

    # -- clock: only time spent inside this arm counts, so two arms can be interleaved
    def resume(self) -> None:
        self._resumed = time.perf_counter()

    def pause(self) -> None:
        self.wall += time.perf_counter() - self._resumed
        self._resumed = time.perf_counter()

    def ledger(self) -> Ledger:
        peak_bytes = (self.engine.peak_memory_bytes(self.peak_slots) if self.engine is not None
                      else self.peak_slots * self.lm.kv_bytes_per_slot)
        extra = self.engine.extra_prefill_tokens if self.engine is not None else 0
        prompt = self.prompt_tokens + extra
        P = len(self.prompt_ids)
        prefills = self.prompt_tokens // P if P else 0   # the prompt's prefills (its tokens at positions 1..P),
        gen = (self.gen_flops.sequence(0, P) * prefills   # then tokens prefilled again, priced at the prompt's length
               + self.gen_flops.tokens(extra, extra * P) + self.gen_flops.tokens(self.generated, self.gen_context))
        return Ledger(
            prompt_tokens=prompt, generated_tokens=self.generated, reward_tokens=self.reward_tokens,
            generator_flops=gen, reward_flops=self.reward_fm.tokens(self.reward_tokens, self.reward_context),
            wall_s=self.wall + time.perf_counter() - self._resumed,
            peak_kv_slots=self.peak_slots, peak_memory_bytes=int(peak_bytes), budget=self.budget,
            dtype=str(self.lm.dtype).replace("torch.", ""), kv_sharing="shared" if self.shared else "copied",
            backend=self.engine_factory.name,
            steps=self.engine.engine_steps if self.engine is not None else self.steps,
            reward_s=self.reward_s, reward_calls=self.reward_calls, scored=self.scored, reads=self.reads,
            step=getattr(self.engine, "step_note", ""),
        )

    def candidates(self) -> tuple[Candidate, ...]:
        return tuple(r.view() for r in self.recs)

    # -- engine
    def prefill(self, stats: bool = False, *, reads: tuple[str, ...] = ()) -> None:
        """Prefill the prompt. ``stats``: keep the token statistics even if the reward does not read
        them (a rejection rule does). ``reads``: what the method's steps read beyond the logits, by name
        (``("top-20",)``: token confidences, DeepConf; ``("hidden",)``: hidden-state chain features, ST-BoN;
        ``backends.Batch``)."""
        cfg = self.cfg
        self.stats = self.stats or stats
        self.reads = read_key(reads)
        self.pause()
        warm_up(self.lm, self.engine_factory)   # a one-off build per model: outside every arm's clock
        self.resume()
        # the slots it was admitted travel on the config the backend reads (the captured step sizes its buffers so)
        admitted = dataclasses.replace(cfg, budget=self.budget)
        self.engine = self.engine_factory.from_config(self.lm, self.prompt_ids, admitted, share_prefix=self.shared,
                                                      stats=self.stats, reads=reads_of(self.reads))
        self.prompt_tokens += len(self.prompt_ids)

    def start(self, ids: list[int]) -> Batch:
        self.rows = self.engine.start(ids)
        for i in ids:
            self.recs[i].status = "live"
        return self.rows

    def add(self, ids: list[int]) -> None:
        """Refill: candidates ``ids`` join the running batch (a backend that ``refills``)."""
        self.rows.add(ids)
        for i in ids:
            self.recs[i].status = "live"

    def step(self) -> list[Done]:
        rows = self.rows
        generated_before = len(rows)
        before = rows.lengths()   # each row writes its token len + 1, at position P + len + 1
        self.gen_context += sum(before) + len(before) * (len(self.prompt_ids) + 1)
        done = rows.step()
        self.generated += generated_before
        self.steps += 1
        self.rows_per_step.append(generated_before)
        self.peak_slots = max(self.peak_slots, self.kv.held(rows.lengths()))
        if done:
            self._score(done_list=done)
        return done

    def moment(self, last_decision: int) -> Moment:
        """Where the live rows stand before the next step (for a decision rule's ``due``)."""
        rows = self.rows
        per_row = self.kv.row_slots_after_step(max(rows.lengths()), rows.generated, self.cfg.max_new_tokens)
        return Moment(rows.generated, len(rows), per_row, last_decision, self.kv)

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
            rec.conf, rec.coe = d.confidences, d.coe
            recs.append(rec)
        stats = [TokenStats(d.mean_logprob, d.mean_self_certainty) for d in done_list] if self.stats else None
        self._apply_scores(recs, stats)

    def _apply_scores(self, recs: list[_Rec], stats: list[TokenStats] | None) -> list[float]:
        t0 = time.perf_counter()
        out = checked(self.reward, self.cfg.prompt, [r.text for r in recs], stats)
        self.reward_s += time.perf_counter() - t0
        self.reward_calls += 1
        self.scored += len(recs)
        self.reward_tokens += out.tokens_read
        self.reward_context += out.tokens_read ** 2 / max(1, len(recs))
        for i, (rec, s) in enumerate(zip(recs, out.scores)):
            rec.score = s
            rec.stats = stats[i] if stats else None
            rec.history.append((len(rec.tokens), s))
        return out.scores

    def cut(self, stopped: Sequence[int], index: int, *, signal: str, signals: Sequence[tuple[int, float]] = (),
            signal_threshold: float | None = None, marks: Sequence[tuple[str, int]] = (),
            forced: bool = False) -> Round:
        """A rival's decision on its own signal: the live rows of candidates ``stopped`` leave the batch (their
        memory is freed; they are pruned by round ``index``, never scored: they do not compete), the others
        go on. Returns the Round, the survivors marked kept in it."""
        rows = self.rows
        self.refresh_texts()
        gone = set(stopped)
        for i, cid in enumerate(rows.ids):
            rec = self.recs[cid]
            if cid in gone:
                rec.status, rec.round_pruned = "pruned", index
                rec.conf, rec.coe = tuple(rows.confidences(i)), tuple(rows.coe(i))
            else:
                rec.status = "kept"
        kept = [c for c in rows.ids if c not in gone]
        rows.keep([i for i, c in enumerate(rows.ids) if c not in gone])
        event = Round(arm=self.arm, index=index, position=max((len(self.recs[c].tokens) for c in (*kept, *gone)),
                                                               default=0),
                      candidates=self.candidates(), threshold=None, n_kept=len(kept), n_pruned=len(gone),
                      forced=forced, ledger=self.ledger(), signal=signal, signal_threshold=signal_threshold,
                      signals=tuple(signals), marks=tuple(marks))
        for c in kept:
            self.recs[c].status = "live"
        return event

    def progress(self) -> Progress | None:
        every = self.cfg.progress_every
        if not every or self.steps % every or not self.rows or not len(self.rows):
            return None
        self.refresh_texts()
        return Progress(self.arm, self.rows.generated, len(self.rows), self.candidates(), self.ledger())

    def finished(self, rounds: int, winner: int | None = None, picked_by: str = "reward") -> Finished:
        """The Finished event: the winner is the best-scored finished candidate (lowest id on a tie), or
        candidate ``winner`` where the method's own rule named it (``picked_by``)."""
        if winner is None:
            contenders = [r for r in self.recs if r.status == "finished"]
            best = max(contenders, key=lambda r: (r.score, -r.id))
        else:
            best = self.recs[winner]
        return Finished(self.arm, best.view(), self.candidates(), rounds, self.ledger(),
                        rows_per_step=tuple(self.rows_per_step), picked_by=picked_by)

    def release(self) -> None:
        if self.rows is not None:
            self.rows.release()
        if self.engine is not None:
            self.engine.release()
        self.rows = self.engine = None


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


