"""Who a request comes from, and how many runs each may have: the per-client and per-address caps, cancels.

- **One visitor filling the queue** (``Guard.admit``, Gradio's validator of every queued event: it runs when
  a run joins the queue, before it waits): at most ``SPECREJ_MAX_RUNS_PER_CLIENT`` (default 2) runs queued
  plus running per visitor, and per network address at most ``SPECREJ_MAX_RUNS_PER_ADDRESS``, which is at
  most half the queue's places (``address_cap``: with the default queue of 10, 5), so one address never
  takes the whole queue and the other half is always left to other addresses. An IPv6 address counts as its
  /56 (``SPECREJ_IPV6_PREFIX``, 48 for the /48 some providers give a home: a household gets a /56 or a /48 and
  may use any address in it, each of its devices in a /64 of its own), an IPv4-mapped one as its IPv4 address
  (``address_group``). **The queue's places are shared per household** (``household_share``): while H
  households (addresses, /56s) have runs queued or running, each may hold at most ceil(places / (H + 1)) of them
  (one alone 5 of 10, two 4, three 3, four to eight 2, then 1), so no three households fill the queue; and while a
  household holds more than its share (places it took when fewer waited), a household holding none finds a place
  even in a full queue (one holding some, only within the places the others hold above their share), never past
  twice the queue (Gradio's own ``max_size``; ``borrows``). A visitor is a session (the
  page's tab, a gradio_client ``Client``); a request without one of its own (``/gradio_api/call/<name>``,
  where Gradio makes up a session per request) is its address. The cap counts every queued endpoint
  together (races, replays, the lab's samples, measurements and exactness checks).
- **Addresses a client makes up** (``client_address``): the address is the TCP peer, unless a proxy is in
  front (``SPECREJ_TRUSTED_PROXY=1``; on by default on a Hugging Face Space, ``SPACE_ID``): then it is the
  right-most ``X-Forwarded-For`` entry, the one the proxy added; what the client wrote left of it is never
  read. ``app.launch`` turns uvicorn's own reading of ``X-Forwarded-For`` off (``forwarded_headers_ignored``),
  so that this is the one place that decides.
- **A cancelled run that goes on computing** (``Guard.note_cancel``): ``/cancel`` without an event id
  (gradio_client's ``Job.cancel()`` while the job is starting) cancels nothing in Gradio and the run went on
  unread; with one, Gradio cancels the task but not the thread computing it. The gate notes every cancel;
  the run it names (or, without an id, every run of that session that joined before the cancel) stops at its
  next event; the handler waiting for the torch thread's next event is woken at once (``StopFlag``).
- **Stop through the API** (``Guard.stop_session``): an API client's ``/stop`` marks its own session's runs
  (the events Stop cancels) as cancelled, and each stops at its next event.

Gradio's queue is read only through ``gradio_private``. What a request's values may be is
``components/state/request.py``'s business; which routes answer is ``gate.py``'s.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import ipaddress
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import gradio as gr

from specrej.core.config import env_int

from components.deploy import gradio_private, surface

log = logging.getLogger("specrej.app")
MAX_RUNS_ENV = "SPECREJ_MAX_RUNS_PER_CLIENT"
DEFAULT_MAX_RUNS = 2
MAX_ADDRESS_RUNS_ENV = "SPECREJ_MAX_RUNS_PER_ADDRESS"
TRUSTED_PROXY_ENV = "SPECREJ_TRUSTED_PROXY"
IPV6_PREFIX_ENV = "SPECREJ_IPV6_PREFIX"
DEFAULT_IPV6_PREFIX = 56   # a household's IPv6 network: homes get a /56 (many) or a /48 (SPECREJ_IPV6_PREFIX=48)
IN_FLIGHT_S = 10.0   # an admitted run shows up in Gradio's queue within milliseconds; forget it after this
DOWNLOAD_NAME = re.compile(r"specrej-trace-[A-Za-z0-9._-]+\.json")   # components/session/trace.py names them


def address_cap(queue_size: int | None, asked: int | None = None) -> int:
    """The most runs one address may have queued or running: half the queue's places (rounded down, at least
    one), so the other half is always left to other addresses; ``asked`` (SPECREJ_MAX_RUNS_PER_ADDRESS) may
    lower it, never raise it (ValueError naming both settings). No queue size (unbounded): ``asked`` or 10."""
    if queue_size is None:
        return asked or 10
    half = max(1, queue_size // 2)
    if asked is not None and asked > half:
        raise ValueError(f"{MAX_ADDRESS_RUNS_ENV}={asked} is more than half the queue (SPECREJ_MAX_QUEUE="
                         f"{queue_size}): one address could fill it. Use at most {half}, or a larger queue.")
    return asked or half

def household_share(places: int, households: int, cap: int | None = None) -> int:
    """The most runs one household (an address, an IPv6 /56: ``address_group``) may hold queued or running while
    ``households`` households hold runs, its own counted: ceil(places / (households + 1)), at least 1 and at most
    ``cap`` (the per-address cap). The + 1 leaves a share for a household yet to come: with a queue of 10, one
    household alone holds at most 5, two 4 each, three 3 each (9: three cannot fill the queue), four to eight 2 each,
    nine or more 1."""
    share = max(1, -(-places // (max(households, 1) + 1)))
    return share if cap is None else max(1, min(cap, share))


def start_within(running_s: list[float], waiting: int, places: int, run_s: float) -> float:
    """Seconds until a run that joins now starts, where each run lasts ``run_s``: ``places`` run at a time,
    those running have run ``running_s`` seconds so far, and ``waiting`` runs are ahead of it."""
    import heapq

    free = sorted(max(0.0, run_s - s) for s in running_s)[:places] + [0.0] * max(0, places - len(running_s))
    heapq.heapify(free)
    for _ in range(waiting):
        heapq.heappush(free, heapq.heappop(free) + run_s)
    return free[0]


def wait_words(running_s: list[float], waiting: int, places: int, *, limit_s: float, mean_s: float | None) -> str | None:
    """What a run about to join a concurrency group of ``places`` is told of its place and wait, or None when a
    place is free. Its place is ``waiting`` + 1; the wait is at most what runs of ``limit_s`` each (the run limit)
    would take and, once runs here have finished (``mean_s``: their mean length), about what runs of that length
    would; never a made-up figure."""
    if len(running_s) < places:
        return None
    ahead = f"{waiting} run{'s' * (waiting != 1)} waiting ahead of yours" if waiting else "no run waiting ahead of yours"
    most = start_within(running_s, waiting, places, limit_s)
    said = (f"**Waiting for a free slot:** {len(running_s)} run{'s' * (len(running_s) != 1)} in progress and {ahead}: "
            f"yours is number {waiting + 1} in the queue. Each run lasts at most {limit_s:.0f} s, so yours starts "
            f"within {most:.0f} s")
    if mean_s is not None:
        about = min(most, start_within(running_s, waiting, places, mean_s))
        said += f"; at the {mean_s:.0f} s runs here have taken on average, in about {about:.0f} s"
    return said + ". Your place shows on this line."


def _flag(env, name: str, default: bool) -> bool:
    value = str(env.get(name, "")).strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={value[:40]!r}: use 1 or 0.")


def _headers(request, name: str) -> list[str]:
    headers = getattr(request, "headers", None)
    if headers is None:
        return []
    if hasattr(headers, "getlist"):
        return [str(v) for v in headers.getlist(name)]
    value = headers.get(name) if hasattr(headers, "get") else None
    return [] if value is None else [str(value)]


def forwarded_for(request) -> str | None:
    """The right-most ``X-Forwarded-For`` entry (every header of that name, in order): the address
    the nearest proxy saw. None if there is none or it is not an IP address."""
    entries = [e.strip() for v in _headers(request, "x-forwarded-for") for e in v.split(",")]
    entries = [e for e in entries if e]
    if not entries:
        return None
    try:
        return str(ipaddress.ip_address(entries[-1][:64]))
    except ValueError:
        return None


def client_address(request, trusted_proxy: bool = False) -> str | None:
    """A request's network address: the TCP peer; behind a trusted proxy (one hop), the address that
    proxy saw, i.e. the right-most ``X-Forwarded-For`` entry (the peer if the proxy sent none).
    Entries left of it are whatever the client wrote and are never read."""
    if trusted_proxy:
        forwarded = forwarded_for(request)
        if forwarded is not None:
            return forwarded
    client = getattr(request, "client", None)
    host = getattr(client, "host", None) if client is not None else None
    return host if isinstance(host, str) and host else None


def address_group(address: str | None, ipv6_prefix: int = DEFAULT_IPV6_PREFIX) -> str | None:
    """The network a per-address cap counts ``address`` in: an IPv4 address itself (an IPv4-mapped IPv6
    address, ``::ffff:a.b.c.d``, read as that IPv4 address); an IPv6 address its ``/ipv6_prefix`` network
    (by default a /56: ``2001:db8::1`` and ``2001:db8:0:ff::7``, two /64s of one home, are one household).
    Anything that is not an IP address (a test client's name) is itself."""
    if address is None:
        return None
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address):
        return str(ip)
    return str(ipaddress.ip_network(f"{ip}/{ipv6_prefix}", strict=False))


