"""The MCP server over streamable HTTP: a real server process on 127.0.0.1, spoken to over real HTTP.
Without the right `Authorization: Bearer` token nothing gets through (401), a foreign Host or Origin is
refused even with the token (DNS rebinding), and the right token works end to end into the database.
Before the token existed, every request was served."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

HERE = Path(__file__).resolve().parent
SERVER = HERE / "mcp_http_server.py"
TOKEN = "t0k3n-for-the-security-tests-0123456789"
PROTOCOL = "2025-06-18"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(dsn: str) -> Iterator[str]:
    """The URL of a running server for user alice, token TOKEN; terminated after the test."""
    port = free_port()
    path = os.pathsep.join(p for p in (str(HERE.parent.parent), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PGMEM_MCP_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, str(SERVER), dsn, str(port)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited: {proc.stderr.read()}")
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    pytest.fail("the server did not listen within 90 s")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def rpc(method: str, params: dict | None = None, id: int | None = 1) -> dict:
    msg: dict = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if id is not None:
        msg["id"] = id
    return msg


INITIALIZE = rpc("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                "clientInfo": {"name": "pgmem-security-test", "version": "1"}})


def post(url: str, body: dict, *, token: str | None = TOKEN, scheme: str = "Bearer", session: str | None = None,
         **headers: str) -> httpx.Response:
    h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json", **headers}
    if token is not None:
        h["Authorization"] = f"{scheme} {token}"
    if session:
        h["Mcp-Session-Id"] = session
    return httpx.post(url, json=body, headers=h, timeout=30)


def result_of(response: httpx.Response) -> dict:
    """The JSON-RPC message of a response, plain JSON or one server-sent event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [ln[len("data:"):].strip() for ln in response.text.splitlines() if ln.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


def test_http_requires_the_bearer_token(server: str, admin: psycopg.Connection) -> None:
    missing = post(server, INITIALIZE, token=None)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert "Traceback" not in missing.text
    assert post(server, INITIALIZE, token=TOKEN[:-1] + "X").status_code == 401
    assert post(server, INITIALIZE, token=TOKEN + "X").status_code == 401
    assert post(server, INITIALIZE, token=None, Authorization="Bearer").status_code == 401
    assert post(server, INITIALIZE, scheme="Basic").status_code == 401
    assert httpx.get(server, timeout=10).status_code == 401
    assert httpx.delete(server, timeout=10).status_code == 401

    # the right token works, end to end into the database
    init = post(server, INITIALIZE)
    assert init.status_code == 200, init.text
    assert result_of(init)["result"]["serverInfo"]["name"] == "pgmem"
    session = init.headers.get("mcp-session-id")
    assert post(server, rpc("notifications/initialized", id=None), session=session).status_code in (200, 202)
    call = post(server, rpc("tools/call", {"name": "remember", "arguments": {"content": "Alice takes the 8:15 train"}},
                            id=2), session=session)
    assert call.status_code == 200, call.text
    result = result_of(call)["result"]
    assert not result.get("isError", result.get("is_error")), result
    assert admin.execute("SELECT user_id, agent_id, content FROM pgmem.memories").fetchall() == \
        [("alice", "http-agent", "Alice takes the 8:15 train")]
    # without the token, the same session is refused too
    assert post(server, rpc("tools/call", {"name": "recall", "arguments": {"query": "train"}}, id=3), token=None,
                session=session).status_code == 401


def test_http_refuses_a_foreign_host_or_origin_even_with_the_token(server: str) -> None:
    port = server.split(":")[2].split("/")[0]
    assert post(server, INITIALIZE, Host=f"attacker.example:{port}").status_code == 421
    assert post(server, INITIALIZE, Host="attacker.example").status_code == 421
    assert post(server, INITIALIZE, Origin="http://attacker.example").status_code == 403
    assert post(server, INITIALIZE, Host=f"localhost:{port}", Origin=f"http://localhost:{port}").status_code == 200


def test_http_without_a_token_does_not_start(dsn: str) -> None:
    """`pgmem mcp --transport streamable-http` with no token (nor a short one) exits with pgmem's error at once,
    before it opens the database or a port."""
    env = {k: v for k, v in os.environ.items() if k != "PGMEM_MCP_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent.parent), os.environ.get("PYTHONPATH")) if p)
    base = [sys.executable, "-m", "pgmem.cli", "mcp", "--transport", "streamable-http", "--user", "alice",
            "--dsn", dsn, "--port", str(free_port())]
    for extra, expected in (([], "needs a bearer token"), (["--token", "short"], "at least 16 characters")):
        try:
            done = subprocess.run(base + extra, env=env, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server started without a usable token ({extra or 'none'})")
        assert done.returncode != 0
        assert expected in done.stderr and "PGMEM_MCP_TOKEN" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_http_answers_a_lone_surrogate_with_400_and_stores_nothing(server: str, admin: psycopg.Connection) -> None:
    init = post(server, INITIALIZE)
    session = init.headers.get("mcp-session-id")
    post(server, rpc("notifications/initialized", id=None), session=session)
    body = ('{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "remember", '
            '"arguments": {"content": "Alice\\ud800 takes the train"}}}')
    h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
         "Authorization": f"Bearer {TOKEN}", "Mcp-Session-Id": session or ""}
    bad = httpx.post(server, content=body.encode("ascii"), headers=h, timeout=30)
    assert bad.status_code == 400, bad.text
    assert result_of(bad)["error"]["code"] == -32700 and "Traceback" not in bad.text
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 0
