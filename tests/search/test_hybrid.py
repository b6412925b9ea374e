"""Hybrid search (pgmem.search_hybrid, Memory.search(mode=...)) and the extra vectors written for it.

min(k, matching rows) on the exact and the pooled path, the text side on odd queries and very long rows,
BM25 and its session window, the speaker boost, filters and scope, the result fields per mode, the day a
memory was made in its full-text vector, and the 'sentence' / 'context' vectors of pgmem.memory_vectors
(read raw through the ``admin`` fixture). The test embedder (HashEmbedder, 64 dims, space t64) is
deterministic, so stored extra vectors are compared with the embedding of the text they should hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from pgmem import IdentityError, Memory, ValidationError
from pgmem.testing import HashEmbedder

from conftest import as_api, dsn_for

UTC = timezone.utc


# --------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------
def vectors(admin: psycopg.Connection, memory_id) -> list[tuple[str, np.ndarray]]:
    """The raw extra vectors of one memory, (kind, embedding) in their order n."""
    rows = admin.execute("SELECT kind, embedding::real[] FROM pgmem.memory_vectors WHERE memory_id = %s ORDER BY n",
                         [memory_id]).fetchall()
    return [(kind, np.asarray(emb, dtype=np.float32)) for kind, emb in rows]


def kinds(admin: psycopg.Connection, memory_id) -> list[str]:
    return [k for k, _ in vectors(admin, memory_id)]


def embed(embedder: HashEmbedder, text: str) -> np.ndarray:
    return embedder.embed([text])[0]


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, atol=1e-6))


@contextmanager
def gateway_conn(dsn: str, **settings: object) -> Iterator[psycopg.Connection]:
    """An autocommit connection as pgmem_gateway with session settings (e.g. pgmem.exact_search_max_rows)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET ROLE pgmem_gateway")
        for name, value in settings.items():
            conn.execute("SELECT set_config(%s, %s, false)", [name, str(value)])
        yield conn


def hnsw_scans(conn: psycopg.Connection) -> int:
    """Scans of the space's HNSW index in the current transaction of ``conn``."""
    return conn.execute("SELECT coalesce(sum(pg_stat_get_xact_numscans(i.indexrelid)), 0) FROM pg_index i"
                        " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'pgmem.memories'::regclass"
                        " AND c.relname LIKE 'memories_space_%%_hnsw'").fetchone()[0]


def search_counting_hnsw(memory: Memory, conn: psycopg.Connection, query: str, **kw):
    """(results, HNSW index scans) of one search run on ``conn``, in one transaction."""
    with conn.transaction():
        before = hnsw_scans(conn)
        hits = memory.search(query, conn=conn, **kw)
        return hits, hnsw_scans(conn) - before


