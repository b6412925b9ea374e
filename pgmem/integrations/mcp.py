"""``pgmem mcp``: a Model Context Protocol server over :class:`pgmem.Memory`, bound to one user.

Tools (JSON schemas from the signatures below): ``remember``, ``recall`` (hybrid search), ``edit`` (literal
replacement), ``forget``, ``history``, ``list``, ``supersede_memory`` (replace a fact, keeping the old one in its
history), ``append_turn`` (a conversation turn, short-term memory) and ``get_context`` (memories and recent turns
for a prompt, within a token budget). The user (and agent, space, database) come from the
server's configuration only - ``--user``/``PGMEM_USER`` and friends - never from a tool's arguments: no tool
takes a user id, unknown arguments are ignored, and every statement runs as that user under row-level
security, so another user's memory id reads as "not found".

Errors of pgmem come back as MCP tool errors (``isError``) carrying pgmem's message and hint, never a
traceback. Transport: stdio (default), or streamable HTTP on 127.0.0.1 (``--transport streamable-http``).

Over HTTP every request must carry ``Authorization: Bearer <token>``, the token given with ``--token`` or
``$PGMEM_MCP_TOKEN`` (at least 16 characters); without one the server refuses to start. A request without
it, or with another token (compared in constant time, ``hmac.compare_digest``), gets 401 and reaches
neither the SDK nor the database. Behind that, the SDK's DNS-rebinding protection is on: a ``Host`` header
other than the loopback names (``127.0.0.1``, ``localhost``, ``[::1]``, any port) gets 421 and a foreign
``Origin`` 403, so a web page cannot reach the server through a rebound DNS name (docs/integrations.md).

Works with the official ``mcp`` SDK 2.x (``MCPServer``) and 1.x (``FastMCP``) from 1.23.0, the first
release that turns on the Host/Origin checks for a server on 127.0.0.1 by itself (1.10.0 added them, off
by default); pgmem turns them on explicitly too: ``pip install 'pgmem-agents[mcp]'``.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal, Optional
from uuid import UUID

from pydantic import Field

from ..defaults import CONTEXT_BUDGET_TOKENS, DEFAULT_SPACE, SEARCH_K, SHOWN_PAGE
from ..errors import NotFound, PgmemError, ValidationError

log = logging.getLogger("pgmem.mcp")

TOKEN_ENV = "PGMEM_MCP_TOKEN"
MIN_TOKEN_LENGTH = 16  # e.g. secrets.token_urlsafe(32) gives 43 characters (256 bits)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

INSTRUCTIONS = """\
Long-term memory shared by the agents of one user (pgmem). Use `recall` with a natural-language question
before answering anything that may depend on what was learned earlier; use `remember` to store durable
facts, preferences and decisions (one fact per memory). `edit` replaces an exact, unique piece of text in a
memory; `forget` deletes one; `history` shows every change to one; `list` pages through all of them.
When a fact changes (a new address, a changed plan), `supersede_memory` replaces it and keeps the old one as
history. `append_turn` records the conversation; `get_context` returns what to read before answering: the most
relevant memories and the latest turns of a session, within a token budget."""


def _sdk() -> tuple[type, type[Exception], bool]:
    """The server class and ToolError of the installed SDK, and whether it is mcp 2.x."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError

        return MCPServer, ToolError, True
    except ImportError:
        pass
    try:
        from mcp.server.fastmcp import FastMCP
        from mcp.server.fastmcp.exceptions import ToolError

        return FastMCP, ToolError, False
    except ImportError as exc:
        raise PgmemError("the MCP server needs the `mcp` package",
                         hint="pip install 'pgmem-agents[mcp]'") from exc


def _record(r: Any, *, score: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"id": str(r.id), "content": r.content, "agent": r.agent_id, "session": r.session_id,
                           "metadata": r.metadata, "created_at": r.created_at.isoformat(),
                           "updated_at": r.updated_at.isoformat(), "version": r.version}
    if score:
        value = r.score if r.score is not None else r.similarity
        out["score"] = None if value is None else round(float(value), 6)
    return out


def _event(e: Any) -> dict[str, Any]:
    return {"event_id": e.event_id, "event": e.event, "old_content": e.old_content, "new_content": e.new_content,
            "old_metadata": e.old_metadata, "new_metadata": e.new_metadata, "actor_agent": e.actor_agent_id,
            "actor_role": e.actor_role, "created_at": e.created_at.isoformat()}


