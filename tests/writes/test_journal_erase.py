"""pgmem.journal.erase_user: a user's lines leave every local journal (pending and rejected), the other users'
pending lines still replay from the right offset, and a journal held by a live writer is refused untouched.
No database needed."""

from __future__ import annotations

import os

import pytest

from pgmem.errors import ValidationError
from pgmem.journal import Journal, JournalBusy, JournalError, erase_user


def entry(user: str, n: int) -> dict:
    return {"id": f"{user}-{n}", "user_id": user, "space": "t64", "content": f"{user} fact {n}"}


def build(directory) -> None:
    """Journal a: alice 0, bob 0, alice 1, bob 1 (the first three replayed), then alice 2, bob 2 pending;
    journal b: bob 3, alice 3 pending; a's rejected file: alice 9, bob 9."""
    a = Journal("a", directory)
    a.append([entry("alice", 0), entry("bob", 0), entry("alice", 1), entry("bob", 1),
              entry("alice", 2), entry("bob", 2)])
    read = a.read(3)
    a.done(read[-1][1], 3)
    a.reject([entry("alice", 9), entry("bob", 9)], "space missing")
    a.close()
    b = Journal("b", directory)
    b.append([entry("bob", 3), entry("alice", 3)])
    b.close()


def pending(name: str, directory) -> list[str]:
    j = Journal(name, directory)
    try:
        return [e["id"] for e, _ in j.read(100)]
    finally:
        j.close()


def test_erase_removes_every_line_of_the_user_and_keeps_replay_right(tmp_path):
    build(tmp_path)
    assert pending("a", tmp_path) == ["bob-1", "alice-2", "bob-2"]
    assert (tmp_path / "a.offset").exists()

    removed = erase_user("alice", tmp_path)
    assert removed == {str(tmp_path / "a.jsonl"): 3, str(tmp_path / "a.rejected.jsonl"): 1,
                       str(tmp_path / "b.jsonl"): 1}
    for path in tmp_path.iterdir():
        assert b"alice" not in path.read_bytes(), path.name
    # bob's lines are all still there, byte for byte in order; his pending ones replay, the replayed ones do not
    assert [line.count(b"bob-") for line in (tmp_path / "a.jsonl").read_bytes().splitlines()] == [1, 1, 1]
    assert pending("a", tmp_path) == ["bob-1", "bob-2"]
    assert pending("b", tmp_path) == ["bob-3"]
    assert b"bob-9" in (tmp_path / "a.rejected.jsonl").read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))

    # again: nothing left to remove, nothing changes
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert set(erase_user("alice", tmp_path).values()) == {0}
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_offset_moves_back_over_removed_replayed_lines(tmp_path):
    j = Journal("c", tmp_path)
    j.append([entry("alice", 0), entry("alice", 1), entry("bob", 0), entry("bob", 1)])
    read = j.read(3)
    j.done(read[-1][1], 3)  # alice 0, alice 1, bob 0 replayed
    j.close()
    erase_user("alice", tmp_path)
    first = len((tmp_path / "c.jsonl").read_bytes().splitlines(keepends=True)[0])
    assert int((tmp_path / "c.offset").read_text()) == first
    assert pending("c", tmp_path) == ["bob-1"]

    # every replayed line is the user's: the offset goes away and the rest replays from the start
    j = Journal("d", tmp_path)
    j.append([entry("alice", 0), entry("bob", 0)])
    j.done(j.read(1)[0][1], 1)
    j.close()
    erase_user("alice", tmp_path)
    assert not (tmp_path / "d.offset").exists()
    assert pending("d", tmp_path) == ["bob-0"]


def test_a_live_writer_makes_it_refuse_without_changing_anything(tmp_path):
    build(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix != ".lock"}
    live = Journal("b", tmp_path)
    try:
        with pytest.raises(JournalBusy) as busy:
            erase_user("alice", tmp_path)
        assert "b.jsonl" in str(busy.value) and str(os.getpid()) in str(busy.value)
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix != ".lock"} == before
        live.append([entry("bob", 4)])  # the writer was not disturbed
    finally:
        live.close()
    assert erase_user("alice", tmp_path)[str(tmp_path / "b.jsonl")] == 1
    assert pending("b", tmp_path) == ["bob-3", "bob-4"]


def test_damaged_line_stops_before_any_change_and_torn_tail_goes(tmp_path):
    build(tmp_path)
    with open(tmp_path / "b.jsonl", "ab") as fh:
        fh.write(b'{"id": "alice-5", "user_id": "ali')  # torn: a crash during an append
    removed = erase_user("alice", tmp_path)
    assert removed[str(tmp_path / "b.jsonl")] == 1
    assert (tmp_path / "b.jsonl").read_bytes().endswith(b"\n") and b"alice" not in (tmp_path / "b.jsonl").read_bytes()

    with open(tmp_path / "b.jsonl", "ab") as fh:
        fh.write(b"not json\n")
    Journal("z", tmp_path).close()
    (tmp_path / "z.jsonl").write_bytes(b'{"id": "carol-1", "user_id": "carol"}\n')
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix != ".lock"}
    with pytest.raises(JournalError, match="damaged"):
        erase_user("carol", tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix != ".lock"} == before


def test_missing_directory_and_bad_user(tmp_path):
    assert erase_user("alice", tmp_path / "nope") == {}
    with pytest.raises(ValidationError, match="user_id"):
        erase_user("", tmp_path)


def test_erase_removes_the_users_quarantined_records_too(tmp_path):
    j = Journal("q", tmp_path)
    j.append([entry("alice", 0), entry("bob", 0), entry("alice", 1)])
    j.close()
    data = bytearray((tmp_path / "q.jsonl").read_bytes())
    data[data.index(b"alice fact 0") + 2] ^= 0x01  # alice's first record damaged: quarantined when opened
    data[data.index(b"bob fact 0") + 2] ^= 0x01  # and bob's
    (tmp_path / "q.jsonl").write_bytes(bytes(data))
    j = Journal("q", tmp_path)
    assert (j.damaged, j.pending) == (2, 1)
    j.close()
    assert b"alice" in (tmp_path / "q.quarantine").read_bytes()
    removed = erase_user("alice", tmp_path)
    assert removed[str(tmp_path / "q.quarantine")] == 1 and removed[str(tmp_path / "q.jsonl")] == 2
    assert b"alice" not in (tmp_path / "q.quarantine").read_bytes()
    assert b'"user_id":"bob"' in (tmp_path / "q.quarantine").read_bytes()
