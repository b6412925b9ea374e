"""``pgmem serve`` under overload and slow clients (issue #43), over real sockets against the test database.

Admission (a bound on requests in flight, a key's share of it, a bounded wait for a pooled connection) answers
503/429 with ``Retry-After`` before database work; the cache of verified keys makes a 429 cost no query and a
revocation elsewhere take effect within ``key_cache_ttl``; the header and body deadlines close slow clients;
a client that has left starts no database work. "No query" is counted where database work begins: the
service's pooled connections handed out (``Service.checkouts``), with the request-log writer held back.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import httpx
import pytest

from support.service_helpers import api, bootstrap, issue_key, running_service

QUIET = {"audit_flush_interval": 3600.0}  # no request-log write takes a connection during a count


def raw(svc, data: bytes) -> socket.socket:
    """A client socket to the service that has sent ``data`` and nothing more."""
    s = socket.create_connection(("127.0.0.1", svc.settings.port), timeout=10)
    s.sendall(data)
    return s


def read_all(s: socket.socket, within: float) -> tuple[bytes, float | None]:
    """What the server sends on ``s`` until it closes the connection (and after how many seconds), or what came
    within ``within`` seconds with None when it was still open then."""
    t0 = time.monotonic()
    out = b""
    while True:
        left = within - (time.monotonic() - t0)
        if left <= 0:
            return out, None
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            return out, None
        except ConnectionResetError:
            return out, time.monotonic() - t0
        if not chunk:
            return out, time.monotonic() - t0
        out += chunk


def held_post(svc, key: str) -> socket.socket:
    """A POST /v1/memories whose headers are complete and whose body never is: it holds a request slot."""
    return raw(svc, (f"POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"content\": ").encode())


def wait_for(cond, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


# ------------------------------------------------------------------------------------------------------------
# Retry-After, the key cache, revocation
# ------------------------------------------------------------------------------------------------------------
def test_a_429_performs_no_query(dsn):
    with running_service(dsn, rate_limit=1.0, rate_burst=2, **QUIET) as s:
        key = issue_key(bootstrap(s), user="alice")
        with api(s, key) as c:
            assert [c.get("/v1/whoami").status_code for _ in range(2)] == [200, 200]
            before = s.service.checkouts
            answers = [c.get("/v1/whoami") for _ in range(20)]
            assert {r.status_code for r in answers} == {429}
            assert all(int(r.headers["retry-after"]) >= 1 for r in answers)
            assert s.service.checkouts == before  # the key came from the cache; its bucket was empty


def test_a_key_revoked_elsewhere_stops_within_the_cache_ttl(dsn, admin):
    """Revoked by another process (here: SQL), the key works until its cache entry expires (key_cache_ttl = 1 s),
    never longer; revoked in this process's dashboard it stops at once (test_service_api)."""
    with running_service(dsn, key_cache_ttl=1.0, **QUIET) as s:
        key = issue_key(bootstrap(s), user="alice")
        with api(s, key) as c:
            assert c.get("/v1/whoami").status_code == 200
            key_id = admin.execute("SELECT key_id FROM pgmem.service_keys").fetchone()[0]
            admin.execute("SELECT pgmem.service_key_revoke(%s)", (key_id,))
            revoked = time.monotonic()
            while True:
                sent = time.monotonic() - revoked  # when the request left, not when its answer came
                if c.get("/v1/whoami").status_code != 200:
                    break
                assert sent < 1.0 + 0.25, "the revoked key still works past key_cache_ttl"
                time.sleep(0.05)
            assert c.get("/v1/whoami").status_code == 401


# ------------------------------------------------------------------------------------------------------------
# Admission
# ------------------------------------------------------------------------------------------------------------
def test_the_in_flight_bound_reached_gives_503_with_retry_after_and_no_query(dsn):
    with running_service(dsn, max_in_flight=2, key_share=1.0, **QUIET) as s:
        key = issue_key(bootstrap(s), user="alice")
        with api(s, key) as c:
            assert c.get("/v1/whoami").status_code == 200  # the key is cached
            held = [held_post(s, key) for _ in range(2)]
            wait_for(lambda: s.app.middleware_stack is not None and _guard(s).in_flight == 2)
            before = s.service.checkouts
            r = c.get("/v1/memories")
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "overloaded"
            assert s.service.checkouts == before
            assert c.get("/healthz").status_code == 200  # liveness is never refused
            for h in held:
                h.close()
            wait_for(lambda: _guard(s).in_flight == 0)
            assert c.get("/v1/memories").status_code == 200


def test_one_key_cannot_take_more_than_its_share(dsn):
    with running_service(dsn, max_in_flight=4, key_share=0.5, **QUIET) as s:
        b = bootstrap(s)
        flood, other = issue_key(b, user="alice"), issue_key(b, user="bob")
        with api(s, flood) as c, api(s, other) as d:
            assert c.get("/v1/whoami").status_code == 200
            held = [held_post(s, flood) for _ in range(2)]
            wait_for(lambda: _guard(s).in_flight == 2)
            r = c.get("/v1/memories")
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "concurrency_limited"
            assert d.get("/v1/memories").status_code == 200  # the other tenant still gets in
            for h in held:
                h.close()


