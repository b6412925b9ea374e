"""pgmem's command line: the embedded server, migrations, spaces, and the memory verbs for a person at a terminal.

Every data command goes through the same :class:`pgmem.Memory` methods as the Python API. Connection and
identity options (``--dsn``, ``--user``, ``--agent``, ``--space``, ``--role``, ``--json``) are accepted
before the command (``pgmem --user alice list``) and after it (``pgmem list --user alice``); a value after
the command wins, then one before it, then the environment (``PGMEM_DSN``, ``PGMEM_USER``, ``PGMEM_AGENT``,
``PGMEM_SPACE``, ``PGMEM_ROLE``), then the default. Without any DSN the embedded server is started (and
migrated) on demand, as ``Memory()`` does.

Output: rich tables for people; ``--json`` prints exactly one JSON document on stdout (ids, UUIDs and
datetimes as strings). Errors of pgmem print ``error: ...`` (and ``hint: ...``) on stderr and exit 1;
usage errors exit 2. The embedding model is loaded only by commands that embed text (add, search, edit,
update).

The package, one module per group of commands: :mod:`~pgmem.cli.app` (the Typer application, its help
and its error handling), :mod:`~pgmem.cli.options` (the shared options and the clients built from them),
:mod:`~pgmem.cli.output` (tables and JSON), then the commands: :mod:`~pgmem.cli.database` (``server``,
``migrate``, ``rollback``...), :mod:`~pgmem.cli.spaces`, :mod:`~pgmem.cli.memories`,
:mod:`~pgmem.cli.lifecycle`, :mod:`~pgmem.cli.hosts` (``mcp``, ``serve``, ``install-plugin``) and
:mod:`~pgmem.cli.operations` (``backup``, ``restore``, ``doctor``).

Adding a command (``pgmem demo``, ``pgmem import``...), in the module of its group; ``COMMAND_GROUPS`` in
:mod:`pgmem.cli.app` lists it in the help::

    @app.command()
    def demo(ctx: typer.Context, dsn: DsnOpt = None, user: UserOpt = None, agent: AgentOpt = None,
             space: SpaceOpt = None, role: RoleOpt = None, as_json: JsonOpt = False) -> None:
        o = options(ctx, dsn=dsn, user=user, agent=agent, space=space, role=role, as_json=as_json)
        with memory(o) as m:
            result = m.add("...")
        emit(o, {"id": result.id}, lambda: console().print(f"added {result.id}"))

:class:`pgmem.errors.PgmemError` raised anywhere in a command becomes the ``error:`` line automatically.
"""


from __future__ import annotations

import os
import sys

from .app import COMMAND_GROUPS, app

# The commands register themselves on `app` when their module is imported, in this order (the order of
# `pgmem -h`'s "Other commands" and of app.registered_commands).
from . import database, spaces, memories, lifecycle, hosts, operations  # noqa: E402, F401, I001

__all__ = ["COMMAND_GROUPS", "app", "main"]


def main() -> None:
    """Entry point of the ``pgmem`` console script."""
    # The model's loading progress bars and notices are noise at a terminal (and in scripts reading stderr).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # httpcore (under httpx, the HTTP embedder's client) imports trio when it is installed, only to run under
    # trio's event loop, which no command of this process uses (asyncio for mcp and serve): 100-200 ms of
    # every command with the HTTP embedder (docs/cli.md). Marked absent for this process only.
    if "trio" not in sys.modules:
        sys.modules["trio"] = None  # type: ignore[assignment]
    app()

