"""The pgmem image's entrypoint: check what the deployment gave the container, then run its command.

``pgmem-entrypoint pgmem migrate`` / ``pgmem-entrypoint pgmem serve ...`` (the image's ENTRYPOINT; compose's
``command`` is the argument list). Each failed check prints one line on stderr, ``pgmem-entrypoint: <what is
wrong>: <the fix>``, and exits 78 (EX_CONFIG) before pgmem starts, so a container that cannot work stops at
start with its reason as the last line of its log. The checks, in order:

1. the revision: ``/opt/pgmem/REVISION`` (written by the build) is a 40-hex git commit, and ``$PGMEM_REVISION``,
   when set (compose sets it from the revision it deploys), is one too and the same;
2. the secrets: ``$PGPASSFILE`` exists, is readable, is private (mode 0600 or less: libpq ignores a password
   file others may read) and has a line for the DSN's user with a password;
3. for ``migrate`` and ``serve``: ``--dsn`` or ``$PGMEM_DSN`` names a database (the image never starts the
   embedded server), which answers within 10 s and has pgvector (``migrate`` may create it only as a
   superuser: pgvector is not a trusted extension);
4. for ``serve``: the login is not a superuser, may ``SET ROLE pgmem_gateway``, is not the schema's owner nor a
   member of the function owner ``pgmem_api`` (either could read every tenant's rows), and as pgmem_gateway may
   execute the API (``pgmem.service_migrations()``: the schema is migrated).

Other commands (``pgmem --version``, ``pgmem doctor``, ...) get checks 1 and 2 only. The checks use psycopg,
which pgmem installs; they import nothing of pgmem.
"""

from __future__ import annotations

import os
import re
import stat
import sys

EX_CONFIG = 78
REVISION_FILE = os.environ.get("PGMEM_REVISION_FILE", "/opt/pgmem/REVISION")
HEX40 = re.compile(r"[0-9a-f]{40}")
GATEWAY = "pgmem_gateway"
FUNCTION_OWNER = "pgmem_api"
PROBE = "pgmem.service_migrations()"


class Stop(Exception):
    """One line for the log: what is wrong and the fix."""


def check_revision() -> str:
    try:
        baked = open(REVISION_FILE, encoding="utf-8").read().strip()
    except OSError as exc:
        raise Stop(f"this image records no revision ({REVISION_FILE}: {exc.strerror}): build it with "
                   "deploy/build-image.sh COMMIT") from None
    if not HEX40.fullmatch(baked):
        raise Stop(f"this image's revision {baked!r} is not a 40-hex git commit: rebuild it with deploy/build-image.sh")
    wanted = os.environ.get("PGMEM_REVISION")
    if wanted is not None:
        if not HEX40.fullmatch(wanted):
            raise Stop(f"PGMEM_REVISION={wanted!r} is not a 40-hex git commit: set it to the full commit "
                       "(git rev-parse COMMIT) the image was built from")
        if wanted != baked:
            raise Stop(f"PGMEM_REVISION={wanted} but this image was built from {baked}: build that revision "
                       "(deploy/build-image.sh) or deploy the image of the one you set")
    return baked


def _pgpass_fields(line: str) -> list[str]:
    """The five fields of one pgpass line (``\\:`` and ``\\\\`` unescaped), as libpq splits it."""
    fields, cur, i = [], [], 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line):
            cur.append(line[i + 1])
            i += 2
            continue
        if ch == ":" and len(fields) < 4:
            fields.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    fields.append("".join(cur))
    return fields


