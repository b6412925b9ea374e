"""Named SQL statements, read from ``queries.sql`` next to this file (procrastinate's layout)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_BLOCK = re.compile(r"^-- (?P<name>[a-z_]+) --$", re.MULTILINE)


@cache
def all_queries() -> dict[str, str]:
    text = resources.files("pgmem").joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _BLOCK.split(text)
    # parts: [preamble, name1, body1, name2, body2, ...]
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2])}


def query(name: str) -> str:
    """The statement called ``name``; KeyError when there is none."""
    return all_queries()[name]


# Calls of LANGUAGE sql functions: a scalar SQL function may be inlined into the statement, so its body could
# run before an argument wrapped in pgmem.as_user (tests/test_search_plans.py checks the rest are PL/pgSQL).
NOT_AS_USER = frozenset({"act_as", "bind_role", "current_user_id", "append_turn", "sources", "purge", "token_count"})
_FIRST_ARG = re.compile(r"=> (%\((?P<name>\w+)\)[sb]::[\w\[\]]+)")


@cache
def query_as_user(name: str) -> str | None:
    """The statement ``name`` acting for ``%(pgmem_user_id)s`` in the same statement: its first argument wrapped
    in ``pgmem.as_user`` (migration 0004). None for the statements in NOT_AS_USER, the service's (``service_*``:
    its own state, and service_agents, which takes no argument), or without an argument."""
    if name in NOT_AS_USER or name.startswith("service_"):  # the service's own state: run acting for nobody
        return None
    sql = all_queries()[name]
    m = _FIRST_ARG.search(sql)
    if m is None:
        return None
    if sql[m.end(1):m.end(1) + 1] not in (",", ")"):  # a type of two words (double precision): not handled
        return None
    return sql[:m.start(1)] + f"pgmem.as_user(%(pgmem_user_id)s::text, {m.group(1)})" + sql[m.end(1):]
