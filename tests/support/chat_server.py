"""A stub OpenAI-compatible chat-completions server for tests: ``POST /v1/chat/completions``, run in a thread
of the test process (:func:`serve`). It speaks the protocol (request and reply shapes, Bearer key, OpenAI-style
error bodies) but is no language model: its "facts" are made from the transcript's user lines.

Models:
- ``stub-facts``: ``{"facts": ["The user said: <text>", ...]}``, one per ``user`` line of the transcript;
- ``stub-fenced``: the same inside a fenced ```json block;
- ``stub-none``: ``{"facts": []}``;
- ``stub-prose``: a reply that is not JSON;
- ``stub-500``: HTTP 500 with an error body, always;
- ``stub-flaky``: HTTP 503 for the first request of the server, then as ``stub-facts``.
Unknown models: HTTP 404. Requires ``Authorization: Bearer test-key``. ``state["bodies"]`` holds every request body.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LINE = re.compile(r"^\[[^\]]*\] user: (.*)$")


def facts_of(transcript: str) -> list[str]:
    return [f"The user said: {m.group(1)}" for m in map(LINE.match, transcript.splitlines()) if m]


def make_handler(state: dict):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _reply(self, content: str) -> None:
            self._send(200, {"id": "chatcmpl-stub", "object": "chat.completion", "model": state["model"],
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": content}}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            with state["lock"]:
                state["requests"] += 1
                state["bodies"].append(body)
                n = state["requests"]
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            if self.headers.get("Authorization") != "Bearer test-key":
                return self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
            model = state["model"] = body.get("model")
            user = next((m["content"] for m in body.get("messages", []) if m.get("role") == "user"), "")
            facts = json.dumps({"facts": facts_of(user)})
            if model == "stub-facts" or (model == "stub-flaky" and n > 1):
                return self._reply(facts)
            if model == "stub-flaky":
                return self._send(503, {"error": {"message": "overloaded, try again"}})
            if model == "stub-fenced":
                return self._reply(f"```json\n{facts}\n```")
            if model == "stub-none":
                return self._reply('{"facts": []}')
            if model == "stub-prose":
                return self._reply("Sure! Here is what I remember about the user.")
            if model == "stub-500":
                return self._send(500, {"error": {"message": "the model crashed", "type": "server_error"}})
            return self._send(404, {"error": {"message": f"The model `{model}` does not exist"}})

    return Handler


def serve():
    """Start the stub on 127.0.0.1 (a free port) in a daemon thread: ``(base_url, state, stop)``."""
    state = {"requests": 0, "bodies": [], "lock": threading.Lock(), "model": None}
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop():
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{server.server_address[1]}/v1", state, stop
