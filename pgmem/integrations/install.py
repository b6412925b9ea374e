"""``pgmem install-plugin HOST``: a shim package in an agent host's plugin directory that imports the
pip-installed pgmem. The shim holds no pgmem code, so upgrading is ``pip install -U pgmem-agents`` and a restart.

hermes-agent: ``$HERMES_HOME/plugins/pgmem/`` (``__init__.py`` + ``plugin.yaml``); hermes scans that
directory for memory providers (it reads no entry point for them). A previous install is moved to a hidden
``.pgmem.backup-<time>`` beside it (hermes skips names starting with a dot); the new shim is written to a
temporary directory, renamed into place, and loaded in a fresh interpreter the way hermes loads it; if
that fails, the previous install is put back and the error is raised.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from ..errors import PgmemError, ValidationError

HOSTS = ("hermes",)
PLUGIN = "pgmem"

HERMES_SHIM = '''\
"""pgmem memory provider for hermes-agent (MemoryProvider): a shim written by `pgmem install-plugin hermes`.

It holds no pgmem code: it imports the pgmem installed with pip in this Python, so
`pip install -U pgmem-agents` and a restart upgrade it. Remove it with `pgmem install-plugin hermes --uninstall`.
"""

try:
    from pgmem.integrations.hermes import PgmemMemoryProvider
except ImportError as exc:  # pragma: no cover - pgmem missing from hermes' Python
    import logging
    import sys

    logging.getLogger(__name__).warning(
        "the pgmem memory provider needs pgmem in this Python (%s): pip install pgmem-agents (%s)", sys.executable, exc)
    raise


def register(ctx):
    ctx.register_memory_provider(PgmemMemoryProvider())
'''

HERMES_YAML = """\
name: pgmem
version: {version}
description: "pgmem: shared, durable memory for all of a user's agents, on PostgreSQL and pgvector (hybrid recall)."
pip_dependencies:
  - pgmem-agents
"""

# Loads the shim as hermes' plugins.memory._load_provider_from_dir does (a module from a file, then
# register(ctx)), in a fresh interpreter with HERMES_HOME set; prints the provider's name.
VERIFY = textwrap.dedent("""\
    import importlib.util, sys
    sys.dont_write_bytecode = True  # the check leaves no __pycache__ in the user's plugin directory
    path = sys.argv[1]
    spec = importlib.util.spec_from_file_location("_pgmem_shim_check", path + "/__init__.py",
                                                  submodule_search_locations=[path])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    class Ctx:
        provider = None
        def register_memory_provider(self, p):
            self.provider = p
    ctx = Ctx()
    mod.register(ctx)
    print(ctx.provider.name)
""")

ACTIVATE = textwrap.dedent("""\
    from hermes_cli.config import load_config, save_config
    config = load_config()
    config.setdefault("memory", {})["provider"] = "pgmem"
    save_config(config)
""")


def hermes_home(home: Path | str | None = None) -> Path:
    """``home``, else ``$HERMES_HOME``, else ``~/.hermes`` (hermes' own default)."""
    return Path(home or os.environ.get("HERMES_HOME") or Path.home() / ".hermes").expanduser()


def _check_host(host: str) -> None:
    if host not in HOSTS:
        raise ValidationError(f"unknown agent host {host!r}", field="host", hint=f"one of: {', '.join(HOSTS)}")


def _run(code: str, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HERMES_HOME": str(home)}
    return subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=str(home), capture_output=True,
                          text=True, timeout=120)


def hermes_version() -> str | None:
    """The version of hermes-agent installed in this Python, or None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hermes-agent")
    except PackageNotFoundError:
        return None


def install(host: str, home: Path | str | None = None, *, activate: bool = False) -> dict[str, Any]:
    """Write the shim for ``host``; returns ``{"path", "backup", "activated", "message"}``.

    Raises PgmemError, having changed nothing on disk, when hermes-agent is not installed in this Python
    (the shim would import a pgmem hermes never sees), when the shim does not load in a fresh interpreter,
    or when ``activate`` fails: the previous install is put back and directories the command created are
    removed."""
    from .. import __version__

    _check_host(host)
    if hermes_version() is None:
        raise PgmemError(f"hermes-agent is not installed in this Python ({sys.executable}); nothing was written",
                         hint="run pgmem install-plugin hermes with the Python that runs hermes-agent (where "
                              "`pip install hermes-agent` went), after `pip install pgmem-agents` there")
    root = hermes_home(home)
    plugins = root / "plugins"
    created = [d for d in (root, plugins) if not d.exists()]  # removed again when the install fails
    plugins.mkdir(parents=True, exist_ok=True)
    target = plugins / PLUGIN
    staging = Path(tempfile.mkdtemp(prefix=f".{PLUGIN}.new-", dir=plugins))
    (staging / "__init__.py").write_text(HERMES_SHIM, encoding="utf-8")
    (staging / "plugin.yaml").write_text(HERMES_YAML.format(version=__version__), encoding="utf-8")
    backup = None
    if target.exists() or target.is_symlink():
        backup = plugins / f".{PLUGIN}.backup-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        target.rename(backup)
    staging.rename(target)

    def undo() -> None:
        shutil.rmtree(target, ignore_errors=True)
        if backup is not None:
            backup.rename(target)
        for d in reversed(created):
            with contextlib.suppress(OSError):
                d.rmdir()  # only when empty: nothing of the user's is removed

    check = _run(VERIFY, str(target), home=root)
    if check.returncode != 0 or check.stdout.strip() != PLUGIN:
        undo()
        detail = (check.stderr.strip().splitlines() or ["no output"])[-1]
        raise PgmemError(f"the {host} shim does not load in a fresh interpreter ({sys.executable}): {detail}",
                         hint="install pgmem into the Python that runs hermes-agent: pip install pgmem-agents")
    activated = False
    if activate:
        done = _run(ACTIVATE, home=root)
        if done.returncode != 0:
            undo()
            detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise PgmemError(f"could not set memory.provider, so nothing was installed: {detail}",
                             hint="check hermes' config.yaml, then run the command again; or install without "
                                  "--activate and run: hermes config set memory.provider pgmem")
        activated = True
    message = f"installed {target} (imports pgmem {__version__} from {Path(sys.executable).parent})"
    if backup is not None:
        message += f"\nprevious install kept in {backup}"
    message += "\nmemory.provider set to pgmem" if activated else \
        "\nactivate it with: hermes config set memory.provider pgmem (or pass --activate)"
    return {"path": str(target), "backup": str(backup) if backup else None, "activated": activated,
            "message": message}


def uninstall(host: str, home: Path | str | None = None) -> dict[str, Any]:
    """Remove the shim (backups stay); ``{"path", "removed", "message"}``."""
    _check_host(host)
    target = hermes_home(home) / "plugins" / PLUGIN
    removed = target.exists() or target.is_symlink()
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif removed:
        shutil.rmtree(target)
    message = f"removed {target}" if removed else f"nothing to remove: {target} does not exist"
    return {"path": str(target), "removed": removed, "message": message}
