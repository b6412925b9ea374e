"""What a command pays before it works: the package imports lazily, and the embedded server's migrations are
checked with one query instead of loading yoyo on every command. (Speed itself is measured by bench/cli.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pgmem import migrations

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_cli_loads_no_client_no_numpy_no_model():
    code = ("import sys, pgmem, pgmem.cli; print(' '.join(m for m in ('numpy', 'pgmem.client', 'pgmem.requests', 'pgmem.aio', "
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


def test_a_client_that_made_no_writer_closes_without_importing_it(dsn):
    code = ("import sys; from pgmem import Memory; m = Memory(sys.argv[1], user_id='alice', min_size=1, max_size=1);"
            " m.close(); print('pgmem.writer' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, dsn], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_an_http_endpoint_gets_no_certificate_store_and_https_keeps_verification():
    import ssl

    from pgmem.embedders import OpenAIEmbedder

    plain = OpenAIEmbedder("m", 3, base_url="http://127.0.0.1:9/v1", api_key="k")._http()
    tls = OpenAIEmbedder("m", 3, base_url="https://api.example.com/v1", api_key="k")._http()
    try:
        def context(client):
            return client._transport._pool._ssl_context

        assert context(plain).verify_mode == ssl.CERT_NONE and context(plain).cert_store_stats()["x509_ca"] == 0
        assert context(tls).verify_mode == ssl.CERT_REQUIRED and context(tls).check_hostname
        assert context(tls).cert_store_stats()["x509_ca"] > 0
    finally:
        plain.close()
        tls.close()


def test_the_console_script_marks_trio_absent_and_the_library_does_not():
    code = ("import sys; import pgmem.cli as c; c.app = lambda: None; c.main(); import httpcore._synchronization as s;"
            " print(sys.modules.get('trio', 'unset') is None, s.trio is None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]
    lib = subprocess.run([sys.executable, "-c", "import sys, pgmem, httpx; print(sys.modules.get('trio', 'unset') is None)"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert lib.returncode == 0, lib.stderr
    assert lib.stdout.strip() == "False"
