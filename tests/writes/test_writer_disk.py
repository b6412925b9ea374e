"""The writer when its own disk fails (issue #42): a full disk, a journal turned read-only, a failed fsync,
each while the database refuses connections and then when it comes back; journal records damaged by editing
real journal bytes; a journal of the old format; journal_first mode under SIGKILL.

Real files and a real database: as root (CI) the full disk is a 1 MiB tmpfs and the read-only journal an
ext4 image on a loop device aborted with ``mount -o remount,abort`` (the kernel then fails the pending fsync
and every later write with EROFS); without root the same errors are raised at the journal's ``os.write`` /
``os.fsync`` (the only thing doubled). The database "goes down" by refusing new connections
(``ALTER DATABASE ... ALLOW_CONNECTIONS false`` and its backends terminated) and comes back by allowing them.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import uuid
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from pgmem import files
from pgmem.journal import Journal, encode

from conftest import dsn_for
from test_writer import rows, spawn, wait_for

ROOT = os.geteuid() == 0


# --------------------------------------------------------------------------------------------------------
# The database refusing connections, and coming back
# --------------------------------------------------------------------------------------------------------
@contextmanager
def database_down(admin: psycopg.Connection):
    """While inside: the test database accepts no new connection and the pool's are terminated."""
    db = admin.info.dbname
    with psycopg.connect(dsn_for("postgres"), autocommit=True) as other:
        other.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
        other.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                      [db, admin.info.backend_pid])
        try:
            yield
        finally:
            other.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')


# --------------------------------------------------------------------------------------------------------
# Disks that fail
# --------------------------------------------------------------------------------------------------------
class Injected:
    """Without root: errors raised at the journal's os.write and os.fsync (of files under ``path`` only)."""

    def __init__(self, path: Path, monkeypatch) -> None:
        self.path = path
        self.write_errno: int | None = None
        self.fsync_errno: int | None = None
        path.mkdir(mode=0o700)
        real_write_all, real_fsync = files.write_all, os.fsync

        def ours(fd: int) -> bool:
            try:
                return os.readlink(f"/proc/self/fd/{fd}").startswith(str(path))
            except OSError:
                return False

        def write_all(fd: int, data: bytes) -> None:
            if self.write_errno and ours(fd):
                raise OSError(self.write_errno, os.strerror(self.write_errno))
            real_write_all(fd, data)

        def fsync(fd: int) -> None:
            if self.fsync_errno and ours(fd):
                raise OSError(self.fsync_errno, os.strerror(self.fsync_errno))
            real_fsync(fd)

        monkeypatch.setattr(files, "write_all", write_all)
        monkeypatch.setattr(os, "fsync", fsync)


class SmallDisk:
    """A 1 MiB tmpfs (root), filled up and freed again; else ENOSPC injected."""

    def __init__(self, path: Path, monkeypatch) -> None:
        self.path = path
        self.mounted = False
        self.injected: Injected | None = None
        if ROOT and shutil.which("mount"):
            path.mkdir(mode=0o700)
            if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(path)]).returncode == 0:
                self.mounted = True
                return
            path.rmdir()
        self.injected = Injected(path, monkeypatch)

    def fill(self) -> None:
        if self.injected:
            self.injected.write_errno = errno.ENOSPC
            return
        fd = os.open(self.path / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (65536, 512, 1):  # until the file system says no, to the last byte
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)

    def free(self) -> None:
        if self.injected:
            self.injected.write_errno = None
            return
        (self.path / "filler").unlink()

    def cleanup(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)])


