"""A LangGraph ``BaseStore`` on pgmem: long-term memory of LangGraph agents (and of LangMem's memory tools) in
pgmem, under pgmem's row-level security and hybrid recall.

``pip install 'pgmem-agents[langgraph]'``. ``PgmemStore(memory)`` takes a :class:`pgmem.Memory` (``batch``, and
``abatch`` in a worker thread) or a :class:`pgmem.aio.AsyncMemory` (``abatch``; ``batch`` raises
``InvalidStateError``, as LangGraph's async stores do from their event loop). Every operation is one or more
calls of the public client API, so every statement runs one pgmem stored function as the store's user.

Mapping (docs/integrations.md):

- **user**: ``namespace[user_index]`` (default the first label). A store whose ``Memory`` acts for a user
  (``Memory(user_id="alice")``) runs everything as that user: a namespace naming another user reads as
  empty (row-level security shows none of that user's rows) and a write to it raises IdentityError. A store
  whose ``Memory`` names no user (a gateway login, or a login bound with ``pgmem.bind_role``) acts as the
  namespace's user, and the database decides whether the login may (``pgmem.act_as``). ``user_index=None``:
  namespaces do not name users; everything runs as the ``Memory``'s identity.
- **item**: one live memory per (namespace, key), found by its metadata; an overwrite updates it in place
  (its history keeps every version). ``session_id`` = the namespace labels joined by ``.`` (when at most 256 characters), so consecutive puts to
  a namespace get pgmem's context vectors; ``agent_id`` = the ``Memory``'s agent.
- **value**: the value's top-level keys are the memory's metadata (so LangGraph filters are pgmem metadata
  filters), beside reserved keys ``langgraph:namespace`` (list of labels), ``langgraph:prefixes`` (the joined
  prefixes, for prefix search), ``langgraph:key``, ``langgraph:indexed`` and ``langgraph:ttl`` (minutes).
  Value keys starting with ``langgraph:`` are refused. The metadata limit (64 KiB serialised) applies.
- **content** (what hybrid search reads and embeds): the text at the ``index`` fields (LangGraph's path syntax,
  :func:`langgraph.store.base.embed.get_text_at_path`), joined by newlines; by default every string in the
  value, depth first. pgmem stores one live memory per content and user, so when another item already holds
  the same text the content gets a last line ``[<namespace>/<key>]``. ``index=False`` (or no text at the
  fields) stores ``<namespace>/<key>`` as content and leaves the item out of query searches.
- **ttl** (minutes) is the memory's ``expires_at``; expired items are invisible at once and removed by pgmem's
  purge (docs/lifecycle.md). A read with ``refresh_ttl`` re-stores the items it returns that have a TTL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import random
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base import validate_op_namespace
from langgraph.store.base.embed import get_text_at_path, tokenize_path

from ..requests import KEY_FIELD
from ..errors import (DatabaseError, IdentityError, InvalidFilter, PgmemError,
                      ValidationError)

NS = "langgraph:namespace"
PREFIXES = "langgraph:prefixes"
KEY = "langgraph:key"
INDEXED = "langgraph:indexed"
TTL = "langgraph:ttl"
RESERVED = "langgraph:"
OPERATORS = {"$eq": "eq", "$ne": "ne", "$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
PAGE = 1000  # pgmem.list's largest page
# pgmem.put_keyed locks a batch's keys in sorted order, but a put can still meet another write of the user (a
# deadlock, or a serialisation failure): PostgreSQL then aborts one statement, and the batch is run again.
RETRY_SQLSTATES = ("40P01", "40001")  # deadlock_detected, serialization_failure
RETRIES = 4


def _path(namespace: Sequence[str]) -> str:
    return ".".join(namespace)


def item_key(namespace: Sequence[str], key: str) -> str:
    """The pgmem key (``Memory.put_keyed``) of LangGraph item ``key`` in ``namespace``: the JSON array of the
    labels and the key, e.g. ``'["alice","prefs","food"]'``, unambiguous whatever the labels hold."""
    return json.dumps([*namespace, key], ensure_ascii=False, separators=(",", ":"))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def item_text(value: Mapping[str, Any], fields: Sequence[str] | None) -> str:
    """The text pgmem indexes for ``value``: the texts at ``fields`` (LangGraph paths; ``"$"`` is the whole value
    as JSON), or every string of the value depth first when ``fields`` is None, joined by newlines ('' when
    none)."""
    if fields is None:
        texts = list(_strings(value))
    else:
        texts = []
        for f in fields:
            texts += get_text_at_path(value, tokenize_path(f) if f != "$" else "$")
    return "\n".join(t for t in texts if isinstance(t, str) and t.strip())


def _is_op(k: Any) -> bool:
    return isinstance(k, str) and k.startswith("$")


def _nested_operator(value: Any, at: str) -> tuple[str, str] | None:
    """The first ``$`` key inside a plain (equality) value, with its path, else None."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if _is_op(k):
                return k, at
            found = _nested_operator(v, f"{at}.{k}")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _nested_operator(v, f"{at}[{i}]")
            if found:
                return found
    return None


