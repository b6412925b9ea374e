"""The memory verbs (``add``, ``search``, ``get``, ``list``, ``history``, ``edit``, ``update``, ``delete``,
``delete-all``, ``stats``), the main job end to end (``demo``) and bulk ``import``."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import exports
from ..defaults import SEARCH_K, SHOWN_PAGE
from ..errors import IdentityError, NotFound, ScopeRequired, ValidationError
from .app import app
from .options import (
    AgentOpt, AgentScopeOpt, DsnOpt, FilterOpt, JsonOpt, Options, RoleOpt, SessionScopeOpt, SpaceOpt, UserOpt, memory,
    options, parse_json_object, resolve_id,
)
from .output import _compact, _count_table, _show_record, age, console, emit, records_table


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
    from .. import demo as demo_mod

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

    from .. import importer

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