class AbortableExt4:
    """An ext4 file system on a loop device (root); ``abort()`` makes the kernel fail its pending fsync and
    every later write with EROFS (``mount -o remount,abort``). Without root: EROFS injected."""

    def __init__(self, tmp: Path, monkeypatch) -> None:
        self.path = tmp / "ext4"
        self.loop: str | None = None
        self.injected: Injected | None = None
        if ROOT and shutil.which("losetup") and shutil.which("mkfs.ext4"):
            image = tmp / "ext4.img"
            with open(image, "wb") as fh:
                fh.truncate(16 << 20)
            made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True)
            loop = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True)
            if made.returncode == 0 and loop.returncode == 0:
                self.loop = loop.stdout.strip()
                self.path.mkdir(mode=0o700)
                if subprocess.run(["mount", "-o", "errors=remount-ro", self.loop, str(self.path)]).returncode == 0:
                    os.chmod(self.path, 0o700)
                    return
                subprocess.run(["losetup", "-d", self.loop])
                self.loop = None
                self.path.rmdir()
        self.injected = Injected(self.path, monkeypatch)

    def abort(self) -> None:
        if self.injected:
            self.injected.write_errno = self.injected.fsync_errno = errno.EROFS
            return
        assert subprocess.run(["mount", "-o", "remount,abort", str(self.path)]).returncode == 0

    def cleanup(self) -> None:
        if self.loop:
            subprocess.run(["umount", "-l", str(self.path)])
            subprocess.run(["losetup", "-d", self.loop])


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    disk = SmallDisk(tmp_path / "disk", monkeypatch)
    try:
        yield disk
    finally:
        disk.cleanup()


@pytest.fixture
def ext4(tmp_path, monkeypatch):
    disk = AbortableExt4(tmp_path, monkeypatch)
    try:
        yield disk
    finally:
        disk.cleanup()


class Line:
    """One record of a journal file as bytes (each record is one line, whatever its format)."""

    def __init__(self, start: int, raw: bytes) -> None:
        self.start, self.raw, self.end = start, raw, start + len(raw)
        self.version = 2 if raw.startswith(b"v2 ") else 1
        body = raw.split(b" ", 3)[3] if self.version == 2 else raw
        self.entry = json.loads(body)


def lines_of(path: Path) -> list[Line]:
    out, pos = [], 0
    for raw in path.read_bytes().splitlines(keepends=True):
        out.append(Line(pos, raw))
        pos += len(raw)
    return out


def audit(admin, accepted: list, lost: set) -> None:
    """Rows: exactly the accepted writes minus the reported lost, each once, each with its own content."""
    stored = rows(admin)
    ids = [r[0] for r in stored]
    assert len(ids) == len(set(ids)), "a write stored twice"
    assert set(ids) == {i for i, _ in accepted} - lost
    content = dict(accepted)
    assert all(r[2] == content[r[0]] for r in stored), "a row with other content than its write"


def writer_for(mem, directory: Path, acks: list, **kw):
    kw = {"batch_size": 50, "flush_interval": 0.01, "connect_timeout": 0.5, "on_durable": acks.extend, **kw}
    return mem.writer(client_name="disk", journal_dir=directory, **kw)


# --------------------------------------------------------------------------------------------------------
# A full disk
# --------------------------------------------------------------------------------------------------------
def test_full_disk_and_database_down_hold_writes_until_either_comes_back(make_memory, admin, small_disk, caplog):
    mem = make_memory("alice", "planner")
    mem.space()
    acks: list = []
    writer = writer_for(mem, small_disk.path / "journal", acks, max_queue=5000)
    caplog.set_level(logging.INFO, logger="pgmem.writer")
    accepted = []
    with database_down(admin):
        small_disk.fill()
        for i in range(1200):
            text = f"held while the disk is full, number {i}, " + "x" * 200
            accepted.append((writer.submit(text), text))
        wait_for(lambda: writer.stats()["held"] > 0 and writer.stats()["queued"] == 0, "every write to be held")
        stats = writer.stats()
        assert (stats["held"], stats["lost"], stats["journaled"], stats["accepted"]) == (1200, 0, 0, 1200)
        assert writer.flush(timeout=0.3) == 1200  # not durable: still pending, no exception
        assert writer._thread.is_alive() and not [a for a in acks if a.status != "journaled"]
        small_disk.free()  # the disk comes back first: the held writes go to the journal
        wait_for(lambda: writer.stats()["held"] == 0, "the held writes to reach the journal")
        assert writer.stats()["journaled"] == 1200
    # the database comes back: the journal is replayed
    wait_for(lambda: writer.stats()["committed"] == 1200, "the journal to be replayed")
    later = writer.submit("after both came back")
    accepted.append((later, "after both came back"))
    report = writer.close()
    assert (report.accepted, report.committed, report.journaled, report.lost, report.rejected) == (1201, 1201, 0, 0, 0)
    assert report.accepted + report.inherited == report.committed + report.journaled + report.rejected + report.lost
    audit(admin, accepted, set())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "both refuse" in r.getMessage()]
    assert len(warnings) == 1 and "No space left on device" in warnings[0].getMessage()
    assert len([r for r in caplog.records if "held in memory are safe again" in r.getMessage()]) == 1
    assert Counter(a.status for a in acks) == {"journaled": 1200, "committed": 1201}


