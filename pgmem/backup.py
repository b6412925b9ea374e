"""``pgmem backup`` and ``pgmem restore``: a whole pgmem database as a directory, restored and verified.

A backup is a directory of three files (docs/operations.md), the directory created 0700 and every file
0600 and exclusively (``O_EXCL``: never through a symbolic link, never over an existing file):

- ``db.dump``: ``pg_dump -Fc`` of the whole database: the pgmem schema with its data, the vector extension,
  and yoyo's migration tables in ``public``; without the rows of ``pgmem.role_bindings``, which name roles
  of the source cluster and are restored from ``roles.json`` through ``pgmem.bind_role``;
- ``roles.json``: data, never SQL: the roles pgmem needs besides ``pgmem_agent`` and ``pgmem_gateway`` (the
  schema owner, the logins bound in ``pgmem.role_bindings`` and every other member of those two), each as
  ``{"name", "login", "member_of"}`` with ``member_of`` a subset of ``["pgmem_agent", "pgmem_gateway"]``,
  and the bindings as ``{"role", "user_id"}``. No passwords and no other attribute (SUPERUSER, BYPASSRLS,
  CREATEROLE, ...): a DBA grants those;
- ``manifest.json``: versions, applied migrations, exact row counts of every table in schema ``pgmem``, a
  probe memory (id, user, space, SHA-256 of its content), and the SHA-256 of the two other files.

The counts and the dump come from one snapshot: a REPEATABLE READ transaction exports it
(``pg_export_snapshot()``), counts every table, and stays open while ``pg_dump --snapshot`` reads the same
snapshot. :func:`restore` checks the files against the manifest and ``roles.json`` against the shape above
(anything else means the backup was altered: refused before anything is done), creates (or takes an
empty) target database, creates the missing roles from that data (names quoted as identifiers; ``LOGIN``
or ``NOLOGIN`` and nothing else; memberships granted only to the roles it created), runs ``pg_restore
--single-transaction --exit-on-error``, calls ``pgmem.bind_role`` for every binding and then :func:`verify`:
migrations current, row counts equal to the manifest's, the probe memory found by ``pgmem.search`` with
its own embedding and its content hash unchanged. Restore never executes SQL text read from a backup; a
backup of format 1 (with ``roles.sql``) is restored without running that file, into a cluster that has
its roles already. The trust model is in docs/operations.md: the manifest's hashes detect accidents, not
attackers.

pg_dump and pg_restore come from ``--bin-dir``, else the embedded server's (``pgmem.embedded.bin_dir()``),
else ``PATH``; the first whose major version is at least the server's is used. The DSN reaches them with
``--dbname`` and ``--no-password``; a password in the DSN goes through ``PGPASSWORD``, never the command
line. The catalog queries (pg_roles, pg_class, counts) are constant SQL strings in this module: they are
maintenance queries, not the memory API, which :func:`verify` calls through ``queries.sql``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from . import files
from .doctor import INFRASTRUCTURE, Check
from .errors import DatabaseUnavailable, IdentityError, PermissionDenied, PgmemError, SchemaError, from_psycopg, redact_dsn

FORMAT = 2
FORMATS = (1, 2)  # 1: roles in roles.sql (never executed any more), 2: roles.json
DUMP_FILE = "db.dump"
ROLES_FILE = "roles.json"
LEGACY_ROLES_FILE = "roles.sql"
MANIFEST_FILE = "manifest.json"
PROBE_K = 10
#: The roles the migrations create (sql/0002): restore creates them as the migration does when missing,
#: never from the backup's data, and they are the only memberships a backup may ask for.
GROUP_ROLES = ("pgmem_agent", "pgmem_gateway")
MAX_ROLE_NAME_BYTES = 63  # NAMEDATALEN - 1
MAX_USER_ID = 256  # pgmem.role_bindings' CHECK


class VerificationFailed(PgmemError):
    """A restored database failed :func:`verify`; ``checks`` holds every check, passed or not."""

    def __init__(self, message: str, *, checks: list[Check], **kw: Any) -> None:
        super().__init__(message, **kw)
        self.checks = checks


@dataclass(frozen=True)
class BackupResult:
    """What :func:`backup` wrote: the directory and its manifest (the parsed ``manifest.json``)."""

    path: Path
    manifest: dict = field(repr=False)


@dataclass(frozen=True)
class RestoreResult:
    """What :func:`restore` did: the target database, whether it created it, the verification checks, the
    roles it created (from ``roles.json``) and notes (memberships it did not grant to existing roles)."""

    database: str
    created: bool
    checks: list[Check]
    roles_created: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------------
# Catalog and maintenance queries
# --------------------------------------------------------------------------------------------------------
SQL_PRIVILEGE = """
SELECT current_user AS role, r.rolsuper AS superuser, r.rolbypassrls AS bypassrls
FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
"""
SQL_UNREADABLE = """
SELECT n.nspname || '.' || c.relname AS name
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('pgmem', 'public') AND c.relkind IN ('r', 'p', 'S')
  AND NOT pg_catalog.has_table_privilege(c.oid, 'SELECT')
