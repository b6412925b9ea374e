"""Helpers for the tests of ``pgmem serve``: a real uvicorn on 127.0.0.1 in a thread, and an httpx client that
keeps the dashboard's cookies (Secure cookies included, which httpx's jar would not send over plain http)."""

from __future__ import annotations

import re
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import httpx

from pgmem.service import Settings, create_app
from pgmem.service.app import uvicorn_options
from pgmem.testing import HashEmbedder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Running:
    url: str
    settings: Settings
    app: Any
    lines: list[str] = field(default_factory=list)

    @property
    def service(self):
        return self.app.state.service

    def setup_link(self) -> str:
        for line in self.lines:
            m = re.search(r"(http://\S+/ui/setup\?token=\S+)", line)
            if m:
                return m.group(1)
        raise AssertionError(f"no setup link printed: {self.lines}")


@contextmanager
def running_service(dsn: str, **kw: Any) -> Iterator[Running]:
    """``pgmem serve`` on a free port of 127.0.0.1 against ``dsn`` (the HashEmbedder(64) in space 't64')."""
    import uvicorn

    port = free_port()
    lines: list[str] = []
    kw.setdefault("embedder", HashEmbedder(64))
    kw.setdefault("space", "t64")
    kw.setdefault("audit_flush_interval", 0.2)
    kw.setdefault("pool_size", 4)
    settings = Settings(dsn=dsn, host="127.0.0.1", port=port, announce=lines.append, **kw)
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", **uvicorn_options(settings)))  # as pgmem serve
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise AssertionError(f"uvicorn did not start: {lines}")
        time.sleep(0.02)
    try:
        yield Running(f"http://127.0.0.1:{port}", settings, app, lines)
    finally:
        server.should_exit = True
        thread.join(30)


class Browser:
    """An httpx client that stores every cookie it is sent and sends them back on /ui paths."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.client = httpx.Client(base_url=base, follow_redirects=False, timeout=30)
        self.cookies: dict[str, str] = {}
        self.set_cookie_headers: list[str] = []

    def _absorb(self, r: httpx.Response) -> httpx.Response:
        for header in r.headers.get_list("set-cookie"):
            self.set_cookie_headers.append(header)
            name, _, rest = header.partition("=")
            value = rest.split(";", 1)[0].strip('"')
            if "max-age=0" in header.lower() or value == "":
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value
        return r

    def _headers(self, extra: dict | None) -> dict:
        h = dict(extra or {})
        if self.cookies:
            h["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        return h

    def get(self, path: str, headers: dict | None = None, **kw: Any) -> httpx.Response:
        return self._absorb(self.client.get(path, headers=self._headers(headers), **kw))

    def post(self, path: str, data: dict | None = None, headers: dict | None = None, **kw: Any) -> httpx.Response:
        return self._absorb(self.client.post(path, data=data, headers=self._headers(headers), **kw))

    def csrf(self, html: str) -> str:
        m = re.search(r'name="csrf" value="([^"]+)"', html)
        assert m, "no CSRF field in the page"
        return m.group(1)

    def close(self) -> None:
        self.client.close()


PASSWORD = "correct horse battery staple"


def bootstrap(svc: Running, username: str = "admin") -> Browser:
    """Create the administrator through the one-time setup link; a logged-in Browser."""
    b = Browser(svc.url)
    link = svc.setup_link()
    page = b.get(link[len(svc.url):])
    assert page.status_code == 200, page.text
    token = re.search(r"token=(\S+)", link).group(1)
    r = b.post("/ui/setup", {"token": token, "username": username, "password": PASSWORD, "password2": PASSWORD,
                             "csrf": b.csrf(page.text)})
    assert r.status_code == 303, r.text
    assert "pgmem_session" in b.cookies
    return b


def issue_key(b: Browser, label: str = "test", **form: str) -> str:
    """Issue an API key in the dashboard (form fields: kind, user, agent, users, scope); the secret."""
    page = b.get("/ui/keys")
    data = {"label": label, "kind": "user", "user": "", "agent": "", "users": "", "scope": "write",
            "csrf": b.csrf(page.text), **form}
    r = b.post("/ui/keys", data)
    assert r.status_code == 200, r.text
    m = re.search(r'id="new-key">([^<]+)<', r.text)
    assert m, r.text
    return m.group(1).strip()


def api(svc: Running, key: str | None, **kw: Any) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    headers.update(kw.pop("headers", {}))
    return httpx.Client(base_url=svc.url, headers=headers, timeout=30, **kw)
