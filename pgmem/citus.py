"""pgmem on a Citus cluster: the distribution plan (``pgmem distribute``) and the state of a cluster that
:mod:`pgmem.doctor` turns into its cluster checks.

Every user's rows live in one shard group: the nine tables holding user data are hash-distributed by
``user_id`` and colocated, ``spaces`` and ``role_bindings`` are reference tables (a copy on every node).
:func:`distribute` applies that plan to a migrated coordinator, idempotently (docs/scaling.md):

1. checks that the server is a Citus coordinator and that the cluster settings are in place
   (:data:`SETTINGS`, on the coordinator and on every worker; :func:`setting_problems` says which are not);
2. rewrites the row-level security policies of the nine tables without their sub-select
   (``user_id = pgmem.current_user_id()``: Citus refuses subqueries in policies of distributed tables);
3. drops the foreign keys between those tables and to ``spaces`` (making ``spaces`` a reference table while
   tables still reference it would turn them into Citus-local tables), makes ``spaces`` and
   ``role_bindings`` reference tables, distributes the nine tables colocated with ``memories``, and adds the
   keys again;
4. gives search custom plans (``SET plan_cache_mode = force_custom_plan`` on the functions that force
   generic ones, and the generated statements regenerated): Citus cannot route their generic plans;
5. lets the workers act for the user the coordinator resolved: Citus connects to a worker as the current
   role, which inside pgmem's functions is their owner ``pgmem_api``; so ``pgmem_api`` may log in on the
   workers (``LOGIN`` there only) with a random password whose SCRAM verifier every node holds and which
   only the coordinator keeps (``pg_dist_authinfo``); a pgmem_api session acts for the ``pgmem.user_id``
   the coordinator sets with ``SET LOCAL`` (``pgmem.current_user_id``), so the workers' ``pg_hba.conf``
   must ask it for scram-sha-256 (:func:`credential_problems` checks);
5b. puts pgmem's functions on every worker and makes the ``*_for`` calls distributed functions by their
   first argument ``p_user_id``, colocated with ``memories``: Citus delegates each to the worker holding
   that user's rows (:func:`delegation_problems`);
6. records the cluster mode: ``ALTER DATABASE ... SET pgmem.cluster = 'citus'``, which clients read when they
   connect (:data:`pgmem.transport.CLUSTER_SETTING`) to carry the identity in a transaction block, and which
   ``pgmem._build_knn`` reads to generate the search statements with custom plans (Citus cannot route a
   generic plan of them); then regenerates them.

Errors: :class:`pgmem.errors.SchemaError` when the server has no Citus, the schema is not migrated, or a
setting is missing (the message names each setting and node, the hint the command to run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import PgmemError, SchemaError, from_psycopg

REFERENCE_TABLES = ("spaces", "role_bindings")
USER_TABLES = ("memories", "history", "memory_vectors", "tenant_sizes", "turns", "memory_sources", "key_locks",
               "memory_terms", "term_stats")
# Settings every node needs (docs/scaling.md): where, and why.
SETTINGS: dict[str, tuple[str, str, str]] = {
    "citus.enable_unsafe_triggers": ("on", "coordinator",
                                     "the tables carry triggers (history, content hash, vector checks)"),
    "citus.propagate_set_commands": ("local", "coordinator",
                                     "SET LOCAL of pgmem.user_id, pgmem.actor, pgmem.event and hnsw.* reaches "
                                     "the workers"),
    "citus.allow_nested_distributed_execution": ("on", "workers",
                                                 "the policies read pgmem.role_bindings (a reference table) "
                                                 "inside a shard's query"),
}
CLUSTER_VALUE = "citus"
# The foreign keys of the user tables as the schema defines them (sql/current): distribute drops them before
# making spaces a reference table and adds them again afterwards, also on a run after one that stopped between.
FOREIGN_KEYS: dict[str, tuple[str, str]] = {
    "memories_space_fkey": ("memories", "FOREIGN KEY (space_id) REFERENCES pgmem.spaces(space_id)"),
    "memory_sources_memory_fkey": ("memory_sources", "FOREIGN KEY (user_id, memory_id) REFERENCES "
                                                     "pgmem.memories(user_id, id) ON DELETE CASCADE"),
    "memory_vectors_memory_fkey": ("memory_vectors", "FOREIGN KEY (user_id, memory_id) REFERENCES "
                                                     "pgmem.memories(user_id, id) ON DELETE CASCADE"),
    "tenant_sizes_space_fkey": ("tenant_sizes", "FOREIGN KEY (space_id) REFERENCES pgmem.spaces(space_id)"),
    "turns_space_fkey": ("turns", "FOREIGN KEY (space_id) REFERENCES pgmem.spaces(space_id)"),
}

SQL_HAS_CITUS = "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'citus'"
SQL_PARTITIONS = """
SELECT c.relname, p.partmethod::text AS method, p.colocationid, a.attname AS column
FROM pg_dist_partition p
JOIN pg_catalog.pg_class c ON c.oid = p.logicalrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = (
    CASE WHEN p.partmethod = 'h' THEN pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) END)
