"""What bench/search.py and bench/ingest.py share: the synthetic data set, the embedded server, latency
statistics and output helpers. The adapters of the systems compared live in bench/systems.py.

The data set (``make_dataset``) is deterministic for a given ``(n, seed)``:

- vectors: 384-dimension unit vectors from a Gaussian mixture on the sphere: 500 centres drawn uniformly on
  the sphere; a row is ``normalise(centre + s * g / sqrt(384))`` with ``g`` standard normal and a spread ``s``
  per centre drawn uniformly in [0.6, 1.2] (cosine to its centre about 0.64-0.86; rows of one centre have
  cosine about 0.4-0.75 to each other, rows of different centres about 0);
- tenants: one "large" tenant holding 30% of the rows, five "medium" tenants holding 1% each, and "small"
  tenants of 30 rows each for the rest (2,166 of them at 100k rows; leftover rows go to the large tenant);
  rows are dealt to tenants at random, so every tenant's rows spread over many centres;
- content: ``"m<row>: "`` followed by 10 words, 7 of them from its centre's 12 topic words (so that
  full-text indexing does real work and the content is unique per row);
- ``extra`` rows (default 2,000) drawn the same way but outside the N, for one-by-one ingest.

Queries (``make_queries``): for a tenant of each size class, a fresh point of the mixture around the centre of
one of that tenant's rows (a question about something the tenant knows). Ground truth: exact cosine top-k
over that tenant's rows, computed in numpy.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DIMS = 384
CENTRES = 500
K = 10
CLASSES = ("large", "medium", "small")
SMALL_ROWS = 30
DEFAULT_DATA_DIR = Path(os.environ.get("PGMEM_BENCH_DATA_DIR", "/tmp/pgmem-bench/pgdata"))
# Settings of the benchmark's own embedded server, identical for every PostgreSQL-based system: a buffer
# cache that holds every database of the run (about 1.5 GB at 100k rows), and fewer checkpoints during loads.
SERVER_SETTINGS = {"shared_buffers": "2GB", "max_wal_size": "8GB"}


# Systems of issue #6 that the benchmark does not run, and why (printed by both scripts).
SKIPPED = {
    "hermes-memory-pgvector": "no package of that name in the PyPI index this machine sees",
}

# --------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------
@dataclass
class Dataset:
    n: int
    seed: int
    emb: np.ndarray            # (n, DIMS) float32, unit rows
    tenant_of: np.ndarray      # (n,) int: index into tenants
    tenants: list[str]         # tenant names
    tenant_class: list[str]    # size class of each tenant ("large", "medium", "small")
    contents: list[str]        # (n,)
    centre_of: np.ndarray      # (n,) int: the centre a row was drawn around
    centres: np.ndarray        # (CENTRES, DIMS)
    spread: np.ndarray         # (CENTRES,)
    extra_emb: np.ndarray      # (extra, DIMS): rows outside the N, for one-by-one ingest
    extra_tenant_of: np.ndarray
    extra_contents: list[str]
    rows_by_tenant: list[np.ndarray] = field(default_factory=list)

    def rows_of(self, tenant: int) -> np.ndarray:
        return self.rows_by_tenant[tenant]

    def tenants_of_class(self, cls: str) -> list[int]:
        return [t for t, c in enumerate(self.tenant_class) if c == cls]

    def class_rows(self) -> dict[str, int]:
        """Rows per tenant of each class (the smallest tenant of the class)."""
        return {c: min(len(self.rows_of(t)) for t in self.tenants_of_class(c)) for c in CLASSES}

    def describe(self) -> str:
        counts = {c: len(self.tenants_of_class(c)) for c in CLASSES}
        rows = self.class_rows()
        return (f"{self.n:,} rows x {DIMS} dims, {len(self.tenants):,} tenants: {counts['large']} large "
                f"({rows['large']:,} rows), {counts['medium']} medium ({rows['medium']:,} rows each), "
                f"{counts['small']:,} small ({rows['small']} rows each); {CENTRES} centres, seed {self.seed}")


def _vocabulary(rng: np.random.Generator, size: int = 3000) -> list[str]:
    syll = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "va", "de", "bo", "ri", "sa", "te", "nu", "gar",
            "len", "mor", "pel", "tis", "wan", "zen", "qua", "fio"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syll, size=int(rng.integers(2, 4)))))
    return sorted(words)


def _points(rng: np.random.Generator, centres: np.ndarray, spread: np.ndarray, which: np.ndarray) -> np.ndarray:
    out = np.empty((len(which), centres.shape[1]), dtype=np.float32)
    step = 50_000
    for lo in range(0, len(which), step):
        w = which[lo:lo + step]
        g = rng.standard_normal((len(w), centres.shape[1]), dtype=np.float32)
        p = centres[w] + g * (spread[w, None] / np.sqrt(centres.shape[1])).astype(np.float32)
        out[lo:lo + step] = p / np.linalg.norm(p, axis=1, keepdims=True)
    return out


def make_dataset(n: int = 100_000, seed: int = 0, extra: int = 2000) -> Dataset:
    """The data set described in the module docstring; deterministic for ``(n, seed, extra)``."""
    if n < 2000:
        raise ValueError("n must be at least 2000")
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((CENTRES, DIMS)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    spread = rng.uniform(0.6, 1.2, CENTRES).astype(np.float32)
    centre_of = rng.integers(0, CENTRES, n)
    emb = _points(rng, centres, spread, centre_of)

    # tenants: 1 x 30%, 5 x 1%, the rest in tenants of 30 rows (leftover rows to the large tenant)
    large, medium = int(0.30 * n), int(0.01 * n)
    n_small = (n - large - 5 * medium) // SMALL_ROWS
    large = n - 5 * medium - n_small * SMALL_ROWS
    tenants = ["large-0"] + [f"medium-{i}" for i in range(5)] + [f"small-{i:05d}" for i in range(n_small)]
    tenant_class = ["large"] + ["medium"] * 5 + ["small"] * n_small
    sizes = [large] + [medium] * 5 + [SMALL_ROWS] * n_small
    labels = np.repeat(np.arange(len(tenants)), sizes)
    tenant_of = labels[rng.permutation(n)]

    vocab = _vocabulary(rng)
    topic_words = rng.integers(0, len(vocab), (CENTRES, 12))
    topic_pick = rng.integers(0, 12, (n + extra, 7))
    general_pick = rng.integers(0, len(vocab), (n + extra, 3))

    extra_centre = rng.integers(0, CENTRES, extra)
    all_centres = np.concatenate([centre_of, extra_centre])
    contents = []
    for i in range(n + extra):
        words = [vocab[w] for w in topic_words[all_centres[i], topic_pick[i]]] + [vocab[w] for w in general_pick[i]]
        contents.append(f"m{i}: " + " ".join(words))
    extra_emb = _points(rng, centres, spread, extra_centre)
    extra_tenant_of = tenant_of[rng.integers(0, n, extra)]  # the same tenant mix as the data

    order = np.argsort(tenant_of, kind="stable")
    sorted_t = tenant_of[order]
    starts = np.searchsorted(sorted_t, np.arange(len(tenants)))
    rows_by_tenant = [order[starts[t]:starts[t] + sizes[t]] for t in range(len(tenants))]
    return Dataset(n, seed, emb, tenant_of, tenants, tenant_class, contents[:n], centre_of, centres, spread,
                   extra_emb, extra_tenant_of, contents[n:], rows_by_tenant)


def row_id(content: str) -> int:
    """The row number of a content text (``"m123: ..."`` -> 123)."""
    return int(content[1:content.index(":")])


@dataclass
class QuerySet:
    cls: str
    tenants: list[int]     # tenant index per query
    vectors: np.ndarray    # (q, DIMS) float32
    truth: list[np.ndarray]  # exact top-k row numbers per query
    texts: list[str]       # a unique text per query (for systems that embed query texts)


def make_queries(ds: Dataset, per_class: int, k: int = K, seed: int = 1) -> dict[str, QuerySet]:
    """``per_class`` queries per size class; the medium and small tenants queried are drawn at random."""
    rng = np.random.default_rng((ds.seed, seed))
    out = {}
    for cls in CLASSES:
        pool = ds.tenants_of_class(cls)
        tenants = [pool[int(i)] for i in rng.integers(0, len(pool), per_class)]
        centres = np.array([ds.centre_of[rng.choice(ds.rows_of(t))] for t in tenants])
        vecs = _points(rng, ds.centres, ds.spread, centres)
        truth: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * per_class
        for t in set(tenants):
            idx = [i for i, u in enumerate(tenants) if u == t]
            rows = ds.rows_of(t)
            sims = ds.emb[rows] @ vecs[idx].T  # (rows, queries of this tenant)
            for col, i in enumerate(idx):
                s = sims[:, col]
                top = np.argpartition(-s, k)[:k] if len(rows) > k else np.arange(len(rows))
                truth[i] = rows[top[np.argsort(-s[top])]]
        texts = [f"query {cls} {i}" for i in range(per_class)]
        out[cls] = QuerySet(cls, tenants, vecs, truth, texts)
    return out


def recall(found: list[int], truth: np.ndarray) -> float:
    """Share of the exact top-k (``truth``) among the rows returned."""
    return len(set(found) & {int(x) for x in truth}) / len(truth)


# --------------------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------------------
def start_server(data_dir: Path = DEFAULT_DATA_DIR):
    """Start the benchmark's embedded server in ``data_dir`` with SERVER_SETTINGS (restarting it once when a
    setting differs). Returns pgmem's ServerStatus."""
    import psycopg

    from pgmem import embedded

    st = embedded.start(data_dir)
    with psycopg.connect(st.url("postgres"), autocommit=True) as conn:
        changed = False
        for name, value in SERVER_SETTINGS.items():
            current = conn.execute("SELECT setting, unit FROM pg_settings WHERE name = %s", (name,)).fetchone()
            wanted = conn.execute("SELECT pg_size_bytes(%s)", (value,)).fetchone()[0]
            unit_bytes = {"8kB": 8192, "MB": 1 << 20, "kB": 1024}.get(current[1], 1)
            if int(current[0]) * unit_bytes != wanted:
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
                changed = True
    if changed:
        embedded.stop(data_dir)
        st = embedded.start(data_dir)
    return st


