"""The systems bench/search.py and bench/ingest.py compare, each behind the same small interface.

A *store* owns one database (or directory) and has:

- ``load(ds, progress)``: create it and write the whole data set in bulk; returns ``{"load_s", "index_s"}``.
  HNSW inserts into a built graph cost several ms a row on this machine (neighbour lists are re-pruned),
  so every PostgreSQL-based store is loaded without its HNSW index, which is then built in one pass with the
  very same definition and ``maintenance_work_mem = 1GB`` (raw: ``CREATE INDEX`` after ``COPY``; pgmem and
  LangGraph: their own index, dropped before the load and re-created from ``pg_get_indexdef`` after it).
  Chroma indexes as it goes (``index_s`` None).
- ``ingest_batched(ds, extra_rows)``: write extra rows (outside the N) into the loaded, indexed store in
  batches, the way that system batches (raw: one binary COPY; pgmem: ``add_many`` per tenant; LangGraph:
  ``store.batch`` of 1,000 ``PutOp``s; Chroma: ``collection.add`` of up to 5,000); seconds.
- ``add_one_session()``: ``(add, close)``, where ``add(ds, j)`` writes extra row ``j`` alone, in a
  transaction (or call) of its own;
- ``disk_bytes()``; ``client()``: a search client with a connection of its own, whose
  ``search(tenant, vector, text, k)`` returns row numbers, and ``close()``.

- ``RawStore``: one table ``items(id bigint primary key, tenant text, content text, embedding vector(384))``,
  a btree on ``tenant``, one HNSW index (m=16, ef_construction=64, ``vector_cosine_ops``); searched with the
  hand-written ``WHERE tenant = %s ORDER BY embedding <=> %s LIMIT k`` (pgvector defaults: ef_search 40, no
  iterative scan; ``client(iterative=True)`` sets ``hnsw.iterative_scan = relaxed_order`` in the session).
- ``PgmemStore``: a migrated pgmem database, space ``bench`` (384 dims, HNSW m=16, ef_construction=64), written
  and searched through ``pgmem.Memory`` acting as the role ``pgmem_gateway`` (row-level security on), one
  ``Memory`` (pool of one connection) per client; ``search(embedding=..., mode="vector")``.
- ``ChromaStore``: ``chromadb.PersistentClient`` in a directory, one collection (hnsw cosine, max_neighbors 16,
  ef_construction 64, ef_search 100 = Chroma's default), tenant as metadata, ``where={"tenant": t}``.
- ``LangGraphStore``: ``langgraph.store.postgres.PostgresStore`` with its pgvector index (dims 384, hnsw m=16,
  ef_construction 64, cosine) in its own database on the same server; namespace ``(tenant,)``, one field
  ``text``; its ``embed`` function returns the data set's precomputed vectors, looked up by text.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from common import DIMS, Dataset, Timer, dir_bytes, row_id

HNSW_M, HNSW_EF_CONSTRUCTION = 16, 64


def _connect(dsn: str, **kw):
    import psycopg
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(dsn, **kw)
    register_vector(conn)
    return conn


def _pg_bytes(dsn: str, tables: list[str]) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return sum(conn.execute("SELECT pg_total_relation_size(%s::regclass)", (t,)).fetchone()[0] for t in tables)


class _IndexLater:
    """Drop an HNSW index before a bulk load and re-create it, with the very same definition, after it."""

    def __init__(self, dsn: str, index: str, maintenance_work_mem: str = "1GB") -> None:
        self.dsn, self.index, self.mwm = dsn, index, maintenance_work_mem

    def __enter__(self):
        with _connect(self.dsn, autocommit=True) as conn:
            self.definition = conn.execute("SELECT pg_get_indexdef(%s::regclass)", (self.index,)).fetchone()[0]
            conn.execute(f"DROP INDEX {self.index}")
        return self

    def build(self) -> float:
        """Re-create the index; seconds."""
        with _connect(self.dsn, autocommit=True) as conn, Timer() as t:
            conn.execute(f"SET maintenance_work_mem = '{self.mwm}'")
            conn.execute(self.definition)
        return t.seconds

    def __exit__(self, *exc) -> None:
        pass


def _by_tenant(ds: Dataset, extra_rows) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for j in extra_rows:
        groups.setdefault(int(ds.extra_tenant_of[j]), []).append(int(j))
    return groups


# --------------------------------------------------------------------------------------------------------
# Raw pgvector
# --------------------------------------------------------------------------------------------------------
class RawStore:
    name = "raw pgvector"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def create(self, indexed: bool) -> None:
        """The empty table; with ``indexed``, its tenant btree and HNSW index too (else build them later)."""
        with _connect(self.dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS items")
            conn.execute(f"CREATE TABLE items (id bigint PRIMARY KEY, tenant text NOT NULL, content text NOT NULL,"
                         f" embedding vector({DIMS}) NOT NULL)")
            if indexed:
                self._indexes(conn)

    @staticmethod
    def _indexes(conn) -> None:
        conn.execute("CREATE INDEX items_tenant_idx ON items (tenant)")
        conn.execute(f"CREATE INDEX items_embedding_idx ON items USING hnsw (embedding vector_cosine_ops)"
                     f" WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})")

    def copy(self, rows, progress=None) -> float:
        """One binary COPY of ``rows`` (tuples id, tenant, content, vector); seconds."""
        with _connect(self.dsn) as conn, Timer() as t:
            with conn.cursor() as cur, cur.copy("COPY items (id, tenant, content, embedding) FROM STDIN"
                                                " WITH (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "text", "text", "vector"])
                for n, row in enumerate(rows, 1):
                    copy.write_row(row)
                    if progress and n % 1000 == 0:
                        progress(1000)
            conn.commit()
        return t.seconds

    def build_indexes(self, maintenance_work_mem: str = "1GB") -> float:
        """Build the btree and HNSW index on the loaded table (``maintenance_work_mem`` so the HNSW graph is
        built in memory; parallel workers as the server allows); seconds."""
        with _connect(self.dsn, autocommit=True) as conn, Timer() as t:
            conn.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
            self._indexes(conn)
        return t.seconds

    def load(self, ds: Dataset, progress=None) -> dict:
        """Binary COPY into the bare table, then the indexes."""
        self.create(indexed=False)
        load_s = self.copy(((i, ds.tenants[ds.tenant_of[i]], ds.contents[i], ds.emb[i]) for i in range(ds.n)),
                           progress)
        index_s = self.build_indexes()
        self.analyze()
        return {"load_s": load_s, "index_s": index_s}

    def ingest_batched(self, ds: Dataset, extra_rows, progress=None) -> float:
        """One binary COPY of the extra rows into the indexed table; seconds."""
        return self.copy(((ds.n + j, ds.tenants[ds.extra_tenant_of[j]], ds.extra_contents[j], ds.extra_emb[j])
                          for j in extra_rows), progress)

    def analyze(self) -> None:
        with _connect(self.dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE items")

    def add_one_session(self):
        conn = _connect(self.dsn, autocommit=True)

        def add(ds: Dataset, j: int) -> None:
            conn.execute("INSERT INTO items (id, tenant, content, embedding) VALUES (%s, %s, %s, %b)",
                         (ds.n + j, ds.tenants[ds.extra_tenant_of[j]], ds.extra_contents[j], ds.extra_emb[j]))
        return add, conn.close

    def disk_bytes(self) -> int:
        return _pg_bytes(self.dsn, ["items"])

    def client(self, iterative: bool = False, ef_search: int | None = None) -> RawClient:
        return RawClient(self.dsn, iterative, ef_search)


class RawClient:
    # The query vector in binary (%b): dumping a 384-dimension vector as text costs about 0.8 ms of Python.
    SQL = ("SELECT id, content, embedding <=> %(q)b AS distance FROM items WHERE tenant = %(t)s"
           " ORDER BY embedding <=> %(q)b LIMIT %(k)s")

    def __init__(self, dsn: str, iterative: bool, ef_search: int | None) -> None:
        # Never prepared: psycopg prepares a statement on its 5th run, and PostgreSQL then switches to a
        # generic plan that cannot see the tenant's size (an exact scan of the large tenant: about 6x slower).
        self.conn = _connect(dsn, autocommit=True, prepare_threshold=None)
        if iterative:
            self.conn.execute("SET hnsw.iterative_scan = relaxed_order")
        if ef_search:
            self.conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")

    def search(self, tenant: str, vec: np.ndarray, text: str, k: int) -> list[int]:
        return [r[0] for r in self.conn.execute(self.SQL, {"q": vec, "t": tenant, "k": k}).fetchall()]

    def close(self) -> None:
        self.conn.close()


# --------------------------------------------------------------------------------------------------------
# pgmem
# --------------------------------------------------------------------------------------------------------
SPACE, MODEL = "bench", "synthetic-gmm-384"


class PgmemStore:
    name = "pgmem"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def create(self) -> None:
        """Migrate the (fresh) database and create the space (its partial HNSW index, on an empty table)."""
        from pgmem import migrations

        migrations.migrate(self.dsn)
        with self.memory() as mem:
            mem.create_space(SPACE, MODEL, DIMS, hnsw_m=HNSW_M, hnsw_ef_construction=HNSW_EF_CONSTRUCTION)

    def memory(self, user_id: str | None = None, ef_search: int | None = None):
        """A gateway client; ``ef_search``: its connections set ``pgmem.hnsw_ef_search`` (libpq ``options``)."""
        from urllib.parse import quote

        from pgmem import Memory

        dsn = self.dsn
        if ef_search:
            dsn += ("&" if "?" in dsn else "?") + "options=" + quote(f"-c pgmem.hnsw_ef_search={int(ef_search)}")
        return Memory(dsn, user_id=user_id, role="pgmem_gateway", space=SPACE, min_size=1, max_size=1)

    def hnsw_index(self) -> str:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return "pgmem." + conn.execute(
                "SELECT i.indexname FROM pg_indexes i WHERE i.schemaname = 'pgmem' AND i.tablename = 'memories'"
                " AND i.indexdef LIKE '%USING hnsw%'").fetchone()[0]

    def _add_tenant_batches(self, mem, tenant: str, items: list[dict], batch: int) -> None:
        m = mem.with_identity(user_id=tenant)
        for lo in range(0, len(items), batch):
            m.add_many(items[lo:lo + batch])

    def load(self, ds: Dataset, batch: int = 1000, progress=None) -> dict:
        """``Memory.add_many`` (pgmem.add_batch) per tenant, up to ``batch`` rows a call (one transaction each:
        a call acts for one user), with the space's HNSW index built after."""
        self.create()
        with _IndexLater(self.dsn, self.hnsw_index()) as later, self.memory() as mem, Timer() as t:
            for tenant, rows in enumerate(ds.rows_by_tenant):
                self._add_tenant_batches(mem, ds.tenants[tenant],
                                         [{"content": ds.contents[i], "embedding": ds.emb[i]} for i in rows], batch)
                if progress:
                    progress(len(rows))
        index_s = later.build()
        self.analyze()
        return {"load_s": t.seconds, "index_s": index_s}

    def ingest_batched(self, ds: Dataset, extra_rows, batch: int = 1000, progress=None) -> float:
        """The way a gateway batches (what ``Memory.writer`` does): ``add_many`` of up to ``batch`` rows a call,
        each item naming its tenant (``user_id``), into the indexed space; one statement per call."""
        rows = list(extra_rows)
        with self.memory() as mem, Timer() as t:
            for lo in range(0, len(rows), batch):
                part = rows[lo:lo + batch]
                mem.add_many([{"content": ds.extra_contents[j], "embedding": ds.extra_emb[j],
                               "user_id": ds.tenants[ds.extra_tenant_of[j]]} for j in part])
                if progress:
                    progress(len(part))
        return t.seconds

    def ingest_per_tenant(self, ds: Dataset, extra_rows, batch: int = 1000, progress=None) -> float:
        """``add_many`` per tenant (all of a tenant's extra rows, up to ``batch`` a call: a client acting for one
        user) into the indexed space."""
        groups = _by_tenant(ds, extra_rows)
        with self.memory() as mem, Timer() as t:
            for tenant, rows in groups.items():
                self._add_tenant_batches(mem, ds.tenants[tenant],
                                         [{"content": ds.extra_contents[j], "embedding": ds.extra_emb[j]}
                                          for j in rows], batch)
                if progress:
                    progress(len(rows))
        return t.seconds

    def copy_batched(self, ds: Dataset, extra_rows, progress=None) -> float:
        """The baseline for ``ingest_batched``: one binary COPY of the extra rows straight into pgmem.memories
        (the same table, indexes and triggers: full-text vector, history row) as the superuser, bypassing
        pgmem's functions and row-level security; seconds."""
        import psycopg
        from pgvector.psycopg import register_vector

        space_id = None
        with psycopg.connect(self.dsn) as conn, Timer() as t:
            register_vector(conn)
            space_id = conn.execute("SELECT space_id FROM pgmem.spaces WHERE name = %s", [SPACE]).fetchone()[0]
            with conn.cursor() as cur, cur.copy("COPY pgmem.memories (user_id, space_id, content, embedding)"
                                                " FROM STDIN WITH (FORMAT BINARY)") as copy:
                copy.set_types(["text", "int4", "text", "vector"])
                for n, j in enumerate(extra_rows, 1):
                    copy.write_row((ds.tenants[ds.extra_tenant_of[j]], space_id, ds.extra_contents[j], ds.extra_emb[j]))
                    if progress and n % 1000 == 0:
                        progress(1000)
            conn.commit()
        return t.seconds

    def analyze(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE pgmem.memories")
            conn.execute("VACUUM ANALYZE pgmem.history")

    def add_one_session(self):
        mem = self.memory()
        ids: dict[str, object] = {}

        def add(ds: Dataset, j: int) -> None:
            tenant = ds.tenants[ds.extra_tenant_of[j]]
            m = ids.get(tenant) or ids.setdefault(tenant, mem.with_identity(user_id=tenant))
            m.add(ds.extra_contents[j], embedding=ds.extra_emb[j])
        return add, mem.close

    def disk_bytes(self, history: bool = True) -> int:
        return _pg_bytes(self.dsn, ["pgmem.memories", "pgmem.memory_vectors"] + (["pgmem.history"] if history else []))

    def client(self, ef_search: int | None = None) -> PgmemClient:
        return PgmemClient(self, ef_search)


class PgmemClient:
    def __init__(self, store: PgmemStore, ef_search: int | None = None) -> None:
        self.mem = store.memory(ef_search=ef_search)
        self.mem.space()  # cached: no lookup per search
        self.by_tenant: dict[str, object] = {}

    def search(self, tenant: str, vec: np.ndarray, text: str, k: int) -> list[int]:
        m = self.by_tenant.get(tenant)
        if m is None:
            m = self.by_tenant[tenant] = self.mem.with_identity(user_id=tenant)
        return [row_id(r.content) for r in m.search(embedding=vec, k=k, mode="vector")]

    def close(self) -> None:
        self.mem.close()


# --------------------------------------------------------------------------------------------------------
# Chroma
# --------------------------------------------------------------------------------------------------------
class ChromaStore:
    name = "Chroma"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._client = None
        self._col = None

    def _collection(self):
        if self._col is None:
            import chromadb
            from chromadb.config import Settings

            self._client = chromadb.PersistentClient(path=str(self.path),
                                                     settings=Settings(anonymized_telemetry=False))
            self._col = self._client.get_or_create_collection(
                "bench", embedding_function=None,
                configuration={"hnsw": {"space": "cosine", "max_neighbors": HNSW_M,
                                        "ef_construction": HNSW_EF_CONSTRUCTION, "ef_search": 100}})
        return self._col

    def create(self) -> None:
        import shutil

        self._client = self._col = None
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(parents=True)
        self._collection()

    def _add(self, ids, embs, tenants, docs, progress=None) -> float:
        col = self._collection()
        batch = min(5000, self._client.get_max_batch_size())
        with Timer() as t:
            for lo in range(0, len(ids), batch):
                hi = min(len(ids), lo + batch)
                col.add(ids=ids[lo:hi], embeddings=embs[lo:hi], metadatas=[{"tenant": x} for x in tenants[lo:hi]],
                        documents=docs[lo:hi])
                if progress:
                    progress(hi - lo)
        return t.seconds

    def load(self, ds: Dataset, progress=None) -> dict:
        """``collection.add`` in batches of the client's maximum batch size (at most 5,000)."""
        self.create()
        load_s = self._add([str(i) for i in range(ds.n)], ds.emb, [ds.tenants[t] for t in ds.tenant_of],
                           ds.contents, progress)
        return {"load_s": load_s, "index_s": None}

    def ingest_batched(self, ds: Dataset, extra_rows, progress=None) -> float:
        rows = list(extra_rows)
        return self._add([str(ds.n + j) for j in rows], ds.extra_emb[rows],
                         [ds.tenants[ds.extra_tenant_of[j]] for j in rows], [ds.extra_contents[j] for j in rows],
                         progress)

    def add_one_session(self):
        col = self._collection()

        def add(ds: Dataset, j: int) -> None:
            col.add(ids=[str(ds.n + j)], embeddings=ds.extra_emb[j:j + 1],
                    metadatas=[{"tenant": ds.tenants[ds.extra_tenant_of[j]]}], documents=[ds.extra_contents[j]])
        return add, lambda: None

    def disk_bytes(self) -> int:
        return dir_bytes(self.path)

    def client(self) -> ChromaClient:
        return ChromaClient(self._collection())


class ChromaClient:
    """Chroma runs in-process: clients share the one PersistentClient (there is no connection to own)."""

    def __init__(self, col) -> None:
        self.col = col

    def search(self, tenant: str, vec: np.ndarray, text: str, k: int) -> list[int]:
        res = self.col.query(query_embeddings=[vec], n_results=k, where={"tenant": tenant},
                             include=["documents", "distances"])
        return [int(i) for i in res["ids"][0]]

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------------------
# LangGraph PostgresStore
# --------------------------------------------------------------------------------------------------------
class LangGraphStore:
    name = "LangGraph PostgresStore"

    def __init__(self, dsn: str, ds: Dataset, queries: dict | None = None) -> None:
        self.dsn = dsn
        self.vectors: dict[str, np.ndarray] = {}
        for i, c in enumerate(ds.contents):
            self.vectors[c] = ds.emb[i]
        for j, c in enumerate(ds.extra_contents):
            self.vectors[c] = ds.extra_emb[j]
        for qs in (queries or {}).values():
            for text, vec in zip(qs.texts, qs.vectors):
                self.vectors[text] = vec

    def embed(self, texts) -> list[list[float]]:
        """The 'embedding model': the precomputed vector of each text."""
        return [self.vectors[t].tolist() for t in texts]

    def index_config(self) -> dict:
        return {"dims": DIMS, "embed": self.embed, "fields": ["text"], "distance_type": "cosine",
                "ann_index_config": {"kind": "hnsw", "m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION}}

    def _store(self):
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row

        conn = _connect(self.dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        return PostgresStore(conn, index=self.index_config()), conn

    def create(self) -> None:
        store, conn = self._store()
        with conn:
            store.setup()

    def _put(self, items, batch: int, progress=None) -> float:
        from langgraph.store.base import PutOp

        store, conn = self._store()
        with conn, Timer() as t:
            for lo in range(0, len(items), batch):
                store.batch([PutOp((tenant,), key, {"text": text}) for tenant, key, text in items[lo:lo + batch]])
                if progress:
                    progress(len(items[lo:lo + batch]))
        return t.seconds

    def load(self, ds: Dataset, batch: int = 1000, progress=None) -> dict:
        """``store.batch`` of ``PutOp``s, ``batch`` rows a call, with its HNSW index built after."""
        self.create()
        items = [(ds.tenants[ds.tenant_of[i]], str(i), ds.contents[i]) for i in range(ds.n)]
        with _IndexLater(self.dsn, "store_vectors_embedding_idx") as later:
            load_s = self._put(items, batch, progress)
        index_s = later.build()
        self.analyze()
        return {"load_s": load_s, "index_s": index_s}

    def ingest_batched(self, ds: Dataset, extra_rows, batch: int = 1000, progress=None) -> float:
        items = [(ds.tenants[ds.extra_tenant_of[j]], str(ds.n + j), ds.extra_contents[j]) for j in extra_rows]
        return self._put(items, batch, progress)

    def analyze(self) -> None:
        with _connect(self.dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE store")
            conn.execute("VACUUM ANALYZE store_vectors")

    def add_one_session(self):
        store, conn = self._store()

        def add(ds: Dataset, j: int) -> None:
            store.put((ds.tenants[ds.extra_tenant_of[j]],), str(ds.n + j), {"text": ds.extra_contents[j]})
        return add, conn.close

    def disk_bytes(self) -> int:
        return _pg_bytes(self.dsn, ["store", "store_vectors"])

    def client(self) -> LangGraphClient:
        return LangGraphClient(self)


class LangGraphClient:
    def __init__(self, owner: LangGraphStore) -> None:
        self.store, self.conn = owner._store()

    def search(self, tenant: str, vec: np.ndarray, text: str, k: int) -> list[int]:
        return [int(item.key) for item in self.store.search((tenant,), query=text, limit=k)]

    def close(self) -> None:
        self.conn.close()


# --------------------------------------------------------------------------------------------------------
# pgmem's LangGraph store (pgmem.integrations.langgraph.PgmemStore)
# --------------------------------------------------------------------------------------------------------
class LookupEmbedder:
    """The data set's precomputed vectors as a pgmem embedder (the space's model name), looked up by text. A
    context text (the previous memory of the namespace, a newline, this one) gets the normalised mean of its
    parts' vectors: the data set's vectors are not those of a text model, so there is no better stand-in (and
    vector-mode search, the one measured, reads no context vector)."""

    model_name, dims = MODEL, DIMS

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors

    def embed(self, texts) -> np.ndarray:
        out = np.empty((len(texts), DIMS), dtype=np.float32)
        for i, t in enumerate(texts):
            vec = self.vectors.get(t)
            if vec is None:
                vec = np.mean([self.vectors[p] for p in t.split("\n")], axis=0)
                vec = vec / np.linalg.norm(vec)
            out[i] = vec
        return out


class AdapterStore(PgmemStore):
    """LangGraph's ``BaseStore`` API on pgmem: the same calls as :class:`LangGraphStore` (``store.batch`` of
    ``PutOp``s on namespace ``(tenant,)``, ``store.search((tenant,), query=...)``) answered by pgmem's
    PgmemStore on a migrated pgmem database (space ``bench``, row-level security on: one client acting for
    the namespace's user, as a gateway), ``search_mode="vector"`` (cosine similarity, as PostgresStore's)."""

    name = "LangGraph on pgmem"

    def __init__(self, dsn: str, ds: Dataset, queries: dict | None = None) -> None:
        super().__init__(dsn)
        self.vectors = LangGraphStore(dsn, ds, queries).vectors

    def store(self, mem=None):
        from pgmem.integrations.langgraph import PgmemStore as LangGraphPgmemStore

        mem = mem or self.memory()
        mem._embedder = LookupEmbedder(self.vectors)
        return LangGraphPgmemStore(mem, index={"fields": ["text"]}, search_mode="vector"), mem

    def _put(self, items, batch: int, progress=None) -> float:
        from langgraph.store.base import PutOp

        store, mem = self.store()
        with mem, Timer() as t:
            for lo in range(0, len(items), batch):
                store.batch([PutOp((tenant,), key, {"text": text}) for tenant, key, text in items[lo:lo + batch]])
                if progress:
                    progress(len(items[lo:lo + batch]))
        return t.seconds

    def load(self, ds: Dataset, batch: int = 1000, progress=None) -> dict:
        """``store.batch`` of ``PutOp``s, ``batch`` rows a call, with the space's HNSW index built after."""
        self.create()
        items = [(ds.tenants[ds.tenant_of[i]], str(i), ds.contents[i]) for i in range(ds.n)]
        with _IndexLater(self.dsn, self.hnsw_index()) as later:
            load_s = self._put(items, batch, progress)
        index_s = later.build()
        self.analyze()
        return {"load_s": load_s, "index_s": index_s}

    def ingest_batched(self, ds: Dataset, extra_rows, batch: int = 1000, progress=None) -> float:
        items = [(ds.tenants[ds.extra_tenant_of[j]], str(ds.n + j), ds.extra_contents[j]) for j in extra_rows]
        return self._put(items, batch, progress)

    def add_one_session(self):
        store, mem = self.store()

        def add(ds: Dataset, j: int) -> None:
            store.put((ds.tenants[ds.extra_tenant_of[j]],), str(ds.n + j), {"text": ds.extra_contents[j]})
        return add, mem.close

    def client(self) -> AdapterClient:
        return AdapterClient(self)


class AdapterClient:
    def __init__(self, owner: AdapterStore) -> None:
        self.store, self.mem = owner.store()
        self.mem.space()

    def search(self, tenant: str, vec: np.ndarray, text: str, k: int) -> list[int]:
        return [int(item.key) for item in self.store.search((tenant,), query=text, limit=k)]

    def close(self) -> None:
        self.mem.close()


# --------------------------------------------------------------------------------------------------------
# Mem0 (mem0ai) with its pgvector store, infer=False
# --------------------------------------------------------------------------------------------------------
class _Mem0Embedder:
    """Mem0's embedder interface (``embed(text, action)``, ``embed_batch``) over the precomputed vectors."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors

    def embed(self, text, memory_action=None):
        return self.vectors[text].tolist()

    def embed_batch(self, texts, memory_action=None):
        return [self.vectors[t].tolist() for t in texts]


class Mem0Store:
    """Mem0's open-source ``Memory`` (mem0ai) with its pgvector vector store in its own database on the same
    server (collection ``items``, HNSW index: Mem0's own, m and ef_construction pgvector's defaults 16 and 64,
    cosine), ``infer=False`` (each message stored as a memory, no LLM), tenant = Mem0's ``user_id``. Its
    embedder is replaced by the data set's precomputed vectors (Mem0's huggingface embedder needs
    sentence-transformers); its LLM is never called with ``infer=False``. Mem0's SQLite history lives in a
    temporary directory. Mem0 has no batch write with ``infer=False``: ``add`` of a list of messages stores them
    one by one, which is what ``ingest_batched`` measures (1,000 messages a call, of one tenant)."""

    name = "Mem0 (pgvector, infer=False)"

    def __init__(self, dsn: str, ds: Dataset, queries: dict | None = None) -> None:
        self.dsn = dsn
        self.vectors = LangGraphStore(dsn, ds, queries).vectors
        import tempfile

        self.tmp = Path(tempfile.mkdtemp(prefix="pgmem-bench-mem0-"))

    def memory(self, maxconn: int = 2):
        import os

        os.environ.setdefault("MEM0_TELEMETRY", "False")
        os.environ.setdefault("OPENAI_API_KEY", "unused-infer-false")
        from mem0 import Memory as Mem0Memory
        from mem0.configs.base import MemoryConfig

        cfg = MemoryConfig(**{
            "vector_store": {"provider": "pgvector", "config": {
                "connection_string": self.dsn, "collection_name": "items", "embedding_model_dims": DIMS,
                "hnsw": True, "minconn": 1, "maxconn": maxconn}},
            "embedder": {"provider": "openai", "config": {"model": "text-embedding-3-small", "embedding_dims": DIMS}},
            "history_db_path": str(self.tmp / f"history-{os.getpid()}.db")})
        m = Mem0Memory(cfg)
        m.embedding_model = _Mem0Embedder(self.vectors)
        return m

    def _add(self, m, tenant: str, texts: list[str]) -> None:
        m.add([{"role": "user", "content": t} for t in texts], user_id=tenant, infer=False)

    def load(self, ds: Dataset, batch: int = 1000, progress=None) -> dict:
        """``add`` of up to ``batch`` messages a call per tenant, with the HNSW index built after."""
        m = self.memory()
        m.vector_store.create_col()  # Mem0 makes its table and indexes on first use
        index = self._index_name()
        with _IndexLater(self.dsn, index) as later, Timer() as t:
            for tenant, rows in enumerate(ds.rows_by_tenant):
                for lo in range(0, len(rows), batch):
                    self._add(m, ds.tenants[tenant], [ds.contents[i] for i in rows[lo:lo + batch]])
                if progress:
                    progress(len(rows))
        index_s = later.build()
        self.analyze()
        return {"load_s": t.seconds, "index_s": index_s}

    def _index_name(self) -> str:
        with _connect(self.dsn, autocommit=True) as conn:
            return conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'items'"
                                " AND indexdef LIKE '%%USING hnsw%%'").fetchone()[0]

    def ingest_batched(self, ds: Dataset, extra_rows, batch: int = 1000, progress=None) -> float:
        m = self.memory()
        with Timer() as t:
            for tenant, rows in _by_tenant(ds, extra_rows).items():
                for lo in range(0, len(rows), batch):
                    self._add(m, ds.tenants[tenant], [ds.extra_contents[j] for j in rows[lo:lo + batch]])
                if progress:
                    progress(len(rows))
        return t.seconds

    def analyze(self) -> None:
        with _connect(self.dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE items")

    def add_one_session(self):
        m = self.memory()

        def add(ds: Dataset, j: int) -> None:
            self._add(m, ds.tenants[ds.extra_tenant_of[j]], [ds.extra_contents[j]])
        return add, lambda: None

    def disk_bytes(self) -> int:
        return _pg_bytes(self.dsn, ["items"])

    def client(self) -> Mem0Client:
        return Mem0Client(self)


class Mem0Client:
    def __init__(self, owner: Mem0Store) -> None:
        self.m = owner.memory(maxconn=1)

    def search(self, tenant: str, vec: np.ndarray, text: str, k: int) -> list[int]:
        res = self.m.search(text, top_k=k, filters={"user_id": tenant}, threshold=0.0)  # no score cut-off
        return [row_id(r["memory"]) for r in res["results"]]

    def close(self) -> None:
        pool = getattr(self.m.vector_store, "connection_pool", None)
        if pool is not None and hasattr(pool, "close"):
            pool.close()
