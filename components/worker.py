"""One long-lived thread for every torch call the app makes.

Why: Gradio runs each handler on a thread of its own pool. torch's CPU kernels run an OpenMP team
per calling thread, and on a 2-core machine a second team (idle, spinning) slows the one at work:
the same race measured ~1.5x slower issued from a Gradio worker thread than from the main thread
(``shared/PERF_NOTES.md``). So the app loads its models and steps every race, every reward and the
lab's samplers on this one thread; handlers only hand it work and wait.

``TorchWorker.call(fn, ...)`` runs ``fn`` there and returns its result (or raises its exception).
``TorchWorker.stream(factory)`` is an iterator whose every ``next`` runs on the worker: the
generator ``factory()`` is created, advanced and closed there, one event per job, so two streams
(a race and a lab sample) take turns event by event instead of one waiting for the other to end.
Closing the stream (Stop, a closed tab) closes the generator on the worker: its ``finally`` frees
the KV cache there.
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

    def stream(self, factory: Callable[[], Iterator[T]]) -> Iterator[T]:
        """The events of ``factory()``, each produced on the worker; closing this closes that."""
        if self.on_worker:
            yield from factory()
            return
        holder: dict = {}

        def advance():
            if "it" not in holder:
                holder["it"] = factory()
            return next(holder["it"], _DONE)

        def close():
            it = holder.get("it")
            if it is not None and hasattr(it, "close"):
                it.close()

        try:
            while True:
                item = self.call(advance)
                if item is _DONE:
                    return
                yield item
        finally:
            self.call(close)


_worker: TorchWorker | None = None
_lock = threading.Lock()


def torch_worker() -> TorchWorker:
    """The process's one torch worker (started on first use)."""
    global _worker
    with _lock:
        if _worker is None:
            _worker = TorchWorker()
        return _worker
