"""Bulk import: JSONL memories and LoCoMo-format conversations.

Formats
- JSONL: one JSON object per line: ``content`` (required), ``user`` or ``user_id`` (required unless a
  default user is given), ``agent``/``agent_id``, ``session``/``session_id``, ``metadata`` (object),
  ``timestamp`` or ``created_at`` (ISO 8601; becomes the memory's ``created_at``; a time without zone is
  read as UTC), ``role`` (a chat message's role, kept as ``metadata["role"]``).
- Chat exports in JSONL: a line that is one message (``{"role": "user", "content": "..."}``) is a memory
  like any other (its role in ``metadata["role"]``); a line with a ``messages`` list (OpenAI's chat format)
  is one conversation: one memory per message with a non-empty text, in order, all in the line's session
  (``session``/``session_id``/``conversation_id``/``id``, else ``<file name>:<line>``), roles kept as above.
  ``content`` may also be a list of parts (``[{"type": "text", "text": "..."}]``): the text parts joined.
- Two names of one field (``user``/``user_id``, ``agent``/``agent_id``, ``session``/``session_id`` and, on a
  conversation line, ``conversation_id``/``id``, ``timestamp``/``created_at``) with different values fail the
  line (or message), naming both: ``'user' is 'alice' but 'user_id' is 'bob': give one of them``. The same
  value under both is accepted (times compared as instants); a null value counts as absent.
- A line with a key outside these (:data:`LINE_KEYS`, for a conversation line :data:`CHAT_KEYS`) fails whole,
  nothing of it written: its reason names the unknown key, the accepted key it is closest to (``unknown key
  'sesion_id' (did you mean 'session_id'?)``) and the accepted keys; other fields go in ``metadata``. A line
  without ``content`` names the key it has instead (``did you mean 'content'?``). Inside ``messages``, a
  message's keys other than :data:`MESSAGE_KEYS` (``tool_calls``, ``name``, ...) are not imported: the summary
  lists them (``ignored``, as ``messages[].KEY``) with how many messages had them.
- LoCoMo (Maharana et al., ACL 2024, "Evaluating Very Long-Term Conversational Memory of LLM Agents"): a
  JSON list of samples with ``sample_id`` and ``conversation`` (``session_N`` turn lists and
  ``session_N_date_time``). One memory per turn: user = ``sample_id``, session = ``session_N``, content
  ``"Speaker: text"`` (plus ``[shares a photo: caption]`` when the turn shares an image; a photo without text
  is ``"Speaker: [shares a photo: caption]"``; a turn with no speaker, or with neither text nor caption,
  fails: see :func:`locomo_turn_text`), metadata
  ``speaker``, ``dia_id``, ``session_date``, ``turn`` (position in the session); ``created_at`` = the
  session's date and time (UTC). The turns of a session without a readable ``session_N_date_time`` fail,
  each naming the session and the value.

Every record is validated on its own first; bad records are reported with their line (or dia_id) and the
reason, never silently dropped, and do not stop the import. Content already stored for the record's user
in the space (or earlier in the same file) is counted as a duplicate before anything is embedded. Valid
records go in batches through ``Memory.add_many`` (one ``pgmem.add_batch`` statement per batch, whatever
users its records name); progress is reported as texts are embedded, not once per batch.

A file of the wrong kind is refused whole, before anything is written, with a ValidationError naming it: an
unknown format, a file that is not UTF-8, a JSONL file with a line that has ``"kind"`` (a ``pgmem export``,
which ``pgmem import`` reads without ``--format``, through ``Memory.import_rows``), a "LoCoMo" file that is not
a JSON list of samples.
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
    """``rows`` records read; ``added`` new memories; ``duplicates`` records whose content the user already
    had (before the import, or earlier in the file: not embedded again); ``failures``; ``ignored``: keys of
    chat messages that were not imported (``messages[].tool_calls``), with the number of messages that had
    each (a line's own unknown keys fail the line instead)."""

    rows: int = 0
    added: int = 0
    duplicates: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    ignored: dict[str, int] = field(default_factory=dict)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


FORMATS = ("jsonl", "locomo", "export")


def check_format(fmt: str | None) -> str | None:
    """``fmt`` unchanged when it is None (detect it from the file) or one of :data:`FORMATS`; else
    ValidationError ``unknown format 'csv': use 'jsonl', 'locomo' or 'export'``."""
    if fmt is None or fmt in FORMATS:
        return fmt
    raise ValidationError(f"unknown format {fmt!r}: use 'jsonl', 'locomo' or 'export'", field="format")


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> ValidationError:
    return ValidationError(f"{path} is not UTF-8 text ({exc.reason})", field="file",
                           hint="import a JSONL, LoCoMo JSON or pgmem export file, encoded as UTF-8")


def _has_kind(line: str) -> bool:
    """Whether a JSONL line is a row of a ``pgmem export``: a JSON object with the key ``"kind"``."""
    if '"kind"' not in line:  # cheap test first: most lines never parse twice
        return False
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return False  # reported by the reader
    return isinstance(obj, dict) and "kind" in obj


def _records_in(line: str) -> int:
    """How many records a JSONL line makes: the messages of a chat-export line, else 1."""
    if '"messages"' not in line:
        return 1
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return 1
    if isinstance(obj, dict) and isinstance(obj.get("messages"), list) and "content" not in obj:
        return max(1, len(obj["messages"]))
    return 1


def scan_jsonl(path: Path | str) -> int:
    """The number of records of a JSONL file (non-blank lines; a chat-export line counts its messages), after
    checking the whole file: ValidationError when it
    is not UTF-8 or when a line has ``"kind"`` (a ``pgmem export``, whose lines name their own user, kind and
    validity: read as plain memories they would land in the wrong user, space and state)."""
    path = Path(path)
    count = 0
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                count += _records_in(line)
                if _has_kind(line):
                    raise ValidationError(f'{path} is a pgmem export (line {n} has "kind"); import it without '
                                          "--format, or with --format export", field="format")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    return count


def _parse_time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValidationError(f"timestamp must be an ISO 8601 string, got {type(value).__name__}", field="timestamp")
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(f"timestamp {value!r} is not ISO 8601", field="timestamp") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


LINE_KEYS = ("content", "user", "user_id", "agent", "agent_id", "session", "session_id", "metadata",
             "timestamp", "created_at", "role")
CHAT_KEYS = ("messages", "user", "user_id", "agent", "agent_id", "session", "session_id", "conversation_id",
             "id", "metadata", "timestamp", "created_at")
MESSAGE_KEYS = ("role", "content", "timestamp", "created_at", "metadata")


class Ignored(dict):
    """Keys of chat messages that were not imported: key -> number of messages that had it."""

    def note(self, obj: dict, known: tuple[str, ...], prefix: str = "") -> None:
        for key in obj:
            if key not in known:
                self[prefix + key] = self.get(prefix + key, 0) + 1


def _one_of(obj: dict, names: tuple[str, ...], field: str, same=None) -> Any:
    """The value of the first of ``names`` (other names of one field) that ``obj`` has and is not null, else
    None. ValidationError ``'user' is 'alice' but 'user_id' is 'bob': give one of them`` when two of them
    differ (compared as ``same(value)`` when given): one would be dropped."""
    given = [(k, obj[k]) for k in names if obj.get(k) is not None]
    for k, value in given[1:]:
        first, other = (same(given[0][1]), same(value)) if same else (given[0][1], value)
        if first != other:
            raise ValidationError(f"{given[0][0]!r} is {given[0][1]!r} but {k!r} is {value!r}: give one of them",
                                  field=field)
    return given[0][1] if given else None


def _time_of(obj: dict) -> datetime | None:
    when = _one_of(obj, ("timestamp", "created_at"), "timestamp", _parse_time)
    return _parse_time(when) if when is not None else None


def _json_line(line: str) -> Any:
    try:
        return json.loads(line)
    except RecursionError:
        raise ValidationError("nested too deeply to be read") from None


def _text_of(value: Any, field: str = "content") -> Any:
    """A message's content: a string as is; a list of parts (OpenAI's ``[{"type": "text", "text": ...}]``)
    as its text parts joined by newlines; anything else unchanged (refused by the content check)."""
    if isinstance(value, list) and all(isinstance(p, (dict, str)) for p in value):
        parts = [p if isinstance(p, str) else p.get("text") for p in value
                 if isinstance(p, str) or p.get("type", "text") == "text"]
        if all(isinstance(t, str) for t in parts):
            return "\n".join(parts)
    return value


def _no_content(obj: dict, known: tuple[str, ...]) -> ValidationError:
    import difflib

    unknown = [k for k in obj if k not in known]
    guess = [k for k in unknown if difflib.get_close_matches(k.lower(), ["content", "text", "message"], n=1,
                                                             cutoff=0.6)]
    if guess:
        return ValidationError(f"no 'content' key; found {guess[0]!r}: did you mean 'content'?", field="content")
    return ValidationError("no 'content' key" + (f" (keys: {', '.join(map(repr, obj))})" if obj else ""),
                           field="content")


def _meta_with_role(meta: Any, role: Any) -> dict:
    meta = dict(v.check_metadata(meta) or {})
    if role is not None:
        meta.setdefault("role", v.check_id(role, "role"))
    return meta


def read_jsonl(path: Path, default_user: str | None = None,
               ignored: dict[str, int] | None = None) -> Iterator[Record | Failure]:
    """The records of a JSONL file, one per non-blank line (a Failure for a bad line). The whole file is
    checked by :func:`scan_jsonl` before the first record is yielded, so a ValidationError comes before any
    write."""
    scan_jsonl(path)
    ignored = Ignored() if ignored is None else ignored
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            where = f"line {n}"
            if not line.strip():
                continue
            try:
                obj = _json_line(line)
                if not isinstance(obj, dict):
                    raise ValidationError("a line must be a JSON object")
                chat = isinstance(obj.get("messages"), list) and "content" not in obj
                if not chat and "content" not in obj:
                    raise _no_content(obj, LINE_KEYS)
                v.check_known_keys(obj, CHAT_KEYS if chat else LINE_KEYS, "a conversation line's" if chat else "a line's",
                                   after="(other fields go in 'metadata')")
                user = _one_of(obj, ("user", "user_id"), "user")
                if user is None:
                    user = default_user
                if user is None:
                    raise ValidationError("no user (give 'user' or a default user)", field="user")
                user = v.check_id(user, "user", optional=False)
                agent = v.check_id(_one_of(obj, ("agent", "agent_id"), "agent"), "agent")
                if chat:
                    yield from _chat_records(path, n, obj, user, agent, ignored)
                    continue
                rec = Record(where, user, v.check_content(_text_of(obj.get("content"))), agent,
                             v.check_id(_one_of(obj, ("session", "session_id"), "session"), "session"),
                             _meta_with_role(obj.get("metadata"), obj.get("role")), _time_of(obj))
            except json.JSONDecodeError as exc:
                yield Failure(where, f"not JSON: {exc.msg} at column {exc.colno}")
            except PgmemError as exc:
                yield Failure(where, str(exc))
            else:
                yield rec


def _chat_records(path: Path, n: int, obj: dict, user: str, agent: str | None,
                  ignored: dict[str, int]) -> Iterator[Record | Failure]:
    """The messages of one chat-export line (``{"messages": [{"role", "content"}, ...]}``), one record each
    (messages without text, such as tool calls, are skipped; other bad messages are Failures)."""
    session = _one_of(obj, ("session", "session_id", "conversation_id", "id"), "session",
                      lambda s: str(s) if isinstance(s, int) else s)
    session = v.check_id(str(session) if isinstance(session, int) else session, "session") or f"{path.name}:{n}"
    base_meta = v.check_metadata(obj.get("metadata")) or {}
    base_time = _time_of(obj)
    for i, msg in enumerate(obj["messages"]):
        where = f"line {n} message {i + 1}"
        try:
            if not isinstance(msg, dict):
                raise ValidationError("a message must be a JSON object")
            Ignored.note(ignored, msg, MESSAGE_KEYS, "messages[].")
            if "content" not in msg:
                raise _no_content(msg, MESSAGE_KEYS)
            text = _text_of(msg["content"])
            if text is None or (isinstance(text, str) and not text.strip()):
                continue  # a tool call or an empty message: nothing to remember
            when = _time_of(msg)
            yield Record(where, user, v.check_content(text), agent, session,
                         _meta_with_role({**base_meta, **(v.check_metadata(msg.get("metadata")) or {})},
                                         msg.get("role")),
                         when if when is not None else base_time)
        except PgmemError as exc:
            yield Failure(where, str(exc))


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
    """The content stored for one LoCoMo turn: ``"Speaker: text"`` plus the shared photo's caption,
    ``"Speaker: text [shares a photo: caption]"``; a turn that shares a photo without text is
    ``"Speaker: [shares a photo: caption]"`` (the caption is what it says).

    ValidationError (the turn is reported as failed, never stored as a bare ``"Speaker:"``) when the turn has
    no speaker (a non-blank string), when its ``text`` or ``blip_caption`` is neither a string nor null, or
    when it has neither a non-blank text nor a non-blank caption: nothing to store."""
    speaker = turn.get("speaker")
    if not isinstance(speaker, str) or not speaker.strip():
        raise ValidationError("the turn has no speaker", field="speaker")
    for key in ("text", "blip_caption"):
        if turn.get(key) is not None and not isinstance(turn[key], str):
            raise ValidationError(f"the turn's {key} must be a string, got {type(turn[key]).__name__}", field=key)
    said, caption = turn.get("text") or "", turn.get("blip_caption") or ""
    if not said.strip() and not caption.strip():
        raise ValidationError("the turn has no text and no photo caption: nothing to store", field="text")
    text = f"{speaker}: {said}".strip()
    if caption.strip():
        text += f" [shares a photo: {caption}]"
    return text


def load_locomo(path: Path | str, *, detected: bool = False) -> list[dict]:
    """The samples of a LoCoMo file, each checked to be an object with ``sample_id`` and a ``conversation``
    object. ValidationError ``FILE is not a LoCoMo JSON file: <reason>`` otherwise (or when the file is not
    UTF-8); its hint depends on whether the format was ``detected`` from the file or given."""
    path = Path(path)
    hint = ("a LoCoMo file is a JSON list of samples, each with sample_id and conversation; a JSONL file has "
            "one JSON object per line") if detected else "omit --format to detect the format"

    def bad(reason: str) -> ValidationError:
        return ValidationError(f"{path} is not a LoCoMo JSON file: {reason}", field="format", hint=hint)

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    if not text.strip():
        raise bad("the file is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, list):
        raise bad("not a JSON list of samples")
    for i, sample in enumerate(data, 1):
        if not (isinstance(sample, dict) and sample.get("sample_id") not in (None, "")
                and isinstance(sample.get("conversation"), dict)):
            raise bad(f"sample {i} is not an object with sample_id and conversation")
    return data


def _sessions(conv: dict) -> list[str]:
    """The ``session_N`` keys of a LoCoMo conversation, in session order."""
    return sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))


