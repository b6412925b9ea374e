"""Deadlines for receiving a request, on uvicorn's h11 protocol (uvicorn has none: its issue #157).

``timeout_keep_alive`` only bounds the idle time between two requests of a connection; a client that sends
its headers or its body a byte at a time is otherwise kept for ever. :func:`deadline_protocol` makes a
subclass of ``uvicorn.protocols.http.h11_impl.H11Protocol`` that adds, as Go's ``ReadHeaderTimeout`` and
nginx's ``client_header_timeout`` / ``client_body_timeout`` do:

- a **header deadline**: the request line and headers must arrive within ``header_timeout`` seconds, counted
  from the connection's accept (first request) or from the first byte of the next request (keep-alive);
- a **body deadline**: the whole body must arrive within ``body_timeout`` seconds of the end of the headers
  (a total, not a gap between reads: a byte a second would pass nginx's gap test).

Past either, the connection answers ``408 Request Timeout`` (when no response has begun) and is closed; the
application sees a disconnect. The scope of each request also gets ``"pgmem.gone"``: a callable that is True
once the client has disconnected, which the service reads before starting database work.

Decision (docs/service.md): a small layer on uvicorn, rather than another ASGI server. Hypercorn has read
timeouts but is a second server to keep; granian's are in Rust. This layer is ~100 lines over one uvicorn
class, and tests/service/test_service_overload.py holds it to its promise on real sockets.
"""

from __future__ import annotations

import asyncio
import time
import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                    b"content-length: %d\r\n\r\n%s")


def _body(message: str) -> bytes:
    import json

    return json.dumps({"error": {"type": "RequestTimeout", "code": "request_timeout", "message": message,
                                 "hint": None, "field": None}}).encode()


class DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with header and body deadlines (class attributes set by :func:`deadline_protocol`)."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    # Connections still sending headers, oldest first (dicts keep insertion order): what to close first when
    # the process runs out of file descriptors (:func:`shed_slowest`).
    waiting: dict["DeadlineProtocol", float] = {}
    closed_by_deadline = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: str | None = None
        self._arm("headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        cycle = self.cycle
        if cycle is not None and "pgmem.gone" not in cycle.scope:
            cycle.scope["pgmem.gone"] = lambda c=cycle: c.disconnected  # type: ignore[typeddict-unknown-key]
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._phase == "body" and self.conn.their_state is not h11.SEND_BODY:
            self._disarm()

    def _follow(self) -> None:
        """Arm or disarm the deadline after input: headers pending, body pending, or neither."""
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._phase != "headers":
                self._arm("headers")
        elif state is h11.SEND_BODY:
            if self._phase != "body":
                self._arm("body")
        elif self._phase is not None:
            self._disarm()

    def _arm(self, phase: str) -> None:
        self._disarm()
        self._phase = phase
        seconds = self.header_timeout if phase == "headers" else self.body_timeout
        self._deadline = self.loop.call_later(seconds, self._expire)
        if phase == "headers":
            self.waiting[self] = time.monotonic()

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = None
        self.waiting.pop(self, None)

    def _expire(self) -> None:
        phase = self._phase
        self._deadline = None
        if self.transport.is_closing():
            return
        if phase == "headers" and self.timeout_keep_alive_task is not None and self.conn.their_state is h11.IDLE \
                and self.cycle is not None and self.cycle.response_complete:
            return  # idle between two requests: uvicorn's keep-alive timeout covers it
        seconds = self.header_timeout if phase == "headers" else self.body_timeout
        self.close_timed_out(f"the request's {phase} did not arrive within {seconds:g} s")

    def close_timed_out(self, message: str) -> None:
        """Answer 408 (unless this request's response has begun) and close the connection."""
        cycle = self.cycle
        # Still sending headers: the last cycle, if any, is a finished request. Sending a body: no 408 after the
        # application's own answer (a 401 sent before the body was read, say).
        if self.conn.their_state is h11.IDLE or cycle is None or not cycle.response_started:
            body = _body(message)
            self.transport.write(TIMEOUT_RESPONSE % (len(body), body))
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the application's own answer, if any, goes nowhere
            cycle.message_event.set()
        type(self).closed_by_deadline += 1
        self._disarm()
        self.transport.close()


def deadline_protocol(header_timeout: float, body_timeout: float) -> type[DeadlineProtocol]:
    """A :class:`DeadlineProtocol` subclass with these deadlines (seconds), for ``uvicorn.Config(http=...)``."""
    return type("PgmemH11Protocol", (DeadlineProtocol,), {"header_timeout": header_timeout,
                                                          "body_timeout": body_timeout, "waiting": {}})


def shed_slowest(protocol: type[DeadlineProtocol], n: int) -> int:
    """Close the ``n`` connections that have waited longest for their headers (408): what the service does when
    ``accept()`` fails for want of file descriptors, so that new clients get in. Returns how many it closed."""
    closed = 0
    for conn in list(protocol.waiting)[:n]:
        conn.close_timed_out("the server is out of connections and this request's headers are not complete")
        closed += 1
    return closed


__all__ = ["DeadlineProtocol", "deadline_protocol", "shed_slowest"]
