"""A background writer: agents hand writes to a queue and go on; a thread stores them in batches.

``writer = memory.writer()`` (or ``BackgroundWriter(memory)``); ``writer.submit("text", session_id=...)``
returns the write's client id at once. The writer never drops a write it accepted:

- The queue is bounded (``max_queue``). When it is full, ``submit`` waits (``put_timeout=None``) or raises
  :class:`QueueFull` after ``put_timeout`` seconds; the write is then not accepted.
- A thread takes up to ``batch_size`` writes (waiting at most ``flush_interval`` seconds for a batch to
  fill) and stores them with :meth:`Memory.add_many`: one ``pgmem.add_batch`` statement per batch and space, for
  all the users its writes name.
- Every write carries a client-generated id (uuid4), so a retry after an ambiguous failure (the connection
  lost after the commit) never duplicates: ``pgmem.add_batch`` does not store an id twice.
- A batch that fails because the database (or the embedder) cannot be reached, or for a passing reason
  (deadlock, lack of resources, cancelled statement; :func:`is_transient`) is retried once on a fresh
  connection; if that fails too it is appended to the client's durable journal
  (:mod:`pgmem.journal`, fsync'd) and acknowledged as ``journaled``. While the journal holds writes, new
  ones go after them, and the thread replays it in order (backing off 0.5 s to 5 s) once the database is
  back. A writer opened later with the same ``client_name``, in this process or another, replays what is left.
- A write the database refuses for good (it alone can judge: no identity, a missing space) is kept in
  ``<client_name>.rejected.jsonl`` with the error and counted as rejected; nothing is dropped silently.
- A writer writes for its client's user only, unless it is opened with ``many_users=True`` (a gateway
  writer, whose ``submit`` names each write's user). Replaying, a journal line that names another user is
  not applied: it is kept in the rejected file with the reason, counted and logged (someone who could edit
  the journal file must not be able to write into another tenant through this writer).
- When the database and the journal both refuse (the journal's disk full, read-only, failing), the writes
  are held in memory (within ``max_queue``: ``submit`` blocks or raises :class:`QueueFull` as usual) and both
  are retried (0.5 s to 5 s apart) until either takes them; the thread never stops on an I/O error. One
  WARNING names the cause when holding starts, one INFO when it ends. Writes still held when the writer is
  closed (after ``close(timeout)``, or ``shutdown_timeout`` at SIGTERM, exit or ``close()``) are *lost*: counted
  in the report with their ids, acknowledged ``lost`` with the reason, and named in the final log line.
- ``journal_first=True``: ``submit`` returns only once the write is fsync'd to the journal (one fsync for
  the submits waiting together: group commit), and the thread commits from the journal; every accepted
  write then survives SIGKILL and power loss. ``submit`` raises :class:`pgmem.journal.JournalError` when the
  journal refuses (the write is not accepted).
- ``flush()`` waits until every write accepted so far is committed, journaled, rejected or lost. ``close()``
  drains the queue and returns a :class:`WriterReport` (accepted, committed, journaled, rejected, lost, the
  journal's path). At interpreter exit and on SIGTERM every open writer is closed the same way; the SIGTERM
  handler is installed only when the process has none (the default action), and after draining the default
  action runs.

See docs/durability.md.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import signal
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
import psycopg
from psycopg_pool import PoolTimeout

from . import validation as v
from .errors import DatabaseUnavailable, EmbedderError, PgmemError, ValidationError, from_psycopg
from .journal import Journal, JournalError, check_name

log = logging.getLogger("pgmem.writer")

#: SQLSTATE classes of errors that pass (deadlock or serialization failure, lack of resources, lock not
#: available, cancelled statement, system I/O error): the write is kept for a later try, not refused.
TRANSIENT_SQLSTATE_CLASSES = ("40", "53", "55", "57", "58")


def is_transient(exc: BaseException) -> bool:
    """Whether a failed write should be tried again later (journaled) rather than refused: the database or
    the embedder could not be reached, or the database failed for a passing reason. Anything else the
    database raises (no identity, bad input it alone can judge, a missing space) is final for that write."""
    if isinstance(exc, (DatabaseUnavailable, EmbedderError)):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, PgmemError) and state[:2] in TRANSIENT_SQLSTATE_CLASSES


class QueueFull(PgmemError):
    """The writer's queue stayed full for the ``put_timeout`` the caller chose; the write was not accepted."""


class WriterClosed(PgmemError):
    """The writer is closed (or closing): it accepts no more writes."""


@dataclass(frozen=True)
class Ack:
    """What became of one accepted write. ``status``: ``committed`` (in the database: ``memory_id`` holds it,
    another memory's id when identical content existed, ``created`` False then or on a retry), ``journaled``
    (fsync'd to the local journal, replayed later), ``rejected`` (refused for good, ``error`` says why; kept
    in the rejected file) or ``lost`` (the writer was closed while the database and the journal both refused
    it: ``error`` says why; it exists nowhere)."""

    id: UUID
    status: str
    memory_id: UUID | None = None
    created: bool | None = None
    error: str | None = None


