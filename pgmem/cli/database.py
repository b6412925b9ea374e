"""The database itself: the embedded server (``pgmem server ...``) and the schema (``migrate``, ``pending``,
``rollback``, ``distribute``, ``sql-path``)."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from ..errors import PgmemError
from .app import app, server_app
from .options import DataDirOpt, DsnOpt, JsonOpt, admin_dsn, options
from .output import emit


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
    from .. import embedded, migrations

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
    from .. import embedded

    o = options(ctx, as_json=as_json)
    path = data_dir.resolve() if data_dir else embedded.data_dir()
    stopped = embedded.stop(path)
    emit(o, {"stopped": stopped, "data_dir": str(path)},
         lambda: typer.echo(f"stopped ({path})" if stopped else f"not running ({path})"))


@server_app.command("status")
def server_status(ctx: typer.Context, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Whether the embedded server runs, its pid and data directory (exit code 0 either way)."""
    from .. import embedded

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
    from .. import embedded

    st = embedded.status(data_dir.resolve() if data_dir else None)
    if not st.running:
        raise PgmemError(f"the embedded server in {st.data_dir} is not running", hint="pgmem server start")
    typer.echo(st.url())


@server_app.command("psql")
def server_psql(data_dir: DataDirOpt = None) -> None:
    """Open the embedded server's own psql on the pgmem database (no separate client install needed)."""
    from .. import embedded

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
    from .. import migrations

    o = options(ctx, dsn=dsn, as_json=as_json)
    applied = migrations.migrate(admin_dsn(o))
    emit(o, {"applied": applied},
         lambda: typer.echo("applied: " + ", ".join(applied) if applied else "up to date"))


@app.command()
def distribute(ctx: typer.Context, dsn: DsnOpt = None, as_json: JsonOpt = False) -> None:
    """Apply the Citus distribution plan to a migrated coordinator (docs/scaling.md): reference tables spaces
    and role_bindings, the six user tables colocated by user_id, the workers' role, the cluster mode.
    Idempotent; refuses on a server without Citus or with a cluster setting missing."""
    from .. import citus

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
    from .. import migrations

    o = options(ctx, dsn=dsn, as_json=as_json)
    if not yes:
        raise PgmemError(_rollback_refusal(count), hint="pass --yes to confirm")
    undone = migrations.rollback(admin_dsn(o), count)
    emit(o, {"rolled_back": undone},
         lambda: typer.echo("rolled back: " + ", ".join(undone) if undone else "nothing to roll back"))


def _rollback_refusal(count: int) -> str:
    """What ``pgmem rollback --count N`` would undo (migrations.describe_rollback: no connection)."""
    from .. import migrations

    return migrations.describe_rollback(count)


@app.command("sql-path")
def sql_path() -> None:
    """Print the directory of pgmem's migration files (for yoyo or a DBA)."""
    from .. import migrations

    typer.echo(str(migrations.sql_path()))


@app.command()
def pending(ctx: typer.Context, dsn: DsnOpt = None, as_json: JsonOpt = False) -> None:
    """List the migrations not yet applied, one id per line ("up to date" when none)."""
    from .. import migrations

    o = options(ctx, dsn=dsn, as_json=as_json)
    todo = migrations.pending(admin_dsn(o))
    emit(o, {"pending": todo}, lambda: typer.echo("\n".join(todo) if todo else "up to date"))
