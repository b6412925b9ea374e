"""The service's own state in PostgreSQL (migration 0010): API keys, dashboard accounts and sessions, the
one-time setup token, the users it knows of and the request log.

Every call is one named query of ``pgmem/queries.sql`` calling one ``pgmem.service_*`` SECURITY DEFINER
function, run on the service's gateway pool; the tables themselves are granted to nobody. Secrets never
reach the database: keys, session cookies and the setup token are stored as SHA-256 digests (they are 256
random bits, so a fast digest is enough: nothing to guess), passwords as argon2id hashes (argon2-cffi's
defaults, RFC 9106's second recommended parameter set).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..errors import IdentityError, ValidationError
from .. import validation as v

# A user id no key can name: the tenant of the readiness probe.
HEALTH_USER = "pgmem:health"
RESERVED_USER_PREFIX = "pgmem:"
KEY_PREFIX = "pgm_"


def digest(secret: str) -> bytes:
    """SHA-256 of a secret's UTF-8 bytes (32 bytes): what the database stores instead of the secret."""
    return hashlib.sha256(secret.encode("utf-8")).digest()


def new_secret() -> str:
    """256 random bits (``secrets.token_urlsafe(32)``, 43 characters)."""
    return secrets.token_urlsafe(32)


def new_key() -> tuple[str, str]:
    """A new API key and its public prefix: ``pgm_<8 hex>_<43 url-safe characters>``; the prefix
    (``pgm_<8 hex>``) names the key in lists and logs and is not secret."""
    prefix = KEY_PREFIX + secrets.token_hex(4)
    return f"{prefix}_{new_secret()}", prefix


def check_user_id(user_id: Any, field: str = "user_id") -> str:
    """A user id a key or the dashboard may name: pgmem's id rules, and never the reserved ``pgmem:`` ones."""
    uid = v.check_id(user_id, field, optional=False)
    if uid.startswith(RESERVED_USER_PREFIX):
        raise ValidationError(f"{field} {uid!r} is reserved (ids starting with {RESERVED_USER_PREFIX!r} belong to "
                              "pgmem itself)", field=field)
    return uid


@dataclass(frozen=True)
class Principal:
    """Who a request acts as, from its credential alone: an API key (``kind`` 'user' or 'admin') or a
    dashboard account (``kind`` 'account')."""

    kind: str
    prefix: str | None = None
    key_id: int | None = None
    label: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    users: tuple[str, ...] = ()
    scope: str = "write"
    account_id: int | None = None
    username: str | None = None