def translate_filter(flt: Mapping[str, Any] | None) -> dict[str, Any]:
    """A LangGraph filter as a pgmem metadata filter (docs/filters.md): ``{"k": v}`` is JSON equality (an
    object value too); ``{"k": {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": v, ...}}`` the operators (ranges compare
    JSON numbers only). Raises InvalidFilter for other ``$`` operators, for reserved keys, for an object that
    mixes ``$`` operators with plain keys (``{"score": {"$gt": 1, "x": 2}}``: LangGraph's own stores refuse it
    as an unsupported operator; it is not read as equality) and for a ``$`` key inside an equality value
    (``{"stats": {"score": {"$gt": 1}}}``: operators apply only directly under a top-level key; an object to
    compare with that holds ``$`` keys is written ``{"$eq": {...}}``)."""
    out: dict[str, Any] = {}
    for key, value in (flt or {}).items():
        if not isinstance(key, str) or key.startswith(RESERVED) or key.startswith("$"):
            raise InvalidFilter(f"invalid filter key {key!r}: keys name top-level fields of the value",
                                field="filter")
        if isinstance(value, Mapping) and any(_is_op(k) for k in value) and not all(_is_op(k) for k in value):
            ops = ", ".join(repr(k) for k in value if _is_op(k))
            plain = ", ".join(repr(k) for k in value if not _is_op(k))
            raise InvalidFilter(f"filter on {key!r} mixes operators ({ops}) with plain keys ({plain}): write "
                                "{'$eq': {...}} to compare with an object, or use operators only", field="filter")
        if isinstance(value, Mapping) and value and all(_is_op(k) for k in value):
            ops = {}
            for op, arg in value.items():
                if op not in OPERATORS:
                    raise InvalidFilter(f"unknown filter operator {op!r} on key {key!r}; supported: "
                                        f"{', '.join(OPERATORS)}", field="filter")
                ops[OPERATORS[op]] = arg
            out[key] = ops
        else:
            nested = _nested_operator(value, key)
            if nested:
                raise InvalidFilter(f"filter on {key!r} has the operator {nested[0]!r} inside its value (at "
                                    f"{nested[1]}): operators apply only directly under a top-level key of the "
                                    "value; to compare with an object that holds '$' keys, write {'$eq': {...}}",
                                    field="filter")
            out[key] = {"eq": value}
    return out


def _namespace_filter(prefix: Sequence[str]) -> dict[str, Any]:
    if prefix:
        return {PREFIXES: {"contains": _path(prefix)}}
    return {KEY: {"exists": True}}


def _to_item(rec: Any, cls: type = Item) -> Item:
    meta = dict(rec.metadata or {})
    namespace = tuple(meta[NS])
    key = meta[KEY]
    value = {k: v for k, v in meta.items() if not k.startswith(RESERVED) and k != KEY_FIELD}
    if cls is SearchItem:
        score = rec.score if rec.score is not None else rec.similarity  # vector mode: the cosine similarity
        return SearchItem(namespace, key, value, rec.created_at, rec.updated_at, score=score)
    return Item(value=value, key=key, namespace=namespace, created_at=rec.created_at, updated_at=rec.updated_at)


