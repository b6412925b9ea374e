"""The dashboard of ``pgmem serve``: server-rendered pages (Jinja2 templates in this package; no JavaScript)
under ``/ui``.

- **Bootstrap**: while no account exists, ``/ui/setup?token=...`` (the one-time link printed at start)
  creates the administrator; nothing else works before that.
- **Sessions**: ``pgmem_session`` cookie (256 random bits; the database stores its SHA-256), HttpOnly,
  Secure (unless ``secure_cookies=False``), SameSite=Strict, path ``/ui``, expiring after ``session_ttl``.
- **CSRF**: every form carries a token; for a session it is HMAC-SHA256(session cookie, "csrf"), for the
  login and setup forms a double-submit cookie (``pgmem_csrf``). A POST without the right token, or with an
  ``Origin`` header other than the service's own, is refused (403).
- Passwords: argon2id (argon2-cffi ``PasswordHasher`` defaults, RFC 9106), at least 12 characters.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlencode
from uuid import UUID

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..defaults import SEARCH_K
from ..errors import NotFound, PgmemError, ValidationError
from .errors import Forbidden, body_of
from .store import Principal, check_user_id

router = APIRouter(prefix="/ui", include_in_schema=False)
root = APIRouter(include_in_schema=False)

SESSION_COOKIE = "pgmem_session"
CSRF_COOKIE = "pgmem_csrf"
MIN_PASSWORD = 12
PAGE = 25
_EXPORT_WINDOW = timedelta(hours=1)  # erasure needs an export by the same account this recent

_templates = None


def templates():
    global _templates
    if _templates is None:
        from fastapi.templating import Jinja2Templates

        _templates = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
        env = _templates.env
        env.filters["when"] = _when
        env.filters["score"] = lambda x: "" if x is None else f"{x:.3f}"
        env.filters["tojson_pretty"] = lambda x: json.dumps(x, ensure_ascii=False, indent=2, default=str)
        env.filters["short"] = lambda s, n=120: s if s is None or len(s) <= n else s[: n - 1] + "…"
    return _templates


def _when(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, datetime):
        return x.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(x)


def _hasher():
    from argon2 import PasswordHasher

    return PasswordHasher()


def service_of(request: Request) -> Any:
    return request.app.state.service


def csrf_for(session_token: str) -> str:
    return hmac.new(session_token.encode(), b"csrf", hashlib.sha256).hexdigest()


def _set_cookie(request: Request, response: Response, name: str, value: str, max_age: int | None) -> None:
    response.set_cookie(name, value, max_age=max_age, path="/ui", httponly=True, samesite="strict",
                        secure=service_of(request).settings.secure_cookies)


def render(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
    ctx.setdefault("account", getattr(request.state, "principal", None))
    ctx.setdefault("csrf", getattr(request.state, "csrf", ""))
    ctx.setdefault("nav", name.split(".")[0])
    return templates().TemplateResponse(request, name, ctx, status_code=status)


def _check_origin(request: Request) -> None:
    origin = request.headers.get("origin")
    if origin and origin != "null":
        own = service_of(request).settings.base_url()
        host = request.headers.get("host", "")
        if origin.rstrip("/") not in (own, f"http://{host}", f"https://{host}"):
            raise Forbidden("cross-origin form submission refused")


async def session(request: Request) -> Principal | None:
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return None
    p = await service_of(request).store.session(token)
    if p is not None:
        request.state.principal = p
        request.state.csrf = csrf_for(token)
        request.state.account = p.username
    return p


class LoginRequired(Exception):
    pass


async def require(request: Request, csrf: str | None = None, *, post: bool = False) -> Principal:
    p = await session(request)
    if p is None:
        raise LoginRequired()
    if post:
        _check_origin(request)
        if not csrf or not hmac.compare_digest(csrf, request.state.csrf):
            raise Forbidden("the form's CSRF token is missing or wrong; reload the page and try again")
    return p


def _pre_session_csrf(request: Request) -> tuple[str, bool]:
    token = request.cookies.get(CSRF_COOKIE)
    return (token, False) if token else (secrets.token_urlsafe(32), True)


def _check_pre_session_csrf(request: Request, csrf: str | None) -> None:
    _check_origin(request)
    cookie = request.cookies.get(CSRF_COOKIE)
    if not cookie or not csrf or not hmac.compare_digest(cookie, csrf):
        raise Forbidden("the form's CSRF token is missing or wrong; reload the page and try again")


def _user_mem(request: Request, user: str, p: Principal):
    uid = check_user_id(user, "user")
    request.state.user_id = uid
    return service_of(request).mem.with_identity(user_id=uid, agent_id=f"dashboard:{p.username}")


def _qs(**kw: Any) -> str:
    return urlencode({k: v for k, v in kw.items() if v not in (None, "")})


# ----------------------------------------------------------------------------------------------------------
# Errors inside the dashboard are pages, not JSON
# ----------------------------------------------------------------------------------------------------------
async def page_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, LoginRequired):
        return RedirectResponse(f"/ui/login?{_qs(next=request.url.path)}", status_code=303)
    return error_page(request, exc)


def error_page(request: Request, exc: Exception) -> Response:
    """The dashboard's error page: the status of the pgmem error, its one-line message and hint."""
    from .errors import status_of

    status = status_of(exc) if isinstance(exc, PgmemError) else 500
    message = body_of(exc)["error"]["message"] if isinstance(exc, PgmemError) else "internal error (logged on the server)"
    return render(request, "error.html", status=status, status_code=status, message=message,
                  hint=getattr(exc, "hint", None))


