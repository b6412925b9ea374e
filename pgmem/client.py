"""The Python client: :class:`Memory`, a thin wrapper over pgmem's stored functions.

The layers, one file each: :mod:`pgmem.records` holds the records the methods return, :mod:`pgmem.requests`
(:class:`~pgmem.requests.MemoryBase`) checks every argument and builds every statement's parameters, and
:mod:`pgmem.transport` carries a statement to the database (pool, identity route, errors). This module runs
them: most public methods run one named statement of ``queries.sql`` calling one ``pgmem.*`` function,
acting for the client's user by the route the statement declares; the methods that run more than one say so
in their docstrings. Inputs are validated before anything is sent; database errors arrive as
:mod:`pgmem.errors` classes. :mod:`pgmem.aio` is the same client for asyncio.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from . import validation as v
from .defaults import (CONTEXT_BUDGET_TOKENS, CONTEXT_K, CONTEXT_MAX_TURNS, CONTEXT_TURN_SHARE, DEFAULT_SPACE,
                       LIST_LIMIT, PENDING_TURNS, PURGE_LIMIT, RECENT_TURNS, SEARCH_K)
from .embedders import Embedder
from .errors import NotFound, VersionConflict
from .records import (MEMORY_ROWS, VECTOR_ROWS, AddResult, Context, ContextItem, HistoryEvent, MemoryRecord, Page,
                      PurgeResult, Source, Space, SpaceStats, Turn, from_row)
from .requests import KEY_FIELD, MemoryBase
from .transport import SyncTransport, resolve_dsn
from .validation import check_item, count_occurrences

class Memory(MemoryBase):
    """Shared memory for the agents of one user (tenant), stored in PostgreSQL.

    ``Memory(user_id="alice", agent_id="planner")`` connects to ``dsn``, else ``$PGMEM_DSN``, else the
    embedded server (started and migrated on demand). On the embedded server the client switches to the
    role ``pgmem_gateway`` so row-level security applies; on your own server it acts as its login role
    (``role=`` to switch). ``user_id`` is named per transaction (gateway logins); leave it None for a login
    bound to a user with ``pgmem.bind_role``. ``contextual`` (default True): text writes also store extra
    vectors used by hybrid search (docs/recall.md): True the default kinds
    (``pgmem.validation.DEFAULT_VECTOR_KINDS``), False none, or the kinds named, of ``"sentence"`` (one per
    sentence of a memory of several) and ``"context"`` (the memory with its session's previous one). Search
    works whichever kinds are stored.

    ``space`` is the embedding space (model + dims) memories live in; it is created for the embedder on
    first use when the role may create spaces. ``embedder`` defaults to all-MiniLM-L6-v2 (384 dims), loaded
    on first use of a text method. Errors: :mod:`pgmem.errors`. For asyncio: :class:`pgmem.aio.AsyncMemory`.
    """

    def __init__(self, dsn: str | None = None, *, user_id: str | None = None, agent_id: str | None = None,
                 space: str = DEFAULT_SPACE, embedder: Embedder | None = None, role: str | None | type = ...,
                 pool: Any = None, min_size: int = 1, max_size: int = 8,
                 contextual: bool | Collection[str] = True) -> None:
        self._setup(user_id, agent_id, space, embedder, contextual)
        self._space_lock = threading.Lock()
        self._owns_pool = pool is None
        if pool is None:
            self._transport = SyncTransport.connect(dsn, role, min_size, max_size)
        else:
            self._transport = SyncTransport(pool=pool, role=None if role is ... else role)

    # --- identity and lifecycle ---------------------------------------------------------------------------
    def with_identity(self, *, user_id: str | None = ..., agent_id: str | None = ...) -> Memory:
        """A client sharing this one's pool and embedder, acting for another user and/or agent."""
        return super().with_identity(user_id=user_id, agent_id=agent_id)

    def writer(self, **kw: Any):
        """A :class:`pgmem.writer.BackgroundWriter` for this client: ``submit`` returns at once, a thread
        stores the writes in batches, nothing accepted is lost (docs/durability.md). Keywords: see there."""
        from .writer import BackgroundWriter

        return BackgroundWriter(self, **kw)

    def close(self) -> None:
        """Close the connection pool (when this client created it), after draining its background writers."""
        if self._owns_pool and self.pool is not None:
            # Background writers exist only where pgmem.writer was imported: a client that never made one
            # (a CLI command) does not import it just to find none (45 ms of start-up).
            writers = sys.modules.get(f"{__package__}.writer")
            if writers is not None:
                writers.close_writers(self.pool)
            self._transport.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- spaces ---------------------------------------------------------------------------------------------
    def create_space(self, name: str, model: str, dims: int, *, hnsw_m: int = 16, hnsw_ef_construction: int = 64,
                     text_config: str = "english", conn: psycopg.Connection | None = None) -> Space:
        """Register an embedding space bound to ``model`` with ``dims`` dimensions and build its HNSW index
        (m=16, ef_construction=64: pgvector's defaults). ``text_config``: the PostgreSQL text search
        configuration of its full-text side (docs/recall.md). Idempotent; a different model or dims for an
        existing name raises :class:`EmbeddingSpaceMismatch`."""
        rows = self._rows("create_space", self._create_space_params(name, model, dims, hnsw_m, hnsw_ef_construction,
                                                                    text_config), conn)
        return from_row(Space, rows[0])

    def get_space(self, name: str | None = None, *, conn: psycopg.Connection | None = None) -> Space:
        """The embedding space ``name`` (default: this client's), without creating it. Raises NotFound."""
        return from_row(Space, self._rows("space", {"name": v.check_space_name(name or self.space_name)}, conn)[0])

    def list_spaces(self, *, conn: psycopg.Connection | None = None) -> list[Space]:
        """Every embedding space, by name (``pgmem.list_spaces``: configuration only, no row counts)."""
        return [from_row(Space, r) for r in self._rows("list_spaces", {}, conn)]

    def drop_space(self, name: str, *, conn: psycopg.Connection | None = None) -> dict[str, int]:
        """Drop the embedding space ``name`` with every user's memories, turns and history in it and its
        index (``pgmem.drop_space``; not undoable). Returns ``{"memories", "turns", "history"}`` removed.
        Only the schema owner (or a superuser) may, and only a role that sees every user's rows (superuser
        or BYPASSRLS): PermissionDenied or IdentityError otherwise; NotFound for an unknown space."""
        row = self._rows("drop_space", {"name": v.check_space_name(name)}, conn)[0]
        self._spaces.pop(name, None)
        return {k: int(row[k]) for k in ("memories", "turns", "history")}

    def space(self, *, conn: psycopg.Connection | None = None) -> Space:
        """This client's embedding space; created for the embedder when missing (if the role may).

        Read once per space name and cached for every client sharing this one's pool (``with_identity``):
        the first call runs ``pgmem.space`` and, when it raises NotFound, ``pgmem.create_space`` (two
        statements, two transactions; a concurrent creator makes the second a no-op, create_space being
        idempotent). Later calls run nothing. Methods that need the space (add, search, list, ...) call this
        first."""
        if self._space is not None:
            return self._space
        with self._space_lock:
            if self._space is None:
                try:
                    self._space = self.get_space(conn=conn)
                except NotFound:
                    emb = self.embedder
                    self._space = self.create_space(self.space_name, emb.model_name, emb.dims, conn=conn)
        return self._space

    # --- writing --------------------------------------------------------------------------------------------
    def add(self, content: str, *, metadata: Mapping[str, Any] | None = None, agent_id: str | None = None,
            session_id: str | None = None, expires_at: datetime | None = None, embedding: Any = None,
            conn: psycopg.Connection | None = None) -> AddResult:
        """Store one memory; identical content of the same user and space is not stored twice (``created``
        False, existing id). ``embedding``: a vector of the space's dims to skip the embedder.
        Raises ValidationError (bad content/metadata), DimensionMismatch, IdentityError.

        Statements: with a ``session_id``, no ``embedding`` and ``contextual``, ``pgmem.session_tail`` first
        reads the session's last memory (its text is embedded with this one as the context vector), then
        ``pgmem.add`` stores the memory; each is its own transaction unless ``conn`` is in one. A memory
        another writer adds to the session in between is not this one's context; nothing else depends on
        the read. (The space, when not cached yet: see :meth:`space`.)"""
        a = self._add_args(content, metadata, agent_id, session_id, expires_at, embedding)
        previous = self._previous_content(a.context_of, conn)
        row = self._rows("add", self._add_params(self.space(conn=conn), a, previous), conn)[0]
        return AddResult(row["id"], row["created"])

    def _previous_content(self, session_id: str | None, conn) -> str | None:
        """Content of the last memory of ``session_id`` (None without a session or when it is empty)."""
        if session_id is None:
            return None
        self.space(conn=conn)
        rows = self._rows("session_tail", self._tail_params(session_id), conn)
        return rows[-1]["content"] if rows else None

    def add_many(self, items: Sequence[str | Mapping[str, Any]], *, agent_id: str | None = None,
                 session_id: str | None = None, conn: psycopg.Connection | None = None) -> list[AddResult]:
        """Store many memories in one statement, all or nothing (at most 10,000).

        ``items``: strings, or dicts with ``content`` and optional ``metadata``, ``agent_id``, ``session_id``,
        ``expires_at``, ``created_at`` (when the memory was made, for imports; default now), ``embedding``,
        ``id`` (a client-generated UUID, the idempotency key: an item whose id this user already stored is
        not written again and returns that id with ``created`` False), ``user_id`` (a gateway writing for many
        users in one statement: each item is stored acting as its user, as ``pgmem.act_as`` allows; default
        this client's user). Every item is validated first; a bad one raises ValidationError naming its index
        and nothing is written. Returns one AddResult per item, in order. Raises IdentityError when the login
        may not act for a named user.

        Statements: one ``pgmem.session_tail`` per (user, session) of the batch whose items are embedded here
        with context (their first memory's context is the session's last stored memory), then one
        ``pgmem.add_batch`` for all items, all or nothing. As for :meth:`add`, a concurrent writer to the
        same session in between changes only which text is the context vector.
        """
        norm = self._add_many_items(items, agent_id, session_id)
        if not norm:
            return []
        space = self.space(conn=conn)
        previous = {(u, s): self._for_user(u)._previous_content(s, conn) for u, s in self._context_sessions(norm)}
        rows = self._rows("add_batch", self._add_many_params(space, norm, previous), conn)
        return [AddResult(r["id"], r["created"]) for r in rows]

    def known_contents(self, contents: Sequence[str], *, conn: psycopg.Connection | None = None) -> set[str]:
        """Which of ``contents`` (strings, at most 10,000) this user already has in this space as a memory that
        holds now: the ones :meth:`add` and :meth:`add_many` would not store again (they return the existing
        id with ``created`` False). One statement (``pgmem.known_hashes``), by SHA-256 of the content, so
        nothing is embedded: an import asks it before embedding a batch. Raises ValidationError for a bad
        content (naming its index) or too many."""
        params, by_hash = self._known_params(contents)
        if not by_hash:
            return set()
        self.space(conn=conn)
        return self._known(self._rows("known_hashes", params, conn), by_hash)

    def update(self, id: UUID | str, *, content: str | None = None, metadata: Mapping[str, Any] | None = None,
               replace_metadata: bool = False, expected_version: int | None = None, embedding: Any = None,
               conn: psycopg.Connection | None = None) -> MemoryRecord:
        """Change a memory's content (re-embedded in the same statement) and/or metadata. Metadata merges
        into the old top-level keys unless ``replace_metadata``. ``expected_version`` makes it optimistic.
        Raises NotFound, VersionConflict, DuplicateMemory, ValidationError.

        Statements: new content without an ``embedding`` is re-embedded sentence by sentence, each sentence
        named by the memory's speaker, so unless ``replace_metadata`` gives new metadata, ``pgmem.get``
        first reads the stored metadata; then ``pgmem.update`` writes, one transaction. A concurrent change
        of the speaker in between can leave sentence vectors named by the old one; pass
        ``expected_version`` to have such a write refused (VersionConflict) instead."""
        u = self._update_args(id, content, metadata, replace_metadata, expected_version, embedding)
        current = self.get(id, conn=conn) if u.needs_current else None
        space = self.space(conn=conn) if u.needs_space else None
        rows = self._rows("update", self._update_params(space, u, current), conn)
        return from_row(MemoryRecord, rows[0])

    def edit(self, id: UUID | str, old: str, new: str, *, expected_version: int | None = None,
             conn: psycopg.Connection | None = None) -> MemoryRecord:
        """Replace the single occurrence of ``old`` in a memory by ``new``: literal text, case-sensitive, no
        wildcard or escape meaning; ``new`` is inserted byte for byte. The new content is re-embedded and
        stored with it in one statement, guarded by the version read (retried twice on a concurrent change
        unless ``expected_version`` is given).

        Statements (read-modify-write): ``pgmem.get`` reads the memory, the replacement and its embedding
        are computed here, then ``pgmem.edit`` writes only if the memory still has the version read and
        still holds ``old`` once (two transactions). A concurrent writer that changes the memory in
        between makes ``pgmem.edit`` raise VersionConflict, and the whole cycle runs again (at most three
        times) on the new content; nothing is ever written over a change this call did not see.

        Raises ValidationError (empty ``old``), NeedleNotFound, AmbiguousEdit (``count``, overlapping
        occurrences included), NotFound, VersionConflict.
        """
        self._edit_args(old, new)
        attempts = 1 if expected_version is not None else 3
        for attempt in range(attempts):
            current = self.get(id, conn=conn)
            new_content = self._edited(id, current, old, new)
            params = self._edit_params(self.space(conn=conn), id, current, old, new, new_content, expected_version)
            try:
                rows = self._rows("edit", params, conn)
            except VersionConflict:
                if attempt + 1 == attempts:
                    raise
                continue
            return from_row(MemoryRecord, rows[0])
        raise AssertionError("unreachable")

    def delete(self, id: UUID | str, *, conn: psycopg.Connection | None = None) -> bool:
        """Delete one memory; False when this user has no memory with that id. History keeps a DELETE event."""
        return bool(self._rows("delete", self._delete_params(id), conn)[0]["deleted"])

    def delete_all(self, *, agent_id: str | None = None, session_id: str | None = None,
                   filter: Mapping[str, Any] | None = None, all_spaces: bool = False, confirm: bool = False,
                   conn: psycopg.Connection | None = None) -> int:
        """Delete this user's memories in a scope (agent, session, metadata filter) of this space (or of all
        spaces); returns how many. An empty scope raises ScopeRequired unless ``confirm=True``."""
        params = self._delete_all_params(agent_id, session_id, filter, all_spaces, confirm)
        if not all_spaces:
            self.space(conn=conn)
        return int(self._rows("delete_all", params, conn)[0]["deleted"])

    def put_keyed(self, items: Sequence[Mapping[str, Any]], *,
                  conn: psycopg.Connection | None = None) -> list[AddResult | None]:
        """Upsert memories by key in one statement (``pgmem.put_keyed``), in order, all or nothing (at most
        10,000): one live memory per key and user in this space, the key kept in metadata ``"pgmem:key"``.

        ``items``: dicts with ``key`` (1..1024 characters) and ``content`` (None: delete the key), optional
        ``metadata`` (replaces the old), ``session_id``, ``expires_at`` or ``ttl`` (a timedelta from the write
        itself, the database's clock; neither: no expiry of its own), ``embedding``
        (else embedded here, with sentence and context vectors as :meth:`add_many`) and ``alt_content`` (stored
        instead when another memory already holds ``content``). A key's memory is updated in place (id,
        ``created_at`` and history stay); two concurrent calls of this user in this space wait for each other
        (on the tenant's own lock row, which no other login can take), so a key never gets two memories. Returns per item an AddResult (``created`` True for a new memory) or None for a
        delete. Raises ValidationError (naming the item), DuplicateMemory (content held elsewhere and no
        ``alt_content``, or that held too), IdentityError without a user.
        """
        norm = self._put_keyed_items(items)
        if not norm:
            return []
        space = self.space(conn=conn)
        live = [it for it in norm if it["content"] is not None]
        previous = {(u, s): self._previous_content(s, conn) for u, s in self._context_sessions(live)}
        rows = self._rows("put_keyed", self._put_keyed_params(space, norm, previous), conn)
        return [AddResult(r["id"], r["created"]) if r["id"] is not None else None for r in rows]

    def get_keyed(self, keys: Sequence[str], *, conn: psycopg.Connection | None = None) -> dict[str, MemoryRecord]:
        """The live memory of each key (see :meth:`put_keyed`) that has one, as ``{key: MemoryRecord}``: one
        indexed statement. Raises ValidationError for keys that are not texts (at most 10,000)."""
        params = self._get_keyed_params(keys)
        if not params["keys"]:
            return {}
        self.space(conn=conn)
        return {r["metadata"][KEY_FIELD]: from_row(MemoryRecord, r) for r in self._rows("get_keyed", params, conn)}

    def set_expiry(self, ttls: Mapping[UUID | str, timedelta | None], *,
                   conn: psycopg.Connection | None = None) -> dict[UUID, datetime | None]:
        """Set memories' own expiry to the database's now + ttl (None: none of their own; the space's memory TTL
        applies), e.g. a time-to-live refreshed on read; ``ttls``: ``{id: timedelta | None}``. Memories that are
        missing, expired, superseded or another user's are skipped. Returns ``{id: effective expires_at}`` of
        those changed. Raises ValidationError (ids, non-positive ttls)."""
        params = self._set_expiry_params(ttls)
        if not params["ids"]:
            return {}
        return {r["id"]: r["expires_at"] for r in self._rows("set_expiry", params, conn)}

    def metadata_values(self, key: str, *, prefixes: Sequence[Sequence[str]] | None = None,
                        suffixes: Sequence[Sequence[str]] | None = None, max_depth: int | None = None,
                        limit: int = 100, offset: int = 0, conn: psycopg.Connection | None = None) -> list[list[str]]:
        """The distinct values of metadata ``key`` that are lists of labels (e.g. LangGraph namespaces) among
        this user's live memories of the space, in one statement (``pgmem.metadata_values``): only those that
        match every pattern of ``prefixes`` (from the start) and ``suffixes`` (from the end), each a list of
        labels where ``"*"`` matches any; cut to ``max_depth`` labels, deduplicated, sorted by code point, then
        ``offset`` and ``limit`` (1..10,000); at most 16 patterns in all. Returns lists of strings. Raises
        ValidationError."""
        params = self._metadata_values_params(key, prefixes, suffixes, max_depth, limit, offset)
        self.space(conn=conn)
        return [list(r["value"]) for r in self._rows("metadata_values", params, conn)]

    def clear_session(self, session_id: str, *, conn: psycopg.Connection | None = None) -> int:
        """Delete every turn of ``session_id`` of this user in the space (``pgmem.clear_session``); returns how
        many. Memories consolidated from them stay. Raises ValidationError for a bad session id."""
        params = self._clear_session_params(session_id)
        self.space(conn=conn)
        return int(self._rows("clear_session", params, conn)[0]["deleted"])

    # --- reading --------------------------------------------------------------------------------------------
    def get(self, id: UUID | str, *, conn: psycopg.Connection | None = None) -> MemoryRecord | None:
        """One memory by id, or None (also for ids of other users and expired memories)."""
        rows = self._rows("get", {"id": id}, conn)
        return from_row(MemoryRecord, rows[0]) if rows else None

    def list(self, *, agent_id: str | None = None, session_id: str | None = None,
             filter: Mapping[str, Any] | None = None, limit: int = LIST_LIMIT, cursor: str | None = None,
             created_after: datetime | None = None, created_before: datetime | None = None,
             contains: str | None = None, as_of: datetime | None = None,
             conn: psycopg.Connection | None = None) -> Page:
        """This user's memories in this space that hold now (or at ``as_of``), oldest first, ``limit``
        (1..1000) per page. ``contains`` is a literal, case-sensitive substring of the content. Time range:
        ``created_after <= t < created_before``."""
        params = self._list_params(agent_id, session_id, filter, limit, cursor, created_after, created_before,
                                   contains, as_of)
        self.space(conn=conn)
        return self._page(self._rows("list", params, conn), limit)

    def search(self, query: str | None = None, *, embedding: Any = None, k: int = SEARCH_K,
               filter: Mapping[str, Any] | None = None, agent_id: str | None = None, session_id: str | None = None,
               min_similarity: float | None = None, created_after: datetime | None = None,
               created_before: datetime | None = None, mode: str | None = None, as_of: datetime | None = None,
               min_score: float | None = None, conn: psycopg.Connection | None = None) -> list[MemoryRecord]:
        """The ``k`` memories that best answer ``query``, highest first; min(k, matching rows) of them for
        any tenant size. All agents of the user are searched unless ``agent_id`` is given.

        ``mode``: ``"hybrid"`` (default for a query text: BM25 full-text fused with vector similarity,
        ``pgmem.search_hybrid``, see docs/recall.md), ``"vector"`` (cosine similarity in [-1, 1] only,
        ``pgmem.search``; the default when only ``embedding`` is given) or ``"text"`` (BM25 only, nothing
        embedded). ``filter`` operators: docs/filters.md. ``min_similarity`` (a cosine threshold) applies to
        vector mode, which it selects when ``mode`` is not given. Only memories that hold now are searched;
        ``as_of`` (a past time) searches what held then instead (superseded facts included, deleted and
        expired ones not). ``min_score`` drops results whose ``score`` is below it, in any mode: in hybrid and
        text mode the fused score (its scale: docs/recall.md, "hit.score in each mode"), in vector mode the
        cosine similarity (then the same as ``min_similarity``, in [-1, 1]); fewer than k results may come back.
        Times (``created_after``, ``created_before``, ``as_of``) are aware datetimes or ISO 8601 strings with a
        UTC offset. Raises ValidationError (empty query, k outside 1..1000, unknown mode, min_score not a finite
        number, an ``embedding`` in text mode, a time without a UTC offset), InvalidFilter, DimensionMismatch."""
        s = self._search_args(query, embedding, k, filter, agent_id, session_id, min_similarity, created_after,
                              created_before, mode, as_of, min_score)
        params = self._search_params(self.space(conn=conn), s)
        if s.mode == "vector":
            return self._rows("search", params, conn, VECTOR_ROWS)
        return self._rows("search_hybrid", params, conn, MEMORY_ROWS)

    def history(self, id: UUID | str, *, conn: psycopg.Connection | None = None) -> list[HistoryEvent]:
        """Every event of one memory, oldest first (kept after deletion)."""
        return [from_row(HistoryEvent, r) for r in self._rows("history", {"id": id}, conn)]

    def stats(self, *, all_spaces: bool = False, conn: psycopg.Connection | None = None) -> list[SpaceStats]:
        """Counts of this user's live memories per space (this client's space unless ``all_spaces``)."""
        if not all_spaces:
            self.space(conn=conn)
        rows = self._rows("stats", self._stats_params(all_spaces), conn)
        return [from_row(SpaceStats, r) for r in rows]

    # --- validity -------------------------------------------------------------------------------------------
    def supersede(self, id: UUID | str, content: str, *, metadata: Mapping[str, Any] | None = None,
                  valid_from: datetime | None = None, expected_version: int | None = None, embedding: Any = None,
                  conn: psycopg.Connection | None = None) -> MemoryRecord:
        """Replace a fact without losing it: memory ``id`` stops holding at ``valid_from`` (default now) and
        points to a new memory with ``content`` (metadata: the old merged with ``metadata``), which is returned.
        Search then finds the new fact; ``search(..., as_of=<earlier time>)`` still finds the old one;
        :meth:`chain` and :meth:`history` show the line. Raises NotFound, VersionConflict (already superseded
        or invalidated, or ``expected_version`` differs), ValidationError."""
        params = self._supersede_params(self.space(conn=conn), id, content, metadata, valid_from, expected_version,
                                        embedding)
        return from_row(MemoryRecord, self._rows("supersede", params, conn)[0])

    def invalidate(self, id: UUID | str, *, valid_to: datetime | None = None,
                   conn: psycopg.Connection | None = None) -> MemoryRecord:
        """Mark a fact as no longer holding from ``valid_to`` (default now), with no successor; it stays
        readable by id, in history and as of earlier times. Raises NotFound, VersionConflict."""
        return from_row(MemoryRecord, self._rows("invalidate", self._invalidate_params(id, valid_to), conn)[0])

    def chain(self, id: UUID | str, *, conn: psycopg.Connection | None = None) -> list[MemoryRecord]:
        """The supersede line through memory ``id``, oldest fact first (empty for an unknown id)."""
        return [from_row(MemoryRecord, r) for r in self._rows("chain", {"id": id}, conn)]

    # --- retention ------------------------------------------------------------------------------------------
    def set_retention(self, memory_ttl: timedelta | float | None, turn_ttl: timedelta | float | None = None, *,
                      conn: psycopg.Connection | None = None) -> Space:
        """Set this space's time-to-live of memories (None: keep them) and, if given, of turns (default 7 days);
        a number is seconds. Applies at once to every memory and turn without its own ``expires_at``, counted
        from its ``created_at``. A space's retention applies to every user of the space, so it is the schema
        owner's (a superuser's) to set, since migration 0008: on this client's own connections the call runs as
        the login itself, not as the role the client switched to (the embedded server's superuser acts as
        pgmem_gateway). Raises PermissionDenied for other logins."""
        self.space(conn=conn)
        row = self._rows("set_retention", self._retention_params(memory_ttl, turn_ttl), conn)[0]
        self._space = None
        return from_row(Space, row)

    def purge(self, *, limit: int = PURGE_LIMIT, conn: psycopg.Connection | None = None) -> PurgeResult:
        """Physically remove expired memories and turns of every user (at most ``limit`` of each) and the
        history of expired memories (an EXPIRE tombstone stays); returns the counts. Expired rows are invisible
        already. Needs a superuser or BYPASSRLS role (IdentityError otherwise); schedule it (docs/lifecycle.md)."""
        return from_row(PurgeResult, self._rows("purge", self._purge_params(limit), conn)[0])

    def erase_user(self, user_id: str, *, conn: psycopg.Connection | None = None) -> dict[str, int]:
        """Right to erasure: delete everything pgmem holds of ``user_id`` (memories, extra vectors, turns,
        sources, history, role bindings) in one transaction, writing no history; returns rows deleted per
        table. Other users are untouched. Local writer journals are separate: :func:`pgmem.journal.erase_user`.
        Needs a superuser or BYPASSRLS role (IdentityError otherwise)."""
        return {r["table_name"]: int(r["rows"]) for r in self._rows("erase_user", self._erase_params(user_id), conn)}

    def export(self, *, embeddings: bool = True, conn: psycopg.Connection | None = None) -> list[dict]:
        """Everything pgmem holds of this user as JSON-ready dicts (JSONL lines): ``kind`` memory (all of them,
        superseded and expired included; with ``embedding`` and extra ``vectors`` unless ``embeddings`` is
        False), turn, history. :meth:`import_rows` reads them back."""
        return [r["row"] for r in self._rows("export_user", {"embeddings": bool(embeddings)}, conn)]

    def import_rows(self, rows: Sequence[Mapping[str, Any]], *,
                    conn: psycopg.Connection | None = None) -> dict[str, dict[str, int]]:
        """Import rows of :meth:`export` for this user, all or nothing: memories keep their ids, times,
        validity, metadata and embeddings; turns get new ids. History rows are not replayed (counted as
        skipped). Returns ``{kind: {"imported": n, "skipped": n}}``."""
        out = self._rows("import_user", self._import_rows(rows), conn)
        return {r["kind"]: {"imported": int(r["imported"]), "skipped": int(r["skipped"])} for r in out}

    # --- session turns, context, consolidation ----------------------------------------------------------------
    def append_turn(self, session_id: str, role: str, content: str, *, metadata: Mapping[str, Any] | None = None,
                    embed: bool = False, embedding: Any = None, expires_at: datetime | None = None,
                    created_at: datetime | None = None, conn: psycopg.Connection | None = None) -> Turn:
        """Append a turn (``role``: user, assistant, system or tool) to a session of this user. It expires after
        the space's turn TTL (default 7 days) unless ``expires_at``. ``embed=True`` stores its embedding.
        Raises ValidationError."""
        params = self._turn_params(self.space(conn=conn), session_id, role, content, metadata, embed, embedding,
                                   expires_at, created_at)
        return from_row(Turn, self._rows("append_turn", params, conn)[0])

    def recent_turns(self, session_id: str, *, n: int = RECENT_TURNS,
                     conn: psycopg.Connection | None = None) -> list[Turn]:
        """The last ``n`` (1..1000) live turns of a session, oldest first."""
        params = self._turns_params("recent_turns", session_id, n)
        self.space(conn=conn)
        return [from_row(Turn, r) for r in self._rows("recent_turns", params, conn)]

    def pending_turns(self, session_id: str, *, n: int = PENDING_TURNS,
                      conn: psycopg.Connection | None = None) -> list[Turn]:
        """The live turns of a session not yet consolidated (the last ``n``, 1..10000), oldest first."""
        params = self._turns_params("pending_turns", session_id, n)
        self.space(conn=conn)
        return [from_row(Turn, r) for r in self._rows("pending_turns", params, conn)]

    def context(self, query: str | None, *, session_id: str | None = None,
                budget_tokens: int = CONTEXT_BUDGET_TOKENS, max_turns: int = CONTEXT_MAX_TURNS,
                turn_share: float = CONTEXT_TURN_SHARE, k: int = CONTEXT_K, filter: Mapping[str, Any] | None = None,
                embedding: Any = None, conn: psycopg.Connection | None = None) -> Context:
        """What to put in the prompt for ``query``: the session's most recent turns (a contiguous tail, at most
        ``max_turns``, within ``turn_share`` of the budget) and the most relevant long-term memories (hybrid
        search over ``k`` candidates) in the rest, each a labelled line, never more than ``budget_tokens``
        pgmem tokens in all (``pgmem.token_count``: ASCII letter/digit runs count ceil(len/4), other non-space
        characters 1; docs/lifecycle.md). No memory repeats a turn shown. ``Context.render()`` is the text.
        Raises ValidationError."""
        params = self._context_params(self.space(conn=conn), query, session_id, budget_tokens, max_turns,
                                      turn_share, k, filter, embedding)
        return Context([from_row(ContextItem, r) for r in self._rows("context", params, conn)], budget_tokens)

    def consolidate(self, session_id: str, summarise, *, max_turns: int = PENDING_TURNS,
                    through_turn_id: int | None = None, conn: psycopg.Connection | None = None) -> list[AddResult]:
        """Turn a session's pending turns into long-term memories: ``summarise(turns)`` (any callable: a list of
        :class:`Turn` in, a list of strings or ``{"content", "metadata"}`` dicts out; pgmem calls no LLM) runs
        once on the turns not yet consolidated; its output is embedded and stored (deduplicated) with links to
        those turns (:meth:`sources`), and the turns are marked consolidated, in one transaction. Idempotent:
        with no pending turns it returns [] without calling ``summarise``; a retried or concurrent call for the
        same turns stores nothing twice. Raises ValidationError (bad summariser output), VersionConflict (some
        of the turns were consolidated meanwhile).

        Statements: ``pgmem.pending_turns`` reads the turns (one transaction), ``summarise`` runs, then
        ``pgmem.consolidate`` stores the memories, links them to the turns and marks the turns, all in one
        transaction that first checks no given turn was consolidated meanwhile. Turns appended while
        ``summarise`` runs are not in this call; they are pending for the next.

        ``through_turn_id``: consolidate only the pending turns up to and including this one (what a caller that
        read :meth:`pending_turns` earlier and summarised them elsewhere has seen: the HTTP service's
        ``/consolidate``); turns after it stay pending. VersionConflict when that turn is not pending in the
        session (consolidated meanwhile, expired, or not of this session)."""
        space = self.space(conn=conn)
        turns = self._turns_through(self.pending_turns(session_id, n=max_turns, conn=conn), session_id, through_turn_id)
        if not turns:
            return []
        params = self._consolidate_params(space, session_id, turns, summarise(list(turns)))
        return [AddResult(r["id"], r["created"]) for r in self._rows("consolidate", params, conn)]

    def sources(self, id: UUID | str, *, conn: psycopg.Connection | None = None) -> list[Source]:
        """The turns a consolidated memory was made from, in order (content None once a turn is purged)."""
        return [from_row(Source, r) for r in self._rows("sources", {"id": id}, conn)]

    def token_count(self, text: str, *, conn: psycopg.Connection | None = None) -> int:
        """``pgmem.token_count(text)``: the token estimate context budgets are counted in."""
        return int(self._rows("token_count", self._token_params(text), conn)[0]["tokens"])

    def whoami(self, *, conn: psycopg.Connection | None = None) -> str | None:
        """The pgmem user this client acts as, as the database sees it (None: no identity)."""
        return self._rows("current_user_id", {}, conn)[0]["user_id"]


__all__ = ["Memory", "MemoryBase", "MemoryRecord", "AddResult", "HistoryEvent", "Space", "SpaceStats", "Page",
           "Turn", "Source", "Context", "ContextItem", "PurgeResult",
           "check_item", "count_occurrences", "resolve_dsn"]
