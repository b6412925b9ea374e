"""What a command pays before it works: the package imports lazily, and the embedded server's migrations are
checked with one query instead of loading yoyo on every command. (Speed itself is measured by bench/cli.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pgmem import migrations

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_cli_loads_no_client_no_numpy_no_model():
    code = ("import sys, pgmem, pgmem.cli; print(' '.join(m for m in ('numpy', 'pgmem.client', 'pgmem.aio', "
            "'tokenizers', 'safetensors', 'torch', 'httpx', 'mcp', 'yoyo') if m in sys.modules) or 'none')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "none"


def test_lazy_names_resolve_and_unknown_ones_raise():
    import pgmem

    assert pgmem.Memory.__name__ == "Memory" and pgmem.QueueFull.__module__ == "pgmem.writer"
    assert set(pgmem.__all__) <= set(dir(pgmem))
    try:
        pgmem.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("pgmem.NoSuchThing resolved")


def test_is_current_follows_the_applied_migrations(dsn):
    assert migrations.is_current(dsn)
    migrations.rollback(dsn, count=1)
    assert not migrations.is_current(dsn)
    migrations.migrate(dsn)
    assert migrations.is_current(dsn)


def test_is_current_is_false_where_yoyo_never_ran(dsn):
    import uuid

    import psycopg

    name = f"pgmem_startup_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    empty = psycopg.conninfo.make_conninfo(dsn, dbname=name)
    try:
        assert not migrations.is_current(empty)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name}")
