#!/usr/bin/env python3
"""Where pgmem's hybrid recall fails on LoCoMo: the questions whose evidence is not all in the top 10, shown
with their evidence turns and the ranks each search mode gives them, for reading by hand.

    python bench/recall_errors.py --data ../shared/data/locomo/locomo-dev.json --database pgmem_bench_errors \\
        [--categories multi-hop,open-domain] [--limit 20] [--seed 0] [--out bench/out/recall_errors.md]
    python bench/recall_errors.py --data ... --database pgmem_bench_errors_facts --space facts-session
    python bench/recall_errors.py --data ... --database pgmem_bench_errors --variants   # + weight variants

What it reads
- A database on the embedded server (``pgmem.embedded.start()``; ``--dsn`` for another server) that already
  holds the import of ``bench/recall_locomo.py`` (space ``minilm``: one memory per turn,
  ``metadata["dia_id"]``) or of ``bench/recall_facts.py`` (spaces ``facts-session`` / ``facts-plain``:
  LoCoMo's observations, ``metadata["cites"]`` = the turns each was drawn from). Run it on a copy
  (``CREATE DATABASE pgmem_bench_errors TEMPLATE pgmem_bench_recall``): it migrates the database it is
  given and writes nothing else there.
- ``--data``: the LoCoMo file, for the questions (:func:`recall_locomo.load`, categories 1-4 with evidence,
  883 on the dev split), their gold answers and the text of each evidence turn (the content the import
  stores, :func:`pgmem.importer.read_locomo`). The dataset is only read, never copied; the report quotes
  the questions and turns it is about, and is written under ``bench/out/`` (not part of the repository).

What it measures
1. Every question of ``--categories`` (LoCoMo's category ids as its evaluation code reads them,
   ``recall_locomo.CATEGORY_NAMES``: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop) is asked under its
   conversation's user with ``Memory.search(question, k=100, mode=...)`` in hybrid, vector and text mode, as
   ``bench/recall_locomo.py`` asks it (same client, role ``pgmem_gateway``, default MiniLM embedder). A
   result stands for the turn ids ``{metadata["dia_id"]}`` (turns) or ``metadata["cites"]`` (facts); an
   evidence turn's rank in a mode is the first rank (1-based) of a result standing for it among the first
   100, else ">100" (:func:`evidence_ranks`). In hybrid mode the top 10 is that of ``k=10`` itself (the
   benchmark's result) and ranks past 10 come from ``k=100``, whose scores can differ a little (the extra
   vectors of max(100, 4k) candidates are read, docs/recall.md), so such a rank is at least 11
   (:func:`combine_ranks`). Vector and text ranks do not depend on k.
2. A question fails when one of its evidence turns is not in the hybrid top 10 (R@10 < 1; with
   ``--fail-mode vector``, the vector top 10). Of the failing questions of each category, ``--limit`` are
   drawn with ``random.Random(seed)`` (:func:`sample_failing`) and printed: question, gold answer, each
   evidence turn (text, session, rank in hybrid / vector / text, and for facts the facts citing it), and the
   top 5 hybrid hits (text, session, score, text_score, vector_score). A summary per category counts, over
   every failing question, where the missing evidence turns rank (:func:`rank_buckets`).
3. ``--variants``: R@10 per category over every question of categories 1-4 for
   - ``pgmem.search_hybrid`` called with other weights (its ``p_text_weight``, ``p_vector_weight``,
     ``p_speaker_weight``, ``p_session_weight`` arguments, which ``Memory.search`` does not expose; NULL =
     the formula's default, docs/recall.md);
   - a two-query merge (:func:`merge_rankings`: the question, and the question without the words naming the
     conversation's speakers, their ranked lists interleaved);
   - re-rankings of the hybrid list of k=100 (beside the top 10 of that same list): at most 2 or 3 hits per
     session (:func:`cap_per_session`), and for turns each hit followed by its next or previous turn of the
     session (:func:`with_neighbours`);
   - R@20 and R@50 read from that list (what asking for more results buys).
   The defaults are not changed.

Output: the report (markdown) at ``--out`` (default ``bench/out/recall_errors[-SPACE][-MODE].md``) and a summary
on stdout. Needs ``pip install 'pgmem-agents[local,bench]'``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recall_locomo import CATEGORIES, CATEGORY_NAMES, K, Question, existing_database, load, session_of  # noqa: E402

DEPTH = 100          # ranks are looked up among the first DEPTH results of each mode
TOP = 5              # hybrid hits shown per failing question
MODES = ("hybrid", "vector", "text")
DEEPER = (20, 50)    # --variants: recall at a larger k, read from the k=100 list
CAPS = (2, 3)        # --variants: at most this many hits of one session in the top k (from the k=100 list)
# Weight variants of --variants: name -> (text, vector, speaker, session) weights; None = the default.
VARIANTS: dict[str, tuple[float | None, float | None, float | None, float | None]] = {
    "default": (None, None, None, None),
    "session 0": (None, None, None, 0.0),
    "session 0.2": (None, None, None, 0.2),
    "speaker 0": (None, None, 0.0, None),
    "vector 0.8": (None, 0.8, None, None),
    "text 0.6": (0.6, None, None, None),
}


# --------------------------------------------------------------------------------------------------------
# Pure logic (tested in tests/bench/test_recall_errors.py)
# --------------------------------------------------------------------------------------------------------
def evidence_ranks(evidence: Sequence[str], ranked_gold: Sequence[Iterable[str]]) -> dict[str, int | None]:
    """For each evidence turn id, the 1-based rank of the first result standing for it (``ranked_gold[i]``:
    the turn ids result ``i`` stands for), None when no result does. A repeated evidence id appears once."""
    out: dict[str, int | None] = {e: None for e in evidence}
    for rank, gold in enumerate(ranked_gold, start=1):
        for g in gold:
            if g in out and out[g] is None:
                out[g] = rank
    return out


def recall_at(ranks: Mapping[str, int | None], evidence: Sequence[str], k: int = K) -> float:
    """Share of ``evidence`` (repeats counted, as the benchmarks do) ranked within the top ``k``."""
    return sum(ranks.get(e) is not None and ranks[e] <= k for e in evidence) / len(evidence)


def combine_ranks(top: Mapping[str, int | None], deep: Mapping[str, int | None], k: int = K) -> dict[str, int | None]:
    """Ranks from the top ``k`` list itself where it has them, else from the deeper list, but never within
    ``k`` (a memory not in the top k is past it, whatever a deeper search's slightly different scores say)."""
    return {e: top[e] if top[e] is not None else None if deep.get(e) is None else max(deep[e], k + 1) for e in top}


def fmt_rank(rank: int | None, depth: int = DEPTH) -> str:
    return f">{depth}" if rank is None or rank > depth else str(rank)


def sample_failing(items: Sequence, limit: int | None, seed: int) -> list:
    """``limit`` of ``items`` drawn with ``random.Random(seed)`` (all when ``limit`` is None or larger), in
    their original order: the same seed gives the same examples."""
    if limit is None or limit >= len(items):
        return list(items)
    picked = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in picked]