# --------------------------------------------------------------------------------------------------------
# min(k, matching rows), exact and pooled
# --------------------------------------------------------------------------------------------------------
def test_min_k_n_for_a_small_user_among_many_on_every_path(make_memory, dsn):
    alice = make_memory("alice")
    g3 = {2, 11, 23}  # the rows of a selective filter; only row 11 holds the word "lantern"
    alice.add_many([{"content": f"note {i}: the red garden by the old {'lantern' if i == 11 else 'wall'} number {i}",
                     "metadata": {"group": "g3" if i in g3 else "rest"}} for i in range(30)])
    rng = np.random.default_rng(7)
    for u in range(3):  # 3,000 rows of other users, sharing the words and the metadata
        other = alice.with_identity(user_id=f"other{u}")
        other.add_many([{"content": f"other {u} note {i} about the red garden lantern",
                         "metadata": {"group": "g3"}, "embedding": rng.normal(size=64)} for i in range(1000)])

    def check(hits, k, n, allowed=None):
        assert len(hits) == min(k, n), (k, n, len(hits))
        assert len({h.id for h in hits}) == len(hits)
        assert {h.user_id for h in hits} == {"alice"}
        if allowed is not None:
            assert {h.metadata["group"] for h in hits} == {allowed}

    modes, ks = ("hybrid", "text"), (5, 30, 100)
    # Exact path (30 rows <= the default threshold of 5,000): the HNSW index is not touched.
    with gateway_conn(dsn) as conn:
        for mode in modes:
            for k in ks:
                hits, scans = search_counting_hnsw(alice, conn, "red garden lantern", k=k, mode=mode)
                check(hits, k, 30)
                assert scans == 0
    # Pooled path (threshold 10 < 30 rows): hybrid reads the HNSW index, then fuses the pools.
    with gateway_conn(dsn, **{"pgmem.exact_search_max_rows": 10}) as conn:
        for mode in modes:
            for k in ks:
                hits, scans = search_counting_hnsw(alice, conn, "red garden lantern", k=k, mode=mode)
                check(hits, k, 30)
                if mode == "hybrid":
                    assert scans >= 1, "the pooled path was not taken"
    # Pooled path with a filter matching 3 rows (threshold 2): the pools hold too few, so exact.
    with gateway_conn(dsn, **{"pgmem.exact_search_max_rows": 2}) as conn:
        for mode in modes:
            for k in ks:
                hits, scans = search_counting_hnsw(alice, conn, "lantern", k=k, mode=mode, filter={"group": "g3"})
                check(hits, k, 3, allowed="g3")
                assert {int(h.content.split()[1].rstrip(":")) for h in hits} <= g3
                if mode == "hybrid":
                    assert scans >= 1, "the pooled path was not taken"
                else:
                    assert hits[0].content.startswith("note 11:")  # the one row holding the query word


# --------------------------------------------------------------------------------------------------------
# The text side on odd queries and very long rows
# --------------------------------------------------------------------------------------------------------
LONG_WORD = "y" * 1000  # one lexeme (PostgreSQL indexes words up to 2047 bytes)


@pytest.mark.parametrize("query", [
    "the and of it",  # stop words only: no lexemes
    "?!...;",  # punctuation only
    "x" * 3000,  # one word too long to index
    LONG_WORD,
    "it's O'Reilly's C:\\new\\table & | ! <-> (x) :* \\' \"q\" %_",  # tsquery operators and quotes
])
def test_text_side_survives_odd_queries(make_memory, query):
    alice = make_memory("alice")
    alice.add_many(["Tea in the morning.", "A walk in the park!", f"the word {LONG_WORD} is long",
                    "It's O'Reilly's book about C:\\new\\table."])
    for mode in ("hybrid", "text"):
        for k in (2, 10):
            hits = alice.search(query, k=k, mode=mode)
            assert len(hits) == min(k, 4), (mode, k)
            assert all(h.text_score >= 0 for h in hits)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    text = alice.search(query, k=10, mode="text")
    if query in ("the and of it", "?!...;", "x" * 3000):  # nothing to match: no text score at all
        assert all(h.text_score == 0 for h in text)
    if query == LONG_WORD:
        assert text[0].content.startswith("the word y") and text[0].text_score > 0
        assert all(h.text_score == 0 for h in text[1:])
    if query.startswith("it's"):
        assert text[0].content.startswith("It's O'Reilly's") and text[0].text_score > 0


def test_a_memory_of_100000_characters_is_stored_and_found_by_a_rare_word(make_memory, admin):
    alice = make_memory("alice")
    rng = np.random.default_rng(3)
    vocab = ["".join(rng.choice(list("bcdfghklmnprstvz"), 3)) + v for v in ("a", "e", "o", "u") for _ in range(250)]
    words = [w + ("." if end else "") for w, end in zip(rng.choice(vocab, 19_000), rng.random(19_000) < 0.05)]
    text = " ".join(words)[:99_000]
    text += " quetzalcoatl"  # the rare word, after PostgreSQL's last word position (16383)
    text += " " + "e" * (100_000 - len(text) - 1)
    assert len(text) == 100_000 and len(text.split()) > 16_383
    big = alice.add(text)
    alice.add_many(["a short memory about tea", "another one about coffee and quetzal birds"])
    assert alice.get(big.id).content == text
    assert admin.execute("SELECT fts @@ to_tsquery('english', 'quetzalcoatl') FROM pgmem.memories WHERE id = %s",
                         [big.id]).fetchone() == (True,)
    hits = alice.search("Where is quetzalcoatl mentioned?", k=3, mode="text")
    assert hits[0].id == big.id and hits[0].text_score > 0
    assert all(h.text_score == 0 for h in hits[1:])
    assert alice.search("quetzalcoatl", k=3, mode="hybrid")[0].id == big.id


class SpyEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        return super().embed(texts)


def test_an_empty_query_is_refused_before_the_embedder(make_memory, dsn):
    spy = SpyEmbedder()
    alice = make_memory("alice", embedder=spy)
    alice.add("tea in the morning", embedding=embed(HashEmbedder(64), "tea in the morning"))  # no embed call
    assert spy.calls == 0
    for query in ("", "   ", "\n\t "):
        for mode in ("hybrid", "text", None):
            with pytest.raises(ValidationError, match="empty"):
                alice.search(query, k=5, mode=mode)
    assert spy.calls == 0
    for query in ("\u00a0", "\u3000 \u2003"):  # Unicode white space too
        with pytest.raises(ValidationError, match="empty"):
            alice.search(query, mode="text")
    assert spy.calls == 0
    # The SQL function refuses the same queries (white space as str.strip() sees it), never "match all".
    with gateway_conn(dsn) as conn:
        for query in ("", " ", " \t ", "\n\r\n", "\u00a0", "\u3000 \u2003", "\x1f"):
            with pytest.raises(psycopg.Error) as info, conn.transaction():
                conn.execute("SELECT pgmem.act_as('alice')")
                conn.execute("SELECT * FROM pgmem.search_hybrid('t64', %s)", [query])
            assert info.value.sqlstate == "PGM08", repr(query)
        with conn.transaction():
            conn.execute("SELECT pgmem.act_as('alice')")
            assert len(conn.execute("SELECT * FROM pgmem.search_hybrid('t64', ' tea\t')").fetchall()) == 1


# --------------------------------------------------------------------------------------------------------
# BM25, the session window, the speaker
# --------------------------------------------------------------------------------------------------------
def test_bm25_rare_term_first_and_session_neighbours_share_it(make_memory):
    alice = make_memory("alice")
    # Two query terms in most memories (low IDF), one rare term in one memory (high IDF).
    common = [r.id for r in alice.add_many([f"We see the city lights from bridge {i}." for i in range(20)])]
    before = alice.add("We visited the old museum downtown.", session_id="s1").id
    zep = alice.add("A zeppelin floated slowly above us.", session_id="s1").id
    after = alice.add("Afterwards we had lunch by the river.", session_id="s1").id
    other = alice.add("The garden needs watering every morning.", session_id="s2").id

    hits = alice.search("Which zeppelin did we see over the city?", k=100, mode="text")
    by_id = {h.id: h for h in hits}
    assert hits[0].id == zep  # one rare term outweighs two common ones
    assert all(by_id[c].text_score > 0 for c in common)
    # The term counts, less, for the memories around it in its session; not for another session.
    assert by_id[before].text_score > 0 and by_id[after].text_score > 0
    assert by_id[zep].text_score > by_id[after].text_score > 0
    assert by_id[zep].text_score > by_id[before].text_score
    assert by_id[other].text_score == 0

    only_rare = {h.id: h.text_score for h in alice.search("zeppelin", k=100, mode="text")}
    assert only_rare[before] > 0 and only_rare[after] > 0
    assert only_rare[other] == 0 and all(only_rare[c] == 0 for c in common)


