#!/usr/bin/env python3
"""Where a hybrid search spends its server time: p50 of each step of ``pgmem.search_hybrid``, per user class.

    python bench/hybrid_steps.py --data ../shared/data/locomo/locomo-dev.json [--dsn URL]
                                 [--database pgmem_bench_hybrid] [--questions 20] [--rounds 2]
                                 [--without extra-vectors] [--without speaker]

What it does
1. Reads the definition of ``pgmem.search_hybrid`` installed in ``--database`` (a database that
   ``bench/hybrid.py`` left behind: the LoCoMo dev users and the 30,000-memory user ``big``) and installs a copy,
   ``pgmem.search_hybrid_steps``, owned and run like the API (``pgmem_api``, SECURITY DEFINER), with a
   ``clock_timestamp()`` mark between its steps. At its end the copy raises a NOTICE with the marks (ms since the
   call began). So what is timed is the migration installed there, not a copy kept here.
2. ``--without`` removes one part of the scoring from the copy, to measure what it costs (an ablation: the
   rankings change, the times say what the part costs): ``extra-vectors`` reads no sentence or context vector
   (every candidate scores with its own cosine), ``extra-cosines`` reads them but computes no cosine of them
   (each is a constant), ``speaker`` skips the speaker match.
3. Asks every question (categories 1-4, at most ``--questions`` per LoCoMo user, the first ``--questions`` of
   all for ``big``), embedded once with MiniLM, on one connection as ``pgmem_gateway``: one unmeasured round,
   then ``--rounds`` measured ones. The copy is dropped at the end.

Output: per user class (LoCoMo users, ``big``), the p50 in ms of each step (checks: input checks and query terms;
routing: the route, and on the pooled route the candidate pools; candidates: step 1 of the function, the pass
over the candidates with their session windows; scores: step 2, BM25, the extra vectors, the fusion; read-back:
step 3), and of the whole call as the server saw it. Findings: bench/FINDINGS.md H7.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybrid import DATABASE, K, big_name, url_for, workload  # noqa: E402

STEPS = ("checks", "routing", "candidates", "scores", "read-back")
# Each mark goes before the comment that opens the next step of the function (sql/current/60-search.sql).
_MARKS = ("    -- Routing, as pgmem.search", "    -- Every constant of the score", "    -- 2. Scores, over those rows only",
          "    -- 3. The k best, read back")
_MARK = "tm := tm || (extract(epoch FROM clock_timestamp() - t0) * 1000)::float8;\n"
# Each: (regular expression, replacement), to be found exactly once in the function's text.
_ABLATIONS = {
    "extra-vectors": [(r"WHERE r\.by_sim <= v_pool OR \(r\.s > 0 AND r\.by_text <= v_pool\)\),", "WHERE false),")],
    # the extra vectors still read, each cosine replaced by a constant (what the reads cost without the arithmetic)
    "extra-cosines": [(r"1 - \(x\.embedding OPERATOR\([a-z_]+\.<=>\) p_embedding\) AS sim\n", "0::float8 AS sim\n")],
    "speaker": [(r"AS spk\n            FROM \(SELECT DISTINCT u\.speaker FROM u\) d\),",
                 "AS spk\n            FROM (SELECT DISTINCT u.speaker FROM u) d WHERE false),"),
                (r"FROM u JOIN sp ON sp\.speaker = u\.speaker LEFT JOIN bm",
                 "FROM u LEFT JOIN sp ON sp.speaker = u.speaker LEFT JOIN bm")],
}
NAME = "pgmem.search_hybrid_steps"


def timed_source(definition: str, without: tuple[str, ...] = ()) -> str:
    """The text of ``pgmem.search_hybrid`` (``pg_get_functiondef``) turned into ``pgmem.search_hybrid_steps``:
    a mark before each step and one at the end, raised as ``NOTICE 'steps {ms,...}'`` (5 cumulative ms).
    Raises ValueError when a mark or an ablation's text is not found exactly once (the function changed)."""
    def once(text: str, old: str) -> int:
        if text.count(old) != 1:
            raise ValueError(f"pgmem.search_hybrid changed: {old.strip()[:60]!r} found {text.count(old)} times")
        return text.index(old)

    src = definition
    once(src, "FUNCTION pgmem.search_hybrid(")
    src = src.replace("FUNCTION pgmem.search_hybrid(", f"FUNCTION {NAME}(", 1)
    once(src, "DECLARE\n")
    src = src.replace("DECLARE\n", "DECLARE\n    t0 timestamptz := clock_timestamp();\n    tm float8[] := '{}';\n", 1)
    for mark in _MARKS:
        i = once(src, mark)
        src = src[:i] + "    " + _MARK + src[i:]
    end = "    ORDER BY h.ord;\nEND"
    once(src, end)
    src = src.replace(end, f"    ORDER BY h.ord;\n    {_MARK}    RAISE NOTICE 'steps %', tm;\nEND", 1)
    for part in without:
        for pattern, new in _ABLATIONS[part]:
            found = len(re.findall(pattern, src))
            if found != 1:
                raise ValueError(f"pgmem.search_hybrid changed: {part}'s text found {found} times")
            src = re.sub(pattern, lambda _m, new=new: new, src, count=1)
    return src


