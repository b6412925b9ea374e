#!/usr/bin/env python3
"""Memory.search of two checkouts of pgmem, paired in one run: a change to the Python wrapper must not make
search slower.

    git archive main pgmem | tar -x -C /tmp/baseline      # the baseline's package, e.g. main
    python bench/paired_checkouts.py --baseline /tmp/baseline [--candidate .] [--rounds 6] [--queries 500]

Both checkouts search the same small tenant (500 memories of user alice, 64-dim vectors of the test
embedder, space ``b64``) on one database: ``--dsn``, else ``$PGMEM_DSN``, else the embedded server. Each
round runs one process per checkout (``PYTHONPATH`` set to it), in alternating order, each doing 50
unmeasured then ``--queries`` searches (``mode="vector"`` with a given embedding, k=10, or ``--mode hybrid``
with a query text). A line per process: client CPU per search (this process's thread: psycopg and the
wrapper) and wall p50; then the medians over rounds and the ratios candidate/baseline. Wall time moves by
tens of percent on a loaded machine; client CPU says whether the wrapper itself got slower.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import json, statistics, sys, time
import numpy as np
from pgmem import Memory
from pgmem.testing import HashEmbedder
dsn, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mem = Memory(dsn, user_id="alice", agent_id="a", space="b64", embedder=HashEmbedder(64), role="pgmem_gateway")
rng = np.random.default_rng(1)
qs = [rng.standard_normal(64).astype(np.float32) for _ in range(50)]
def one(i):
    if mode == "vector":
        mem.search(embedding=qs[i % 50], k=10, mode="vector")
    else:
        mem.search(f"note {i % 50}", k=10)
for i in range(50):
    one(i)
c0, wall = time.thread_time(), []
for i in range(n):
    t0 = time.perf_counter(); one(i); wall.append(time.perf_counter() - t0)
import pgmem
print(json.dumps({"pgmem": pgmem.__file__, "cpu_us": (time.thread_time() - c0) / n * 1e6, "p50_us": statistics.median(wall) * 1e6}))
mem.close()
'''


def setup(dsn: str | None, candidate: Path) -> str:
    sys.path.insert(0, str(candidate))
    from pgmem import Memory, migrations
    from pgmem.transport import resolve_dsn
    from pgmem.testing import HashEmbedder

    url, _ = resolve_dsn(dsn)
    migrations.migrate(url)
    m = Memory(url, user_id="alice", agent_id="a", space="b64", embedder=HashEmbedder(64), role="pgmem_gateway")
    if m.stats()[0].memories != 500:
        m.delete_all(confirm=True)
        m.add_many([f"note {i}: alice likes item {i * 7 % 101} and colour {i % 13}" for i in range(500)])
    m.close()
    return url


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="directory holding the baseline's pgmem/")
    ap.add_argument("--candidate", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--dsn", default=os.environ.get("PGMEM_DSN"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--mode", choices=["vector", "hybrid"], default="vector")
    a = ap.parse_args()
    dsn = setup(a.dsn, a.candidate.resolve())
    res: dict[str, list[dict]] = {"baseline": [], "candidate": []}
    sides = [("baseline", a.baseline.resolve()), ("candidate", a.candidate.resolve())]
    for r in range(a.rounds):
        for tag, path in sides if r % 2 == 0 else sides[::-1]:
            # cwd: ``python -c`` puts the working directory first on sys.path, before PYTHONPATH, so a run from
            # the repository's root would import the candidate's pgmem on both sides.
            out = subprocess.run([sys.executable, "-c", CHILD, dsn, str(a.queries), a.mode], capture_output=True,
                                 text=True, env={**os.environ, "PYTHONPATH": str(path)}, cwd=str(path))
            if out.returncode:
                print(out.stderr, file=sys.stderr)
                return 1
            d = json.loads(out.stdout.strip().splitlines()[-1])
            res[tag].append(d)
            if not d["pgmem"].startswith(str(path)):
                print(f"{tag}: imported {d['pgmem']}, not the package under {path}", file=sys.stderr)
                return 1
            print(f"round {r} {tag:9} client CPU {d['cpu_us']:7.1f} us/search  wall p50 {d['p50_us']:8.1f} us",
                  flush=True)
    med = {t: {k: statistics.median(x[k] for x in v) for k in ("cpu_us", "p50_us")} for t, v in res.items()}
    for t in ("baseline", "candidate"):
        print(f"{t:9}: client CPU {med[t]['cpu_us']:.1f} us/search, wall p50 {med[t]['p50_us']:.1f} us (medians)")
    print(f"candidate/baseline: client CPU {med['candidate']['cpu_us'] / med['baseline']['cpu_us']:.3f}, "
          f"wall p50 {med['candidate']['p50_us'] / med['baseline']['p50_us']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