@pytest.mark.parametrize("mode", ["hybrid", "text"])
def test_speaker_named_in_the_query_ranks_first(make_memory, mode):
    alice = make_memory("alice")
    caroline = alice.add("I love painting sunsets by the lake.", metadata={"speaker": "Caroline"}).id
    melanie = alice.add("I love painting sunsets by the lake!", metadata={"speaker": "Melanie"}).id
    for name, want in (("Caroline", caroline), ("Melanie", melanie)):
        hits = alice.search(f"What does {name} love painting?", k=2, mode=mode)
        assert [h.id for h in hits][0] == want, name
        assert hits[0].text_score == pytest.approx(hits[1].text_score)  # same words: same BM25
        assert hits[0].score > hits[1].score


# --------------------------------------------------------------------------------------------------------
# Filters, scope and identity
# --------------------------------------------------------------------------------------------------------
def test_filters_and_scope_apply_to_hybrid_as_to_vector_search(make_memory, dsn):
    alice, bob = make_memory("alice"), make_memory("bob")
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    items = [{"content": f"tea note {i} with {('green', 'black', 'white')[i % 3]} leaves",
              "agent_id": ("a1", "a2")[i % 2], "session_id": ("s1", "s2", None)[i % 3],
              "metadata": {"topic": ("tea", "work")[i % 2], "n": i}, "created_at": t0 + timedelta(days=i)}
             for i in range(24)]
    alice.add_many(items)
    bob.add_many(items)
    scopes = [
        {}, {"agent_id": "a1"}, {"session_id": "s2"}, {"filter": {"topic": "tea"}}, {"filter": {"n": {"gte": 20}}},
        {"created_after": t0 + timedelta(days=5)}, {"created_before": t0 + timedelta(days=7)},
        {"agent_id": "a2", "session_id": "s1", "filter": {"n": {"lt": 20}},
         "created_after": t0 + timedelta(days=2), "created_before": t0 + timedelta(days=19)},
        {"agent_id": "nobody"},
    ]
    for scope in scopes:
        expected = {r.id for r in alice.list(limit=1000, **scope).items}
        for mode in ("hybrid", "text", "vector"):
            hits = alice.search("green tea leaves", k=1000, mode=mode, **scope)
            assert {h.id for h in hits} == expected, (scope, mode)
            assert all(h.user_id == "alice" for h in hits)
        for k in (1, 3):
            assert len(alice.search("green tea", k=k, **scope)) == min(k, len(expected))
    assert len(expected) == 0 and len({r.id for r in alice.list(limit=1000).items}) == 24

    nobody = make_memory(None)
    for mode in ("hybrid", "text"):
        with pytest.raises(IdentityError):
            nobody.search("green tea", mode=mode)
    with gateway_conn(dsn) as conn:  # the gateway role without act_as: no identity
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT * FROM pgmem.search_hybrid('t64', 'green tea')")
    assert info.value.sqlstate == "PGM01"


# --------------------------------------------------------------------------------------------------------
# Result fields per mode
# --------------------------------------------------------------------------------------------------------
def test_result_fields_per_mode(make_memory):
    alice = make_memory("alice")
    alice.add_many(["green tea in the morning", "black tea after lunch. And biscuits!", "a walk in the park",
                    "the tea garden", "coffee, never tea"], session_id="s")
    alice.add_many(["an unrelated memory about printers", "tea tea tea"])

    hybrid = alice.search("green tea in the morning", k=10, mode="hybrid")
    assert len(hybrid) == 7
    scores = [h.score for h in hybrid]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[-1]
    for h in hybrid:
        assert h.text_score is not None and h.text_score >= 0
        assert h.vector_score is not None and -2 <= h.vector_score <= 2
        assert h.similarity is not None and -1 <= h.similarity <= 1
    assert hybrid[0].content == "green tea in the morning"
    assert hybrid[0].similarity == pytest.approx(1.0, abs=1e-5)  # the query is that memory's text

    text = alice.search("tea in the morning", k=10, mode="text")
    assert len(text) == 7
    assert [h.score for h in text] == sorted((h.score for h in text), reverse=True)
    assert all(h.similarity is None and h.vector_score is None and h.text_score is not None for h in text)

    vector = alice.search("green tea in the morning", k=10, mode="vector")
    assert len(vector) == 7
    assert all(h.score == h.similarity and h.text_score is None and h.vector_score is None for h in vector)
    sims = [h.similarity for h in vector]
    assert sims == sorted(sims, reverse=True) and all(-1 <= s <= 1 for s in sims)
    # Same memory, same cosine similarity in hybrid and vector mode.
    assert {h.id: round(h.similarity, 5) for h in hybrid} == {h.id: round(h.similarity, 5) for h in vector}

    with pytest.raises(ValidationError):
        alice.search("tea", mode="bm25")
    with pytest.raises(ValidationError):
        alice.search("tea", mode="hybrid", min_similarity=0.5)


