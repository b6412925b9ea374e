#!/usr/bin/env python3
"""Retrieval recall of pgmem on LoCoMo conversations (dense, full-text and hybrid search).

    python bench/recall_locomo.py --data ../shared/data/locomo/locomo-dev.json [--dsn DSN] [--out bench/out]
                                  [--limit-conversations N] [--database NAME] [--check] [--embedder KIND]

What it does
1. Drops and re-creates the database ``pgmem_bench_recall`` (on the embedded server, or on the server of
   ``--dsn``, whose user must be allowed to CREATE DATABASE), migrates it and opens
   ``Memory(dsn, role="pgmem_gateway", space="minilm")`` with the default MiniLM embedder (``--embedder e5``:
   multilingual-e5-small, 4-bit, space ``e5``; any ``PGMEM_EMBEDDER`` value is accepted, docs/embedders.md).
2. Imports every turn of the file with :func:`pgmem.importer.import_file` (``fmt="locomo"``: one memory per
   turn, user = the conversation's ``sample_id``, ``metadata["dia_id"]`` = the turn's id).
3. Asks every question of categories 1-4 under its conversation's user with ``Memory.search(question, k=10,
   mode=...)`` for each mode (vector, text, hybrid) and scores the ranked ``dia_id``s against the question's
   evidence.

Scoring (the rule of the data's README, as in the recall lab's ``common.py``)
- Evidence ids are normalised: ``"D8:6; D9:17"`` is two ids, ``"D:11:26"`` is ``D11:26``; questions whose
  evidence is empty are left out (883 questions of categories 1-4 on the dev split). An id that names no turn
  (one question cites ``"D"``) stays in the denominator and can never be found.
- turn-level recall@k: share of the question's evidence ids among the top k results, averaged over questions.
- session recall@10: share of the evidence's sessions (``D3`` of ``D3:12``) among the sessions of the top 10.
- MRR: reciprocal rank of the first evidence hit in the top 10 (0 when none).
- latency: wall time of the ``search`` call (query embedding included), p50/p95 in ms; "search only" subtracts
  the time spent inside the embedder during that call (measured by wrapping the embedder).

``--systems`` adds LangGraph stores, fed the same turns in the same run (``pip install 'pgmem-agents[langgraph]'
langgraph-checkpoint-postgres``): ``adapter`` is pgmem's LangGraph store (``PgmemStore`` on the same Memory,
space ``minilm-langgraph``), ``postgresstore`` is LangGraph's own ``PostgresStore`` (database
``pgmem_bench_recall_lg`` on the same server, pgvector index, the same MiniLM embedder). Both get one item per
turn: namespace ``(sample_id, "locomo", session_N)``, key = ``dia_id``, value ``{"text": <pgmem's content>,
"speaker", "dia_id", "turn", "session_date"}`` indexed on ``["text"]``, put in file order through
``store.batch`` (one batch per session); each question is ``store.search((sample_id,), query=question,
limit=10)``. Unlike the import, LangGraph items carry no ``created_at`` of the conversation (LangGraph has no
such field), so the day of a turn is not searchable text in either store.

Recall with history (``--reuse --distractors 10000,30000``): for each N a database ``<database>_d<N>``, copied once
from the import, in which every LoCoMo user also holds N turns of Topical-Chat's validation conversations
(``--topicalchat``, default ``../shared/data/topicalchat``): whole conversations in an order shuffled by a fixed
seed (44), the same N turns for every user, each conversation given two speaker names (from a fixed list of 20) and
a place in the user's history, from 180 days before its first memory to its last (30 s between turns), stored as
``pgmem import`` stores turns (``"Name: message"``, its own session, sentence and context vectors: the turns are
imported and embedded once, as user ``topicalchat-pool`` of the import's database, before the copies are made,
and copied to each user with their vectors). Every
question is asked in every mode on each database; the table has one row per mode and N, with R@5, R@10 and p50
(query embedding excluded) and their ratios to N = 0 (``OUT/recall_distractors.csv``).

Output: a table on stdout (plus the naive baseline of the data's README), ``OUT/recall_locomo.csv`` (one row
per mode) and ``OUT/recall_locomo.png`` (R@1/R@5/R@10 per mode, baseline R@10 marked). The dataset is only
read from ``--data``, never copied. Exit code 0; with ``--check``, 1 when hybrid R@10 < 0.80 or R@5 < 0.70.
Needs ``pip install 'pgmem-agents[local,bench]'`` (sentence-transformers, matplotlib).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np

DATABASE = "pgmem_bench_recall"
LG_DATABASE = "pgmem_bench_recall_lg"
SYSTEMS = ("pgmem", "adapter", "postgresstore")
SPACE = "minilm"


def space_for(model_name: str) -> str:
    """The benchmark's space for an embedder: ``minilm`` for all-MiniLM-L6-v2, ``e5`` for multilingual-e5-small,
    else ``bench``."""
    return SPACE if "MiniLM" in model_name else "e5" if "e5" in model_name else "bench"
MODES = ("vector", "text", "hybrid")
K = 10
CATEGORIES = (1, 2, 3, 4)
# The category ids of the file as LoCoMo's evaluation code reads them (task_eval/evaluation.py: category 1 is
# scored as multi-hop, 2 asks for the conversation's date); the paper lists the types in another order.
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# Naive baseline of the LoCoMo data set's README (883 questions, all-MiniLM-L6-v2, turns as "Speaker: text"):
# dense only, PostgreSQL full-text (OR of question words, ts_rank_cd), reciprocal-rank fusion of the two.
BASELINE = {"vector": ("baseline dense", 0.395, 0.483),
            "text": ("baseline full-text", 0.492, 0.572),
            "hybrid": ("baseline RRF hybrid", 0.480, 0.585)}
CHECK_R10, CHECK_R5 = 0.80, 0.70


# --------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------
def normalise_evidence(evidence: Sequence[str]) -> list[str]:
    """``["D8:6; D9:17", "D:11:26"]`` -> ``["D8:6", "D9:17", "D11:26"]`` (the recall lab's ``fix_ev``)."""
    out = []
    for e in evidence:
        for part in re.split(r"[;,]\s*", e):
            part = re.sub(r"^D:(\d+)", r"D\1", part.strip())
            out.append(part)
    return out


def session_of(dia_id: str | None) -> int | None:
    m = re.match(r"D(\d+):", dia_id or "")
    return int(m.group(1)) if m else None


@dataclass
class Question:
    user: str
    text: str
    category: int
    evidence: list[str]


def load(path: Path, limit: int | None) -> tuple[list[str], list[Question]]:
    """Sample ids (file order, the first ``limit``) and their questions of categories 1-4 with evidence."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    samples = data[:limit] if limit else data
    users, questions = [], []
    for sample in samples:
        user = str(sample["sample_id"])
        users.append(user)
        for qa in sample.get("qa") or []:
            if qa.get("category") not in CATEGORIES or not qa.get("evidence"):
                continue
            questions.append(Question(user, qa["question"], int(qa["category"]), normalise_evidence(qa["evidence"])))
    return users, questions


# --------------------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------------------
@dataclass
class Scores:
    r1: list[float] = field(default_factory=list)
    r5: list[float] = field(default_factory=list)
    r10: list[float] = field(default_factory=list)
    rr: list[float] = field(default_factory=list)
    s10: list[float] = field(default_factory=list)
    category: list[int] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)

    def add(self, q: Question, ranked: Sequence[str | None], wall_ms: float, embed_ms: float) -> None:
        ev = q.evidence
        for k, acc in ((1, self.r1), (5, self.r5), (10, self.r10)):
            top = set(ranked[:k])
            acc.append(sum(e in top for e in ev) / len(ev))
        self.rr.append(next((1.0 / (i + 1) for i, x in enumerate(ranked[:K]) if x in ev), 0.0))
        ev_sessions = {session_of(e) for e in ev}
        top_sessions = {session_of(x) for x in ranked[:K]}
        self.s10.append(len(ev_sessions & top_sessions) / len(ev_sessions))
        self.category.append(q.category)
        self.wall_ms.append(wall_ms)
        self.search_ms.append(wall_ms - embed_ms)

    def summary(self) -> dict[str, float]:
        def mean(xs):
            return float(np.mean(xs)) if xs else float("nan")

        def pct(xs, p):
            return float(np.percentile(xs, p)) if xs else float("nan")

        out = {"questions": len(self.r10), "r_at_1": mean(self.r1), "r_at_5": mean(self.r5), "r_at_10": mean(self.r10),
               "mrr": mean(self.rr), "session_r_at_10": mean(self.s10),
               "p50_ms": pct(self.wall_ms, 50), "p95_ms": pct(self.wall_ms, 95),
               "p50_ms_search_only": pct(self.search_ms, 50), "p95_ms_search_only": pct(self.search_ms, 95)}
        for c in CATEGORIES:
            xs = [r for r, cat in zip(self.r10, self.category) if cat == c]
            out[f"n_cat{c}"] = len(xs)
            out[f"r_at_10_cat{c}"] = mean(xs)
        return out


# --------------------------------------------------------------------------------------------------------
# Database and client
# --------------------------------------------------------------------------------------------------------
class TimedEmbedder:
    """Wraps an embedder and adds the seconds spent in ``embed`` to ``seconds`` (to take embedding out of a
    search's latency)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dims = inner.dims
        self.seconds = 0.0

    def embed(self, texts):
        t0 = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - t0

    def embed_query(self, texts):
        from pgmem.embedders import embed_queries

        t0 = time.perf_counter()
        try:
            return embed_queries(self.inner, texts)
        finally:
            self.seconds += time.perf_counter() - t0


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def existing_database(dsn: str | None, database: str = DATABASE) -> str | None:
    """The DSN of ``database`` (default ``pgmem_bench_recall``) when it exists and holds memories (a previous run's import), else None."""
    import psycopg

    if dsn is None:
        from pgmem import embedded

        st = embedded.start()
        admin, bench = st.url("postgres"), st.url(database)
    else:
        admin, bench = dsn, with_database(dsn, database)
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            return None
    with psycopg.connect(bench, autocommit=True) as conn:
        has = conn.execute("SELECT to_regclass('pgmem.memories') IS NOT NULL").fetchone()[0]
        return bench if has and conn.execute("SELECT EXISTS (SELECT 1 FROM pgmem.memories)").fetchone()[0] else None


def fresh_database(dsn: str | None, database: str = DATABASE) -> str:
    """Drop and re-create ``database`` (default ``pgmem_bench_recall``); its DSN (a postgresql:// URL)."""
    import psycopg
    from psycopg import sql

    if dsn is None:
        from pgmem import embedded

        st = embedded.start()
        admin, bench = st.url("postgres"), st.url(database)
    else:
        if not dsn.startswith(("postgresql://", "postgres://")):
            sys.exit("--dsn must be a postgresql:// URL (the benchmark's database replaces its database name)")
        if urlsplit(dsn).path.strip("/") in (DATABASE, LG_DATABASE, database):
            sys.exit(f"--dsn must name another database than {database} (it is dropped and re-created)")
        admin, bench = dsn, with_database(dsn, database)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    return bench


# --------------------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------------------
def print_tables(console, results: dict[str, dict], n_conv: int) -> None:
    from rich.table import Table

    n = next(iter(results.values()))["questions"] if results else 0
    t = Table(title=f"LoCoMo recall, {n} questions of categories 1-4, {n_conv} conversation(s), k={K}")
    for col in ("mode", "R@1", "R@5", "R@10", "MRR", "S@10", "p50 ms", "p95 ms", "p50 -emb", "p95 -emb"):
        t.add_column(col, justify="left" if col == "mode" else "right", no_wrap=True)
    for mode, m in results.items():
        t.add_row(mode, f"{m['r_at_1']:.3f}", f"{m['r_at_5']:.3f}", f"{m['r_at_10']:.3f}", f"{m['mrr']:.3f}",
                  f"{m['session_r_at_10']:.3f}", f"{m['p50_ms']:.1f}", f"{m['p95_ms']:.1f}",
                  f"{m['p50_ms_search_only']:.1f}", f"{m['p95_ms_search_only']:.1f}")
    t.add_section()
    for name, r5, r10 in BASELINE.values():
        t.add_row(f"[dim]{name}[/dim]", "", f"[dim]{r5:.3f}[/dim]", f"[dim]{r10:.3f}[/dim]", "", "", "", "", "", "")
    console.print(t)
    console.print("[dim]S@10: session-level recall@10; p50/p95: wall time of Memory.search in ms, query embedding "
                  "included; -emb: minus the time spent embedding the query; baseline: the data's README "
                  "(883 questions, all 6 dev conversations)[/dim]")

    c = Table(title="R@10 per category")
    c.add_column("category", justify="right")
    c.add_column("questions", justify="right")
    for mode in results:
        c.add_column(f"{mode} R@10", justify="right", style="bold" if mode == "hybrid" else None)
    first = next(iter(results.values()))
    for cat in CATEGORIES:
        c.add_row(f"{cat} {CATEGORY_NAMES[cat]}", str(first[f"n_cat{cat}"]), *(f"{results[m][f'r_at_10_cat{cat}']:.3f}" for m in results))
    console.print(c)


def write_csv(path: Path, results: dict[str, dict], extra: dict) -> None:
    rows = [{"mode": mode, **extra, **m} for mode, m in results.items()]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})