def read_locomo(path: Path, agent_id: str | None = "locomo-import", *,
                detected: bool = False) -> Iterator[Record | Failure]:
    """One record per turn of a LoCoMo file (a Failure for a turn that cannot be stored, or for a session
    that is not a list of turns). Each turn of a session whose ``session_N_date_time`` is missing or is not
    a LoCoMo date and time (:func:`parse_locomo_date`) is a Failure naming the session and the value: its
    memories would otherwise carry the time of the import. The whole file is loaded and checked by
    :func:`load_locomo` first."""
    data = load_locomo(path, detected=detected)
    for sample in data:
        user = str(sample["sample_id"])
        conv = sample["conversation"]
        for sess in _sessions(conv):
            date_text = conv.get(f"{sess}_date_time")
            when = parse_locomo_date(date_text)
            undated = None
            if date_text is None:
                undated = (f"{sess} has no {sess}_date_time (a LoCoMo date and time such as "
                           f"'1:56 pm on 8 May, 2023')")
            elif when is None:
                undated = (f"{sess}_date_time {date_text!r} is not a LoCoMo date and time such as "
                           f"'1:56 pm on 8 May, 2023'")
            turns = conv.get(sess) or []
            if not isinstance(turns, list):
                yield Failure(f"{user} {sess}", "a session must be a JSON list of turns")
                continue
            for i, turn in enumerate(turns):
                if not isinstance(turn, dict):
                    yield Failure(f"{user} {sess}[{i}]", "a turn must be a JSON object")
                    continue
                where = f"{user} {turn.get('dia_id', f'{sess}[{i}]')}"
                if undated:  # stored at the time of the import it would be misdated: refused, with its reason
                    yield Failure(where, undated)
                    continue
                try:
                    meta = {"speaker": turn.get("speaker"), "dia_id": turn.get("dia_id"), "turn": i,
                            "session_date": date_text}
                    yield Record(where, v.check_id(user, "user", optional=False),
                                 v.check_content(locomo_turn_text(turn)), agent_id, sess,
                                 v.check_metadata(meta) or {}, when)
                except PgmemError as exc:
                    yield Failure(where, str(exc))