# --------------------------------------------------------------------------------------------------------
# The day a memory was made, as words of its full-text vector
# --------------------------------------------------------------------------------------------------------
def test_fts_holds_the_utc_day_and_a_date_query_finds_it(make_memory, admin):
    alice = make_memory("alice")
    may8, jan15, may9 = alice.add_many([
        {"content": "We went to the beach with the kids.", "created_at": datetime(2023, 5, 8, 13, 56, tzinfo=UTC)},
        {"content": "We went to the park with the kids.", "created_at": datetime(2024, 1, 15, 9, 0, tzinfo=UTC)},
        # 20:00 at UTC-5 is already 9 May in UTC
        {"content": "We went to the zoo with the kids.",
         "created_at": datetime(2023, 5, 8, 20, 0, tzinfo=timezone(timedelta(hours=-5)))},
    ])

    def lexemes(mid) -> set[str]:
        return set(admin.execute("SELECT tsvector_to_array(fts) FROM pgmem.memories WHERE id = %s",
                                 [mid.id]).fetchone()[0])

    assert {"2023", "8", "may"} <= lexemes(may8)
    assert {"2024", "15", "januari"} <= lexemes(jan15) and not {"2023", "8"} & lexemes(jan15)
    assert {"2023", "9", "may"} <= lexemes(may9) and "8" not in lexemes(may9)

    hits = alice.search("8 May 2023", k=3, mode="text")
    assert [h.id for h in hits] == [may8.id, may9.id, jan15.id]
    assert hits[0].text_score > hits[1].text_score > 0 and hits[2].text_score == 0

    # New content keeps the day the memory was made (not the day of the update).
    alice.update(may8.id, content="We went to the beach with the kids and the dog.")
    assert {"2023", "8", "may", "dog"} <= lexemes(may8)



def test_extra_vectors_are_read_for_the_best_candidates_only(make_memory, admin, embedder):
    """The sentence and context vectors of a memory count for its vector score when it is among the max(100, 4k)
    candidates nearest to the query by its own embedding or among the max(100, 4k) best by BM25; beyond both
    it scores with its own cosine (best sentence and context replaced by it), and its extra vectors are not
    read."""
    alice = make_memory("alice", contextual=False)
    q = embed(embedder, "zebra stripes")
    half = np.asarray(q) + embed(embedder, "unrelated")  # the others: nearer than the far one, matching the text
    alice.add_many([{"content": f"zebra note number {i}", "embedding": half, "session_id": "s"} for i in range(120)])
    far = alice.add("an unrelated line", embedding=-q).id  # the farthest by its own embedding, no query term
    register_vector(admin)
    for n, kind in ((1, "sentence"), (2, "context")):  # its extra vectors are the query itself
        admin.execute("INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)"
                      " VALUES ('alice', %s, %s, %s, %s)", [far, n, kind, q])

    def top(k):
        with gateway_conn(dsn_for(admin.info.dbname)) as conn, conn.transaction():
            conn.execute("SELECT pgmem.act_as('alice')")
            return conn.execute(  # vector score only, nearly: its extra vectors would put it first
                "SELECT id, vector_score FROM pgmem.search_hybrid(p_space => 't64', p_query => 'zebra stripes',"
                " p_embedding => %s, p_k => %s, p_text_weight => 0.001, p_session_weight => 0)", [q, k]).fetchall()

    assert far not in {i for i, _ in top(10)}  # 121st by own cosine and by BM25 (0): beyond both 100
    assert far not in {i for i, _ in top(30)}  # pools of 120
    first = top(40)[0]  # pools of 160: its best sentence (1) and its context (1) count
    assert first[0] == far and first[1] == pytest.approx(2.0, abs=1e-5)


