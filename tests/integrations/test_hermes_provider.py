"""The hermes-agent provider in this interpreter (no hermes-agent needed), driven in the call shapes of
hermes-agent 0.19.0's MemoryManager: identity per platform, the built-in memory tool's add / replace /
remove mirrored exactly, the pending file private, an embedder that does not fit the space refused, and
`pgmem install-plugin hermes` without hermes-agent. The same provider under hermes' own MemoryManager:
tests/integrations/test_hermes.py."""

from __future__ import annotations

import json
import os
import stat

import pytest

from pgmem.errors import PgmemError
from pgmem.integrations import hermes, install
from pgmem.integrations.hermes import PgmemMemoryProvider, resolve_user
from pgmem.testing import HashEmbedder


def notify(provider: PgmemMemoryProvider, tool_args: dict, metadata: dict | None = None) -> None:
    """What hermes-agent 0.19.0's MemoryManager.notify_memory_tool_write sends after a successful call of
    the built-in memory tool: one on_memory_write per operation, content "" when the tool had none, and
    the tool's old_text in the metadata (beside the host's provenance)."""
    ops = tool_args.get("operations") or [{k: tool_args.get(k) for k in ("action", "content", "old_text")}]
    for op in ops:
        meta = dict(metadata or {"write_origin": "assistant_tool", "session_id": "s1"})
        if op.get("old_text"):
            meta["old_text"] = str(op["old_text"])
        provider.on_memory_write(str(op.get("action")), str(tool_args.get("target") or "memory"),
                                 str(op.get("content") or ""), metadata=meta)


@pytest.fixture
def start(make_memory, tmp_path):
    """start(**initialize kwargs) -> a provider on this test's database (space t64), initialised and ready."""
    made = []

    def go(memory=None, **kw) -> PgmemMemoryProvider:
        p = PgmemMemoryProvider(memory=memory or make_memory(None))
        kw.setdefault("platform", "cli")
        kw.setdefault("user_id", "alice")
        warnings = []
        p.initialize("s1", hermes_home=str(tmp_path / "home"), agent_context="primary",
                     warning_callback=warnings.append, **kw)
        p.warnings = warnings
        p._attempted.wait(30)
        made.append(p)
        return p

    yield go
    for p in made:
        p.shutdown()


def mirrored(admin, user="alice") -> list[tuple[str, dict]]:
    return admin.execute("SELECT content, metadata FROM pgmem.memories WHERE user_id = %s AND metadata->>'kind' = "
                         "'memory' ORDER BY content", [user]).fetchall()


# --------------------------------------------------------------------------------------------------------
# identity
# --------------------------------------------------------------------------------------------------------
def test_user_ids_are_namespaced_by_platform_and_never_fall_back_outside_the_cli(monkeypatch):
    monkeypatch.setattr(hermes.getpass, "getuser", lambda: "oslogin")
    assert resolve_user("telegram", "12345", None) == "telegram:12345"
    assert resolve_user("discord", 12345, "configured") == "discord:12345"
    assert resolve_user("Telegram", " 12345 ", None) == "telegram:12345"
    assert resolve_user("telegram", None, "configured") is None
    assert resolve_user("discord", "", None) is None
    assert resolve_user("cli", None, "configured") == "configured"
    assert resolve_user("cli", None, None) == "oslogin"
    assert resolve_user(None, None, None) == "oslogin"
    assert resolve_user("cli", "alice", "configured") == "alice"


def test_two_platforms_same_number_are_two_users(start, admin):
    for platform in ("telegram", "discord"):
        p = start(platform=platform, user_id="12345")
        assert p.status()["user"] == f"{platform}:12345"
        p.sync_turn(f"hello from {platform}", "hi", session_id="s1")
        assert p.flush(30)
    users = {r[0] for r in admin.execute("SELECT DISTINCT user_id FROM pgmem.memories")}
    assert users == {"telegram:12345", "discord:12345"}


