"""The app's torch thread: every job on one thread, streams computed ahead of their reader, turns
taken event by event, a Stop honoured before the next event, the generator closed on the worker."""
from __future__ import annotations

import threading

import pytest

from components.session.worker import Stream, TorchWorker


def wait_until(cond, timeout=60.0):
    """Poll ``cond`` (a hang guard, not a speed limit)."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_call_runs_on_the_worker_and_raises_its_errors():
    w = TorchWorker("test-worker")
    assert w.call(lambda: threading.current_thread().name) == "test-worker"
    with pytest.raises(ZeroDivisionError):
        w.call(lambda: 1 / 0)


def test_a_stream_runs_ahead_of_its_reader_by_at_most_AHEAD_events():
    """While the reader holds an event, the worker computes the next ones, and pauses with AHEAD
    unread (a reader that stopped reading stops the race); reading on resumes it."""
    w = TorchWorker()
    made, threads = [], set()

    def gen():
        for i in range(6):
            threads.add(threading.current_thread().name)
            made.append(i)
            yield i

    s = w.stream(gen)
    assert next(s) == 0
    assert wait_until(lambda: s.ready() == Stream.AHEAD), "the worker did not compute ahead"
    w.call(lambda: None)     # jobs run in order: a pump still queued would have run before this one
    assert made == [0, 1, 2] and s.ready() == Stream.AHEAD
    assert list(s) == [1, 2, 3, 4, 5]
    assert threads == {"specrej-torch"}


def test_two_streams_take_turns_event_by_event():
    w = TorchWorker()
    order = []
    gate = threading.Event()

    def gen(name):
        def g():
            gate.wait(60)
            for i in range(Stream.AHEAD):   # no pause: each stream has at most AHEAD unread
                order.append((name, i))
                yield i
        return g

    w.submit(gate.wait, 60)   # hold the worker until both streams have queued their first job
    a, b = w.stream(gen("a")), w.stream(gen("b"))
    a._pumping = b._pumping = True
    w.submit(a._pump), w.submit(b._pump)
    gate.set()
    assert list(a) == [0, 1] and list(b) == [0, 1]
    assert [n for n, _ in order] == ["a", "b", "a", "b"]


def test_an_error_in_the_generator_reaches_the_reader():
    w = TorchWorker()

    def gen():
        yield 1
        raise ValueError("budget too small")

    s = w.stream(gen)
    assert next(s) == 1
    with pytest.raises(ValueError, match="budget too small"):
        next(s)
    assert list(s) == []


def test_cancelled_is_asked_before_every_event_even_the_first():
    w = TorchWorker()
    started = []

    def gen():
        started.append(True)
        yield 1

    s = w.stream(gen, cancelled=lambda: True)
    assert list(s) == []
    assert started == []   # a Stop during loading: the race never started


def test_close_stops_after_the_event_in_progress_and_runs_the_finally_on_the_worker():
    w = TorchWorker()
    in_step, go_on = threading.Event(), threading.Event()
    made, closed_on = [], []

    def gen():
        try:
            for i in range(100):
                if i == 1:
                    in_step.set()
                    go_on.wait(60)   # the step in progress when Stop is pressed
                made.append(i)
                yield i
        finally:
            closed_on.append(threading.current_thread().name)

    s = w.stream(gen)
    assert next(s) == 0
    assert in_step.wait(60)
    closer = threading.Thread(target=s.close)
    closer.start()
    go_on.set()
    closer.join(60)
    assert not closer.is_alive()
    assert made == [0, 1]          # the event in progress finished; no other started
    assert closed_on == ["specrej-torch"]
    with pytest.raises(StopIteration):
        next(s)


def test_the_worker_and_the_threads_it_starts_run_below_the_page():
    """The torch worker's thread runs at a higher nice value than the thread that made it, and a thread it starts
    (an OpenMP team's) inherits it: a click's handler gets a core before the next decoding step."""
    import os
    import threading

    if not hasattr(os, "setpriority"):
        pytest.skip("no per-thread priorities here")
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    if mine >= 19:
        pytest.skip("this thread already runs at the lowest priority")

    def nice_of_a_thread_started_here():
        got = []
        t = threading.Thread(target=lambda: got.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        t.start()
        t.join()
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), got[0]

    w = TorchWorker("test-nice", nice=5)
    own, child = w.call(nice_of_a_thread_started_here)
    assert own == min(19, mine + 5) and child == own
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine   # the caller's own is unchanged
    assert TorchWorker("test-same").call(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())) == mine


def test_each_xdist_worker_leads_a_session_of_its_own():
    """The suite's workers, like the served app on a Space, each in a scheduling group of their own (conftest's
    ``own_session``): the other worker's busy test then cannot take the share of this one's served race, whose
    torch worker runs below the page (the test above)."""
    import os

    import pytest
    from conftest import own_session

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not under pytest-xdist (the README's command runs it with -n 2)")
    assert own_session()   # setsid ran at configure: a second call finds this process leading its session
    assert os.getsid(0) == os.getpid() != os.getppid()
