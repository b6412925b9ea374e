"""``pgmem serve`` over real HTTP: uvicorn on 127.0.0.1, httpx clients, the test database.

Every route; both credential kinds (API keys of users and admins, the dashboard session); a key of alice
never reaching bob by id, body, query, header or Mem0 route; revoked keys; CORS; CSRF; limits; bad JSON;
the request log; readiness; erasure.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import psycopg
import pytest

from support.service_helpers import PASSWORD, Browser, api, bootstrap, issue_key, running_service


@pytest.fixture
def svc(dsn):
    with running_service(dsn) as s:
        yield s


@pytest.fixture
def admin_ui(svc):
    b = bootstrap(svc)
    yield b
    b.close()


def err(r) -> dict:
    body = r.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"type", "code", "message", "hint", "field"}
    assert "Traceback" not in r.text
    return body["error"]


# ------------------------------------------------------------------------------------------------------------
# Bootstrap, health, credentials
# ------------------------------------------------------------------------------------------------------------
def test_setup_link_creates_the_admin_once_and_sets_safe_cookies(svc, admin, dsn):
    link = svc.setup_link()
    assert link.startswith(svc.url + "/ui/setup?token=")
    token = link.split("token=")[1]
    assert admin.execute("SELECT count(*) FROM pgmem.service_setup WHERE token_hash = sha256(%s::bytea)",
                         (token.encode(),)).fetchone()[0] == 1  # stored only as its digest
    b = Browser(svc.url)
    page = b.get("/ui/setup?token=" + token)
    csrf = b.csrf(page.text)
    wrong = b.post("/ui/setup", {"token": "x" + token, "username": "admin", "password": PASSWORD, "password2": PASSWORD,
                                 "csrf": csrf})
    assert wrong.status_code == 403
    no_csrf = b.post("/ui/setup", {"token": token, "username": "admin", "password": PASSWORD, "password2": PASSWORD})
    assert no_csrf.status_code == 403
    short = b.post("/ui/setup", {"token": token, "username": "admin", "password": "short", "password2": "short",
                                 "csrf": csrf})
    assert short.status_code == 422
    ok = b.post("/ui/setup", {"token": token, "username": "admin", "password": PASSWORD, "password2": PASSWORD,
                              "csrf": csrf})
    assert ok.status_code == 303 and ok.headers["location"] == "/ui/keys?welcome=1"
    session = next(h for h in b.set_cookie_headers if h.startswith("pgmem_session="))
    assert re.search(r"(?i)httponly", session) and re.search(r"(?i);\s*secure", session)
    assert re.search(r"(?i)samesite=strict", session)
    stored = admin.execute("SELECT password_hash FROM pgmem.service_accounts").fetchone()[0]
    assert stored.startswith("$argon2id$") and PASSWORD not in stored
    # The link works once.
    again = Browser(svc.url)
    page = again.get("/ui/setup?token=" + token)
    assert page.status_code == 303 and page.headers["location"] == "/ui/login"
    assert admin.execute("SELECT count(*) FROM pgmem.service_setup").fetchone()[0] == 0
    # Logging in and out.
    login = again.get("/ui/login")
    r = again.post("/ui/login", {"username": "admin", "password": "wrong password!", "csrf": again.csrf(login.text)})
    assert r.status_code == 401
    r = again.post("/ui/login", {"username": "admin", "password": PASSWORD, "csrf": again.csrf(login.text)})
    assert r.status_code == 303
    page = again.get("/ui/keys")
    assert page.status_code == 200
    assert again.post("/ui/logout", {"csrf": again.csrf(page.text)}).status_code == 303
    assert again.get("/ui/keys").status_code == 303  # to the login page


def test_no_key_before_setup_and_dashboard_needs_login(svc, admin):
    r = Browser(svc.url).get("/ui/keys")
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    admin.execute("SET ROLE pgmem_gateway")
    try:
        with pytest.raises(psycopg.Error, match="no dashboard account") as caught:
            admin.execute("SELECT * FROM pgmem.service_key_create('pgm_x', '\\x00', 'l', 'user', 'alice', NULL, "
                          "NULL, 'write', NULL)")
        assert caught.value.sqlstate == "PGM01"
    finally:
        admin.execute("RESET ROLE")


def test_healthz_readyz_probe_leaves_nothing_and_reports_the_embedder(svc, admin):
    with api(svc, None) as c:
        assert c.get("/healthz").json() == {"ok": True}
        r = c.get("/readyz")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ready"] is True
    checks = body["checks"]
    assert checks["migrations"] == {"ok": True, "pending": []}
    assert checks["probe"]["found"] is True
    assert checks["embedder"]["model"] == "pgmem-testing-hash-64"
    assert admin.execute("SELECT count(*) FROM pgmem.memories WHERE user_id = 'pgmem:health'").fetchone()[0] == 0
    assert admin.execute("SELECT count(*) FROM pgmem.history WHERE user_id = 'pgmem:health'").fetchone()[0] == 0


def test_readyz_reports_a_broken_embedder_but_stays_ready(dsn):
    class Broken:
        model_name, dims = "pgmem-testing-hash-64", 64

        def embed(self, texts):
            raise RuntimeError("provider key rejected")

    with running_service(dsn, embedder=Broken()) as s, api(s, None) as c:
        r = c.get("/readyz")
    assert r.status_code == 200
    assert r.json()["checks"]["embedder"]["ok"] is False
    assert "provider key rejected" in r.json()["checks"]["embedder"]["error"]


def test_health_tenant_is_unreachable_for_keys(svc, admin_ui):
    page = admin_ui.get("/ui/keys")
    r = admin_ui.post("/ui/keys", {"label": "x", "kind": "user", "user": "pgmem:health", "scope": "write",
                                   "csrf": admin_ui.csrf(page.text)})
    assert r.status_code == 422 and "reserved" in r.text
    r = admin_ui.post("/ui/keys", {"label": "x", "kind": "admin", "users": "alice pgmem:health", "scope": "write",
                                   "csrf": admin_ui.csrf(page.text)})
    assert r.status_code == 422 and "reserved" in r.text


def test_keys_are_stored_as_hashes_and_revocation_is_immediate(svc, admin_ui, admin):
    key = issue_key(admin_ui, "alice app", user="alice")
    prefix = key[:12]
    row = admin.execute("SELECT key_hash, prefix, label FROM pgmem.service_keys").fetchone()
    assert bytes(row[0]) == __import__("hashlib").sha256(key.encode()).digest()
    assert row[1] == prefix and key not in json.dumps([str(x) for x in row])
    with api(svc, key) as c:
        assert c.get("/v1/whoami").json()["user_id"] == "alice"
        key_id = admin.execute("SELECT key_id FROM pgmem.service_keys").fetchone()[0]
        page = admin_ui.get("/ui/keys")
        assert prefix in page.text and key not in page.text  # shown once only
        assert admin_ui.post(f"/ui/keys/{key_id}/revoke", {"csrf": admin_ui.csrf(page.text)}).status_code == 303
        r = c.get("/v1/whoami")
        assert r.status_code == 401 and err(r)["code"] == "unauthorized"
    with api(svc, None) as c:
        assert c.get("/v1/memories").status_code == 401
        # The key is checked before the body is read: no parsing, no validation details for strangers.
        r = c.post("/v1/memories", content=b"{not json", headers={"Content-Type": "application/json"})
        assert r.status_code == 401 and err(r)["code"] == "unauthorized"
        assert c.post("/search", json={"nope": 1}).status_code == 401
        assert err(c.get("/v1/memories", headers={"Authorization": "Bearer pgm_nope_nope"}))["code"] == "unauthorized"
        assert c.get("/v1/memories", headers={"Authorization": "Basic abc"}).status_code == 401


# ------------------------------------------------------------------------------------------------------------
# Every route
# ------------------------------------------------------------------------------------------------------------
def test_every_v1_route_with_a_user_key(svc, admin_ui):
    key = issue_key(admin_ui, user="alice")
    with api(svc, key) as c:
        r = c.post("/v1/memories", json={"content": "Alice is vegetarian", "metadata": {"topic": "food"},
                                         "agent_id": "planner", "session_id": "s1"})
        assert r.status_code == 201 and r.json()["created"] is True
        mid = r.json()["id"]
        again = c.post("/v1/memories", json={"content": "Alice is vegetarian", "agent_id": "planner"})
        assert again.status_code == 200 and again.json() == {"id": mid, "created": False}  # nothing was created
        r = c.post("/v1/memories/batch", json={"items": ["Alice flies to Lisbon", {"content": "Alice likes tea",
                                                                                  "metadata": {"topic": "food"}}]})
        assert r.status_code == 201 and len(r.json()["results"]) == 3 - 1
        assert c.get(f"/v1/memories/{mid}").json()["content"] == "Alice is vegetarian"
        page = c.get("/v1/memories", params={"limit": 2})
        assert len(page.json()["items"]) == 2 and page.json()["next_cursor"]
        rest = c.get("/v1/memories", params={"limit": 2, "cursor": page.json()["next_cursor"]}).json()
        assert len(rest["items"]) == 1
        food = c.get("/v1/memories", params={"filter": json.dumps({"topic": "food"})}).json()["items"]
        assert {m["content"] for m in food} == {"Alice is vegetarian", "Alice likes tea"}
        assert [m["content"] for m in c.get("/v1/memories", params={"contains": "Lisbon"}).json()["items"]] == \
            ["Alice flies to Lisbon"]
        hits = c.post("/v1/search", json={"query": "vegetarian", "k": 2}).json()["results"]
        assert hits[0]["id"] == mid and hits[0]["score"] is not None
        assert c.post("/v1/search", json={"query": "vegetarian", "mode": "text"}).json()["results"][0]["id"] == mid
        vec = c.post("/v1/search", json={"query": "vegetarian", "mode": "vector", "filter": {"topic": "food"}}).json()
        assert {h["content"] for h in vec["results"]} == {"Alice is vegetarian", "Alice likes tea"}
        r = c.patch(f"/v1/memories/{mid}", json={"metadata": {"diet": "strict"}})
        assert r.json()["metadata"] == {"topic": "food", "diet": "strict"} and r.json()["version"] == 2
        r = c.post(f"/v1/memories/{mid}/edit", json={"old": "vegetarian", "new": "vegan"})
        assert r.json()["content"] == "Alice is vegan"
        assert err(c.post(f"/v1/memories/{mid}/edit", json={"old": "nothing", "new": "x"}))["code"] == "PGM06"
        r = c.post(f"/v1/memories/{mid}/supersede", json={"content": "Alice eats fish again"})
        new_id = r.json()["id"]
        assert [m["id"] for m in c.get(f"/v1/memories/{mid}/chain").json()["items"]] == [mid, new_id]
        events = c.get(f"/v1/memories/{mid}/history").json()["events"]
        assert [e["event"] for e in events][:3] == ["ADD", "UPDATE", "EDIT"]
        assert c.post(f"/v1/memories/{new_id}/invalidate", json={}).json()["valid_to"] is not None
        assert c.get(f"/v1/memories/{new_id}/sources").json() == {"sources": []}
        stats = c.get("/v1/stats").json()["spaces"]
        assert stats[0]["space"] == "t64" and stats[0]["memories"] >= 2
        turn = c.post("/v1/sessions/chat-1/turns", json={"role": "user", "content": "Book a table tonight"})
        assert turn.status_code == 201
        assert [t["content"] for t in c.get("/v1/sessions/chat-1/turns").json()["turns"]] == ["Book a table tonight"]
        assert len(c.get("/v1/sessions/chat-1/pending").json()["turns"]) == 1
        ctx = c.post("/v1/context", json={"query": "table", "session_id": "chat-1", "budget_tokens": 200}).json()
        assert ctx["tokens"] <= 200 and "Book a table tonight" in ctx["text"]
        seen = c.get("/v1/sessions/chat-1/pending").json()["turns"][-1]["turn_id"]
        made = c.post("/v1/sessions/chat-1/consolidate",
                      json={"memories": ["Alice wanted a table"], "through_turn_id": seen}).json()
        assert len(made["results"]) == 1
        assert c.get("/v1/sessions/chat-1/pending").json()["turns"] == []
        export = c.get("/v1/export", params={"embeddings": "false"})
        assert export.headers["content-type"].startswith("application/x-ndjson")
        assert any("Alice flies to Lisbon" in line for line in export.text.splitlines())
        assert c.delete(f"/v1/memories/{mid}").json() == {"deleted": True}
        assert err(c.delete(f"/v1/memories/{mid}"))["code"] == "PGM03"
        assert c.get(f"/v1/memories/{mid}").status_code == 404
        assert c.post("/v1/memories/delete", json={}).status_code == 400  # the whole user needs confirm
        n = c.post("/v1/memories/delete", json={"confirm": True}).json()["deleted"]
        assert n >= 2 and c.get("/v1/memories").json()["items"] == []


def test_mem0_routes_have_mem0_shapes(svc, admin_ui):
    key = issue_key(admin_ui, user="alice")
    with api(svc, key) as c:
        r = c.post("/memories", json={"messages": [{"role": "user", "content": "I am allergic to peanuts"},
                                                   {"role": "assistant", "content": "Noted!"}],
                                      "user_id": "alice", "run_id": "r1", "metadata": {"src": "chat"}})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert [x["event"] for x in results] == ["ADD", "ADD"] and results[0]["memory"] == "I am allergic to peanuts"
        mid = results[0]["id"]
        assert c.post("/memories", json={"messages": [{"role": "user", "content": "x"}]}).status_code == 400
        items = c.get("/memories", params={"user_id": "alice"}).json()["results"]
        assert {i["memory"] for i in items} == {"I am allergic to peanuts", "Noted!"}
        one = c.get(f"/memories/{mid}").json()
        assert one["memory"] == "I am allergic to peanuts" and one["run_id"] == "r1" and len(one["hash"]) == 32
        assert one["metadata"] == {"src": "chat", "role": "user"}
        hits = c.post("/search", json={"query": "peanuts", "user_id": "alice"}).json()["results"]
        assert hits[0]["id"] == mid and isinstance(hits[0]["score"], float)
        assert c.put(f"/memories/{mid}", json={"text": "I am allergic to peanuts and shellfish"}).json() == \
            {"message": "Memory updated successfully!"}
        hist = c.get(f"/memories/{mid}/history").json()
        assert [h["event"] for h in hist] == ["ADD", "UPDATE"]
        assert hist[1]["new_memory"] == "I am allergic to peanuts and shellfish"
        assert c.delete(f"/memories/{mid}").json() == {"message": "Memory deleted successfully"}
        assert c.delete("/memories").status_code == 400  # Mem0 wants an identifier (400, as Mem0)
        assert c.delete("/memories", params={"user_id": "alice"}).json() == {"message": "All relevant memories deleted"}
        assert c.get("/memories", params={"user_id": "alice"}).json() == {"results": []}


# ------------------------------------------------------------------------------------------------------------
# Isolation: what a key may reach
# ------------------------------------------------------------------------------------------------------------
def test_alice_key_never_reaches_bob(svc, admin_ui):
    alice_key = issue_key(admin_ui, "alice", user="alice")
    bob_key = issue_key(admin_ui, "bob", user="bob")
    with api(svc, bob_key) as bob:
        bob_id = bob.post("/v1/memories", json={"content": "Bob's bank PIN is 1234"}).json()["id"]
    with api(svc, alice_key) as c:
        c.post("/v1/memories", json={"content": "Alice likes tea"})
        # by id, on every route that takes one
        assert c.get(f"/v1/memories/{bob_id}").status_code == 404
        assert c.patch(f"/v1/memories/{bob_id}", json={"content": "hacked"}).status_code == 404
        assert c.post(f"/v1/memories/{bob_id}/edit", json={"old": "1234", "new": "0000"}).status_code == 404
        assert c.delete(f"/v1/memories/{bob_id}").status_code == 404
        assert c.get(f"/v1/memories/{bob_id}/history").json() == {"events": []}
        assert c.get(f"/memories/{bob_id}").status_code == 404
        assert c.put(f"/memories/{bob_id}", json={"text": "hacked"}).status_code == 404
        assert c.delete(f"/memories/{bob_id}").status_code == 404
        assert c.get(f"/memories/{bob_id}/history").status_code == 404
        # by body field
        for path, body in [("/v1/memories", {"content": "x", "user_id": "bob"}),
                           ("/v1/search", {"query": "PIN", "user_id": "bob"}),
                           ("/v1/memories/batch", {"items": ["x"], "user_id": "bob"}),
                           ("/v1/memories/batch", {"items": [{"content": "x", "user_id": "bob"}]}),
                           ("/v1/memories/delete", {"confirm": True, "user_id": "bob"}),
                           ("/memories", {"messages": [{"role": "user", "content": "x"}], "user_id": "bob"}),
                           ("/search", {"query": "PIN", "user_id": "bob"})]:
            r = c.post(path, json=body)
            assert r.status_code == 403, (path, r.text)
            assert err(r)["code"] == "forbidden"
        # by query parameter and header
        for path in ["/v1/memories", "/v1/stats", "/v1/export", "/memories"]:
            assert c.get(path, params={"user_id": "bob"}).status_code == 403, path
            assert c.get(path, headers={"X-Pgmem-User": "bob"}).status_code == 403, path
        assert c.delete("/memories", params={"user_id": "bob"}).status_code == 403
        # and nothing of bob's came back anywhere
        assert "PIN" not in c.post("/v1/search", json={"query": "bank PIN 1234"}).text
        assert "PIN" not in c.post("/search", json={"query": "bank PIN 1234", "user_id": "alice"}).text
        assert "PIN" not in c.get("/v1/export").text
    with api(svc, bob_key) as bob:
        assert bob.get(f"/v1/memories/{bob_id}").json()["content"] == "Bob's bank PIN is 1234"


def test_admin_key_acts_only_for_the_users_it_names(svc, admin_ui, admin):
    key = issue_key(admin_ui, "gateway", kind="admin", users="alice, carol")
    with api(svc, key) as c:
        r = c.post("/v1/memories", json={"content": "x"})
        assert r.status_code == 422 and err(r)["field"] == "user_id"  # it must name one
        assert c.post("/v1/memories", json={"content": "Carol likes chess", "user_id": "carol"}).status_code == 201
        assert c.post("/v1/memories", json={"content": "Alice likes tea"}, headers={"X-Pgmem-User": "alice"}).status_code == 201
        assert c.post("/v1/memories", json={"content": "x", "user_id": "bob"}).status_code == 403
        assert c.get("/v1/memories", params={"user_id": "bob"}).status_code == 403
        r = c.post("/v1/memories", json={"content": "x", "user_id": "alice"}, headers={"X-Pgmem-User": "carol"})
        assert r.status_code == 422  # two different users named
        r = c.post("/v1/memories/batch", json={"items": [{"content": "a1", "user_id": "alice"},
                                                         {"content": "c1", "user_id": "carol"}], "user_id": "alice"})
        assert r.status_code == 201
        r = c.post("/v1/memories/batch", json={"items": [{"content": "b1", "user_id": "bob"}], "user_id": "alice"})
        assert r.status_code == 403
        carol = c.get("/v1/memories", params={"user_id": "carol"}).json()["items"]
        assert {m["content"] for m in carol} == {"Carol likes chess", "c1"}
    assert admin.execute("SELECT count(*) FROM pgmem.memories WHERE user_id = 'bob'").fetchone()[0] == 0


def test_agent_bound_and_read_only_keys(svc, admin_ui):
    planner = issue_key(admin_ui, "planner", user="alice", agent="planner")
    reader = issue_key(admin_ui, "reader", user="alice", scope="read")
    with api(svc, planner) as c:
        r = c.post("/v1/memories", json={"content": "Alice flies Tuesday"})
        assert c.get(f"/v1/memories/{r.json()['id']}").json()["agent_id"] == "planner"
        assert c.post("/v1/memories", json={"content": "x", "agent_id": "other"}).status_code == 403
        assert c.post("/v1/memories/batch", json={"items": [{"content": "x", "agent_id": "other"}]}).status_code == 403
        assert c.post("/memories", json={"messages": [{"role": "user", "content": "y"}], "agent_id": "other"}).status_code == 403
    with api(svc, reader) as c:
        assert len(c.get("/v1/memories").json()["items"]) == 1
        r = c.post("/v1/memories", json={"content": "x"})
        assert r.status_code == 403 and err(r)["type"] == "PermissionDenied"
        assert c.delete("/memories", params={"user_id": "alice"}).status_code == 403


def test_erase_through_the_api_needs_an_admin_key_and_exact_confirmation(svc, admin_ui, admin):
    user_key = issue_key(admin_ui, "alice", user="alice")
    gw = issue_key(admin_ui, "gw", kind="admin", users="alice")
    with api(svc, user_key) as c:
        c.post("/v1/memories", json={"content": "Alice likes tea"})
        assert c.post("/v1/users/alice/erase", json={"confirm": "alice"}).status_code == 403
    with api(svc, gw) as c:
        assert c.post("/v1/users/bob/erase", json={"confirm": "bob"}).status_code == 403
        assert c.post("/v1/users/alice/erase", json={"confirm": "Alice"}).status_code == 422
        r = c.post("/v1/users/alice/erase", json={"confirm": "alice"})
        assert r.status_code == 200, r.text
        erased = r.json()["erased"]
        # erase_user covers every pgmem table with a user_id: the user's keys and request-log rows go too.
        assert erased["memories"] == 1 and erased["service_keys"] == 1 and erased["service_audit"] >= 1
    assert admin.execute("SELECT count(*) FROM pgmem.memories WHERE user_id = 'alice'").fetchone()[0] == 0
    time.sleep(0.5)  # the request log's next flushes
    assert admin.execute("SELECT count(*) FROM pgmem.service_audit WHERE user_id = 'alice'").fetchone()[0] == 0
    assert admin.execute("SELECT count(*) FROM pgmem.service_audit WHERE route = '/v1/users/{user_id}/erase'"
                         " AND status = 200 AND user_id IS NULL").fetchone()[0] == 1
    with api(svc, user_key) as c:
        assert c.get("/v1/memories").status_code == 401  # its key was revoked with the user


# ------------------------------------------------------------------------------------------------------------
# Browser origin, Host header, CSRF
# ------------------------------------------------------------------------------------------------------------
def test_cors_allows_exactly_the_configured_origin(dsn):
    pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    with running_service(dsn, cors_origins=("https://app.example.com",)) as s, api(s, None) as c:
        ok = c.options("/v1/search", headers={"Origin": "https://app.example.com", **pre})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "access-control-allow-credentials" not in ok.headers
        bad = c.options("/v1/search", headers={"Origin": "https://evil.example.com", **pre})
        assert bad.status_code >= 400 and "access-control-allow-origin" not in bad.headers
        plain = c.get("/healthz", headers={"Origin": "https://evil.example.com"})
        assert "access-control-allow-origin" not in plain.headers
    with running_service(dsn) as s, api(s, None) as c:  # the default: no origin at all
        r = c.options("/v1/search", headers={"Origin": "https://app.example.com", **pre})
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
        assert "access-control-allow-origin" not in c.get("/healthz", headers={"Origin": "https://app.example.com"}).headers


def test_a_wildcard_origin_is_refused_at_start(dsn):
    from pgmem.errors import ValidationError
    from pgmem.service import Settings, create_app

    with pytest.raises(ValidationError, match="exact origin"):
        create_app(Settings(dsn=dsn, cors_origins=("*",)))


def test_host_header_is_checked(svc):
    with api(svc, None) as c:
        r = c.get("/healthz", headers={"Host": "evil.example.com"})
        assert r.status_code == 400 and err(r)["field"] == "host"
        assert c.get("/healthz", headers={"Host": "localhost:1234"}).status_code == 200


def test_csrf_on_dashboard_forms(svc, admin_ui, admin):
    page = admin_ui.get("/ui/keys")
    good = admin_ui.csrf(page.text)
    assert admin_ui.post("/ui/keys", {"label": "x", "user": "alice"}).status_code == 403
    assert admin_ui.post("/ui/keys", {"label": "x", "user": "alice", "csrf": "0" * 64}).status_code == 403
    r = admin_ui.post("/ui/keys", {"label": "x", "user": "alice", "csrf": good},
                      headers={"Origin": "https://evil.example.com"})
    assert r.status_code == 403
    assert admin.execute("SELECT count(*) FROM pgmem.service_keys").fetchone()[0] == 0
    assert admin_ui.post("/ui/keys", {"label": "x", "user": "alice", "csrf": good}).status_code == 200
    assert admin.execute("SELECT count(*) FROM pgmem.service_keys").fetchone()[0] == 1


# ------------------------------------------------------------------------------------------------------------
# Errors and limits
# ------------------------------------------------------------------------------------------------------------
def test_bad_input_gets_json_errors_never_a_500(svc, admin_ui):
    key = issue_key(admin_ui, user="alice")
    with api(svc, key) as c:
        r = c.post("/v1/memories", content=b'{"content": ', headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and err(r)["code"] == "bad_json"
        r = c.post("/v1/memories", json={"content": 12})
        assert r.status_code == 422 and err(r)["field"] == "content"
        assert c.post("/v1/memories", json={"content": "x", "colour": "red"}).status_code == 422
        assert err(c.post("/v1/memories", json={"content": "a\u0000b"}))["code"] == "PGM08"
        assert c.post("/v1/memories", json={"content": ""}).status_code == 422
        assert c.get("/v1/memories/not-a-uuid").status_code == 422
        assert c.get("/v1/memories", params={"filter": "{nope"}).status_code == 422
        r = c.get("/v1/memories", params={"filter": json.dumps({"a": {"regex": "x"}})})
        assert r.status_code == 422 and err(r)["code"] == "PGM07"
        assert c.get("/v1/memories", params={"cursor": "garbage"}).status_code == 422
        assert c.post("/v1/search", json={"query": "x", "k": 0}).status_code == 422
        assert c.post("/v1/search", json={"embedding": [1.0, 2.0]}).status_code == 422  # 2 of 64 dimensions
        deep = b'{"content": "deep", "metadata": ' + b'{"a": ' * 50000 + b'1' + b'}' * 50001
        r = c.post("/v1/memories", content=deep, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and err(r)["code"] == "bad_json"  # RecursionError in the parser, never a 500
        r = c.post("/v1/memories", json=[1, 2])
        assert r.status_code == 422
        assert err(c.get("/v1/nothing-here"))["code"] == "no_such_route"
        assert c.put("/v1/stats").status_code == 405
        mid = c.post("/v1/memories", json={"content": "one"}).json()["id"]
        c.post("/v1/memories", json={"content": "two"})
        r = c.patch(f"/v1/memories/{mid}", json={"content": "two"})
        assert r.status_code == 409 and err(r)["type"] == "DuplicateMemory"
        r = c.patch(f"/v1/memories/{mid}", json={"metadata": {"x": 1}, "expected_version": 7})
        assert r.status_code == 409 and err(r)["code"] == "PGM04"


def test_request_size_limit(dsn):
    with running_service(dsn, max_body_bytes=4096) as s:
        b = bootstrap(s)
        key = issue_key(b, user="alice")
        with api(s, key) as c:
            r = c.post("/v1/memories", json={"content": "x" * 5000})
            assert r.status_code == 413 and err(r)["code"] == "payload_too_large"

            def chunks():
                yield b'{"content": "'
                for _ in range(10):
                    yield b"y" * 1000
                yield b'"}'

            r = c.post("/v1/memories", content=chunks(), headers={"Content-Type": "application/json"})
            assert r.status_code == 413
            assert c.get("/v1/memories").json()["items"] == []  # nothing was written


def test_rate_limit_per_key(dsn):
    with running_service(dsn, rate_limit=1.0, rate_burst=3) as s:
        b = bootstrap(s)
        one, two = issue_key(b, user="alice"), issue_key(b, user="alice")
        with api(s, one) as c, api(s, two) as d:
            codes = [c.get("/v1/whoami").status_code for _ in range(5)]
            assert codes[:3] == [200, 200, 200] and codes[-1] == 429
            r = c.get("/v1/whoami")
            assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1 and err(r)["code"] == "rate_limited"
            assert d.get("/v1/whoami").status_code == 200  # another key has its own bucket


# ------------------------------------------------------------------------------------------------------------
# The request log and the database's view of the service
# ------------------------------------------------------------------------------------------------------------
def test_every_request_is_logged_without_bodies(svc, admin_ui, admin):
    key = issue_key(admin_ui, user="alice")
    prefix = key[:12]
    with api(svc, key) as c:
        c.post("/v1/memories", json={"content": "secret recipe for tea"})
        c.get("/v1/memories/00000000-0000-0000-0000-000000000000")
        c.get("/v1/memories", headers={"Authorization": "Bearer nope"})
    deadline = time.monotonic() + 10
    rows: list = []
    while time.monotonic() < deadline:
        rows = admin.execute("SELECT method, route, status, key_prefix, user_id, account, latency_ms "
                             "FROM pgmem.service_audit ORDER BY audit_id").fetchall()
        if len(rows) >= 7:
            break
        time.sleep(0.1)
    by_route = {(r[0], r[1], r[2]): r for r in rows}
    assert ("POST", "/v1/memories", 201) in by_route
    assert by_route[("POST", "/v1/memories", 201)][3:6] == (prefix, "alice", None)
    assert ("GET", "/v1/memories/{memory_id}", 404) in by_route
    assert ("GET", "/v1/memories", 401) in by_route
    assert ("POST", "/ui/keys", 200) in by_route and by_route[("POST", "/ui/keys", 200)][5] == "admin"
    assert all(r[6] >= 0 for r in rows)
    dump = json.dumps([[str(x) for x in r] for r in admin.execute("SELECT * FROM pgmem.service_audit")])
    assert "secret recipe" not in dump and key not in dump
    last_used = admin.execute("SELECT last_used_at FROM pgmem.service_keys").fetchone()[0]
    assert last_used is not None


def test_gateway_has_no_privilege_on_service_tables(admin):
    tables = [r[0] for r in admin.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'pgmem'::regnamespace "
        "AND c.relkind = 'r' AND c.relname LIKE 'service\\_%'")]
    assert len(tables) == 7
    for role in ("pgmem_gateway", "pgmem_agent"):
        for t in tables:
            for priv in ("SELECT", "INSERT", "UPDATE", "DELETE"):
                assert not admin.execute("SELECT has_table_privilege(%s, %s, %s)", (role, t, priv)).fetchone()[0], (role, t)
    funcs = [r[0] for r in admin.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace "
        "AND p.proname LIKE 'service\\_%'")]
    assert len(funcs) >= 20
    for f in funcs:
        assert admin.execute("SELECT has_function_privilege('pgmem_gateway', %s, 'EXECUTE')", (f,)).fetchone()[0]
        assert not admin.execute("SELECT has_function_privilege('pgmem_agent', %s, 'EXECUTE')", (f,)).fetchone()[0], f


def test_openapi_docs_are_served(svc):
    with api(svc, None) as c:
        spec = c.get("/openapi.json").json()
        assert "/v1/search" in spec["paths"] and "/memories" in spec["paths"]
        assert c.get("/docs").status_code == 200


def test_cli_serve_defaults_are_the_safe_ones(monkeypatch):
    import pgmem.service
    from typer.testing import CliRunner

    from pgmem.cli import app

    seen = []
    monkeypatch.setattr(pgmem.service, "serve", seen.append)
    monkeypatch.setenv("PGMEM_DSN", "postgresql://svc@db/app")
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 0, result.output
    s = seen[0]
    assert (s.host, s.port, s.dsn, s.cors_origins, s.secure_cookies) == \
        ("127.0.0.1", 8080, "postgresql://svc@db/app", (), True)
    result = CliRunner().invoke(app, ["serve", "--cors-origin", "https://a.example", "--cors-origin", "https://b.example",
                                      "--host", "0.0.0.0", "--rate-limit", "5"])
    assert seen[1].cors_origins == ("https://a.example", "https://b.example") and seen[1].rate_limit == 5


def test_cli_serve_refuses_a_wildcard_origin_without_a_traceback(monkeypatch):
    from typer.testing import CliRunner

    from pgmem.cli import app

    result = CliRunner().invoke(app, ["serve", "--dsn", "postgresql://x@/nowhere", "--cors-origin", "*"])
    assert result.exit_code == 1 and "error: --cors-origin takes an exact origin" in result.output
    assert "Traceback" not in result.output


def test_a_login_that_is_no_gateway_is_refused_at_once_with_the_fix(admin, login_role):
    import asyncio

    from pgmem.errors import PermissionDenied
    from pgmem.service.app import preflight

    from conftest import dsn_for

    plain = login_role()
    t0 = time.monotonic()
    with pytest.raises(PermissionDenied, match="cannot act as pgmem_gateway") as caught:
        asyncio.run(preflight(dsn_for(admin.info.dbname, user=plain)))
    assert time.monotonic() - t0 < 10 and f'GRANT pgmem_gateway TO "{plain}"' in caught.value.hint
    gateway = login_role("pgmem_gateway")
    assert asyncio.run(preflight(dsn_for(admin.info.dbname, user=gateway))).endswith(admin.info.dbname + "?host=" +
                                                                                  dsn_for("x").split("?host=")[1])


def test_readyz_is_503_when_a_migration_is_missing(svc):
    svc.service._shipped = svc.service.shipped_migrations() + [("9999.pgmem-future", "f" * 64)]
    with api(svc, None) as c:
        r = c.get("/readyz")
    assert r.status_code == 503 and r.headers["retry-after"] == "30"  # an operator's job: not soon
    assert r.json()["ready"] is False and r.json()["checks"]["migrations"] == {"ok": False, "pending": ["9999.pgmem-future"]}


def test_dashboard_errors_are_pages_not_json(svc, admin_ui):
    r = admin_ui.get("/ui/memories/not-a-uuid?user=alice")
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/html")
    assert 'id="error-message"' in r.text and "Traceback" not in r.text
    r = admin_ui.get("/ui/nothing-here")
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    r = admin_ui.get(f"/ui/memories/{uuid.uuid4()}?user=alice")
    assert r.status_code == 404 and "not found" in r.text
    r = admin_ui.get("/ui/memories?user=pgmem:health")
    assert r.status_code == 422 and "reserved" in r.text


def test_the_dashboard_has_no_javascript():
    from pathlib import Path

    import pgmem.service

    templates = Path(pgmem.service.__file__).with_name("templates")
    for page in templates.glob("*.html"):
        text = page.read_text(encoding="utf-8").lower()
        assert "<script" not in text and "javascript:" not in text and " on" + "click=" not in text, page.name


def test_dashboard_pages_forbid_scripts_framing_and_referrers(svc):
    r = Browser(svc.url).get(svc.setup_link()[len(svc.url):])
    assert "script-src" not in r.headers["content-security-policy"]
    assert "default-src 'none'" in r.headers["content-security-policy"]
    assert r.headers["x-frame-options"] == "DENY" and r.headers["referrer-policy"] == "no-referrer"


# Found by an attack review and a new user's sweep (2 December 2026)
def test_a_key_bound_to_an_agent_deletes_only_that_agents_memories(svc, admin_ui):
    """delete_all named another agent and deleted its memories, although a bound key's writes naming another
    agent are refused; without an agent it deleted every agent's."""
    planner = issue_key(admin_ui, "planner2", user="carol", agent="planner")
    other = issue_key(admin_ui, "other", user="carol", agent="scout")
    with api(svc, other) as c:
        assert c.post("/v1/memories", json={"content": "scout saw the river"}).status_code == 201
    with api(svc, planner) as c:
        assert c.post("/v1/memories", json={"content": "planner booked the hotel"}).status_code == 201
        assert c.post("/v1/memories/delete", json={"agent_id": "scout"}).status_code == 403
        assert c.delete("/memories", params={"agent_id": "scout"}).status_code == 403
        r = c.post("/v1/memories/delete", json={"confirm": True})
        assert r.status_code == 200 and r.json() == {"deleted": 1}
        assert [m["content"] for m in c.get("/v1/memories").json()["items"]] == ["scout saw the river"]