def _memory_id(value: str) -> UUID:
    try:
        return UUID(str(value).strip())
    except ValueError:
        raise ValidationError(f"not a memory id: {value!r}", field="id",
                              hint="pass the full id returned by remember, recall or list") from None


def build_server(memory: Any, *, name: str = "pgmem") -> Any:
    """The MCP server (an ``MCPServer``, or ``FastMCP`` on mcp 1.x) whose tools act through ``memory``, a
    :class:`pgmem.Memory` already bound to one user. Nothing a client sends can change that user."""
    import anyio.to_thread

    server_cls, tool_error, v2 = _sdk()
    from .. import __version__

    kwargs: dict[str, Any] = {"instructions": INSTRUCTIONS, "log_level": "WARNING"}
    if v2:
        kwargs["version"] = __version__  # serverInfo.version (the SDK's default is "")
    server = server_cls(name, **kwargs)
    if not v2 and getattr(getattr(server, "_mcp_server", None), "version", None) is None:
        server._mcp_server.version = __version__  # mcp 1.x: FastMCP takes no version (its default: mcp's own)

    async def call(fn: Callable[[], Any]) -> Any:
        """Run a blocking pgmem call in a worker thread; pgmem errors become tool errors with their message."""
        try:
            return await anyio.to_thread.run_sync(fn)
        except PgmemError as exc:
            raise tool_error(str(exc)) from None
        except Exception as exc:  # never a traceback to the client; the log (stderr) keeps it
            log.exception("tool failed")
            raise tool_error(f"internal error: {type(exc).__name__}") from None

    async def remember(
        content: Annotated[str, Field(description="The fact to store, as plain text (one fact per memory).")],
        metadata: Annotated[Optional[dict[str, Any]], Field(
            description="Optional JSON object stored with the memory, usable in recall filters.")] = None,
        session_id: Annotated[Optional[str], Field(
            description="Optional conversation/session id; memories of one session give each other context.")] = None,
    ) -> dict[str, Any]:
        """Store a memory for this user. Identical text is stored once: `created` is false and the existing id
        comes back."""
        res = await call(lambda: memory.add(content, metadata=metadata, session_id=session_id))
        return {"id": str(res.id), "created": res.created}

    async def recall(
        query: Annotated[str, Field(description="A natural-language question or keywords.")],
        k: Annotated[int, Field(description="How many memories to return (1..1000).", ge=1, le=1000)] = SEARCH_K,
        filter: Annotated[Optional[dict[str, Any]], Field(
            description='Optional metadata filter, e.g. {"topic": "food"} or {"priority": {"gte": 3}}.')] = None,
        min_score: Annotated[Optional[float], Field(
            description="Optional: leave out memories whose score, as shown (6 decimals), is below this (hybrid score, "
                        "about 0 to 1.7, relative to the query's best candidates).")] = None,
    ) -> dict[str, Any]:
        """The user's memories that best answer `query`, best first (hybrid full-text + vector recall; `score`:
        higher is better)."""
        # Scores are shown rounded to 6 decimals: a shown score given back as min_score keeps that memory.
        cut = None if min_score is None else min_score - 5e-7
        hits = await call(lambda: memory.search(query, k=k, filter=filter, min_score=cut))
        return {"memories": [_record(h, score=True) for h in hits]}

    async def edit(
        id: Annotated[str, Field(description="The memory's id.")],
        old: Annotated[str, Field(description="Exact text to replace: literal, case-sensitive, must occur once.")],
        new: Annotated[str, Field(description="Replacement text, inserted as is.")],
    ) -> dict[str, Any]:
        """Replace the one occurrence of `old` in a memory by `new`; the rest of the memory stays unchanged."""
        return _record(await call(lambda: memory.edit(_memory_id(id), old, new)))

    async def forget(id: Annotated[str, Field(description="The memory's id.")]) -> dict[str, Any]:
        """Delete one memory (its history keeps a DELETE event)."""
        def delete() -> UUID:
            mid = _memory_id(id)
            if not memory.delete(mid):
                raise NotFound(f"memory {mid} not found")
            return mid

        return {"id": str(await call(delete)), "deleted": True}

    async def history(id: Annotated[str, Field(description="The memory's id (deleted memories too).")]
                      ) -> dict[str, Any]:
        """Every change to one memory (ADD, UPDATE, EDIT, DELETE), oldest first."""
        def events() -> list:
            mid = _memory_id(id)
            found = memory.history(mid)
            if not found:
                raise NotFound(f"memory {mid} not found")
            return found

        found = await call(events)
        return {"id": str(found[0].memory_id), "events": [_event(e) for e in found]}

    async def list_memories(
        limit: Annotated[int, Field(description="Memories per page (1..1000).", ge=1, le=1000)] = SHOWN_PAGE,
        cursor: Annotated[Optional[str], Field(
            description="`next_cursor` of the previous page, to continue after it.")] = None,
        contains: Annotated[Optional[str], Field(
            description="Only memories containing this literal, case-sensitive text.")] = None,
    ) -> dict[str, Any]:
        """The user's memories, oldest first, one page at a time (`next_cursor` is null on the last page)."""
        page = await call(lambda: memory.list(limit=limit, cursor=cursor, contains=contains))
        return {"items": [_record(r) for r in page.items], "next_cursor": page.next_cursor}

    async def supersede_memory(
        id: Annotated[str, Field(description="The id of the memory that no longer holds.")],
        content: Annotated[str, Field(description="The fact that holds from now on, as plain text.")],
    ) -> dict[str, Any]:
        """Replace a fact that changed: the old memory stops holding (recall no longer returns it; its history
        keeps it) and the new one, returned, takes its place. Use it instead of edit when the fact itself
        changed."""
        new = await call(lambda: memory.supersede(_memory_id(id), content))
        return {**_record(new), "replaces": str(_memory_id(id))}

    async def append_turn(
        session_id: Annotated[str, Field(description="The conversation's id.")],
        role: Annotated[Literal["user", "assistant", "system", "tool"], Field(description="Who said it.")],
        content: Annotated[str, Field(description="What was said, as plain text.")],
    ) -> dict[str, Any]:
        """Append one turn to a conversation (short-term memory; turns expire after the space's turn TTL,
        7 days by default). get_context shows the latest turns."""
        t = await call(lambda: memory.append_turn(session_id, role, content))
        return {"turn_id": t.turn_id, "session_id": t.session_id, "role": t.role,
                "created_at": t.created_at.isoformat(),
                "expires_at": t.expires_at.isoformat() if t.expires_at else None}

    async def get_context(
        query: Annotated[str, Field(description="What you are about to answer, in natural language.")],
        session_id: Annotated[Optional[str], Field(
            description="The conversation whose latest turns to include (optional).")] = None,
        budget_tokens: Annotated[int, Field(
            description="Most tokens the context may take (pgmem's estimate).", ge=1, le=1_000_000)] = CONTEXT_BUDGET_TOKENS,
    ) -> dict[str, Any]:
        """What to read before answering `query`: the most relevant memories (best first), then the latest
        turns of the session (oldest first), as labelled lines in `text`, never more than `budget_tokens`."""
        c = await call(lambda: memory.context(query, session_id=session_id, budget_tokens=budget_tokens))
        items = [{"source": i.source, "id": str(i.memory_id) if i.memory_id else None, "turn_id": i.turn_id,
                  "role": i.role, "content": i.content, "tokens": i.tokens,
                  "score": None if i.score is None else round(float(i.score), 6)} for i in c.items]
        return {"text": c.render(), "tokens": c.tokens, "budget_tokens": c.budget_tokens, "items": items}

    for fn, tool_name in ((remember, "remember"), (recall, "recall"), (edit, "edit"), (forget, "forget"),
                          (history, "history"), (list_memories, "list"), (supersede_memory, "supersede_memory"),
                          (append_turn, "append_turn"), (get_context, "get_context")):
        server.add_tool(fn, name=tool_name, description=(fn.__doc__ or "").strip())
    return server