WHERE n.nspname = 'pgmem'
"""
# Foreign keys of the nine tables (to spaces, or to memories), as pg_get_constraintdef gives them.
SQL_FOREIGN_KEYS = """
SELECT c.relname AS "table", k.conname AS name, pg_catalog.pg_get_constraintdef(k.oid) AS definition
FROM pg_catalog.pg_constraint k
JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgmem' AND k.contype = 'f' AND c.relname = ANY (%s)
ORDER BY c.relname, k.conname
"""
SQL_POLICIES = """
SELECT tablename, policyname, qual FROM pg_catalog.pg_policies
WHERE schemaname = 'pgmem' AND tablename = ANY (%s) ORDER BY tablename
"""
# pgmem's functions that force generic plans (search's SET plan_cache_mode): Citus cannot route a generic
# plan of their statements, so on a cluster they get custom plans.
SQL_GENERIC_PLANS = """
SELECT p.oid::regprocedure::text AS signature FROM pg_catalog.pg_proc p
WHERE p.pronamespace = 'pgmem'::regnamespace AND 'plan_cache_mode=force_generic_plan' = ANY (p.proconfig)
ORDER BY 1
"""
# The calls a coordinator delegates to a worker (sql/current/95-cluster.sql): their distribution, if any.
SQL_DELEGATED = """
SELECT p.oid::regprocedure::text AS signature, o.distribution_argument_index AS arg, o.colocationid,
       (SELECT d.colocationid FROM pg_dist_partition d WHERE d.logicalrelid = 'pgmem.memories'::regclass) AS memories
FROM pg_catalog.pg_proc p
LEFT JOIN pg_catalog.pg_dist_object o ON o.classid = 'pg_catalog.pg_proc'::regclass AND o.objid = p.oid
WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proname LIKE '%\\_for' AND p.proargnames[1] = 'p_user_id'
ORDER BY 1
"""
# pgmem's functions that Citus has not put on the workers (it leaves out those over a table's row type, such
# as pgmem._checked_space): a call delegated to a worker runs pgmem's functions there.
SQL_LOCAL_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature FROM pg_catalog.pg_proc p
WHERE p.pronamespace = 'pgmem'::regnamespace AND NOT EXISTS (
    SELECT 1 FROM pg_dist_object o WHERE o.classid = 'pg_catalog.pg_proc'::regclass AND o.objid = p.oid)
ORDER BY 1
"""
SQL_WORKER_SETTING = "SELECT nodename, nodeport, success, result FROM run_command_on_workers(%s)"
SQL_CLUSTER_FLAG = "SELECT current_setting('pgmem.cluster', true) AS flag"


@dataclass
class State:
    """What :func:`state` found: the Citus version (None: no Citus), each pgmem table's distribution
    (``'reference'``, ``'distributed by user_id'``, ...; absent: local), the colocation id of each distributed
    table, the recorded cluster flag, and the foreign keys of the user tables (name -> (table, definition))."""

    citus: str | None
    tables: dict[str, str] = field(default_factory=dict)
    colocation: dict[str, int] = field(default_factory=dict)
    flag: str | None = None
    foreign_keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    subselect_policies: list[str] = field(default_factory=list)
    user_tables: tuple[str, ...] = USER_TABLES  # those of USER_TABLES the schema has (a rolled-back one has fewer)

    @property
    def distributed(self) -> bool:
        """Whether the plan is complete: both reference tables and the user tables colocated by user_id."""
        return (all(self.tables.get(t) == "reference" for t in REFERENCE_TABLES)
                and all(self.tables.get(t) == "distributed by user_id" for t in self.user_tables)
                and len({self.colocation.get(t) for t in self.user_tables}) == 1)


