#!/usr/bin/env python3
"""Hybrid search against vector search: SQL p50/p95 of ``pgmem.search_hybrid`` and ``pgmem.search`` on the same
users, the same questions, in the same run, and their ratio.

    python bench/hybrid.py --data ../shared/data/locomo/locomo-dev.json [--dsn URL] [--reuse]
                           [--from-database pgmem_bench_recall] [--big-rows 30000[,100000,...]] [--rounds 3]
                           [--questions 60] [--baseline-before NNNN]

What it does
1. The database ``pgmem_bench_hybrid`` (dropped and re-created unless ``--reuse``; on the embedded server, or on
   the server of ``--dsn``): a copy of ``--from-database`` when given (a database that already holds the LoCoMo
   import, e.g. the recall benchmark's, so that nothing is embedded again), else a fresh one into which every
   turn of ``--data`` is imported (``pgmem.importer``, fmt ``locomo``, space ``minilm``, all-MiniLM-L6-v2 with
   sentence and context vectors). Then it is migrated with this checkout's migrations.
2. A user ``big-N`` of N memories for each N of ``--big-rows`` (default 30,000; a comma-separated list gives the
   curve: one user per size, e.g. ``1000,10000,30000,100000,300000``), made in SQL from the LoCoMo turns: every turn of
   every conversation repeated (copy j = 0, 1, ...) until the count is reached, its content suffixed
   ``" (copy j)"`` (so each is new text, in the full-text index too), its session ``session_N-cj`` and its
   embedding and extra vectors moved by one random unit vector per copy (``l2_normalize(v + 0.15 * r_j)``),
   so copies are near neighbours but not equal. It has sentence and context vectors like the turns.
3. Questions: those of categories 1-4 of each conversation (at most ``--questions`` per user), embedded once
   with MiniLM; each ``big-N`` user gets the first ``--questions`` of all of them. Each question runs, on one
   connection as ``pgmem_gateway``, ``SELECT * FROM pgmem.search(pgmem.as_user(u, 'minilm'), e, 10)`` and
   ``SELECT * FROM pgmem.search_hybrid(pgmem.as_user(u, 'minilm'), q, e, 10)``, interleaved (vector, then
   hybrid, question by question), ``--rounds`` times after one unmeasured round. The query embedding is given,
   so no embedding time is counted: "SQL" latency is the wall time of that statement from the client.

With ``--baseline-before NNNN`` the definition of ``pgmem.search_hybrid`` that the migrations before NNNN
released (read from ``sql/`` by ``tools/schema_source.py``) is installed beside the current one as
``pgmem.search_hybrid_baseline`` (owned and run like the API: ``pgmem_api``, SECURITY DEFINER) and runs
interleaved with the two others, so a change to hybrid search is measured before/after in one run, on the
same data and connection; its rankings are compared with the current ones (ids of the top k, in order).

Output: p50/p95 in ms of each mode per user class (LoCoMo users, and each ``big-N``), the ratio of hybrid to vector
p50, and ``bench/out/hybrid.csv``; with more than one size, the ratio of each hybrid p50 to that of the 10,000-memory
user (``vs 10k``) and the curve in ``bench/out/hybrid_scale.png``. For each ``big-N`` above
``pgmem.exact_search_max_rows`` (whose text side is ranked from the postings, docs/recall.md), the overlap of the
text side's top 10 (``pgmem._text_top``) with the top 10 by the same BM25 computed over every memory of the user
from ``pgmem.memories`` alone (its own count, lengths and document frequencies; no postings read), averaged over
its questions. Needs ``pip install 'pgmem-agents[local]'``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np

DATABASE = "pgmem_bench_hybrid"
SPACE = "minilm"
K = 10
BIG = "big"


def big_name(rows: int) -> str:
    return f"{BIG}-{rows}"


def url_for(dsn: str | None, dbname: str) -> tuple[str, str]:
    """(admin URL, URL of ``dbname``) on the embedded server or on the server of ``dsn``."""
    if dsn is None:
        from pgmem import embedded

        st = embedded.start()
        return st.url("postgres"), st.url(dbname)
    parts = urlsplit(dsn)
    return dsn, urlunsplit(parts._replace(path="/" + dbname))


def prepare(args) -> str:
    import psycopg
    from psycopg import sql

    from pgmem import migrations

    admin, url = url_for(args.dsn, DATABASE)
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
        if not (args.reuse and exists):
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE)))
            if args.from_database:
                conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(DATABASE),
                                                                              sql.Identifier(args.from_database)))
            else:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    migrations.migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        n = conn.execute("SELECT count(*) FROM pgmem.memories WHERE user_id NOT LIKE %s AND user_id <> 'topicalchat-pool'",
                         [BIG + "%"]).fetchone()[0]
    if n == 0:
        from pgmem import Memory, MiniLMEmbedder, importer

        print(f"importing {args.data} (every turn embedded, with sentence and context vectors) ...", flush=True)
        with Memory(url, role="pgmem_gateway", space=SPACE, embedder=MiniLMEmbedder()) as memory:
            s = importer.import_file(memory, args.data, fmt="locomo")
        print(f"imported {s.rows} turns in {s.seconds:.0f} s", flush=True)
    for rows in args.big_rows:
        make_big(url, rows, big_name(rows))
    return url


def make_big(url: str, rows: int, name: str = BIG) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        have = conn.execute("SELECT count(*) FROM pgmem.memories WHERE user_id = %s", [name]).fetchone()[0]
        if have == rows:
            return
        t0 = time.perf_counter()
        with conn.transaction():
            conn.execute("DELETE FROM pgmem.memories WHERE user_id = %s", [name])
            conn.execute("DELETE FROM pgmem.tenant_sizes WHERE user_id = %s", [name])
            conn.execute("""
                CREATE TEMP TABLE big_map ON COMMIT DROP AS
                SELECT t.user_id, t.id, j.j, gen_random_uuid() AS new_id
                FROM (SELECT m.user_id, m.id, row_number() OVER (ORDER BY m.user_id, m.created_at, m.seq) AS r
                      FROM pgmem.memories m WHERE m.user_id NOT LIKE %(big)s AND m.user_id <> 'topicalchat-pool') t
                CROSS JOIN generate_series(0, 1000) AS j(j)
                WHERE j.j * (SELECT count(*) FROM pgmem.memories WHERE user_id NOT LIKE %(big)s
                                AND user_id <> 'topicalchat-pool') + t.r <= %(rows)s""",
                         {"big": BIG + "%", "rows": rows})
            conn.execute("""
                CREATE TEMP TABLE big_noise ON COMMIT DROP AS
                SELECT j.j, (SELECT array_agg(0.15 * x)::real[]::vector
                             FROM unnest(l2_normalize(ARRAY(SELECT random() - 0.5 FROM generate_series(1, 384) g
                                                            WHERE j.j >= 0)::vector)::real[]) x) AS r
                FROM (SELECT DISTINCT j FROM big_map) j""")
            conn.execute("""
                INSERT INTO pgmem.memories (user_id, id, space_id, agent_id, session_id, content, embedding, metadata,
                                            created_at, updated_at, valid_from)
                SELECT %(big)s, b.new_id, m.space_id, m.agent_id, coalesce(m.session_id, 's') || '-c' || b.j,
                       m.content || ' (copy ' || b.j || ')',
                       l2_normalize(m.embedding + n.r), m.metadata,
                       m.created_at, m.updated_at, m.valid_from
                FROM big_map b JOIN pgmem.memories m ON m.user_id = b.user_id AND m.id = b.id
                JOIN big_noise n ON n.j = b.j""", {"big": name})
            conn.execute("""
                INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
                SELECT %(big)s, b.new_id, v.n, v.kind, l2_normalize(v.embedding + n.r)
                FROM big_map b JOIN pgmem.memory_vectors v ON v.user_id = b.user_id AND v.memory_id = b.id
                JOIN big_noise n ON n.j = b.j""", {"big": name})
        for table in ("memories", "memory_vectors", "memory_terms", "term_stats"):
            if conn.execute("SELECT to_regclass(%s)", [f"pgmem.{table}"]).fetchone()[0]:
                conn.execute(f"VACUUM ANALYZE pgmem.{table}")
        print(f"user {name}: {rows} memories made in {time.perf_counter() - t0:.0f} s", flush=True)


def install_baseline(conn, before: str) -> None:
    """pgmem.search_hybrid as the migrations before ``before`` (e.g. ``0017``) left it, installed as
    pgmem.search_hybrid_baseline, owned and run like the API."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import schema_source as src

    released = src.last_definitions([f for f in src.migration_files() if f.name < before])
    text = next(d.text for (name, _), d in released.items() if name == "pgmem.search_hybrid")
    schema = conn.execute("SELECT pgmem._vector_schema()").fetchone()[0]
    text = text.replace("FUNCTION pgmem.search_hybrid(", "FUNCTION pgmem.search_hybrid_baseline(", 1)
    conn.execute(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1).replace("@vector@", schema))
    oid = conn.execute("SELECT 'pgmem.search_hybrid_baseline'::regproc::oid").fetchone()[0]
    sig = conn.execute("SELECT %s::regprocedure::text", [oid]).fetchone()[0]
    conn.execute(f"ALTER FUNCTION {sig} SECURITY DEFINER")
    conn.execute("GRANT CREATE ON SCHEMA pgmem TO pgmem_api")
    conn.execute(f"ALTER FUNCTION {sig} OWNER TO pgmem_api")
    conn.execute("REVOKE CREATE ON SCHEMA pgmem FROM pgmem_api")
    conn.execute(f"GRANT EXECUTE ON FUNCTION {sig} TO pgmem_gateway")


