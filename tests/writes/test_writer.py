"""Never lose an accepted write (cases C24-C25): idempotent client ids, the background writer
(batches, backpressure, flush, close), the durable journal and its replay, one retry after a broken
connection, SIGTERM, SIGKILL, a database stopped mid-stream, and a pool of one under twenty threads.

Real processes and real servers: the per-test database of tests/conftest.py, a second throwaway cluster for
the outage, writer processes spawned from tests/support/writer_agent.py. No database mocks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from pgmem import Memory, ValidationError, embedded, migrations
from pgmem.journal import Journal, JournalBusy, JournalError
from pgmem.testing import HashEmbedder
from pgmem.writer import QueueFull, WriterClosed

HERE = Path(__file__).resolve().parent
AGENT = HERE.parent / "support" / "writer_agent.py"


# --------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------
def wait_for(predicate, what: str, timeout: float = 60.0):
    """Poll ``predicate`` until it returns something truthy (a state to reach, not a timing check)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def rows(admin: psycopg.Connection, user_id: str = "alice") -> list[tuple]:
    """(id, session_id, content) of every stored memory of a user, in write order (admin bypasses RLS)."""
    return admin.execute("SELECT id, session_id, content FROM pgmem.memories WHERE user_id = %s"
                         " ORDER BY created_at, seq", [user_id]).fetchall()


def lock_memories(dsn: str) -> psycopg.Connection:
    """A connection holding a SHARE lock on pgmem.memories: every insert waits until it rolls back."""
    conn = psycopg.connect(dsn)
    conn.execute("LOCK TABLE pgmem.memories IN SHARE MODE")
    return conn


def lock_waiters(admin: psycopg.Connection) -> list[int]:
    """Backends of this database waiting for a lock (a writer's insert stuck behind lock_memories)."""
    return [r[0] for r in admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")]


def terminate(admin: psycopg.Connection, pids: list[int]) -> None:
    admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::integer[]) AS pid", [pids])


def spawn(mode: str, dsn: str, journal_dir: Path, name: str, n: int = 0, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(AGENT), mode, dsn, str(journal_dir), name, str(n)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(HERE.parents[1]), **env})


def replay(dsn: str, journal_dir: Path, name: str) -> dict:
    """Run a second process that opens a writer with ``name`` (replaying its journal) and closes it."""
    proc = spawn("replay", dsn, journal_dir, name)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def journal_ids(path: Path) -> list[str]:
    """The client ids of a journal's records (every record checked: a damaged one fails the test)."""
    from pgmem.journal import scan

    records, _ = scan(path.read_bytes())
    assert {r.kind for r in records} <= {"ok"}, [(r.kind, r.start, r.reason) for r in records if r.kind != "ok"]
    return [r.entry["id"] for r in records]


# --------------------------------------------------------------------------------------------------------
# Idempotent writes: client ids
# --------------------------------------------------------------------------------------------------------
def test_client_ids_make_a_retried_batch_a_no_op(alice, admin):
    ids = [uuid.uuid4() for _ in range(4)]
    items = [{"id": ids[i], "content": f"fact {i}", "session_id": "s"} for i in range(4)]
    first = alice.add_many(items)
    assert [r.id for r in first] == ids and all(r.created for r in first)
    before = rows(admin)
    again = alice.add_many(items)  # the retry after an ambiguous failure
    assert [r.id for r in again] == ids and not any(r.created for r in again)
    assert rows(admin) == before

    # A deleted memory is not brought back by a late retry of its write.
    assert alice.delete(ids[0])
    late = alice.add_many([items[0]])
    assert late[0].id == ids[0] and late[0].created is False
    assert alice.get(ids[0]) is None and len(rows(admin)) == 3

    # Content dedup still applies: a new id with known content returns the memory holding it.
    other = alice.add_many([{"id": uuid.uuid4(), "content": "fact 1"}])
    assert other[0].id == ids[1] and other[0].created is False
    # The same id twice in one batch is one memory; ids given as text work too.
    twin = str(uuid.uuid4())
    res = alice.add_many([{"id": twin, "content": "twin"}, {"id": twin, "content": "twin"}])
    assert [r.id for r in res] == [uuid.UUID(twin)] * 2 and [r.created for r in res] == [True, False]
    assert len(rows(admin)) == 4


