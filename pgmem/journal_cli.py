"""``pgmem journal``: the background writer's local journals, for an operator (docs/cli.md, docs/durability.md).

- ``pgmem journal list [--journal-dir DIR]``: every journal of the directory with its pending, rejected,
  damaged and torn records, its size and whether a live writer holds it.
- ``pgmem journal check NAME``: every record of one journal checked (length, checksum, JSON), nothing
  changed; exit 1 when a record is damaged or torn and not yet in the quarantine file.
- ``pgmem journal replay NAME``: replay one journal into the database now (the writer's own replay: the
  same checks, order and quarantine), then print the writer's report.
- ``pgmem journal show NAME [N]``: the records of ``NAME.quarantine`` (or the N-th, from 1): offset, reason,
  client id, user and the raw bytes.

The files are read with the writer's checks (:mod:`pgmem.files`: no symbolic link, owned by this uid, not
writable by others); a journal held by a live writer can be listed, checked and shown, not replayed
(``JournalBusy``). ``--json`` prints one JSON document. A sub-app of its own, registered by ``pgmem.cli``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from . import journal as jr

journal_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                          context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
                          help="The background writer's local journals: list, check, replay, show damaged records.")

DirOpt = Annotated[Optional[Path], typer.Option(
    "--journal-dir", metavar="DIR", file_okay=False,
    help="Directory of the journals. Default: $PGMEM_JOURNAL_DIR, else the per-user state directory.",
    show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The client name: the journal is NAME.jsonl.",
                                        show_default=False)]


def _root(ctx: typer.Context, name: str, default: Any = None) -> Any:
    """A common option given before the command (``pgmem --json journal list``), from the root's options."""
    obj = ctx.find_root().obj
    return getattr(obj, name, default) if obj is not None else default


def _json(ctx: typer.Context, as_json: bool) -> bool:
    return bool(as_json or _root(ctx, "as_json", False))


def _print(data: Any) -> None:
    from .exports import to_jsonable

    typer.echo(json.dumps(to_jsonable(data), ensure_ascii=False, indent=2))


def _info_dict(info: jr.JournalInfo) -> dict[str, Any]:
    return {"name": info.name, "path": str(info.path), "pending": info.pending, "rejected": info.rejected,
            "damaged": info.damaged, "torn": info.torn, "bytes": info.bytes, "replayed_bytes": info.offset,
            "formats": info.formats, "in_use_by_pid": info.in_use, "problems": info.problems,
            "quarantine_path": str(info.quarantine_path), "rejected_path": str(info.rejected_path)}


@journal_app.command("list")
def list_(ctx: typer.Context, journal_dir: DirOpt = None, as_json: JsonOpt = False) -> None:
    """List the journals of a directory: pending, rejected, damaged and torn records, size, live writer."""
    directory = journal_dir if journal_dir is not None else jr.journal_dir()
    infos = jr.list_journals(directory)
    if _json(ctx, as_json):
        _print({"directory": str(directory), "journals": [_info_dict(i) for i in infos]})
        return
    if not infos:
        typer.echo(f"no journals in {directory}")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=str(directory))
    for col in ("journal", "pending", "rejected", "damaged", "torn", "bytes", "writer"):
        table.add_column(col, justify="right" if col not in ("journal", "writer") else "left", no_wrap=True)
    for i in infos:
        table.add_row(i.name, str(i.pending), str(i.rejected), str(i.damaged), str(i.torn), str(i.bytes),
                      f"pid {i.in_use}" if i.in_use else "-")
    Console(highlight=False, soft_wrap=False).print(table)


@journal_app.command("check")
def check(ctx: typer.Context, name: NameArg, journal_dir: DirOpt = None, as_json: JsonOpt = False) -> None:
    """Check every record of one journal (length, checksum, JSON) without changing anything. Exit 1 when a
    damaged or torn record is found that is not in the quarantine file yet (the next writer moves it there)."""
    info = jr.inspect(name, journal_dir)
    fresh = [p for p in info.problems if not p["quarantined"]]
    if _json(ctx, as_json):
        _print({**_info_dict(info), "ok": not fresh})
    else:
        formats = ", ".join(str(f) for f in info.formats) or "-"
        typer.echo(f"{info.path}: {info.pending} pending (record format {formats}), {info.rejected} rejected, "
                   f"{info.damaged} damaged, {info.torn} torn; {info.bytes} bytes, {info.offset} replayed"
                   + (f"; in use by pid {info.in_use}" if info.in_use else ""))
        for p in info.problems:
            where = f"kept in {info.quarantine_path}" if p["quarantined"] else "still in the journal"
            typer.echo(f"  {p['kind']} record at byte {p['offset']} ({p['length']} bytes, id {p['id'] or 'unreadable'}):"
                       f" {p['reason']}; {where}")
    if fresh:
        raise typer.Exit(1)


