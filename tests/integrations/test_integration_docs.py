"""The LangGraph, LangMem, LangChain and summariser examples of docs/integrations.md, run as written (each
block after a ``<!-- snippet: NAME -->`` line) against this test's database through a gateway login, with the
real MiniLM embedder and, for the summariser, the local stub server."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from support.chat_server import serve
from conftest import dsn_for, need
from pgmem import Memory
from pgmem.integrations.langgraph import PgmemStore

pytestmark = [pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated"),
              pytest.mark.filterwarnings("ignore:Importing Send from langgraph.constants")]  # inside langmem's deps
DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
SNIPPET = re.compile(r"<!-- snippet: (\w+) -->\n```python\n(.*?)```", re.S)


def snippets() -> dict[str, str]:
    return dict(SNIPPET.findall(DOC.read_text(encoding="utf-8")))


@pytest.fixture
def run(admin, login_role, monkeypatch):
    monkeypatch.setenv("PGMEM_DSN", dsn_for(admin.info.dbname, user=login_role("pgmem_gateway")))
    opened: list[Memory] = []

    def run_snippet(name: str) -> str:
        code = snippets()[name]
        assert len(code.strip().splitlines()) <= 13, f"snippet {name} is longer than its promise"
        ns: dict = {"__name__": f"snippet_{name}"}
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"docs/integrations.md:{name}", "exec"), ns)
        finally:
            for value in ns.values():
                if isinstance(value, Memory):
                    opened.append(value)
                elif isinstance(value, PgmemStore):
                    opened.append(value.memory)
        return out.getvalue()

    yield run_snippet
    for m in opened:
        m.close()


def test_the_documented_snippets_exist():
    assert set(snippets()) == {"langgraph", "langmem", "langchain", "summarise"}


def test_langgraph_snippet(run):
    assert run("langgraph").strip() == "I remember: Alice is vegetarian and allergic to peanuts"


def test_langmem_snippet(run):
    need("langmem", "test-langmem")
    assert "Alice prefers window seats" in run("langmem")


def test_langchain_snippet(run):
    assert run("langchain").strip() == str(["Hi, I'm Alice", "Hi Alice!"])


def test_summarise_snippet(run, monkeypatch):
    url, state, stop = serve()
    try:
        monkeypatch.setenv("PGMEM_LLM_URL", url)
        monkeypatch.setenv("PGMEM_LLM_MODEL", "stub-facts")
        monkeypatch.setenv("PGMEM_LLM_API_KEY", "test-key")
        out = run("summarise")
    finally:
        stop()
    assert out.strip() == "The user said: I moved to Berlin last month, and I am vegetarian"
    assert state["requests"] == 1
