"""LangChain chat message history on pgmem's session turns (``pip install 'pgmem-agents[langgraph]'``).

:class:`PgmemChatMessageHistory` is a ``BaseChatMessageHistory``: ``add_messages`` appends one turn per message
(:meth:`pgmem.Memory.append_turn`), ``messages`` reads the session's most recent turns
(:meth:`pgmem.Memory.recent_turns`), so the history lives under the same row-level security as the user's
memories, expires with the space's turn TTL (default 7 days, :meth:`pgmem.Memory.set_retention`), feeds
:meth:`pgmem.Memory.context` and can be consolidated into long-term memories
(:meth:`pgmem.Memory.consolidate`). Use it as ``RunnableWithMessageHistory``'s history (docs/integrations.md).

Mapping: a message's type gives the turn's role (human: user, ai: assistant, system: system, tool: tool; other
types: user); the turn's content is the message's text (``[<type> message]`` when it has none, e.g. an AI
message made only of tool calls) and its metadata ``{"langchain:message": <message_to_dict(message)>}``, from
which the message comes back unchanged (content blocks, tool calls, ids, additional kwargs). Turns of the
session written by other clients come back as plain messages of their role.

``clear()`` deletes the session's turns in the database (:meth:`pgmem.Memory.clear_session`, one statement);
memories already consolidated from them stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from ..errors import ValidationError

MESSAGE = "langchain:message"
ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        text = content
    else:  # content blocks: their text parts
        text = "\n".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                         if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text"))
    return text if text.strip() else f"[{message.type} message]"


def _message(turn: Any) -> BaseMessage:
    data = (turn.metadata or {}).get(MESSAGE)
    if isinstance(data, dict):
        try:
            return messages_from_dict([data])[0]
        except (KeyError, TypeError, ValueError):
            pass  # written by something else: fall back to the role
    cls = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}.get(turn.role)
    if cls is None:
        return ToolMessage(content=turn.content, tool_call_id=str((turn.metadata or {}).get("tool_call_id", "")))
    return cls(content=turn.content)


class PgmemChatMessageHistory(BaseChatMessageHistory):
    """The chat history of session ``session_id`` of the ``memory``'s user (a :class:`pgmem.Memory`; its
    ``agent_id`` is the turns' agent). ``max_messages`` (1..1000, default 100): how many of the most recent turns
    ``messages`` reads. Raises pgmem errors (ValidationError for a bad session id or message, IdentityError
    without a user)."""

    def __init__(self, memory: Any, session_id: str, *, max_messages: int = 100) -> None:
        if not isinstance(session_id, str) or not session_id or len(session_id) > 256:
            raise ValidationError(f"session_id must be a string of 1 to 256 characters, got {session_id!r}",
                                  field="session_id")
        if not isinstance(max_messages, int) or isinstance(max_messages, bool) or not 1 <= max_messages <= 1000:
            raise ValidationError(f"max_messages must be an integer from 1 to 1000, got {max_messages!r}",
                                  field="max_messages")
        from ..aio import AsyncMemory

        self.memory = memory
        self._is_async = isinstance(memory, AsyncMemory)
        self.session_id = session_id
        self.max_messages = max_messages

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's last ``max_messages`` live turns, oldest first."""
        if self._is_async:
            raise ValidationError("this history wraps an AsyncMemory: use aget_messages", field="memory")
        return [_message(t) for t in self.memory.recent_turns(self.session_id, n=self.max_messages)]

    async def aget_messages(self) -> list[BaseMessage]:
        if self._is_async:
            return [_message(t) for t in await self.memory.recent_turns(self.session_id, n=self.max_messages)]
        return await super().aget_messages()

    @staticmethod
    def _turn(message: BaseMessage) -> dict[str, Any]:
        if not isinstance(message, BaseMessage):
            raise ValidationError(f"expected a LangChain message, got {type(message).__name__}", field="messages")
        return {"role": ROLES.get(message.type, "user"), "content": _text(message),
                "metadata": {MESSAGE: message_to_dict(message)}}

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append one turn per message, in order (all checked first: a bad message writes none)."""
        if self._is_async:
            raise ValidationError("this history wraps an AsyncMemory: use aadd_messages", field="memory")
        turns = [self._turn(m) for m in messages]
        for t in turns:
            self.memory.append_turn(self.session_id, t["role"], t["content"], metadata=t["metadata"])

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if not self._is_async:
            return await super().aadd_messages(messages)
        turns = [self._turn(m) for m in messages]
        for t in turns:
            await self.memory.append_turn(self.session_id, t["role"], t["content"], metadata=t["metadata"])

    def clear(self) -> None:
        """Delete the session's turns (:meth:`pgmem.Memory.clear_session`)."""
        if self._is_async:
            raise ValidationError("this history wraps an AsyncMemory: use aclear", field="memory")
        self.memory.clear_session(self.session_id)

    async def aclear(self) -> None:
        if not self._is_async:
            return await super().aclear()
        await self.memory.clear_session(self.session_id)


__all__ = ["PgmemChatMessageHistory"]