ORDER BY 1
"""
SQL_TABLES = """
SELECT c.relname AS name
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgmem' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname
"""
SQL_VERSIONS = """
SELECT current_setting('server_version') AS server_version,
       current_setting('server_version_num')::int AS server_version_num,
       (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'vector') AS pgvector_version,
       current_database() AS database,
       pg_catalog.pg_encoding_to_char(d.encoding) AS encoding
FROM pg_catalog.pg_database d WHERE d.datname = current_database()
"""
SQL_MIGRATIONS = "SELECT migration_id FROM public._yoyo_migration ORDER BY applied_at_utc, migration_id"
SQL_HAS_YOYO = "SELECT to_regclass('public._yoyo_migration') IS NOT NULL AS present"
SQL_COLUMNS = """
SELECT c.relname || '.' || a.attname AS col
FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgmem' AND c.relname IN ('memories', 'spaces') AND a.attnum > 0 AND NOT a.attisdropped
"""
# The probe: a memory that search finds now and later: currently valid and not expired, preferably one that
# never expires; among those the smallest (user_id, id). {expiry} and {validity} are filled from the
# constant fragments below only, chosen by the columns the schema has (validity and TTLs came with 0003).
SQL_PROBE = """
SELECT m.id, m.user_id, s.name AS space, m.content
FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
WHERE {expiry} > now() {validity}
ORDER BY ({expiry} = 'infinity'::timestamptz) DESC, m.user_id, m.id
LIMIT 1
"""
EXPIRY_WITH_TTL = "coalesce(m.expires_at, m.created_at + s.memory_ttl, 'infinity'::timestamptz)"
EXPIRY_OWN = "coalesce(m.expires_at, 'infinity'::timestamptz)"
VALIDITY = {"memories.valid_to": " AND m.valid_to IS NULL", "memories.superseded_by": " AND m.superseded_by IS NULL",
            "memories.valid_from": " AND m.valid_from <= now()"}
# roles.json: the roles pgmem needs besides its group roles, read from pg_roles and pg_auth_members.
SQL_NEEDED_ROLES = """
SELECT r.rolname AS name, r.rolcanlogin AS login,
       array(SELECT g.rolname FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
             WHERE m.member = r.oid AND g.rolname = ANY (%(groups)s) ORDER BY g.rolname)::text[] AS member_of
FROM pg_catalog.pg_roles r
WHERE r.rolname <> ALL (%(groups)s)
  AND (r.oid = (SELECT nspowner FROM pg_catalog.pg_namespace WHERE nspname = 'pgmem')
       OR r.oid IN (SELECT coalesce((to_jsonb(b) ->> 'role_oid')::oid, r2.oid) FROM pgmem.role_bindings b
                    JOIN pg_catalog.pg_roles r2 ON r2.rolname = b.role_name)
       OR r.oid IN (SELECT m.member FROM pg_catalog.pg_auth_members m
                    JOIN pg_catalog.pg_roles g ON g.oid = m.roleid WHERE g.rolname = ANY (%(groups)s)))
ORDER BY r.rolname
"""
# Since migration 0007 a binding names its role by OID (role_oid): a role dropped and created again under the
# same name is not the bound one, and its binding is stale. Before 0007, by name.
SQL_BINDINGS = """
SELECT b.role_name::text AS role, b.user_id,
       EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = b.role_name
               AND r.oid = coalesce((to_jsonb(b) ->> 'role_oid')::oid, r.oid)) AS role_exists
FROM pgmem.role_bindings b
ORDER BY b.role_name
"""
SQL_ROLE = """
SELECT r.rolname AS name,
       array(SELECT g.rolname FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
             WHERE m.member = r.oid)::text[] AS member_of