def test_client_ids_are_per_user_and_validated(alice, bob, admin):
    shared = uuid.uuid4()
    assert alice.add_many([{"id": shared, "content": "alice's"}])[0].created
    assert bob.add_many([{"id": shared, "content": "bob's"}])[0].created  # (user_id, id) is the key
    assert alice.get(shared).content == "alice's" and bob.get(shared).content == "bob's"
    with pytest.raises(ValidationError) as info:
        alice.add_many([{"content": "ok"}, {"id": "not-a-uuid", "content": "x"}])
    assert info.value.index == 1 and info.value.field == "id"
    assert [r[2] for r in rows(admin)] == ["alice's"]
    with pytest.raises(psycopg.Error) as err, admin.transaction():
        admin.execute("SELECT pgmem.act_as('alice')")
        admin.execute("SELECT * FROM pgmem.add_batch('t64', ARRAY['a', 'b'], ARRAY[%s::vector, %s::vector],"
                      " p_ids => ARRAY[gen_random_uuid()])", [str([1.0] * 64), str([0.5] * 64)])
    assert err.value.sqlstate == "PGM08" and "must all have 2 items" in str(err.value)


# --------------------------------------------------------------------------------------------------------
# The writer: batches, order, acknowledgements, validation, backpressure, close
# --------------------------------------------------------------------------------------------------------
def test_writer_stores_everything_in_order_and_acknowledges(alice, admin, tmp_path):
    acks = []
    writer = alice.writer(client_name="t1", journal_dir=tmp_path, batch_size=64, flush_interval=0.01,
                          on_durable=acks.extend)
    sent = [(writer.submit(f"note {i}", session_id=f"s{i % 3}"), f"s{i % 3}", f"note {i}") for i in range(500)]
    assert writer.flush() == 0
    assert len(acks) == 500 and {a.status for a in acks} == {"committed"}
    assert [a.id for a in acks] == [s[0] for s in sent]  # durable in the order accepted
    assert all(a.memory_id == a.id and a.created for a in acks)
    stored = rows(admin)
    assert Counter(r[0] for r in stored) == Counter(s[0] for s in sent)
    for session in ("s0", "s1", "s2"):  # order per session is the order of submission
        assert [r[2] for r in stored if r[1] == session] == [s[2] for s in sent if s[1] == session]
    report = writer.close()
    assert (report.committed, report.journaled, report.rejected) == (500, 0, 0)
    assert report.journal_path == tmp_path / "t1.jsonl" and report.journal_path.stat().st_size == 0
    assert writer.close() is report
    with pytest.raises(WriterClosed):
        writer.submit("too late")


def test_submit_refuses_bad_input_before_accepting_it(alice, tmp_path):
    writer = alice.writer(client_name="t2", journal_dir=tmp_path)
    from datetime import datetime

    bad = [dict(content=""), dict(content="x\x00y"), dict(content="ok", metadata={"a": float("nan")}),
           dict(content="ok", expires_at=datetime(2030, 1, 1)), dict(content="ok", id="nope"),
           dict(content="ok", embedding=[0.0] * 64), dict(content="ok", user_id="")]
    for kw in bad:
        with pytest.raises(ValidationError):
            writer.submit(**kw)
    assert writer.stats()["queued"] == 0
    assert writer.close().committed == 0