def test_full_disk_then_the_database_comes_back_first(make_memory, admin, small_disk):
    mem = make_memory("alice", "planner")
    mem.space()
    acks: list = []
    writer = writer_for(mem, small_disk.path / "journal", acks)
    accepted = []
    with database_down(admin):
        small_disk.fill()
        accepted += [(writer.submit(f"w{i}"), f"w{i}") for i in range(300)]
        wait_for(lambda: writer.stats()["held"] == 300, "the writes to be held")
    wait_for(lambda: writer.stats()["committed"] == 300, "the held writes to be committed")  # disk still full
    report = writer.close()
    assert (report.committed, report.lost, report.journaled) == (300, 0, 0)
    audit(admin, accepted, set())
    assert {a.status for a in acks} == {"committed"}


def test_closing_while_both_refuse_names_every_lost_write(make_memory, admin, small_disk, caplog):
    mem = make_memory("alice", "planner")
    mem.space()
    acks: list = []
    writer = writer_for(mem, small_disk.path / "journal", acks)
    accepted = []
    with database_down(admin):
        accepted += [(writer.submit(f"journaled {i}"), f"journaled {i}") for i in range(100)]
        assert writer.flush() == 0  # in the journal
        small_disk.fill()
        accepted += [(writer.submit(f"doomed {i}"), f"doomed {i}") for i in range(250)]
        wait_for(lambda: writer.stats()["held"] == 250, "the writes to be held")
        caplog.set_level(logging.ERROR, logger="pgmem.writer")
        report = writer.close(timeout=1)
    lost = {a.id for a in acks if a.status == "lost"}
    assert report.lost == 250 and set(report.lost_ids) == lost == {i for i, t in accepted if t.startswith("doomed")}
    assert all("both refused" in a.error for a in acks if a.status == "lost")
    assert report.journaled == 100
    assert report.accepted + report.inherited == report.committed + report.journaled + report.rejected + report.lost
    final = caplog.records[-1].getMessage()
    assert "250 LOST" in final and all(str(i) in final for i in lost)
    # the next writer (disk and database back) replays what was journaled; the lost are nowhere, no garbage
    small_disk.free()
    report = writer_for(make_memory("alice", "planner"), small_disk.path / "journal", []).close()
    assert (report.replayed, report.damaged, report.torn) == (100, 0, 0)
    audit(admin, accepted, lost)


