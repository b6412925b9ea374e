"""The hermes-agent memory provider, against the real `hermes-agent` package (0.19.0) in its own virtual
environment (its dependency pins are strict): `pgmem install-plugin hermes` writes the shim, hermes' own
discovery (`plugins.memory`) finds and loads it, and hermes' own `MemoryManager` drives a round trip
on this test's database.

The venv is created on first use at $PGMEM_HERMES_VENV (default /tmp/pgmem-hermes-venv-<checkout key>) with
`pip install hermes-agent==0.19.0 -e <this repo>` and reused afterwards. If that is impossible the tests
fail (they never skip). The provider gets the test-only HashEmbedder through its own setting
(PGMEM_EMBEDDER=pgmem.testing:HashEmbedder), so the venv needs no torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from pgmem.testing import checkout_key

REPO = Path(__file__).resolve().parents[2]
# one venv per checkout: the venv installs this checkout editable, so two checkouts must not share one
VENV = Path(os.environ.get("PGMEM_HERMES_VENV") or f"/tmp/pgmem-hermes-venv-{checkout_key(REPO)}")
HERMES_VERSION = "0.19.0"

PROBE = textwrap.dedent("""\
    import json, importlib.metadata, pgmem, agent.memory_provider
    print(json.dumps({"hermes": importlib.metadata.version("hermes-agent"), "pgmem": pgmem.__file__}))
""")


def _probe(python: Path) -> dict | None:
    if not python.exists():
        return None
    # cwd outside any checkout: `python -c` puts the cwd first on sys.path, which would hide what the venv imports.
    done = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=str(VENV))
    return json.loads(done.stdout) if done.returncode == 0 else None


def _ours(found: dict) -> bool:
    """Whether the venv imports pgmem from this checkout. An editable install of a checkout since deleted
    imports as a namespace package whose ``__file__`` is None: not ours either, so it is reinstalled."""
    return found.get("pgmem") is not None and Path(found["pgmem"]).is_relative_to(REPO)


@pytest.fixture(scope="session")
def hermes_python() -> Path:
    """The venv's interpreter, with hermes-agent and this checkout of pgmem (editable) installed."""
    python = VENV / "bin" / "python"
    found = _probe(python)
    ok = found is not None and found["hermes"] == HERMES_VERSION and _ours(found)
    if not ok:
        steps = [] if python.exists() else [[sys.executable, "-m", "venv", str(VENV)]]
        steps.append([str(python), "-m", "pip", "install", "-q", f"hermes-agent=={HERMES_VERSION}", "-e", str(REPO)])
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
            if done.returncode != 0:
                pytest.fail(f"could not set up hermes-agent {HERMES_VERSION} in {VENV}: {' '.join(cmd)}\n"
                            f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}", pytrace=False)
        found = _probe(python)
        if found is None or not _ours(found):
            pytest.fail(f"hermes-agent or pgmem does not import in {VENV}: {found}", pytrace=False)
    return python


def run_py(python: Path, code: str, home: Path, **env: str) -> dict:
    """Run `code` in the hermes venv with HERMES_HOME=home; the JSON document it prints last."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PGMEM_", "HERMES_"))}
    full_env.update(HERMES_HOME=str(home), **env)
    done = subprocess.run([str(python), "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env,
                          cwd=str(home), timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def pgmem_cli(python: Path, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGMEM_", "HERMES_"))}
    return subprocess.run([str(python), "-m", "pgmem.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


DISCOVER = """\
    import json, sys
    from plugins.memory import discover_memory_providers, load_memory_provider
    from agent.memory_provider import MemoryProvider
    from hermes_cli.config import load_config
    found = {name: available for name, _, available in discover_memory_providers()}
    p = load_memory_provider("pgmem")
    print(json.dumps({
        "found": found,
        "loaded": p is not None,
        "is_provider": isinstance(p, MemoryProvider),
        "class_module": type(p).__module__ if p else None,
        "class_file": sys.modules[type(p).__module__].__file__ if p else None,
        "tools": [s["name"] for s in p.get_tool_schemas()] if p else [],
        "active": (load_config().get("memory") or {}).get("provider"),
    }))
