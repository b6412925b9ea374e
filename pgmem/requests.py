"""What both clients share: :class:`MemoryBase`, the checks of every argument and the parameters of every
statement, and the named request types a checked call travels in between two of its builders.

:class:`pgmem.Memory` (:mod:`pgmem.client`) and :class:`pgmem.AsyncMemory` (:mod:`pgmem.aio`) subclass
:class:`MemoryBase` and differ only in awaiting the statements it builds. Nothing here touches the database
but :meth:`MemoryBase._rows`, which hands a named statement of ``queries.sql`` to the client's transport
(:mod:`pgmem.transport`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from uuid import UUID

import numpy as np
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
from .records import MemoryRecord, Page, Space, Turn, from_row
from .validation import check_item, content_hash, count_occurrences, extra_texts, vector_kinds

SPACE_MISMATCH_HINT = ("use a space of this model (--space NAME, or space= in the library; `pgmem space list` shows "
                       "each space's model), or create a new space for it and re-embed the memories into it: "
                       "docs/embedders.md#changing-the-model-of-existing-memories-re-embed")


PUT_KEYED_KEYS = frozenset({"key", "content", "metadata", "alt_content", "session_id", "expires_at", "ttl",
                            "embedding"})
KEY_FIELD = "pgmem:key"  # the metadata key pgmem.put_keyed keeps an item's key in


def _params(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of the named query ``name`` of queries.sql. It only returns ``params``: the name makes a
    builder's dict checkable against the query's placeholders (tests/schema/test_signatures.py)."""
    return params


# --- requests: a call's arguments once checked, read by the builder of its statement's parameters ----------
class AddRequest(NamedTuple):
    """The checked arguments of :meth:`pgmem.Memory.add`, read by :meth:`MemoryBase._add_params` after the
    session's last memory (``context_of``) has been read."""

    content: str
    metadata: dict | None
    agent_id: str | None
    session_id: str | None
    expires_at: datetime | None
    embedding: Any
    #: the session whose last memory is this one's context (contextual text writes only), else None
    context_of: str | None


class UpdateRequest(NamedTuple):
    """The checked arguments of :meth:`pgmem.Memory.update`, and what the client reads before building its
    statement (:meth:`MemoryBase._update_params`)."""

    id: Any
    content: str | None
    metadata: dict | None
    replace_metadata: bool
    expected_version: int | None
    embedding: Any
    #: the stored metadata is needed: the speaker that names the new sentences, merged as SQL will
    needs_current: bool
    #: the space is needed (new content to embed, or an embedding to check against its dims)
    needs_space: bool


class SearchRequest(NamedTuple):
    """The checked arguments of :meth:`pgmem.Memory.search`, its ``mode`` decided (``"hybrid"``, ``"vector"``
    or ``"text"``), read by :meth:`MemoryBase._search_params` once the space is known."""

    mode: str
    query: str | None
    embedding: Any
    k: int
    agent_id: str | None
    session_id: str | None
    filter: Jsonb | None
    min_similarity: float | None
    created_after: datetime | None
    created_before: datetime | None
    as_of: datetime | None
    min_score: float | None


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
                  embedding: Any) -> AddRequest:
        v.check_content(content)
        meta = v.check_metadata(metadata)
        agent = v.check_id(agent_id, "agent_id") or self.agent_id
        v.check_id(session_id, "session_id")
        expires_at = v.check_datetime(expires_at, "expires_at")
        return AddRequest(content, meta, agent, session_id, expires_at, embedding,
                          session_id if embedding is None and "context" in self.vector_kinds else None)

    def _add_params(self, space: Space, a: AddRequest, previous: str | None) -> dict[str, Any]:
        kinds: list[str] | None = None
        extra_vecs: list | None = None
        if a.embedding is None:
            extras = extra_texts(a.content, a.metadata, previous, self.vector_kinds) if self.contextual else []
            vecs = self._embed_in(space, [a.content] + [t for _, t in extras])
            vec, model = vecs[0], space.model
            kinds, extra_vecs = [k for k, _ in extras], list(vecs[1:])
        else:
            vec, model = self._vector_in(space, a.embedding), None
        return _params("add", {"space": space.name, "content": a.content, "embedding": vec,
                               "agent_id": a.agent_id, "session_id": a.session_id,
                               "metadata": Jsonb(a.metadata or {}), "expires_at": a.expires_at, "model": model,
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

    def _update_args(self, id: Any, content: Any, metadata: Any, replace_metadata: bool,
                     expected_version: int | None, embedding: Any) -> UpdateRequest:
        meta = v.check_metadata(metadata)
        if content is not None:
            v.check_content(content)
        reembed = content is not None and embedding is None
        return UpdateRequest(
            id, content, meta, replace_metadata, expected_version, embedding,
            needs_current=reembed and "sentence" in self.vector_kinds and not (replace_metadata and meta is not None),
            needs_space=reembed or embedding is not None)

    def _update_params(self, space: Space | None, u: UpdateRequest, current: MemoryRecord | None) -> dict[str, Any]:
        meta = u.metadata
        vec = model = kinds = extra_vecs = None
        if u.content is not None and u.embedding is None:
            spoken = {**(current.metadata if current else {}), **(meta or {})} if u.needs_current else meta
            vec, model, kinds, extra_vecs = self._sentences_in(space, u.content, spoken)
        if u.embedding is not None:
            vec = self._vector_in(space, u.embedding)
        return _params("update", {"id": u.id, "content": u.content, "embedding": vec,
                                  "metadata": Jsonb(meta) if meta is not None else None,
                                  "replace_metadata": u.replace_metadata, "expected_version": u.expected_version,
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
        items = [from_row(MemoryRecord, r) for r in rows]
        nxt = f"{items[-1].created_at.isoformat()}|{items[-1].id}" if items and len(items) == limit else None
        return Page(items, nxt)

    def _search_args(self, query: Any, embedding: Any, k: Any, filter: Any, agent_id: Any, session_id: Any,
                     min_similarity: Any, created_after: Any, created_before: Any, mode: Any,
                     as_of: Any = None, min_score: Any = None) -> SearchRequest:
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
        return SearchRequest(mode, query, embedding, k, agent_id, session_id, Jsonb(flt) if flt is not None else None,
                             min_similarity, created_after, created_before, as_of, min_score)

    def _search_params(self, space: Space, s: SearchRequest) -> dict[str, Any]:
        """Parameters of ``search`` (mode vector) or ``search_hybrid`` (hybrid, text); embeds the query text."""
        vec = model = None
        if s.mode != "text":
            if s.embedding is None:
                vec, model = self._embed_in(space, [s.query], queries=True)[0], space.model
            else:
                vec = self._vector_in(space, s.embedding)
        if s.mode == "vector":
            return _params("search", {"space": space.name, "embedding": vec, "k": s.k, "agent_id": s.agent_id,
                                      "session_id": s.session_id, "filter": s.filter,
                                      "min_similarity": s.min_similarity, "model": model,
                                      "created_after": s.created_after, "created_before": s.created_before,
                                      "as_of": s.as_of})
        return _params("search_hybrid", {"space": space.name, "query": s.query, "embedding": vec, "k": s.k,
                                         "agent_id": s.agent_id, "session_id": s.session_id,
                                         "filter": s.filter, "created_after": s.created_after,
                                         "created_before": s.created_before, "model": model, "as_of": s.as_of,
                                         "min_score": s.min_score})

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



__all__ = ["AddRequest", "KEY_FIELD", "MemoryBase", "PUT_KEYED_KEYS", "SPACE_MISMATCH_HINT", "SearchRequest",
           "UpdateRequest"]