def resolve_token(token: str | None) -> str:
    """The bearer token of the HTTP transport: ``token``, else ``$PGMEM_MCP_TOKEN``. Raises ValidationError
    when there is none (the server does not start without one), when it is shorter than 16 characters, or
    when it holds characters a header cannot carry (whitespace, control or non-ASCII characters)."""
    value = token if token is not None else os.environ.get(TOKEN_ENV)
    how = "pass --token or set PGMEM_MCP_TOKEN, e.g. export PGMEM_MCP_TOKEN=\"$(python -c 'import secrets; " \
          "print(secrets.token_urlsafe(32))')\" (give the same token to the MCP client)"
    if not value:
        raise ValidationError("the streamable-http transport needs a bearer token: without one any process or web "
                              "page that reaches the port could act as this user", field="token", hint=how)
    if len(value) < MIN_TOKEN_LENGTH:
        raise ValidationError(f"the bearer token must be at least {MIN_TOKEN_LENGTH} characters, got {len(value)}",
                              field="token", hint=how)
    if not all(33 <= ord(c) <= 126 for c in value):
        raise ValidationError("the bearer token may hold printable ASCII characters only (no spaces)", field="token",
                              hint=how)
    return value


def transport_security(host: str, port: int) -> Any:
    """The SDK's ``TransportSecuritySettings`` with DNS-rebinding protection on: for a loopback ``host`` the
    loopback names on any port (``127.0.0.1:*``, ``localhost:*``, ``[::1]:*``, and ``http://`` origins of
    them), else only ``host:port``."""
    from mcp.server.transport_security import TransportSecuritySettings

    if host in LOOPBACK_HOSTS:
        hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    else:
        hosts = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=[f"http://{h}" for h in hosts])


