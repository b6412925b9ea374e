"""Private files: where pgmem writes memories to disk (exports, backups, the writer's journal).

Every file pgmem writes that holds memories is created readable and writable by its owner only (mode
0600) in a directory only its owner can enter (0700 when pgmem creates it), and is never written through a
symbolic link or over a file that belongs to someone else:

- :func:`private_dir` checks (and creates) a directory: a real directory (not a symbolic link), owned by
  the process's effective uid, not writable by group or others. Parent directories may be symbolic links
  (``/tmp`` on macOS is one); only the last component is checked, with ``lstat``.
- :func:`open_private` opens a file in such a directory: created exclusively (``O_CREAT | O_EXCL``) with
  mode 0600 when missing; an existing one is opened with ``O_NOFOLLOW`` (a symbolic link fails) and must be
  a regular file owned by the effective uid and not writable by group or others. One readable by group or
  others (made by hand, or by an old tool) is narrowed to 0600, with a warning in the log.
- :func:`create_private` creates a new file only (``O_EXCL``): an existing path, link or not, is refused.
- :func:`write_output_file` writes a file a user named (an export): :func:`check_output_file` first (not a
  directory, its directory exists, not there already unless ``force``: ValidationError), then
  :func:`write_private`.
- :func:`write_private` writes a whole file atomically and durably: a new temporary file next to it
  (exclusive, 0600), ``fsync``, then a hard link to the target name (which fails if the name exists, so
  nothing is ever overwritten) or, with ``force``, a rename over it; then ``fsync`` of the directory.
  ``force`` still refuses a target owned by another uid or a directory.

Everything raises :class:`pgmem.errors.UnsafePath` (a ``PgmemError``) naming the path and the fix when a
check fails, and :class:`pgmem.errors.PgmemError` for other operating-system errors; never a bare
``OSError``. POSIX only (Linux, macOS), as the rest of pgmem's file handling (``flock``, ``O_NOFOLLOW``).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

from .errors import PgmemError, UnsafePath, ValidationError

log = logging.getLogger("pgmem.files")

FILE_MODE = 0o600
DIR_MODE = 0o700
_NOFOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _who(mode: int) -> str:
    return " and ".join(w for w, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if mode & bit)


def check_stat(st: os.stat_result, path: Path | str, *, kind: str) -> None:
    """Refuse (UnsafePath) a file or directory ``path`` whose ``st`` (from ``lstat``/``fstat``) shows a
    symbolic link, the wrong kind (``kind``: ``"directory"`` or ``"file"``), another owner than the
    effective uid, or write permission for group or others."""
    euid = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is a symbolic link; pgmem does not follow links to private files",
                         hint=f"replace it with a real {kind} of your own, or give the path it points to")
    if kind == "directory" and not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path} is not a directory", hint="give a directory")
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{path} is not a regular file", hint="move it aside")
    if st.st_uid != euid:
        raise UnsafePath(f"{path} is owned by uid {st.st_uid}, not by this process's uid {euid}: another user "
                         "could read or replace what pgmem keeps there",
                         hint=f"use a {kind} of your own (or, if it is yours, chown {euid} {path})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        fix = "700" if kind == "directory" else "600"
        raise UnsafePath(f"{path} is writable by {_who(st.st_mode)} (mode {stat.S_IMODE(st.st_mode):04o}): "
                         "they could replace what pgmem keeps there",
                         hint=f"chmod {fix} {path}")


def private_dir(path: str | os.PathLike, *, create: bool = True) -> Path:
    """The directory ``path`` (``~`` expanded, made absolute without resolving links), checked as the
    module documentation says; created with mode 0700 (missing parents with the default mode) when it does
    not exist and ``create``. Returns the absolute path. Raises UnsafePath, PgmemError."""
    p = Path(os.path.abspath(Path(path).expanduser()))
    try:
        if create and not os.path.lexists(p):
            p.parent.mkdir(parents=True, exist_ok=True)
            with suppress(FileExistsError):  # created meanwhile: checked below like any existing one
                os.mkdir(p, DIR_MODE)
        st = os.lstat(p)
    except FileNotFoundError:
        raise PgmemError(f"directory {p} does not exist") from None
    except OSError as exc:
        raise PgmemError(f"cannot use directory {p}: {exc.strerror or exc}") from None
    check_stat(st, p, kind="directory")
    return p


def open_private(path: str | os.PathLike, flags: int = os.O_RDWR, *, create: bool = True) -> tuple[int, bool]:
    """Open the file ``path`` as the module documentation says: ``(fd, created)``. ``flags``: the access
    mode and extra flags (``os.O_APPEND``, ...); ``O_CREAT``, ``O_EXCL`` and ``O_NOFOLLOW`` are added here.
    With ``create`` False a missing file raises FileNotFoundError (the one OSError let through, so callers
    can treat absence as they like). Raises UnsafePath for a link, another owner or a writable mode."""
    p = Path(path)
    flags &= ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC)
    if create:
        try:
            return os.open(p, flags | os.O_CREAT | os.O_EXCL | _NOFOLLOW, FILE_MODE), True
        except FileExistsError:
            pass  # opened below and checked
        except OSError as exc:
            raise PgmemError(f"cannot create {p}: {exc.strerror or exc}") from None
    try:
        fd = os.open(p, flags | _NOFOLLOW)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW on a link (EMLINK on FreeBSD)
            raise UnsafePath(f"{p} is a symbolic link; pgmem does not follow links to private files",
                             hint="move the link aside") from None
        raise PgmemError(f"cannot open {p}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        check_stat(st, p, kind="file")
        if st.st_mode & 0o077:
            log.warning("%s was readable by group or others (mode %04o); narrowed to 0600", p, stat.S_IMODE(st.st_mode))
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd, False


def create_private(path: str | os.PathLike, flags: int = os.O_WRONLY) -> int:
    """Create the new file ``path`` (mode 0600, ``O_EXCL``: an existing path, a symbolic link included, is
    refused with PgmemError naming it) and return its descriptor."""
    p = Path(path)
    try:
        return os.open(p, (flags & ~os.O_TRUNC) | os.O_CREAT | os.O_EXCL | _NOFOLLOW, FILE_MODE)
    except FileExistsError:
        raise PgmemError(f"{p} exists already; pgmem creates this file and never writes over one",
                         hint="move it aside, or give a new path") from None
    except OSError as exc:
        raise PgmemError(f"cannot create {p}: {exc.strerror or exc}") from None


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(path: str | os.PathLike) -> None:
    """``fsync`` the directory ``path``, so that a file created or renamed in it survives a crash."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_new(tmp: Path, target: Path) -> None:
    """Give ``tmp`` the name ``target`` only if no file has it: ``link`` fails with EEXIST otherwise. On a
    file system without hard links, a check and a rename (a narrow race instead of none)."""
    try:
        os.link(tmp, target)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "exists already", str(target)) from None
        os.replace(tmp, target)