def test_loose_values_are_refused_where_they_would_be_guessed(svc, admin_ui):
    key = issue_key(admin_ui, "loose", user="dora")
    with api(svc, key) as c:
        c.post("/v1/memories", json={"content": "kept"})
        r = c.post("/v1/memories/delete", json={"confirm": "yes"})  # deleting everything needs true
        assert r.status_code == 422 and err(r)["field"] == "confirm"
        assert len(c.get("/v1/memories").json()["items"]) == 1
        for limit in (0, 5000):  # k is refused outside 1..1000, never clamped (docs/limits.md)
            assert c.post("/search", json={"query": "kept", "user_id": "dora", "limit": limit}).status_code == 422
        deep = "[" * 3000 + "]" * 3000  # nesting that exhausts the parser: 400, as in a body
        r = c.get("/v1/memories", params={"filter": deep})
        assert r.status_code == 400 and err(r)["code"] == "bad_json"


def _login(b: Browser, password: str, client: str | None = None) -> int:
    page = b.get("/ui/login")
    headers = {"X-Forwarded-For": client} if client else {}
    return b.post("/ui/login", {"username": "admin", "password": password, "csrf": b.csrf(page.text)},
                  headers=headers).status_code


@pytest.mark.parametrize("proxy", [False, True])
def test_nobody_elsewhere_can_lock_the_administrator_out(dsn, proxy):
    """The login limit spent a token per attempt per client address: eleven wrong passwords from anywhere (behind
    a proxy every client has the proxy's address) locked the administrator out, correct password included. Only
    failures count now, and behind a proxy named by forwarded_allow_ips the address is the client's."""
    with running_service(dsn, **({"forwarded_allow_ips": "127.0.0.1"} if proxy else {})) as svc:
        admin_browser = bootstrap(svc)
        for _ in range(12):  # an administrator's own logins cost nothing
            assert _login(Browser(svc.url), PASSWORD, "198.51.100.7" if proxy else None) in (200, 303)
        attacker = Browser(svc.url)
        codes = [_login(attacker, "wrong password!", "203.0.113.9" if proxy else None) for _ in range(11)]
        assert codes[:10] == [401] * 10 and codes[10] == 429
        admin_code = _login(Browser(svc.url), PASSWORD, "198.51.100.7" if proxy else None)
        # With the proxy named, the administrator's address is its own; without, it is the attacker's too.
        assert admin_code == (303 if proxy else 429)
        assert admin_browser is not None


