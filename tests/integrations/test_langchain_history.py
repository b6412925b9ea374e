"""LangChain chat history on pgmem's session turns (pgmem.integrations.langchain.PgmemChatMessageHistory),
used by LangChain's own RunnableWithMessageHistory with a fake chat model (no network, no LLM)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

pytest.importorskip("langchain_core")

from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402

from pgmem.aio import AsyncMemory  # noqa: E402
from pgmem.errors import ValidationError  # noqa: E402
from pgmem.integrations.langchain import PgmemChatMessageHistory  # noqa: E402
from pgmem.testing import HashEmbedder  # noqa: E402


def test_messages_round_trip_as_turns(alice):
    h = PgmemChatMessageHistory(alice, "chat-1")
    assert h.messages == []
    msgs = [SystemMessage("You are terse."), HumanMessage("Book a table near home", id="m1"),
            AIMessage("", tool_calls=[{"name": "book", "args": {"where": "home"}, "id": "call-1"}]),
            ToolMessage("booked for 8 pm", tool_call_id="call-1"),
            AIMessage([{"type": "text", "text": "Done: 8 pm."}])]
    h.add_messages(msgs)
    got = h.messages
    assert got == msgs  # types, ids, tool calls and content blocks come back unchanged
    turns = alice.recent_turns("chat-1")
    assert [t.role for t in turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert [t.content for t in turns] == ["You are terse.", "Book a table near home", "[ai message]",
                                         "booked for 8 pm", "Done: 8 pm."]
    assert all(t.expires_at is not None for t in turns)  # the space's turn TTL applies


def test_clear_hides_earlier_turns_and_sessions_are_separate(alice, bob):
    h = PgmemChatMessageHistory(alice, "chat-2")
    h.add_user_message("first")
    h.add_ai_message("reply")
    h.clear()
    assert h.messages == []
    h.add_user_message("after clear")
    assert h.messages == [HumanMessage("after clear")]
    assert PgmemChatMessageHistory(alice, "other").messages == []
    assert PgmemChatMessageHistory(bob, "chat-2").messages == []  # row-level security: bob sees none


def test_turns_of_other_clients_read_as_plain_messages(alice):
    alice.append_turn("chat-3", "user", "written by pgmem directly")
    alice.append_turn("chat-3", "assistant", "me too")
    assert PgmemChatMessageHistory(alice, "chat-3").messages == [HumanMessage("written by pgmem directly"),
                                                                 AIMessage("me too")]


def test_turn_ttl_expires_history(alice):
    alice.set_retention(memory_ttl=None, turn_ttl=timedelta(seconds=0.3))
    h = PgmemChatMessageHistory(alice, "chat-ttl")
    h.add_user_message("soon gone")
    assert len(h.messages) == 1
    time.sleep(0.4)
    assert h.messages == []


def test_bad_input(alice):
    with pytest.raises(ValidationError):
        PgmemChatMessageHistory(alice, "")
    with pytest.raises(ValidationError):
        PgmemChatMessageHistory(alice, "s", max_messages=0)
    h = PgmemChatMessageHistory(alice, "chat-bad")
    with pytest.raises(ValidationError, match="LangChain message"):
        h.add_messages([HumanMessage("ok"), "not a message"])
    assert h.messages == []  # checked first: nothing written
    with pytest.raises(ValidationError, match="NUL"):
        h.add_messages([HumanMessage("a\x00b")])


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")  # still the documented API
def test_runnable_with_message_history(alice):
    model = FakeListChatModel(responses=["Hello Alice!", "You said your name is Alice."])
    prompt = ChatPromptTemplate.from_messages([("system", "You are helpful."), MessagesPlaceholder("history"),
                                               ("human", "{input}")])
    seen: list[int] = []

    def record(prompt_value):
        seen.append(len(prompt_value.to_messages()))
        return prompt_value

    chain = RunnableWithMessageHistory(prompt | record | model,
                                       lambda session_id: PgmemChatMessageHistory(alice, session_id),
                                       input_messages_key="input", history_messages_key="history")
    cfg = {"configurable": {"session_id": "chat-r"}}
    assert chain.invoke({"input": "Hi, I am Alice"}, config=cfg).content == "Hello Alice!"
    assert chain.invoke({"input": "What is my name?"}, config=cfg).content == "You said your name is Alice."
    assert seen == [2, 4]  # the second call got the first exchange from pgmem
    assert [t.content for t in alice.recent_turns("chat-r")] == ["Hi, I am Alice", "Hello Alice!",
                                                                 "What is my name?", "You said your name is Alice."]
    # the turns are pgmem's: context assembly and consolidation see them
    ctx = alice.context("name", session_id="chat-r", budget_tokens=200)
    assert "Hi, I am Alice" in ctx.render()
    assert len(alice.pending_turns("chat-r")) == 4


def test_async_history_on_async_memory(dsn):
    async def main():
        async with AsyncMemory(dsn, user_id="alice", agent_id="a", space="t64", embedder=HashEmbedder(64),
                               role="pgmem_gateway") as m:
            h = PgmemChatMessageHistory(m, "chat-async")
            await h.aadd_messages([HumanMessage("async hello"), AIMessage("async reply")])
            assert await h.aget_messages() == [HumanMessage("async hello"), AIMessage("async reply")]
            await h.aclear()
            assert await h.aget_messages() == []
            with pytest.raises(ValidationError, match="aget_messages"):
                h.messages

    asyncio.run(main())
