"""The machine profile's measurements as data: one measurement of a generator's decoding step with the load it was
taken under (``Sample``), the rule that makes the quiet step of many (``quiet_of``: the best of them, never made
slower by one taken under load), and the file that keeps them across starts (SPECREJ_PROFILE_FILE: ``keep_profile``,
``kept_profile``, keyed by ``profile_key``). Nothing here measures (``startup.take_sample`` does) nor knows Gradio.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import specrej
from specrej.core.cost import StepCost

from components.session.worker import usable_cores

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


# ---------------------------------------------------------------- the quiet step's measurements, kept across starts

DEFAULT_PROFILE_FILE = Path.home() / ".cache" / "specrej" / "machine-profile.json"
PROFILE_ENTRIES = 16      # machines x generators kept in the file (the least recently written dropped first)
_ENGINE_CODE = ("engine/compiled.py", "engine/packed.py", "engine/kvcache.py", "engine/shared_prefix.py",
                "engine/models.py", "backends/hf.py")
_files_lock = threading.Lock()


def _engine_code() -> str:
    """A short hash of the decoding step's code: a profile measured with other code is another profile."""
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
    return platform.processor() or platform.machine()


def profile_key(ctx, model: str) -> str:
    """What a kept profile must match: this CPU, its usable cores, torch, the generator, its dtype, the compile
    setting and the step's code."""
    import torch   # not at import: importing the page loads nothing

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