"""


def test_install_plugin_shim_is_found_by_hermes_discovery(hermes_python: Path, tmp_path: Path) -> None:
    home = tmp_path / "hermes-home"
    # something already installed under the name: it must survive as a hidden backup
    (home / "plugins" / "pgmem").mkdir(parents=True)
    (home / "plugins" / "pgmem" / "__init__.py").write_text("# an old copy of pgmem\n")

    done = pgmem_cli(hermes_python, "install-plugin", "hermes", "--home", str(home), "--activate", "--json",
                     home=home)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    shim = home / "plugins" / "pgmem"
    assert result["path"] == str(shim) and result["activated"] is True
    backup = Path(result["backup"])
    assert backup.parent == shim.parent and backup.name.startswith(".pgmem.backup-")
    assert (backup / "__init__.py").read_text() == "# an old copy of pgmem\n"
    assert sorted(p.name for p in shim.iterdir()) == ["__init__.py", "plugin.yaml"]
    source = (shim / "__init__.py").read_text()
    assert "from pgmem.integrations.hermes import PgmemMemoryProvider" in source
    assert "class " not in source and len(source.splitlines()) < 30  # a shim, not a copy of pgmem

    # no torch / sentence-transformers in this venv: the default local embedder makes it unavailable
    assert run_py(hermes_python, DISCOVER, home)["found"].get("pgmem") is False
    seen = run_py(hermes_python, DISCOVER, home, PGMEM_EMBEDDER="pgmem.testing:HashEmbedder")
    assert seen["found"].get("pgmem") is True  # found by hermes' own scan, and is_available()
    assert not any(name.startswith(".") for name in seen["found"])  # the backup is not a second provider
    assert seen["loaded"] and seen["is_provider"]
    assert seen["class_module"] == "pgmem.integrations.hermes"
    assert Path(seen["class_file"]).resolve() == REPO / "pgmem" / "integrations" / "hermes.py"  # the pip-installed one
    assert seen["tools"] == ["pgmem_recall", "pgmem_remember"]
    assert seen["active"] == "pgmem"

    again = json.loads(pgmem_cli(hermes_python, "install-plugin", "hermes", "--home", str(home), "--json",
                                 home=home).stdout)
    assert again["backup"] and Path(again["backup"]).exists() and backup.exists()

    gone = pgmem_cli(hermes_python, "install-plugin", "hermes", "--home", str(home), "--uninstall", home=home)
    assert gone.returncode == 0 and "removed" in gone.stdout
    assert not shim.exists()
    after = run_py(hermes_python, DISCOVER, home)
    assert "pgmem" not in after["found"] and after["loaded"] is False

    unknown = pgmem_cli(hermes_python, "install-plugin", "nosuchhost", "--home", str(home), home=home)
    assert unknown.returncode == 1 and "unknown agent host" in unknown.stderr


ROUND_TRIP = """\
    import json, os
    from agent.memory_manager import MemoryManager
    from plugins.memory import load_memory_provider

    warnings, states = [], []

    def session(session_id, **extra):
        provider = load_memory_provider("pgmem")
        manager = MemoryManager()
        manager.add_provider(provider)
        manager.initialize_all(session_id=session_id, platform="cli", agent_context="primary",
                               warning_callback=warnings.append, status_callback=states.append, **extra)
        return provider, manager

    out = {}
    # 1. the database is unreachable: nothing raises, writes are kept in the pending file
    os.environ["PGMEM_DSN"] = "postgresql://postgres@/nowhere?host=/nonexistent-socket-dir"
    p, m = session("s0", user_id="alice")
    out["down_tool"] = json.loads(m.handle_tool_call("pgmem_recall", {"query": "anything"}))
    out["down_prefetch"] = m.prefetch_all("anything")
    m.sync_all("Remember that my cat is called Miso", "Noted: your cat is Miso.", session_id="s0")
    m.on_session_end([])
    m.shutdown_all()
    out["down_status"] = p.status()
    out["down_warnings"] = list(warnings)

    # 2. the database is back: the pending writes are replayed, then a normal session
    os.environ["PGMEM_DSN"] = os.environ["ROUND_TRIP_DSN"]
    p, m = session("s1", user_id="alice")
    out["remember"] = json.loads(m.handle_tool_call(
        "pgmem_remember", {"content": "Alice is allergic to peanuts", "metadata": {"topic": "food"}}))
    m.sync_all("I am flying to Lisbon on 3 March", "Have a good flight to Lisbon!", session_id="s1")
    m.on_memory_write("add", "user", "Alice prefers aisle seats")
    m.on_memory_write("add", "memory", "temporary note to be removed")
    m.on_memory_write("remove", "memory", "temporary note to be removed")
    p.flush(30)
    out["recall"] = json.loads(m.handle_tool_call("pgmem_recall", {"query": "peanuts allergy", "k": 3}))
    out["prefetch"] = m.prefetch_all("When is the flight to Lisbon?")
    out["bad_tool"] = json.loads(m.handle_tool_call("pgmem_remember", {"content": "   "}))
    m.on_session_end([])
    m.shutdown_all()
    out["status"] = p.status()
    out["pending_left"] = os.path.exists(os.path.join(os.environ["HERMES_HOME"], "pgmem", "pending.jsonl"))
    out["states"] = states
    print(json.dumps(out))
