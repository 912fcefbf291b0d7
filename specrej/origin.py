"""Where a result came from: the versions, the machine and the command that made it.

``provenance()`` is the one record every file the library writes carries (the CLI's ``--json`` trace, the
bench's ``meta``, every ``race_many`` row), so that two results that differ in the last digits can be traced to a
transformers release, a dtype, a CPU or other weights (``fingerprint``: content digests), and a wall clock to the
load the machine was under (``Clock``). It reads versions from the installed packages' metadata and imports nothing
heavy of its own: torch is read only where the caller has already imported it (it says the device, the
GPU and the threads).
"""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
import time
from importlib import metadata
from pathlib import Path

FALLBACK_VERSION = "0+unknown"   # neither installed nor run from a checkout with its pyproject.toml


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name``; None where it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def specrej_version() -> str:
    """specrej's version: the installed package's metadata, else the checkout's pyproject.toml (a run from a
    clone that was never installed), else ``FALLBACK_VERSION``."""
    installed = package_version("specrej")
    if installed:
        return installed
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        import tomllib

        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        return str(project["version"]) if project.get("name") == "specrej" else FALLBACK_VERSION
    except (OSError, KeyError, ValueError):
        return FALLBACK_VERSION


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what the platform says, else the architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS says it, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or os.cpu_count() or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):   # no load average on this OS (Windows)
        return None


class Clock:
    """The machine's load and this process's CPU time around a timed piece of work (a race, a row).

    ``Clock()`` at the start, ``.stop()`` at the end: a plain record of the load average (1, 5, 15 min) at both
    ends, the cores, the wall and CPU seconds between, and ``busy``: whether the machine had more runnable work
    than cores at either end (the 1-minute load above the core count), where wall-clock ratios are not reliable
    (issue 64: identical races' ratios from 0.74 to 8.29 at load 3-4 on 2 cores)."""

    def __init__(self):
        self.load_start = _loadavg()
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()

    def stop(self) -> dict:
        end, n = _loadavg(), cores()
        wall, cpu = time.perf_counter() - self.wall0, time.process_time() - self.cpu0
        peak = max((x[0] for x in (self.load_start, end) if x), default=None)
        share = cpu_share(cpu, wall, n)
        waited = share is not None and share < WAITED_SHARE
        return {"load_start": self.load_start, "load_end": end, "cores": n, "wall_s": round(wall, 3),
                "process_cpu_s": round(cpu, 3), "cpu_share": None if share is None else round(share, 3),
                "waited": waited, "busy": (peak is not None and peak > n) or waited}


WAITED_SHARE = 0.5   # a CPU race that held its threads' cores less than half its wall time waited for them


def cpu_share(cpu_s: float, wall_s: float, n_cores: int) -> float | None:
    """The share of its wall time a CPU race kept its torch threads' cores busy (process CPU seconds over wall
    seconds x threads): near 1 on a quiet machine, well below where other work took the cores (the two-thread
    collapse measured 0.1-0.3). None where it says nothing: a GPU does the work (the host waits on it), or the work
    was too short to tell (under 0.2 s)."""
    torch = sys.modules.get("torch")
    if wall_s < 0.2 or (torch is not None and torch.cuda.is_available()):
        return None
    threads = max(1, min(torch.get_num_threads() if torch is not None else 1, n_cores or 1))
    return cpu_s / (wall_s * threads)


def busy_words(loads: list[dict], what: str = "race") -> str | None:
    """A warning in words where any of ``loads`` (``Clock.stop()`` records) was taken on a busy machine; None where
    none was."""
    busy = [x for x in loads if x and x.get("busy")]
    if not busy:
        return None
    peak = max(max((v[0] for v in (x.get("load_start"), x.get("load_end")) if v), default=0.0) for x in busy)
    n = busy[0].get("cores")
    which = (f"this {what}" if len(loads) == 1 else f"{len(busy)} of {len(loads)} {what}s")
    shares = [x["cpu_share"] for x in busy if x.get("waited") and x.get("cpu_share") is not None]
    held = f"; it held its cores only {100 * min(shares):.0f}% of its wall time" if shares else ""
    return (f"the machine was busy during {which} (load up to {peak:.1f} on {n} core{'s' if n != 1 else ''}{held}): other "
            "work shared the CPU, so wall-clock times and their ratios are not reliable here (tokens, FLOPs and "
            "decoding steps are). Time on a quiet machine, after warm_up, and take the median of several races.")


def provenance(*, dtype=None, device=None, command: list[str] | None = None, lm=None, reward=None,
               weights: dict | None = None, load: dict | None = None) -> dict:
    """The versions (specrej, torch, transformers, Python), the device and its name (the GPU's where it is one,
    always the CPU's), the dtype (where given: a ``torch.dtype`` or its name), torch's threads, the UTC time
    and the command line, as plain JSON values.

    ``device``: the device the run used (e.g. ``lm.device``); default: CUDA where torch sees a GPU, else the CPU.
    ``command``: the command line as its words (the CLI's own, e.g. ``["python", "-m", "specrej", ...]``);
    default: this process's (the interpreter and ``sys.argv``).
    ``lm``, ``reward``: add ``weights``, the content digests of what made the result (``fingerprint``: the
    generator's and the reward's weights, tokenizers, the generator's dtype); ``weights``: those digests, taken
    already (``weights_of``). ``load``: a ``Clock.stop()`` record of the machine's load around the work."""
    torch = sys.modules.get("torch")   # only where the caller has loaded it: this module never pays for torch
    cuda = torch is not None and torch.cuda.is_available()
    device = str(device) if device is not None else ("cuda" if cuda else "cpu")
    gpu = None
    if cuda and device.startswith("cuda"):
        index = int(device.partition(":")[2] or torch.cuda.current_device())
        gpu = torch.cuda.get_device_name(index)
    cpu = cpu_name()
    return {
        "specrej": specrej_version(),
        "torch": getattr(torch, "__version__", None) or package_version("torch"),
        "transformers": package_version("transformers"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device,
        "device_name": gpu or cpu,
        "cpu": cpu,
        "gpu": gpu,
        "cpu_count": os.cpu_count(),
        "dtype": None if dtype is None else str(dtype).replace("torch.", ""),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(command if command is not None else [Path(sys.executable).name, *sys.argv]),
        **({"weights": weights if weights is not None else weights_of(lm, reward)}
           if weights is not None or lm is not None or reward is not None else {}),
        **({"load": load} if load is not None else {}),
    }


def weights_of(lm=None, reward=None) -> dict:
    """``{"generator": ..., "reward": ...}``: the content digests of a generator and a reward (``fingerprint``)."""
    from .fingerprint import generator_fingerprint, reward_fingerprint

    return {"generator": None if lm is None else generator_fingerprint(lm),
            "reward": None if reward is None else reward_fingerprint(reward)}
