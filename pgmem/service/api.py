"""The HTTP API of ``pgmem serve``: pgmem's own routes under ``/v1`` and Mem0's self-hosted REST routes
(``/memories``, ``/search``) with Mem0's shapes.

Identity comes from the credential only (:func:`acting`): a user key acts for its user (and, when bound, as
its agent); an admin key for one of the users it names, chosen with the ``X-Pgmem-User`` header or a
``user_id`` field. A ``user_id`` in a body, query or header that the key may not reach is refused (403),
never used. Every handler calls :class:`pgmem.AsyncMemory` methods, so the stored functions and row-level
security decide what the request sees.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any, Literal, Optional, Union
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from ..defaults import (CONTEXT_BUDGET_TOKENS, CONTEXT_K, CONTEXT_MAX_TURNS, CONTEXT_TURN_SHARE, LIST_LIMIT,
                        PENDING_TURNS, RECENT_TURNS, SEARCH_K)
from ..records import Context, MemoryRecord
from ..errors import NotFound, PermissionDenied, ValidationError
from .. import validation as v
from .errors import BadJson, BadRequest, Forbidden, Unauthorized
from .store import HEALTH_USER, Principal

def _query_names(dependant: Any) -> frozenset[str]:
    """The query parameters a route declares, its dependencies' included."""
    names = {f.alias for f in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)


def known_query(request: Request) -> None:
    """Refuse a query parameter that the route does not declare (422, naming it and the route's own): FastAPI
    ignores them, so ``GET /v1/memories?agent=scout`` (for ``agent_id``) listed every agent's memories. Bodies
    refuse unknown fields the same way (``extra="forbid"``)."""
    route = request.scope.get("route")
    known = _query_names(route.dependant) if route is not None else frozenset()
    for name in request.query_params:
        if name not in known:
            raise ValidationError(f"unknown query parameter {name!r}; this route takes "
                                  + (", ".join(sorted(known)) or "none"), field=name)
        if len(request.query_params.getlist(name)) > 1:  # FastAPI keeps the last one of a scalar parameter
            raise ValidationError(f"query parameter {name!r} is given more than once", field=name)


router = APIRouter(dependencies=[Depends(known_query)])
mem0_router = APIRouter(tags=["Mem0-compatible"], dependencies=[Depends(known_query)])


# A time in a strict body: an ISO 8601 string is read (pydantic's strict mode takes only datetime objects, and
# FastAPI validates the parsed JSON as Python values); a naive one is refused by the client's check (422).
When = Annotated[datetime, Field(strict=False)]


class Strict(BaseModel):
    """A request body: unknown fields refused, and values of JSON's own type only (pydantic's strict mode: `"k":
    true` or `"2"` is not 1 or 2, `"replace_metadata": "yes"` not true; a number for a float is still read, and
    an ISO string for a time (``When``))."""
    model_config = ConfigDict(extra="forbid", strict=True)


# ----------------------------------------------------------------------------------------------------------
# Credentials and identity
# ----------------------------------------------------------------------------------------------------------
def service_of(request: Request) -> Any:
    return request.app.state.service


