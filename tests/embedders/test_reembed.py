"""The re-embed path docs/embedders.md gives for moving to another model (a space binds one model, so vectors of
two models never mix): export the user without embeddings, keep the memories that hold now as plain JSONL
lines, create a space for the new model and import them there with the new embedder."""

from __future__ import annotations

import json
import shutil
import subprocess

from typer.testing import CliRunner

import support.recording_embedder as rec
from pgmem.cli import app

# The filter of docs/embedders.md: the memories that hold now, as `pgmem import` JSONL lines.
JQ = ('select(.kind == "memory" and .valid_to == null) '
      '| {user_id, agent_id, session_id, content, metadata, created_at}')


def _jq_equivalent(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        row = json.loads(line)
        if row["kind"] == "memory" and row.get("valid_to") is None:
            out.append(json.dumps({k: row.get(k) for k in ("user_id", "agent_id", "session_id", "content",
                                                             "metadata", "created_at")}))
    return out


def test_export_filter_and_import_into_a_space_of_the_new_model(dsn, admin, monkeypatch, tmp_path):
    for name in ("PGMEM_DSN", "PGMEM_USER", "PGMEM_SPACE", "PGMEM_ROLE", "PGMEM_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    conn = ["--dsn", dsn, "--role", "pgmem_gateway"]

    def cli(*args):
        r = runner.invoke(app, [*args, *conn])
        assert r.exit_code == 0, r.output
        return r

    monkeypatch.setenv("PGMEM_EMBEDDER", "pgmem.testing:HashEmbedder")  # the old model
    cli("add", "Alice is vegetarian", "--user", "alice", "--metadata", '{"topic": "food"}', "--session", "s1")
    cli("add", "Alice keeps bees on the roof", "--user", "alice")
    old = json.loads(cli("search", "bees", "--user", "alice", "--json").stdout)
    cli("update", old[0]["id"], "--content", "Alice keeps two hives of bees on the roof", "--user", "alice")
    export = tmp_path / "alice.jsonl"
    cli("export", "--user", "alice", "--no-embeddings", "--out", str(export))
    lines = export.read_text(encoding="utf-8").splitlines()
    if shutil.which("jq"):
        got = subprocess.run(["jq", "-c", JQ, str(export)], capture_output=True, text=True, check=True).stdout
        kept = got.splitlines()
        assert [json.loads(x) for x in kept] == [json.loads(x) for x in _jq_equivalent(lines)]
    else:
        kept = _jq_equivalent(lines)
    plain = tmp_path / "alice-memories.jsonl"
    plain.write_text("\n".join(kept) + "\n", encoding="utf-8")

    monkeypatch.setenv("PGMEM_EMBEDDER", "support.recording_embedder:RecordingEmbedder")  # the new model
    cli("space", "create", "rec", "--model", "pgmem-testing-recording-64", "--dims", "64")
    rec.CALLS.clear()
    imported = json.loads(cli("import", str(plain), "--space", "rec", "--json").stdout)
    assert imported["added"] == 2 and not imported["failures"]
    assert set(rec.passages()) >= {"Alice is vegetarian", "Alice keeps two hives of bees on the roof"}
    hits = json.loads(cli("search", "vegetarian", "--user", "alice", "--space", "rec", "--json").stdout)
    assert hits[0]["content"] == "Alice is vegetarian"
    assert hits[0]["metadata"] == {"topic": "food"} and hits[0]["session_id"] == "s1"
    rows = admin.execute("SELECT s.name, s.model, count(m.*) FROM pgmem.spaces s LEFT JOIN pgmem.memories m "
                         "ON m.space_id = s.space_id AND m.valid_to IS NULL GROUP BY 1, 2 ORDER BY 1").fetchall()
    assert rows == [("default", "pgmem-testing-hash-64", 2), ("rec", "pgmem-testing-recording-64", 2)]
