"""``pgmem serve`` as deployed (deploy/compose.yaml): the schema owned by an ordinary login that ran the
migrations, the service on another ordinary login that is only a member of pgmem_gateway. No superuser
anywhere, so forced row-level security applies to the owner's definer functions too."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from pgmem import migrations

from conftest import dsn_for
from support.service_helpers import api, bootstrap, issue_key, running_service


@pytest.fixture
def production_db(admin, login_role):
    owner = login_role()
    api_login = login_role("pgmem_gateway")
    name = f"pgmem_prod_{uuid.uuid4().hex[:10]}"
    admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(owner)))
    try:
        with psycopg.connect(dsn_for(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")  # a DBA's steps (the migrations' hints say so):
        admin.execute(sql.SQL("GRANT pgmem_api TO {}").format(sql.Identifier(owner)))  # owner of the API (0007)
        migrations.migrate(dsn_for(name, user=owner))
        yield name, owner, api_login
    finally:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_the_service_works_on_ordinary_logins_and_erasure_needs_bypassrls(production_db):
    name, owner, api_login = production_db
    with running_service(dsn_for(name, user=api_login)) as svc:
        b = bootstrap(svc)
        alice = issue_key(b, user="alice", agent="planner")
        bob = issue_key(b, user="bob")
        with api(svc, alice) as c, api(svc, bob) as d:
            mid = c.post("/v1/memories", json={"content": "Alice is vegetarian"}).json()["id"]
            d.post("/v1/memories", json={"content": "Bob likes chess"})
            assert [h["id"] for h in c.post("/v1/search", json={"query": "vegetarian"}).json()["results"]] == [mid]
            assert d.get(f"/v1/memories/{mid}").status_code == 404
            ready = c.get("/readyz")
            assert ready.status_code == 200, ready.text  # migrations read through the owner's definer function
        entity = b.get("/ui/entities/alice")
        assert entity.status_code == 200 and "planner" in entity.text  # service_agents under forced RLS
        entities = b.get("/ui/entities")
        assert "alice" in entities.text and "bob" in entities.text
        b.get("/ui/entities/alice/export")
        page = b.get("/ui/entities/alice")
        r = b.post("/ui/entities/alice/erase", {"confirm": "alice", "csrf": b.csrf(page.text)})
        assert r.status_code == 403 and "BYPASSRLS" in r.text  # the API login has no bypass: the database says so
        with api(svc, alice) as c:
            assert c.get(f"/v1/memories/{mid}").status_code == 200  # nothing was erased
