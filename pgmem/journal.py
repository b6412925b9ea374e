"""A durable local journal of accepted writes that the database could not take yet.

One JSON Lines file per client name, in :func:`journal_dir` (``$PGMEM_JOURNAL_DIR``, default
``platformdirs.user_state_dir("pgmem")/journal``, e.g. ``~/.local/state/pgmem/journal`` on Linux):

- ``<name>.jsonl``: one write per line, in the order the writes were accepted. Every append is written with
  one ``write`` and ``fsync``'d before it is acknowledged; creating the file also fsyncs the directory.
- ``<name>.offset``: how many bytes of the journal are already replayed into the database (written after
  each replayed chunk; losing it only replays a chunk again, which the client ids make harmless).
- ``<name>.rejected.jsonl``: writes the database refused for good (bad input it alone could judge, a missing
  space, no identity), each with its error, fsync'd too. Kept for a human; never replayed by itself.
- ``<name>.lock``: an exclusive ``flock`` held while a writer uses the journal, so two live processes never
  share one (the second gets :class:`JournalBusy`).

The directory and every file are checked when the journal is opened (:mod:`pgmem.files`): the
directory is created 0700, files 0600 and exclusively (``O_EXCL``); an existing directory or file must be
owned by the current (effective) uid, not writable by group or others, and not a symbolic link (``lstat``,
``O_NOFOLLOW``). Otherwise :class:`UnsafeJournal` names the path and the fix; nothing is read or written.

A line cut short by a crash during an append was never acknowledged, so opening the journal drops it.
A damaged line anywhere else stops the replay with an error naming the file and line: nothing is skipped
silently. When every line is replayed the file is truncated to zero bytes (and fsync'd).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from . import files
from .errors import PgmemError, UnsafePath

ENV = "PGMEM_JOURNAL_DIR"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")


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


def encode(entry: dict[str, Any]) -> bytes:
    """One journal line (UTF-8 JSON and a newline); datetimes become ISO 8601 text with their offset."""
    def default(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.isoformat()
        if hasattr(value, "tolist"):  # numpy arrays and scalars
            return value.tolist()
        return str(value)  # UUID
    return (json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=default)
            + "\n").encode("utf-8")


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


class Journal:
    """The journal of one client name; exclusive to this object while it is open. Thread-safe."""

    def __init__(self, name: str, directory: Path | str | None = None) -> None:
        self.name = check_name(name)
        self.directory = Path(os.path.abspath(Path(directory).expanduser())) if directory is not None \
            else journal_dir()
        self.path = self.directory / f"{name}.jsonl"
        self.rejected_path = self.directory / f"{name}.rejected.jsonl"
        self._offset_path = self.directory / f"{name}.offset"
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._lock_fd: int | None = None
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
            os.ftruncate(self._lock_fd, 0)
            os.pwrite(self._lock_fd, f"{os.getpid()}\n".encode(), 0)
            self._fd, created = _open(self.path, os.O_RDWR | os.O_APPEND)
            if created:
                _fsync_dir(self.directory)
            for extra in (self.rejected_path, self._offset_path):  # checked now, not when first needed
                try:
                    os.close(_open(extra, os.O_RDONLY, create=False)[0])
                except FileNotFoundError:
                    pass
            self._offset = self._read_offset()
            self.pending = self._recover()
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

    def _recover(self) -> int:
        """Drop a torn last line (a crash during an append, never acknowledged); count the pending lines."""
        size = os.fstat(self._fd).st_size
        data = os.pread(self._fd, size - self._offset, self._offset) if size > self._offset else b""
        end = data.rfind(b"\n") + 1
        if end < len(data):
            os.ftruncate(self._fd, self._offset + end)
            os.fsync(self._fd)
            data = data[:end]
        if self._offset and self._offset == os.fstat(self._fd).st_size:
            self._reset()
        return data.count(b"\n")

    # --- writing ----------------------------------------------------------------------------------------
    def append(self, entries: list[dict[str, Any]]) -> None:
        """Append writes durably: one ``write`` then ``fsync``; when this returns they survive a crash."""
        if not entries:
            return
        data = b"".join(encode(e) for e in entries)
        with self._lock:
            self._check_open()
            try:
                written = 0
                while written < len(data):
                    written += os.write(self._fd, data[written:])
                os.fsync(self._fd)
            except OSError as exc:
                raise JournalError(f"cannot write the journal {self.path}: {exc}") from exc
            self.pending += len(entries)

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
        """Up to ``limit`` pending writes, oldest first, each with the offset just after it (for :meth:`done`)."""
        with self._lock:
            self._check_open()
            size = os.fstat(self._fd).st_size
            entries: list[tuple[dict[str, Any], int]] = []
            pos = self._offset
            chunk = 1 << 20
            buf = b""
            while len(entries) < limit and pos + len(buf) < size:
                buf += os.pread(self._fd, min(chunk, size - pos - len(buf)), pos + len(buf))
                while len(entries) < limit:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line, buf = buf[:nl], buf[nl + 1:]
                    try:
                        entry = json.loads(line)
                        if not isinstance(entry, dict):
                            raise ValueError("not a JSON object")
                    except ValueError as exc:
                        raise JournalError(f"the journal {self.path} is damaged at byte {pos}: {exc}",
                                           hint="move the file aside and inspect it; nothing was replayed past it") \
                            from None
                    pos += nl + 1
                    entries.append((entry, pos))
            return entries

    def done(self, offset: int, count: int) -> None:
        """Mark the writes up to ``offset`` (from :meth:`read`) as replayed; truncate the file when all are."""
        with self._lock:
            self._check_open()
            self._offset = offset
            self.pending = max(0, self.pending - count)
            if offset >= os.fstat(self._fd).st_size:
                self._reset()
            else:
                _replace(self._offset_path, str(offset).encode("ascii"), fsync_dir=False)

    def _reset(self) -> None:
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self._offset = 0
        self.pending = 0
        try:
            self._offset_path.unlink()
        except FileNotFoundError:
            pass

    # --- lifecycle --------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._fd is None:
            raise JournalError(f"the journal {self.path} is closed")

    def close(self) -> None:
        """Close the files and release the lock (the journal's content stays for the next writer)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None

    @property
    def closed(self) -> bool:
        return self._fd is None


# --- erasure ---------------------------------------------------------------------------------------------
def _journal_name(path: Path) -> str:
    """The client name of ``<name>.jsonl`` or ``<name>.rejected.jsonl``."""
    base = path.name
    return base[:-len(".rejected.jsonl")] if base.endswith(".rejected.jsonl") else base[:-len(".jsonl")]


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


def _split(path: Path, user_id: str, offset: int | None) -> tuple[bytes, int, int, int]:
    """Filter one journal: (kept bytes, lines removed, new offset, bytes). ``offset`` (pending journals
    only) counts replayed bytes; the new one counts the kept lines among them. A torn last line (a crash
    during an append, never acknowledged) is dropped; a damaged line elsewhere raises JournalError."""
    data = _read(path)
    end = data.rfind(b"\n") + 1
    kept: list[bytes] = []
    removed = 0
    new_offset = 0
    pos = 0
    for line in data[:end].splitlines(keepends=True):
        start, pos = pos, pos + len(line)
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            raise JournalError(f"the journal {path} is damaged at byte {start}: {exc}",
                               hint="move the file aside and inspect it by hand; no journal was changed") from None
        if entry.get("user_id") == user_id:
            removed += 1
            continue
        kept.append(line)
        if offset is not None and pos <= offset:
            new_offset += len(line)
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
    the pending ``<name>.jsonl`` and the ``<name>.rejected.jsonl`` files, for the right to erasure (the
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
    paths = sorted(p for p in folder.glob("*.jsonl")  # links included: reading one refuses it (UnsafeJournal)
                   if (p.is_symlink() or p.is_file()) and NAME.match(_journal_name(p) or "-"))
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
                if not path.name.endswith(".rejected.jsonl"):
                    try:
                        offset = int(_read(offset_path).decode("ascii", "replace").strip() or 0)
                    except (FileNotFoundError, ValueError):
                        offset = 0
                kept, removed, new_offset, size = _split(path, user_id, offset)
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


__all__ = ["Journal", "JournalBusy", "JournalError", "UnsafeJournal", "check_name", "erase_user", "journal_dir",
           "encode"]
