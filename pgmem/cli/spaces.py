"""``pgmem space ...``: embedding spaces."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any

import typer

from ..defaults import DEFAULT_SPACE
from ..errors import NotFound, PgmemError
from .app import space_app
from .options import DsnOpt, JsonOpt, Options, RoleOpt, format_duration, known_spaces, maintainer, memory, options
from .output import console, emit


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
    from .. import validation

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
