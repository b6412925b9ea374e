"""Failure cases C10-C12 and C26: embedding dimensions, vectors that
have no cosine similarity, the similarity scale, and empty query texts. Through the Python client and
through the stored functions directly."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import psycopg
import pytest
from conftest import dsn_for, run
from pgvector.psycopg import register_vector

from pgmem import DimensionMismatch, EmbedderError, ValidationError
from pgmem.testing import HashEmbedder

H768 = HashEmbedder(768)
H64 = HashEmbedder(64)


# --------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------
class FakeEmbedder:
    """An embedder claiming ``model_name``/``dims`` that returns ``make(n)`` and counts its calls."""

    def __init__(self, model_name: str, dims: int, make) -> None:
        self.model_name, self.dims, self._make, self.calls = model_name, dims, make, 0

    def embed(self, texts):
        self.calls += 1
        return np.stack([self._make(i) for i in range(len(texts))]) if texts else np.zeros((0, self.dims))


def raw_counts(admin: psycopg.Connection) -> tuple[int, int]:
    """(memories rows, history rows) in the raw tables, all users (admin bypasses RLS)."""
    return (admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0],
            admin.execute("SELECT count(*) FROM pgmem.history").fetchone()[0])


@pytest.fixture
def gw(admin: psycopg.Connection, login_role) -> Iterator[psycopg.Connection]:
    """An autocommit connection of a fresh gateway login (RLS applies). Spaces t64 and s768 exist."""
    admin.execute("SELECT pgmem.create_space('t64', %s, 64)", [H64.model_name])
    admin.execute("SELECT pgmem.create_space('s768', %s, 768)", [H768.model_name])
    role = login_role("pgmem_gateway")
    with psycopg.connect(dsn_for(admin.info.dbname, user=role), autocommit=True) as conn:
        register_vector(conn)
        yield conn


def sql_error(conn: psycopg.Connection, sql: str, params=()) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        run(conn, sql, params)
    return info.value


def plain_writes(space: str, vector, memory_id) -> list[tuple[str, list]]:
    """Writes that bypass the API: an INSERT and an UPDATE of pgmem.memories with ``vector`` (the admin
    connection gets pgvector's types registered here)."""
    return [("INSERT INTO pgmem.memories (user_id, space_id, content, embedding)"
             f" SELECT 'alice', space_id, 'direct insert', %s::vector FROM pgmem.spaces WHERE name = '{space}'", [vector]),
            ("UPDATE pgmem.memories SET embedding = %s::vector WHERE id = %s", [vector, memory_id])]


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


# --------------------------------------------------------------------------------------------------------
# C10: a vector of the wrong length names expected and actual dims, space and model; nothing is written
# --------------------------------------------------------------------------------------------------------
WRONG_DIMS = [1024, 767, 769, 1, 384]


def assert_dims_message(exc: BaseException, got: int, space: str = "s768", model: str = H768.model_name) -> None:
    text = str(exc)
    assert f"expected 768 dimensions, got {got}" in text, text
    assert space in text and model in text, text


def test_c10_wrong_dimension_vectors_are_refused(make_memory, admin):
    m = make_memory(space="s768", embedder=H768)
    mid = m.add("an existing memory").id
    before = raw_counts(admin)
    for n in WRONG_DIMS:
        for call in [
            lambda: m.add("a new memory", embedding=ones(n)),
            lambda: m.add("a new memory", embedding=[0.5] * n),
            lambda: m.search(embedding=ones(n)),
            lambda: m.update(mid, embedding=ones(n)),
            lambda: m.update(mid, content="changed content", embedding=ones(n)),
        ]:
            with pytest.raises(DimensionMismatch) as info:
                call()
            assert_dims_message(info.value, n)
        with pytest.raises(DimensionMismatch) as info:
            m.add_many(["first", {"content": "second", "embedding": ones(n)}, "third"])
        assert info.value.index == 1
        assert_dims_message(info.value, n)
    assert raw_counts(admin) == before
    rec = m.get(mid)
    assert (rec.content, rec.version) == ("an existing memory", 1)
    assert [e.event for e in m.history(mid)] == ["ADD"]


def test_c10_embedder_of_the_wrong_dimension_is_refused(make_memory, admin):
    m = make_memory(space="s768", embedder=H768)
    mid = m.add("an existing memory").id
    before = raw_counts(admin)
    # An embedder declaring other dims, and one that declares 768 but returns 1024 floats.
    declared = make_memory(space="s768", embedder=HashEmbedder(1024))
    lying = make_memory(space="s768", embedder=FakeEmbedder(H768.model_name, 768, lambda i: ones(1024)))
    for client in [declared, lying]:
        for call in [
            lambda: client.add("a new memory"),
            lambda: client.add_many(["one", "two"]),
            lambda: client.search("what is stored"),
            lambda: client.update(mid, content="changed content"),
            lambda: client.edit(mid, "existing", "old"),
        ]:
            with pytest.raises((DimensionMismatch, EmbedderError)) as info:
                call()
            assert_dims_message(info.value, 1024)
    assert raw_counts(admin) == before
    assert m.get(mid).version == 1


def test_c10_sql_functions_refuse_wrong_dimensions(gw, admin):
    mid = run(gw, "SELECT id FROM pgmem.add('s768', 'an existing memory', %s::vector)", [ones(768)])[0][0]
    before = raw_counts(admin)
    for n in WRONG_DIMS:
        wrong = ones(n)
        statements = [
            ("SELECT * FROM pgmem.add('s768', 'a new memory', %s::vector)", [wrong]),
            ("SELECT * FROM pgmem.search('s768', %s::vector, 10)", [wrong]),
            ("SELECT * FROM pgmem.update(%s, p_embedding => %s::vector)", [mid, wrong]),
            ("SELECT * FROM pgmem.update(%s, 'changed content', %s::vector)", [mid, wrong]),
            ("SELECT * FROM pgmem.edit(%s, 'existing', 'old', %s::vector)", [mid, wrong]),
        ]
        for sql, params in statements:
            err = sql_error(gw, sql, params)
            assert err.sqlstate == "PGM02", (n, sql)
            assert_dims_message(err, n)
        # Plain SQL writes: a gateway may not make any (API only); the schema owner's meet the same check (trigger).
        register_vector(admin)
        for sql, params in plain_writes("s768", wrong, mid):
            assert sql_error(gw, sql, params).sqlstate == "42501", (n, sql)
            err = sql_error(admin, sql, params)
            assert err.sqlstate == "PGM02", (n, sql)
            assert_dims_message(err, n)
        err = sql_error(gw, "SELECT * FROM pgmem.add_batch('s768', ARRAY['a', 'b', 'c'], ARRAY[%s, %s, %s]::vector[])",
                        [ones(768), wrong, ones(768) * 2])
        assert err.sqlstate == "PGM02"
        assert err.diag.message_primary.startswith("item 1: ")
        assert_dims_message(err, n)
    assert raw_counts(admin) == before


# --------------------------------------------------------------------------------------------------------
# C11: NaN, +-Inf, zero vectors and vectors without a cosine similarity are refused before any write
# --------------------------------------------------------------------------------------------------------
def bad_vectors(dims: int) -> dict[str, np.ndarray | list]:
    nan, inf = ones(dims), ones(dims)
    nan[dims // 2] = np.nan
    inf[-1] = np.inf
    return {
        "nan": nan,
        "+inf": inf,
        "-inf": -inf,
        "all nan": np.full(dims, np.nan, dtype=np.float32),
        "zero": np.zeros(dims, dtype=np.float32),
        "zero list": [0.0] * dims,
        "negative zero": np.full(dims, -0.0, dtype=np.float32),
        "overflows float32": [1e39] + [1.0] * (dims - 1),  # finite in Python, inf as float4
        "squares underflow": np.full(dims, 1e-30, dtype=np.float32),  # nonzero, but its float4 norm is 0
        "denormal": np.r_[np.float32(1e-40), np.zeros(dims - 1, dtype=np.float32)],
        "squares overflow": np.full(dims, 1e20, dtype=np.float32),  # finite, but its float4 norm is inf
    }


def test_c11_client_refuses_vectors_without_similarity(make_memory, admin):
    m = make_memory(space="t64", embedder=H64)
    mid = m.add("an existing memory").id
    before = raw_counts(admin)
    for name, bad in bad_vectors(64).items():
        for call in [
            lambda: m.add("a new memory", embedding=bad),
            lambda: m.search(embedding=bad),
            lambda: m.update(mid, embedding=bad),
            lambda: m.update(mid, content="changed content", embedding=bad),
        ]:
            with pytest.raises(ValidationError) as info:
                call()
            assert not isinstance(info.value, DimensionMismatch), name
            assert info.value.sqlstate is None, name  # refused before anything was sent
        with pytest.raises(ValidationError) as info:
            m.add_many(["first", {"content": "second", "embedding": bad}, "third"])
        assert info.value.index == 1, name
        # The same vectors coming from an embedder are refused as an embedder fault.
        sick = make_memory(space="t64", embedder=FakeEmbedder(H64.model_name, 64, lambda i, bad=bad: bad))
        for call in [lambda: sick.add("a new memory"), lambda: sick.search("a query"),
                     lambda: sick.edit(mid, "existing", "old"), lambda: sick.add_many(["x", "y"])]:
            with pytest.raises(EmbedderError):
                call()
    assert raw_counts(admin) == before
    assert m.get(mid).version == 1


def test_c11_sql_refuses_vectors_without_similarity(gw, admin):
    mid = run(gw, "SELECT id FROM pgmem.add('t64', 'an existing memory', %s::vector)", [ones(64)])[0][0]
    before = raw_counts(admin)
    for name, bad in bad_vectors(64).items():
        bad = np.asarray(bad, dtype=np.float32)
        expected = "22000" if not np.all(np.isfinite(bad)) else "PGM08"  # pgvector refuses NaN/Inf on input
        statements = [
            ("SELECT * FROM pgmem.add('t64', 'a new memory', %s::vector)", [bad]),
            ("SELECT * FROM pgmem.add('t64', 'a new memory', %t::vector)", [bad]),  # text format too
            ("SELECT * FROM pgmem.search('t64', %s::vector, 10)", [bad]),
            ("SELECT * FROM pgmem.search('t64', %s::vector, 10, p_min_similarity => 0.5)", [bad]),
            ("SELECT * FROM pgmem.update(%s, p_embedding => %s::vector)", [mid, bad]),
            ("SELECT * FROM pgmem.edit(%s, 'existing', 'old', %s::vector)", [mid, bad]),
            ("SELECT * FROM pgmem.add_batch('t64', ARRAY['a', 'b'], ARRAY[%s, %s]::vector[])", [ones(64), bad]),
        ]
        for sql, params in statements:
            err = sql_error(gw, sql, params)
            assert err.sqlstate == expected, (name, sql, err.sqlstate, str(err))
        register_vector(admin)
        for sql, params in plain_writes("t64", bad, mid):
            if expected == "PGM08":  # a gateway may not write plain SQL; NaN/Inf fail in the vector's input first
                assert sql_error(gw, sql, params).sqlstate == "42501", (name, sql)
            err = sql_error(admin, sql, params)
            assert err.sqlstate == expected, (name, sql, err.sqlstate, str(err))
    assert raw_counts(admin) == before


def test_c11_stored_vectors_never_yield_nan_similarities(make_memory, admin):
    """Whatever got in, every similarity search returns lies in [-1, 1] and is a number."""
    m = make_memory(space="t64", embedder=H64)
    for i, text in enumerate(["likes green tea", "drives a blue car", "plays the cello", "owns two cats"]):
        m.add(text)
    for q in [ones(64), -ones(64), np.r_[ones(1), np.zeros(63)].astype(np.float32), H64.embed(["green tea"])[0],
              ones(64) * 1e-18, ones(64) * 1e18]:
        hits = m.search(embedding=q, k=10)
        assert len(hits) == 4
        sims = [h.similarity for h in hits]
        assert all(-1.0 <= s <= 1.0 for s in sims), sims
        assert sims == sorted(sims, reverse=True)
        # A threshold applies to the reported similarity: nothing below it comes back.
        assert all(h.similarity >= 0.5 for h in m.search(embedding=q, k=10, min_similarity=0.5))


def test_c11_halfvec_space_refuses_components_it_cannot_hold(make_memory, admin):
    """Spaces of 2001-4000 dims index half-precision copies: a component beyond +-65504 is refused clearly."""
    m = make_memory(space="h3000", embedder=HashEmbedder(3000))
    assert m.space().index_kind == "hnsw_halfvec"
    m.add("a normal memory")
    before = raw_counts(admin)
    big = ones(3000)
    big[7] = 1e5
    for call in [lambda: m.add("too big for halfvec", embedding=big),
                 lambda: m.add_many(["fine", {"content": "too big", "embedding": big}])]:
        with pytest.raises(ValidationError) as info:
            call()
        assert "halfvec" in str(info.value)
    assert raw_counts(admin) == before


# --------------------------------------------------------------------------------------------------------
# C12: cosine similarity in [-1, 1]: A = q ~ 1, B orthogonal ~ 0, C = -q ~ -1; a threshold never drops A
# --------------------------------------------------------------------------------------------------------
def c12_vectors(dims: int, seed: int, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal(dims) * scale).astype(np.float32)
    r = rng.standard_normal(dims) * scale
    q64 = q.astype(np.float64)
    b = (r - (r @ q64) / (q64 @ q64) * q64).astype(np.float32)
    return q, b, -q


@contextmanager
def index_route_connection(dsn: str) -> Iterator[psycopg.Connection]:
    """A gateway connection on which pgmem.search always takes its HNSW route (never the exact scan)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET ROLE pgmem_gateway")
        conn.execute("SET pgmem.exact_search_max_rows = 0")
        yield conn


@pytest.mark.parametrize("dims", [64, 3000])
def test_c12_similarity_scale_order_and_thresholds(make_memory, dsn, dims):
    base = make_memory(space=f"c12-{dims}", embedder=HashEmbedder(dims))
    with index_route_connection(dsn) as index_conn:
        for seed, scale in [(1, 1.0), (2, 0.001), (3, 250.0), (4, 1.0)]:
            q, b, c = c12_vectors(dims, seed, scale)
            m = base.with_identity(user_id=f"c12-{seed}")
            a_id = m.add("A, same as the query", embedding=q).id
            b_id = m.add("B, orthogonal to the query", embedding=b).id
            c_id = m.add("C, opposite to the query", embedding=c).id
            for conn in [None, index_conn]:
                route = "exact" if conn is None else "index"
                hits = m.search(embedding=q, k=3, conn=conn)
                assert [h.id for h in hits] == [a_id, b_id, c_id], (seed, route)
                sa, sb, sc = (h.similarity for h in hits)
                assert sa == 1.0, (seed, route, sa)  # identical vectors: exactly 1, never above
                assert abs(sb) < 1e-5, (seed, route, sb)
                assert -1.0 <= sc < -1.0 + 1e-6, (seed, route, sc)
                for t in [1.0, 0.999999, 0.9, 0.001, -0.001, -0.5]:
                    got = [h.id for h in m.search(embedding=q, k=3, min_similarity=t, conn=conn)]
                    assert got == [a_id] + ([b_id] if t < 0 else []), (seed, route, t)
                assert [h.id for h in m.search(embedding=q, k=3, min_similarity=-1.0, conn=conn)] == [a_id, b_id, c_id]
                # A query pointing the same way with another length: still about 1, never above 1.
                for factor in [3.7, 0.01, 1000.0]:
                    hits = m.search(embedding=q * np.float32(factor), k=3, min_similarity=0.999999, conn=conn)
                    assert [h.id for h in hits] == [a_id], (seed, route, factor)
                    assert 1.0 - 1e-6 <= hits[0].similarity <= 1.0
                # From B's side: B ~ 1, A and C ~ 0.
                hits = m.search(embedding=b, k=3, conn=conn)
                assert hits[0].id == b_id and hits[0].similarity == 1.0
                assert all(abs(h.similarity) < 1e-5 for h in hits[1:])


def test_c12_order_in_hybrid_mode(make_memory):
    """C12 in the default mode: a query text that no memory holds, with the query embedding q, ranks A = q,
    B orthogonal and C = -q in that order, their similarity about 1, 0, -1. (Before migration 0021 the fused
    vector term clipped every vector score at 0, so B and C tied at 0 and the newer, C, came first.)"""
    base = make_memory(space="c12-hybrid", embedder=HashEmbedder(64))
    for seed in (1, 2, 3):
        q, b, c = c12_vectors(64, seed)
        m = base.with_identity(user_id=f"c12h-{seed}")
        ids = [m.add(text, embedding=v).id for text, v in
               (("A, same as the query", q), ("B, orthogonal to the query", b), ("C, opposite to the query", c))]
        hits = m.search("zzzq", embedding=q, k=3, mode="hybrid")
        assert [h.id for h in hits] == ids, seed
        assert hits[0].similarity == 1.0 and abs(hits[1].similarity) < 1e-5 and hits[2].similarity < -1 + 1e-6
        assert hits[0].score > hits[1].score > hits[2].score >= 0


def test_c12_text_query_of_stored_text_scores_one(alice, gw):
    texts = ["likes green tea", "drives a blue car", "plays the cello"]
    ids = [alice.add(t).id for t in texts]
    for t, mid in zip(texts, ids):
        hits = alice.search(t, k=3, min_similarity=1.0)
        assert [(h.id, h.similarity) for h in hits] == [(mid, 1.0)]
        assert all(-1.0 <= h.similarity <= 1.0 for h in alice.search(t, k=3))
    rows = run(gw, "SELECT id, similarity FROM pgmem.search('t64', %s::vector, 3, p_min_similarity => 1.0)",
               [H64.embed([texts[0]])[0]])
    assert rows == [(ids[0], 1.0)]
    for bad in [1.0000001, -1.0000001, float("nan")]:
        assert sql_error(gw, "SELECT * FROM pgmem.search('t64', %s::vector, 3, p_min_similarity => %s)",
                         [ones(64), bad]).sqlstate == "PGM08"
        with pytest.raises(ValidationError):
            alice.search("tea", min_similarity=bad)


def test_c12_scale_is_documented(admin):
    from pgmem import Memory, MemoryRecord

    comment = admin.execute("SELECT obj_description('pgmem.search(text, vector, integer, text, text, jsonb,"
                            " double precision, text, timestamptz, timestamptz, timestamptz)'::regprocedure)").fetchone()[0]
    assert "[-1, 1]" in comment and "cosine" in comment
    assert "[-1, 1]" in Memory.search.__doc__ and "[-1, 1]" in MemoryRecord.__doc__


# --------------------------------------------------------------------------------------------------------
# C26: an empty or white-space query text is refused before the embedder is called
# --------------------------------------------------------------------------------------------------------
BLANK_QUERIES = ["", " ", "   ", "\t", "\n", "\r\n  \t", "\u3000", "\u00a0", "\u2003\u2009", "\x0b\x0c"]


def test_c26_blank_query_is_refused_before_embedding(make_memory, admin):
    counting = FakeEmbedder(H64.model_name, 64, lambda i: H64.embed(["x"])[0])
    m = make_memory(space="t64", embedder=counting)
    m.add_many([{"content": f"memory {i}", "embedding": H64.embed([f"memory {i}"])[0]} for i in range(5)])
    assert counting.calls == 0
    for q in BLANK_QUERIES:
        with pytest.raises(ValidationError) as info:
            m.search(q)
        assert info.value.field == "query", repr(q)
        with pytest.raises(ValidationError):
            m.search(q, k=1000, min_similarity=-1.0)
    with pytest.raises(ValidationError):
        m.search()
    with pytest.raises(ValidationError):
        m.search(None)
    with pytest.raises(ValidationError):  # vector mode takes a text or a vector, not both
        m.search("tea", embedding=ones(64), mode="vector")
    # Blank content is refused the same way, before the embedder.
    for q in BLANK_QUERIES:
        with pytest.raises(ValidationError):
            m.add(q)
        with pytest.raises(ValidationError) as info:
            m.add_many(["fine", q])
        assert info.value.index == 1
    assert counting.calls == 0
    assert raw_counts(admin) == (5, 5)


def test_c26_sql_search_without_a_query_vector_is_refused(gw):
    for i in range(3):
        run(gw, "SELECT * FROM pgmem.add('t64', %s, %s::vector)", [f"memory {i}", H64.embed([f"memory {i}"])[0]])
    for sql in ["SELECT * FROM pgmem.search('t64', NULL, 10)", "SELECT * FROM pgmem.search('t64', NULL::vector)"]:
        assert sql_error(gw, sql).sqlstate == "PGM08"