# --------------------------------------------------------------------------------------------------------
# A journal that turns read-only, a failed fsync
# --------------------------------------------------------------------------------------------------------
def test_journal_turned_read_only_while_the_database_is_down(make_memory, admin, ext4):
    mem = make_memory("alice", "planner")
    mem.space()
    acks: list = []
    writer = writer_for(mem, ext4.path / "journal", acks)
    accepted = []
    with database_down(admin):
        accepted += [(writer.submit(f"before {i}"), f"before {i}") for i in range(200)]
        assert writer.flush() == 0 and writer.stats()["journaled"] == 200
        ext4.abort()  # the file system goes read-only under the writer
        accepted += [(writer.submit(f"after {i}"), f"after {i}") for i in range(150)]
        wait_for(lambda: writer.stats()["held"] == 150, "the writes to be held")
        assert writer._thread.is_alive() and writer.stats()["lost"] == 0
        more = [(writer.submit(f"more {i}"), f"more {i}") for i in range(50)]  # still accepted (within max_queue)
        accepted += more
    wait_for(lambda: writer.stats()["committed"] == 400, "everything to be committed")
    report = writer.close()
    assert (report.lost, report.committed) == (0, 400)
    audit(admin, accepted, set())
    committed = [a.id for a in acks if a.status == "committed"]
    assert committed == [i for i, _ in accepted]  # in the order accepted


def test_a_failed_fsync_is_not_taken_for_success(make_memory, admin, tmp_path, monkeypatch):
    """fsync fails once with EIO (injected: the one thing doubled): the append's bytes are cut off the
    file before anything else is written, the writes are held and appended again once fsync works."""
    directory = tmp_path / "journal"
    fail = {"on": False, "count": 0}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if fail["on"] and os.readlink(f"/proc/self/fd/{fd}").endswith("disk.jsonl"):
            fail["count"] += 1
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    mem = make_memory("alice", "planner")
    mem.space()
    acks: list = []
    writer = writer_for(mem, directory, acks)
    accepted = []
    with database_down(admin):
        accepted += [(writer.submit(f"ok {i}"), f"ok {i}") for i in range(60)]
        assert writer.flush() == 0
        durable = (directory / "disk.jsonl").stat().st_size
        fail["on"] = True
        accepted += [(writer.submit(f"unsure {i}"), f"unsure {i}") for i in range(40)]
        wait_for(lambda: writer.stats()["held"] == 40, "the writes to be held")
        assert (directory / "disk.jsonl").stat().st_size == durable  # the unsure bytes are gone
        assert fail["count"] >= 1 and writer.stats()["journaled"] == 60
        fail["on"] = False
        wait_for(lambda: writer.stats()["held"] == 0, "the held writes to be journaled")
        records = lines_of(directory / "disk.jsonl")
        assert [r.entry["id"] for r in records] == [str(i) for i, _ in accepted]  # each once, in order
    wait_for(lambda: writer.stats()["committed"] == 100, "the journal to be replayed")
    assert writer.close().lost == 0
    audit(admin, accepted, set())


# --------------------------------------------------------------------------------------------------------
# Damage: real journal bytes edited
# --------------------------------------------------------------------------------------------------------
def journal_of(directory: Path, n: int) -> tuple[list[tuple[str, str]], list]:
    """A journal ``disk`` of n writes of alice (as a writer journals them), and its records."""
    j = Journal("disk", directory)
    writes = [{"id": str(uuid.uuid4()), "user_id": "alice", "space": "t64", "content": f"journaled fact {i}",
               "metadata": {"i": i}, "agent_id": "planner", "session_id": "s"} for i in range(n)]
    j.append(writes)
    j.close()
    return [(w["id"], w["content"]) for w in writes], lines_of(directory / "disk.jsonl")


