"""One long-lived thread for every torch call the app makes.

Why: Gradio runs each handler on a thread of its own pool. torch's CPU kernels run an OpenMP team
per calling thread, and on a 2-core machine a second team (idle, spinning) slows the one at work:
the same race measured ~1.5x slower issued from a Gradio worker thread than from the main thread
(``shared/PERF_NOTES.md``). So the app loads its models and steps every race, every reward and the
lab's samplers on this one thread; handlers only hand it work and wait.

The worker runs at a lower priority than the page (``NICE``, ``SPECREJ_WORKER_NICE``): its torch threads,
started from it, inherit it, so on a loaded machine a click's handler and the frames' building get a core
before the next decoding step does (the nice value is a thread's own on Linux; the spinners of another process
group are not affected by it). On a quiet machine nothing waits, so a race runs as fast.

Its torch threads follow the free cores (``TorchWorker.follow``, ``FreeCores``): before each job it sets the threads
the machine can give it now, at most the quiet count, one where another process holds the other core. With two
OpenMP threads and a busy core every barrier waits for a thread the scheduler has parked: a Best-of-N arm on the
compiled step took 15.2 s with two threads and 0.42 s with one at load ~7 (issue 61; docs/performance.md, "Threads
under load"). The threads never change the tokens (``recordings.race_key``).

``TorchWorker.call(fn, ...)`` runs ``fn`` there and returns its result (or raises its exception).
``TorchWorker.stream(factory)`` runs the generator ``factory()`` on the worker, one event per
job, ahead of its reader (``Stream``). Closing the stream (Stop, a closed tab) closes the
generator on the worker after at most the step in progress: its ``finally`` frees the KV cache
there.
"""
from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()
_WAKE = object()   # put by a cancel into the reader's queue: the reader stops waiting at once
NICE = 10          # the worker's nice value above the page's threads (0: the same priority)


def _running_here() -> int:
    """This process's threads that are running or runnable now (state R in ``/proc/self/task/*/stat``)."""
    n = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:   # the thread ended meanwhile
            continue
        n += stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] == b"R"
    return n


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity; ``os.cpu_count()`` where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def others_running() -> int | None:
    """Runnable tasks of other processes now: ``/proc/loadavg``'s running count less this process's running
    threads (the reader among them). None where ``/proc`` cannot say (not Linux)."""
    try:
        with open("/proc/loadavg", "rb") as f:
            running = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0, running - _running_here())


class FreeCores:
    """The torch threads the machine can give the worker now: ``most`` (the quiet count) while the usable cores
    less other processes' runnable tasks leave that many free, else one (a compiled step is built for those two).
    Read from ``/proc`` at most every ``every_s`` seconds; the busiest of the last ``memory`` readings decides, so
    one quiet instant between two bursts does not bring the second thread back (it returns after that many quiet
    readings: a few seconds), while a busy one takes it away at once. ``read``: how many others run
    (``others_running``; a test passes its own).

    Where ``/proc/loadavg`` counts a whole host's tasks (a container without its own view), other containers'
    work counts too: the worker then races with one thread more often (SPECREJ_FOLLOW_CORES=0 turns it off)."""

    def __init__(self, most: int, *, every_s: float = 0.5, memory: int = 4, cores: int | None = None,
                 read=others_running, clock=time.monotonic):
        self.most, self.every_s, self.cores = max(1, most), every_s, cores or usable_cores()
        self._read, self._clock, self._memory = read, clock, max(1, memory)
        self._seen: list[int] = []
        self._at = -float("inf")

    def __call__(self) -> int:
        now = self._clock()
        if now - self._at >= self.every_s:
            self._at = now
            others = self._read()
            if others is None:   # nothing to go by: the quiet count
                return self.most
            self._seen = (self._seen + [others])[-self._memory:]
        busiest = max(self._seen, default=0)
        # all of them or one: a compiled step is built for exactly these two counts (``compiled.warm``), so a
        # count between them would compile inside a race
        return self.most if self.cores - busiest >= self.most else 1


def _lower_this_thread(by: int) -> None:
    """This thread (and the threads it starts) at ``by`` lower priority; where the OS refuses, unchanged."""
    if by <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
    except (OSError, AttributeError):
        pass