@dataclass(frozen=True)
class WriterReport:
    """Returned by :meth:`BackgroundWriter.close`. ``committed``: writes this writer stored in the database
    (``replayed`` of them from the journal); ``journaled``: writes waiting in the journal at ``journal_path``
    (replayed by the next writer with this client name); ``rejected``: writes refused for good, kept in
    ``rejected_path``; ``lost``: writes accepted but neither committed nor journaled when the writer closed
    (the database and the journal both refused), their client ids in ``lost_ids``; ``accepted``: writes
    this writer accepted; ``inherited``: valid writes waiting in the journal when it opened. They add up:
    ``accepted + inherited == committed + journaled + rejected + lost``. ``damaged``: journal records found
    damaged (never applied; kept in ``quarantine_path``); ``torn``: a record cut short at the end, dropped
    (kept there too)."""

    committed: int
    journaled: int
    rejected: int
    replayed: int
    journal_path: Path
    rejected_path: Path
    lost: int = 0
    lost_ids: tuple[UUID, ...] = ()
    accepted: int = 0
    inherited: int = 0
    damaged: int = 0
    torn: int = 0
    quarantine_path: Path | None = None

    def __str__(self) -> str:
        text = f"pgmem writer: {self.committed} committed"
        if self.replayed:
            text += f" ({self.replayed} replayed from the journal)"
        text += f", {self.journaled} waiting in the journal {self.journal_path}"
        if self.rejected:
            text += f", {self.rejected} rejected (kept in {self.rejected_path})"
        if self.damaged or self.torn:
            text += f", {self.damaged} damaged and {self.torn} torn journal records (kept in {self.quarantine_path})"
        if self.lost:
            text += (f", {self.lost} LOST (the database and the journal both refused them; their ids are in "
                     f"WriterReport.lost_ids, in the acks of status 'lost' and below)")
        return text


@dataclass
class _Write:
    seq: int
    entry: dict[str, Any]  # the journal form: JSON-ready


def _new_id() -> UUID:
    return uuid.uuid4()


def default_client_name(memory: Any) -> str:
    """``<user>.<agent>`` of the client (``_`` for a missing part), reduced to journal-name characters."""
    parts = [memory.user_id or "_", memory.agent_id or "_"]
    name = ".".join(re.sub(r"[^A-Za-z0-9_.@-]", "_", p) for p in parts)
    return ("w" + name if not name[0].isalnum() else name)[:128]


