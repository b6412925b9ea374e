"""Regenerate tests/schema_snapshot.sql: the pgmem schema as pg_dump prints it after all migrations.

Run ``python tests/update_schema_snapshot.py`` after changing a migration, and review the diff of the
snapshot with the change. tests/test_migrations.py compares a freshly migrated database with it.

The dump comes from the embedded server's own pg_dump (``--schema-only --schema=pgmem --no-owner
--no-privileges``) over an empty database migrated with ``pgmem.migrations.migrate``, normalised so that it
does not change from run to run (see :func:`normalise`).
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

from pgmem.testing import test_data_dir

HERE = Path(__file__).resolve().parent
SNAPSHOT = HERE / "schema_snapshot.sql"
# The server the test suite of this checkout uses (tests/conftest.py), so running this never touches user data.
TEST_DATA_DIR = test_data_dir(HERE.parent)

_DROP = re.compile(r"^(--|SET |\\restrict |\\unrestrict )")


def normalise(dump: str) -> str:
    """Drop what varies between runs or carries no schema: comment lines (``--``), ``SET`` lines, the
    ``\\restrict``/``\\unrestrict`` lines with random keys that pg_dump 18 emits; collapse runs of blank
    lines; strip trailing white space."""
    out: list[str] = []
    for line in dump.splitlines():
        line = line.rstrip()
        if _DROP.match(line):
            continue
        if not line and (not out or not out[-1]):
            continue
        out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


def dump_schema(dsn: str) -> str:
    """The normalised schema-only dump of schema pgmem in the database at ``dsn``."""
    from pgmem import server

    pg_dump = server.bin_dir() / "pg_dump"
    proc = subprocess.run(
        [str(pg_dump), "--schema-only", "--schema=pgmem", "--no-owner", "--no-privileges", f"--dbname={dsn}"],
        capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"pg_dump failed ({proc.returncode}): {proc.stderr.strip()}")
    return normalise(proc.stdout)


def main() -> int:
    import psycopg
    from psycopg import sql

    from pgmem import migrations, server

    status = server.start(TEST_DATA_DIR)
    name = f"pgmem_snapshot_{uuid.uuid4().hex[:8]}"
    maintenance = status.url("postgres")
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        dsn = status.url(name)
        migrations.migrate(dsn)
        text = dump_schema(dsn)
    finally:
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    old = SNAPSHOT.read_text(encoding="utf-8") if SNAPSHOT.exists() else None
    if old == text:
        print(f"{SNAPSHOT} is up to date")
    else:
        SNAPSHOT.write_text(text, encoding="utf-8")
        print(f"wrote {SNAPSHOT} ({text.count(chr(10))} lines); review it with `git diff {SNAPSHOT.name}`")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main())