def test_a_user_id_in_the_header_is_read_as_utf8(svc, admin_ui):
    """X-Pgmem-User: ユーザー was 403 ('may not act for the user'): Starlette decodes header bytes as Latin-1."""
    key = issue_key(admin_ui, "unicode", kind="admin", users="ユーザー")
    with api(svc, key) as c:
        r = c.post("/v1/memories", json={"content": "named in a header"}, headers={"X-Pgmem-User": "ユーザー".encode()})
        assert r.status_code == 201, r.text
        items = c.get("/v1/memories", params={"user_id": "ユーザー"}).json()["items"]
        assert [m["content"] for m in items] == ["named in a header"]


def test_the_login_limit_is_spent_before_the_password_is_checked():
    """Each attempt takes its token first, so concurrent guesses cannot all pass one remaining token; a
    successful login gives its token back."""
    from pgmem.service.app import RateLimiter
    from pgmem.service.errors import RateLimited

    limiter = RateLimiter(1e-9, 2)
    limiter.take("a")
    limiter.take("a")  # two attempts in flight at once: the bucket is empty before either is checked
    with pytest.raises(RateLimited):
        limiter.take("a")
    limiter.give_back("a")  # one of them succeeded
    limiter.take("a")
    with pytest.raises(RateLimited):
        limiter.take("a")