def test_full_queue_blocks_or_raises_queue_full_never_drops(alice, admin, dsn, tmp_path):
    alice.space()
    # A batch waits up to 30 s to fill, so a0 and a1 form the first batch whatever the thread timing.
    writer = alice.writer(client_name="t3", journal_dir=tmp_path, max_queue=4, batch_size=2, flush_interval=30)
    lock = lock_memories(dsn)
    try:
        accepted = [writer.submit("a0"), writer.submit("a1")]
        wait_for(lambda: lock_waiters(admin), "the writer's first batch to wait on the lock")
        accepted += [writer.submit(f"b{i}") for i in range(4)]  # fills the queue
        with pytest.raises(QueueFull):
            writer.submit("refused", timeout=0.2)
        blocked: list = []
        t = threading.Thread(target=lambda: blocked.append(writer.submit("waited")))
        t.start()
        t.join(0.5)
        assert t.is_alive() and not blocked  # the queue cannot drain while the insert waits
    finally:
        lock.rollback()
        lock.close()
    t.join(60)
    assert len(blocked) == 1
    assert writer.flush() == 0
    stored = {r[0]: r[2] for r in rows(admin)}
    assert set(stored) == set(accepted + blocked) and "refused" not in stored.values()
    assert writer.close().committed == 7


def test_a_write_the_database_refuses_is_kept_and_reported(make_memory, admin, tmp_path):
    alice = make_memory("alice", "planner")  # space not loaded yet: submit cannot check the dims
    acks = []
    writer = alice.writer(client_name="t4", journal_dir=tmp_path, flush_interval=0.01, on_durable=acks.extend)
    good = [writer.submit("kept 1"), writer.submit("bad", embedding=[1.0, 2.0, 3.0]), writer.submit("kept 2")]
    assert writer.flush() == 0
    report = writer.close()
    assert (report.committed, report.rejected, report.journaled) == (2, 1, 0)
    assert {a.id: a.status for a in acks} == {good[0]: "committed", good[1]: "rejected", good[2]: "committed"}
    kept = [json.loads(x) for x in report.rejected_path.read_text().splitlines()]
    assert [k["id"] for k in kept] == [str(good[1])] and "expected 64 dimensions, got 3" in kept[0]["error"]
    assert sorted(r[2] for r in rows(admin)) == ["kept 1", "kept 2"]


def test_closing_the_memory_drains_the_writers_of_its_pool(make_memory, admin, tmp_path):
    owner = make_memory("alice", "planner")
    bob = owner.with_identity(user_id="bob")
    writer = bob.writer(client_name="t7", journal_dir=tmp_path, flush_interval=30)  # batches would wait 30 s
    sent = [writer.submit(f"bob's note {i}") for i in range(50)]
    owner.close()  # C25: drained before the pool closes, not dropped
    assert sorted(r[0] for r in rows(admin, "bob")) == sorted(sent)
    report = writer.close()  # already closed: the same report
    assert (report.committed, report.journaled) == (50, 0)


# --------------------------------------------------------------------------------------------------------
# The journal
# --------------------------------------------------------------------------------------------------------
def test_unreachable_database_journals_and_the_next_writer_replays_in_order(make_memory, admin, tmp_path):
    down = make_memory("alice", "planner")
    down.space()
    down.pool.close()  # the database is unreachable for this client
    acks = []
    writer = down.writer(client_name="t5", journal_dir=tmp_path, batch_size=50, flush_interval=0.01,
                         connect_timeout=1, on_durable=acks.extend)
    sent = [(writer.submit(f"offline {i}", session_id=f"s{i % 2}"), f"s{i % 2}", f"offline {i}") for i in range(300)]
    assert writer.flush() == 0
    assert len(acks) == 300 and {a.status for a in acks} == {"journaled"}
    with pytest.raises(JournalBusy):  # one live writer per client name
        make_memory("alice", "planner").writer(client_name="t5", journal_dir=tmp_path)
    report = writer.close()
    assert (report.committed, report.journaled) == (0, 300)
    assert journal_ids(report.journal_path) == [str(s[0]) for s in sent]
    assert rows(admin) == []

    up = make_memory("alice", "planner")
    later = up.writer(client_name="t5", journal_dir=tmp_path, flush_interval=0.01)  # replays on its own
    new = later.submit("after the outage", session_id="s0")
    assert later.flush() == 0
    report = later.close()
    assert (report.committed, report.replayed, report.journaled) == (301, 300, 0)
    assert report.journal_path.stat().st_size == 0
    stored = rows(admin)
    assert Counter(r[0] for r in stored) == Counter([s[0] for s in sent] + [new])
    assert [r[2] for r in stored if r[1] == "s0"] == [s[2] for s in sent if s[1] == "s0"] + ["after the outage"]


