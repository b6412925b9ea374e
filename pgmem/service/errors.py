"""Errors of the HTTP service and how every error becomes a JSON response.

A response body is always ``{"error": {"type", "code", "message", "hint", "field"}}``: ``type`` the pgmem
exception class, ``code`` its SQLSTATE when it has one (``PGM03``...), else a short name
(``unauthorized``, ``rate_limited``, ``payload_too_large``, ``bad_json``...). Never a traceback.
"""

from __future__ import annotations

from typing import Any

from ..errors import (
    SQLSTATE_CLASSES, DatabaseUnavailable, DuplicateMemory, EditError, EmbedderError, IdentityError, NotFound,
    PermissionDenied, PgmemError, SchemaError, ScopeRequired, ValidationError, VersionConflict,
)


class _Fielded:
    def __init__(self, message: str, *, field: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.field = field


class Unauthorized(_Fielded, IdentityError):
    """No credential, or one the service does not know (revoked, expired, mistyped): HTTP 401."""

    code = "unauthorized"


class Forbidden(_Fielded, IdentityError):
    """A known credential that may not do this (another user, a read-only key writing): HTTP 403."""

    code = "forbidden"


class RateLimited(PgmemError):
    """Too many requests for one key: HTTP 429 with ``Retry-After`` (seconds)."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: float, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class Overloaded(PgmemError):
    """The service cannot start this request now (its bound on requests in flight is reached, or no database
    connection came free within the pool wait): HTTP 503 with ``Retry-After`` (seconds), answered before any
    database work."""

    code = "overloaded"

    def __init__(self, message: str, *, retry_after: float, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ShareExceeded(RateLimited):
    """One key holds its whole share of the requests in flight: HTTP 429 with ``Retry-After``."""

    code = "concurrency_limited"


class ClientGone(PgmemError):
    """The client disconnected before the request's database work began; nothing is done and nobody reads the
    answer (logged as 499, nginx's code for it)."""

    code = "client_gone"


class PayloadTooLarge(ValidationError):
    """A request body above the configured limit: HTTP 413."""

    code = "payload_too_large"


class BadJson(ValidationError):
    """A body that is not JSON at all: HTTP 400."""

    code = "bad_json"


class BadRequest(ValidationError):
    """A request the service refuses before routing it (a Host header it does not serve): HTTP 400."""

    code = "bad_request"


class RouteNotFound(NotFound):
    code = "no_such_route"


class MethodNotAllowed(PgmemError):
    code = "method_not_allowed"


# The first PGM SQLSTATE of each class (a ValidationError raised in Python carries none of its own).
_CLASS_CODES: dict[type, str] = {}
for _state, _cls in SQLSTATE_CLASSES.items():
    if _state.startswith("PGM"):
        _CLASS_CODES.setdefault(_cls, _state)
_CLASS_CODES.setdefault(DuplicateMemory, "23505")

# (class, HTTP status), first match wins.
STATUS: list[tuple[type, int]] = [
    (Unauthorized, 401), (RateLimited, 429), (Overloaded, 503), (ClientGone, 499), (PayloadTooLarge, 413), (BadJson, 400), (BadRequest, 400), (MethodNotAllowed, 405),
    (IdentityError, 403), (PermissionDenied, 403), (NotFound, 404),
    (VersionConflict, 409), (DuplicateMemory, 409), (EditError, 409), (ScopeRequired, 400),
    (ValidationError, 422), (DatabaseUnavailable, 503), (SchemaError, 503), (EmbedderError, 503),
]


# Seconds a client should wait before retrying, by cause (``Retry-After`` of a 503): a full service frees a slot
# within about a request's time; a database that went away takes longer; a missing migration needs an operator.
RETRY_AFTER: list[tuple[type, int]] = [(DatabaseUnavailable, 5), (EmbedderError, 10), (SchemaError, 30)]
POOL_WAIT_RETRY_AFTER = 2


def retry_after_of(exc: PgmemError) -> int | None:
    """The ``Retry-After`` seconds of an error answered 503 or 429 (an integer >= 1), else None. A pool wait that
    timed out (psycopg_pool's PoolTimeout behind a DatabaseUnavailable) is capacity, not an outage: 2 s."""
    own = getattr(exc, "retry_after", None)
    if own is not None:
        return max(1, int(own + 0.999))
    if status_of(exc) not in (429, 503):
        return None
    from psycopg_pool import PoolTimeout

    if isinstance(exc, DatabaseUnavailable) and isinstance(exc.__cause__, PoolTimeout):
        return POOL_WAIT_RETRY_AFTER
    for cls, seconds in RETRY_AFTER:
        if isinstance(exc, cls):
            return seconds
    return 5


def status_of(exc: PgmemError) -> int:
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def code_of(exc: PgmemError) -> str:
    own = getattr(type(exc), "code", None)
    if isinstance(own, str):
        return own
    if exc.sqlstate:
        return exc.sqlstate
    for cls in type(exc).__mro__:
        if cls in _CLASS_CODES:
            return _CLASS_CODES[cls]
    return "error"


def body_of(exc: PgmemError) -> dict[str, Any]:
    message = (getattr(exc, "message", None) or str(exc)).splitlines()[0] if str(exc) else type(exc).__name__
    return {"error": {"type": type(exc).__name__, "code": code_of(exc), "message": message,
                      "hint": getattr(exc, "hint", None), "field": getattr(exc, "field", None)}}