def _credential(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() in ("bearer", "token") and value.strip():
            return value.strip()
        raise Unauthorized("Authorization must be 'Bearer <API key>'")
    key = request.headers.get("x-api-key")
    return key.strip() if key else None


async def principal(request: Request) -> Principal:
    """The API key of this request, as :func:`lookup_principal` found it: the service's outermost middleware
    looks it up before the body is read, and handlers find the result in the request state."""
    found = request.scope.get("state", {}).get("principal")
    if found is not None:
        return found
    return await lookup_principal(request)


async def lookup_principal(request: Request) -> Principal:
    """The API key of this request (``Authorization: Bearer``, ``Authorization: Token`` or ``X-API-Key``),
    looked up by its SHA-256 digest (the answer kept ``key_cache_ttl`` seconds, so the rate check of a known key
    costs no query); 401 without one or for an unknown or revoked key; 429 over its rate."""
    key = _credential(request)
    if not key:
        raise Unauthorized("an API key is required", hint="send Authorization: Bearer <key>; keys are issued in the dashboard")
    service = service_of(request)
    p = await service.keys.lookup(key)  # from the cache of verified keys when fresh: no query
    if p is None:
        raise Unauthorized("unknown or revoked API key")
    request.state.key_prefix = p.prefix
    service.limiter.take(p.prefix)
    return p


def _header_text(request: Request, name: str) -> str | None:
    """A header's value as the UTF-8 text a client sends (Starlette decodes header bytes as Latin-1, so a
    user id such as "ユーザー" did not match the one the key names); bytes that are no UTF-8 stay as decoded."""
    value = request.headers.get(name)
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def acting(request: Request, p: Principal, *, write: bool, user_id: str | None = None,
           agent_id: str | None = None) -> Any:
    """The AsyncMemory acting for this request: the key's user (a user key) or the one user an admin key was
    asked to act for, out of those it names. ``user_id`` is the body's field, if any; the query's
    ``user_id`` and the ``X-Pgmem-User`` header are read here. ``agent_id``: the agent a write records
    (a key bound to an agent writes as that agent only). Forbidden (403) for anything the key may not reach."""
    named = {u for u in (user_id, request.query_params.get("user_id"), _header_text(request, "x-pgmem-user")) if u}
    if len(named) > 1:
        raise ValidationError(f"the request names several users {sorted(named)}", field="user_id")
    asked = next(iter(named), None)
    if p.kind == "user":
        if asked is not None and asked != p.user_id:
            raise Forbidden("this API key acts for one user, and it is not the one named in the request",
                            field="user_id")
        user = p.user_id
    else:
        if asked is None:
            raise ValidationError("an admin key must name the user it acts for (X-Pgmem-User header or user_id)",
                                  field="user_id")
        if asked not in p.users or asked == HEALTH_USER:
            raise Forbidden("this admin key may not act for the user named in the request", field="user_id")
        user = asked
    if write and p.scope != "write":
        raise PermissionDenied("this API key is read-only")
    agent = v.check_id(agent_id, "agent_id")
    if p.agent_id is not None:
        if agent is not None and agent != p.agent_id:
            raise Forbidden("this API key writes as one agent, and it is not the one named in the request",
                            field="agent_id")
        agent = p.agent_id
    request.state.user_id = user
    service = service_of(request)
    return service.mem.with_identity(user_id=user, agent_id=agent)


def _item_users(request: Request, p: Principal, items: list[Any]) -> None:
    """Batch items may name their users: each must be one the key may reach (as :func:`acting`)."""
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("user_id") is not None:
            uid = item["user_id"]
            if p.kind == "user" and uid != p.user_id or p.kind == "admin" and (uid not in p.users or uid == HEALTH_USER):
                raise Forbidden(f"item {i}: this API key may not write for the user it names", field="user_id")


def record(m: MemoryRecord) -> dict:
    return {k: getattr(m, k) for k in m.__dataclass_fields__}


def dump(obj: Any) -> Any:
    from fastapi.encoders import jsonable_encoder

    return jsonable_encoder(obj)


def _filter(raw: str | None) -> dict | None:
    if raw is None or raw == "":
        return None
    try:
        out = json.loads(raw)
    except ValueError as exc:
        raise ValidationError(f"filter is not JSON: {exc}", field="filter") from None
    except RecursionError:  # nesting past Python's recursion limit, as in a body (400, not a 500)
        raise BadJson("filter is nested too deeply to parse", field="filter") from None
    if not isinstance(out, dict):
        raise ValidationError("filter must be a JSON object", field="filter")
    return out


# ----------------------------------------------------------------------------------------------------------
# Health
# ----------------------------------------------------------------------------------------------------------
@router.get("/healthz", tags=["health"], summary="The process answers")
async def healthz() -> dict:
    return {"ok": True}


@router.get("/readyz", tags=["health"], summary="Database, migrations and a probe write + search")
async def readyz(request: Request):
    ready, checks = await service_of(request).readiness()
    if ready:
        return JSONResponse({"ready": ready, "checks": checks})
    # Retry-After by cause: a database that does not answer (5 s), a migration to apply (30 s: an operator's job).
    wait = 30 if checks.get("database", {}).get("ok") and not checks.get("migrations", {}).get("ok", True) else 5
    return JSONResponse({"ready": ready, "checks": checks}, status_code=503, headers={"Retry-After": str(wait)})


# ----------------------------------------------------------------------------------------------------------
# pgmem's API, /v1
# ----------------------------------------------------------------------------------------------------------
class AddBody(Strict):
    content: str
    metadata: Optional[dict[str, Any]] = None
    agent_id: Optional[str] = None
    session_id: Optional[str] = None
    expires_at: Optional[When] = None
    embedding: Optional[list[float]] = None
    user_id: Optional[str] = None


class BatchBody(Strict):
    items: list[Union[str, dict[str, Any]]]
    agent_id: Optional[str] = None
    session_id: Optional[str] = None
    user_id: Optional[str] = None


class SearchBody(Strict):
    query: Optional[str] = None
    embedding: Optional[list[float]] = None
    k: int = SEARCH_K
    filter: Optional[dict[str, Any]] = None
    agent_id: Optional[str] = None
    session_id: Optional[str] = None
    min_similarity: Optional[float] = None
    min_score: Optional[float] = None
    created_after: Optional[When] = None
    created_before: Optional[When] = None
    mode: Optional[Literal["hybrid", "vector", "text"]] = None
    as_of: Optional[When] = None
    user_id: Optional[str] = None


class UpdateBody(Strict):
    content: Optional[str] = None
    metadata: Optional[dict[str, Any]] = None
    replace_metadata: bool = False
    expected_version: Optional[int] = None
    embedding: Optional[list[float]] = None
    user_id: Optional[str] = None


class EditBody(Strict):
    old: str
    new: str
    expected_version: Optional[int] = None
    user_id: Optional[str] = None


class SupersedeBody(Strict):
    content: str
    metadata: Optional[dict[str, Any]] = None
    valid_from: Optional[When] = None
    expected_version: Optional[int] = None
    embedding: Optional[list[float]] = None
    user_id: Optional[str] = None


class InvalidateBody(Strict):
    valid_to: Optional[When] = None
    user_id: Optional[str] = None


class DeleteAllBody(Strict):
    agent_id: Optional[str] = None
    session_id: Optional[str] = None
    filter: Optional[dict[str, Any]] = None
    all_spaces: StrictBool = False
    confirm: StrictBool = False  # true, not "yes": deleting everything is not guessed from a string
    user_id: Optional[str] = None


class TurnBody(Strict):
    role: str
    content: str
    metadata: Optional[dict[str, Any]] = None
    embed: bool = False
    expires_at: Optional[When] = None
    user_id: Optional[str] = None


class ContextBody(Strict):
    query: Optional[str] = None
    session_id: Optional[str] = None
    budget_tokens: int = CONTEXT_BUDGET_TOKENS
    max_turns: int = CONTEXT_MAX_TURNS
    turn_share: float = CONTEXT_TURN_SHARE
    k: int = CONTEXT_K
    filter: Optional[dict[str, Any]] = None
    user_id: Optional[str] = None


class ConsolidateBody(Strict):
    memories: list[Union[str, dict[str, Any]]]
    through_turn_id: StrictInt  # the last turn the summary covers (the newest one read from /pending)
    max_turns: int = PENDING_TURNS
    user_id: Optional[str] = None


class EraseBody(Strict):
    confirm: str


V1 = "/v1"
tags = ["memories"]


@router.get(V1 + "/whoami", tags=["keys"], summary="What this API key may reach")
async def whoami(request: Request, p: Principal = Depends(principal)) -> dict:
    return {"prefix": p.prefix, "label": p.label, "kind": p.kind, "user_id": p.user_id, "agent_id": p.agent_id,
            "users": list(p.users), "scope": p.scope}


@router.post(V1 + "/memories", tags=tags, status_code=201, summary="Add one memory (200 when its content is stored already)")
async def add(request: Request, body: AddBody, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=True, user_id=body.user_id, agent_id=body.agent_id)
    r = await m.add(body.content, metadata=body.metadata, agent_id=m.agent_id, session_id=body.session_id,
                    expires_at=body.expires_at, embedding=body.embedding)
    body_out = {"id": str(r.id), "created": r.created}
    # 201 when this request stored the memory; 200 with the stored one's id when the content was there already
    return body_out if r.created else JSONResponse(body_out, status_code=200)


@router.post(V1 + "/memories/batch", tags=tags, status_code=201, summary="Add many memories in one transaction")
async def add_batch(request: Request, body: BatchBody, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=True, user_id=body.user_id, agent_id=body.agent_id)
    _item_users(request, p, body.items)
    if p.agent_id is not None:
        for i, item in enumerate(body.items):
            if isinstance(item, dict) and item.get("agent_id") not in (None, p.agent_id):
                raise Forbidden(f"item {i}: this API key writes as one agent only", field="agent_id")
    results = await m.add_many(body.items, agent_id=m.agent_id, session_id=body.session_id)
    return {"results": [{"id": str(r.id), "created": r.created} for r in results]}


@router.get(V1 + "/memories", tags=tags, summary="List memories (keyset pagination, filters)")
async def list_memories(request: Request, p: Principal = Depends(principal),
                        agent_id: Optional[str] = None, session_id: Optional[str] = None,
                        filter: Optional[str] = Query(None, description="a JSON metadata filter (docs/filters.md)"),
                        limit: int = Query(LIST_LIMIT, ge=1, le=1000), cursor: Optional[str] = None,
                        created_after: Optional[datetime] = None, created_before: Optional[datetime] = None,
                        contains: Optional[str] = None, as_of: Optional[datetime] = None,
                        user_id: Optional[str] = None) -> dict:
    m = acting(request, p, write=False)
    page = await m.list(agent_id=agent_id, session_id=session_id, filter=_filter(filter), limit=limit, cursor=cursor,
                        created_after=created_after, created_before=created_before, contains=contains, as_of=as_of)
    return {"items": dump([record(x) for x in page.items]), "next_cursor": page.next_cursor}


@router.get(V1 + "/memories/{memory_id}", tags=tags, summary="One memory")
async def get(request: Request, memory_id: UUID, p: Principal = Depends(principal),
              user_id: Optional[str] = None) -> dict:
    m = acting(request, p, write=False)
    r = await m.get(memory_id)
    if r is None:
        raise NotFound(f"memory {memory_id} not found")
    return dump(record(r))


@router.post(V1 + "/search", tags=tags, summary="Search (hybrid, vector or text; filters; as_of)")
async def search(request: Request, body: SearchBody, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=False, user_id=body.user_id)
    hits = await m.search(body.query, embedding=body.embedding, k=body.k, filter=body.filter, agent_id=body.agent_id,
                          session_id=body.session_id, min_similarity=body.min_similarity,
                          created_after=body.created_after, created_before=body.created_before, mode=body.mode,
                          as_of=body.as_of, min_score=body.min_score)
    return {"results": dump([record(h) for h in hits])}


@router.patch(V1 + "/memories/{memory_id}", tags=tags, summary="Update content and/or metadata")
async def update(request: Request, memory_id: UUID, body: UpdateBody, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=True, user_id=body.user_id)
    r = await m.update(memory_id, content=body.content, metadata=body.metadata, replace_metadata=body.replace_metadata,
                       expected_version=body.expected_version, embedding=body.embedding)
    return dump(record(r))


@router.post(V1 + "/memories/{memory_id}/edit", tags=tags, summary="Literal edit: replace one occurrence of old by new")
async def edit(request: Request, memory_id: UUID, body: EditBody, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=True, user_id=body.user_id)
    return dump(record(await m.edit(memory_id, body.old, body.new, expected_version=body.expected_version)))


@router.post(V1 + "/memories/{memory_id}/supersede", tags=tags, summary="Replace a fact, keeping the old one in history")
async def supersede(request: Request, memory_id: UUID, body: SupersedeBody, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=True, user_id=body.user_id)
    r = await m.supersede(memory_id, body.content, metadata=body.metadata, valid_from=body.valid_from,
                          expected_version=body.expected_version, embedding=body.embedding)
    return dump(record(r))


@router.post(V1 + "/memories/{memory_id}/invalidate", tags=tags, summary="End a fact's validity")
async def invalidate(request: Request, memory_id: UUID, body: InvalidateBody, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=True, user_id=body.user_id)
    return dump(record(await m.invalidate(memory_id, valid_to=body.valid_to)))


@router.get(V1 + "/memories/{memory_id}/chain", tags=tags, summary="The supersede chain of a memory")
async def chain(request: Request, memory_id: UUID, p: Principal = Depends(principal),
                user_id: Optional[str] = None) -> dict:
    m = acting(request, p, write=False)
    return {"items": dump([record(x) for x in await m.chain(memory_id)])}


@router.get(V1 + "/memories/{memory_id}/history", tags=tags, summary="A memory's history")
async def history(request: Request, memory_id: UUID, p: Principal = Depends(principal),
                  user_id: Optional[str] = None) -> dict:
    m = acting(request, p, write=False)
    return {"events": dump(await m.history(memory_id))}


@router.get(V1 + "/memories/{memory_id}/sources", tags=tags, summary="The turns a consolidated memory came from")
async def sources(request: Request, memory_id: UUID, p: Principal = Depends(principal),
                  user_id: Optional[str] = None) -> dict:
    m = acting(request, p, write=False)
    return {"sources": dump(await m.sources(memory_id))}


@router.delete(V1 + "/memories/{memory_id}", tags=tags, summary="Delete one memory")
async def delete(request: Request, memory_id: UUID, p: Principal = Depends(principal),
                 user_id: Optional[str] = None) -> dict:
    m = acting(request, p, write=True)
    if not await m.delete(memory_id):
        raise NotFound(f"memory {memory_id} not found")
    return {"deleted": True}


@router.post(V1 + "/memories/delete", tags=tags, summary="Delete every memory of a scope (confirm for all)")
async def delete_all(request: Request, body: DeleteAllBody, p: Principal = Depends(principal)) -> dict:
    # A key bound to an agent deletes that agent's memories only (naming another agent is refused, as for writes).
    m = acting(request, p, write=True, user_id=body.user_id, agent_id=body.agent_id)
    n = await m.delete_all(agent_id=body.agent_id or p.agent_id, session_id=body.session_id, filter=body.filter,
                           all_spaces=body.all_spaces, confirm=body.confirm)
    return {"deleted": n}


@router.get(V1 + "/stats", tags=tags, summary="Counts per space")
async def stats(request: Request, p: Principal = Depends(principal), all_spaces: bool = False,
                user_id: Optional[str] = None) -> dict:
    m = acting(request, p, write=False)
    return {"spaces": dump(await m.stats(all_spaces=all_spaces))}


@router.post(V1 + "/sessions/{session_id}/turns", tags=["sessions"], status_code=201, summary="Append a turn")
async def append_turn(request: Request, session_id: str, body: TurnBody, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=True, user_id=body.user_id)
    return dump(await m.append_turn(session_id, body.role, body.content, metadata=body.metadata, embed=body.embed,
                                    expires_at=body.expires_at))


@router.get(V1 + "/sessions/{session_id}/turns", tags=["sessions"], summary="The session's recent turns")
async def recent_turns(request: Request, session_id: str, p: Principal = Depends(principal),
                       n: int = Query(RECENT_TURNS, ge=1, le=1000), user_id: Optional[str] = None) -> dict:
    m = acting(request, p, write=False)
    return {"turns": dump(await m.recent_turns(session_id, n=n))}


@router.get(V1 + "/sessions/{session_id}/pending", tags=["sessions"], summary="Consolidation input: unconsolidated turns")
async def pending_turns(request: Request, session_id: str, p: Principal = Depends(principal),
                        n: int = Query(PENDING_TURNS, ge=1, le=10000), user_id: Optional[str] = None) -> dict:
    m = acting(request, p, write=False)
    return {"turns": dump(await m.pending_turns(session_id, n=n))}


@router.post(V1 + "/sessions/{session_id}/consolidate", tags=["sessions"], summary="Store your summary of the pending turns")
async def consolidate(request: Request, session_id: str, body: ConsolidateBody, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=True, user_id=body.user_id)
    # Only the turns the client read (through through_turn_id): a turn appended after its GET /pending stays
    # pending, never marked consolidated by a summary that never saw it.
    results = await m.consolidate(session_id, lambda turns: body.memories, max_turns=body.max_turns,
                                  through_turn_id=body.through_turn_id)
    return {"results": [{"id": str(r.id), "created": r.created} for r in results]}


@router.post(V1 + "/context", tags=["sessions"], summary="Assemble the prompt context within a token budget")
async def context(request: Request, body: ContextBody, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=False, user_id=body.user_id)
    ctx: Context = await m.context(body.query, session_id=body.session_id, budget_tokens=body.budget_tokens,
                                   max_turns=body.max_turns, turn_share=body.turn_share, k=body.k, filter=body.filter)
    return {"items": dump(ctx.items), "tokens": ctx.tokens, "budget_tokens": ctx.budget_tokens, "text": ctx.render()}


@router.get(V1 + "/export", tags=["users"], summary="Everything of the user, one JSON row per line")
async def export(request: Request, p: Principal = Depends(principal), embeddings: bool = True,
                 user_id: Optional[str] = None):
    m = acting(request, p, write=False)
    rows = await m.export(embeddings=embeddings)
    body = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows)
    return StreamingResponse(iter([body]), media_type="application/x-ndjson",
                             headers={"Content-Disposition": f'attachment; filename="pgmem-export.jsonl"'})


