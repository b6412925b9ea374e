"""Transport: how the clients reach PostgreSQL, apart from what they ask (procrastinate's connector beside its
manager). :class:`pgmem.Memory` and :class:`pgmem.aio.AsyncMemory` hold the intent (checks, parameters,
results); each runs its named statements through one transport, :class:`SyncTransport` or
:class:`AsyncTransport`, two implementations of one design:

- **the pool**: psycopg_pool's ``ConnectionPool`` / ``AsyncConnectionPool``, opened after one direct probe
  connection so that a wrong DSN, a missing vector extension or a role the login may not assume fails at
  once with the server's own message; every pooled connection gets pgvector's types, pgmem's JSON decoder
  and the client's role (``SET ROLE`` through ``set_config``);
- **the check of idle connections** (:func:`idle_socket_quiet`): no round trip when nothing waits on the
  socket; on a broken connection every idle one is checked at once;
- **the identity route** (:class:`IdentityRoute`): how one call carries the pgmem user it acts for, chosen
  from the route each statement declares in ``queries.sql`` (``as_user``, ``act_as``, ``as_login``);
- **errors**: every psycopg error becomes a :mod:`pgmem.errors` class here, and nowhere else in the clients.

A transport is shared by a client and the clients made from it by ``with_identity``: the user a call acts
for is an argument of each call, not a property of the connection.
"""

from __future__ import annotations

import json
import os
import select
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads

from .errors import DatabaseUnavailable, PgmemError, SchemaError, from_psycopg, redact_dsn
from .queries import Statement, query, statement

GATEWAY_ROLE = "pgmem_gateway"
# Back to the login role for the rest of one transaction (the schema owner's calls, e.g. set_retention).
AS_LOGIN = "SET LOCAL ROLE NONE"
# The database-level setting `pgmem distribute` records on a Citus coordinator (ALTER DATABASE ... SET
# pgmem.cluster = 'citus'), read once per client: the cluster mode of docs/scaling.md.
CLUSTER_SETTING = "pgmem.cluster"
CLUSTER_QUERY = "SELECT current_setting('pgmem.cluster', true) IS NOT DISTINCT FROM 'citus' AS cluster"

_json_decode = json.JSONDecoder().decode


def json_loads(data: bytes) -> Any:
    """What ``json.loads(data)`` returns (or raises), for json and jsonb values read on pgmem's pooled
    connections: decoded as UTF-8 without json.loads' encoding detection (which, for bytes PostgreSQL sends,
    can only find UTF-8: JSON text never starts with the NUL bytes of UTF-16 or UTF-32), and ``{}`` (a
    memory's metadata by default) without parsing; a new dict each time. About half json.loads' time per
    value (bench/FINDINGS.md S9)."""
    if data == b"{}":
        return {}
    return _json_decode(data.decode())


def idle_socket_quiet(conn: Any) -> bool:
    """True when an idle pooled connection looks alive without a round trip: open, idle, and nothing waiting
    on its socket. A backend that was terminated or a server that shut down writes its FATAL message and
    closes the socket, which makes it readable; so does a notice or notification (then the caller probes
    with a query, as before). Checking this instead of sending an empty query before every call saves one
    round trip per call (0.1-0.2 ms locally, a network round trip remotely; docs/durability.md)."""
    try:
        if conn.closed or conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return False
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return False
    return not readable


def resolve_dsn(dsn: str | None) -> tuple[str, bool]:
    """The DSN to use and whether it is the embedded server: ``dsn``, else ``$PGMEM_DSN``, else the embedded
    server, started (and migrated) on demand."""
    if dsn:
        return dsn, False
    env = os.environ.get("PGMEM_DSN")
    if env:
        return env, False
    from . import embedded, migrations

    url = embedded.start().url()
    if not migrations.is_current(url):
        migrations.migrate(url)
    return url, True


# Connections that have pgvector's types (pooled ones get them in configure; a caller's conn= on first use).
_registered: weakref.WeakSet = weakref.WeakSet()


