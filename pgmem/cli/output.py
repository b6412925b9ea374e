"""Output: rich tables for people, one JSON document with ``--json``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

import typer

from .. import exports
from .options import Options


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
