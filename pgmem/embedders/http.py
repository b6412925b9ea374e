"""Embeddings over HTTP: :class:`OpenAIEmbedder`, for any OpenAI-compatible ``/embeddings`` endpoint
(``pip install 'pgmem-agents[http]'``)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..errors import EmbedderError


class OpenAIEmbedder:
    """Embeddings from any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (OpenAI, Ollama, vLLM,
    LM Studio, resellers), with ``httpx`` (``pip install 'pgmem-agents[http]'``).

    - ``model``: the model name sent and bound to the space; ``dims``: what it must return (checked on every
      response: ``DimensionMismatch`` ``expected 384 dimensions, got 768 (model ..., endpoint ...)``).
    - ``base_url``: e.g. ``http://localhost:11434/v1``; default ``$PGMEM_EMBEDDINGS_URL``, else
      ``$OPENAI_BASE_URL``, else ``https://api.openai.com/v1``.
    - ``api_key``: the key, sent as a Bearer token; default: the value of the environment variable named by
      ``api_key_env`` (``OPENAI_API_KEY``), none when it is unset.
    - ``timeout`` seconds per request; ``max_retries`` retries on connection errors, HTTP 408/409/429 and 5xx,
      with exponential backoff (``backoff`` * 2^attempt seconds, capped at 20 s, honouring ``Retry-After``);
      ``batch_size`` texts per request (OpenAI accepts up to 2048).
    Other HTTP errors raise :class:`EmbedderError` at once with the server's message.
    """

    RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})

    def __init__(self, model: str, dims: int, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 30.0, max_retries: int = 4, backoff: float = 0.5, batch_size: int = 128,
                 api_key: str | None = None) -> None:
        self.model_name = model
        self.dims = dims
        self.base_url = (base_url or os.environ.get("PGMEM_EMBEDDINGS_URL") or os.environ.get("OPENAI_BASE_URL")
                         or "https://api.openai.com/v1").rstrip("/")
        self.api_key_env = api_key_env
        self._api_key = api_key
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
            key = self._api_key or os.environ.get(self.api_key_env)
            if key:
                headers["Authorization"] = f"Bearer {key}"
            # A plain http:// endpoint (a local server) never makes a TLS connection (redirects are not
            # followed): no certificate store is loaded for it, which took 30-300 ms of every CLI command.
            verify = not self.base_url.lower().startswith("http://")
            self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeout, verify=verify)
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
        from ..errors import DimensionMismatch

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
