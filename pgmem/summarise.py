"""An optional summariser for :meth:`pgmem.Memory.consolidate`: a language model behind any OpenAI-compatible
``POST {base_url}/chat/completions`` endpoint (OpenAI, Ollama, vLLM, LM Studio, ...) turns a session's pending
turns into short standalone facts (``pip install 'pgmem-agents[llm]'``).

    from pgmem.summarise import LLMSummariser
    memory.consolidate("chat-7", LLMSummariser.from_env())

pgmem itself still calls no model: this is a callable that ``consolidate`` calls once with the pending turns.
``consolidate`` writes nothing when it raises, so a provider error (:class:`pgmem.errors.SummariserError`)
leaves every turn pending for the next attempt; a retried ``consolidate`` after success stores nothing twice
(docs/lifecycle.md).

Configuration (docs/integrations.md), the arguments first, then the environment:

- ``base_url``: ``$PGMEM_LLM_URL``, else ``$OPENAI_BASE_URL``, else ``https://api.openai.com/v1`` (the same
  convention as :class:`pgmem.OpenAIEmbedder`: the URL up to and including ``/v1``);
- ``model``: ``$PGMEM_LLM_MODEL`` (required);
- ``api_key``: ``$PGMEM_LLM_API_KEY``, else ``$OPENAI_API_KEY``; sent as ``Authorization: Bearer``; none when unset
  (local servers). The key never appears in error messages.

The prompt is :data:`SYSTEM_PROMPT`; the turns follow as one user message, one line per turn
(``[2026-11-30 14:05] user: ...``). The model must answer ``{"facts": ["...", ...]}``; a fenced JSON block or a
bare JSON list is accepted too, anything else is a SummariserError naming what came back.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from typing import Any

from .errors import SummariserError, ValidationError

SYSTEM_PROMPT = """\
You write the long-term memory of an AI assistant. You get the turns of one conversation, oldest first, each \
with its time and the speaker's role. Return the facts from them that are worth remembering in later \
conversations: the user's preferences, plans, decisions, relationships and circumstances, facts about people, \
places and things they mention, and whatever the user asked to be remembered.

Rules:
- Each fact is one short sentence of at most 30 words that is understood on its own, without the conversation: \
name people instead of writing "he", "she", "I" or "you" (call the user "the user" unless the turns give a name), \
and write absolute dates instead of "yesterday" or "next week", using the times of the turns.
- Only what the turns say; no guesses, no advice, nothing about the assistant, no small talk.
- No two facts say the same thing. At most {max_facts} facts. If nothing is worth remembering, return none.
- Answer with JSON only, exactly of this shape: {{"facts": ["first fact", "second fact"]}}"""

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_FACTS = 10


def transcript(turns: Sequence[Any]) -> str:
    """The user message the model gets: one line per turn, ``[YYYY-MM-DD HH:MM] role: content`` (UTC as
    stored), oldest first."""
    lines = []
    for t in turns:
        when = t.created_at.strftime("%Y-%m-%d %H:%M") if getattr(t, "created_at", None) else "?"
        lines.append(f"[{when}] {t.role}: {t.content}")
    return "\n".join(lines)


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def parse_facts(text: str, max_facts: int) -> list[str]:
    """The facts of a model's reply: ``{"facts": [...]}``, a JSON list of strings, either inside a fenced
    block; blank and repeated facts dropped, at most ``max_facts``. Raises SummariserError otherwise."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        data = json.loads(body)
    except ValueError:
        raise SummariserError(f"the model did not answer with JSON facts: {text[:200]!r}") from None
    facts = data.get("facts") if isinstance(data, dict) else data
    if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
        raise SummariserError(f'the model\'s JSON is not {{"facts": [strings]}}: {text[:200]!r}')
    out: list[str] = []
    for f in facts:
        f = " ".join(f.split())
        if f and f not in out:
            out.append(f)
    return out[:max_facts]


