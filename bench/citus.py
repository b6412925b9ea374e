#!/usr/bin/env python3
"""pgmem through a Citus cluster next to one PostgreSQL, and what the policies without a sub-select cost.

    python bench/citus.py --single URL [--cluster URL] [--users 4] [--rows 2000] [--calls 200] [--policies]

Both URLs name a superuser on a database where this script may create and drop the schema's data: the
single-node database must be migrated (``pgmem migrate``); the cluster's coordinator migrated and distributed
(``pgmem migrate`` then ``pgmem distribute``). The script acts through a login that is a member of
``pgmem_gateway`` (``--login``, default ``pgmem_bench_gateway``, created when missing, trust authentication
assumed) so that row-level security applies, with the deterministic 64-dimension test embedder
(``pgmem.testing.HashEmbedder``) in space ``bench64``: the same rows and calls on both servers.

1. Loads ``--users`` users of ``--rows`` memories each (``add_many``), plus one user above the exact-scan
   threshold (``--large-rows``, default 6000) so that the HNSW route runs.
2. Times, per server, ``--calls`` calls each of ``add`` (one memory), ``search`` (vector, k=10) of a small
   and of the large user, and ``search_hybrid`` (k=10), one client, after 20 warm-up calls.
3. ``--policies``: on the single node only, the same searches and ``list`` with the policies as this
   migration writes them (``user_id = pgmem.current_user_id()``) against the earlier form
   (``user_id = (SELECT pgmem.current_user_id())``), alternating the form between rounds of the same run;
   the policies are restored at the end.

Output: a table of median and p95 latencies in milliseconds per call and the ratio cluster / single node.
"""

from __future__ import annotations

import argparse
import statistics
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg

from pgmem import Memory
from pgmem.testing import HashEmbedder

TABLES = ("memories", "history", "memory_vectors", "tenant_sizes", "turns", "memory_sources")
WORDS = ("tea coffee garden river mountain book music travel city friend dinner project meeting "
         "holiday school sport winter summer phone letter").split()


def as_login(url: str, login: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.split("@")[-1]
    return urlunsplit((parts.scheme, f"{login}@{host}", parts.path, parts.query, parts.fragment))


def ensure_login(url: str, login: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone() is None:
            conn.execute(f'CREATE ROLE "{login}" LOGIN')
        conn.execute(f'GRANT pgmem_gateway TO "{login}"')


def text(i: int, salt: str) -> str:
    return f"{salt} {i}: " + " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(8))


def load(url: str, login: str, users: list[str], rows: int, large: str, large_rows: int) -> None:
    ensure_login(url, login)
    emb = HashEmbedder(64)
    with Memory(as_login(url, login), user_id=users[0], space="bench64", embedder=emb, role=None) as m:
        m.space()
        for user in users + [large]:
            n = large_rows if user == large else rows
            mu = m.with_identity(user_id=user)
            for start in range(0, n, 1000):
                mu.add_many([text(i, user) for i in range(start, min(n, start + 1000))])


def timed(fn, calls: int, warm: int = 20) -> list[float]:
    for _ in range(warm):
        fn(0)
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def calls_for(url: str, login: str, users: list[str], large: str, calls: int) -> dict[str, list[float]]:
    emb = HashEmbedder(64)
    results: dict[str, list[float]] = {}
    with Memory(as_login(url, login), user_id=users[0], space="bench64", embedder=emb, role=None) as m:
        big = m.with_identity(user_id=large)
        q = [emb.embed([text(i * 13, "q")])[0] for i in range(64)]
        results["add"] = timed(lambda i: m.add(text(i, f"new-{time.time_ns()}")), calls)
        results["search small (exact)"] = timed(lambda i: m.search(embedding=q[i % 64], k=10, mode="vector"), calls)
        results["search large (HNSW)"] = timed(lambda i: big.search(embedding=q[i % 64], k=10, mode="vector"), calls)
        results["search hybrid"] = timed(lambda i: m.search(text(i * 5, "q"), k=10), calls)
        results["list"] = timed(lambda i: m.list(limit=20), calls)
    return results


def set_policies(url: str, subselect: bool) -> None:
    expr = "(SELECT pgmem.current_user_id())" if subselect else "pgmem.current_user_id()"
    with psycopg.connect(url, autocommit=True) as conn:
        for t in TABLES:
            conn.execute(f"ALTER POLICY {t}_tenant ON pgmem.{t} USING (user_id = {expr}) WITH CHECK (user_id = {expr})")


def stats(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return statistics.median(ms), ms[int(0.95 * (len(ms) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--single", required=True)
    ap.add_argument("--cluster")
    ap.add_argument("--login", default="pgmem_bench_gateway")
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--large-rows", type=int, default=6000)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--policies", action="store_true")
    a = ap.parse_args()
    run = f"b{time.time_ns() % 10**8}"
    users = [f"{run}-u{i}" for i in range(a.users)]
    large = f"{run}-large"
    targets = {"single node": a.single} | ({"cluster": a.cluster} if a.cluster else {})
    for name, url in targets.items():
        t0 = time.perf_counter()
        load(url, a.login, users, a.rows, large, a.large_rows)
        print(f"{name}: loaded {a.users} x {a.rows} + {a.large_rows} memories in {time.perf_counter() - t0:.1f} s")
    table: dict[str, dict[str, list[float]]] = {}
    for name, url in targets.items():
        table[name] = calls_for(url, a.login, users, large, a.calls)
    if a.policies:
        rounds: dict[str, dict[str, list[float]]] = {"sub-select": {}, "plain": {}}
        try:
            for _ in range(2):
                for form in ("sub-select", "plain"):
                    set_policies(a.single, form == "sub-select")
                    for op, ms in calls_for(a.single, a.login, users, large, a.calls // 2).items():
                        rounds[form].setdefault(op, []).extend(ms)
        finally:
            set_policies(a.single, False)
        table["single, (SELECT ...) policies"] = rounds["sub-select"]
        table["single, plain policies"] = rounds["plain"]
    names = list(table)
    print(f"\n{'call':24}" + "".join(f"{n[:30]:>34}" for n in names) + ("   cluster/single" if a.cluster else "")
          + ("   plain/(SELECT)" if a.policies else ""))
    for op in table[names[0]]:
        line = f"{op:24}"
        for n in names:
            med, p95 = stats(table[n][op])
            line += f"{f'{med:.2f} ms (p95 {p95:.2f})':>34}"
        if a.cluster:
            line += f"   {stats(table['cluster'][op])[0] / stats(table['single node'][op])[0]:>15.2f}"
        if a.policies:
            line += f"   {stats(table['single, plain policies'][op])[0] / stats(table['single, (SELECT ...) policies'][op])[0]:>15.2f}"
        print(line)


if __name__ == "__main__":
    main()