def _role_error(err: PgmemError, role: str | None) -> PgmemError:
    """``err`` with a hint when the login may not switch to ``role`` (SET ROLE refused: SQLSTATE 42501 or,
    for a role that does not exist, 22023)."""
    if role and err.sqlstate in ("42501", "22023") and err.hint is None:
        err.hint = (f"the login is not a member of role {role!r} (or it does not exist): GRANT {role} TO <login>, "
                    "or pass another role= (None: act as the login role)")
    return err


def _vector_missing() -> SchemaError:
    return SchemaError("the vector extension is missing in this database",
                       hint="run `pgmem migrate` (a superuser may need to run CREATE EXTENSION vector)")


def _register_vector(conn: psycopg.Connection) -> None:
    from pgvector.psycopg import register_vector

    try:
        register_vector(conn)
    except psycopg.ProgrammingError as exc:
        raise _vector_missing() from exc
    _registered.add(conn)


async def _register_vector_async(conn: psycopg.AsyncConnection) -> None:
    from pgvector.psycopg import register_vector_async

    try:
        await register_vector_async(conn)
    except psycopg.ProgrammingError as exc:
        raise _vector_missing() from exc
    _registered.add(conn)


# --------------------------------------------------------------------------------------------------------
# The identity route
# --------------------------------------------------------------------------------------------------------
class Call(NamedTuple):
    """How one named statement runs. ``how``: ``"statement"`` (one statement in autocommit mode on a pooled
    connection), ``"transaction"`` (BEGIN, ``pgmem.act_as(act_as)`` when ``act_as`` is not None, the
    statement, COMMIT, sent together in pipeline mode; a savepoint inside a caller's open transaction) or
    ``"as_login"`` (a transaction on a pooled connection beginning with ``SET LOCAL ROLE NONE``)."""

    how: str
    sql: str
    params: dict[str, Any]
    act_as: str | None


class _Rerouted(Exception):
    """Internal: the call was refused by its route and the transport chose another (:meth:`Transport._reroute`)."""


class IdentityRoute:
    """Where a call carries the identity it acts for: the seam of the transport between the route a
    statement declares in ``queries.sql`` and the statements sent.

    This default suits a single PostgreSQL server: on a pooled connection an ``as_user`` statement acting
    for a user is one statement, its identity set by ``pgmem.as_user`` around its first argument (a
    statement is its own transaction, as every pgmem function is; BEGIN, act_as, the call and COMMIT cost
    0.7-1.2 ms more, bench/FINDINGS.md S8). An ``act_as`` statement acting for a user is a transaction that
    runs ``pgmem.act_as`` first; a call acting for no user is one statement; ``as_login`` is a transaction
    as the login itself. A call on the caller's connection (``conn=``) is always a transaction, inside the
    caller's own if one is open. A deployment that must carry the identity in a transaction block instead
    (a transaction-local setting read on every node of a cluster) uses :class:`TransactionIdentity`, or a
    subclass of this one, set as the transport's ``identity``."""

    def plan(self, stmt: Statement, params: dict[str, Any], user_id: str | None, pooled: bool) -> Call:
        """How ``stmt`` runs with ``params`` acting for ``user_id`` (None: for no user), on a pooled
        connection (``pooled``) or on the caller's."""
        if not pooled:
            return Call("transaction", stmt.plain, params, user_id)
        if stmt.route == "as_login":
            return Call("as_login", stmt.plain, params, None)
        if user_id is None:
            return Call("statement", stmt.plain, params, None)
        if stmt.route == "as_user":
            return Call("statement", stmt.text, {**params, "pgmem_user_id": user_id}, None)
        return Call("transaction", stmt.plain, params, user_id)


class TransactionIdentity(IdentityRoute):
    """Every call acting for a user is a transaction that names the user with ``pgmem.act_as`` (a
    transaction-local ``pgmem.user_id`` setting) before the statement, whatever route the statement
    declares: one round trip still (pipeline mode), but BEGIN and COMMIT on the server. ``as_login`` stays."""

    def plan(self, stmt: Statement, params: dict[str, Any], user_id: str | None, pooled: bool) -> Call:
        if pooled and stmt.route == "as_login":
            return Call("as_login", stmt.plain, params, None)
        return Call("transaction", stmt.plain, params, user_id)