def install(conn, without: tuple[str, ...] = ()) -> str:
    """Install the timed copy in the database of ``conn`` (a superuser), owned and run like the API; returns its
    signature (for DROP FUNCTION)."""
    definition = conn.execute("SELECT pg_get_functiondef('pgmem.search_hybrid'::regproc)").fetchone()[0]
    conn.execute(timed_source(definition, without))
    sig = conn.execute(f"SELECT '{NAME}'::regproc::regprocedure::text").fetchone()[0]
    conn.execute(f"ALTER FUNCTION {sig} SECURITY DEFINER")
    conn.execute("GRANT CREATE ON SCHEMA pgmem TO pgmem_api")
    conn.execute(f"ALTER FUNCTION {sig} OWNER TO pgmem_api")
    conn.execute("REVOKE CREATE ON SCHEMA pgmem FROM pgmem_api")
    conn.execute(f"GRANT EXECUTE ON FUNCTION {sig} TO pgmem_gateway")
    return sig


def parse_notice(message: str) -> list[float]:
    """The 5 cumulative marks of a ``steps {...}`` NOTICE, in ms."""
    head, _, arr = message.partition(" ")
    if head != "steps":
        raise ValueError(f"not a steps notice: {message!r}")
    return [float(x) for x in arr.strip("{}").split(",")]


def step_times(marks: list[float]) -> list[float]:
    """Cumulative marks -> the time of each step (ms)."""
    return [marks[0]] + [b - a for a, b in zip(marks, marks[1:])]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="LoCoMo JSON file (e.g. locomo-dev.json)")
    ap.add_argument("--dsn", help="postgresql:// URL of the server holding --database (default: the embedded one)")
    ap.add_argument("--database", default=DATABASE, help=f"a database bench/hybrid.py made (default {DATABASE})")
    ap.add_argument("--questions", type=int, default=20, help="questions per user")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--without", action="append", default=[], choices=sorted(_ABLATIONS),
                    help="remove one part of the scoring from the timed copy (repeatable)")
    ap.add_argument("--big-rows", type=lambda v: [int(x) for x in v.split(",") if x.strip()], default=[30_000],
                    help="the big users bench/hybrid.py made (big-N), comma-separated")
    args = ap.parse_args(argv)

    import psycopg
    from pgvector.psycopg import register_vector

    _, url = url_for(args.dsn, args.database)
    bigs = [big_name(n) for n in args.big_rows]
    emb, work = workload(args.data, args.questions, bigs)

    conn = psycopg.connect(url, autocommit=True)
    register_vector(conn)
    sig = install(conn, tuple(args.without))
    got: list[list[float]] = []
    conn.add_notice_handler(lambda d: got.append(parse_notice(d.message_primary)))
    conn.execute("SET ROLE pgmem_gateway")
    sql = f"SELECT * FROM {NAME}(pgmem.as_user(%s, 'minilm'::text), %s, %s, %s)"
    res: dict[str, list[list[float]]] = {"locomo": []} | {b: [] for b in bigs}
    try:
        for rnd in range(args.rounds + 1):
            for u, q in work:
                got.clear()
                conn.execute(sql, (u, q, emb[q], K)).fetchall()
                if rnd:
                    res[u if u in bigs else "locomo"].append(got[-1])
    finally:
        conn.execute("RESET ROLE")
        conn.execute(f"DROP FUNCTION {sig}")
        conn.close()
    print(f"pgmem.search_hybrid step by step (ms, p50 of {args.rounds} rounds; server clock; k={K})"
          + (f"; without: {', '.join(args.without)}" if args.without else ""))
    print(f"{'users':12s} {'calls':>6s} " + " ".join(f"{s:>10s}" for s in STEPS) + f" {'total':>8s}")
    for cls, marks in res.items():
        if not marks:
            continue
        parts = [step_times(m) for m in marks]
        print(f"{cls:12s} {len(marks):6d} " + " ".join(f"{statistics.median(p[i] for p in parts):10.3f}"
                                                     for i in range(len(STEPS)))
              + f" {statistics.median(m[-1] for m in marks):8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