def test_an_unknown_query_parameter_is_refused_not_ignored(svc, admin_ui):
    """`?agent=scout` (for `agent_id`) listed every agent's memories: FastAPI ignores query parameters a route does
    not declare, so a misspelt filter silently matched everything. Bodies already refuse unknown fields."""
    key = issue_key(admin_ui, "typo", user="erin")
    with api(svc, key) as c:
        for agent in ("scout", "planner"):
            assert c.post("/v1/memories", json={"content": f"{agent} note", "agent_id": agent}).status_code == 201
        assert len(c.get("/v1/memories", params={"agent_id": "scout"}).json()["items"]) == 1
        r = c.get("/v1/memories", params={"agent": "scout"})
        assert r.status_code == 422, r.text
        e = err(r)
        assert e["field"] == "agent" and "agent_id" in e["message"], e
        # every API route, Mem0's too; a declared parameter still works, and so do the path's own
        assert c.get("/v1/stats", params={"all_spaces": "true"}).status_code == 200
        assert c.get("/v1/stats", params={"all_space": "true"}).status_code == 422
        assert c.get("/memories", params={"user_id": "erin", "agentid": "x"}).status_code == 422
        assert c.get("/memories", params={"user_id": "erin"}).status_code == 200
        mid = c.get("/v1/memories").json()["items"][0]["id"]
        assert c.get(f"/v1/memories/{mid}").status_code == 200
        assert c.get(f"/v1/memories/{mid}", params={"version": "2"}).status_code == 422
        assert c.delete(f"/v1/memories/{mid}", params={"really": "1"}).status_code == 422
        assert len(c.get("/v1/memories").json()["items"]) == 2  # the refused delete deleted nothing