def test_a_pool_wait_past_its_bound_gives_503_with_retry_after(dsn, admin):
    with running_service(dsn, pool_size=2, pool_timeout=0.5, **QUIET) as s:
        key = issue_key(bootstrap(s), user="alice")
        with api(s, key) as c:
            assert c.get("/v1/memories").status_code == 200
            results: list[int] = []
            with admin.transaction():
                admin.execute("LOCK TABLE pgmem.memories IN ACCESS EXCLUSIVE MODE")
                blocked = [threading.Thread(target=lambda: results.append(api(s, key).get("/v1/memories").status_code))
                           for _ in range(2)]
                for t in blocked:
                    t.start()
                wait_for(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                               "AND datname = current_database()").fetchone()[0] == 2)
                t0 = time.monotonic()
                r = c.get("/v1/memories")
                waited = time.monotonic() - t0
            for t in blocked:
                t.join(30)
            assert r.status_code == 503 and r.headers["retry-after"] == "2", (r.status_code, r.headers, r.text)
            assert 0.4 < waited < 5, waited
            assert results == [200, 200]  # the two that held the connections finish once the lock is gone


def test_a_client_that_left_starts_no_database_work(dsn, admin):
    """The client leaves while its text is being embedded: the write that would follow is never begun."""
    from pgmem.testing import HashEmbedder

    class Slow(HashEmbedder):
        delay = 0.0

        def embed(self, texts):
            time.sleep(self.delay)
            return super().embed(texts)

    emb = Slow(64)
    with running_service(dsn, embedder=emb, **QUIET) as s:
        key = issue_key(bootstrap(s), user="alice")
        with api(s, key) as c:
            assert c.post("/v1/memories", json={"content": "warm up"}).status_code == 201
            emb.delay = 1.5
            body = b'{"content": "never stored"}'
            sock = raw(s, (f"POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
            time.sleep(0.4)
            sock.close()
            time.sleep(2.0)
            emb.delay = 0.0
            assert admin.execute("SELECT count(*) FROM pgmem.memories WHERE content = 'never stored'").fetchone()[0] == 0
            assert c.post("/v1/memories", json={"content": "stored"}).status_code == 201


# ------------------------------------------------------------------------------------------------------------
# Header and body deadlines
# ------------------------------------------------------------------------------------------------------------
def test_a_socket_that_never_finishes_its_headers_is_closed_after_the_deadline(dsn):
    with running_service(dsn, header_timeout=1.0, **QUIET) as s:
        partial = raw(s, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        silent = raw(s, b"")
        got, closed_after = read_all(partial, within=5)
        assert closed_after is not None and 0.8 < closed_after < 5, closed_after
        assert got.startswith(b"HTTP/1.1 408 ")
        _, silent_closed = read_all(silent, within=5)
        assert silent_closed is not None
        # A byte at a time does not keep it open either.
        drip = raw(s, b"G")
        t0 = time.monotonic()
        with pytest.raises(OSError):
            for ch in b"ET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" * 10:
                drip.sendall(bytes([ch]))
                time.sleep(0.1)
                assert time.monotonic() - t0 < 5
        # A client that sends its headers in time is served, and keep-alive still works.
        with httpx.Client(base_url=s.url) as c:
            assert c.get("/healthz").status_code == 200
            time.sleep(1.5)  # idle between requests: uvicorn's keep-alive (5 s) covers it, not the deadline
            assert c.get("/healthz").status_code == 200


def test_a_body_sent_too_slowly_is_refused(dsn, admin):
    with running_service(dsn, body_timeout=1.0, **QUIET) as s:
        key = issue_key(bootstrap(s), user="alice")
        body = b'{"content": "' + b"x" * 100 + b'"}'
        sock = raw(s, (f"POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                       f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode())
        t0 = time.monotonic()
        got = b""
        try:
            for i in range(0, len(body), 5):
                sock.sendall(body[i:i + 5])
                time.sleep(0.25)
        except OSError:
            pass
        got, _ = read_all(sock, within=3)
        assert got.startswith(b"HTTP/1.1 408 "), got
        assert time.monotonic() - t0 < 8
        assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 0
        with api(s, key) as c:  # the service goes on
            assert c.post("/v1/memories", json={"content": "in time"}).status_code == 201


def test_accept_failures_are_logged_once_a_second_with_a_count(caplog):
    import asyncio

    from pgmem.service.app import AcceptFailures

    handler = AcceptFailures(interval=1.0)
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.WARNING, logger="pgmem.serve"):
            for _ in range(1000):
                handler(loop, {"message": "socket.accept() out of system resource",
                               "exception": OSError(24, "Too many open files")})
    finally:
        loop.close()
    lines = [r for r in caplog.records if "accept() failed" in r.getMessage()]
    assert len(lines) == 1 and "Too many open files" in lines[0].getMessage() and not lines[0].exc_info
    assert handler.count == 999  # counted for the next report


def test_retry_after_reflects_the_cause():
    """The causes a test cannot produce cheaply on a live service (an outage, a provider, a schema), by value."""
    from pgmem.errors import DatabaseUnavailable, EmbedderError, SchemaError, ValidationError
    from pgmem.service.app import error_response
    from pgmem.service.errors import Overloaded, RateLimited

    def header(exc):
        return error_response(exc).headers.get("retry-after")

    assert header(DatabaseUnavailable("database unavailable: connection refused")) == "5"
    assert header(EmbedderError("provider down")) == "10"
    assert header(SchemaError("migration missing")) == "30"
    assert header(Overloaded("full", retry_after=1)) == "1"
    assert header(RateLimited("slow down", retry_after=0.2)) == "1"
    assert header(RateLimited("slow down", retry_after=3.5)) == "4"
    assert header(ValidationError("bad")) is None  # a 422 says nothing about retrying


def _guard(s):
    """The service's Guard middleware instance (the outermost one)."""
    from pgmem.service.app import Guard

    app = s.app.middleware_stack
    while app is not None and not isinstance(app, Guard):
        app = getattr(app, "app", None)
    assert app is not None
    return app
