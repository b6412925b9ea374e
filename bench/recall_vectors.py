#!/usr/bin/env python3
"""What each extra vector kind pays for: LoCoMo recall with all, without sentence, without context vectors
and with the content vector only, in one run.

    python bench/recall_vectors.py --data ../shared/data/locomo/locomo-dev.json [--dsn DSN]
        [--variants all,no-sentence,no-context,content-only] [--limit-conversations N] [--out bench/out]

For each variant: the database ``pgmem_bench_vectors`` is dropped, re-created and migrated; the file is
imported with :func:`pgmem.importer.import_file` through ``Memory(contextual=<the variant's kinds>)``
(all: ``sentence`` and ``context``; no-sentence: ``context``; no-context: ``sentence``; content-only: none);
then every question of categories 1-4 is asked in ``vector`` and ``hybrid`` mode, k = 10, scored as
bench/recall_locomo.py does (turn-level recall@k over the evidence ids, the data's README rule).

One all-MiniLM-L6-v2 embedder serves every variant through a cache keyed by text, so each distinct text is
computed once in the run (the variants' texts are subsets of the first's); the cost of a variant is the
number of texts its import asks to embed, printed per turn. The dataset is only read from ``--data``.
Output: a table on stdout and ``OUT/recall_vectors.csv``.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import recall_locomo as rl  # noqa: E402

DATABASE = "pgmem_bench_vectors"
VARIANTS = {"all": ("sentence", "context"), "no-sentence": ("context",), "no-context": ("sentence",),
            "content-only": ()}
MODES = ("vector", "hybrid")


class CachingEmbedder:
    """An embedder whose vectors are kept by text: a text is computed once per run. ``asked`` counts the texts
    asked for since the last reset (hits included): what an import would embed without the cache."""

    def __init__(self, inner) -> None:
        self.inner, self.model_name, self.dims = inner, inner.model_name, inner.dims
        self.cache: dict[str, np.ndarray] = {}
        self.asked = 0
        self.computed = 0
        self.seconds = 0.0

    def embed(self, texts):
        texts = list(texts)
        self.asked += len(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if missing:
            t0 = time.perf_counter()
            vecs = np.asarray(self.inner.embed(missing), dtype=np.float32)
            self.seconds += time.perf_counter() - t0
            self.computed += len(missing)
            self.cache.update(zip(missing, vecs))
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, self.dims), np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--dsn", help="postgresql:// URL of a server whose user may CREATE DATABASE (default: embedded)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--limit-conversations", type=int, default=None, metavar="N")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or set(variants) - set(VARIANTS):
        sys.exit(f"--variants takes {', '.join(VARIANTS)}")

    from pgmem import Memory, MiniLMEmbedder, importer, migrations

    users, questions = rl.load(args.data, args.limit_conversations)
    keep = set(users)
    emb = CachingEmbedder(MiniLMEmbedder())
    results = []
    print(f"{len(users)} conversation(s), {len(questions)} questions; load average {os.getloadavg()[0]:.1f}",
          flush=True)
    for variant in variants:
        dsn = rl.fresh_database(args.dsn, DATABASE)
        migrations.migrate(dsn)
        with Memory(dsn, role="pgmem_gateway", space=rl.SPACE, embedder=emb,
                    contextual=VARIANTS[variant] or False) as memory:
            emb.asked = 0
            t0 = time.perf_counter()
            records = (r for r in importer.read_locomo(args.data)
                       if (r.user_id if isinstance(r, importer.Record) else r.where.split()[0]) in keep)
            summary = importer.import_records(memory, records)
            import_s = time.perf_counter() - t0
            texts = emb.asked
            clients = {u: memory.with_identity(user_id=u) for u in users}
            scores = {m: rl.Scores() for m in MODES}
            for q in questions:
                for mode in MODES:
                    t1 = time.perf_counter()
                    recs = clients[q.user].search(q.text, k=rl.K, mode=mode)
                    wall = time.perf_counter() - t1
                    scores[mode].add(q, [(r.metadata or {}).get("dia_id") for r in recs], 1000 * wall, 0.0)
        row = {"variant": variant, "turns": summary.added, "texts": texts,
               "texts_per_turn": texts / max(1, summary.added), "import_s": import_s}
        for mode in MODES:
            s = scores[mode].summary()
            row.update({f"{mode}_r5": s["r_at_5"], f"{mode}_r10": s["r_at_10"], f"{mode}_mrr": s["mrr"]})
        results.append(row)
        print(f"{variant:13s} turns {row['turns']} texts {texts} ({row['texts_per_turn']:.2f}/turn) "
              f"hybrid R@5 {row['hybrid_r5']:.3f} R@10 {row['hybrid_r10']:.3f}  vector R@5 {row['vector_r5']:.3f} "
              f"R@10 {row['vector_r10']:.3f}  (import {import_s:.0f} s, cache computed {emb.computed} texts "
              f"in {emb.seconds:.0f} s; load {os.getloadavg()[0]:.1f})", flush=True)

    print("\n| variant | embedded texts per turn | hybrid R@5 | hybrid R@10 | vector R@5 | vector R@10 |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['variant']} | {r['texts_per_turn']:.2f} | {r['hybrid_r5']:.3f} | {r['hybrid_r10']:.3f} | "
              f"{r['vector_r5']:.3f} | {r['vector_r10']:.3f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "recall_vectors.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(results[0]))
        w.writeheader()
        w.writerows(results)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