def questions(path: Path, per_user: int) -> tuple[dict[str, list[str]], list[str]]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    by_user = {}
    for s in data:
        qs = [qa["question"] for qa in s.get("qa") or [] if qa.get("category") in (1, 2, 3, 4) and qa.get("evidence")]
        by_user[str(s["sample_id"])] = qs[:per_user]
    every = [q for qs in by_user.values() for q in qs]
    return by_user, every[:per_user]


def workload(path: Path, per_user: int, bigs: list[str]) -> tuple[dict[str, "np.ndarray"], list[tuple[str, str]]]:
    """The questions of :func:`questions` embedded once with MiniLM ({question: embedding}) and the (user,
    question) pairs to ask, LoCoMo users first, then each user of ``bigs``."""
    from pgmem import MiniLMEmbedder

    by_user, big_qs = questions(path, per_user)
    texts = sorted({q for qs in by_user.values() for q in qs} | set(big_qs))
    emb = dict(zip(texts, MiniLMEmbedder().embed(texts)))
    return emb, [(u, q) for u, qs in by_user.items() for q in qs] + [(b, q) for b in bigs for q in big_qs]


# The text side's BM25 (docs/recall.md) over every memory of a user, from pgmem.memories alone: the user's own count,
# average length and document frequencies, each memory's own fts. The reference the postings' top 10 is held to:
# every memory holding a query term with its score, best first (ties by id).
EXACT_TEXT_SCORES = """
WITH q AS (SELECT DISTINCT x.lexeme FROM unnest(to_tsvector(%(config)s::regconfig, %(query)s)) x),
m AS MATERIALIZED (SELECT m.id, m.fts, m.fts_len FROM pgmem.memories m
                   WHERE m.user_id = %(user)s AND m.space_id = %(space)s AND m.valid_to IS NULL),
st AS (SELECT count(*)::float8 AS n, greatest(avg(m.fts_len), 1)::float8 AS avgdl FROM m),
p AS MATERIALIZED (SELECT m.id, m.fts_len, x.lexeme, coalesce(array_length(x.positions, 1), 1)::float8 AS tf
                   FROM m CROSS JOIN LATERAL unnest(m.fts) x JOIN q USING (lexeme)),
df AS (SELECT p.lexeme, count(*)::float8 AS df FROM p GROUP BY p.lexeme)
SELECT p.id, sum(ln(1 + (st.n - df.df + 0.5) / (df.df + 0.5)) * p.tf * (%(k1)s + 1)
                 / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.fts_len / st.avgdl))) AS s
FROM p JOIN df USING (lexeme) CROSS JOIN st
GROUP BY p.id
ORDER BY 2 DESC, 1"""