@journal_app.command("replay")
def replay(ctx: typer.Context, name: NameArg, journal_dir: DirOpt = None,
           dsn: Annotated[Optional[str], typer.Option("--dsn", metavar="URL", help="postgresql:// URL "
                                                      "(default: $PGMEM_DSN, else the embedded server).")] = None,
           user: Annotated[Optional[str], typer.Option("--user", metavar="NAME", help=(
               "Replay as this user only (records of other users are refused into the rejected file). "
               "Default: a gateway replay of every user the records name."))] = None,
           role: Annotated[Optional[str], typer.Option("--role", metavar="ROLE", help="SET ROLE after connecting "
                                                       "(default: pgmem_gateway on the embedded server).")] = None,
           timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS",
                                                  help="Give up after this long (default 60).")] = 60.0,
           as_json: JsonOpt = False) -> None:
    """Replay one journal into the database now: the writer's replay (records checked, damaged ones
    quarantined, in order, each client id once), then its report. Exit 1 when records still wait."""
    from .client import Memory

    dsn = dsn or _root(ctx, "dsn") or os.environ.get("PGMEM_DSN") or None
    user = user or _root(ctx, "user") or os.environ.get("PGMEM_USER") or None
    role = role or _root(ctx, "role") or os.environ.get("PGMEM_ROLE") or None
    if role is None and dsn is None:
        role = "pgmem_gateway"
    mem = Memory(dsn, user_id=user, role=role if role is not None else ..., min_size=1, max_size=2)
    try:
        writer = mem.writer(client_name=name, journal_dir=journal_dir, many_users=user is None,
                            handle_signals=False, shutdown_timeout=timeout)
        writer.flush(timeout)
        report = writer.close(timeout=timeout)
    finally:
        mem.close()
    data = {"journal": str(report.journal_path), "replayed": report.replayed, "waiting": report.journaled,
            "rejected": report.rejected, "damaged": report.damaged, "torn": report.torn,
            "rejected_path": str(report.rejected_path), "quarantine_path": str(report.quarantine_path)}
    if _json(ctx, as_json):
        _print(data)
    else:
        typer.echo(f"{report.journal_path}: {report.replayed} replayed, {report.journaled} still waiting, "
                   f"{report.rejected} rejected, {report.damaged} damaged, {report.torn} torn")
    if report.journaled:
        raise typer.Exit(1)


@journal_app.command("show")
def show(ctx: typer.Context, name: NameArg,
         number: Annotated[Optional[int], typer.Argument(metavar="N", help="Show only the N-th (from 1).",
                                                         show_default=False)] = None,
         journal_dir: DirOpt = None, as_json: JsonOpt = False) -> None:
    """Show the damaged and torn records kept in NAME.quarantine: offset, reason, client id, user, raw bytes."""
    records = jr.read_quarantine(name, journal_dir)
    if number is not None:
        if not 1 <= number <= len(records):
            raise jr.JournalError(f"{name}.quarantine holds {len(records)} records, not a record {number}")
        records = [records[number - 1]]
    if _json(ctx, as_json):
        _print([{k: v for k, v in r.items() if k != "raw"} | {"raw_text": r.get("raw", b"").decode("utf-8", "replace")}
                for r in records])
        return
    if not records:
        typer.echo(f"no quarantined records for {name}")
        return
    for n, r in enumerate(records, start=number or 1):
        typer.echo(f"#{n} {r.get('kind')} record of {r.get('journal')} at byte {r.get('offset')} ({r.get('length')} "
                   f"bytes), found {r.get('found_at')}")
        typer.echo(f"  reason: {r.get('reason')}")
        typer.echo(f"  id: {r.get('id') or 'unreadable'}; user: {r.get('user_id') or 'unreadable'}")
        typer.echo(f"  raw: {r.get('raw', b'')!r}")


__all__ = ["journal_app"]
