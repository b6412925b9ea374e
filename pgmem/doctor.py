"""``pgmem doctor``: a health check that exercises pgmem's functions, not only the connection.

:func:`run_checks` returns one :class:`Check` per aspect, each ``ok`` or not, with a one-line ``detail`` and a
``kind`` telling whose fault a failure is:

- ``infrastructure`` (the database side): connection, server version, the pgvector extension (>= 0.8),
  migrations (applied vs shipped), row-level security enabled and forced on every tenant table, index health
  (valid and ready; HNSW indexes listed with their size), and the function probe: in ONE transaction that
  is rolled back at the end, act as a probe user, add a probe memory, search for it (it must come first)
  and delete it. Nothing stays behind (sequence values aside, which PostgreSQL never rolls back).
- ``embedding`` (the provider side): the configured embedder embeds a short text; the vector must have the
  space's dimensions and the embedder the space's model, be finite and non-zero. When the embedder fails,
  the function probe still runs with a deterministic stand-in vector, so the two kinds of fault are told apart.

:func:`exit_code`: 0 healthy, 1 any infrastructure fault, 2 embedding-provider faults only.

The catalog queries (pg_class, pg_index, pg_extension) are constant SQL strings in this module: they are
maintenance queries, not the memory API, which the probe calls through the named statements of
``queries.sql`` like the client does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import numpy as np

from .defaults import DEFAULT_SPACE
from .queries import named

INFRASTRUCTURE = "infrastructure"
EMBEDDING = "embedding"

PROBE_USER = "pgmem-doctor-probe"
PROBE_AGENT = "pgmem-doctor"
PROBE_TEXT = "pgmem doctor probe: is the memory store healthy?"
PROBE_SPACE = "pgmem-doctor-probe"  # created inside the rolled-back probe when --space does not exist yet
PROBE_SPACE_DIMS = 8
MIN_SERVER = 16  # migration 0007 asks pg_has_role for the SET privilege, new in PostgreSQL 16
MIN_PGVECTOR = (0, 8)


@dataclass(frozen=True)
class Check:
    """One check: ``name``, whether it passed, a one-line ``detail``, and ``kind`` (``infrastructure`` or
    ``embedding``): whose fault a failure is."""

    name: str
    ok: bool
    detail: str
    kind: str = INFRASTRUCTURE


def exit_code(checks: list[Check]) -> int:
    """0 when every check passed, 1 when any infrastructure check failed, 2 when only embedding checks did."""
    if any(not c.ok and c.kind == INFRASTRUCTURE for c in checks):
        return 1
    if any(not c.ok for c in checks):
        return 2
    return 0


# --------------------------------------------------------------------------------------------------------
# Catalog queries (maintenance SQL, not the memory API)
# --------------------------------------------------------------------------------------------------------
SQL_SERVER = "SELECT current_setting('server_version') AS version, current_setting('server_version_num')::int AS num"
SQL_PGVECTOR = "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'vector'"
SQL_YOYO = "SELECT migration_hash, migration_id FROM public._yoyo_migration"
SQL_SCHEMA = "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgmem'"
# Tenant tables: every table of the schema with a user_id column, except pgmem.role_bindings (login role ->
# user: only the schema owner reads or writes it, so it needs no RLS). Read from the catalog, which every
# role may read, and independent of table grants: agents and gateways may hold none (API functions only).
SQL_TENANT_TABLES = """
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgmem' AND c.relkind IN ('r', 'p') AND c.relname <> 'role_bindings'
  AND c.relname NOT LIKE 'service\\_%'  -- the HTTP service's state: granted to nobody, owner-run functions only
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
              WHERE a.attrelid = c.oid AND a.attname = 'user_id' AND a.attnum > 0 AND NOT a.attisdropped)
