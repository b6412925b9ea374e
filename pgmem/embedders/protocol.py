"""What pgmem needs from an embedding model: the :class:`Embedder` protocol (``model_name``, ``dims``,
``embed``), the optional query side (:class:`QueryEmbedder`) and :func:`embed_queries`, which uses it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """What pgmem needs from an embedding model."""

    model_name: str
    dims: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed a batch of texts to store: ``texts`` of length n gives a float32 array of shape ``(n, dims)``."""
        ...


@runtime_checkable
class QueryEmbedder(Embedder, Protocol):
    """An embedder that embeds search texts differently from stored texts (asymmetric models: e5's
    ``query: `` / ``passage: `` prefixes). ``embed_query`` is optional in :class:`Embedder`; pgmem calls it,
    through :func:`embed_queries`, for every text it searches with (``search``/``search_hybrid`` given a
    query text, ``context``), and ``embed`` for every text it stores."""

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Embed a batch of search texts: shape ``(len(texts), dims)``, float32, in the space of ``embed``."""
        ...


def embed_queries(embedder: Any, texts: Sequence[str]) -> np.ndarray:
    """Embeddings of search texts: ``embedder.embed_query(texts)`` when the embedder has that method, else
    ``embedder.embed(texts)`` (a symmetric model embeds a query as it embeds a stored text). Shape
    ``(len(texts), dims)``; exceptions are the embedder's own."""
    fn = getattr(embedder, "embed_query", None)
    return fn(texts) if callable(fn) else embedder.embed(texts)