def test_a_gateway_session_without_a_user_id_has_no_memory(start, admin, tmp_path):
    p = start(platform="telegram", user_id=None)
    assert p.status()["state"] == "unavailable" and p.status()["user"] is None
    assert any("no user id" in w for w in p.warnings)
    p.sync_turn("my secret", "ok", session_id="s1")
    notify(p, {"action": "add", "target": "user", "content": "likes tea"})
    assert "error" in json.loads(p.handle_tool_call("pgmem_recall", {"query": "tea"}))
    assert "error" in json.loads(p.handle_tool_call("pgmem_remember", {"content": "x"}))
    p.shutdown()
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 0
    assert not (tmp_path / "home" / "pgmem" / "pending.jsonl").exists()


# --------------------------------------------------------------------------------------------------------
# the built-in memory tool, mirrored
# --------------------------------------------------------------------------------------------------------
def test_add_replace_remove_in_the_memory_managers_call_shapes(start, admin):
    p = start()
    notify(p, {"action": "add", "target": "user", "content": "Alice lives in Paris"})
    notify(p, {"action": "add", "target": "memory", "content": "Project X ships on Friday"})
    notify(p, {"action": "add", "target": "memory", "content": "Alice lives in Paris since 2020"})  # other target
    assert p.flush(30)
    notify(p, {"action": "replace", "target": "user", "old_text": "lives in Paris",
               "content": "Alice lives in Berlin"})
    assert p.flush(30)
    assert mirrored(admin) == [
        ("Alice lives in Berlin", {"source": "hermes", "kind": "memory", "target": "user"}),
        ("Alice lives in Paris since 2020", {"source": "hermes", "kind": "memory", "target": "memory"}),
        ("Project X ships on Friday", {"source": "hermes", "kind": "memory", "target": "memory"}),
    ]
    # remove: content "" and the entry named by old_text, in one target only
    notify(p, {"action": "remove", "target": "memory", "old_text": "ships on Fri"})
    assert p.flush(30)
    assert [c for c, _ in mirrored(admin)] == ["Alice lives in Berlin", "Alice lives in Paris since 2020"]
    # a batch of operations, as the tool's `operations` shape
    notify(p, {"target": "memory", "operations": [
        {"action": "add", "content": "Bob is Alice's manager"},
        {"action": "replace", "old_text": "in Paris", "content": "Alice's office is in Paris"},
    ]})
    assert p.flush(30)
    assert [c for c, _ in mirrored(admin)] == ["Alice lives in Berlin", "Alice's office is in Paris",
                                               "Bob is Alice's manager"]
    history = admin.execute("SELECT event FROM pgmem.history h JOIN pgmem.memories m ON m.id = h.memory_id "
                            "WHERE m.content = 'Alice lives in Berlin' ORDER BY event_id").fetchall()
    assert history == [("ADD",), ("UPDATE",)]  # replaced in place: its history shows the old text
    assert p.status()["failed_writes"] == 0 and p.status()["skipped_writes"] == 0


def test_ambiguous_or_missing_matches_change_nothing_and_warn(start, admin):
    p = start()
    for text in ("Alice likes green tea", "Alice likes black tea", "Alice drinks coffee"):
        notify(p, {"action": "add", "target": "memory", "content": text})
    assert p.flush(30)
    before = mirrored(admin)
    notify(p, {"action": "replace", "target": "memory", "old_text": "likes", "content": "Alice likes water"})
    notify(p, {"action": "remove", "target": "memory", "old_text": "tea"})
    notify(p, {"action": "remove", "target": "memory", "old_text": "juice"})
    notify(p, {"action": "replace", "target": "user", "old_text": "coffee", "content": "Alice drinks milk"})
    assert p.flush(30)
    assert mirrored(admin) == before
    assert p.status()["skipped_writes"] == 4 and p.status()["failed_writes"] == 0
    text = "\n".join(p.warnings)
    assert "2 mirrored entries contain 'likes'" in text and "2 mirrored entries contain 'tea'" in text
    assert "no mirrored entry contains 'juice'" in text and "nothing was changed" in text


def test_a_replace_onto_text_mirrored_already_leaves_one_copy(start, admin):
    p = start()
    notify(p, {"action": "add", "target": "memory", "content": "old fact"})
    notify(p, {"action": "add", "target": "memory", "content": "new fact"})
    notify(p, {"action": "replace", "target": "memory", "old_text": "old fact", "content": "new fact"})
    assert p.flush(30)
    assert [c for c, _ in mirrored(admin)] == ["new fact"]


