"""Embedding speed on this machine: pgmem's numpy all-MiniLM-L6-v2 against sentence-transformers (torch), same
texts, same process, same run.

    python bench/embed.py --data ../shared/data/locomo/locomo-dev.json [--texts 1000] [--repeat 3]

Cases: one text at a time (a query: what search and a CLI call pay), and batches of the whole list (what import
pays). Prints ms per text (best of ``--repeat`` rounds that interleave the cases, after a warm-up) and each case's ratio against
sentence-transformers in the same run, plus load time (weights and tokenizer, in this process) and the worst
cosine between the two implementations' vectors. Needs ``pip install -e '.[local,sentence-transformers]'``.
With the ``onnx`` extra installed, a case ``onnxruntime batch 32`` runs the same embedder on onnxruntime
(``MiniLMEmbedder(runtime="onnx")``, pgmem/embedders/bert_onnx.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from minilm_reference import locomo_turns  # noqa: E402


def per_text_ms(fn, texts: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(texts)
        best = min(best, time.perf_counter() - t0)
    return best * 1000 / len(texts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/locomo/locomo-dev.json"))
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--single", type=int, default=100, help="texts embedded one at a time")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    texts = locomo_turns(args.data, args.texts)

    from pgmem.embedders import MiniLMEmbedder, SentenceTransformerEmbedder

    t0 = time.perf_counter()
    numpy_emb = MiniLMEmbedder()
    numpy_emb.embed(["warm up"])
    load_np = time.perf_counter() - t0
    t0 = time.perf_counter()
    st_emb = SentenceTransformerEmbedder()
    st_emb.embed(["warm up"])
    load_st = time.perf_counter() - t0

    single = texts[:args.single]
    enc = numpy_emb._encoder()

    def unsorted(ts):  # the same batches of 32 without sorting by length: what padding costs
        ids = enc.token_ids(ts)
        return np.concatenate([enc.forward(ids[i:i + 32]) for i in range(0, len(ids), 32)])

    cases = [("sentence-transformers", st_emb.embed, st_emb), ("numpy batch 32", numpy_emb.embed, numpy_emb),
             ("numpy batch 8", MiniLMEmbedder(batch_size=8).embed, None),
             ("numpy batch 128", MiniLMEmbedder(batch_size=128).embed, None),
             ("numpy unsorted 32", unsorted, None)]
    onnx_emb = None
    try:
        import onnxruntime  # noqa: F401

        t0 = time.perf_counter()
        onnx_emb = MiniLMEmbedder(runtime="onnx")
        onnx_emb.embed(["warm up"])
        print(f"onnxruntime: load and first text {(time.perf_counter() - t0) * 1000:.0f} ms")
        cases.append(("onnxruntime batch 32", onnx_emb.embed, onnx_emb))
    except ImportError:
        print("onnxruntime case skipped: pip install -e '.[onnx]' to run it")
    best: dict[str, list[float]] = {label: [float("inf"), float("inf")] for label, _, _ in cases}
    for _ in range(args.repeat):  # rounds interleave the cases, so a busy moment hits all of them alike
        for label, fn, one in cases:
            best[label][0] = min(best[label][0], per_text_ms(fn, texts, 1))
            if one is not None:
                best[label][1] = min(best[label][1], per_text_ms(lambda ts, e=one: [e.embed([t]) for t in ts],
                                                                 single, 1))
    rows = [(label, b, s if s != float("inf") else None) for label, (b, s) in best.items()]
    base_b, base_s = rows[0][1], rows[0][2]
    print(f"{len(texts)} LoCoMo turns, {args.single} one at a time, best of {args.repeat}")
    print(f"load + first text: numpy {load_np * 1000:.0f} ms, sentence-transformers {load_st * 1000:.0f} ms "
          f"(ratio {load_np / load_st:.2f})")
    print(f"{'case':24} {'batch ms/text':>14} {'ratio':>7} {'single ms/text':>15} {'ratio':>7}")
    for label, b, s in rows:
        s_txt = f"{s:15.2f} {s / base_s:7.2f}" if s is not None else f"{'-':>15} {'-':>7}"
        print(f"{label:24} {b:14.2f} {b / base_b:7.2f} {s_txt}")
    a, b = numpy_emb.embed(texts), st_emb.embed(texts)
    print(f"worst cosine numpy vs sentence-transformers: {float(((a * b).sum(1)).min()):.6f}")
    if onnx_emb is not None:
        print(f"worst cosine onnxruntime vs sentence-transformers: {float(((onnx_emb.embed(texts) * b).sum(1)).min()):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