def client_key(request, address: str | None = None) -> str:
    """The visitor a request comes from: its session, else (Gradio's ``call/<name>`` routes make up a
    session per request) its address."""
    session = getattr(request, "session_hash", None)
    if isinstance(session, str) and session:
        return f"session:{session}"
    return f"address:{address}" if address else "session:None"


class StopFlag:
    """Whether a run's client cancelled it: ``flag()`` asks; ``flag.on_set(fn)`` calls ``fn`` when it
    is set (at once if it is already), e.g. to wake a handler waiting for the torch thread."""

    def __init__(self):
        self._set, self._hooks, self._lock = False, [], threading.Lock()

    def __call__(self) -> bool:
        return self._set

    def set(self) -> None:
        with self._lock:
            if self._set:
                return
            self._set, hooks, self._hooks = True, self._hooks, []
        for hook in hooks:
            hook()

    def on_set(self, hook: Callable[[], None]) -> None:
        with self._lock:
            if not self._set:
                self._hooks.append(hook)
                return
        hook()


@dataclass(kw_only=True)
class _QueuedRun:
    """A run the guard admitted: whose it is, of which event, and whether its client cancelled it."""

    key: str                   # the visitor (client_key)
    address: str | None        # its network address (client_address)
    session: str | None
    fn: int                    # the event's fn index
    since: float               # time.monotonic() at admission
    seen: bool = False         # found in Gradio's queue or started
    stop: StopFlag = field(default_factory=StopFlag)

    @property
    def cancelled(self) -> bool:
        return self.stop()

    def cancel(self) -> None:
        self.stop.set()


