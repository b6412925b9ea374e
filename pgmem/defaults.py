"""The defaults pgmem's surfaces share, written once: the library (:class:`pgmem.Memory`,
:class:`pgmem.AsyncMemory`), the CLI, the HTTP service, the MCP server and the agent-host integrations read
them from here.

Where the SQL function has a ``DEFAULT`` of its own (``pgmem.search(p_k integer DEFAULT 10, ...)``), the
constant is that default, restated for the Python signatures; tests/client/test_defaults.py checks that each
equals the catalogue's. This module imports nothing, so the CLI can read it without loading the client.
"""

from __future__ import annotations

#: The embedding space a client, a command or a server uses when none is named.
DEFAULT_SPACE = "default"

#: How many memories a search returns (``pgmem.search`` and ``pgmem.search_hybrid``: ``p_k``).
SEARCH_K = 10

#: The page size of :meth:`pgmem.Memory.list` (``pgmem.list``: ``p_limit``).
LIST_LIMIT = 50

#: How many of a session's last turns :meth:`pgmem.Memory.recent_turns` returns (``pgmem.recent_turns``: ``p_n``).
RECENT_TURNS = 20

#: How many pending turns are read, and so consolidated at most, in one call (``pgmem.pending_turns``: ``p_n``).
PENDING_TURNS = 1000

#: :meth:`pgmem.Memory.context` (``pgmem.context``): the token budget (``p_budget_tokens``), the most recent
#: turns shown (``p_max_turns``), their share of the budget (``p_turn_share``) and the memory candidates
#: searched (``p_k``).
CONTEXT_BUDGET_TOKENS = 2000
CONTEXT_MAX_TURNS = 20
CONTEXT_TURN_SHARE = 0.5
CONTEXT_K = 20

#: Rows of each kind one :meth:`pgmem.Memory.purge` removes at most (``pgmem.purge``: ``p_limit``).
PURGE_LIMIT = 10000

#: The SQL default each constant restates, as (function, argument): read by tests/client/test_defaults.py.
SQL_DEFAULTS = {
    "SEARCH_K": (("search", "p_k"), ("search_hybrid", "p_k")),
    "LIST_LIMIT": (("list", "p_limit"),),
    "RECENT_TURNS": (("recent_turns", "p_n"),),
    "PENDING_TURNS": (("pending_turns", "p_n"),),
    "CONTEXT_BUDGET_TOKENS": (("context", "p_budget_tokens"),),
    "CONTEXT_MAX_TURNS": (("context", "p_max_turns"),),
    "CONTEXT_TURN_SHARE": (("context", "p_turn_share"),),
    "CONTEXT_K": (("context", "p_k"),),
    "PURGE_LIMIT": (("purge", "p_limit"),),
}

#: The page a person or an agent is shown at once (``pgmem list``, the MCP tool ``list_memories``): smaller
#: than the library's :data:`LIST_LIMIT`, which is pgmem.list's own default.
SHOWN_PAGE = 20