# --------------------------------------------------------------------------------------------------------
# Extra vectors: 'sentence' and 'context' in pgmem.memory_vectors
# --------------------------------------------------------------------------------------------------------
def test_sentence_vectors_one_per_sentence_with_the_speaker(make_memory, admin, embedder):
    alice = make_memory("alice")
    text = "I adopted a cat. Her name is Luna! Is she cute?"
    a = alice.add(text, metadata={"speaker": "Caroline"})
    got = vectors(admin, a.id)
    assert [k for k, _ in got] == ["sentence"] * 3
    for (_, vec), sentence in zip(got, ["I adopted a cat.", "Her name is Luna!", "Is she cute?"]):
        assert same(vec, embed(embedder, f"Caroline: {sentence}"))
    assert kinds(admin, alice.add("Just one sentence here.").id) == []
    assert kinds(admin, alice.add("No speaker. Two sentences.").id) == ["sentence", "sentence"]
    # Adding the same text again stores nothing more.
    assert alice.add(text, metadata={"speaker": "Caroline"}).created is False
    assert len(vectors(admin, a.id)) == 3


def test_context_vectors_follow_their_own_session(make_memory, admin, embedder):
    alice = make_memory("alice")
    s1a = alice.add("Caroline went to a support group.", session_id="s1").id
    s2a = alice.add("Melanie ran a charity race.", session_id="s2").id
    s1b = alice.add("It was a moving experience.", session_id="s1").id
    s2b = alice.add("She finished in under an hour.", session_id="s2").id
    nos = alice.add("A memory without a session.").id
    assert kinds(admin, s1a) == [] and kinds(admin, s2a) == [] and kinds(admin, nos) == []
    [(k1, c1)] = vectors(admin, s1b)
    [(k2, c2)] = vectors(admin, s2b)
    assert k1 == k2 == "context"
    assert same(c1, embed(embedder, "Caroline went to a support group.\nIt was a moving experience."))
    assert same(c2, embed(embedder, "Melanie ran a charity race.\nShe finished in under an hour."))

    # add_many: the first item follows the stored tail of its session, the next ones the batch.
    r = alice.add_many([{"content": "Then she painted a lake.", "session_id": "s1"},
                        {"content": "A new session starts here.", "session_id": "s3"},
                        {"content": "The lake was at sunrise.", "session_id": "s1"},
                        {"content": "Second of s3.", "session_id": "s3"}])
    ctx = {i: vectors(admin, x.id) for i, x in enumerate(r)}
    assert ctx[1] == []
    assert same(ctx[0][0][1], embed(embedder, "It was a moving experience.\nThen she painted a lake."))
    assert same(ctx[2][0][1], embed(embedder, "Then she painted a lake.\nThe lake was at sunrise."))
    assert same(ctx[3][0][1], embed(embedder, "A new session starts here.\nSecond of s3."))
    assert all([k for k, _ in ctx[i]] == ["context"] for i in (0, 2, 3))


def test_no_extra_vectors_when_not_contextual_or_with_explicit_embeddings(make_memory, admin, embedder):
    plain = make_memory("alice", contextual=False)
    plain.add("First of the session.", session_id="s")
    b = plain.add("Second of the session. It has two sentences.", session_id="s")
    c = plain.add_many([{"content": "Third. With. Three sentences.", "session_id": "s"}])[0]
    assert kinds(admin, b.id) == [] and kinds(admin, c.id) == []

    alice = make_memory("alice")
    alice.add("Start of t.", session_id="t")
    d = alice.add("Explicit. Two sentences.", session_id="t", embedding=embed(embedder, "x"))
    e = alice.add_many([{"content": "Also explicit. Two.", "session_id": "t", "embedding": embed(embedder, "y")},
                        {"content": "Embedded here. Two sentences.", "session_id": "t"}])
    assert kinds(admin, d.id) == [] and kinds(admin, e[0].id) == []
    assert kinds(admin, e[1].id) == ["sentence", "sentence", "context"]
    assert admin.execute("SELECT count(*) FROM pgmem.memory_vectors").fetchone()[0] == 3