def check_secrets(user: str | None) -> None:
    path = os.environ.get("PGPASSFILE")
    if not path:
        return
    hint = "create it with deploy/make-secrets.sh (docs/deployment.md)"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise Stop(f"the secret file {path} (PGPASSFILE) is missing: {hint}") from None
    except OSError as exc:
        raise Stop(f"the secret file {path} (PGPASSFILE) cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise Stop(f"the secret {path} (PGPASSFILE) is not a file: {hint}")
    if st.st_mode & 0o077:
        raise Stop(f"the secret file {path} has mode {stat.S_IMODE(st.st_mode):04o} and libpq ignores a password "
                   "file others may read: chmod 600 it (deploy/make-secrets.sh does)")
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as exc:
        raise Stop(f"the secret file {path} cannot be read by uid {os.getuid()}: {exc.strerror}: deploy/make-secrets.sh "
                   "gives each file to the uid of the container that reads it") from None
    entries = [_pgpass_fields(ln) for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    entries = [f for f in entries if len(f) == 5 and f[4]]
    if not entries:
        raise Stop(f"the secret file {path} holds no host:port:database:user:password line: {hint}")
    if user and not any(f[3] in (user, "*") for f in entries):
        raise Stop(f"the secret file {path} has no password for the login {user!r} of PGMEM_DSN: {hint}")


def _option(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _command(argv: list[str]) -> str | None:
    """The pgmem subcommand of ``argv`` (``pgmem [options] COMMAND ...``), else None."""
    if not argv or os.path.basename(argv[0]) != "pgmem":
        return None
    takes_value = {"--dsn", "-u", "--user", "-a", "--agent", "--space", "--role"}
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in takes_value:
            i += 2
        elif arg.startswith("-"):
            i += 1
        else:
            return arg
    return None


def _where(conninfo: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    try:
        d = conninfo_to_dict(conninfo)
    except Exception:  # noqa: BLE001  # an unparsable DSN is reported by connect
        return "the database of PGMEM_DSN"
    return f"{d.get('user') or '?'}@{d.get('host') or 'localhost'}:{d.get('port') or 5432}/{d.get('dbname') or '?'}"


def check_database(command: str, dsn: str) -> None:
    import psycopg

    where = _where(dsn)
    try:
        conn = psycopg.connect(dsn, connect_timeout=10, autocommit=True)
    except psycopg.Error as exc:
        detail = " ".join(part.strip() for part in str(exc).strip().splitlines() if part.strip()) or "?"
        raise Stop(f"cannot connect to {where}: {detail}") from None
    with conn:
        superuser, installed, available, trusted = conn.execute(
            "SELECT r.rolsuper,"
            "       EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'vector'),"
            "       EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions WHERE name = 'vector'),"
            "       COALESCE((SELECT v.trusted FROM pg_catalog.pg_available_extension_versions v"
            "                 JOIN pg_catalog.pg_available_extensions a ON a.name = v.name AND a.default_version = v.version"
            "                 WHERE v.name = 'vector'), false)"
            "  FROM pg_catalog.pg_roles r WHERE r.rolname = current_user").fetchone()
        db = conn.info.dbname
        if not available:
            raise Stop(f"the PostgreSQL of {where} has no pgvector: run a PostgreSQL with pgvector >= 0.8 "
                       "(compose's db image pgvector/pgvector)")
        if not installed and not (command == "migrate" and (superuser or trusted)):
            raise Stop(f"pgvector is not installed in database {db} of {where}: as a superuser, in {db}: "
                       "CREATE EXTENSION vector; (deploy/initdb/10-roles.sh does on the first start)")
        if command != "serve":
            return
        login = conn.info.user
        if superuser:
            raise Stop(f"the API's login {login!r} is a superuser: run pgmem serve as a login that is only a member "
                       f"of {GATEWAY} (pgmem_service, deploy/initdb/10-roles.sh)")
        try:
            conn.execute(f"SET ROLE {GATEWAY}")
        except psycopg.Error as exc:
            raise Stop(f"the API's login {login!r} cannot SET ROLE {GATEWAY} ({(exc.diag.message_primary or '').strip()}): "
                       f"as the schema owner or a superuser: GRANT {GATEWAY} TO \"{login}\";") from None
        owner, member_of_owner, in_function_owner = conn.execute(
            "SELECT pg_catalog.pg_get_userbyid(n.nspowner),"
            "       pg_catalog.pg_has_role(session_user, n.nspowner, 'MEMBER'),"
            "       EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s)"
            "       AND pg_catalog.pg_has_role(session_user, %s, 'MEMBER')"
            "  FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgmem'",
            (FUNCTION_OWNER, FUNCTION_OWNER)).fetchone() or (None, False, False)
        if owner is None:
            raise Stop(f"database {db} of {where} has no schema pgmem: run the migrate job first "
                       "(docker compose up migrate)")
        if member_of_owner or in_function_owner:
            what = f"owns the schema pgmem (as {owner})" if member_of_owner else f"is a member of {FUNCTION_OWNER}"
            raise Stop(f"the API's login {login!r} {what}, so it could read every tenant's rows: run pgmem serve "
                       f"as a login that is only a member of {GATEWAY} (pgmem_service, deploy/initdb/10-roles.sh)")
        if not conn.execute("SELECT pg_catalog.has_function_privilege(%s, 'EXECUTE')", (PROBE,)).fetchone()[0]:
            raise Stop(f"{GATEWAY} may not execute the API in database {db} ({PROBE}): run the migrate job of this "
                       "revision (it grants it)")


def main(argv: list[str]) -> int:
    if not argv:
        print("pgmem-entrypoint: no command given: e.g. pgmem serve --host 0.0.0.0", file=sys.stderr)
        return 64
    command = _command(argv)
    dsn = _option(argv, "--dsn") or os.environ.get("PGMEM_DSN")
    user = None
    if dsn:
        try:
            from psycopg.conninfo import conninfo_to_dict

            user = conninfo_to_dict(dsn).get("user")
        except Exception:  # noqa: BLE001  # reported by connect
            user = None
    try:
        check_revision()
        check_secrets(user)
        if command in ("migrate", "serve"):
            if not dsn:
                raise Stop(f"pgmem {command} in this image needs PGMEM_DSN (or --dsn): the image serves an external "
                           "PostgreSQL, never an embedded one")
            check_database(command, dsn)
    except Stop as stop:
        print(f"pgmem-entrypoint: {stop}", file=sys.stderr, flush=True)
        return EX_CONFIG
    sys.stdout.flush()
    os.execvp(argv[0], argv)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