def merge_rankings(lists: Sequence[Sequence[str]], k: int) -> list[str]:
    """Interleave ranked id lists (first of each, then second of each, ...), dropping repeats, to ``k`` ids."""
    out: list[str] = []
    seen: set[str] = set()
    for i in range(max((len(x) for x in lists), default=0)):
        for x in lists:
            if i < len(x) and x[i] not in seen:
                seen.add(x[i])
                out.append(x[i])
                if len(out) == k:
                    return out
    return out


def cap_per_session(ranked: Sequence[str], sessions: Sequence[str | None], cap: int, k: int) -> list[str]:
    """The first ``k`` of ``ranked`` taking at most ``cap`` per session in rank order, then, if fewer than
    ``k`` were taken, the skipped ones in rank order (memories without a session are never capped)."""
    taken: list[str] = []
    skipped: list[str] = []
    per: dict[str, int] = {}
    for item, sess in zip(ranked, sessions):
        if sess is not None and per.get(sess, 0) >= cap:
            skipped.append(item)
            continue
        if sess is not None:
            per[sess] = per.get(sess, 0) + 1
        taken.append(item)
        if len(taken) == k:
            return taken
    return (taken + skipped)[:k]


def with_neighbours(ranked: Sequence[str], offset: int, exists: Callable[[str], bool], k: int) -> list[str]:
    """The first ``k`` of: each turn id of ``ranked`` followed by the turn ``offset`` places from it in its
    session (``D3:7`` with offset 1 -> ``D3:8``) when ``exists`` says there is one; repeats dropped."""
    out: list[str] = []
    for tid in ranked:
        m = re.match(r"D(\d+):(\d+)$", tid or "")
        nxt = f"D{m.group(1)}:{int(m.group(2)) + offset}" if m else None
        for x in (tid, nxt if nxt and exists(nxt) else None):
            if x and x not in out:
                out.append(x)
                if len(out) == k:
                    return out
    return out