def text_overlap(conn, user: str, qs: list[str], depth: int = 2000) -> tuple[float, float, int]:
    """Over ``qs``: the mean overlap of the text side's top 10 (``pgmem._text_top`` as search_hybrid asks it at
    k = 10: its 100 best, the first 10 exact unless it stops at ``depth`` postings a term) with the top 10 of
    :data:`EXACT_TEXT_SCORES`, (1) as sets of ids, ties at the cut broken by id as both sides order them, and (2)
    up to ties: a memory counts when its exact score is at least the 10th best (the big users' copies of a turn
    score alike, so any 10 of them are an exact top 10); and the number of questions with a text side."""
    space, config = conn.execute("SELECT space_id, text_config::text FROM pgmem.spaces WHERE name = %s",
                                 [SPACE]).fetchone()
    k1, b = conn.execute("SELECT k1, b FROM pgmem._hybrid_formula(NULL, NULL, NULL, NULL)").fetchone()
    strict, tied = [], []
    for q in qs:
        lex = [r[0] for r in conn.execute("SELECT DISTINCT x.lexeme FROM unnest(to_tsvector(%s::regconfig, %s)) x",
                                          [config, q]).fetchall()]
        got = conn.execute("SELECT (t.o_ids)[1:10] FROM pgmem._text_top(%s, %s, %s, 100, 10, %s) t",
                           [user, space, lex, depth]).fetchone()[0] or []
        scored = conn.execute(EXACT_TEXT_SCORES, {"config": config, "query": q, "user": user, "space": space,
                                                  "k1": k1, "b": b}).fetchall()
        if not scored:
            continue
        want = [r[0] for r in scored[:10]]
        cut = scored[min(10, len(scored)) - 1][1]
        score = dict(scored)
        strict.append(len(set(got) & set(want)) / len(want))
        tied.append(sum(1 for i in got if score.get(i, -1) >= cut * (1 - 1e-9)) / len(want))
    if not strict:
        return float("nan"), float("nan"), 0
    return statistics.mean(strict), statistics.mean(tied), len(strict)


