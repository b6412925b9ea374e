"""Input checks that run before anything is sent to the database.

Limits (also enforced by the schema, see docs/limits.md):

- content: 1 to ``MAX_CONTENT_CHARS`` (100,000) Unicode characters, not only white space. PostgreSQL's
  ``tsvector`` holds at most 1 MiB, and 100,000 characters are at most 400,000 bytes of UTF-8, so
  full-text indexing of the longest memory stays safe.
- metadata: a JSON object of at most ``MAX_METADATA_BYTES`` (64 KiB) serialised, finite numbers only.
- metadata and filters: at most ``MAX_JSON_DEPTH`` (100) levels of objects and arrays.
- ids (user, agent, session): 1 to 256 characters.
- space names: ``^[a-z0-9][a-z0-9_.-]{0,62}$`` (the schema's own check).
- text anywhere: no NUL character (PostgreSQL text cannot hold it) and no lone surrogate (not UTF-8).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
from datetime import date, datetime
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from uuid import UUID

import numpy as np

from .errors import DimensionMismatch, InvalidFilter, ValidationError

MAX_CONTENT_CHARS = 100_000
MAX_METADATA_BYTES = 65_536
MAX_ID_CHARS = 256
MAX_K = 1000
MAX_BATCH = 10_000
# Levels of objects and arrays in metadata and filters. The filter compiler allows 32 operator levels (which
# take up to 64 JSON levels: an $and list and its items); metadata has no use for more. Past this the
# document is refused here rather than by Python's recursion limit or PostgreSQL's stack depth.
MAX_JSON_DEPTH = 100
SPACE_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


def check_text(value: Any, field: str, *, index: int | None = None, label: str | None = None) -> str:
    """Refuse a non-string, a NUL character or a lone surrogate; return the string unchanged.
    ``label`` (default ``field``) names the value in the message, e.g. ``metadata value at $.a``."""
    label = label or field
    if not isinstance(value, str):
        raise ValidationError(f"{label} must be a string, got {type(value).__name__}", field=field, index=index)
    if "\x00" in value:
        raise ValidationError(f"{label} contains a NUL character (\\x00), which PostgreSQL text cannot store",
                              field=field, index=index)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{label} contains a lone surrogate ({value[exc.start]!r} at position {exc.start}); "
                              "it is not valid Unicode text", field=field, index=index) from None
    return value


def check_content(value: Any, *, field: str = "content", index: int | None = None) -> str:
    check_text(value, field, index=index)
    if not value.strip():
        raise ValidationError(f"{field} is empty or only white space", field=field, index=index)
    if len(value) > MAX_CONTENT_CHARS:
        raise ValidationError(f"{field} has {len(value)} characters; the limit is {MAX_CONTENT_CHARS}",
                              field=field, index=index)
    return value


def check_query(value: Any) -> str:
    """A search text: refused when empty or white space only (it would otherwise match everything), or longer
    than ``MAX_CONTENT_CHARS`` characters, as in SQL (which also refuses more than 256 distinct terms, a count
    that depends on the space's text search configuration: docs/security.md)."""
    check_text(value, "query")
    if not value.strip():
        raise ValidationError("query text is empty or only white space", field="query")
    if len(value) > MAX_CONTENT_CHARS:
        raise ValidationError(f"query text has {len(value)} characters; the limit is {MAX_CONTENT_CHARS}", field="query")
    return value


def check_id(value: Any, field: str, *, index: int | None = None, optional: bool = True) -> str | None:
    if value is None:
        if optional:
            return None
        raise ValidationError(f"{field} is required", field=field, index=index)
    check_text(value, field, index=index)
    if not value or len(value) > MAX_ID_CHARS:
        raise ValidationError(f"{field} must have 1 to {MAX_ID_CHARS} characters", field=field, index=index)
    if not value.strip():  # str.strip(): Unicode white space too, as for content
        raise ValidationError(f"{field} is only white space", field=field, index=index)
    return value


def _walk_json(value: Any, field: str, index: int | None, error: type[ValidationError] = ValidationError) -> None:
    """Check every key and value of a JSON document, iteratively (a document nested deeper than Python's
    recursion limit is refused like any other, never with RecursionError): at most ``MAX_JSON_DEPTH`` levels
    of objects and arrays, string keys, text without NUL or lone surrogate, finite numbers."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            check_text(value, field, index=index, label=f"{field} value at {path}")
        elif isinstance(value, bool) or value is None or isinstance(value, int):
            continue
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ValidationError(f"{field} value at {path} is {value}; JSON has no NaN or infinity",
                                      field=field, index=index)
        elif isinstance(value, (Mapping, list, tuple)):
            if depth >= MAX_JSON_DEPTH:
                raise error(f"{field} is nested more than {MAX_JSON_DEPTH} levels deep (at {path[:80]}"
                            f"{'...' if len(path) > 80 else ''})", field=field, index=index)
            if isinstance(value, Mapping):
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise ValidationError(f"{field} key {key!r} at {path} is not a string", field=field,
                                              index=index)
                    check_text(key, field, index=index, label=f"{field} key at {path}")
                    stack.append((item, f"{path}.{key}", depth + 1))
            else:
                stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
        else:
            raise ValidationError(f"{field} value at {path} of type {type(value).__name__} is not JSON",
                                  field=field, index=index)


def check_metadata(value: Any, *, field: str = "metadata", index: int | None = None,
                   error: type[ValidationError] = ValidationError) -> dict | None:
    """A JSON object with string keys, finite numbers, no NUL or lone surrogate, at most ``MAX_JSON_DEPTH``
    (100) levels of objects and arrays, at most 64 KiB. Raises ValidationError (``error`` for too deep)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValidationError(f"{field} must be a JSON object (dict), got {type(value).__name__}",
                              field=field, index=index)
    _walk_json(value, field, index, error)
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise ValidationError(f"{field} is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}",
                              field=field, index=index)
    return dict(value)


def check_filter(value: Any) -> dict | None:
    """A metadata filter: a JSON object (the operators, and a nesting of at most 32 operators, are checked by
    the database, error InvalidFilter). Deeper than ``MAX_JSON_DEPTH`` JSON levels: InvalidFilter here."""
    return check_metadata(value, field="filter", error=InvalidFilter)


def check_space_name(value: Any, field: str = "space") -> str:
    """An embedding space name as the schema allows it (``^[a-z0-9][a-z0-9_.-]{0,62}$``, constraint
    ``spaces_name_check``); ValidationError naming what is wrong (a NUL character included)."""
    check_text(value, field)
    if not SPACE_NAME.fullmatch(value):
        raise ValidationError(f"space name must be 1 to 63 characters a-z, 0-9, _ . - starting with a letter or "
                              f"digit, got {value[:80]!r}", field=field)
    return value


def check_vector(value: Any, dims: int, *, field: str = "embedding", index: int | None = None,
                 context: str = "") -> np.ndarray:
    """Return ``value`` (a sequence of numbers, a numpy array, or pgvector's ``Vector``/``HalfVector`` as read
    back from PostgreSQL) as a float32 array of shape ``(dims,)``; refuse a wrong length, NaN, ±Inf or a zero
    vector.

    The message of a wrong length reads ``expected 384 dimensions, got 768`` followed by ``context``
    (the space and model).
    """
    if hasattr(value, "to_numpy") and not isinstance(value, np.ndarray):  # pgvector's Vector / HalfVector
        value = value.to_numpy()
    try:
        with np.errstate(over="ignore"):  # values beyond float32 become inf, refused just below
            arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValidationError(f"{field} must be a sequence of numbers", field=field, index=index) from None
    if arr.ndim != 1:
        raise ValidationError(f"{field} must be one-dimensional, got shape {arr.shape}", field=field, index=index)
    if arr.shape[0] != dims:
        raise DimensionMismatch(f"expected {dims} dimensions, got {arr.shape[0]}{context}", field=field, index=index)
    # Fast path: one dot product (about 2 us for 384 dimensions; the checks below take about 40 us). A squared
    # norm well inside float32's range (1.2e-38 .. 3.4e38) means no NaN, no infinity, not a zero vector, and
    # no underflow or overflow of pgvector's float4 sum of squares either: above 1e-30, the squares that make
    # up the sum are normal float32 numbers; below 1e30, no partial sum can reach infinity. Anything else
    # takes the checks below, which say what is wrong.
    with np.errstate(all="ignore"):
        sq = float(np.dot(arr, arr))
    if 1e-30 < sq < 1e30:
        return arr
    if not np.all(np.isfinite(arr)):
        raise ValidationError(f"{field} contains NaN or infinity", field=field, index=index)
    if not np.any(arr):
        raise ValidationError(f"{field} is a zero vector, which has no cosine similarity", field=field, index=index)
    with np.errstate(over="ignore", under="ignore"):
        sq = np.sum(arr * arr, dtype=np.float32)  # as pgvector computes it: float4 squares, float4 sum
    if sq == 0 or not np.isfinite(sq):
        raise ValidationError(f"{field} has a squared norm that {'underflows' if sq == 0 else 'overflows'} float32 "
                              "(components too small or too large), so it has no cosine similarity",
                              field=field, index=index)
    return arr


def check_datetime(value: Any, field: str, *, index: int | None = None) -> datetime | str | None:
    """A point in time: None, an aware ``datetime``, or an ISO 8601 string with a UTC offset or ``Z``
    (``"2025-07-25T09:30:00+02:00"``, ``"2025-07-25 07:30Z"``), returned as an aware datetime, or PostgreSQL's
    ``"infinity"`` / ``"-infinity"`` (``expires_at="infinity"``: never, whatever the space's TTL), returned as
    given. Refused (ValidationError naming ``field``): a naive ``datetime``, a string without an offset
    (``"2025-07-25"``, ``"2025-07-25 09:30"``), a ``date``, any other string (``"yesterday"``) or type.
    PostgreSQL would read an offset-less value in the session's TimeZone, so the same call would mean another
    instant on a server configured differently."""
    if value is None:
        return None
    example = "an aware datetime such as datetime(2025, 7, 25, tzinfo=timezone.utc) or '2025-07-25T00:00:00Z'"
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("infinity", "+infinity", "-infinity"):  # the same in every time zone
            return value
        try:
            # 'Z' spelt as an offset: Python 3.10's fromisoformat reads no 'Z'
            parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
        except ValueError:
            raise ValidationError(f"{field} is not an ISO 8601 date and time: {value!r}; pass {example}",
                                  field=field, index=index) from None
        if parsed.utcoffset() is None:
            raise ValidationError(f"{field} {value!r} has no UTC offset; pass {example}", field=field, index=index)
        return parsed
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise ValidationError(f"{field} has no time zone; pass {example}", field=field, index=index)
        return value
    kind = "a date (no time of day, no time zone)" if isinstance(value, date) else type(value).__name__
    raise ValidationError(f"{field} must be a point in time, got {kind}; pass {example}", field=field, index=index)


def check_limit(value: Any, high: int = 1000, field: str = "limit") -> int:
    """A page size: an ``int`` (not a bool) from 1 to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise ValidationError(f"{field} must be an integer from 1 to {high}, got {value!r}", field=field)
    return value


def check_min_score(value: Any) -> float | None:
    """``min_score`` of a search: None, or a finite number (a bool is not one); returned as a float."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValidationError(f"min_score must be a finite number, got {value!r}", field="min_score")
    return float(value)


def check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValidationError(f"k must be an integer from 1 to {MAX_K}, got {k!r}", field="k")
    return k


def check_batch_size(items: Sequence) -> None:
    """A batch is a list (or tuple) of at most ``MAX_BATCH`` items: a string is refused, not stored one
    character per memory, and so is a mapping (its keys would be the items)."""
    if isinstance(items, (str, bytes, bytearray, Mapping)) or not isinstance(items, Sequence):
        raise ValidationError(f"a batch must be a list of items, got {type(items).__name__}", field="items")
    if len(items) > MAX_BATCH:
        raise ValidationError(f"a batch holds at most {MAX_BATCH} memories, got {len(items)}", field="items")


# --- items of a batch, and the texts embedded with a memory (shared by the clients and the writer) ------
SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+")
MAX_SENTENCE_VECTORS = 32
VECTOR_KINDS = ("sentence", "context")
MAX_EXTRA_VECTORS = 1000  # a memory's extra vectors at most: pgmem.add, add_batch, put_keyed and import_user
# The extra vectors a text write stores by default (``contextual=True``): the ones the LoCoMo measurement of
# each kind's contribution to recall supports (docs/recall.md, "What each extra vector pays for").
DEFAULT_VECTOR_KINDS = frozenset(VECTOR_KINDS)


def vector_kinds(contextual: bool | Collection[str]) -> frozenset[str]:
    """The extra vector kinds a client's ``contextual`` setting stores: True the default kinds
    (:data:`DEFAULT_VECTOR_KINDS`), False none, or the kinds named (of :data:`VECTOR_KINDS`). Raises
    ValidationError for an unknown kind."""
    if contextual is True:
        return DEFAULT_VECTOR_KINDS
    if contextual is False or contextual is None:
        return frozenset()
    if isinstance(contextual, str) or not isinstance(contextual, Collection):
        raise ValidationError(f"contextual must be True, False or a collection of {', '.join(VECTOR_KINDS)}; "
                              f"got {contextual!r}", field="contextual")
    unknown = sorted(set(contextual) - set(VECTOR_KINDS))
    if unknown:
        raise ValidationError(f"unknown extra vector kind(s) {unknown}: use {', '.join(VECTOR_KINDS)}",
                              field="contextual")
    return frozenset(contextual)


def content_hash(content: str) -> bytes:
    """SHA-256 of the UTF-8 bytes of ``content``: ``pgmem.content_hash`` in SQL, the key by which a user's
    identical contents are stored once per space."""
    return hashlib.sha256(content.encode("utf-8")).digest()


def extra_texts(content: str, metadata: Mapping[str, Any] | None, previous: str | None,
                kinds: Collection[str] = VECTOR_KINDS) -> list[tuple[str, str]]:
    """The extra texts embedded with a memory for hybrid recall (docs/recall.md), as ``(kind, text)``, of the
    ``kinds`` asked for:

    - ``sentence``: each sentence (split after ``.``, ``!`` or ``?``) of a memory of two or more sentences,
      at most 32, prefixed with ``metadata["speaker"] + ": "`` when the memory names a speaker;
    - ``context``: the previous memory of the same session, a newline, then this memory.
    """
    out: list[tuple[str, str]] = []
    sentences = [part.strip() for part in SENTENCE_SPLIT.split(content) if part.strip()] \
        if "sentence" in kinds else []
    if len(sentences) > 1:
        speaker = metadata.get("speaker") if metadata else None
        for sentence in sentences[:MAX_SENTENCE_VECTORS]:
            if isinstance(speaker, str) and speaker and not sentence.startswith(speaker):
                sentence = f"{speaker}: {sentence}"
            out.append(("sentence", sentence))
    if previous is not None and "context" in kinds:
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


ITEM_KEYS = frozenset({"content", "metadata", "agent_id", "session_id", "expires_at", "created_at", "embedding", "id",
                       "user_id"})


def check_known_keys(obj: Mapping[str, Any], known: Sequence[str], what: str, *, where: str = "",
                     after: str = "") -> None:
    """ValidationError naming the keys of ``obj`` outside ``known`` (each with the accepted key it is closest
    to, by :func:`difflib.get_close_matches` at 0.75, when one is) and every accepted key: ``"<where>: unknown
    key 'sesion_id' (did you mean 'session_id'?); <what> keys are ... <after>"``. ``field`` is the first
    unknown key. Input is taken whole or not at all, so a misspelt key is an error, never dropped."""
    import difflib

    unknown = [k for k in obj if k not in known]
    if not unknown:
        return
    named = []
    for k in unknown:
        close = difflib.get_close_matches(str(k), list(known), n=1, cutoff=0.75)
        named.append(repr(k) + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise ValidationError(f"{where + ': ' if where else ''}unknown key{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(named)}; {what} keys are {', '.join(known)}{' ' + after if after else ''}",
                          field=str(unknown[0]))


# The keys pgmem.export_user writes per row kind, which pgmem.import_user accepts (and refuses any other):
# sql/current/90-retention-erasure.sql.
EXPORT_KEYS = {
    "memory": ("kind", "id", "user_id", "space", "agent_id", "session_id", "content", "metadata", "created_at",
               "updated_at", "expires_at", "version", "valid_from", "valid_to", "superseded_by", "embedding", "vectors",
               "sources"),
    "turn": ("kind", "turn_id", "user_id", "space", "session_id", "agent_id", "role", "content", "metadata", "created_at",
             "expires_at", "consolidated_at", "embedding"),
    "history": ("kind", "event_id", "user_id", "memory_id", "event", "old_content", "new_content", "old_metadata",
                "new_metadata", "actor_agent_id", "actor_role", "created_at", "related_id"),
}


def check_export_row(row: Any, where: str) -> None:
    """One row of a ``pgmem export`` (``pgmem.export_user``) as ``pgmem.import_user`` takes it: an object of kind
    memory, turn or history with no key outside ``EXPORT_KEYS[kind]`` (an extra vector: kind and embedding).
    ValidationError starting with ``where`` (``"row 3"``, ``"alice.jsonl line 3"``) otherwise."""
    if not isinstance(row, Mapping) or not isinstance(row.get("kind"), str) or row["kind"] not in EXPORT_KEYS:
        raise ValidationError(f"{where}: expected an object of kind memory, turn or history", field="rows")
    check_known_keys(row, EXPORT_KEYS[row["kind"]], f"a {row['kind']} row's", where=where,
                     after="(those pgmem.export_user writes)")
    if row["kind"] != "memory":
        return
    # As pgmem.import_user checks them (and pgmem.add takes extra vectors): the same messages.
    vectors, sources = row.get("vectors"), row.get("sources")
    if not isinstance(vectors, (list, type(None))) or not isinstance(sources, (list, type(None))):
        raise ValidationError(f"{where}: vectors and sources must be arrays", field="rows")
    for vec in vectors or ():
        if isinstance(vec, Mapping):
            check_known_keys(vec, ("kind", "embedding"), "an extra vector's", where=where)
    if len(vectors or ()) > MAX_EXTRA_VECTORS:
        raise ValidationError(f"{where}: a memory holds at most {MAX_EXTRA_VECTORS} extra vectors", field="rows")
    if any(not isinstance(vec, Mapping) or vec.get("kind") not in VECTOR_KINDS for vec in vectors or ()):
        raise ValidationError(f"{where}: an extra vector is an object of kind sentence or context", field="rows")
    version = row.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, (int, float))
                                or not float(version).is_integer() or not 1 <= version <= 2147483646):
        raise ValidationError(f"{where}: version must be a whole number from 1 to 2147483646, got {version!r}",
                              field="rows")


