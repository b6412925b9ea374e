#!/usr/bin/env python3
"""Retrieval recall of pgmem on fact-style memories: LoCoMo's observations, scored by the turns they cite.

    python bench/recall_facts.py --data ../shared/data/locomo/locomo-dev.json [--dsn DSN] [--out bench/out]
                                 [--limit-conversations N] [--database NAME] [--embedder KIND] [--reuse]

What it does
1. Drops and re-creates the database ``pgmem_bench_facts`` (``--database``) on the embedded server or on the
   server of ``--dsn`` (``--reuse``: keeps it when it exists, with the facts an earlier run stored, and skips
   step 2's writes), migrates it and opens ``Memory(dsn, role="pgmem_gateway")`` with the default MiniLM
   embedder (``--embedder e5``: multilingual-e5-small, 4-bit; any ``PGMEM_EMBEDDER`` value is accepted).
2. Stores every ``observation`` of the conversations (LoCoMo's per-session facts, e.g. "Caroline attended an
   LGBTQ support group recently ...", each citing the turn ids it was drawn from) as one memory of the
   conversation's user (the ``sample_id``), twice:
   - space ``facts-session``: ``session_id`` = ``session_N``, ``metadata = {"speaker": <the person the fact
     is about>, "cites": [turn ids]}``, ``created_at`` = the session's date;
   - space ``facts-plain``: no session and no speaker, ``metadata = {"cites": [...]}``, the same
     ``created_at`` (so both hold the day as searchable text): what an agent's distilled notes look like.
   An observation repeated word for word within a conversation is stored once, citing the union of the turns.
3. Asks every question of categories 1-4 (as ``bench/recall_locomo.py``: 883 questions on the dev split)
   under its conversation's user, k = 10, in every mode of each space:
   - ``pgmem vector`` / ``pgmem text`` / ``pgmem hybrid``: ``Memory.search(question, mode=...)``;
   - ``dense``: cosine similarity of the question's embedding (the embedder's query embedding) to each fact's (computed here in numpy
     from the vectors pgmem stored: the same ranking as ``pgmem vector``, kept as the plain reference);
   - ``BM25``: Okapi BM25 (``rank_bm25.BM25Okapi``, k1 = 1.5, b = 0.75, its defaults) over the lexemes
     PostgreSQL's ``to_tsvector('english', ...)`` gives (stemmed, stop words removed), question likewise;
   - ``RRF``: reciprocal-rank fusion of dense and BM25, ``sum 1 / (60 + rank)`` (Cormack et al., SIGIR 2009).

Scoring: a question's evidence turn ids (normalised as in ``recall_locomo.py``); recall@k = share of them
cited by at least one of the top k facts, averaged over questions; per category R@10 (LoCoMo's category ids:
1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, the mapping of its evaluation code). The headline
figure is ``pgmem hybrid`` minus the best of dense, BM25 and RRF in the same space and run.

Output: tables on stdout, ``OUT/recall_facts.csv`` (one row per space and mode). The dataset is only read
from ``--data``; the database is left in place for ``bench/recall_cv.py``. Needs ``pip install
'pgmem-agents[local,bench]'`` (rank_bm25).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recall_locomo import CATEGORIES, CATEGORY_NAMES, K, Question, existing_database, fresh_database, load, \
    normalise_evidence  # noqa: E402

DATABASE = "pgmem_bench_facts"
SPACES = ("facts-session", "facts-plain")
RRF_K = 60
BASELINE_MODES = ("dense", "BM25", "RRF")
PGMEM_MODES = ("vector", "text", "hybrid")


@dataclass
class Fact:
    user: str
    session: str
    speaker: str
    content: str
    cites: list[str]
    created_at: object


def read_facts(path: Path, users: Sequence[str]) -> list[Fact]:
    """The observations of ``users``' conversations, a repeated text of one user merged (cites united)."""
    from pgmem.importer import parse_locomo_date

    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    keep = set(users)
    out: dict[tuple[str, str], Fact] = {}
    for sample in data:
        user = str(sample["sample_id"])
        if user not in keep:
            continue
        conv = sample["conversation"]
        for key, per_speaker in (sample.get("observation") or {}).items():
            sess = key.removesuffix("_observation")
            when = parse_locomo_date(conv.get(f"{sess}_date_time") or "")
            for speaker, entries in per_speaker.items():
                for text, ev in entries:
                    cites = normalise_evidence(ev if isinstance(ev, list) else [ev])
                    text = text.strip()
                    f = out.get((user, text))
                    if f is None:
                        out[(user, text)] = Fact(user, sess, speaker, text, cites, when)
                    else:
                        f.cites = sorted(set(f.cites) | set(cites))
    return list(out.values())


def items_of(facts: Sequence[Fact], space: str) -> list[dict]:
    if space == "facts-session":
        return [{"content": f.content, "user_id": f.user, "session_id": f.session, "created_at": f.created_at,
                 "metadata": {"speaker": f.speaker, "cites": f.cites}} for f in facts]
    return [{"content": f.content, "user_id": f.user, "created_at": f.created_at, "metadata": {"cites": f.cites}}
            for f in facts]


