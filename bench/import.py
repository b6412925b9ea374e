#!/usr/bin/env python3
"""Import speed end to end: ``pgmem import`` run as a process, this code against a baseline commit, in one run.

    python bench/import.py --data ../shared/data/locomo/locomo-dev.json [--baseline REF] [--lines 500]
        [--locomo-conversations N] [--batch-sizes 16,32,64,128] [--dsn DSN] [--out bench/out]

What it does
1. Writes two input files into a private temporary directory (0700, files 0600; removed at the end), made
   at run time from the LoCoMo file given (never stored in the repository):
   (a) ``turns.jsonl``: the first ``--lines`` turns of the file as JSONL memories, one line each:
       ``{"user": sample_id, "session": "session_N", "content": "Speaker: text", "metadata": {"speaker",
       "dia_id"}, "timestamp": the session's date}``;
   (b) ``locomo.json``: the first ``--locomo-conversations`` conversations (default all) as a LoCoMo file.
2. Extracts the baseline commit (``--baseline``, default the commit before the import changes) with
   ``git archive`` into that directory.
3. For each code (baseline, this checkout) and each file: a fresh database migrated by that code's own
   migrations, then ``pgmem import FILE`` as a
   process (``--json``, acting as ``pgmem_gateway``, the default space and embedder: all-MiniLM-L6-v2 in
   numpy, contextual vectors on), twice: the first run imports the file, the second finds every record
   stored (the duplicate re-import). Reported: memories/s of the import's own clock (``seconds`` of its
   summary) and of the whole process (start-up and model load included).
4. The embedder's own rate on this machine, in the same run: all-MiniLM-L6-v2 on the first
   ``--embed-sample`` distinct texts a first import of the JSONL file embeds (contents, sentences, contexts),
   in one call, for each ``--batch-sizes`` value: the bound on any import with these vectors.
``--embedder pgmem.testing:HashEmbedder`` runs the imports with the tests' hashing embedder instead (fast), to
measure the duplicate re-import of large files: a second run embeds nothing with either embedder. The
machine's load average (1 minute) is printed with every figure. Output: a table on stdout and
``OUT/import.csv``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "pgmem_bench_import"
BASELINE = "92b822e"  # the code before skipping stored content and one embedding per distinct text


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def write_inputs(src: Path, tmp: Path, lines: int, conversations: int | None) -> tuple[Path, Path, list]:
    from pgmem import importer

    data = json.loads(src.read_text(encoding="utf-8"))
    jsonl = tmp / "turns.jsonl"
    records = [r for r in importer.read_locomo(src) if isinstance(r, importer.Record)][:lines]
    fd = os.open(jsonl, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps({"user": r.user_id, "session": r.session_id, "content": r.content,
                                 "metadata": {"speaker": r.metadata.get("speaker"), "dia_id": r.metadata.get("dia_id")},
                                 "timestamp": r.created_at.isoformat() if r.created_at else None}) + "\n")
    locomo = tmp / "locomo.json"
    fd = os.open(locomo, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "w", encoding="utf-8") as fh:
        json.dump(data[:conversations] if conversations else data, fh)
    return jsonl, locomo, records


def extract(ref: str, dest: Path) -> Path:
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "pgmem", "sql"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def fresh(dsn: str | None, code: Path, database: str) -> str:
    """A new database, migrated by the migrations of the code at ``code`` (the baseline runs on its own schema)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import recall_locomo as rl

    url = rl.fresh_database(dsn, database)
    # cwd: ``python -c`` puts the working directory first on sys.path, before PYTHONPATH (run from the repository's
    # root, both codes would otherwise import this checkout's package).
    subprocess.run([sys.executable, "-c", "import sys; from pgmem import migrations; migrations.migrate(sys.argv[1])",
                    url], env={**os.environ, "PYTHONPATH": str(code)}, check=True, capture_output=True, cwd=str(code))
    return url


RUN_CLI = "import sys; from pgmem.cli import main; sys.argv[0] = 'pgmem'; sys.exit(main())"
# The function the command calls, in a process of its own (so the baseline's package is the one imported):
# import_file as the gateway, the summary as JSON.
RUN_FN = """
import json, sys
from pgmem import Memory, importer
with Memory(sys.argv[1], role="pgmem_gateway") as m:
    s = importer.import_file(m, sys.argv[2], progress=lambda n: None)
print(json.dumps({"rows": s.rows, "added": s.added, "duplicates": s.duplicates,
                  "failures": [f.where for f in s.failures], "seconds": s.seconds}))
"""


