"""The defaults of pgmem.defaults are written once: each equals the SQL DEFAULT it restates, and the clients'
signatures read them."""

from __future__ import annotations

import inspect
import re

import psycopg
import pytest

from pgmem import AsyncMemory, Memory, defaults

ARG_DEFAULT = re.compile(r"^(\w+) .*? DEFAULT (.+)$")


def sql_default(admin: psycopg.Connection, function: str, argument: str) -> str:
    """The DEFAULT expression of ``argument`` of the one function ``pgmem.<function>``."""
    rows = admin.execute("SELECT pg_get_function_arguments(p.oid) FROM pg_proc p "
                         "WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proname = %s", (function,)).fetchall()
    assert len(rows) == 1, f"pgmem.{function}: {len(rows)} functions"
    found = {m[1]: m[2] for a in rows[0][0].split(", ") if (m := ARG_DEFAULT.match(a))}
    assert argument in found, f"pgmem.{function} has no DEFAULT for {argument}: {rows[0][0]}"
    return found[argument]


@pytest.mark.parametrize("name", sorted(defaults.SQL_DEFAULTS))
def test_each_constant_is_the_sql_default_it_restates(admin, name):
    value = getattr(defaults, name)
    for function, argument in defaults.SQL_DEFAULTS[name]:
        assert float(sql_default(admin, function, argument)) == value, (name, function, argument)


@pytest.mark.parametrize("client", [Memory, AsyncMemory])
def test_the_clients_signatures_read_the_constants(client):
    def default(method: str, parameter: str):
        return inspect.signature(getattr(client, method)).parameters[parameter].default

    assert inspect.signature(client).parameters["space"].default == defaults.DEFAULT_SPACE
    assert default("search", "k") == defaults.SEARCH_K
    assert default("list", "limit") == defaults.LIST_LIMIT
    assert default("recent_turns", "n") == defaults.RECENT_TURNS
    assert default("pending_turns", "n") == default("consolidate", "max_turns") == defaults.PENDING_TURNS
    assert (default("context", "budget_tokens"), default("context", "max_turns"), default("context", "turn_share"),
            default("context", "k")) == (defaults.CONTEXT_BUDGET_TOKENS, defaults.CONTEXT_MAX_TURNS,
                                         defaults.CONTEXT_TURN_SHARE, defaults.CONTEXT_K)
    assert default("purge", "limit") == defaults.PURGE_LIMIT