def recall(evidence: Sequence[str], ranked_cites: Sequence[Sequence[str]], k: int) -> float:
    got = set().union(*ranked_cites[:k]) if ranked_cites[:k] else set()
    return sum(e in got for e in evidence) / len(evidence)


class Tally:
    def __init__(self) -> None:
        self.rows: list[tuple[int, float, float, float, float]] = []

    def add(self, q: Question, ranked_cites: Sequence[Sequence[str]]) -> None:
        rr = next((1.0 / (i + 1) for i, c in enumerate(ranked_cites[:K]) if set(c) & set(q.evidence)), 0.0)
        self.rows.append((q.category, recall(q.evidence, ranked_cites, 1), recall(q.evidence, ranked_cites, 5),
                          recall(q.evidence, ranked_cites, 10), rr))

    def summary(self) -> dict[str, float]:
        a = np.array(self.rows, dtype=float)
        out = {"questions": len(a), "r_at_1": a[:, 1].mean(), "r_at_5": a[:, 2].mean(), "r_at_10": a[:, 3].mean(),
               "mrr": a[:, 4].mean()}
        for c in CATEGORIES:
            sel = a[a[:, 0] == c]
            out[f"r_at_10_cat{c}"] = float(sel[:, 3].mean()) if len(sel) else float("nan")
        return out


def lexemes(conn, texts: Sequence[str]) -> list[list[str]]:
    """Each text as PostgreSQL's english lexemes, one entry per occurrence."""
    rows = conn.execute("""
        SELECT t.i, coalesce(array_agg(x.lexeme ORDER BY x.lexeme) FILTER (WHERE x.lexeme IS NOT NULL), '{}')
        FROM unnest(%s::text[]) WITH ORDINALITY AS t(txt, i)
        LEFT JOIN LATERAL (SELECT u.lexeme FROM unnest(to_tsvector('english', t.txt)) u,
                           LATERAL generate_series(1, coalesce(array_length(u.positions, 1), 1))) x ON true
        GROUP BY t.i ORDER BY t.i""", (list(texts),)).fetchall()
    return [list(r[1]) for r in rows]


