"""Agent hosts (docs/integrations.md): the MCP server, the HTTP service and dashboard, plugin shims."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import IdentityError, PgmemError
from .app import app
from .options import AgentOpt, DsnOpt, JsonOpt, RoleOpt, SpaceOpt, UserOpt, memory, options
from .output import emit


# --------------------------------------------------------------------------------------------------------
# Agent hosts: MCP server and plugin shims (docs/integrations.md)
# --------------------------------------------------------------------------------------------------------
@app.command("mcp")
def mcp_(ctx: typer.Context,
         transport: Annotated[str, typer.Option(
             "--transport", help="stdio (for a client that starts the server) or streamable-http.")] = "stdio",
         port: Annotated[int, typer.Option("--port", min=1, max=65535,
                                           help="Port of --transport streamable-http (bound to 127.0.0.1).")] = 8765,
         token: Annotated[Optional[str], typer.Option(
             "--token", envvar="PGMEM_MCP_TOKEN", show_default=False, show_envvar=True,
             help="Bearer token every HTTP request must carry (at least 16 characters; prefer the environment "
                  "variable: a command line is visible to other local users). Required with streamable-http."
         )] = None,
         dsn: DsnOpt = None, user: UserOpt = None, agent: AgentOpt = None, space: SpaceOpt = None,
         role: RoleOpt = None) -> None:
    """A Model Context Protocol server (tools: remember, recall, edit, forget, history, list,
    supersede_memory, append_turn, get_context) bound to one user from --user / PGMEM_USER; no tool argument
    can change it. Over streamable-http every request needs `Authorization: Bearer <token>` and a loopback
    Host header. Needs the mcp extra of pgmem."""
    from ..integrations import mcp as mcp_server

    o = options(ctx, dsn=dsn, user=user, agent=agent, space=space, role=role)
    if transport == "streamable-http":
        mcp_server.resolve_token(token)  # before anything else: no server without a token
    if not o.user:
        raise IdentityError("no pgmem user given", hint="pass --user NAME or set PGMEM_USER")
    with memory(o, space_use="write"):  # a mistyped --space stops here instead of being created
        pass
    mcp_server.serve(o.dsn, user=o.user, agent=o.agent, space=o.space,
                     role=o.role if o.role is not None else ..., transport=transport, port=port,
                     token=token if transport == "streamable-http" else None)


@app.command("serve")
def serve_(ctx: typer.Context,
           host: Annotated[str, typer.Option("--host", help="Address to bind. Default 127.0.0.1 (this machine only).")
                           ] = "127.0.0.1",
           port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to bind.")] = 8080,
           public_url: Annotated[Optional[str], typer.Option(
               "--public-url", help="The URL people open (behind a proxy: https://memory.example.com). Default "
                                    "http://HOST:PORT. The setup link and the accepted Host header follow it.",
               show_default=False)] = None,
           cors_origin: Annotated[Optional[list[str]], typer.Option(
               "--cors-origin", help="A browser origin allowed to call the API (repeatable; exact, e.g. "
                                     "https://app.example.com). Default: none.", show_default=False)] = None,
           allowed_host: Annotated[Optional[list[str]], typer.Option(
               "--allowed-host", help="Another Host header value to serve (repeatable).", show_default=False)] = None,
           max_body: Annotated[int, typer.Option("--max-body", min=1024, help="Request body limit in bytes.")
                               ] = 1 << 20,
           rate_limit: Annotated[float, typer.Option("--rate-limit", min=0.001,
                                                     help="Requests per second per API key (this process).")] = 20.0,
           rate_burst: Annotated[int, typer.Option("--rate-burst", min=1, help="Burst size of the rate limit.")] = 100,
           audit_days: Annotated[int, typer.Option("--audit-days", min=1, help="Days the request log is kept.")] = 30,
           insecure_cookies: Annotated[bool, typer.Option(
               "--insecure-cookies", help="Drop the Secure flag of the dashboard's cookies (plain http on a "
                                          "non-local address; never on a network you do not control).")] = False,
           forwarded_allow_ips: Annotated[Optional[str], typer.Option(
               "--forwarded-allow-ips", help="Behind a reverse proxy: its address(es), comma-separated, whose "
                                             "X-Forwarded-For names the client (the failed-login limit is per "
                                             "client address). Default: trust none.", show_default=False)] = None,
           max_in_flight: Annotated[int, typer.Option("--max-in-flight", min=1,
                                                      help="Requests at once; more get 503.")] = 32,
           pool_timeout: Annotated[float, typer.Option("--pool-timeout", min=0.01,
                                                       help="Seconds to wait for a database connection.")] = 2.0,
           header_timeout: Annotated[float, typer.Option("--header-timeout", min=0.01,
                                                         help="Seconds to send a request's headers.")] = 10.0,
           body_timeout: Annotated[float, typer.Option("--body-timeout", min=0.01,
                                                       help="Seconds to send a request's body.")] = 30.0,
           key_cache_ttl: Annotated[float, typer.Option("--key-cache-ttl", min=0,
                                                        help="Seconds a verified API key is cached.")] = 5.0,
           dsn: DsnOpt = None, space: SpaceOpt = None) -> None:
    """The HTTP API (OpenAPI docs at /docs) and the web dashboard (/ui), on FastAPI and uvicorn. Connects as
    pgmem_gateway and acts per request for the user of the request's API key. On first start it prints a
    one-time setup link that creates the dashboard's administrator. Needs the serve extra of pgmem."""
    from datetime import timedelta as _td

    try:
        from ..service import Settings, serve
    except ImportError as exc:
        raise PgmemError(f"pgmem serve needs its extra: {exc}", hint="pip install 'pgmem-agents[serve]'") from None
    o = options(ctx, dsn=dsn, space=space)
    serve(Settings(dsn=o.dsn, host=host, port=port, public_url=public_url, cors_origins=tuple(cors_origin or ()),
                   allowed_hosts=tuple(allowed_host or ()), space=o.space, max_body_bytes=max_body,
                   rate_limit=rate_limit, rate_burst=rate_burst, audit_retention=_td(days=audit_days),
                   secure_cookies=not insecure_cookies, forwarded_allow_ips=forwarded_allow_ips,
                   max_in_flight=max_in_flight, pool_timeout=pool_timeout, header_timeout=header_timeout,
                   body_timeout=body_timeout, key_cache_ttl=key_cache_ttl))


@app.command("install-plugin")
def install_plugin(ctx: typer.Context,
                   host: Annotated[str, typer.Argument(help="The agent host: hermes.")],
                   home: Annotated[Optional[Path], typer.Option(
                       "--home", help="The host's home directory. Default: $HERMES_HOME, else ~/.hermes.",
                       show_default=False, file_okay=False)] = None,
                   uninstall: Annotated[bool, typer.Option("--uninstall", help="Remove the shim instead.")] = False,
                   activate: Annotated[bool, typer.Option(
                       "--activate", help="Also make pgmem the host's memory provider (hermes: memory.provider).")
                   ] = False,
                   as_json: JsonOpt = False) -> None:
    """Write a small shim package into the host's plugin directory that imports this pip-installed pgmem
    (no copied code; upgrading is `pip install -U pgmem-agents` and a restart). A previous install is kept as a
    hidden backup; the import is verified in a fresh interpreter."""
    from ..integrations import install

    o = options(ctx, as_json=as_json)
    result = install.uninstall(host, home) if uninstall else install.install(host, home, activate=activate)
    emit(o, result, lambda: typer.echo(result["message"]))