@router.post(V1 + "/users/{user_id}/erase", tags=["users"], summary="Erase every row of one user (admin key)")
async def erase(request: Request, user_id: str, body: EraseBody, p: Principal = Depends(principal)) -> dict:
    if p.kind != "admin":
        raise Forbidden("erasure needs an admin API key that names the user")
    if body.confirm != user_id:
        raise ValidationError("confirm must repeat the user id exactly", field="confirm")
    acting(request, p, write=True, user_id=user_id)  # the same checks as any request for that user
    return await erase_user(request, user_id)


async def erase_user(request: Request, user_id: str) -> dict:
    """Erase ``user_id`` (``pgmem.erase_user`` covers every pgmem table with a user_id: memories, history,
    turns, the user's keys and request-log rows) on the service's maintainer connection, after writing the
    buffered request log, so no row naming the user lands after the erasure; this request's own log row
    names no user. Then forget the user in the service's lists (``pgmem.service_user_forget``)."""
    service = service_of(request)
    maintainer = await service.maintainer()
    await service.audit.flush()
    counts = await maintainer.erase_user(user_id)
    service.audit.pending = [e for e in service.audit.pending if e.get("user_id") != user_id]
    revoked = await service.store.user_forget(user_id)
    service.keys.forget(user_id=user_id)
    request.state.user_id = None
    return {"erased": counts, "keys_revoked": revoked}