def test_consolidate_marks_only_the_turns_the_client_read(svc, admin_ui):
    """The summary named no turns, so /consolidate marked every turn pending at write time: a turn appended
    after the client's GET /pending was marked consolidated and linked as a source, its fact never stored."""
    key = issue_key(admin_ui, user="carol")
    with api(svc, key) as c:
        for text in ("I live in Paris", "I work as a baker"):
            assert c.post("/v1/sessions/s1/turns", json={"role": "user", "content": text}).status_code == 201
        seen = c.get("/v1/sessions/s1/pending").json()["turns"]
        assert c.post("/v1/sessions/s1/turns", json={"role": "user", "content": "My daughter is allergic to peanuts"}
                      ).status_code == 201
        r = c.post("/v1/sessions/s1/consolidate", json={"memories": ["Carol lives in Paris and is a baker"],
                                                         "through_turn_id": seen[-1]["turn_id"]})
        assert r.status_code == 200, r.text
        mid = r.json()["results"][0]["id"]
        assert [t["content"] for t in c.get("/v1/sessions/s1/pending").json()["turns"]] == [
            "My daughter is allergic to peanuts"]
        assert len(c.get(f"/v1/memories/{mid}/sources").json()["sources"]) == 2
        # the same summary again (a retry): those turns are no longer pending
        again = c.post("/v1/sessions/s1/consolidate", json={"memories": ["Carol lives in Paris and is a baker"],
                                                             "through_turn_id": seen[-1]["turn_id"]})
        assert again.status_code == 409 and "not pending" in again.text
        # nothing pending in another session, a summary anyway: refused, nothing stored
        before = c.get("/v1/memories").json()["items"]
        nothing = c.post("/v1/sessions/empty/consolidate", json={"memories": [{"bogus": 1}], "through_turn_id": 1})
        assert nothing.status_code == 409
        assert c.post("/v1/sessions/s1/consolidate", json={"memories": ["x"]}).status_code == 422  # no through_turn_id
        assert c.get("/v1/memories").json()["items"] == before