class BackgroundWriter:
    """Batches writes in a background thread; never drops one it accepted (see the module documentation).

    ``memory``: the :class:`~pgmem.Memory` whose pool, embedder, space and identity are used (``submit`` may
    name another ``user_id`` when the login is a gateway). ``max_queue``: writes held in memory before
    ``submit`` waits. ``batch_size``: writes per ``pgmem.add_batch`` (1..10000). ``flush_interval``: seconds
    a batch waits to fill. ``put_timeout``: seconds ``submit`` waits on a full queue before
    :class:`QueueFull` (None: wait as long as it takes). ``client_name``: names the journal file (default
    ``<user>.<agent>``); two live writers may not share one. ``journal_dir``: default
    :func:`pgmem.journal.journal_dir`. ``on_durable``: called from the writer thread with a list of
    :class:`Ack` as writes become durable. ``connect_timeout``: seconds to wait for a pooled connection.
    ``shutdown_timeout``: seconds the SIGTERM and exit handlers spend committing before they journal the rest.
    ``many_users``: False (default) writes for ``memory.user_id`` only (``None``: the user a bound login is
    bound to), and ``submit(user_id=...)`` naming another user raises ValidationError; True makes a gateway
    writer for any user its writes name. Journal lines of another user are refused on replay unless True.
    ``journal_first``: False (default) keeps accepted writes in memory until they are committed (or journaled
    when the database fails); True makes ``submit`` return only once the write is fsync'd to the journal
    (group commit), so that it survives SIGKILL and power loss, at the cost of an fsync per submit or group.
    Raises :class:`pgmem.journal.JournalBusy` when another live writer holds the client name,
    :class:`pgmem.journal.UnsafeJournal` when the journal directory or a file of it is a symbolic link, owned
    by another uid or writable by others.
    """

    def __init__(self, memory: Any, *, max_queue: int = 10_000, batch_size: int = 256, flush_interval: float = 0.2,
                 put_timeout: float | None = None, client_name: str | None = None,
                 journal_dir: Path | str | None = None, on_durable: Callable[[list[Ack]], None] | None = None,
                 connect_timeout: float = 5.0, shutdown_timeout: float = 10.0, handle_signals: bool = True,
                 many_users: bool = False, journal_first: bool = False) -> None:
        if not 1 <= int(max_queue):
            raise ValidationError("max_queue must be at least 1", field="max_queue")
        if not 1 <= int(batch_size) <= v.MAX_BATCH:
            raise ValidationError(f"batch_size must be from 1 to {v.MAX_BATCH}", field="batch_size")
        if flush_interval < 0 or (put_timeout is not None and put_timeout < 0):
            raise ValidationError("flush_interval and put_timeout must be >= 0", field="flush_interval")
        self.memory = memory
        self.max_queue = int(max_queue)
        self.batch_size = int(batch_size)
        self.flush_interval = float(flush_interval)
        self.put_timeout = put_timeout
        self.connect_timeout = float(connect_timeout)
        self.shutdown_timeout = float(shutdown_timeout)
        self.on_durable = on_durable
        self.many_users = bool(many_users)
        self.journal_first = bool(journal_first)
        self.client_name = check_name(client_name or default_client_name(memory))
        self.journal = Journal(self.client_name, journal_dir)
        self.inherited = self.journal.pending
        self._cond = threading.Condition(threading.RLock())  # RLock: the SIGTERM handler may interrupt a holder
        self._queue: deque[_Write] = deque()
        self._inflight: list[_Write] = []
        self._held: list[_Write] = []  # the database and the journal both refused them: retried, oldest first
        self._held_cause: str | None = None
        self._held_trying = 0  # held writes being tried again (out of _held meanwhile)
        self._held_since = 0.0
        self._next_retry = 0.0
        self._retry_backoff = 0.5
        self._last_taken = 0  # seq of the last write taken from the queue
        self._gc = threading.Condition(threading.Lock())  # journal_first: the group commit of submits
        self._gc_buf: list[tuple[dict[str, Any], list]] = []
        self._gc_leader = False
        self._pending_since: float | None = None
        self._seq = 0  # writes accepted
        self._done_seq = 0  # every write up to this one is durable
        self._flush_wanted = 0
        self._closing = False
        self._abandoned = False  # close() took over after its timeout: the thread must not touch state
        self._deadline: float | None = None  # after it, batches go to the journal instead of the database
        self._next_replay = 0.0
        self._backoff = 0.5
        self._clients: dict[tuple[str | None, str], Any] = {}
        self._failure: BaseException | None = None
        self.committed = 0
        self.replayed = 0
        self.rejected = 0
        self.lost = 0
        self._lost_ids: list[UUID] = []
        self._report: WriterReport | None = None
        self._close_lock = threading.RLock()
        self._thread = threading.Thread(target=self._run, name=f"pgmem-writer-{self.client_name}", daemon=True)
        self._thread.start()
        _register(self, handle_signals)
        with _hooks_lock:
            _by_pool.setdefault(memory.pool, weakref.WeakSet()).add(self)

    # --- accepting writes ---------------------------------------------------------------------------------
    def submit(self, content: str, *, metadata: Mapping[str, Any] | None = None, agent_id: str | None = None,
               session_id: str | None = None, expires_at: datetime | None = None,
               created_at: datetime | None = None, embedding: Any = None, user_id: str | None = ...,
               id: UUID | str | None = None, timeout: float | None = ...) -> UUID:
        """Accept one write and return its client id (``id``, else a new uuid4). Validated at once, like
        :meth:`Memory.add` (ValidationError; nothing accepted). ``user_id``: another user to write for
        (a writer opened with ``many_users=True``; default the client's). ``timeout``: overrides
        ``put_timeout`` for this call. Blocks while the queue is full; raises QueueFull after the timeout,
        WriterClosed after close(), ValidationError for another user on a writer of one user."""
        item = {"content": content, "metadata": metadata, "agent_id": agent_id, "session_id": session_id,
                "expires_at": expires_at, "created_at": created_at, "embedding": embedding, "id": id}
        it = v.check_item(item)
        user = self.memory.user_id if user_id is ... else v.check_id(user_id, "user_id")
        if not self.many_users and user != self.memory.user_id:
            raise ValidationError(f"this writer writes for user {self.memory.user_id!r} only, not {user!r}",
                                  field="user_id", hint="open a gateway writer with many_users=True to write "
                                                        "for the users each write names")
        emb = it["embedding"]
        if emb is not None:  # the dims are checked again against the space when it is stored
            space = self.memory._space
            dims = space.dims if space is not None else len(emb) if np.ndim(emb) == 1 else -1
            it["embedding"] = v.check_vector(emb, dims).tolist()
        entry = {"id": str(it["id"] or _new_id()), "user_id": user, "space": self.memory.space_name,
                 "content": it["content"], "metadata": it["metadata"],
                 "agent_id": it["agent_id"] or self.memory.agent_id,
                 "session_id": it["session_id"], "expires_at": it["expires_at"], "created_at": it["created_at"],
                 "embedding": it["embedding"], "accepted_at": datetime.now(timezone.utc)}
        if self.journal_first:
            return self._submit_journaled(entry)
        wait = self.put_timeout if timeout is ... else timeout
        deadline = None if wait is None else time.monotonic() + wait
        with self._cond:
            while True:
                self._check_usable()
                if len(self._queue) + len(self._held) < self.max_queue:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if threading.current_thread() is self._thread:
                    remaining = 0  # an on_durable callback: waiting for the writer's own thread would never end
                if remaining is not None and remaining <= 0:
                    raise QueueFull(f"the writer's queue held {self.max_queue} writes for {wait} s; "
                                    "this write was not accepted",
                                    hint="raise max_queue or put_timeout, or write less often")
                self._cond.wait(remaining)
            self._seq += 1
            self._queue.append(_Write(self._seq, entry))
            self._cond.notify_all()
        return UUID(entry["id"])

    def _submit_journaled(self, entry: dict[str, Any]) -> UUID:
        """journal_first: append ``entry`` to the journal with the submits waiting at the same time (one
        write and fsync for the group: the first waiter leads, the others wait on it); return once it is
        durable. Raises JournalError when the journal refused the group (the write is not accepted)."""
        slot: list = [None]
        with self._gc:
            with self._cond:
                self._check_usable()
            self._gc_buf.append((entry, slot))
            while slot[0] is None:
                if self._gc_leader:
                    self._gc.wait()
                    continue
                self._gc_leader = True
                group, self._gc_buf = self._gc_buf, []
                self._gc.release()
                try:
                    try:
                        self.journal.append([e for e, _ in group])
                        result: Any = True
                    except JournalError as exc:
                        result = exc
                    except Exception as exc:  # noqa: BLE001 - handed to every submit of the group
                        result = JournalError(f"cannot write the journal {self.journal.path}: {exc}")
                    if result is True:
                        with self._cond:
                            self._seq += len(group)
                            self._done_seq = self._seq
                            self._cond.notify_all()
                finally:
                    self._gc.acquire()
                    self._gc_leader = False
                    for _, s in group:
                        s[0] = result
                    self._gc.notify_all()
        if slot[0] is not True:
            raise slot[0]
        return UUID(entry["id"])

    def _check_usable(self) -> None:
        if self._closing:
            raise WriterClosed(f"the writer {self.client_name!r} is closed")
        if self._failure is not None:
            raise PgmemError(f"the writer {self.client_name!r} stopped: {self._failure!r}") from self._failure

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every write accepted before this call is committed, journaled, rejected or lost; returns
        how many of them are still pending (0 unless ``timeout`` seconds passed first: writes held in memory
        while the database and the journal both refuse stay pending)."""
        self._not_writer_thread("flush")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._seq
            self._flush_wanted = max(self._flush_wanted, target)
            self._cond.notify_all()
            while self._done_seq < target and not self._abandoned:
                if self._failure is not None:
                    raise PgmemError(f"the writer {self.client_name!r} stopped: {self._failure!r}") from self._failure
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining if remaining is not None else 1.0)
            return max(0, target - self._done_seq) if not self._abandoned else 0

    def stats(self) -> dict[str, int | bool]:
        """Counters: ``accepted``, ``queued`` (in memory, not tried yet), ``held`` (in memory only: the database
        and the journal both refused them; retried), ``committed``, ``replayed``, ``journaled`` (waiting in the
        journal), ``rejected``, ``lost``, ``damaged`` and ``torn`` (journal records), ``offline`` (True while
        the journal holds writes or writes are held)."""
        with self._cond:
            pending = self.journal.pending if not self.journal.closed else 0
            return {"accepted": self._seq, "queued": len(self._queue) + len(self._inflight), "held": len(self._held) + self._held_trying,
                    "committed": self.committed, "replayed": self.replayed, "journaled": pending,
                    "rejected": self.rejected, "lost": self.lost, "damaged": self.journal.damaged,
                    "torn": self.journal.torn, "offline": bool(pending or self._held)}

    # --- closing ------------------------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> WriterReport:
        """Stop accepting writes, drain the queue and return a :class:`WriterReport`. With ``timeout``
        (seconds), writes not committed by then are appended to the journal instead (an in-flight batch too:
        its client ids make a double delivery harmless). Writes the database and the journal both refuse are
        retried until ``timeout`` (None: ``shutdown_timeout``) and then reported lost. Idempotent; the report
        is logged (a warning when writes wait in the journal or were rejected, an error naming the ids when
        writes were lost)."""
        self._not_writer_thread("close")
        with self._close_lock:
            if self._report is not None:
                return self._report
            self._begin_close(timeout)
            return self._finish_close(timeout)

    def _begin_close(self, timeout: float | None) -> None:
        """Stop accepting writes and set the deadline after which the rest goes to the journal."""
        with self._cond:
            self._closing = True
            if timeout is not None:
                deadline = time.monotonic() + timeout
                self._deadline = deadline if self._deadline is None else min(self._deadline, deadline)
            self._cond.notify_all()

    def _finish_close(self, timeout: float | None) -> WriterReport:
        self._thread.join(None if self._deadline is None else max(0.0, self._deadline - time.monotonic()) + 1.0)
        if self._thread.is_alive():
            # The thread is stuck in a database call: keep everything not yet durable in the journal.
            with self._cond:
                self._abandoned = True
                rest = self._held + self._inflight + list(self._queue)
                self._queue.clear()
                self._inflight = []
                self._held = []
                self._cond.notify_all()
            try:
                self.journal.append([w.entry for w in rest])
            except JournalError as exc:
                self._lose(rest, f"the writer closed while the database call hung and the journal refused: {exc}")
            else:
                self._ack([Ack(UUID(w.entry["id"]), "journaled") for w in rest])
        report = WriterReport(self.committed, self.journal.pending, self.rejected, self.replayed, self.journal.path,
                              self.journal.rejected_path, lost=self.lost, lost_ids=tuple(self._lost_ids),
                              accepted=self._seq, inherited=self.inherited, damaged=self.journal.damaged,
                              torn=self.journal.torn, quarantine_path=self.journal.quarantine_path)
        self.journal.close()
        with self._cond:
            self._report = report
            self._cond.notify_all()
        _unregister(self)
        if report.lost:
            log.error("%s: %s", report, " ".join(str(i) for i in report.lost_ids))
        else:
            (log.warning if report.journaled or report.rejected or report.damaged else log.info)("%s", report)
        return report

    def __enter__(self) -> BackgroundWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _not_writer_thread(self, what: str) -> None:
        if threading.current_thread() is self._thread:
            raise PgmemError(f"{what}() cannot be called from the writer's own thread (an on_durable callback)")

    # --- the thread ---------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                batch = self._take()
                if batch is None:
                    break
                now = time.monotonic()
                if self._held and self._closing and self._past_deadline():
                    self._give_up()
                    continue
                if self.journal.pending and not self._closing and now >= self._next_replay:
                    self._replay()
                if self._held and now >= self._next_retry:
                    self._retry_held()
                if batch:
                    if self._held:  # behind the held writes, in order
                        self._hold(batch, None)
                    elif self.journal.pending or self._past_deadline():
                        self._to_journal(batch)
                    else:
                        self._commit(batch)
                    self._finish(batch)
            if self.journal.pending and not self._past_deadline() and not self._abandoned:
                self._replay()
        except BaseException as exc:  # a bug: make it loud, keep what is queued
            if self._abandoned:
                return  # close() took over and closed the journal
            log.exception("pgmem writer %r failed", self.client_name)
            with self._cond:
                self._failure = exc
                rest = [] if self._abandoned else self._held + self._inflight + list(self._queue)
                self._queue.clear()
                self._inflight = []
                self._held = []
                self._cond.notify_all()
            try:
                self.journal.append([w.entry for w in rest])
                self._ack([Ack(UUID(w.entry["id"]), "journaled") for w in rest])
            except Exception as err:
                self._lose(rest, f"the writer failed ({exc!r}) and the journal refused them: {err}")
            with self._cond:
                self._done_seq = self._seq
                self._cond.notify_all()

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _take(self) -> list[_Write] | None:
        """The next batch (oldest first); [] when a replay or a retry of held writes is due; None when closed
        and drained."""
        with self._cond:
            first_at = None
            while True:
                if self._abandoned:
                    return None
                n = len(self._queue)
                now = time.monotonic()
                if self._held:
                    if self._queue:  # behind the held ones, in order: in memory only, like them
                        self._last_taken = self._queue[-1].seq
                        self._held.extend(self._queue)
                        self._queue.clear()
                        self._cond.notify_all()
                    if self._closing and self._deadline is None:  # close() without a timeout: bounded all the same
                        self._deadline = now + self.shutdown_timeout
                    if now >= self._next_retry or (self._closing and self._past_deadline()):
                        return []
                    wake = self._next_retry if self._deadline is None else min(self._next_retry, self._deadline)
                    self._cond.wait(max(0.001, wake - now))
                    continue
                if self.journal_first:
                    if self.journal.pending:
                        if self._pending_since is None:
                            self._pending_since = now
                        due = (self._closing or self.journal.pending >= self.batch_size
                               or now - self._pending_since >= self.flush_interval)
                        if due and now >= self._next_replay and not self._closing:
                            self._pending_since = None
                            return []
                        if self._closing:
                            return None  # the final replay runs after the loop
                        wake = max(self._next_replay, self._pending_since + self.flush_interval)
                        self._cond.wait(max(0.001, wake - now))
                        continue
                    self._pending_since = None
                    if self._closing:
                        return None
                    self._cond.wait()
                    continue
                replaying = self.journal.pending and not self._closing  # closing: one replay at the end
                if replaying and now >= self._next_replay:
                    return []
                if n and first_at is None:
                    first_at = now
                urgent = self._closing or (self._queue and self._flush_wanted >= self._queue[0].seq)
                if n >= self.batch_size or (n and (urgent or now - first_at >= self.flush_interval)):
                    break
                if not n and self._closing:
                    return None
                waits = [self.flush_interval - (now - first_at)] if n else []
                if replaying:
                    waits.append(self._next_replay - now)
                self._cond.wait(max(0.001, min(waits)) if waits else None)
            batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
            self._inflight = batch
            self._last_taken = batch[-1].seq
            self._cond.notify_all()  # room in the queue
            return batch

    def _finish(self, batch: list[_Write] | None = None) -> None:
        with self._cond:
            if self._abandoned:
                return
            self._inflight = []
            # everything taken so far is durable, rejected or lost, except the held writes (the oldest ones)
            self._done_seq = self._held[0].seq - 1 if self._held else self._last_taken
            self._cond.notify_all()

    def _ack(self, acks: list[Ack]) -> None:
        if self.on_durable is None or not acks:
            return
        try:
            self.on_durable(acks)
        except Exception:
            log.exception("pgmem writer %r: the on_durable callback failed", self.client_name)

    def _to_journal(self, batch: list[_Write], cause: BaseException | None = None) -> None:
        """Append to the journal and acknowledge ``journaled``; when the journal refuses, hold them."""
        if self._abandoned or not batch:
            return
        if self._held:
            self._hold(batch, None)
            return
        try:
            self.journal.append([w.entry for w in batch])
        except JournalError as exc:
            self._hold(batch, exc, cause)
            return
        self._ack([Ack(UUID(w.entry["id"]), "journaled") for w in batch])

    def _hold(self, writes: list[_Write], journal_error: BaseException | None,
              db_error: BaseException | None = None) -> None:
        """Keep writes in memory, after those already held (the database and the journal both refused)."""
        with self._cond:
            first = not self._held and self._held_cause is None
            self._held.extend(writes)
            if journal_error is not None and first:
                self._held_cause = str(journal_error)
                self._held_since = time.monotonic()
                self._retry_backoff = 0.5
                self._next_retry = time.monotonic() + self._retry_backoff
                db = f"the database ({db_error})" if db_error is not None else "the database (or its replay queue)"
                log.warning("pgmem writer %r: %s and the journal (%s) both refuse; %d accepted writes are held in "
                            "memory only (at most max_queue=%d, then submit waits) and retried every 0.5-5 s; "
                            "writes still held when the writer closes are reported lost", self.client_name, db,
                            journal_error, len(self._held), self.max_queue)

    def _retry_held(self) -> None:
        """Try the held writes again, a batch at a time: the database when the journal holds nothing older,
        else the journal; stop at the first batch refused again (it stays first)."""
        total = len(self._held)
        while self._held and not self._abandoned:
            with self._cond:
                chunk, rest = self._held[:self.batch_size], self._held[self.batch_size:]
                self._held = []
                self._held_trying = len(chunk) + len(rest)
            if self.journal.pending or self._past_deadline():
                self._to_journal(chunk)
            else:
                self._commit(chunk)
            with self._cond:
                self._held_trying = 0
                if self._held:  # refused again: the rest stays behind it
                    self._held.extend(rest)
                    self._retry_backoff = min(5.0, self._retry_backoff * 2)
                    self._next_retry = time.monotonic() + self._retry_backoff
                    break
                self._held = rest
            self._finish()
        if not self._held:
            log.info("pgmem writer %r: the %d writes held in memory are safe again (%s; held %.1f s)",
                     self.client_name, total, "journaled" if self.journal.pending else "committed",
                     time.monotonic() - self._held_since)
            self._held_cause = None
            self._retry_backoff = 0.5
        self._finish()

    def _give_up(self) -> None:
        """Closing, past the deadline, writes still held: one last try of the journal for them and the queue;
        whatever it refuses is lost (counted, acknowledged, logged with the ids)."""
        with self._cond:
            rest = self._held + list(self._queue)
            self._held = []
            self._queue.clear()
            if rest:
                self._last_taken = rest[-1].seq
        try:
            self.journal.append([w.entry for w in rest])
        except JournalError as exc:
            self._lose(rest, f"the writer closed while the database and the journal both refused them "
                             f"(journal: {self._held_cause or exc})")
        else:
            self._ack([Ack(UUID(w.entry["id"]), "journaled") for w in rest])
        self._held_cause = None
        self._finish()

    def _lose(self, writes: list[_Write], reason: str) -> None:
        if not writes:
            return
        ids = [UUID(w.entry["id"]) for w in writes]
        with self._cond:
            self.lost += len(ids)
            self._lost_ids.extend(ids)
        self._ack([Ack(i, "lost", error=reason) for i in ids])

    def _commit(self, batch: list[_Write]) -> None:
        """Store a batch, one add_many per space (its items name their users); what cannot be stored now goes
        to the journal (or is held when the journal refuses too)."""
        groups: dict[tuple[str | None, str], list[_Write]] = {}
        for w in batch:
            groups.setdefault(_key(w.entry, self.memory), []).append(w)
        for key, writes in groups.items():
            if self._abandoned:
                return
            if self.journal.pending or self._held:  # an earlier group of this batch went to the journal
                self._to_journal(writes)
                continue
            stored, err = self._store(key, [w.entry for w in writes], retry=True)
            if err is not None:
                if self._held_cause is None:
                    log.warning("pgmem writer %r: %s; %d writes go to the journal %s", self.client_name, err,
                                len(writes) - stored, self.journal.path)
                self._to_journal(writes[stored:], err)
                self._schedule_replay(failed=True)

    def _schedule_replay(self, failed: bool) -> None:
        if failed:
            self._next_replay = time.monotonic() + self._backoff
            self._backoff = min(5.0, self._backoff * 2)
        else:
            self._backoff = 0.5
            self._next_replay = 0.0

    def _store(self, key: tuple[str | None, str], entries: list[dict[str, Any]], *, retry: bool,
               replay: bool = False) -> tuple[int, PgmemError | None]:
        """Commit ``entries`` (one space), in order; refused ones are rejected. Returns how many
        leading entries are done (committed or rejected), and the transient error that stopped the rest."""
        try:
            results = self._add_many(key, entries, retry=retry)
        except PgmemError as exc:
            if is_transient(exc):
                return 0, exc
            if len(entries) > 1:  # find the bad ones: the others must still land, in order
                for i, e in enumerate(entries):
                    done, err = self._store(key, [e], retry=retry, replay=replay)
                    if err is not None:
                        return i, err
                return len(entries), None
            if not self._abandoned:
                self._keep_rejected(entries[0], str(exc))
                self.rejected += 1
                log.error("pgmem writer %r: write %s rejected: %s (kept in %s)", self.client_name,
                          entries[0]["id"], exc, self.journal.rejected_path)
                self._ack([Ack(UUID(entries[0]["id"]), "rejected", error=str(exc))])
            return 1, None
        if not self._abandoned:
            self.committed += len(entries)
            if replay:
                self.replayed += len(entries)
            self._ack([Ack(UUID(e["id"]), "committed", r.id, r.created) for e, r in zip(entries, results)])
        return len(entries), None

    def _keep_rejected(self, entry: dict[str, Any], error: str) -> None:
        """The rejected file; when its disk refuses, the write itself goes into the error log (never dropped
        without a trace)."""
        try:
            self.journal.reject([entry], error)
        except (OSError, PgmemError) as exc:
            from .journal import encode

            log.error("pgmem writer %r: cannot keep rejected write %s in %s (%s); the write: %s", self.client_name,
                      entry.get("id"), self.journal.rejected_path, exc,
                      encode(entry).decode("utf-8", "replace").rstrip())

    def _client(self, key: tuple[str | None, str]) -> Any:
        client = self._clients.get(key)
        if client is None:
            user, space = key
            client = self.memory.with_identity(user_id=user)
            if space != client.space_name:
                client.space_name = space  # the space cache is shared and keyed by name
                client._space_lock = threading.Lock()
            self._clients[key] = client
        return client

    def _add_many(self, key: tuple[str | None, str], entries: list[dict[str, Any]], *, retry: bool) -> list:
        client = self._client(key)
        items = [_item(e) for e in entries]
        attempts = 2 if retry else 1
        attempt = 1
        while True:
            try:
                try:
                    with self.memory.pool.connection(timeout=self.connect_timeout) as conn:
                        return client.add_many(items, conn=conn)
                except PoolTimeout as exc:
                    if self._pool_busy() and not self._past_deadline() and not self._abandoned:
                        continue  # every connection is in use by other callers: the database is fine, wait on
                    raise from_psycopg(exc) from exc
                except psycopg.Error as exc:  # from the pool itself (PoolClosed)
                    raise from_psycopg(exc) from exc
            except PgmemError as exc:
                if not is_transient(exc) or attempt >= attempts:
                    raise
                log.info("pgmem writer %r: %s; retrying once", self.client_name, exc)
                attempt += 1
                time.sleep(0.1)

    def _pool_busy(self) -> bool:
        """After a PoolTimeout: whether the database answers a fresh connection, so the timeout only means
        every pooled connection is lent out (contention: wait on) rather than an unreachable database."""
        pool = self.memory.pool
        try:
            kwargs = {**(getattr(pool, "kwargs", None) or {}), "connect_timeout": max(1, int(self.connect_timeout))}
            with psycopg.connect(pool.conninfo, **kwargs):
                return True
        except Exception:
            return False

    def _replay(self) -> None:
        """Replay the journal in order, a batch at a time, until it is empty or the database fails again."""
        while self.journal.pending and not self._abandoned:
            if self._past_deadline():
                return
            try:
                read = self.journal.read(self.batch_size)
            except (OSError, JournalError) as exc:
                log.warning("pgmem writer %r: cannot read the journal %s (%s); retrying", self.client_name,
                            self.journal.path, exc)
                self._schedule_replay(failed=True)
                return
            if not read:
                if self.journal.broken is not None or self.journal._offset < self.journal._durable:
                    self._schedule_replay(failed=True)  # a damaged record that cannot be quarantined yet
                    return
                self.journal.done(self.journal._offset, self.journal.pending)  # the count was off: nothing is left
                break
            # Runs of consecutive writes of one user and space, so that progress is exact and in order; a line
            # of a user this writer does not write for is a run of its own, refused.
            runs: list[list[tuple[dict[str, Any], int]]] = []
            for e, end in read:
                if runs and self._foreign(e) is None and self._foreign(runs[-1][0][0]) is None \
                        and _key(runs[-1][0][0], self.memory) == _key(e, self.memory):
                    runs[-1].append((e, end))
                else:
                    runs.append([(e, end)])
            for run in runs:
                refusal = self._foreign(run[0][0])
                if refusal is not None:
                    self._refuse(run[0][0], refusal)
                    self.journal.done(run[0][1], 1)
                    continue
                stored, err = self._store(_key(run[0][0], self.memory), [e for e, _ in run], retry=False, replay=True)
                if self._abandoned:
                    return
                if stored:
                    self.journal.done(run[stored - 1][1], stored)
                if err is not None:
                    log.info("pgmem writer %r: replay paused (%s); %d writes wait in %s", self.client_name, err,
                             self.journal.pending, self.journal.path)
                    self._schedule_replay(failed=True)
                    return
        self._schedule_replay(failed=False)
        if not self.journal.pending:
            log.info("pgmem writer %r: the journal is replayed", self.client_name)


    def _foreign(self, entry: dict[str, Any]) -> str | None:
        """Why a journal line may not be replayed by this writer (it names another user), or None."""
        if self.many_users:
            return None
        user = entry.get("user_id")
        if user == self.memory.user_id:
            return None
        return (f"journal line names user {user!r}, but this writer writes for user {self.memory.user_id!r} only; "
                "not applied (open the writer with many_users=True if a gateway wrote it)")

    def _refuse(self, entry: dict[str, Any], error: str) -> None:
        """Keep a journal line that must not be applied in the rejected file, counted, logged, acknowledged."""
        self._keep_rejected(entry, error)
        self.rejected += 1
        log.error("pgmem writer %r: journal line %s refused: %s (kept in %s)", self.client_name, entry.get("id"),
                  error, self.journal.rejected_path)
        try:
            ack_id = UUID(str(entry.get("id")))
        except ValueError:
            return  # not a client id at all: the rejected file and the log say what it was
        self._ack([Ack(ack_id, "rejected", error=error)])


def _key(entry: dict[str, Any], memory: Any) -> tuple[str | None, str]:
    """Writes go together by space: one add_batch statement stores the writes of many users (each item names
    its user, migration 0004), instead of one statement per user."""
    return None, entry.get("space") or memory.space_name


def _revive_time(value: Any) -> Any:
    """An ISO 8601 text with an offset read back from the journal becomes an aware datetime again."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return value
        return parsed if parsed.utcoffset() is not None else value
    return value


