"""Lifecycle (docs/lifecycle.md): retention, purge, erasure, export, session turns, context."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import exports, files, maintenance
from ..defaults import CONTEXT_BUDGET_TOKENS, CONTEXT_MAX_TURNS, PURGE_LIMIT, RECENT_TURNS
from ..errors import PgmemError
from .app import app
from .options import (
    DsnOpt, JsonOpt, RoleOpt, SpaceOpt, UserOpt, format_duration, maintainer, memory, options, parse_duration,
)
from .output import _count_table, age, console, emit


# --------------------------------------------------------------------------------------------------------
# Lifecycle: retention, purge, erasure, export, session turns, context (docs/lifecycle.md)
# --------------------------------------------------------------------------------------------------------


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
    from .. import journal, validation

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
