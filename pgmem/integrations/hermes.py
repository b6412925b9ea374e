"""A hermes-agent memory provider on :class:`pgmem.Memory` (hermes-agent's ``agent.memory_provider`` API).

hermes-agent finds memory providers only in directories (its bundled ``plugins/memory/<name>/`` and
``$HERMES_HOME/plugins/<name>/``), so ``pgmem install-plugin hermes`` writes a shim there that imports this
module; it is activated with ``memory.provider: pgmem`` in hermes' config.yaml (``--activate``).

What the host calls, and what the provider does:

- ``is_available()``: configuration and installed packages only, no network.
- ``initialize(session_id, **kwargs)``: remembers the host's identity (:func:`resolve_user`: the ``user_id``
  of gateway sessions namespaced by platform, ``telegram:12345``; on the CLI the configured user, else the OS
  login; a gateway session without a user id gets no memory; the agent is ``hermes`` or
  ``hermes:<profile>``) and connects in a background thread, so a slow or unreachable database never
  blocks the agent's start. A space whose model differs from the embedder's is ``unavailable``, never
  ``ready``.
- ``get_tool_schemas()`` / ``handle_tool_call()``: ``pgmem_recall`` (hybrid search) and ``pgmem_remember``.
- ``prefetch(query)``: recall for the coming turn within ``prefetch_budget`` seconds (default 3, below the
  host's own 8 s cut-off); a recall queued by ``queue_prefetch`` after the previous turn is served from cache.
- ``sync_turn()`` and ``on_memory_write()`` (mirroring hermes' built-in memory tool: add, replace and remove
  in the shapes of hermes' MemoryManager, see :meth:`PgmemMemoryProvider.on_memory_write`) queue writes for one
  writer thread: the queue is bounded (a full queue blocks the caller up to ``queue_timeout`` seconds, then
  the write is kept in the pending file, never dropped).
- ``on_session_end()`` waits until the queue is written; ``shutdown()`` drains it (``drain_timeout``), keeps
  anything left in ``$HERMES_HOME/pgmem/pending.jsonl`` (mode 0600; replayed by the next session) and closes
  the pool.

Nothing raises into the agent loop: failures are logged, counted in :meth:`status`, and reported through
the host's ``warning_callback`` (and ``status_callback`` for state changes) when it passed them.

Configuration (environment first, then ``$HERMES_HOME/pgmem.json`` written by ``hermes memory setup``):
``PGMEM_DSN`` (default: the embedded server), ``PGMEM_USER``, ``PGMEM_AGENT``, ``PGMEM_SPACE``,
``PGMEM_ROLE``; the embedder is pgmem's shared embedder configuration (``PGMEM_EMBEDDER`` and the other
``PGMEM_EMBED_*`` variables, then ``~/.config/pgmem/config.toml``; default all-MiniLM-L6-v2, local), unless
``pgmem.json`` names one (``local``, ``http``, ``openai:MODEL:DIMS`` or ``package.module:Factory``).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from ..defaults import DEFAULT_SPACE
from ..errors import DatabaseUnavailable, DuplicateMemory, EmbeddingSpaceMismatch, PgmemError, redact_dsn
from ..validation import MAX_CONTENT_CHARS

log = logging.getLogger("pgmem.hermes")

try:  # the host's base class when hermes-agent is importable; the provider also works without it (tests)
    from agent.memory_provider import MemoryProvider as _Base  # type: ignore[import-not-found]
except Exception:  # pragma: no cover - hermes-agent not installed
    _Base = object  # type: ignore[misc,assignment]

NAME = "pgmem"
CONFIG_FILE = "pgmem.json"
PENDING_FILE = Path("pgmem") / "pending.jsonl"
SOURCE = "hermes"

DEFAULTS: Dict[str, Any] = {
    "dsn": None, "user": None, "agent": None, "space": DEFAULT_SPACE, "role": None, "embedder": None,
    "prefetch_k": 5, "prefetch_budget": 3.0, "recall_k": 8, "sync_turns": True, "queue_size": 1000,
    "queue_timeout": 5.0, "drain_timeout": 10.0, "connect_timeout": 60.0,
}
ENV = {"dsn": "PGMEM_DSN", "user": "PGMEM_USER", "agent": "PGMEM_AGENT", "space": "PGMEM_SPACE",
       "role": "PGMEM_ROLE", "embedder": "PGMEM_EMBEDDER"}

RECALL_SCHEMA = {
    "name": "pgmem_recall",
    "description": "Search the user's long-term memory (pgmem, shared by all of the user's agents) for facts, "
                   "preferences and decisions relevant to a question. Returns the best matches first.",
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "A natural-language question or keywords."},
            "k": {"type": "integer", "minimum": 1, "maximum": 50, "description": "How many memories (default 8)."},
        },
        "required": ["query"],
    },
}
REMEMBER_SCHEMA = {
    "name": "pgmem_remember",
    "description": "Store one durable fact, preference or decision about the user in long-term memory (pgmem), "
                   "where the user's other agents can recall it. One fact per call, as a full sentence.",
    "parameters": {
        "type": "object",
        "properties": {
            "content": {"type": "string", "description": "The fact, as a self-contained sentence."},
            "metadata": {"type": "object", "description": "Optional JSON object, e.g. {\"topic\": \"travel\"}."},
        },
        "required": ["content"],
    },
}


def load_config(hermes_home: Optional[str] = None, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The provider's settings: defaults, then ``$HERMES_HOME/pgmem.json``, then the environment, then
    ``overrides``."""
    cfg = dict(DEFAULTS)
    if hermes_home:
        path = Path(hermes_home) / CONFIG_FILE
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise PgmemError(f"{path} must hold a JSON object")
            cfg.update({k: v for k, v in data.items() if k in DEFAULTS})
    for key, var in ENV.items():
        if os.environ.get(var):
            cfg[key] = os.environ[var]
    cfg.update({k: v for k, v in (overrides or {}).items() if k in DEFAULTS})
    return cfg