class DelegatedIdentity(TransactionIdentity):
    """Cluster mode (docs/scaling.md) for a client acting as its login (``role=None``): a pooled call acting
    for a user whose statement has a ``*_for`` twin (:data:`pgmem.queries.DELEGATED`) is that twin, one
    statement whose first argument is the user: Citus delegates it to the worker holding the user's shard
    group (one remote command, no two-phase commit, no other worker), connecting as the login. Every other
    call is a :class:`TransactionIdentity` transaction, as is every call of a client with a ``role``."""

    def plan(self, stmt: Statement, params: dict[str, Any], user_id: str | None, pooled: bool) -> Call:
        if pooled and user_id is not None and stmt.delegated is not None:
            return Call("statement", stmt.delegated, {**params, "pgmem_user_id": user_id}, None)
        return super().plan(stmt, params, user_id, pooled)


# A call refused because its route cannot carry the identity on this server (sql/current: pgmem.as_user on a
# distributed schema, a *_for call Citus did not delegate): the transport changes route and calls again.
ROUTE_REFUSED = "PGM11"
UNDEFINED_FUNCTION = "42883"


# --------------------------------------------------------------------------------------------------------
# One design, two implementations
# --------------------------------------------------------------------------------------------------------
class Transport:
    """What both transports share: the pool, the role every pooled connection switches to (None: the login
    role), the DSN (None for a pool the caller made), the identity route, and the mapping of connection
    failures to pgmem errors. No I/O here."""

    identity: IdentityRoute = IdentityRoute()
    # Cluster mode: None until read from the database (the probe connection, else the first call).
    cluster: bool | None = None

    def __init__(self, *, pool: Any = None, role: str | None = None, dsn: str | None = None) -> None:
        self.pool = pool
        self.role = role
        self.dsn = dsn

    def _set_cluster(self, flag: bool) -> None:
        """Record the cluster mode read from the database. On a Citus cluster every call acting for a user
        is a transaction (:class:`TransactionIdentity`): only SET LOCAL inside a transaction block reaches
        the workers (citus.propagate_set_commands = 'local'), so a one-statement call would carry no identity
        there (its reads would find nothing). A route set on the instance is left as it is."""
        self.cluster = flag
        if flag and self._auto_route():
            # A delegated call connects to the worker as the current role: the login itself, not a group role
            # the client switched to (NOLOGIN, such as pgmem_gateway), which the worker would refuse.
            self.identity = DelegatedIdentity() if self.role is None else TransactionIdentity()
            self._route_chosen = True

    def _auto_route(self) -> bool:
        """Whether the identity route is the transport's to choose (not one set on the instance by its user)."""
        return "identity" not in vars(self) or vars(self).get("_route_chosen", False)

    def _reroute(self, exc: psycopg.Error, how: str, attempt: int = 0) -> bool:
        """Whether a one-statement call refused with :data:`ROUTE_REFUSED` may run again by another route, set
        here: a client that took the database for a single server (it connected before ``pgmem distribute``)
        switches to cluster mode; a ``*_for`` call that Citus did not delegate, or that the schema does not have
        yet (undefined_function), becomes a transaction. A route
        set on the instance is left as it is (the error is raised)."""
        state = getattr(exc, "sqlstate", None)
        if how != "statement" or not self._auto_route():
            return False
        if attempt == 0 and isinstance(self.identity, DelegatedIdentity) and (
                state == ROUTE_REFUSED or (state == "08006" and "remote node pgmem_api@" in str(exc))):
            # A shard group moved while the call was on its way (rebalancing): the worker it reached holds the
            # user's rows no more, and its call aborted. Once more: the coordinator now routes to the new node.
            return True
        if state == UNDEFINED_FUNCTION and isinstance(self.identity, DelegatedIdentity) and "_for(" in str(exc):
            # A schema from before the *_for calls (a cluster not migrated yet, or rolled back): transactions.
            self.identity = TransactionIdentity()
            self._route_chosen = True
            return True
        if state != ROUTE_REFUSED:
            return False
        if not self.cluster:
            self._set_cluster(True)
        elif isinstance(self.identity, DelegatedIdentity):
            self.identity = TransactionIdentity()
            self._route_chosen = True
        else:
            return False
        return True

    def safe_dsn(self) -> str:
        """The DSN without user and password (for messages)."""
        return redact_dsn(self.dsn)

    def _probe_error(self, exc: psycopg.Error) -> PgmemError:
        """The error of the direct probe connection: DatabaseUnavailable when no server answered, else the
        server's error (with a hint when the role may not be assumed)."""
        if getattr(exc, "sqlstate", None) is None:
            return DatabaseUnavailable(f"could not connect to {self.safe_dsn()}: {exc}")
        return _role_error(from_psycopg(exc), self.role)

    def _pool_error(self, exc: Exception) -> PgmemError:
        return from_psycopg(exc) if isinstance(exc, psycopg.Error) else \
            PgmemError(f"could not connect to {self.safe_dsn()}: {exc}")

    def _plan(self, name: str, params: dict[str, Any], user_id: str | None, conn: Any) -> Call:
        return self.identity.plan(statement(name), params, user_id, conn is None)


