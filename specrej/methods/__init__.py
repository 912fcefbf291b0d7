"""Best-of-N and Speculative Rejection as iterators of typed events.

Both take the same arguments ``(lm, reward, cfg)`` and are looked up by name in ``METHODS``.
Both score a candidate the step it finishes (so finished ones keep the score they ended with)
and yield ``Progress`` every ``cfg.progress_every`` steps, a ``Round`` per decision (Speculative
Rejection) or per pass (Best-of-N), and one ``Finished``. Closing an iterator early releases
its KV cache at once (``finally``).

Speculative Rejection, as the reference code runs it, with two guards of this project's (marked below): start
with all N rows; decode until the next token would overflow the memory budget (the decision token) or, with
``decision="interval"``, every ``interval`` tokens; score every live partial response; rank
them together with finished candidates still in contention; keep the top
``max(1, round((1 - alpha) * n))`` (the ``max(1, .)``: this project's guard, never an empty decision); free the
rejected rows; repeat. If the kept live rows still cannot fit the next token, memory forces more pruning (the
round says ``forced``; this project's guard, an addition to the reference loop).
``keep_finished=True`` keeps finished candidates out of the ranking: they always stay.
Which candidates are kept is the rejection rule's (``cfg.rule``, ``specrej.core.rules``): the
paper's keeps the highest partial rewards. A rule may also set how many a decision keeps (a
schedule, ``keep_count``) and ask for the live rows to be scored between decisions (``score_every``,
the policy's ``probe``: rules that read earlier prefixes' scores); those scores are reward calls
like any other, in each candidate's history and the ledger.

Two rivals decide on the generator's own signals instead of a reward, on the same Backend, budget and
coupled randomness: ``deepconf`` (DeepConf online: warm-up traces set a threshold on the group confidence,
later traces stop below it; ``methods/deepconf.py``) and ``stbon`` (ST-BoN: all N to the earliest step every
pair differs plus a buffer, then the answer with the most consistent hidden-state chain is kept;
``methods/stbon.py``). Their docstrings say where this project's setting made them choose.

The methods drive a ``specrej.backends.Backend`` through ``run._Run`` and take their scheduling
from ``specrej.core`` (the KV budget; the decision rule, ``core.decisions.rule_for(cfg)``). Both
take an optional ``engine`` (a ``BackendFactory``; default: the LM's own, ``lm.backend``): the seam
through which the bench runs the same method on a differently built engine (``bench/reference.py``),
vLLM runs it on its own (``backends/vllm.py``) and the simulator replays a recorded run
(``backends/replay.py``, ``bench/simulate.py``): one loop for live and simulated runs.
"""
from __future__ import annotations

from typing import Callable, Iterator

from ..backends import BackendFactory, LanguageModel
from ..core.config import RunConfig
from ..core.cost import passes
from ..core.decisions import DecisionRule, rule_for
from ..core.events import Event, Finished, Round
from ..core.scoring import Reward
from .run import _Run, _timed
from .deepconf import deepconf
from .stbon import self_truncation



def _bon_body(run: _Run) -> Iterator[Event]:
    cfg = run.cfg
    run.prefill()
    for index, ids in enumerate(passes(cfg.n, run.kv.rows_per_pass(cfg.n, cfg.max_new_tokens))):
        rows = run.start(list(ids))
        while len(rows):
            run.step()
            if (p := run.progress()) is not None:
                yield p
        yield Round(arm=run.arm, index=index, position=max(len(run.recs[i].tokens) for i in ids),
                    candidates=run.candidates(), threshold=None, n_kept=len(ids), n_pruned=0, forced=False,
                    ledger=run.ledger())
    yield run.finished(rounds=index + 1)


def _bon_refill_body(run: _Run) -> Iterator[Event]:
    """Best-of-N with continuous batching: as many rows as fit at full length decode together, and
    the step a row ends, a waiting candidate takes its slot (vLLM's own scheduling; no pass waits
    for its longest row). One Round when the last candidate ends."""
    cfg = run.cfg
    run.prefill()
    width = run.kv.rows_per_pass(cfg.n, cfg.max_new_tokens)
    waiting = list(range(cfg.n))
    rows = run.start(waiting[:width])
    del waiting[:width]
    while len(rows):
        done = run.step()
        if done and waiting:
            run.add(waiting[:len(done)])
            del waiting[:len(done)]
        if (p := run.progress()) is not None:
            yield p
    yield Round(arm=run.arm, index=0, position=max(len(r.tokens) for r in run.recs), candidates=run.candidates(),
                threshold=None, n_kept=cfg.n, n_pruned=0, forced=False, ledger=run.ledger())
    yield run.finished(rounds=1)