def test_older_hosts_remove_by_content(start, admin):
    p = start()
    p.on_memory_write("add", "memory", "temporary note")
    p.on_memory_write("remove", "memory", "temporary note")  # no metadata at all
    assert p.flush(30)
    assert mirrored(admin) == []


# --------------------------------------------------------------------------------------------------------
# pending file, embedder check
# --------------------------------------------------------------------------------------------------------
def test_the_pending_file_is_private(tmp_path, monkeypatch):
    monkeypatch.setenv("PGMEM_DSN", "postgresql://postgres@/nowhere?host=/nonexistent-socket-dir")
    monkeypatch.setenv("PGMEM_EMBEDDER", "pgmem.testing:HashEmbedder")
    home = tmp_path / "home"
    (home / "pgmem").mkdir(parents=True, mode=0o755)
    os.chmod(home / "pgmem", 0o755)
    p = PgmemMemoryProvider()
    p.initialize("s1", hermes_home=str(home), platform="cli", user_id="alice", agent_context="primary")
    p._attempted.wait(30)
    p.sync_turn("my cat is called Miso", "noted", session_id="s1")
    p.shutdown()
    pending = home / "pgmem" / "pending.jsonl"
    assert len(pending.read_text().splitlines()) == 2
    assert stat.S_IMODE(pending.stat().st_mode) == 0o600
    assert stat.S_IMODE(pending.parent.stat().st_mode) == 0o700


def test_a_mismatched_embedder_is_not_ready_and_writes_are_kept(start, make_memory, admin, tmp_path):
    make_memory("alice").space()  # t64 holds the 64-dimension test model
    p = start(memory=make_memory(None, embedder=HashEmbedder(32)))
    status = p.status()
    assert status["state"] == "unavailable", status
    assert "holds embeddings of model 'pgmem-testing-hash-64'" in status["last_error"]
    p.sync_turn("a turn", "a reply", session_id="s1")
    p.shutdown()
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 0
    assert len((tmp_path / "home" / "pgmem" / "pending.jsonl").read_text().splitlines()) == 2


# --------------------------------------------------------------------------------------------------------
# install-plugin without hermes-agent
# --------------------------------------------------------------------------------------------------------
def test_install_plugin_without_hermes_agent_fails_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "hermes_version", lambda: None)
    home = tmp_path / "no-such-home"
    with pytest.raises(PgmemError) as err:
        install.install("hermes", home, activate=True)
    assert "hermes-agent is not installed" in err.value.message and "pip install pgmem-agents" in err.value.hint
    assert not home.exists()
    existing = tmp_path / "home"
    (existing / "plugins" / "pgmem").mkdir(parents=True)
    (existing / "plugins" / "pgmem" / "__init__.py").write_text("# mine\n")
    with pytest.raises(PgmemError):
        install.install("hermes", existing)
    assert sorted(str(p.relative_to(existing)) for p in existing.rglob("*")) == [
        "plugins", "plugins/pgmem", "plugins/pgmem/__init__.py"]


def test_a_failed_activation_puts_everything_back(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "hermes_version", lambda: "0.19.0")
    real_run = install._run

    def run(code, *args, home):
        if code == install.ACTIVATE:
            return real_run("raise SystemExit('config.yaml is not writable')", home=home)
        return real_run(code, *args, home=home)

    monkeypatch.setattr(install, "_run", run)
    fresh = tmp_path / "fresh"
    with pytest.raises(PgmemError) as err:
        install.install("hermes", fresh, activate=True)
    assert "nothing was installed" in err.value.message
    assert not fresh.exists()
    existing = tmp_path / "home"
    (existing / "plugins" / "pgmem").mkdir(parents=True)
    (existing / "plugins" / "pgmem" / "__init__.py").write_text("# mine\n")
    with pytest.raises(PgmemError):
        install.install("hermes", existing, activate=True)
    assert sorted(str(p.relative_to(existing)) for p in existing.rglob("*")) == [
        "plugins", "plugins/pgmem", "plugins/pgmem/__init__.py"]
    assert (existing / "plugins" / "pgmem" / "__init__.py").read_text() == "# mine\n"
