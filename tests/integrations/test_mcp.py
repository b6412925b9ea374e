"""`pgmem mcp` driven by the official MCP SDK's own client over stdio, against this test's database.

Each server process loads the real default embedder (all-MiniLM-L6-v2), so the file starts three of them:
one for the tool round trip, then alice and bob side by side for isolation.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import psycopg
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

TOOLS = {"remember", "recall", "edit", "forget", "history", "list", "supersede_memory", "append_turn", "get_context"}


@asynccontextmanager
async def mcp_server(dsn: str, user: str, agent: str | None = None) -> AsyncIterator[ClientSession]:
    """A `pgmem mcp` process bound to `user`, and an initialised client session to it."""
    args = ["-m", "pgmem.cli", "mcp", "--dsn", dsn, "--user", user, "--role", "pgmem_gateway"]
    if agent:
        args += ["--agent", agent]
    params = StdioServerParameters(command=sys.executable, args=args,
                                   env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                        "TOKENIZERS_PARALLELISM": "false"})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        session.pgmem_initialized = await asyncio.wait_for(session.initialize(), timeout=120)  # InitializeResult
        yield session


def _attr(obj: Any, snake: str, camel: str) -> Any:  # mcp 2.x names fields in snake case, 1.x in camel case
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict:
    """Call a tool that must succeed; its JSON result."""
    result = await session.call_tool(tool, arguments)
    text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    assert not _attr(result, "is_error", "isError"), f"{tool} failed: {text}"
    return json.loads(text)


async def call_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail; the error text the client sees."""
    result = await session.call_tool(tool, arguments)
    text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    assert _attr(result, "is_error", "isError"), f"{tool} unexpectedly succeeded: {text}"
    assert "Traceback" not in text
    return text


