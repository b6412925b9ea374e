"""pgmem's exceptions, and the one place where database errors become them.

Every error a caller sees from pgmem is a :class:`PgmemError`; raw ``psycopg`` errors never escape the
public API. The stored functions raise their own SQLSTATEs (class ``PGM``), listed in ``SQLSTATE_CLASSES``
and in docs/errors.md; constraint violations are mapped by constraint name.
"""

from __future__ import annotations

import re

import psycopg


class PgmemError(Exception):
    """Base class of every pgmem error. ``sqlstate`` is set when the database raised it."""

    sqlstate: str | None = None

    def __init__(self, message: str, *, sqlstate: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class ValidationError(PgmemError, ValueError):
    """Bad input, refused before anything was written. ``field`` names it; ``index`` is its batch position."""

    def __init__(self, message: str, *, field: str | None = None, index: int | None = None, **kw) -> None:
        if index is not None:
            message = f"item {index}: {message}"
        super().__init__(message, **kw)
        self.field = field
        self.index = index


class DimensionMismatch(ValidationError):
    """A vector's length differs from its space's dimension count (``expected 384 dimensions, got 768``)."""


class EmbeddingSpaceMismatch(ValidationError):
    """The embedding model differs from the one the space is bound to (embedding drift guard)."""


class InvalidFilter(ValidationError):
    """A metadata filter with an unknown operator or a value of the wrong type."""


class IdentityError(PgmemError, PermissionError):
    """No pgmem user is set for this connection, or the login may not act for the named user."""


class PermissionDenied(PgmemError, PermissionError):
    """The database role lacks a privilege (for example a bound agent creating a space)."""


class UnsafePath(PgmemError, PermissionError):
    """A file or directory where pgmem keeps memories (journal, backup, export) is not safe to use: a
    symbolic link, owned by another user, or writable by others. The message names the path, the hint the fix."""


class NotFound(PgmemError, LookupError):
    """The memory or space does not exist for this user (other users' rows are never visible)."""


class VersionConflict(PgmemError):
    """Optimistic concurrency: the memory changed since the version the caller read."""


class EditError(PgmemError):
    """A literal edit could not be applied."""


class NeedleNotFound(EditError):
    """The text to replace does not occur in the memory."""


class AmbiguousEdit(EditError):
    """The text to replace occurs more than once (overlapping occurrences counted); ``count`` says how often."""

    def __init__(self, message: str, *, count: int, **kw) -> None:
        super().__init__(message, **kw)
        self.count = count


class DuplicateMemory(PgmemError):
    """An update or edit would make a memory identical to another memory of the same user and space."""


class ScopeRequired(PgmemError):
    """Deleting every memory of a user needs an explicit confirmation."""


class SchemaError(PgmemError):
    """The database is not ready for pgmem (missing extension, roles or migrations)."""


class EmbedderError(PgmemError):
    """The embedding provider failed or returned something unusable (not a database fault)."""


class SummariserError(PgmemError):
    """The language model behind :class:`pgmem.summarise.LLMSummariser` failed or replied with something that is
    not the facts asked for; ``status`` is the HTTP status when there was one (not a database fault)."""

    def __init__(self, message: str, *, status: int | None = None, **kw) -> None:
        super().__init__(message, **kw)
        self.status = status


class DatabaseUnavailable(PgmemError, ConnectionError):
    """The database could not be reached or the connection broke."""


class DatabaseError(PgmemError):
    """Any other database error, with its SQLSTATE."""


SQLSTATE_CLASSES: dict[str, type[PgmemError]] = {
    "PGM00": SchemaError,
    "PGM01": IdentityError,
    "PGM02": DimensionMismatch,
    "PGM03": NotFound,
    "PGM04": VersionConflict,
    "PGM05": AmbiguousEdit,
    "PGM06": NeedleNotFound,
    "PGM07": InvalidFilter,
    "PGM08": ValidationError,
    "PGM09": EmbeddingSpaceMismatch,
    "PGM10": ScopeRequired,
    "PGM11": SchemaError,  # a route that cannot carry the identity on this server (a Citus cluster)
    "42501": PermissionDenied,  # insufficient_privilege
    "42P01": SchemaError,  # undefined_table
    "42883": SchemaError,  # undefined_function
    "3F000": SchemaError,  # invalid_schema_name
    "22021": ValidationError,  # character_not_in_repertoire (NUL bytes)
    "22P05": ValidationError,  # untranslatable_character (\u0000 in jsonb)
    "22P02": ValidationError,  # invalid_text_representation
    "22007": ValidationError,  # invalid_datetime_format (a time given as text that is none)
    "22008": ValidationError,  # datetime_field_overflow
    "42846": ValidationError,  # cannot_coerce (e.g. a number where an id goes)
    "42804": ValidationError,  # datatype_mismatch
    "42704": ValidationError,  # undefined_object (e.g. a text search configuration that does not exist)
    "22023": ValidationError,  # invalid_parameter_value
    "22003": ValidationError,  # numeric_value_out_of_range (e.g. a component beyond halfvec's +-65504)
    "22001": ValidationError,  # string_data_right_truncation
    "54000": ValidationError,  # program_limit_exceeded (e.g. tsvector too long)
}

CONSTRAINT_CLASSES: dict[str, type[PgmemError]] = {
    "memories_content_key": DuplicateMemory,
    "memories_content_check": ValidationError,
    "memories_user_id_check": ValidationError,
    "memories_agent_id_check": ValidationError,
    "memories_session_id_check": ValidationError,
    "memories_metadata_check": ValidationError,
}


def from_psycopg(exc: BaseException) -> PgmemError:
    """Translate a psycopg exception into the matching :class:`PgmemError` (returned, not raised)."""
    if isinstance(exc, PgmemError):
        return exc
    if isinstance(exc, psycopg.OperationalError) and not getattr(exc, "sqlstate", None):
        return DatabaseUnavailable(f"database unavailable: {exc}")
    if isinstance(exc, psycopg.DataError) and not getattr(exc, "sqlstate", None):
        # refused by psycopg before sending, e.g. "PostgreSQL text fields cannot contain NUL (0x00) bytes"
        return ValidationError(str(exc))
    diag = getattr(exc, "diag", None)
    sqlstate = getattr(exc, "sqlstate", None)
    message = (diag.message_primary if diag is not None else None) or str(exc)
    hint = diag.message_hint if diag is not None else None
    constraint = diag.constraint_name if diag is not None else None
    if constraint in CONSTRAINT_CLASSES:
        cls = CONSTRAINT_CLASSES[constraint]
        if cls is DuplicateMemory:
            message = "another memory of this user and space already has this content"
        return cls(message, sqlstate=sqlstate, hint=hint)
    if sqlstate and sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03"):
        return DatabaseUnavailable(f"database unavailable: {message}", sqlstate=sqlstate)
    cls = SQLSTATE_CLASSES.get(sqlstate or "", DatabaseError)
    if cls is AmbiguousEdit:
        m = re.search(r"occurs (\d+) times", message)
        return AmbiguousEdit(message, count=int(m.group(1)) if m else -1, sqlstate=sqlstate, hint=hint)
    if cls is DatabaseError:
        message = f"database error {sqlstate}: {message}"
    return cls(message, sqlstate=sqlstate, hint=hint)


_SECRET_KEYS = ("password", "user", "sslpassword")


def redact_dsn(dsn: str | None) -> str:
    """``dsn`` as it may appear in a message: without its user and password, in either form libpq accepts.
    A URL (``postgresql://user:secret@host/db?password=...``) keeps its scheme-less rest, ``host/db``, and its
    query without those keys; a keyword DSN (``host=h password=secret``) keeps its other keywords. One that
    does not parse is not echoed at all."""
    if not dsn:
        return ""
    from urllib.parse import parse_qsl, urlencode, urlsplit

    if "://" in dsn:
        try:
            parts = urlsplit(dsn)
            host = parts.netloc.rpartition("@")[2]
            query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                               if k not in _SECRET_KEYS], safe="/")
        except ValueError:
            return "(a DSN that does not parse)"
        return host + parts.path + (f"?{query}" if query else "")
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        kept = {k: v for k, v in conninfo_to_dict(dsn).items() if k not in _SECRET_KEYS}
        return make_conninfo(**kept)
    except psycopg.Error:
        return "(a DSN that does not parse)"
