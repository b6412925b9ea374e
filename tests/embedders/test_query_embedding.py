"""Search texts go to an embedder's ``embed_query`` and stored texts to its ``embed`` on every surface (Python,
async, CLI, MCP, HTTP service, LangGraph store, importer), and an embedder without ``embed_query`` embeds
queries as stored texts, as before."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from typer.testing import CliRunner

import support.recording_embedder as rec
from pgmem import Memory, importer
from pgmem.aio import AsyncMemory
from pgmem.embedders import Embedder, QueryEmbedder, embed_queries
from pgmem.testing import HashEmbedder
from support.recording_embedder import RecordingEmbedder

SPACE = "rec64"


@pytest.fixture(autouse=True)
def _fresh_calls():
    rec.CALLS.clear()
    yield
    rec.CALLS.clear()


@pytest.fixture
def recording() -> RecordingEmbedder:
    return RecordingEmbedder()


@pytest.fixture
def mem(dsn, recording):
    with Memory(dsn, user_id="alice", space=SPACE, embedder=recording, role="pgmem_gateway", max_size=2) as m:
        yield m


def test_embed_queries_uses_embed_query_only_when_the_embedder_has_it(recording):
    old = HashEmbedder(64)
    assert isinstance(recording, QueryEmbedder) and isinstance(old, Embedder) and not isinstance(old, QueryEmbedder)
    np.testing.assert_array_equal(embed_queries(old, ["vegetarian"]), old.embed(["vegetarian"]))
    got = embed_queries(recording, ["vegetarian"])
    assert rec.CALLS == [("query", ["vegetarian"])]
    np.testing.assert_array_equal(got, HashEmbedder(64).embed(["query: vegetarian"]))


def test_memory_stores_passages_and_searches_with_queries(mem):
    mid = mem.add("Alice is vegetarian and avoids peanuts").id
    mem.add_many(["Alice plays go", "Bob likes chess"])
    assert "Alice is vegetarian and avoids peanuts" in rec.passages()
    assert {"Alice plays go", "Bob likes chess"} <= set(rec.passages())
    assert rec.queries() == []
    rec.CALLS.clear()
    for mode in ("vector", "hybrid"):
        hits = mem.search("is alice vegetarian", k=3, mode=mode)
        assert hits and hits[0].id == mid
    assert rec.queries() == ["is alice vegetarian"] * 2
    assert rec.passages() == []
    rec.CALLS.clear()
    assert mem.search("vegetarian", k=3, mode="text")[0].id == mid
    assert rec.CALLS == []  # full text embeds nothing
    ctx = mem.context("is alice vegetarian", budget_tokens=200)
    assert "vegetarian" in ctx.render()
    assert rec.CALLS == [("query", ["is alice vegetarian"])]


def test_the_query_embedding_is_what_the_search_ranks_by(mem):
    """The stored vector is the passage embedding and the search vector the query embedding: a vector search
    returns the cosine of exactly those two."""
    mem.add("Alice is vegetarian")
    hit = mem.search("vegetarian food", k=1, mode="vector")[0]
    h = HashEmbedder(64)
    want = float(h.embed(["passage: Alice is vegetarian"])[0] @ h.embed(["query: vegetarian food"])[0])
    assert hit.score == pytest.approx(want, abs=1e-5)


def test_an_embedder_without_embed_query_embeds_queries_as_documents(dsn):
    class Plain(HashEmbedder):
        def __init__(self):
            super().__init__(64)
            self.calls: list[list[str]] = []

        def embed(self, texts):
            self.calls.append(list(texts))
            return super().embed(texts)

    plain = Plain()
    with Memory(dsn, user_id="alice", space="plain64", embedder=plain, role="pgmem_gateway", max_size=2) as m:
        mid = m.add("Alice is vegetarian").id
        hit = m.search("vegetarian", k=1, mode="vector")[0]
        assert hit.id == mid
        assert plain.calls[-1] == ["vegetarian"]
        h = HashEmbedder(64)
        assert hit.score == pytest.approx(float(h.embed(["Alice is vegetarian"])[0] @ h.embed(["vegetarian"])[0]),
                                          abs=1e-5)


def test_async_memory_searches_with_queries(dsn, recording):
    async def run():
        async with AsyncMemory(dsn, user_id="alice", space=SPACE, embedder=recording, role="pgmem_gateway") as m:
            mid = (await m.add("Alice is vegetarian")).id
            assert rec.passages() == ["Alice is vegetarian"] and rec.queries() == []
            for mode in ("vector", "hybrid"):
                assert (await m.search("alice vegetarian", k=1, mode=mode))[0].id == mid
            await m.context("alice vegetarian", budget_tokens=100)
            assert rec.queries() == ["alice vegetarian"] * 3

    asyncio.run(run())


def test_importer_embeds_stored_texts_as_passages(mem):
    records = [importer.Record(where=f"line {i}", user_id="alice", content=text)
               for i, text in enumerate(["Alice is vegetarian", "Alice plays go"])]
    seen = []
    summary = importer.import_records(mem, records, progress=seen.append)
    assert summary.added == 2
    assert {"Alice is vegetarian", "Alice plays go"} <= set(rec.passages())
    assert rec.queries() == []


def test_cli_search_and_context_embed_the_query_as_a_query(dsn, monkeypatch):
    from pgmem.cli import app

    monkeypatch.setenv("PGMEM_EMBEDDER", "support.recording_embedder:RecordingEmbedder")
    for name in ("PGMEM_DSN", "PGMEM_USER", "PGMEM_SPACE", "PGMEM_ROLE"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    conn = ["--dsn", dsn, "--role", "pgmem_gateway", "--user", "alice", "--space", SPACE]
    r = runner.invoke(app, ["space", "create", SPACE, "--model", "pgmem-testing-recording-64", "--dims", "64",
                            "--dsn", dsn])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["add", "Alice is vegetarian", *conn])
    assert r.exit_code == 0, r.output
    assert rec.passages() == ["Alice is vegetarian"] and rec.queries() == []
    r = runner.invoke(app, ["search", "is alice vegetarian", *conn, "--json"])
    assert r.exit_code == 0, r.output
    assert "Alice is vegetarian" in r.stdout
    r = runner.invoke(app, ["context", "is alice vegetarian", *conn])
    assert r.exit_code == 0, r.output
    assert rec.queries() == ["is alice vegetarian"] * 2


def test_mcp_recall_embeds_the_query_as_a_query(mem):
    from pgmem.integrations.mcp import build_server

    mem.add("Alice is vegetarian")
    rec.CALLS.clear()
    server = build_server(mem)

    async def run():
        return await server.call_tool("recall", {"query": "is alice vegetarian", "k": 3})

    result = asyncio.run(run())
    assert "Alice is vegetarian" in str(result)
    assert rec.CALLS == [("query", ["is alice vegetarian"])]


def test_http_service_search_embeds_the_query_as_a_query(dsn, recording):
    from support.service_helpers import api, bootstrap, issue_key, running_service

    with running_service(dsn, embedder=recording, space=SPACE) as svc:
        b = bootstrap(svc)
        key = issue_key(b, user="alice")
        b.close()
        with api(svc, key) as c:
            r = c.post("/v1/memories", json={"content": "Alice is vegetarian"})
            assert r.status_code in (200, 201), r.text
            assert rec.passages() == ["Alice is vegetarian"] and rec.queries() == []
            hits = c.post("/v1/search", json={"query": "is alice vegetarian", "k": 2}).json()
            assert hits["results"][0]["content"] == "Alice is vegetarian"
    assert rec.queries() == ["is alice vegetarian"]


def test_langgraph_store_search_embeds_the_query_as_a_query(mem):
    pytest.importorskip("langgraph")
    from pgmem.integrations.langgraph import PgmemStore

    store = PgmemStore(mem)
    store.put(("alice", "notes"), "diet", {"text": "Alice is vegetarian"})
    assert rec.queries() == []
    hits = store.search(("alice",), query="is alice vegetarian", limit=2)
    assert hits and hits[0].key == "diet"
    assert rec.queries() == ["is alice vegetarian"]
