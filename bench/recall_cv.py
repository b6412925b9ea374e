#!/usr/bin/env python3
"""Choose hybrid scoring formulas and constants by cross-validation over conversations (offline, numpy).

    python bench/recall_cv.py --data ../shared/data/locomo/locomo-dev.json [--dsn DSN] [--folds 3]
                              [--turns-database pgmem_bench_recall] [--facts-database pgmem_bench_facts]

Reads the databases the benchmarks left (``bench/recall_locomo.py``: turns, space ``minilm``;
``bench/recall_facts.py``: spaces ``facts-session`` and ``facts-plain``) as their owner and pulls, for every
question and every candidate memory of its user, the features ``pgmem.search_hybrid`` scores with:

- ``own``: cosine similarity of the memory's embedding to the question's (MiniLM, embedded here);
- ``sent``: best cosine of its sentence vectors (-1 without), ``ctx``: cosine of its context vector (``own``
  without one);
- the term frequencies of the question's lexemes (``to_tsvector(<space's text_config>, question)``) in each
  memory's ``fts``, its ``fts_len``, and its place in its session (``created_at``, then ``seq``), so BM25
  with or without the session window is computed here exactly as the SQL does;
- ``spk``: a lexeme of ``metadata.speaker`` is a question lexeme; the session.

Then it scores formulas (``FORMULAS``: the formula before the readable scores, with its defaults and refit,
and the readable formula of ``pgmem.search_hybrid``, with its defaults and a grid) in numpy, k-fold over
conversations: for each fold the constants with the best mean R@10 (ties: R@5) on the other conversations of
the same benchmark are fitted and reported on the fold's conversations. It prints, per formula and
benchmark, the fitted (in-fold mean) and held-out R@5/R@10 and the constants each fold chose, then the one
set best over all benchmarks (in-sample) with its R@10 per category.

Scoring rules are those of the benchmarks (turn-level recall of ``dia_id``; facts: turns cited).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recall_locomo import CATEGORIES, K, load, with_database  # noqa: E402

WINDOW = ((0, 1.0), (1, 0.6), (-1, 0.4), (2, 0.2), (-2, 0.2))  # today's SQL: offset -> weight


@dataclass
class UserData:
    ids: list[str]
    sess: np.ndarray        # session index per memory (memories without a session: one each)
    nxt: dict               # offset -> index of the memory `offset` places later in its session (-1: none)
    own: np.ndarray         # (n_mem,) filled per question
    emb: np.ndarray         # (n_mem, d)
    sent: list              # per memory: (n_sent, d) array or None
    ctx: np.ndarray         # (n_mem, d), rows of NaN without a context vector
    lex: list               # per memory: {lexeme: tf}
    flen: np.ndarray
    spk_lex: list           # per memory: set of speaker lexemes
    gold: list              # per memory: set of turn ids it stands for (dia_id, or cites)


@dataclass
class QFeat:
    user: str
    category: int
    evidence: list
    own: np.ndarray
    sent: np.ndarray
    ctx: np.ndarray
    tf: np.ndarray          # (n_mem, n_lex) raw term frequencies of the question's lexemes
    spk: np.ndarray


def fetch(dsn: str, space: str, data: Path, embedder) -> tuple[dict, list]:
    import psycopg

    users, questions = load(data, None)
    with psycopg.connect(dsn) as conn:
        sp = conn.execute("SELECT space_id, text_config::text FROM pgmem.spaces WHERE name = %s", (space,)).fetchone()
        if sp is None:
            sys.exit(f"no space {space} in {dsn}: run its benchmark first")
        space_id, cfg = sp
        rows = conn.execute("""
            SELECT m.user_id, m.id::text, coalesce(m.session_id, m.id::text), m.embedding::text, m.fts_len,
                   coalesce((SELECT json_object_agg(x.lexeme, coalesce(array_length(x.positions, 1), 1))
                             FROM unnest(m.fts) x), '{}'),
                   (SELECT coalesce(array_agg(x.lexeme), '{}') FROM unnest(to_tsvector(%s::regconfig,
                        coalesce(m.metadata ->> 'speaker', ''))) x),
                   m.metadata
            FROM pgmem.memories m WHERE m.space_id = %s
            ORDER BY m.user_id, coalesce(m.session_id, m.id::text), m.created_at, m.seq""", (cfg, space_id)).fetchall()
        vrows = conn.execute("""
            SELECT v.memory_id::text, v.kind, v.embedding::text FROM pgmem.memory_vectors v
            JOIN pgmem.memories m ON m.user_id = v.user_id AND m.id = v.memory_id WHERE m.space_id = %s
            ORDER BY v.memory_id, v.kind, v.n""", (space_id,)).fetchall()
        have = {r[0] for r in rows}
        questions = [q for q in questions if q.user in have]
        qlex = [conn.execute(
            "SELECT coalesce(array_agg(DISTINCT x.lexeme ORDER BY x.lexeme), '{}')"
            " FROM unnest(to_tsvector(%s::regconfig, %s)) x", (cfg, q.text)).fetchone()[0] for q in questions]
    sents: dict[str, list] = {}
    ctxs: dict[str, np.ndarray] = {}
    for mid, kind, emb in vrows:
        v = np.array(json.loads(emb), dtype=np.float32)
        if kind == "sentence":
            sents.setdefault(mid, []).append(v)
        elif kind == "context" and mid not in ctxs:
            ctxs[mid] = v
    by_user: dict[str, list] = {}
    for r in rows:
        by_user.setdefault(r[0], []).append(r)
    ud: dict[str, UserData] = {}
    for user, rs in by_user.items():
        sess_names = [r[2] for r in rs]
        sess_idx = {s: i for i, s in enumerate(dict.fromkeys(sess_names))}
        sess = np.array([sess_idx[s] for s in sess_names])
        n = len(rs)
        nxt = {}
        for off, _ in WINDOW:
            a = np.full(n, -1)
            for i in range(n):
                j = i + off
                if 0 <= j < n and sess[j] == sess[i]:
                    a[i] = j
            nxt[off] = a
        emb = np.vstack([np.array(json.loads(r[3]), dtype=np.float32) for r in rs])
        ids = [r[1] for r in rs]
        d = emb.shape[1]
        ctx = np.vstack([ctxs.get(i, np.full(d, np.nan, dtype=np.float32)) for i in ids])
        gold = []
        for r in rs:
            md = r[7] or {}
            gold.append(set(md.get("cites") or ([md["dia_id"]] if md.get("dia_id") else [])))
        ud[user] = UserData(ids, sess, nxt, None, emb, [np.vstack(sents[i]) if i in sents else None for i in ids],
                            ctx, [r[5] for r in rs], np.array([r[4] for r in rs], dtype=float),
                            [set(r[6]) for r in rs], gold)
    from pgmem.embedders import embed_queries

    qvec = embed_queries(embedder, [q.text for q in questions])
    feats = []
    for qi, q in enumerate(questions):
        u = ud[q.user]
        own = u.emb @ qvec[qi]
        sent = np.array([(s @ qvec[qi]).max() if s is not None else -1.0 for s in u.sent])
        ctx = u.ctx @ qvec[qi]
        ctx = np.where(np.isnan(ctx), own, ctx)
        lx = qlex[qi]
        tf = np.array([[m.get(x, 0) for x in lx] for m in u.lex], dtype=float).reshape(len(u.lex), len(lx))
        spk = np.array([bool(s & set(lx)) for s in u.spk_lex], dtype=float)
        feats.append(QFeat(q.user, q.category, q.evidence, own, sent, ctx, tf, spk))
    return ud, feats


# ------------------------------------------------------------------------------------------------------------
# Scoring pieces (numpy versions of the SQL)
# ------------------------------------------------------------------------------------------------------------
def bm25(u: UserData, f: QFeat, window: bool, k1: float = 1.2, b: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """(BM25F scores as pgmem.search_hybrid computes them, the sum of the idf of every query lexeme, an absent
    one included: the score of a memory of average length holding each query word once). With ``window``, a
    term counts for the memory and its session neighbours (WINDOW)."""
    n = len(u.ids)
    if f.tf.shape[1] == 0:
        return np.zeros(n), 0.0
    offs = WINDOW if window else WINDOW[:1]
    tfe = np.zeros_like(f.tf)
    dl = np.zeros(n)
    for off, wt in offs:
        # the term of memory i counts for memory i - off... mirrored as in SQL: spread from h.idx to h.idx + off
        src = u.nxt[-off]
        ok = src >= 0
        tfe[ok] += wt * f.tf[src[ok]]
        # document length: lag(1)*0.6 = previous memory's length with weight 0.6 (SQL), i.e. offset -1
    for off, wt in offs:
        src = u.nxt[-off]
        ok = src >= 0
        dl[ok] += wt * u.flen[src[ok]]
    avgdl = max(dl.mean(), 1.0)
    df = (tfe > 0).sum(axis=0)
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
    s = (idf * tfe * (k1 + 1) / (tfe + k1 * (1 - b + b * dl[:, None] / avgdl))).sum(axis=1)
    return s, float(idf.sum())


def vec_score(f: QFeat) -> np.ndarray:
    return np.maximum(f.own, f.sent) + f.ctx


def session_max(sess: np.ndarray, x: np.ndarray) -> np.ndarray:
    m = np.full(sess.max() + 1, -np.inf)
    np.maximum.at(m, sess, x)
    return m[sess]


def session_max_other(sess: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per memory: the best x of the *other* memories of its session (its own x when alone)."""
    best = np.full(sess.max() + 1, -np.inf)
    np.maximum.at(best, sess, x)
    order = np.argsort(-x, kind="stable")
    second = np.full(sess.max() + 1, -np.inf)
    seen = np.zeros(sess.max() + 1, dtype=int)
    arg = np.full(sess.max() + 1, -1)
    for i in order:
        s = sess[i]
        if seen[s] == 0:
            arg[s] = i
        elif seen[s] == 1:
            second[s] = x[i]
        seen[s] += 1
    out = np.where(np.arange(len(x)) == arg[sess], second[sess], best[sess])
    return np.where(np.isfinite(out), out, x)