# ----------------------------------------------------------------------------------------------------------
# Mem0's self-hosted REST routes (same paths and shapes; docs/service.md lists the differences)
# ----------------------------------------------------------------------------------------------------------
# The fields of Mem0's self-hosted server's request models (its server/main.py), and no others: a misspelt
# field (`filter` for `filters`) is 422 naming it, never ignored (it listed every memory).
class Mem0Message(Strict):
    role: str
    content: str


class Mem0Create(Strict):
    messages: list[Mem0Message]
    user_id: Optional[str] = None
    agent_id: Optional[str] = None
    run_id: Optional[str] = None
    metadata: Optional[dict[str, Any]] = None
    infer: Optional[bool] = None


class Mem0Search(Strict):
    query: str
    user_id: Optional[str] = None
    run_id: Optional[str] = None
    agent_id: Optional[str] = None
    filters: Optional[dict[str, Any]] = None
    limit: int = 100


class Mem0Update(Strict):
    """Mem0's update body (a dict there): the new text under one of three names, optionally metadata and the
    user (a gateway key's choice, as elsewhere)."""
    text: Optional[str] = None
    memory: Optional[str] = None
    data: Optional[str] = None
    metadata: Optional[dict[str, Any]] = None
    user_id: Optional[str] = None


def mem0_item(r: MemoryRecord, score: float | None = None) -> dict:
    meta = dict(r.metadata or {})
    out = {"id": str(r.id), "memory": r.content, "hash": hashlib.md5(r.content.encode("utf-8")).hexdigest(),
           "metadata": meta or None, "created_at": r.created_at.isoformat(),
           "updated_at": r.updated_at.isoformat() if r.updated_at else None, "user_id": r.user_id}
    if r.agent_id is not None:
        out["agent_id"] = r.agent_id
    if r.session_id is not None:
        out["run_id"] = r.session_id
    if score is not None:
        out["score"] = score
    return out