def guarded(fn):
    """Dashboard handler wrapper: pgmem errors and a missing login become pages (never JSON, never a traceback)."""
    import functools

    @functools.wraps(fn)
    async def wrapper(request: Request, *args: Any, **kw: Any):
        try:
            return await fn(request, *args, **kw)
        except (PgmemError, LoginRequired) as exc:
            return await page_error(request, exc)

    return wrapper


# ----------------------------------------------------------------------------------------------------------
# Setup, login, logout
# ----------------------------------------------------------------------------------------------------------
@router.get("/setup")
@guarded
async def setup_page(request: Request, token: str = ""):
    state = await service_of(request).store.setup_state()
    if state["accounts"]:
        return RedirectResponse("/ui/login", status_code=303)
    csrf, fresh = _pre_session_csrf(request)
    resp = render(request, "setup.html", token=token, csrf=csrf, error=None, min_password=MIN_PASSWORD)
    if fresh:
        _set_cookie(request, resp, CSRF_COOKIE, csrf, None)
    return resp


@router.post("/setup")
@guarded
async def setup_submit(request: Request, token: str = Form(""), username: str = Form(""), password: str = Form(""),
                       password2: str = Form(""), csrf: str = Form("")):
    _check_pre_session_csrf(request, csrf)
    error = None
    if not username or len(username) > 64 or not all(c.isalnum() or c in "._@-" for c in username):
        error = "The user name takes 1 to 64 letters, digits and . _ @ -"
    elif len(password) < MIN_PASSWORD:
        error = f"The password needs at least {MIN_PASSWORD} characters."
    elif password != password2:
        error = "The two passwords differ."
    service = service_of(request)
    if error is None:
        account_id = await service.store.bootstrap(token, username, _hasher().hash(password))
        if account_id is None:
            raise Forbidden("this setup link is not valid (already used, expired, or mistyped)",
                            hint="restart pgmem serve to print a new link while no account exists")
        return await _open_session(request, account_id, username, "/ui/keys?welcome=1")
    return render(request, "setup.html", status=422, token=token, csrf=csrf, error=error, min_password=MIN_PASSWORD)


async def _open_session(request: Request, account_id: int, username: str, target: str) -> Response:
    service = service_of(request)
    token, _ = await service.store.session_create(account_id, service.settings.session_ttl)
    request.state.account = username
    resp = RedirectResponse(target, status_code=303)
    _set_cookie(request, resp, SESSION_COOKIE, token, int(service.settings.session_ttl.total_seconds()))
    resp.delete_cookie(CSRF_COOKIE, path="/ui")
    return resp


