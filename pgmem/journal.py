"""A durable local journal of accepted writes that the database could not take yet.

One file per client name, in :func:`journal_dir` (``$PGMEM_JOURNAL_DIR``, default
``platformdirs.user_state_dir("pgmem")/journal``, e.g. ``~/.local/state/pgmem/journal`` on Linux):

- ``<name>.jsonl``: one write per record, in the order the writes were accepted. A record (format 2) is one
  line ``v2 <length> <crc32> <json>``: the byte length of the JSON text, its CRC-32 (``zlib.crc32``, 8 hex
  digits) and the write as one JSON object. Journals of format 1 (a bare JSON object per line, written before
  pgmem 0.x added the checksum) are still read; new records are always written in format 2, after them.
  Every append is one ``write`` and ``fsync`` before it is acknowledged; creating the file fsyncs the
  directory. After a failed ``write`` or ``fsync`` nothing is assumed to have reached the disk (the kernel may
  have dropped the dirty pages and report the next fsync as a success): the file is reopened and cut back to
  the last size known durable before anything else is appended, and the append raises :class:`JournalError`.
- ``<name>.offset``: how many bytes of the journal are already replayed into the database (written after
  each replayed chunk; losing it only replays a chunk again, which the client ids make harmless).
- ``<name>.rejected.jsonl``: writes the database refused for good (bad input it alone could judge, a missing
  space, no identity), each with its error, fsync'd too. Kept for a human; never replayed by itself.
- ``<name>.quarantine``: damaged records, one JSON object a line: the raw bytes (base64), the byte offset in
  the journal, the length, the reason, the client id and user when readable. A record that fails its checksum
  or cannot be read is never applied; it is moved here whole, counted (``damaged``) and logged as an error,
  and the records before and after it replay. A record cut short at the end of the file (a crash during an
  append) is dropped from the journal, kept here too (kind ``torn``), counted and logged.
- ``<name>.lock``: an exclusive ``flock`` held while a writer uses the journal, so two live processes never
  share one (the second gets :class:`JournalBusy`).

The directory and every file are checked when the journal is opened (:mod:`pgmem.files`): the
directory is created 0700, files 0600 and exclusively (``O_EXCL``); an existing directory or file must be
owned by the current (effective) uid, not writable by group or others, and not a symbolic link (``lstat``,
``O_NOFOLLOW``). Otherwise :class:`UnsafeJournal` names the path and the fix; nothing is read or written.
When every record is replayed the file is truncated to zero bytes (and fsync'd).

:func:`list_journals` and :func:`inspect` read a directory's journals without changing them (``pgmem
journal``); :func:`read_quarantine` reads a quarantine file.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import threading
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import files
from .errors import PgmemError, UnsafePath

log = logging.getLogger("pgmem.journal")

ENV = "PGMEM_JOURNAL_DIR"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")
#: The format this module writes; format 1 (bare JSON lines) is still read.
FORMAT = 2
_V2 = b"v2 "
_MAX_RECORD = 1 << 31
_ID = re.compile(rb'"id":\s*"([0-9A-Fa-f-]{36})"')
_USER = re.compile(rb'"user_id":\s*"((?:[^"\\\n]|\\.){1,256})"')


class JournalError(PgmemError):
    """The journal could not be used (unreadable, damaged, not writable)."""


class UnsafeJournal(JournalError, UnsafePath):
    """The journal's directory or one of its files is a symbolic link, owned by another user, or writable
    by group or others; pgmem refuses to read or write it (the message names the path, the hint the fix)."""


class JournalBusy(JournalError):
    """Another live writer (in this or another process) holds this client name's journal."""


def journal_dir() -> Path:
    """Where journals live: ``$PGMEM_JOURNAL_DIR``, else ``platformdirs.user_state_dir("pgmem")/journal``."""
    env = os.environ.get(ENV)
    if env:  # absolute, but links not resolved: the directory itself must not be one
        return Path(os.path.abspath(Path(env).expanduser()))
    import warnings

    warnings.filterwarnings("ignore", module="platformdirs")
    import platformdirs

    return Path(platformdirs.user_state_dir("pgmem")) / "journal"


def check_name(name: str) -> str:
    """A client name usable as a file name: 1-128 of ``A-Z a-z 0-9 _ . @ -``, not starting with a symbol."""
    if not isinstance(name, str) or not NAME.match(name):
        raise PgmemError(f"client name {name!r} must be 1 to 128 characters of letters, digits, '_', '.', '@', '-', "
                         "starting with a letter or digit")
    return name


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    return str(value)  # UUID


def _dumps(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                      default=_json_default).encode("utf-8")


