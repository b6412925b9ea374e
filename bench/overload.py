#!/usr/bin/env python3
"""``pgmem serve`` past its capacity and under slow clients (issue #43), in one run against one service.

    python bench/overload.py [--seconds 15] [--clients 24] [--factor 2.5] [--slow 1100] [--json FILE]

1. A fresh database (``pgmem_bench_overload``, made as bench/load_http.py makes its own: 4 users of 200
   memories each) and ``pgmem serve`` in a process of its own with the defaults of ``pgmem serve`` (in-flight bound, pool wait,
   header/body deadlines; the rate limit off, so that admission is what is measured), its open-files limit
   lowered to 1024 (``ulimit -n 1024``) and its stderr kept in a file.
2. **Capacity**: ``--clients`` closed-loop clients (one request at a time each, keep-alive) for ``--seconds``,
   the mix of load_http.py (50 % search, 30 % add, 20 % get): served requests/s and their p99.
3. **Overload**: requests arriving open-loop (Poisson) at ``--factor`` x capacity for ``--seconds``, from three
   tenants, while a fourth tenant's client sends 5 requests/s (within its limit). Printed: the share answered
   (served or refused) within 5 s, served throughput / capacity (>= 0.9 wanted), served p99 / capacity p99
   (<= 3), the other tenant's success rate (>= 90 %), the service's RSS growth (< 64 MiB), adds stored after
   their client gave up (10 s).
4. **Slow clients**: ``--slow`` sockets that send half a request line and then a byte a second, while a
   prober opens a new connection for each request (4 per second): the prober's p99 (<= 2 s), how many slow
   sockets the service closed by the header deadline, and the lines (and tracebacks) its stderr got.

Ratios are measured in this run; no figure is compared with another machine's. Targets 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import resource
import socket
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import load_http  # noqa: E402
from load_http import DIMS, SPACE, bootstrap_keys, fresh_database, percentile  # noqa: E402

load_http.DATABASE = "pgmem_bench_overload"  # its own database: a load_http.py run elsewhere keeps its own

WORDS = ["tea", "Lisbon", "window", "peanuts", "chess", "meeting", "flight", "dinner"]


def run_server(dsn: str, port: int, lines, log_path: str) -> None:
    import uvicorn

    from pgmem.service import Settings, create_app
    from pgmem.service.app import uvicorn_options
    from pgmem.testing import HashEmbedder

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    settings = Settings(dsn=dsn, port=port, space=SPACE, embedder=HashEmbedder(DIMS), rate_limit=1e9,
                        rate_burst=10 ** 9, announce=lines.append)
    uvicorn.run(create_app(settings), **uvicorn_options(settings))


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ------------------------------------------------------------------------------------------------------------
# A small HTTP/1.1 client on asyncio streams (httpx costs more CPU than the service on a 2-core machine)
# ------------------------------------------------------------------------------------------------------------
class Conn:
    def __init__(self, reader, writer) -> None:
        self.reader, self.writer = reader, writer

    async def request(self, method: str, path: str, key: str, body: dict | None = None) -> tuple[int, dict, bytes]:
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode()
        self.writer.write(head + data)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("closed")
        status = int(status_line.split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        payload = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection") == "close":
            self.writer.close()
            self.writer = None
        return status, headers, payload


async def connect(port: int) -> Conn:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    return Conn(r, w)


class Pool:
    """Keep-alive connections, opened on demand (at most ``limit`` at once)."""

    def __init__(self, port: int, limit: int = 512) -> None:
        self.port, self.idle, self.sem = port, [], asyncio.Semaphore(limit)

    async def call(self, method, path, key, body=None):
        async with self.sem:
            conn = self.idle.pop() if self.idle else await connect(self.port)
            try:
                out = await conn.request(method, path, key, body)
            except BaseException:
                if conn.writer is not None:
                    conn.writer.close()
                raise
            if conn.writer is not None:
                self.idle.append(conn)
            return out

    def close(self) -> None:
        for conn in self.idle:
            conn.writer.close()
        self.idle.clear()


def pick(rnd: random.Random, users, keys, ids) -> tuple[str, str, str, dict | None, str]:
    user = users[rnd.randrange(len(users))]
    x = rnd.random()
    if x < 0.5:
        return "search", "POST", "/v1/search", {"query": f"what about {rnd.choice(WORDS)}?", "k": 5}, user
    if x < 0.8:
        return "add", "POST", "/v1/memories", {"content": f"bench fact {uuid.uuid4()} about {rnd.choice(WORDS)}"}, user
    return "get", "GET", f"/v1/memories/{rnd.choice(ids[user])}", None, user


async def capacity(port, keys, ids, clients: int, seconds: float) -> dict:
    users = list(keys)
    lat: list[float] = []
    errors = 0
    stop = time.monotonic() + seconds

    async def client(i: int) -> None:
        nonlocal errors
        rnd = random.Random(i)
        conn = await connect(port)
        while time.monotonic() < stop:
            _, method, path, body, user = pick(rnd, users, keys, ids)
            t0 = time.perf_counter()
            try:
                status, _, _ = await conn.request(method, path, keys[user], body)
            except (ConnectionError, asyncio.IncompleteReadError):
                errors += 1
                conn = await connect(port)
                continue
            if status < 400:
                lat.append(time.perf_counter() - t0)
            else:
                errors += 1
            if conn.writer is None:
                conn = await connect(port)
        if conn.writer is not None:
            conn.writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.perf_counter() - t0
    return {"served_per_s": len(lat) / elapsed, "p50_ms": percentile(lat, 50) * 1000,
            "p99_ms": percentile(lat, 99) * 1000, "served": len(lat), "errors": errors}


async def overload(port, keys, ids, rate: float, seconds: float, give_up: float = 10.0) -> dict:
    users = list(keys)
    flood, polite = users[:-1], users[-1]
    rnd = random.Random(7)
    served: list[float] = []
    refused: dict[int, int] = {}
    retry_after_missing = 0
    within5 = answered = sent = timed_out = 0
    late_adds: list[str] = []
    pool = Pool(port)
    tasks = []

    async def one(method, path, key, body, op) -> None:
        nonlocal within5, answered, timed_out, retry_after_missing
        t0 = time.perf_counter()
        try:
            status, headers, _ = await asyncio.wait_for(pool.call(method, path, key, body), give_up)
        except asyncio.TimeoutError:
            timed_out += 1
            if op == "add":
                late_adds.append(body["content"])
            return
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            refused[-1] = refused.get(-1, 0) + 1
            return
        dt = time.perf_counter() - t0
        answered += 1
        within5 += dt <= 5
        if status < 400:
            served.append(dt)
        else:
            refused[status] = refused.get(status, 0) + 1
            retry_after_missing += status in (429, 503) and "retry-after" not in headers

    polite_ok = polite_n = 0

    async def polite_client(stop: float) -> None:
        nonlocal polite_ok, polite_n
        conn_pool = Pool(port, 4)
        prnd = random.Random(99)
        while time.monotonic() < stop:
            _, method, path, body, _ = pick(prnd, [polite], keys, ids)
            polite_n += 1
            try:
                status, _, _ = await asyncio.wait_for(conn_pool.call(method, path, keys[polite], body), 5)
                polite_ok += status < 400
            except (asyncio.TimeoutError, ConnectionError, OSError, asyncio.IncompleteReadError):
                pass
            await asyncio.sleep(0.2)

    start = time.monotonic()
    stop = start + seconds
    polite_task = asyncio.create_task(polite_client(stop))
    t = start
    while t < stop:
        t += rnd.expovariate(rate)
        await asyncio.sleep(max(0.0, t - time.monotonic()))
        op, method, path, body, user = pick(rnd, flood, keys, ids)
        tasks.append(asyncio.create_task(one(method, path, keys[user], body, op)))
        sent += 1
    await asyncio.gather(*tasks, polite_task)
    pool.close()
    return {"offered_per_s": sent / seconds, "sent": sent, "answered": answered, "within_5s": within5,
            "timed_out": timed_out, "served": len(served), "served_per_s": len(served) / seconds,
            "served_p99_ms": percentile(served, 99) * 1000, "refused": refused,
            "retry_after_missing": retry_after_missing, "polite_success": polite_ok / max(1, polite_n),
            "polite_requests": polite_n, "late_adds": late_adds}


async def slow_clients(port, key: str, mid: str, n: int, seconds: float) -> dict:
    socks: list[socket.socket] = []
    opened = refused = 0
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        except OSError:
            refused += 1
            s.close()
            continue
        socks.append(s)
        opened += 1
    await asyncio.sleep(0.5)
    for s in socks:
        try:
            s.send(b"GET /healthz HT")
        except OSError:
            pass
    lat: list[float] = []
    failures = 0
    closed_at: dict[int, float] = {}
    t_start = time.monotonic()
    stop = t_start + seconds

    async def prober() -> None:
        nonlocal failures
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                conn = await asyncio.wait_for(connect(port), 5)
                status, _, _ = await asyncio.wait_for(conn.request("GET", f"/v1/memories/{mid}", key), 5)
                if conn.writer is not None:
                    conn.writer.close()
                if status == 200:
                    lat.append(time.perf_counter() - t0)
                else:
                    failures += 1
            except (asyncio.TimeoutError, ConnectionError, OSError, asyncio.IncompleteReadError):
                failures += 1
                lat.append(time.perf_counter() - t0)
            await asyncio.sleep(0.25)

    async def dripper() -> None:
        while time.monotonic() < stop:
            for i, s in enumerate(socks):
                if i in closed_at:
                    continue
                try:
                    got = s.recv(4096)
                    if got == b"" or got.startswith(b"HTTP/1.1 408"):
                        closed_at[i] = time.monotonic() - t_start
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    closed_at[i] = time.monotonic() - t_start
                    continue
                try:
                    s.send(b"T")
                except OSError:
                    closed_at[i] = time.monotonic() - t_start
            await asyncio.sleep(1.0)

    await asyncio.gather(prober(), dripper())
    for s in socks:
        s.close()
    return {"slow_sockets": opened, "not_opened": refused, "closed_by_service": len(closed_at),
            "closed_after_s_p50": percentile(list(closed_at.values()), 50), "probes": len(lat) + 0,
            "probe_failures": failures, "probe_p99_ms": percentile(lat, 99) * 1000}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--clients", type=int, default=24)
    ap.add_argument("--factor", type=float, default=2.5)
    ap.add_argument("--slow", type=int, default=1100)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)

    import psycopg

    from pgmem import Memory
    from pgmem.testing import HashEmbedder

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))  # this side needs the sockets
    dsn = fresh_database()
    users = [f"user{i}" for i in range(4)]
    with Memory(dsn, role="pgmem_gateway", space=SPACE, embedder=HashEmbedder(DIMS)) as base:
        ids = {u: [str(r.id) for r in base.with_identity(user_id=u).add_many(
            [f"seed memory {j} of {u} about tea and Lisbon" for j in range(200)])] for u in users}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = f"/tmp/pgmem-bench-overload-{os.getpid()}.log"
    lines = mp.Manager().list()
    proc = mp.get_context("spawn").Process(target=run_server, args=(dsn, port, lines, log_path), daemon=True)
    proc.start()
    try:
        keys = bootstrap_keys(f"http://127.0.0.1:{port}", lines, users)
        result: dict = {"settings": "pgmem serve defaults; rate limit off; server ulimit -n 1024"}
        rss0 = rss_mib(proc.pid)
        c0, b0 = cpu_s(proc.pid), time.process_time()
        cap = asyncio.run(capacity(port, keys, ids, args.clients, args.seconds))
        cap.update(service_cpu_s=cpu_s(proc.pid) - c0, bench_cpu_s=time.process_time() - b0)
        result["capacity"] = cap
        print(f"capacity: {args.clients} closed-loop clients, {args.seconds:g} s: {cap['served_per_s']:.0f} served/s, "
              f"p50 {cap['p50_ms']:.0f} ms, p99 {cap['p99_ms']:.0f} ms, {cap['errors']} errors; CPU s: service "
              f"{cap['service_cpu_s']:.1f}, this bench {cap['bench_cpu_s']:.1f}")
        rss1 = rss_mib(proc.pid)
        c0, b0 = cpu_s(proc.pid), time.process_time()
        ov = asyncio.run(overload(port, keys, ids, args.factor * cap["served_per_s"], args.seconds))
        ov.update(service_cpu_s=cpu_s(proc.pid) - c0, bench_cpu_s=time.process_time() - b0)
        rss2 = rss_mib(proc.pid)
        with psycopg.connect(dsn, autocommit=True) as conn:
            late = conn.execute("SELECT count(*) FROM pgmem.memories WHERE content = ANY(%s)",
                                (ov.pop("late_adds"),)).fetchone()[0]
        ov.update(rss_before_mib=rss1, rss_after_mib=rss2, late_adds_stored=late)
        result["overload"] = ov
        ratios = {
            "answered_within_5s": ov["within_5s"] / max(1, ov["sent"]),
            "served_throughput_over_capacity": ov["served_per_s"] / cap["served_per_s"],
            "served_p99_over_capacity_p99": ov["served_p99_ms"] / cap["p99_ms"],
            "other_tenant_success": ov["polite_success"],
            "rss_growth_mib": rss2 - rss1,
        }
        result["ratios"] = ratios
        print(f"overload: {ov['offered_per_s']:.0f} offered/s ({args.factor:g} x capacity) for {args.seconds:g} s: "
              f"{ov['served_per_s']:.0f} served/s, refused {ov['refused']}, {ov['timed_out']} unanswered after 10 s, "
              f"{ov['retry_after_missing']} 503/429 without Retry-After; CPU s: service {ov['service_cpu_s']:.1f}, "
              f"this bench {ov['bench_cpu_s']:.1f}")
        print(f"  answered within 5 s          {ratios['answered_within_5s']:.3f}   (want 1.0)")
        print(f"  served throughput / capacity {ratios['served_throughput_over_capacity']:.2f}    (want >= 0.9)")
        print(f"  served p99 / capacity p99    {ratios['served_p99_over_capacity_p99']:.2f}    (want <= 3)")
        print(f"  other tenant's success       {ratios['other_tenant_success']:.3f}   (want >= 0.9; "
              f"{ov['polite_requests']} requests)")
        print(f"  RSS growth                   {ratios['rss_growth_mib']:.1f} MiB (want < 64; {rss0:.0f} MiB at start)")
        print(f"  adds stored after their client gave up: {late}")
        time.sleep(2.0)  # the overload's connections closed on both sides
        log_before = Path(log_path).read_text(errors="replace")
        sc = asyncio.run(slow_clients(port, keys[users[0]], ids[users[0]][0], args.slow, max(15.0, args.seconds)))
        time.sleep(1.0)
        log = Path(log_path).read_text(errors="replace")[len(log_before):]
        sc.update(stderr_lines=log.count("\n"), stderr_tracebacks=log.count("Traceback"),
                  stderr_accept_reports=log.count("accept() failed"))
        result["slow_clients"] = sc
        print(f"slow clients: {sc['slow_sockets']} sockets sending a byte a second (service: ulimit -n 1024): "
              f"{sc['closed_by_service']} closed by the service (p50 after {sc['closed_after_s_p50']:.1f} s)")
        print(f"  new clients: {sc['probes']} probes, {sc['probe_failures']} failed, p99 {sc['probe_p99_ms']:.0f} ms "
              "(want <= 2000)")
        print(f"  service stderr: {sc['stderr_lines']} lines, {sc['stderr_tracebacks']} tracebacks, "
              f"{sc['stderr_accept_reports']} accept-failure reports")
    finally:
        proc.terminate()
        proc.join(10)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
