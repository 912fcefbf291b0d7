"""One long-lived thread for every torch call the app makes.

Why: Gradio runs each handler on a thread of its own pool. torch's CPU kernels run an OpenMP team
per calling thread, and on a 2-core machine a second team (idle, spinning) slows the one at work:
the same race measured ~1.5x slower issued from a Gradio worker thread than from the main thread
(``shared/PERF_NOTES.md``). So the app loads its models and steps every race, every reward and the
lab's samplers on this one thread; handlers only hand it work and wait.

``TorchWorker.call(fn, ...)`` runs ``fn`` there and returns its result (or raises its exception).
``TorchWorker.stream(factory)`` runs the generator ``factory()`` on the worker, one event per
job (``Stream``), with the next event prefetched while the reader sends a frame. Closing the
stream (Stop, a closed tab) closes the generator on the worker after at most the step in
progress: its ``finally`` frees the KV cache there.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


class TorchWorker:
    """A daemon thread that runs submitted jobs one at a time, in order."""

    def __init__(self, name: str = "specrej-torch"):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            fut, fn, args, kwargs = self._jobs.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the caller, who raises it in its own thread
                fut.set_exception(e)

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


class Stream(Iterator[T]):
    """A generator run on the worker, one event per job, so two streams (a race and a lab sample)
    take turns event by event.

    ``prefetch()`` starts the next event now, before the reader asks for it: the reader calls it
    just before it yields a frame, so the torch thread computes while Gradio sends the frame
    (when it waited instead, the race measured ~1.4x its library time through ``/run``).
    ``close()`` (Stop, a closed tab, the end) lets a prefetched event finish, never starts
    another, and closes the generator on the worker, whose ``finally`` frees the KV cache."""

    def __init__(self, worker: TorchWorker, factory: Callable[[], Iterator[T]],
                 cancelled: Callable[[], bool] = lambda: False):
        self._worker, self._factory, self._cancelled = worker, factory, cancelled
        self._it: Iterator[T] | None = None
        self._pending: Future | None = None
        self._cancel = threading.Event()
        self._ended = False

    def _advance(self):   # on the worker
        if self._cancel.is_set() or self._cancelled():
            return _DONE
        if self._it is None:
            self._it = self._factory()
        return next(self._it, _DONE)

    def prefetch(self) -> None:
        if self._pending is None and not self._ended and not self._worker.on_worker:
            self._pending = self._worker.submit(self._advance)

    def __next__(self) -> T:
        if self._ended:
            raise StopIteration
        if self._worker.on_worker:
            item = self._advance()
        else:
            fut, self._pending = self._pending or self._worker.submit(self._advance), None
            try:
                item = fut.result()
            except BaseException:
                self._ended = True
                raise
        if item is _DONE:
            self._ended = True
            raise StopIteration
        return item

    def close(self) -> None:
        self._cancel.set()
        self._ended = True
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()   # the step in progress finishes; no other starts
            except BaseException:
                pass
        self._worker.call(self._close_it)

    def _close_it(self) -> None:
        if self._it is not None and hasattr(self._it, "close"):
            self._it.close()


_worker: TorchWorker | None = None
_lock = threading.Lock()


def torch_worker() -> TorchWorker:
    """The process's one torch worker (started on first use)."""
    global _worker
    with _lock:
        if _worker is None:
            _worker = TorchWorker()
        return _worker