# ------------------------------------------------------------------------------------------------------------
# Formulas: name -> (grid of constants, function(u, f, pre, **c) -> scores)
# ------------------------------------------------------------------------------------------------------------
def f_today(u, f, pre, wt=0.4, wv=0.6, ws=0.2, wsess=0.4):
    bm = pre["bmw"]
    v = np.maximum(pre["vec"], 0)
    x = wt * bm / (bm.max() or 1) + wv * v / (v.max() or 1) + ws * f.spk
    return x + wsess * session_max(u.sess, x)


def f_readable(u, f, pre, wt=0.5, wv=0.5, ws=0.1, wsess=0.3, c0=0.2, win=1, lam=1.0):
    """Absolute parts in [0, 1]: text = min(1, BM25F / the sum of the query lexemes' idf) (the idf-weighted
    share of the query's words a memory holds); meaning = (vector score / 2 - c0) / (1 - c0) clipped to
    [0, 1]; speaker 1/0 only with a match of its own; session bonus wsess * min(own, best other of the
    session); divided by its maximum so that the score is in [0, 1]."""
    bm, bmax = (pre["bmw"], pre["bmaxw"]) if win else (pre["bm0"], pre["bmax0"])
    t = np.minimum(1, bm / bmax) if bmax > 0 else np.zeros_like(bm)
    m = np.clip(((np.maximum(f.own, f.sent) + lam * f.ctx) / (1 + lam) - c0) / (1 - c0), 0, 1)
    x = wt * t + wv * m
    x = x + ws * f.spk * (x > 0)
    return (x + wsess * np.minimum(x, session_max_other(u.sess, x))) / (wt + wv + ws) / (1 + wsess)


