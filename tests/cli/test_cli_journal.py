"""``pgmem journal`` (list, check, replay, show) and the journals check of ``pgmem doctor``, on real journal
files (one damaged by editing its bytes, one of the old record format) and the test database."""

from __future__ import annotations

import json
import os
import uuid

import pytest
from typer.testing import CliRunner

import pgmem.requests
from pgmem import doctor
from pgmem.cli import app
from pgmem.journal import Journal, encode
from pgmem.testing import HashEmbedder

runner = CliRunner()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for name in ("PGMEM_DSN", "PGMEM_USER", "PGMEM_AGENT", "PGMEM_SPACE", "PGMEM_ROLE", "PGMEM_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("PGMEM_JOURNAL_DIR", str(tmp_path / "journal"))
    monkeypatch.setattr(pgmem.requests, "default_embedder", lambda: HashEmbedder(64))


def write(user: str, i: int) -> dict:
    return {"id": str(uuid.uuid4()), "user_id": user, "space": "t64", "content": f"{user} journal fact {i}",
            "metadata": {}, "agent_id": "planner", "session_id": "s"}


@pytest.fixture
def journals(tmp_path):
    """Journal a: 4 writes of alice, the third damaged (a bit flipped in its content), plus a rejected line;
    journal b: 2 writes of bob in the old record format (bare JSON lines)."""
    d = tmp_path / "journal"
    a = Journal("a", d)
    writes = [write("alice", i) for i in range(4)]
    a.append(writes)
    a.reject([write("alice", 9)], "space missing")
    a.close()
    data = bytearray((d / "a.jsonl").read_bytes())
    third = data.index(writes[2]["content"].encode())
    data[third] ^= 0x01
    (d / "a.jsonl").write_bytes(bytes(data))
    old = [write("bob", i) for i in range(2)]
    fd = os.open(d / "b.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"".join(encode(e) for e in old))
    os.close(fd)
    damaged_at = bytes(data).rfind(b"\nv2 ", 0, third) + 1
    return d, writes, old, damaged_at


def snapshot(d):
    return {p.name: p.read_bytes() for p in d.iterdir() if p.suffix != ".lock"}


def test_list_and_check_change_nothing_and_name_the_damage(journals):
    d, writes, old, at = journals
    before = snapshot(d)
    res = runner.invoke(app, ["journal", "list", "--json"])
    assert res.exit_code == 0, res.output
    listed = {j["name"]: j for j in json.loads(res.stdout)["journals"]}
    assert {n: (j["pending"], j["rejected"], j["damaged"], j["torn"]) for n, j in listed.items()} == \
        {"a": (3, 1, 1, 0), "b": (2, 0, 0, 0)}
    assert listed["b"]["formats"] == [1] and listed["a"]["formats"] == [2]
    res = runner.invoke(app, ["journal", "list", "--journal-dir", str(d)])
    assert res.exit_code == 0 and "a" in res.stdout and "b" in res.stdout
    res = runner.invoke(app, ["journal", "check", "a"])
    assert res.exit_code == 1
    assert f"damaged record at byte {at}" in res.stdout and writes[2]["id"] in res.stdout and "checksum" in res.stdout
    assert runner.invoke(app, ["journal", "check", "b"]).exit_code == 0
    assert snapshot(d) == before  # nothing changed, no quarantine file made


def test_replay_quarantines_the_damage_and_show_prints_it(journals, alice, admin, dsn):
    alice.space()
    d, writes, old, at = journals
    res = runner.invoke(app, ["journal", "replay", "a", "--dsn", dsn, "--role", "pgmem_gateway", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["replayed"], out["damaged"], out["waiting"]) == (3, 1, 0)
    stored = {r[0] for r in admin.execute("SELECT content FROM pgmem.memories WHERE user_id = 'alice'")}
    assert stored == {w["content"] for k, w in enumerate(writes) if k != 2}
    assert runner.invoke(app, ["journal", "check", "a"]).exit_code == 0  # in the quarantine file now
    res = runner.invoke(app, ["journal", "show", "a", "1"])
    assert res.exit_code == 0, res.output
    assert f"at byte {at}" in res.stdout and writes[2]["id"] in res.stdout and "checksum mismatch" in res.stdout
    shown = json.loads(runner.invoke(app, ["journal", "show", "a", "--json"]).stdout)
    assert len(shown) == 1 and shown[0]["offset"] == at and "journal fact" in shown[0]["raw_text"]
    assert runner.invoke(app, ["journal", "show", "a", "2"]).exit_code == 1
    # the old-format journal replays too, as bob only when --user names him
    res = runner.invoke(app, ["journal", "replay", "b", "--dsn", dsn, "--role", "pgmem_gateway", "--user", "bob"])
    assert res.exit_code == 0 and "2 replayed" in res.stdout


def test_doctor_reports_damaged_and_pending_journals(journals, tmp_path):
    d, *_ = journals
    check = doctor.journal_check(d)
    assert not check.ok and "a: 1 damaged" in check.detail and "b: 2 pending" in check.detail
    empty = tmp_path / "none"
    assert doctor.journal_check(empty).ok
    os.chmod(d, 0o777)
    check = doctor.journal_check(d)
    assert not check.ok and "writable by" in check.detail
    res = runner.invoke(app, ["journal", "list"])
    assert res.exit_code == 1 and "writable by" in res.output and "Traceback" not in res.output