def _mem0_scope(user_id, agent_id, run_id) -> None:
    if not any([user_id, agent_id, run_id]):
        raise BadRequest("At least one identifier (user_id, agent_id, run_id) is required.", field="user_id")


@mem0_router.post("/memories", summary="Create memories (Mem0)")
async def mem0_add(request: Request, body: Mem0Create, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=True, user_id=body.user_id, agent_id=body.agent_id)
    _mem0_scope(body.user_id, body.agent_id, body.run_id)
    for i, msg in enumerate(body.messages):  # dropped before, so the results no longer lined up with the messages
        if not msg.content.strip():
            raise ValidationError(f"messages.{i}.content is empty or only white space", field=f"messages.{i}.content")
    items = [{"content": msg.content, "metadata": {**(body.metadata or {}), "role": msg.role}} for msg in body.messages]
    results = await m.add_many(items, agent_id=m.agent_id, session_id=body.run_id)
    return {"results": [{"id": str(r.id), "memory": it["content"], "event": "ADD" if r.created else "NONE"}
                        for r, it in zip(results, items)]}


@mem0_router.get("/memories", summary="Get memories (Mem0)")
async def mem0_list(request: Request, p: Principal = Depends(principal), user_id: Optional[str] = None,
                    run_id: Optional[str] = None, agent_id: Optional[str] = None,
                    limit: int = Query(100, ge=1, le=1000)) -> dict:
    m = acting(request, p, write=False)
    _mem0_scope(user_id, agent_id, run_id)
    page = await m.list(agent_id=agent_id, session_id=run_id, limit=limit)
    return {"results": [mem0_item(r) for r in page.items]}