def encode(entry: dict[str, Any]) -> bytes:
    """One JSON line (UTF-8 JSON and a newline; datetimes become ISO 8601 text with their offset): the form of
    the rejected and quarantine files, and of journal records of format 1."""
    return _dumps(entry) + b"\n"


def encode_record(entry: dict[str, Any]) -> bytes:
    """One journal record of format 2: ``v2 <length> <crc32 as 8 hex digits> <json>\\n``."""
    payload = _dumps(entry)
    return b"v2 %d %08x " % (len(payload), zlib.crc32(payload)) + payload + b"\n"


# --------------------------------------------------------------------------------------------------------
# Reading records: every record checked, damage found and bounded
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """One record found in journal bytes: ``kind`` ``ok`` (``entry`` holds the write), ``damaged`` (fails its
    checksum or cannot be read: ``reason``) or ``torn`` (cut short at the end); ``start`` and ``end`` are
    byte offsets in the file; ``raw`` the record's bytes; ``version`` 1 or 2 (0: unknown)."""

    kind: str
    start: int
    end: int
    raw: bytes
    entry: dict[str, Any] | None = None
    reason: str | None = None
    version: int = 0

    def ident(self) -> str | None:
        """The client id of the write, from the entry or (damaged, torn) from the bytes when readable."""
        if self.entry is not None:
            value = self.entry.get("id")
            return str(value) if value is not None else None
        m = _ID.search(self.raw)
        return m.group(1).decode("ascii") if m else None

    def user(self) -> str | None:
        if self.entry is not None:
            value = self.entry.get("user_id")
            return str(value) if value is not None else None
        m = _USER.search(self.raw)
        if not m:
            return None
        try:
            return json.loads(b'"' + m.group(1) + b'"')
        except ValueError:
            return None


class _Framed(ValueError):
    """A record whose frame is whole (its header, its length and its end of line agree) but whose content is
    damaged: it ends at ``end``, and the next record starts there."""

    def __init__(self, reason: str, end: int) -> None:
        super().__init__(reason)
        self.end = end


class _Incomplete(Exception):
    """The record at this position needs bytes past the end of the data (torn, or more to read)."""


def _parse(data: bytes, pos: int) -> tuple[dict[str, Any], int, int]:
    """The record at ``pos``: ``(entry, end, version)``. Raises ValueError (damaged, with the reason) or
    _Incomplete (no end of line after ``pos``)."""
    nl = data.find(b"\n", pos)
    if data.startswith(_V2, pos):
        try:
            head_end = pos + 3
            sp1 = data.index(b" ", head_end, head_end + 11)
            length = int(data[head_end:sp1])
            crc = int(data[sp1 + 1:sp1 + 9], 16)
            if data[sp1 + 9:sp1 + 10] != b" " or not data[head_end:sp1].isdigit() or length > _MAX_RECORD:
                raise ValueError
        except ValueError:
            if nl < 0:
                raise _Incomplete from None
            raise ValueError("unreadable record header") from None
        body = sp1 + 10
        end = body + length
        if end >= len(data):
            if nl < 0:
                raise _Incomplete
            raise ValueError(f"record length {length} runs past the end of its line")
        if data[end:end + 1] != b"\n":
            raise ValueError(f"no end of line after the {length} bytes the record announces")
        payload = data[body:end]
        if zlib.crc32(payload) != crc:
            if b"\n" in payload:  # an end of line inside: the length itself may be wrong, not a sure frame
                raise ValueError(f"checksum mismatch (crc32 {zlib.crc32(payload):08x}, recorded {crc:08x})")
            raise _Framed(f"checksum mismatch (crc32 {zlib.crc32(payload):08x}, recorded {crc:08x})", end + 1)
        try:
            entry = json.loads(payload)
        except ValueError as exc:  # a valid checksum over bad JSON: written so, or forged
            raise _Framed(f"not JSON: {exc}", end + 1) from None
        if not isinstance(entry, dict):
            raise _Framed("not a JSON object", end + 1)
        return entry, end + 1, 2
    if nl < 0:
        raise _Incomplete
    if data[pos:pos + 1] == b"{":  # format 1: a bare JSON line, no checksum
        try:
            entry = json.loads(data[pos:nl])
        except ValueError as exc:
            raise _Framed(f"not JSON: {exc}", nl + 1) from None
        if not isinstance(entry, dict):
            raise _Framed("not a JSON object", nl + 1)
        return entry, nl + 1, 1
    raise ValueError("not the start of a record")


def _resync(data: bytes, pos: int) -> int | None:
    """After damage at ``pos``: the first later position where a whole record reads well (at the start of a
    line, or at a format-2 header whose end of line the damage took), or None."""
    q = pos
    while True:
        nl = data.find(b"\n", q)
        v2 = data.find(_V2, q + 1)
        cands = [c for c in (nl + 1 if nl >= 0 else -1, v2) if c > pos and c < len(data)]
        if not cands:
            return None
        c = min(cands)
        try:
            _parse(data, c)
            return c
        except _Framed:
            return c  # a record of its own, damaged too: found as such
        except (ValueError, _Incomplete):
            q = c