class Store:
    """The ``pgmem.service_*`` functions, awaited, on the pool of ``mem`` (an AsyncMemory acting for nobody)."""

    def __init__(self, mem: Any) -> None:
        self.mem = mem

    async def _rows(self, name: str, params: dict[str, Any]) -> list[dict]:
        return await self.mem._rows(name, params)

    # --- setup and accounts ------------------------------------------------------------------------------
    async def setup_begin(self, ttl: timedelta) -> str | None:
        """A new one-time setup token while no account exists (its digest stored, older ones replaced), else None."""
        token = new_secret()
        rows = await self._rows("service_setup_begin", {"token_hash": digest(token), "ttl": ttl})
        return token if rows[0]["started"] else None

    async def setup_state(self) -> dict:
        return (await self._rows("service_setup_state", {}))[0]

    async def bootstrap(self, token: str, username: str, password_hash: str) -> int | None:
        rows = await self._rows("service_bootstrap", {"token_hash": digest(token), "username": username,
                                                      "password_hash": password_hash})
        return rows[0]["account_id"]

    async def account(self, username: str) -> dict | None:
        rows = await self._rows("service_account", {"username": username})
        return rows[0] if rows else None

    async def rehash(self, account_id: int, password_hash: str) -> None:
        await self._rows("service_account_rehash", {"account_id": account_id, "password_hash": password_hash})

    # --- sessions ------------------------------------------------------------------------------------------
    async def session_create(self, account_id: int, ttl: timedelta) -> tuple[str, datetime]:
        token = new_secret()
        rows = await self._rows("service_session_create", {"session_hash": digest(token), "account_id": account_id,
                                                           "ttl": ttl})
        return token, rows[0]["expires_at"]

    async def session(self, token: str) -> Principal | None:
        rows = await self._rows("service_session", {"session_hash": digest(token)})
        if not rows:
            return None
        return Principal(kind="account", account_id=rows[0]["account_id"], username=rows[0]["username"])

    async def session_end(self, token: str) -> bool:
        return bool((await self._rows("service_session_end", {"session_hash": digest(token)}))[0]["ended"])

    # --- keys ----------------------------------------------------------------------------------------------
    async def key_create(self, *, label: str, user_id: str | None = None, agent_id: str | None = None,
                         users: list[str] | None = None, scope: str = "write", created_by: str | None = None) -> dict:
        """Issue a key. ``user_id`` (and optionally ``agent_id``) for a user key, ``users`` for an admin key.
        Returns ``{"key": the secret (shown once), "prefix", "key_id", "created_at"}``. ValidationError for a
        bad label, scope or id; IdentityError (PGM01) before the first account exists."""
        label = v.check_text(label, "label").strip() if label is not None else ""
        if not 1 <= len(label) <= 200:
            raise ValidationError("label must have 1 to 200 characters", field="label")
        if scope not in ("read", "write"):
            raise ValidationError(f"scope must be 'read' or 'write', got {scope!r}", field="scope")
        if users:
            if user_id is not None or agent_id is not None:
                raise ValidationError("an admin key names users; it is bound to no single user or agent", field="users")
            users = list(dict.fromkeys(check_user_id(u, "users") for u in users))
            kind = "admin"
        else:
            user_id = check_user_id(user_id)
            agent_id = v.check_id(agent_id or None, "agent_id")
            kind = "user"
        key, prefix = new_key()
        rows = await self._rows("service_key_create", {
            "prefix": prefix, "key_hash": digest(key), "label": label, "kind": kind, "user_id": user_id,
            "agent_id": agent_id, "users": users or None, "scope": scope, "created_by": created_by})
        return {"key": key, "prefix": rows[0]["prefix"], "key_id": rows[0]["key_id"],
                "created_at": rows[0]["created_at"]}

    async def key_lookup(self, key: str) -> Principal | None:
        if not key.startswith(KEY_PREFIX) or len(key) > 200:
            return None
        rows = await self._rows("service_key_lookup", {"key_hash": digest(key)})
        if not rows:
            return None
        r = rows[0]
        return Principal(kind=r["kind"], prefix=r["prefix"], key_id=r["key_id"], label=r["label"],
                         user_id=r["user_id"], agent_id=r["agent_id"], users=tuple(r["users"] or ()), scope=r["scope"])

    async def keys(self) -> list[dict]:
        return await self._rows("service_keys", {})

    async def key_revoke(self, key_id: int) -> bool:
        return bool((await self._rows("service_key_revoke", {"key_id": key_id}))[0]["revoked"])

    # --- users ---------------------------------------------------------------------------------------------
    async def users(self) -> list[dict]:
        return await self._rows("service_users", {})

    async def user_add(self, user_id: str) -> None:
        await self._rows("service_user_add", {"user_id": check_user_id(user_id)})

    async def agents(self, user_mem: Any) -> list[dict]:
        """The agents of ``user_mem``'s user with memory counts per space (the identity is ``user_mem``'s)."""
        return await user_mem._rows("service_agents", {})

    async def export_mark(self, account_id: int, user_id: str) -> None:
        await self._rows("service_export_mark", {"account_id": account_id, "user_id": user_id})

    async def export_recent(self, account_id: int, user_id: str, within: timedelta) -> bool:
        rows = await self._rows("service_export_recent", {"account_id": account_id, "user_id": user_id, "within": within})
        return bool(rows[0]["recent"])

    async def user_forget(self, user_id: str) -> int:
        return int((await self._rows("service_user_forget", {"user_id": user_id}))[0]["keys_revoked"])

    # --- request log ---------------------------------------------------------------------------------------
    async def log(self, entries: list[dict]) -> int:
        if not entries:
            return 0
        cols = ("at", "method", "route", "status", "latency_ms", "key_prefix", "user_id", "account")
        rows = await self._rows("service_log", {c: [e[c] for e in entries] for c in cols})
        return int(rows[0]["written"])

    async def audit(self, *, limit: int = 50, before_id: int | None = None, key_prefix: str | None = None,
                    min_status: int | None = None) -> list[dict]:
        return await self._rows("service_audit", {"limit": limit, "before_id": before_id, "key_prefix": key_prefix,
                                                  "min_status": min_status})

    async def audit_purge(self, keep: timedelta) -> int:
        return int((await self._rows("service_audit_purge", {"keep": keep}))[0]["removed"])

    async def migrations(self) -> list[dict]:
        return await self._rows("service_migrations", {})


def require_account(p: Principal | None) -> Principal:
    if p is None or p.kind != "account":
        raise IdentityError("a dashboard session is required")
    return p
