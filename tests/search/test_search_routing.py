"""Filtered vector search per tenant (cases C13, C14, C15), measured against exact search in numpy.

One dataset per module: 51,000 clustered unit vectors of 64 dimensions (a Gaussian mixture on the unit
sphere, fixed seed) spread over tenants of very different sizes, all in one embedding space with one shared
HNSW index. Rows go in through the API (``add_batch`` through
the gateway role, 5,000 per batch). To keep the module fast, the space's HNSW index is dropped during the
load and re-created afterwards from its own ``pg_get_indexdef`` (a bulk build of the same index instead of
51,000 incremental inserts into it).

``pytest -s`` prints the measured figures (recall, rows returned, p50 latency per class, which plan ran).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import psycopg
import pytest
from psycopg import sql

from pgmem import Memory, ValidationError
from pgmem.validation import MAX_K

from conftest import dsn_for

DIMS = 64
CENTRES = 200
NOISE = 0.6  # norm of the Gaussian noise added to a centre before normalising: cos(point, centre) ~ 0.86
SEED = 20250725
SPACE = "gmm64"
MODEL = "test-gaussian-mixture-64"
BATCH = 5000
THRESHOLD = 5000  # pgmem.search's default pgmem.exact_search_max_rows

TENANTS: dict[str, int] = {
    "big": 30_000,  # far above the routing threshold: HNSW
    "mid6k": 6_000,  # just above it: HNSW, 12% of the index
    "c13": 5_000,  # C13's user: 5% tagged rare
    "mid3k": 3_000,
    "mid1k": 1_000,
    **{f"t100_{i:02d}": 100 for i in range(30)},
    **{f"t30_{i:03d}": 30 for i in range(100)},
}
RARE = 250  # c13 rows with {"tag": "rare"}: 5% of 5,000
BAND = 497  # c13 rows with {"band": "b"}: so that k = 497 and 498 straddle the number of matches
TOL = 1e-5  # float32 (pgvector) against float64 (numpy) cosine similarity

FIGURES: list[str] = []


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@dataclass
class Dataset:
    dsn: str
    conn: psycopg.Connection  # autocommit, as pgmem_gateway: the connection every search in this module uses
    mem: Memory
    hnsw_index: str
    vectors: dict[str, np.ndarray]  # tenant -> (n, DIMS) float32, as stored
    ids: dict[str, list]  # tenant -> ids in the order of vectors
    index_of: dict[str, dict] = field(default_factory=dict)  # tenant -> id -> row
    metadata: dict[str, list[dict]] = field(default_factory=dict)
    queries: np.ndarray = None  # (60, DIMS) float32, fresh points of the same mixture

    def matching(self, tenant: str, flt: dict | None) -> np.ndarray:
        rows = np.arange(len(self.ids[tenant]))
        if not flt:
            return rows
        return np.array([i for i in rows if all(self.metadata[tenant][i].get(k) == v for k, v in flt.items())])


@pytest.fixture(scope="module")
def search_db(template_db: str) -> Iterator[str]:
    """A database of this module's own, copied from the session's migrated template."""
    name = f"pgmem_search_{os.getpid()}"
    with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template_db)))
    try:
        yield dsn_for(name)
    finally:
        with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def data(search_db: str) -> Iterator[Dataset]:
    rng = np.random.default_rng(SEED)
    centres = unit(rng.standard_normal((CENTRES, DIMS)))

    def sample(n: int) -> np.ndarray:
        pts = centres[rng.integers(0, CENTRES, n)] + NOISE * rng.standard_normal((n, DIMS)) / np.sqrt(DIMS)
        return unit(pts).astype(np.float32)

    mem = Memory(search_db, user_id=None, role="pgmem_gateway", space=SPACE, max_size=2)
    conn = psycopg.connect(search_db, autocommit=True)
    try:
        yield build(search_db, conn, mem, sample)
    finally:
        conn.close()
        mem.close()
        print("\n[pgmem search figures]\n  " + "\n  ".join(FIGURES))


def build(search_db: str, conn: psycopg.Connection, mem: Memory, sample) -> Dataset:
    rng = np.random.default_rng(SEED + 1)
    t0 = time.perf_counter()
    mem.with_identity(user_id="big").create_space(SPACE, MODEL, DIMS)
    mem.space()  # cached, and shared by every with_identity() copy: no space lookup per search
    with psycopg.connect(search_db, autocommit=True) as admin:
        (index_name, index_def), = admin.execute(
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
            " WHERE i.indrelid = 'pgmem.memories'::regclass AND a.amname = 'hnsw'").fetchall()
        admin.execute(f"DROP INDEX {index_name}")

    conn.execute("SET ROLE pgmem_gateway")
    ds = Dataset(search_db, conn, mem, index_name, {}, {})
    for tenant, n in TENANTS.items():
        vecs = sample(n)
        meta = [{"n": i} for i in range(n)]
        if tenant == "c13":
            for i in rng.choice(n, RARE, replace=False):
                meta[i]["tag"] = "rare"
            for i in rng.choice(n, BAND, replace=False):
                meta[i]["band"] = "b"
        m = mem.with_identity(user_id=tenant)
        ids: list = []
        for start in range(0, n, BATCH):
            items = [{"content": f"{tenant} memory {i}", "embedding": vecs[i], "metadata": meta[i]}
                     for i in range(start, min(n, start + BATCH))]
            res = m.add_many(items)
            assert all(r.created for r in res)
            ids.extend(r.id for r in res)
        ds.vectors[tenant], ds.ids[tenant], ds.metadata[tenant] = vecs, ids, meta
        ds.index_of[tenant] = {id_: i for i, id_ in enumerate(ids)}
    t_load = time.perf_counter() - t0

    with psycopg.connect(search_db, autocommit=True) as admin:
        admin.execute("SET maintenance_work_mem = '256MB'")
        admin.execute(index_def)
        admin.execute("ANALYZE pgmem.memories")
        assert admin.execute("SELECT pg_get_indexdef(%s::regclass)", (index_name,)).fetchone()[0] == index_def
        total = admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0]
    t_index = time.perf_counter() - t0 - t_load
    assert total == sum(TENANTS.values()) >= 50_000
    ds.queries = sample(60)
    FIGURES.append(f"dataset: {total} rows x {DIMS} dims, {len(TENANTS)} tenants; add_batch {total / t_load:.0f} rows/s "
                   f"({t_load:.1f} s), HNSW build (m=16, ef_construction=64) {t_index:.1f} s")
    search(ds, "big", ds.queries[0], 10)  # warm up: plan caches, vector type registration
    return ds


# ------------------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------------------
@dataclass
class Result:
    ids: list
    similarities: list[float]
    hnsw_scans: int
    ms: float


def search(ds: Dataset, tenant: str, q: np.ndarray, k: int, *, flt: dict | None = None,
           exact_max_rows: int | None = None) -> Result:
    """Search through the client as ``tenant``; also report whether the HNSW index was scanned (the
    transaction's own index scan counter, read before and after, in the same transaction)."""
    conn = ds.conn
    with conn.transaction():
        if exact_max_rows is not None:
            conn.execute("SELECT set_config('pgmem.exact_search_max_rows', %s, true)", (str(exact_max_rows),))
        scans = "SELECT pg_stat_get_xact_numscans(%s::regclass)"
        before = conn.execute(scans, (ds.hnsw_index,)).fetchone()[0]
        t = time.perf_counter()
        hits = ds.mem.with_identity(user_id=tenant).search(embedding=q, k=k, filter=flt, conn=conn)
        ms = (time.perf_counter() - t) * 1000
        after = conn.execute(scans, (ds.hnsw_index,)).fetchone()[0]
    assert all(h.user_id == tenant for h in hits)
    return Result([h.id for h in hits], [h.similarity for h in hits], after - before, ms)


def true_similarities(ds: Dataset, tenant: str, q: np.ndarray, rows: np.ndarray) -> np.ndarray:
    x = ds.vectors[tenant][rows].astype(np.float64)
    q = q.astype(np.float64)
    return x @ q / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))