def rank_buckets(ranks: Iterable[int | None], k: int = K) -> dict[str, int]:
    """Counts of ranks past ``k``: ``k+1..2k``, ``2k+1..50``, ``51..100``, ``>100`` (None)."""
    out = {f"{k + 1}-{2 * k}": 0, f"{2 * k + 1}-50": 0, "51-100": 0, ">100": 0}
    for r in ranks:
        if r is None or r > 100:
            out[">100"] += 1
        elif r > 50:
            out["51-100"] += 1
        elif r > 2 * k:
            out[f"{2 * k + 1}-50"] += 1
        elif r > k:
            out[f"{k + 1}-{2 * k}"] += 1
    return out


def without_names(question: str, names: Iterable[str]) -> str | None:
    """``question`` with the words that are one of ``names`` (case-insensitive, possessive 's too) removed;
    None when nothing was removed or nothing would be left."""
    pattern = r"\b(?:" + "|".join(re.escape(n) for n in names if n) + r")(?:'s|’s)?\b"
    if pattern == r"\b(?:)(?:'s|’s)?\b":
        return None
    out = re.sub(r"\s+", " ", re.sub(pattern, " ", question, flags=re.IGNORECASE)).strip()
    return out if out != question and re.search(r"\w", out) else None


# --------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------
@dataclass
class Turn:
    text: str
    session: str | None


@dataclass
class Failure:
    question: Question
    answer: str
    ranks: dict[str, dict[str, int | None]]          # mode -> evidence id -> rank
    hits: list = field(default_factory=list)          # the hybrid top 10 (MemoryRecords; TOP of them shown)