FROM pg_catalog.pg_roles r WHERE r.rolname = %(name)s
"""
SQL_TARGET_TABLES = """
SELECT n.nspname || '.' || c.relname AS name
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('pgmem', 'public') AND c.relkind IN ('r', 'p')
ORDER BY 1
"""


# --------------------------------------------------------------------------------------------------------
# Client programs
# --------------------------------------------------------------------------------------------------------
def _program_major(path: Path) -> int | None:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
    return int(m.group(1)) if m else None


def find_program(name: str, *, bin_dir: str | os.PathLike | None = None, min_major: int | None = None) -> Path:
    """The client program ``name`` (``pg_dump`` or ``pg_restore``): from ``bin_dir`` when given, else the
    embedded server's, else ``PATH``; the first of major version >= ``min_major``.

    Raises PgmemError naming what was found and the hint ``--bin-dir``.
    """
    candidates: list[Path] = []
    if bin_dir is not None:
        candidates.append(Path(bin_dir) / name)
    else:
        try:
            from . import embedded

            candidates.append(embedded.bin_dir() / name)
        except Exception:  # the embedded server is optional
            pass
        found = shutil.which(name)
        if found:
            candidates.append(Path(found))
    tried = []
    for path in candidates:
        if not path.is_file():
            tried.append(f"{path} (missing)")
            continue
        major = _program_major(path)
        if major is None:
            tried.append(f"{path} (no version)")
        elif min_major is not None and major < min_major:
            tried.append(f"{path} (version {major})")
        else:
            return path
    need = f" of PostgreSQL {min_major} or newer" if min_major else ""
    raise PgmemError(f"no usable {name}{need} found" + (f"; tried {', '.join(tried)}" if tried else ""),
                     hint="pass --bin-dir with the directory of matching PostgreSQL client programs")


def _libpq_args(dsn: str) -> tuple[str, dict[str, str]]:
    """``dsn`` as a conninfo for ``--dbname`` without its password, and the environment carrying it."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise PgmemError(f"not a valid DSN: {exc}") from None
    env = dict(os.environ)
    password = params.pop("password", None)
    if password:
        env["PGPASSWORD"] = str(password)
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None}), env


def _run_program(args: list[str], env: dict[str, str], what: str, *, stdout: int | None = None) -> None:
    """Run a client program; ``stdout``: a file descriptor receiving its output (else captured and dropped).
    PgmemError with the last lines of its stderr when it fails."""
    proc = subprocess.run(args, stdout=stdout if stdout is not None else subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=env)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        detail = " / ".join(lines[-4:]) or f"exit code {proc.returncode}"
        raise PgmemError(f"{what} failed: {detail}")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _connect(dsn: str, **kw: Any) -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, connect_timeout=10, row_factory=dict_row, **kw)
    except psycopg.Error as exc:
        raise DatabaseUnavailable(f"could not connect to {redact_dsn(dsn)}: {exc}") from exc


# --------------------------------------------------------------------------------------------------------
# Reading a database
# --------------------------------------------------------------------------------------------------------
def table_counts(conn: psycopg.Connection) -> dict[str, int]:
    """Exact row counts of every table in schema pgmem (partitions counted in their parent), keyed
    ``pgmem.<table>``. Counts every row only for a role that bypasses row-level security."""
    out: dict[str, int] = {}
    for row in conn.execute(SQL_TABLES).fetchall():
        q = sql.SQL("SELECT count(*) AS n FROM {}.{}").format(sql.Identifier("pgmem"), sql.Identifier(row["name"]))
        out[f"pgmem.{row['name']}"] = conn.execute(q).fetchone()["n"]
    return out


def _applied_ids(conn: psycopg.Connection) -> list[str]:
    if not conn.execute(SQL_HAS_YOYO).fetchone()["present"]:
        return []
    return [r["migration_id"] for r in conn.execute(SQL_MIGRATIONS).fetchall()]


def _probe(conn: psycopg.Connection) -> dict | None:
    columns = {r["col"] for r in conn.execute(SQL_COLUMNS).fetchall()}
    expiry = EXPIRY_WITH_TTL if "spaces.memory_ttl" in columns else EXPIRY_OWN
    validity = "".join(frag for col, frag in VALIDITY.items() if col in columns)
    row = conn.execute(SQL_PROBE.format(expiry=expiry, validity=validity)).fetchone()
    if row is None:
        return None
    return {"id": str(row["id"]), "user_id": row["user_id"], "space": row["space"],
            "content_sha256": hashlib.sha256(row["content"].encode("utf-8")).hexdigest()}


def roles_data(conn: psycopg.Connection) -> tuple[dict, list[str]]:
    """The content of ``roles.json`` for the database of ``conn`` (module documentation), and the names of
    the bindings left out because their role no longer exists (a binding that outlived ``DROP ROLE``: no
    login can use it, and restoring it would hand it to a new role of that name). Needs read access to
    ``pgmem.role_bindings``."""
    with conn.cursor(row_factory=dict_row) as cur:
        roles = cur.execute(SQL_NEEDED_ROLES, {"groups": list(GROUP_ROLES)}).fetchall()
        bindings = cur.execute(SQL_BINDINGS).fetchall()
    data = {"roles": [{"name": r["name"], "login": bool(r["login"]), "member_of": list(r["member_of"])}
                      for r in roles],
            "bindings": [{"role": b["role"], "user_id": b["user_id"]} for b in bindings if b["role_exists"]]}
    return data, [b["role"] for b in bindings if not b["role_exists"]]


def _altered(problem: str) -> PgmemError:
    return PgmemError(f"{ROLES_FILE} of the backup {problem}; pgmem never writes that, so the backup was altered "
                      "or is not pgmem's: nothing was restored",
                      hint="restore only backups you made or trust, and compare roles.json with what you expect "
                           "(docs/operations.md, trust model of a restore)")