def detect_format(path: Path) -> str:
    """``"locomo"`` when the file holds a JSON list (of samples), else ``"jsonl"``. ValidationError when the
    file does not start as UTF-8 text. (A ``pgmem export`` is recognised by ``pgmem import`` itself.)"""
    try:
        with open(path, encoding="utf-8") as fh:
            head = fh.read(4096).lstrip()
    except UnicodeDecodeError as exc:
        raise _not_utf8(Path(path), exc) from None
    return "locomo" if head.startswith("[") else "jsonl"


class _ProgressEmbedder:
    """The client's embedder, reporting progress while a batch is embedded (the slow part of an import), not
    once per batch: the texts of a call are sorted by length, so that each forward pass pads little, and
    embedded a chunk at a time, ``on_texts(done, total)`` after each chunk. A chunk is ``chunk`` texts, default
    the embedder's own ``batch_size`` (one forward pass of the local model, one request of the HTTP one), else
    16."""

    def __init__(self, client: Any, on_texts, chunk: int | None = None) -> None:
        self.client, self.on_texts, self._chunk = client, on_texts, chunk

    @property
    def chunk(self) -> int:
        size = self._chunk or getattr(self.inner, "batch_size", None)
        return size if isinstance(size, int) and size > 0 else 16

    @property
    def inner(self) -> Any:  # the client's own embedder, loaded only when something is embedded
        return self.client.embedder

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def dims(self) -> int:
        return self.inner.dims

    def embed_query(self, texts):  # a search through this client embeds as the client's own embedder does
        from .embedders import embed_queries

        return embed_queries(self.inner, texts)

    def embed(self, texts):
        import numpy as np

        texts = list(texts)
        self.on_texts(0, len(texts))
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = None
        chunk = self.chunk
        for i in range(0, len(texts), chunk):
            rows = order[i:i + chunk]
            part = np.asarray(self.inner.embed([texts[j] for j in rows]), dtype=np.float32)
            if out is None:
                out = np.empty((len(texts),) + part.shape[1:], dtype=np.float32)
            out[rows] = part
            self.on_texts(min(i + chunk, len(texts)), len(texts))
        return out if out is not None else np.zeros((0, self.dims), dtype=np.float32)


