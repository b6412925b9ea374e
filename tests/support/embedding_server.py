"""A real OpenAI-compatible embeddings server for tests: POST /v1/embeddings with real all-MiniLM-L6-v2
vectors, run as its own process (``python tests/support/embedding_server.py PORT``).

Models served:
- ``all-MiniLM-L6-v2`` (also as ``sentence-transformers/all-MiniLM-L6-v2``, the local embedder's name, so a
  space can be served by either): the real 384-dim vectors;
- ``minilm-768``: the same vectors repeated twice and renormalised (a 768-dim model for mismatch tests);
- ``flaky``: 384-dim, but the first two requests of the process get HTTP 503 (for retry tests).
Unknown models get HTTP 404 with an OpenAI-style error body. Requires ``Authorization: Bearer test-key``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from pgmem.embedders import MiniLMEmbedder  # noqa: E402

MODEL = MiniLMEmbedder()
MODEL.embed(["warm up"])
LOCK = threading.Lock()
STATE = {"flaky_failures": 0, "requests": 0}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, {"ok": True, "requests": STATE["requests"]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self):
        with LOCK:
            STATE["requests"] += 1
        if self.path != "/v1/embeddings":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        if self.headers.get("Authorization") != "Bearer test-key":
            self._send(401, {"error": {"message": "invalid api key"}})
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        model, texts = body.get("model"), body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if model == "flaky":
            with LOCK:
                STATE["flaky_failures"] += 1
                fail = STATE["flaky_failures"] <= 2
            if fail:
                self._send(503, {"error": {"message": "overloaded, try again"}}, {"Retry-After": "0"})
                return
        if model not in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm-768", "flaky"):
            self._send(404, {"error": {"message": f"model {model!r} not found"}})
            return
        with LOCK:
            vecs = MODEL.embed(list(texts))
        if model == "minilm-768":
            vecs = np.concatenate([vecs, vecs], axis=1) / np.sqrt(2)
        self._send(200, {"object": "list", "model": model,
                         "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vecs)],
                         "usage": {"prompt_tokens": 0, "total_tokens": 0}})


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("ready", flush=True)
    server.serve_forever()
