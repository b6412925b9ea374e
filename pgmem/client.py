"""The Python client: a thin wrapper over pgmem's stored functions.

Intent lives here: :class:`MemoryBase` checks every argument and builds every statement's parameters, and
:class:`Memory` turns the rows into records; how a statement reaches the database (pool, identity route,
errors) is :mod:`pgmem.transport`'s. Most public methods run one named statement of ``queries.sql`` calling
one ``pgmem.*`` function, acting for the client's user by the route the statement declares; the methods that
run more than one say so in their docstrings. Inputs are validated before anything is sent; database errors
arrive as :mod:`pgmem.errors` classes.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from functools import lru_cache
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import numpy as np
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import validation as v
from .embedders import Embedder, default_embedder, embed_queries
from .errors import (
    AmbiguousEdit,
    DimensionMismatch,
    EmbedderError,
    EmbeddingSpaceMismatch,
    NeedleNotFound,
    NotFound,
    PgmemError,
    ValidationError,
    VersionConflict,
)
from .transport import GATEWAY_ROLE, SyncTransport, idle_socket_quiet, json_loads, resolve_dsn  # noqa: F401
from .validation import (ITEM_KEYS, VECTOR_KINDS, check_item, content_hash, count_occurrences,  # noqa: F401
                         extra_texts, vector_kinds)

DEFAULT_SPACE = "default"


# --------------------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryRecord:
    """One memory. Search results also carry ``similarity``, the cosine similarity of the memory's embedding to
    the query in [-1, 1], and ``score``, higher is better, in every mode (docs/recall.md gives each scale):
    vector search: the cosine similarity itself, in [-1, 1]; hybrid: the fused score (BM25 share + vector
    share + boosts, unbounded above); text: BM25 (>= 0, 0 for a memory without a query word). Hybrid and
    text search add ``text_score`` (raw BM25) and ``vector_score`` (best sentence + context cosine, in [-2, 2]).

    ``expires_at`` is the effective expiry (its own, else ``created_at`` + the space's memory TTL). Validity:
    the fact holds from ``valid_from`` until ``valid_to`` (None: still holds); ``superseded_by`` names the
    memory that replaced it (:meth:`Memory.supersede`)."""

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
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    superseded_by: UUID | None = None


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
    related_id: UUID | None = None


@dataclass(frozen=True)
class Turn:
    """One conversation turn of a session (short-term memory). ``expires_at``: effective expiry (its own, else
    ``created_at`` + the space's turn TTL); ``consolidated_at``: when :meth:`Memory.consolidate` summarised it."""

    turn_id: int
    session_id: str
    agent_id: str | None
    role: str
    content: str
    metadata: dict
    created_at: datetime
    expires_at: datetime | None
    consolidated_at: datetime | None


@dataclass(frozen=True)
class Source:
    """A turn a consolidated memory came from; session, role, content and time are None once it is purged."""

    turn_id: int
    session_id: str | None
    role: str | None
    content: str | None
    created_at: datetime | None


@dataclass(frozen=True)
class ContextItem:
    """One line of an assembled context: ``source`` is ``"memory"`` (``memory_id``, ``score``) or ``"turn"``
    (``turn_id``, ``role``); ``line`` is the labelled text put in the prompt, ``tokens`` its size in pgmem tokens
    (``pgmem.token_count``: docs/lifecycle.md)."""

    position: int
    source: str
    turn_id: int | None
    memory_id: UUID | None
    role: str | None
    content: str
    line: str
    tokens: int
    score: float | None
    created_at: datetime


@dataclass(frozen=True)
class Context:
    """What :meth:`Memory.context` assembled: memories (most relevant first), then the session's recent turns
    (oldest first). ``tokens`` (their sum) never exceeds ``budget_tokens``."""

    items: list[ContextItem]
    budget_tokens: int

    @property
    def tokens(self) -> int:
        return sum(i.tokens for i in self.items)

    def render(self) -> str:
        """The lines joined by newlines: the text for the prompt (white space costs no tokens)."""
        return "\n".join(i.line for i in self.items)


@dataclass(frozen=True)
class PurgeResult:
    """Rows removed by one purge: expired memories, expired turns, and history events of expired memories."""

    memories: int
    turns: int
    history: int


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
    memory_ttl: timedelta | None = None
    turn_ttl: timedelta | None = None


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


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:  # dataclasses.fields() per row cost 8 us of a 10-row search's 0.1 ms (bench/FINDINGS.md S4)
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _row(cls, row: Mapping[str, Any]):
    return cls(**{n: row[n] for n in _field_names(cls) if n in row})


@lru_cache(maxsize=None)
def _plain_defaults(cls) -> dict[str, Any] | None:
    """The field defaults of a plain dataclass (no ``__post_init__``, no ``__slots__``, no default factories,
    every field in ``__init__``), whose instances :func:`_record_maker` may make without calling
    ``__init__``; None for any other class. Cached per class."""
    fs = fields(cls)
    if hasattr(cls, "__post_init__") or hasattr(cls, "__slots__") \
            or any(f.default_factory is not MISSING or not f.init for f in fs):
        return None
    return {f.name: f.default for f in fs if f.default is not MISSING}


@lru_cache(maxsize=256)
def _record_maker(cls, names: tuple[str, ...], score_at: int | None = None):
    """A function from a result row (values in the order of ``names``) to a ``cls``: the columns named like a
    field fill it, other columns are left out, fields without a column keep their defaults; with
    ``score_at``, that column also fills the field ``score``. Cached per class and columns.

    For a plain dataclass (:func:`_plain_defaults`) the instance is made as ``__init__`` would leave it, its
    ``__dict__`` filled in one step instead of one ``object.__setattr__`` per field (a frozen dataclass's
    ``__init__`` sets each of MemoryRecord's 18 fields that way: about 8 us a row, 78 of a 10-row vector
    search's 340 us of client CPU; bench/FINDINGS.md S13). Any other class is called with keyword arguments,
    and so is a plain one when a field without a default has no column (its constructor's TypeError)."""
    wanted = frozenset(_field_names(cls))
    keep = tuple((i, n) for i, n in enumerate(names) if n in wanted)
    if score_at is not None:
        keep += ((score_at, "score"),)
    defaults = _plain_defaults(cls)
    if defaults is None or wanted - defaults.keys() - {n for _, n in keep}:
        return lambda values: cls(**{n: values[i] for i, n in keep})
    new, set_attr = object.__new__, object.__setattr__

    def make(values):
        d = defaults.copy()
        for i, n in keep:
            d[n] = values[i]
        obj = new(cls)
        set_attr(obj, "__dict__", d)
        return obj

    return make


def record_rows(cls, score_from: str | None = None):
    """A psycopg row factory that makes each result row a ``cls`` (a dataclass) directly, as ``_row(cls,
    dict_row(...))`` would, without the intermediate dict: the columns named like a field of ``cls`` fill it,
    other columns are left out, fields without a column keep their defaults. Used for search results, where
    the per-row dicts cost about a third of the wrapper's own time (bench/FINDINGS.md S9). ``score_from``:
    a column that also fills the field ``score`` (vector search: its ``similarity``), unless the result has
    a ``score`` column of its own."""

    def factory(cursor: Any):
        # Column names straight from the result, as psycopg's dict_row reads them (cursor.description would
        # build a Column object per column on every call).
        res = cursor.pgresult
        if res is None or not res.nfields:
            return lambda values: None
        enc = cursor.connection.info.encoding
        names = [res.fname(i).decode(enc) for i in range(res.nfields)]
        at = names.index(score_from) if score_from in names and "score" not in names else None
        return _record_maker(cls, tuple(names), at)

    return factory


SPACE_MISMATCH_HINT = ("use a space of this model (--space NAME, or space= in the library; `pgmem space list` shows "
                       "each space's model), or create a new space for it and re-embed the memories into it: "
                       "docs/embedders.md#changing-the-model-of-existing-memories-re-embed")


_MEMORY_ROWS = record_rows(MemoryRecord)
_VECTOR_ROWS = record_rows(MemoryRecord, score_from="similarity")  # vector search: score = cosine similarity


PUT_KEYED_KEYS = frozenset({"key", "content", "metadata", "alt_content", "session_id", "expires_at", "ttl",
                            "embedding"})
KEY_FIELD = "pgmem:key"  # the metadata key pgmem.put_keyed keeps an item's key in


def _params(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of the named query ``name`` of queries.sql. It only returns ``params``: the name makes a
    builder's dict checkable against the query's placeholders (tests/schema/test_signatures.py)."""
    return params


class MemoryBase:
    """What :class:`Memory` and :class:`pgmem.aio.AsyncMemory` share: identity, the embedder, and the checks
    and query parameters of every method. Nothing here touches the database but :meth:`_rows`, which hands
    a named statement to the client's transport (:mod:`pgmem.transport`), so both clients validate and
    build their statements with the very same code and differ only in awaiting them."""

    user_id: str | None
    agent_id: str | None
    space_name: str
    contextual: bool
    _spaces: dict[str, Space]

    @property
    def _space(self) -> Space | None:
        """This client's space as last read. The cache is keyed by space name and shared with every client
        made by :meth:`with_identity` (a space is the same for all users), so a gateway's per-user clients
        do not each read it again (one statement and round trip per new client, bench/FINDINGS.md I3)."""
        return self._spaces.get(self.space_name)

    @_space.setter
    def _space(self, value: Space | None) -> None:
        if value is None:
            self._spaces.pop(self.space_name, None)
        else:
            self._spaces[self.space_name] = value

    def _setup(self, user_id: str | None, agent_id: str | None, space: str, embedder: Embedder | None,
               contextual: bool | Collection[str]) -> None:
        self.user_id = v.check_id(user_id, "user_id")
        self.agent_id = v.check_id(agent_id, "agent_id")
        self.space_name = v.check_space_name(space)
        self.vector_kinds = vector_kinds(contextual)
        self.contextual = bool(self.vector_kinds)
        self._embedder = embedder
        self._spaces = {}

    # --- the transport (pgmem.transport): shared with every client made by with_identity ------------------
    _transport: Any

    @property
    def pool(self) -> Any:
        """The psycopg connection pool (for an AsyncMemory, None until it is opened)."""
        return self._transport.pool

    @property
    def role(self) -> str | None:
        """The role every pooled connection switches to (None: the login role)."""
        return self._transport.role

    @property
    def cluster(self) -> bool | None:
        """Whether the database is a Citus cluster in cluster mode (``pgmem.cluster = 'citus'``, recorded by
        ``pgmem distribute``): every call acting for a user then runs in a transaction block
        (docs/scaling.md). None until the client has connected."""
        return self._transport.cluster

    @property
    def dsn(self) -> str | None:
        """The DSN connected to (None for a pool the caller made, and for an AsyncMemory not yet opened)."""
        return self._transport.dsn

    def _rows(self, name: str, params: dict[str, Any], conn: Any = None, row_factory: Any = dict_row) -> Any:
        """The rows of the named statement ``name`` acting for this client's user (the transport's ``rows``:
        a list, or for an AsyncMemory an awaitable of one)."""
        return self._transport.rows(name, params, self.user_id, conn, row_factory)

    def with_identity(self, *, user_id: str | None = ..., agent_id: str | None = ...):
        """A client sharing this one's pool and embedder, acting for another user and/or agent."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._owns_pool = False
        if self._embedder is None:  # not loaded yet: the copy loads it through this client, once for all copies
            other._embedder_parent = self
        if user_id is not ...:
            other.user_id = v.check_id(user_id, "user_id")
        if agent_id is not ...:
            other.agent_id = v.check_id(agent_id, "agent_id")
        return other

    @property
    def embedder(self) -> Embedder:
        """The embedder: the one given, else :func:`pgmem.embedders.default_embedder`, loaded on first use and
        shared with every :meth:`with_identity` copy (a copy made before the load loads it through its parent:
        the service makes one per request, and each loaded its own model before)."""
        if self._embedder is None:
            parent = self.__dict__.get("_embedder_parent")
            self._embedder = parent.embedder if parent is not None else default_embedder()
        return self._embedder

    # --- embedding (no database) ----------------------------------------------------------------------------
    def _context(self, space: Space) -> str:
        return f" (space {space.name!r}, model {space.model!r})"

    def _embed_in(self, space: Space, texts: Sequence[str], *, queries: bool = False) -> np.ndarray:
        """Embeddings of ``texts`` for ``space``, shape ``(len(texts), space.dims)`` float32, checked. Each
        distinct text is embedded once (a batch repeats short sentences and contents), in one call of the
        embedder: ``embed`` for texts to store, ``embed_query`` (when the embedder has it) for ``queries``."""
        texts = list(texts)
        distinct = list(dict.fromkeys(texts))
        if len(distinct) < len(texts):
            out = self._embed_distinct(space, distinct, queries)
            where = {t: i for i, t in enumerate(distinct)}
            return out[[where[t] for t in texts]]
        return self._embed_distinct(space, texts, queries)

    def _embed_distinct(self, space: Space, texts: list[str], queries: bool = False) -> np.ndarray:
        emb = self.embedder
        if emb.dims != space.dims:
            raise DimensionMismatch(f"expected {space.dims} dimensions, got {emb.dims}{self._context(space)}; "
                                    f"the embedder is {emb.model_name!r}", field="embedder")
        if emb.model_name != space.model:
            raise EmbeddingSpaceMismatch(f"space {space.name!r} holds embeddings of model {space.model!r}, "
                                         f"not {emb.model_name!r}", field="embedder", hint=SPACE_MISMATCH_HINT)
        try:
            out = embed_queries(emb, list(texts)) if queries else emb.embed(list(texts))
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
        return out

    def _vector_in(self, space: Space, embedding: Any, index: int | None = None) -> np.ndarray:
        return v.check_vector(embedding, space.dims, context=self._context(space), index=index)

    def _sentences_in(self, space: Space, content: str, metadata: Mapping[str, Any] | None):
        """Embedding, model, and sentence vectors of changed content (an edited memory keeps no context vector)."""
        extras = extra_texts(content, metadata, None, self.vector_kinds) if self.contextual else []
        vecs = self._embed_in(space, [content] + [t for _, t in extras])
        return vecs[0], space.model, [k for k, _ in extras], list(vecs[1:])

    # --- checks and parameters, method by method -------------------------------------------------------------
    def _create_space_params(self, name: str, model: str, dims: int, hnsw_m: int, hnsw_ef_construction: int,
                             text_config: str) -> dict[str, Any]:
        return _params("create_space", {"name": v.check_space_name(name), "model": model, "dims": dims, "distance": "cosine",
                                        "hnsw_m": hnsw_m, "hnsw_ef_construction": hnsw_ef_construction,
                                        "text_config": text_config})

    def _known_params(self, contents: Sequence[str]) -> tuple[dict[str, Any], dict[bytes, list[str]]]:
        """The known_hashes parameters for ``contents`` (checked as contents: ValidationError naming the index;
        at most 10,000), and hash -> the contents of that hash."""
        if isinstance(contents, str) or not isinstance(contents, Sequence):
            raise ValidationError("contents must be a list of strings", field="contents")
        v.check_batch_size(contents)
        by_hash: dict[bytes, list[str]] = {}
        for i, c in enumerate(contents):
            by_hash.setdefault(content_hash(v.check_content(c, index=i)), []).append(c)
        return _params("known_hashes", {"space": self.space_name, "hashes": list(by_hash)}), by_hash

    @staticmethod
    def _known(rows: list[dict], by_hash: dict[bytes, list[str]]) -> set[str]:
        return {c for r in rows for c in by_hash.get(bytes(r["content_hash"]), ())}

    def _tail_params(self, session_id: str) -> dict[str, Any]:
        return _params("session_tail", {"space": self.space_name, "session_id": session_id, "n": 1})

    def _add_args(self, content: Any, metadata: Any, agent_id: Any, session_id: Any, expires_at: Any,
                  embedding: Any) -> dict[str, Any]:
        v.check_content(content)
        meta = v.check_metadata(metadata)
        agent = v.check_id(agent_id, "agent_id") or self.agent_id
        v.check_id(session_id, "session_id")
        expires_at = v.check_datetime(expires_at, "expires_at")
        return {"content": content, "metadata": meta, "agent_id": agent, "session_id": session_id,
                "expires_at": expires_at, "embedding": embedding,
                # the session whose last memory is this one's context (contextual text writes only)
                "context_of": session_id if embedding is None and "context" in self.vector_kinds else None}

    def _add_params(self, space: Space, a: dict[str, Any], previous: str | None) -> dict[str, Any]:
        kinds: list[str] | None = None
        extra_vecs: list | None = None
        if a["embedding"] is None:
            extras = extra_texts(a["content"], a["metadata"], previous, self.vector_kinds) if self.contextual else []
            vecs = self._embed_in(space, [a["content"]] + [t for _, t in extras])
            vec, model = vecs[0], space.model
            kinds, extra_vecs = [k for k, _ in extras], list(vecs[1:])
        else:
            vec, model = self._vector_in(space, a["embedding"]), None
        return _params("add", {"space": space.name, "content": a["content"], "embedding": vec,
                               "agent_id": a["agent_id"], "session_id": a["session_id"],
                               "metadata": Jsonb(a["metadata"] or {}), "expires_at": a["expires_at"], "model": model,
                               "vector_kinds": kinds, "vectors": extra_vecs})

    def _add_many_items(self, items: Sequence[Any], agent_id: str | None, session_id: str | None) -> list[dict]:
        v.check_batch_size(items)
        norm: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            it = check_item(item, i)
            it["agent_id"] = it["agent_id"] or agent_id or self.agent_id
            it["session_id"] = it["session_id"] or session_id
            it["user_id"] = it["user_id"] or self.user_id
            norm.append(it)
        users = {it["user_id"] for it in norm}
        if len(users) > 1 and None in users:
            i = next(i for i, it in enumerate(norm) if it["user_id"] is None)
            raise ValidationError("a batch that names users must name one for every item (this client acts for "
                                  "no user)", field="user_id", index=i)
        return norm

    def _context_sessions(self, norm: list[dict]) -> list[tuple[str | None, str]]:
        """The (user, session) pairs whose last stored memory is the context of this batch's first memory in
        them."""
        if "context" not in self.vector_kinds or all(it["embedding"] is not None for it in norm):
            return []
        return list(dict.fromkeys((it["user_id"], it["session_id"]) for it in norm if it["session_id"] is not None))

    def _for_user(self, user_id: str | None):
        """This client, or one sharing its pool that acts for ``user_id``."""
        return self if user_id == self.user_id else self.with_identity(user_id=user_id)

    def _add_many_params(self, space: Space, norm: list[dict],
                         previous: Mapping[tuple[str | None, str], str | None]) -> dict[str, Any]:
        model = None
        missing = [i for i, it in enumerate(norm) if it["embedding"] is None]
        extras: list[tuple[int, str, str]] = []  # (item, kind, text)
        if missing and self.contextual:
            last: dict[tuple[str | None, str], str | None] = {}
            for i, it in enumerate(norm):
                sess = (it["user_id"], it["session_id"])
                before = None
                if it["session_id"] is not None:
                    before = last[sess] if sess in last else previous.get(sess)
                    last[sess] = it["content"]
                if it["embedding"] is None:
                    extras += [(i, kind, text) for kind, text in extra_texts(it["content"], it["metadata"], before,
                                                                                    self.vector_kinds)]
        vector_items = vector_kinds = extra_vecs = None
        if missing:
            vecs = self._embed_in(space, [norm[i]["content"] for i in missing] + [t for _, _, t in extras])
            for i, vec in zip(missing, vecs):
                norm[i]["embedding"] = vec
            if len(missing) == len(norm):
                model = space.model
            if extras:
                vector_items = [i for i, _, _ in extras]
                vector_kinds = [k for _, k, _ in extras]
                extra_vecs = list(vecs[len(missing):])
        for i, it in enumerate(norm):
            it["embedding"] = self._vector_in(space, it["embedding"], index=i)
        return _params("add_batch", {
            "space": space.name, "contents": [it["content"] for it in norm],
            "embeddings": [it["embedding"] for it in norm], "agent_ids": [it["agent_id"] for it in norm],
            "session_ids": [it["session_id"] for it in norm], "metadata": [Jsonb(it["metadata"]) for it in norm],
            "expires_at": [it["expires_at"] for it in norm], "model": model,
            "created_at": [it["created_at"] for it in norm], "vector_items": vector_items,
            "vector_kinds": vector_kinds, "vectors": extra_vecs,
            "ids": [it["id"] for it in norm] if any(it["id"] for it in norm) else None,
            "user_ids": None if all(it["user_id"] == self.user_id for it in norm) else [it["user_id"] for it in norm]})

    def _update_args(self, content: Any, metadata: Any, replace_metadata: bool, embedding: Any) -> dict[str, Any]:
        meta = v.check_metadata(metadata)
        if content is not None:
            v.check_content(content)
        reembed = content is not None and embedding is None
        return {"metadata": meta,
                # the speaker that names the sentences: the stored metadata, merged as SQL will
                "needs_current": reembed and "sentence" in self.vector_kinds and not (replace_metadata and meta is not None),
                "needs_space": reembed or embedding is not None}

    def _update_params(self, space: Space | None, u: dict[str, Any], id: Any, content: str | None,
                       replace_metadata: bool, expected_version: int | None, embedding: Any,
                       current: MemoryRecord | None) -> dict[str, Any]:
        meta = u["metadata"]
        vec = model = kinds = extra_vecs = None
        if content is not None and embedding is None:
            spoken = {**(current.metadata if current else {}), **(meta or {})} if u["needs_current"] else meta
            vec, model, kinds, extra_vecs = self._sentences_in(space, content, spoken)
        if embedding is not None:
            vec = self._vector_in(space, embedding)
        return _params("update", {"id": id, "content": content, "embedding": vec,
                                  "metadata": Jsonb(meta) if meta is not None else None,
                                  "replace_metadata": replace_metadata, "expected_version": expected_version,
                                  "agent_id": self.agent_id, "model": model, "vector_kinds": kinds,
                                  "vectors": extra_vecs})

    def _edit_args(self, old: Any, new: Any) -> None:
        v.check_text(old, "old")
        v.check_text(new, "new")
        if old == "":
            raise ValidationError("the text to replace must not be empty", field="old")

    def _edited(self, id: Any, current: MemoryRecord | None, old: str, new: str) -> str:
        """The content of ``current`` with its single occurrence of ``old`` replaced by ``new``."""
        if current is None:
            raise NotFound(f"memory {id} not found")
        n = count_occurrences(current.content, old)
        if n == 0:
            raise NeedleNotFound(f"the text to replace does not occur in memory {id}")
        if n > 1:
            raise AmbiguousEdit(f"the text to replace occurs {n} times in memory {id} (overlapping occurrences "
                                "count); give a longer, unique text", count=n)
        pos = current.content.find(old)
        return v.check_content(current.content[:pos] + new + current.content[pos + len(old):])

    def _edit_params(self, space: Space, id: Any, current: MemoryRecord, old: str, new: str, new_content: str,
                     expected_version: int | None) -> dict[str, Any]:
        vec, model, kinds, extra_vecs = self._sentences_in(space, new_content, current.metadata)
        return _params("edit", {"id": id, "needle": old, "replacement": new, "embedding": vec,
                                "expected_version": expected_version or current.version,
                                "agent_id": self.agent_id, "model": model, "vector_kinds": kinds,
                                "vectors": extra_vecs})

    def _delete_params(self, id: Any) -> dict[str, Any]:
        return _params("delete", {"id": id, "agent_id": self.agent_id})

    def _delete_all_params(self, agent_id: Any, session_id: Any, filter: Any, all_spaces: bool,
                           confirm: bool) -> dict[str, Any]:
        v.check_id(agent_id, "agent_id")
        v.check_id(session_id, "session_id")
        flt = v.check_filter(filter)
        return _params("delete_all", {
            "space": None if all_spaces else self.space_name, "agent_id": agent_id, "session_id": session_id,
            "filter": Jsonb(flt) if flt is not None else None, "confirm": confirm, "actor": self.agent_id})

    def _list_params(self, agent_id: Any, session_id: Any, filter: Any, limit: int, cursor: str | None,
                     created_after: Any, created_before: Any, contains: Any, as_of: Any = None) -> dict[str, Any]:
        v.check_id(agent_id, "agent_id")
        v.check_id(session_id, "session_id")
        if contains is not None:
            v.check_text(contains, "contains")
        created_after = v.check_datetime(created_after, "created_after")
        created_before = v.check_datetime(created_before, "created_before")
        as_of = v.check_datetime(as_of, "as_of")
        flt = v.check_filter(filter)
        v.check_limit(limit)
        after_ts, after_id = None, None
        if cursor is not None and not isinstance(cursor, str):
            raise ValidationError(f"cursor must be a page's next_cursor (a string), got {type(cursor).__name__}",
                                  field="cursor")
        if cursor:
            try:
                ts, _, raw_id = cursor.partition("|")
                after_ts, after_id = datetime.fromisoformat(ts), UUID(raw_id)
            except ValueError:
                raise ValidationError(f"not a pgmem cursor: {cursor!r}", field="cursor") from None
        return _params("list", {"space": self.space_name, "agent_id": agent_id, "session_id": session_id,
                                "filter": Jsonb(flt) if flt is not None else None, "limit": limit,
                                "after_created_at": after_ts, "after_id": after_id,
                                "created_after": created_after, "created_before": created_before,
                                "contains": contains, "as_of": as_of})

    @staticmethod
    def _page(rows: list[dict], limit: int) -> Page:
        items = [_row(MemoryRecord, r) for r in rows]
        nxt = f"{items[-1].created_at.isoformat()}|{items[-1].id}" if items and len(items) == limit else None
        return Page(items, nxt)

    def _search_args(self, query: Any, embedding: Any, k: Any, filter: Any, agent_id: Any, session_id: Any,
                     min_similarity: Any, created_after: Any, created_before: Any, mode: Any,
                     as_of: Any = None, min_score: Any = None) -> dict[str, Any]:
        if mode is None:  # min_similarity is a cosine threshold, so it selects vector mode
            mode = "hybrid" if query is not None and min_similarity is None else "vector"
        if mode not in ("hybrid", "vector", "text"):
            raise ValidationError(f"mode must be 'hybrid', 'vector' or 'text', got {mode!r}", field="mode")
        v.check_k(k)
        min_score = v.check_min_score(min_score)
        if min_score is not None and mode == "vector":
            # In vector mode the score is the cosine similarity: the same threshold as min_similarity.
            if min_similarity is not None:
                raise ValidationError("give min_score or min_similarity, not both", field="min_score")
            if not -1.0 <= min_score <= 1.0:
                raise ValidationError(f"min_score in vector mode is a cosine similarity in [-1, 1], got {min_score}",
                                      field="min_score")
            min_similarity, min_score = min_score, None
        if mode == "vector":
            if min_similarity is not None and not -1.0 <= float(min_similarity) <= 1.0:
                raise ValidationError(f"min_similarity must be in [-1, 1], got {min_similarity}",
                                      field="min_similarity")
        elif min_similarity is not None:
            raise ValidationError("min_similarity applies to mode='vector' only", field="min_similarity")
        flt = v.check_filter(filter)
        v.check_id(agent_id, "agent_id")
        v.check_id(session_id, "session_id")
        created_after = v.check_datetime(created_after, "created_after")
        created_before = v.check_datetime(created_before, "created_before")
        as_of = v.check_datetime(as_of, "as_of")
        if mode == "vector" and (query is None) == (embedding is None):
            raise ValidationError("give either a query text or an embedding", field="query")
        if mode != "vector" and query is None:
            raise ValidationError(f"mode={mode!r} needs a query text", field="query")
        if mode == "text" and embedding is not None:
            raise ValidationError("embedding does not apply to mode='text' (full-text only); use mode='hybrid' to "
                                  "fuse it with the text, or leave it out", field="embedding")
        if query is not None:
            v.check_query(query)
        return {"mode": mode, "query": query, "embedding": embedding, "k": k, "agent_id": agent_id,
                "session_id": session_id, "filter": Jsonb(flt) if flt is not None else None,
                "min_similarity": min_similarity, "created_after": created_after, "created_before": created_before,
                "as_of": as_of, "min_score": min_score}

    def _search_params(self, space: Space, s: dict[str, Any]) -> dict[str, Any]:
        """Parameters of ``search`` (mode vector) or ``search_hybrid`` (hybrid, text); embeds the query text."""
        vec = model = None
        if s["mode"] != "text":
            if s["embedding"] is None:
                vec, model = self._embed_in(space, [s["query"]], queries=True)[0], space.model
            else:
                vec = self._vector_in(space, s["embedding"])
        if s["mode"] == "vector":
            return _params("search", {"space": space.name, "embedding": vec, "k": s["k"], "agent_id": s["agent_id"],
                                      "session_id": s["session_id"], "filter": s["filter"],
                                      "min_similarity": s["min_similarity"], "model": model,
                                      "created_after": s["created_after"], "created_before": s["created_before"],
                                      "as_of": s["as_of"]})
        return _params("search_hybrid", {"space": space.name, "query": s["query"], "embedding": vec, "k": s["k"],
                                         "agent_id": s["agent_id"], "session_id": s["session_id"],
                                         "filter": s["filter"], "created_after": s["created_after"],
                                         "created_before": s["created_before"], "model": model, "as_of": s["as_of"],
                                         "min_score": s["min_score"]})

    def _stats_params(self, all_spaces: bool) -> dict[str, Any]:
        return _params("stats", {"space": None if all_spaces else self.space_name})

    # --- lifecycle: validity, turns, context, consolidation, retention, erasure (docs/lifecycle.md) -----------
    def _supersede_params(self, space: Space, id: Any, content: Any, metadata: Any, valid_from: Any,
                          expected_version: Any, embedding: Any) -> dict[str, Any]:
        content = v.check_content(content)
        meta = v.check_metadata(metadata)
        valid_from = v.check_datetime(valid_from, "valid_from")
        if embedding is None:
            vec, model, kinds, extra_vecs = self._sentences_in(space, content, meta)
        else:
            vec, model, kinds, extra_vecs = self._vector_in(space, embedding), None, None, None
        return _params("supersede", {"id": id, "content": content, "embedding": vec,
                                     "metadata": Jsonb(meta) if meta is not None else None, "valid_from": valid_from,
                                     "agent_id": self.agent_id, "expected_version": expected_version, "model": model,
                                     "vector_kinds": kinds, "vectors": extra_vecs})

    def _invalidate_params(self, id: Any, valid_to: Any) -> dict[str, Any]:
        valid_to = v.check_datetime(valid_to, "valid_to")
        return _params("invalidate", {"id": id, "valid_to": valid_to, "agent_id": self.agent_id})

    @staticmethod
    def _ttl(value: Any, field: str) -> timedelta | None:
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                value = timedelta(seconds=value)
            except (ValueError, OverflowError):  # NaN, infinity, past timedelta's 999,999,999 days
                raise ValidationError(f"{field} must be a positive timedelta (or a finite number of seconds), "
                                      f"got {value!r}", field=field) from None
        if not isinstance(value, timedelta) or value <= timedelta(0):
            raise ValidationError(f"{field} must be a positive timedelta (or seconds), got {value!r}", field=field)
        return value

    def _retention_params(self, memory_ttl: Any, turn_ttl: Any) -> dict[str, Any]:
        return _params("set_retention", {"space": self.space_name, "memory_ttl": self._ttl(memory_ttl, "memory_ttl"),
                                         "turn_ttl": self._ttl(turn_ttl, "turn_ttl")})

    ROLES = ("user", "assistant", "system", "tool")

    def _turn_params(self, space: Space, session_id: Any, role: Any, content: Any, metadata: Any, embed: bool,
                     embedding: Any, expires_at: Any, created_at: Any) -> dict[str, Any]:
        session_id = v.check_id(session_id, "session_id", optional=False)
        if role not in self.ROLES:
            raise ValidationError(f"role must be one of {', '.join(self.ROLES)}, got {role!r}", field="role")
        content = v.check_content(content)
        meta = v.check_metadata(metadata)
        expires_at = v.check_datetime(expires_at, "expires_at")
        created_at = v.check_datetime(created_at, "created_at")
        vec = model = None
        if embedding is not None:
            vec = self._vector_in(space, embedding)
        elif embed:
            vec, model = self._embed_in(space, [content])[0], space.model
        return _params("append_turn", {"space": space.name, "session_id": session_id, "role": role, "content": content,
                                       "agent_id": self.agent_id, "embedding": vec, "metadata": Jsonb(meta or {}),
                                       "expires_at": expires_at, "model": model, "created_at": created_at})

    # --- keyed memories ----------------------------------------------------------------------------------------
    def _put_keyed_items(self, items: Sequence[Any]) -> list[dict[str, Any]]:
        """The items of :meth:`Memory.put_keyed`, validated (every one before anything is written)."""
        v.check_batch_size(items)
        norm: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ValidationError("must be a mapping with 'key' and 'content'", field="items", index=i)
            unknown = set(item) - PUT_KEYED_KEYS
            if unknown:
                raise ValidationError(f"unknown keys {sorted(unknown)}", field="items", index=i)
            key = v.check_text(item.get("key"), "key", index=i)
            if not key or len(key) > 1024 or "\x00" in key:
                raise ValidationError("key must be a text of 1 to 1024 characters without NUL", field="key", index=i)
            content = item.get("content")
            if content is None:
                given = sorted(k for k in set(item) - {"key", "content"} if item[k] is not None)
                if given:  # a delete writes none of them: refused rather than left unchecked
                    raise ValidationError(f"a delete (content None) takes no {', '.join(given)}", field="items", index=i)
                norm.append({"key": key, "content": None})
                continue
            meta = v.check_metadata(item.get("metadata"), index=i) or {}
            if KEY_FIELD in meta:
                raise ValidationError(f"metadata key {KEY_FIELD!r} is the item's key: pass it as 'key'",
                                      field="metadata", index=i)
            alt = item.get("alt_content")
            ttl = item.get("ttl")
            if ttl is not None and (not isinstance(ttl, timedelta) or ttl <= timedelta(0)):
                raise ValidationError(f"ttl must be a positive timedelta, got {ttl!r}", field="ttl", index=i)
            if ttl is not None and item.get("expires_at") is not None:
                raise ValidationError("give ttl or expires_at, not both", field="ttl", index=i)
            norm.append({"key": key, "content": v.check_content(content, index=i), "metadata": meta,
                         "alt_content": None if alt is None else v.check_content(alt, field="alt_content", index=i),
                         "session_id": v.check_id(item.get("session_id"), "session_id", index=i),
                         "expires_at": v.check_datetime(item.get("expires_at"), "expires_at", index=i), "ttl": ttl,
                         "embedding": item.get("embedding"), "agent_id": None, "user_id": self.user_id,
                         "created_at": None, "id": None})
        return norm

    def _put_keyed_params(self, space: Space, norm: list[dict[str, Any]],
                          previous: Mapping[tuple[str | None, str], str | None]) -> dict[str, Any]:
        """Embeds what needs it (content, sentence and context vectors, as :meth:`Memory.add_many`)."""
        live = [i for i, it in enumerate(norm) if it["content"] is not None]
        sub = [norm[i] for i in live]
        p = self._add_many_params(space, sub, previous) if sub else {
            "embeddings": [], "model": None, "vector_items": None, "vector_kinds": None, "vectors": None}
        embeddings: list[Any] = [None] * len(norm)
        for i, vec in zip(live, p["embeddings"]):
            embeddings[i] = vec
        if not sub:  # deletes only: a placeholder vector, which pgmem.put_keyed ignores for a NULL content
            placeholder = np.zeros(space.dims, dtype=np.float32)
            placeholder[0] = 1.0
            embeddings = [placeholder] * len(norm)
        else:
            embeddings = [e if e is not None else p["embeddings"][0] for e in embeddings]
        return _params("put_keyed", {
            "space": space.name, "keys": [it["key"] for it in norm], "contents": [it["content"] for it in norm],
            "embeddings": embeddings,
            "metadata": [Jsonb(it["metadata"]) if it["content"] is not None else None for it in norm],
            "session_ids": [it.get("session_id") for it in norm], "expires_at": [it.get("expires_at") for it in norm],
            "ttls": [it.get("ttl") for it in norm], "alt_contents": [it.get("alt_content") for it in norm],
            "agent_id": self.agent_id, "model": p["model"],
            "vector_items": None if p["vector_items"] is None else [live[i] for i in p["vector_items"]],
            "vector_kinds": p["vector_kinds"], "vectors": p["vectors"]})

    def _get_keyed_params(self, keys: Sequence[Any]) -> dict[str, Any]:
        if isinstance(keys, str) or not isinstance(keys, Sequence):
            raise ValidationError("keys must be a list of texts", field="keys")
        v.check_batch_size(keys)
        return _params("get_keyed", {"space": self.space_name,
                                     "keys": [v.check_text(k, "keys", index=i) for i, k in enumerate(keys)]})

    def _set_expiry_params(self, ttls: Mapping[Any, Any]) -> dict[str, Any]:
        if not isinstance(ttls, Mapping):
            raise ValidationError("ttls must map memory ids to a timedelta (or None)", field="ttls")
        v.check_batch_size(list(ttls))
        ids, out, seen = [], [], set()
        for i, (id, ttl) in enumerate(ttls.items()):
            try:
                ids.append(id if isinstance(id, UUID) else UUID(str(id)))
            except ValueError:
                raise ValidationError(f"id must be a UUID, got {id!r}", field="ttls", index=i) from None
            if ids[-1] in seen:  # the same memory as a UUID and as a string: which expiry would hold?
                raise ValidationError(f"memory {ids[-1]} is named twice", field="ttls", index=i)
            seen.add(ids[-1])
            if ttl is not None and (not isinstance(ttl, timedelta) or ttl <= timedelta(0)):
                raise ValidationError(f"ttl must be a positive timedelta or None, got {ttl!r}", field="ttls", index=i)
            out.append(ttl)
        return _params("set_expiry", {"ids": ids, "ttls": out, "agent_id": self.agent_id})

    def _metadata_values_params(self, key: Any, prefixes: Any, suffixes: Any, max_depth: Any, limit: Any,
                                offset: Any) -> dict[str, Any]:
        v.check_text(key, "key")
        if not key:
            raise ValidationError("key must not be empty", field="key")

        def patterns(value: Any, field: str) -> list[list[str]] | None:
            if value is None:
                return None
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or any(
                    isinstance(p, (str, bytes)) or not isinstance(p, Sequence)
                    or not all(isinstance(label, str) for label in p) for p in value):
                raise ValidationError(f"{field} must be a list of label lists (lists of strings)", field=field)
            return [list(p) for p in value]

        def integer(value: Any, field: str, low: int, high: int | None = None) -> None:
            if not isinstance(value, int) or isinstance(value, bool) or value < low or (high and value > high):
                bound = f"from {low} to {high}" if high else f"of at least {low}"
                raise ValidationError(f"{field} must be an integer {bound}, got {value!r}", field=field)

        if max_depth is not None:
            integer(max_depth, "max_depth", 1)
        integer(limit, "limit", 1, 10000)
        integer(offset, "offset", 0)
        pre, suf = patterns(prefixes, "prefixes"), patterns(suffixes, "suffixes")
        if len(pre or []) + len(suf or []) > 16:  # as in SQL: every value is matched against every pattern
            raise ValidationError("prefixes and suffixes hold at most 16 patterns in all", field="prefixes")
        return _params("metadata_values", {"space": self.space_name, "key": key,
                                           "prefixes": Jsonb(pre) if pre is not None else None,
                                           "suffixes": Jsonb(suf) if suf is not None else None,
                                           "max_depth": max_depth, "limit": limit, "offset": offset})

    def _clear_session_params(self, session_id: Any) -> dict[str, Any]:
        return _params("clear_session", {"space": self.space_name,
                                         "session_id": v.check_id(session_id, "session_id", optional=False)})

    def _turns_params(self, name: str, session_id: Any, n: Any) -> dict[str, Any]:
        session_id = v.check_id(session_id, "session_id", optional=False)
        top = 1000 if name == "recent_turns" else 10000
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= top:
            raise ValidationError(f"n must be an integer from 1 to {top}, got {n!r}", field="n")
        return _params(name, {"space": self.space_name, "session_id": session_id, "n": n})

    def _context_params(self, space: Space, query: Any, session_id: Any, budget_tokens: Any, max_turns: Any,
                        turn_share: Any, k: Any, filter: Any, embedding: Any) -> dict[str, Any]:
        v.check_id(session_id, "session_id")
        if query is not None:
            v.check_query(query)
        for name, val, lo, hi in (("budget_tokens", budget_tokens, 1, 1_000_000), ("max_turns", max_turns, 0, 1000),
                                  ("k", k, 0, 1000)):
            if not isinstance(val, int) or isinstance(val, bool) or not lo <= val <= hi:
                raise ValidationError(f"{name} must be an integer from {lo} to {hi}, got {val!r}", field=name)
        if isinstance(turn_share, bool) or not isinstance(turn_share, (int, float)) or not 0 <= turn_share <= 1:
            raise ValidationError(f"turn_share must be in [0, 1], got {turn_share!r}", field="turn_share")
        flt = v.check_filter(filter)
        vec = model = None
        if query is not None and k > 0:
            if embedding is None:
                vec, model = self._embed_in(space, [query], queries=True)[0], space.model
            else:
                vec = self._vector_in(space, embedding)
        return _params("context", {"space": space.name, "session_id": session_id, "query": query, "embedding": vec,
                                   "budget_tokens": budget_tokens, "max_turns": max_turns,
                                   "turn_share": float(turn_share), "k": k, "agent_id": None,
                                   "filter": Jsonb(flt) if flt is not None else None, "model": model})

    @staticmethod
    def _turns_through(turns: Sequence[Turn], session_id: str, through_turn_id: Any) -> list[Turn]:
        """The pending ``turns`` up to and including ``through_turn_id`` (all when None)."""
        if through_turn_id is None:
            return list(turns)
        if isinstance(through_turn_id, bool) or not isinstance(through_turn_id, int):
            raise ValidationError(f"through_turn_id must be a turn id (an integer), got {through_turn_id!r}",
                                  field="through_turn_id")
        if through_turn_id not in {t.turn_id for t in turns}:
            raise VersionConflict(f"turn {through_turn_id} is not pending in session {session_id!r} (consolidated "
                                  "meanwhile, expired, or not of this session): read the pending turns again")
        return [t for t in turns if t.turn_id <= through_turn_id]

    def _consolidate_params(self, space: Space, session_id: str, turns: Sequence[Turn], summary: Any) -> dict[str, Any]:
        """Check the summariser's output (a list of strings or of dicts with ``content`` and optional
        ``metadata``) and embed it."""
        if isinstance(summary, (str, Mapping)) or not isinstance(summary, Sequence):
            raise ValidationError("the summariser must return a list of strings or of {'content', 'metadata'} dicts",
                                  field="summarise")
        for i, item in enumerate(summary):
            if isinstance(item, Mapping) and set(item) - {"content", "metadata"}:
                raise ValidationError(f"a summary item takes content and metadata only, got {sorted(item)}",
                                      field="summarise", index=i)
        norm = [check_item(item, i) for i, item in enumerate(summary)]
        contents = [n["content"] for n in norm]
        metas = [Jsonb(n.get("metadata") or {}) for n in norm]
        items, kinds, extra = [], [], []
        vecs = []
        if contents:
            texts: list[str] = []
            spans = []
            for i, n in enumerate(norm):
                ex = extra_texts(n["content"], n.get("metadata"), None, self.vector_kinds) if self.contextual else []
                spans.append((len(texts), len(ex)))
                texts += [n["content"]] + [t for _, t in ex]
                kinds += [k for k, _ in ex]
                items += [i] * len(ex)
            emb = self._embed_in(space, texts)
            for (start, count) in spans:
                vecs.append(emb[start])
                extra += list(emb[start + 1:start + 1 + count])
        return _params("consolidate", {"space": space.name, "session_id": session_id,
                                       "turn_ids": [t.turn_id for t in turns], "contents": contents,
                                       "embeddings": vecs, "metadata": metas, "agent_id": self.agent_id,
                                       "model": space.model, "vector_items": items or None,
                                       "vector_kinds": kinds or None, "vectors": extra or None})

    @staticmethod
    def _purge_params(limit: Any) -> dict[str, Any]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValidationError(f"limit must be a positive integer, got {limit!r}", field="limit")
        return _params("purge", {"limit": limit})

    @staticmethod
    def _erase_params(user_id: Any) -> dict[str, Any]:
        return _params("erase_user", {"user_id": v.check_id(user_id, "user_id", optional=False)})

    @staticmethod
    def _token_params(text: Any) -> dict[str, Any]:
        return _params("token_count", {"text": v.check_text(text, "text")})

    @staticmethod
    def _import_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
            raise ValidationError("rows must be a list of export rows (objects)", field="rows")
        out = []
        for i, r in enumerate(rows, 1):  # numbered from 1, as pgmem.import_user numbers them
            v.check_export_row(r, f"row {i}")
            out.append(Jsonb(v.export_row_json(r, f"row {i}"), dumps=lambda t: t))  # the checked text, as it is
        return _params("import_user", {"rows": out})


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
        return _row(Space, rows[0])

    def get_space(self, name: str | None = None, *, conn: psycopg.Connection | None = None) -> Space:
        """The embedding space ``name`` (default: this client's), without creating it. Raises NotFound."""
        return _row(Space, self._rows("space", {"name": v.check_space_name(name or self.space_name)}, conn)[0])

    def list_spaces(self, *, conn: psycopg.Connection | None = None) -> list[Space]:
        """Every embedding space, by name (``pgmem.list_spaces``: configuration only, no row counts)."""
        return [_row(Space, r) for r in self._rows("list_spaces", {}, conn)]

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
        previous = self._previous_content(a["context_of"], conn)
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
        u = self._update_args(content, metadata, replace_metadata, embedding)
        current = self.get(id, conn=conn) if u["needs_current"] else None
        space = self.space(conn=conn) if u["needs_space"] else None
        rows = self._rows("update", self._update_params(space, u, id, content, replace_metadata, expected_version,
                                                        embedding, current), conn)
        return _row(MemoryRecord, rows[0])

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
            return _row(MemoryRecord, rows[0])
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
        return {r["metadata"][KEY_FIELD]: _row(MemoryRecord, r) for r in self._rows("get_keyed", params, conn)}

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
        return _row(MemoryRecord, rows[0]) if rows else None

    def list(self, *, agent_id: str | None = None, session_id: str | None = None,
             filter: Mapping[str, Any] | None = None, limit: int = 50, cursor: str | None = None,
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

    def search(self, query: str | None = None, *, embedding: Any = None, k: int = 10,
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
        if s["mode"] == "vector":
            return self._rows("search", params, conn, _VECTOR_ROWS)
        return self._rows("search_hybrid", params, conn, _MEMORY_ROWS)

    def history(self, id: UUID | str, *, conn: psycopg.Connection | None = None) -> list[HistoryEvent]:
        """Every event of one memory, oldest first (kept after deletion)."""
        return [_row(HistoryEvent, r) for r in self._rows("history", {"id": id}, conn)]

    def stats(self, *, all_spaces: bool = False, conn: psycopg.Connection | None = None) -> list[SpaceStats]:
        """Counts of this user's live memories per space (this client's space unless ``all_spaces``)."""
        if not all_spaces:
            self.space(conn=conn)
        rows = self._rows("stats", self._stats_params(all_spaces), conn)
        return [_row(SpaceStats, r) for r in rows]

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
        return _row(MemoryRecord, self._rows("supersede", params, conn)[0])

    def invalidate(self, id: UUID | str, *, valid_to: datetime | None = None,
                   conn: psycopg.Connection | None = None) -> MemoryRecord:
        """Mark a fact as no longer holding from ``valid_to`` (default now), with no successor; it stays
        readable by id, in history and as of earlier times. Raises NotFound, VersionConflict."""
        return _row(MemoryRecord, self._rows("invalidate", self._invalidate_params(id, valid_to), conn)[0])

    def chain(self, id: UUID | str, *, conn: psycopg.Connection | None = None) -> list[MemoryRecord]:
        """The supersede line through memory ``id``, oldest fact first (empty for an unknown id)."""
        return [_row(MemoryRecord, r) for r in self._rows("chain", {"id": id}, conn)]

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
        return _row(Space, row)

    def purge(self, *, limit: int = 10000, conn: psycopg.Connection | None = None) -> PurgeResult:
        """Physically remove expired memories and turns of every user (at most ``limit`` of each) and the
        history of expired memories (an EXPIRE tombstone stays); returns the counts. Expired rows are invisible
        already. Needs a superuser or BYPASSRLS role (IdentityError otherwise); schedule it (docs/lifecycle.md)."""
        return _row(PurgeResult, self._rows("purge", self._purge_params(limit), conn)[0])

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
        return _row(Turn, self._rows("append_turn", params, conn)[0])

    def recent_turns(self, session_id: str, *, n: int = 20, conn: psycopg.Connection | None = None) -> list[Turn]:
        """The last ``n`` (1..1000) live turns of a session, oldest first."""
        params = self._turns_params("recent_turns", session_id, n)
        self.space(conn=conn)
        return [_row(Turn, r) for r in self._rows("recent_turns", params, conn)]

    def pending_turns(self, session_id: str, *, n: int = 1000, conn: psycopg.Connection | None = None) -> list[Turn]:
        """The live turns of a session not yet consolidated (the last ``n``, 1..10000), oldest first."""
        params = self._turns_params("pending_turns", session_id, n)
        self.space(conn=conn)
        return [_row(Turn, r) for r in self._rows("pending_turns", params, conn)]

    def context(self, query: str | None, *, session_id: str | None = None, budget_tokens: int = 2000,
                max_turns: int = 20, turn_share: float = 0.5, k: int = 20, filter: Mapping[str, Any] | None = None,
                embedding: Any = None, conn: psycopg.Connection | None = None) -> Context:
        """What to put in the prompt for ``query``: the session's most recent turns (a contiguous tail, at most
        ``max_turns``, within ``turn_share`` of the budget) and the most relevant long-term memories (hybrid
        search over ``k`` candidates) in the rest, each a labelled line, never more than ``budget_tokens``
        pgmem tokens in all (``pgmem.token_count``: ASCII letter/digit runs count ceil(len/4), other non-space
        characters 1; docs/lifecycle.md). No memory repeats a turn shown. ``Context.render()`` is the text.
        Raises ValidationError."""
        params = self._context_params(self.space(conn=conn), query, session_id, budget_tokens, max_turns,
                                      turn_share, k, filter, embedding)
        return Context([_row(ContextItem, r) for r in self._rows("context", params, conn)], budget_tokens)

    def consolidate(self, session_id: str, summarise, *, max_turns: int = 1000, through_turn_id: int | None = None,
                    conn: psycopg.Connection | None = None) -> list[AddResult]:
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
        return [_row(Source, r) for r in self._rows("sources", {"id": id}, conn)]

    def token_count(self, text: str, *, conn: psycopg.Connection | None = None) -> int:
        """``pgmem.token_count(text)``: the token estimate context budgets are counted in."""
        return int(self._rows("token_count", self._token_params(text), conn)[0]["tokens"])

    def whoami(self, *, conn: psycopg.Connection | None = None) -> str | None:
        """The pgmem user this client acts as, as the database sees it (None: no identity)."""
        return self._rows("current_user_id", {}, conn)[0]["user_id"]


__all__ = ["Memory", "MemoryBase", "MemoryRecord", "AddResult", "HistoryEvent", "Space", "SpaceStats", "Page",
           "Turn", "Source", "Context", "ContextItem", "PurgeResult",
           "check_item", "count_occurrences", "resolve_dsn"]