def test_the_entities_page_shows_each_users_key_count(svc, admin_ui):
    """{{ r.keys }} resolved to the row's dict.keys method: the page showed '<built-in method keys ...>'."""
    key = issue_key(admin_ui, user="dora")
    with api(svc, key) as c:
        assert c.post("/v1/memories", json={"content": "Dora grows tomatoes"}).status_code == 201
    page = admin_ui.get("/ui/entities")
    assert page.status_code == 200
    assert "built-in method" not in page.text
    row = re.search(r"<tr[^>]*>(?:(?!</tr>).)*dora(?:(?!</tr>).)*</tr>", page.text, re.S).group(0)
    cells = re.findall(r'<td class="num">([^<]*)</td>', row)
    assert cells[2].strip() == "1", cells  # memories, agents, active keys


def test_mem0_routes_refuse_fields_they_would_ignore(svc, admin_ui):
    """Mem0's request models were lenient: `filter` (for `filters`) searched everything, PUT dropped a
    misspelt `metadta` or a `metadata` of the wrong type, a blank message vanished from the results."""
    key = issue_key(admin_ui, user="erin")
    with api(svc, key) as c:
        r = c.post("/memories", json={"messages": [{"role": "user", "content": "Erin plays the cello"}], "user_id": "erin"})
        assert r.status_code == 200, r.text
        mid = r.json()["results"][0]["id"]
        bad = [("post", "/search", {"query": "cello", "user_id": "erin", "filter": {"n": 1}}, "filter"),
               ("post", "/memories", {"messages": [{"role": "user", "content": "x"}], "user_id": "erin", "bogus": 1}, "bogus"),
               ("post", "/memories", {"messages": [{"role": "user", "content": "x", "extra": 1}], "user_id": "erin"}, "extra"),
               ("post", "/memories", {"messages": [{"role": "user", "content": "real"}, {"role": "user", "content": "  "}],
                                      "user_id": "erin"}, "messages.1.content"),
               ("put", f"/memories/{mid}", {"text": "v2", "metadta": {"a": 1}}, "metadta"),
               ("put", f"/memories/{mid}", {"text": "v2", "metadata": "oops"}, "metadata"),
               ("put", f"/memories/{mid}", {"text": "v2", "memory": "v3"}, "text")]
        for method, path, body, field in bad:
            r = getattr(c, method)(path, json=body)
            assert r.status_code == 422, (path, body, r.status_code, r.text)
            assert field in r.text, (field, r.text)
        assert [m["memory"] for m in c.get("/memories", params={"user_id": "erin"}).json()["results"]] == [
            "Erin plays the cello"]
        assert c.put(f"/memories/{mid}", json={"text": "Erin plays the viola", "metadata": {"a": 1}}).status_code == 200
        got = c.get(f"/memories/{mid}").json()
        assert got["memory"] == "Erin plays the viola" and got["metadata"]["a"] == 1