@mem0_router.get("/memories/{memory_id}", summary="Get a memory (Mem0)")
async def mem0_get(request: Request, memory_id: UUID, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=False)
    r = await m.get(memory_id)
    if r is None:
        raise NotFound(f"memory {memory_id} not found")
    return mem0_item(r)


@mem0_router.post("/search", summary="Search memories (Mem0)")
async def mem0_search(request: Request, body: Mem0Search, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=False, user_id=body.user_id)
    hits = await m.search(body.query, k=body.limit, filter=body.filters, agent_id=body.agent_id,  # 1..1000, refused outside
                          session_id=body.run_id)
    return {"results": [mem0_item(h, h.score if h.score is not None else h.similarity) for h in hits]}


@mem0_router.put("/memories/{memory_id}", summary="Update a memory (Mem0)")
async def mem0_update(request: Request, memory_id: UUID, body: Mem0Update, p: Principal = Depends(principal)) -> dict:
    given = [k for k in ("text", "memory", "data") if getattr(body, k) is not None]
    if len(given) != 1:
        raise ValidationError("the body needs the new text in one of 'text', 'memory' or 'data'"
                              + (f", not {len(given)} ({', '.join(given)})" if given else ""), field="text")
    m = acting(request, p, write=True, user_id=body.user_id)
    await m.update(memory_id, content=getattr(body, given[0]), metadata=body.metadata)
    return {"message": "Memory updated successfully!"}