def test_tools_schemas_and_round_trip(dsn: str, admin: psycopg.Connection) -> None:
    async def run() -> None:
        async with mcp_server(dsn, "alice", agent="assistant") as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert set(tools) == TOOLS
            schemas = {name: _attr(t, "input_schema", "inputSchema") for name, t in tools.items()}
            for name, schema in schemas.items():
                assert schema["type"] == "object"
                assert "user_id" not in schema.get("properties", {}), name  # identity is never an argument
                assert tools[name].description
            assert set(schemas["remember"]["properties"]) == {"content", "metadata", "session_id"}
            assert schemas["remember"]["required"] == ["content"]
            assert set(schemas["recall"]["properties"]) == {"query", "k", "filter", "min_score"}
            assert schemas["recall"]["required"] == ["query"]
            assert set(schemas["edit"]["required"]) == {"id", "old", "new"}
            assert schemas["forget"]["required"] == ["id"] and schemas["history"]["required"] == ["id"]
            assert set(schemas["list"]["properties"]) == {"limit", "cursor", "contains"}
            assert not schemas["list"].get("required")
            assert set(schemas["supersede_memory"]["required"]) == {"id", "content"}
            assert set(schemas["append_turn"]["required"]) == {"session_id", "role", "content"}
            assert set(schemas["get_context"]["properties"]) == {"query", "session_id", "budget_tokens"}
            assert schemas["get_context"]["required"] == ["query"]

            tea = await call(s, "remember", content="Alice drinks green tea every morning",
                             metadata={"topic": "food"})
            assert tea["created"] is True
            trip = await call(s, "remember", content="Alice flies to Lisbon on 3 March",
                              metadata={"topic": "travel"}, session_id="chat-1")
            again = await call(s, "remember", content="Alice drinks green tea every morning")
            assert again == {"id": tea["id"], "created": False}

            found = (await call(s, "recall", query="What does Alice drink?", k=2))["memories"]
            assert [m["id"] for m in found][0] == tea["id"]
            assert found[0]["score"] is not None and found[0]["score"] > found[1]["score"]
            assert found[0]["agent"] == "assistant" and found[0]["metadata"] == {"topic": "food"}
            only_travel = (await call(s, "recall", query="What does Alice drink?",
                                      filter={"topic": "travel"}))["memories"]
            assert [m["id"] for m in only_travel] == [trip["id"]]
            cut = found[0]["score"]
            best = (await call(s, "recall", query="What does Alice drink?", k=10, min_score=cut))["memories"]
            assert [m["id"] for m in best] == [tea["id"]] and all(m["score"] >= cut for m in best)

            edited = await call(s, "edit", id=tea["id"], old="green tea", new="oolong")
            assert edited["content"] == "Alice drinks oolong every morning" and edited["version"] == 2
            assert "occurs 3 times" in await call_error(s, "edit", id=trip["id"], old="i", new="I")  # Alice, flies, Lisbon
            missing = await call_error(s, "edit", id=trip["id"], old="Paris", new="Rome")
            assert "does not occur" in missing

            page = await call(s, "list", limit=1)
            assert len(page["items"]) == 1 and page["next_cursor"]
            rest = await call(s, "list", limit=10, cursor=page["next_cursor"])
            assert {m["id"] for m in page["items"] + rest["items"]} == {tea["id"], trip["id"]}
            assert [m["id"] for m in (await call(s, "list", contains="oolong"))["items"]] == [tea["id"]]

            # a changed fact, a conversation turn, and the context for a prompt within a budget
            moved = await call(s, "supersede_memory", id=trip["id"], content="Alice flies to Porto on 5 March")
            assert moved["replaces"] == trip["id"] and moved["id"] != trip["id"] and moved["session"] == "chat-1"
            assert "no longer holds" in await call_error(s, "supersede_memory", id=trip["id"], content="x")
            turn = await call(s, "append_turn", session_id="chat-1", role="user", content="Pack tea for Porto?")
            assert turn["session_id"] == "chat-1" and turn["role"] == "user" and turn["expires_at"]
            assert "role" in await call_error(s, "append_turn", session_id="chat-1", role="boss", content="x")
            ctx = await call(s, "get_context", query="Where does Alice fly and what does she drink?",
                             session_id="chat-1", budget_tokens=200)
            assert 0 < ctx["tokens"] <= 200 == ctx["budget_tokens"]
            assert ctx["tokens"] == sum(i["tokens"] for i in ctx["items"])
            assert {i["id"] for i in ctx["items"] if i["source"] == "memory"} <= {tea["id"], moved["id"]}
            assert [i["turn_id"] for i in ctx["items"] if i["source"] == "turn"] == [turn["turn_id"]]
            assert "Porto on 5 March" in ctx["text"] and "Lisbon" not in ctx["text"]
            assert "Pack tea for Porto?" in ctx["text"]

            assert await call(s, "forget", id=tea["id"]) == {"id": tea["id"], "deleted": True}
            assert "not found" in await call_error(s, "forget", id=tea["id"])
            events = (await call(s, "history", id=tea["id"]))["events"]
            assert [e["event"] for e in events] == ["ADD", "EDIT", "DELETE"]
            assert events[1]["old_content"] == "Alice drinks green tea every morning"
            assert events[1]["actor_agent"] == "assistant"
            assert "not a memory id" in await call_error(s, "history", id="nonsense")
            assert "k" in await call_error(s, "recall", query="tea", k=0)
            assert "empty" in (await call_error(s, "recall", query="   ")).lower()
            assert "min_score" in await call_error(s, "recall", query="tea", min_score="high")

    asyncio.run(run())
    # the rows really are alice's, in the database
    owners = admin.execute("SELECT DISTINCT user_id FROM pgmem.history").fetchall()
    assert owners == [("alice",)]


def test_server_info_names_pgmem_and_its_version(dsn: str) -> None:
    import pgmem

    async def run() -> None:
        async with mcp_server(dsn, "alice") as s:
            info = _attr(s.pgmem_initialized, "server_info", "serverInfo")
            assert (info.name, info.version) == ("pgmem", pgmem.__version__)

    asyncio.run(run())