def _sr_body(run: _Run, policy: DecisionRule | None = None) -> Iterator[Event]:
    cfg = run.cfg
    rule = policy or rule_for(cfg)
    run.prefill(stats=rule.uses_token_stats)
    rows = run.start(list(range(cfg.n)))
    index, last_decision = 0, 0
    while len(rows):
        at = run.moment(last_decision)
        if rule.due(at):
            yield _decide(run, rule, index, at.per_row)
            index, last_decision = index + 1, rows.generated
            if not len(rows):  # every kept slot went to a finished candidate
                break
        elif rule.probe(at):   # a rule that reads earlier prefixes' scores (core.rules.WindowRule): a counted reward call
            run.score_live()
        run.step()
        if (p := run.progress()) is not None:
            yield p
    yield run.finished(rounds=index)


def _decide(run: _Run, rule, index: int, per_row: int) -> Round:
    rows = run.rows
    run.score_live()
    live = [run.recs[c].contender() for c in rows.ids]
    finished = [r.contender() for r in run.recs if r.status == "finished"]
    sel = rule.select(live, finished, run.kv.cap(per_row))
    for c in sel.pruned:
        run.recs[c].status, run.recs[c].round_pruned = "pruned", index
    for c in sel.kept_live:
        run.recs[c].status = "kept"
    position = {c: i for i, c in enumerate(rows.ids)}
    rows.keep([position[c] for c in sorted(sel.kept_live)])
    event = Round(arm=run.arm, index=index, position=rows.generated, candidates=run.candidates(),
                  threshold=sel.threshold, n_kept=len(sel.kept), n_pruned=len(sel.pruned), forced=sel.forced,
                  ledger=run.ledger())
    for c in sel.kept_live:
        run.recs[c].status = "live"
    return event


def best_of_n(lm: LanguageModel, reward: Reward, cfg: RunConfig, *,
              engine: BackendFactory | None = None, admission=None) -> Iterator[Event]:
    """Sample N full responses (in passes of the rows that fit), score each, return the best. ``admission``
    (every method takes one): a caller's ``core.budget.admit`` of this run, used instead of admitting again."""
    return _timed(lambda: _Run("bon", lm, reward, cfg, engine, admission=admission), _bon_body)


def best_of_n_refill(lm: LanguageModel, reward: Reward, cfg: RunConfig, *,
                     engine: BackendFactory | None = None, admission=None) -> Iterator[Event]:
    """Best-of-N with continuous batching (freed slots refilled at once): the baseline a vLLM user runs.
    Needs a backend that ``refills`` (vLLM); the transformers engine cannot add rows to a batch."""
    return _timed(lambda: _Run("bonc", lm, reward, cfg, engine, refill=True, admission=admission), _bon_refill_body)


def speculative_rejection(lm: LanguageModel, reward: Reward, cfg: RunConfig, *,
                          engine: BackendFactory | None = None,
                          policy: DecisionRule | None = None, admission=None) -> Iterator[Event]:
    """Start with N rows (n='auto': the rows that fill the budget at cfg.first_decision tokens); at each
    decision keep the top round((1 - alpha) * n) by partial reward. ``policy``: a decision rule object
    instead of the one ``cfg`` names (the bench's seam for rules that are no registered name: a rule
    fitted leave-one-out, the oracle ceiling, ``core.oracle``)."""
    return _timed(lambda: _Run("sr", lm, reward, cfg, engine, auto_n=True, admission=admission), lambda run: _sr_body(run, policy))


METHODS: dict[str, Callable[[LanguageModel, Reward, RunConfig], Iterator[Event]]] = {
    "bon": best_of_n,
    "bonc": best_of_n_refill,
    "sr": speculative_rejection,
    "deepconf": deepconf,          # the rivals (methods/deepconf.py, methods/stbon.py): their own signals
    "stbon": self_truncation,
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
         referee: Callable[[Event], list[Event]] | None = None, *, sequential: bool = False) -> Iterator[Event]:
    """Interleave arms so they advance at equal compute: step whichever has spent fewer FLOPs.
    ``sequential``: run the arms one after the other instead (a backend whose steps advance every
    request it holds, such as vLLM's, cannot interleave arms: ``BackendFactory.exclusive``).

    ``referee`` (e.g. ``match.StopWhenMatched``) sees every event and returns the events to
    yield in its place; a ``Finished`` it returns for another arm still running ends that arm
    there. Closing the race closes every arm (and so frees their memory)."""
    spent = {name: 0.0 for name in streams}
    alive = dict(streams)
    try:
        while alive:
            name = next(iter(alive)) if sequential else min(alive, key=lambda k: spent[k])
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