ORDER BY c.relname
"""
SQL_SPACES = "SELECT * FROM pgmem.list_spaces()"  # definer: readable by agents and gateways
SQL_INDEXES = """
SELECT ic.relname AS index, tc.relname AS "table", i.indisvalid AS valid, i.indisready AS ready,
       am.amname AS method, pg_catalog.pg_relation_size(ic.oid) AS bytes
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
JOIN pg_catalog.pg_class tc ON tc.oid = i.indrelid
JOIN pg_catalog.pg_namespace n ON n.oid = ic.relnamespace
JOIN pg_catalog.pg_am am ON am.oid = ic.relam
WHERE n.nspname = 'pgmem'
ORDER BY ic.relname
"""
# the stand-in vector's direction: fixed, so doctor runs are reproducible
_STAND_IN_SEED = 20250501


def stand_in_vector(dims: int) -> np.ndarray:
    """A deterministic unit vector of ``dims`` float32 components (pseudo-random direction, seed fixed), used
    by the function probe when the embedder cannot give one."""
    vec = np.random.default_rng(_STAND_IN_SEED).standard_normal(dims).astype(np.float32)
    return vec / np.linalg.norm(vec)


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("-")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def _one_line(exc: BaseException) -> str:
    import psycopg

    from .errors import PgmemError, from_psycopg

    if isinstance(exc, psycopg.Error):
        exc = from_psycopg(exc)
    text = exc.message if isinstance(exc, PgmemError) else f"{type(exc).__name__}: {exc}"
    return " ".join(str(text).split())


# --------------------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------------------
def run_checks(dsn: str, *, space: str = DEFAULT_SPACE, role: str | None = None, embedder: Any = None,
               connect_timeout: int = 10) -> list[Check]:
    """Run every check against the database at ``dsn`` (a ``postgresql://`` URL) and return them in order:
    connection, server, pgvector, migrations, rls, indexes, space, embedder, function probe.

    ``space``: the embedding space to probe (when it does not exist yet, the probe uses a temporary space,
    rolled back with everything else). ``role``: switch to this role after connecting (SET ROLE), as the
    CLI does with ``pgmem_gateway`` on the embedded server. ``embedder``: the provider to probe (default:
    :func:`pgmem.embedders.default_embedder`). Never raises for a fault it checks: faults are failed checks.
    """
    import psycopg
    from psycopg.rows import dict_row

    from .errors import redact_dsn

    checks: list[Check] = []
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout, row_factory=dict_row)
    except Exception as exc:  # psycopg.OperationalError, bad DSN (ProgrammingError)
        checks.append(Check("connection", False, f"cannot connect to {redact_dsn(dsn)}: {_one_line(exc)}"))
        checks += _embedder_checks(embedder, None)
        return checks
    with conn:
        try:
            who = conn.execute("SELECT session_user AS login, current_database() AS db").fetchone()
            migrations_check = _migrations_check(conn)  # as the login: the switched role need not read yoyo's table
            if role:
                try:
                    conn.execute("SELECT set_config('role', %s, false)", (role,))
                except psycopg.Error as exc:
                    checks.append(Check("connection", False, f"connected as {who['login']} but cannot SET ROLE "
                                                             f"{role}: {_one_line(exc)}"))
                    checks += _embedder_checks(embedder, None)
                    return checks
            as_role = f" (role {role})" if role else ""
            checks.append(Check("connection", True, f"database {who['db']} as {who['login']}{as_role}"))

            srv = conn.execute(SQL_SERVER).fetchone()
            major = srv["num"] // 10000
            checks.append(Check("server", major >= MIN_SERVER,
                                f"PostgreSQL {srv['version']}" + ("" if major >= MIN_SERVER else
                                                                  f"; pgmem needs {MIN_SERVER} or newer")))

            ext = conn.execute(SQL_PGVECTOR).fetchone()
            if ext is None:
                checks.append(Check("pgvector", False, "the vector extension is not installed in this database (run "
                                                       "pgmem migrate; a superuser may need CREATE EXTENSION vector)"))
            else:
                good = _version_tuple(ext["extversion"]) >= MIN_PGVECTOR
                checks.append(Check("pgvector", good, f"vector {ext['extversion']}" + (
                    "" if good else "; pgmem needs >= 0.8 (ALTER EXTENSION vector UPDATE)")))

            checks.append(migrations_check)
            has_schema = conn.execute(SQL_SCHEMA).fetchone() is not None
            checks.append(_rls_check(conn, has_schema))
            if has_schema:
                checks.append(_roles_check(conn))
            checks.append(_index_check(conn, has_schema))
            if has_schema:  # on a Citus coordinator only (none on a single PostgreSQL)
                checks += _citus_checks(conn)

            space_row = _space_row(conn, space) if has_schema and ext is not None else None
            if has_schema and ext is not None:
                detail = (f"{space_row['name']}: model {space_row['model']}, {space_row['dims']} dims, "
                          f"{space_row['index_kind']}") if space_row else \
                    f"{space} does not exist yet (created by the first add); the probe uses a temporary space"
                checks.append(Check("space", True, detail))
            emb_checks, vector = _embedder_probe(embedder, space_row)
            checks += emb_checks
            if has_schema and ext is not None:
                checks.append(_function_probe(conn, space_row, vector))
            else:
                checks.append(Check("function probe", False, "skipped: the pgmem schema or the vector extension is "
                                                             "missing (run pgmem migrate)"))
        except psycopg.Error as exc:  # the connection broke half-way: a database fault
            checks.append(Check("database", False, f"failed during the checks: {_one_line(exc)}"))
    return checks


def migration_state(conn) -> tuple[list[str], list[str]]:
    """``(applied, pending)``: ids of the migrations shipped with this pgmem that the database at ``conn``
    has applied, and those it has not, both in order. Read-only: compares yoyo's own record
    (``public._yoyo_migration``, by hash, as yoyo does) without taking yoyo's lock or creating its tables.
    Raises PermissionDenied when the role may not read yoyo's table."""
    from psycopg.rows import dict_row
    from yoyo import read_migrations

    from .errors import PermissionDenied
    from .migrations import sql_path

    shipped = [(m.id, m.hash) for m in read_migrations(str(sql_path()))]
    with conn.cursor(row_factory=dict_row) as cur:
        if cur.execute("SELECT to_regclass('public._yoyo_migration') AS t").fetchone()["t"] is None:
            return [], [mid for mid, _ in shipped]
        if not cur.execute("SELECT has_table_privilege('public._yoyo_migration', 'SELECT') AS r").fetchone()["r"]:
            raise PermissionDenied(f"{NOT_VISIBLE}: this role may not read public._yoyo_migration, yoyo's record "
                                   "of applied migrations", hint="run doctor as the schema owner to see them")
        done = {r["migration_hash"] for r in cur.execute(SQL_YOYO).fetchall()}
    return [mid for mid, h in shipped if h in done], [mid for mid, h in shipped if h not in done]


NOT_VISIBLE = "not visible to this role"


def _migrations_check(conn) -> Check:
    """The migration state as the login sees it. An agent or gateway login may not read yoyo's table (it
    holds no table privileges at all, by design): then the check passes with ``not visible to this role``
    and names who can see it, since a healthy install must not fail doctor for a gateway."""
    from .errors import PermissionDenied

    try:
        applied, todo = migration_state(conn)
    except PermissionDenied as exc:
        login = conn.execute("SELECT session_user AS u").fetchone()["u"]
        return Check("migrations", True, f"{NOT_VISIBLE} ({login} may not read public._yoyo_migration; run "
                                         "pgmem doctor as the schema owner, or pgmem pending, to see them)")
    except Exception as exc:
        return Check("migrations", False, f"cannot read the migration state: {_one_line(exc)}")
    total = len(applied) + len(todo)
    latest = applied[-1] if applied else "none"
    if todo:
        return Check("migrations", False, f"{len(applied)} of {total} applied (schema at {latest}); "
                                          f"pending: {', '.join(todo)} (run pgmem migrate)")
    return Check("migrations", True, f"{total} of {total} applied; schema at {latest}")


def _roles_check(conn) -> Check:
    """pgmem_api owns the API's SECURITY DEFINER functions and must never be a login on this server: a login of
    that name runs with the functions' owner's rights outside them (on a Citus cluster it logs in on the
    workers only, which pgmem distribute sets)."""
    row = conn.execute("SELECT rolcanlogin, rolbypassrls FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_api'").fetchone()
    if row is None:
        return Check("roles", False, "role pgmem_api does not exist (run pgmem migrate)")
    if row["rolcanlogin"]:
        return Check("roles", False, "pgmem_api can log in: it owns the API's SECURITY DEFINER functions, so its "
                                     "login reads and writes every tenant's rows; ALTER ROLE pgmem_api NOLOGIN and "
                                     "give the service a login of its own (docs/deployment.md)")
    return Check("roles", True, "pgmem_api (owner of the API functions) cannot log in")


def _rls_check(conn, has_schema: bool) -> Check:
    if not has_schema:
        return Check("rls", False, "schema pgmem does not exist (run pgmem migrate)")
    rows = conn.execute(SQL_TENANT_TABLES).fetchall()
    if not rows:
        return Check("rls", False, "no tenant table found in schema pgmem")
    bad = [f"{r['relname']} ({'not enabled' if not r['relrowsecurity'] else 'not forced'})"
           for r in rows if not (r["relrowsecurity"] and r["relforcerowsecurity"])]
    if bad:
        return Check("rls", False, "row-level security off: " + ", ".join(bad)
                     + " (ALTER TABLE ... ENABLE / FORCE ROW LEVEL SECURITY)")
    return Check("rls", True, f"enabled and forced on {len(rows)} tables: "
                              + ", ".join(r["relname"] for r in rows))


def _index_check(conn, has_schema: bool) -> Check:
    if not has_schema:
        return Check("indexes", False, "schema pgmem does not exist (run pgmem migrate)")
    rows = conn.execute(SQL_INDEXES).fetchall()
    bad = [f"{r['index']} ({'invalid' if not r['valid'] else 'not ready'})"
           for r in rows if not (r["valid"] and r["ready"])]
    hnsw = [f"{r['index']} {_size(r['bytes'])}" for r in rows if r["method"] == "hnsw"]
    tail = "; HNSW: " + (", ".join(hnsw) if hnsw else "none yet")
    if bad:
        return Check("indexes", False, "broken: " + ", ".join(bad) + " (REINDEX INDEX CONCURRENTLY ...)" + tail)
    return Check("indexes", True, f"{len(rows)} valid and ready" + tail)


def _space_row(conn, space: str) -> dict | None:
    import psycopg

    try:
        with conn.transaction():
            return conn.execute(*named("space", name=space)).fetchone()
    except psycopg.Error:  # NotFound (PGM03), or no privilege on the table: ask the definer function
        pass
    try:
        with conn.transaction():
            return next((r for r in conn.execute(SQL_SPACES).fetchall() if r["name"] == space), None)
    except psycopg.Error:  # an older schema without list_spaces: the probe then uses a temporary space
        return None


def _embedder_checks(embedder: Any, space_row: dict | None) -> list[Check]:
    return _embedder_probe(embedder, space_row)[0]


def _embedder_probe(embedder: Any, space_row: dict | None) -> tuple[list[Check], np.ndarray | None]:
    """The embedding-provider check, and the probe content's vector when it fits the space (else None)."""
    from .embedders import default_embedder

    try:
        emb = embedder if embedder is not None else default_embedder()
        name, dims = emb.model_name, int(emb.dims)
        out = np.asarray(emb.embed([PROBE_TEXT]), dtype=np.float32)
    except Exception as exc:  # import errors, HTTP errors, model loading: the provider's fault
        return [Check("embedder", False, _one_line(exc), EMBEDDING)], None
    problems = []
    if out.ndim != 2 or out.shape[0] != 1:
        problems.append(f"returned shape {out.shape} for 1 text")
    else:
        vec = out[0]
        if vec.shape[0] != dims:
            problems.append(f"returned {vec.shape[0]} dimensions, declares {dims}")
        elif not np.all(np.isfinite(vec)) or not np.any(vec):
            problems.append("returned a zero or non-finite vector")
    if space_row is not None:
        if dims != space_row["dims"]:
            problems.append(f"expected {space_row['dims']} dimensions (space {space_row['name']!r}), "
                            f"the embedder gives {dims}")
        if name != space_row["model"]:
            problems.append(f"space {space_row['name']!r} holds model {space_row['model']!r}, not {name!r}")
    if problems:
        return [Check("embedder", False, f"{name}: " + "; ".join(problems), EMBEDDING)], None
    where = f"matches space {space_row['name']!r}" if space_row else "no space to compare with yet"
    return [Check("embedder", True, f"{name}, {dims} dims; {where}", EMBEDDING)], out[0]



def journal_check(directory: Any = None) -> Check:
    """The background writer's local journals in ``directory`` (default :func:`pgmem.journal.journal_dir`):
    fails when one holds damaged or torn records (kept in its ``.quarantine`` file: a human should look,
    ``pgmem journal show NAME``) or cannot be read; passes, naming them, when journals only wait to be
    replayed (by the next writer of that name, or ``pgmem journal replay NAME``). Reads, never changes."""
    from . import journal

    folder = directory if directory is not None else journal.journal_dir()
    try:
        infos = journal.list_journals(folder)
    except Exception as exc:  # UnsafeJournal, unreadable: a local fault worth failing for
        return Check("journals", False, f"cannot read the journals in {folder}: {_one_line(exc)}")
    bad = [i for i in infos if i.damaged or i.torn]
    waiting = [i for i in infos if i.pending]
    parts = [f"{i.name}: {i.damaged} damaged, {i.torn} torn (pgmem journal show {i.name})" for i in bad]
    parts += [f"{i.name}: {i.pending} pending" + (f" (writer pid {i.in_use})" if i.in_use else
                                                  f" (pgmem journal replay {i.name})") for i in waiting]
    if not parts:
        return Check("journals", True, f"{len(infos)} in {folder}, none pending or damaged")
    return Check("journals", not bad, f"{folder}: " + "; ".join(parts))


def _function_probe(conn, space_row: dict | None, vector: np.ndarray | None) -> Check:
    """add, search (first hit) and delete a probe memory in one transaction that is always rolled back."""
    from psycopg.types.json import Jsonb

    step = "start"
    try:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        with conn.transaction(force_rollback=True):
            step = "identity"
            bound = conn.execute(*named("current_user_id")).fetchone()["user_id"]
            user = bound or PROBE_USER
            conn.execute(*named("act_as", user_id=user))
            if space_row is None:
                step = "create temporary space"
                space_row = conn.execute(*named(
                    "create_space", name=PROBE_SPACE, model=PROBE_SPACE, dims=PROBE_SPACE_DIMS, distance="cosine",
                    hnsw_m=16, hnsw_ef_construction=64, text_config="english")).fetchone()
                vector = None
            dims = space_row["dims"]
            if vector is not None and len(vector) == dims:
                vec, model, source = vector, space_row["model"], "the embedder's vector"
            else:
                vec, model, source = stand_in_vector(dims), None, "a stand-in vector"
            content = f"{PROBE_TEXT} ({uuid4()})"
            step = "add"
            added = conn.execute(*named("add", space=space_row["name"], content=content, embedding=vec,
                                        agent_id=PROBE_AGENT, metadata=Jsonb({"pgmem_doctor": True}),
                                        model=model)).fetchone()
            if not added["created"]:
                raise RuntimeError("the probe memory was not created")
            step = "search"
            hits = conn.execute(*named("search", space=space_row["name"], embedding=vec, k=1,
                                       model=model)).fetchall()
            if not hits or hits[0]["id"] != added["id"]:
                raise RuntimeError(f"the probe memory did not come back first ({len(hits)} hits)")
            step = "delete"
            deleted = conn.execute(*named("delete", id=added["id"], agent_id=PROBE_AGENT)).fetchone()
            if not deleted["deleted"]:
                raise RuntimeError("deleting the probe memory returned false")
    except Exception as exc:  # psycopg errors included: a failed step of the probe is a database fault
        hint = ""
        if step == "identity":
            hint = " (grant pgmem_gateway to this login, or bind it to a user with pgmem.bind_role)"
        return Check("function probe", False, f"{step} failed: {_one_line(exc)}{hint}")
    who = f"bound user {user!r}" if bound else f"probe user {user!r}"
    where = space_row["name"] + (" (temporary)" if space_row["name"] == PROBE_SPACE else "")
    return Check("function probe", True, f"add, search (first, similarity {hits[0]['similarity']:.3f}) and "
                                         f"delete as {who} in space {where} with {source}; rolled back")


def _citus_checks(conn) -> list[Check]:
    """The cluster checks, empty on a server without Citus: the settings, the distribution of the tables, the
    plans, the workers' role, and the cluster mode clients will use (the state: :mod:`pgmem.citus`)."""
    import psycopg

    from . import citus
    from .citus import CLUSTER_VALUE, FOREIGN_KEYS, REFERENCE_TABLES, SQL_LOCAL_FUNCTIONS
    from .errors import from_psycopg

    try:
        with conn.transaction():
            st = citus.state(conn)
    except psycopg.Error as exc:
        return [Check("citus", False, f"cannot read the distribution: {from_psycopg(exc).message}")]
    if st.citus is None:
        return []
    out = []
    problems = citus.setting_problems(conn)
    out.append(Check("citus settings", not problems, "; ".join(problems) + f" ({citus.settings_hint(problems)})" if problems
                     else "citus.enable_unsafe_triggers on, citus.propagate_set_commands local, "
                          "citus.allow_nested_distributed_execution on (workers)"))
    missing = [t for t in REFERENCE_TABLES if st.tables.get(t) != "reference"] + \
              [t for t in st.user_tables if st.tables.get(t) != "distributed by user_id"]
    lost = sorted(set(FOREIGN_KEYS) - set(st.foreign_keys))
    if st.distributed and not st.subselect_policies and not lost:
        out.append(Check("citus distribution", True, f"Citus {st.citus}: reference {', '.join(REFERENCE_TABLES)}; "
                                                     f"{len(st.user_tables)} tables colocated by user_id"))
    else:
        what = (f"not distributed: {', '.join(missing)}" if missing else "tables not colocated") if not st.distributed \
            else ("policies with a sub-select: " + ", ".join(st.subselect_policies) if st.subselect_policies
                  else "foreign keys missing: " + ", ".join(lost) + " (deleted memories would leave their vectors "
                       "and sources behind)")
        out.append(Check("citus distribution", False, f"Citus {st.citus}: {what} (run pgmem distribute)"))
    generic = citus.generic_plans(conn)
    out.append(Check("citus plans", not generic, "generic plans forced in " + ", ".join(generic)
                     + ": Citus cannot route them (run pgmem distribute)" if generic
                     else "no pgmem function forces generic plans"))
    roles = citus.api_role_problems(conn)
    out.append(Check("citus roles", not roles, "; ".join(roles) + " (run pgmem distribute)" if roles
                     else "pgmem_api may log in on every worker"))
    undelegated = (citus.delegation_problems(conn) + [r["signature"] + " (not on the workers)"
                                                      for r in citus._rows(conn, SQL_LOCAL_FUNCTIONS)]) \
        if st.distributed else []
    out.append(Check("citus delegation", not undelegated,
                     "not delegated to the user's worker: " + ", ".join(undelegated) + " (run pgmem distribute)"
                     if undelegated else "each user's call (the *_for functions) runs on the worker holding "
                                         "the user's rows, in one remote command"))
    creds = citus.credential_problems(conn)
    out.append(Check("citus credentials", not creds, "; ".join(creds) if creds
                     else "pgmem_api proves itself to every worker (scram-sha-256 or stronger), with a password "
                          "only the coordinator keeps (pg_dist_authinfo)"))
    flag_ok = st.flag == CLUSTER_VALUE
    out.append(Check("cluster mode", flag_ok or not st.tables,
                     "on: clients carry the identity in a transaction block (pgmem.cluster = 'citus')" if flag_ok
                     else "off: pgmem.cluster is not 'citus' in this database, so clients run one-statement calls "
                          "whose identity never reaches the workers (run pgmem distribute)"))
    return out