def test_content_changes_replace_extra_vectors_metadata_keeps_them_delete_drops_them(make_memory, admin, embedder):
    alice = make_memory("alice")
    alice.add("The first memory of the session.", session_id="s")
    m = alice.add("One. Two. Three.", session_id="s", metadata={"speaker": "Ann"}).id
    assert kinds(admin, m) == ["sentence"] * 3 + ["context"]
    before = vectors(admin, m)

    alice.update(m, metadata={"mood": "calm"})  # metadata only: the vectors stay as they were
    after = vectors(admin, m)
    assert [k for k, _ in after] == [k for k, _ in before] and all(same(a, b) for (_, a), (_, b) in zip(after, before))

    alice.edit(m, "Two.", "Two and a half. Four.")  # content changes: new sentences, no context vector
    got = vectors(admin, m)
    assert [k for k, _ in got] == ["sentence"] * 4
    for (_, vec), s in zip(got, ["One.", "Two and a half.", "Four.", "Three."]):
        assert same(vec, embed(embedder, f"Ann: {s}"))

    alice.update(m, content="Alpha. Beta.")
    got = vectors(admin, m)
    assert [k for k, _ in got] == ["sentence"] * 2
    for (_, vec), s in zip(got, ["Alpha.", "Beta."]):
        assert same(vec, embed(embedder, f"Ann: {s}")), s  # the stored speaker still names the sentences

    alice.update(m, content="Gamma. Delta.", metadata={"speaker": "Bo"})  # merged: the new speaker
    assert [v for _, v in vectors(admin, m)][1].tolist() == embed(embedder, "Bo: Delta.").tolist()
    alice.update(m, content="Epsilon. Zeta.", metadata={"mood": "x"}, replace_metadata=True)  # no speaker left
    assert same(vectors(admin, m)[0][1], embed(embedder, "Epsilon."))

    alice.update(m, content="Just one sentence now")
    assert vectors(admin, m) == []
    alice.update(m, content="Back to two. Sentences.", embedding=embed(embedder, "explicit"))
    assert vectors(admin, m) == []

    other = alice.add("Eta. Theta.", session_id="s").id
    assert len(vectors(admin, other)) == 3
    assert alice.delete(other)
    assert vectors(admin, other) == []


def test_a_bound_agent_reads_only_its_own_users_vectors(make_memory, admin, login_role, embedder):
    alice, bob = make_memory("alice"), make_memory("bob")
    a = alice.add("Alice one. Alice two.", session_id="s").id
    bob.add("Bob one. Bob two. Bob three.")
    role = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.bind_role(%s, 'bob')", [role])
    with psycopg.connect(dsn_for(admin.info.dbname, user=role), autocommit=True) as conn:
        register_vector(conn)
        # The agent reaches no table at all (API only, migration 0007) ...
        for sql, params in [("SELECT user_id, count(*) FROM pgmem.memory_vectors GROUP BY 1", []),
                            ("DELETE FROM pgmem.memory_vectors WHERE user_id = 'alice'", []),
                            ("INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)"
                             " VALUES ('alice', %s, 9, 'sentence', %s)", [a, embed(embedder, "forged")])]:
            with pytest.raises(psycopg.Error) as info:
                conn.execute(sql, params)
            assert info.value.sqlstate == "42501", sql
    # ... and the API's own role, acting for bob, sees bob's vectors only (row-level security).
    with as_api(admin, "bob") as api:
        assert api.execute("SELECT user_id, count(*) FROM pgmem.memory_vectors GROUP BY 1").fetchall() == [("bob", 3)]
        assert api.execute("SELECT count(*) FROM pgmem.memory_vectors WHERE memory_id = %s", [a]).fetchone() == (0,)
        assert api.execute("DELETE FROM pgmem.memory_vectors WHERE user_id = 'alice'").rowcount == 0
    assert len(vectors(admin, a)) == 2