def edit(path: Path, offset: int, xor: int = 0x01, value: bytes | None = None) -> None:
    data = bytearray(path.read_bytes())
    if value is None:
        data[offset] ^= xor
    else:
        data[offset:offset + len(value)] = value
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_a_bit_flipped_in_content_is_never_applied(make_memory, admin, tmp_path, caplog, which):
    directory = tmp_path / "journal"
    writes, records = journal_of(directory, 9)
    victim = {"first": 0, "middle": 4, "last": 8}[which]
    rec = records[victim]
    edit(directory / "disk.jsonl", rec.start + rec.raw.index(b"journaled fact") + 3, xor=0x02)  # 'r' -> 'p'
    caplog.set_level(logging.ERROR, logger="pgmem.journal")
    acks: list = []
    writer = writer_for(make_memory("alice", "planner"), directory, acks)
    new = writer.submit("a new write after the damage")
    assert writer.flush() == 0
    report = writer.close()
    assert (report.damaged, report.replayed, report.committed) == (1, 8, 9)
    assert report.accepted + report.inherited == report.committed + report.journaled + report.rejected + report.lost
    good = [(UUID_(i), c) for k, (i, c) in enumerate(writes) if k != victim] + [(new, "a new write after the damage")]
    audit(admin, good, set())
    assert not any("jounaled" in r[2] or "jopnaled" in r[2] for r in rows(admin))
    kept = [json.loads(line) for line in (directory / "disk.quarantine").read_text().splitlines()]
    assert len(kept) == 1 and kept[0]["offset"] == rec.start and kept[0]["id"] == writes[victim][0]
    assert "checksum" in kept[0]["reason"] and kept[0]["kind"] == "damaged"
    assert os.stat(directory / "disk.quarantine").st_mode & 0o777 == 0o600
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(f"at byte {rec.start}" in m and "disk.jsonl" in m for m in errors)


def UUID_(text: str):
    return uuid.UUID(text)


@pytest.mark.parametrize("damage", ["header", "json quote", "newline", "length"])
def test_bytes_flipped_in_the_syntax_quarantine_one_record_and_the_rest_replays(make_memory, admin, tmp_path, damage):
    directory = tmp_path / "journal"
    writes, records = journal_of(directory, 7)
    rec = records[3]
    path = directory / "disk.jsonl"
    if damage == "header":
        edit(path, rec.start, value=b"x")  # 'v2 ...' -> 'x2 ...'
    elif damage == "json quote":
        edit(path, rec.start + rec.raw.index(b'"content"'), value=b"'")
    elif damage == "newline":  # the end of record 3 gone: records 3 and 4 run together
        edit(path, rec.end - 1, value=b" ")
    else:
        edit(path, rec.start + 3, value=b"9")  # the length digit
    acks: list = []
    writer = writer_for(make_memory("alice", "planner"), directory, acks)
    report = writer.close()
    assert report.damaged == 1 and report.replayed == 6 and report.journaled == 0
    audit(admin, [(UUID_(i), c) for k, (i, c) in enumerate(writes) if k != 3], set())
    kept = [json.loads(line) for line in (directory / "disk.quarantine").read_text().splitlines()]
    assert [k["offset"] for k in kept] == [rec.start] and kept[0]["id"] == writes[3][0]


def test_damage_found_while_running_never_stops_new_writes(make_memory, admin, tmp_path):
    """Damage in the middle of a journal the writer is replaying: the records before it in the same read
    and after it replay, new writes are acknowledged."""
    directory = tmp_path / "journal"
    writes, records = journal_of(directory, 30)
    edit(directory / "disk.jsonl", records[10].start + 20)
    edit(directory / "disk.jsonl", records[20].start + 1, value=b"?")
    acks: list = []
    writer = writer_for(make_memory("alice", "planner"), directory, acks, batch_size=256)
    new = [writer.submit(f"new {i}") for i in range(20)]
    assert writer.flush() == 0
    report = writer.close()
    assert report.damaged == 2 and report.committed == 48
    assert {a.id for a in acks if a.status == "committed"} >= set(new)
    audit(admin, [(UUID_(i), c) for k, (i, c) in enumerate(writes) if k not in (10, 20)]
          + [(n, f"new {i}") for i, n in enumerate(new)], set())