def citus_version(conn) -> str | None:
    """The installed Citus extension's version in this database, or None."""
    row = conn.execute(SQL_HAS_CITUS).fetchone()
    return None if row is None else (row["extversion"] if isinstance(row, dict) else row[0])


def _rows(conn, sql: str, params: Any = None) -> list[dict]:
    from psycopg.rows import dict_row

    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, params).fetchall()


def state(conn) -> State:
    """The distribution state of schema pgmem on the server of ``conn`` (read-only)."""
    version = citus_version(conn)
    st = State(version)
    if version is None:
        return st
    for r in _rows(conn, SQL_PARTITIONS):
        if r["method"] == "n":
            st.tables[r["relname"]] = "reference"
        elif r["method"] == "h":
            st.tables[r["relname"]] = f"distributed by {r['column']}"
            st.colocation[r["relname"]] = r["colocationid"]
        else:
            st.tables[r["relname"]] = "citus local"
    st.flag = _rows(conn, SQL_CLUSTER_FLAG)[0]["flag"]
    st.user_tables = tuple(t for t in USER_TABLES
                           if _rows(conn, "SELECT to_regclass(%s) IS NOT NULL AS ok", (f"pgmem.{t}",))[0]["ok"])
    st.foreign_keys = {r["name"]: (r["table"], r["definition"])
                       for r in _rows(conn, SQL_FOREIGN_KEYS, (list(USER_TABLES),))}
    st.subselect_policies = [r["tablename"] for r in _rows(conn, SQL_POLICIES, (list(USER_TABLES),))
                             if "SELECT" in (r["qual"] or "")]
    return st


def setting_problems(conn) -> list[str]:
    """The cluster settings of :data:`SETTINGS` that are not in place, one line each (node and value), read
    on the coordinator and, through ``run_command_on_workers``, on every worker. Empty when all are set.
    A role that may not run commands on the workers gets one line saying so."""
    import psycopg

    problems = []
    for name, (want, where, why) in SETTINGS.items():
        have = _rows(conn, "SELECT current_setting(%s, true) AS v", (name,))[0]["v"]
        if where == "coordinator" and have != want:
            problems.append(f"{name} is {have or 'unset'} on the coordinator, needs {want} ({why})")
        if where == "workers":
            try:
                with conn.transaction():
                    rows = _rows(conn, SQL_WORKER_SETTING, (f"SELECT current_setting('{name}')",))
            except psycopg.Error as exc:
                problems.append(f"{name}: cannot read it on the workers ({from_psycopg(exc).message})")
                continue
            for r in rows:
                if not r["success"] or r["result"] != want:
                    problems.append(f"{name} is {r['result'] if r['success'] else 'unreadable'} on worker "
                                    f"{r['nodename']}:{r['nodeport']}, needs {want} ({why})")
    return problems


# pgmem_api's LOGIN and the digest of its password verifier, on a node (superusers read pg_authid).
SQL_API_ROLE = ("SELECT r.rolcanlogin::text || ':' || coalesce(md5(r.rolpassword), '') FROM pg_catalog.pg_authid r "
                "WHERE r.rolname = 'pgmem_api'")


def api_role_problems(conn) -> list[str]:
    """What keeps the workers from acting for the coordinator's user: pgmem_api must be able to log in on
    every worker (there pgmem.current_user_id() reads the pgmem.user_id the coordinator set), with the password
    verifier the coordinator's pgmem_api holds (Citus copies a role to a worker as the coordinator has it, for
    example to a node added later: NOLOGIN, and the coordinator's verifier)."""
    import psycopg

    problems = []
    try:
        with conn.transaction():
            mine = conn.execute(SQL_API_ROLE).fetchone()
            rows = _rows(conn, SQL_WORKER_SETTING, (SQL_API_ROLE,))
    except psycopg.Error as exc:
        return problems + [f"cannot read pgmem_api on the workers ({from_psycopg(exc).message})"]
    digest = (list(mine.values())[0] if isinstance(mine, dict) else mine[0]).split(":", 1)[1] if mine else ""
    for r in rows:
        node = f"{r['nodename']}:{r['nodeport']}"
        login, _, theirs = (r["result"] or "").partition(":") if r["success"] else ("", "", "")
        if login != "true":
            problems.append(f"pgmem_api may not log in on worker {node} (Citus connects as the functions' owner; "
                            "pgmem distribute sets LOGIN there)")
        elif not digest or theirs != digest:
            problems.append(f"pgmem_api's password on worker {node} is not the one the coordinator set (run pgmem "
                            "distribute)")
    return problems