def _item(entry: dict[str, Any]) -> dict[str, Any]:
    """The add_many item of a queued or journaled write."""
    return {"id": entry["id"], "content": entry["content"], "metadata": entry.get("metadata") or {},
            "agent_id": entry.get("agent_id"), "session_id": entry.get("session_id"),
            "expires_at": _revive_time(entry.get("expires_at")), "created_at": _revive_time(entry.get("created_at")),
            "embedding": entry.get("embedding"), "user_id": entry.get("user_id")}


# --------------------------------------------------------------------------------------------------------
# Exit and SIGTERM: close every open writer
# --------------------------------------------------------------------------------------------------------
_open: weakref.WeakSet[BackgroundWriter] = weakref.WeakSet()
_by_pool: weakref.WeakKeyDictionary[Any, weakref.WeakSet[BackgroundWriter]] = weakref.WeakKeyDictionary()
_hooks_lock = threading.Lock()
_atexit_registered = False
_sigterm_installed = False


def _register(writer: BackgroundWriter, handle_signals: bool) -> None:
    global _atexit_registered
    with _hooks_lock:
        _open.add(writer)
        if not _atexit_registered:
            atexit.register(_close_all)
            _atexit_registered = True
        if handle_signals:
            _install_sigterm()


def _unregister(writer: BackgroundWriter) -> None:
    with _hooks_lock:
        _open.discard(writer)


