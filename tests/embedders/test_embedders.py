"""Embedders: the local MiniLM model and a real OpenAI-compatible HTTP server process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from pgmem import (
    DimensionMismatch, EmbedderError, EmbeddingSpaceMismatch, MiniLMEmbedder, OpenAIEmbedder, SentenceTransformerEmbedder,
)


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def http_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parents[1] / "support" / "embedding_server.py"), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"embedding server died: {proc.stderr.read()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    yield f"{url}/v1"
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("PGMEM_TEST_KEY", "test-key")
    return "PGMEM_TEST_KEY"


def test_minilm_shape_norm_and_meaning(minilm):
    vecs = minilm.embed(["I drink green tea every morning", "Tea is my morning drink", "The invoice is overdue"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.2


def test_minilm_is_deterministic_and_batch_independent(minilm):
    a = minilm.embed(["hello world", "another text"])
    b = minilm.embed(["hello world"])
    assert np.allclose(a[0], b[0], atol=1e-5)


def test_http_embedder_serves_the_same_vectors_as_local(http_server, api_key, minilm):
    emb = OpenAIEmbedder("all-MiniLM-L6-v2", 384, base_url=http_server, api_key_env=api_key, batch_size=2)
    texts = ["alpha", "beta gamma", "delta", "epsilon zeta eta"]
    remote = emb.embed(texts)
    assert remote.shape == (4, 384)
    assert np.allclose(remote, minilm.embed(texts), atol=1e-4)


def test_http_wrong_dimensions_is_a_dimension_error_not_a_404(http_server, api_key):
    emb = OpenAIEmbedder("minilm-768", 384, base_url=http_server, api_key_env=api_key)
    with pytest.raises(DimensionMismatch, match="expected 384 dimensions, got 768") as info:
        emb.embed(["hello"])
    assert "minilm-768" in str(info.value)


def test_http_retries_transient_503(http_server, api_key):
    emb = OpenAIEmbedder("flaky", 384, base_url=http_server, api_key_env=api_key, backoff=0.01, max_retries=3)
    assert emb.embed(["retry me"]).shape == (1, 384)


def test_http_errors_are_clear(http_server, api_key, monkeypatch):
    with pytest.raises(EmbedderError, match="404.*not found"):
        OpenAIEmbedder("no-such-model", 384, base_url=http_server, api_key_env=api_key).embed(["x"])
    monkeypatch.setenv(api_key, "wrong")
    with pytest.raises(EmbedderError, match="401"):
        OpenAIEmbedder("all-MiniLM-L6-v2", 384, base_url=http_server, api_key_env=api_key).embed(["x"])


def test_http_unreachable_gives_up_after_retries():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emb = OpenAIEmbedder("m", 384, base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff=0.01, timeout=2)
    with pytest.raises(EmbedderError, match="after 2 attempts"):
        emb.embed(["x"])


def test_http_embedder_against_a_space_refuses_before_any_write(http_server, api_key, make_memory, admin):
    local = make_memory("alice", space="minilm", embedder=OpenAIEmbedder(
        "all-MiniLM-L6-v2", 384, base_url=http_server, api_key_env=api_key))
    local.add("Alice keeps bees")
    wrong = make_memory("alice", space="minilm", embedder=OpenAIEmbedder(
        "all-MiniLM-L6-v2", 768, base_url=http_server, api_key_env=api_key))
    with pytest.raises(DimensionMismatch, match="expected 384 dimensions, got 768"):
        wrong.add("Alice keeps wasps")
    lying = make_memory("alice", space="minilm", embedder=OpenAIEmbedder(
        "minilm-768", 384, base_url=http_server, api_key_env=api_key))
    with pytest.raises(EmbeddingSpaceMismatch, match="all-MiniLM-L6-v2"):
        lying.add("Alice keeps hornets")
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 1
    assert admin.execute("SELECT count(*) FROM pgmem.history").fetchone()[0] == 1


def test_sentence_transformers_embedder_loads_the_wheel_offline_and_normalises(minilm, monkeypatch, tmp_path):
    """The optional sentence-transformers embedder (pip install 'pgmem-agents[sentence-transformers]') is only a
    wrapper: it loads the installed all-MiniLM-L6-v2 wheel's folder offline, asks for normalised float vectors and
    names the same model as the default embedder, so the two share a space. sentence-transformers needs torch,
    which the test set-up does not install, so the library is replaced here by a stand-in that records what the
    wrapper asks of it; that the real library's vectors equal the numpy ones is checked by the committed reference
    vectors (tests/data/minilm_locomo.npy, made with sentence-transformers by tools/minilm_reference.py) and
    measured by bench/embed.py."""
    import types

    calls = {}

    class FakeSentenceTransformer:
        def __init__(self, path, device):
            calls["load"] = (path, device, os.environ.get("HF_HUB_OFFLINE"))

        def encode(self, texts, **kw):
            calls["encode"] = kw
            return minilm.embed(texts).astype(np.float64)

    monkeypatch.setitem(sys.modules, "sentence_transformers",
                        types.SimpleNamespace(SentenceTransformer=FakeSentenceTransformer))
    monkeypatch.setattr(SentenceTransformerEmbedder, "_models", {})
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    import pgmem.embedders as embedders_module

    monkeypatch.setattr(embedders_module.minilm, "installed_package_dir", lambda: tmp_path)  # the wheel's model folder
    st = SentenceTransformerEmbedder()
    assert (st.model_name, st.dims) == (minilm.model_name, minilm.dims) == ("sentence-transformers/all-MiniLM-L6-v2", 384)
    texts = ["Alice keeps bees", "The invoice is overdue"]
    out = st.embed(texts)
    path, device, offline = calls["load"]
    assert Path(path) == tmp_path and device == "cpu" and offline == "1"
    assert calls["encode"]["normalize_embeddings"] is True and calls["encode"]["convert_to_numpy"] is True
    assert out.dtype == np.float32 and np.allclose(out, minilm.embed(texts))


def test_sentence_transformers_embedder_without_the_library_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # the import fails, as when not installed
    monkeypatch.setattr(SentenceTransformerEmbedder, "_models", {})
    with pytest.raises(EmbedderError, match="sentence-transformers is not installed") as err:
        SentenceTransformerEmbedder().embed(["Alice keeps bees"])
    assert "pgmem-agents[sentence-transformers]" in (err.value.hint or "")