# pgmem_api's secret on the cluster: the coordinator keeps the password in pg_dist_authinfo (readable by
# superusers only, and not copied to the workers); the workers hold only its SCRAM-SHA-256 verifier.
API_ROLE = "pgmem_api"
SQL_AUTHINFO = ("SELECT nodeid, authinfo FROM pg_catalog.pg_dist_authinfo WHERE rolename = 'pgmem_api' "
                "ORDER BY nodeid")
# On a worker: the authentication of the first pg_hba.conf rule that a connection of pgmem_api to this
# database would match, per connection type (local socket, TCP). Addresses are not compared: a rule for any
# address counts, which errs on the side of reporting trust.
SQL_WORKER_HBA = """SELECT coalesce(string_agg(k || '=' || m || ':' || l, ' ' ORDER BY k), '') FROM (
    SELECT DISTINCT ON (k) k, r.auth_method AS m, r.line_number AS l FROM (
        SELECT CASE WHEN h.type = 'local' THEN 'local' ELSE 'host' END AS k, h.* FROM pg_catalog.pg_hba_file_rules h
        WHERE h.error IS NULL AND (h.user_name && ARRAY['pgmem_api', 'all'])
          AND (h.database && ARRAY[current_database()::text, 'all'])) r
    ORDER BY k, r.rule_number) f"""
# Authentication methods that prove who connects (a password's SCRAM exchange, a certificate, Kerberos).
STRONG_AUTH = ("scram-sha-256", "cert", "gss", "sspi", "reject")