@router.get("/login")
@guarded
async def login_page(request: Request, next: str = "/ui/memories"):
    state = await service_of(request).store.setup_state()
    if not state["accounts"]:
        return render(request, "error.html", status=503, status_code=503,
                      message="No administrator exists yet.",
                      hint="Open the one-time setup link that pgmem serve printed when it started.")
    csrf, fresh = _pre_session_csrf(request)
    resp = render(request, "login.html", csrf=csrf, error=None, next=next)
    if fresh:
        _set_cookie(request, resp, CSRF_COOKIE, csrf, None)
    return resp


@router.post("/login")
@guarded
async def login_submit(request: Request, username: str = Form(""), password: str = Form(""), csrf: str = Form(""),
                       next: str = Form("/ui/memories")):
    _check_pre_session_csrf(request, csrf)
    service = service_of(request)
    # Failures only are counted, per client address (behind a proxy: Settings.forwarded_allow_ips), so that
    # nobody elsewhere can lock an administrator out by failing on purpose: every attempt spends a token (no
    # burst of concurrent guesses passes an empty bucket), a successful one gets it back.
    limit_key = f"login:{request.client.host if request.client else '?'}"
    service.login_limiter.take(limit_key)
    account = await service.store.account(username) if username else None
    ok = False
    hasher = _hasher()
    if account is not None:
        from argon2.exceptions import VerificationError

        try:
            ok = hasher.verify(account["password_hash"], password)
        except (VerificationError, ValueError):
            ok = False
        if ok and hasher.check_needs_rehash(account["password_hash"]):
            await service.store.rehash(account["account_id"], hasher.hash(password))
    else:
        hasher.hash(password or "x")  # the same work for an unknown name: no timing oracle
    if not ok:
        return render(request, "login.html", status=401, csrf=csrf, error="Wrong user name or password.", next=next)
    service.login_limiter.give_back(limit_key)
    target = next if next.startswith("/ui/") and not next.startswith("//") else "/ui/memories"
    return await _open_session(request, account["account_id"], account["username"], target)


@router.post("/logout")
@guarded
async def logout(request: Request, csrf: str = Form("")):
    await require(request, csrf, post=True)
    await service_of(request).store.session_end(request.cookies[SESSION_COOKIE])
    resp = RedirectResponse("/ui/login", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path="/ui")
    return resp


@root.get("/")
async def home():
    return RedirectResponse("/ui/memories", status_code=303)


@router.get("")
@router.get("/")
async def ui_home():
    return RedirectResponse("/ui/memories", status_code=303)


# ----------------------------------------------------------------------------------------------------------
# Memories, search, one memory with its history
# ----------------------------------------------------------------------------------------------------------
async def _known_users(request: Request) -> list[str]:
    return [u["user_id"] for u in await service_of(request).store.users()]


@router.get("/memories")
@guarded
async def memories(request: Request, user: str = "", agent: str = "", session_id: str = "", meta: str = "",
                   contains: str = "", cursor: str = "", page: int = 1):
    p = await require(request)
    users = await _known_users(request)
    ctx: dict[str, Any] = {"users": users, "user": user, "agent": agent, "session_id": session_id, "meta": meta,
                           "contains": contains, "items": [], "next_url": None, "first_url": None, "page": page}
    if user:
        m = _user_mem(request, user, p)
        if user not in users:
            await service_of(request).store.user_add(user)
        flt = None
        if meta.strip():
            try:
                flt = json.loads(meta)
            except ValueError:
                raise ValidationError("the metadata filter is not JSON, e.g. {\"topic\": \"food\"}", field="meta") from None
        res = await m.list(agent_id=agent or None, session_id=session_id or None, filter=flt, limit=PAGE,
                           cursor=cursor or None, contains=contains or None)
        ctx["items"] = res.items
        base = dict(user=user, agent=agent, session_id=session_id, meta=meta, contains=contains)
        if res.next_cursor:
            ctx["next_url"] = "/ui/memories?" + _qs(**base, cursor=res.next_cursor, page=page + 1)
        if cursor:
            ctx["first_url"] = "/ui/memories?" + _qs(**base)
        ctx["stats"] = await m.stats()
    return render(request, "memories.html", **ctx)


