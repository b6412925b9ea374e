"""Bulk import: JSONL memories and LoCoMo-format conversations.

Formats
- JSONL: one JSON object per line: ``content`` (required), ``user`` or ``user_id`` (required unless a
  default user is given), ``agent``/``agent_id``, ``session``/``session_id``, ``metadata`` (object),
  ``timestamp`` (ISO 8601; becomes the memory's ``created_at``; a time without zone is read as UTC).
- LoCoMo (Maharana et al., ACL 2024, "Evaluating Very Long-Term Conversational Memory of LLM Agents"): a
  JSON list of samples with ``sample_id`` and ``conversation`` (``session_N`` turn lists and
  ``session_N_date_time``). One memory per turn: user = ``sample_id``, session = ``session_N``, content
  ``"Speaker: text"`` (plus ``[shares a photo: caption]`` when the turn shares an image), metadata
  ``speaker``, ``dia_id``, ``session_date``, ``turn`` (position in the session); ``created_at`` = the
  session's date and time (UTC).

Every record is validated on its own first; bad records are reported with their line (or dia_id) and the
reason, never silently dropped, and do not stop the import. Valid records go in batches through
``Memory.add_many`` (one ``pgmem.add_batch`` statement per batch and user).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import PgmemError, ValidationError
from . import validation as v


@dataclass
class Record:
    where: str  # "line 12" or "conv-26 D1:3": how a failure names it
    user_id: str
    content: str
    agent_id: str | None = None
    session_id: str | None = None
    metadata: dict = field(default_factory=dict)
    created_at: datetime | None = None


@dataclass
class Failure:
    where: str
    reason: str


@dataclass
class ImportSummary:
    rows: int = 0
    added: int = 0
    duplicates: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def _parse_time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValidationError(f"timestamp must be an ISO 8601 string, got {type(value).__name__}", field="timestamp")
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(f"timestamp {value!r} is not ISO 8601", field="timestamp") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def read_jsonl(path: Path, default_user: str | None = None) -> Iterator[Record | Failure]:
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            where = f"line {n}"
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValidationError("a line must be a JSON object")
                user = obj.get("user_id", obj.get("user", default_user))
                if user is None:
                    raise ValidationError("no user (give 'user' or a default user)", field="user")
                rec = Record(where, v.check_id(user, "user", optional=False),
                             v.check_content(obj.get("content")),
                             v.check_id(obj.get("agent_id", obj.get("agent")), "agent"),
                             v.check_id(obj.get("session_id", obj.get("session")), "session"),
                             v.check_metadata(obj.get("metadata")) or {},
                             _parse_time(obj["timestamp"]) if obj.get("timestamp") is not None else None)
            except json.JSONDecodeError as exc:
                yield Failure(where, f"not JSON: {exc.msg} at column {exc.colno}")
            except PgmemError as exc:
                yield Failure(where, str(exc))
            else:
                yield rec


_LOCOMO_DATE = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.I)
_MONTHS = {m: i for i, m in enumerate(["january", "february", "march", "april", "may", "june", "july", "august",
                                       "september", "october", "november", "december"], 1)}


def parse_locomo_date(text: str) -> datetime | None:
    """``"1:56 pm on 8 May, 2023"`` -> 2023-05-08 13:56 UTC; None when the text has another shape or is no
    real time (hour outside 1..12, 31 February)."""
    m = _LOCOMO_DATE.match(text) if isinstance(text, str) else None
    if not m:
        return None
    hour, minute, ampm, day, month, year = m.groups()
    mon = _MONTHS.get(month.lower())
    if mon is None or not 1 <= int(hour) <= 12:
        return None
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    try:
        return datetime(int(year), mon, int(day), h, int(minute), tzinfo=timezone.utc)
    except ValueError:
        return None


def locomo_turn_text(turn: dict) -> str:
    """The content stored for one LoCoMo turn: ``"Speaker: text"`` plus the shared photo's caption."""
    text = f"{turn.get('speaker', '')}: {turn.get('text', '')}".strip()
    caption = turn.get("blip_caption")
    if caption:
        text += f" [shares a photo: {caption}]"
    return text