def test_a_torn_last_record_is_logged_counted_and_kept(make_memory, admin, tmp_path, caplog):
    directory = tmp_path / "journal"
    writes, records = journal_of(directory, 5)
    path = directory / "disk.jsonl"
    path.write_bytes(path.read_bytes()[:records[4].start + 60])  # the last record cut after its id
    caplog.set_level(logging.WARNING, logger="pgmem.journal")
    writer = writer_for(make_memory("alice", "planner"), directory, [])
    report = writer.close()
    assert (report.torn, report.damaged, report.replayed) == (1, 0, 4)
    assert any("cut short" in r.getMessage() and writes[4][0] in r.getMessage() for r in caplog.records)
    kept = [json.loads(line) for line in (directory / "disk.quarantine").read_text().splitlines()]
    assert [(k["kind"], k["id"], k["offset"]) for k in kept] == [("torn", writes[4][0], records[4].start)]
    audit(admin, [(UUID_(i), c) for i, c in writes[:4]], set())


def test_a_journal_of_the_old_format_replays_with_new_records_after_it(make_memory, admin, tmp_path):
    """Format 1 (a bare JSON object a line, as pgmem wrote before the checksum) followed by records of
    format 2 appended by a writer of this version while the database is down: all replay, in order."""
    directory = tmp_path / "journal"
    directory.mkdir(mode=0o700)
    old = [{"id": str(uuid.uuid4()), "user_id": "alice", "space": "t64", "content": f"old format {i}",
            "metadata": {}, "agent_id": "planner", "session_id": "s", "expires_at": None, "created_at": None,
            "embedding": None, "accepted_at": "2025-01-01T00:00:00+00:00"} for i in range(5)]
    fd = os.open(directory / "disk.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"".join(encode(e) for e in old))
    os.close(fd)
    mem = make_memory("alice", "planner")
    mem.space()
    acks: list = []
    with database_down(admin):
        writer = writer_for(mem, directory, acks)
        new = [writer.submit(f"new format {i}", session_id="s") for i in range(5)]
        assert writer.flush() == 0
        report = writer.close()
        assert (report.inherited, report.journaled) == (5, 10)
    assert [r.version for r in lines_of(directory / "disk.jsonl")] == [1] * 5 + [2] * 5
    report = writer_for(make_memory("alice", "planner"), directory, []).close()
    assert (report.replayed, report.damaged) == (10, 0)
    assert [r[2] for r in rows(admin)] == [f"old format {i}" for i in range(5)] + [f"new format {i}" for i in range(5)]


# --------------------------------------------------------------------------------------------------------
# journal_first: nothing accepted is lost, even on SIGKILL
# --------------------------------------------------------------------------------------------------------
def test_journal_first_every_accepted_write_survives_sigkill(alice, admin, dsn, tmp_path):
    alice.space()
    journal = tmp_path / "journal"
    lock = psycopg.connect(dsn)
    lock.execute("LOCK TABLE pgmem.memories IN SHARE MODE")  # nothing can commit: only the journal holds them
    try:
        proc = spawn("journal-first", dsn, journal, "jf", 400)
        accepted = []
        for line in proc.stdout:
            accepted.append(line.split()[1])
            if len(accepted) >= 300:
                break
        proc.kill()
        proc.wait(60)
    finally:
        lock.rollback()
        lock.close()
    assert proc.returncode == -signal.SIGKILL and len(accepted) == 300
    from test_writer import replay

    replay(dsn, journal, "jf")
    stored = [str(r[0]) for r in rows(admin)]
    assert len(stored) == len(set(stored)) and set(accepted) <= set(stored)


def test_journal_first_group_commit_from_many_threads(make_memory, admin, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    mem = make_memory("alice", "planner")
    acks: list = []
    writer = writer_for(mem, tmp_path / "journal", acks, journal_first=True)
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda i: (writer.submit(f"grouped {i}"), f"grouped {i}"), range(400)))
    assert writer.stats()["accepted"] == 400
    report = writer.close()
    assert (report.committed, report.journaled, report.lost) == (400, 0, 0)
    audit(admin, ids, set())
    assert {a.status for a in acks} == {"committed"}
