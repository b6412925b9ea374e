"""The HTTP service (``pgmem serve --dsn`` at the coordinator) on the cluster, for two users with a key each:
writes, reads and searches of each reach only that user's rows (issue #34). Needs PGMEM_CITUS_DSN."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/support, as tests/conftest.py does

from support.service_helpers import PASSWORD, Browser, api, bootstrap, issue_key, running_service  # noqa: E402

from .test_cluster import EMB, SPACE  # noqa: E402


@pytest.fixture(scope="module")
def svc(cluster):
    with running_service(cluster, embedder=EMB, space=SPACE) as s:
        yield s


def admin_browser(svc) -> Browser:
    """The dashboard's administrator: made through the setup link on a new cluster, else logged in (a cluster
    these tests ran on before keeps the account they made)."""
    try:
        return bootstrap(svc, "citus-admin")
    except AssertionError:
        b = Browser(svc.url)
        page = b.get("/ui/login")
        r = b.post("/ui/login", {"username": "citus-admin", "password": PASSWORD, "csrf": b.csrf(page.text)})
        assert r.status_code == 303, r.text
        return b


def test_the_service_for_two_users(svc, run_id):
    ui = admin_browser(svc)
    users = {u: issue_key(ui, f"{u} app", user=u) for u in (f"{run_id}-alice", f"{run_id}-bob")}
    ids = {}
    for user, key in users.items():
        with api(svc, key) as c:
            assert c.get("/v1/whoami").json()["user_id"] == user
            r = c.post("/v1/memories", json={"content": f"{user} keeps bees. The hives are by the river."})
            assert r.status_code in (200, 201), r.text
            ids[user] = r.json()["id"]
            r = c.post("/v1/memories/batch", json={"items": [f"{user} likes tea", f"{user} reads at night"]})
            assert r.status_code in (200, 201), r.text
    for user, key in users.items():
        other = next(u for u in users if u != user)
        with api(svc, key) as c:
            assert c.get(f"/v1/memories/{ids[user]}").json()["content"].startswith(user)
            assert c.get(f"/v1/memories/{ids[other]}").status_code == 404
            items = c.get("/v1/memories", params={"limit": 50}).json()["items"]
            assert len(items) == 3 and {m["user_id"] for m in items} == {user}
            hits = c.post("/v1/search", json={"query": "bees by the river", "k": 3}).json()["results"]
            assert hits[0]["id"] == ids[user] and {h["user_id"] for h in hits} == {user}
