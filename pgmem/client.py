"""The Python client: a thin wrapper over pgmem's stored functions.

Each public method runs one statement calling one ``pgmem.*`` function (see ``queries.sql``), inside a
transaction that first names the user (``pgmem.act_as``) when the client acts for one. Inputs are
validated before anything is sent; database errors arrive as :mod:`pgmem.errors` classes.
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import validation as v
from .embedders import Embedder, default_embedder
from .errors import (
    AmbiguousEdit,
    DatabaseUnavailable,
    DimensionMismatch,
    EmbedderError,
    EmbeddingSpaceMismatch,
    NeedleNotFound,
    NotFound,
    PgmemError,
    SchemaError,
    ValidationError,
    VersionConflict,
    from_psycopg,
)
from .queries import query

DEFAULT_SPACE = "default"
GATEWAY_ROLE = "pgmem_gateway"


# --------------------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryRecord:
    """One memory. Search results also carry ``similarity``, the cosine similarity of the memory's embedding to
    the query in [-1, 1]; hybrid and text search add ``score`` (the fused rank score, higher is better),
    ``text_score`` (raw BM25) and ``vector_score`` (best sentence + context cosine, in [-2, 2])."""

    id: UUID
    user_id: str
    space: str
    agent_id: str | None
    session_id: str | None
    content: str
    metadata: dict
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    version: int
    similarity: float | None = None
    score: float | None = None
    text_score: float | None = None
    vector_score: float | None = None


@dataclass(frozen=True)
class AddResult:
    """The id of an added memory, and whether it was new (False: identical content already existed)."""

    id: UUID
    created: bool


@dataclass(frozen=True)
class HistoryEvent:
    event_id: int
    memory_id: UUID
    event: str
    old_content: str | None
    new_content: str | None
    old_metadata: dict | None
    new_metadata: dict | None
    actor_agent_id: str | None
    actor_role: str
    created_at: datetime


@dataclass(frozen=True)
class Space:
    space_id: int
    name: str
    model: str
    dims: int
    distance: str
    index_kind: str
    hnsw_m: int | None
    hnsw_ef_construction: int | None
    created_at: datetime
    text_config: str | None = None


@dataclass(frozen=True)
class SpaceStats:
    space: str
    memories: int
    agents: int
    sessions: int
    oldest: datetime | None
    newest: datetime | None


@dataclass(frozen=True)
class Page:
    """A page of :meth:`Memory.list`; pass ``next_cursor`` back as ``cursor`` for the next (None: last page)."""

    items: list[MemoryRecord]
    next_cursor: str | None


def _row(cls, row: Mapping[str, Any]):
    return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in row})


# --------------------------------------------------------------------------------------------------------
# Connections
# --------------------------------------------------------------------------------------------------------
def resolve_dsn(dsn: str | None) -> tuple[str, bool]:
    """The DSN to use and whether it is the embedded server: ``dsn``, else ``$PGMEM_DSN``, else the embedded
    server, started (and migrated) on demand."""
    if dsn:
        return dsn, False
    env = os.environ.get("PGMEM_DSN")
    if env:
        return env, False
    from . import migrations, server

    url = server.start().url()
    migrations.migrate(url)
    return url, True


_registered: weakref.WeakSet = weakref.WeakSet()


def _register_vector(conn: psycopg.Connection) -> None:
    from pgvector.psycopg import register_vector

    try:
        register_vector(conn)
    except psycopg.ProgrammingError as exc:
        raise SchemaError("the vector extension is missing in this database",
                          hint="run `pgmem migrate` (a superuser may need to run CREATE EXTENSION vector)") from exc
    _registered.add(conn)


SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+")
MAX_SENTENCE_VECTORS = 32


def extra_texts(content: str, metadata: Mapping[str, Any] | None, previous: str | None) -> list[tuple[str, str]]:
    """The extra texts embedded with a memory for hybrid recall (docs/recall.md), as ``(kind, text)``:

    - ``sentence``: each sentence (split after ``.``, ``!`` or ``?``) of a memory of two or more sentences,
      at most 32, prefixed with ``metadata["speaker"] + ": "`` when the memory names a speaker;
    - ``context``: the previous memory of the same session, a newline, then this memory.
    """
    out: list[tuple[str, str]] = []
    sentences = [part.strip() for part in SENTENCE_SPLIT.split(content) if part.strip()]
    if len(sentences) > 1:
        speaker = metadata.get("speaker") if metadata else None
        for sentence in sentences[:MAX_SENTENCE_VECTORS]:
            if isinstance(speaker, str) and speaker and not sentence.startswith(speaker):
                sentence = f"{speaker}: {sentence}"
            out.append(("sentence", sentence))
    if previous is not None:
        out.append(("context", f"{previous}\n{content}"))
    return out


def count_occurrences(haystack: str, needle: str) -> int:
    """Occurrences of ``needle`` in ``haystack`` as literal, case-sensitive text, overlapping ones included
    (``"aa"`` in ``"aaa"`` is 2). Same rule as ``pgmem.count_occurrences`` in SQL."""
    if needle == "":
        raise ValidationError("the text to replace must not be empty", field="old")
    count, pos = 0, haystack.find(needle)
    while pos != -1:
        count += 1
        pos = haystack.find(needle, pos + 1)
    return count


class Memory:
    """Shared memory for the agents of one user (tenant), stored in PostgreSQL.

    ``Memory(user_id="alice", agent_id="planner")`` connects to ``dsn``, else ``$PGMEM_DSN``, else the
    embedded server (started and migrated on demand). On the embedded server the client switches to the
    role ``pgmem_gateway`` so row-level security applies; on your own server it acts as its login role
    (``role=`` to switch). ``user_id`` is named per transaction (gateway logins); leave it None for a login
    bound to a user with ``pgmem.bind_role``. ``contextual`` (default True): text writes also store a vector
    per sentence and one with the session's previous memory, used by hybrid search (docs/recall.md).

    ``space`` is the embedding space (model + dims) memories live in; it is created for the embedder on
    first use when the role may create spaces. ``embedder`` defaults to all-MiniLM-L6-v2 (384 dims), loaded
    on first use of a text method. Errors: :mod:`pgmem.errors`.
    """

    def __init__(self, dsn: str | None = None, *, user_id: str | None = None, agent_id: str | None = None,
                 space: str = DEFAULT_SPACE, embedder: Embedder | None = None, role: str | None | type = ...,
                 pool: Any = None, min_size: int = 1, max_size: int = 8, contextual: bool = True) -> None:
        self.user_id = v.check_id(user_id, "user_id")
        self.agent_id = v.check_id(agent_id, "agent_id")
        self.space_name = space
        self.contextual = contextual
        self._embedder = embedder
        self._space: Space | None = None
        self._space_lock = threading.Lock()
        self._owns_pool = pool is None
        if pool is None:
            from psycopg_pool import ConnectionPool

            conninfo, embedded = resolve_dsn(dsn)
            self.role = (GATEWAY_ROLE if embedded else None) if role is ... else role
            self.dsn = conninfo
            try:  # one direct attempt first, so a wrong DSN fails at once with the server's own message
                with psycopg.connect(conninfo, connect_timeout=10) as probe:
                    _register_vector(probe)  # SchemaError at once when the vector extension is missing
            except psycopg.Error as exc:
                raise DatabaseUnavailable(f"could not connect to {self._safe_dsn()}: {exc}") from exc
            pool = ConnectionPool(conninfo, min_size=min_size, max_size=max_size, configure=self._configure,
                                  check=self._check, open=False, name="pgmem")
            try:
                pool.open(wait=True, timeout=30)
            except Exception as exc:
                pool.close()
                raise from_psycopg(exc) if isinstance(exc, psycopg.Error) else \
                    PgmemError(f"could not connect to {self._safe_dsn()}: {exc}") from exc
        else:
            self.role = None if role is ... else role
            self.dsn = None
        self.pool = pool

    def _safe_dsn(self) -> str:
        return (self.dsn or "").split("@")[-1]

    def _check(self, conn: psycopg.Connection) -> None:
        """The pool's check before handing out a connection. On a broken one (server restarted, backend
        terminated) every idle connection is checked at once: psycopg_pool otherwise sleeps 1, 2, 4, ... s
        per further dead connection and, with 8 of them, gives up after 30 s instead of reconnecting."""
        from psycopg_pool import ConnectionPool

        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            self.pool.check()
            raise

    def _configure(self, conn: psycopg.Connection) -> None:
        _register_vector(conn)
        if self.role:
            conn.execute("SELECT set_config('role', %s, false)", (self.role,))
        conn.commit()

    # --- identity and lifecycle ---------------------------------------------------------------------------
    def with_identity(self, *, user_id: str | None = ..., agent_id: str | None = ...) -> Memory:
        """A client sharing this one's pool and embedder, acting for another user and/or agent."""
        other = object.__new__(Memory)
        other.__dict__.update(self.__dict__)
        other._owns_pool = False
        if user_id is not ...:
            other.user_id = v.check_id(user_id, "user_id")
        if agent_id is not ...:
            other.agent_id = v.check_id(agent_id, "agent_id")
        return other

    def close(self) -> None:
        """Close the connection pool (when this client created it)."""
        if self._owns_pool and self.pool is not None:
            self.pool.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = default_embedder()
        return self._embedder

    # --- plumbing -------------------------------------------------------------------------------------------
    @contextmanager
    def _connection(self, conn: psycopg.Connection | None) -> Iterator[psycopg.Connection]:
        if conn is not None:
            if conn not in _registered:
                _register_vector(conn)
            yield conn
        else:
            with self.pool.connection() as c:
                yield c

    def _rows(self, name: str, params: dict[str, Any], conn: psycopg.Connection | None = None) -> list[dict]:
        try:
            with self._connection(conn) as c, c.transaction():
                if self.user_id is not None:
                    c.execute(query("act_as"), {"user_id": self.user_id})
                with c.cursor(row_factory=dict_row) as cur:
                    cur.execute(query(name), params)
                    return cur.fetchall()
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc

    # --- spaces ---------------------------------------------------------------------------------------------
    def create_space(self, name: str, model: str, dims: int, *, hnsw_m: int = 16, hnsw_ef_construction: int = 64,
                     text_config: str = "english", conn: psycopg.Connection | None = None) -> Space:
        """Register an embedding space bound to ``model`` with ``dims`` dimensions and build its HNSW index
        (m=16, ef_construction=64: pgvector's defaults). ``text_config``: the PostgreSQL text search
        configuration of its full-text side (docs/recall.md). Idempotent; a different model or dims for an
        existing name raises :class:`EmbeddingSpaceMismatch`."""
        rows = self._rows("create_space", {"name": name, "model": model, "dims": dims, "distance": "cosine",
                                           "hnsw_m": hnsw_m, "hnsw_ef_construction": hnsw_ef_construction,
                                           "text_config": text_config}, conn)
        return _row(Space, rows[0])

    def get_space(self, name: str | None = None, *, conn: psycopg.Connection | None = None) -> Space:
        """The embedding space ``name`` (default: this client's), without creating it. Raises NotFound."""
        return _row(Space, self._rows("space", {"name": name or self.space_name}, conn)[0])

    def space(self, *, conn: psycopg.Connection | None = None) -> Space:
        """This client's embedding space; created for the embedder when missing (if the role may)."""
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

    def _context(self, space: Space) -> str:
        return f" (space {space.name!r}, model {space.model!r})"

    def _checked_embedder(self, conn) -> tuple[Embedder, Space]:
        emb = self.embedder
        space = self.space(conn=conn)
        if emb.dims != space.dims:
            raise DimensionMismatch(f"expected {space.dims} dimensions, got {emb.dims}{self._context(space)}; "
                                    f"the embedder is {emb.model_name!r}", field="embedder")
        if emb.model_name != space.model:
            raise EmbeddingSpaceMismatch(f"space {space.name!r} holds embeddings of model {space.model!r}, "
                                         f"not {emb.model_name!r}", field="embedder")
        return emb, space

    def _embed(self, texts: Sequence[str], conn) -> tuple[np.ndarray, Space]:
        emb, space = self._checked_embedder(conn)
        try:
            out = emb.embed(list(texts))
        except DimensionMismatch as exc:
            raise DimensionMismatch(f"{exc.message}; space {space.name!r} is bound to model {space.model!r}",
                                    field="embedding") from exc
        except PgmemError:
            raise
        except Exception as exc:
            raise EmbedderError(f"embedder {emb.model_name!r} failed: {exc}") from exc
        out = np.asarray(out, dtype=np.float32)
        if out.ndim != 2 or out.shape[0] != len(texts):
            raise EmbedderError(f"embedder {emb.model_name!r} returned shape {out.shape} for {len(texts)} texts")
        for i, row in enumerate(out):
            try:
                v.check_vector(row, space.dims, context=self._context(space), index=i if len(texts) > 1 else None)
            except ValidationError as exc:
                raise EmbedderError(f"embedder {emb.model_name!r} returned a bad vector: {exc}") from exc
        return out, space

    def _vector(self, embedding: Any, conn, index: int | None = None) -> tuple[np.ndarray, Space]:
        space = self.space(conn=conn)
        return v.check_vector(embedding, space.dims, context=self._context(space), index=index), space

    # --- writing --------------------------------------------------------------------------------------------
    def add(self, content: str, *, metadata: Mapping[str, Any] | None = None, agent_id: str | None = None,
            session_id: str | None = None, expires_at: datetime | None = None, embedding: Any = None,
            conn: psycopg.Connection | None = None) -> AddResult:
        """Store one memory; identical content of the same user and space is not stored twice (``created``
        False, existing id). ``embedding``: a vector of the space's dims to skip the embedder.
        Raises ValidationError (bad content/metadata), DimensionMismatch, IdentityError."""
        v.check_content(content)
        meta = v.check_metadata(metadata)
        agent = v.check_id(agent_id, "agent_id") or self.agent_id
        v.check_id(session_id, "session_id")
        v.check_datetime(expires_at, "expires_at")
        kinds: list[str] | None = None
        extra_vecs: list | None = None
        if embedding is None:
            extras: list[tuple[str, str]] = []
            if self.contextual:
                previous = self._previous_content(session_id, conn)
                extras = extra_texts(content, meta, previous)
            vecs, space = self._embed([content] + [t for _, t in extras], conn)
            vec, model = vecs[0], space.model
            kinds, extra_vecs = [k for k, _ in extras], list(vecs[1:])
        else:
            vec, space = self._vector(embedding, conn)
            model = None
        row = self._rows("add", {"space": space.name, "content": content, "embedding": vec, "agent_id": agent,
                                 "session_id": session_id, "metadata": Jsonb(meta or {}), "expires_at": expires_at,
                                 "model": model, "vector_kinds": kinds, "vectors": extra_vecs}, conn)[0]
        return AddResult(row["id"], row["created"])

    def _previous_content(self, session_id: str | None, conn) -> str | None:
        """Content of the last memory of ``session_id`` (None without a session or when it is empty)."""
        if session_id is None:
            return None
        self.space(conn=conn)
        rows = self._rows("session_tail", {"space": self.space_name, "session_id": session_id, "n": 1}, conn)
        return rows[-1]["content"] if rows else None

    def add_many(self, items: Sequence[str | Mapping[str, Any]], *, agent_id: str | None = None,
                 session_id: str | None = None, conn: psycopg.Connection | None = None) -> list[AddResult]:
        """Store many memories in one statement, all or nothing (at most 10,000).

        ``items``: strings, or dicts with ``content`` and optional ``metadata``, ``agent_id``, ``session_id``,
        ``expires_at``, ``created_at`` (when the memory was made, for imports; default now), ``embedding``. Every item is validated first; a bad one raises ValidationError naming
        its index and nothing is written. Returns one AddResult per item, in order.
        """
        v.check_batch_size(items)
        norm: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                item = {"content": item}
            elif not isinstance(item, Mapping):
                raise ValidationError("must be a string or a mapping with 'content'", field="items", index=i)
            unknown = set(item) - {"content", "metadata", "agent_id", "session_id", "expires_at", "created_at", "embedding"}
            if unknown:
                raise ValidationError(f"unknown keys {sorted(unknown)}", field="items", index=i)
            norm.append({
                "content": v.check_content(item.get("content"), index=i),
                "metadata": v.check_metadata(item.get("metadata"), index=i) or {},
                "agent_id": v.check_id(item.get("agent_id"), "agent_id", index=i) or agent_id or self.agent_id,
                "session_id": v.check_id(item.get("session_id"), "session_id", index=i) or session_id,
                "expires_at": v.check_datetime(item.get("expires_at"), "expires_at", index=i),
                "created_at": v.check_datetime(item.get("created_at"), "created_at", index=i),
                "embedding": item.get("embedding"),
            })
        if not norm:
            return []
        space = self.space(conn=conn)
        model = None
        missing = [i for i, it in enumerate(norm) if it["embedding"] is None]
        extras: list[tuple[int, str, str]] = []  # (item, kind, text)
        if missing and self.contextual:
            last: dict[str, str | None] = {}
            for i, it in enumerate(norm):
                sess = it["session_id"]
                previous = None
                if sess is not None:
                    previous = last[sess] if sess in last else self._previous_content(sess, conn)
                    last[sess] = it["content"]
                if it["embedding"] is None:
                    extras += [(i, kind, text) for kind, text in extra_texts(it["content"], it["metadata"], previous)]
        vector_items = vector_kinds = extra_vecs = None
        if missing:
            vecs, space = self._embed([norm[i]["content"] for i in missing] + [t for _, _, t in extras], conn)
            for i, vec in zip(missing, vecs):
                norm[i]["embedding"] = vec
            if len(missing) == len(norm):
                model = space.model
            if extras:
                vector_items = [i for i, _, _ in extras]
                vector_kinds = [k for _, k, _ in extras]
                extra_vecs = list(vecs[len(missing):])
        for i, it in enumerate(norm):
            it["embedding"] = v.check_vector(it["embedding"], space.dims, context=self._context(space), index=i)
        rows = self._rows("add_batch", {
            "space": space.name, "contents": [it["content"] for it in norm],
            "embeddings": [it["embedding"] for it in norm], "agent_ids": [it["agent_id"] for it in norm],
            "session_ids": [it["session_id"] for it in norm], "metadata": [Jsonb(it["metadata"]) for it in norm],
            "expires_at": [it["expires_at"] for it in norm], "model": model,
            "created_at": [it["created_at"] for it in norm], "vector_items": vector_items,
            "vector_kinds": vector_kinds, "vectors": extra_vecs}, conn)
        return [AddResult(r["id"], r["created"]) for r in rows]

    def update(self, id: UUID | str, *, content: str | None = None, metadata: Mapping[str, Any] | None = None,
               replace_metadata: bool = False, expected_version: int | None = None, embedding: Any = None,
               conn: psycopg.Connection | None = None) -> MemoryRecord:
        """Change a memory's content (re-embedded in the same statement) and/or metadata. Metadata merges
        into the old top-level keys unless ``replace_metadata``. ``expected_version`` makes it optimistic.
        Raises NotFound, VersionConflict, DuplicateMemory, ValidationError."""
        model = None
        vec = None
        kinds = extra_vecs = None
        meta = v.check_metadata(metadata)
        if content is not None:
            v.check_content(content)
            if embedding is None:
                spoken = meta  # the speaker that names the sentences: the stored metadata, merged as SQL will
                if self.contextual and not (replace_metadata and meta is not None):
                    current = self.get(id, conn=conn)
                    spoken = {**(current.metadata if current else {}), **(meta or {})}
                vec, model, kinds, extra_vecs = self._embed_with_sentences(content, spoken, conn)
        if embedding is not None:
            vec, _ = self._vector(embedding, conn)
        rows = self._rows("update", {"id": id, "content": content, "embedding": vec,
                                     "metadata": Jsonb(meta) if meta is not None else None,
                                     "replace_metadata": replace_metadata, "expected_version": expected_version,
                                     "agent_id": self.agent_id, "model": model, "vector_kinds": kinds,
                                     "vectors": extra_vecs}, conn)
        return _row(MemoryRecord, rows[0])

    def _embed_with_sentences(self, content: str, metadata: Mapping[str, Any] | None, conn):
        """Embedding, model, and sentence vectors of changed content (an edited memory keeps no context vector)."""
        extras = extra_texts(content, metadata, None) if self.contextual else []
        vecs, space = self._embed([content] + [t for _, t in extras], conn)
        return vecs[0], space.model, [k for k, _ in extras], list(vecs[1:])

    def edit(self, id: UUID | str, old: str, new: str, *, expected_version: int | None = None,
             conn: psycopg.Connection | None = None) -> MemoryRecord:
        """Replace the single occurrence of ``old`` in a memory by ``new``: literal text, case-sensitive, no
        wildcard or escape meaning; ``new`` is inserted byte for byte. The new content is re-embedded and
        stored with it in one statement, guarded by the version read (retried twice on a concurrent change
        unless ``expected_version`` is given).

        Raises ValidationError (empty ``old``), NeedleNotFound, AmbiguousEdit (``count``, overlapping
        occurrences included), NotFound, VersionConflict.
        """
        v.check_text(old, "old")
        v.check_text(new, "new")
        if old == "":
            raise ValidationError("the text to replace must not be empty", field="old")
        attempts = 1 if expected_version is not None else 3
        for attempt in range(attempts):
            current = self.get(id, conn=conn)
            if current is None:
                raise NotFound(f"memory {id} not found")
            n = count_occurrences(current.content, old)
            if n == 0:
                raise NeedleNotFound(f"the text to replace does not occur in memory {id}")
            if n > 1:
                raise AmbiguousEdit(f"the text to replace occurs {n} times in memory {id} (overlapping occurrences "
                                    "count); give a longer, unique text", count=n)
            pos = current.content.find(old)
            new_content = current.content[:pos] + new + current.content[pos + len(old):]
            v.check_content(new_content)
            vec, model, kinds, extra_vecs = self._embed_with_sentences(new_content, current.metadata, conn)
            try:
                rows = self._rows("edit", {"id": id, "needle": old, "replacement": new, "embedding": vec,
                                           "expected_version": expected_version or current.version,
                                           "agent_id": self.agent_id, "model": model, "vector_kinds": kinds,
                                           "vectors": extra_vecs}, conn)
            except VersionConflict:
                if attempt + 1 == attempts:
                    raise
                continue
            return _row(MemoryRecord, rows[0])
        raise AssertionError("unreachable")

    def delete(self, id: UUID | str, *, conn: psycopg.Connection | None = None) -> bool:
        """Delete one memory; False when this user has no memory with that id. History keeps a DELETE event."""
        return bool(self._rows("delete", {"id": id, "agent_id": self.agent_id}, conn)[0]["deleted"])

    def delete_all(self, *, agent_id: str | None = None, session_id: str | None = None,
                   filter: Mapping[str, Any] | None = None, all_spaces: bool = False, confirm: bool = False,
                   conn: psycopg.Connection | None = None) -> int:
        """Delete this user's memories in a scope (agent, session, metadata filter) of this space (or of all
        spaces); returns how many. An empty scope raises ScopeRequired unless ``confirm=True``."""
        v.check_id(agent_id, "agent_id")
        v.check_id(session_id, "session_id")
        flt = v.check_filter(filter)
        if not all_spaces:
            self.space(conn=conn)
        return int(self._rows("delete_all", {
            "space": None if all_spaces else self.space_name, "agent_id": agent_id, "session_id": session_id,
            "filter": Jsonb(flt) if flt is not None else None, "confirm": confirm, "actor": self.agent_id},
            conn)[0]["deleted"])

    # --- reading --------------------------------------------------------------------------------------------
    def get(self, id: UUID | str, *, conn: psycopg.Connection | None = None) -> MemoryRecord | None:
        """One memory by id, or None (also for ids of other users and expired memories)."""
        rows = self._rows("get", {"id": id}, conn)
        return _row(MemoryRecord, rows[0]) if rows else None

    def list(self, *, agent_id: str | None = None, session_id: str | None = None,
             filter: Mapping[str, Any] | None = None, limit: int = 50, cursor: str | None = None,
             created_after: datetime | None = None, created_before: datetime | None = None,
             contains: str | None = None, conn: psycopg.Connection | None = None) -> Page:
        """This user's memories in this space, oldest first, ``limit`` (1..1000) per page. ``contains`` is a
        literal, case-sensitive substring of the content. Time range: ``created_after <= t < created_before``."""
        v.check_id(agent_id, "agent_id")
        v.check_id(session_id, "session_id")
        if contains is not None:
            v.check_text(contains, "contains")
        v.check_datetime(created_after, "created_after")
        v.check_datetime(created_before, "created_before")
        flt = v.check_filter(filter)
        after_ts, after_id = None, None
        if cursor:
            try:
                ts, _, raw_id = cursor.partition("|")
                after_ts, after_id = datetime.fromisoformat(ts), UUID(raw_id)
            except ValueError:
                raise ValidationError(f"not a pgmem cursor: {cursor!r}", field="cursor") from None
        self.space(conn=conn)
        rows = self._rows("list", {"space": self.space_name, "agent_id": agent_id, "session_id": session_id,
                                   "filter": Jsonb(flt) if flt is not None else None, "limit": limit,
                                   "after_created_at": after_ts, "after_id": after_id,
                                   "created_after": created_after, "created_before": created_before,
                                   "contains": contains}, conn)
        items = [_row(MemoryRecord, r) for r in rows]
        nxt = f"{items[-1].created_at.isoformat()}|{items[-1].id}" if items and len(items) == limit else None
        return Page(items, nxt)

    def search(self, query: str | None = None, *, embedding: Any = None, k: int = 10,
               filter: Mapping[str, Any] | None = None, agent_id: str | None = None, session_id: str | None = None,
               min_similarity: float | None = None, created_after: datetime | None = None,
               created_before: datetime | None = None, mode: str | None = None,
               conn: psycopg.Connection | None = None) -> list[MemoryRecord]:
        """The ``k`` memories that best answer ``query``, highest first; min(k, matching rows) of them for
        any tenant size. All agents of the user are searched unless ``agent_id`` is given.

        ``mode``: ``"hybrid"`` (default for a query text: BM25 full-text fused with vector similarity,
        ``pgmem.search_hybrid``, see docs/recall.md), ``"vector"`` (cosine similarity in [-1, 1] only,
        ``pgmem.search``; the default when only ``embedding`` is given) or ``"text"`` (BM25 only, nothing
        embedded). ``filter`` operators: docs/filters.md. ``min_similarity`` (a cosine threshold) applies to
        vector mode, which it selects when ``mode`` is not given.
        Raises ValidationError (empty query, k outside 1..1000, unknown mode), InvalidFilter, DimensionMismatch."""
        if mode is None:  # min_similarity is a cosine threshold, so it selects vector mode
            mode = "hybrid" if query is not None and min_similarity is None else "vector"
        if mode not in ("hybrid", "vector", "text"):
            raise ValidationError(f"mode must be 'hybrid', 'vector' or 'text', got {mode!r}", field="mode")
        if mode != "vector":
            return self._search_hybrid(query, embedding, k, filter, agent_id, session_id, min_similarity,
                                       created_after, created_before, mode, conn)
        v.check_k(k)
        if min_similarity is not None and not -1.0 <= float(min_similarity) <= 1.0:
            raise ValidationError(f"min_similarity must be in [-1, 1], got {min_similarity}", field="min_similarity")
        flt = v.check_filter(filter)
        v.check_id(agent_id, "agent_id")
        v.check_id(session_id, "session_id")
        v.check_datetime(created_after, "created_after")
        v.check_datetime(created_before, "created_before")
        if (query is None) == (embedding is None):
            raise ValidationError("give either a query text or an embedding", field="query")
        if query is not None:
            v.check_query(query)
            vecs, space = self._embed([query], conn)
            vec, model = vecs[0], space.model
        else:
            vec, space = self._vector(embedding, conn)
            model = None
        rows = self._rows("search", {"space": space.name, "embedding": vec, "k": k, "agent_id": agent_id,
                                     "session_id": session_id, "filter": Jsonb(flt) if flt is not None else None,
                                     "min_similarity": min_similarity, "model": model,
                                     "created_after": created_after, "created_before": created_before}, conn)
        return [_row(MemoryRecord, r) for r in rows]

    def _search_hybrid(self, query, embedding, k, filter, agent_id, session_id, min_similarity, created_after,
                       created_before, mode, conn) -> list[MemoryRecord]:
        v.check_k(k)
        if min_similarity is not None:
            raise ValidationError("min_similarity applies to mode='vector' only", field="min_similarity")
        flt = v.check_filter(filter)
        v.check_id(agent_id, "agent_id")
        v.check_id(session_id, "session_id")
        v.check_datetime(created_after, "created_after")
        v.check_datetime(created_before, "created_before")
        if query is None:
            raise ValidationError(f"mode={mode!r} needs a query text", field="query")
        v.check_query(query)
        vec = model = None
        if mode == "hybrid":
            if embedding is None:
                vecs, space = self._embed([query], conn)
                vec, model = vecs[0], space.model
            else:
                vec, space = self._vector(embedding, conn)
        else:
            space = self.space(conn=conn)
        rows = self._rows("search_hybrid", {"space": space.name, "query": query, "embedding": vec, "k": k,
                                            "agent_id": agent_id, "session_id": session_id,
                                            "filter": Jsonb(flt) if flt is not None else None,
                                            "created_after": created_after, "created_before": created_before,
                                            "model": model}, conn)
        return [_row(MemoryRecord, r) for r in rows]

    def history(self, id: UUID | str, *, conn: psycopg.Connection | None = None) -> list[HistoryEvent]:
        """Every event of one memory, oldest first (kept after deletion)."""
        return [_row(HistoryEvent, r) for r in self._rows("history", {"id": id}, conn)]

    def stats(self, *, all_spaces: bool = False, conn: psycopg.Connection | None = None) -> list[SpaceStats]:
        """Counts of this user's live memories per space (this client's space unless ``all_spaces``)."""
        if not all_spaces:
            self.space(conn=conn)
        rows = self._rows("stats", {"space": None if all_spaces else self.space_name}, conn)
        return [_row(SpaceStats, r) for r in rows]

    def whoami(self, *, conn: psycopg.Connection | None = None) -> str | None:
        """The pgmem user this client acts as, as the database sees it (None: no identity)."""
        return self._rows("current_user_id", {}, conn)[0]["user_id"]


__all__ = ["Memory", "MemoryRecord", "AddResult", "HistoryEvent", "Space", "SpaceStats", "Page",
           "count_occurrences", "resolve_dsn"]
