"""The asyncio client: :class:`AsyncMemory`, the API of :class:`pgmem.Memory` with ``await``.

Same methods, arguments, results, errors and statements as :class:`~pgmem.Memory`: both clients take
their checks and query parameters from :class:`pgmem.requests.MemoryBase`, and this module only awaits them
through :class:`pgmem.transport.AsyncTransport` (psycopg's ``AsyncConnectionPool``). Embedding (a model or an HTTP call) runs in a worker thread
(``asyncio.to_thread``), so it never blocks the event loop.

    async with AsyncMemory(user_id="alice", agent_id="planner") as mem:
        await mem.add("Alice is vegetarian")
        hits = await mem.search("what does Alice eat?")

The pool opens on ``await mem.open()``, ``async with``, :meth:`AsyncMemory.connect`, or the first call.
Every method takes ``conn=`` (an ``AsyncConnection``) so several calls can share one transaction.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from . import validation as v
from .defaults import (CONTEXT_BUDGET_TOKENS, CONTEXT_K, CONTEXT_MAX_TURNS, CONTEXT_TURN_SHARE, DEFAULT_SPACE,
                       LIST_LIMIT, PENDING_TURNS, PURGE_LIMIT, RECENT_TURNS, SEARCH_K)
from .records import (MEMORY_ROWS, VECTOR_ROWS, AddResult, Context, ContextItem, HistoryEvent, MemoryRecord, Page,
                      PurgeResult, Source, Space, SpaceStats, Turn, from_row)
from .requests import KEY_FIELD, MemoryBase
from .embedders import Embedder
from .errors import NotFound, VersionConflict
from .transport import AsyncTransport


class AsyncMemory(MemoryBase):
    """Shared memory for the agents of one user, for asyncio: :class:`pgmem.Memory`'s API, awaited.

    Arguments as for :class:`~pgmem.Memory` (``dsn``, ``user_id``, ``agent_id``, ``space``, ``embedder``,
    ``role``, ``pool`` (a psycopg ``AsyncConnectionPool``), ``min_size``, ``max_size``, ``contextual``).
    Errors: :mod:`pgmem.errors`. :meth:`writer` gives the same background writer as ``Memory.writer``,
    with awaitable methods.
    """

    def __init__(self, dsn: str | None = None, *, user_id: str | None = None, agent_id: str | None = None,
                 space: str = DEFAULT_SPACE, embedder: Embedder | None = None, role: str | None | type = ...,
                 pool: Any = None, min_size: int = 1, max_size: int = 8,
                 contextual: bool | Collection[str] = True) -> None:
        self._setup(user_id, agent_id, space, embedder, contextual)
        self._space_lock = asyncio.Lock()
        self._owns_pool = pool is None
        # Shared with the clients made by with_identity, which then use the pool once it is open.
        self._transport = AsyncTransport(pool=pool, role=role, dsn=dsn, min_size=min_size, max_size=max_size)
        self._writers: list[AsyncWriter] = []

    @classmethod
    async def connect(cls, dsn: str | None = None, **kw: Any) -> AsyncMemory:
        """``AsyncMemory(dsn, **kw)``, opened."""
        return await cls(dsn, **kw).open()

    async def open(self) -> AsyncMemory:
        """Open the connection pool (a no-op when open): one direct connection first, so a wrong DSN fails
        at once with the server's own message. Without a DSN: ``$PGMEM_DSN``, else the embedded server."""
        await self._transport.open()
        return self

    async def writer(self, **kw: Any) -> AsyncWriter:
        """The background writer of :meth:`pgmem.Memory.writer` (same batching, backpressure, journal and
        guarantees, docs/durability.md) for this client's database, identity, space and embedder, with
        awaitable ``submit``, ``flush`` and ``close`` that never block the event loop. It runs in a thread
        with a small pool of its own (2 connections); ``close()`` of this client drains it."""
        await self.open()
        from .client import Memory

        sync = await asyncio.to_thread(
            Memory, self.dsn, user_id=self.user_id, agent_id=self.agent_id, space=self.space_name,
            embedder=self._embedder, role=self.role, min_size=1, max_size=2, contextual=self.vector_kinds)
        w = AsyncWriter(sync, sync.writer(**kw))
        self._writers.append(w)
        return w

    async def close(self) -> None:
        """Close the connection pool (when this client created it), after draining its writers."""
        writers, self._writers[:] = list(self._writers), []
        for w in writers:
            await w.close()
        if self._owns_pool and self.pool is not None:
            await self._transport.close()

    async def __aenter__(self) -> AsyncMemory:
        return await self.open()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def with_identity(self, *, user_id: str | None = ..., agent_id: str | None = ...) -> AsyncMemory:
        """A client sharing this one's pool and embedder, acting for another user and/or agent."""
        return super().with_identity(user_id=user_id, agent_id=agent_id)

    @staticmethod
    async def _off_loop(fn, *args: Any) -> Any:
        """Run a parameter builder that may call the embedder in a worker thread."""
        return await asyncio.to_thread(fn, *args)

    # --- spaces ---------------------------------------------------------------------------------------------
    async def create_space(self, name: str, model: str, dims: int, *, hnsw_m: int = 16,
                           hnsw_ef_construction: int = 64, text_config: str = "english",
                           conn: psycopg.AsyncConnection | None = None) -> Space:
        """As :meth:`pgmem.Memory.create_space`."""
        rows = await self._rows("create_space", self._create_space_params(name, model, dims, hnsw_m,
                                                                          hnsw_ef_construction, text_config), conn)
        return from_row(Space, rows[0])

    async def get_space(self, name: str | None = None, *, conn: psycopg.AsyncConnection | None = None) -> Space:
        """As :meth:`pgmem.Memory.get_space`."""
        return from_row(Space, (await self._rows("space", {"name": v.check_space_name(name or self.space_name)}, conn))[0])

    async def list_spaces(self, *, conn: psycopg.AsyncConnection | None = None) -> list[Space]:
        """As :meth:`pgmem.Memory.list_spaces`."""
        return [from_row(Space, r) for r in await self._rows("list_spaces", {}, conn)]

    async def drop_space(self, name: str, *, conn: psycopg.AsyncConnection | None = None) -> dict[str, int]:
        """As :meth:`pgmem.Memory.drop_space`."""
        row = (await self._rows("drop_space", {"name": v.check_space_name(name)}, conn))[0]
        self._spaces.pop(name, None)
        return {k: int(row[k]) for k in ("memories", "turns", "history")}

    async def space(self, *, conn: psycopg.AsyncConnection | None = None) -> Space:
        """As :meth:`pgmem.Memory.space`."""
        if self._space is not None:
            return self._space
        async with self._space_lock:
            if self._space is None:
                try:
                    self._space = await self.get_space(conn=conn)
                except NotFound:
                    emb = await asyncio.to_thread(getattr, self, "embedder")  # may load a model
                    self._space = await self.create_space(self.space_name, emb.model_name, emb.dims, conn=conn)
        return self._space

    # --- writing --------------------------------------------------------------------------------------------
    async def add(self, content: str, *, metadata: Mapping[str, Any] | None = None, agent_id: str | None = None,
                  session_id: str | None = None, expires_at: datetime | None = None, embedding: Any = None,
                  conn: psycopg.AsyncConnection | None = None) -> AddResult:
        """As :meth:`pgmem.Memory.add`."""
        a = self._add_args(content, metadata, agent_id, session_id, expires_at, embedding)
        previous = await self._previous_content(a.context_of, conn)
        space = await self.space(conn=conn)
        row = (await self._rows("add", await self._off_loop(self._add_params, space, a, previous), conn))[0]
        return AddResult(row["id"], row["created"])

    async def _previous_content(self, session_id: str | None, conn) -> str | None:
        if session_id is None:
            return None
        await self.space(conn=conn)
        rows = await self._rows("session_tail", self._tail_params(session_id), conn)
        return rows[-1]["content"] if rows else None

    async def add_many(self, items: Sequence[str | Mapping[str, Any]], *, agent_id: str | None = None,
                       session_id: str | None = None, conn: psycopg.AsyncConnection | None = None) -> list[AddResult]:
        """As :meth:`pgmem.Memory.add_many` (client ids included)."""
        norm = self._add_many_items(items, agent_id, session_id)
        if not norm:
            return []
        space = await self.space(conn=conn)
        previous = {(u, s): await self._for_user(u)._previous_content(s, conn) for u, s in self._context_sessions(norm)}
        params = await self._off_loop(self._add_many_params, space, norm, previous)
        return [AddResult(r["id"], r["created"]) for r in await self._rows("add_batch", params, conn)]

    async def known_contents(self, contents: Sequence[str], *,
                             conn: psycopg.AsyncConnection | None = None) -> set[str]:
        """As :meth:`pgmem.Memory.known_contents`."""
        params, by_hash = self._known_params(contents)
        if not by_hash:
            return set()
        await self.space(conn=conn)
        return self._known(await self._rows("known_hashes", params, conn), by_hash)

    async def put_keyed(self, items: Sequence[Mapping[str, Any]], *,
                        conn: psycopg.AsyncConnection | None = None) -> list[AddResult | None]:
        """As :meth:`pgmem.Memory.put_keyed`."""
        norm = self._put_keyed_items(items)
        if not norm:
            return []
        space = await self.space(conn=conn)
        live = [it for it in norm if it["content"] is not None]
        previous = {(u, s): await self._previous_content(s, conn) for u, s in self._context_sessions(live)}
        params = await self._off_loop(self._put_keyed_params, space, norm, previous)
        return [AddResult(r["id"], r["created"]) if r["id"] is not None else None
                for r in await self._rows("put_keyed", params, conn)]

    async def get_keyed(self, keys: Sequence[str], *,
                        conn: psycopg.AsyncConnection | None = None) -> dict[str, MemoryRecord]:
        """As :meth:`pgmem.Memory.get_keyed`."""
        params = self._get_keyed_params(keys)
        if not params["keys"]:
            return {}
        await self.space(conn=conn)
        return {r["metadata"][KEY_FIELD]: from_row(MemoryRecord, r) for r in await self._rows("get_keyed", params, conn)}

    async def set_expiry(self, ttls: Mapping[UUID | str, timedelta | None], *,
                         conn: psycopg.AsyncConnection | None = None) -> dict[UUID, datetime | None]:
        """As :meth:`pgmem.Memory.set_expiry`."""
        params = self._set_expiry_params(ttls)
        if not params["ids"]:
            return {}
        return {r["id"]: r["expires_at"] for r in await self._rows("set_expiry", params, conn)}

    async def metadata_values(self, key: str, *, prefixes: Sequence[Sequence[str]] | None = None,
                              suffixes: Sequence[Sequence[str]] | None = None, max_depth: int | None = None,
                              limit: int = 100, offset: int = 0,
                              conn: psycopg.AsyncConnection | None = None) -> list[list[str]]:
        """As :meth:`pgmem.Memory.metadata_values`."""
        params = self._metadata_values_params(key, prefixes, suffixes, max_depth, limit, offset)
        await self.space(conn=conn)
        return [list(r["value"]) for r in await self._rows("metadata_values", params, conn)]

    async def clear_session(self, session_id: str, *, conn: psycopg.AsyncConnection | None = None) -> int:
        """As :meth:`pgmem.Memory.clear_session`."""
        params = self._clear_session_params(session_id)
        await self.space(conn=conn)
        return int((await self._rows("clear_session", params, conn))[0]["deleted"])

    async def update(self, id: UUID | str, *, content: str | None = None, metadata: Mapping[str, Any] | None = None,
                     replace_metadata: bool = False, expected_version: int | None = None, embedding: Any = None,
                     conn: psycopg.AsyncConnection | None = None) -> MemoryRecord:
        """As :meth:`pgmem.Memory.update`."""
        u = self._update_args(id, content, metadata, replace_metadata, expected_version, embedding)
        current = await self.get(id, conn=conn) if u.needs_current else None
        space = await self.space(conn=conn) if u.needs_space else None
        params = await self._off_loop(self._update_params, space, u, current)
        return from_row(MemoryRecord, (await self._rows("update", params, conn))[0])

    async def edit(self, id: UUID | str, old: str, new: str, *, expected_version: int | None = None,
                   conn: psycopg.AsyncConnection | None = None) -> MemoryRecord:
        """As :meth:`pgmem.Memory.edit` (literal text; retried twice on a concurrent change unless
        ``expected_version`` is given)."""
        self._edit_args(old, new)
        attempts = 1 if expected_version is not None else 3
        for attempt in range(attempts):
            current = await self.get(id, conn=conn)
            new_content = self._edited(id, current, old, new)
            space = await self.space(conn=conn)
            params = await self._off_loop(self._edit_params, space, id, current, old, new, new_content,
                                          expected_version)
            try:
                rows = await self._rows("edit", params, conn)
            except VersionConflict:
                if attempt + 1 == attempts:
                    raise
                continue
            return from_row(MemoryRecord, rows[0])
        raise AssertionError("unreachable")

    async def delete(self, id: UUID | str, *, conn: psycopg.AsyncConnection | None = None) -> bool:
        """As :meth:`pgmem.Memory.delete`."""
        return bool((await self._rows("delete", self._delete_params(id), conn))[0]["deleted"])

    async def delete_all(self, *, agent_id: str | None = None, session_id: str | None = None,
                         filter: Mapping[str, Any] | None = None, all_spaces: bool = False, confirm: bool = False,
                         conn: psycopg.AsyncConnection | None = None) -> int:
        """As :meth:`pgmem.Memory.delete_all`."""
        params = self._delete_all_params(agent_id, session_id, filter, all_spaces, confirm)
        if not all_spaces:
            await self.space(conn=conn)
        return int((await self._rows("delete_all", params, conn))[0]["deleted"])

    # --- reading --------------------------------------------------------------------------------------------
    async def get(self, id: UUID | str, *, conn: psycopg.AsyncConnection | None = None) -> MemoryRecord | None:
        """As :meth:`pgmem.Memory.get`."""
        rows = await self._rows("get", {"id": id}, conn)
        return from_row(MemoryRecord, rows[0]) if rows else None

    async def list(self, *, agent_id: str | None = None, session_id: str | None = None,
                   filter: Mapping[str, Any] | None = None, limit: int = LIST_LIMIT, cursor: str | None = None,
                   created_after: datetime | None = None, created_before: datetime | None = None,
                   contains: str | None = None, as_of: datetime | None = None,
                   conn: psycopg.AsyncConnection | None = None) -> Page:
        """As :meth:`pgmem.Memory.list` (``as_of``: what held at that time)."""
        params = self._list_params(agent_id, session_id, filter, limit, cursor, created_after, created_before,
                                   contains, as_of)
        await self.space(conn=conn)
        return self._page(await self._rows("list", params, conn), limit)

    async def search(self, query: str | None = None, *, embedding: Any = None, k: int = SEARCH_K,
                     filter: Mapping[str, Any] | None = None, agent_id: str | None = None,
                     session_id: str | None = None, min_similarity: float | None = None,
                     created_after: datetime | None = None, created_before: datetime | None = None,
                     mode: str | None = None, as_of: datetime | None = None, min_score: float | None = None,
                     conn: psycopg.AsyncConnection | None = None) -> list[MemoryRecord]:
        """As :meth:`pgmem.Memory.search` (hybrid, vector or text; ``as_of``: what held at that time;
        ``min_score``: no result scoring below it)."""
        s = self._search_args(query, embedding, k, filter, agent_id, session_id, min_similarity, created_after,
                              created_before, mode, as_of, min_score)
        params = await self._off_loop(self._search_params, await self.space(conn=conn), s)
        if s.mode == "vector":
            return await self._rows("search", params, conn, VECTOR_ROWS)
        return await self._rows("search_hybrid", params, conn, MEMORY_ROWS)

    async def history(self, id: UUID | str, *, conn: psycopg.AsyncConnection | None = None) -> list[HistoryEvent]:
        """As :meth:`pgmem.Memory.history`."""
        return [from_row(HistoryEvent, r) for r in await self._rows("history", {"id": id}, conn)]

    async def stats(self, *, all_spaces: bool = False, conn: psycopg.AsyncConnection | None = None) -> list[SpaceStats]:
        """As :meth:`pgmem.Memory.stats`."""
        if not all_spaces:
            await self.space(conn=conn)
        return [from_row(SpaceStats, r) for r in await self._rows("stats", self._stats_params(all_spaces), conn)]

    # --- validity ---------------------------------------------------------------------------------------------
    async def supersede(self, id: UUID | str, content: str, *, metadata: Mapping[str, Any] | None = None,
                        valid_from: datetime | None = None, expected_version: int | None = None,
                        embedding: Any = None, conn: psycopg.AsyncConnection | None = None) -> MemoryRecord:
        """As :meth:`pgmem.Memory.supersede`: returns the successor."""
        space = await self.space(conn=conn)
        params = await self._off_loop(self._supersede_params, space, id, content, metadata, valid_from,
                                      expected_version, embedding)
        return from_row(MemoryRecord, (await self._rows("supersede", params, conn))[0])

    async def invalidate(self, id: UUID | str, *, valid_to: datetime | None = None,
                         conn: psycopg.AsyncConnection | None = None) -> MemoryRecord:
        """As :meth:`pgmem.Memory.invalidate`."""
        return from_row(MemoryRecord, (await self._rows("invalidate", self._invalidate_params(id, valid_to), conn))[0])

    async def chain(self, id: UUID | str, *, conn: psycopg.AsyncConnection | None = None) -> list[MemoryRecord]:
        """As :meth:`pgmem.Memory.chain`."""
        return [from_row(MemoryRecord, r) for r in await self._rows("chain", {"id": id}, conn)]

    # --- retention, purge, erasure, export --------------------------------------------------------------------
    async def set_retention(self, memory_ttl: timedelta | float | None, turn_ttl: timedelta | float | None = None, *,
                            conn: psycopg.AsyncConnection | None = None) -> Space:
        """As :meth:`pgmem.Memory.set_retention` (the schema owner's, run as the login itself)."""
        await self.space(conn=conn)
        row = (await self._rows("set_retention", self._retention_params(memory_ttl, turn_ttl), conn))[0]
        self._space = None
        return from_row(Space, row)

    async def purge(self, *, limit: int = PURGE_LIMIT, conn: psycopg.AsyncConnection | None = None) -> PurgeResult:
        """As :meth:`pgmem.Memory.purge` (superuser or BYPASSRLS role)."""
        return from_row(PurgeResult, (await self._rows("purge", self._purge_params(limit), conn))[0])

    async def erase_user(self, user_id: str, *, conn: psycopg.AsyncConnection | None = None) -> dict[str, int]:
        """As :meth:`pgmem.Memory.erase_user` (superuser or BYPASSRLS role)."""
        return {r["table_name"]: int(r["rows"]) for r in await self._rows("erase_user", self._erase_params(user_id), conn)}

    async def export(self, *, embeddings: bool = True, conn: psycopg.AsyncConnection | None = None) -> list[dict]:
        """As :meth:`pgmem.Memory.export`."""
        return [r["row"] for r in await self._rows("export_user", {"embeddings": bool(embeddings)}, conn)]

    async def import_rows(self, rows: Sequence[Mapping[str, Any]], *,
                          conn: psycopg.AsyncConnection | None = None) -> dict[str, dict[str, int]]:
        """As :meth:`pgmem.Memory.import_rows`."""
        out = await self._rows("import_user", self._import_rows(rows), conn)
        return {r["kind"]: {"imported": int(r["imported"]), "skipped": int(r["skipped"])} for r in out}

    # --- session turns, context, consolidation ----------------------------------------------------------------
    async def append_turn(self, session_id: str, role: str, content: str, *,
                          metadata: Mapping[str, Any] | None = None, embed: bool = False, embedding: Any = None,
                          expires_at: datetime | None = None, created_at: datetime | None = None,
                          conn: psycopg.AsyncConnection | None = None) -> Turn:
        """As :meth:`pgmem.Memory.append_turn`."""
        space = await self.space(conn=conn)
        params = await self._off_loop(self._turn_params, space, session_id, role, content, metadata, embed,
                                      embedding, expires_at, created_at)
        return from_row(Turn, (await self._rows("append_turn", params, conn))[0])

    async def recent_turns(self, session_id: str, *, n: int = RECENT_TURNS,
                           conn: psycopg.AsyncConnection | None = None) -> list[Turn]:
        """As :meth:`pgmem.Memory.recent_turns`."""
        params = self._turns_params("recent_turns", session_id, n)
        await self.space(conn=conn)
        return [from_row(Turn, r) for r in await self._rows("recent_turns", params, conn)]

    async def pending_turns(self, session_id: str, *, n: int = PENDING_TURNS,
                            conn: psycopg.AsyncConnection | None = None) -> list[Turn]:
        """As :meth:`pgmem.Memory.pending_turns`."""
        params = self._turns_params("pending_turns", session_id, n)
        await self.space(conn=conn)
        return [from_row(Turn, r) for r in await self._rows("pending_turns", params, conn)]

    async def context(self, query: str | None, *, session_id: str | None = None,
                      budget_tokens: int = CONTEXT_BUDGET_TOKENS, max_turns: int = CONTEXT_MAX_TURNS,
                      turn_share: float = CONTEXT_TURN_SHARE, k: int = CONTEXT_K,
                      filter: Mapping[str, Any] | None = None, embedding: Any = None,
                      conn: psycopg.AsyncConnection | None = None) -> Context:
        """As :meth:`pgmem.Memory.context`."""
        space = await self.space(conn=conn)
        params = await self._off_loop(self._context_params, space, query, session_id, budget_tokens, max_turns,
                                      turn_share, k, filter, embedding)
        return Context([from_row(ContextItem, r) for r in await self._rows("context", params, conn)], budget_tokens)

    async def consolidate(self, session_id: str, summarise: Callable[[list[Turn]], Any], *,
                          max_turns: int = PENDING_TURNS, through_turn_id: int | None = None,
                          conn: psycopg.AsyncConnection | None = None) -> list[AddResult]:
        """As :meth:`pgmem.Memory.consolidate`; ``summarise`` may be a plain function or a coroutine function
        (anything returning an awaitable is awaited). A plain one runs on the event loop: keep it quick, or
        make it async."""
        space = await self.space(conn=conn)
        turns = self._turns_through(await self.pending_turns(session_id, n=max_turns, conn=conn), session_id,
                                    through_turn_id)
        if not turns:
            return []
        summary = summarise(list(turns))
        if inspect.isawaitable(summary):
            summary = await summary
        params = await self._off_loop(self._consolidate_params, space, session_id, turns, summary)
        return [AddResult(r["id"], r["created"]) for r in await self._rows("consolidate", params, conn)]

    async def sources(self, id: UUID | str, *, conn: psycopg.AsyncConnection | None = None) -> list[Source]:
        """As :meth:`pgmem.Memory.sources`."""
        return [from_row(Source, r) for r in await self._rows("sources", {"id": id}, conn)]

    async def token_count(self, text: str, *, conn: psycopg.AsyncConnection | None = None) -> int:
        """As :meth:`pgmem.Memory.token_count`."""
        rows = await self._rows("token_count", self._token_params(text), conn)
        return int(rows[0]["tokens"])

    async def whoami(self, *, conn: psycopg.AsyncConnection | None = None) -> str | None:
        """As :meth:`pgmem.Memory.whoami`."""
        return (await self._rows("current_user_id", {}, conn))[0]["user_id"]


__all__ = ["AsyncMemory"]


class AsyncWriter:
    """:class:`pgmem.writer.BackgroundWriter` for asyncio: the same writer thread, awaited from the loop.

    ``await submit(content, **kw)`` returns the client id (waits, off the loop, while the queue is full,
    or raises ``QueueFull`` after the writer's ``put_timeout``); ``await flush()``; ``await close()``
    returns the :class:`pgmem.writer.WriterReport` and closes the writer's own pool.
    """

    def __init__(self, memory: Any, writer: Any) -> None:
        self._memory = memory
        self.writer = writer
        self._closed = False

    async def submit(self, content: str, **kw: Any) -> Any:
        return await asyncio.to_thread(self.writer.submit, content, **kw)

    async def flush(self, timeout: float | None = None) -> int:
        return await asyncio.to_thread(self.writer.flush, timeout)

    async def close(self, timeout: float | None = None) -> Any:
        if self._closed:
            return None
        self._closed = True
        report = await asyncio.to_thread(self.writer.close, timeout)
        await asyncio.to_thread(self._memory.close)
        return report
