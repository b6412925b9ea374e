"""Helpers for tests: a small deterministic embedder. Never a default; do not use it for real recall."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class HashEmbedder:
    """Feature hashing of lower-cased words and character trigrams into ``dims`` signed buckets, L2-normalised.

    Deterministic across processes and machines (BLAKE2b), so tests can assert exact neighbours: texts that
    share words are close, unrelated texts are near-orthogonal. ``model_name`` includes the dims.
    """

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims
        self.model_name = f"pgmem-testing-hash-{dims}"

    def _features(self, text: str) -> list[str]:
        words = re.findall(r"\w+", text.lower())
        grams = [f"#{text[i:i + 3]}" for i in range(max(0, len(text) - 2))]
        return [f"w:{w}" for w in words] + grams

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat in self._features(text) or [f"empty:{text}"]:
                h = hashlib.blake2b(feat.encode("utf-8", "surrogatepass"), digest_size=8).digest()
                bucket = int.from_bytes(h[:4], "little") % self.dims
                sign = 1.0 if h[4] & 1 else -1.0
                out[row, bucket] += sign * (2.0 if feat.startswith("w:") else 1.0)
            norm = np.linalg.norm(out[row])
            if norm == 0:
                out[row, 0] = 1.0
            else:
                out[row] /= norm
        return out


def checkout_key(root: Path | str) -> str:
    """A short key of a checkout's path (SHA-256 of the resolved path, 10 hex digits), so that each checkout
    gets its own test server and virtual environments instead of sharing one across checkouts."""
    return hashlib.sha256(str(Path(root).resolve()).encode("utf-8", "surrogatepass")).hexdigest()[:10]


def test_data_dir(root: Path | str) -> Path:
    """The embedded server data directory of the test suite of the checkout at ``root``:
    ``$PGMEM_TEST_DATA_DIR``, else ``/tmp/pgmem-tests-<uid>-<checkout key>/pgdata``."""
    env = os.environ.get("PGMEM_TEST_DATA_DIR")
    if env:
        return Path(env)
    return Path(f"/tmp/pgmem-tests-{os.getuid()}-{checkout_key(root)}/pgdata")


test_data_dir.__test__ = False  # not a pytest test, whatever imports it