def plot_scale(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = sorted((r["memories"], r["vector_p50_ms"], r["hybrid_p50_ms"], r.get("baseline_p50_ms"))
                 for r in rows if r["users"].startswith(BIG))
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot([p[0] for p in pts], [p[2] for p in pts], "o-", label="hybrid (default mode)")
    if all(p[3] is not None for p in pts):
        ax.plot([p[0] for p in pts], [p[3] for p in pts], "x--", label="hybrid, --baseline-before")
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "s-", label="vector")
    ax.set_xscale("log")
    ax.set_xlabel("memories of the user")
    ax.set_ylabel("SQL p50, ms (query embedding given)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("pgmem search latency as a user's memories grow")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="LoCoMo JSON file (e.g. locomo-dev.json)")
    ap.add_argument("--dsn", help="postgresql:// URL of a server whose user may CREATE DATABASE")
    ap.add_argument("--reuse", action="store_true", help=f"keep {DATABASE} if it exists")
    ap.add_argument("--from-database", help="copy this database (holding the LoCoMo import) instead of importing")
    ap.add_argument("--big-rows", type=lambda v: [int(x) for x in v.split(",") if x.strip()], default=[30_000],
                    help="memories of the big user; a comma-separated list makes one user per size (the curve)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--questions", type=int, default=60, help="questions per user")
    ap.add_argument("--baseline-before", metavar="NNNN",
                    help="also run the search_hybrid released before migration NNNN, interleaved (before/after)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = ap.parse_args(argv)

    import psycopg
    from pgvector.psycopg import register_vector

    url = prepare(args)
    bigs = [big_name(n) for n in args.big_rows]
    emb, work = workload(args.data, args.questions, bigs)

    conn = psycopg.connect(url, autocommit=True)
    register_vector(conn)
    if args.baseline_before:
        install_baseline(conn, args.baseline_before)
    conn.execute("SET ROLE pgmem_gateway")
    vec_sql = "SELECT * FROM pgmem.search(pgmem.as_user(%s, 'minilm'::text), %s, %s)"
    hyb_sql = "SELECT * FROM pgmem.search_hybrid(pgmem.as_user(%s, 'minilm'::text), %s, %s, %s)"
    base_sql = hyb_sql.replace("search_hybrid(", "search_hybrid_baseline(")
    same = [0, 0]  # questions whose top k (ids, in order) the baseline and the current definition agree on

    def once(user, q, compare=False):
        t0 = time.perf_counter()
        conn.execute(vec_sql, (user, emb[q], K)).fetchall()
        t1 = time.perf_counter()
        new = conn.execute(hyb_sql, (user, q, emb[q], K)).fetchall()
        t2 = time.perf_counter()
        if not args.baseline_before:
            return (t1 - t0) * 1000, (t2 - t1) * 1000, None
        old = conn.execute(base_sql, (user, q, emb[q], K)).fetchall()
        t3 = time.perf_counter()
        if compare:
            same[0] += [r[0] for r in old] == [r[0] for r in new]
            same[1] += 1
        return (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000

    for u, q in work:  # unmeasured: plans, caches, the big user's routing size
        once(u, q, compare=True)
    got = {"locomo": ([], [], [])} | {b: ([], [], []) for b in bigs}
    for _ in range(args.rounds):
        for u, q in work:
            for into, ms in zip(got[u if u in bigs else "locomo"], once(u, q)):
                if ms is not None:
                    into.append(ms)
    conn.close()

    with psycopg.connect(url) as c:
        counts = dict(c.execute("SELECT user_id, count(*) FROM pgmem.memories GROUP BY 1").fetchall())
        threshold = int(c.execute("SELECT coalesce(nullif(current_setting('pgmem.exact_search_max_rows', true), ''),"
                                  " '5000')").fetchone()[0])
        has_postings = c.execute("SELECT to_regproc('pgmem._text_top') IS NOT NULL").fetchone()[0]
        big_qs = [q for u, q in work if u == bigs[0]]
        overlap = {b: text_overlap(c, b, big_qs) for b in bigs if has_postings and counts.get(b, 0) > threshold}
    users = sorted({u for u, _ in work if u not in bigs})
    small = [counts[u] for u in users if u in counts]
    print(f"k={K}; LoCoMo users {min(small)}-{max(small)} memories ({len(users)} users), "
          + ", ".join(f"user {b} {counts.get(b, 0)} memories" for b in bigs)
          + f"; {args.rounds} rounds, vector and hybrid interleaved; ms from the client, query embedding given")
    base_head = f" {'baseline p50':>13s} {'p95':>8s} {'baseline/vector':>16s}" if args.baseline_before else ""
    ten_k = big_name(10_000)
    scale_head = f" {'vs 10k':>7s}" if ten_k in got and len(bigs) > 1 else ""
    print(f"{'users':12s} {'calls':>6s} {'vector p50':>11s} {'p95':>8s} {'hybrid p50':>11s} {'p95':>8s} {'hybrid/vector':>14s}"
          + scale_head + base_head)
    rows = []
    for cls, (v, h, b) in got.items():
        vp50, vp95 = statistics.median(v), float(np.percentile(v, 95))
        hp50, hp95 = statistics.median(h), float(np.percentile(h, 95))
        row = {"users": cls, "memories": counts.get(cls, 0) if cls != "locomo" else round(statistics.mean(small)),
               "calls": len(v), "vector_p50_ms": round(vp50, 3), "vector_p95_ms": round(vp95, 3),
               "hybrid_p50_ms": round(hp50, 3), "hybrid_p95_ms": round(hp95, 3), "ratio_p50": round(hp50 / vp50, 3)}
        line = f"{cls:12s} {len(v):6d} {vp50:11.2f} {vp95:8.2f} {hp50:11.2f} {hp95:8.2f} {hp50 / vp50:13.2f}x"
        if scale_head:
            line += f" {hp50 / statistics.median(got[ten_k][1]):6.2f}x" if cls in bigs else " " * 8
        if b:
            bp50, bp95 = statistics.median(b), float(np.percentile(b, 95))
            line += f" {bp50:13.2f} {bp95:8.2f} {bp50 / vp50:15.2f}x"
            row.update({"baseline_p50_ms": round(bp50, 3), "baseline_p95_ms": round(bp95, 3),
                        "baseline_ratio_p50": round(bp50 / vp50, 3)})
        print(line)
        rows.append(row)
    if args.baseline_before:
        print(f"baseline: search_hybrid released before migration {args.baseline_before}; the same top {K} (ids, in "
              f"order) on {same[0]} of {same[1]} questions")
    for b, (share, tied, n) in overlap.items():
        print(f"text side of {b}: top 10 from the postings against BM25 over all {counts[b]} memories: "
              f"overlap {share:.3f} as ids, {tied:.3f} up to ties ({n} questions)")
        row = next(r for r in rows if r["users"] == b)
        row["text_top10_overlap"], row["text_top10_overlap_ties"] = round(share, 4), round(tied, 4)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "hybrid.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.out / 'hybrid.csv'}")
    if len(bigs) > 1:
        plot_scale(args.out / "hybrid_scale.png", rows)
        print(f"wrote {args.out / 'hybrid_scale.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