@router.get("/search")
@guarded
async def search(request: Request, user: str = "", q: str = "", mode: str = "hybrid", k: int = SEARCH_K, agent: str = ""):
    p = await require(request)
    ctx: dict[str, Any] = {"users": await _known_users(request), "user": user, "q": q, "mode": mode, "k": k,
                           "agent": agent, "hits": None}
    if user and q:
        m = _user_mem(request, user, p)
        ctx["hits"] = await m.search(q, k=max(1, min(k, 100)), mode=mode if mode in ("hybrid", "vector", "text") else None,
                                     agent_id=agent or None)
    return render(request, "search.html", **ctx)


@router.get("/memories/{memory_id}")
@guarded
async def memory_page(request: Request, memory_id: UUID, user: str = "", saved: str = ""):
    p = await require(request)
    m = _user_mem(request, user, p)
    rec = await m.get(memory_id)
    events = await m.history(memory_id)
    if rec is None and not events:
        raise NotFound(f"memory {memory_id} not found for user {user!r}")
    return render(request, "memory.html", user=user, rec=rec, events=events, memory_id=memory_id, saved=saved)


@router.post("/memories/{memory_id}/edit")
@guarded
async def memory_edit(request: Request, memory_id: UUID, user: str = Form(""), content: str = Form(""),
                      metadata: str = Form(""), version: int = Form(0), csrf: str = Form("")):
    p = await require(request, csrf, post=True)
    m = _user_mem(request, user, p)
    meta = None
    if metadata.strip():
        try:
            meta = json.loads(metadata)
        except ValueError:
            raise ValidationError("metadata is not a JSON object", field="metadata") from None
        if not isinstance(meta, dict):
            raise ValidationError("metadata is not a JSON object", field="metadata")
    current = await m.get(memory_id)
    if current is None:
        raise NotFound(f"memory {memory_id} not found")
    await m.update(memory_id, content=content if content != current.content else None,
                   metadata=meta, replace_metadata=True, expected_version=version or None)
    return RedirectResponse(f"/ui/memories/{memory_id}?{_qs(user=user, saved=1)}", status_code=303)


@router.post("/memories/{memory_id}/delete")
@guarded
async def memory_delete(request: Request, memory_id: UUID, user: str = Form(""), csrf: str = Form("")):
    p = await require(request, csrf, post=True)
    m = _user_mem(request, user, p)
    if not await m.delete(memory_id):
        raise NotFound(f"memory {memory_id} not found")
    return RedirectResponse(f"/ui/memories?{_qs(user=user)}", status_code=303)


# ----------------------------------------------------------------------------------------------------------
# Entities: users and agents; export; erasure
# ----------------------------------------------------------------------------------------------------------
@router.get("/entities")
@guarded
async def entities(request: Request, page: int = 1):
    p = await require(request)
    service = service_of(request)
    users = await service.store.users()
    page = max(1, page)
    shown = users[(page - 1) * PAGE: page * PAGE]
    rows = []
    for u in shown:
        stats = await _user_mem(request, u["user_id"], p).stats(all_spaces=True)
        rows.append({**u, "memories": sum(s.memories for s in stats), "agents": max((s.agents for s in stats), default=0),
                     "newest": max((s.newest for s in stats if s.newest), default=None)})
    request.state.user_id = None
    return render(request, "entities.html", rows=rows, page=page, total=len(users),
                  prev_url=f"/ui/entities?page={page - 1}" if page > 1 else None,
                  next_url=f"/ui/entities?page={page + 1}" if page * PAGE < len(users) else None)


@router.post("/entities")
@guarded
async def entities_add(request: Request, user: str = Form(""), csrf: str = Form("")):
    await require(request, csrf, post=True)
    await service_of(request).store.user_add(user)
    return RedirectResponse(f"/ui/entities/{user}", status_code=303)


@router.get("/entities/{user}")
@guarded
async def entity(request: Request, user: str, erased: str = ""):
    p = await require(request)
    m = _user_mem(request, user, p)
    agents = await service_of(request).store.agents(m)
    stats = await m.stats(all_spaces=True)
    exported = await service_of(request).store.export_recent(p.account_id, user, _EXPORT_WINDOW)
    return render(request, "entity.html", user=user, agents=agents, stats=stats, exported=exported, error=None)