@dataclass(frozen=True)
class FullQueue:
    """What a Run does when the queue is full (the app says, through ``components/session/planner.py``, ``Press.FULL_QUEUE``): a join of
    the event ``race`` (its API name) whose values have a labelled recording (``recorded``) is moved to the event
    whose handler is named ``busy`` (it plays the recording at once, in the replays' group); any other join past
    the queue's size is refused with ``message(waiting)``."""

    race: str
    busy: str
    recorded: Callable[[Any], bool]
    message: Callable[[int], str]


@dataclass
class Guard:
    """Per-app state of the guards: the app's events by kind, the runs admitted, early cancels."""

    max_runs_per_client: int = DEFAULT_MAX_RUNS               # per visitor (session)
    max_runs_per_address: int | None = None   # per network address, every visitor there (None: half the queue)
    trusted_proxy: bool = False   # one proxy in front: the address is the right-most X-Forwarded-For entry
    ipv6_prefix: int = DEFAULT_IPV6_PREFIX   # IPv6 addresses are capped together per network of this prefix
    monitoring: bool = False      # Gradio's /monitoring routes answer (SPECREJ_MONITORING=1)
    # concurrency groups whose few places one address may hold one of at a time (the lab's 4: two sessions of one
    # address each queued two 2-minute samples and a visitor elsewhere waited 124 s for a 1.4 s one)
    one_per_address: frozenset[str] = frozenset({"autospec"})
    blocks: Any = None                         # the gr.Blocks, once bound
    queued_fns: frozenset[int] = frozenset()   # every queued event: all count towards the per-client cap
    stop_fns: frozenset[int] = frozenset()     # the events the Stop button cancels (the race, the replay)
    direct_fns: frozenset[int] = frozenset()   # the page's unqueued events: the only ones on direct routes
    public_api: frozenset[str] = frozenset()
    events: dict = field(default_factory=dict)   # fn index -> gradio_private.EventInfo, once bound
    max_queue: int | None = None   # runs that may wait (SPECREJ_MAX_QUEUE): past it, ``full`` says what happens
    full: FullQueue | None = None
    race_fn: int | None = None     # the race's event and the one a full queue moves it to (``full``)
    busy_fn: int | None = None
    _lock: Any = field(default_factory=threading.Lock)
    _runs: dict = field(default_factory=dict)     # id(join request) -> _QueuedRun
    _early: dict = field(default_factory=dict)    # (session, fn) -> time of an id-less cancel that found no run
    _capped: dict = field(default_factory=dict)   # session -> (time, the cap's words): a Run moved to its recording

    @classmethod
    def from_env(cls, env=None) -> Guard:
        """SPECREJ_MAX_RUNS_PER_CLIENT, SPECREJ_MAX_RUNS_PER_ADDRESS (default: half the queue, ``address_cap``),
        SPECREJ_TRUSTED_PROXY (default: on on a Hugging Face Space, whose proxy is the only way in),
        SPECREJ_IPV6_PREFIX (default 56: the IPv6 network one address cap counts, a household's; 32 to 128) and
        SPECREJ_MONITORING (default off)."""
        env = os.environ if env is None else env
        asked = env_int(MAX_ADDRESS_RUNS_ENV, 0, env=env, lo=0) or None
        prefix = env_int(IPV6_PREFIX_ENV, DEFAULT_IPV6_PREFIX, env=env, lo=32)
        if prefix > 128:
            raise ValueError(f"{IPV6_PREFIX_ENV}={prefix}: an IPv6 prefix is 32 to 128 bits.")
        return cls(max_runs_per_client=env_int(MAX_RUNS_ENV, DEFAULT_MAX_RUNS, env=env),
                   max_runs_per_address=asked,
                   trusted_proxy=_flag(env, TRUSTED_PROXY_ENV, bool(str(env.get("SPACE_ID", "")).strip())),
                   ipv6_prefix=prefix,
                   monitoring=_flag(env, surface.MONITORING_ENV, False))

    def serves(self, method: str, path: str) -> bool:
        """Whether the public app answers this route at all (``surface.py``); a ``file=`` path only when it
        is one of the app's own downloads (``is_download``)."""
        return surface.served(method, path, monitoring=self.monitoring, download=self.is_download)

    def is_download(self, path: str) -> bool:
        """Whether ``path`` (what follows ``/gradio_api/file=``) is one of the app's downloads: a trace file
        (``specrej-trace-*.json``) inside Gradio's cache folder. Never a URL (Gradio would fetch it)."""
        if self.blocks is None or "://" in path or path.startswith("//") or "\\" in path or "\0" in path:
            return False
        p = PurePosixPath(path)
        if not p.is_absolute() or ".." in p.parts or not DOWNLOAD_NAME.fullmatch(p.name):
            return False
        cache = PurePosixPath(gradio_private.cache_folder(self.blocks))
        return cache in p.parents

    def bind(self, blocks, queue_size: int | None = None, full: FullQueue | None = None) -> None:
        """Sort the app's events (queued, cancelled by Stop, unqueued, public), set the per-address cap from
        the queue's size (``address_cap``) and give every queued event the caps as its validator (Gradio
        runs it when the event joins the queue). ``full``: what a Run does when ``queue_size`` runs wait
        (the validator refuses other joins then, with ``full.message``)."""
        gradio_private.check(blocks)   # every private attribute the guard reads or writes, at start
        self.max_queue, self.full = queue_size, full
        self.max_runs_per_address = address_cap(queue_size, self.max_runs_per_address)   # a client's cap too
        self.blocks = blocks
        fns = gradio_private.events(blocks)
        self.queued_fns = frozenset(i for i, fn in fns.items() if fn.queued and fn.handler is not None)
        self.direct_fns = frozenset(i for i, fn in fns.items() if not fn.queued and fn.handler is not None)
        # the events the page's Stop cancels (Gradio keeps them in a dependency of its own on the Stop's trigger;
        # no other event cancels any): the API's /stop stops the same ones
        self.stop_fns = frozenset(c for fn in fns.values() for c in fn.cancels)
        for i in self.direct_fns:   # the page's own events: a malformed call gets a plain message
            gradio_private.wrap_handler(blocks, i, _quiet)
        self.public_api = frozenset(fn.api_name for fn in fns.values() if fn.public and isinstance(fn.api_name, str))
        for i in self.queued_fns:
            fn = fns[i]
            if fn.has_validator or not fn.inputs:
                raise ValueError(f"the queued event {fn.name!r} needs inputs and no validator of its own: "
                                 "the guard's per-client cap is its validator")
            gradio_private.set_validator(blocks, i, self.validator(i, [f"value{k}" for k in range(fn.inputs)]))
        self.events = gradio_private.events(blocks)   # as they are now (handlers wrapped, validators set)
        if full is not None:
            self.race_fn = next(i for i, fn in fns.items() if fn.api_name == full.race)
            self.busy_fn = next(i for i, fn in fns.items() if fn.name == full.busy)

    # -- a full queue
    def waiting(self) -> int:
        """Runs waiting in the queue now (not those running)."""
        return gradio_private.waiting(self.blocks) if self.blocks is not None else 0

    def is_full(self, slack: int = 0) -> bool:
        return self.max_queue is not None and self.waiting() >= self.max_queue + slack

    def move_when_full(self, fn: Any, data: Any) -> int | None:
        """The event a join of ``fn`` with ``data`` (its values) is moved to: when the queue is full and the race
        it asks for has a labelled recording, the event that plays it at once (``FullQueue.busy``); else None."""
        if self.full is None or fn != self.race_fn or not isinstance(data, list) or not self.is_full():
            return None
        try:
            found = self.full.recorded(data)
        except Exception:   # a lookup that fails is no recording: the join is refused as full
            log.warning("could not look for the recording of a race the full queue refuses", exc_info=True)
            return None
        return self.busy_fn if found else None

    def move_when_capped(self, fn: Any, data: Any, request) -> int | None:
        """The event a join of the race ``fn`` with ``data`` is moved to when this visitor or its address is at its
        cap (``caps``) and the race has a labelled recording: the event that plays it at once, which then says
        why (``capped``); else None (the validator refuses it with the cap's words)."""
        if self.full is None or fn != self.race_fn or not isinstance(data, list) or request is None:
            return None
        with self._lock:
            self._reconcile()
            refused = self.caps(request, fn)
        if refused is None:
            return None
        try:
            found = self.full.recorded(data)
        except Exception:
            log.warning("could not look for the recording of a race a cap refuses", exc_info=True)
            return None
        if not found:
            return None
        session = getattr(request, "session_hash", None)
        with self._lock:
            now = time.monotonic()
            for k, (t, _) in list(self._capped.items()):   # moves whose run never came: forgotten
                if now - t > IN_FLIGHT_S:
                    del self._capped[k]
            self._capped[session] = (now, refused)
        return self.busy_fn

    def capped(self, request) -> str | None:
        """The cap's words when this session's Run was moved to its recording by a cap (``move_when_capped``)."""
        with self._lock:
            got = self._capped.pop(getattr(request, "session_hash", None), None)
        return got[1] if got else None

    # -- what is queued and running
    def _gradio_runs(self) -> list:
        """Queued events waiting in Gradio's queue or running now."""
        return [e for e in gradio_private.queued_events(self.blocks) if gradio_private.event_fn(e) in self.queued_fns]

    def _reconcile(self) -> tuple[list, list[_QueuedRun]]:
        """(Gradio's queued events, admitted runs not among them yet); forgets runs that are done
        (seen, now gone) or never reached the queue. Call with the lock held."""
        events = self._gradio_runs()
        in_queue = {id(gradio_private.event_request(e)) for e in events}
        now, on_the_way = time.monotonic(), []
        for rid, run in list(self._runs.items()):
            if rid in in_queue:
                run.seen = True
            elif run.seen or now - run.since > IN_FLIGHT_S:
                del self._runs[rid]
            else:
                on_the_way.append(run)
        return events, on_the_way

    # -- the per-client cap and early cancels (Gradio's validator of every queued event)
    def admit(self, request, fn: int) -> str | None:
        """Why this run of event ``fn`` may not join the queue (None: it may, and is noted as on its way).
        Two caps: the visitor's (its session, else its address) and its address's, over every run the
        guard admitted that is on its way, queued or running."""
        if request is None:
            return None
        address = address_group(client_address(request, self.trusted_proxy), self.ipv6_prefix)
        key, session = client_key(request, address), getattr(request, "session_hash", None)
        with self._lock:
            self._reconcile()
            if time.monotonic() - self._early.pop((session, fn), -IN_FLIGHT_S) < IN_FLIGHT_S:
                return "This run was cancelled before it reached the queue."
            # the queue's size: a recording a full queue moves a race to waits in the replays' group, beside it; a
            # household under its share finds a place past it while others hold more than theirs (``borrows``)
            if self.max_queue is not None and self.is_full(self.max_queue if fn == self.busy_fn else 0) \
                    and not (fn != self.busy_fn and self.borrows(address)):
                waiting, capped = self.waiting(), None if fn == self.busy_fn else self.caps(request, fn)
                return capped or (self.full.message(waiting) if self.full is not None else
                        f"The queue is full: {waiting} runs are waiting (SPECREJ_MAX_QUEUE). Try again in a few minutes.")
            # a Run a cap moved to its recording (``move_when_capped``) plays it: no cap counts that replay
            moved = fn == self.busy_fn and session in self._capped
            refused = None if moved else self.caps(request, fn)
            if refused is not None:
                return refused
            raw = gradio_private.raw_request(request)
            if raw is not None:
                self._runs[id(raw)] = run = _QueuedRun(key=key, address=address, session=session, fn=fn,
                                                 since=time.monotonic())
                raw.state.specrej_run = run
        return None

    def refusal(self, request, group: str) -> str | None:
        """The words a run of the queued events of concurrency group ``group`` would be refused with now by a cap
        (``caps``), for a page that says so before it joins (the lab's place line); None: it would be admitted."""
        fn = next((i for i, e in self.events.items() if e.group == group and e.queued), None)
        if fn is None:
            return None
        with self._lock:
            self._reconcile()
            return self.caps(request, fn)

    def place(self, group: str, limit_s: float) -> str | None:
        """What a run of concurrency group ``group`` is told of its place and wait the moment it is pressed, before it
        joins, when every slot is taken (``wait_words``: at most runs of ``limit_s`` each, and about the mean length
        of runs here); None: a slot is free. A cap or a full queue speaks as the run joins (a race with a recording
        then plays it: ``move_when_full``, ``move_when_capped``)."""
        if self.blocks is None:
            return None
        running, waiting, places = gradio_private.group_load(self.blocks, group)
        mean, elapsed = gradio_private.group_clock(self.blocks, group)
        elapsed = elapsed + [0.0] * max(0, running - len(elapsed))
        return wait_words(elapsed, waiting, places or 1, limit_s=limit_s, mean_s=mean)

    def caps(self, request, fn: int) -> str | None:
        """The words of the cap this run of event ``fn`` would pass (None: none): the visitor's (its session, else its
        address), one lab place per address, and its address's, over every run the guard admitted that is on its
        way, queued or running. Call with the lock held."""
        address = address_group(client_address(request, self.trusted_proxy), self.ipv6_prefix)
        key = client_key(request, address)
        runs = list(self._runs.values())
        mine = sum(r.key == key for r in runs)
        if mine >= self.max_runs_per_client:
            return (f"You already have {self.max_runs_per_client} runs queued or running (races, replays and "
                    f"lab runs together), the most per client here ({MAX_RUNS_ENV}): wait for one to end or stop it.")
        group = self.events[fn].group if fn in self.events else ""
        if address is not None and group in self.one_per_address and any(
                r.address == address and r.fn in self.events and self.events[r.fn].group == group for r in runs):
            return ("A lab run from your network address is already queued or running, and the lab's few places "
                    "are shared by every visitor: one run per address at a time. Wait for it to end, or stop it.")
        here = sum(r.address == address for r in runs)
        cap = self.max_runs_per_address or address_cap(None)
        if address is not None and here >= cap:
            return (f"{here} runs from your network address are queued or running, the most per address here "
                    f"({MAX_ADDRESS_RUNS_ENV}, at most half the queue): wait for one to end and try again.")
        share, households = self.share(address, runs)
        if address is not None and here >= share:
            return (f"{here} runs from your network address are queued or running: its share of the queue's "
                    f"{self.max_queue} places while {households} networks use it ({self.max_queue} / "
                    f"{households + 1}, rounded up; {MAX_ADDRESS_RUNS_ENV}). Wait for one to end and try again.")
        return None

    def held(self, runs=None) -> dict:
        """Runs queued, running or on their way per household (``address_group``; None: no address). Lock held."""
        held: dict = {}
        for r in self._runs.values() if runs is None else runs:
            held[r.address] = held.get(r.address, 0) + 1
        return held

    def share(self, address: str | None, runs=None) -> tuple[int, int]:
        """(the most runs ``address``'s household may hold now, how many households hold runs with it counted):
        ``household_share`` of the queue's places, at most the per-address cap. Without a queue size, the
        per-address cap alone. Call with the lock held."""
        held = self.held(runs)
        households = len({a for a in held if a is not None} | ({address} if address is not None else set()))
        cap = self.max_runs_per_address or address_cap(None)
        if self.max_queue is None:
            return cap, households
        return household_share(self.max_queue, households, cap), households

    def borrows(self, address: str | None) -> bool:
        """Whether ``address``'s household may join a full queue: it holds fewer runs than its share while another
        household holds more than its own (places it took when fewer households waited). A household holding none
        finds a place then; one holding some, only while fewer runs wait past the queue's size than the others hold
        above their share. Never past twice the queue (Gradio's own ``max_size``). Call with the lock held."""
        if address is None or self.max_queue is None:
            return False
        held = self.held()
        share, _ = self.share(address)
        mine = held.get(address, 0)
        above = sum(max(0, n - share) for a, n in held.items() if a is not None and a != address)
        if mine >= share or above == 0:
            return False
        waiting = self.waiting()
        return waiting < 2 * self.max_queue and (mine == 0 or waiting < self.max_queue + above)

    def validator(self, fn: int, names: Sequence[str]) -> Callable:
        """Gradio's validator for event ``fn`` (it runs when a run joins the queue): the per-client
        cap, shown on the first input (the page paints it there; the API answers 422 with it). The
        values themselves are checked by the handler when the run starts."""
        def admit(*args):
            *values, request = args
            refused = self.admit(request, fn)
            return tuple(gr.validate(not (refused and i == 0), refused if i == 0 and refused else "")
                         for i in range(len(values)))

        return with_request(admit, names)

    # -- cancels: without an event id, and /stop through the API
    def note_cancel(self, body: dict) -> None:
        """``/cancel`` (the page's Stop, ``Job.cancel()``). With an event id, Gradio cancels the run's
        task, but a thread computing it goes on until it next yields: mark that run as cancelled, so
        its torch thread stops before its next event. Without one (the client did not know it yet),
        Gradio cancels nothing: mark every admitted run of that session and event as cancelled; if it
        has none, its run has not joined yet, and is refused when it does."""
        if not isinstance(body, dict):
            return
        if body.get("event_id"):
            with self._lock:
                for e in self._gradio_runs():
                    if gradio_private.event_id(e) == body["event_id"]:
                        run = self._runs.get(id(gradio_private.event_request(e)))
                        if run is not None:
                            run.cancel()
            return
        fn, session = body.get("fn_index"), body.get("session_hash")
        if fn not in self.queued_fns or not isinstance(session, str):
            return
        with self._lock:
            self._reconcile()
            runs = [r for r in self._runs.values() if r.session == session and r.fn == fn]
            for r in runs:
                r.cancel()
            now = time.monotonic()
            for k, t in list(self._early.items()):   # sessions whose run never came: forget them
                if now - t > IN_FLIGHT_S:
                    del self._early[k]
            if not runs:
                self._early[(session, fn)] = now

    def stop_session(self, session: Any) -> int:
        """Stop (``/stop``): mark the session's runs of the events Stop cancels as cancelled; each
        stops at its next event. Returns how many were running or queued."""
        if not isinstance(session, str):
            return 0
        with self._lock:
            self._reconcile()
            runs = [r for r in self._runs.values() if r.session == session and r.fn in self.stop_fns
                    and not r.cancelled]
            for r in runs:
                r.cancel()
        return len(runs)

    def on_start(self, request) -> Callable[[], bool]:
        """A run starts; returns whether its client has cancelled it (asked at every event)."""
        return started(request)


