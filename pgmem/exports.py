"""The file format of ``pgmem export``: JSON Lines, one row of :meth:`pgmem.Memory.export` per line (``kind``
memory, turn or history), read back by :meth:`pgmem.Memory.import_rows` (docs/lifecycle.md). Ids and times
are strings (ISO 8601), durations seconds. Writing such a file: :func:`pgmem.files.write_output_file`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, is_dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

from .errors import ValidationError


def to_jsonable(value: Any) -> Any:
    """Dataclasses, UUIDs, datetimes and paths as JSON types (ids and times as strings, ISO 8601)."""
    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (UUID, Path)):
        return str(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, timedelta):
        return value.total_seconds()  # durations (TTLs) in seconds
    return value


def jsonl_lines(rows: Iterable[dict]) -> Iterator[str]:
    """Each row as one line of JSON (:func:`to_jsonable`, UTF-8 kept, no spaces), newline-terminated."""
    for r in rows:
        yield json.dumps(to_jsonable(r), ensure_ascii=False, separators=(",", ":")) + "\n"


def kind_counts(rows: Iterable[dict]) -> dict[str, int]:
    """How many rows of each ``kind`` (memory, turn, history: always present, 0 when none)."""
    counts = {"memory": 0, "turn": 0, "history": 0}
    for r in rows:
        counts[r.get("kind")] = counts.get(r.get("kind"), 0) + 1
    return counts


def read_export(file: Path) -> list[dict]:
    """The rows of a `pgmem export` file (JSONL, each with "kind"); ValidationError naming a bad line (a line
    that is not JSON, not a row of an export, or that has a key export_user does not write for its kind)."""
    from . import validation as v  # numpy with it: not at the CLI's start-up

    rows = []
    try:
        with open(file, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValidationError(f"{file} line {n} is not JSON: {exc.msg} at column {exc.colno}") from None
                v.check_export_row(row, f"{file} line {n}")
                rows.append(row)
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{file} is not UTF-8 text ({exc.reason})", field="file") from None
    if not rows:
        raise ValidationError(f"{file} holds no rows of a pgmem export", field="file")
    return rows


def is_export_file(file: Path) -> bool:
    """Whether ``file`` looks like a `pgmem export`: its first non-blank line is a JSON object with "kind"."""
    try:
        with open(file, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    return isinstance(row, dict) and "kind" in row
    except (ValueError, OSError):
        return False
    return False


__all__ = ["is_export_file", "jsonl_lines", "kind_counts", "read_export", "to_jsonable"]
