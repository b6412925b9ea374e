"""The attacker's test bench: a database migrated by a schema owner (the embedded server's superuser, or an
ordinary role with CREATEROLE as a DBA would set one up), two users' memories in it, and real LOGIN roles of
each kind an attacker may hold: an agent login bound to alice, an unbound agent login, a gateway login, and a
login with no pgmem role at all. Every statement of the attacks runs on such a login's own connection."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
import psycopg.sql
from pgvector.psycopg import register_vector

from conftest import dsn_for
from pgmem import migrations

OWNERS = ["superuser-owner", "plain-owner"]


@dataclass
class Bench:
    """One migrated database. ``admin``: superuser connection (autocommit) for set-up and for looking at the raw
    tables; ``owner``: the schema owner's role name; ``ids``: memory ids by user; ``roles``: logins made here."""
    dbname: str
    admin: psycopg.Connection
    owner: str
    ids: dict[str, list] = field(default_factory=dict)
    roles: list[str] = field(default_factory=list)

    def dsn(self, user: str = "postgres") -> str:
        return dsn_for(self.dbname, user=user)

    def login(self, kind: str) -> str:
        """A fresh LOGIN role: 'bound' (pgmem_agent, bound to alice), 'agent' (pgmem_agent, unbound),
        'gateway' (pgmem_gateway) or 'nothing' (no pgmem role)."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.admin.execute(f'CREATE ROLE "{name}" LOGIN')
        self.roles.append(name)
        if kind in ("bound", "agent"):
            self.admin.execute(f'GRANT pgmem_agent TO "{name}"')
        elif kind == "gateway":
            self.admin.execute(f'GRANT pgmem_gateway TO "{name}"')
        if kind == "bound":
            with psycopg.connect(self.dsn(self.owner), autocommit=True) as owner:
                owner.execute("SELECT pgmem.bind_role(%s, 'alice')", [name])
        return name

    @contextmanager
    def connect(self, role: str) -> Iterator[psycopg.Connection]:
        with psycopg.connect(self.dsn(role), autocommit=True) as conn:
            register_vector(conn)
            yield conn


def vec(*xs: float):
    import numpy as np

    return np.asarray(xs, dtype=np.float32)


@dataclass(frozen=True)
class BenchTemplate:
    """A database migrated once per session by a schema owner of one kind, with space 't3' (3 dimensions):
    each test's bench is a copy of it (roles are per cluster; each test makes fresh logins of its own)."""
    kind: str
    dbname: str
    owner: str


def make_template(admin: psycopg.Connection, kind: str) -> BenchTemplate:
    """Create and migrate the template of owner ``kind``: the superuser, or an ordinary role with CREATEROLE
    set up as a DBA would (README, For DBAs: pgvector, and the roles' grants)."""
    dbname = f"pgmem_sectmpl_{uuid.uuid4().hex[:10]}"
    owner = "postgres"
    if kind == "plain-owner":
        owner = f"owner_{uuid.uuid4().hex[:10]}"
        admin.execute(f'CREATE ROLE "{owner}" LOGIN CREATEROLE')
        admin.execute(f'CREATE DATABASE "{dbname}" OWNER "{owner}"')
        admin.execute(f'GRANT pgmem_agent, pgmem_gateway, pgmem_api TO "{owner}" WITH ADMIN OPTION')
    else:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    with psycopg.connect(dsn_for(dbname), autocommit=True) as su:
        su.execute("CREATE EXTENSION IF NOT EXISTS vector")
    migrations.migrate(dsn_for(dbname, user=owner))
    with psycopg.connect(dsn_for(dbname, user=owner), autocommit=True) as own:
        own.execute("SELECT pgmem.create_space('t3', 'hand-made-3d', 3)")
    return BenchTemplate(kind, dbname, owner)


def drop_template(template: BenchTemplate, admin: psycopg.Connection) -> None:
    admin.execute(f'DROP DATABASE IF EXISTS "{template.dbname}" WITH (FORCE)')
    if template.owner != "postgres":
        admin.execute(psycopg.sql.SQL("DROP ROLE IF EXISTS {}").format(psycopg.sql.Identifier(template.owner)))


def make_bench(admin: psycopg.Connection, template: BenchTemplate) -> Bench:
    """A copy of ``template`` (its owner, its migrated schema, space 't3') with two memories each for alice and
    bob, written through the API by a gateway."""
    dbname = f"pgmem_sec_{uuid.uuid4().hex[:10]}"
    admin.execute(psycopg.sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER {}").format(
        psycopg.sql.Identifier(dbname), psycopg.sql.Identifier(template.dbname), psycopg.sql.Identifier(template.owner)))
    db = psycopg.connect(dsn_for(dbname), autocommit=True)
    register_vector(db)
    bench = Bench(dbname, db, template.owner)
    gw = bench.login("gateway")
    with bench.connect(gw) as conn:
        for user, texts in {"alice": ["alice secret one", "alice secret two"],
                            "bob": ["bob secret one", "bob secret two"]}.items():
            with conn.transaction():
                conn.execute("SELECT pgmem.act_as(%s)", [user])
                bench.ids[user] = [conn.execute("SELECT id FROM pgmem.add('t3', %s, %s)",
                                                [t, vec(1, i + 1, 0.5)]).fetchone()[0] for i, t in enumerate(texts)]
    return bench


def drop_bench(bench: Bench, admin: psycopg.Connection) -> None:
    """Drop the bench's database and the logins it made (the template's owner stays for the session)."""
    bench.admin.close()
    admin.execute(f'DROP DATABASE IF EXISTS "{bench.dbname}" WITH (FORCE)')
    for role in bench.roles:
        admin.execute(psycopg.sql.SQL("DROP ROLE IF EXISTS {}").format(psycopg.sql.Identifier(role)))