def scram_verifier(password: str, iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for ``password`` (RFC 5802/7677, PostgreSQL's
    ``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` text): ``ALTER ROLE ... PASSWORD`` with it
    sets the password without sending it."""
    import base64
    import hashlib
    import hmac
    import secrets

    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(hashlib.sha256(client_key).digest())}:{b64(server_key)}"


def credential_problems(conn) -> list[str]:
    """What keeps the workers from trusting only the coordinator for ``pgmem_api``, one line each: no
    password for pgmem_api in the coordinator's ``pg_dist_authinfo``, or a worker whose ``pg_hba.conf`` lets
    pgmem_api in without proving it (the first rule matching it uses trust, password, md5, peer or ident)."""
    import psycopg

    problems = []
    rows = _rows(conn, SQL_AUTHINFO)
    if not any("password=" in r["authinfo"] for r in rows):
        problems.append("the coordinator keeps no password for pgmem_api in pg_dist_authinfo (pgmem distribute "
                        "sets one)")
    try:
        with conn.transaction():
            hba = _rows(conn, SQL_WORKER_SETTING, (SQL_WORKER_HBA,))
    except psycopg.Error as exc:
        return problems + [f"cannot read pg_hba.conf on the workers ({from_psycopg(exc).message})"]
    for r in hba:
        node = f"{r['nodename']}:{r['nodeport']}"
        if not r["success"]:
            problems.append(f"cannot read pg_hba.conf on worker {node} ({r['result']})")
            continue
        seen = dict(part.split("=", 1) for part in r["result"].split())
        for kind in ("local", "host"):
            method, _, line = seen.get(kind, "reject:0").partition(":")
            if method not in STRONG_AUTH:
                problems.append(f"pg_hba.conf line {line} of worker {node} lets pgmem_api in by {method} ({kind} "
                                "connections): any process that reaches the worker can act for any user there; "
                                "put `" + ("local" if kind == "local" else "host") + " all pgmem_api "
                                + ("" if kind == "local" else "<coordinator address>/32 ")
                                + "scram-sha-256` above it (docs/scaling.md)")
    return problems


def _set_api_credential(conn, rotate: bool) -> None:
    """pgmem_api's password on the cluster. With ``rotate``, a new random one: its SCRAM verifier on the
    coordinator's pgmem_api (which stays NOLOGIN; Citus copies the role with it to every worker, now and to
    nodes added later), the password itself in the coordinator's pg_dist_authinfo (nodeid 0: every node).
    Then, in every case, LOGIN and that verifier on every worker (the role as the coordinator has it, LOGIN
    added on the workers only)."""
    import secrets

    if rotate:
        password = secrets.token_urlsafe(32)
        conn.execute(f"ALTER ROLE pgmem_api PASSWORD '{scram_verifier(password)}'")
        with conn.transaction():
            conn.execute("DELETE FROM pg_catalog.pg_dist_authinfo WHERE rolename = 'pgmem_api'")
            conn.execute("INSERT INTO pg_catalog.pg_dist_authinfo (nodeid, rolename, authinfo) "
                         "VALUES (0, 'pgmem_api', %s)", (f"password={password}",))
    verifier = _rows(conn, "SELECT rolpassword FROM pg_catalog.pg_authid WHERE rolname = 'pgmem_api'")[0]["rolpassword"]
    for r in _rows(conn, SQL_WORKER_SETTING,
                   ("SET citus.enable_alter_role_propagation = off; "
                    f"ALTER ROLE pgmem_api LOGIN PASSWORD '{verifier}'",)):
        if not r["success"]:
            raise SchemaError(f"cannot let pgmem_api log in on worker {r['nodename']}:{r['nodeport']}: {r['result']}")


def delegation_problems(conn) -> list[str]:
    """The signatures of the ``*_for`` calls (sql/current/95-cluster.sql) that Citus would not delegate to the
    worker holding their user's rows: not distributed by their first argument ``p_user_id``, colocated with
    ``pgmem.memories``."""
    return [r["signature"] for r in _rows(conn, SQL_DELEGATED)
            if r["arg"] != 0 or r["colocationid"] is None or r["colocationid"] != r["memories"]]


def settings_hint(problems: list[str]) -> str:
    """What to run on the nodes that :func:`setting_problems` names."""
    return ("on each node named, as a superuser: ALTER SYSTEM SET <setting> = <value>; SELECT pg_reload_conf(); "
            "(docs/scaling.md lists the settings)")


def distribute(dsn: str) -> list[str]:
    """Apply the distribution plan to the migrated coordinator at ``dsn`` (a superuser's URL); returns the
    steps taken, empty when the schema was already distributed and recorded. Idempotent. Raises
    :class:`SchemaError` (no Citus, schema not migrated, settings missing) before changing anything."""
    import psycopg
    from psycopg.rows import dict_row

    try:
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            return _distribute(conn)
    except PgmemError:
        raise
    except psycopg.Error as exc:
        raise from_psycopg(exc) from exc


def _distribute(conn) -> list[str]:
    st = state(conn)
    if st.citus is None:
        raise SchemaError("this server has no Citus: pgmem distribute runs on a Citus coordinator",
                          hint="on a single PostgreSQL there is nothing to distribute; see docs/scaling.md")
    if conn.execute("SELECT to_regclass('pgmem.memories') AS t").fetchone()["t"] is None:
        raise SchemaError("schema pgmem is not migrated on this coordinator", hint="run pgmem migrate first")
    problems = setting_problems(conn)
    if problems:
        raise SchemaError("the cluster is not ready for pgmem: " + "; ".join(problems), hint=settings_hint(problems))
    done: list[str] = []
    # 1. Policies without a sub-select.
    for table in st.subselect_policies:
        conn.execute(f"ALTER POLICY {table}_tenant ON pgmem.{table} USING (user_id = pgmem.current_user_id()) "
                     "WITH CHECK (user_id = pgmem.current_user_id())")
        done.append(f"policy {table}_tenant without sub-select")
    # 2. Keys off, reference and distributed tables, keys on again.
    if not st.distributed:
        for name, (table, _) in st.foreign_keys.items():
            conn.execute(f"ALTER TABLE pgmem.{table} DROP CONSTRAINT {name}")
        for table in REFERENCE_TABLES:
            if st.tables.get(table) != "reference":
                conn.execute("SELECT create_reference_table(%s)", (f"pgmem.{table}",))
                done.append(f"reference table pgmem.{table}")
        for table in st.user_tables:
            if st.tables.get(table) != "distributed by user_id":
                colocate = "default" if table == "memories" else "pgmem.memories"
                # The rows a table holds already are copied into its shards: with its triggers off, or the
                # history trigger of memories would write to a history that has no shards yet (and the
                # content triggers rewrite rows that were checked when they were written).
                conn.execute(f"ALTER TABLE pgmem.{table} DISABLE TRIGGER USER")
                conn.execute("SELECT create_distributed_table(%s, 'user_id', colocate_with => %s)",
                             (f"pgmem.{table}", colocate))
                conn.execute(f"ALTER TABLE pgmem.{table} ENABLE TRIGGER USER")
                done.append(f"pgmem.{table} distributed by user_id")
    # Every foreign key of the schema, also after a run that stopped once it had dropped them.
    have = state(conn).foreign_keys if not st.distributed else st.foreign_keys
    missing = {n: k for n, k in FOREIGN_KEYS.items() if n not in have}
    for name, (table, definition) in missing.items():
        # One constraint per ALTER TABLE: Citus refuses a constraint added with other subcommands.
        conn.execute(f"ALTER TABLE pgmem.{table} ADD CONSTRAINT {name} {definition}")
    if missing:
        done.append("foreign keys " + ", ".join(sorted(missing)) + " added")
    # 3. The workers act for the coordinator's user, and know it by its password: pgmem_api may log in on
    # the workers only (the coordinator's stays NOLOGIN), with a password the coordinator alone keeps.
    kept = any("password=" in r["authinfo"] for r in _rows(conn, SQL_AUTHINFO))
    has_verifier = _rows(conn, "SELECT rolpassword IS NOT NULL AS v FROM pg_catalog.pg_authid "
                               "WHERE rolname = 'pgmem_api'")[0]["v"]
    if not (kept and has_verifier):
        _set_api_credential(conn, rotate=True)
        done.append("pgmem_api's password: a new one, kept in the coordinator's pg_dist_authinfo")
    if api_role_problems(conn):
        _set_api_credential(conn, rotate=False)
        done.append("pgmem_api may log in on the workers (with the coordinator's password)")
    # 4. Function call delegation: each *_for call runs on the worker holding its user's shard group.
    local = [r["signature"] for r in _rows(conn, SQL_LOCAL_FUNCTIONS)]
    for sig in local:
        conn.execute("SELECT create_distributed_function(%s)", (sig,))
    if local:
        done.append("on every worker: " + ", ".join(g.split("(")[0] for g in local))
    undelegated = delegation_problems(conn)
    for sig in undelegated:
        conn.execute("SELECT create_distributed_function(%s, 'p_user_id', colocate_with => 'pgmem.memories')", (sig,))
    if undelegated:
        done.append("delegated to the user's worker: " + ", ".join(g.split("(")[0] for g in undelegated))
    # 5. Custom plans for the functions that force generic ones (a later migration that redefines such a
    # function sets it back: doctor then says so, and distribute fixes it again).
    generic = [r["signature"] for r in conn.execute(SQL_GENERIC_PLANS).fetchall()]
    for sig in generic:
        if not sig.startswith(("pgmem._knn(", "pgmem._exact_ids(")):  # generated: rebuilt below
            conn.execute(f"ALTER FUNCTION {sig} SET plan_cache_mode = force_custom_plan")
    if generic:
        conn.execute(f"SET pgmem.cluster = '{CLUSTER_VALUE}'")
        conn.execute("SELECT pgmem._build_knn()")
        done.append("custom plans for " + ", ".join(g.split("(")[0] for g in generic))
    # 6. The cluster mode clients read.
    if st.flag != CLUSTER_VALUE:
        db = conn.execute("SELECT current_database() AS d").fetchone()["d"]
        conn.execute(f"ALTER DATABASE \"{db}\" SET pgmem.cluster = '{CLUSTER_VALUE}'")
        done.append(f"cluster mode recorded (ALTER DATABASE {db} SET pgmem.cluster = '{CLUSTER_VALUE}')")
    return done


def generic_plans(conn) -> list[str]:
    """The pgmem functions that force generic plans, which Citus cannot route (``pgmem distribute`` gives
    them custom plans): their names, empty when none does."""
    return [r["signature"].split("(")[0] for r in _rows(conn, SQL_GENERIC_PLANS)]