class CachedEmbedder:
    """The embedder, each distinct text embedded once per kind (stored text or query) in the run: both spaces store
    the same facts, so the second space costs no embedding. The vectors are the embedder's own."""

    def __init__(self, inner) -> None:
        self.inner, self.model_name, self.dims = inner, inner.model_name, inner.dims
        self.cache: dict[tuple[bool, str], np.ndarray] = {}

    def _get(self, texts, query: bool) -> np.ndarray:
        from pgmem.embedders import embed_queries

        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if (query, t) not in self.cache))
        if missing:
            vecs = embed_queries(self.inner, missing) if query else self.inner.embed(missing)
            self.cache.update({(query, t): np.asarray(v, dtype=np.float32) for t, v in zip(missing, vecs)})
        return np.array([self.cache[(query, t)] for t in texts], dtype=np.float32).reshape(len(texts), self.dims)

    def embed(self, texts) -> np.ndarray:
        return self._get(texts, False)

    def embed_query(self, texts) -> np.ndarray:
        return self._get(texts, True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="LoCoMo JSON file (e.g. locomo-dev.json)")
    ap.add_argument("--dsn", help="postgresql:// URL of a server whose user may CREATE DATABASE "
                                  "(default: the embedded server)")
    ap.add_argument("--database", default=DATABASE, help=f"database to (re-)create (default {DATABASE})")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out", help="output directory")
    ap.add_argument("--limit-conversations", type=int, default=None, metavar="N",
                    help="only the first N conversations of the file")
    ap.add_argument("--embedder", default="local",
                    help="embedder kind, as PGMEM_EMBEDDER (default local: all-MiniLM-L6-v2; e5: "
                         "multilingual-e5-small 4-bit)")
    ap.add_argument("--reuse", action="store_true",
                    help="keep --database if it exists (facts stored by an earlier run with the same embedder): "
                         "migrate it and search only")
    args = ap.parse_args(argv)

    import psycopg
    from rank_bm25 import BM25Okapi
    from rich.console import Console
    from rich.table import Table

    from pgmem import Memory, migrations
    from pgmem.embedders import embed_queries, from_config

    console = Console(width=None if sys.stdout.isatty() else 140)
    if not args.data.is_file():
        console.print(f"[red]no such file: {args.data}[/red]")
        return 2
    users, questions = load(args.data, args.limit_conversations)
    facts = read_facts(args.data, users)
    dsn = existing_database(args.dsn, args.database) if args.reuse else None
    reused = dsn is not None
    if not reused:
        dsn = fresh_database(args.dsn, args.database)
    migrations.migrate(dsn)
    embedder = CachedEmbedder(from_config(embedder=args.embedder))
    console.print(f"database {args.database} {'reused' if reused else 're-created'}; embedder {embedder.model_name}; {len(users)} "
                  f"conversation(s), {len(facts)} facts, "
                  f"{len(questions)} questions")

    qvecs = embed_queries(embedder, [q.text for q in questions])
    results: dict[tuple[str, str], dict] = {}
    with psycopg.connect(dsn) as admin:
        qlex = lexemes(admin, [q.text for q in questions])
        for space in SPACES:
            with Memory(dsn, role="pgmem_gateway", space=space, embedder=embedder) as memory:
                t0 = time.perf_counter()
                items = items_of(facts, space)
                if reused:
                    console.print(f"{space}: facts kept from the earlier run (--reuse)")
                else:
                    for i in range(0, len(items), 500):
                        memory.add_many(items[i:i + 500])
                    console.print(f"{space}: stored {len(items)} facts in {time.perf_counter() - t0:.1f} s")
                # The stored facts and vectors, per user (read as the owner: the benchmark's own database).
                rows = admin.execute(
                    "SELECT m.user_id, m.content, m.metadata -> 'cites', m.embedding::text FROM pgmem.memories m"
                    " JOIN pgmem.spaces s ON s.space_id = m.space_id WHERE s.name = %s ORDER BY m.user_id, m.id",
                    (space,)).fetchall()
                per_user: dict[str, dict] = {}
                for user, content, cites, emb in rows:
                    d = per_user.setdefault(user, {"content": [], "cites": [], "emb": []})
                    d["content"].append(content)
                    d["cites"].append(cites)
                    d["emb"].append(np.array(json.loads(emb), dtype=np.float32))
                for d in per_user.values():
                    d["emb"] = np.vstack(d["emb"])
                    d["bm25"] = BM25Okapi(lexemes(admin, d["content"]))
                tallies = {m: Tally() for m in BASELINE_MODES + tuple(f"pgmem {m}" for m in PGMEM_MODES)}
                client = {u: memory.with_identity(user_id=u) for u in users}
                for qi, q in enumerate(questions):
                    d = per_user[q.user]
                    dense = d["emb"] @ qvecs[qi]
                    bm = d["bm25"].get_scores(qlex[qi]) if qlex[qi] else np.zeros(len(dense))
                    order_d = np.argsort(-dense, kind="stable")
                    order_b = np.argsort(-bm, kind="stable")
                    rank_d = np.empty(len(dense)); rank_d[order_d] = np.arange(1, len(dense) + 1)
                    rank_b = np.empty(len(dense)); rank_b[order_b] = np.arange(1, len(dense) + 1)
                    order_r = np.argsort(-(1 / (RRF_K + rank_d) + 1 / (RRF_K + rank_b)), kind="stable")
                    for mode, order in (("dense", order_d), ("BM25", order_b), ("RRF", order_r)):
                        tallies[mode].add(q, [d["cites"][i] for i in order[:K]])
                    for mode in PGMEM_MODES:
                        hits = client[q.user].search(q.text, k=K, mode=mode)
                        tallies[f"pgmem {mode}"].add(q, [(h.metadata or {}).get("cites") or [] for h in hits])
                for mode, t in tallies.items():
                    results[(space, mode)] = t.summary()

    t = Table(title=f"LoCoMo observations as facts: {len(facts)} facts, {len(questions)} questions, k={K}")
    for col in ("space", "mode", "R@1", "R@5", "R@10", "MRR", *(f"R@10 {CATEGORY_NAMES[c]}" for c in CATEGORIES)):
        t.add_column(col, justify="left" if col in ("space", "mode") else "right", no_wrap=True)
    for (space, mode), m in results.items():
        t.add_row(space, mode, f"{m['r_at_1']:.3f}", f"{m['r_at_5']:.3f}", f"{m['r_at_10']:.3f}", f"{m['mrr']:.3f}",
                  *(f"{m[f'r_at_10_cat{c}']:.3f}" for c in CATEGORIES))
    console.print(t)
    for space in SPACES:
        best = max(BASELINE_MODES, key=lambda m: results[(space, m)]["r_at_10"])
        lead = results[(space, "pgmem hybrid")]["r_at_10"] - results[(space, best)]["r_at_10"]
        console.print(f"{space}: pgmem hybrid R@10 {results[(space, 'pgmem hybrid')]['r_at_10']:.3f}, best baseline "
                      f"{best} {results[(space, best)]['r_at_10']:.3f}: lead {lead:+.3f}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("recall_facts.csv" if args.embedder == "local" else f"recall_facts-{args.embedder}.csv")
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        keys = list(next(iter(results.values())))
        w.writerow(["space", "mode", *keys])
        for (space, mode), m in results.items():
            w.writerow([space, mode, *(f"{m[k]:.4f}" if isinstance(m[k], float) else m[k] for k in keys)])
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