def test_journal_drops_a_torn_last_line_and_quarantines_a_damaged_one(tmp_path):
    j = Journal("torn", tmp_path)
    j.append([{"id": str(uuid.uuid4()), "content": f"c{i}"} for i in range(3)])
    j.close()
    with open(tmp_path / "torn.jsonl", "ab") as f:
        f.write(b'{"id": "cut sho')  # a crash during an append: never acknowledged
    j = Journal("torn", tmp_path)
    assert j.pending == 3 and [e["content"] for e, _ in j.read(10)] == ["c0", "c1", "c2"]
    entries = j.read(2)
    j.done(entries[-1][1], 2)
    assert j.pending == 1
    j.close()
    j = Journal("torn", tmp_path)  # the replayed offset survives a restart
    assert j.pending == 1 and [e["content"] for e, _ in j.read(10)] == ["c2"]
    j.close()
    assert j.torn == 0 and (tmp_path / "torn.quarantine").exists()  # counted by the Journal that found it
    j.close()
    (tmp_path / "bad.jsonl").write_bytes(b'{"id": "1"}\nnot json\n{"id": "3"}\n')
    j = Journal("bad", tmp_path)  # the damaged line is quarantined; the lines around it replay
    assert (j.pending, j.damaged) == (2, 1) and [e["id"] for e, _ in j.read(10)] == ["1", "3"]
    j.close()
    assert json.loads((tmp_path / "bad.quarantine").read_text())["offset"] == 12
    with pytest.raises(Exception, match="client name"):
        Journal("../escape", tmp_path)


# --------------------------------------------------------------------------------------------------------
# Connection recovery: one retry, then the journal (C24 for the writer)
# --------------------------------------------------------------------------------------------------------
def test_a_batch_whose_backend_is_terminated_is_retried_once(alice, admin, dsn, tmp_path):
    alice.space()
    acks = []
    writer = alice.writer(client_name="t6", journal_dir=tmp_path, batch_size=100, flush_interval=30,
                          on_durable=acks.extend)  # 100 writes: exactly one batch
    lock = lock_memories(dsn)
    try:
        sent = [writer.submit(f"first {i}") for i in range(100)]
        victim = wait_for(lambda: lock_waiters(admin), "the batch to wait on the lock")
        terminate(admin, victim)
        # The retry runs on a fresh connection and waits on the lock again.
        wait_for(lambda: [p for p in lock_waiters(admin) if p not in victim], "the retry")
    finally:
        lock.rollback()
    assert writer.flush() == 0
    assert {a.status for a in acks} == {"committed"} and writer.stats()["journaled"] == 0

    # Terminated twice: the second failure sends the batch to the journal; it is replayed once possible.
    acks.clear()
    try:
        lock.execute("LOCK TABLE pgmem.memories IN SHARE MODE")
        more = [writer.submit(f"second {i}") for i in range(100)]
        first = wait_for(lambda: lock_waiters(admin), "the batch to wait on the lock")
        terminate(admin, first)
        second = wait_for(lambda: [p for p in lock_waiters(admin) if p not in first], "the retry")
        terminate(admin, second)
        wait_for(lambda: writer.stats()["journaled"] == 100, "the batch to reach the journal")
    finally:
        lock.rollback()
        lock.close()
    report = writer.close()
    assert (report.journaled, report.replayed) == (0, 100)
    assert [a.status for a in acks] == ["journaled"] * 100 + ["committed"] * 100
    stored = rows(admin)
    assert Counter(r[0] for r in stored) == Counter(sent + more)


