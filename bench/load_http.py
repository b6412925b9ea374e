#!/usr/bin/env python3
"""``pgmem serve`` under load over HTTP, against the library called directly in the same run.

    python bench/load_http.py [--clients 16] [--seconds 20] [--users 4] [--json FILE]

1. Drops, re-creates and migrates the database ``pgmem_bench_http`` on the embedded server (started on
   demand) and seeds each of ``--users`` users with 200 memories.
2. Starts ``pgmem serve`` (uvicorn, one process of its own, the deterministic 384-dimension ``HashEmbedder``
   so the service and the database are measured, not a model; rate limit off), bootstraps the administrator
   through the setup link and issues one API key per user.
3. ``--clients`` threads (httpx, one connection each) act for ``--seconds``: 50 % hybrid searches
   (``POST /v1/search``, k=5), 30 % adds (``POST /v1/memories``), 20 % reads by id (``GET /v1/memories/{id}``).
4. The same mix for the same time through :class:`pgmem.Memory` directly (``--clients`` threads, one pool of
   ``--clients`` connections), as the baseline.
5. The audit: every add answered 201 is a row of the right user exactly once (nothing lost, nothing
   duplicated), and no request failed.

Prints throughput and p50/p99 latency per route for both, and the ratio HTTP / library. Exit code 1 on any
error, loss or duplicate.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import re
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's pgmem, in the server process too

DATABASE = "pgmem_bench_http"
SPACE = "bench384"
DIMS = 384
MIX = (("search", 0.5), ("add", 0.3), ("get", 0.2))


def percentile(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def fresh_database() -> str:
    import psycopg
    from psycopg import sql

    from pgmem import Memory, embedded, migrations
    from pgmem.testing import HashEmbedder

    st = embedded.start()
    with psycopg.connect(st.url("postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    dsn = st.url(DATABASE)
    migrations.migrate(dsn)
    with Memory(dsn, role="pgmem_gateway", space=SPACE, embedder=HashEmbedder(DIMS)) as m:
        m.create_space(SPACE, m.embedder.model_name, DIMS)
    return dsn


def run_server(dsn: str, port: int, lines) -> None:
    import uvicorn

    from pgmem.service import Settings, create_app
    from pgmem.testing import HashEmbedder

    settings = Settings(dsn=dsn, host="127.0.0.1", port=port, space=SPACE, embedder=HashEmbedder(DIMS), rate_limit=1e9,
                        rate_burst=10 ** 9, pool_size=16, announce=lines.append)
    try:  # as pgmem serve runs it (its HTTP protocol with the receive deadlines, where this pgmem has them)
        from pgmem.service.app import uvicorn_options
    except ImportError:
        uvicorn.run(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
        return
    uvicorn.run(create_app(settings), **uvicorn_options(settings))


def worker(i: int, call, users: list[str], ids: dict[str, list[str]], stop: float, out: dict) -> None:
    rnd = random.Random(i)
    lat: dict[str, list[float]] = {name: [] for name, _ in MIX}
    added: list[tuple[str, str]] = []
    errors: list[str] = []
    words = ["tea", "Lisbon", "window", "peanuts", "chess", "meeting", "flight", "dinner"]
    while time.monotonic() < stop:
        user = users[rnd.randrange(len(users))]
        x = rnd.random()
        op = "search" if x < 0.5 else "add" if x < 0.8 else "get"
        t0 = time.perf_counter()
        try:
            if op == "search":
                call.search(user, f"what about {rnd.choice(words)}?")
            elif op == "add":
                content = f"client {i} fact {uuid.uuid4()} about {rnd.choice(words)}"
                added.append((user, call.add(user, content)))
            else:
                call.get(user, rnd.choice(ids[user]))
        except Exception as exc:  # counted, reported, fails the run
            errors.append(f"{op}: {type(exc).__name__}: {exc}"[:200])
            continue
        lat[op].append((time.perf_counter() - t0) * 1000)
    out[i] = {"lat": lat, "added": added, "errors": errors}


class HttpCalls:
    def __init__(self, url: str, keys: dict[str, str]) -> None:
        import httpx

        self.clients = {u: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {k}"}, timeout=30)
                        for u, k in keys.items()}

    def search(self, user, q):
        r = self.clients[user].post("/v1/search", json={"query": q, "k": 5})
        r.raise_for_status()

    def add(self, user, content):
        r = self.clients[user].post("/v1/memories", json={"content": content})
        r.raise_for_status()
        return r.json()["id"]

    def get(self, user, mid):
        self.clients[user].get(f"/v1/memories/{mid}").raise_for_status()


class LibraryCalls:
    def __init__(self, base) -> None:
        self.mems = {}
        self.base = base

    def _m(self, user):
        if user not in self.mems:
            self.mems[user] = self.base.with_identity(user_id=user)
        return self.mems[user]

    def search(self, user, q):
        self._m(user).search(q, k=5)

    def add(self, user, content):
        return str(self._m(user).add(content).id)

    def get(self, user, mid):
        assert self._m(user).get(mid) is not None


def run(call_factory, clients: int, seconds: float, users: list[str], ids) -> dict:
    out: dict = {}
    stop = time.monotonic() + seconds
    threads = [threading.Thread(target=worker, args=(i, call_factory(i), users, ids, stop, out)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    lat = {name: [x for r in out.values() for x in r["lat"][name]] for name, _ in MIX}
    total = sum(len(v) for v in lat.values())
    return {"elapsed_s": elapsed, "requests": total, "throughput_per_s": total / elapsed,
            "routes": {n: {"count": len(v), "p50_ms": percentile(v, 50), "p99_ms": percentile(v, 99)} for n, v in lat.items()},
            "errors": [e for r in out.values() for e in r["errors"]],
            "added": [a for r in out.values() for a in r["added"]]}


def bootstrap_keys(url: str, lines, users: list[str]) -> dict[str, str]:
    """Create the administrator through the setup link the service printed (in ``lines``) and issue one API
    key per user in the dashboard: ``{user: key}``."""
    import httpx

    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz").status_code == 200 and any("token=" in line for line in lines):
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            sys.exit("the service did not start")
        time.sleep(0.1)
    link = next(re.search(r"(http://\S+token=\S+)", line).group(1) for line in lines if "token=" in line)
    ui = httpx.Client(base_url=url, timeout=30)
    page = ui.get(link[len(url):])
    csrf_cookie = page.cookies.get("pgmem_csrf") or re.search(r"pgmem_csrf=([^;]+)", page.headers["set-cookie"]).group(1)
    token = link.split("token=")[1]
    pw = "bench password 123"
    r = ui.post("/ui/setup", data={"token": token, "username": "bench", "password": pw, "password2": pw,
                                   "csrf": csrf_cookie}, headers={"Cookie": f"pgmem_csrf={csrf_cookie}"})
    session = re.search(r"pgmem_session=([^;]+)", r.headers["set-cookie"]).group(1)
    keys = {}
    for u in users:
        cookie = {"Cookie": f"pgmem_session={session}"}
        page = ui.get("/ui/keys", headers=cookie)
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
        r = ui.post("/ui/keys", data={"label": f"bench {u}", "kind": "user", "user": u, "scope": "write", "csrf": csrf},
                    headers=cookie)
        keys[u] = re.search(r'id="new-key">([^<]+)<', r.text).group(1).strip()
    return keys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)

    import httpx
    import psycopg

    from pgmem import Memory
    from pgmem.testing import HashEmbedder

    dsn = fresh_database()
    users = [f"user{i}" for i in range(args.users)]
    base = Memory(dsn, role="pgmem_gateway", space=SPACE, embedder=HashEmbedder(DIMS), max_size=args.clients)
    ids = {u: [str(r.id) for r in base.with_identity(user_id=u).add_many(
        [f"seed memory {j} of {u} about tea and Lisbon" for j in range(200)])] for u in users}

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = mp.Manager()
    lines = manager.list()
    proc = mp.get_context("spawn").Process(target=run_server, args=(dsn, port, lines), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            sys.exit("the service did not start")
        time.sleep(0.1)
    keys = bootstrap_keys(url, lines, users)

    print(f"{args.clients} clients, {args.seconds:g} s each, {args.users} users; mix 50% search, 30% add, 20% get")
    http = run(lambda i: HttpCalls(url, keys), args.clients, args.seconds, users, ids)
    lib = run(lambda i: LibraryCalls(base), args.clients, args.seconds, users, ids)
    proc.terminate()

    # The audit: every add answered is a row of its user exactly once.
    with psycopg.connect(dsn, autocommit=True) as conn:
        lost = dup = 0
        for label, res in (("http", http), ("library", lib)):
            for user, mid in res["added"]:
                n = conn.execute("SELECT count(*) FROM pgmem.memories WHERE id = %s AND user_id = %s",
                                 (mid, user)).fetchone()[0]
                lost += n == 0
                dup += n > 1
    base.close()
    result = {"clients": args.clients, "seconds": args.seconds, "http": {k: v for k, v in http.items() if k != "added"},
              "library": {k: v for k, v in lib.items() if k != "added"}, "lost": lost, "duplicated": dup,
              "throughput_ratio_http_over_library": http["throughput_per_s"] / lib["throughput_per_s"]}
    print(f"{'':10} {'route':8} {'count':>7} {'p50 ms':>8} {'p99 ms':>8}")
    for label, res in (("http", http), ("library", lib)):
        for name, r in res["routes"].items():
            print(f"{label:10} {name:8} {r['count']:7d} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f}")
        print(f"{label:10} {'total':8} {res['requests']:7d}  {res['throughput_per_s']:.0f} requests/s, "
              f"{len(res['errors'])} errors")
    print(f"throughput HTTP / library: {result['throughput_ratio_http_over_library']:.2f}; lost {lost}, duplicated {dup}")
    for e in (http["errors"] + lib["errors"])[:5]:
        print("error:", e)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return 1 if http["errors"] or lib["errors"] or lost or dup else 0


if __name__ == "__main__":
    sys.exit(main())