def _known_in_batch(memory: Any, batch: list[Record]) -> set[tuple[str, str]]:
    """The (user, content) pairs of ``batch`` already stored (memories that hold now), asked through the API
    before anything is embedded: one ``Memory.known_contents`` statement per user of the batch. A failing
    check answers "none known": add_batch deduplicates anyway, so it costs only the embeddings."""
    by_user: dict[str, list[str]] = {}
    for r in batch:
        by_user.setdefault(r.user_id, []).append(r.content)
    known: set[tuple[str, str]] = set()
    for user, contents in by_user.items():
        m = memory if user == memory.user_id else memory.with_identity(user_id=user)
        try:
            known.update((user, c) for c in m.known_contents(contents))
        except PgmemError:
            pass
    return known


def import_records(memory, records: Iterable[Record | Failure], *, batch_size: int = 256,
                   progress=None, skip_known: bool = True) -> ImportSummary:
    """Write ``records`` through ``memory`` (a :class:`pgmem.Memory`; each record is written for its own user)
    in batches of ``batch_size`` records, whatever users they name: one ``pgmem.add_batch`` statement a batch,
    each item acting as its user (``add_many`` items with ``user_id``; a gateway may name any user, a bound
    login only its own). A batch that fails is retried record by record, so a bad record costs only itself.

    ``skip_known``: a record whose content its user already has in the space (a memory that holds now), or
    that came earlier in this import, is counted as a duplicate without being embedded: pairs seen earlier
    are known without a query, and before a batch is embedded one ``Memory.known_contents`` statement per
    user of the batch (``pgmem.known_hashes``, by content hash) drops what is stored already. The batch's
    texts are embedded together, each distinct text once, sorted by length. ``progress(n)`` is called with
    the (possibly fractional) number of records handled, as their texts are embedded."""
    summary = ImportSummary()
    start = time.perf_counter()
    batch: list[Record] = []
    seen: set[tuple[str, str]] | None = set() if skip_known else None
    share = {"records": 0, "reported": 0.0, "on": False}

    def on_texts(done: int, total: int) -> None:
        if progress and share["on"] and total:
            target = share["records"] * done / total
            if target > share["reported"]:
                progress(target - share["reported"])
                share["reported"] = target

    writer = memory
    if progress:
        writer = memory.with_identity()
        writer._embedder = _ProgressEmbedder(memory, on_texts)

    def flush() -> None:
        if not batch:
            return
        todo = batch
        if skip_known:
            known = _known_in_batch(memory, batch)
            if known:
                todo = [r for r in batch if (r.user_id, r.content) not in known]
                summary.duplicates += len(batch) - len(todo)
                if progress:
                    progress(len(batch) - len(todo))
        items = [{"content": r.content, "agent_id": r.agent_id, "session_id": r.session_id,
                  "metadata": r.metadata, "created_at": r.created_at, "user_id": r.user_id} for r in todo]
        share.update(records=len(todo), reported=0.0, on=True)
        try:
            results = writer.add_many(items) if items else []
        except PgmemError:
            share["on"] = False  # the retries below embed again: the bar does not count them twice
            # All or nothing per batch: retry one by one so that one bad record costs only itself.
            for r, item in zip(todo, items):
                try:
                    res = writer.add_many([item])[0]
                except PgmemError as exc1:
                    summary.failures.append(Failure(r.where, str(exc1)))
                else:
                    summary.added += res.created
                    summary.duplicates += not res.created
        else:
            summary.added += sum(r.created for r in results)
            summary.duplicates += sum(not r.created for r in results)
        share["on"] = False
        if progress and len(todo) > share["reported"]:
            progress(len(todo) - share["reported"])
        batch.clear()

    for rec in records:
        summary.rows += 1
        if isinstance(rec, Failure):
            summary.failures.append(rec)
            if progress:
                progress(1)
            continue
        if seen is not None:
            key = (rec.user_id, rec.content)
            if key in seen:
                summary.duplicates += 1
                if progress:
                    progress(1)
                continue
            seen.add(key)
        if len(batch) >= batch_size:
            flush()
        batch.append(rec)
    flush()
    summary.seconds = time.perf_counter() - start
    return summary


