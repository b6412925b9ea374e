#!/usr/bin/env python3
"""Load and durability under concurrency: N agent processes against one server, then an exact audit.

    python bench/load.py [--agents 16] [--seconds 30] [--users 4] [--dsn DSN] [--data-dir DIR] [--json FILE]
                         [--journal-first | --compare-journal-first]

What it does
1. Drops and re-creates the database ``pgmem_bench_load`` (on the embedded server, started on demand, or on
   the server of ``--dsn``, whose user must be allowed to CREATE DATABASE) and migrates it.
2. Starts ``--agents`` processes. Agent ``i`` acts for user ``user{i mod --users}`` (so several agents share
   a user, as in a fleet) through ``Memory(role="pgmem_gateway")`` with a pool of 2 connections and the
   deterministic 384-dimension test embedder (``HashEmbedder``: the database is measured, not a model), and
   runs for ``--seconds``, acting about ``--rate`` times a second (exponential think times), a mix of
   - 60 % adds through its background writer (``Memory.writer``: batches of up to 64, 50 ms to fill),
   - 30 % hybrid searches (``k=5``) over its user's memories,
   - 10 % literal edits (``Memory.edit``) of one of its own committed memories.
   Each write is a new fact of a session (``agent-i/s0..s7``) with a unique value, so every write is a row.
3. Each agent closes its writer (every accepted write committed or journaled) and reports what it did.
4. The audit, on a fresh connection: every accepted write's client id is a row of the right user exactly
   once, each user has exactly as many rows as its agents accepted writes (nothing lost, nothing
   duplicated), nothing waits in a journal, and every edited memory holds its last edited content.

``--journal-first`` runs the agents' writers with ``journal_first=True`` (``submit`` returns once the write is
fsync'd to the journal, group commit); ``--compare-journal-first`` runs the whole load twice in this one
invocation, default writers then journal-first writers (each on a fresh database), and prints the ratios of
submit p50/p99 and writes/s (journal-first / default).

Output: throughput per operation and in total, latency p50/p95/p99 per operation (``add`` is the
``submit`` call an agent waits for; ``add→durable`` runs from ``submit`` until the writer acknowledges the
write as committed or journaled), errors, lost, duplicated, journaled; ``--json FILE`` writes the same as
JSON. Exit code 1 when anything was lost, duplicated or failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DATABASE = "pgmem_bench_load"
SPACE = "hash384"
DIMS = 384
TOPICS = ("flight", "hotel", "diet", "meeting", "budget", "deadline", "gift", "doctor")


# --------------------------------------------------------------------------------------------------------
# One agent process
# --------------------------------------------------------------------------------------------------------
def run_agent(index: int, dsn: str, users: int, seconds: float, rate: float, journal_dir: str, out: str,
              seed: int, journal_first: bool = False) -> None:
    from pgmem import Memory
    from pgmem.testing import HashEmbedder

    rng = random.Random(seed * 1000 + index)
    user = f"user{index % users}"
    mem = Memory(dsn, user_id=user, agent_id=f"agent-{index}", embedder=HashEmbedder(DIMS), space=SPACE,
                 role="pgmem_gateway", min_size=1, max_size=2)
    lock = threading.Lock()
    submitted_at: dict[str, float] = {}
    durable_ms: list[float] = []
    committed: dict[str, str] = {}  # client id -> memory id, for edits
    statuses: dict[str, int] = {}

    def on_durable(acks) -> None:
        now = time.perf_counter()
        with lock:
            for a in acks:
                statuses[a.status] = statuses.get(a.status, 0) + 1
                t0 = submitted_at.pop(str(a.id), None)
                if t0 is not None:
                    durable_ms.append((now - t0) * 1000)
                if a.status == "committed":
                    committed[str(a.id)] = str(a.memory_id)

    extra = {"journal_first": True} if journal_first else {}  # absent on older checkouts (paired runs)
    writer = mem.writer(client_name=f"load-{index}", journal_dir=journal_dir, batch_size=64, flush_interval=0.05,
                        on_durable=on_durable, **extra)
    latencies: dict[str, list[float]] = {"add": [], "search": [], "edit": []}
    errors: dict[str, int] = {}
    first_errors: list[str] = []
    accepted: list[str] = []
    contents: dict[str, str] = {}  # memory id -> current content, for the memories this agent edits
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        time.sleep(rng.expovariate(rate))  # think time: an agent acts about `rate` times a second
        roll = rng.random()
        op = "add" if roll < 0.6 else "search" if roll < 0.9 or not committed else "edit"
        t0 = time.perf_counter()
        try:
            if op == "add":
                n += 1
                topic = rng.choice(TOPICS)
                text = f"agent {index} fact {n}: the {topic} is set to value {rng.randrange(10**9)}-{n}."
                cid = str(uuid.uuid4())  # the client id, known before the writer can acknowledge it
                submitted_at[cid] = t0
                writer.submit(text, session_id=f"agent-{index}/s{n % 8}", metadata={"topic": topic}, id=cid)
                accepted.append(cid)
                if journal_first:  # durable (fsync'd to the journal) when submit returns
                    with lock:
                        t1 = submitted_at.pop(cid, None)
                        if t1 is not None:
                            durable_ms.append((time.perf_counter() - t1) * 1000)
            elif op == "search":
                mem.search(f"what is the {rng.choice(TOPICS)} set to?", k=5)
            else:
                with lock:
                    mid = rng.choice(list(committed.values()))
                current = contents.get(mid) or mem.get(mid).content
                old = current.split("value ", 1)[1].rstrip(".")
                new = f"{rng.randrange(10**9)}-e{n}"
                contents[mid] = mem.edit(mid, old, new).content
        except Exception as exc:  # counted and reported: the audit expects none
            errors[op] = errors.get(op, 0) + 1
            if len(first_errors) < 5:
                first_errors.append(f"{op}: {type(exc).__name__}: {exc}")
            continue
        latencies[op].append((time.perf_counter() - t0) * 1000)
    elapsed = seconds
    report = writer.close()
    mem.close()
    latencies["add→durable"] = durable_ms
    Path(out).write_text(json.dumps({
        "index": index, "user": user, "elapsed": elapsed, "latencies": latencies, "errors": errors,
        "first_errors": first_errors, "accepted": accepted, "edited": contents, "statuses": statuses,
        "report": {"committed": report.committed, "journaled": report.journaled, "rejected": report.rejected}}))


# --------------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------------
def with_database(url: str, dbname: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + dbname))


def fresh_database(dsn: str | None, data_dir: str | None) -> str:
    """Drop, re-create and migrate ``pgmem_bench_load``; its DSN."""
    import psycopg
    from psycopg import sql

    from pgmem import embedded, migrations

    if dsn is None:
        st = embedded.start(Path(data_dir) if data_dir else None)
        admin, bench = st.url("postgres"), st.url(DATABASE)
    else:
        if urlsplit(dsn).path.strip("/") == DATABASE:
            sys.exit(f"--dsn must name another database than {DATABASE} (it is dropped and re-created)")
        admin, bench = dsn, with_database(dsn, DATABASE)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    migrations.migrate(bench)
    from pgmem import Memory
    from pgmem.testing import HashEmbedder

    emb = HashEmbedder(DIMS)
    with Memory(bench, role="pgmem_gateway", space=SPACE, embedder=emb) as m:
        m.create_space(SPACE, emb.model_name, emb.dims)
    return bench


def percentile(xs: Sequence[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def audit(dsn: str, results: list[dict]) -> dict:
    """Every accepted write exactly once, per user; edits applied."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        per_user = dict(conn.execute("SELECT user_id, count(*) FROM pgmem.memories GROUP BY 1").fetchall())
        lost = duplicated = misplaced = 0
        for r in results:
            ids = r["accepted"]
            found = dict(conn.execute("SELECT id::text, count(*) FROM pgmem.memories WHERE id = ANY(%s::uuid[])"
                                      " GROUP BY 1", [ids]).fetchall())
            lost += sum(1 for i in ids if i not in found)
            duplicated += sum(c - 1 for c in found.values())
            misplaced += conn.execute("SELECT count(*) FROM pgmem.memories WHERE id = ANY(%s::uuid[])"
                                      " AND user_id <> %s", [ids, r["user"]]).fetchone()[0]
        accepted_per_user: dict[str, int] = {}
        for r in results:
            accepted_per_user[r["user"]] = accepted_per_user.get(r["user"], 0) + len(r["accepted"])
        extra = sum(max(0, per_user.get(u, 0) - n) for u, n in accepted_per_user.items())
        edits_wrong = 0
        for r in results:
            for mid, content in r["edited"].items():
                row = conn.execute("SELECT content FROM pgmem.memories WHERE id = %s", [mid]).fetchone()
                edits_wrong += row is None or row[0] != content
    return {"lost": lost, "duplicated": duplicated + extra, "wrong_user": misplaced, "edits_not_applied": edits_wrong,
            "rows": sum(per_user.values()), "accepted": sum(accepted_per_user.values())}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=16, help="agent processes (default 16)")
    ap.add_argument("--seconds", type=float, default=30.0, help="run time of each agent (default 30)")
    ap.add_argument("--users", type=int, default=4, help="users the agents act for (default 4)")
    ap.add_argument("--rate", type=float, default=5.0,
                    help="operations per second of each agent, Poisson think times (default 5)")
    ap.add_argument("--dsn", help="postgresql:// URL of a server whose user may CREATE DATABASE "
                                  "(default: the embedded server)")
    ap.add_argument("--data-dir", help="data directory of the embedded server (default: pgmem's)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--journal-first", action="store_true", help="writers with journal_first=True")
    ap.add_argument("--compare-journal-first", action="store_true",
                    help="run default writers, then journal-first writers, and print the ratios")
    ap.add_argument("--agent", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--agent-dsn", help=argparse.SUPPRESS)
    ap.add_argument("--journal-dir", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.agent is not None:
        run_agent(args.agent, args.agent_dsn, args.users, args.seconds, args.rate, args.journal_dir, args.out,
                  args.seed, args.journal_first)
        return 0
    if not args.compare_journal_first:
        return run(args, args.journal_first)[0]
    code, default = run(args, False)
    code2, first = run(args, True)
    a, b = default["ops"]["add"], first["ops"]["add"]
    ratios = {"submit_p50": round(b["p50_ms"] / a["p50_ms"], 2) if a["p50_ms"] else None,
              "submit_p99": round(b["p99_ms"] / a["p99_ms"], 2) if a["p99_ms"] else None,
              "writes_per_second": round(b["per_second"] / a["per_second"], 2) if a["per_second"] else None}
    print(f"journal-first / default: submit p50 {a['p50_ms']} -> {b['p50_ms']} ms ({ratios['submit_p50']}x), "
          f"p99 {a['p99_ms']} -> {b['p99_ms']} ms ({ratios['submit_p99']}x), writes/s {a['per_second']} -> "
          f"{b['per_second']} ({ratios['writes_per_second']}x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"default": default, "journal_first": first, "ratios": ratios}, indent=2))
    return code or code2


def run(args: argparse.Namespace, journal_first: bool) -> tuple[int, dict]:
    """One load run on a fresh database; (exit code, summary)."""
    dsn = fresh_database(args.dsn, args.data_dir)
    with tempfile.TemporaryDirectory(prefix="pgmem-load-") as tmp:
        procs = []
        started = time.perf_counter()
        for i in range(args.agents):
            out = os.path.join(tmp, f"agent-{i}.json")
            cmd = [sys.executable, __file__, "--agent", str(i), "--agent-dsn", dsn, "--users", str(args.users),
                   "--seconds", str(args.seconds), "--rate", str(args.rate), "--journal-dir",
                   os.path.join(tmp, "journal"), "--out", out, "--seed", str(args.seed)]
            if journal_first:
                cmd.append("--journal-first")
            procs.append((subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True), out))
        failed = []
        for p, _ in procs:
            _, err = p.communicate()
            if p.returncode != 0:
                failed.append(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
        wall = time.perf_counter() - started
        results = [json.loads(Path(out).read_text()) for p, out in procs if Path(out).exists()]
    if failed:
        print(f"{len(failed)} agent processes failed: {failed[:3]}", file=sys.stderr)
    checked = audit(dsn, results)
    ops = ("add", "search", "edit", "add→durable")
    lat = {op: [x for r in results for x in r["latencies"][op]] for op in ops}
    errors = {op: sum(r["errors"].get(op, 0) for r in results) for op in ("add", "search", "edit")}
    journaled = sum(r["report"]["journaled"] for r in results)
    rejected = sum(r["report"]["rejected"] for r in results)
    summary = {
        "agents": args.agents, "users": args.users, "seconds": args.seconds, "rate": args.rate,
        "wall_seconds": round(wall, 1),
        "ops": {op: {"count": len(lat[op]), "per_second": round(len(lat[op]) / args.seconds, 1),
                     "p50_ms": round(percentile(lat[op], 50), 2), "p95_ms": round(percentile(lat[op], 95), 2),
                     "p99_ms": round(percentile(lat[op], 99), 2)} for op in ops},
        "errors": errors, "first_errors": [e for r in results for e in r["first_errors"]][:5],
        "journaled": journaled, "rejected": rejected, "failed_agents": len(failed), **checked}
    total = sum(len(lat[op]) for op in ("add", "search", "edit"))
    summary["journal_first"] = journal_first
    print(f"pgmem load{' (journal-first writers)' if journal_first else ''}: {args.agents} agents x {args.seconds:g} s"
          f" at {args.rate:g} ops/s each, {args.users} users: "
          f"{total / args.seconds:.0f} ops/s in total (wall {wall:.1f} s incl. start and drain)")
    print(f"{'operation':<14}{'count':>8}{'per s':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'errors':>8}")
    for op in ops:
        o = summary["ops"][op]
        print(f"{op:<14}{o['count']:>8}{o['per_second']:>9}{o['p50_ms']:>9}{o['p95_ms']:>9}{o['p99_ms']:>9}"
              f"{errors.get(op, '-'):>8}")
    print(f"accepted writes {checked['accepted']}, rows {checked['rows']}: lost {checked['lost']}, "
          f"duplicated {checked['duplicated']}, wrong user {checked['wrong_user']}, "
          f"edits not applied {checked['edits_not_applied']}; journaled {journaled}, rejected {rejected}")
    for e in summary["first_errors"]:
        print(f"  error: {e}")
    if args.json and not args.compare_journal_first:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    bad = (checked["lost"] or checked["duplicated"] or checked["wrong_user"] or checked["edits_not_applied"]
           or sum(errors.values()) or failed or journaled or rejected)
    return (1 if bad else 0), summary


if __name__ == "__main__":
    sys.exit(main())