"""


def test_provider_round_trip_through_hermes_memory_manager(hermes_python: Path, tmp_path: Path, dsn: str,
                                                            admin: psycopg.Connection) -> None:
    home = tmp_path / "hermes-home"
    done = pgmem_cli(hermes_python, "install-plugin", "hermes", "--home", str(home), home=home)
    assert done.returncode == 0, done.stderr

    out = run_py(hermes_python, ROUND_TRIP, home, ROUND_TRIP_DSN=dsn, PGMEM_ROLE="pgmem_gateway",
                 PGMEM_EMBEDDER="pgmem.testing:HashEmbedder", PGMEM_SPACE="hermes-test")

    # database down: errors came back as values and warnings, the turn was kept, then replayed
    assert "not available" in out["down_tool"]["error"]
    assert out["down_prefetch"] == ""
    assert out["down_status"]["state"] == "closed" and out["down_status"]["kept_pending"] == 2
    assert any("could not connect" in w for w in out["down_warnings"])
    assert any("2 writes not yet stored were kept in" in w for w in out["down_warnings"])

    assert out["remember"]["created"] is True
    assert out["recall"]["memories"][0]["content"] == "Alice is allergic to peanuts"
    assert out["recall"]["memories"][0]["score"] is not None
    assert "I am flying to Lisbon on 3 March" in out["prefetch"]
    assert "error" in out["bad_tool"] and "white space" in out["bad_tool"]["error"]
    assert out["status"]["state"] == "closed" and out["status"]["failed_writes"] == 0
    assert out["status"]["queued"] == 0 and out["pending_left"] is False
    assert "ready" in " ".join(out["states"])

    rows = admin.execute("""SELECT user_id, agent_id, session_id, content, metadata FROM pgmem.memories
                            ORDER BY created_at, content""").fetchall()
    by_content = {r[3]: r for r in rows}
    assert {r[0] for r in rows} == {"alice"} and {r[1] for r in rows} == {"hermes"}
    # the turn written while the database was down arrived with the replay
    assert by_content["Remember that my cat is called Miso"][2] == "s0"
    assert by_content["Noted: your cat is Miso."][4] == {"source": "hermes", "kind": "turn", "speaker": "assistant"}
    assert by_content["I am flying to Lisbon on 3 March"][2] == "s1"
    assert by_content["Alice prefers aisle seats"][4] == {"source": "hermes", "kind": "memory", "target": "user"}
    assert "temporary note to be removed" not in by_content
    assert by_content["Alice is allergic to peanuts"][4] == {"topic": "food"}
    events = admin.execute("SELECT event FROM pgmem.history WHERE old_content = 'temporary note to be removed'"
                           ).fetchall()
    assert events == [("DELETE",)]


MIRROR = """\
    import json
    from agent.memory_manager import MemoryManager
    from plugins.memory import load_memory_provider

    def session(session_id, **extra):
        provider = load_memory_provider("pgmem")
        manager = MemoryManager()
        manager.add_provider(provider)
        manager.initialize_all(session_id=session_id, agent_context="primary", **extra)
        return provider, manager

    ok = json.dumps({"success": True})
    p, m = session("t1", platform="telegram", user_id="12345")
    # the built-in memory tool's calls as the agent loop hands them over (run_agent: notify_memory_tool_write)
    m.notify_memory_tool_write(ok, {"action": "add", "target": "user", "content": "Lives in Paris"})
    m.notify_memory_tool_write(ok, {"action": "add", "target": "memory", "content": "Project X ships Friday"})
    m.notify_memory_tool_write(ok, {"action": "add", "target": "memory", "content": "Project Y ships Monday"})
    m.notify_memory_tool_write(ok, {"action": "replace", "target": "user", "old_text": "in Paris",
                                    "content": "Lives in Berlin"})
    m.notify_memory_tool_write(ok, {"action": "remove", "target": "memory", "old_text": "ships"})  # 2 match: ambiguous
    m.notify_memory_tool_write(ok, {"action": "remove", "target": "memory", "old_text": "X ships"})
    m.notify_memory_tool_write(json.dumps({"success": False}), {"action": "remove", "target": "memory",
                                                                "old_text": "Y ships"})  # failed: not mirrored
    p.flush(30)
    out = {"telegram": p.status()}
    m.shutdown_all()
    p, m = session("d1", platform="discord", user_id="12345")
    m.sync_all("hello from discord", "hi", session_id="d1")
    p.flush(30)
    m.shutdown_all()
    p, m = session("n1", platform="telegram")
    out["nobody"] = p.status()
    m.shutdown_all()
    print(json.dumps(out))