def answers_of(path: Path) -> dict[tuple[str, str], str]:
    """(sample id, question) -> gold answer, as text."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return {(str(s["sample_id"]), qa["question"]): str(qa.get("answer", qa.get("adversarial_answer", "")))
            for s in data for qa in s.get("qa") or []}


def turns_of(path: Path) -> dict[tuple[str, str], Turn]:
    """(sample id, dia_id) -> the content the import stores for that turn, and its session."""
    from pgmem import importer

    return {(r.user_id, r.metadata["dia_id"]): Turn(r.content, r.session_id)
            for r in importer.read_locomo(path) if isinstance(r, importer.Record)}


def speakers_of(path: Path) -> dict[str, list[str]]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return {str(s["sample_id"]): [s["conversation"].get("speaker_a", ""), s["conversation"].get("speaker_b", "")]
            for s in data}


def gold_of(rec, facts: bool) -> list[str]:
    md = rec.metadata or {}
    return list(md.get("cites") or []) if facts else [md["dia_id"]] if md.get("dia_id") else []


def parse_categories(text: str) -> list[int]:
    by_name = {v: k for k, v in CATEGORY_NAMES.items()}
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part.isdigit() and int(part) in CATEGORY_NAMES:
            out.append(int(part))
        elif part in by_name:
            out.append(by_name[part])
        else:
            known = ", ".join(f"{k} {v}" for k, v in CATEGORY_NAMES.items())
            raise SystemExit(f"--categories: {part!r} is none of {known}")
    return out


# --------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------
def short(text: str, n: int = 220) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def summary_lines(cat: int, n: int, failing: Sequence[Failure], facts: bool, citing: dict,
                  mode: str = "hybrid") -> list[str]:
    """Where the evidence turns missing from the top 10 of ``mode`` of every failing question of ``cat`` rank."""
    missing = [(f, e) for f in failing for e in dict.fromkeys(f.question.evidence)
               if f.ranks[mode][e] is None or f.ranks[mode][e] > K]
    b = rank_buckets(f.ranks[mode][e] for f, e in missing)
    others = ", ".join(f"in the {m} top {K}: {sum(1 for f, e in missing if (f.ranks[m][e] or DEPTH + 1) <= K)}"
                       for m in MODES if m != mode)
    partial = sum(1 for f in failing if recall_at(f.ranks[mode], f.question.evidence) > 0)
    ev = [len(set(f.question.evidence)) for f in failing]
    sess = [len({session_of(e) for e in f.question.evidence}) for f in failing]
    out = [f"{CATEGORY_NAMES[cat]}: {len(failing)} of {n} questions fail; {partial} of them have part of their "
           f"evidence in the top {K}; evidence turns per failing question {sum(ev) / max(len(ev), 1):.1f}, sessions "
           f"{sum(sess) / max(len(sess), 1):.1f}; {len(missing)} evidence turns missing, {mode} rank "
           + ", ".join(f"{k} {v}" for k, v in b.items())
           + f"; of them {others}"]
    if not facts and mode == "hybrid":  # the hits kept are hybrid's
        def adjacent(f: Failure, e: str) -> bool:
            m = re.match(r"D(\d+):(\d+)$", e)
            near = {f"D{m.group(1)}:{int(m.group(2)) + d}" for d in (-1, 1)} if m else set()
            return bool(near & {g for h in f.hits for g in gold_of(h, False)})
        out[0] += f"; next to (+-1 turn) a top-{K} hit: {sum(1 for f, e in missing if adjacent(f, e))}"
    if facts:
        uncited = sum(1 for f, e in missing if not citing.get((f.question.user, e)))
        out[0] += f"; cited by no fact: {uncited}"
    return out


def write_report(path: Path, header: str, per_cat: dict[int, tuple[int, list[Failure], list[Failure]]],
                 turns: dict[tuple[str, str], Turn], facts: bool, citing: dict, mode: str = "hybrid") -> None:
    lines = [header, ""]
    for cat, (n, failing, shown) in per_cat.items():
        lines += summary_lines(cat, n, failing, facts, citing, mode) + [""]
    for cat, (n, failing, shown) in per_cat.items():
        lines += [f"## {cat} {CATEGORY_NAMES[cat]}: {len(failing)} of {n} questions fail ({mode} R@10 < 1), "
                  f"{len(shown)} shown", ""]
        for i, f in enumerate(shown, start=1):
            q = f.question
            lines += [f"### {CATEGORY_NAMES[cat]} {i}. [{q.user}] {q.text}", "", f"- gold answer: {f.answer}"]
            for e in dict.fromkeys(q.evidence):
                t = turns.get((q.user, e))
                rk = " / ".join(fmt_rank(f.ranks[m][e]) for m in MODES)
                lines.append(f"- evidence {e} (session {session_of(e)}), rank hybrid / vector / text {rk}: "
                             + (short(t.text) if t else "(no such turn)"))
                if facts:
                    for c in citing.get((q.user, e), [])[:3]:
                        lines.append(f"  - cited by fact: {short(c, 160)}")
                    if not citing.get((q.user, e)):
                        lines.append("  - cited by no fact")
            lines.append("- top hybrid hits:")
            for j, h in enumerate(f.hits[:TOP], start=1):
                g = ",".join(gold_of(h, facts))
                lines.append(f"  {j}. [{g}] {h.session_id or '-'} score {h.score:.3f} text {h.text_score or 0:.2f} "
                             f"vector {h.vector_score if h.vector_score is not None else float('nan'):.3f}: "
                             f"{short(h.content, 160)}")
            lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------------------
# Variants
# --------------------------------------------------------------------------------------------------------
VARIANT_SQL = """
SELECT m.metadata, m.session_id FROM pgmem.search_hybrid(p_space => pgmem.as_user(%(user)s::text, %(space)s::text),
    p_query => %(query)s::text, p_embedding => %(embedding)s::vector, p_k => %(k)s::integer,
    p_text_weight => %(tw)s::float8, p_vector_weight => %(vw)s::float8, p_speaker_weight => %(pw)s::float8,
    p_session_weight => %(sw)s::float8) m"""


def run_variants(dsn: str, space: str, questions: Sequence[Question], embedder, facts: bool,
                 speakers: dict[str, list[str]], turn_ids: set[tuple[str, str]],
                 console) -> dict[str, dict[int, list[float]]]:
    """R@10 per question of each weight variant, and of the two-query merge, per category."""
    import psycopg
    from pgmem.embedders import embed_queries

    names = list(VARIANTS) + ["two queries", f"top {K} of k={DEPTH}"] + [f"at most {c} per session" for c in CAPS] \
        + ([] if facts else ["each hit and its next turn", "each hit and its previous turn"]) \
        + [f"R@{d} (not top {K}: k={d})" for d in DEEPER]
    out: dict[str, dict[int, list[float]]] = {v: {c: [] for c in CATEGORIES} for v in names}
    subs = [without_names(q.text, speakers.get(q.user, [])) for q in questions]
    texts = [q.text for q in questions] + [s for s in subs if s]
    vecs = embed_queries(embedder, texts)
    vec_of = {t: v for t, v in zip(texts, vecs)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET ROLE pgmem_gateway")

        def search(q: Question, text: str, w, k: int = K) -> list[tuple[list[str], str | None]]:
            rows = conn.execute(VARIANT_SQL, {"user": q.user, "space": space, "query": text,
                                              "embedding": "[" + ",".join(f"{x:.7g}" for x in vec_of[text]) + "]",
                                              "k": k, "tw": w[0], "vw": w[1], "pw": w[2], "sw": w[3]}).fetchall()
            return [(list(r[0].get("cites") or []) if facts else [r[0].get("dia_id")], r[1]) for r in rows]

        def ranked(q: Question, text: str, w) -> list[list[str]]:
            return [g for g, _ in search(q, text, w)]

        t0 = time.perf_counter()
        for i, (q, sub) in enumerate(zip(questions, subs)):
            base = None
            for name, w in VARIANTS.items():
                r = ranked(q, q.text, w)
                base = r if name == "default" else base
                out[name][q.category].append(recall_at(evidence_ranks(q.evidence, r), q.evidence))
            if sub is None:
                merged = base
            else:
                other = ranked(q, sub, VARIANTS["default"])
                key = lambda g: "|".join(g)  # noqa: E731
                by_key = {key(g): g for g in base + other}
                merged = [by_key[x] for x in merge_rankings([[key(g) for g in base], [key(g) for g in other]], K)]
            out["two queries"][q.category].append(recall_at(evidence_ranks(q.evidence, merged), q.evidence))
            deep = search(q, q.text, VARIANTS["default"], DEPTH)
            ids = [str(i) for i in range(len(deep))]
            out[f"top {K} of k={DEPTH}"][q.category].append(
                recall_at(evidence_ranks(q.evidence, [g for g, _ in deep[:K]]), q.evidence))
            if not facts:
                ids_deep = [g[0] for g, _ in deep]
                for off, label in ((1, "next"), (-1, "previous")):
                    top = with_neighbours(ids_deep, off, lambda t, u=q.user: (u, t) in turn_ids, K)
                    out[f"each hit and its {label} turn"][q.category].append(
                        recall_at(evidence_ranks(q.evidence, [[t] for t in top]), q.evidence))
            for depth in DEEPER:
                out[f"R@{depth} (not top {K}: k={depth})"][q.category].append(
                    recall_at(evidence_ranks(q.evidence, [g for g, _ in deep]), q.evidence, depth))
            for cap in CAPS:
                top = cap_per_session(ids, [sess for _, sess in deep], cap, K)
                out[f"at most {cap} per session"][q.category].append(
                    recall_at(evidence_ranks(q.evidence, [deep[int(i)][0] for i in top]), q.evidence))
            if (i + 1) % 200 == 0:
                console.print(f"variants: {i + 1}/{len(questions)} questions, {time.perf_counter() - t0:.0f} s")
    return out


def variants_table(results: dict[str, dict[int, list[float]]]) -> list[str]:
    def mean(xs):
        return sum(xs) / len(xs) if xs else float("nan")

    head = "| variant | all | " + " | ".join(CATEGORY_NAMES[c] for c in CATEGORIES) + " |"
    lines = [head, "|" + "---|" * (2 + len(CATEGORIES))]
    for name, per in results.items():
        every = [x for c in CATEGORIES for x in per[c]]
        lines.append(f"| {name} | {mean(every):.3f} | " + " | ".join(f"{mean(per[c]):.3f}" for c in CATEGORIES) + " |")
    return lines


# --------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="LoCoMo JSON file (e.g. locomo-dev.json)")
    ap.add_argument("--database", required=True,
                    help="database holding the import (a copy: it is migrated), on the embedded server or --dsn's")
    ap.add_argument("--dsn", help="postgresql:// URL of another server (its database name is replaced)")
    ap.add_argument("--space", default="minilm", help="space to search: minilm (turns, default), facts-session, "
                                                      "facts-plain")
    ap.add_argument("--categories", default="multi-hop,open-domain",
                    help="comma-separated category names or ids (default multi-hop,open-domain)")
    ap.add_argument("--limit", type=int, default=20, metavar="N", help="failing examples shown per category")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sample of failing questions")
    ap.add_argument("--out", type=Path, default=None,
                    help="report file (default bench/out/recall_errors[-SPACE][-MODE].md)")
    ap.add_argument("--fail-mode", choices=MODES, default="hybrid",
                    help="the mode whose failures are sampled (default hybrid; vector: what the embedding misses)")
    ap.add_argument("--variants", action="store_true",
                    help="also measure R@10 of weight variants and a two-query merge on all questions")
    args = ap.parse_args(argv)

    from rich.console import Console

    from pgmem import Memory, migrations
    from pgmem.embedders import from_config

    console = Console(width=None if sys.stdout.isatty() else 140)
    if not args.data.is_file():
        console.print(f"[red]no such file: {args.data}[/red]")
        return 2
    cats = parse_categories(args.categories)
    facts = args.space != "minilm"
    dsn = existing_database(args.dsn, args.database)
    if dsn is None:
        console.print(f"[red]database {args.database} does not exist or holds no memories: make a copy of a "
                      "benchmark's import first (CREATE DATABASE ... TEMPLATE ...)[/red]")
        return 2
    migrations.migrate(dsn)
    _, questions = load(args.data, None)
    answers, turns, speakers = answers_of(args.data), turns_of(args.data), speakers_of(args.data)
    embedder = from_config(embedder="local")
    suffix = ("" if args.space == "minilm" else f"-{args.space}") \
        + ("" if args.fail_mode == "hybrid" else f"-{args.fail_mode}")
    out = args.out or Path(__file__).resolve().parent / "out" / f"recall_errors{suffix}.md"

    per_cat: dict[int, tuple[int, list[Failure], list[Failure]]] = {}
    citing: dict[tuple[str, str], list[str]] = {}
    with Memory(dsn, role="pgmem_gateway", space=args.space, embedder=embedder) as memory:
        if facts:
            import psycopg

            with psycopg.connect(dsn) as conn:  # the facts citing each turn (read as the database's owner)
                for user, content, cites in conn.execute(
                        "SELECT m.user_id, m.content, m.metadata -> 'cites' FROM pgmem.memories m JOIN pgmem.spaces s"
                        " USING (space_id) WHERE s.name = %s ORDER BY m.user_id, m.created_at, m.seq", (args.space,)):
                    for c in cites or []:
                        citing.setdefault((user, c), []).append(content)
        clients: dict[str, Memory] = {}
        for cat in cats:
            failing: list[Failure] = []
            qs = [q for q in questions if q.category == cat]
            for q in qs:
                client = clients.setdefault(q.user, memory.with_identity(user_id=q.user))
                ranks, hits = {}, []
                for mode in MODES:
                    recs = client.search(q.text, k=DEPTH, mode=mode)
                    ranks[mode] = evidence_ranks(q.evidence, [gold_of(r, facts) for r in recs])
                # hybrid: the top 10 of k=10 itself (the benchmark's result), ranks past it from k=100
                hits = client.search(q.text, k=K, mode="hybrid")
                ranks["hybrid"] = combine_ranks(evidence_ranks(q.evidence, [gold_of(r, facts) for r in hits]),
                                                ranks["hybrid"], K)
                if recall_at(ranks[args.fail_mode], q.evidence) < 1:
                    failing.append(Failure(q, answers.get((q.user, q.text), ""), ranks, hits))
            shown = sample_failing(failing, args.limit, args.seed)
            per_cat[cat] = (len(qs), failing, shown)
            console.print(summary_lines(cat, len(qs), failing, facts, citing, args.fail_mode)[0])

    header = (f"# Failing questions, space {args.space}, database {args.database}\n\n"
              f"{args.fail_mode} R@10 < 1; ranks among the first {DEPTH} of hybrid / vector / text; seed {args.seed}. "
              "Hits: [turn ids] session score text_score vector_score: text.")
    write_report(out, header, per_cat, turns, facts, citing, args.fail_mode)
    console.print(f"wrote {out}")

    if args.variants:
        res = run_variants(dsn, args.space, questions, embedder, facts, speakers, set(turns), console)
        table = variants_table(res)
        console.print("\n".join(table))
        with open(out, "a", encoding="utf-8") as fh:
            fh.write("\n## R@10 of weight variants, every question of categories 1-4\n\n" + "\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