def check_roles_data(data: Any) -> dict:
    """``data`` (the parsed ``roles.json``) if it has exactly the shape :func:`roles_data` writes, else
    PgmemError naming what is wrong (the backup was altered). Checked before a restore does anything."""
    if not isinstance(data, dict) or set(data) != {"roles", "bindings"}:
        raise _altered(f"has the keys {sorted(data) if isinstance(data, dict) else type(data).__name__}, "
                       "not exactly roles and bindings")
    roles, bindings = data["roles"], data["bindings"]
    if not isinstance(roles, list) or not isinstance(bindings, list):
        raise _altered("holds roles or bindings that are not lists")
    names: set[str] = set()
    for i, r in enumerate(roles):
        if not isinstance(r, dict) or set(r) != {"name", "login", "member_of"}:
            raise _altered(f"describes role {i} with {sorted(r) if isinstance(r, dict) else r!r}, not exactly "
                           "name, login and member_of (no attribute such as SUPERUSER is ever restored)")
        name = r["name"]
        if not isinstance(name, str) or not name or "\x00" in name \
                or len(name.encode("utf-8")) > MAX_ROLE_NAME_BYTES:
            raise _altered(f"names role {i} {name!r}, not a role name of 1 to {MAX_ROLE_NAME_BYTES} bytes")
        if name in GROUP_ROLES or name.startswith("pg_"):
            raise _altered(f"lists role {name!r}, which is reserved (pgmem's group roles and pg_* are never restored)")
        if name in names:
            raise _altered(f"lists role {name!r} twice")
        if not isinstance(r["login"], bool):
            raise _altered(f"gives role {name!r} login {r['login']!r}, not true or false")
        member_of = r["member_of"]
        if not isinstance(member_of, list) or any(g not in GROUP_ROLES for g in member_of) \
                or len(set(member_of)) != len(member_of):
            raise _altered(f"makes role {name!r} a member of {member_of!r}; only {' and '.join(GROUP_ROLES)} "
                           "may be granted")
        names.add(name)
    bound: set[str] = set()
    for i, b in enumerate(bindings):
        if not isinstance(b, dict) or set(b) != {"role", "user_id"}:
            raise _altered(f"describes binding {i} with {sorted(b) if isinstance(b, dict) else b!r}, not exactly "
                           "role and user_id")
        if b["role"] not in names or b["role"] in bound:
            raise _altered(f"binds {b['role']!r}, which is not one of its roles or is bound twice")
        user = b["user_id"]
        if not isinstance(user, str) or not user or len(user) > MAX_USER_ID or "\x00" in user:
            raise _altered(f"binds {b['role']!r} to {user!r}, not a user id of 1 to {MAX_USER_ID} characters")
        bound.add(b["role"])
    return data


def _check_backup_role(conn: psycopg.Connection) -> None:
    row = conn.execute(SQL_PRIVILEGE).fetchone()
    if not (row["superuser"] or row["bypassrls"]):
        raise IdentityError(
            f"role {row['role']!r} cannot back up pgmem: row-level security hides other users' rows from it",
            hint="run the backup as a superuser or as a role with BYPASSRLS that can read every table "
                 "(e.g. the schema owner after ALTER ROLE ... BYPASSRLS)")
    unreadable = [r["name"] for r in conn.execute(SQL_UNREADABLE).fetchall()]
    if unreadable:
        raise PermissionDenied(f"role {row['role']!r} may not read {', '.join(unreadable[:5])}",
                               hint="run the backup as a superuser or as the schema owner")
    if conn.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgmem'").fetchone() is None:
        raise SchemaError("this database has no pgmem schema: nothing to back up", hint="check --dsn")


