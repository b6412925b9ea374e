#!/usr/bin/env python3
"""What a score threshold (``min_score=``) buys: precision and recall of the hits kept, per mode, on LoCoMo turns
and on LoCoMo facts.

    python bench/recall_threshold.py --data ../shared/data/locomo/locomo-dev.json
                                     [--turns-database pgmem_bench_recall] [--facts-database pgmem_bench_facts]
                                     [--dsn URL] [--out bench/out]

Needs the databases the two recall benchmarks leave behind (nothing is imported or embedded here but the
questions): ``bench/recall_locomo.py`` (turns, space ``minilm``) and ``bench/recall_facts.py`` (facts, spaces
``facts-session`` and ``facts-plain``), on the embedded server or the server of ``--dsn``. Each is copied first
(``CREATE DATABASE ... TEMPLATE``) into ``<name>_threshold`` and the copy is migrated, so the originals stay as
they are.

Method: every question of categories 1-4 (883 on the dev split), k = 10, in ``vector``, ``text`` and ``hybrid``
mode, the question embedded once (all-MiniLM-L6-v2) and passed to both modes that use it. A hit is relevant when
it is an evidence turn of the question (turns: its ``metadata.dia_id``; facts: one of the turns it cites,
``metadata.cites``). For a threshold t, the hits kept are those with ``score >= t`` (what ``min_score=t`` returns):

- **precision**: relevant hits kept / hits kept, over all questions;
- **recall**: the share of a question's evidence turns found among its kept hits, averaged over questions (at
  t = -inf this is R@10 of the recall benchmarks);
- **kept**: hits kept per question, and **empty**: the share of questions left with no hit.

Thresholds: the 10th, 20th, ..., 90th percentiles of the scores of all hits of the mode (so each row keeps a known
share of the top-10 lists), plus none. Output: tables on stdout and ``OUT/recall_threshold.csv``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recall_locomo import DATABASE as TURNS_DATABASE, K, SPACE as TURNS_SPACE, load  # noqa: E402
from recall_facts import DATABASE as FACTS_DATABASE, SPACES as FACTS_SPACES  # noqa: E402

MODES = ("vector", "text", "hybrid")
PERCENTILES = (10, 20, 30, 40, 50, 60, 70, 80, 90)


def copy_database(dsn: str | None, source: str) -> str:
    """A fresh copy of ``source`` named ``<source>_threshold``; its URL."""
    import psycopg

    from recall_locomo import with_database

    from pgmem import embedded

    target = f"{source}_threshold"
    if dsn is None:
        st = embedded.start()
        admin, url = st.url("postgres"), st.url(target)
    else:
        admin, url = with_database(dsn, "postgres"), with_database(dsn, target)
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [source]).fetchone() is None:
            raise SystemExit(f"no database {source}: run the recall benchmark that makes it first")
        conn.execute(f'DROP DATABASE IF EXISTS "{target}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{target}" TEMPLATE "{source}"')
    return url


def evaluate(hits: list[list[tuple[float, set[str]]]], evidence: list[set[str]],
             threshold: float | None) -> dict[str, float]:
    kept_total = relevant_kept = empty = 0
    recalls = []
    for qhits, ev in zip(hits, evidence):
        kept = [cites for score, cites in qhits if threshold is None or score >= threshold]
        kept_total += len(kept)
        relevant_kept += sum(bool(cites & ev) for cites in kept)
        empty += not kept
        found = set().union(*kept) if kept else set()
        recalls.append(len(found & ev) / len(ev))
    return {"precision": relevant_kept / kept_total if kept_total else float("nan"),
            "recall": float(np.mean(recalls)), "kept": kept_total / len(hits), "empty": empty / len(hits)}


def run_space(memory, users: Sequence[str], questions, cites_of, embeddings) -> dict[str, list]:
    """Per mode, per question: the (score, cited turn ids) of each hit."""
    out: dict[str, list] = {m: [] for m in MODES}
    clients = {u: memory.with_identity(user_id=u) for u in users}
    for q, e in zip(questions, embeddings):
        for mode in MODES:
            if mode == "vector":
                recs = clients[q.user].search(embedding=e, k=K, mode=mode)
            elif mode == "text":
                recs = clients[q.user].search(q.text, k=K, mode=mode)
            else:
                recs = clients[q.user].search(q.text, embedding=e, k=K, mode=mode)
            out[mode].append([(r.score, cites_of(r)) for r in recs])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="LoCoMo JSON file (e.g. locomo-dev.json)")
    ap.add_argument("--dsn", help="postgresql:// URL of the server holding the databases (default: embedded)")
    ap.add_argument("--turns-database", default=TURNS_DATABASE, help=f"default {TURNS_DATABASE}")
    ap.add_argument("--facts-database", default=FACTS_DATABASE, help=f"default {FACTS_DATABASE}")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out", help="output directory")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from pgmem import Memory, MiniLMEmbedder, migrations

    console = Console(width=None if sys.stdout.isatty() else 140)
    users, questions = load(args.data, None)
    embedder = MiniLMEmbedder()
    embeddings = embedder.embed([q.text for q in questions])
    evidence = [set(q.evidence) for q in questions]

    benches = [("turns", args.turns_database, [TURNS_SPACE],
                lambda r: {(r.metadata or {}).get("dia_id")} - {None}),
               ("facts", args.facts_database, list(FACTS_SPACES),
                lambda r: set((r.metadata or {}).get("cites") or []))]
    rows = []
    for bench, source, spaces, cites_of in benches:
        dsn = copy_database(args.dsn, source)
        migrations.migrate(dsn)
        for space in spaces:
            with Memory(dsn, role="pgmem_gateway", space=space, embedder=embedder) as memory:
                hits = run_space(memory, users, questions, cites_of, embeddings)
                for mode in MODES:
                    scores = np.array([s for qh in hits[mode] for s, _ in qh if s is not None], dtype=float)
                    if not scores.size:
                        raise SystemExit(f"{bench} / {space} / {mode}: no scored hits (is the space filled?)")
                    cuts = [None] + [float(np.percentile(scores, p)) for p in PERCENTILES]
                    for p, t in zip((None,) + PERCENTILES, cuts):
                        r = evaluate(hits[mode], evidence, t)
                        rows.append({"benchmark": bench, "space": space, "mode": mode,
                                     "percentile": "" if p is None else p,
                                     "threshold": "" if t is None else round(t, 4), **r})
                console.print(f"{bench} / {space}: {len(questions)} questions done")

    for (bench, space, mode) in dict.fromkeys((r["benchmark"], r["space"], r["mode"]) for r in rows):
        table = Table(title=f"{bench}, space {space}, {mode} mode (k = {K}, {len(questions)} questions)")
        for col in ("min_score", "share of hits cut", "precision", "recall", "kept / question", "empty"):
            table.add_column(col, justify="right")
        for r in rows:
            if (r["benchmark"], r["space"], r["mode"]) != (bench, space, mode):
                continue
            table.add_row("none" if r["threshold"] == "" else f"{r['threshold']:.3f}",
                          "0%" if r["percentile"] == "" else f"{r['percentile']}%",
                          f"{r['precision']:.3f}", f"{r['recall']:.3f}", f"{r['kept']:.1f}", f"{r['empty']:.3f}")
        console.print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "recall_threshold.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