def dsn_for(status, dbname: str) -> str:
    return f"postgresql://postgres@/{dbname}?host={status.socket_dir}"


def recreate_database(status, dbname: str, vector: bool = True) -> str:
    """Drop (terminating its sessions) and create ``dbname`` (with the vector extension unless ``vector`` is
    False); its DSN."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn_for(status, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    if vector:
        with psycopg.connect(dsn_for(status, dbname), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
    return dsn_for(status, dbname)


def database_exists(status, dbname: str) -> bool:
    import psycopg

    with psycopg.connect(dsn_for(status, "postgres"), autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone() is not None


# --------------------------------------------------------------------------------------------------------
# Statistics and output
# --------------------------------------------------------------------------------------------------------
def percentiles(ms: list[float]) -> tuple[float, float, float]:
    """p50, p95, p99 of latencies in ms (NaN for none)."""
    if not ms:
        return (float("nan"),) * 3
    a = np.asarray(ms)
    return tuple(float(x) for x in np.percentile(a, [50, 95, 99]))


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def human_bytes(n: float | None) -> str:
    if n is None or math.isnan(n):
        return "-"
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit in ("B", "kB") else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def machine() -> dict[str, str]:
    """What this run ran on: cores, memory, CPU model, PostgreSQL and package versions are added by callers."""
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    cpu = platform.processor()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cores": str(os.cpu_count()), "memory": mem, "cpu": cpu, "python": platform.python_version()}


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def server_version(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        pg = conn.execute("SHOW server_version").fetchone()[0]
        vec = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        if vec is None:
            vec = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return f"PostgreSQL {pg}, pgvector {vec[0] if vec else '?'}"


def pgmem_schema(dsn: str) -> str:
    """Which pgmem this database runs: the migrations applied, and the git commit of the sql/ they came from
    ('+ uncommitted changes' when sql/ differs from that commit)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("SELECT migration_id FROM _yoyo_migration ORDER BY applied_at_utc")]
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "sql"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head, dirty = "?", ""
    return f"{', '.join(ids)} (sql/ at {head}{' + uncommitted changes' if dirty else ''})"


def fmt(x: float | None, digits: int = 2) -> str:
    if x is None or math.isnan(x):
        return "-"
    return f"{x:,.{digits}f}"


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0


def rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