def import_file(memory, path: Path | str, *, fmt: str | None = None, default_user: str | None = None,
                batch_size: int = 256, progress=None) -> ImportSummary:
    """Import a JSONL or LoCoMo file (``fmt`` None: detected) through ``memory``; returns the summary.

    Raises ValidationError, before anything is written, for an unknown format, for ``"export"`` (a
    ``pgmem export`` goes through ``Memory.import_rows``), and for a file of the wrong kind (see the module
    docstring)."""
    path = Path(path)
    given = check_format(fmt)
    if given == "export":
        raise ValidationError("import_file reads jsonl and locomo files; a pgmem export is imported with "
                              "Memory.import_rows (or `pgmem import FILE`)", field="format")
    fmt = given or detect_format(path)
    ignored = Ignored()
    if fmt == "locomo":
        records: Iterable = read_locomo(path, detected=given is None)
    else:
        records = read_jsonl(path, default_user, ignored)
    summary = import_records(memory, records, batch_size=batch_size, progress=progress)
    summary.ignored = dict(sorted(ignored.items()))
    return summary


def count_records(path: Path | str, fmt: str | None = None) -> int:
    """How many records (lines or turns) a file holds, for a progress bar's total. Checks the whole file
    as :func:`import_file` does, so the same ValidationError comes before a progress bar is drawn; an
    ``"export"`` file is only counted (its non-blank lines)."""
    path = Path(path)
    given = check_format(fmt)
    fmt = given or detect_format(path)
    if fmt == "locomo":
        counts = []
        for sample in load_locomo(path, detected=given is None):
            conv = sample["conversation"]
            counts += [len(t) if isinstance(t, list) else 1 for t in (conv.get(k) or [] for k in _sessions(conv))]
        return sum(counts)
    if fmt == "export":
        try:
            with open(path, encoding="utf-8") as fh:
                return sum(1 for line in fh if line.strip())
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc) from None
    return scan_jsonl(path)