# --------------------------------------------------------------------------------------------------------
# Processes: SIGTERM, normal exit, SIGKILL
# --------------------------------------------------------------------------------------------------------
def test_c25_sigterm_with_10000_queued_writes_loses_and_duplicates_nothing(alice, admin, dsn, tmp_path):
    """The writer process is stopped while 10,000 accepted writes wait (its first batch is stuck behind a
    lock): its SIGTERM handler keeps them all in the journal within its shutdown timeout; a second process
    replays them. Exactly 10,000 rows, each client id once."""
    alice.space()
    journal = tmp_path / "journal"
    lock = lock_memories(dsn)
    try:
        proc = spawn("queue", dsn, journal, "sigterm", 10_000, PGMEM_TEST_SHUTDOWN="1")
        assert proc.stdout.readline().strip() == "queued", proc.stderr.read()
        wait_for(lambda: lock_waiters(admin), "the first batch to wait on the lock")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGTERM  # the default action still ends the process
    finally:
        lock.rollback()
        lock.close()
    accepted = (tmp_path / "ids-sigterm.txt").read_text().split()
    assert len(accepted) == 10_000
    assert "10000 waiting in the journal" in err  # reported, not silent
    in_journal = journal_ids(journal / "sigterm.jsonl")
    in_db = [str(r[0]) for r in rows(admin)]
    assert set(in_journal) | set(in_db) == set(accepted)
    report = replay(dsn, journal, "sigterm")
    assert report["journaled"] == 0 and report["rejected"] == 0
    stored = [str(r[0]) for r in rows(admin)]
    assert len(stored) == 10_000 and set(stored) == set(accepted)


def test_sigterm_and_normal_exit_drain_into_the_database(alice, admin, dsn, tmp_path):
    alice.space()
    journal = tmp_path / "journal"
    proc = spawn("queue", dsn, journal, "drain", 300)
    assert proc.stdout.readline().strip() == "queued"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, err
    proc = spawn("exit", dsn, journal, "atexit", 300)  # returns without closing: the atexit drain
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out.strip() == "queued", err
    accepted = (tmp_path / "ids-drain.txt").read_text().split() + (tmp_path / "ids-atexit.txt").read_text().split()
    assert sorted(str(r[0]) for r in rows(admin)) == sorted(accepted)
    assert (journal / "drain.jsonl").stat().st_size == 0 and (journal / "atexit.jsonl").stat().st_size == 0


def test_sigkill_during_a_burst_keeps_every_acknowledged_write(alice, admin, dsn, tmp_path):
    """Writes acknowledged as durable (committed, or fsync'd to the journal once the database became
    unreachable for the process) all exist after the process is killed and its journal replayed."""
    alice.space()
    journal = tmp_path / "journal"
    proc = spawn("burst", dsn, journal, "burst", 2000)
    acked: dict[str, str] = {}
    try:
        for line in proc.stdout:
            status, ident = line.split()
            acked[ident] = status
            if list(acked.values()).count("J") >= 300:
                break
    finally:
        proc.kill()
        proc.wait(60)
    assert proc.returncode == -signal.SIGKILL
    counts = Counter(acked.values())
    assert counts["C"] > 0 and counts["J"] >= 300
    replay(dsn, journal, "burst")
    stored = [str(r[0]) for r in rows(admin)]
    assert len(stored) == len(set(stored))
    assert set(acked) <= set(stored)


# --------------------------------------------------------------------------------------------------------
# The database stopped for several seconds mid-stream (a second, throwaway cluster)
# --------------------------------------------------------------------------------------------------------
@pytest.fixture
def own_cluster(tmp_path):
    data = tmp_path / "pg"
    url = embedded.start(data).url()
    migrations.migrate(url)
    yield data, url
    embedded.stop(data)