class SyncTransport(Transport):
    """The transport of :class:`pgmem.Memory`: a psycopg ``ConnectionPool``."""

    @classmethod
    def connect(cls, dsn: str | None, role: str | None | type, min_size: int, max_size: int) -> SyncTransport:
        """Resolve ``dsn`` (:func:`resolve_dsn`), probe it with one direct connection, and open a pool of
        ``min_size``..``max_size`` connections. ``role``: ``...`` for the default (``pgmem_gateway`` on the
        embedded server, else the login role). Raises DatabaseUnavailable, SchemaError (no vector
        extension), PermissionDenied (a role the login may not assume), PgmemError."""
        from psycopg_pool import ConnectionPool

        conninfo, embedded = resolve_dsn(dsn)
        t = cls(role=(GATEWAY_ROLE if embedded else None) if role is ... else role, dsn=conninfo)
        # Not for the embedded server with its own role: resolve_dsn has just reached and migrated it, and the
        # probe was a connection and three type lookups more in every CLI command. The embedded server is one
        # node, never a Citus cluster.
        if embedded and role is ...:
            t._set_cluster(False)
        else:
            try:
                with psycopg.connect(conninfo, connect_timeout=10) as probe:
                    _register_vector(probe)  # SchemaError at once when the vector extension is missing
                    t._set_cluster(bool(probe.execute(CLUSTER_QUERY).fetchone()[0]))
                    if t.role:
                        probe.execute("SELECT set_config('role', %s, false)", (t.role,))
            except psycopg.Error as exc:
                raise t._probe_error(exc) from exc
        # The pool would otherwise retry a wrong DSN for 30 s and log it.
        pool = ConnectionPool(conninfo, min_size=min_size, max_size=max_size, configure=t.configure,
                              check=t.check, open=False, name="pgmem")
        try:
            pool.open(wait=True, timeout=30)
        except Exception as exc:
            pool.close()
            raise t._pool_error(exc) from exc
        t.pool = pool
        return t

    def configure(self, conn: psycopg.Connection) -> None:
        """The pool's set-up of a new connection: pgvector's types, pgmem's JSON decoder, the role."""
        _register_vector(conn)
        set_json_loads(json_loads, conn)
        if self.role:
            conn.execute("SELECT set_config('role', %s, false)", (self.role,))
        conn.commit()

    def check(self, conn: psycopg.Connection) -> None:
        """The pool's check before handing out a connection. On a broken one (server restarted, backend
        terminated) every idle connection is checked at once: psycopg_pool otherwise sleeps 1, 2, 4, ... s
        per further dead connection and, with 8 of them, gives up after 30 s instead of reconnecting.
        An idle connection is probed with a query only when its socket has something to read
        (:func:`idle_socket_quiet`)."""
        from psycopg_pool import ConnectionPool

        if idle_socket_quiet(conn):
            return
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            self.pool.check()
            raise

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    @contextmanager
    def connection(self, conn: psycopg.Connection | None = None) -> Iterator[psycopg.Connection]:
        """``conn`` (given pgvector's types on first use), else a pooled connection."""
        if conn is not None:
            if conn not in _registered:
                _register_vector(conn)
            yield conn
        else:
            with self.pool.connection() as c:
                yield c

    def rows(self, name: str, params: dict[str, Any], user_id: str | None, conn: psycopg.Connection | None = None,
             row_factory: Any = dict_row) -> list[Any]:
        """The rows of the named statement ``name`` run with ``params`` acting for ``user_id``, by the
        identity route (on ``conn``, else a pooled connection). Raises :mod:`pgmem.errors` classes only."""
        if self.cluster is None and conn is None:  # a pool the caller made: read the mode once
            try:
                with self.pool.connection() as c:
                    self._set_cluster(bool(c.execute(CLUSTER_QUERY).fetchone()[0]))
            except psycopg.Error as exc:
                raise from_psycopg(exc) from exc
        for attempt in range(4):
            try:
                return self._rows(name, params, user_id, conn, row_factory, attempt)
            except _Rerouted:
                continue
        raise SchemaError("no identity route is accepted by this server")  # pragma: no cover (two reroutes at most)

    def _rows(self, name: str, params: dict[str, Any], user_id: str | None, conn: psycopg.Connection | None,
              row_factory: Any, attempt: int = 0) -> list[Any]:
        how, sql, params, act_as = self._plan(name, params, user_id, conn)
        try:
            if how == "statement":
                with self.pool.connection() as c:
                    c.autocommit = True
                    try:
                        with c.cursor(row_factory=row_factory) as cur:
                            return cur.execute(sql, params).fetchall()
                    finally:
                        if not c.closed:
                            c.autocommit = False
            if how == "as_login":
                with self.pool.connection() as c, c.transaction():
                    c.execute(AS_LOGIN)
                    return c.cursor(row_factory=row_factory).execute(sql, params).fetchall()
            # Pipeline mode: BEGIN, act_as, the statement and COMMIT go to the server together, and the rows
            # are read after the COMMIT's sync: one round trip in all.
            with self.connection(conn) as c, c.pipeline():
                with c.transaction():
                    if act_as is not None:
                        c.execute(query("act_as"), {"user_id": act_as})
                    cur = c.cursor(row_factory=row_factory)
                    cur.execute(sql, params)
                return cur.fetchall()
        except psycopg.Error as exc:
            if self._reroute(exc, how, attempt):
                raise _Rerouted() from exc
            raise from_psycopg(exc) from exc