# --------------------------------------------------------------------------------------------------------
# Backup
# --------------------------------------------------------------------------------------------------------
def backup(dsn: str, path: str | os.PathLike, *, bin_dir: str | os.PathLike | None = None) -> BackupResult:
    """Back up the whole database at ``dsn`` into the directory ``path``: ``db.dump``, ``roles.json``,
    ``manifest.json`` (see the module docstring). ``path`` is created with mode 0700; an existing one must be
    an empty directory of this uid, not a symbolic link, not writable by others (it is set to 0700). Every
    file is created 0600 with ``O_EXCL``.

    The row counts of the manifest and the dump come from one exported snapshot, so they agree exactly even
    while agents write. Needs a superuser or a role with BYPASSRLS that can read every table.

    Raises IdentityError (the role cannot read every row), PermissionDenied, SchemaError (no pgmem schema),
    DatabaseUnavailable, UnsafePath (an existing ``path`` owned by another uid, writable by others or a
    link), and PgmemError when pg_dump fails or no suitable pg_dump is found; a failed backup removes the
    directory it created (and the files it wrote into an existing one).
    """
    out = Path(os.path.abspath(Path(path).expanduser()))
    created = not os.path.lexists(out)
    if not created:
        files.private_dir(out, create=False)  # a link, another owner, writable by others: UnsafePath
        if any(out.iterdir()):
            raise PgmemError(f"{out} exists and is not an empty directory", hint="give a new directory for the backup")
        os.chmod(out, files.DIR_MODE, follow_symlinks=False)
    conninfo, env = _libpq_args(dsn)
    try:
        if created:
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(out, files.DIR_MODE)
            except FileExistsError:
                created = False
                raise PgmemError(f"{out} was created by someone else meanwhile", hint="give a new directory") from None
        return _backup(dsn, out, conninfo, env, bin_dir)
    except BaseException:
        if created:  # a failed backup leaves no directory that could be mistaken for one
            shutil.rmtree(out, ignore_errors=True)
        else:
            for name in (DUMP_FILE, ROLES_FILE, MANIFEST_FILE):
                with contextlib.suppress(OSError):
                    os.unlink(out / name)
        raise


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (0600, exclusive) holding ``data``, fsync'd."""
    fd = files.create_private(path)
    try:
        files.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _backup(dsn: str, out: Path, conninfo: str, env: dict[str, str], bin_dir: Any) -> BackupResult:
    from . import __version__

    with _connect(dsn) as conn:
        try:
            _check_backup_role(conn)
            versions = conn.execute(SQL_VERSIONS).fetchone()
            pg_dump = find_program("pg_dump", bin_dir=bin_dir, min_major=versions["server_version_num"] // 10000)
            conn.commit()
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            with conn.transaction():
                snapshot = conn.execute("SELECT pg_catalog.pg_export_snapshot() AS s").fetchone()["s"]
                counts = table_counts(conn)
                applied = _applied_ids(conn)
                probe = _probe(conn)
                roles, stale = roles_data(conn)
                dump_fd = files.create_private(out / DUMP_FILE)
                try:  # pg_dump writes to our 0600 file: its own --file would be created with its umask
                    _run_program([str(pg_dump), "--no-password", "--format=custom", f"--snapshot={snapshot}",
                                  "--exclude-table-data=pgmem.role_bindings", f"--dbname={conninfo}"],
                                 env, "pg_dump", stdout=dump_fd)
                    os.fsync(dump_fd)
                finally:
                    os.close(dump_fd)
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc
    _write_new(out / ROLES_FILE, (json.dumps(roles, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    if "pgmem.role_bindings" in counts:  # the bindings restored are those of roles.json (stale ones left out)
        counts["pgmem.role_bindings"] = len(roles["bindings"])
    manifest = {
        "format": FORMAT,
        "pgmem_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "database": versions["database"],
        "encoding": versions["encoding"],
        "server_version": versions["server_version"],
        "server_version_num": versions["server_version_num"],
        "pgvector_version": versions["pgvector_version"],
        "pg_dump_major": _program_major(pg_dump),
        "migrations": applied,
        "tables": counts,
        "probe": probe,
        "roles": [r["name"] for r in roles["roles"]],
        "stale_bindings": stale,
        "files": {name: {"sha256": _sha256_file(out / name), "bytes": (out / name).stat().st_size}
                  for name in (DUMP_FILE, ROLES_FILE)},
    }
    _write_new(out / MANIFEST_FILE, (json.dumps(manifest, indent=2) + "\n").encode("utf-8"))
    files.fsync_dir(out)
    return BackupResult(out, manifest)


def _backup_file(p: Path, name: str) -> Path:
    """``p / name`` if it is a regular file (not a symbolic link), else PgmemError."""
    f = p / name
    try:
        st = os.lstat(f)
    except FileNotFoundError:
        raise PgmemError(f"the backup in {p} lacks {name}") from None
    if not stat.S_ISREG(st.st_mode):
        raise PgmemError(f"{f} is not a regular file (a symbolic link?): the backup was altered",
                         hint="restore only backups you made or trust")
    return f


def read_manifest(path: str | os.PathLike, *, check_files: bool = True) -> dict:
    """The manifest of the backup directory ``path`` (format 1 or 2); with ``check_files`` every file it
    lists (``db.dump`` and ``roles.json``, or ``roles.sql`` in format 1) must be a regular file, not a
    link, with the SHA-256 of the manifest. Raises PgmemError when the backup is incomplete or damaged.
    The hashes catch damage, not an attacker, who can rewrite the manifest too (docs/operations.md)."""
    p = Path(path)
    try:
        manifest = json.loads(_backup_file(p, MANIFEST_FILE).read_text(encoding="utf-8"))
    except PgmemError:
        if not os.path.lexists(p / MANIFEST_FILE):
            raise PgmemError(f"{p} is not a pgmem backup: {MANIFEST_FILE} is missing",
                             hint="a backup that stopped before its manifest was written is incomplete") from None
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PgmemError(f"{p / MANIFEST_FILE} is not valid JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in FORMATS:
        raise PgmemError(f"unknown backup format {manifest.get('format') if isinstance(manifest, dict) else None!r} "
                         f"in {p}", hint="restore it with the pgmem version that wrote it")
    expected = {DUMP_FILE, ROLES_FILE if manifest["format"] >= 2 else LEGACY_ROLES_FILE}
    listed = manifest.get("files")
    if not isinstance(listed, dict) or set(listed) != expected:
        raise PgmemError(f"the manifest in {p} lists the files {sorted(listed) if isinstance(listed, dict) else listed}"
                         f", not {sorted(expected)}: the backup is damaged")
    if check_files:
        for name, meta in listed.items():
            f = _backup_file(p, name)
            if not isinstance(meta, dict) or _sha256_file(f) != meta.get("sha256"):
                raise PgmemError(f"{f} does not match the SHA-256 in the manifest: the backup is damaged")
    return manifest


# --------------------------------------------------------------------------------------------------------
# Restore
# --------------------------------------------------------------------------------------------------------
def _prepare_target(dsn: str) -> tuple[str, bool, bool]:
    """Make sure the target database exists and is empty: (name, created, has_vector_extension)."""
    params = conninfo_to_dict(dsn)
    dbname = params.get("dbname")
    if not dbname:
        raise PgmemError("the restore target DSN names no database",
                         hint="e.g. postgresql://postgres@host/pgmem_restored")
    created = False
    try:
        conn = psycopg.connect(dsn, connect_timeout=10, autocommit=True, row_factory=dict_row)
    except psycopg.OperationalError as exc:
        if "does not exist" not in str(exc):
            raise DatabaseUnavailable(f"could not connect to {redact_dsn(dsn)}: {exc}") from exc
        maintenance = make_conninfo(dsn, dbname="postgres")
        with _connect(maintenance, autocommit=True) as admin:
            try:
                admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(dbname)))
            except psycopg.Error as exc2:
                err = from_psycopg(exc2)
                raise type(err)(f"could not create database {dbname!r}: {err.message}",
                                hint="create it (empty) first, or restore as a role with CREATEDB") from exc2
        created = True
        conn = _connect(dsn, autocommit=True)
    with conn:
        tables = [r["name"] for r in conn.execute(SQL_TARGET_TABLES).fetchall()]
        schema = conn.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgmem'").fetchone()
        if tables or schema:
            what = ", ".join(tables[:5]) if tables else "schema pgmem"
            if len(tables) > 5:
                what += f", and {len(tables) - 5} more"
            raise PgmemError(f"database {dbname!r} is not empty ({what}): restore goes into a new or empty database",
                             hint="give a new database name in --dsn; pgmem restore creates it")
        has_vector = conn.execute("SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'vector'").fetchone()
    return dbname, created, has_vector is not None


SQL_ROLE_EXISTS = "SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s"
# pgmem's group roles as the migration creates them (sql/0002), never from a backup.
GROUP_DEFINITIONS = {"pgmem_agent": "NOLOGIN NOINHERIT NOBYPASSRLS", "pgmem_gateway": "NOLOGIN NOBYPASSRLS"}


def _missing_roles(conn: psycopg.Connection, names: list[str]) -> list[str]:
    return [n for n in names if conn.execute(SQL_ROLE_EXISTS, (n,)).fetchone() is None]


def _create_roles(conn: psycopg.Connection, data: dict) -> tuple[list[str], list[str]]:
    """Create pgmem's group roles when missing (as the migration does), then every role of ``data`` that
    does not exist: ``CREATE ROLE <name> LOGIN|NOLOGIN`` and the grants of its ``member_of``. Roles that
    exist are never changed. Returns (roles created, notes)."""
    created: list[str] = []
    notes: list[str] = []
    for group, attributes in GROUP_DEFINITIONS.items():
        if not _missing_roles(conn, [group]):
            continue
        conn.execute(sql.SQL("CREATE ROLE {} " + attributes).format(sql.Identifier(group)))
        created.append(group)
    if "pgmem_gateway" in created or "pgmem_agent" in created:
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier("pgmem_agent"), sql.Identifier("pgmem_gateway")))
    for role in data["roles"]:
        name, groups = role["name"], role["member_of"]
        existing = conn.execute(SQL_ROLE, {"name": name}).fetchone()
        if existing is not None:
            lacking = [g for g in groups if g not in existing["member_of"]]
            if lacking:
                notes.append(f"role {name!r} exists and is not a member of {', '.join(lacking)} as in the backup; "
                             "not granted (restore never changes an existing role)")
            continue
        conn.execute(sql.SQL("CREATE ROLE {} " + ("LOGIN" if role["login"] is True else "NOLOGIN"))
                     .format(sql.Identifier(name)))
        for group in groups:
            if group in GROUP_ROLES:  # checked by check_roles_data already
                conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(name)))
        created.append(name)
    return created, notes


