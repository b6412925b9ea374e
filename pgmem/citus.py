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
   workers (``LOGIN`` there only); a pgmem_api session acts for the ``pgmem.user_id`` the coordinator
   sets with ``SET LOCAL`` (``pgmem.current_user_id``);
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

    @property
    def distributed(self) -> bool:
        """Whether the plan is complete: both reference tables and the nine user tables colocated by user_id."""
        return (all(self.tables.get(t) == "reference" for t in REFERENCE_TABLES)
                and all(self.tables.get(t) == "distributed by user_id" for t in USER_TABLES)
                and len({self.colocation.get(t) for t in USER_TABLES}) == 1)


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


def api_role_problems(conn) -> list[str]:
    """What keeps the workers from acting for the coordinator's user: pgmem_api must be able to log in on
    every worker (there pgmem.current_user_id() reads the pgmem.user_id the coordinator set)."""
    import psycopg

    problems = []
    try:
        with conn.transaction():
            rows = _rows(conn, SQL_WORKER_SETTING,
                         ("SELECT rolcanlogin FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_api'",))
    except psycopg.Error as exc:
        return problems + [f"cannot read pgmem_api on the workers ({from_psycopg(exc).message})"]
    for r in rows:
        if not r["success"] or r["result"] != "t":
            problems.append(f"pgmem_api may not log in on worker {r['nodename']}:{r['nodeport']} (Citus connects "
                            "as the functions' owner; pgmem distribute sets LOGIN there)")
    return problems


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
        keys = dict(st.foreign_keys)
        for name, (table, _) in keys.items():
            conn.execute(f"ALTER TABLE pgmem.{table} DROP CONSTRAINT {name}")
        for table in REFERENCE_TABLES:
            if st.tables.get(table) != "reference":
                conn.execute("SELECT create_reference_table(%s)", (f"pgmem.{table}",))
                done.append(f"reference table pgmem.{table}")
        for table in USER_TABLES:
            if st.tables.get(table) != "distributed by user_id":
                colocate = "default" if table == "memories" else "pgmem.memories"
                conn.execute("SELECT create_distributed_table(%s, 'user_id', colocate_with => %s)",
                             (f"pgmem.{table}", colocate))
                done.append(f"pgmem.{table} distributed by user_id")
        for name, (table, definition) in keys.items():
            # One constraint per ALTER TABLE: Citus refuses a constraint added with other subcommands.
            conn.execute(f"ALTER TABLE pgmem.{table} ADD CONSTRAINT {name} {definition}")
        if keys:
            done.append("foreign keys " + ", ".join(sorted(keys)) + " dropped and added again")
    # 3. The workers act for the coordinator's user.
    if any("log in" in p for p in api_role_problems(conn)):
        # LOGIN on the workers only; the coordinator's pgmem_api stays NOLOGIN.
        conn.execute("SELECT * FROM run_command_on_workers("
                     "'SET citus.enable_alter_role_propagation = off; ALTER ROLE pgmem_api LOGIN')")
        done.append("pgmem_api may log in on the workers")
    # 4. Custom plans for the functions that force generic ones (a later migration that redefines such a
    # function sets it back: doctor then says so, and distribute fixes it again).
    generic = [r["signature"] for r in conn.execute(SQL_GENERIC_PLANS).fetchall()]
    for sig in generic:
        if not sig.startswith(("pgmem._knn(", "pgmem._exact_ids(")):  # generated: rebuilt below
            conn.execute(f"ALTER FUNCTION {sig} SET plan_cache_mode = force_custom_plan")
    if generic:
        conn.execute(f"SET pgmem.cluster = '{CLUSTER_VALUE}'")
        conn.execute("SELECT pgmem._build_knn()")
        done.append("custom plans for " + ", ".join(g.split("(")[0] for g in generic))
    # 5. The cluster mode clients read.
    if st.flag != CLUSTER_VALUE:
        db = conn.execute("SELECT current_database() AS d").fetchone()["d"]
        conn.execute(f"ALTER DATABASE \"{db}\" SET pgmem.cluster = '{CLUSTER_VALUE}'")
        done.append(f"cluster mode recorded (ALTER DATABASE {db} SET pgmem.cluster = '{CLUSTER_VALUE}')")
    return done


def generic_plans(conn) -> list[str]:
    """The pgmem functions that force generic plans, which Citus cannot route (``pgmem distribute`` gives
    them custom plans): their names, empty when none does."""
    return [r["signature"].split("(")[0] for r in _rows(conn, SQL_GENERIC_PLANS)]
