"""Tests against a live Citus cluster, given by ``PGMEM_CITUS_DSN`` (a superuser's URL of a coordinator with
citus and pgvector in the database, workers added, the settings of docs/scaling.md in place). Without it,
nothing here is collected, so the normal suite and CI never need a cluster.

The session migrates the coordinator (``pgmem migrate``) and distributes it (``pgmem distribute``, which is
idempotent); every test uses user ids of its own, so runs never see each other's rows."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from pgvector.psycopg import register_vector

CITUS_DSN = os.environ.get("PGMEM_CITUS_DSN")
collect_ignore_glob = [] if CITUS_DSN else ["test_*.py"]


@pytest.fixture(scope="session")
def cluster() -> str:
    """The coordinator's superuser URL, migrated and distributed."""
    from pgmem import citus, migrations

    migrations.migrate(CITUS_DSN)
    citus.distribute(CITUS_DSN)
    return CITUS_DSN


@pytest.fixture(scope="session")
def admin(cluster: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(cluster, autocommit=True) as conn:
        register_vector(conn)
        yield conn


@pytest.fixture(scope="session")
def gateway(admin: psycopg.Connection) -> Iterator[str]:
    """A login in pgmem_gateway (created on every node by Citus), dropped at the end."""
    name = f"citus_gw_{uuid.uuid4().hex[:10]}"
    admin.execute(f'CREATE ROLE "{name}" LOGIN')
    admin.execute(f'GRANT pgmem_gateway TO "{name}"')
    yield name
    admin.execute(f'DROP ROLE IF EXISTS "{name}"')


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:10]
