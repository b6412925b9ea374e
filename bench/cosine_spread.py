#!/usr/bin/env python3
"""How much the vector term of pgmem's hybrid fusion separates candidates, per embedding model: for every 9th
LoCoMo question (100), the cosines of the question's query embedding to its user's facts, as stored by
``bench/recall_facts.py`` (space ``facts-plain`` of the databases it leaves in place), and the median fact's
cosine relative to the best one's (the fusion scales the vector score by the best candidate's).

    python bench/recall_facts.py --data DATA --embedder local --database pgmem_bench_facts_minilm
    python bench/recall_facts.py --data DATA --embedder e5 --database pgmem_bench_facts_e5
    python bench/cosine_spread.py --data DATA local=pgmem_bench_facts_minilm e5=pgmem_bench_facts_e5

Databases on the embedded server (``--dsn`` a server URL whose database name is replaced otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--dsn", default=None)
    ap.add_argument("runs", nargs="+", help="KIND=DATABASE (KIND as PGMEM_EMBEDDER)")
    args = ap.parse_args()

    import psycopg
    from recall_facts import load
    from recall_locomo import with_database

    from pgmem import embedded
    from pgmem.embedders import embed_queries, from_config

    _, questions = load(args.data, None)
    questions = questions[::9][:100]
    base = args.dsn or embedded.start().url("postgres")
    for run in args.runs:
        kind, _, db = run.partition("=")
        emb = from_config(embedder=kind)
        qv = embed_queries(emb, [q.text for q in questions])
        with psycopg.connect(with_database(base, db)) as conn:
            rows = conn.execute("SELECT m.user_id, m.embedding::text FROM pgmem.memories m JOIN pgmem.spaces s "
                                "USING (space_id) WHERE s.name = 'facts-plain'").fetchall()
        per: dict[str, list] = {}
        for user, vec in rows:
            per.setdefault(user, []).append(json.loads(vec))
        mats = {u: np.array(v, dtype=np.float32) for u, v in per.items()}
        tops, meds, rel = [], [], []
        for q, v in zip(questions, qv):
            cos = np.sort(mats[q.user] @ v)[::-1]
            tops.append(cos[0]); meds.append(np.median(cos)); rel.append(np.median(cos) / cos[0])
        print(f"{emb.model_name}: best cosine {np.mean(tops):.3f}, median {np.mean(meds):.3f}, "
              f"median / best {np.mean(rel):.3f} ({len(questions)} questions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
