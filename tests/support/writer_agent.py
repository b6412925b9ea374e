"""A writer process for tests/writes/test_writer.py (spawned with sys.executable; not a test module).

    python tests/support/writer_agent.py MODE DSN JOURNAL_DIR CLIENT_NAME [N]

MODE:
- ``queue``: submit N writes, write their ids to JOURNAL_DIR/../ids-CLIENT_NAME.txt, print ``queued``, then
  wait forever (the test sends SIGTERM). ``PGMEM_TEST_SHUTDOWN`` sets the writer's shutdown_timeout.
- ``exit``: submit N writes, print ``queued`` and return without closing anything (the atexit drain).
- ``burst``: submit N writes, printing ``C <id>`` or ``J <id>`` as each becomes durable (committed or
  fsync'd to the journal); after N/2 writes are committed the client's pool is closed (the database becomes unreachable
  for this process), so later writes go to the journal. Then wait forever (the test sends SIGKILL).
- ``journal-first``: a writer with ``journal_first=True``; submit N writes, printing ``A <id>`` as each
  ``submit`` returns (the write is fsync'd to the journal), then wait forever (the test sends SIGKILL).
- ``replay``: open a writer with CLIENT_NAME (which replays its journal), close it, print the report as JSON.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

from pgmem import Memory
from pgmem.testing import HashEmbedder


def main() -> int:
    mode, dsn, journal_dir, name = sys.argv[1:5]
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    import os

    memory = Memory(dsn, user_id="alice", agent_id=name, embedder=HashEmbedder(64), space="t64",
                    role="pgmem_gateway", contextual=False, max_size=2)
    out_lock = threading.Lock()

    def on_durable(acks):
        with out_lock:
            sys.stdout.write("".join(f"{a.status[0].upper()} {a.id}\n" for a in acks))
            sys.stdout.flush()

    writer = memory.writer(client_name=name, journal_dir=journal_dir, max_queue=max(n, 1), batch_size=256,
                           flush_interval=0.05, connect_timeout=2.0,
                           shutdown_timeout=float(os.environ.get("PGMEM_TEST_SHUTDOWN", "10")),
                           on_durable=on_durable if mode == "burst" else None,
                           journal_first=mode == "journal-first")
    if mode == "replay":
        report = writer.close()
        print(json.dumps({"committed": report.committed, "replayed": report.replayed,
                          "journaled": report.journaled, "rejected": report.rejected}), flush=True)
        return 0
    ids = []
    for i in range(n):
        if mode == "burst" and i == n // 2:
            writer.flush()  # the first half is committed
            memory.pool.close()  # from here on the database is unreachable for this process
        ids.append(writer.submit(f"{name} write {i}", session_id=f"s{i % 4}", metadata={"i": i}))
        if mode == "journal-first":
            print(f"A {ids[-1]}", flush=True)
    if mode in ("queue", "exit"):
        Path(journal_dir).parent.joinpath(f"ids-{name}.txt").write_text("".join(f"{x}\n" for x in ids))
        print("queued", flush=True)
    if mode == "exit":
        return 0
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