def export_row_json(row: Mapping[str, Any], where: str) -> str:
    """``row`` as JSON text the way ``pgmem.export_user`` writes its values: a ``datetime`` as ISO 8601 (an aware
    one only, :func:`check_datetime`), a ``UUID`` as text. ValidationError starting with ``where`` for a NaN or an
    infinity (JSON holds neither) or a value of another type JSON cannot hold."""
    def plain(value: Any) -> Any:
        if isinstance(value, datetime):
            return check_datetime(value, where).isoformat()
        if isinstance(value, UUID):
            return str(value)
        raise ValidationError(f"{where}: a value of type {type(value).__name__} is not JSON", field="rows")

    try:
        return json.dumps(dict(row), allow_nan=False, default=plain)
    except ValidationError:
        raise
    except ValueError as exc:  # NaN or an infinity
        raise ValidationError(f"{where}: {exc} (NaN and infinities are not JSON)", field="rows") from None


def check_item(item: str | Mapping[str, Any], index: int | None = None) -> dict[str, Any]:
    """One item of :meth:`Memory.add_many`, validated: a dict with every key of ``ITEM_KEYS`` (None when not
    given; ``metadata`` ``{}``; ``id`` a UUID). The embedding is checked later, against the space's dims.
    Raises ValidationError naming ``index``."""
    if isinstance(item, str):
        item = {"content": item}
    elif not isinstance(item, Mapping):
        raise ValidationError("must be a string or a mapping with 'content'", field="items", index=index)
    unknown = set(item) - ITEM_KEYS
    if unknown:
        raise ValidationError(f"unknown keys {sorted(unknown)}", field="items", index=index)
    client_id = item.get("id")
    if client_id is not None and not isinstance(client_id, UUID):
        try:
            client_id = UUID(check_text(client_id, "id", index=index))
        except ValueError:
            raise ValidationError(f"id must be a UUID, got {client_id!r}", field="id", index=index) from None
    return {
        "content": check_content(item.get("content"), index=index),
        "metadata": check_metadata(item.get("metadata"), index=index) or {},
        "agent_id": check_id(item.get("agent_id"), "agent_id", index=index),
        "session_id": check_id(item.get("session_id"), "session_id", index=index),
        "expires_at": check_datetime(item.get("expires_at"), "expires_at", index=index),
        "created_at": check_datetime(item.get("created_at"), "created_at", index=index),
        "embedding": item.get("embedding"),
        "id": client_id,
        "user_id": check_id(item.get("user_id"), "user_id", index=index),
    }