def test_a_user_cannot_reach_another_users_memories(dsn: str, admin: psycopg.Connection) -> None:
    async def run() -> None:
        async with AsyncExitStack() as stack:
            alice = await stack.enter_async_context(mcp_server(dsn, "alice"))
            bob = await stack.enter_async_context(mcp_server(dsn, "bob"))
            secret = await call(alice, "remember", content="Alice's locker code is 4711")
            mine = await call(bob, "remember", content="Bob's locker code is 1234")
            bobs = {mine["id"]}

            # recall/list as bob: only bob's memory, with or without a user_id smuggled into the arguments
            for extra in ({}, {"user_id": "alice"}, {"user_id": "alice", "user": "alice", "as_user": "alice"}):
                hits = await bob.call_tool("recall", {"query": "locker code", "k": 10, **extra})
                if not _attr(hits, "is_error", "isError"):
                    ids = {m["id"] for m in json.loads(hits.content[0].text)["memories"]}
                    assert mine["id"] in ids and ids <= bobs, extra
                page = await bob.call_tool("list", {"limit": 100, **extra})
                if not _attr(page, "is_error", "isError"):
                    assert {m["id"] for m in json.loads(page.content[0].text)["items"]} == bobs, extra
                wrote = await bob.call_tool("remember", {"content": f"written by bob {len(extra)}", **extra})
                if not _attr(wrote, "is_error", "isError"):
                    bobs.add(json.loads(wrote.content[0].text)["id"])

                # alice's memory id is known to bob: edit, history and forget all see nothing
                for tool, args in (("edit", {"id": secret["id"], "old": "4711", "new": "0000"}),
                                   ("history", {"id": secret["id"]}), ("forget", {"id": secret["id"]})):
                    result = await bob.call_tool(tool, {**args, **extra})
                    text = result.content[0].text
                    assert _attr(result, "is_error", "isError"), (tool, extra, text)
                    assert "not found" in text and "4711" not in text, (tool, extra, text)

            # alice still has her memory, unchanged, and sees none of bob's
            still = await call(alice, "list", limit=100)
            assert [(m["id"], m["content"]) for m in still["items"]] == [(secret["id"], "Alice's locker code is 4711")]
            events = (await call(alice, "history", id=secret["id"]))["events"]
            assert [e["event"] for e in events] == ["ADD"]

    asyncio.run(run())
    rows = admin.execute("SELECT user_id, content FROM pgmem.memories ORDER BY content").fetchall()
    assert ("alice", "Alice's locker code is 4711") in rows
    assert {u for u, c in rows if c.startswith("written by bob")} == {"bob"}


def test_a_request_whose_text_is_not_unicode_gets_an_error_and_writes_nothing(dsn: str, admin: psycopg.Connection) -> None:
    """JSON may escape a lone surrogate (``"\\ud800"``), which is no Unicode character; the SDK's parser refuses the
    line and, left to itself, answers nothing (the client waits for ever). pgmem answers the request by its id with
    a JSON-RPC error naming the surrogate, stores nothing, and goes on serving."""
    import queue
    import subprocess
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "pgmem.cli", "mcp", "--dsn", dsn, "--user", "alice",
                             "--role", "pgmem_gateway"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})

    def send(line: str) -> None:
        proc.stdin.write(line.encode("ascii") + b"\n")
        proc.stdin.flush()

    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in iter(proc.stdout.readline, b"")], daemon=True).start()

    def answer() -> dict:
        try:
            return json.loads(lines.get(timeout=60))
        except queue.Empty:
            raise AssertionError("the server sent no answer in 60 s") from None

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "raw", "version": "0"}}}))
        assert answer()["id"] == 1
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        for rid, args in ((7, '"content": "Alice\\ud800 likes tea"'), ("x8", '"content": "\\udfff"')):
            send('{"jsonrpc": "2.0", "id": ' + json.dumps(rid) + ', "method": "tools/call", '
                 '"params": {"name": "remember", "arguments": {' + args + '}}}')
            reply = answer()
            assert reply["id"] == rid and "result" not in reply, reply
            assert reply["error"]["code"] == -32602 and "lone surrogate" in reply["error"]["message"], reply
        # the server goes on: the next call works, and nothing was stored
        send(json.dumps({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
                         "params": {"name": "list", "arguments": {"limit": 10}}}))
        reply = answer()
        assert reply["id"] == 10 and json.loads(reply["result"]["content"][0]["text"])["items"] == []
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 0