def check(ds: Dataset, tenant: str, q: np.ndarray, k: int, res: Result, *, flt: dict | None = None,
          exact: bool) -> float:
    """Assert what holds for every search: min(k, matching) rows, only matching rows, no duplicates,
    similarities as numpy computes them and in descending order; with ``exact``, the exact top k in order
    (ties within TOL may swap). Returns recall against the exact top k."""
    rows = ds.matching(tenant, flt)
    sims = true_similarities(ds, tenant, q, rows)
    order = np.argsort(-sims, kind="stable")
    want = min(k, len(rows))
    assert len(res.ids) == want, f"{tenant} k={k} filter={flt}: {len(res.ids)} rows, expected {want}"
    assert len(set(res.ids)) == len(res.ids)
    pos = {int(r): j for j, r in enumerate(rows)}
    got = np.array([pos[ds.index_of[tenant][i]] for i in res.ids])  # KeyError: a row outside the filter
    got_sims = sims[got]
    np.testing.assert_allclose(res.similarities, got_sims, atol=TOL)
    assert all(a >= b - TOL for a, b in zip(res.similarities, res.similarities[1:])), "not sorted by similarity"
    best = sims[order[:want]]
    if exact:
        np.testing.assert_allclose(got_sims, best, atol=TOL, err_msg=f"{tenant} k={k}: not the exact top k in order")
    return float(np.mean(got_sims >= best[-1] - TOL)) if want else 1.0