def run_import(code: Path, dsn: str, path: Path, embedder: str | None = None, via: str = "cli") -> dict:
    """``pgmem import PATH --json`` with the package at ``code`` (``embedder``: ``PGMEM_EMBEDDER`` for it): the
    summary, plus ``wall`` seconds."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    if embedder:
        env["PGMEM_EMBEDDER"] = embedder
    cmd = [sys.executable, "-c", RUN_CLI, "import", str(path), "--dsn", dsn, "--role", "pgmem_gateway", "--json"] \
        if via == "cli" else [sys.executable, "-c", RUN_FN, dsn, str(path)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(code))  # cwd: see fresh()
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1) or "{" not in proc.stdout:
        sys.exit(f"pgmem import failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    out["wall"] = wall
    return out


def embed_rate(records: list, batch_sizes: list[int], sample: int) -> list[tuple[int, int, float]]:
    """(batch size, texts, texts/s) of MiniLMEmbedder on the first ``sample`` distinct texts a first import of
    ``records`` embeds, in one call."""
    from pgmem.validation import extra_texts
    from pgmem.embedders import MiniLMEmbedder

    texts, last = [], {}
    for r in records:
        key = (r.user_id, r.session_id)
        texts.append(r.content)
        texts += [t for _, t in extra_texts(r.content, r.metadata, last.get(key))]
        last[key] = r.content
    texts = list(dict.fromkeys(texts))[:sample]
    MiniLMEmbedder().embed(["warm-up"])
    out = []
    for bs in batch_sizes:
        e = MiniLMEmbedder(batch_size=bs, max_batch_tokens=max(4096, 64 * bs))
        t0 = time.perf_counter()
        e.embed(texts)
        out.append((bs, len(texts), len(texts) / (time.perf_counter() - t0)))
        print(f"  embedder batch_size {bs}: {out[-1][2]:.0f} texts/s on {len(texts)} texts (load {load()})", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="LoCoMo JSON file (e.g. locomo-dev.json)")
    ap.add_argument("--baseline", default=BASELINE, help=f"git commit of the code to compare with (default {BASELINE})")
    ap.add_argument("--lines", type=int, default=500, help="JSONL lines (LoCoMo turns)")
    ap.add_argument("--locomo-conversations", type=int, default=None, metavar="N", help="default: all")
    ap.add_argument("--batch-sizes", default="16,32,64,128", help="embedder batch sizes to time")
    ap.add_argument("--embed-sample", type=int, default=600, help="texts timed per embedder batch size")
    ap.add_argument("--embedder", help="PGMEM_EMBEDDER for the imports (e.g. pgmem.testing:HashEmbedder, to "
                                       "measure the duplicate re-import of large files without waiting for the model)")
    ap.add_argument("--via", choices=("cli", "function"), default="cli",
                    help="cli: `pgmem import` as a process; function: importer.import_file in a process of its own")
    ap.add_argument("--skip-locomo", action="store_true", help="only the JSONL file")
    ap.add_argument("--dsn", help="postgresql:// URL of a server whose user may CREATE DATABASE (default: embedded)")
    ap.add_argument("--database", default=DATABASE, help=f"database dropped and re-created (default {DATABASE})")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="pgmem-bench-import-"))
    rows = []
    try:
        jsonl, locomo, records = write_inputs(args.data, tmp, args.lines, args.locomo_conversations)
        codes = {"baseline " + args.baseline: extract(args.baseline, tmp / "baseline"), "this code": ROOT}
        print(f"load average {load()} at start; {len(records)} JSONL lines; baseline {args.baseline}", flush=True)
        rates = embed_rate(records, [int(b) for b in args.batch_sizes.split(",")], args.embed_sample) \
            if args.embed_sample > 0 else []
        files = [("jsonl", jsonl)] + ([] if args.skip_locomo else [("locomo", locomo)])
        for kind, path in files:
            for label, code in codes.items():
                dsn = fresh(args.dsn, code, args.database)
                for run in ("first", "again"):
                    s = run_import(code, dsn, path, args.embedder, args.via)
                    row = {"file": kind, "code": label, "run": run, "rows": s["rows"], "added": s["added"],
                           "duplicates": s["duplicates"], "failures": len(s["failures"]),
                           "seconds": s["seconds"], "rows_per_s": s["rows"] / s["seconds"] if s["seconds"] else 0.0,
                           "wall_s": round(s["wall"], 2), "rows_per_s_wall": s["rows"] / s["wall"], "load": load()}
                    rows.append(row)
                    print(f"  {kind:6s} {label:18s} {run:5s}: {row['rows']} rows ({row['added']} added, "
                          f"{row['duplicates']} duplicates) in {row['seconds']:.1f} s = {row['rows_per_s']:.1f} rows/s "
                          f"(process {row['wall_s']:.1f} s = {row['rows_per_s_wall']:.1f} rows/s; load {row['load']})",
                          flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    by = {(r["file"], r["code"], r["run"]): r for r in rows}
    base = "baseline " + args.baseline
    print("\n| file | run | baseline rows/s | this code rows/s | ratio | process rows/s (baseline / this) |")
    print("|---|---|---|---|---|---|")
    for kind in sorted({r["file"] for r in rows}):
        for run in ("first", "again"):
            b, n = by[(kind, base, run)], by[(kind, "this code", run)]
            print(f"| {kind} | {run} | {b['rows_per_s']:.1f} | {n['rows_per_s']:.1f} | "
                  f"{n['rows_per_s'] / b['rows_per_s']:.1f}x | {b['rows_per_s_wall']:.1f} / {n['rows_per_s_wall']:.1f} |")
    if rates:
        best = max(rates, key=lambda x: x[2])
        print(f"embedder alone: {', '.join(f'batch {b}: {r:.0f} texts/s' for b, _, r in rates)} (best {best[0]})")
    runtime = os.environ.get("PGMEM_EMBED_RUNTIME")
    default = ("the default (all-MiniLM-L6-v2, numpy)" if not runtime else
               f"all-MiniLM-L6-v2, PGMEM_EMBED_RUNTIME={runtime} (a baseline without that setting runs numpy)")
    print(f"embedder of the imports: {args.embedder or default}; "
          f"load average now {load()}")
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "import.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.out / 'import.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