FORMULAS = {
    "today (SQL defaults)": (dict(wt=[0.4], wv=[0.6], ws=[0.2], wsess=[0.4]), f_today),
    "today, refit": (dict(wt=[0.3, 0.4, 0.5], wv=[0.5, 0.6, 0.7], ws=[0.1, 0.2, 0.3], wsess=[0.2, 0.4, 0.6]), f_today),
    "readable (SQL defaults)": (dict(wt=[0.5], wv=[0.5], ws=[0.1], wsess=[0.6], c0=[0.4], win=[1], lam=[0.5]),
                                f_readable),
    "readable": (dict(wt=[0.3, 0.5, 0.7], wv=[0.5], ws=[0.05, 0.1, 0.2], wsess=[0.3, 0.6, 1.0],
                      c0=[0.2, 0.4, 0.5], win=[1], lam=[0.5, 1.0]), f_readable),
}


def precompute(ud: dict, feats: Sequence[QFeat]) -> list[dict]:
    out = []
    for f in feats:
        u = ud[f.user]
        bmw, bmaxw = bm25(u, f, True)
        bm0, bmax0 = bm25(u, f, False)
        out.append({"bmw": bmw, "bmaxw": bmaxw, "bm0": bm0, "bmax0": bmax0, "vec": vec_score(f)})
    return out