class TorchWorker:
    """A daemon thread that runs submitted jobs one at a time, in order."""

    def __init__(self, name: str = "specrej-torch", nice: int = 0):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._nice = nice
        self._threads: Callable[[], int] | None = None   # ``follow``: the threads to set before each job
        self.threads_set = 0                              # the threads the last job started with (0: untouched)
        self.start_threads: int | None = None             # torch's own thread count here, before anything set one
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        _lower_this_thread(self._nice)   # first: the OpenMP team this thread starts inherits it
        try:
            import torch

            self.start_threads = torch.get_num_threads()
        except ImportError:   # pragma: no cover
            pass
        self._started.set()
        while True:
            fut, fn, args, kwargs = self._jobs.get()
            if not fut.set_running_or_notify_cancel():
                continue
            self._set_threads()
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the caller, who raises it in its own thread
                fut.set_exception(e)

    def quiet_threads(self) -> int:
        """The threads torch gave this worker before anything set them: what a race uses on a quiet machine."""
        self._started.wait(60)
        return self.start_threads or usable_cores()

    def follow(self, threads: Callable[[], int] | None) -> None:
        """Before each job, set torch's threads to ``threads()`` (e.g. ``FreeCores``: what the machine can give
        now); None: leave them as jobs set them. A job may still set its own (a probe at a given count): the next
        job starts with the policy's again."""
        self._threads = threads

    def _set_threads(self) -> None:   # on the worker
        policy = self._threads
        if policy is None:
            return
        try:
            n = policy()
            import torch

            if torch.get_num_threads() != n:
                torch.set_num_threads(n)
            self.threads_set = n
        except Exception:   # never a job's problem: its threads stay as they were
            pass

    @property
    def on_worker(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on the worker and return its result (raise its exception)."""
        if self.on_worker:   # already here (a job that calls another): run it inline
            return fn(*args, **kwargs)
        fut: Future = Future()
        self._jobs.put((fut, fn, args, kwargs))
        return fut.result()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future:
        """Queue ``fn(*args)`` on the worker; its Future holds the result."""
        fut: Future = Future()
        self._jobs.put((fut, fn, args, {}))
        return fut

    def stream(self, factory: Callable[[], Iterator[T]],
               cancelled: Callable[[], bool] = lambda: False) -> "Stream[T]":
        """The events of ``factory()``, each produced on the worker (``Stream``); ``cancelled`` (e.g.
        the guard's "did this run's client press Stop?") is asked before every event there."""
        return Stream(self, factory, cancelled)


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error


class Stream(Iterator[T]):
    """A generator run on the worker a little ahead of its reader, one event per job.

    Each job computes one event, hands it to the reader's queue and queues the job for the next
    one, so the torch thread does not wait for the reader (a frame being serialised and sent), and
    two streams (a race and a lab sample) take turns event by event. When the reader asked for each
    event in turn instead, every step paid a hand-off between the two threads. At most ``AHEAD``
    events wait unread: a reader that stops reading (a closed tab, a cancelled task whose
    generator Gradio leaves suspended) stops the race within ``AHEAD`` events, and the pump
    resumes when the reader reads on. ``cancelled`` is asked on the worker before every event, so a
    Stop pressed during the loading or the prefill stops the race before its first step.
    ``close()`` (Stop, a closed tab, the end) lets the event in progress finish, never starts
    another, and closes the generator on the worker, whose ``finally`` frees the KV cache;
    ``close(wait=False)`` returns at once and leaves that to the worker. A ``cancelled`` that can say
    when it is set (``on_set``, the guard's ``StopFlag``) wakes a reader waiting for an event at once:
    ``/cancel`` need not wait for the step in progress."""

    AHEAD = 2

    def __init__(self, worker: TorchWorker, factory: Callable[[], Iterator[T]],
                 cancelled: Callable[[], bool] = lambda: False):
        self._worker, self._factory, self._cancelled = worker, factory, cancelled
        self._it: Iterator[T] | None = None
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pumping = False   # a job for the next event is queued or running
        self._cancel = threading.Event()
        self._ended = False
        self._finished = False   # the generator ran to its end or raised (on the worker)
        on_set = getattr(cancelled, "on_set", None)
        if on_set is not None:
            on_set(lambda: self._events.put(_WAKE))

    def _advance(self):   # on the worker
        if self._cancel.is_set() or self._cancelled():
            return _DONE
        if self._it is None:
            self._it = self._factory()
        item = next(self._it, _DONE)
        self._finished = item is _DONE
        return item

    def _pump(self) -> None:   # on the worker: one event, then the job for the next unless enough wait
        try:
            item = self._advance()
        except BaseException as e:
            self._finished = True
            item = _Raised(e)
        with self._lock:
            self._events.put(item)
            self._pumping = not isinstance(item, _Raised) and item is not _DONE \
                and self._events.qsize() < self.AHEAD
            if self._pumping:
                self._worker.submit(self._pump)

    def ready(self) -> int:
        """Events computed and not read yet."""
        return self._events.qsize()

    def __next__(self) -> T:
        if self._ended:
            raise StopIteration
        if self._worker.on_worker:
            item = self._advance()
        else:
            with self._lock:
                if not self._pumping and self._events.empty():   # the first event, or the pump paused
                    self._pumping = True
                    self._worker.submit(self._pump)
            item = self._events.get()
            if item is _WAKE:   # cancelled while waiting: stop now, the worker stops at its next event
                item = _DONE
            with self._lock:   # the pump paused with AHEAD unread: one was read, so it goes on
                if not self._pumping and not isinstance(item, _Raised) and item is not _DONE \
                        and not self._ended and self._events.qsize() < self.AHEAD:
                    self._pumping = True
                    self._worker.submit(self._pump)
        if isinstance(item, _Raised):
            self._ended = True
            raise item.error
        if item is _DONE:
            self._ended = True
            raise StopIteration
        return item

    def close(self, *, wait: bool = True, then: Callable[[], Any] | None = None) -> None:
        """End the stream: the event in progress finishes, no other starts, and the generator is
        closed on the worker (its ``finally`` runs there), then ``then()`` if it was still open.
        ``wait=False``: return at once; the worker does it after the event in progress."""
        self._cancel.set()
        self._ended = True
        if wait:
            self._worker.call(self._close_it, then)   # queued after the event in progress, which then stops
        else:
            self._worker.submit(self._close_it, then)

    def _close_it(self, then: Callable[[], Any] | None = None) -> None:
        if self._it is None or self._finished:
            return
        if hasattr(self._it, "close"):
            self._it.close()
        self._finished = True
        if then is not None:
            then()


_worker: TorchWorker | None = None
_lock = threading.Lock()


def torch_worker() -> TorchWorker:
    """The process's one torch worker (started on first use)."""
    global _worker
    with _lock:
        if _worker is None:
            _worker = TorchWorker(nice=int(os.environ.get("SPECREJ_WORKER_NICE", NICE)))
        return _worker