def test_database_down_mid_stream_every_write_lands_once_in_order(own_cluster, tmp_path):
    data, url = own_cluster
    mem = Memory(url, user_id="alice", agent_id="stream", embedder=HashEmbedder(64), space="t64",
                 role="pgmem_gateway", max_size=2, contextual=False)
    acks = []
    writer = mem.writer(client_name="stream", journal_dir=tmp_path / "journal", batch_size=20,
                        flush_interval=0.02, connect_timeout=1, on_durable=acks.extend)
    sent: list[tuple] = []
    stop = threading.Event()

    def produce():
        i = 0
        while not stop.is_set():
            session = f"s{i % 3}"
            sent.append((writer.submit(f"stream {i}", session_id=session), session, f"stream {i}"))
            i += 1
            time.sleep(0.005)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_for(lambda: len(acks) >= 100, "writes before the outage")
        embedded.stop(data)
        wait_for(lambda: any(a.status == "journaled" for a in acks), "writes to reach the journal")
        time.sleep(3)  # the database stays down for several seconds while writes keep coming
        embedded.start(data)
        wait_for(lambda: writer.stats()["replayed"] > 0, "the journal to be replayed")
        time.sleep(0.5)  # and more writes after the restart
    finally:
        stop.set()
        producer.join()
    report = writer.close(timeout=60)
    mem.close()
    assert report.journaled == 0 and report.rejected == 0
    statuses = Counter(a.status for a in acks)
    assert statuses["journaled"] > 0 and statuses["committed"] == len(sent)
    with psycopg.connect(url) as conn:
        stored = conn.execute("SELECT id, session_id, content FROM pgmem.memories WHERE user_id = 'alice'"
                              " ORDER BY created_at, seq").fetchall()
    assert len(stored) == len(sent) and Counter(r[0] for r in stored) == Counter(s[0] for s in sent)
    for session in ("s0", "s1", "s2"):
        assert [r[2] for r in stored if r[1] == session] == [s[2] for s in sent if s[1] == session]


# --------------------------------------------------------------------------------------------------------
# Pool exhaustion
# --------------------------------------------------------------------------------------------------------
def client_backends(admin: psycopg.Connection) -> int:
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                         " AND backend_type = 'client backend' AND pid <> pg_backend_pid()").fetchone()[0]


def test_pool_of_one_with_twenty_threads_neither_deadlocks_nor_leaks(make_memory, admin, tmp_path):
    before = client_backends(admin)  # the test database fixture's own connection
    mem = make_memory("alice", "pool", min_size=1, max_size=1)
    mid = mem.add("the shared starting point").id
    writer = mem.writer(client_name="pool", journal_dir=tmp_path, batch_size=10, flush_interval=0.01,
                        connect_timeout=0.5)

    def caller(t: int) -> int:
        who = mem.with_identity(user_id="bob") if t % 4 == 0 else mem
        done = 0
        for i in range(5):
            who.add(f"thread {t} fact {i}")
            who.search(f"fact {i}", k=3)
            writer.submit(f"queued by {t} #{i}")
            if who is mem:
                assert mem.get(mid) is not None
            done += 1
        return done

    with ThreadPoolExecutor(20) as pool:
        futures = [pool.submit(caller, t) for t in range(20)]
        assert [f.result(timeout=120) for f in futures] == [5] * 20
    assert writer.flush(timeout=120) == 0
    report = writer.close()
    assert (report.committed, report.journaled) == (100, 0)  # contention is not an outage
    stats = mem.pool.get_stats()
    assert stats["pool_size"] == 1 and stats["pool_available"] == 1 and stats.get("requests_waiting", 0) == 0
    # One server connection: the pool's (closed probes end asynchronously on the server, so wait for them).
    wait_for(lambda: client_backends(admin) == before + 1, "only the pool's connection to remain")
    assert len(rows(admin, "alice")) == 1 + 15 * 5 + 100 and len(rows(admin, "bob")) == 5 * 5