def evaluate(ud, feats, pre, fn, consts, sel) -> np.ndarray:
    """(n_sel, 3): R@5, R@10 and the category of each selected question."""
    res = []
    for i in sel:
        f = feats[i]
        u = ud[f.user]
        s = fn(u, f, pre[i], **consts)
        top = np.argsort(-s, kind="stable")[:K]
        got5 = set().union(*(u.gold[j] for j in top[:5]))
        got10 = set().union(*(u.gold[j] for j in top))
        ev = f.evidence
        res.append((sum(e in got5 for e in ev) / len(ev), sum(e in got10 for e in ev) / len(ev), f.category))
    return np.array(res)


def report(benches: dict, n_folds: int, formulas: Sequence[str]) -> None:
    """Print, per formula and benchmark, the k-fold figures: constants fitted on the other conversations
    (their in-fold R@10: "fit") and reported on the fold's own ("held-out"), the constants each fold chose,
    and the one set best over all benchmarks (in-sample) with its per-category R@10."""
    for fname in formulas:
        grid, fn = FORMULAS[fname]
        keys = list(grid)
        combos = [dict(zip(keys, vals)) for vals in itertools.product(*(grid[k] for k in keys))]
        table = {b: [evaluate(ud, feats, pre, fn, c, range(len(feats))) for c in combos]
                 for b, (ud, feats, pre) in benches.items()}
        print(f"\n== {fname}: {len(combos)} constant sets")
        for b, (ud, feats, pre) in benches.items():
            users = np.array([f.user for f in feats])
            convs = sorted(set(users))
            k = min(n_folds, len(convs))
            folds = [convs[i::k] for i in range(k)]
            held5 = held10 = 0.0
            fit10, chosen = [], []
            for fold in folds:
                test = np.isin(users, fold)
                train = ~test
                ci = max(range(len(combos)), key=lambda c: (table[b][c][train, 1].mean(), table[b][c][train, 0].mean()))
                fit10.append(table[b][ci][train, 1].mean())
                held5 += table[b][ci][test, 0].sum()
                held10 += table[b][ci][test, 1].sum()
                chosen.append({kk: vv for kk, vv in combos[ci].items() if len(grid[kk]) > 1})
            n = len(feats)
            print(f"  {b:14s} {k} folds {folds}: fit R@10 {np.mean(fit10):.3f} | held-out R@5 {held5 / n:.3f} "
                  f"R@10 {held10 / n:.3f} | chosen {chosen}")
        score = [np.mean([table[b][ci][:, 1].mean() for b in benches]) for ci in range(len(combos))]
        ci = int(np.argmax(score))
        print(f"  best single set over all benchmarks (in-sample): {combos[ci]}")
        for b in benches:
            t = table[b][ci]
            print(f"    {b:14s} R@5 {t[:, 0].mean():.3f} R@10 {t[:, 1].mean():.3f} per category "
                  + " ".join(f"{c}:{t[t[:, 2] == c, 1].mean():.3f}" for c in CATEGORIES))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--dsn", help="postgresql:// URL of the benchmarks' server (default: the embedded server)")
    ap.add_argument("--turns-database", default="pgmem_bench_recall")
    ap.add_argument("--facts-database", default="pgmem_bench_facts")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--formulas", default=",".join(FORMULAS))
    args = ap.parse_args(argv)

    from pgmem import MiniLMEmbedder

    if args.dsn is None:
        from pgmem import embedded

        base = embedded.start().url("postgres")
    else:
        base = args.dsn
    emb = MiniLMEmbedder()
    benches = {}
    for name, db, space in (("turns", args.turns_database, "minilm"),
                            ("facts-session", args.facts_database, "facts-session"),
                            ("facts-plain", args.facts_database, "facts-plain")):
        ud, feats = fetch(with_database(base, db), space, args.data, emb)
        benches[name] = (ud, feats, precompute(ud, feats))
        print(f"{name}: {len(feats)} questions, {sum(len(u.ids) for u in ud.values())} memories", flush=True)
    report(benches, args.folds, args.formulas.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main())
