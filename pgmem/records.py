"""The records pgmem's clients return (frozen dataclasses, one per kind of result row) and the psycopg row
factories that make them from result rows without an intermediate dict.

Both clients (:class:`pgmem.Memory`, :class:`pgmem.AsyncMemory`) return these; nothing here touches the
database or imports the rest of pgmem.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any
from uuid import UUID


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


def from_row(cls, row: Mapping[str, Any]):
    """A ``cls`` (a record dataclass) from a row dict: the keys named like a field fill it, other keys are left
    out, fields without a key keep their defaults."""
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
    """A psycopg row factory that makes each result row a ``cls`` (a dataclass) directly, as ``from_row(cls,
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



MEMORY_ROWS = record_rows(MemoryRecord)
VECTOR_ROWS = record_rows(MemoryRecord, score_from="similarity")  # vector search: score = cosine similarity

__all__ = ["AddResult", "Context", "ContextItem", "HistoryEvent", "MEMORY_ROWS", "MemoryRecord", "Page",
           "PurgeResult", "Source", "Space", "SpaceStats", "Turn", "VECTOR_ROWS", "from_row", "record_rows"]