def restore(path: str | os.PathLike, dsn: str, *, bin_dir: str | os.PathLike | None = None,
            no_owner: bool = False) -> RestoreResult:
    """Restore the backup directory ``path`` into the database at ``dsn`` and verify it.

    Before anything is done, the files are checked against the manifest and ``roles.json`` against the shape
    :func:`roles_data` writes (:func:`check_roles_data`). The database is created (from ``template0``,
    through the maintenance database ``postgres`` of the same server) when it does not exist; an existing one
    must have no table in schema ``pgmem`` or ``public``. Then the roles are created from ``roles.json`` (no
    SQL text from the backup is ever executed; existing roles are left as they are), ``pg_restore
    --single-transaction --exit-on-error`` loads ``db.dump`` (``no_owner``: objects owned by the restoring
    role instead of the original owner), ``pgmem.bind_role`` restores each binding, and :func:`verify` runs.
    A format-1 backup's ``roles.sql`` is not run: the roles its manifest names must exist already. Run it as
    a superuser (the vector extension needs one), or a role with CREATEROLE and CREATEDB where the extension
    exists.

    Returns a RestoreResult (``roles_created``, ``notes``); raises VerificationFailed (with ``checks``) when a
    check fails, PgmemError when the backup is damaged or altered, the target is not empty, roles are
    missing for a format-1 backup, or creating roles or pg_restore fail.
    """
    src = Path(path)
    manifest = read_manifest(src)
    if manifest["format"] >= 2:
        try:
            data = check_roles_data(json.loads(_backup_file(src, ROLES_FILE).read_text(encoding="utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _altered(f"is not valid JSON ({exc})") from None
    else:
        data = None
    dbname, created, has_vector = _prepare_target(dsn) if data is not None else _prepare_legacy(dsn, manifest, src)
    notes: list[str] = []
    roles_created: list[str] = []
    with _connect(dsn, autocommit=True) as conn:
        try:
            if data is not None:
                with conn.transaction():
                    roles_created, notes = _create_roles(conn, data)
            else:
                notes.append(f"{LEGACY_ROLES_FILE} of this format-1 backup was not executed (restore never runs SQL "
                             "text from a backup); its roles exist already")
        except psycopg.Error as exc:
            err = from_psycopg(exc)
            raise type(err)(f"creating the roles of {src / ROLES_FILE} failed: {err.message}",
                            hint="restore as a role with CREATEROLE (a superuser for the extension), or have a "
                                 "DBA create the roles listed in roles.json first") from exc
        server_major = conn.execute("SELECT current_setting('server_version_num')::int / 10000 AS m").fetchone()["m"]
    pg_restore = find_program("pg_restore", bin_dir=bin_dir,
                              min_major=max(server_major, manifest.get("pg_dump_major") or 0))
    conninfo, env = _libpq_args(dsn)
    args = [str(pg_restore), "--no-password", "--exit-on-error", "--single-transaction", f"--dbname={conninfo}"]
    if no_owner:
        args.append("--no-owner")
    list_file = None
    if has_vector:  # a DBA created the extension already: skip pg_dump's CREATE and COMMENT of it
        listing = subprocess.run([str(pg_restore), "--list", str(src / DUMP_FILE)], capture_output=True, text=True,
                                 env=env)
        if listing.returncode != 0:
            raise PgmemError(f"pg_restore --list failed: {listing.stderr.strip()}")
        keep = [ln for ln in listing.stdout.splitlines()
                if not re.search(r"\b(EXTENSION - vector|COMMENT - EXTENSION vector)\b", ln)]
        fd, name = tempfile.mkstemp(prefix="pgmem-restore-", suffix=".list")  # 0600, O_EXCL
        list_file = Path(name)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("\n".join(keep) + "\n")
        args.append(f"--use-list={list_file}")
    try:
        _run_program(args + [str(src / DUMP_FILE)], env, "pg_restore")
    finally:
        if list_file is not None:
            list_file.unlink(missing_ok=True)
    if data is not None and data["bindings"]:
        from .queries import query

        with _connect(dsn, autocommit=True) as conn:
            try:
                with conn.transaction():
                    for b in data["bindings"]:
                        conn.execute(query("bind_role"), {"role": b["role"], "user_id": b["user_id"]})
            except psycopg.Error as exc:
                err = from_psycopg(exc)
                raise type(err)(f"restoring the role bindings failed: {err.message}",
                                hint="the data is restored; bind the logins of roles.json with pgmem.bind_role") \
                    from exc
    checks = verify(src, dsn, manifest=manifest)
    failed = [c for c in checks if not c.ok]
    if failed:
        raise VerificationFailed("the restored database failed verification: "
                                 + "; ".join(f"{c.name}: {c.detail}" for c in failed), checks=checks)
    return RestoreResult(dbname, created, checks, roles_created, notes)


def _prepare_legacy(dsn: str, manifest: dict, src: Path) -> tuple[str, bool, bool]:
    """:func:`_prepare_target` for a format-1 backup, once the roles its manifest names are known to exist
    (its roles.sql is never executed): PgmemError listing the missing ones otherwise, before anything."""
    names = [n for n in manifest.get("roles") or [] if isinstance(n, str)]
    try:
        conn = psycopg.connect(dsn, connect_timeout=10, autocommit=True)
    except psycopg.OperationalError as exc:  # the target does not exist yet: ask the maintenance database
        if "does not exist" not in str(exc):
            raise DatabaseUnavailable(f"could not connect to {redact_dsn(dsn)}: {exc}") from exc
        conn = _connect(make_conninfo(dsn, dbname="postgres"), autocommit=True)
    with conn:
        missing = _missing_roles(conn, names)
    if missing:
        raise PgmemError(f"this backup was written by an older pgmem (format 1), whose {LEGACY_ROLES_FILE} restore no "
                         f"longer executes, and the roles {', '.join(missing)} do not exist: nothing was restored",
                         hint=f"read {src / LEGACY_ROLES_FILE}, create the roles it should create yourself (it is SQL "
                              "text from a backup: never run it unread), then restore again")
    return _prepare_target(dsn)


# --------------------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------------------
def verify(path: str | os.PathLike, dsn: str, *, manifest: dict | None = None) -> list[Check]:
    """Compare the database at ``dsn`` with the backup in ``path`` and return three checks (never raises for
    a mismatch; raises DatabaseUnavailable when it cannot connect):

    - ``migrations``: no migration of this pgmem is pending, and every migration of the backup is applied;
    - ``row counts``: the exact count of every table in schema pgmem equals the manifest's (needs a role that
      bypasses row-level security, as restore runs);
    - ``probe``: acting as the probe memory's user (``pgmem.act_as``, so a superuser or a pgmem_gateway
      member), its own embedding searched in its space with k=10 returns it, and its content's SHA-256 is
      the manifest's.
    """
    from pgvector.psycopg import register_vector

    from .doctor import migration_state
    from .queries import named

    manifest = manifest or read_manifest(path, check_files=False)
    checks: list[Check] = []
    with _connect(dsn, autocommit=True) as conn:
        try:
            _, todo = migration_state(conn)
            applied = _applied_ids(conn)
        except PgmemError as exc:
            checks.append(Check("migrations", False, f"cannot read the migration state: {exc.message}"))
        else:
            missing = [m for m in manifest["migrations"] if m not in applied]
            problems = ([f"pending: {', '.join(todo)} (pgmem migrate)"] if todo else []) + \
                ([f"applied in the backup but not here: {', '.join(missing)}"] if missing else [])
            checks.append(Check("migrations", not problems,
                                "; ".join(problems) if problems else f"{len(applied)} applied, none pending"))

    with _connect(dsn, autocommit=True) as conn:
        counts = table_counts(conn)
        expected = manifest["tables"]
        diffs = [f"{t}: {expected.get(t, 'absent')} in the backup, {counts.get(t, 'absent')} restored"
                 for t in sorted(set(expected) | set(counts)) if expected.get(t) != counts.get(t)]
        total = sum(counts.values())
        checks.append(Check("row counts", not diffs, "; ".join(diffs) if diffs else
                            f"{len(counts)} tables, {total} rows, equal to the manifest"))

        probe = manifest.get("probe")
        if probe is None:
            checks.append(Check("probe", True, "the backup holds no memory to search for"))
            return checks
        try:
            register_vector(conn)
            with conn.transaction(force_rollback=True):
                conn.execute(*named("act_as", user_id=probe["user_id"]))
                row = conn.execute("SELECT embedding, content FROM pgmem.memories WHERE user_id = %s AND id = %s",
                                   (probe["user_id"], probe["id"])).fetchone()
                if row is None:
                    checks.append(Check("probe", False,
                                        f"memory {probe['id']} of user {probe['user_id']!r} is missing"))
                    return checks
                hits = conn.execute(*named("search", space=probe["space"], embedding=row["embedding"],
                                           k=PROBE_K)).fetchall()
        except psycopg.Error as exc:
            checks.append(Check("probe", False, f"search failed: {from_psycopg(exc).message}"))
            return checks
        found = any(str(h["id"]) == probe["id"] for h in hits)
        same = hashlib.sha256(row["content"].encode("utf-8")).hexdigest() == probe["content_sha256"]
        problems = ([] if found else [f"not among the {len(hits)} hits of its own embedding"]) + \
            ([] if same else ["its content's SHA-256 differs from the manifest's"])
        checks.append(Check("probe", not problems,
                            "; ".join(problems) if problems else
                            f"memory {probe['id'][:8]} of user {probe['user_id']!r} found by search in space "
                            f"{probe['space']!r}, content hash equal"))
    return checks


__all__ = ["backup", "restore", "verify", "read_manifest", "roles_data", "check_roles_data", "table_counts",
           "find_program",
           "BackupResult", "RestoreResult", "VerificationFailed", "INFRASTRUCTURE"]