def read_locomo(path: Path, agent_id: str | None = "locomo-import") -> Iterator[Record | Failure]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, list):
        raise ValidationError("a LoCoMo file is a JSON list of samples")
    for sample in data:
        user = str(sample.get("sample_id"))
        conv = sample.get("conversation") or {}
        sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
        for sess in sessions:
            date_text = conv.get(f"{sess}_date_time") or ""
            when = parse_locomo_date(date_text)
            for i, turn in enumerate(conv.get(sess) or []):
                if not isinstance(turn, dict):
                    yield Failure(f"{user} {sess}[{i}]", "a turn must be a JSON object")
                    continue
                where = f"{user} {turn.get('dia_id', f'{sess}[{i}]')}"
                try:
                    meta = {"speaker": turn.get("speaker"), "dia_id": turn.get("dia_id"), "turn": i,
                            "session_date": date_text}
                    yield Record(where, v.check_id(user, "user", optional=False),
                                 v.check_content(locomo_turn_text(turn)), agent_id, sess,
                                 v.check_metadata(meta) or {}, when)
                except PgmemError as exc:
                    yield Failure(where, str(exc))


def detect_format(path: Path) -> str:
    """``"locomo"`` when the file holds a JSON list (of samples), else ``"jsonl"``."""
    with open(path, encoding="utf-8") as fh:
        head = fh.read(4096).lstrip()
    return "locomo" if head.startswith("[") else "jsonl"


def import_records(memory, records: Iterable[Record | Failure], *, batch_size: int = 256,
                   progress=None) -> ImportSummary:
    """Write ``records`` through ``memory`` (a :class:`pgmem.Memory`; its user is replaced per record) in
    batches of ``batch_size`` per user. ``progress(n)`` is called with the number of records handled."""
    summary = ImportSummary()
    start = time.perf_counter()
    batch: list[Record] = []

    def flush() -> None:
        if not batch:
            return
        client = memory.with_identity(user_id=batch[0].user_id)
        items = [{"content": r.content, "agent_id": r.agent_id, "session_id": r.session_id,
                  "metadata": r.metadata, "created_at": r.created_at} for r in batch]
        try:
            results = client.add_many(items)
        except PgmemError:
            # All or nothing per batch: retry one by one so that one bad record costs only itself.
            for r, item in zip(batch, items):
                try:
                    res = client.add_many([item])[0]
                except PgmemError as exc1:
                    summary.failures.append(Failure(r.where, str(exc1)))
                else:
                    summary.added += res.created
                    summary.duplicates += not res.created
        else:
            summary.added += sum(r.created for r in results)
            summary.duplicates += sum(not r.created for r in results)
        if progress:
            progress(len(batch))
        batch.clear()

    for rec in records:
        summary.rows += 1
        if isinstance(rec, Failure):
            summary.failures.append(rec)
            if progress:
                progress(1)
            continue
        if batch and (rec.user_id != batch[0].user_id or len(batch) >= batch_size):
            flush()
        batch.append(rec)
    flush()
    summary.seconds = time.perf_counter() - start
    return summary


def import_file(memory, path: Path | str, *, fmt: str | None = None, default_user: str | None = None,
                batch_size: int = 256, progress=None) -> ImportSummary:
    """Import a JSONL or LoCoMo file (``fmt`` None: detected) through ``memory``; returns the summary."""
    path = Path(path)
    fmt = fmt or detect_format(path)
    if fmt == "locomo":
        records: Iterable = read_locomo(path)
    elif fmt == "jsonl":
        records = read_jsonl(path, default_user)
    else:
        raise ValidationError(f"unknown format {fmt!r}: use 'jsonl' or 'locomo'", field="format")
    return import_records(memory, records, batch_size=batch_size, progress=progress)


def count_records(path: Path | str, fmt: str | None = None) -> int:
    """How many records (lines or turns) a file holds, for a progress bar's total."""
    path = Path(path)
    fmt = fmt or detect_format(path)
    if fmt == "locomo":
        data = json.loads(path.read_text(encoding="utf-8"))
        return sum(len(c.get("conversation", {}).get(k) or []) for c in data for k in c.get("conversation", {})
                   if re.fullmatch(r"session_\d+", k))
    with open(path, encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())
