#!/usr/bin/env python3
"""Where a search spends its time: client CPU, server CPU and wall time per query, for raw pgvector,
pgmem's SQL call alone and pgmem through its Python wrapper (bench/FINDINGS.md S9).

    python bench/cost_split.py [--class large] [--rounds 5] [--queries 600] [--ef-search 40] [--iterative] [--data-dir ...]

Needs the databases of ``bench/search.py`` (run it once first; ``--reuse`` keeps them). Wall times on this kind
of machine move 30% and more between runs; CPU time, split between this process's thread (psycopg and the
wrapper) and the server backend serving the connection (``/proc/<pid>/stat``, utime + stime), says which side
a difference comes from. Each line is the median over ``--rounds`` rounds of ``--queries`` queries (the
benchmark's 200 queries of the size class ``--class``, large by default, cycled), systems in blocks, in the same run; ratios are against raw
pgvector's line. ``--ef-search`` applies to both raw pgvector (``hnsw.ef_search``) and pgmem
(``pgmem.hnsw_ef_search``): 40 is pgvector's default. ``--iterative`` gives raw pgvector the iterative scan
pgmem uses (``relaxed_order``): with it, both run at the same settings (bench/search.py's "equal settings").

Lines: ``raw pgvector`` (the hand-written statement of bench/systems.py: id, content, distance; 3 columns);
``pgmem SQL`` (``SELECT * FROM pgmem.search(pgmem.as_user($1, 'bench'), $2, 10)`` on a plain psycopg connection
as pgmem_gateway: 15 columns as tuples, no wrapper); ``pgmem wrapper`` (``Memory.search(embedding=...,
mode="vector")``, pool and records included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import systems  # noqa: E402
from common import K  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) used so far by process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def measure(search, pid: int, n: int) -> tuple[float, float, float]:
    """(wall p50, client CPU, server CPU) in ms per query over ``n`` queries, after 20 unmeasured ones."""
    for i in range(20):
        search(i % 200)
    c0, b0, wall = time.thread_time(), backend_cpu(pid), []
    for j in range(n):
        t0 = time.perf_counter()
        search(j % 200)
        wall.append((time.perf_counter() - t0) * 1000)
    return statistics.median(wall), (time.thread_time() - c0) / n * 1000, (backend_cpu(pid) - b0) / n * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--class", dest="cls", choices=["large", "medium", "small"], default="large")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--queries", type=int, default=600)
    ap.add_argument("--ef-search", type=int, default=40)
    ap.add_argument("--iterative", action="store_true",
                    help="raw pgvector with hnsw.iterative_scan = relaxed_order, as pgmem searches (equal settings)")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", type=Path, default=common.DEFAULT_DATA_DIR)
    args = ap.parse_args()

    import psycopg
    from pgvector.psycopg import register_vector

    ds = common.make_dataset(args.n, args.seed)
    qs = common.make_queries(ds, 200)[args.cls]
    tenants = [ds.tenants[t] for t in qs.tenants]
    st = common.start_server(args.data_dir)
    for db in ("bench_search_raw", "bench_search_pgmem"):
        if not common.database_exists(st, db):
            print(f"database {db} is missing: run bench/search.py first", file=sys.stderr)
            return 2

    raw = systems.RawStore(common.dsn_for(st, "bench_search_raw")).client(iterative=args.iterative,
                                                                         ef_search=args.ef_search)
    pg = systems.PgmemStore(common.dsn_for(st, "bench_search_pgmem")).client(ef_search=args.ef_search)
    pg.search(tenants[0], qs.vectors[0], "", K)
    with pg.mem.pool.connection() as c:
        pool_pid = c.info.backend_pid
    sql = psycopg.connect(common.dsn_for(st, "bench_search_pgmem"), autocommit=True)
    register_vector(sql)
    sql.execute("SET ROLE pgmem_gateway")
    sql.execute(f"SET pgmem.hnsw_ef_search = {int(args.ef_search)}")
    stmt = "SELECT * FROM pgmem.search(pgmem.as_user(%s, 'bench'::text), %b, %s)"

    lines = {
        "raw pgvector": (lambda i: raw.search(tenants[i], qs.vectors[i], "", K), raw.conn.info.backend_pid),
        "pgmem SQL": (lambda i: sql.execute(stmt, (tenants[i], qs.vectors[i], K)).fetchall(), sql.info.backend_pid),
        "pgmem wrapper": (lambda i: pg.search(tenants[i], qs.vectors[i], "", K), pool_pid),
    }
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in lines}
    for _ in range(args.rounds):
        for name, (search, pid) in lines.items():
            got[name].append(measure(search, pid, args.queries))
    med = {k: tuple(statistics.median(r[j] for r in v) for j in range(3)) for k, v in got.items()}
    base = med["raw pgvector"]
    print(f"{args.cls} tenants ({len(ds.rows_by_tenant[qs.tenants[0]])} rows), k={K}, ef_search {args.ef_search}"
          f"{', raw with iterative scan' if args.iterative else ''}; "
          f"ms per query, median of {args.rounds} rounds of {args.queries}")
    print(f"{'':15s} {'wall p50':>9s} {'client CPU':>11s} {'server CPU':>11s} {'wall / raw':>11s}")
    for name, (wall, client, server) in med.items():
        print(f"{name:15s} {wall:9.3f} {client:11.3f} {server:11.3f} {wall / base[0]:10.2f}x")
    raw.close()
    pg.close()
    sql.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
