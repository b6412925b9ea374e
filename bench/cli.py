"""How fast the command line answers, as whole processes: ``pgmem search`` with each embedder and ``pgmem mcp``
until it answers ``initialize`` over stdio.

    python bench/cli.py [--runs 10]

It starts a private embedded server (a temporary data dir, stopped at the end), adds one memory, starts the
stub OpenAI-compatible embedding server of the tests (tests/support/embedding_server.py, on 127.0.0.1) and then runs,
in rounds that interleave the cases (one warm-up round first, not counted):

- ``python -c pass`` and ``pgmem --version``: the floor (interpreter; interpreter + CLI imports);
- ``pgmem search --mode text``: no embedder at all;
- ``pgmem search`` with the default embedder (all-MiniLM-L6-v2 in numpy), with the HTTP embedder
  (``PGMEM_EMBEDDER=http`` against the stub server), and with ``PGMEM_EMBEDDER=sentence-transformers``
  (torch: the embedder the CLI used before, when that extra is installed);
- ``pgmem mcp`` until its answer to ``initialize``, with the default and the sentence-transformers embedder.

Prints p50/min/max seconds per case and the p50 ratios against ``pgmem --version`` and against the same case
with sentence-transformers. Targets (docs/benchmarks.md): search p50 <= 1.5 s local, <= 0.8 s over HTTP,
mcp ready <= 2 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PGMEM = [sys.executable, "-m", "pgmem.cli"]
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench-cli", "version": "0"}}})


def run_once(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return took


def mcp_ready(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning ``pgmem mcp`` to reading its answer to ``initialize``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write(INITIALIZE + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        took = time.perf_counter() - t0
        if '"result"' not in line:
            raise SystemExit(f"pgmem mcp did not answer initialize: {line!r} {proc.stderr.read()[-500:]}")
        return took
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="counted runs per case (after one warm-up)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="pgmem-bench-cli-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PGMEM_", "OPENAI_"))}
    base.update(PGMEM_DATA_DIR=str(tmp / "pgdata"), PGMEM_CONFIG=os.devnull, PGMEM_USER="alice",
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    port = free_port()
    stub = subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "embedding_server.py"), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_once(PGMEM + ["server", "start"], base)
        run_once(PGMEM + ["add", "Alice prefers window seats on long flights"], base)
        http = dict(base, PGMEM_EMBEDDER="http", PGMEM_EMBED_MODEL="sentence-transformers/all-MiniLM-L6-v2",
                    PGMEM_EMBED_DIMS="384", PGMEM_EMBED_URL=f"http://127.0.0.1:{port}/v1", PGMEM_EMBED_API_KEY="test-key")
        st = dict(base, PGMEM_EMBEDDER="sentence-transformers")
        search = PGMEM + ["search", "where does Alice like to sit?"]
        mcp = PGMEM + ["mcp"]
        cases = [
            ("python -c pass", lambda: run_once([sys.executable, "-c", "pass"], base)),
            ("pgmem --version", lambda: run_once(PGMEM + ["--version"], base)),
            ("search --mode text", lambda: run_once(search + ["--mode", "text"], base)),
            ("search, numpy MiniLM", lambda: run_once(search, base)),
            ("search, HTTP embedder", lambda: run_once(search, http)),
            ("mcp ready, numpy MiniLM", lambda: mcp_ready(mcp, base)),
        ]
        if importlib.util.find_spec("sentence_transformers") is not None:
            cases += [("search, sentence-transformers", lambda: run_once(search, st)),
                      ("mcp ready, sentence-transformers", lambda: mcp_ready(mcp, st))]
        deadline = time.time() + 120
        while time.time() < deadline:  # the stub server loads its model
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.2)
        times: dict[str, list[float]] = {label: [] for label, _ in cases}
        for round_no in range(args.runs + 1):
            for label, fn in cases:
                took = fn()
                if round_no:  # round 0 warms caches up
                    times[label].append(took)
        p50 = {label: statistics.median(ts) for label, ts in times.items()}
        floor = p50["pgmem --version"]
        before = {"search": p50.get("search, sentence-transformers"), "mcp": p50.get("mcp ready, sentence-transformers")}
        print(f"{args.runs} runs per case after one warm-up round, {os.cpu_count()} cores")
        print(f"{'case':34} {'p50 s':>7} {'min s':>7} {'max s':>7} {'x --version':>12} {'x sent-tr':>10}")
        for label, ts in times.items():
            ref = before["mcp" if label.startswith("mcp") else "search"]
            vs = f"{p50[label] / ref:10.2f}" if ref and not label.startswith(("python", "pgmem --", "search --")) \
                else f"{'':>10}"
            print(f"{label:34} {p50[label]:7.3f} {min(ts):7.3f} {max(ts):7.3f} {p50[label] / floor:12.2f} {vs}")
    finally:
        stub.terminate()
        stub.wait(10)
        subprocess.run(PGMEM + ["server", "stop"], env=base, cwd=ROOT, capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