def make_embedder(spec: Optional[str]) -> Any:
    """An embedder from the provider's ``embedder`` setting (``local``, ``e5``, ``http``,
    ``openai:MODEL:DIMS``, ``sentence-transformers`` or ``package.module:Factory``); unset, pgmem's shared embedder configuration
    (environment, then ``~/.config/pgmem/config.toml``) decides: :func:`pgmem.embedders.from_config`."""
    from ..embedders import from_config

    return from_config(embedder=(spec or "").strip() or None)


def _shared_embedder_kind() -> str:
    from ..embedders import load_config as load_embedder_config

    try:
        return load_embedder_config().embedder
    except PgmemError as exc:
        return f"(invalid: {exc})"


def _embedder_installed(spec: Optional[str]) -> bool:
    from ..embedders import available

    return available((spec or "").strip() or None)


class PgmemMemoryProvider(_Base):  # type: ignore[misc,valid-type]
    """pgmem as hermes-agent's external memory provider. ``config``: settings overriding the environment and
    ``pgmem.json`` (see :data:`DEFAULTS`); ``memory``: an already built :class:`pgmem.Memory` (tests)."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, *, memory: Any = None) -> None:
        self._overrides = dict(config or {})
        self._cfg: Dict[str, Any] = load_config(None, self._overrides)
        self._memory = memory
        self._ready = threading.Event()  # connected
        self._attempted = threading.Event()  # the connection attempt is over (connected or failed)
        self._session_id = ""
        self._hermes_home: Optional[str] = None
        self._user: Optional[str] = None
        self._agent: Optional[str] = None
        self._writes_enabled = True
        self._warn: Optional[Callable[[str], None]] = None
        self._notify: Optional[Callable[[str], None]] = None
        self._queue: Optional[queue.Queue] = None
        self._worker: Optional[threading.Thread] = None
        self._recaller: Optional[ThreadPoolExecutor] = None
        self._prefetched: Dict[str, Any] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._stats = {"state": "not initialised", "written": 0, "failed_writes": 0, "kept_pending": 0,
                       "skipped_writes": 0, "recalls": 0, "prefetch_timeouts": 0, "last_error": None}

    # -- identity and status ----------------------------------------------------------------------------
    @property
    def name(self) -> str:  # type: ignore[override]
        return NAME

    def status(self) -> Dict[str, Any]:
        """State (``connecting``, ``ready``, ``unavailable``, ``closed``), identity, counters, last error."""
        with self._lock:
            out = dict(self._stats)
        out.update(user=self._user, agent=self._agent, session=self._session_id,
                   queued=self._queue.unfinished_tasks if self._queue is not None else 0)
        return out

    def _set_state(self, state: str) -> None:
        with self._lock:
            self._stats["state"] = state
        self._emit(self._notify, f"pgmem memory: {state}")

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._stats[key] += n

    def _fail(self, what: str, exc: BaseException) -> None:
        message = f"pgmem memory: {what}: {exc}"
        log.warning(message)
        with self._lock:
            self._stats["last_error"] = message
        self._emit(self._warn, message)

    @staticmethod
    def _emit(callback: Optional[Callable[[str], None]], message: str) -> None:
        if callback is None:
            return
        try:
            callback(message)
        except Exception:  # the host's callback must not break us either
            log.debug("status callback failed", exc_info=True)

    # -- configuration (hermes memory setup / status) ---------------------------------------------------
    def is_available(self) -> bool:
        """Configured and installed; no network (the connection is made by initialize, in the background)."""
        try:
            cfg = load_config(self._hermes_home or _hermes_home(), self._overrides)
            return _embedder_installed(cfg["embedder"])
        except Exception as exc:
            log.debug("pgmem provider unavailable: %s", exc)
            return False

    def get_config_schema(self) -> List[Dict[str, Any]]:
        return [
            {"key": "dsn", "description": "PostgreSQL URL (empty: pgmem's embedded server)", "secret": True,
             "env_var": "PGMEM_DSN"},
            {"key": "user", "description": "pgmem user when the host names none (default: your login name)",
             "env_var": "PGMEM_USER"},
            {"key": "space", "description": "Embedding space", "default": DEFAULT_SPACE},
            {"key": "embedder", "description": "Embedder: local, e5, http, openai:MODEL:DIMS or package.module:Factory "
             "(empty: pgmem's shared embedder configuration)"},
        ]

    def save_config(self, values: Dict[str, Any], hermes_home: str) -> None:
        path = Path(hermes_home) / CONFIG_FILE
        current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        current.update({k: v for k, v in values.items() if k in DEFAULTS and k != "dsn"})  # the DSN is a secret
        path.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")

    def get_status_config(self, provider_config: Dict[str, Any]) -> Dict[str, Any]:
        cfg = load_config(self._hermes_home or _hermes_home(), self._overrides)
        dsn = cfg.get("dsn")
        return {"dsn": redact_dsn(dsn) if dsn else "(embedded server)", "user": cfg.get("user") or "(host's)",
                "space": cfg["space"], "embedder": cfg["embedder"] or _shared_embedder_kind()}

    # -- lifecycle --------------------------------------------------------------------------------------
    def initialize(self, session_id: str, **kwargs: Any) -> None:
        try:
            self._hermes_home = kwargs.get("hermes_home") or _hermes_home()
            self._cfg = load_config(self._hermes_home, self._overrides)
            self._warn = kwargs.get("warning_callback")
            self._notify = kwargs.get("status_callback")
            self._session_id = session_id or ""
            self._user = resolve_user(kwargs.get("platform"), kwargs.get("user_id"), self._cfg["user"])
            profile = kwargs.get("agent_identity")
            self._agent = self._cfg["agent"] or (f"hermes:{profile}" if profile and profile != "default" else "hermes")
            # the host asks providers not to write from cron, subagent and flush contexts
            self._writes_enabled = kwargs.get("agent_context", "primary") == "primary"
            self._queue = queue.Queue(maxsize=int(self._cfg["queue_size"]))
            self._recaller = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgmem-recall")
            self._closed = False
            if self._user is None:
                self._writes_enabled = False
                # A gateway session without a user id: there is nobody to remember for, and one shared fallback
                # identity would mix every person of the platform into one memory.
                self._set_state("unavailable")
                self._fail("no user", PgmemError(
                    f"hermes passed no user id for platform {kwargs.get('platform')!r}; memory is off for this "
                    "session (nothing is stored or recalled)"))
                self._attempted.set()
                return
            self._set_state("connecting")
            self._worker = threading.Thread(target=self._run_worker, name="pgmem-writer", daemon=True)
            self._worker.start()
        except Exception as exc:
            self._fail("initialise failed", exc)

    def _connect(self) -> None:
        if self._memory is None:
            from ..client import Memory

            cfg = self._cfg
            self._memory = Memory(cfg["dsn"] or None, user_id=self._user, agent_id=self._agent, space=cfg["space"],
                                  role=cfg["role"] if cfg["role"] else ..., embedder=make_embedder(cfg["embedder"]),
                                  min_size=1, max_size=4)
        else:
            self._memory = self._memory.with_identity(user_id=self._user, agent_id=self._agent)
        space = self._memory.space()
        emb = self._memory.embedder
        if (emb.model_name, emb.dims) != (space.model, space.dims):
            # Every write and search would fail: say so now instead of "ready" (writes stay pending).
            raise EmbeddingSpaceMismatch(
                f"space {space.name!r} holds embeddings of model {space.model!r} ({space.dims} dimensions), but the "
                f"configured embedder is {emb.model_name!r} ({emb.dims} dimensions)",
                hint="set PGMEM_EMBEDDER to the space's model, or PGMEM_SPACE to a space of this embedder")
        emb.embed(["warm up"])

    def _run_worker(self) -> None:
        try:
            self._connect()
        except Exception as exc:
            self._set_state("unavailable")
            self._fail("could not connect", exc)
            self._attempted.set()
            return  # queued writes stay queued; shutdown keeps them in the pending file
        self._ready.set()
        self._attempted.set()
        self._set_state("ready")
        for item in self._take_pending():
            self._put(item)
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._apply(item)
            finally:
                self._queue.task_done()

    def _apply(self, item: Dict[str, Any]) -> None:
        m = self._memory
        try:
            if item["op"] == "add":
                m.add(item["content"], metadata=item.get("metadata"), session_id=item.get("session_id") or None)
            elif item["op"] in ("remove", "replace"):
                found = self._mirrored(item["old_text"], item.get("target"))
                if len(found) != 1:
                    what = "no mirrored entry contains" if not found else f"{len(found)} mirrored entries contain"
                    self._count("skipped_writes")
                    self._fail(f"{item['op']} not mirrored", PgmemError(
                        f"{what} {item['old_text'][:80]!r} (target {item.get('target')!r}); nothing was changed"))
                    return
                if item["op"] == "remove":
                    m.delete(found[0].id)
                else:
                    try:
                        m.update(found[0].id, content=item["content"])
                    except DuplicateMemory:  # the new text is mirrored already: the old copy just goes
                        m.delete(found[0].id)
            self._count("written")
        except DatabaseUnavailable as exc:
            self._keep_pending([item])
            self._fail("write kept for later", exc)
        except Exception as exc:
            self._count("failed_writes")
            self._fail(f"write failed ({item['op']})", exc)

    def _mirrored(self, old_text: str, target: Optional[str]) -> List[Any]:
        """The distinct mirrored entries of the built-in memory tool (``target`` memory or user) whose text
        contains ``old_text``, as the tool itself matches an entry (a literal, case-sensitive substring)."""
        flt = {"source": SOURCE, "kind": "memory", "target": target}
        out: List[Any] = []
        cursor = None
        while True:
            page = self._memory.list(contains=old_text, filter=flt, limit=1000, cursor=cursor)
            out += [r for r in page.items if old_text in r.content]
            if page.next_cursor is None or len(out) > 1:
                return out
            cursor = page.next_cursor

    def _wait_ready(self, timeout: float) -> bool:
        self._attempted.wait(timeout)
        return self._ready.is_set() and not self._closed

    # -- tools ------------------------------------------------------------------------------------------
    def get_tool_schemas(self) -> List[Dict[str, Any]]:
        return [RECALL_SCHEMA, REMEMBER_SCHEMA]

    def handle_tool_call(self, tool_name: str, args: Dict[str, Any], **kwargs: Any) -> str:
        try:
            if tool_name not in ("pgmem_recall", "pgmem_remember"):
                return json.dumps({"error": f"unknown tool {tool_name!r}"})
            if not self._wait_ready(float(self._cfg["connect_timeout"])):
                return json.dumps({"error": "pgmem memory is not available: " + str(self.status()["last_error"])})
            if tool_name == "pgmem_recall":
                k = int(args.get("k") or self._cfg["recall_k"])
                hits = self._memory.search(str(args.get("query", "")), k=k)
                self._count("recalls")
                return json.dumps({"memories": [_hit(h) for h in hits]}, ensure_ascii=False)
            res = self._memory.add(str(args.get("content", "")), metadata=args.get("metadata") or None,
                                   session_id=self._session_id or None)
            self._count("written")
            return json.dumps({"id": str(res.id), "created": res.created})
        except PgmemError as exc:
            return json.dumps({"error": str(exc)}, ensure_ascii=False)
        except Exception as exc:
            self._fail(f"tool {tool_name} failed", exc)
            return json.dumps({"error": f"pgmem memory failed: {type(exc).__name__}"})

    def system_prompt_block(self) -> str:
        if not self._writes_enabled and self._stats["state"] == "unavailable":
            return ""
        return ("Long-term memory (pgmem) is active: relevant memories may be added before a turn. Use "
                "pgmem_recall to look up what was learned earlier about the user, and pgmem_remember to store "
                "durable facts, preferences and decisions (one per call).")

    # -- recall before a turn ---------------------------------------------------------------------------
    def _recall_text(self, query: str) -> str:
        if not self._wait_ready(0):
            return ""
        hits = self._memory.search(query, k=int(self._cfg["prefetch_k"]))
        self._count("recalls")
        if not hits:
            return ""
        lines = [f"- {h.content}" + (f" ({h.agent_id})" if h.agent_id else "") for h in hits]
        return "Relevant long-term memories (pgmem):\n" + "\n".join(lines)

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        try:
            if self._recaller is not None and query.strip() and not self._closed:
                with self._lock:
                    self._prefetched = {query: self._recaller.submit(self._recall_text, query)}
        except Exception as exc:
            self._fail("prefetch failed", exc)

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        try:
            if self._recaller is None or not query.strip() or not self._wait_ready(0):
                return ""
            with self._lock:
                future = self._prefetched.pop(query, None)
            if future is None:
                future = self._recaller.submit(self._recall_text, query)
            return future.result(timeout=float(self._cfg["prefetch_budget"]))
        except FutureTimeout:
            self._count("prefetch_timeouts")
            log.info("pgmem prefetch exceeded its budget of %ss", self._cfg["prefetch_budget"])
            return ""
        except Exception as exc:
            self._fail("prefetch failed", exc)
            return ""

    # -- writes -----------------------------------------------------------------------------------------
    def _put(self, item: Dict[str, Any]) -> None:
        if self._queue is None or self._closed:
            self._keep_pending([item])
            return
        try:
            self._queue.put(item, timeout=float(self._cfg["queue_timeout"]))  # backpressure
        except queue.Full:
            self._keep_pending([item])
            self._fail("write queue full", PgmemError("the write was kept in the pending file"))

    def sync_turn(self, user_content: str, assistant_content: str, *, session_id: str = "",
                  messages: Optional[List[Dict[str, Any]]] = None) -> None:
        try:
            if not self._writes_enabled or not self._cfg["sync_turns"]:
                return
            sid = session_id or self._session_id
            for speaker, text in (("user", user_content), ("assistant", assistant_content)):
                if text and text.strip():
                    self._put({"op": "add", "content": text[:MAX_CONTENT_CHARS], "session_id": sid,
                               "metadata": {"source": SOURCE, "kind": "turn", "speaker": speaker}})
        except Exception as exc:
            self._fail("sync failed", exc)

    def on_memory_write(self, action: str, target: str, content: str,
                        metadata: Optional[Dict[str, Any]] = None) -> None:
        """Mirror hermes' built-in memory tool, in the shapes hermes-agent's MemoryManager sends
        (``notify_memory_tool_write``: one call per operation, ``metadata["old_text"]`` naming the entry):

        - ``add``: store ``content`` (metadata source hermes, kind memory, target);
        - ``replace``: the one mirrored entry of ``target`` containing ``old_text`` gets ``content`` as its
          text (an UPDATE in its history), so the old fact never stays beside the new one;
        - ``remove`` (``content`` empty): delete the one mirrored entry containing ``old_text``.

        Like the tool itself, ``old_text`` is a literal substring; when it matches no mirrored entry or
        several distinct ones, nothing changes and a warning says so. Without ``old_text`` (older hosts),
        ``remove`` matches on ``content`` and ``replace`` stores ``content`` as a new entry."""
        try:
            if not self._writes_enabled:
                return
            old_text = str((metadata or {}).get("old_text") or "").strip()
            content = content or ""
            if action == "remove":
                old_text = old_text or content.strip()
                if old_text:
                    self._put({"op": "remove", "old_text": old_text, "target": target})
                return
            if not content.strip():
                return
            if action == "replace" and old_text:
                self._put({"op": "replace", "old_text": old_text, "content": content[:MAX_CONTENT_CHARS],
                           "target": target})
            elif action in ("add", "replace"):
                self._put({"op": "add", "content": content[:MAX_CONTENT_CHARS], "session_id": self._session_id,
                           "metadata": {"source": SOURCE, "kind": "memory", "target": target}})
        except Exception as exc:
            self._fail("mirroring a memory write failed", exc)

    def flush(self, timeout: float) -> bool:
        """Wait until every queued write is applied (a connection still being made is waited for too);
        False after ``timeout`` seconds."""
        q = self._queue
        deadline = time.monotonic() + timeout
        if q is not None and not self._ready.is_set():
            self._attempted.wait(timeout)
        if q is None or not self._ready.is_set():
            return q is None or q.unfinished_tasks == 0
        with q.all_tasks_done:
            while q.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                q.all_tasks_done.wait(remaining)
        return True

    def on_session_end(self, messages: List[Dict[str, Any]]) -> None:
        try:
            if not self.flush(float(self._cfg["drain_timeout"])):
                self._fail("session end", PgmemError(f"{self.status()['queued']} writes still queued"))
        except Exception as exc:
            self._fail("session end failed", exc)

    def on_session_switch(self, new_session_id: str, **kwargs: Any) -> None:
        self._session_id = new_session_id or ""

    def shutdown(self) -> None:
        """Drain the write queue (``drain_timeout`` seconds), keep what is left in the pending file (count and
        path reported), stop the threads and close the pool."""
        try:
            if self._closed:
                return
            drained = self.flush(float(self._cfg["drain_timeout"]))
            self._closed = True
            left: List[Dict[str, Any]] = []
            if self._queue is not None:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        left.append(item)
                    self._queue.task_done()
                if self._worker is not None and self._worker.is_alive() and drained:
                    self._queue.put(None)
                    self._worker.join(timeout=5)
            if left:
                path = self._keep_pending(left)
                self._fail("shutdown", PgmemError(f"{len(left)} writes not yet stored were kept in {path}"))
            if self._recaller is not None:
                self._recaller.shutdown(wait=False, cancel_futures=True)
            if self._memory is not None:
                self._memory.close()
            self._set_state("closed")
        except Exception as exc:
            self._fail("shutdown failed", exc)

    # -- the pending file -------------------------------------------------------------------------------
    def _pending_path(self) -> Path:
        return Path(self._hermes_home or _hermes_home()) / PENDING_FILE

    def _keep_pending(self, items: List[Dict[str, Any]]) -> Path:
        """Append ``items`` to the pending file, which holds memories: created 0600 in a 0700 directory (an
        existing file or directory is narrowed to that)."""
        path = self._pending_path()
        with self._lock:
            with _open_private(path, "a") as f:
                for item in items:
                    f.write(json.dumps({**item, "user": self._user, "agent": self._agent}, ensure_ascii=False) + "\n")
            self._stats["kept_pending"] += len(items)
        return path

    def _take_pending(self) -> List[Dict[str, Any]]:
        path = self._pending_path()
        if not path.exists():
            return []
        mine, others = [], []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                item = json.loads(line)
                (mine if item.get("user") == self._user and item.get("agent") == self._agent else others).append(line)
        if others:
            with _open_private(path, "w") as f:
                f.write("\n".join(others) + "\n")
        else:
            path.unlink()
        return [{k: v for k, v in json.loads(line).items() if k not in ("user", "agent")} for line in mine]


def resolve_user(platform: Optional[str], host_user_id: Any, configured: Optional[str]) -> Optional[str]:
    """The pgmem user of a hermes session.

    - A user id from the host of a messaging platform is namespaced by the platform (``telegram:12345``,
      ``discord:12345``): two platforms' users with the same number are different people.
    - On the CLI platform (or when hermes names none), the host's user id as is, else the configured user
      (``PGMEM_USER`` / pgmem.json), else the OS login: the person at the terminal.
    - On a messaging platform without a user id from the host: None (memory is off for that session).
      Neither the configured user nor the OS login stands in, since that one identity would collect every
      person of the platform."""
    platform = str(platform or "").strip().lower()
    host = str(host_user_id).strip() if host_user_id is not None else ""
    if platform in ("", "cli"):
        return host or configured or getpass.getuser()
    if not host:
        return None
    return f"{platform}:{host}"


class _open_private:
    """``open(path, mode)`` for text, the file created 0600 and its directory 0700 (both narrowed when they
    exist with wider modes); a context manager."""

    def __init__(self, path: Path, mode: str) -> None:
        self.path, self.mode = path, mode

    def __enter__(self):
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path.parent, 0o700)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if self.mode == "a" else os.O_TRUNC)
        fd = os.open(self.path, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
        os.fchmod(fd, 0o600)
        self.file = os.fdopen(fd, self.mode, encoding="utf-8")
        return self.file

    def __exit__(self, *exc) -> None:
        self.file.close()


def _hit(h: Any) -> Dict[str, Any]:
    score = h.score if h.score is not None else h.similarity
    return {"id": str(h.id), "content": h.content, "agent": h.agent_id, "metadata": h.metadata,
            "score": None if score is None else round(float(score), 6), "created_at": h.created_at.isoformat()}


def _hermes_home() -> str:
    try:
        from hermes_constants import get_hermes_home  # type: ignore[import-not-found]

        return str(get_hermes_home())
    except Exception:
        return os.environ.get("HERMES_HOME") or str(Path.home() / ".hermes")


def register(ctx: Any) -> None:
    """hermes-agent's plugin hook: ``ctx.register_memory_provider``."""
    ctx.register_memory_provider(PgmemMemoryProvider())
