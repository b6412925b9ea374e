"""The test harness itself (tests/conftest.py): collecting the suite starts no server, and the test server runs
without durability while each test still gets a database of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg

from conftest import NOT_DURABLE, dsn_for

ROOT = Path(__file__).resolve().parents[2]


def test_collecting_the_suite_starts_no_server(tmp_path):
    data_dir = tmp_path / "pgdata"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/search", "tests/schema"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PGMEM_TEST_DATA_DIR": str(data_dir)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert " collected" in proc.stdout or "tests collected" in proc.stdout
    assert not data_dir.exists(), "pytest --collect-only initialised or started a PostgreSQL"


def test_the_test_server_is_not_durable_and_each_test_has_its_own_database(dsn, admin):
    settings = dict(admin.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", [list(NOT_DURABLE)]))
    assert settings == NOT_DURABLE
    me = admin.info.dbname
    with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
        assert conn.execute("SELECT datistemplate FROM pg_database WHERE datname = %s", [me]).fetchone() == (False,)
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone() == (0,)
    admin.execute("SELECT pgmem.create_space('own', 'm', 3)")  # written here, gone for the next test