def scan(data: bytes, base: int = 0, *, final: bool = True) -> tuple[list[Record], int]:
    """Every record of ``data`` (the bytes of a journal from file offset ``base``): ``(records, used)``.
    With ``final`` the end of ``data`` is the end of the file: a last record without its end of line is
    ``torn``. Without it the scan stops before a record that may need more bytes (``used`` < len(data))."""
    out: list[Record] = []
    pos = 0
    n = len(data)
    while pos < n:
        try:
            entry, end, version = _parse(data, pos)
        except _Incomplete:
            if not final:
                break
            out.append(Record("torn", base + pos, base + n, data[pos:], reason="cut short at the end of the journal "
                              "(a crash during an append)", version=2 if data.startswith(_V2, pos) else 1))
            pos = n
            break
        except _Framed as exc:
            out.append(Record("damaged", base + pos, base + exc.end, data[pos:exc.end], reason=str(exc)))
            pos = exc.end
            continue
        except ValueError as exc:
            nxt = _resync(data, pos)
            if nxt is None:
                if not final:
                    break
                last_nl = data.rfind(b"\n", pos) + 1
                stop = last_nl if last_nl > pos else n
                out.append(Record("damaged", base + pos, base + stop, data[pos:stop], reason=str(exc)))
                if stop < n:
                    out.append(Record("torn", base + stop, base + n, data[stop:],
                                      reason="cut short at the end of the journal (a crash during an append)"))
                pos = n
                break
            out.append(Record("damaged", base + pos, base + nxt, data[pos:nxt], reason=str(exc)))
            pos = nxt
            continue
        out.append(Record("ok", base + pos, base + end, data[pos:end], entry=entry, version=version))
        pos = end
    return out, pos


def _qkey(offset: int, raw: bytes) -> tuple[int, str]:
    return offset, hashlib.sha256(raw).hexdigest()[:32]


def quarantine_entry(journal: Path, rec: Record) -> dict[str, Any]:
    """The quarantine file's line for a damaged or torn record."""
    return {"journal": journal.name, "kind": rec.kind, "offset": rec.start, "length": len(rec.raw),
            "reason": rec.reason, "id": rec.ident(), "user_id": rec.user(),
            "found_at": datetime.now(timezone.utc).isoformat(), "sha256": hashlib.sha256(rec.raw).hexdigest(),
            "raw_b64": base64.b64encode(rec.raw).decode("ascii")}


_fsync_dir = files.fsync_dir


def _checked_dir(directory: Path, *, create: bool = True) -> Path:
    """:func:`pgmem.files.private_dir`, its refusal as :class:`UnsafeJournal`."""
    try:
        return files.private_dir(directory, create=create)
    except UnsafePath as exc:
        raise UnsafeJournal(f"unsafe journal directory: {exc.message}", hint=exc.hint) from None
    except PgmemError as exc:
        raise JournalError(exc.message, hint=exc.hint) from None


def _open(path: Path, flags: int, *, create: bool = True) -> tuple[int, bool]:
    """:func:`pgmem.files.open_private` (exclusive create 0600, else no link, own file, not writable by
    others); its refusal as :class:`UnsafeJournal`."""
    try:
        return files.open_private(path, flags, create=create)
    except UnsafePath as exc:
        raise UnsafeJournal(f"unsafe journal file: {exc.message}", hint=exc.hint) from None
    except PgmemError as exc:
        raise JournalError(exc.message, hint=exc.hint) from None


def _quarantine_path(directory: Path, name: str) -> Path:
    return directory / f"{name}.quarantine"


