"""Operations (docs/operations.md): backup, restore, doctor."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import PgmemError
from .app import app
from .options import DsnOpt, JsonOpt, RoleOpt, SpaceOpt, admin_dsn, options
from .output import console, emit


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
    from .. import backup as ops

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
    from .. import backup as ops

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
    from .. import doctor as ops

    o = options(ctx, dsn=dsn, space=space, role=role, as_json=as_json)
    as_role = o.role if o.role is not None else ("pgmem_gateway" if o.dsn is None else None)
    checks = ops.run_checks(admin_dsn(o), space=o.space, role=as_role) + [ops.journal_check()]
    code = ops.exit_code(checks)
    emit(o, {"healthy": code == 0, "exit_code": code, "checks": checks},
         lambda: console().print(_checks_table(checks)))
    raise typer.Exit(code)