class AsyncTransport(Transport):
    """The transport of :class:`pgmem.aio.AsyncMemory`: a psycopg ``AsyncConnectionPool``, opened by
    :meth:`open` (or the first call) from the arguments given here."""

    def __init__(self, *, pool: Any = None, role: str | None | type = ..., dsn: str | None = None,
                 min_size: int = 1, max_size: int = 8) -> None:
        import asyncio  # here: the sync client does not load asyncio

        super().__init__(pool=pool, role=None if role is ... else role)
        self._args = (dsn, role, min_size, max_size)
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        """As :meth:`SyncTransport.connect`, awaited: a no-op when the pool is open."""
        import asyncio

        async with self._lock:
            if self.pool is not None:
                return
            from psycopg_pool import AsyncConnectionPool

            dsn, role, min_size, max_size = self._args
            conninfo, embedded = await asyncio.to_thread(resolve_dsn, dsn)
            self.role = (GATEWAY_ROLE if embedded else None) if role is ... else role
            self.dsn = conninfo
            try:
                async with await psycopg.AsyncConnection.connect(conninfo, connect_timeout=10) as probe:
                    await _register_vector_async(probe)
                    self._set_cluster(bool((await (await probe.execute(CLUSTER_QUERY)).fetchone())[0]))
                    if self.role:
                        await probe.execute("SELECT set_config('role', %s, false)", (self.role,))
            except psycopg.Error as exc:
                raise self._probe_error(exc) from exc
            pool = AsyncConnectionPool(conninfo, min_size=min_size, max_size=max_size, configure=self.configure,
                                       check=self.check, open=False, name="pgmem-async")
            try:
                await pool.open(wait=True, timeout=30)
            except Exception as exc:
                await pool.close()
                raise self._pool_error(exc) from exc
            self.pool = pool

    async def configure(self, conn: psycopg.AsyncConnection) -> None:
        """As :meth:`SyncTransport.configure`."""
        await _register_vector_async(conn)
        set_json_loads(json_loads, conn)
        if self.role:
            await conn.execute("SELECT set_config('role', %s, false)", (self.role,))
        await conn.commit()

    async def check(self, conn: psycopg.AsyncConnection) -> None:
        """As :meth:`SyncTransport.check`: on a broken connection, check every idle one at once."""
        from psycopg_pool import AsyncConnectionPool

        if idle_socket_quiet(conn):  # no round trip when nothing waits on its socket
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            await self.pool.check()
            raise

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    @asynccontextmanager
    async def connection(self, conn: psycopg.AsyncConnection | None = None) -> AsyncIterator[psycopg.AsyncConnection]:
        """As :meth:`SyncTransport.connection`; opens the pool on first use."""
        if conn is not None:
            if conn not in _registered:
                await _register_vector_async(conn)
            yield conn
        else:
            if self.pool is None:
                await self.open()
            async with self.pool.connection() as c:
                yield c

    async def rows(self, name: str, params: dict[str, Any], user_id: str | None,
                   conn: psycopg.AsyncConnection | None = None, row_factory: Any = dict_row) -> list[Any]:
        """As :meth:`SyncTransport.rows`, awaited."""
        if self.cluster is None and conn is None:  # a pool the caller made: read the mode once
            try:
                async with self.connection() as c:
                    self._set_cluster(bool((await (await c.execute(CLUSTER_QUERY)).fetchone())[0]))
            except psycopg.Error as exc:
                raise from_psycopg(exc) from exc
        for attempt in range(4):
            try:
                return await self._rows(name, params, user_id, conn, row_factory, attempt)
            except _Rerouted:
                continue
        raise SchemaError("no identity route is accepted by this server")  # pragma: no cover (two reroutes at most)

    async def _rows(self, name: str, params: dict[str, Any], user_id: str | None,
                    conn: psycopg.AsyncConnection | None, row_factory: Any, attempt: int = 0) -> list[Any]:
        how, sql, params, act_as = self._plan(name, params, user_id, conn)
        try:
            if how == "statement":
                async with self.connection(None) as c:
                    await c.set_autocommit(True)
                    try:
                        async with c.cursor(row_factory=row_factory) as cur:
                            await cur.execute(sql, params)
                            return await cur.fetchall()
                    finally:
                        if not c.closed:
                            await c.set_autocommit(False)
            if how == "as_login":
                async with self.connection(None) as c, c.transaction():
                    await c.execute(AS_LOGIN)
                    async with c.cursor(row_factory=row_factory) as cur:
                        await cur.execute(sql, params)
                        return await cur.fetchall()
            async with self.connection(conn) as c, c.pipeline():
                async with c.transaction():  # rows read after the COMMIT's sync: one round trip
                    if act_as is not None:
                        await c.execute(query("act_as"), {"user_id": act_as})
                    cur = c.cursor(row_factory=row_factory)
                    await cur.execute(sql, params)
                return await cur.fetchall()
        except psycopg.Error as exc:
            if self._reroute(exc, how, attempt):
                raise _Rerouted() from exc
            raise from_psycopg(exc) from exc