def write_chart(path: Path, results: dict[str, dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(results)
    metrics = (("r_at_1", "R@1"), ("r_at_5", "R@5"), ("r_at_10", "R@10"))
    width = 0.26
    x = np.arange(len(modes))
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    for i, (key, label) in enumerate(metrics):
        vals = [results[m][key] for m in modes]
        bars = ax.bar(x + (i - 1) * width, vals, width, label=label)
        ax.bar_label(bars, fmt="%.3f", fontsize=6.5, padding=1)
    for j, mode in enumerate(modes):
        if mode not in BASELINE:
            continue
        name, _, r10 = BASELINE[mode]
        ax.hlines(r10, x[j] - 1.5 * width, x[j] + 1.5 * width, colors="black", linestyles="dashed", linewidth=1.2,
                  label="baseline R@10 (README)" if j == 0 else None)
        ax.annotate(f"{name.removeprefix('baseline ')} {r10:.3f}", (x[j] - 1.5 * width, r10 + 0.01), fontsize=7,
                    va="bottom", ha="left")
    ax.set_xticks(x, [m.replace(" ", "\n", 1) for m in modes], fontsize=8)
    ax.set_xlim(-0.6, len(modes) - 0.4)
    ax.set_ylim(0, 1)
    ax.set_ylabel("turn-level recall")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=8, ncols=4)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------------
# LangGraph stores (--systems adapter,postgresstore)
# --------------------------------------------------------------------------------------------------------
def langgraph_batches(records) -> list[list]:
    """The PutOps of the turns, one list per (conversation, session), in file order."""
    from langgraph.store.base import PutOp

    batches: dict[tuple[str, str], list] = {}
    for r in records:
        ns = (r.user_id, "locomo", r.session_id)
        batches.setdefault((r.user_id, r.session_id), []).append(
            PutOp(ns, r.metadata["dia_id"], {"text": r.content, **r.metadata}, index=["text"]))
    return list(batches.values())


def run_store(label: str, store, batches: list[list], questions: list[Question], embedder, console, bar) -> Scores:
    """Put every batch, then ask every question with ``store.search``; the scores."""
    n = sum(len(b) for b in batches)
    t0 = time.perf_counter()
    with bar(f"{label}: put") as progress:
        task = progress.add_task("put", total=n)
        for b in batches:
            store.batch(b)
            progress.advance(task, len(b))
    console.print(f"{label}: {n} items put in {time.perf_counter() - t0:.1f} s")
    store.search((questions[0].user,), query="warm-up question", limit=K)
    scores = Scores()
    with bar(f"{label}: search") as progress:
        task = progress.add_task("search", total=len(questions))
        for q in questions:
            embedder.seconds = 0.0
            t0 = time.perf_counter()
            hits = store.search((q.user,), query=q.text, limit=K)
            wall = time.perf_counter() - t0
            scores.add(q, [h.value.get("dia_id") for h in hits], 1000 * wall, 1000 * embedder.seconds)
            progress.advance(task)
    return scores


def postgres_store(dsn: str | None, embedder):
    """LangGraph's PostgresStore in a fresh database, indexed with ``embedder`` on the field ``text``."""
    from langgraph.store.postgres import PostgresStore

    url = fresh_database(dsn, LG_DATABASE)
    cm = PostgresStore.from_conn_string(url, index={"dims": embedder.dims, "fields": ["text"],
                                                    "embed": lambda texts: embedder.embed(list(texts)).tolist()})
    store = cm.__enter__()
    store.setup()
    return cm, store


# --------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------------------
# Recall with history: Topical-Chat turns as distractors
# --------------------------------------------------------------------------------------------------------
DISTRACTOR_SEED = 44
DISTRACTOR_POOL = "topicalchat-pool"
DISTRACTOR_NAMES = ("Alex", "Jordan", "Sam", "Riley", "Morgan", "Casey", "Taylor", "Jamie", "Robin", "Quinn", "Avery",
                    "Drew", "Harper", "Kai", "Logan", "Reese", "Rowan", "Sage", "Toby", "Wren")


def distractor_records(folder: Path, n: int) -> list:
    """The first ``n`` turns of Topical-Chat's validation conversations (valid_freq then valid_rare) in an order
    shuffled by a fixed seed, whole conversations, the last one cut at ``n``: as :class:`pgmem.importer.Record`
    of the user :data:`DISTRACTOR_POOL`, one session per conversation (``tc-<conversation id>``), content
    ``"Name: message"`` as ``pgmem import`` stores a turn, two speaker names per conversation drawn from
    :data:`DISTRACTOR_NAMES`, and ``metadata["place"]``: the conversation's place in [0, 1) in each user's
    history (placed before and among the user's own sessions by :func:`add_distractors`). The same turns for
    every user and run."""
    import random
    from datetime import datetime, timedelta, timezone

    from pgmem import importer

    convs = []
    for name in ("valid_freq.json", "valid_rare.json"):
        with open(folder / name, encoding="utf-8") as fh:
            data = json.load(fh)
        convs += [(cid, data[cid]["content"]) for cid in sorted(data)]
    rng = random.Random(DISTRACTOR_SEED)
    rng.shuffle(convs)
    out, base = [], datetime(2000, 1, 1, tzinfo=timezone.utc)
    for c, (cid, turns) in enumerate(convs):
        a, b = rng.sample(DISTRACTOR_NAMES, 2)
        place = rng.random()
        for i, t in enumerate(turns):
            if len(out) >= n:
                return out
            text = (t.get("message") or "").strip()
            if not text:
                continue
            who = a if t.get("agent") == "agent_1" else b
            out.append(importer.Record(f"{cid}[{i}]", DISTRACTOR_POOL, f"{who}: {text}", None, f"tc-{cid}",
                                       {"speaker": who, "dia_id": None, "turn": i, "place": round(place, 6),
                                        "distractor": True},
                                       base + timedelta(days=c, seconds=30 * i)))
    return out


def import_distractor_pool(dsn: str, memory, folder: Path, n: int, console) -> None:
    """Import the first ``n`` distractor turns once, as user :data:`DISTRACTOR_POOL` of the import's database
    (embedded with sentence and context vectors as any import); every ``<database>_d<N>`` copied from it after
    holds them, and :func:`add_distractors` copies the first N to each user. Skipped when the pool holds n."""
    import psycopg

    from pgmem import importer

    with psycopg.connect(dsn, autocommit=True) as conn:
        have = conn.execute("SELECT count(*) FROM pgmem.memories WHERE user_id = %s", [DISTRACTOR_POOL]).fetchone()[0]
    if have >= n:
        return
    recs = distractor_records(folder, n)
    t0 = time.perf_counter()
    s = importer.import_records(memory, recs, batch_size=256)
    console.print(f"distractors: {s.added} Topical-Chat turns embedded and stored in {time.perf_counter() - t0:.0f} s")


def add_distractors(dsn: str, n: int, users: list[str], console) -> None:
    """Give each of ``users`` a copy of the first ``n`` turns of the pool (:func:`import_distractor_pool`) and their
    extra vectors: created ``place`` of the way from 180 days before the user's first memory to its last one (30 s
    between the turns of a conversation), each conversation its own session ``tc-...``. Skipped for a user who
    already holds them."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for u in users:
            if conn.execute("SELECT count(*) FROM pgmem.memories WHERE user_id = %s AND session_id LIKE 'tc-%%'",
                            [u]).fetchone()[0] >= n:
                continue
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute("""
                    CREATE TEMP TABLE d_map ON COMMIT DROP AS
                    SELECT p.id, gen_random_uuid() AS new_id,
                           r.first - interval '180 days' + ((p.metadata ->> 'place')::float8 * extract(epoch FROM
                               r.last - r.first + interval '180 days')) * interval '1 second'
                               + ((p.metadata ->> 'turn')::integer * interval '30 seconds') AS at
                    FROM pgmem.memories p,
                         (SELECT min(created_at) AS first, max(created_at) AS last FROM pgmem.memories
                          WHERE user_id = %(u)s) r
                    WHERE p.user_id = %(pool)s
                      AND p.id IN (SELECT x.id FROM pgmem.memories x WHERE x.user_id = %(pool)s
                                   ORDER BY x.created_at, x.id LIMIT %(n)s)""", {"u": u, "pool": DISTRACTOR_POOL, "n": n})
                conn.execute("""
                    INSERT INTO pgmem.memories (user_id, id, space_id, agent_id, session_id, content, embedding,
                                                metadata, created_at, updated_at, valid_from)
                    SELECT %(u)s, d.new_id, p.space_id, p.agent_id, p.session_id, p.content, p.embedding,
                           p.metadata - 'place', d.at, d.at, d.at
                    FROM d_map d JOIN pgmem.memories p ON p.user_id = %(pool)s AND p.id = d.id""",
                             {"u": u, "pool": DISTRACTOR_POOL})
                conn.execute("""
                    INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
                    SELECT %(u)s, d.new_id, v.n, v.kind, v.embedding
                    FROM d_map d JOIN pgmem.memory_vectors v ON v.user_id = %(pool)s AND v.memory_id = d.id""",
                             {"u": u, "pool": DISTRACTOR_POOL})
                conn.execute("DELETE FROM pgmem.tenant_sizes WHERE user_id = %s", [u])
            console.print(f"distractors: user {u} holds {n} more turns ({time.perf_counter() - t0:.0f} s)")
        conn.execute("VACUUM ANALYZE pgmem.memories")


def distractor_database(args, n: int) -> str:
    """The DSN of ``<database>_d<n>``: a copy of the import (``--database``) made once, migrated."""
    import psycopg
    from psycopg import sql

    from pgmem import migrations

    name = f"{args.database}_d{n}"
    base = existing_database(args.dsn, args.database)
    if base is None:
        sys.exit(f"--distractors needs the import in {args.database} (run once without --distractors)")
    admin = with_database(base, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name),
                                                                          sql.Identifier(args.database)))
    url = with_database(base, name)
    migrations.migrate(url)
    return url


def ask(memory, users: list[str], questions, modes, embedder) -> dict[str, "Scores"]:
    clients = {u: memory.with_identity(user_id=u) for u in users}
    for mode in modes:  # warm-up (model, connections, plans): not measured
        clients[users[0]].search("warm-up question", k=K, mode=mode)
    scores = {mode: Scores() for mode in modes}
    for q in questions:
        for mode in modes:
            embedder.seconds = 0.0
            t0 = time.perf_counter()
            recs = clients[q.user].search(q.text, k=K, mode=mode)
            wall = time.perf_counter() - t0
            scores[mode].add(q, [(r.metadata or {}).get("dia_id") for r in recs], 1000 * wall, 1000 * embedder.seconds)
    return scores


def run_distractors(args, users, questions, embedder, space, console) -> int:
    """``--distractors``: recall and latency per mode and N (N = 0: the import itself), printed as one table."""
    from pgmem import Memory

    ns = [int(x) for x in args.distractors.split(",") if x.strip()]
    if 0 not in ns:
        ns = [0] + ns
    results: dict[tuple[str, int], dict] = {}
    counts = {}
    base = existing_database(args.dsn, args.database)
    with Memory(base, role="pgmem_gateway", space=space, embedder=embedder) as memory:
        import_distractor_pool(base, memory, args.topicalchat, max(ns), console)
    for n in ns:
        dsn = base if n == 0 else distractor_database(args, n)
        with Memory(dsn, role="pgmem_gateway", space=space, embedder=embedder) as memory:
            if n:
                add_distractors(dsn, n, users, console)
            import psycopg

            with psycopg.connect(dsn) as c:
                counts[n] = c.execute("SELECT min(c), max(c) FROM (SELECT count(*) AS c FROM pgmem.memories"
                                      " WHERE user_id = ANY(%s) GROUP BY user_id) x", [users]).fetchone()
            t0 = time.perf_counter()
            scores = ask(memory, users, questions, MODES, embedder)
            console.print(f"N = {n}: {len(questions)} questions x {len(MODES)} modes in {time.perf_counter() - t0:.0f} s")
        for mode, sc in scores.items():
            results[(mode, n)] = sc.summary()
    print(f"\nRecall with history: each of {len(users)} LoCoMo users also holds N Topical-Chat turns (seed "
          f"{DISTRACTOR_SEED}); {len(questions)} questions; k={K}; p50: Memory.search minus the query's embedding")
    print(f"{'mode':8s} {'N':>7s} {'memories/user':>14s} {'R@5':>6s} {'R@10':>6s} {'R@5 vs 0':>9s} {'R@10 vs 0':>10s}"
          f" {'p50 ms':>7s} {'p50 vs 0':>9s}")
    rows = []
    for mode in MODES:
        z = results[(mode, 0)]
        for n in ns:
            m = results[(mode, n)]
            lo, hi = counts[n]
            print(f"{mode:8s} {n:7d} {f'{lo}-{hi}':>14s} {m['r_at_5']:6.3f} {m['r_at_10']:6.3f}"
                  f" {m['r_at_5'] / z['r_at_5']:8.3f}x {m['r_at_10'] / z['r_at_10']:9.3f}x"
                  f" {m['p50_ms_search_only']:7.2f} {m['p50_ms_search_only'] / z['p50_ms_search_only']:8.2f}x")
            rows.append({"mode": mode, "distractors": n, **m})
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "recall_distractors.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.out / 'recall_distractors.csv'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="LoCoMo JSON file (e.g. locomo-dev.json)")
    ap.add_argument("--dsn", help="postgresql:// URL of a server whose user may CREATE DATABASE "
                                  "(default: the embedded server)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out", help="output directory")
    ap.add_argument("--limit-conversations", type=int, default=None, metavar="N",
                    help="only the first N conversations of the file")
    ap.add_argument("--database", default=DATABASE,
                    help=f"database to drop and re-create (default {DATABASE}); another name lets two runs share "
                         "a server")
    ap.add_argument("--batch-size", type=int, default=256, help="import batch size")
    ap.add_argument("--systems", default="pgmem",
                    help=f"comma-separated, of {', '.join(SYSTEMS)} (default pgmem: Memory.search in each mode)")
    ap.add_argument("--reuse", action="store_true",
                    help=f"keep {DATABASE} when it already holds the import (migrate it, skip the import)")
    ap.add_argument("--embedder", default="local",
                    help="embedder kind, as PGMEM_EMBEDDER (default local: all-MiniLM-L6-v2; e5: "
                         "multilingual-e5-small 4-bit); the space is named after it")
    ap.add_argument("--distractors", default=None, metavar="N[,N...]",
                    help="recall with history: each user also holds N Topical-Chat turns (--topicalchat), one "
                         "database per N copied from the import (needs --reuse or a fresh import first); prints one "
                         "row per mode and N, N = 0 being the users alone")
    ap.add_argument("--topicalchat", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "data" / "topicalchat",
                    help="directory of Topical-Chat's valid_freq.json and valid_rare.json (the distractors)")
    ap.add_argument("--check", action="store_true",
                    help=f"exit 1 when hybrid R@10 < {CHECK_R10} or R@5 < {CHECK_R5}")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    from pgmem import Memory, importer, migrations
    from pgmem.embedders import from_config

    console = Console(width=None if sys.stdout.isatty() else 120)
    if not args.data.is_file():
        console.print(f"[red]no such file: {args.data}[/red]")
        return 2
    users, questions = load(args.data, args.limit_conversations)
    systems = [x.strip() for x in args.systems.split(",") if x.strip()]
    if not systems or set(systems) - set(SYSTEMS):
        console.print(f"[red]--systems takes {', '.join(SYSTEMS)}[/red]")
        return 2
    modes = MODES if "pgmem" in systems else ()

    if args.distractors and not args.reuse:
        console.print("[red]--distractors needs --reuse (the import of a previous run is copied, never re-made)[/red]")
        return 2
    dsn = existing_database(args.dsn, args.database) if args.reuse else None
    reused = dsn is not None
    if not reused:
        dsn = fresh_database(args.dsn, args.database)
    migrations.migrate(dsn)
    embedder = TimedEmbedder(from_config(embedder=args.embedder))
    space = space_for(embedder.model_name)
    console.print(f"database {args.database} {'reused' if reused else 're-created'} and migrated; {len(users)} conversation(s), "
                  f"{len(questions)} questions; modes: {', '.join(modes)}")

    def bar(label: str) -> Progress:
        return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=console)

    console.print(f"embedder {embedder.model_name} ({embedder.dims} dims), space {space}")
    if args.distractors:
        return run_distractors(args, users, questions, embedder, space, console)
    with Memory(dsn, role="pgmem_gateway", space=space, embedder=embedder) as memory:
        summary = None
        scores: dict[str, Scores] = {}
        if modes and reused:
            console.print("import skipped (--reuse)")
        if modes and not reused:
            # 2. import
            keep = set(users)

            def owner(rec) -> str:  # a Record's user; a Failure's "where" starts with the sample id
                return rec.user_id if isinstance(rec, importer.Record) else rec.where.split()[0]

            if args.limit_conversations:
                total = sum(1 for r in importer.read_locomo(args.data) if owner(r) in keep)
            else:
                total = importer.count_records(args.data, "locomo")
            with bar("importing") as progress:
                task = progress.add_task("import", total=total)
                tick = lambda n: progress.advance(task, n)  # noqa: E731
                if args.limit_conversations:
                    records = (r for r in importer.read_locomo(args.data) if owner(r) in keep)
                    summary = importer.import_records(memory, records, batch_size=args.batch_size, progress=tick)
                else:
                    summary = importer.import_file(memory, args.data, fmt="locomo", batch_size=args.batch_size,
                                                   progress=tick)
            console.print(f"imported {summary.rows} turns: {summary.added} added, {summary.duplicates} duplicates, "
                          f"{len(summary.failures)} failures in {summary.seconds:.1f} s "
                          f"({summary.rows_per_second:.1f} rows/s)")
            for f in summary.failures[:10]:
                console.print(f"  [red]failed[/red] {f.where}: {f.reason}")

        if modes:
            # 3. questions
            clients = {u: memory.with_identity(user_id=u) for u in users}
            for mode in modes:  # warm-up (model, connections, plans): not measured
                clients[users[0]].search("warm-up question", k=K, mode=mode)
            scores.update({mode: Scores() for mode in modes})
            unmapped = 0
            with bar("searching") as progress:
                task = progress.add_task("search", total=len(questions))
                for q in questions:
                    for mode in modes:
                        embedder.seconds = 0.0
                        t0 = time.perf_counter()
                        recs = clients[q.user].search(q.text, k=K, mode=mode)
                        wall = time.perf_counter() - t0
                        ranked = [(r.metadata or {}).get("dia_id") for r in recs]
                        unmapped += sum(x is None for x in ranked)
                        scores[mode].add(q, ranked, 1000 * wall, 1000 * embedder.seconds)
                    progress.advance(task)
            if unmapped:
                console.print(f"[yellow]warning: {unmapped} results had no metadata['dia_id'][/yellow]")

        records = [r for r in importer.read_locomo(args.data) if isinstance(r, importer.Record) and r.user_id in set(users)]
        if "adapter" in systems:
            from pgmem.integrations.langgraph import PgmemStore

            lg_memory = Memory(dsn, role="pgmem_gateway", space=f"{space}-langgraph", embedder=embedder)
            with lg_memory:
                scores["pgmem LangGraph store"] = run_store("pgmem LangGraph store", PgmemStore(lg_memory),
                                                            langgraph_batches(records), questions, embedder,
                                                            console, bar)
        if "postgresstore" in systems:
            cm, store = postgres_store(args.dsn, embedder)
            try:
                scores["LangGraph PostgresStore"] = run_store("LangGraph PostgresStore", store,
                                                              langgraph_batches(records), questions, embedder,
                                                              console, bar)
            finally:
                cm.__exit__(None, None, None)

    # 4. report
    results = {mode: s.summary() for mode, s in scores.items()}
    print_tables(console, results, len(users))
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if space == SPACE else f"-{space}"
    csv_path, png_path = args.out / f"recall_locomo{suffix}.csv", args.out / f"recall_locomo{suffix}.png"
    write_csv(csv_path, results, {"embedder": embedder.model_name, "conversations": len(users), "k": K,
                                  "import_rows": summary.rows if summary else "",
                                  "import_seconds": round(summary.seconds, 2) if summary else "",
                                  "import_rows_per_second": round(summary.rows_per_second, 2) if summary else ""})
    write_chart(png_path, results, f"pgmem on LoCoMo, {space} ({next(iter(results.values()))['questions']} questions, "
                                   f"{len(users)} conversation(s)), k={K}")
    console.print(f"wrote {csv_path}\nwrote {png_path}")

    if args.check:
        h = results.get("hybrid")
        if h is None or h["r_at_10"] < CHECK_R10 or h["r_at_5"] < CHECK_R5:
            got = "no hybrid mode" if h is None else f"R@10 {h['r_at_10']:.3f}, R@5 {h['r_at_5']:.3f}"
            console.print(f"[red]check failed: hybrid needs R@10 >= {CHECK_R10} and R@5 >= {CHECK_R5} ({got})[/red]")
            return 1
        console.print("[green]check passed[/green]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
