"""The text side's postings (pgmem.memory_terms) and BM25 statistics (pgmem.term_stats), kept by the write path,
and pgmem._text_top, which ranks a large user's text pool from them (migration 0025, issue #44).

- After every kind of write (add, a batch, update of content or of metadata only, edit, supersede, invalidate,
  delete, delete_all, expiry and purge, erase_user, drop_space) the two tables hold exactly what the memories that
  hold imply, derived here from pgmem.memories alone.
- pgmem._text_top returns the top k by BM25 over the user's own texts with the user's own statistics, equal to a
  brute-force ranking of every memory, and says when it stopped early (o_exact); it reads fewer postings than the
  terms hold when the threshold lets it stop.
- The pooled route of search_hybrid takes its text pool from it.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

import psycopg
from pgvector.psycopg import register_vector

from conftest import as_api

VOCAB = ("lake painting camping adoption counseling support group kids tent fire marshmallow agency course "
         "september sunrise transgender story pottery guitar violin museum hiking beach dog cat horse garden "
         "recipe bread concert festival library novel poem").split()


def derived_postings(admin: psycopg.Connection) -> set[tuple]:
    return set(admin.execute(
        "SELECT m.user_id, m.id, x.lexeme, m.space_id, coalesce(array_length(x.positions, 1), 1)::real, m.fts_len,"
        " pgmem._term_impact(coalesce(array_length(x.positions, 1), 1), m.fts_len)"
        " FROM pgmem.memories m CROSS JOIN LATERAL unnest(m.fts) x WHERE m.valid_to IS NULL").fetchall())


def stored_postings(admin: psycopg.Connection) -> set[tuple]:
    return set(admin.execute(
        "SELECT user_id, memory_id, lexeme, space_id, tf, dl, impact FROM pgmem.memory_terms").fetchall())


def derived_stats(admin: psycopg.Connection) -> set[tuple]:
    return set(admin.execute(
        "SELECT m.user_id, m.space_id, '', count(*), sum(m.fts_len) FROM pgmem.memories m WHERE m.valid_to IS NULL"
        " GROUP BY 1, 2"
        " UNION ALL SELECT m.user_id, m.space_id, x.lexeme, count(*), sum(coalesce(array_length(x.positions, 1), 1))"
        " FROM pgmem.memories m CROSS JOIN LATERAL unnest(m.fts) x WHERE m.valid_to IS NULL GROUP BY 1, 2, 3"
    ).fetchall())


def stored_stats(admin: psycopg.Connection) -> set[tuple]:
    # Rows whose count fell to zero may stay (a user's '' row, a lexeme no memory holds any more): they are 0.
    return set(admin.execute(
        "SELECT user_id, space_id, lexeme, docs, total_len FROM pgmem.term_stats WHERE docs <> 0 OR total_len <> 0"
    ).fetchall())


def check(admin: psycopg.Connection, step: str) -> None:
    assert stored_postings(admin) == derived_postings(admin), step
    assert stored_stats(admin) == derived_stats(admin), step
    assert admin.execute("SELECT count(*) FROM pgmem.term_stats WHERE docs < 0 OR total_len < 0").fetchone() == (0,)


def test_postings_and_statistics_follow_every_write(make_memory, admin):
    alice = make_memory("alice", "planner")
    bob = alice.with_identity(user_id="bob")
    check(admin, "empty")
    a = alice.add("Caroline went to the support group about adoption agencies", session_id="s1")
    bob.add("Bob paints the lake at sunrise, lake after lake")
    check(admin, "add")
    ids = [r.id for r in alice.add_many([f"{VOCAB[i]} and {VOCAB[i + 1]} with {VOCAB[i + 2]}" for i in range(20)],
                                        session_id="s2")]
    check(admin, "add_many")
    alice.update(ids[0], content="a counseling course in September")
    check(admin, "update content")
    alice.update(ids[1], metadata={"topic": "x"})
    check(admin, "update metadata")
    alice.edit(ids[2], "with", "beside")
    check(admin, "edit")
    new = alice.supersede(ids[3], "hiking on the beach with the dog")
    check(admin, "supersede")
    assert admin.execute("SELECT count(*) FROM pgmem.memory_terms WHERE memory_id = %s", [ids[3]]).fetchone() == (0,)
    assert admin.execute("SELECT count(*) FROM pgmem.memory_terms WHERE memory_id = %s", [new.id]).fetchone()[0] > 0
    alice.invalidate(ids[4])
    check(admin, "invalidate")
    alice.delete(ids[5])
    check(admin, "delete")
    alice.delete_all(session_id="s1")
    check(admin, "delete_all")
    assert admin.execute("SELECT count(*) FROM pgmem.memory_terms WHERE memory_id = %s", [a.id]).fetchone() == (0,)
    alice.set_expiry({ids[6]: timedelta(seconds=1)})
    admin.execute("UPDATE pgmem.memories SET expires_at = now() - interval '1 minute' WHERE id = %s", [ids[6]])
    check(admin, "expired (still indexed until purged)")
    admin.execute("SELECT * FROM pgmem.purge()")
    check(admin, "purge")
    admin.execute("SELECT * FROM pgmem.erase_user('bob')")
    check(admin, "erase_user")
    assert admin.execute("SELECT count(*) FROM pgmem.term_stats WHERE user_id = 'bob'").fetchone() == (0,)
    assert admin.execute("SELECT count(*) FROM pgmem.memory_terms WHERE user_id = 'bob'").fetchone() == (0,)


def brute_force(admin: psycopg.Connection, user: str, lexemes: list[str]) -> list[tuple]:
    """(id, score) of every memory of ``user`` holding a query term, by the same BM25 in Python, best first."""
    rows = admin.execute(
        "SELECT m.id, m.fts_len, x.lexeme, coalesce(array_length(x.positions, 1), 1) FROM pgmem.memories m"
        " CROSS JOIN LATERAL unnest(m.fts) x WHERE m.user_id = %s AND m.valid_to IS NULL", [user]).fetchall()
    lens = dict(admin.execute("SELECT id, fts_len FROM pgmem.memories WHERE user_id = %s AND valid_to IS NULL",
                              [user]).fetchall())
    n, avgdl = len(lens), max(sum(lens.values()) / len(lens), 1)
    df: dict[str, int] = {}
    for _, _, lex, _ in rows:
        df[lex] = df.get(lex, 0) + 1
    score: dict = {}
    for mid, dl, lex, tf in rows:
        if lex in lexemes:
            idf = math.log(1 + (n - df[lex] + 0.5) / (df[lex] + 0.5))
            score[mid] = score.get(mid, 0.0) + idf * tf * 2.2 / (tf + 1.2 * (0.5 + 0.5 * dl / avgdl))
    return sorted(score.items(), key=lambda kv: (-kv[1], str(kv[0])))


def test_text_top_is_exact_bm25_and_stops_early(make_memory, admin):
    rng = random.Random(44)
    alice = make_memory("alice", "planner")
    # Common words in most memories, rare ones in a few, lengths from 3 to 40 words.
    texts = set()
    while len(texts) < 400:
        words = rng.choices(VOCAB[:6], k=rng.randint(1, 4)) + rng.choices(VOCAB, k=rng.randint(2, 36))
        texts.add(" ".join(words))
    alice.add_many(sorted(texts))
    make_memory("bob").add_many(["poem " * 5, "library novel poem", "garden"])  # another user's counts never count
    space = admin.execute("SELECT space_id FROM pgmem.spaces WHERE name = 't64'").fetchone()[0]
    stopped_early = 0
    for query in [["poem"], ["poem", "novel"], ["lake", "poem", "garden"], ["lake", "paint", "camp", "adopt"],
                  ["horse", "violin", "nothingsuch"], ["support", "group", "kid", "tent", "fire"]]:
        want = brute_force(admin, "alice", query)
        longest = max(admin.execute("SELECT count(*) FROM pgmem.memory_terms WHERE user_id = 'alice' AND lexeme = %s",
                                    [t]).fetchone()[0] for t in query)
        for k in (1, 10, 30):
            # Every list read whole (max_depth above any list): exact, whatever the data.
            got = admin.execute("SELECT o_ids, o_scores, o_exact FROM pgmem._text_top('alice', %s, %s, %s, %s, 1000000)",
                                [space, query, k, k]).fetchone()
            assert got[2] is True
            ids, scores = got[0] or [], got[1] or []
            assert len(ids) == min(k, len(want)), (query, k)
            # The same scores in the same order; ids equal but where scores tie at the cut.
            assert all(math.isclose(s, w[1], rel_tol=1e-9) for s, w in zip(scores, want)), (query, k)
            cut = want[len(ids) - 1][1] if ids else None
            assert {i for i, s in zip(ids, scores) if not math.isclose(s, cut)} == \
                {i for i, s in want[:len(ids)] if not math.isclose(s, cut)}
            # Lists longer than 40 memories read in rounds (B = max(k, 10) up to min(4k, 40)): when it says its first k are
            # exact they are, and it may have read only part of the longest list.
            got = admin.execute("SELECT o_ids, o_scores, o_exact, o_depth FROM pgmem._text_top('alice', %s, %s, %s,"
                                " %s, 40)", [space, query, k, k]).fetchone()
            if got[2]:
                assert all(math.isclose(s, w[1], rel_tol=1e-9) for s, w in zip(got[1], want)), (query, k)
                stopped_early += got[3] < longest
    assert stopped_early > 0
    # Nothing to rank: no term, or terms no memory holds.
    assert admin.execute("SELECT o_ids FROM pgmem._text_top('alice', %s, '{}', 10, 10, 100)", [space]).fetchone() == (None,)
    assert admin.execute("SELECT o_ids FROM pgmem._text_top('alice', %s, '{zzz}', 10, 10, 100)", [space]).fetchone() == (None,)
    assert admin.execute("SELECT o_ids FROM pgmem._text_top('nobody', %s, '{poem}', 10, 10, 100)", [space]).fetchone() == (None,)


def test_the_pooled_route_takes_its_text_pool_from_the_postings(make_memory, admin, embedder):
    alice = make_memory("alice", "planner")
    alice.add_many([f"note {i} about the garden" for i in range(30)] + ["the violin recital was on Friday"])
    hits_exact = alice.search("violin recital", k=3)
    register_vector(admin)
    with as_api(admin, "alice"):
        admin.execute("SET LOCAL pgmem.exact_search_max_rows = 5")
        rows = admin.execute("SELECT content, text_score FROM pgmem.search_hybrid('t64', 'violin recital', %s, 3)",
                             [embedder.embed(["violin recital"])[0]]).fetchall()
    assert rows[0][0] == "the violin recital was on Friday" == hits_exact[0].content
    assert rows[0][1] > 0


def test_the_pooled_route_adds_the_session_neighbours_of_its_text_matches(make_memory, admin):
    """A reply holds none of the question's words: on the exact route the session window finds it; on the pooled
    route it is a candidate because it follows a text match in its session (migration 0025)."""
    alice = make_memory("alice", "planner")
    alice.add_many([f"note {i} about tomatoes and basil" for i in range(30)] + ["I bought a pottery wheel"])
    alice.add_many(["Melanie: which city hosts the pottery festival?", "Caroline: Lisbon, every May.",
                    "Melanie: great, thanks"], session_id="s1")
    reply = "Caroline: Lisbon, every May."
    exact = [h.content for h in alice.search("pottery festival city", k=2, mode="text")]
    assert reply in exact
    # Two text matches >= k = 2: the pools are used (fewer would send the search to every row).
    with as_api(admin, "alice"):
        admin.execute("SET LOCAL pgmem.exact_search_max_rows = 5")
        pooled = [r[0] for r in admin.execute(
            "SELECT content FROM pgmem.search_hybrid('t64', 'pottery festival city', NULL, 2)").fetchall()]
    assert pooled == ["Melanie: which city hosts the pottery festival?", reply]