def p50(values: list[float]) -> float:
    return statistics.median(values)


# ------------------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tenant", ["t30_000", "t100_00", "mid1k", "mid3k"])
def test_small_tenant_gets_exact_results(data: Dataset, tenant: str):
    n = TENANTS[tenant]
    times, recalls, hnsw = [], [], 0
    for q in data.queries[:6]:
        for k in (10, 40, 100):
            res = search(data, tenant, q, k)
            recalls.append(check(data, tenant, q, k, res, exact=True))
            times.append(res.ms)
            hnsw += res.hnsw_scans > 0
    FIGURES.append(f"{tenant:>8} ({n:>5} rows) k=10/40/100: recall {np.mean(recalls):.3f}, "
                   f"p50 {p50(times):.1f} ms, HNSW used in {hnsw}/{len(times)} searches")
    assert min(recalls) == 1.0


@pytest.mark.parametrize("tenant", ["big", "mid6k"])
def test_large_tenant_recall(data: Dataset, tenant: str):
    assert TENANTS[tenant] > THRESHOLD
    recalls, times, hnsw = [], [], 0
    for q in data.queries[:40]:
        res = search(data, tenant, q, 10)
        recalls.append(check(data, tenant, q, 10, res, exact=False))
        times.append(res.ms)
        hnsw += res.hnsw_scans > 0
    FIGURES.append(f"{tenant:>8} ({TENANTS[tenant]:>5} rows) k=10: recall@10 {np.mean(recalls):.3f} "
                   f"(min {min(recalls):.1f}) over {len(recalls)} queries, p50 {p50(times):.1f} ms, "
                   f"HNSW used in {hnsw}/{len(times)} searches")
    assert np.mean(recalls) >= 0.95


def test_large_tenant_k_1000_is_never_truncated(data: Dataset):
    times, recalls = [], []
    for q in data.queries[40:43]:
        res = search(data, "big", q, MAX_K)
        recalls.append(check(data, "big", q, MAX_K, res, exact=False))
        times.append(res.ms)
    FIGURES.append(f"     big k=1000: {MAX_K} rows, recall {np.mean(recalls):.3f}, p50 {p50(times):.1f} ms")


@pytest.mark.parametrize("limit", [900, 6000], ids=["900 rows: exact", "6000 rows: HNSW"])
def test_filter_within_large_tenant(data: Dataset, limit: int):
    """A metadata filter inside the 30,000-row tenant: below the threshold it is scanned exactly, above it the
    filtered HNSW scan must still fill k with good recall."""
    flt = {"n": {"lt": limit}}
    matching = sum(m["n"] < limit for m in data.metadata["big"])
    assert matching == limit
    recalls, times, hnsw = [], [], 0
    for q in data.queries[:10]:
        for k in (10, 100):
            res = search(data, "big", q, k, flt=flt)
            ids = {data.index_of["big"][i] for i in res.ids}
            assert all(data.metadata["big"][i]["n"] < limit for i in ids)
            assert len(res.ids) == min(k, matching)
            rows = np.arange(limit)  # metadata n == row number
            sims = true_similarities(data, "big", q, rows)
            best = np.sort(sims)[::-1][:k]
            got = true_similarities(data, "big", q, np.array(sorted(ids)))
            recalls.append(float(np.mean(got >= best[-1] - TOL)))
            assert all(a >= b - TOL for a, b in zip(res.similarities, res.similarities[1:]))
            times.append(res.ms)
            hnsw += res.hnsw_scans > 0
    FIGURES.append(f"big, filter n < {limit} ({matching} rows) k=10/100: recall {np.mean(recalls):.3f}, "
                   f"p50 {p50(times):.1f} ms, HNSW used in {hnsw}/{len(times)}")
    assert np.mean(recalls) >= 0.95


