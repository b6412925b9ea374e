#!/usr/bin/env python3
"""Ingest: pgmem against raw pgvector, Chroma and LangGraph's PostgresStore (rows/s, HNSW build, disk size).

    python bench/ingest.py [--n 100000] [--quick] [--batched-rows 5000] [--single-rows 2000]
                           [--systems raw,pgmem,chroma,langgraph,adapter,mem0] [--data-dir /tmp/pgmem-bench/pgdata] [--out bench/out]

What it does, per system, on the data set of bench/common.py (same rows, same server, one run):
1. bulk load: the ``--n`` rows into an empty store (bench/systems.py ``load``): raw pgvector by one binary
   COPY into the bare table; pgmem by ``Memory.add_many`` per tenant (1,000 rows a call, acting as
   ``pgmem_gateway``); LangGraph by ``store.batch`` of 1,000 ``PutOp``s; Chroma by ``collection.add`` of
   5,000. The HNSW indexes of the PostgreSQL-based stores are then built in one pass (m=16,
   ef_construction=64, ``maintenance_work_mem`` 1GB): that is the "HNSW build" column.
2. batched ingest into the loaded, indexed store: ``--batched-rows`` new rows of the same tenant mix, the
   way each system batches (raw: one binary COPY; pgmem: ``add_many`` of 1,000 items a call, each naming its
   tenant, as a gateway's writer batches; LangGraph: ``store.batch`` of 1,000; Chroma: ``collection.add``).
   For pgmem, as many further rows by raw binary COPY straight into ``pgmem.memories`` (the same indexes and
   triggers, as the superuser: what its functions cost beyond its table; in ``PAIRS`` chunks interleaved with
   pgmem's own, so both sides meet the same machine and index), and as many again by ``add_many``
   per tenant (a client acting for one user: one call per tenant).
3. one-by-one ingest: ``--single-rows`` further new rows, each in a call and transaction of its own (raw:
   autocommit ``INSERT``; pgmem: ``Memory.add``; LangGraph: ``store.put``; Chroma: ``collection.add`` of one).
4. disk size: ``pg_total_relation_size`` of the store's tables (pgmem: memories, memory_vectors and the
   history it keeps of every write), or the size of Chroma's directory.

Output: a table on stdout, the ratios and targets of issue #6, ``OUT/ingest.csv`` and ``OUT/ingest.png``
(``ingest-quick.*`` with ``--quick``, ``ingest-<n>.*`` for another ``--n``). ``--quick``: 20,000 rows,
2,000 batched, 500 one-by-one. Databases ``bench_ingest_*`` are dropped and re-created.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

ALL_SYSTEMS = ("raw", "pgmem", "chroma", "langgraph", "adapter", "mem0")
PAIRS = 5  # pgmem batched against raw COPY into pgmem.memories: chunks per side, interleaved
PREFIX = "bench_ingest_"


@dataclass
class Row:
    system: str
    rows: int
    load_s: float
    index_s: float | None
    batched_rows: int
    batched_s: float
    single_rows: int
    single_s: float
    single_ms: tuple[float, float, float]
    disk_bytes: int
    total_rows: int

    @property
    def load_rps(self) -> float:
        return self.rows / self.load_s

    @property
    def batched_rps(self) -> float:
        return self.batched_rows / self.batched_s

    @property
    def single_rps(self) -> float:
        return self.single_rows / self.single_s


def targets(rows: list[Row], same_table_rps: float | None = None) -> list[tuple[str, bool, str]]:
    """Issue #6's ingest targets. ``same_table_rps``: raw binary COPY into pgmem.memories itself (the same
    indexes and triggers as pgmem's writes), next to raw pgvector's one-index table."""
    by = {r.system: r for r in rows}
    out = []
    p, raw = by.get("pgmem"), by.get("raw pgvector")
    if p and raw:
        ratio = p.batched_rps / raw.batched_rps
        out.append(("pgmem batched >= 0.8x raw binary COPY into raw pgvector's indexed table", ratio >= 0.8,
                    f"{ratio:.2f}x ({p.batched_rps:,.0f} vs {raw.batched_rps:,.0f} rows/s)"))
    if p and same_table_rps:
        ratio = p.batched_rps / same_table_rps
        out.append(("pgmem batched >= 0.8x raw binary COPY into pgmem.memories (same indexes and triggers)",
                    ratio >= 0.8, f"{ratio:.2f}x ({p.batched_rps:,.0f} vs {same_table_rps:,.0f} rows/s)"))
    if p:
        for peer in ("Chroma", "LangGraph PostgresStore", "raw pgvector"):
            o = by.get(peer)
            if o:
                ratio = p.batched_rps / o.single_rps
                out.append((f"pgmem batched >= 10x one-by-one of {peer}", ratio >= 10,
                            f"{ratio:.1f}x ({p.batched_rps:,.0f} vs {o.single_rps:,.0f} rows/s)"))
    return out


def write_png(path: Path, rows: list[Row], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    names = [r.system for r in rows]
    x = np.arange(len(rows))
    w = 0.27
    ax = axes[0]
    ax.bar(x - w, [r.load_rps for r in rows], w, label="bulk load (HNSW built after, except Chroma)")
    ax.bar(x, [r.batched_rps for r in rows], w, label="batched, into the indexed store")
    ax.bar(x + w, [r.single_rps for r in rows], w, label="one by one, into the indexed store")
    ax.set_yscale("log")
    ax.set_xticks(x, names, fontsize=9)
    ax.set_title("ingest, rows/s (log)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax = axes[1]
    ax.bar(x, [r.disk_bytes / r.total_rows for r in rows], 0.5, color="tab:gray")
    ax.set_xticks(x, names, fontsize=9)
    ax.set_title("disk, bytes per row (tables + indexes)")
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=None, help="rows of the bulk load (default 100,000; 20,000 with --quick)")
    ap.add_argument("--quick", action="store_true", help="20,000 rows, 2,000 batched, 500 one-by-one")
    ap.add_argument("--batched-rows", type=int, default=None, help="rows of the batched ingest (default 5,000)")
    ap.add_argument("--single-rows", type=int, default=None, help="rows of the one-by-one ingest (default 2,000)")
    ap.add_argument("--systems", default=",".join(ALL_SYSTEMS), help=f"comma-separated subset of {ALL_SYSTEMS}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", type=Path, default=common.DEFAULT_DATA_DIR, help="the embedded server's data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = ap.parse_args(argv)
    n = args.n or (20_000 if args.quick else 100_000)
    batched = args.batched_rows or (2000 if args.quick else 5000)
    single = args.single_rows or (500 if args.quick else 2000)
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(chosen) - set(ALL_SYSTEMS)
    if unknown:
        ap.error(f"unknown systems {sorted(unknown)}; choose from {ALL_SYSTEMS}")
    stem = "ingest-quick" if args.quick and args.n is None else "ingest" if n == 100_000 else f"ingest-{n}"

    import systems as sysmod
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    started = time.perf_counter()
    status = common.start_server(args.data_dir)
    # extra rows: one-by-one, batched, then (pgmem only) as many again for raw COPY into pgmem's own table and
    # as many for pgmem's per-tenant calls
    ds = common.make_dataset(n, args.seed, extra=single + 3 * batched)
    console.print(f"[bold]data[/bold]: {ds.describe()}; then {batched:,} rows batched and {single:,} one by one")
    version = common.server_version(common.dsn_for(status, "postgres"))
    for name, why in common.SKIPPED.items():
        console.print(f"[dim]skipped {name}: {why}[/dim]")
    single_rows = range(single)
    batched_rows = range(single, single + batched)
    same_table_rows = range(single + batched, single + 2 * batched)
    per_tenant_rows = range(single + 2 * batched, single + 3 * batched)
    same_table: dict[str, float] = {}

    def progress_bar():
        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=True)

    results: list[Row] = []
    schema = ""
    for key in chosen:
        if key == "raw":
            store = sysmod.RawStore(common.recreate_database(status, PREFIX + "raw"))
        elif key == "pgmem":
            store = sysmod.PgmemStore(common.recreate_database(status, PREFIX + "pgmem", vector=False))
        elif key == "chroma":
            store = sysmod.ChromaStore(args.data_dir.parent / "chroma-ingest")
        elif key == "adapter":
            store = sysmod.AdapterStore(common.recreate_database(status, PREFIX + "adapter", vector=False), ds)
        elif key == "mem0":
            store = sysmod.Mem0Store(common.recreate_database(status, PREFIX + "mem0"), ds)
        else:
            store = sysmod.LangGraphStore(common.recreate_database(status, PREFIX + "langgraph"), ds)
        with progress_bar() as prog:
            task = prog.add_task(f"{store.name}: bulk load", total=n)
            load = store.load(ds, progress=lambda k, t=task: prog.advance(t, k))
            if key == "pgmem":  # right after migrating: the commit of sql/ that was applied
                schema = common.pgmem_schema(store.dsn)
            task = prog.add_task(f"{store.name}: batched", total=batched)
            if key != "pgmem":
                batched_s = store.ingest_batched(ds, batched_rows, progress=lambda k, t=task: prog.advance(t, k))
            else:
                # The same rows' worth by raw binary COPY into pgmem's own table, side by side: both in PAIRS
                # chunks, alternating A B B A ..., so that a drift of the machine or of the growing index falls
                # on both sides alike (one after the other: 0.74x twice; interleaved: 0.87x, docs/benchmarks.md).
                task2 = prog.add_task("raw COPY into pgmem.memories", total=batched)
                batched_s = same_table["s"] = 0.0
                for i in range(PAIRS):
                    mine, base = batched_rows[i::PAIRS], same_table_rows[i::PAIRS]
                    for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                        if side == 0:
                            batched_s += store.ingest_batched(ds, mine, progress=lambda k, t=task: prog.advance(t, k))
                        else:
                            same_table["s"] += store.copy_batched(ds, base, progress=lambda k, t=task2: prog.advance(t, k))
                same_table["rows_per_s"] = batched / same_table["s"]
                task = prog.add_task("pgmem: batched per tenant", total=batched)
                same_table["per_tenant_rows_per_s"] = batched / store.ingest_per_tenant(
                    ds, per_tenant_rows, progress=lambda k, t=task: prog.advance(t, k))
            task = prog.add_task(f"{store.name}: one by one", total=single)
            add, close = store.add_one_session()
            lat = []
            t0 = time.perf_counter()
            try:
                for j in single_rows:
                    t1 = time.perf_counter()
                    add(ds, j)
                    lat.append((time.perf_counter() - t1) * 1000)
                    prog.advance(task)
            finally:
                single_s = time.perf_counter() - t0
                close()
        if hasattr(store, "analyze"):
            store.analyze()
        row = Row(store.name, n, load["load_s"], load["index_s"], batched, batched_s, single, single_s,
                  common.percentiles(lat), store.disk_bytes(),
                  # pgmem's table also holds the rows of its two extra baselines
                  n + batched + single + (2 * batched if key == "pgmem" else 0))
        results.append(row)
        console.print(f"{store.name}: bulk {row.load_rps:,.0f} rows/s, HNSW build {common.fmt(row.index_s, 1)} s, "
                      f"batched {row.batched_rps:,.0f} rows/s, one by one {row.single_rps:,.0f} rows/s, "
                      f"{common.human_bytes(row.disk_bytes)}")

    title = (f"Ingest, {n:,} rows + {batched:,} batched + {single:,} one by one "
             f"({version}, {common.machine()['cores']} cores)")
    t = Table(title=title)
    for col in ("system", "bulk rows/s", "HNSW build s", "batched rows/s", "one-by-one rows/s",
                "one-by-one p50 ms", "p99 ms", "disk", "bytes/row"):
        t.add_column(col, justify="left" if col == "system" else "right")
    for r in results:
        t.add_row(r.system, f"{r.load_rps:,.0f}", common.fmt(r.index_s, 1), f"{r.batched_rps:,.0f}",
                  f"{r.single_rps:,.0f}", common.fmt(r.single_ms[0]), common.fmt(r.single_ms[2]),
                  common.human_bytes(r.disk_bytes), f"{r.disk_bytes / r.total_rows:,.0f}")
    console.print(t)
    by = {r.system: r for r in results}
    if "pgmem" in by and "raw pgvector" in by:
        p, raw = by["pgmem"], by["raw pgvector"]
        rt = Table(title="pgmem / raw pgvector")
        for col in ("bulk", "HNSW build", "batched", "one by one", "disk"):
            rt.add_column(col, justify="right")
        rt.add_row(f"{p.load_rps / raw.load_rps:.2f}x", f"{p.index_s / raw.index_s:.2f}x",
                   f"{p.batched_rps / raw.batched_rps:.2f}x", f"{p.single_rps / raw.single_rps:.2f}x",
                   f"{p.disk_bytes / raw.disk_bytes:.2f}x")
        console.print(rt)
    if same_table:
        console.print(f"pgmem batched: {by['pgmem'].batched_rps:,.0f} rows/s in calls naming many users (a gateway), "
                      f"{same_table['per_tenant_rows_per_s']:,.0f} rows/s in calls per tenant; raw binary COPY into "
                      f"pgmem.memories: {same_table['rows_per_s']:,.0f} rows/s")
    tt = Table(title="Targets (issue #6)")
    for col in ("target", "met", "measured"):
        tt.add_column(col)
    for name, ok, detail in targets(results, same_table.get("rows_per_s")):
        tt.add_row(name, "yes" if ok else "NO", detail)
    console.print(tt)

    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / f"{stem}.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["system", "bulk_rows", "bulk_s", "bulk_rows_per_s", "hnsw_build_s", "batched_rows", "batched_s",
                    "batched_rows_per_s", "single_rows", "single_s", "single_rows_per_s", "single_p50_ms",
                    "single_p95_ms", "single_p99_ms", "disk_bytes", "total_rows", "bytes_per_row"])
        for r in results:
            w.writerow([r.system, r.rows, f"{r.load_s:.2f}", f"{r.load_rps:.1f}",
                        "" if r.index_s is None else f"{r.index_s:.2f}", r.batched_rows, f"{r.batched_s:.2f}",
                        f"{r.batched_rps:.1f}", r.single_rows, f"{r.single_s:.2f}", f"{r.single_rps:.1f}",
                        *(f"{x:.3f}" for x in r.single_ms), r.disk_bytes, r.total_rows,
                        f"{r.disk_bytes / r.total_rows:.0f}"])
        meta = {"data": ds.describe(), "server": version, **common.machine(),
                "chromadb": common.package_version("chromadb"),
                "langgraph-checkpoint-postgres": common.package_version("langgraph-checkpoint-postgres"),
                "elapsed_s": f"{time.perf_counter() - started:.0f}"}
        if schema:
            meta["pgmem_schema"] = schema
        if same_table:
            meta["raw_copy_into_pgmem_memories_rows_per_s"] = f"{same_table['rows_per_s']:.1f}"
            meta["pgmem_batched_per_tenant_calls_rows_per_s"] = f"{same_table['per_tenant_rows_per_s']:.1f}"
        for k, v in meta.items():
            w.writerow([f"# {k}", v])
    write_png(args.out / f"{stem}.png", results, title)
    console.print(f"wrote {args.out / (stem + '.csv')} and {args.out / (stem + '.png')}; "
                  f"{time.perf_counter() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
