"""``pgmem serve``: the HTTP API and the web dashboard, on FastAPI (uvicorn), async all the way down.

:func:`create_app` builds the ASGI application from :class:`Settings`; :func:`serve` runs it with uvicorn.
The service connects as ``pgmem_gateway`` (``SET ROLE`` on every pooled connection of one
:class:`pgmem.AsyncMemory`) and acts, per request, for the user its credential maps to: an API key's user
(or, for an admin key, one of the users it names), never a user named only in a body or query. Its own state
(keys, accounts, sessions, the request log) lives in PostgreSQL behind ``pgmem.service_*`` functions
(migration 0010). docs/service.md describes the routes, errors, limits and decisions.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import sys
import time
from collections.abc import Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

from ..defaults import DEFAULT_SPACE
from ..transport import GATEWAY_ROLE
from ..errors import PgmemError, ValidationError, redact_dsn
from .errors import (
    BadJson, BadRequest, ClientGone, MethodNotAllowed, Overloaded, PayloadTooLarge, RateLimited, RouteNotFound,
    ShareExceeded, body_of, retry_after_of, status_of,
)
from .store import HEALTH_USER, Principal, Store

log = logging.getLogger("pgmem.serve")

HEALTH_SPACE = "pgmem-health"
HEALTH_MODEL = "pgmem-health-probe"

# Per request: a callable telling whether the client has disconnected (pgmem.service.protocol puts it in the
# scope); the pool refuses such a request a connection.
CLIENT_GONE: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar("pgmem_client_gone", default=None)


@dataclass
class Settings:
    """How ``pgmem serve`` runs. Defaults are the safe ones: loopback only, no browser origin, Secure cookies.

    - ``dsn``: PostgreSQL URL (None: ``$PGMEM_DSN``, else the embedded server, started and migrated).
    - ``host``/``port``: where uvicorn binds (127.0.0.1:8080). ``public_url``: the URL people open (default
      ``http://{host}:{port}``); the setup link and the allowed Host header follow it.
    - ``cors_origins``: browser origins allowed to call the API (exact ``scheme://host[:port]``; none by
      default; ``*`` is refused). ``allowed_hosts``: extra Host header values accepted besides the public
      URL's host, ``localhost`` and ``127.0.0.1``.
    - ``space``/``embedder``: the embedding space and embedder of text requests (default: the space
      ``default`` and :func:`pgmem.default_embedder`, loaded on first use).
    - ``max_body_bytes``: request body limit (1 MiB: a batch of ~100 memories of 10 kB; the largest single
      memory, 100,000 characters, fits).
    - ``rate_limit``/``rate_burst``: per-key token bucket, requests per second and bucket size (20/s, 100),
      in this process (docs/service.md: several processes each keep their own).
    - ``audit_retention``: how long request-log rows are kept (30 days); ``audit_flush_interval`` seconds
      between writes of the buffered log (1 s).
    - ``session_ttl`` (12 h), ``setup_ttl`` (24 h), ``secure_cookies`` (True; the Secure flag), ``pool_size``
      (10 connections).
    - Overload (docs/service.md "Overload and slow clients"): ``max_in_flight`` requests at once (32; /healthz
      excepted), beyond which a request is answered 503 with ``Retry-After: 1`` before any database work;
      ``key_share``: the fraction of them one API key may hold (0.5; once three quarters of them are taken, an
      equal part per busy key; beyond it 429 with ``Retry-After: 1``);
      ``pool_timeout``: seconds a request waits for a pooled connection (2 s; then 503 with ``Retry-After: 2``).
    - ``key_cache_ttl``: seconds a verified (or unknown) API key is remembered (5 s): the rate check of a known key
      costs no query; a key revoked in this process's dashboard stops at once, one revoked elsewhere (another
      process, SQL) within this many seconds.
    - ``header_timeout`` / ``body_timeout``: seconds a client has to send a request's headers (10 s, counted from
      the connection or the request's first byte) and then its whole body (30 s); past them the server answers
      408 and closes the connection (pgmem.service.protocol, on uvicorn's h11 protocol).
    - ``forwarded_allow_ips``: the addresses of the reverse proxies whose ``X-Forwarded-For`` names the client
      (uvicorn's ``forwarded_allow_ips``, comma-separated; None: trust none, the address is the peer's). Behind a
      proxy, set it to the proxy's address: the dashboard's failed-login limit is per client address, and
      without it every client shares the proxy's.
    """

    dsn: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str | None = None
    cors_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    space: str = DEFAULT_SPACE
    embedder: Any = None
    max_body_bytes: int = 1 << 20
    rate_limit: float = 20.0
    rate_burst: int = 100
    audit_retention: timedelta = timedelta(days=30)
    audit_flush_interval: float = 1.0
    session_ttl: timedelta = timedelta(hours=12)
    setup_ttl: timedelta = timedelta(hours=24)
    secure_cookies: bool = True
    pool_size: int = 10
    forwarded_allow_ips: str | None = None
    max_in_flight: int = 32
    key_share: float = 0.5
    pool_timeout: float = 2.0
    key_cache_ttl: float = 5.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    announce: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))

    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    def hosts(self) -> set[str]:
        out = {"localhost", "127.0.0.1", "[::1]", self.host}
        out.add(urlsplit(self.base_url()).hostname or "")
        out.update(self.allowed_hosts)
        return {h.lower() for h in out if h}

    def check(self) -> None:
        for origin in self.cors_origins:
            parts = urlsplit(origin)
            if origin == "*" or parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
                    or parts.query or parts.fragment:
                raise ValidationError(f"--cors-origin takes an exact origin like https://app.example.com, got {origin!r}",
                                      field="cors_origin")
        if self.max_body_bytes < 1024:
            raise ValidationError("the body limit must be at least 1024 bytes", field="max_body_bytes")
        if self.rate_limit <= 0 or self.rate_burst < 1:
            raise ValidationError("the rate limit must be positive", field="rate_limit")
        if self.max_in_flight < 1 or not 0 < self.key_share <= 1:
            raise ValidationError("max_in_flight must be at least 1 and key_share in (0, 1]", field="max_in_flight")
        for name in ("pool_timeout", "header_timeout", "body_timeout"):
            if not getattr(self, name) > 0:
                raise ValidationError(f"{name} must be a positive number of seconds", field=name)
        if self.key_cache_ttl < 0:
            raise ValidationError("key_cache_ttl must be 0 (no cache) or more seconds", field="key_cache_ttl")

    def key_slots(self) -> int:
        """The requests in flight one API key may hold: ``key_share`` of ``max_in_flight``, at least 1."""
        return max(1, int(self.max_in_flight * self.key_share))


# ----------------------------------------------------------------------------------------------------------
# Rate limiting and the buffered request log
# ----------------------------------------------------------------------------------------------------------
class RateLimiter:
    """Token buckets per key, in this process: ``rate`` tokens per second up to ``burst``."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, float(burst)
        self._buckets: dict[str, tuple[float, float]] = {}

    def give_back(self, key: str) -> None:
        """Return the token :meth:`take` spent for ``key`` (up to ``burst``): to count only some requests, such as
        failed logins, take first (so that concurrent requests cannot all pass an empty bucket) and give back
        when the request turns out not to count."""
        tokens, last = self._buckets.get(key, (self.burst, time.monotonic()))
        self._buckets[key] = (min(self.burst, tokens + 1.0), last)

    def take(self, key: str) -> None:
        """Spend one token of ``key``'s bucket; RateLimited (with the seconds until the next token) when empty."""
        now = time.monotonic()
        tokens, last = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            raise RateLimited(f"rate limit of {self.rate:g} requests per second (burst {self.burst:g}) exceeded",
                              retry_after=(1.0 - tokens) / self.rate)
        self._buckets[key] = (tokens - 1.0, now)
        if len(self._buckets) > 100_000:  # forget idle keys rather than grow without bound
            self._buckets = {k: b for k, b in self._buckets.items() if now - b[1] < 60}


class KeyCache:
    """API keys as the database last answered for them (a Principal, or None for an unknown or revoked key),
    keyed by the key's SHA-256 digest and kept ``ttl`` seconds (0: no cache), at most ``limit`` entries.

    A key revoked through this process (the dashboard, an erasure) is forgotten at once (:meth:`forget`); one
    revoked elsewhere stops working within ``ttl`` seconds. Unknown keys are remembered too, so a flood of made-up
    keys costs one query per distinct key and ``ttl``."""

    def __init__(self, store_of: Callable[[], Store], ttl: float, limit: int = 10_000) -> None:
        self.store_of, self.ttl, self.limit = store_of, ttl, limit
        self._entries: dict[bytes, tuple[float, Principal | None]] = {}
        self.queries = 0

    async def lookup(self, key: str) -> Principal | None:
        from .store import digest

        d = digest(key)
        now = time.monotonic()
        hit = self._entries.get(d)
        if hit is not None and hit[0] > now:
            return hit[1]
        self.queries += 1
        p = await self.store_of().key_lookup(key)
        if self.ttl > 0:
            if len(self._entries) >= self.limit:
                self._entries = {k: e for k, e in self._entries.items() if e[0] > now}
                if len(self._entries) >= self.limit:
                    self._entries.clear()
            self._entries[d] = (now + self.ttl, p)
        return p

    def forget(self, *, key_id: int | None = None, user_id: str | None = None) -> None:
        """Drop the cached keys with ``key_id``, or of (or naming) ``user_id``."""
        self._entries = {d: e for d, e in self._entries.items() if e[1] is None or not (
            key_id is not None and e[1].key_id == key_id
            or user_id is not None and (e[1].user_id == user_id or user_id in e[1].users))}


class AcceptFailures:
    """The event loop's exception handler for failed ``accept()`` calls (EMFILE/ENFILE: out of file
    descriptors): one warning per second at most, with the number of failures since the last one, instead of a
    traceback per attempt; any other exception goes to the loop's default handler."""

    def __init__(self, interval: float = 1.0, on_failure: Callable[[], Any] | None = None) -> None:
        self.interval, self.on_failure = interval, on_failure
        self.count = 0
        self.logged = 0
        self._last = 0.0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if "accept" not in str(context.get("message", "")):
            return loop.default_exception_handler(context)
        self.count += 1
        if self.on_failure is not None:
            self.on_failure()
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            exc = context.get("exception")
            log.warning("accept() failed %d times since the last report (%s); new connections wait", self.count,
                        exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
            self.logged += 1
            self.count = 0


class AuditLog:
    """Request-log rows buffered in memory and written in batches (one statement per flush). At most
    ``limit`` rows wait while the database is unreachable; older ones are then dropped and counted."""

    def __init__(self, store: Store, interval: float, limit: int = 10_000) -> None:
        self.store, self.interval, self.limit = store, interval, limit
        self.pending: list[dict] = []
        self.dropped = 0
        self.written = 0
        self._task: asyncio.Task | None = None

    def record(self, entry: dict) -> None:
        self.pending.append(entry)
        if len(self.pending) > self.limit:
            drop = len(self.pending) - self.limit
            del self.pending[:drop]
            self.dropped += drop

    async def flush(self) -> int:
        batch, self.pending = self.pending, []
        if not batch:
            return 0
        try:
            n = await self.store.log(batch)
        except PgmemError as exc:
            log.warning("request log not written (%s); %d rows kept for the next try", exc, len(batch))
            self.pending[:0] = batch
            return 0
        self.written += n
        return n

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.flush()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pgmem-audit")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        await self.flush()


# ----------------------------------------------------------------------------------------------------------
# The service object: everything a request handler needs
# ----------------------------------------------------------------------------------------------------------
class Service:
    def __init__(self, settings: Settings) -> None:
        from ..aio import AsyncMemory

        self.settings = settings
        self.mem: AsyncMemory = None  # type: ignore[assignment]  # opened by start()
        self.store: Store = None  # type: ignore[assignment]
        self.limiter = RateLimiter(settings.rate_limit, settings.rate_burst)
        self.keys = KeyCache(lambda: self.store, settings.key_cache_ttl)
        # Out of file descriptors: close the connections that have waited longest for their headers.
        self.accept_failures = AcceptFailures(on_failure=lambda: _shed(settings))
        self.checkouts = 0  # pooled connections handed to requests and background work: database work begun
        self.login_limiter = RateLimiter(0.2, 10)  # failed dashboard logins per client address: 10, then one per 5 s
        self.audit = AuditLog(None, settings.audit_flush_interval)  # type: ignore[arg-type]
        self.setup_link: str | None = None
        self._maintainer: Any = None
        self._embedder_state: tuple[float, dict] | None = None
        self._shipped: list[tuple[str, str]] | None = None
        self._purge_task: asyncio.Task | None = None

    async def start(self) -> None:
        from ..aio import AsyncMemory

        conninfo = await preflight(self.settings.dsn)
        self.mem = AsyncMemory(conninfo, user_id=None, space=self.settings.space, embedder=self.settings.embedder,
                               role=GATEWAY_ROLE, max_size=self.settings.pool_size, min_size=2)
        self.store = Store(self.mem)
        self.audit.store = self.store
        await self.mem.open()
        self._bound_pool(self.mem.pool)
        asyncio.get_running_loop().set_exception_handler(self.accept_failures)
        token = await self.store.setup_begin(self.settings.setup_ttl)
        if token is not None:
            self.setup_link = f"{self.settings.base_url()}/ui/setup?token={token}"
            self.settings.announce("pgmem serve: no dashboard account exists yet. Open this one-time link to create "
                                   f"the administrator (valid {self.settings.setup_ttl.total_seconds() / 3600:g} hours):\n  {self.setup_link}")
        try:
            await self.mem.get_space(HEALTH_SPACE)
        except PgmemError:
            await self.mem.create_space(HEALTH_SPACE, HEALTH_MODEL, 3)
        self.audit.start()
        self._purge_task = asyncio.create_task(self._purge_loop(), name="pgmem-audit-purge")
        self.settings.announce(f"pgmem serve: API and dashboard on {self.settings.base_url()} "
                               f"(OpenAPI docs at {self.settings.base_url()}/docs)")

    def _bound_pool(self, pool: Any) -> None:
        """Bound the pool's wait (``pool_timeout``: psycopg_pool then raises PoolTimeout, answered 503 with
        Retry-After) and refuse a connection to a request whose client has gone (:data:`CLIENT_GONE`), so it
        begins no database work; count the connections handed out (:attr:`checkouts`)."""
        pool.timeout = self.settings.pool_timeout
        getconn = pool.getconn

        async def checked_getconn(timeout: float | None = None) -> Any:
            gone = CLIENT_GONE.get()
            if gone is not None and gone():
                raise ClientGone("the client disconnected before the request's database work began")
            self.checkouts += 1
            return await getconn(timeout)

        pool.getconn = checked_getconn

    async def stop(self) -> None:
        if self.mem is None:
            return
        if self._purge_task is not None:
            self._purge_task.cancel()
            with suppress(asyncio.CancelledError):
                await self._purge_task
        await self.audit.stop()
        if self._maintainer is not None:
            await self._maintainer.close()
        await self.mem.close()

    async def _purge_loop(self) -> None:
        while True:
            with suppress(PgmemError):
                await self.store.audit_purge(self.settings.audit_retention)
            await asyncio.sleep(3600)

    async def maintainer(self) -> Any:
        """A client on the service's login without SET ROLE, for erasure (needs superuser or BYPASSRLS)."""
        if self._maintainer is None:
            from ..aio import AsyncMemory

            self._maintainer = await AsyncMemory(self.mem.dsn, user_id=None, role=None, min_size=1, max_size=1).open()
        return self._maintainer

    # --- health --------------------------------------------------------------------------------------------
    def shipped_migrations(self) -> list[tuple[str, str]]:
        if self._shipped is None:
            from yoyo import read_migrations

            from ..migrations import sql_path

            self._shipped = [(m.id, m.hash) for m in read_migrations(str(sql_path()))]
        return self._shipped

    async def readiness(self, timeout: float = 5.0) -> tuple[bool, dict]:
        """``(ready, checks)``: database reachable, migrations current, probe write + search round trip in the
        health tenant (in a transaction that is rolled back, so it leaves nothing), all within ``timeout``
        seconds; the embedder's state is reported and never makes the service unready."""
        t0 = time.perf_counter()
        try:
            ready, checks = await asyncio.wait_for(self._database_checks(), timeout)
        except asyncio.TimeoutError:
            ready, checks = False, {"database": {"ok": False, "error": f"no answer within {timeout:g} s"}}
        checks["latency_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        checks["embedder"] = await self.embedder_state()
        return ready, checks

    async def _database_checks(self) -> tuple[bool, dict]:
        checks: dict[str, Any] = {}
        ready = True
        try:
            applied = {r["migration_hash"] for r in await self.store.migrations()}
            shipped = await asyncio.to_thread(self.shipped_migrations)
            missing = [mid for mid, h in shipped if h not in applied]
            checks["database"] = {"ok": True}
            checks["migrations"] = {"ok": not missing, "pending": missing}
            ready &= not missing
        except PgmemError as exc:
            checks["database"] = {"ok": False, "error": body_of(exc)["error"]["message"]}
            checks["migrations"] = {"ok": False, "pending": None}
            ready = False
        if checks["database"]["ok"]:
            try:
                checks["probe"] = await self._probe()
                ready &= checks["probe"]["ok"]
            except PgmemError as exc:
                checks["probe"] = {"ok": False, "error": body_of(exc)["error"]["message"]}
                ready = False
        return ready, checks

    async def _probe(self) -> dict:
        import uuid

        probe = self.mem.with_identity(user_id=HEALTH_USER, agent_id="readiness-probe")
        probe.space_name = HEALTH_SPACE
        content = f"readiness probe {uuid.uuid4()}"
        async with self.mem.pool.connection() as conn:
            async with conn.transaction(force_rollback=True):
                added = await probe.add(content, embedding=[1.0, 0.0, 0.0], conn=conn)
                hits = await probe.search(embedding=[1.0, 0.0, 0.0], k=5, mode="vector", conn=conn)
        found = any(h.id == added.id for h in hits)
        return {"ok": found, "wrote": True, "found": found}

    async def embedder_state(self) -> dict:
        """The embedding provider's state, probed at most every 30 s (one short text embedded)."""
        now = time.monotonic()
        if self._embedder_state and now - self._embedder_state[0] < 30:
            return self._embedder_state[1]
        emb = self.mem._embedder
        if emb is None:
            state = {"ok": None, "state": "not loaded yet (loaded on the first text request)"}
        else:
            try:
                await asyncio.wait_for(asyncio.to_thread(emb.embed, ["readiness"]), timeout=5)
                state = {"ok": True, "model": emb.model_name, "dims": emb.dims}
            except Exception as exc:  # a provider failure is reported, never raised
                state = {"ok": False, "model": getattr(emb, "model_name", None), "error": f"{type(exc).__name__}: {exc}"}
        self._embedder_state = (now, state)
        return state


# ----------------------------------------------------------------------------------------------------------
# ASGI middleware: request log, Host header, body size
# ----------------------------------------------------------------------------------------------------------
def needs_key(path: str) -> bool:
    """Whether ``path`` is an API route (pgmem's /v1 or Mem0's), which takes an API key."""
    return path.startswith("/v1/") or path in ("/memories", "/search") or path.startswith("/memories/")


async def preflight(dsn: str | None) -> str:
    """The DSN the service will use (``dsn``, ``$PGMEM_DSN``, else the embedded server, started and migrated),
    after checking that its login can connect and ``SET ROLE pgmem_gateway``: DatabaseUnavailable or
    PermissionDenied with the fix, at once, rather than a connection pool that never fills."""
    import psycopg

    from ..transport import resolve_dsn
    from ..errors import DatabaseUnavailable, PermissionDenied

    conninfo, _ = await asyncio.to_thread(resolve_dsn, dsn)
    where = redact_dsn(conninfo)
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo, connect_timeout=10, autocommit=True)
    except psycopg.Error as exc:
        raise DatabaseUnavailable(f"could not connect to {where}: {str(exc).strip()}") from None
    try:
        await conn.execute("SET ROLE " + GATEWAY_ROLE)
    except psycopg.Error as exc:
        login = conn.info.user
        raise PermissionDenied(f"the service's login {login!r} cannot act as {GATEWAY_ROLE}: "
                               f"{(exc.diag.message_primary or str(exc)).strip()}",
                               hint=f"as the schema owner or a superuser: GRANT {GATEWAY_ROLE} TO \"{login}\";") from None
    finally:
        await conn.close()
    return conninfo


def json_response(status: int, body: dict, headers: dict[str, str] | None = None):
    from starlette.responses import JSONResponse

    return JSONResponse(body, status_code=status, headers=headers)


def error_response(exc: PgmemError):
    """The JSON answer of ``exc``; a 503 or 429 carries ``Retry-After`` seconds by cause (errors.retry_after_of)."""
    seconds = retry_after_of(exc)
    headers = {"Retry-After": str(seconds)} if seconds is not None else None
    return json_response(status_of(exc), body_of(exc), headers)


# The dashboard runs no script and loads nothing from elsewhere; its pages may not be framed, and the setup
# link's token never leaves in a Referer header.
DASHBOARD_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
                                 b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"), (b"x-content-type-options", b"nosniff"),
]


class Guard:
    """Outermost middleware: times and logs every request (after the response: method, route template,
    status, latency, key prefix, user, account; never bodies), refuses a Host header the service does not
    serve (400) and bodies above the limit (413, by Content-Length or while reading a chunked body).

    Admission: at most ``max_in_flight`` requests at once (/healthz excepted); one more is answered 503 with
    ``Retry-After: 1`` at once, before its key is looked up; an API key holding its share of them (:meth:`share`)
    gets 429 with ``Retry-After: 1``. Every 503 and 429 leaves with a ``Retry-After`` (5 s when nothing more
    precise is known)."""

    def __init__(self, app: Any, service: Service) -> None:
        self.app, self.service = app, service
        self.hosts = service.settings.hosts()
        self.limit = service.settings.max_body_bytes
        self.max_in_flight = service.settings.max_in_flight
        self.key_slots = service.settings.key_slots()
        self.in_flight = 0
        self.per_key: dict[str, int] = {}

    def share(self, prefix: str) -> int:
        """The requests in flight the key ``prefix`` may hold now: ``key_slots()`` at most, and once the service
        is three quarters full, an equal part of the bound for each key with requests in flight (this one
        included)."""
        if self.in_flight <= self.max_in_flight * 3 // 4:
            return self.key_slots
        active = len(self.per_key) + (prefix not in self.per_key)
        return min(self.key_slots, max(1, self.max_in_flight // active))

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = {"code": 500}
        state = scope.setdefault("state", {})

        dashboard_page = scope["path"].startswith("/ui")

        async def send_wrapper(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                if dashboard_page:
                    message["headers"] = list(message.get("headers", [])) + DASHBOARD_HEADERS
                headers = message.get("headers", ())
                if message["status"] in (429, 503) and not any(k.lower() == b"retry-after" for k, _ in headers):
                    message["headers"] = list(headers) + [(b"retry-after", b"5")]
            await send(message)

        CLIENT_GONE.set(scope.get("pgmem.gone"))
        counted = scope["path"] != "/healthz"
        held: str | None = None
        if counted:
            self.in_flight += 1
        try:
            refusal = self._refusal(scope)
            if refusal is None and counted and self.in_flight > self.max_in_flight:
                refusal = Overloaded(f"the service is at its bound of {self.max_in_flight} requests in flight",
                                     retry_after=1)
            if refusal is None and needs_key(scope["path"]) and scope["method"] != "OPTIONS":
                refusal = await self._authenticate(scope, state)
                prefix = state.get("key_prefix")
                if refusal is None and prefix is not None:
                    share = self.share(prefix)
                    if self.per_key.get(prefix, 0) >= share:
                        refusal = ShareExceeded(f"this API key already has {share} requests in flight, its share of "
                                                f"the service's {self.max_in_flight}", retry_after=1)
                    else:
                        held = prefix
                        self.per_key[prefix] = self.per_key.get(prefix, 0) + 1
            if refusal is not None:
                await error_response(refusal)(scope, receive, send_wrapper)
            else:
                await self.app(scope, self._limited(receive), send_wrapper)
        finally:
            if counted:
                self.in_flight -= 1
            if held is not None:
                left = self.per_key[held] - 1
                if left:
                    self.per_key[held] = left
                else:
                    del self.per_key[held]
            route = getattr(scope.get("route"), "path", None) or self._template(scope)
            self.service.audit.record({
                "at": datetime.now(timezone.utc), "method": scope["method"],
                "route": route or "(no route)", "status": status["code"],
                "latency_ms": (time.perf_counter() - t0) * 1000, "key_prefix": state.get("key_prefix"),
                "user_id": state.get("user_id"), "account": state.get("account")})

    def _template(self, scope: dict) -> str | None:
        """The route template of a request refused before routing (never the raw path: it may hold ids)."""
        from starlette.routing import Match

        from . import api

        for route in (*api.router.routes, *api.mem0_router.routes):
            if route.matches(scope)[0] is Match.FULL:
                return route.path
        return None

    async def _authenticate(self, scope: dict, state: dict) -> PgmemError | None:
        """The API key of an API request, looked up (and its rate spent) before the body is read, so an
        unauthenticated or throttled caller costs no parsing; the Principal waits in the request state."""
        from starlette.requests import Request

        from .api import lookup_principal

        try:
            state["principal"] = await lookup_principal(Request(scope))
        except PgmemError as exc:
            return exc
        return None

    def _refusal(self, scope: dict) -> PgmemError | None:
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1").lower()
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        if name not in self.hosts:
            return BadRequest(f"this server does not serve host {host!r}", field="host",
                                   hint="start pgmem serve with --allowed-host NAME or --public-url URL")
        length = headers.get(b"content-length")
        if length is not None:
            try:
                n = int(length)
            except ValueError:
                return BadJson("Content-Length is not a number", field="content-length")
            if n > self.limit:
                return PayloadTooLarge(f"request body of {n} bytes is above the limit of {self.limit} bytes",
                                       field="body")
        return None

    def _limited(self, receive: Callable) -> Callable:
        seen = 0
        limit = self.limit

        async def wrapped() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    from starlette.exceptions import HTTPException

                    raise HTTPException(413, f"request body above the limit of {limit} bytes")
            return message

        return wrapped


# ----------------------------------------------------------------------------------------------------------
# The application
# ----------------------------------------------------------------------------------------------------------
def create_app(settings: Settings | None = None) -> Any:
    """The ASGI application of ``pgmem serve`` (FastAPI). Opening the database, printing the setup link and
    starting the request-log writer happen in its lifespan (uvicorn runs it)."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.middleware.cors import CORSMiddleware

    from . import api, dashboard

    settings = settings or Settings()
    settings.check()
    service = Service(settings)

    @asynccontextmanager
    async def lifespan(app: Any):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="pgmem", version=_version(), lifespan=lifespan,
                  description="Shared, durable memory for fleets of AI agents, on PostgreSQL and pgvector. "
                              "Authenticate with `Authorization: Bearer <API key>` (keys are issued in the dashboard).")
    app.state.service = service

    def respond(request, exc: PgmemError):
        """JSON for the API, a page for the dashboard."""
        if request.url.path.startswith("/ui"):
            return dashboard.error_page(request, exc)
        return error_response(exc)

    @app.exception_handler(PgmemError)
    async def pgmem_error(request, exc: PgmemError):
        return respond(request, exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return respond(request, BadJson(f"the body is not valid JSON: {first.get('ctx', {}).get('error', 'parse error')}",
                                            field="body"))
        loc = [str(x) for x in first.get("loc", ()) if x not in ("body", "query", "path", "header")]
        where = ".".join(loc) or "body"
        return respond(request, ValidationError(f"{where}: {first.get('msg', 'invalid')}", field=where))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            err: PgmemError = RouteNotFound(f"no route {request.method} {request.url.path}")
        elif exc.status_code == 405:
            err = MethodNotAllowed(f"method {request.method} is not allowed on {request.url.path}")
        elif exc.status_code == 413:
            err = PayloadTooLarge(str(exc.detail), field="body")
        elif exc.status_code == 400:
            err = BadJson(str(exc.detail), field="body")
        else:
            return json_response(exc.status_code, {"error": {"type": "HTTPError", "code": str(exc.status_code),
                                                             "message": str(exc.detail), "hint": None, "field": None}})
        return respond(request, err)

    @app.exception_handler(Exception)
    async def unexpected(request, exc: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        if request.url.path.startswith("/ui"):
            return dashboard.error_page(request, exc)
        return json_response(500, {"error": {"type": "InternalError", "code": "internal",
                                             "message": "internal server error (logged on the server)",
                                             "hint": None, "field": None}})

    app.include_router(api.router)
    app.include_router(api.mem0_router)
    app.include_router(dashboard.router)
    app.include_router(dashboard.root)

    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_credentials=False,
                           allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "X-API-Key", "X-Pgmem-User"], max_age=600)
    else:
        app.add_middleware(NoCors)
    app.add_middleware(Guard, service=service)
    return app


class NoCors:
    """Without ``--cors-origin`` no browser origin may call the API: a preflight is refused (403) and no
    response carries an Access-Control-Allow-Origin header."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and scope["method"] == "OPTIONS":
            headers = dict(scope["headers"])
            if b"origin" in headers and b"access-control-request-method" in headers:
                from .errors import Forbidden

                return await error_response(Forbidden("no browser origin is allowed to call this API",
                                                      hint="start pgmem serve with --cors-origin ORIGIN"))(scope, receive, send)
        await self.app(scope, receive, send)


def _version() -> str:
    from .. import __version__

    return __version__


def protocol_of(settings: Settings) -> type:
    """The HTTP protocol class of the service (uvicorn's h11 with the header and body deadlines of
    ``settings``), one per Settings object."""
    from .protocol import deadline_protocol

    cls = settings.__dict__.get("_protocol")
    if cls is None:
        cls = settings.__dict__["_protocol"] = deadline_protocol(settings.header_timeout, settings.body_timeout)
    return cls


def _shed(settings: Settings) -> int:
    from .protocol import shed_slowest

    return shed_slowest(protocol_of(settings), 16)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's settings for the service: the client address is the peer's unless ``forwarded_allow_ips``
    names the proxies to trust (uvicorn's own default trusts X-Forwarded-For from 127.0.0.1); the HTTP protocol
    is :func:`protocol_of`'s, with the header and body deadlines."""
    return {"host": settings.host, "port": settings.port, "log_level": "warning", "http": protocol_of(settings),
            "proxy_headers": settings.forwarded_allow_ips is not None,
            "forwarded_allow_ips": settings.forwarded_allow_ips, "server_header": False, "date_header": True}


def serve(settings: Settings) -> None:
    """Run the service with uvicorn until interrupted (Ctrl-C)."""
    import uvicorn

    settings.check()
    settings.dsn = asyncio.run(preflight(settings.dsn))  # a clear error before uvicorn starts
    app = create_app(settings)
    uvicorn.run(app, **uvicorn_options(settings))