def test_values_of_another_json_type_are_refused_not_coerced(svc, admin_ui):
    """`"k": true` searched with k = 1, `"replace_metadata": "yes"` replaced every key, a repeated query
    parameter kept its last value."""
    key = issue_key(admin_ui, user="fay")
    with api(svc, key) as c:
        mid = c.post("/v1/memories", json={"content": "Fay keeps bees", "metadata": {"a": 1, "b": 2}}).json()["id"]
        for path, body in (("/v1/search", {"query": "bees", "k": True}), ("/v1/search", {"query": "bees", "k": "2"}),
                           ("/v1/search", {"query": "bees", "k": 2.0})):
            assert c.post(path, json=body).status_code == 422, body
        for body in ({"metadata": {"z": 1}, "replace_metadata": "yes"}, {"metadata": {"z": 1}, "replace_metadata": 0},
                     {"metadata": {"z": 1}, "expected_version": True}):
            assert c.patch(f"/v1/memories/{mid}", json=body).status_code == 422, body
        assert c.get(f"/v1/memories/{mid}").json()["metadata"] == {"a": 1, "b": 2}
        r = c.get("/v1/memories", params=[("agent_id", "a"), ("agent_id", "b")])
        assert r.status_code == 422 and "more than once" in r.text
        assert c.post("/v1/search", json={"query": "bees", "k": 2}).status_code == 200
        # times stay ISO strings (strict mode alone refused every one of them)
        r = c.post("/v1/memories", json={"content": "Fay's hive inspection", "expires_at": "2999-01-01T00:00:00Z"})
        assert r.status_code == 201, r.text
        assert c.post("/v1/search", json={"query": "hive", "created_after": "2000-01-01T00:00:00+00:00"}).status_code == 200
        naive = c.post("/v1/search", json={"query": "hive", "created_after": "2000-01-01T00:00:00"})
        assert naive.status_code == 422 and "created_after" in naive.text
        r = c.post(f"/v1/memories/{mid}/invalidate", json={"valid_to": "2999-01-01T00:00:00Z"})
        assert "datetime_type" not in r.text and "valid datetime" not in r.text, r.text  # read as a time