@pytest.mark.parametrize("forced_hnsw", [False, True], ids=["default", "exact_search_max_rows=100"])
@pytest.mark.parametrize("flt", [{"tag": "rare"}, {"band": "b"}], ids=["tag=rare", "band=b"])
def test_c13_filter_returns_min_k_matching(data: Dataset, flt: dict, forced_hnsw: bool):
    """C13: a filter matching 5% (and 10%) of one user's 5,000 rows. Forced onto the HNSW path, where the
    index (shared by 51,000 rows) yields too few matching rows, the search falls back and still returns
    min(k, matching)."""
    matching = len(data.matching("c13", flt))
    assert matching == (RARE if "tag" in flt else BAND)
    q = data.queries[50]
    times, recalls, hnsw = [], [], 0
    for k in (10, 40, 41, 200, 497, 498):
        res = search(data, "c13", q, k, flt=flt, exact_max_rows=100 if forced_hnsw else None)
        recalls.append(check(data, "c13", q, k, res, flt=flt, exact=not forced_hnsw))
        times.append(res.ms)
        hnsw += res.hnsw_scans > 0
        if forced_hnsw:
            assert res.hnsw_scans > 0, "the setting did not route this search to the HNSW index"
    FIGURES.append(f"C13 {flt} ({matching} of 5000 rows), {'forced HNSW' if forced_hnsw else 'default'}: "
                   f"min(k, matching) for k=10..498, recall {np.mean(recalls):.3f}, p50 {p50(times):.1f} ms, "
                   f"HNSW used in {hnsw}/{len(times)}")


@pytest.mark.parametrize("forced_hnsw", [False, True], ids=["default", "exact_search_max_rows=10"])
def test_c14_small_user_among_large_ones(data: Dataset, forced_hnsw: bool):
    """C14: user A owns 100 memories, the others 50,900: k=100 gives 100 and k=10 gives 10, every query."""
    tenant = "t100_07"
    assert sum(TENANTS.values()) - TENANTS[tenant] >= 10_000
    times, recalls = [], []
    for q in data.queries[:20]:
        for k in (100, 10):
            res = search(data, tenant, q, k, exact_max_rows=10 if forced_hnsw else None)
            # Forced onto the index, the first k rows it finds may be approximate; the count is exact.
            recalls.append(check(data, tenant, q, k, res, exact=not forced_hnsw))
            times.append(res.ms)
            if forced_hnsw:
                assert res.hnsw_scans > 0, "the setting did not route this search to the HNSW index"
    FIGURES.append(f"C14 100-row user, {'forced HNSW' if forced_hnsw else 'default'}: 20 queries x k=100/10, "
                   f"min(k, 100) rows, recall {np.mean(recalls):.3f}, p50 {p50(times):.1f} ms")


def test_c15_k_above_ef_search_and_above_the_maximum(data: Dataset):
    tenant = "t100_11"
    q = data.queries[55]
    # k=100 > hnsw.ef_search's default 40, over a user of exactly 100 rows: all 100, on either path.
    for exact_max_rows in (None, 10):
        res = search(data, tenant, q, 100, exact_max_rows=exact_max_rows)
        check(data, tenant, q, 100, res, exact=True)
        assert len(res.ids) == 100
    # Above the documented maximum: refused, never truncated, by the client and by SQL directly.
    m = data.mem.with_identity(user_id=tenant)
    for k in (MAX_K + 1, 0):
        with pytest.raises(ValidationError, match="k must be"):
            m.search(embedding=q, k=k)
    with psycopg.connect(data.dsn) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        conn.execute("SET ROLE pgmem_gateway")
        conn.execute("SELECT pgmem.act_as(%s)", (tenant,))
        for k in (MAX_K + 1, 0, None):
            with pytest.raises(psycopg.Error) as err:
                with conn.transaction():
                    conn.execute("SELECT * FROM pgmem.search(%s, %s, %s)", (SPACE, q, k))
            assert err.value.sqlstate == "PGM08"
            assert "k must be between 1 and 1000" in err.value.diag.message_primary
        n = len(conn.execute("SELECT * FROM pgmem.search(%s, %s, %s)", (SPACE, q, MAX_K)).fetchall())
        assert n == TENANTS[tenant]
