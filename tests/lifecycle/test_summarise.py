"""The optional summariser (pgmem.summarise.LLMSummariser) against a local stub of the OpenAI chat-completions
protocol (tests/support/chat_server.py): facts through consolidate, idempotency, provider errors that lose no turn,
configuration from the environment. No real model is called here (docs/integrations.md)."""

from __future__ import annotations

import pytest

from support.chat_server import serve
from pgmem.errors import SummariserError, ValidationError
from pgmem.summarise import SYSTEM_PROMPT, LLMSummariser, parse_facts


@pytest.fixture
def stub():
    url, state, stop = serve()
    yield url, state
    stop()


def summariser(url: str, model: str = "stub-facts", **kw) -> LLMSummariser:
    return LLMSummariser(model, base_url=url, api_key="test-key", **kw)


def test_consolidate_with_the_summariser_is_idempotent(alice, stub):
    url, state = stub
    alice.append_turn("s1", "user", "I moved to Berlin last month")
    alice.append_turn("s1", "assistant", "Nice! How do you like it?")
    alice.append_turn("s1", "user", "I am vegetarian")
    s = summariser(url)
    out = alice.consolidate("s1", s)
    assert [r.created for r in out] == [True, True]
    contents = {alice.get(r.id).content for r in out}
    assert contents == {"The user said: I moved to Berlin last month", "The user said: I am vegetarian"}
    assert alice.pending_turns("s1") == []
    assert [len(alice.sources(r.id)) for r in out] == [3, 3]
    # the request as sent: model, the documented prompt, one transcript line per turn, temperature 0
    body = state["bodies"][-1]
    assert body["model"] == "stub-facts" and body["temperature"] == 0.0
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT.format(max_facts=10)}
    lines = body["messages"][1]["content"].splitlines()
    assert len(lines) == 3 and lines[1].endswith("] assistant: Nice! How do you like it?")
    # again: nothing pending, the model is not called, nothing stored twice
    assert alice.consolidate("s1", s) == []
    assert state["requests"] == 1


def test_provider_errors_lose_no_turn(alice, stub):
    url, state = stub
    alice.append_turn("s2", "user", "Remember that my sister is called Ana")
    with pytest.raises(SummariserError, match="HTTP 500: the model crashed") as info:
        alice.consolidate("s2", summariser(url, "stub-500", retries=0))
    assert info.value.status == 500
    with pytest.raises(SummariserError, match="HTTP 401: Incorrect API key"):
        alice.consolidate("s2", LLMSummariser("stub-facts", base_url=url, api_key="wrong", retries=0))
    with pytest.raises(SummariserError, match="not answer with JSON"):
        alice.consolidate("s2", summariser(url, "stub-prose"))
    with pytest.raises(SummariserError, match="HTTP 404: The model `nope` does not exist"):
        alice.consolidate("s2", summariser(url, "nope"))
    with pytest.raises(SummariserError, match="unreachable"):
        alice.consolidate("s2", LLMSummariser("m", base_url="http://127.0.0.1:9/v1", retries=0, timeout=2))
    assert [t.content for t in alice.pending_turns("s2")] == ["Remember that my sister is called Ana"]
    assert alice.list().items == []
    out = alice.consolidate("s2", summariser(url))  # the provider is back: the same turns are consolidated
    assert alice.get(out[0].id).content == "The user said: Remember that my sister is called Ana"


def test_retry_after_503_and_fenced_replies(alice, stub):
    url, state = stub
    alice.append_turn("s3", "user", "I play the cello")
    s = summariser(url, "stub-flaky", retries=1)
    out = alice.consolidate("s3", s)
    assert len(out) == 1 and state["requests"] == 2
    alice.append_turn("s4", "user", "I like jazz")
    assert alice.get(alice.consolidate("s4", summariser(url, "stub-fenced"))[0].id).content == \
        "The user said: I like jazz"
    alice.append_turn("s5", "assistant", "Hello!")
    assert alice.consolidate("s5", summariser(url, "stub-none")) == []
    assert alice.pending_turns("s5") == []  # nothing worth remembering: consolidated with no memory


def test_configuration_from_the_environment(monkeypatch, stub):
    url, state = stub
    monkeypatch.setenv("PGMEM_LLM_URL", url + "/")
    monkeypatch.setenv("PGMEM_LLM_MODEL", "stub-facts")
    monkeypatch.setenv("PGMEM_LLM_API_KEY", "test-key")
    s = LLMSummariser.from_env()
    assert s.base_url == url and s.model == "stub-facts"

    class T:
        role, content, created_at = "user", "hello there", None

    assert s([T()]) == ["The user said: hello there"]
    monkeypatch.delenv("PGMEM_LLM_MODEL")
    with pytest.raises(ValidationError, match="PGMEM_LLM_MODEL"):
        LLMSummariser.from_env()
    with pytest.raises(SummariserError) as info:
        LLMSummariser("stub-500", base_url=url, api_key="secret-key-123", retries=0)([T()])
    assert "secret-key-123" not in str(info.value)


def test_parse_facts():
    assert parse_facts('{"facts": ["a", " a ", "", "b  c"]}', 10) == ["a", "b c"]
    assert parse_facts('```json\n["x", "y", "z"]\n```', 2) == ["x", "y"]
    with pytest.raises(SummariserError, match="not"):
        parse_facts('{"facts": "one"}', 5)
    with pytest.raises(ValidationError):
        LLMSummariser("m", max_facts=0)