class BearerAuth:
    """ASGI middleware: an HTTP request passes to ``app`` only with ``Authorization: Bearer <token>`` (the
    scheme case-insensitive, the token compared in constant time); otherwise 401 with ``WWW-Authenticate:
    Bearer`` (RFC 6750) and a JSON body, and ``app`` never sees it (a WebSocket is closed with 1008).
    Lifespan events pass through."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token.encode("ascii")

    def _authorized(self, scope: dict) -> bool:
        for name, value in scope.get("headers") or ():
            if name.lower() == b"authorization":
                scheme, _, given = value.strip().partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token)
        return False

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] not in ("http", "websocket") or self._authorized(scope):
            await self.app(scope, receive, send)  # lifespan events, and authorized requests
            return
        if scope["type"] == "websocket":  # the SDK serves none; refused the same way all the same
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        body = b'{"error":"invalid_token","error_description":"a valid Authorization: Bearer token is required"}'
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="pgmem", error="invalid_token"')]})
        await send({"type": "http.response.body", "body": body})


def http_app(server: Any, *, token: str, host: str = "127.0.0.1", port: int = 8765) -> Any:
    """The ASGI application of the streamable-http transport for ``server`` (from :func:`build_server`):
    the SDK's app (endpoint ``/mcp``) with DNS-rebinding protection (:func:`transport_security`), inside
    :class:`BearerAuth`."""
    security = transport_security(host, port)
    _, _, v2 = _sdk()
    if v2:
        app = server.streamable_http_app(transport_security=security, host=host)
    else:  # mcp 1.x: the settings of the FastMCP instance
        server.settings.host, server.settings.port = host, port
        server.settings.transport_security = security
        app = server.streamable_http_app()
    return BearerAuth(app, token)


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 (and ``sys.stdout``) at stderr while starting up: on the stdio transport stdout
    is the protocol, and the embedded server or the model loader must not write a stray line into it."""
    sys.stdout.flush()
    saved = os.dup(1)
    saved_stream = sys.stdout
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        sys.stdout = saved_stream


def _lone_surrogate(message: Any) -> str | None:
    """Where the first string holding a lone surrogate sits in a parsed JSON value (``$.params.arguments.content``),
    or None. Walked with a stack, not recursion: the value came from a client."""
    stack: list[tuple[str, Any]] = [("$", message)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return path
        elif isinstance(value, dict):
            stack.extend((f"{path}.{k}", v) for k, v in value.items())
            stack.extend((f"{path} (a key)", k) for k in value)
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
    return None


def unreadable_reply(error: BaseException) -> Any:
    """The JSON-RPC error answering a line of the stdio transport that the SDK could not parse, or None.

    The SDK (1.x and 2.x) hands such a line to the server as an exception and answers nothing, so a client waits
    for ever when its request holds a lone surrogate: JSON may write ``"\\ud800"``, which is no Unicode character,
    and pydantic's parser refuses the line (it reads ``NaN`` and numbers of any size, so that is the one JSON it
    refuses). When Python's parser reads the line (it accepts lone surrogates), it is a request (an object with
    a ``method`` and an ``id``, a string or an integer) and a string in it holds a lone surrogate, the answer is
    a JSON-RPC 2.0 error by that id, -32602 (invalid params), naming where the surrogate is; the text reaches
    neither a tool nor the database. Other lines get no answer, as in the SDK: a line that is no JSON has no id
    to answer, and answering notifications or responses could start an exchange of errors with a peer that
    writes logs to the wire."""
    try:
        first = error.errors()[0]  # type: ignore[attr-defined]  # pydantic's ValidationError
        if first["type"] != "json_invalid":  # valid JSON of the wrong shape: the SDK's own concern
            return None
        message = json.loads(first["input"])  # the whole line
    except (AttributeError, LookupError, TypeError, ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None
    rid = message.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (int, str)) or _lone_surrogate(rid) is not None:
        return None
    where = _lone_surrogate(message)
    if where is None:
        return None
    text = f"{where} contains a lone surrogate, which is not valid Unicode text; pgmem stores UTF-8 text (nothing was done)"
    from mcp import types
    from mcp.shared.message import SessionMessage

    reply = types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=-32602, message=text))
    wrapper = getattr(types, "JSONRPCMessage", None)  # mcp 1.x sends a root model around the message
    if wrapper is not None and "root" in getattr(wrapper, "model_fields", {}):
        reply = wrapper(reply)
    return SessionMessage(reply)