"""


def test_mirroring_and_identity_through_hermes_memory_manager(hermes_python: Path, tmp_path: Path, dsn: str,
                                                               admin: psycopg.Connection) -> None:
    home = tmp_path / "hermes-home"
    assert pgmem_cli(hermes_python, "install-plugin", "hermes", "--home", str(home), home=home).returncode == 0
    out = run_py(hermes_python, MIRROR, home, PGMEM_DSN=dsn, PGMEM_ROLE="pgmem_gateway", PGMEM_USER="someone",
                 PGMEM_EMBEDDER="pgmem.testing:HashEmbedder", PGMEM_SPACE="hermes-test")
    rows = admin.execute("SELECT user_id, content, metadata->>'target' FROM pgmem.memories ORDER BY 1, 2").fetchall()
    assert out["telegram"]["user"] == "telegram:12345" and out["telegram"]["skipped_writes"] == 1, (out, rows)
    assert "2 mirrored entries contain 'ships'" in out["telegram"]["last_error"]
    assert out["nobody"]["state"] == "unavailable" and out["nobody"]["user"] is None
    rows = admin.execute("SELECT user_id, content, metadata->>'target' FROM pgmem.memories ORDER BY 1, 2").fetchall()
    assert rows == [("discord:12345", "hello from discord", None), ("discord:12345", "hi", None),
                    ("telegram:12345", "Lives in Berlin", "user"), ("telegram:12345", "Project Y ships Monday", "memory")]