class Journal:
    """The journal of one client name; exclusive to this object while it is open. Thread-safe.

    ``pending``: valid records not replayed yet. ``damaged`` and ``torn``: records this object found damaged
    (moved to the quarantine file) or cut short at the end (dropped, kept in the quarantine file too).
    ``broken``: the last append failed and the file could not be cut back to its durable size yet (the next
    append tries again first)."""

    def __init__(self, name: str, directory: Path | str | None = None) -> None:
        self.name = check_name(name)
        self.directory = Path(os.path.abspath(Path(directory).expanduser())) if directory is not None \
            else journal_dir()
        self.path = self.directory / f"{name}.jsonl"
        self.rejected_path = self.directory / f"{name}.rejected.jsonl"
        self.quarantine_path = _quarantine_path(self.directory, name)
        self._offset_path = self.directory / f"{name}.offset"
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self.damaged = 0
        self.torn = 0
        self.pending = 0
        self.broken: str | None = None
        self._durable = 0  # bytes of the file known to be on disk (after the last successful fsync)
        self._quarantined: set[tuple[int, str]] = set()
        self._offset_warned = False
        try:
            _checked_dir(self.directory)
            self._lock_fd, _ = _open(self.directory / f"{name}.lock", os.O_RDWR)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                holder = os.pread(self._lock_fd, 32, 0).decode("ascii", "replace").strip()
                os.close(self._lock_fd)
                self._lock_fd = None
                raise JournalBusy(f"the journal {self.path} is in use by another writer (pid {holder or '?'})",
                                  hint="give each concurrent writer its own client_name") from None
            with contextlib.suppress(OSError):  # the pid is a courtesy for JournalBusy; a full disk must not stop us
                os.ftruncate(self._lock_fd, 0)
                os.pwrite(self._lock_fd, f"{os.getpid()}\n".encode(), 0)
            self._fd, created = _open(self.path, os.O_RDWR | os.O_APPEND)
            if created:
                _fsync_dir(self.directory)
            for extra in (self.rejected_path, self._offset_path, self.quarantine_path):  # checked now
                try:
                    os.close(_open(extra, os.O_RDONLY, create=False)[0])
                except FileNotFoundError:
                    pass
            self._quarantined = {_qkey(q["offset"], base64.b64decode(q["raw_b64"]))
                                 for q in _read_quarantine_file(self.quarantine_path) if "raw_b64" in q}
            self._offset = self._read_offset()
            self._recover()
        except PgmemError:  # before OSError: UnsafeJournal is a PermissionError too
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise JournalError(f"cannot use the journal {self.path}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    # --- opening ----------------------------------------------------------------------------------------
    def _read_offset(self) -> int:
        try:
            fd, _ = _open(self._offset_path, os.O_RDONLY, create=False)
        except FileNotFoundError:
            return 0
        try:
            offset = int(os.read(fd, 64).decode("ascii", "replace").strip() or 0)
        except ValueError:
            return 0  # replaying from the start again is harmless (client ids)
        finally:
            os.close(fd)
        return offset if 0 <= offset <= os.fstat(self._fd).st_size else 0

    def _recover(self) -> None:
        """Check every pending record: count the good ones, quarantine damaged ones, drop a torn last one
        (a crash during an append, never acknowledged) after keeping it in the quarantine file."""
        size = os.fstat(self._fd).st_size
        self._durable = size
        data = _pread_all(self._fd, self._offset, size - self._offset)
        records, _ = scan(data, self._offset, final=True)
        kept = True
        for rec in records:
            if rec.kind == "ok":
                self.pending += 1
            else:
                kept = self._quarantine(rec) and kept
        if records and records[-1].kind == "torn":
            tail = records[-1].start
            try:
                os.ftruncate(self._fd, tail)
                os.fsync(self._fd)
                self._durable = tail
            except OSError as exc:
                log.error("pgmem journal %s: cannot cut the torn record at byte %d off (%s); it stays in the file "
                          "and is skipped", self.path, tail, exc)
        if not self.pending and kept and (self._offset or records):
            self._offset = self._durable  # nothing left to replay: every damaged record is in the quarantine
            self._reset()

    def _quarantine(self, rec: Record) -> bool:
        """Keep a damaged or torn record in the quarantine file (once), count and log it. False when the
        quarantine file cannot be written (then the record must stay where it is)."""
        key = _qkey(rec.start, rec.raw)
        if key in self._quarantined:
            return True
        line = encode(quarantine_entry(self.path, rec))
        try:
            fd, created = _open(self.quarantine_path, os.O_WRONLY | os.O_APPEND)
            try:
                files.write_all(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                _fsync_dir(self.directory)
        except (OSError, PgmemError) as exc:
            log.error("pgmem journal %s: %s record at byte %d (id %s: %s) cannot be kept in %s: %s; it stays in "
                      "the journal", self.path, rec.kind, rec.start, rec.ident() or "unreadable", rec.reason,
                      self.quarantine_path, exc)
            return False
        self._quarantined.add(key)
        if rec.kind == "torn":
            self.torn += 1
            log.warning("pgmem journal %s: a record cut short at byte %d (%d bytes, id %s) was dropped: never "
                        "completed on disk; kept in %s", self.path, rec.start, len(rec.raw),
                        rec.ident() or "unreadable", self.quarantine_path)
        else:
            self.damaged += 1
            log.error("pgmem journal %s: damaged record at byte %d (%d bytes, id %s): %s; not applied, moved to %s "
                      "(pgmem journal show %s)", self.path, rec.start, len(rec.raw), rec.ident() or "unreadable",
                      rec.reason, self.quarantine_path, self.name)
        return True

    # --- writing ----------------------------------------------------------------------------------------
    def append(self, entries: list[dict[str, Any]]) -> None:
        """Append writes durably: one ``write`` then ``fsync``; when this returns they survive a crash.
        Raises JournalError when the disk refuses (full, read-only, an I/O error): then none of ``entries`` is
        durable, and the file is cut back to its last durable size (now or before the next append)."""
        if not entries:
            return
        data = b"".join(encode_record(e) for e in entries)
        with self._lock:
            self._check_open()
            if self.broken is not None:
                self._repair()
            try:
                files.write_all(self._fd, data)
                os.fsync(self._fd)
                self._durable = os.fstat(self._fd).st_size
            except OSError as exc:
                self.broken = f"{exc.strerror or exc}"
                with contextlib.suppress(JournalError):
                    self._repair()
                raise JournalError(f"cannot write the journal {self.path}: {exc}") from exc
            self.pending += len(entries)

    def _repair(self) -> None:
        """After a failed write or fsync: reopen the file and cut it back to the last durable size, so no byte
        of an append that may not be on disk is ever taken for a record. JournalError when that fails too."""
        try:
            fd, _ = _open(self.path, os.O_RDWR | os.O_APPEND)  # the old descriptor stays for reading until then
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
            self._fd = fd
            size = os.fstat(self._fd).st_size
            if size > self._durable:
                os.ftruncate(self._fd, self._durable)
                os.fsync(self._fd)
            elif size < self._durable:
                log.error("pgmem journal %s is %d bytes, %d were durable: cut by something else", self.path,
                          size, self._durable)
                self._durable = size
                self._offset = min(self._offset, size)
        except (OSError, PgmemError) as exc:
            raise JournalError(f"cannot repair the journal {self.path} after a failed write: {exc}") from exc
        self.broken = None

    def reject(self, entries: list[dict[str, Any]], error: str) -> None:
        """Keep writes the database refused for good in ``<name>.rejected.jsonl`` with the error (fsync'd)."""
        if not entries:
            return
        data = b"".join(encode({**e, "error": error}) for e in entries)
        with self._lock:
            fd, created = _open(self.rejected_path, os.O_WRONLY | os.O_APPEND)
            try:
                files.write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                _fsync_dir(self.directory)

    # --- replaying --------------------------------------------------------------------------------------
    def read(self, limit: int) -> list[tuple[dict[str, Any], int]]:
        """Up to ``limit`` pending writes, oldest first, each with the offset just after it (for :meth:`done`).
        Damaged records on the way are moved to the quarantine file (counted, logged) and skipped; one that
        cannot be kept there stops the read before it (it stays in the journal). [] when none is readable."""
        with self._lock:
            self._check_open()
            if self._fd is None:  # broken and not repaired yet: nothing readable now
                return []
            end = self._durable
            entries: list[tuple[dict[str, Any], int]] = []
            pos = self._offset
            chunk = 1 << 20
            while len(entries) < limit and pos < end:
                want = min(chunk, end - pos)
                data = os.pread(self._fd, want, pos)
                final = pos + len(data) >= end
                records, used = scan(data, pos, final=final)
                if not records:
                    if final or not data:
                        break
                    chunk *= 2  # one record longer than the chunk
                    continue
                for rec in records:
                    if len(entries) >= limit:
                        break
                    if rec.kind == "ok":
                        entries.append((rec.entry, rec.end))
                    elif not self._quarantine(rec):
                        return entries
                    elif not entries:  # nothing good before it: replayed past at once
                        self._set_offset(rec.end)
                    pos = rec.end
                chunk = 1 << 20
            return entries

    def done(self, offset: int, count: int) -> None:
        """Mark the writes up to ``offset`` (from :meth:`read`) as replayed; truncate the file when all are.
        A failure to record the offset on disk is logged once (a restart then replays again: harmless)."""
        with self._lock:
            self._check_open()
            self.pending = max(0, self.pending - count)
            self._set_offset(offset)

    def _set_offset(self, offset: int) -> None:
        self._offset = offset
        if self._fd is None:
            return
        if offset >= self._durable and not self.pending:
            self._reset()
            return
        try:
            _replace(self._offset_path, str(offset).encode("ascii"), fsync_dir=False)
        except (OSError, PgmemError) as exc:
            if not self._offset_warned:
                log.warning("pgmem journal %s: cannot record the replay offset in %s (%s); a restart replays "
                            "those writes again (their ids make that harmless)", self.path, self._offset_path, exc)
                self._offset_warned = True

    def _reset(self) -> None:
        try:
            os.ftruncate(self._fd, 0)
            os.fsync(self._fd)
        except OSError as exc:
            log.warning("pgmem journal %s: cannot truncate the replayed journal (%s); kept, skipped by offset",
                        self.path, exc)
            with contextlib.suppress(OSError, PgmemError):
                _replace(self._offset_path, str(self._offset).encode("ascii"), fsync_dir=False)
            return
        self._durable = 0
        self._offset = 0
        self.pending = 0
        with contextlib.suppress(FileNotFoundError, OSError):
            self._offset_path.unlink()

    # --- lifecycle --------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._fd is None and self.broken is None:
            raise JournalError(f"the journal {self.path} is closed")

    def close(self) -> None:
        """Close the files and release the lock (the journal's content stays for the next writer)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self.broken = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None

    @property
    def closed(self) -> bool:
        return self._fd is None and self._lock_fd is None


def _pread_all(fd: int, offset: int, length: int) -> bytes:
    chunks = []
    while length > 0:
        chunk = os.pread(fd, min(length, 1 << 24), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


def _read_quarantine_file(path: Path) -> list[dict[str, Any]]:
    try:
        data = _read(path)
    except FileNotFoundError:
        return []
    out = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            if isinstance(item, dict):
                out.append(item)
    return out


# --- inspection (pgmem journal) ------------------------------------------------------------------------
@dataclass
class JournalInfo:
    """What :func:`inspect` found in one journal, without changing anything: ``pending`` (valid records not
    replayed), ``damaged`` and ``torn`` (in the pending part of the journal now, or kept in the quarantine
    file), ``rejected`` (lines of the rejected file), ``bytes``, ``offset`` (bytes replayed), ``formats``
    (record formats seen), ``in_use`` (pid of a live writer holding the lock, or None), ``problems`` (the
    damaged and torn records, each with its offset, reason and id)."""

    name: str
    path: Path
    pending: int = 0
    damaged: int = 0
    torn: int = 0
    rejected: int = 0
    bytes: int = 0
    offset: int = 0
    formats: list[int] = field(default_factory=list)
    in_use: int | None = None
    problems: list[dict[str, Any]] = field(default_factory=list)
    quarantine_path: Path | None = None
    rejected_path: Path | None = None


def _directory(directory: Path | str | None) -> Path:
    return Path(os.path.abspath(Path(directory).expanduser())) if directory is not None else journal_dir()


def _holder(directory: Path, name: str) -> int | None:
    """The pid of a live writer holding ``<name>.lock`` (a shared lock is tried and released), or None."""
    try:
        fd, _ = _open(directory / f"{name}.lock", os.O_RDONLY, create=False)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def inspect(name: str, directory: Path | str | None = None) -> JournalInfo:
    """Read and check the journal ``name`` (a client name) in ``directory`` (default :func:`journal_dir`)
    with the same file checks as the writer, changing nothing. Raises UnsafeJournal, JournalError (missing,
    unreadable)."""
    name = check_name(name)
    folder = _checked_dir(_directory(directory), create=False)
    path = folder / f"{name}.jsonl"
    info = JournalInfo(name, path, quarantine_path=_quarantine_path(folder, name),
                       rejected_path=folder / f"{name}.rejected.jsonl")
    try:
        data = _read(path)
    except FileNotFoundError:
        raise JournalError(f"no journal {path}", hint="pgmem journal list shows the journals of a directory") from None
    except OSError as exc:
        raise JournalError(f"cannot read the journal {path}: {exc}") from exc
    info.bytes = len(data)
    try:
        info.offset = int(_read(folder / f"{name}.offset").decode("ascii", "replace").strip() or 0)
    except (FileNotFoundError, ValueError):
        info.offset = 0
    if not 0 <= info.offset <= len(data):
        info.offset = 0
    records, _ = scan(data[info.offset:], info.offset, final=True)
    quarantined = _read_quarantine_file(info.quarantine_path)
    keys = {_qkey(q.get("offset", -1), base64.b64decode(q.get("raw_b64", ""))) for q in quarantined}
    formats = set()
    for rec in records:
        if rec.kind == "ok":
            info.pending += 1
            formats.add(rec.version)
            continue
        if _qkey(rec.start, rec.raw) in keys:
            continue  # counted below, from the quarantine file
        info.problems.append({"kind": rec.kind, "offset": rec.start, "length": len(rec.raw), "reason": rec.reason,
                              "id": rec.ident(), "quarantined": False})
    for q in quarantined:
        info.problems.append({"kind": q.get("kind"), "offset": q.get("offset"), "length": q.get("length"),
                              "reason": q.get("reason"), "id": q.get("id"), "quarantined": True})
    info.damaged = sum(1 for p in info.problems if p["kind"] == "damaged")
    info.torn = sum(1 for p in info.problems if p["kind"] == "torn")
    info.formats = sorted(formats)
    try:
        info.rejected = _read(info.rejected_path).count(b"\n")
    except FileNotFoundError:
        info.rejected = 0
    info.in_use = _holder(folder, name)
    return info


def list_journals(directory: Path | str | None = None) -> list[JournalInfo]:
    """:func:`inspect` of every journal in ``directory`` (default :func:`journal_dir`), by name; [] when the
    directory does not exist. Raises UnsafeJournal for an unsafe directory or file."""
    folder = _directory(directory)
    if not os.path.lexists(folder):
        return []
    _checked_dir(folder, create=False)
    names = sorted({_journal_name(p) for p in folder.iterdir()
                    if p.name.endswith((".jsonl", ".quarantine")) and NAME.match(_journal_name(p) or "-")})
    out = []
    for n in names:
        if not os.path.lexists(folder / f"{n}.jsonl"):
            continue  # a rejected or quarantine file left alone
        out.append(inspect(n, folder))
    return out


def read_quarantine(name: str, directory: Path | str | None = None) -> list[dict[str, Any]]:
    """The records of ``<name>.quarantine`` (each with ``raw``: the record's bytes, decoded from base64), in
    the order found; [] when there is none. Same file checks as the writer."""
    name = check_name(name)
    folder = _checked_dir(_directory(directory), create=False)
    out = []
    for q in _read_quarantine_file(_quarantine_path(folder, name)):
        q = dict(q)
        with contextlib.suppress(ValueError, TypeError):
            q["raw"] = base64.b64decode(q.get("raw_b64", ""))
        out.append(q)
    return out


# --- erasure ---------------------------------------------------------------------------------------------
def _journal_name(path: Path) -> str:
    """The client name of ``<name>.jsonl``, ``<name>.rejected.jsonl`` or ``<name>.quarantine``."""
    base = path.name
    for suffix in (".rejected.jsonl", ".quarantine", ".jsonl"):
        if base.endswith(suffix):
            return base[:-len(suffix)]
    return ""


def _lock_journal(directory: Path, name: str) -> int:
    """Take ``<name>.lock`` as :class:`Journal` does (exclusive, not waiting); JournalBusy when a writer holds it."""
    fd, _ = _open(directory / f"{name}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise JournalBusy(f"the journal {directory / name}.jsonl is in use by a writer (pid {holder or '?'})",
                          hint="close that writer (or stop its process), then erase again; nothing was changed") \
            from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _split(path: Path, user_id: str, offset: int | None,
           quarantined: set[tuple[int, str]] | None = None) -> tuple[bytes, int, int, int]:
    """Filter one journal: (kept bytes, lines removed, new offset, bytes). ``offset`` (pending journals
    only) counts replayed bytes; the new one counts the kept lines among them. A torn last line (a crash
    during an append, never acknowledged) is dropped; a damaged line elsewhere raises JournalError."""
    data = _read(path)
    kept: list[bytes] = []
    removed = 0
    new_offset = 0
    if path.name.endswith(".quarantine"):  # plain JSON lines, each naming its user when it was readable
        for line in data.splitlines(keepends=True):
            try:
                item = json.loads(line)
            except ValueError:
                item = None
            if isinstance(item, dict) and item.get("user_id") == user_id:
                removed += 1
            else:
                kept.append(line)
        return b"".join(kept), removed, 0, len(data)
    if path.name.endswith(".rejected.jsonl"):  # plain JSON lines
        records = []
        pos = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # torn
            try:
                entry = json.loads(line)
                if not isinstance(entry, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                records.append(Record("damaged", pos, pos + len(line), line, reason=f"not JSON: {exc}"))
            else:
                records.append(Record("ok", pos, pos + len(line), line, entry=entry, version=1))
            pos += len(line)
    else:
        records, _ = scan(data, 0, final=True)
    for rec in records:
        if rec.kind == "torn":
            continue  # a crash during an append, never acknowledged
        if rec.kind == "damaged" and _qkey(rec.start, rec.raw) in (quarantined or set()):
            removed += rec.user() == user_id  # kept in the quarantine file (the user's lines leave it too)
            continue
        if rec.kind == "damaged":
            raise JournalError(f"the journal {path} is damaged at byte {rec.start}: {rec.reason}",
                               hint="check it with pgmem journal check; open its writer (or pgmem journal replay) to "
                                    "move the damaged record to the quarantine file; no journal was changed")
        if rec.entry.get("user_id") == user_id:
            removed += 1
            continue
        kept.append(rec.raw)
        if offset is not None and rec.end <= offset:
            new_offset += len(rec.raw)
    return b"".join(kept), removed, new_offset, len(data)


def _read(path: Path) -> bytes:
    """The bytes of a journal file, opened as :func:`_open` checks it (not created)."""
    fd, _ = _open(path, os.O_RDONLY, create=False)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _replace(path: Path, data: bytes, *, fsync_dir: bool = True) -> None:
    """Write ``data`` to ``path`` atomically: a new temporary file (exclusive, 0600; a stale one from a crash
    is removed first), fsync, rename over ``path``, and (``fsync_dir``) fsync of the directory."""
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a leftover of a crash (the directory is ours: checked when opened)
    fd, _ = _open(tmp, os.O_WRONLY)
    try:
        files.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync_dir:
        _fsync_dir(path.parent)


def erase_user(user_id: str, directory: Path | str | None = None) -> dict[str, int]:
    """Remove every line of ``user_id`` from the journals in ``directory`` (default :func:`journal_dir`):
    the pending ``<name>.jsonl``, the ``<name>.rejected.jsonl`` and the ``<name>.quarantine`` files (a
    quarantined record whose user could be read; one that is still in the journal leaves it, being kept in
    the quarantine file), for the right to erasure (the
    database side is :meth:`pgmem.Memory.erase_user`). Lines are matched on their ``user_id`` field; lines
    of a login bound to its user (``user_id`` null) are not matched.

    Every journal's ``<name>.lock`` is taken first, as a writer takes it; if a live writer holds one,
    :class:`JournalBusy` is raised and no file is changed. Every file is read and checked before any is
    written (a damaged line raises :class:`JournalError`, nothing changed). Each changed file is then
    rewritten atomically (temporary file, fsync, rename, fsync of the directory) and its ``<name>.offset``
    (bytes already replayed) is set to the bytes of the kept lines that preceded the old offset, so the
    other users' pending lines replay as before. The old offset is removed before the journal is replaced,
    so a crash in between makes the next writer replay that journal from its start (harmless: client ids
    make a second write a no-op); no pending line is ever skipped. Files of other names in the directory
    are not touched.

    Returns the lines removed per file path (files with none removed included, as 0). Raises JournalBusy,
    JournalError (unreadable, damaged, not writable)."""
    from . import validation as v

    user_id = v.check_id(user_id, "user_id", optional=False)
    folder = Path(os.path.abspath(Path(directory).expanduser())) if directory is not None else journal_dir()
    if not os.path.lexists(folder):
        return {}
    _checked_dir(folder, create=False)
    paths = sorted(p for p in [*folder.glob("*.jsonl"), *folder.glob("*.quarantine")]  # links included: reading
                   if (p.is_symlink() or p.is_file()) and NAME.match(_journal_name(p) or "-"))  # one refuses it
    names = sorted({_journal_name(p) for p in paths})
    locks: list[int] = []
    try:
        try:
            for name in names:
                locks.append(_lock_journal(folder, name))
            plans = []
            for path in paths:
                name = _journal_name(path)
                offset_path = folder / f"{name}.offset"
                offset = None
                if not path.name.endswith((".rejected.jsonl", ".quarantine")):
                    try:
                        offset = int(_read(offset_path).decode("ascii", "replace").strip() or 0)
                    except (FileNotFoundError, ValueError):
                        offset = 0
                keys = {_qkey(q.get("offset", -1), base64.b64decode(q.get("raw_b64", "")))
                        for q in _read_quarantine_file(_quarantine_path(folder, name))} if offset is not None else None
                kept, removed, new_offset, size = _split(path, user_id, offset, keys)
                if offset is not None and not 0 <= offset <= size:
                    new_offset = 0  # an offset the journal would ignore: it replays from the start anyway
                plans.append((path, offset_path, kept, removed, offset, new_offset, size))
            result: dict[str, int] = {}
            for path, offset_path, kept, removed, offset, new_offset, size in plans:
                result[str(path)] = removed
                if removed == 0 and len(kept) == size:
                    continue
                moves = offset is not None and new_offset != offset
                if moves:
                    # Offset gone first: a crash before the next step replays this journal from its start
                    # (harmless: client ids), never from an old offset past lines still pending.
                    offset_path.unlink(missing_ok=True)
                    _fsync_dir(folder)
                _replace(path, kept)
                if moves and new_offset > 0:
                    _replace(offset_path, str(new_offset).encode("ascii"))
            return result
        except PgmemError:
            raise
        except OSError as exc:
            raise JournalError(f"cannot erase user {user_id!r} from the journals in {folder}: {exc}") from exc
    finally:
        for fd in locks:
            os.close(fd)  # releases the flock


__all__ = ["FORMAT", "Journal", "JournalBusy", "JournalError", "JournalInfo", "Record", "UnsafeJournal", "check_name",
           "encode", "encode_record", "erase_user", "inspect", "journal_dir", "list_journals", "read_quarantine", "scan"]