@router.get("/entities/{user}/export")
@guarded
async def entity_export(request: Request, user: str):
    p = await require(request)
    m = _user_mem(request, user, p)
    rows = await m.export(embeddings=True)
    await service_of(request).store.export_mark(p.account_id, user)
    body = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in user)
    return Response(body, media_type="application/x-ndjson",
                    headers={"Content-Disposition": f'attachment; filename="pgmem-export-{safe}.jsonl"',
                             "Cache-Control": "no-store"})


@router.post("/entities/{user}/erase")
@guarded
async def entity_erase(request: Request, user: str, confirm: str = Form(""), csrf: str = Form("")):
    p = await require(request, csrf, post=True)
    m = _user_mem(request, user, p)
    service = service_of(request)
    if not await service.store.export_recent(p.account_id, user, _EXPORT_WINDOW):
        raise ValidationError("download this user's export first (within the hour before erasing)", field="confirm")
    if confirm != user:
        agents = await service.store.agents(m)
        stats = await m.stats(all_spaces=True)
        return render(request, "entity.html", status=422, user=user, agents=agents, stats=stats, exported=True,
                      error=f"Type the user id exactly ({user}) to erase it.")
    from .api import erase_user

    done = await erase_user(request, user)
    return render(request, "erased.html", user=user, counts=done["erased"], revoked=done["keys_revoked"])


# ----------------------------------------------------------------------------------------------------------
# API keys, request log, health
# ----------------------------------------------------------------------------------------------------------
@router.get("/keys")
@guarded
async def keys(request: Request, welcome: str = ""):
    await require(request)
    return render(request, "keys.html", keys=await service_of(request).store.keys(), new_key=None, welcome=welcome,
                  error=None)


@router.post("/keys")
@guarded
async def keys_create(request: Request, label: str = Form(""), kind: str = Form("user"), user: str = Form(""),
                      agent: str = Form(""), users: str = Form(""), scope: str = Form("write"), csrf: str = Form("")):
    p = await require(request, csrf, post=True)
    store = service_of(request).store
    try:
        if kind == "admin":
            names = [u.strip() for u in users.replace(",", " ").split() if u.strip()]
            if not names:
                raise ValidationError("an admin key names at least one user", field="users")
            new = await store.key_create(label=label, users=names, scope=scope, created_by=p.username)
        else:
            new = await store.key_create(label=label, user_id=user or None, agent_id=agent or None, scope=scope,
                                         created_by=p.username)
    except ValidationError as exc:
        return render(request, "keys.html", status=422, keys=await store.keys(), new_key=None, welcome="",
                      error=exc.message)
    resp = render(request, "keys.html", keys=await store.keys(), new_key=new, welcome="", error=None)
    resp.headers["Cache-Control"] = "no-store"
    return resp


@router.post("/keys/{key_id}/revoke")
@guarded
async def keys_revoke(request: Request, key_id: int, csrf: str = Form("")):
    await require(request, csrf, post=True)
    await service_of(request).store.key_revoke(key_id)
    service_of(request).keys.forget(key_id=key_id)
    return RedirectResponse("/ui/keys", status_code=303)


@router.get("/log")
@guarded
async def request_log(request: Request, before: Optional[int] = None, key: str = "", errors: str = ""):
    await require(request)
    service = service_of(request)
    await service.audit.flush()
    rows = await service.store.audit(limit=50, before_id=before, key_prefix=key or None,
                                     min_status=400 if errors else None)
    next_url = "/ui/log?" + _qs(before=rows[-1]["audit_id"], key=key, errors=errors) if len(rows) == 50 else None
    return render(request, "log.html", rows=rows, next_url=next_url, key=key, errors=errors, before=before,
                  retention=service.settings.audit_retention)


@router.get("/health")
@guarded
async def health(request: Request):
    await require(request)
    ready, checks = await service_of(request).readiness()
    return render(request, "health.html", ready=ready, checks=checks)