def write_private(path: str | os.PathLike, chunks: Iterable[str | bytes], *, force: bool = False) -> None:
    """Write ``chunks`` (text is UTF-8 encoded) to the file ``path`` with mode 0600, atomically and durably
    (module documentation). The directory must exist; it is not checked for ownership (an export may go
    anywhere the user may write), but the file never lands through a link or over someone else's file.
    An existing ``path`` is refused unless ``force``; with ``force`` it is replaced, unless it is a
    directory or owned by another uid.

    Raises FileExistsError when ``path`` exists and not ``force`` (callers word that error for their
    users), UnsafePath (another owner), PgmemError (any other operating-system error, naming ``path``)."""
    target = Path(path).expanduser()
    if force:
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise PgmemError(f"cannot write {path}: {exc.strerror or exc}") from None
        else:
            if stat.S_ISDIR(st.st_mode):
                raise PgmemError(f"{path} is a directory", hint="give the path of a file")
            if st.st_uid != os.geteuid():
                raise UnsafePath(f"{path} is owned by uid {st.st_uid}, not by this process's uid {os.geteuid()}; "
                                 "pgmem does not replace another user's file", hint="choose another file")
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = create_private(tmp)
    except PgmemError as exc:
        raise PgmemError(f"cannot write {path}: {exc.message}") from None
    try:
        try:
            for chunk in chunks:
                write_all(fd, chunk.encode("utf-8") if isinstance(chunk, str) else chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        if force:
            os.replace(tmp, target)
        else:
            _link_new(tmp, target)
            with suppress(FileNotFoundError):  # gone after the rename of the fallback
                os.unlink(tmp)
        fsync_dir(target.parent)
    except FileExistsError:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    except OSError as exc:
        with suppress(OSError):
            os.unlink(tmp)
        raise PgmemError(f"cannot write {path}: {exc.strerror or exc}") from None  # exc names the temporary file
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def check_output_file(path: Path, force: bool) -> None:
    """Refuse, before any work, to write ``path`` when it exists (unless ``force``), is a directory, or its
    directory is missing. ValidationError naming ``path`` as the user gave it."""
    target = path.expanduser()
    if target.is_dir():
        raise ValidationError(f"{path} is a directory", field="file", hint="give the path of a file")
    if not force and os.path.lexists(target):
        raise ValidationError(f"{path} exists already", field="file",
                              hint="pass --force to overwrite it, or choose another file")
    if not target.parent.is_dir():
        raise ValidationError(f"cannot write {path}: directory {target.parent} does not exist", field="file")


def write_output_file(path: Path, lines: Iterable[str], *, force: bool = False) -> None:
    """Write text lines to ``path`` (a file a user named: an export) readable by its owner only (0600),
    atomically and durably, with :func:`write_private`: never over an existing file unless ``force``, never
    over another user's file. Raises ValidationError (see :func:`check_output_file`), UnsafePath or
    PgmemError naming ``path`` as given."""
    check_output_file(path, force)
    try:
        write_private(path.expanduser(), lines, force=force)
    except FileExistsError:  # created while we wrote
        raise ValidationError(f"{path} exists already", field="file",
                              hint="pass --force to overwrite it, or choose another file") from None


__all__ = ["DIR_MODE", "FILE_MODE", "check_output_file", "check_stat", "create_private", "fsync_dir", "open_private",
           "private_dir", "write_all", "write_output_file", "write_private"]