# --------------------------------------------------------------------------------------------------------
# The vector term's floor (migration 0021): counted from the candidates' 10th percentile times n / (n + 20)
# --------------------------------------------------------------------------------------------------------
def _at_cosine(q: np.ndarray, other: np.ndarray, c: float) -> np.ndarray:
    """A unit vector whose cosine to the unit vector q is c (in the plane of q and other)."""
    o = other - (other @ q) * q
    o /= np.linalg.norm(o)
    return (c * q + np.sqrt(1 - c * c) * o).astype(np.float32)


def _scores(alice, q) -> dict:
    return {h.id: (h.score, h.vector_score) for h in
            alice.search("zzzq", embedding=q, k=100, mode="hybrid")}  # no memory holds the query's word


def test_a_narrow_band_of_cosines_is_spread_by_the_floor(make_memory, embedder):
    """Cosines between 0.85 and 0.90 (a model like e5 puts every candidate there): the nearest gets the full
    vector weight 0.6 and the farthest less than the 0.6 * 0.85 / 0.90 = 0.567 of the released formula, by as
    much as the floor says (over 40 candidates it counts 40 / 60 of the 10th percentile). No text match,
    no speaker: the fused score f is the vector term alone, 0.6 * (vec - floor) / (max vec - floor), vec being
    twice the cosine (no extra vectors), floor the 10th percentile of vec times n / (n + 20); a memory without
    a session is a session of its own, so its score is f + 0.4 f."""
    alice = make_memory("alice", contextual=False)
    q = np.asarray(embed(embedder, "narrow band"), dtype=np.float64)
    q /= np.linalg.norm(q)
    other = np.asarray(embed(embedder, "another direction"), dtype=np.float64)
    cosines = np.linspace(0.85, 0.90, 40)
    ids = [alice.add(f"memory {i}", embedding=_at_cosine(q, other, c)).id for i, c in enumerate(cosines)]
    got = _scores(alice, q.astype(np.float32))
    vec = 2 * cosines
    floor = np.percentile(vec, 10) * 40 / (40 + 20)
    want = 1.4 * 0.6 * np.maximum(vec - floor, 0) / (vec.max() - floor)
    for i, w in zip(ids, want):
        assert got[i][0] == pytest.approx(w, abs=2e-3)
    assert got[ids[-1]][0] == pytest.approx(1.4 * 0.6, abs=1e-3)
    assert got[ids[0]][0] < 1.4 * 0.6 * 0.85 / 0.90 - 0.05  # the released formula: divided by the best one only


def test_two_candidates_keep_a_near_tie_a_near_tie(make_memory, embedder):
    """Over a handful of candidates a percentile is no statistic: shrunk by n / (n + 20), the floor stays near 0,
    so two memories whose cosines differ by 0.01 score within a few hundredths, not the whole vector weight
    apart (each its own session: score 1.4 f)."""
    alice = make_memory("alice", contextual=False)
    q = np.asarray(embed(embedder, "near tie"), dtype=np.float64)
    q /= np.linalg.norm(q)
    other = np.asarray(embed(embedder, "another direction"), dtype=np.float64)
    a = alice.add("first memory", embedding=_at_cosine(q, other, 0.90)).id
    b = alice.add("second memory", embedding=_at_cosine(q, other, 0.89)).id
    got = _scores(alice, q.astype(np.float32))
    assert got[a][0] == pytest.approx(1.4 * 0.6, abs=1e-3)
    assert 1.4 * 0.58 < got[b][0] < got[a][0]
