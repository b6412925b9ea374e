"""Helpers of the cluster tests."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def as_login(url: str, login: str, options: str | None = None) -> str:
    """``url`` with its user replaced by ``login`` (trust or a password file assumed) and libpq ``options``."""
    parts = urlsplit(url)
    host = parts.netloc.split("@")[-1]
    query = parts.query
    if options:
        query = (query + "&" if query else "") + "options=" + options.replace(" ", "%20").replace("=", "%3D")
    return urlunsplit((parts.scheme, f"{login}@{host}", parts.path, query, parts.fragment))


def node_url(url: str, host: str, port: int, dbname: str | None = None) -> str:
    """``url`` (a superuser's) pointed at another node's ``host`` and ``port`` (and database)."""
    parts = urlsplit(url)
    user = parts.netloc.split("@")[0] if "@" in parts.netloc else ""
    netloc = (user + "@" if user else "") + f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, "/" + dbname if dbname else parts.path, parts.query, parts.fragment))


def database_url(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def worker_nodes(admin) -> list[tuple[str, int]]:
    """(host, port) of the active workers that hold shards."""
    return [tuple(r) for r in admin.execute(
        "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid > 0 AND isactive AND shouldhaveshards "
        "AND noderole = 'primary' ORDER BY nodeport").fetchall()]
