"""Where a result came from: the versions, the machine and the command that made it.

``provenance()`` is the one record every file the library writes carries (the CLI's ``--json`` trace, the
bench's ``meta``), so that two results that differ in the last digits can be traced to a transformers
release, a dtype or a CPU. It reads versions from the installed packages' metadata and imports nothing
heavy of its own: torch is read only where the caller has already imported it (it says the device, the
GPU and the threads).
"""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
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


def provenance(*, dtype=None, device=None, command: list[str] | None = None) -> dict:
    """The versions (specrej, torch, transformers, Python), the device and its name (the GPU's where it is one,
    always the CPU's), the dtype (where given: a ``torch.dtype`` or its name), torch's threads, the UTC time
    and the command line, as plain JSON values.

    ``device``: the device the run used (e.g. ``lm.device``); default: CUDA where torch sees a GPU, else the CPU.
    ``command``: the command line as its words (the CLI's own, e.g. ``["python", "-m", "specrej", ...]``);
    default: this process's (the interpreter and ``sys.argv``)."""
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
    }