def started(request) -> Callable[[], bool]:
    """Every queued handler calls this first (``request``: its ``gr.Request``): the admitted run is
    marked as started, so the per-client cap forgets it once it leaves Gradio's queue (a run never
    marked is held for IN_FLIGHT_S: a third quick lab sample was refused). Returns the run's
    ``StopFlag``: called, whether its client has cancelled it (``/stop``, ``/cancel``)."""
    run = getattr(getattr(gradio_private.raw_request(request), "state", None), "specrej_run", None)
    if run is None:
        return lambda: False
    run.seen = True
    return run.stop


def _quiet(fn: Callable) -> Callable:
    """``fn`` whose unexpected errors (a malformed call of one of the page's own events, such as a
    null where the page sends a value) reach the client as a plain message, without a traceback."""
    if getattr(fn, "_specrej_quiet", False) or inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn):
        return fn

    @functools.wraps(fn)
    def quiet(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as e:
            log.warning("malformed call of %s: %s", getattr(fn, "__name__", "an event"), type(e).__name__,
                        exc_info=log.isEnabledFor(logging.DEBUG))   # the traceback for whoever debugs the page
            raise gr.Error("This event's input is not what the page sends.", print_exception=False) from None

    quiet._specrej_quiet = True
    return quiet


def with_request(fn: Callable, names: Sequence[str]) -> Callable:
    """``fn(*values, request)`` declared as taking the parameters ``names`` and then Gradio's
    request: Gradio passes a ``gr.Request`` only to a positional parameter annotated with it."""
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    params.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=gr.Request))
    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {"request": gr.Request}
    return fn


@contextlib.contextmanager
def forwarded_headers_ignored():
    """While Gradio builds its uvicorn server: uvicorn trusts no ``X-Forwarded-For`` (by default it
    takes the header from any peer on 127.0.0.1, which lets a local caller pose as many clients).
    ``client_address`` alone reads it, one hop, where ``SPECREJ_TRUSTED_PROXY`` says a proxy is in front."""
    old = os.environ.get("FORWARDED_ALLOW_IPS")
    if old:
        log.warning("FORWARDED_ALLOW_IPS is ignored: the app reads X-Forwarded-For itself where %s=1.",
                    TRUSTED_PROXY_ENV)
    os.environ["FORWARDED_ALLOW_IPS"] = ""   # uvicorn reads it when its Config is made, inside launch()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("FORWARDED_ALLOW_IPS", None)
        else:
            os.environ["FORWARDED_ALLOW_IPS"] = old


