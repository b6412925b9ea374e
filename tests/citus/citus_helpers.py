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
