"""The start-up room: the warm-up that makes a server ready to race, and every measurement of this machine.

On the app's torch thread (``worker.torch_worker``), never at a click:

1. **The warm-up** (``warm``; ``warm_in_background`` while the page is already served): the default models loaded,
   the decoding step compiled (at the quiet thread count and at one), then the machine profile: the quiet step
   and a probe of the load (below), the recordings' headers and Paper scale's reference step read. From then on
   the worker's threads follow the free cores (``follow_free_cores``: ``worker.FreeCores``).
2. **The quiet step** (``quiet_step``): this machine's decoding step at 1, 8, 32 and 128 rows, with the rivals'
   extra reads: what the machine does when *quiet*, never the load of a moment. Each measurement is a
   ``profile.Sample`` with the load it ran under (the 1-minute load average, other processes' runnable tasks, and
   the share of its threads' cores it held). The quiet step is the best of them (``profile.quiet_of``); the
   samples are kept across starts (SPECREJ_PROFILE_FILE), so a busy start states what an earlier quiet one measured.
3. **A probe** (``refresh``; about half a second when quiet): two steps at 8 and at 32 rows. Their time over the
   quiet step is the *load factor* (other work on the cores, as on a shared Space). On a busy machine two OpenMP
   threads wait on each other at every barrier, so when the probe is slow it is repeated with one thread and the
   faster count prices the races. Refreshed only while the page is idle (``keep_fresh``).

The planner reads what this room measured (``context.Machine.profile``); nothing here knows Gradio.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from specrej.core.config import env_int
from specrej.core.cost import RIVAL_READS, StepCost

from components.deploy import memory
from components.session import paper, recordings
from components.session.context import AppContext, get_models
from components.session.profile import QUIET_SHARE, Sample, keep_profile, kept_profile, profile_key
from components.session.worker import FreeCores, others_running, torch_worker

log = logging.getLogger("specrej.app")
PROBE_ROWS = (8, 32)
SLOW = 1.6            # a probe this many times the quiet step: try one thread
REFRESH_S = 600.0     # SPECREJ_PROFILE_REFRESH_S: the profile is refreshed at most this often ...
IDLE_S = 60.0         # ... and only once no run has started or ended for this long


# ---------------------------------------------------------------- the warm-up

def warm(ctx: AppContext) -> None:
    """Load the default models now (on the app's torch thread), compiling the decoding step with the first
    engine (``specrej.engine.compiled.step_for``: at the quiet thread count and at one) and measuring it, so
    the first Run starts at once. From then on the worker's threads follow the free cores."""
    def load():
        import torch

        from specrej.methods.run import warm_up

        most = quiet_threads(ctx)
        with ctx.machine.lock:   # the quiet count: torch's own before anything follows the load
            ctx.machine.threads = ctx.machine.threads or most
        torch.set_num_threads(most)   # the compiled step built at it (and at one), whatever the worker follows
        lm = get_models(*ctx.resolve(ctx.default_model, ctx.default_reward, ctx.default_preference),
                        dtype=ctx.dtype)[0]
        warm_up(lm)   # the compiled step for both thread counts (``compiled.warm``), before threads follow
        return lm

    lm = torch_worker().call(load)
    ctx.loaded._lms[ctx.default_model] = lm
    follow_free_cores(ctx)
    # the machine profile, before any visitor's run: the quiet step (the best of this start's measurement and
    # those kept by earlier starts here, with the rivals' reads: a race with a rival never waits for them) and
    # a probe of the load; a click never measures (``planner.plan``)
    restore(ctx, ctx.default_model)
    quiet_step(ctx, ctx.default_model, lm, RIVAL_READS if getattr(lm.backend, "extra_reads", True) else ())
    refresh(ctx, ctx.default_model, lm)
    # the recordings' headers and the reference step Paper scale prices with, read now: a click reads them
    # from memory (``recordings.meta_of``)
    recordings.index()
    if ctx.page_races is not None:
        recordings.find_race({}, ctx.page_races)   # an empty key matches none: every header read
    paper.reference_step()


def warm_in_background(ctx: AppContext, log=print) -> threading.Thread:
    """``warm`` on a daemon thread, so the page is served while the models load and the step compiles; a
    failure is logged and kept in ``ctx.warm_error`` (a Run then loads the models itself and shows the error)."""
    def run() -> None:
        t0 = time.perf_counter()
        ctx.loaded.warm_error = ""
        try:
            warm(ctx)
            memory.freeze_startup()   # no later collection walks what start-up made (a click never waits on it)
            ready = time.perf_counter() - t0
            keep_profile(ctx.profile_path, profile_key(ctx, ctx.default_model), ready_s=ready)
            log(f"specrej: ready to race in {ready:.1f} s (models loaded, decoding step "
                f"compiled, this machine profiled: {ctx.machine.profile().when(ctx.default_model)})")
            every = env_int("SPECREJ_PROFILE_REFRESH_S", int(REFRESH_S))
            if every > 0:   # refreshed only while the page is idle; 0: measured at start-up only
                keep_fresh(ctx, every_s=float(every))
        except Exception as e:
            ctx.loaded.warm_error = f"{type(e).__name__}: {e}"
            log(f"specrej: could not load the default models ({e}); the page stays up.")

    ctx.loaded.warm_started = time.monotonic()
    ctx.loaded.ready_s = kept_profile(ctx.profile_path, profile_key(ctx, ctx.default_model))[1]
    thread = ctx.loaded.warm_thread = threading.Thread(target=run, name="specrej-warm", daemon=True)
    thread.start()
    return thread


def quiet_threads(ctx: AppContext) -> int:
    """The torch threads a race runs with when the machine is quiet: SPECREJ_THREADS, else torch's own count on
    the worker before anything set one (``TorchWorker.quiet_threads``)."""
    with ctx.machine.lock:
        known = ctx.threads or ctx.machine.threads
    return known or torch_worker().quiet_threads()


def follow_free_cores(ctx: AppContext) -> None:
    """From now on the torch worker sets, before each job, the threads the machine can give it now
    (``worker.FreeCores``: the quiet count, or one where other work holds a core); not where SPECREJ_THREADS
    pins them or SPECREJ_FOLLOW_CORES=0."""
    if ctx.threads or not ctx.follow_cores:
        torch_worker().follow(None)
        return
    torch_worker().follow(FreeCores(quiet_threads(ctx)))


# ---------------------------------------------------------------- the quiet step

def quiet_step(ctx: AppContext, model: str, lm=None, reads: tuple[str, ...] = ()) -> StepCost:
    """This machine's quiet decoding step for ``model``: the best of its measurements (``quiet_of`` the
    ``Sample``s in ``ctx.machine``, those kept from earlier starts included), measured on first use
    (``take_sample``: the fastest of 3 steps at 1, 8, 32 and 128 rows on the torch thread, with the load it ran
    under), so never the load of the moment: a sample taken under load never makes it slower. Measured once
    even when a Run asks while the warm-up measures it. ``reads`` (a race with a rival:
    ``steptime.RIVAL_READS``): those extra reads' steps too, timed in turn with the plain one
    (``StepCost.reads``: the verdict prices a rival's steps with them), each measured once, when a race first
    needs it (a race of Best-of-N and Speculative Rejection builds no rival's step)."""
    machine = ctx.machine
    with machine._measuring:
        with machine.lock:
            known = machine.step_costs.get(model)
        missing = tuple(k for k in reads if known is None or k not in known.read_keys)
        if known is None or missing:
            known = sample(ctx, model, lm, missing)
        return known


def sample(ctx: AppContext, model: str, lm=None, reads: tuple[str, ...] = (), threads: int | None = None) -> StepCost:
    """Measure ``model``'s step now (``take_sample``, at ``threads`` or the worker's), keep the sample (and the
    profile file) and return the quiet step."""
    fresh = torch_worker().call(take_sample, lm or ctx.generator(model), reads, threads)
    known = ctx.machine.add_sample(model, fresh, quiet_threads(ctx))
    with ctx.machine.lock:
        kept = list(ctx.machine.samples.get(model, ()))
    keep_profile(ctx.profile_path, profile_key(ctx, model), kept)
    return known


def restore(ctx: AppContext, model: str) -> int:
    """The samples of ``model``'s step kept by earlier starts on this machine, added to ``ctx.machine``;
    how many."""
    kept, ctx.loaded.ready_s = kept_profile(ctx.profile_path, profile_key(ctx, model))
    with ctx.machine.lock:
        have = ctx.machine.samples.get(model, [])
        ctx.machine.samples[model] = []
        for x in kept + have:
            ctx.machine.add_sample(model, x, quiet_threads(ctx))
    return len(kept)


def take_sample(lm, reads: tuple[str, ...] = (), threads: int | None = None) -> Sample:
    """On the torch thread: ``lm``'s step measured (``steptime.measure``, with ``reads``) at ``threads`` (default:
    the threads torch has now, which the worker set from the free cores), with the load it was taken under
    (``Sample``)."""
    import torch

    from specrej.backends.steptime import measure

    if threads:
        torch.set_num_threads(threads)
    threads = torch.get_num_threads()
    others = others_running()
    loadavg = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    clocks: dict = {}
    cost = measure(lm, reads=reads, cpu=clocks)
    return Sample.taken(cost, clocks, threads, loadavg=loadavg, others=others)


# ---------------------------------------------------------------- the quiet step's measurements, kept across starts

# ---------------------------------------------------------------- the probe of the load

class Probed(list):
    """A probe's step times (seconds at each of PROBE_ROWS), with the share of its threads' cores it held
    (``profile.Sample.share``; None: not known)."""

    share: float | None = None


def _probe(lm, threads: int) -> list[float]:
    """On the torch thread: the fastest of two decoding steps at each of PROBE_ROWS, at ``threads`` (a
    ``Probed``)."""
    import torch

    from specrej.backends.steptime import measure

    torch.set_num_threads(threads)
    clocks: dict = {}
    out = Probed(measure(lm, PROBE_ROWS, steps=2, cpu=clocks).seconds)
    out.share = Sample.taken(StepCost(PROBE_ROWS, tuple(out)), clocks, threads).share
    return out


def measure(ctx: AppContext, model: str, lm) -> tuple[StepCost, float, int]:
    """(the step times now, the load factor, the threads to race with), on the torch thread. A probe faster than
    the quiet step improves it (kept as a sample: a faster step is no load's doing); one taken quiet at the quiet
    thread count when the quiet step was measured at fewer (a server started under load) measures it again."""
    import torch

    quiet = quiet_step(ctx, model, lm)
    most = quiet_threads(ctx)
    with ctx.machine.lock:
        ctx.machine.threads = ctx.machine.threads or most
    ref = [quiet.step(r) for r in PROBE_ROWS]

    def load_of(times):
        return max(t / q for t, q in zip(times, ref))

    best_threads, best = most, torch_worker().call(_probe, lm, most)
    first = best
    if load_of(best) > SLOW and most > 1 and not ctx.threads:   # SPECREJ_THREADS: that many, whatever the load
        one = torch_worker().call(_probe, lm, 1)
        if max(one) < max(best):
            best_threads, best = 1, one
    if ctx.threads or not ctx.follow_cores:   # else the worker sets the threads at each job (``FreeCores``)
        torch_worker().call(torch.set_num_threads, best_threads)
    load = load_of(best)
    quiet_now = getattr(first, "share", None) is not None and first.share >= QUIET_SHARE
    if lm is not None and quiet_now and most > 1 and ctx.machine.quiet_threads(model) not in (None, most):
        quiet = sample(ctx, model, lm, threads=most)   # quiet now at the quiet count: measured there
        ref = [quiet.step(r) for r in PROBE_ROWS]
        load = load_of(best)
    if load < 1.0:   # quieter than the quiet step: keep the faster times, as a sample of their own
        faster = Sample(quiet.scaled(load), best_threads, 1.0, time.time(),
                        os.getloadavg()[0] if hasattr(os, "getloadavg") else None)
        quiet = ctx.machine.add_sample(model, faster, most)
        load = 1.0
    return quiet.scaled(load), load, best_threads



def refresh(ctx: AppContext, model: str, lm) -> float:
    """Probe this machine now (``measure``) and keep it as the profile the planner reads, with when and under what
    load it ran: at start-up (the warm-up) and, after that, only while the page is idle (``keep_fresh``)."""
    cost, load, threads = measure(ctx, model, lm)
    with ctx.machine.lock:
        ctx.machine.last_load = load
        ctx.machine.measured_at = time.time()
        ctx.machine.measured_loadavg = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return load




def keep_fresh(ctx: AppContext, every_s: float = REFRESH_S, idle_s: float = IDLE_S,
               stop: threading.Event | None = None) -> threading.Thread:
    """A daemon thread that refreshes the profile (``refresh``) every ``every_s`` seconds, only while the page is
    idle (no run for ``idle_s``): the load at the moment of a click never decides what the room sees."""
    stop = stop or threading.Event()

    def loop() -> None:
        while not stop.wait(min(every_s, idle_s) / 2):
            with ctx.machine.lock:
                at = ctx.machine.measured_at
            if ctx.warming or at is None or time.time() - at < every_s or ctx.machine.idle_for() < idle_s:
                continue
            lm = ctx.loaded.cached(ctx.default_model)
            if lm is None:
                continue
            try:
                torch_worker().call(refresh, ctx, ctx.default_model, lm)
            except Exception:   # never the page's problem: the last profile stands
                log.warning("could not refresh the machine profile", exc_info=True)

    thread = threading.Thread(target=loop, name="specrej-profile", daemon=True)
    thread.stop = stop
    thread.start()
    return thread