def close_writers(pool: Any) -> None:
    """Close (drain) every open writer using ``pool``: :meth:`pgmem.Memory.close` does so before it closes
    the pool, whichever client of that pool (``with_identity``) made the writer."""
    with _hooks_lock:
        writers = list(_by_pool.get(pool, ()))
    for writer in writers:
        writer.close()


def _close_all() -> None:
    writers = list(_open)
    for writer in writers:  # all at once, so that each gets its whole shutdown_timeout
        writer._begin_close(writer.shutdown_timeout)
    for writer in writers:
        try:
            writer.close(timeout=writer.shutdown_timeout)
        except Exception:
            log.exception("pgmem writer %r: close at exit failed", writer.client_name)


def _install_sigterm() -> None:
    """Install the SIGTERM handler once, only from the main thread and only over the default action."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # the application handles SIGTERM; its orderly exit runs the atexit drain
    signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_installed = True


def _on_sigterm(signum: int, frame: Any) -> None:
    global _sigterm_installed
    _close_all()
    # Then the previous (default) action: terminate by SIGTERM, as without pgmem.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _sigterm_installed = False
    os.kill(os.getpid(), signal.SIGTERM)


__all__ = ["Ack", "BackgroundWriter", "QueueFull", "WriterClosed", "WriterReport", "default_client_name",
           "is_transient"]
