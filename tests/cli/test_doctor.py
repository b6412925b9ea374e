"""`pgmem doctor`: a healthy database passes every check and keeps nothing of the probe; RLS turned off,
a pending migration and an unusable embedder are reported with the right kind of fault and exit code."""

from __future__ import annotations

import json

import pytest
from conftest import dsn_for
from typer.testing import CliRunner

import pgmem.embedders
from pgmem import doctor
from pgmem.cli import app
from pgmem.testing import HashEmbedder

runner = CliRunner()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for name in ("PGMEM_DSN", "PGMEM_USER", "PGMEM_AGENT", "PGMEM_SPACE", "PGMEM_ROLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("PGMEM_JOURNAL_DIR", str(tmp_path / "journal"))  # never the real per-user directory


class BrokenEmbedder:
    """An embedding provider that is down."""

    model_name = "pgmem-testing-hash-64"
    dims = 64

    def embed(self, texts):
        raise ConnectionError("embeddings endpoint http://127.0.0.1:9/v1 refused the connection")


@pytest.fixture
def use_embedder(monkeypatch):
    """use_embedder(e): the CLI's configured embedder (pgmem.embedders.default_embedder) becomes ``e``."""
    def use(emb) -> None:
        monkeypatch.setattr(pgmem.embedders, "default_embedder", lambda: emb)
    return use


@pytest.fixture
def doctor_cli(dsn):
    def run(*args: str):
        result = runner.invoke(app, ["doctor", "--dsn", dsn, "--role", "pgmem_gateway", "--space", "t64", "--json",
                                     *args])
        return result, json.loads(result.stdout)
    return run


def _raw(admin) -> tuple:
    """Rows of every table holding memories, as the superuser sees them (RLS bypassed)."""
    return tuple(admin.execute(f"SELECT count(*) FROM pgmem.{t}").fetchone()[0]
                 for t in ("memories", "history", "memory_vectors", "spaces"))


def _by_name(report) -> dict:
    return {c["name"]: c for c in report["checks"]}


def test_healthy_database_passes_and_keeps_nothing(alice, admin, doctor_cli, use_embedder):
    alice.add("Alice prefers window seats")
    use_embedder(HashEmbedder(64))
    before = _raw(admin)
    result, report = doctor_cli()
    assert result.exit_code == 0, result.stdout
    assert report["healthy"] and report["exit_code"] == 0
    checks = _by_name(report)
    assert list(checks) == ["connection", "server", "pgvector", "migrations", "rls", "roles", "indexes", "space",
                            "embedder", "function probe", "journals"]
    assert all(c["ok"] for c in report["checks"]), report
    assert "memories" in checks["rls"]["detail"] and "memories_space_" in checks["indexes"]["detail"]
    assert "embedder's vector" in checks["function probe"]["detail"]
    assert _raw(admin) == before
    assert admin.execute("SELECT count(*) FROM pgmem.history WHERE user_id = %s",
                         (doctor.PROBE_USER,)).fetchone()[0] == 0

    # a space that does not exist yet: the probe uses a temporary space, rolled back too
    result = runner.invoke(app, ["doctor", "--dsn", alice.dsn, "--role", "pgmem_gateway", "--space", "nothing-yet"])
    assert result.exit_code == 0, result.stdout
    assert "temporary" in result.stdout and "FAIL" not in result.stdout
    assert _raw(admin) == before


def test_bound_agent_login_probes_as_its_own_user(alice, admin, login_role):
    alice.add("Alice prefers window seats")
    agent = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.bind_role(%s, 'alice')", (agent,))
    before = _raw(admin)
    checks = {c.name: c for c in doctor.run_checks(dsn_for(admin.info.dbname, user=agent), space="t64",
                                                   embedder=HashEmbedder(64))}
    assert checks["function probe"].ok, checks["function probe"]
    assert "bound user 'alice'" in checks["function probe"].detail
    assert _raw(admin) == before


def test_rls_off_is_an_infrastructure_fault(alice, admin, doctor_cli, use_embedder):
    use_embedder(HashEmbedder(64))
    admin.execute("ALTER TABLE pgmem.memory_vectors NO FORCE ROW LEVEL SECURITY")
    admin.execute("ALTER TABLE pgmem.history DISABLE ROW LEVEL SECURITY")
    result, report = doctor_cli()
    assert result.exit_code == 1 and report["exit_code"] == 1
    rls = _by_name(report)["rls"]
    assert not rls["ok"] and rls["kind"] == "infrastructure"
    assert "history (not enabled)" in rls["detail"] and "memory_vectors (not forced)" in rls["detail"]
    assert [c["name"] for c in report["checks"] if not c["ok"]] == ["rls"]


def test_a_function_owner_that_can_log_in_is_an_infrastructure_fault(alice, admin, doctor_cli, use_embedder):
    """The deployment files named the service's login pgmem_api, the owner of the SECURITY DEFINER functions:
    that login could read every tenant's rows directly."""
    use_embedder(HashEmbedder(64))
    admin.execute("ALTER ROLE pgmem_api LOGIN")
    try:
        result, report = doctor_cli()
    finally:
        admin.execute("ALTER ROLE pgmem_api NOLOGIN")
    assert result.exit_code == 1
    roles = _by_name(report)["roles"]
    assert not roles["ok"] and "NOLOGIN" in roles["detail"]
    assert [c["name"] for c in report["checks"] if not c["ok"]] == ["roles"]


def test_embedder_faults_exit_2_and_the_function_probe_still_runs(alice, admin, doctor_cli, use_embedder):
    alice.add("Alice prefers window seats")
    before = _raw(admin)
    for emb, expected in ((BrokenEmbedder(), "refused the connection"),
                          (HashEmbedder(32), "expected 64 dimensions (space 't64'), the embedder gives 32")):
        use_embedder(emb)
        result, report = doctor_cli()
        assert result.exit_code == 2, report
        checks = _by_name(report)
        assert not checks["embedder"]["ok"] and checks["embedder"]["kind"] == "embedding"
        assert expected in checks["embedder"]["detail"]
        assert checks["function probe"]["ok"] and "stand-in vector" in checks["function probe"]["detail"]
        assert [c["name"] for c in report["checks"] if not c["ok"]] == ["embedder"]
    assert _raw(admin) == before


def test_pending_migration_and_readable_output(alice, admin, use_embedder):
    use_embedder(HashEmbedder(64))
    last = admin.execute("SELECT migration_id FROM _yoyo_migration ORDER BY applied_at_utc DESC LIMIT 1").fetchone()[0]
    admin.execute("DELETE FROM _yoyo_migration WHERE migration_id = %s", (last,))
    result = runner.invoke(app, ["doctor", "--dsn", alice.dsn, "--role", "pgmem_gateway", "--space", "t64"])
    assert result.exit_code == 1
    line = next(ln for ln in result.stdout.splitlines() if "migrations" in ln)
    assert "FAIL" in line and f"pending: {last}" in line


def test_unreachable_database_is_an_infrastructure_fault():
    checks = doctor.run_checks("postgresql://nobody@/pgmem?host=/nonexistent-socket-dir", embedder=HashEmbedder(8))
    assert [(c.name, c.ok, c.kind) for c in checks] == [("connection", False, "infrastructure"),
                                                        ("embedder", True, "embedding")]
    assert doctor.exit_code(checks) == 1


def test_a_gateway_login_passes_doctor_on_a_healthy_install(alice, admin, login_role, use_embedder):
    """The headline example of docs/operations.md: `pgmem doctor --dsn postgresql://gateway@...`. A gateway
    may not read yoyo's table (nor, by design, any table): that check says so instead of failing."""
    alice.add("Alice likes tea")
    use_embedder(HashEmbedder(64))
    gateway = login_role("pgmem_gateway")
    result = runner.invoke(app, ["doctor", "--dsn", dsn_for(admin.info.dbname, user=gateway), "--space", "t64",
                                 "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 0, report
    checks = _by_name(report)
    assert all(c["ok"] for c in report["checks"]), report
    assert checks["migrations"]["detail"].startswith("not visible to this role")
    assert gateway in checks["migrations"]["detail"]
    assert checks["space"]["detail"].startswith("t64: model pgmem-testing-hash-64")
    assert "in space t64 " in checks["function probe"]["detail"]
    readable = runner.invoke(app, ["doctor", "--dsn", dsn_for(admin.info.dbname, user=gateway), "--space", "t64"])
    assert readable.exit_code == 0 and "not visible to this role" in readable.stdout


def test_the_rls_check_does_not_depend_on_table_grants(alice, admin):
    """Agents and gateways are losing every table privilege (API functions only): the tenant tables are
    found from the catalog all the same."""
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(admin.info.dsn, autocommit=True, row_factory=dict_row) as conn:
        before = doctor._rls_check(conn, True)
        admin.execute("REVOKE ALL ON ALL TABLES IN SCHEMA pgmem FROM pgmem_agent, pgmem_gateway")
        after = doctor._rls_check(conn, True)
    assert before.ok and after == before
    for table in ("memories", "history", "memory_vectors", "turns", "memory_sources", "tenant_sizes", "key_locks"):
        assert table in after.detail
    assert "role_bindings" not in after.detail
