"""The options every command shares (connection, identity, ``--json``), resolved after the command, before it,
from the environment, then by default; and the clients built from them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional
from uuid import UUID

import typer

from ..defaults import DEFAULT_SPACE
from ..errors import IdentityError, NotFound, PgmemError, ValidationError
from .app import app


# --------------------------------------------------------------------------------------------------------
# Common options
# --------------------------------------------------------------------------------------------------------
_CONN = "Connection and identity"

DsnOpt = Annotated[Optional[str], typer.Option(
    "--dsn", help="PostgreSQL URL. Default: $PGMEM_DSN, else the embedded server, started on demand.",
    rich_help_panel=_CONN, show_default=False)]
UserOpt = Annotated[Optional[str], typer.Option(
    "--user", "-u", help="The pgmem user (tenant) to act for. Default: $PGMEM_USER.", rich_help_panel=_CONN,
    show_default=False)]
AgentOpt = Annotated[Optional[str], typer.Option(
    "--agent", "-a", help="The acting agent, recorded on new memories and in history. Default: $PGMEM_AGENT.",
    rich_help_panel=_CONN, show_default=False)]
SpaceOpt = Annotated[Optional[str], typer.Option(
    "--space", help=f"Embedding space. Default: $PGMEM_SPACE, else {DEFAULT_SPACE!r}.", rich_help_panel=_CONN,
    show_default=False)]
RoleOpt = Annotated[Optional[str], typer.Option(
    "--role", help="Database role to switch to (SET ROLE). Default: $PGMEM_ROLE, else pgmem_gateway on the "
                   "embedded server and the login role elsewhere.", rich_help_panel=_CONN, show_default=False)]
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document on stdout instead of tables.", rich_help_panel=_CONN)]
# On commands that select memories (search, list, delete-all) --agent after the command is a scope.
AgentScopeOpt = Annotated[Optional[str], typer.Option(
    "--agent", "-a", help="Only memories written by this agent (default: every agent of the user).",
    show_default=False)]
SessionScopeOpt = Annotated[Optional[str], typer.Option(
    "--session", "-s", help="Only memories of this session.", show_default=False)]
FilterOpt = Annotated[Optional[str], typer.Option(
    "--filter", "-f", help='Metadata filter as JSON, e.g. \'{"priority": {"gte": 3}}\' (docs/filters.md).',
    show_default=False)]
DataDirOpt = Annotated[Optional[Path], typer.Option(
    "--data-dir", help="Data directory of the embedded cluster. Default: $PGMEM_DATA_DIR, else the per-user "
                       "data directory.", show_default=False, file_okay=False)]


@dataclass(frozen=True)
class Options:
    """The resolved connection, identity and output options of one command."""

    dsn: str | None = None
    user: str | None = None
    agent: str | None = None
    space: str | None = None  # resolved by options(): always set for commands
    role: str | None = None
    as_json: bool = False


def options(ctx: typer.Context, *, dsn: str | None = None, user: str | None = None, agent: str | None = None,
            space: str | None = None, role: str | None = None, as_json: bool = False) -> Options:
    """Resolve the common options: given after the command, else before it, else the environment, else default."""
    root: Options = ctx.obj if isinstance(ctx.obj, Options) else Options()
    return Options(
        dsn=dsn or root.dsn or os.environ.get("PGMEM_DSN") or None,
        user=user or root.user or os.environ.get("PGMEM_USER") or None,
        agent=agent or root.agent or os.environ.get("PGMEM_AGENT") or None,
        space=space or root.space or os.environ.get("PGMEM_SPACE") or DEFAULT_SPACE,
        role=role or root.role or os.environ.get("PGMEM_ROLE") or None,
        as_json=as_json or root.as_json,
    )


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"pgmem {__version__}")
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context, dsn: DsnOpt = None, user: UserOpt = None, agent: AgentOpt = None,
          space: SpaceOpt = None, role: RoleOpt = None, as_json: JsonOpt = False,
          version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print pgmem's version and exit.")] = False) -> None:
    """pgmem: shared, durable memory for AI agents, on PostgreSQL and pgvector.

    Connection and identity options go before or after the command; the environment supplies defaults
    (PGMEM_DSN, PGMEM_USER, PGMEM_AGENT, PGMEM_SPACE, PGMEM_ROLE, PGMEM_DATA_DIR).
    """
    ctx.obj = Options(dsn=dsn, user=user, agent=agent, space=space, role=role, as_json=as_json)


# --------------------------------------------------------------------------------------------------------
# Building clients
# --------------------------------------------------------------------------------------------------------
def admin_dsn(o: Options) -> str:
    """The DSN for migrations and other administration: --dsn, $PGMEM_DSN, else the embedded server (started)."""
    if o.dsn:
        return o.dsn
    from .. import embedded

    return embedded.start().url()


@contextmanager
def memory(o: Options, *, user_required: bool = True, space_use: str = "read") -> Iterator[Any]:
    """A :class:`pgmem.Memory` built from the common options (one or two connections), closed afterwards.

    ``space_use`` says what the command does with ``--space``: ``"read"`` (it must exist), ``"write"`` (it
    must exist, except the default space, which the first write creates) or ``"none"`` (not used). A
    command never creates a space by reading: see :func:`require_space`.
    Raises IdentityError when the command needs a user and none was given; NotFound for a missing space.
    """
    from ..client import Memory

    if user_required and not o.user:
        raise IdentityError("no pgmem user given", hint="pass --user NAME or set PGMEM_USER")
    m = Memory(o.dsn, user_id=o.user, agent_id=o.agent, space=o.space,
               role=o.role if o.role is not None else ..., min_size=1, max_size=2)
    try:
        if space_use != "none":
            require_space(m, write=space_use == "write")
        yield m
    finally:
        m.close()


def known_spaces(m: Any) -> list[str] | None:
    """The names of every embedding space (``pgmem.list_spaces``), or None when this database cannot say
    (migrations not applied yet)."""
    try:
        return [s.name for s in m.list_spaces()]
    except PgmemError:
        return None


def require_space(m: Any, *, write: bool = False) -> None:
    """Make sure the client's space exists, without ever creating it by mistake: a missing space is
    NotFound naming the known spaces, except for a write to the default space (its first write creates it
    for the embedder, as in Python). The space found is cached in the client, so no later call creates it."""
    try:
        m._space = m.get_space()
        return
    except NotFound:
        if write and m.space_name == DEFAULT_SPACE:
            return
    known = known_spaces(m)
    listed = "" if known is None else f"; known spaces: {', '.join(known) if known else 'none'}"
    if m.space_name == DEFAULT_SPACE:
        raise NotFound(f'embedding space "{DEFAULT_SPACE}" does not exist yet: nothing was added to it{listed}',
                       hint="`pgmem add TEXT` creates it for the default model; or pick a space with --space NAME")
    raise NotFound(f'embedding space "{m.space_name}" does not exist{listed}',
                   hint=f"check --space / PGMEM_SPACE, or create it: pgmem space create {m.space_name} "
                        "--model MODEL --dims N")


def parse_json_object(text: str | None, option: str) -> dict | None:
    """The value of a JSON option (``--metadata``, ``--filter``) as a dict; ValidationError when it is not one."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValidationError(f"{option} is nested too deeply to be read", field=option.lstrip("-")) from None
    except json.JSONDecodeError as exc:
        example = """'{"key": "value"}'"""
        raise ValidationError(f"{option} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                              field=option.lstrip("-"),
                              hint=f"quote it for the shell, e.g. {option} {example}") from None
    if not isinstance(value, dict):
        raise ValidationError(f"{option} must be a JSON object, got {type(value).__name__}", field=option.lstrip("-"))
    return value