class _AnsweringReadStream:
    """The stdio transport's read stream, minus the unreadable requests: each is answered on the write stream
    (:func:`unreadable_reply`) instead of reaching the SDK, which would drop it. Everything else passes as is."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self._inner, self._write = inner, write_stream

    def __getattr__(self, name: str) -> Any:  # e.g. last_context, read by the SDK's session
        return getattr(self._inner, name)

    async def _answered(self, item: Any) -> bool:
        reply = unreadable_reply(item) if isinstance(item, Exception) else None
        if reply is None:
            return False
        await self._write.send(reply)
        return True

    async def receive(self) -> Any:
        while await self._answered(item := await self._inner.receive()):
            pass
        return item

    def __aiter__(self) -> _AnsweringReadStream:
        return self

    async def __anext__(self) -> Any:
        while await self._answered(item := await self._inner.__anext__()):
            pass
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _AnsweringReadStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self._inner.__aexit__(*exc)


def run_stdio(server: Any) -> None:
    """``server.run("stdio")``, with the requests the SDK cannot read answered (:func:`unreadable_reply`)."""
    import anyio
    from mcp.server.stdio import stdio_server

    lowlevel = getattr(server, "_lowlevel_server", None) or server._mcp_server  # mcp 2.x, 1.x

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await lowlevel.run(_AnsweringReadStream(read_stream, write_stream), write_stream,
                               lowlevel.create_initialization_options())

    anyio.run(main)


def serve(dsn: str | None, *, user: str, agent: str | None = None, space: str = DEFAULT_SPACE,
          role: str | None | type = ..., transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765,
          embedder: Any = None, token: str | None = None) -> None:
    """Run the server until the client disconnects (stdio) or the process is stopped (HTTP).

    ``token``: the bearer token of the streamable-http transport (default ``$PGMEM_MCP_TOKEN``; required
    there, see :func:`resolve_token`; stdio takes none). The token, the database and the embedding model are
    checked before serving, so a missing token, a wrong DSN or user fails at once with pgmem's error (on
    stderr) instead of on the first request. Raises ValidationError, PgmemError."""
    from ..client import Memory
    from ..embedders import default_embedder

    if transport not in ("stdio", "streamable-http"):
        raise ValidationError(f"transport must be 'stdio' or 'streamable-http', got {transport!r}", field="transport")
    if transport == "streamable-http":
        token = resolve_token(token)
    _sdk()  # fail before connecting when the SDK is missing
    with stdout_to_stderr():
        memory = Memory(dsn, user_id=user, agent_id=agent, space=space, role=role,
                        embedder=embedder or default_embedder(), min_size=1, max_size=4)
        try:
            if memory.whoami() != user:  # e.g. a login bound to another user with pgmem.bind_role
                raise PgmemError(f"this database login cannot act as user {user!r}",
                                 hint="use a gateway login (member of pgmem_gateway) or one bound to this user")
            memory.space()
            memory.embedder.embed(["warm up"])  # load the model now, not inside the first tool call
            server = build_server(memory)
        except BaseException:
            memory.close()
            raise
    try:
        if transport == "stdio":
            run_stdio(server)
        else:
            import uvicorn

            app = http_app(server, token=token, host=host, port=port)
            shown = f"[{host}]" if ":" in host else host
            print(f"pgmem MCP server for user {user!r} on http://{shown}:{port}/mcp (bearer token required)",
                  file=sys.stderr, flush=True)
            uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
    finally:
        memory.close()