class LLMSummariser:
    """``summarise(turns) -> list[str]`` through an OpenAI-compatible chat-completions endpoint (see the module
    docstring for the configuration). ``timeout``: seconds per request (default 60). ``retries``: further
    attempts after HTTP 429, 5xx or a connection error, waiting 1 s, 2 s, ... (default 2). ``max_facts``: at
    most this many facts per call (default 10). ``temperature``: 0 (the same turns give the same facts as far
    as the provider is deterministic). Raises SummariserError (HTTP status, the provider's message, or a reply
    that is not the facts), ValidationError (no model configured)."""

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, retries: int = 2, max_facts: int = DEFAULT_MAX_FACTS,
                 temperature: float = 0.0, prompt: str = SYSTEM_PROMPT) -> None:
        model = model or os.environ.get("PGMEM_LLM_MODEL")
        if not model:
            raise ValidationError("no summariser model: pass model= or set PGMEM_LLM_MODEL", field="model")
        if not isinstance(max_facts, int) or isinstance(max_facts, bool) or not 1 <= max_facts <= 100:
            raise ValidationError(f"max_facts must be an integer from 1 to 100, got {max_facts!r}", field="max_facts")
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ValidationError(f"retries must be a non-negative integer, got {retries!r}", field="retries")
        self.model = model
        self.base_url = (base_url or os.environ.get("PGMEM_LLM_URL") or os.environ.get("OPENAI_BASE_URL")
                         or "https://api.openai.com/v1").rstrip("/")
        self._api_key = api_key if api_key is not None else (os.environ.get("PGMEM_LLM_API_KEY")
                                                             or os.environ.get("OPENAI_API_KEY"))
        self.timeout = timeout
        self.retries = retries
        self.max_facts = max_facts
        self.temperature = temperature
        self.prompt = prompt
        self.requests = 0  # requests sent, for callers that want to count them
        self._client = None

    @classmethod
    def from_env(cls, **kw: Any) -> LLMSummariser:
        """A summariser configured from ``PGMEM_LLM_URL``, ``PGMEM_LLM_MODEL`` and ``PGMEM_LLM_API_KEY``."""
        return cls(**kw)

    def _http(self):
        if self._client is None:
            import httpx

            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.Client(headers=headers, timeout=self.timeout)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def messages(self, turns: Sequence[Any]) -> list[dict[str, str]]:
        """The chat messages sent for ``turns``: the system prompt, then the transcript."""
        return [{"role": "system", "content": self.prompt.format(max_facts=self.max_facts)},
                {"role": "user", "content": transcript(turns)}]

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        url = f"{self.base_url}/chat/completions"
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            self.requests += 1
            try:
                resp = self._http().post(url, json=body)
            except httpx.HTTPError as exc:
                if last:
                    raise SummariserError(f"summariser endpoint {url} unreachable: {type(exc).__name__}: {exc}") \
                        from None
                time.sleep(2 ** attempt)
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                if not last:
                    time.sleep(2 ** attempt)
                    continue
            if resp.status_code >= 400:
                raise SummariserError(f"summariser endpoint {url} returned HTTP {resp.status_code}: "
                                      f"{_provider_message(resp)}", status=resp.status_code)
            try:
                return resp.json()
            except ValueError:
                raise SummariserError(f"summariser endpoint {url} returned a body that is not JSON: "
                                      f"{resp.text[:200]!r}", status=resp.status_code) from None
        raise AssertionError("unreachable")

    def __call__(self, turns: Sequence[Any]) -> list[str]:
        """Facts from ``turns`` (pgmem :class:`~pgmem.Turn` objects, or anything with ``role``, ``content`` and
        ``created_at``); [] when there are none or the model finds nothing worth remembering."""
        if not turns:
            return []
        data = self._post({"model": self.model, "messages": self.messages(turns), "temperature": self.temperature})
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise SummariserError(f"the reply has no choices[0].message.content: {json.dumps(data)[:200]}") from None
        if not isinstance(content, str):
            raise SummariserError(f"the reply's message content is not text: {json.dumps(content)[:200]}")
        return parse_facts(content, self.max_facts)


def _provider_message(resp: Any) -> str:
    try:
        err = resp.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:300]
    except (ValueError, AttributeError):
        pass
    return resp.text[:300] or resp.reason_phrase


__all__ = ["LLMSummariser", "SYSTEM_PROMPT", "parse_facts", "transcript"]
