"""An embedder that records what pgmem asks it: which texts it embeds as stored texts (``embed``) and which as
search texts (``embed_query``), the way an asymmetric model (e5) is called. Vectors are HashEmbedder's of the
prefixed text (``passage: `` / ``query: ``), so searches still find what shares words."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from pgmem.testing import HashEmbedder

# Every call of every instance, in order: ("passage" | "query", [texts]). Cleared by the tests that read it.
CALLS: list[tuple[str, list[str]]] = []
_lock = threading.Lock()


class RecordingEmbedder(HashEmbedder):
    """HashEmbedder(64) with e5's two prefixes; ``model_name`` ``pgmem-testing-recording-64``."""

    def __init__(self, dims: int = 64) -> None:
        super().__init__(dims)
        self.model_name = f"pgmem-testing-recording-{dims}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with _lock:
            CALLS.append(("passage", list(texts)))
        return super().embed([f"passage: {t}" for t in texts])

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        with _lock:
            CALLS.append(("query", list(texts)))
        return super().embed([f"query: {t}" for t in texts])


def queries() -> list[str]:
    """The texts embedded as search texts so far."""
    return [t for kind, texts in CALLS if kind == "query" for t in texts]


def passages() -> list[str]:
    """The texts embedded as stored texts so far."""
    return [t for kind, texts in CALLS if kind == "passage" for t in texts]