def _matches(namespace: tuple[str, ...], cond: MatchCondition) -> bool:
    path = tuple(cond.path)
    if len(path) > len(namespace):
        return False
    part = namespace[:len(path)] if cond.match_type == "prefix" else namespace[len(namespace) - len(path):]
    return all(p == "*" or p == n for p, n in zip(path, part))


class _Call(NamedTuple):
    """One request of a plan to its driver: ``client.method(*args, **kwargs)``, one statement."""

    client: Any
    method: str
    args: tuple
    kwargs: dict


def _call(client: Any, method: str, *args: Any, **kwargs: Any) -> _Call:
    return _Call(client, method, args, kwargs)


class PgmemStore(BaseStore):
    """LangGraph's ``BaseStore`` on pgmem (sync with :class:`pgmem.Memory`, async with
    :class:`pgmem.aio.AsyncMemory`); see the module docstring and docs/integrations.md for the mapping.

    ``user_index``: which namespace label names the pgmem user (default 0; None: none does). ``index``:
    LangGraph's index configuration; only ``fields`` is read (the default text is every string of the value):
    the embedding model and dimensions are the pgmem space's. ``ttl``: LangGraph's ``TTLConfig``
    (``default_ttl`` in minutes, ``refresh_on_read``; pgmem's purge is the sweeper). ``search_mode``: pgmem's
    search mode for ``search(query=...)`` (``"hybrid"``, default, BM25 fused with vectors; ``"vector"``;
    ``"text"``). Raises pgmem errors (:mod:`pgmem.errors`); LangGraph's InvalidNamespaceError for bad labels.
    """

    supports_ttl = True

    def __init__(self, memory: Any, *, user_index: int | None = 0, index: Mapping[str, Any] | None = None,
                 ttl: TTLConfig | None = None, search_mode: str = "hybrid") -> None:
        from ..aio import AsyncMemory

        if user_index is not None and (not isinstance(user_index, int) or isinstance(user_index, bool)
                                       or user_index < 0):
            raise ValidationError(f"user_index must be a non-negative integer or None, got {user_index!r}",
                                  field="user_index")
        if search_mode not in ("hybrid", "vector", "text"):
            raise ValidationError(f"search_mode must be 'hybrid', 'vector' or 'text', got {search_mode!r}",
                                  field="search_mode")
        self.memory = memory
        self.is_async = isinstance(memory, AsyncMemory)
        self.user_index = user_index
        self.index_config = dict(index) if index else None
        fields = (index or {}).get("fields")
        self.fields: list[str] | None = [fields] if isinstance(fields, str) else (list(fields) if fields else None)
        self.ttl_config = ttl
        self.search_mode = search_mode
        self._clients: dict[str, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        if self.is_async:
            try:  # as AsyncPostgresStore: the loop the store is made on serves sync calls from other threads
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                pass

    # --- the two entry points ---------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run LangGraph operations in order of kind as LangGraph's PostgresStore does: reads (get, search,
        list_namespaces) first, then the puts (the last put of a key wins), grouped by user, each user's in
        one transaction. Returns one result per op (None for puts)."""
        if self.is_async:
            # As LangGraph's AsyncPostgresStore: from another thread (a sync node of an async graph), the ops run
            # on the event loop the store was used on; on that loop itself, blocking it would deadlock.
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if self._loop is None or running is self._loop or self._loop.is_closed():
                raise asyncio.InvalidStateError("this PgmemStore wraps an AsyncMemory: use abatch and the a* "
                                                "methods (sync calls work only from other threads)")
            return asyncio.run_coroutine_threadsafe(self.abatch(list(ops)), self._loop).result()
        ops = list(ops)
        for attempt in range(RETRIES + 1):
            try:
                return self._drive_sync(self._plan(ops))
            except DatabaseError as exc:
                if exc.sqlstate not in RETRY_SQLSTATES or attempt == RETRIES:
                    raise
                time.sleep(random.uniform(0.01, 0.05) * 2 ** attempt)
        raise AssertionError("unreachable")

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` for asyncio: native on an AsyncMemory, in a worker thread on a Memory."""
        ops = list(ops)
        if not self.is_async:
            return await asyncio.to_thread(self.batch, ops)
        self._loop = asyncio.get_running_loop()
        for attempt in range(RETRIES + 1):
            try:
                return await self._drive_async(self._plan(ops))
            except DatabaseError as exc:
                if exc.sqlstate not in RETRY_SQLSTATES or attempt == RETRIES:
                    raise
                await asyncio.sleep(random.uniform(0.01, 0.05) * 2 ** attempt)
        raise AssertionError("unreachable")

    # --- LangGraph's TTL sweeper API ---------------------------------------------------------------------------
    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> Any:
        """For code written for LangGraph's PostgresStore: nothing to start. Expired items are invisible at once
        and pgmem's purge removes them (``pgmem purge`` or ``pgmem.schedule_purge()``, as a role that may purge
        every user's rows: docs/lifecycle.md). Returns a finished future (an awaitable on an AsyncMemory)."""
        if self.is_async:
            async def started() -> None:
                return None

            return started()
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_result(None)
        return done

    def stop_ttl_sweeper(self, timeout: float | None = None) -> Any:
        """The counterpart of :meth:`start_ttl_sweeper`: True (an awaitable of True on an AsyncMemory)."""
        if self.is_async:
            async def stopped() -> bool:
                return True

            return stopped()
        return True

    # --- drivers: run a plan's calls with a sync or async client -------------------------------------------------
    # A plan is a generator of _Call requests; pgmem errors of a call are thrown back into it (it may retry).
    def _drive_sync(self, plan) -> Any:
        result: Any = None
        error: BaseException | None = None
        while True:
            try:
                call = plan.throw(error) if error is not None else plan.send(result)
            except StopIteration as stop:
                return stop.value
            result, error = None, None
            try:
                result = getattr(call.client, call.method)(*call.args, **call.kwargs)
            except PgmemError as exc:
                error = exc

    async def _drive_async(self, plan) -> Any:
        result: Any = None
        error: BaseException | None = None
        while True:
            try:
                call = plan.throw(error) if error is not None else plan.send(result)
            except StopIteration as stop:
                return stop.value
            result, error = None, None
            try:
                result = await getattr(call.client, call.method)(*call.args, **call.kwargs)
            except PgmemError as exc:
                error = exc

    # --- identity -----------------------------------------------------------------------------------------------
    def _client(self, namespace: Sequence[str], write: bool):
        """(client, user) for ``namespace`` (a plan step, though it needs no call today)."""
        if False:  # pragma: no cover - makes this a generator
            yield
        m = self.memory
        if m.user_id is not None:
            ns_user = namespace[self.user_index] if self.user_index is not None and len(namespace) > self.user_index \
                else None
            if write and self.user_index is not None and ns_user != m.user_id:
                raise IdentityError(f"this store acts for user {m.user_id!r}; namespace {tuple(namespace)!r} "
                                    f"names {ns_user!r} at position {self.user_index}")
            return m, m.user_id
        if self.user_index is None:  # the login's identity (bind_role); the database refuses a login without one
            return m, None
        if len(namespace) <= self.user_index:
            raise ValidationError(f"namespace {tuple(namespace)!r} names no user: this store reads the user from "
                                  f"label {self.user_index} of the namespace", field="namespace")
        user = namespace[self.user_index]
        client = self._clients.get(user)
        if client is None:
            client = self._clients[user] = m.with_identity(user_id=user)
        return client, user

    # --- the plan: every op, as calls of the client API ----------------------------------------------------------
    def _plan(self, ops: list[Op]):
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        later: dict[Any, tuple[Any, Any]] = {}  # memory id -> (client, record) to refresh after the reads
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                self._check_put(op)
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                results[i] = yield from self._get(op, later)
            elif isinstance(op, SearchOp):
                results[i] = yield from self._search(op, later)
            elif isinstance(op, ListNamespacesOp):
                results[i] = yield from self._list_namespaces(op)
            elif isinstance(op, PutOp):
                puts.pop((tuple(op.namespace), op.key), None)
                puts[(tuple(op.namespace), op.key)] = op
            else:
                raise ValidationError(f"unknown store operation {type(op).__name__}", field="ops")
        refresh: dict[int, tuple[Any, list[Any]]] = {}
        for client, rec in later.values():
            if (tuple(rec.metadata[NS]), rec.metadata[KEY]) not in puts:  # a put of the key sets its expiry anew
                refresh.setdefault(id(client), (client, []))[1].append(rec)
        for client, recs in refresh.values():
            yield from self._refresh(client, recs)
        if puts:
            yield from self._put_all(list(puts.values()))
        return results

    def _check_put(self, op: PutOp) -> None:
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if op.namespace[0] == "langgraph":
            raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {op.namespace}')
        if not isinstance(op.key, str) or not op.key or "\x00" in op.key:
            raise ValidationError(f"key must be a non-empty string without NUL, got {op.key!r}", field="key")
        if op.value is not None:
            if not isinstance(op.value, Mapping):
                raise ValidationError(f"value must be a dict, got {type(op.value).__name__}", field="value")
            bad = [k for k in op.value if not isinstance(k, str) or k.startswith(RESERVED)]
            if bad:
                raise ValidationError(f"value keys {bad!r} are reserved for the store (prefix {RESERVED!r})",
                                      field="value")
        if op.ttl is not None and (isinstance(op.ttl, bool) or not isinstance(op.ttl, (int, float))
                                   or not math.isfinite(op.ttl) or op.ttl <= 0):
            raise ValidationError(f"ttl must be a positive number of minutes, got {op.ttl!r}", field="ttl")

    def _lookup(self, client: Any, pairs: Sequence[tuple[tuple[str, ...], str]]):
        """The live memories of the items ``pairs`` ((namespace, key)), as {pair: record}: one indexed
        ``get_keyed`` call."""
        keys = {item_key(ns, k): (tuple(ns), k) for ns, k in pairs}
        found = yield _call(client, "get_keyed", list(keys))
        return {keys[k]: rec for k, rec in found.items() if k in keys}

    def _get(self, op: GetOp, later: dict):
        client, _ = yield from self._client(op.namespace, write=False)
        pair = (tuple(op.namespace), op.key)
        found = yield from self._lookup(client, [pair])
        if pair not in found:
            return None
        rec = found[pair]
        if op.refresh_ttl:
            self._refresh_later(later, client, [rec])
        return _to_item(rec)

    def _search(self, op: SearchOp, later: dict):
        client, _ = yield from self._client(op.namespace_prefix, write=False)
        if not isinstance(op.limit, int) or isinstance(op.limit, bool) or op.limit < 1:
            raise ValidationError(f"limit must be a positive integer, got {op.limit!r}", field="limit")
        if not isinstance(op.offset, int) or isinstance(op.offset, bool) or op.offset < 0:
            raise ValidationError(f"offset must be a non-negative integer, got {op.offset!r}", field="offset")
        flt = {**translate_filter(op.filter), **_namespace_filter(op.namespace_prefix)}
        if op.query is not None and op.query.strip():
            flt[INDEXED] = True
            recs = yield _call(client, "search", op.query, k=op.offset + op.limit, filter=flt, mode=self.search_mode)
            recs = recs[op.offset:]
            cls = SearchItem
        else:
            # pgmem.list pages oldest first; LangGraph orders by updated_at, newest first: read every match.
            recs = yield from self._list_all(client, flt)
            recs.sort(key=lambda r: (r.updated_at, str(r.id)), reverse=True)
            recs = recs[op.offset:op.offset + op.limit]
            cls = SearchItem
        if op.refresh_ttl:
            self._refresh_later(later, client, recs)
        return [_to_item(r, cls) for r in recs]

    def _list_all(self, client: Any, flt: Mapping[str, Any]):
        out: list[Any] = []
        cursor = None
        while True:
            page = yield _call(client, "list", filter=flt, limit=PAGE, cursor=cursor)
            out += page.items
            cursor = page.next_cursor
            if cursor is None:
                return out

    def _list_namespaces(self, op: ListNamespacesOp):
        """One ``metadata_values`` call: the distinct namespaces, matched, cut, sorted and paged in SQL."""
        conds = list(op.match_conditions or ())
        prefix: tuple[str, ...] = ()
        for c in conds:
            if c.match_type == "prefix":
                fixed = []
                for label in c.path:
                    if label == "*":
                        break
                    fixed.append(label)
                if len(fixed) > len(prefix):
                    prefix = tuple(fixed)
        client, _ = yield from self._client(prefix, write=False)
        prefixes = [list(c.path) for c in conds if c.match_type == "prefix"]
        suffixes = [list(c.path) for c in conds if c.match_type == "suffix"]
        values = yield _call(client, "metadata_values", NS, prefixes=prefixes or None, suffixes=suffixes or None,
                             max_depth=op.max_depth, limit=op.limit, offset=op.offset)
        return [tuple(v) for v in values]

    # --- writes ---------------------------------------------------------------------------------------------------
    def _ttl_minutes(self, op: PutOp) -> float | None:
        from langgraph.store.base import NOT_PROVIDED

        if op.ttl is NOT_PROVIDED:
            return (self.ttl_config or {}).get("default_ttl")
        return op.ttl

    def _item(self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any], index: Any,
              ttl: float | None) -> dict[str, Any]:
        """The put_keyed item of one put."""
        text = "" if index is False else item_text(value, self.fields if index is None else list(index))
        path = _path(namespace)
        meta = {**value, NS: list(namespace), PREFIXES: [_path(namespace[:i]) for i in range(1, len(namespace) + 1)],
                KEY: key, INDEXED: bool(text)}
        if ttl is not None:
            meta[TTL] = ttl
        content = text or f"{path}/{key}"
        return {"key": item_key(namespace, key), "content": content, "metadata": meta,
                # when another memory of the user holds the text, the item's own last line makes it its own
                "alt_content": f"{content}\n[{path}/{key}]",
                "session_id": path if len(path) <= 256 else None, "ttl": ttl}

    def _put_all(self, ops: list[PutOp]):
        by_user: dict[str, tuple[Any, list[PutOp]]] = {}
        for op in ops:
            client, user = yield from self._client(op.namespace, write=True)
            by_user.setdefault(user, (client, []))[1].append(op)
        for client, user_ops in by_user.values():
            yield from self._put_user(client, user_ops)

    def _put_user(self, client: Any, ops: list[PutOp]):
        """The puts of one user as one ``put_keyed`` call (one statement, all or nothing): an existing item is
        updated in place (its id, ``created_at`` and history stay, its expiry is the put's), a new one added,
        ``value=None`` deletes; concurrent puts of a key wait for each other in the database."""
        items = []
        for op in ops:
            if op.value is None:
                items.append({"key": item_key(op.namespace, op.key), "content": None})
                continue
            item = self._item(tuple(op.namespace), op.key, op.value, op.index, self._ttl_minutes(op))
            ttl = item.pop("ttl")  # counted by the database from the write itself
            item["ttl"] = timedelta(minutes=ttl) if ttl is not None else None
            items.append(item)
        yield _call(client, "put_keyed", items)

    @staticmethod
    def _refresh_later(later: dict, client: Any, recs: Sequence[Any]) -> None:
        for r in recs:
            if (r.metadata or {}).get(TTL) is not None:
                later[r.id] = (client, r)

    def _refresh(self, client: Any, recs: Sequence[Any]):
        """Move the expiry of the items of ``recs`` that have a TTL to ``ttl`` minutes from now: one
        ``set_expiry`` call (an item deleted since is skipped by the database)."""
        ttls = {r.id: timedelta(minutes=r.metadata[TTL]) for r in recs if (r.metadata or {}).get(TTL) is not None}
        if ttls:
            yield _call(client, "set_expiry", ttls)


__all__ = ["PgmemStore", "item_text", "translate_filter"]
