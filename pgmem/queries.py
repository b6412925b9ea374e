"""Named SQL statements, read from ``queries.sql`` next to this file (procrastinate's layout).

Each block of ``queries.sql`` is a ``-- name -- route`` line and one statement. The route (``as_user``,
``act_as`` or ``as_login``, described at the top of ``queries.sql``) says how a call carries the user it acts
for; :mod:`pgmem.transport` runs a statement by its route. An ``as_user`` statement is written with its
identity: its first argument wrapped in ``pgmem.as_user(%(pgmem_user_id)s::text, ...)``, exactly as it runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any
from importlib import resources

ROUTES = ("as_user", "act_as", "as_login")
# The as_user statements whose function has a ``<name>_for(p_user_id, ...)`` twin (sql/current/95-cluster.sql):
# on a Citus cluster the call runs as that twin, which Citus delegates to the worker holding the user's rows.
DELEGATED = frozenset({"add", "add_batch", "get", "list", "edit", "search", "search_hybrid"})
FOR_USER = "p_user_id => %(pgmem_user_id)s::text, "
"""The first argument of a ``*_for`` call: the user it acts for, the distribution argument."""
AS_USER = "pgmem.as_user(%(pgmem_user_id)s::text, "
"""How an ``as_user`` statement opens the wrapper of its first argument (the argument follows, then ``)``)."""

_HEADER = re.compile(r"^-- (?P<name>[a-z_]+) -- (?P<route>[a-z_]+)$", re.MULTILINE)
_OLD_HEADER = re.compile(r"^-- (?P<name>[a-z_]+) --$", re.MULTILINE)
# The argument inside the wrapper: one placeholder and its cast (types of one word, arrays included).
_WRAPPED = re.compile(re.escape(AS_USER) + r"(?P<arg>%\(\w+\)[sb]::[a-z_]+(?:\[\])?)\)")


@dataclass(frozen=True)
class Statement:
    """One named statement of ``queries.sql``.

    ``text``: the statement as written (for ``as_user``, with the wrapper and the ``pgmem_user_id``
    placeholder); ``plain``: the call without identity, run by a client acting for no user and inside a
    transaction that ran ``pgmem.act_as`` first (equal to ``text`` for the other routes)."""

    name: str
    route: str
    text: str
    plain: str
    delegated: str | None = None
    """For the names in :data:`DELEGATED`: the call of the ``<name>_for`` twin, the user its first argument
    (``%(pgmem_user_id)s``); else None."""


def parse(text: str) -> dict[str, Statement]:
    """The statements of a ``queries.sql`` text, by name. Raises ValueError for a block without a known route,
    a name given twice, or an ``as_user`` statement without exactly one wrapper (and another route's with one)."""
    stale = _OLD_HEADER.search(text)
    if stale:
        raise ValueError(f"queries.sql: block {stale['name']!r} declares no route ('-- name -- route', route one "
                         f"of {', '.join(ROUTES)})")
    parts = _HEADER.split(text)
    # parts: [preamble, name1, route1, body1, name2, route2, body2, ...]
    out: dict[str, Statement] = {}
    for name, route, body in zip(parts[1::3], parts[2::3], parts[3::3]):
        body = body.strip()
        if route not in ROUTES:
            raise ValueError(f"queries.sql: block {name!r} has route {route!r}, not one of {', '.join(ROUTES)}")
        if name in out:
            raise ValueError(f"queries.sql: block {name!r} is defined twice")
        wrapped = _WRAPPED.findall(body)
        if route == "as_user":
            if len(wrapped) != 1 or body.count(AS_USER) != 1:
                raise ValueError(f"queries.sql: as_user block {name!r} must wrap exactly one argument as "
                                 f"{AS_USER}%(x)s::type)")
            plain = _WRAPPED.sub(lambda m: m["arg"], body)
        else:
            if AS_USER in body:
                raise ValueError(f"queries.sql: {route} block {name!r} must not call pgmem.as_user")
            plain = body
        delegated = None
        if name in DELEGATED and route == "as_user" and plain.count(f"pgmem.{name}(") == 1:
            delegated = plain.replace(f"pgmem.{name}(", f"pgmem.{name}_for({FOR_USER}", 1)
        out[name] = Statement(name, route, body, plain, delegated)
    return out


@cache
def statements() -> dict[str, Statement]:
    """Every statement of ``queries.sql``, by name."""
    return parse(resources.files("pgmem").joinpath("queries.sql").read_text(encoding="utf-8"))


@cache
def all_queries() -> dict[str, str]:
    """Every statement's call without identity (:attr:`Statement.plain`), by name."""
    return {name: s.plain for name, s in statements().items()}


def statement(name: str) -> Statement:
    """The statement called ``name``; KeyError when there is none."""
    return statements()[name]


def query(name: str) -> str:
    """The call ``name`` without identity (:attr:`Statement.plain`); KeyError when there is none."""
    return statements()[name].plain


def query_as_user(name: str) -> str | None:
    """The statement ``name`` as written when it takes the ``as_user`` route (acting for
    ``%(pgmem_user_id)s`` within the statement), else None."""
    s = statements()[name]
    return s.text if s.route == "as_user" else None


def named(statement: str, /, **given: Any) -> tuple[str, dict[str, Any]]:
    """The named statement ``statement`` of ``queries.sql`` and its parameters: ``given``, and None for every
    other placeholder of the statement (the stored functions' defaults), so that an optional parameter added
    to a statement later needs no change here. KeyError for an unknown name or a parameter it lacks."""
    text = query(statement)
    wanted = set(re.findall(r"%\((\w+)\)[sb]", text))
    unknown = set(given) - wanted
    if unknown:
        raise KeyError(f"statement {statement!r} has no parameter {sorted(unknown)}")
    return text, {k: given.get(k) for k in wanted}
