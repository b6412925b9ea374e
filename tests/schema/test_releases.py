"""Releases and the install path (docs/operations.md, "Releases and migrations"): a release is an entry of
sql/releases.toml, the same version in pyproject.toml and a git tag; at most one migration follows the last
release (the next release's pending one); a new install loads sql/current and records the migrations; a
database at the last release upgrades to the current schema without losing a row; what a rollback drops is
written once, in the rollback file."""

from __future__ import annotations

import re
import tomllib
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import schema_source as src
from conftest import dsn_for
from pgmem import migrations

REPO = Path(__file__).resolve().parents[2]


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def test_releases_name_shipped_migrations_in_order_and_pyproject_says_the_version():
    rels = migrations.releases()
    ids = migrations.migration_ids()
    assert rels, "sql/releases.toml names no release"
    assert [_version_key(r.version) for r in rels] == sorted({_version_key(r.version) for r in rels})
    assert [ids.index(r.last_migration) for r in rels] == sorted({ids.index(r.last_migration) for r in rels})
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    pending = migrations.pending_release()
    later = [i for i in ids if i > rels[-1].last_migration]
    assert len(later) <= 1, f"one migration per release: {later} follow release {rels[-1].version}"
    if pending is None:
        assert version == rels[-1].version, "no pending migration: pyproject.toml says the last release"
    else:
        m = re.fullmatch(r"\d{4}\.pgmem-(\d+\.\d+\.\d+)", pending)
        assert m, f"{pending}: the pending migration is named NNNN.pgmem-<the release it is for>"
        assert _version_key(m.group(1)) > _version_key(rels[-1].version)
        assert re.fullmatch(re.escape(m.group(1)) + r"\.dev\d+", version), \
            f"pyproject.toml says {version}; between releases it is the pending release's .devN"


def test_release_of_names_the_newest_release_a_database_has():
    rels = migrations.releases()
    ids = migrations.migration_ids()
    assert migrations.release_of([]) is None
    assert migrations.release_of(ids) == rels[-1].version
    first = ids[: ids.index(rels[0].last_migration)]
    assert migrations.release_of(first) is None  # a database of main before the first release


def test_what_a_rollback_drops_is_written_once_in_its_file():
    drops = migrations.rollback_drops()
    assert set(drops) <= set(migrations.migration_ids())
    assert "0002.pgmem-core" in drops and "every memory" in drops["0002.pgmem-core"]
    told = migrations.describe_rollback(len(migrations.migration_ids()))
    for mid, what in drops.items():
        assert f"{mid} drops {what}" in told
    one = migrations.describe_rollback(1)
    assert migrations.migration_ids()[-1] in one
    if migrations.migration_ids()[-1] not in drops:
        assert "drops no stored memories" in one
    # docs/operations.md lists the same rollbacks with the same words.
    ops = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    table = set(re.findall(r"^\| `(\d{4}\.[a-z0-9.-]+)` \| (.+?) \|$", ops, flags=re.M))
    assert table == set(drops.items())


@pytest.fixture
def fresh(server_admin):
    made: list[str] = []

    def make() -> str:
        name = f"pgmem_rel_{uuid.uuid4().hex[:10]}"
        server_admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        made.append(name)
        return dsn_for(name)

    yield make
    for name in made:
        server_admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _log(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT migration_id, operation FROM _yoyo_log ORDER BY created_at_utc, migration_id").fetchall()


def test_a_new_install_loads_sql_current_and_records_every_migration(fresh):
    dsn = fresh()
    assert migrations.migrate(dsn) == migrations.migration_ids()
    assert _log(dsn) == [(i, "mark") for i in migrations.migration_ids()]  # loaded, not replayed
    assert migrations.pending(dsn) == [] and migrations.is_current(dsn)
    assert migrations.migrate(dsn) == []


def test_a_database_part_way_upgrades_by_its_pending_migrations(fresh):
    from yoyo import get_backend, read_migrations

    dsn = fresh()
    ids = migrations.migration_ids()
    backend = get_backend(migrations.yoyo_url(dsn))
    everything = read_migrations(str(migrations.sql_path()))
    with backend, backend.lock():
        backend.apply_migrations(backend.to_apply(type(everything)([m for m in everything if m.id <= ids[-3]])))
    assert migrations.migrate(dsn) == ids[-2:]
    assert [op for mid, op in _log(dsn) if mid in ids[-2:]] == ["apply", "apply"]


TABLES = ["memories", "history", "memory_vectors", "turns", "memory_sources", "spaces", "role_bindings",
          "key_locks", "service_users"]


def _rows(dsn: str) -> dict[str, list]:
    with psycopg.connect(dsn) as conn:
        return {t: conn.execute(sql.SQL("SELECT to_jsonb(x)::text FROM pgmem.{} x ORDER BY 1").format(
            sql.Identifier(t))).fetchall() for t in TABLES}


def test_a_database_at_the_last_release_upgrades_without_loss(fresh, login_role):
    """Built by the migrations of the last release (as a database of that release, or of main at its last
    migration, was), holding memories with extra vectors, history, turns with sources, keyed items, a
    binding and a user the service knows: ``pgmem migrate`` brings it to the current schema with every row as it was,
    and the schema equals a new install's."""
    from yoyo import get_backend, read_migrations

    release = migrations.releases()[-1]
    dsn = fresh()
    backend = get_backend(migrations.yoyo_url(dsn))
    everything = read_migrations(str(migrations.sql_path()))
    with backend, backend.lock():
        backend.apply_migrations(backend.to_apply(type(everything)(
            [m for m in everything if m.id <= release.last_migration])))
    agent = login_role("pgmem_agent")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgmem.create_space('t3', 'm', 3)")
        conn.execute("SELECT pgmem.bind_role(%s, 'alice')", [agent])
        conn.execute("SELECT pgmem.service_user_add('alice')")
        with conn.transaction():
            conn.execute("SELECT pgmem.act_as('alice')")
            mid = conn.execute("SELECT id FROM pgmem.add('t3', 'Ada likes tea. She drinks it hot.', '[1,0,0]', "
                               "p_session_id => 's', p_vector_kinds => ARRAY['sentence'], "
                               "p_vectors => ARRAY['[0,1,0]'::vector])").fetchone()[0]
            conn.execute("SELECT * FROM pgmem.update(%s, p_metadata => '{\"k\": 1}')", [mid])
            conn.execute("SELECT * FROM pgmem.append_turn('t3', 's', 'user', 'hello')")
            conn.execute("SELECT * FROM pgmem.put_keyed('t3', ARRAY['ns/a'], ARRAY['a value'], "
                         "ARRAY['[0,0,1]'::vector], ARRAY['{}'::jsonb])")
    before = _rows(dsn)
    assert before["memories"] and before["history"] and before["memory_vectors"] and before["turns"]
    assert migrations.migrate(dsn) == [i for i in migrations.migration_ids() if i > release.last_migration]
    assert _rows(dsn) == before
    new = fresh()
    migrations.migrate(new)
    with psycopg.connect(new, autocommit=True) as conn:  # the space's index and generated statements are schema
        conn.execute("SELECT pgmem.create_space('t3', 'm', 3)")
    assert src.dump_schema(dsn) == src.dump_schema(new)
    with psycopg.connect(dsn_for(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"], user=agent), autocommit=True) as c:
        assert [r[0] for r in c.execute("SELECT content FROM pgmem.search('t3', '[1,0,0]', 5)")][0].startswith("Ada")