@mem0_router.get("/memories/{memory_id}/history", summary="Get memory history (Mem0)")
async def mem0_history(request: Request, memory_id: UUID, p: Principal = Depends(principal)) -> list:
    m = acting(request, p, write=False)
    events = await m.history(memory_id)
    if not events:
        raise NotFound(f"memory {memory_id} not found")
    return [{"id": str(e.event_id), "memory_id": str(e.memory_id), "old_memory": e.old_content,
             "new_memory": e.new_content, "event": e.event, "created_at": e.created_at.isoformat(),
             "updated_at": None, "is_deleted": e.event == "DELETE", "actor_id": e.actor_agent_id,
             "role": e.actor_role} for e in events]


@mem0_router.delete("/memories/{memory_id}", summary="Delete a memory (Mem0)")
async def mem0_delete(request: Request, memory_id: UUID, p: Principal = Depends(principal)) -> dict:
    m = acting(request, p, write=True)
    if not await m.delete(memory_id):
        raise NotFound(f"memory {memory_id} not found")
    return {"message": "Memory deleted successfully"}


@mem0_router.delete("/memories", summary="Delete all memories (Mem0)")
async def mem0_delete_all(request: Request, p: Principal = Depends(principal), user_id: Optional[str] = None,
                          run_id: Optional[str] = None, agent_id: Optional[str] = None) -> dict:
    m = acting(request, p, write=True, agent_id=agent_id)
    _mem0_scope(user_id, agent_id, run_id)
    await m.delete_all(agent_id=agent_id or p.agent_id, session_id=run_id, confirm=True)
    return {"message": "All relevant memories deleted"}
