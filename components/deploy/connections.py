"""The server's own limits on connections (issue 65, 2): what uvicorn leaves open, closed.

uvicorn closes a keep-alive connection idle after a response (``timeout_keep_alive``, 5 s), but never one that has
not finished sending a request's head: a TCP connection opened and left silent, or a slowloris sending a header
line every few seconds, holds a descriptor (and a slot of the OS's backlog) for ever. ``GuardedH11`` is uvicorn's
own h11 protocol with two more rules:

1. **A request's head within ``head_s``** (``SPECREJ_HEAD_TIMEOUT_S``, 10 s): from the connection's start, or from the
   first byte of a later request on it, the request line and every header must have arrived by then, or the
   connection is closed. A request's *body* has its own clock in the gate (``gate.BODY_TIMEOUT_S``).
2. **At most ``per_address`` open connections per client address** (``SPECREJ_MAX_CONNECTIONS``, 32; 0: no cap): one
   past the cap is closed at once. The address is the TCP peer: behind a proxy (a Space) every visitor shares
   the proxy's, so there the cap is off unless set (``from_env``); the proxy bounds its own clients.

``uvicorn_options`` (``gradio_private``) hands this class to the ``uvicorn.Config`` that Gradio's ``launch`` builds.
Nothing here knows the app.
"""
from __future__ import annotations

import os
from collections import Counter

from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not in after ``head_s`` and one past
    ``per_address`` open connections from its address (class attributes: ``configured`` makes a subclass)."""

    head_s: float = HEAD_TIMEOUT_S
    per_address: int = MAX_CONNECTIONS
    open_by_address: Counter = Counter()   # (shared by the server's connections: one event loop, no lock needed)
    closed_slow = 0                        # connections closed for a slow head, and ...
    closed_over_cap = 0                    # ... for one address's cap (counts, for the probe and the tests)

    @classmethod
    def configured(cls, head_s: float = HEAD_TIMEOUT_S, per_address: int = MAX_CONNECTIONS) -> type["GuardedH11"]:
        return type(cls.__name__, (cls,), {"head_s": float(head_s), "per_address": int(per_address),
                                           "open_by_address": Counter()})

    def connection_made(self, transport) -> None:   # type: ignore[override]
        super().connection_made(transport)
        self._head_task, self._counted = None, False
        host = self.client[0] if self.client else None
        if host is not None and self.per_address > 0:
            if self.open_by_address[host] >= self.per_address:
                type(self).closed_over_cap += 1
                transport.close()
                return
            self.open_by_address[host] += 1
            self._counted, self._host = True, host
        self._arm()

    def connection_lost(self, exc) -> None:
        if self._counted:
            self._counted = False
            self.open_by_address[self._host] -= 1
            if self.open_by_address[self._host] <= 0:
                del self.open_by_address[self._host]
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm()   # the head is in: the request runs
        elif self._head_task is None and not self.transport.is_closing():
            self._arm()      # the first bytes of a later request: its head has head_s from now

    def on_response_complete(self) -> None:
        self._disarm()       # idle now: uvicorn's own keep-alive timeout closes it
        super().on_response_complete()

    def _arm(self) -> None:
        if self.head_s > 0:
            self._head_task = self.loop.call_later(self.head_s, self._too_slow)

    def _disarm(self) -> None:
        if self._head_task is not None:
            self._head_task.cancel()
            self._head_task = None

    def _too_slow(self) -> None:
        self._head_task = None
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            type(self).closed_slow += 1
            self.transport.close()


def from_env(env=None) -> type[GuardedH11]:
    """``GuardedH11`` with this deployment's settings: ``SPECREJ_HEAD_TIMEOUT_S`` (0: no head timeout) and
    ``SPECREJ_MAX_CONNECTIONS`` (per address; 0: no cap; by default off on a Space, whose proxy is every peer)."""
    env = os.environ if env is None else env
    head = float(env.get("SPECREJ_HEAD_TIMEOUT_S", HEAD_TIMEOUT_S))
    default_cap = 0 if env.get("SPACE_ID") else MAX_CONNECTIONS
    cap = int(env.get("SPECREJ_MAX_CONNECTIONS", default_cap))
    if head < 0 or cap < 0:
        raise ValueError("SPECREJ_HEAD_TIMEOUT_S and SPECREJ_MAX_CONNECTIONS must be 0 or more")
    return GuardedH11.configured(head, cap)