def resolve_id(m: Any, ident: str) -> UUID:
    """A memory id: a full UUID, or a unique prefix of one (the short id of the tables, 4 or more hex digits)
    looked up among this user's memories in this space."""
    ident = ident.strip()
    try:
        return UUID(ident)
    except ValueError:
        pass
    prefix = ident.lower()
    if len(prefix) < 4 or any(c not in "0123456789abcdef-" for c in prefix):
        raise ValidationError(f"not a memory id: {ident!r}", field="id",
                              hint="give the full id or at least its first 4 characters")
    found: list[UUID] = []
    cursor = None
    while True:
        page = m.list(limit=1000, cursor=cursor)
        found += [r.id for r in page.items if str(r.id).startswith(prefix)]
        if len(found) > 1:
            raise ValidationError(f"id prefix {ident!r} matches more than one memory", field="id",
                                  hint="give more characters of the id")
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    if not found:
        raise NotFound(f"no memory of user {m.user_id!r} in space {m.space_name!r} has an id starting with {ident!r}",
                       hint="give the full id (deleted memories need it, e.g. for history)")
    return found[0]


# Durations as options give them (90s, 15m, 12h, 30d, 2w) and as commands show them; a client for maintenance
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, option: str, *, allow_none: bool = False):
    """``90s``, ``15m``, ``12h``, ``30d``, ``2w`` as a ``timedelta`` (positive); ``none`` gives None when
    ``allow_none``. ValidationError otherwise."""
    import re
    from datetime import timedelta

    value = text.strip().lower()
    if allow_none and value in ("none", "never", "off"):
        return None
    m = re.fullmatch(r"(\d+)\s*([smhdw])", value)
    if not m:
        raise ValidationError(f"{option} {text!r} is not a duration", field=option.lstrip("-"),
                              hint="a whole number and a unit s, m, h, d or w, e.g. 90s, 15m, 12h, 30d"
                                   + (", or none to keep memories until deleted" if allow_none else ""))
    seconds = int(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if seconds > timedelta.max.days * 86400:
        raise ValidationError(f"{option} {text!r} is too long: at most {timedelta.max.days:,} days",
                              field=option.lstrip("-"))
    if seconds <= 0:
        raise ValidationError(f"{option} must be positive, got {text!r}", field=option.lstrip("-"))
    return timedelta(seconds=seconds)


def format_duration(td: Any) -> str:
    """A timedelta in the largest unit that divides it (30d, 36h, 90s); ``none`` for None."""
    if td is None:
        return "none"
    seconds = int(td.total_seconds())
    for unit in ("w", "d", "h", "m"):
        if seconds and seconds % _DURATION_UNITS[unit] == 0:
            return f"{seconds // _DURATION_UNITS[unit]}{unit}"
    return f"{seconds}s"


@contextmanager
def maintainer(o: Options) -> Iterator[Any]:
    """A :class:`pgmem.Memory` without a user for maintenance (purge, erase): the login role of --dsn (on the
    embedded server: its superuser), or --role; such calls need a superuser or a BYPASSRLS role."""
    from ..client import Memory

    m = Memory(o.dsn, user_id=None, agent_id=o.agent, space=o.space, role=o.role, min_size=1, max_size=2)
    try:
        yield m
    finally:
        m.close()
