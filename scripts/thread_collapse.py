"""The compiled CPU step with one and two torch threads, quiet and with other processes spinning (issue 61, item 4).

    python scripts/thread_collapse.py                      # 2 spinners, 3 repeats, compiled and eager
    python scripts/thread_collapse.py --spinners 2 3 --repeats 5 --steps compiled
    python scripts/thread_collapse.py --clocks-only --spinners 3   # only the one-thread step's wall and CPU time

The researcher's case: a Best-of-N arm (the embedded generator, fp32, the confidence reward: no second model) that
writes the same tokens every time, timed from the library (``run_to_completion``) with 1 and 2 torch threads, on
the compiled step and the eager one, first with the machine as it is ("quiet": no spinner of this script's), then
with ``--spinners`` processes ``setsid timeout S python -c "while True: pass"`` running (started afresh for each
cell). Each cell is the median of ``--repeats`` runs (min and max beside it), with the 1-minute load average and
the running count of ``/proc/loadavg`` read just before each run, and what the app's worker would race with then
(``components/session/worker.FreeCores``). It ends every spinner it started, by its process group's id.

Then, per condition, the compiled step at one thread, 8 and 32 rows: its fastest wall time and its thread's CPU
time (``steptime.measure(cpu=...)``): what a server started under load keeps as its quiet step
(``profile.Sample``: the one thread's CPU time, the step without the waits).

What it shows: with two OpenMP threads on a 2-core machine, a busy core makes every barrier wait for a thread the
scheduler has parked (docs/performance.md, "Threads under load"); the app's torch worker therefore races with the
threads the machine has free now.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from specrej.origin import cpu_name  # noqa: E402

SPIN = 'while True: pass'


def running_now() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[3]
    except (OSError, IndexError):
        return "?"


def start_spinners(k: int, seconds: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["setsid", "timeout", str(seconds), sys.executable, "-c", SPIN],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(k)]


def stop_spinners(procs: list[subprocess.Popen]) -> None:
    for p in procs:   # each by its own id: setsid made it a session (and group) leader of its own
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()


def main(argv=None) -> int:
    import torch

    from specrej import RunConfig, load_generator, load_reward
    from specrej.engine import compiled
    from specrej.methods import best_of_n, run_to_completion
    from specrej.methods.run import warm_up

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spinners", type=int, nargs="+", default=[2], help="spinner counts to run beside the quiet one")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", nargs="+", default=["compiled", "eager"], choices=("compiled", "eager"))
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--spin-seconds", type=int, default=300, help="each spinner's own time limit (timeout S)")
    p.add_argument("--clocks-only", action="store_true", help="only the one-thread step's wall and CPU times")
    args = p.parse_args(argv)

    from components.session.worker import FreeCores

    lm = load_generator("embedded", dtype="fp32")
    reward = load_reward("confidence")
    cfg = RunConfig(prompt="Give me three tips for staying healthy.", n=args.n, max_new_tokens=args.tokens, seed=0,
                    budget=args.n * (args.tokens + 64))
    t = time.perf_counter()
    warm_up(lm)
    step = compiled.step_for(lm.model)
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; torch {torch.__version__}; compiled step ready in "
          f"{time.perf_counter() - t:.1f} s; Best-of-N n={args.n}, {args.tokens} tokens, fp32", flush=True)

    def once() -> tuple[float, tuple]:
        t0 = time.perf_counter()
        done = run_to_completion(best_of_n(lm, reward, cfg))
        return time.perf_counter() - t0, tuple(c.text for c in done.candidates)

    def chose() -> str:
        policy = FreeCores(2, every_s=0.0)
        picks = []
        for _ in range(5):
            picks.append(policy())
            time.sleep(0.05)
        return "/".join(map(str, picks))

    texts: dict = {}
    if not args.clocks_only:
        print("| spinners | step | threads | Best-of-N | min-max | load average (running) before each | FreeCores |")
        print("|---:|---|---:|---:|---|---|---|")
        for spinners in [0, *args.spinners]:
            for kind in args.steps:
                compiled.use(lm.model, step if kind == "compiled" else None)
                for threads in (1, 2):
                    procs = start_spinners(spinners, args.spin_seconds) if spinners else []
                    try:
                        time.sleep(2.0 if spinners else 0.0)   # the spinners on their cores
                        picks = chose()
                        torch.set_num_threads(threads)
                        once()   # one untimed run: this thread count's OpenMP team
                        times, loads = [], []
                        for _ in range(args.repeats):
                            loads.append((os.getloadavg()[0], running_now()))
                            s, out = once()
                            times.append(s)
                            texts.setdefault(kind, set()).add(out)
                    finally:
                        stop_spinners(procs)
                    print(f"| {spinners} | {kind} | {threads} | {statistics.median(times):.2f} s | "
                          f"{min(times):.2f}-{max(times):.2f} s | "
                          f"{', '.join(f'{a:.1f} ({r})' for a, r in loads)} | {picks} |", flush=True)
        print(f"same tokens every run of a step: {all(len(v) == 1 for v in texts.values())}")

    from specrej.backends.steptime import measure

    compiled.use(lm.model, step)
    torch.set_num_threads(1)
    print("\n| spinners | rows | wall ms (fastest of 5) | thread CPU ms (fastest) | wall / CPU |")
    print("|---:|---:|---:|---:|---:|")
    for spinners in [0, *args.spinners]:
        procs = start_spinners(spinners, args.spin_seconds) if spinners else []
        try:
            time.sleep(2.0 if spinners else 0.0)
            clocks: dict = {}
            cost = measure(lm, (8, 32), steps=5, cpu=clocks)
        finally:
            stop_spinners(procs)
        for r, wall in zip(cost.rows, cost.seconds):
            cpu = min(th for _, th, _ in clocks[r])
            print(f"| {spinners} | {r} | {1000 * wall:.1f} | {1000 * cpu:.1f} | {wall / cpu:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
